//! KVM ioeventfds for the devices' queue notifications: memvisor's [`IoEvents`].

use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};

use kvm_ioctls::{IoEventAddress, Kvm, VmFd};
use memvisor_devices::virtio::ioevents::IoEvents;
use vmm_sys_util::eventfd::EventFd;

use crate::error::{kvm_err, VmmError};

/// Registers eventfds with `KVM_IOEVENTFD` on its own handle of the VM, so the transports can
/// hold it for the VM's lifetime whoever owns the original.
pub(crate) struct KvmIoEvents {
    vm: VmFd,
}

impl KvmIoEvents {
    /// `kvm`: the VMM's handle on `/dev/kvm`, which a jailed VMM cannot open again.
    pub(crate) fn new(kvm: &Kvm, vm: &VmFd) -> Result<Self, VmmError> {
        // `create_vmfd_from_rawfd` asks for this first; asking here means it cannot fail after
        // taking the descriptor.
        kvm.get_vcpu_mmap_size()
            .map_err(kvm_err("KVM_GET_VCPU_MMAP_SIZE"))?;
        // SAFETY: fcntl on a descriptor `vm` keeps open; the result is checked below.
        let fd = unsafe { libc::fcntl(vm.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
        if fd < 0 {
            return Err(VmmError::Kvm {
                what: "F_DUPFD_CLOEXEC of the VM",
                source: kvm_ioctls::Error::last(),
            });
        }
        // SAFETY: `fd` was just returned by fcntl, is open, and nothing else owns it.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: `owned` is a duplicate of a KVM VM descriptor; the new VmFd takes ownership.
        let vm = unsafe { kvm.create_vmfd_from_rawfd(owned.into_raw_fd()) }
            .map_err(kvm_err("opening a second VM handle"))?;
        Ok(KvmIoEvents { vm })
    }
}

impl IoEvents for KvmIoEvents {
    fn register(&self, addr: u64, value: u32, fd: &EventFd) -> std::io::Result<()> {
        self.vm
            .register_ioevent(fd, &IoEventAddress::Mmio(addr), value)
            .map_err(|e| std::io::Error::from_raw_os_error(e.errno()))
    }

    fn unregister(&self, addr: u64, value: u32, fd: &EventFd) -> std::io::Result<()> {
        self.vm
            .unregister_ioevent(fd, &IoEventAddress::Mmio(addr), value)
            .map_err(|e| std::io::Error::from_raw_os_error(e.errno()))
    }
}
