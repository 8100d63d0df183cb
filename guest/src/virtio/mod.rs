//! virtio over MMIO: transport discovery at 0xfeb00000 (8 slots of 0x200
//! bytes) and the drivers built on it. Only modern (version 2) devices are
//! supported; QEMU needs `-global virtio-mmio.force-legacy=false`.

pub mod balloon;
pub mod blk;
pub mod mmio;
pub mod queue;

use mmio::MmioTransport;

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
