//! virtio-mmio (version 2) register access for one transport slot.
//! Every access is a VM exit, so callers keep them few.

use core::ptr::{read_volatile, write_volatile};

/// "virt" in little-endian.
pub const MAGIC: u32 = 0x7472_6976;

const REG_MAGIC: usize = 0x000;
const REG_VERSION: usize = 0x004;
const REG_DEVICE_ID: usize = 0x008;
const REG_DEVICE_FEATURES: usize = 0x010;
const REG_DEVICE_FEATURES_SEL: usize = 0x014;
const REG_DRIVER_FEATURES: usize = 0x020;
const REG_DRIVER_FEATURES_SEL: usize = 0x024;
const REG_QUEUE_SEL: usize = 0x030;
const REG_QUEUE_NUM_MAX: usize = 0x034;
const REG_QUEUE_NUM: usize = 0x038;
const REG_QUEUE_READY: usize = 0x044;
const REG_QUEUE_NOTIFY: usize = 0x050;
const REG_INTERRUPT_STATUS: usize = 0x060;
const REG_INTERRUPT_ACK: usize = 0x064;
const REG_STATUS: usize = 0x070;
const REG_QUEUE_DESC_LOW: usize = 0x080;
const REG_QUEUE_DESC_HIGH: usize = 0x084;
const REG_QUEUE_DRIVER_LOW: usize = 0x090;
const REG_QUEUE_DRIVER_HIGH: usize = 0x094;
const REG_QUEUE_DEVICE_LOW: usize = 0x0a0;
const REG_QUEUE_DEVICE_HIGH: usize = 0x0a4;
const REG_CONFIG_GENERATION: usize = 0x0fc;
const REG_CONFIG: usize = 0x100;

/// Device status bits.
pub const STATUS_ACKNOWLEDGE: u32 = 1;
pub const STATUS_DRIVER: u32 = 2;
pub const STATUS_DRIVER_OK: u32 = 4;
pub const STATUS_FEATURES_OK: u32 = 8;
pub const STATUS_FAILED: u32 = 128;

/// One virtio-mmio transport (its register window is identity-mapped, uncached).
#[derive(Clone, Copy)]
pub struct MmioTransport {
    base: usize,
}

impl MmioTransport {
    pub const fn new(base: usize) -> Self {
        Self { base }
    }

    fn read(&self, offset: usize) -> u32 {
        // SAFETY: `base` is a virtio-mmio slot in the identity-mapped, uncached MMIO
        // window (0xfeb00000..); registers are 32-bit aligned.
        unsafe { read_volatile((self.base + offset) as *const u32) }
    }

    fn write(&self, offset: usize, value: u32) {
        // SAFETY: as in `read`; writes have the device effects the spec defines.
        unsafe { write_volatile((self.base + offset) as *mut u32, value) }
    }

    pub fn magic(&self) -> u32 {
        self.read(REG_MAGIC)
    }
    pub fn version(&self) -> u32 {
        self.read(REG_VERSION)
    }
    pub fn device_id(&self) -> u32 {
        self.read(REG_DEVICE_ID)
    }

    pub fn status(&self) -> u32 {
        self.read(REG_STATUS)
    }
    pub fn set_status(&self, status: u32) {
        self.write(REG_STATUS, status)
    }
    /// Writes 0 to the status register, which resets the device.
    pub fn reset(&self) {
        self.write(REG_STATUS, 0);
    }

    pub fn device_features(&self) -> u64 {
        self.write(REG_DEVICE_FEATURES_SEL, 0);
        let low = self.read(REG_DEVICE_FEATURES);
        self.write(REG_DEVICE_FEATURES_SEL, 1);
        let high = self.read(REG_DEVICE_FEATURES);
        (u64::from(high) << 32) | u64::from(low)
    }

    pub fn set_driver_features(&self, features: u64) {
        self.write(REG_DRIVER_FEATURES_SEL, 0);
        self.write(REG_DRIVER_FEATURES, features as u32);
        self.write(REG_DRIVER_FEATURES_SEL, 1);
        self.write(REG_DRIVER_FEATURES, (features >> 32) as u32);
    }

    /// Selects `queue` and returns its QueueNumMax (0 = queue not available),
    /// or None if the queue is already live.
    pub fn select_queue(&self, queue: u32) -> Option<u32> {
        self.write(REG_QUEUE_SEL, queue);
        if self.read(REG_QUEUE_READY) != 0 {
            return None;
        }
        Some(self.read(REG_QUEUE_NUM_MAX))
    }

    /// Programs the selected queue's size and ring addresses and enables it.
    pub fn enable_queue(&self, size: u32, desc: u64, driver: u64, device: u64) {
        self.write(REG_QUEUE_NUM, size);
        self.write(REG_QUEUE_DESC_LOW, desc as u32);
        self.write(REG_QUEUE_DESC_HIGH, (desc >> 32) as u32);
        self.write(REG_QUEUE_DRIVER_LOW, driver as u32);
        self.write(REG_QUEUE_DRIVER_HIGH, (driver >> 32) as u32);
        self.write(REG_QUEUE_DEVICE_LOW, device as u32);
        self.write(REG_QUEUE_DEVICE_HIGH, (device >> 32) as u32);
        self.write(REG_QUEUE_READY, 1);
    }

    pub fn notify(&self, queue: u32) {
        self.write(REG_QUEUE_NOTIFY, queue);
    }

    /// Acknowledges pending interrupt causes (only needed if the device raises
    /// them; the polling drivers normally skip it to save two VM exits).
    pub fn ack_interrupts(&self) {
        let pending = self.read(REG_INTERRUPT_STATUS);
        if pending != 0 {
            self.write(REG_INTERRUPT_ACK, pending);
        }
    }

    pub fn config_read32(&self, offset: usize) -> u32 {
        self.read(REG_CONFIG + offset)
    }

    pub fn config_write32(&self, offset: usize, value: u32) {
        self.write(REG_CONFIG + offset, value);
    }

    /// Reads a 64-bit config field consistently (retries if the config generation changed).
    pub fn config_read64(&self, offset: usize) -> u64 {
        loop {
            let before = self.read(REG_CONFIG_GENERATION);
            let low = self.read(REG_CONFIG + offset);
            let high = self.read(REG_CONFIG + offset + 4);
            if self.read(REG_CONFIG_GENERATION) == before {
                return (u64::from(high) << 32) | u64::from(low);
            }
        }
    }
}
