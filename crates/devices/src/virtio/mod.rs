//! The virtio device model: the [`VirtioDevice`] trait, the virtio-mmio transport and the devices.

pub mod balloon;
pub mod block;
pub mod ioevents;
pub mod mmio;
pub mod notify;

use virtio_queue::Queue;

use crate::GuestMem;

/// `VIRTIO_F_VERSION_1`: the device speaks modern (1.0+) virtio.
pub const VIRTIO_F_VERSION_1: u64 = 1 << 32;

/// Device-status bits (virtio 1.2 §2.1).
pub mod status {
    pub const ACKNOWLEDGE: u32 = 1;
    pub const DRIVER: u32 = 2;
    pub const DRIVER_OK: u32 = 4;
    pub const FEATURES_OK: u32 = 8;
    pub const DEVICE_NEEDS_RESET: u32 = 0x40;
    pub const FAILED: u32 = 0x80;
}

/// A virtio device behind a transport. The transport owns the queues and the register state
/// machine; the device owns its configuration space and what a request does.
pub trait VirtioDevice: Send {
    /// The virtio device ID (2 for block).
    fn device_type(&self) -> u32;
    /// The largest size of each of its queues.
    fn queue_max_sizes(&self) -> &[u16];
    /// The features it offers.
    fn features(&self) -> u64;
    /// Reads its configuration space; bytes past its end read as 0.
    fn read_config(&self, offset: u64, data: &mut [u8]);
    /// Handles the guest's notification of queue `index`. Returns whether any used buffer was
    /// added (so the transport may interrupt the driver).
    fn process_queue(&mut self, index: usize, queue: &mut Queue, mem: &GuestMem) -> bool;
    /// Called when the driver has finished set-up (DRIVER_OK) with the features it accepted.
    fn activate(&mut self, _acked_features: u64) {}
    /// Called when the driver resets the device.
    fn reset(&mut self) {}
    /// Writes its configuration space (bytes the driver may not write are ignored).
    fn write_config(&mut self, _offset: u64, _data: &[u8]) {}
    /// Work the VMM asked for outside a guest notification (e.g. return a held buffer).
    /// Gets every queue; returns whether a used buffer was added to queue `i` for each `i` set.
    fn on_request(&mut self, _queues: &mut [Queue], _mem: &GuestMem) -> bool {
        false
    }
    /// The device's own state for a snapshot, beyond its transport's and its queues' (what the
    /// driver negotiated, buffers it holds); `null` for a device that keeps none.
    fn save_state(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
    /// Takes back what [`Self::save_state`] gave, after the transport's state is restored.
    fn load_state(&mut self, _state: &serde_json::Value) -> Result<(), String> {
        Ok(())
    }
}
