//! Target `virtio_balloon`: the balloon (`memvisor_devices::virtio::balloon::Balloon`) over
//! `PlainRam` on real guest RAM serves a sequence of queue notifications: inflate and deflate
//! PFN arrays, the statistics buffer and free page reports, all in descriptor chains from the
//! input. Inflated and reported pages are really released (`MADV_DONTNEED`).
//!
//! Input, in order:
//! - `features: u8`: what the driver accepted besides VIRTIO_F_VERSION_1: bit 0 STATS_VQ,
//!   bit 1 DEFLATE_ON_OOM, bit 2 REPORTING (they decide which queue is which);
//! - `target: u16`: the balloon size the host asks for, in pages;
//! - for queues 0 to 3: `size: u8` (2^(n mod 5) descriptors, 1 to 16, as in `virtio_blk`),
//!   `desc: u16`, `avail: u16`, `used: u16` (a queue the transport would refuse is left
//!   unready);
//! - `ops: [u8; 8]`, by `op & 7`: 0-3 a notification of that queue; 4 the VMM asks for
//!   statistics (`on_request`); 5 the driver resets the device and sets it up again (fresh
//!   queues, same features); 6 the host sets the target to `op >> 3` pages; 7 nothing;
//! - the rest: guest RAM from address 0 ([`guest::load`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use memvisor_devices::ram::PlainRam;
use memvisor_devices::virtio::balloon::{Balloon, F_DEFLATE_ON_OOM, F_REPORTING, F_STATS_VQ};
use memvisor_devices::virtio::{VirtioDevice, VIRTIO_F_VERSION_1};
use memvisor_devices::GuestMem;
use virtio_queue::{Queue, QueueT};

use crate::guest;
use crate::Input;

/// What a run did: the device's counters and the used buffers it returned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub inflated: u64,
    pub deflated: u64,
    pub oom_deflated: u64,
    pub reported: u64,
    pub invalid: u64,
    pub stats_updates: u64,
    pub used: u16,
}

/// A queue's set-up as the input gives it.
#[derive(Clone, Copy)]
struct Setup {
    size: u16,
    rings: (u64, u64, u64),
}

fn queues(mem: &GuestMem, dev: &Balloon, setups: &[Setup; 4]) -> Vec<Queue> {
    dev.queue_max_sizes()
        .iter()
        .zip(setups)
        .map(|(&max, s)| {
            guest::queue(mem, max, s.size, s.rings, 0)
                .unwrap_or_else(|| Queue::new(max).expect("device queue sizes are powers of two"))
        })
        .collect()
}

pub fn run(data: &[u8]) -> Counts {
    let _run = guest::exclusive();
    let mut input = Input::new(data);
    let features = input.u8();
    let mut acked = VIRTIO_F_VERSION_1;
    for (bit, f) in [F_STATS_VQ, F_DEFLATE_ON_OOM, F_REPORTING]
        .iter()
        .enumerate()
    {
        if features & (1 << bit) != 0 {
            acked |= f;
        }
    }
    let target = input.u16();
    let setups = [(); 4].map(|()| Setup {
        size: 1u16 << (input.u8() % 5),
        rings: (
            u64::from(input.u16()),
            u64::from(input.u16()),
            u64::from(input.u16()),
        ),
    });
    let mut ops = [7u8; 8];
    let given = input.bytes(ops.len());
    ops[..given.len()].copy_from_slice(given);
    let mem = guest::load(input.rest());

    let mut dev = Balloon::new(Arc::new(PlainRam::new(mem.clone())));
    let state = dev.state();
    state
        .target_pages
        .store(u32::from(target), Ordering::SeqCst);
    dev.activate(acked);
    let mut qs = queues(mem, &dev, &setups);
    let mut used = 0u16;
    for op in ops {
        match op & 7 {
            i @ 0..=3 => {
                let q = &mut qs[usize::from(i)];
                if q.ready() {
                    dev.process_queue(usize::from(i), q, mem);
                }
            }
            4 => {
                dev.on_request(&mut qs, mem);
            }
            5 => {
                used =
                    used.wrapping_add(qs.iter().map(QueueT::next_used).fold(0, u16::wrapping_add));
                dev.reset();
                qs = queues(mem, &dev, &setups);
                dev.activate(acked);
            }
            6 => state
                .target_pages
                .store(u32::from(op >> 3), Ordering::SeqCst),
            _ => {}
        }
    }
    let m = &state.metrics;
    Counts {
        inflated: m.inflated_pages.load(Ordering::Relaxed),
        deflated: m.deflated_pages.load(Ordering::Relaxed),
        oom_deflated: m.oom_deflated_pages.load(Ordering::Relaxed),
        reported: m.reported_pages.load(Ordering::Relaxed),
        invalid: m.invalid_pfns.load(Ordering::Relaxed),
        stats_updates: m.stats_updates.load(Ordering::Relaxed),
        used: used.wrapping_add(qs.iter().map(QueueT::next_used).fold(0, u16::wrapping_add)),
    }
}
