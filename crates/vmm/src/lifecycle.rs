//! A VM's state ([`VmState`]) and the pausing and resuming that [`Vm`](crate::Vm) and its API
//! server share ([`Lifecycle`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use memvisor_pager::Pager;

use crate::control::{PauseReason, Vcpus};

/// A VM's state, as [`Vm::state`](crate::Vm::state) reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmState {
    /// Built, vCPUs not started.
    Created,
    Running,
    /// vCPUs held outside the guest (`parked` of them so far) until [`Vm::resume`](crate::Vm::resume).
    Paused {
        why: PauseReason,
        parked: usize,
    },
}

/// Pausing and resuming one VM: what [`Vm`] and its API server share.
pub(crate) struct Lifecycle {
    pub vcpus: Arc<Vcpus>,
    pub pager: Option<Pager>,
    pub started: AtomicBool,
}

impl Lifecycle {
    pub fn state(&self) -> VmState {
        match self.vcpus.paused() {
            (Some(why), parked) => VmState::Paused { why, parked },
            (None, _) if self.started.load(Ordering::SeqCst) => VmState::Running,
            (None, _) => VmState::Created,
        }
    }

    pub fn pause(&self) -> bool {
        self.vcpus.pause_for(PauseReason::Requested)
    }

    /// Resumes a paused VM; the pager retries what failed (and pauses it again if it still
    /// fails). Returns whether it was paused.
    pub fn resume(&self) -> bool {
        let was = self.vcpus.resume().is_some();
        if let (true, Some(p)) = (was, &self.pager) {
            p.retry();
        }
        was
    }
}
