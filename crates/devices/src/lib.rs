//! Emulated devices of a memvisor VM: the I/O buses, the 8250 serial port, the debug-exit port, and virtio-mmio devices.
//!
//! A device sees only offsets inside its own window and guest memory; it never touches KVM.
//! The VMM routes a vCPU's port or MMIO exit to the [`Bus`] that owns the address. What a guest
//! does wrong is counted, and logged at a rate it cannot raise, in one place: [`guest_log`].
//!
//! | file | owns |
//! |---|---|
//! | `bus.rs` | the [`Bus`] that routes a port or MMIO address to the [`BusDevice`] that owns it |
//! | `ram.rs` | how devices reach guest RAM: the `GuestRam` trait the pager implements, `PlainRam` without one, and `PAGE_SIZE`, the workspace's one definition of the page size |
//! | `iobuf.rs` | page-aligned `O_DIRECT` buffers on transparent huge pages, so a request is one segment for the host's block layer (used by the disks and the pager) |
//! | `priority.rs` | the nice value of the threads a guest waits on (`--serving-nice`): the device threads and the pager's fault thread |
//! | `serial.rs` | the 16550A serial port, its console passed on a whole line at a time |
//! | `debug_exit.rs` | the debug-exit port, which ends the VM like QEMU's `isa-debug-exit` |
//! | `guest_log.rs` | what a guest does wrong, counted by kind and logged at a rate it cannot raise (one instance per process) |
//! | `virtio/mod.rs` | the [`virtio::VirtioDevice`] trait and the feature and status bits |
//! | `virtio/ioevents.rs` | the [`virtio::ioevents::IoEvents`] trait the VMM implements to register ioeventfds (a leaf) |
//! | `virtio/mmio.rs` | the virtio-mmio transport and its register protocol |
//! | `virtio/notify.rs` | queue notifications through ioeventfds and the device threads that serve them |
//! | `virtio/block/` | virtio-blk: the device and its I/O (`mod.rs`), the image file and the arithmetic of a transfer's pages (`disk.rs`), request validation (`request.rs`) |
//! | `virtio/balloon/` | virtio-balloon: inflate, deflate, statistics, deflate-on-OOM and free page reporting |

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
