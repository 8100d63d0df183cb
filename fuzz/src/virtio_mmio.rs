//! Target `virtio_mmio`: a guest's MMIO accesses to a virtio-mmio slot, as a vCPU's exits
//! deliver them: through the MMIO [`Bus`] to the real transport (`MmioTransport`) holding a
//! real virtio-blk device on the disk image or a real balloon, both over `PlainRam`. An empty
//! slot sits right after it, as in a VM. The transport interrupts through a real eventfd (its
//! irqfd in a VM); no `IoEvents` is attached, so QueueNotify writes take the synchronous path
//! of an MMIO exit (the device thread's path ends in the same code).
//!
//! Input, in order:
//! - `cfg: u8`: bit 0 picks the device, block (0) or balloon (1); bit 1 makes the disk
//!   read-only;
//! - `len: u16`, then `len` bytes: guest RAM from address 0 ([`guest::load`]), where the
//!   driver set-up below puts the queues;
//! - operations until the input ends (at most [`MAX_OPS`]), each a byte `op` whose bits 0-2
//!   say what it does and whose bits 3-7 (`arg`) are its first argument:
//!   - 0: a register write: `offset: u16` (masked to the two slots, 0x400 bytes), then
//!     2^(arg & 3) bytes of value;
//!   - 1: a register read: `offset: u16`, 2^(arg & 3) bytes wide;
//!   - 2: the driver set-up, through the registers ([`set_up`]): `features: u16` (the low
//!     feature bits the driver accepts of those offered), `size: u8`; DRIVER_OK last unless
//!     `arg & 1`;
//!   - 3: QueueNotify of queue `arg & 3`;
//!   - 4: the driver writes guest RAM: `addr: u16`, `len: u8`, then `len` bytes;
//!   - 5: the VMM asks the balloon for statistics (`BalloonControl::request_stats`);
//!   - 6: the VMM sets the balloon target to `pages: u16` (`BalloonControl::set_target`), or
//!     tells the block driver its configuration changed;
//!   - 7: the driver's interrupt handler: reads InterruptStatus and acknowledges it.
//!
//! After each read of the magic value and at the end, the slot must still answer "virt"; a
//! block device's image must have kept its size, and its content unless a write succeeded.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

use memvisor_devices::ram::PlainRam;
use memvisor_devices::virtio::balloon::{Balloon, BalloonControl};
use memvisor_devices::virtio::block::Block;
use memvisor_devices::virtio::mmio::{MmioTransport, MMIO_BASE, MMIO_SLOT_SIZE};
use memvisor_devices::virtio::status;
use memvisor_devices::Bus;
use vm_memory::{Bytes, GuestAddress};
use vmm_sys_util::eventfd::EventFd;

use crate::guest;
use crate::virtio_blk::DISK_ID;
use crate::Input;

/// The most operations one input runs.
pub const MAX_OPS: usize = 512;

pub use memvisor_devices::virtio::mmio::reg;
use memvisor_devices::virtio::mmio::MAGIC;

/// Offsets the register operations reach: the device's slot and the empty one after it.
const OFFSET_MASK: u16 = 0x3ff;

/// What a run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The device's Status register at the end.
    pub status: u32,
    /// Interrupts the transport signalled.
    pub interrupts: u32,
    /// Requests the device carried out: block reads, writes, flushes and GET_IDs, or balloon
    /// pages inflated, deflated and reported plus statistics updates.
    pub requests: u64,
}

fn read(bus: &Bus, offset: u64) -> u32 {
    let mut b = [0u8; 4];
    bus.read(MMIO_BASE + offset, &mut b);
    u32::from_le_bytes(b)
}

fn write(bus: &Bus, offset: u64, value: u32) {
    bus.write(MMIO_BASE + offset, &value.to_le_bytes());
}

/// What a Linux driver does from reset to DRIVER_OK (virtio 1.2 §3.1.1), through the
/// registers: it accepts VIRTIO_F_VERSION_1 and, of the low feature bits offered, those in
/// `features`; gives up if FEATURES_OK does not stick; sets up every queue the device has
/// (QueueNumMax not 0) with 2^(size mod 5) descriptors (1 to 16; a QueueNum write sets any) at
/// [`guest::rings`] of `i * QUEUE_STRIDE`; and sets DRIVER_OK unless `stop_before_ok`.
pub fn set_up(bus: &Bus, features: u16, size: u8, stop_before_ok: bool) {
    let driver = status::ACKNOWLEDGE | status::DRIVER;
    write(bus, reg::STATUS, 0);
    write(bus, reg::STATUS, status::ACKNOWLEDGE);
    write(bus, reg::STATUS, driver);
    write(bus, reg::DEVICE_FEATURES_SEL, 0);
    let low = read(bus, reg::DEVICE_FEATURES);
    write(bus, reg::DEVICE_FEATURES_SEL, 1);
    let high = read(bus, reg::DEVICE_FEATURES);
    write(bus, reg::DRIVER_FEATURES_SEL, 0);
    write(bus, reg::DRIVER_FEATURES, low & u32::from(features));
    write(bus, reg::DRIVER_FEATURES_SEL, 1);
    write(bus, reg::DRIVER_FEATURES, high & 1);
    write(bus, reg::STATUS, driver | status::FEATURES_OK);
    if read(bus, reg::STATUS) & status::FEATURES_OK == 0 {
        return;
    }
    for i in 0..8u32 {
        write(bus, reg::QUEUE_SEL, i);
        let max = read(bus, reg::QUEUE_NUM_MAX);
        if max == 0 {
            break;
        }
        let n = (1u32 << (size % 5)).min(max);
        let (desc, avail, used) = guest::rings(u64::from(i) * guest::QUEUE_STRIDE, n as u16);
        write(bus, reg::QUEUE_NUM, n);
        for (low, addr) in [
            (reg::QUEUE_DESC_LOW, desc),
            (reg::QUEUE_DRIVER_LOW, avail),
            (reg::QUEUE_DEVICE_LOW, used),
        ] {
            write(bus, low, addr as u32);
            write(bus, low + 4, (addr >> 32) as u32);
        }
        write(bus, reg::QUEUE_READY, 1);
    }
    if !stop_before_ok {
        write(
            bus,
            reg::STATUS,
            driver | status::FEATURES_OK | status::DRIVER_OK,
        );
    }
}

pub fn run(data: &[u8]) -> Outcome {
    let _run = guest::exclusive();
    let mut input = Input::new(data);
    let cfg = input.u8();
    let balloon = cfg & 1 != 0;
    let read_only = cfg & 2 != 0;
    let len = usize::from(input.u16());
    let mem = guest::load(input.bytes(len));
    let ram = Arc::new(PlainRam::new(mem.clone()));
    let irq = EventFd::new(libc::EFD_NONBLOCK).expect("an eventfd");

    let mut block_metrics = None;
    let mut control = None;
    let transport = if balloon {
        let dev = Balloon::new(ram);
        let state = dev.state();
        let t = Arc::new(Mutex::new(MmioTransport::new(
            Some(Box::new(dev)),
            mem.clone(),
            Some(irq),
        )));
        control = Some(BalloonControl {
            state,
            transport: t.clone(),
        });
        t
    } else {
        let dev = Block::new(guest::image().path(), read_only, DISK_ID, ram, 0)
            .expect("open the disk image");
        block_metrics = Some(dev.metrics());
        Arc::new(Mutex::new(MmioTransport::new(
            Some(Box::new(dev)),
            mem.clone(),
            Some(irq),
        )))
    };
    let metrics = transport
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .metrics();
    let mut bus = Bus::new();
    bus.insert(MMIO_BASE, MMIO_SLOT_SIZE, transport.clone())
        .expect("an empty bus");
    let empty = MmioTransport::new(None, mem.clone(), None);
    bus.insert(
        MMIO_BASE + MMIO_SLOT_SIZE,
        MMIO_SLOT_SIZE,
        Arc::new(Mutex::new(empty)),
    )
    .expect("the next slot");

    for _ in 0..MAX_OPS {
        if input.is_empty() {
            break;
        }
        let op = input.u8();
        let arg = op >> 3;
        let width = 1usize << (arg & 3);
        match op & 7 {
            0 => {
                let offset = u64::from(input.u16() & OFFSET_MASK);
                let mut value = [0u8; 8];
                let given = input.bytes(width);
                value[..given.len()].copy_from_slice(given);
                bus.write(MMIO_BASE + offset, &value[..width]);
            }
            1 => {
                let offset = u64::from(input.u16() & OFFSET_MASK);
                let mut value = [0u8; 8];
                bus.read(MMIO_BASE + offset, &mut value[..width]);
                if width == 4 && (offset == reg::MAGIC || offset == MMIO_SLOT_SIZE) {
                    assert_eq!(value[..4], MAGIC.to_le_bytes(), "the magic value changed");
                }
            }
            2 => {
                let features = input.u16();
                let size = input.u8();
                set_up(&bus, features, size, arg & 1 != 0);
            }
            3 => write(&bus, reg::QUEUE_NOTIFY, u32::from(arg & 3)),
            4 => {
                let addr = u64::from(input.u16());
                let n = usize::from(input.u8());
                let bytes = input.bytes(n);
                let _ = mem.write_slice(bytes, GuestAddress(addr));
            }
            5 => {
                if let Some(c) = &control {
                    c.request_stats();
                }
            }
            6 => {
                let pages = u32::from(input.u16());
                match &control {
                    Some(c) => c.set_target(pages),
                    None => transport
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .config_changed(),
                }
            }
            _ => {
                let pending = read(&bus, reg::INTERRUPT_STATUS);
                write(&bus, reg::INTERRUPT_ACK, pending);
            }
        }
    }

    assert_eq!(read(&bus, reg::MAGIC), MAGIC, "the magic value changed");
    let requests = match (&block_metrics, &control) {
        (Some(m), _) => {
            let writes = m.writes.load(Ordering::Relaxed);
            guest::image().check(writes > 0);
            m.reads.load(Ordering::Relaxed)
                + writes
                + m.flushes.load(Ordering::Relaxed)
                + m.get_ids.load(Ordering::Relaxed)
        }
        (None, Some(c)) => {
            let m = &c.state.metrics;
            m.inflated_pages.load(Ordering::Relaxed)
                + m.deflated_pages.load(Ordering::Relaxed)
                + m.reported_pages.load(Ordering::Relaxed)
                + m.stats_updates.load(Ordering::Relaxed)
        }
        (None, None) => 0,
    };
    Outcome {
        status: read(&bus, reg::STATUS),
        interrupts: metrics.interrupts.load(Ordering::Relaxed),
        requests,
    }
}
