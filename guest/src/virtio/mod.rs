//! virtio over MMIO: transport discovery at 0xfeb00000 (8 slots of 0x200
//! bytes) and the drivers built on it. Only modern (version 2) devices are
//! supported; QEMU needs `-global virtio-mmio.force-legacy=false`.

pub mod balloon;
pub mod blk;
pub mod mmio;
pub mod queue;

use mmio::{MmioTransport, STATUS_ACKNOWLEDGE, STATUS_DRIVER, STATUS_FAILED, STATUS_FEATURES_OK};
use queue::SplitQueue;

pub const MMIO_BASE: usize = 0xfeb0_0000;
pub const MMIO_STRIDE: usize = 0x200;
/// QEMU microvm and memvisor both have eight transports.
pub const MMIO_SLOTS: usize = 8;

pub const DEVICE_ID_BLOCK: u32 = 2;
pub const DEVICE_ID_BALLOON: u32 = 5;

/// Common feature bit: the device complies with virtio 1.x.
pub const F_VERSION_1: u64 = 1 << 32;

/// A device found on a transport slot.
#[derive(Clone, Copy)]
pub struct Found {
    pub slot: usize,
    pub device_id: u32,
    pub transport: MmioTransport,
}

/// Scans the transport slots and prints one line per device. Stops at the
/// first slot without the "virt" magic; skips empty slots (device ID 0).
/// Calls `on_device` for each modern device.
pub fn probe(mut on_device: impl FnMut(Found)) -> usize {
    let mut count = 0;
    for slot in 0..MMIO_SLOTS {
        let transport = MmioTransport::new(MMIO_BASE + slot * MMIO_STRIDE);
        if transport.magic() != mmio::MAGIC {
            break;
        }
        let device_id = transport.device_id();
        if device_id == 0 {
            continue;
        }
        count += 1;
        let version = transport.version();
        println!("virtio: slot {slot} device id {device_id} (mmio version {version})");
        if version != 2 {
            println!(
                "virtio: slot {slot}: mmio version {version} (legacy) not supported; \
                 QEMU needs -global virtio-mmio.force-legacy=false"
            );
            continue;
        }
        on_device(Found {
            slot,
            device_id,
            transport,
        });
    }
    count
}

/// The device status after [`negotiate`]; a driver adds DRIVER_OK once its queues are live.
pub const STATUS_NEGOTIATED: u32 = STATUS_ACKNOWLEDGE | STATUS_DRIVER | STATUS_FEATURES_OK;

/// Resets the device and negotiates features (virtio 1.2 §3.1.1): VERSION_1 is required, and
/// of `accepted` the driver takes what the device offers. Returns the negotiated features.
pub fn negotiate(t: &MmioTransport, accepted: u64) -> Result<u64, &'static str> {
    t.reset();
    t.set_status(STATUS_ACKNOWLEDGE);
    t.set_status(STATUS_ACKNOWLEDGE | STATUS_DRIVER);
    let offered = t.device_features();
    if offered & F_VERSION_1 == 0 {
        t.set_status(STATUS_FAILED);
        return Err("device does not offer VIRTIO_F_VERSION_1");
    }
    let features = offered & (accepted | F_VERSION_1);
    t.set_driver_features(features);
    t.set_status(STATUS_NEGOTIATED);
    if t.status() & STATUS_FEATURES_OK == 0 {
        t.set_status(STATUS_FAILED);
        return Err("device rejected our features (FEATURES_OK did not stick)");
    }
    Ok(features)
}

/// Sets up queue `idx` as a polled split queue of the largest power-of-two size no larger than
/// the device's maximum and `cap`, and makes it live.
pub fn setup_queue(t: &MmioTransport, idx: u32, cap: u32) -> Result<SplitQueue, &'static str> {
    let max = match t.select_queue(idx) {
        None => return Err("a queue is already live after reset"),
        Some(0) => return Err("a queue the driver needs is not available"),
        Some(max) => max,
    };
    let wanted = max.min(cap);
    let size = 1u32 << (31 - wanted.leading_zeros());
    let mut q = SplitQueue::new(size as u16).ok_or("out of memory for a virtqueue")?;
    q.disable_interrupts();
    let (desc, driver, device) = q.addresses();
    t.enable_queue(size, desc, driver, device);
    Ok(q)
}
