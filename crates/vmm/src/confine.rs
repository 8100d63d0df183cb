//! Where the VMM confines itself, in the order that lets each step work:
//!
//! 1. `Vm::build` opens what the VM needs by path or with privileges: `/dev/kvm` and the VM,
//!    guest RAM. (The userfaultfd, disk images, swap file, Tesseract's logs and the API socket
//!    are still opened after this point today: the jail must either hold them or take them
//!    opening ahead of it.)
//! 2. [`enter_jail`], while the VMM is still one thread: mount and PID namespaces and a pivot
//!    into a directory need that, and a uid set here holds for every thread started after.
//! 3. Each thread installs its own seccomp filter as it starts, before it reads anything the
//!    guest wrote (`memvisor-seccomp`); the main thread last, once `Vm::start` has started the
//!    others. A filter therefore never has to allow the jail's own calls.

use crate::{VmConfig, VmmError};

/// Enters the VMM's jail (docs/security.md, "The jail"). Nothing yet: the VMM runs where and as
/// whom it was started, and the seccomp filters are its only confinement.
pub(crate) fn enter_jail(_config: &VmConfig) -> Result<(), VmmError> {
    Ok(())
}
