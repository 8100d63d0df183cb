//! Why a VM cannot be built or run: [`VmmError`], and `kvm_err`, which names the KVM call that
//! failed.

use memvisor_boot::BootError;
use memvisor_devices::virtio::block::BlockError;
use memvisor_devices::virtio::mmio::MMIO_SLOTS;
use memvisor_devices::BusError;
use memvisor_pager::PagerError;
use thiserror::Error;

use crate::config::MAX_VCPUS;

#[derive(Debug, Error)]
pub enum VmmError {
    #[error("cannot confine the VMM")]
    Seccomp(#[source] memvisor_seccomp::SeccompError),
    #[error("cannot open /dev/kvm")]
    OpenKvm(#[source] kvm_ioctls::Error),
    #[error("KVM call {what} failed")]
    Kvm {
        what: &'static str,
        #[source]
        source: kvm_ioctls::Error,
    },
    #[error("cannot boot the kernel")]
    Boot(#[from] BootError),
    #[error("cannot set up guest memory")]
    Memory(#[source] std::io::Error),
    #[error("the pager failed, so guest memory can no longer be served: {0}")]
    PagerFailed(String),
    #[error("cannot start the pager")]
    Pager(#[from] PagerError),
    #[error("cannot serve the API socket")]
    Api(#[source] std::io::Error),
    #[error("disk image {0} is in use by another process (another VMM?): one VM at a time may write an image")]
    DiskInUse(std::path::PathBuf),
    #[error("cannot attach disk")]
    Disk(#[from] BlockError),
    #[error("cannot put a disk's indirected blocks back into its image")]
    Recover(#[from] memvisor_pager::indirect::IndirectError),
    #[error("{0} disks given; at most {MMIO_SLOTS} virtio devices fit")]
    TooManyDevices(usize),
    #[error("{0} vCPUs requested; a VM has 1 to {MAX_VCPUS}")]
    BadVcpuCount(u8),
    #[error("device layout error")]
    Bus(#[from] BusError),
    #[error("cannot create an event fd")]
    EventFd(#[source] std::io::Error),
    #[error("cannot start a vCPU thread")]
    Thread(#[source] std::io::Error),
    #[error("cannot start the thread of virtio device {0}")]
    DeviceThread(String, #[source] std::io::Error),
    #[error("guest crashed on vCPU {vcpu}: {reason} (rip {rip:#x})")]
    GuestCrash { vcpu: u8, reason: String, rip: u64 },
    #[error("cannot restore the snapshot: {0}")]
    Restore(String),
    #[error("the migration did not complete: {0}")]
    Migration(String),
    /// The VM migrating in does not fit this one's disks (the caller's bad input).
    #[error("{0}")]
    MigrationMismatch(String),
    #[error(transparent)]
    Jail(#[from] crate::jail::JailError),
    #[error("flushing disk {id} at exit failed")]
    DiskSync {
        id: String,
        #[source]
        source: std::io::Error,
    },
}

pub(crate) fn kvm_err(what: &'static str) -> impl FnOnce(kvm_ioctls::Error) -> VmmError {
    move |source| VmmError::Kvm { what, source }
}
