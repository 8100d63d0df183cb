//! How a VM ended ([`VmExit`]) and what a finished VM reports ([`VmReport`]): its exits by kind,
//! the pager's and the balloon's state, its disks' counters, the guest's errors and sharing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use memvisor_devices::virtio::block::BlockMetrics;
use memvisor_devices::virtio::mmio::TransportMetrics;
use memvisor_pager::PagerStats;

/// How the guest ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmExit {
    /// The guest wrote this value to the debug-exit port.
    DebugExit(u32),
    /// The guest asked KVM for a shutdown or reset (system event).
    Shutdown,
    /// memvisor was told to stop (SIGINT, SIGTERM or SIGHUP) and stopped the VM.
    Signal(i32),
    /// The VM was stopped through a [`VmStopper`](crate::VmStopper).
    Stopped,
}

/// VM exits the vCPUs took, by kind.
#[derive(Debug, Default)]
pub struct ExitCounters {
    pub io: AtomicU64,
    pub mmio: AtomicU64,
    pub other: AtomicU64,
}

impl ExitCounters {
    pub fn total(&self) -> u64 {
        self.io.load(Ordering::Relaxed)
            + self.mmio.load(Ordering::Relaxed)
            + self.other.load(Ordering::Relaxed)
    }
}

/// What a finished VM reports.
pub struct VmReport {
    pub exit: VmExit,
    /// The pager's state at exit, when one ran.
    pub pager: Option<PagerStats>,
    /// The balloon's state at exit, when the VM had one.
    pub balloon: Option<memvisor_api::BalloonStats>,
    pub exits: Arc<ExitCounters>,
    pub disks: Vec<(String, Arc<BlockMetrics>, Arc<TransportMetrics>)>,
    /// What the guest did wrong, counted by the process's guest log (one VM per process: a
    /// process that runs several VMs gets their sum).
    pub guest_errors: memvisor_api::GuestErrors,
    /// What KSM had merged of its memory at the end (`--sharing host`).
    pub sharing: Option<memvisor_api::SharingStats>,
}
