//! Target `virtio_blk`: the block device (`memvisor_devices::virtio::block::Block`) serves one
//! queue notification. Everything it reads comes from the input: the queue's size and ring
//! addresses, and guest RAM, which holds the descriptor table, the available ring, the request
//! headers and the data to write. The requests go to the real disk image, through the device's
//! `PlainRam`.
//!
//! Input, in order:
//! - `cfg: u8`: bits 0-2 give the queue size, 2^(n mod 5) (1 to 16: a longer queue only holds
//!   more of the same chains, and each run would take longer; `virtio_mmio` reaches the
//!   device's 256 through QueueNum); bit 4 serves the requests from a read-only disk;
//! - `next: u16`: the queue's next available and used index (a driver that has run for a
//!   while, so ring indices wrap);
//! - `desc: u16`, `avail: u16`, `used: u16`: the ring addresses (a queue the transport would
//!   refuse, misaligned or outside RAM, ends the run);
//! - the rest: guest RAM from address 0 ([`guest::load`]).
//!
//! After the run the image must have kept its size, and its content unless a write succeeded.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use memvisor_devices::ram::PlainRam;
use memvisor_devices::virtio::block::{Block, BlockMetrics};
use memvisor_devices::virtio::VirtioDevice;
use virtio_queue::QueueT;

use crate::guest;
use crate::Input;

/// What GET_ID answers.
pub const DISK_ID: &str = "fuzz-disk";

/// What a run did: the device's counters and the used buffers it returned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub get_ids: u64,
    pub errors: u64,
    pub used: u16,
}

impl Counts {
    fn of(m: &BlockMetrics) -> Self {
        Counts {
            reads: m.reads.load(Ordering::Relaxed),
            writes: m.writes.load(Ordering::Relaxed),
            flushes: m.flushes.load(Ordering::Relaxed),
            get_ids: m.get_ids.load(Ordering::Relaxed),
            errors: m.errors.load(Ordering::Relaxed),
            used: 0,
        }
    }

    fn since(self, before: Counts) -> Self {
        Counts {
            reads: self.reads - before.reads,
            writes: self.writes - before.writes,
            flushes: self.flushes - before.flushes,
            get_ids: self.get_ids - before.get_ids,
            errors: self.errors - before.errors,
            used: 0,
        }
    }
}

/// The block device on the image, writable or read-only. It keeps nothing from one request to
/// the next but its counters, so each is opened once.
fn device(read_only: bool) -> &'static Mutex<Block> {
    static RW: OnceLock<Mutex<Block>> = OnceLock::new();
    static RO: OnceLock<Mutex<Block>> = OnceLock::new();
    let cell = if read_only { &RO } else { &RW };
    cell.get_or_init(|| {
        let ram = Arc::new(PlainRam::new(guest::mem().clone()));
        let dev = Block::new(guest::image().path(), read_only, DISK_ID, ram, 0)
            .expect("open the disk image");
        Mutex::new(dev)
    })
}

pub fn run(data: &[u8]) -> Counts {
    let _run = guest::exclusive();
    let mut input = Input::new(data);
    let cfg = input.u8();
    let size = 1u16 << ((cfg & 7) % 5);
    let read_only = cfg & 0x10 != 0;
    let next = input.u16();
    let rings = (
        u64::from(input.u16()),
        u64::from(input.u16()),
        u64::from(input.u16()),
    );
    let mut dev = device(read_only)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let mem = guest::load(input.rest());
    let Some(mut queue) = guest::queue(mem, dev.queue_max_sizes()[0], size, rings, next) else {
        return Counts::default();
    };
    let metrics = dev.metrics();
    let before = Counts::of(&metrics);
    dev.process_queue(0, &mut queue, mem);
    let counts = Counts {
        used: queue.next_used().wrapping_sub(next),
        ..Counts::of(&metrics).since(before)
    };
    guest::image().check(counts.writes > 0);
    counts
}
