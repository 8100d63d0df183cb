//! What a VM is built from: a [`VmConfig`] with its [`DiskConfig`]s, and the limits on them.

use std::path::PathBuf;

use memvisor_devices::virtio::mmio::MMIO_SLOTS;
use memvisor_pager::PagerConfig;

use crate::affinity;

/// Most vCPUs a VM may have.
pub const MAX_VCPUS: u8 = 64;
/// Most disks a VM may have: one per virtio-mmio slot.
pub const MAX_DISKS: usize = MMIO_SLOTS;

/// A disk as the VM sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskConfig {
    pub path: PathBuf,
    pub read_only: bool,
    /// The serial the guest reads with GET_ID (at most 20 bytes).
    pub id: String,
}

/// Everything needed to build and boot a VM.
#[derive(Clone, Debug)]
pub struct VmConfig {
    /// The PVH kernel ELF.
    pub kernel: Vec<u8>,
    pub cmdline: String,
    /// Guest RAM in bytes.
    pub mem_size: u64,
    pub vcpus: u8,
    pub disks: Vec<DiskConfig>,
    /// Put guest RAM under memvisor's pager; `None`: plain anonymous memory.
    pub pager: Option<PagerConfig>,
    /// Give the VM a virtio-balloon device.
    pub balloon: bool,
    /// Serve the API on this Unix socket.
    pub api_sock: Option<PathBuf>,
    /// Run the vCPU threads on these host CPUs only; `None`: wherever the scheduler puts them.
    pub vcpu_cpus: Option<affinity::CpuSet>,
    /// Guest RAM is mergeable by the host kernel's KSM (`--sharing host`, docs/sharing.md).
    pub sharing: bool,
    /// The nice value of the virtio devices' threads, which the guest waits on (0: the VMM's
    /// own; `memvisor_devices::priority`).
    pub serving_nice: i32,
    /// Start from this snapshot (checked against the rest of this configuration by the
    /// caller) instead of booting `kernel`.
    pub restore: Option<std::sync::Arc<crate::snapshot::Snapshot>>,
    /// What a thread's seccomp filter does with a call outside it (`--seccomp`,
    /// docs/security.md); every thread installs its own as it starts.
    pub seccomp: memvisor_seccomp::Mode,
    /// A migration coming in, its shape taken (this configuration fits it; `restore` is
    /// none): the VM is built from the shape, then takes its state from the source
    /// ([`Incoming::receive_state`](crate::migrate::incoming::Incoming::receive_state), its
    /// memory the source's), then the source lets it go
    /// ([`Incoming::switch`](crate::migrate::incoming::Incoming::switch)).
    pub incoming: Option<std::sync::Arc<crate::migrate::incoming::Incoming>>,
    /// Enter this jail once every file is open, before any thread starts (`jail.rs`).
    pub jail: Option<crate::jail::Jail>,
}
