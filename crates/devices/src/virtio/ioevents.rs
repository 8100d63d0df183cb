//! The one thing the virtio-mmio transport asks of the hypervisor: [`IoEvents`], an eventfd
//! signalled for a guest's queue notification instead of an exit to user space. A leaf: the
//! transport (`mmio.rs`) registers its queues' eventfds through it, and the device thread
//! (`notify.rs`) hands it to the transport.

use std::io;

use vmm_sys_util::eventfd::EventFd;

/// Where the VMM has the hypervisor signal an eventfd, instead of exiting to user space, when
/// the guest writes a 4-byte `value` to the guest-physical address `addr` (KVM's
/// `KVM_IOEVENTFD` with a datamatch). A narrow callback so devices stay free of KVM.
pub trait IoEvents: Send + Sync {
    /// Starts signalling `fd` for writes of `value` to `addr`.
    fn register(&self, addr: u64, value: u32, fd: &EventFd) -> io::Result<()>;
    /// Stops what [`IoEvents::register`] with the same arguments started.
    fn unregister(&self, addr: u64, value: u32, fd: &EventFd) -> io::Result<()>;
}
