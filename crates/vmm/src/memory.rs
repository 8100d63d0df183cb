//! Guest RAM: anonymous private host mappings backed by transparent huge pages (as QEMU does;
//! the pager turns them off when it takes RAM over), one KVM memory slot each; mergeable by
//! the host kernel's KSM with `--sharing host` (as QEMU's `mem-merge=on`; docs/sharing.md).

use kvm_bindings::kvm_userspace_memory_region;
use kvm_ioctls::VmFd;
use memvisor_boot::RamLayout;
use memvisor_devices::GuestMem;
use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryRegion};

use crate::error::{kvm_err, VmmError};

/// Maps the RAM of `layout` and registers it with KVM; `sharing`: KSM may merge it.
pub(crate) fn create(vm: &VmFd, layout: &RamLayout, sharing: bool) -> Result<GuestMem, VmmError> {
    let ranges: Vec<(GuestAddress, usize)> = layout
        .regions()
        .iter()
        .map(|r| usize::try_from(r.size).map(|size| (GuestAddress(r.guest_addr), size)))
        .collect::<Result<_, _>>()
        .map_err(|_| {
            VmmError::Memory(std::io::Error::other(
                "guest RAM larger than the address space",
            ))
        })?;
    let mem =
        GuestMem::from_ranges(&ranges).map_err(|e| VmmError::Memory(std::io::Error::other(e)))?;
    for (slot, region) in mem.iter().enumerate() {
        let host = region.as_ptr();
        let size = region.len();
        // SAFETY: `host..host + size` is exactly the mapping `region` owns, alive as long as `mem`;
        // MADV_HUGEPAGE only changes how the kernel backs it, never its contents.
        let rc = unsafe {
            libc::madvise(
                host.cast(),
                usize::try_from(size).unwrap_or(usize::MAX),
                libc::MADV_HUGEPAGE,
            )
        };
        if rc != 0 {
            return Err(VmmError::Memory(std::io::Error::last_os_error()));
        }
        if sharing {
            // SAFETY: as above; MADV_MERGEABLE lets KSM merge identical pages copy-on-write,
            // which never changes what the guest reads. KSM splits a huge page before merging
            // inside it.
            let rc = unsafe {
                libc::madvise(
                    host.cast(),
                    usize::try_from(size).unwrap_or(usize::MAX),
                    libc::MADV_MERGEABLE,
                )
            };
            if rc != 0 {
                return Err(VmmError::Memory(std::io::Error::last_os_error()));
            }
        }
        let slot_region = kvm_userspace_memory_region {
            slot: u32::try_from(slot).expect("a few slots"),
            flags: 0,
            guest_phys_addr: region.start_addr().0,
            memory_size: size,
            userspace_addr: host as u64,
        };
        // SAFETY: the host range is a live mapping owned by `mem`, which the VM keeps (through an
        // Arc shared with the devices) until the process ends; slots do not overlap.
        unsafe { vm.set_user_memory_region(slot_region) }
            .map_err(kvm_err("KVM_SET_USER_MEMORY_REGION"))?;
    }
    Ok(mem)
}
