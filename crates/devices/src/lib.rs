//! Emulated devices of a memvisor VM: the I/O buses, the 8250 serial port, the debug-exit port, and virtio-mmio devices.
//!
//! A device sees only offsets inside its own window and guest memory; it never touches KVM.
//! The VMM routes a vCPU's port or MMIO exit to the [`Bus`] that owns the address. What a guest
//! does wrong is counted, and logged at a rate it cannot raise, in one place: [`guest_log`].

pub mod bus;
pub mod debug_exit;
pub mod guest_log;
pub mod iobuf;
pub mod priority;
pub mod ram;
pub mod serial;
pub mod virtio;

pub use bus::{Bus, BusDevice, BusError};

/// Guest RAM as the devices see it.
pub type GuestMem = vm_memory::GuestMemoryMmap<()>;

/// How a device stops the whole VM for a fault of the host's that the operator can mend (a disk
/// image's file system out of space), as QEMU's `werror=enospc` does: the VMM implements it.
pub trait PauseVm: Send + Sync {
    /// Pauses the VM because `why` and returns once it is resumed (`true`: try again), or once
    /// the VM is ending (`false`: give up).
    fn pause_until_resumed(&self, why: String) -> bool;
}
