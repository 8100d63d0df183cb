//! Stopping and starting vCPUs: kicks out of `KVM_RUN`, pausing the VM with a reason, parking
//! and waking vCPU threads, and ending them.
//!
//! Protocol:
//! 1. Each vCPU thread registers itself and points the kick signal's handler at its
//!    `kvm_run.immediate_exit` ([`crate::signals::set_immediate_exit`]). A kick (SIGUSR1 to that
//!    thread) makes a running `KVM_RUN` return `EINTR`, and one that lands while the thread is
//!    outside `KVM_RUN` makes the next `KVM_RUN` return at once: no kick is lost, so one is
//!    enough.
//! 2. [`Vcpus::pause`] records the reason, raises the pause flag and kicks every vCPU. A vCPU
//!    checks the flag before each `KVM_RUN` and, when it is up, parks on a condition variable
//!    ([`Vcpus::park`]) until [`Vcpus::resume`] or [`Vcpus::end`] wakes it.
//! 3. [`Vcpus::end`] stops every vCPU for good: the flag each checks, then a kick.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use memvisor_pager::{PagerFailure, VcpuControl};

use crate::signals;

/// Why a VM is paused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PauseReason {
    /// The pager could not move a page (swap or image I/O failed).
    #[error("{0}")]
    Pager(PagerFailure),
    /// Someone asked for it ([`crate::Vm::pause`]).
    #[error("requested")]
    Requested,
    /// A disk image's file system is full: the write waits for the resume (QEMU's
    /// `werror=enospc`).
    #[error("{0}")]
    DiskFull(String),
    /// A migration's connection broke with pages still on the source (`migrate/incoming.rs`).
    #[error("{0}")]
    Migration(String),
    /// A migration's destination, its vCPU threads started, until the source lets the VM go
    /// (`migrate/incoming.rs`).
    #[error("the migration's source has not let the VM go yet")]
    Incoming,
}

#[derive(Debug, Default)]
struct State {
    /// Thread ids of the running vCPU threads.
    tids: Vec<i32>,
    paused: Option<PauseReason>,
    /// vCPU threads parked while paused.
    parked: usize,
    /// A snapshot's request to the parked vCPUs to save their state: the round asked for, the
    /// last round each vCPU (by id) answered, and the answers.
    save_round: u64,
    answered: std::collections::HashMap<u8, u64>,
    saved: Vec<(u8, Result<crate::cpu_state::VcpuState, String>)>,
}

/// The vCPUs of one VM, as a whole.
#[derive(Debug, Default)]
pub struct Vcpus {
    state: Mutex<State>,
    /// Wakes parked vCPUs (resume, end).
    wake: Condvar,
    /// Raised while paused; read by every vCPU before each `KVM_RUN`.
    pausing: AtomicBool,
    /// Raised while paused because of a pager failure (reclaim waits for the resume).
    pager_failed: AtomicBool,
    ended: AtomicBool,
}

impl Vcpus {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers the calling thread as a vCPU thread.
    pub(crate) fn register(&self) {
        let tid = signals::current_tid();
        self.lock().tids.push(tid);
    }

    /// The calling vCPU thread is done.
    pub(crate) fn unregister(&self) {
        let tid = signals::current_tid();
        self.lock().tids.retain(|&t| t != tid);
    }

    fn kick_all(&self, state: &State) {
        for &tid in &state.tids {
            if let Err(e) = signals::kick(tid) {
                // ESRCH: that vCPU has ended and needs no kick.
                if e.raw_os_error() != Some(libc::ESRCH) {
                    tracing::warn!("cannot kick vCPU thread {tid}: {e}");
                }
            }
        }
    }

    /// Pauses the VM for `why`; returns whether it was running. The first reason is kept,
    /// except that a failure replaces a requested pause (the failure is what the operator must
    /// mend and a resume retries).
    pub fn pause_for(&self, why: PauseReason) -> bool {
        let mut state = self.lock();
        if let PauseReason::Pager(_) = why {
            self.pager_failed.store(true, Ordering::SeqCst);
        }
        if let Some(was) = &state.paused {
            if *was == PauseReason::Requested && why != PauseReason::Requested {
                tracing::warn!("the paused VM stays paused: {why}");
                state.paused = Some(why);
            }
            return false;
        }
        match why {
            PauseReason::Incoming => tracing::debug!("pausing the VM: {why}"),
            _ => tracing::warn!("pausing the VM: {why}"),
        }
        state.paused = Some(why);
        self.pausing.store(true, Ordering::SeqCst);
        self.kick_all(&state);
        true
    }

    /// Ends a pause; returns why the VM was paused, if it was.
    pub fn resume(&self) -> Option<PauseReason> {
        let mut state = self.lock();
        let was = state.paused.take();
        self.pager_failed.store(false, Ordering::SeqCst);
        match &was {
            Some(PauseReason::Incoming) => {}
            Some(why) => tracing::info!("resuming the VM (paused because {why})"),
            None => {}
        }
        self.pausing.store(false, Ordering::SeqCst);
        drop(state);
        self.wake.notify_all();
        was
    }

    /// Why the VM is paused, if it is, and how many vCPUs have parked.
    pub fn paused(&self) -> (Option<PauseReason>, usize) {
        let state = self.lock();
        (state.paused.clone(), state.parked)
    }

    /// Whether a vCPU must park before entering the guest again.
    pub(crate) fn must_park(&self) -> bool {
        self.pausing.load(Ordering::SeqCst)
    }

    /// Called by vCPU thread `id` outside `KVM_RUN`: waits while the VM is paused and not
    /// ended, saving its state with `save` whenever a snapshot asks ([`Self::save_all`]).
    pub(crate) fn park(
        &self,
        id: u8,
        save: &mut dyn FnMut() -> Result<crate::cpu_state::VcpuState, String>,
    ) {
        let mut state = self.lock();
        state.parked += 1;
        // A snapshot may be waiting for the last vCPU to park (`save_all`).
        self.wake.notify_all();
        while state.paused.is_some() && !self.ended() {
            let round = state.save_round;
            if state.answered.get(&id).copied().unwrap_or(0) < round {
                drop(state);
                let saved = save();
                state = self.lock();
                state.answered.insert(id, round);
                state.saved.push((id, saved));
                self.wake.notify_all();
                continue;
            }
            state = self.wake.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state.parked -= 1;
    }

    /// For a snapshot of a paused VM: waits until every vCPU thread has parked, has each save
    /// its state on its own thread, and returns the states by vCPU id.
    pub(crate) fn save_all(
        &self,
        within: Duration,
    ) -> Result<Vec<crate::cpu_state::VcpuState>, String> {
        let t0 = std::time::Instant::now();
        let mut state = self.lock();
        while state.parked < state.tids.len() {
            if t0.elapsed() > within || state.paused.is_none() || self.ended() {
                return Err("the vCPUs did not stop".into());
            }
            // Woken as each vCPU parks (`park`): a snapshot's or a migration's pause waits
            // for the last one, no longer.
            state = self
                .wake
                .wait_timeout(state, Duration::from_millis(10))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let n = state.tids.len();
        state.save_round += 1;
        state.saved.clear();
        self.wake.notify_all();
        while state.saved.len() < n {
            if t0.elapsed() > within || self.ended() {
                return Err("the vCPUs did not save their state".into());
            }
            state = self
                .wake
                .wait_timeout(state, Duration::from_millis(10))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let mut saved = std::mem::take(&mut state.saved);
        saved.sort_by_key(|(id, _)| *id);
        saved
            .into_iter()
            .map(|(id, r)| r.map_err(|e| format!("vCPU {id}: {e}")))
            .collect()
    }

    /// Waits on `state` while the VM is paused and not ended.
    fn while_paused<'a>(&'a self, mut state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        while state.paused.is_some() && !self.ended() {
            state = self.wake.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state
    }

    /// Stops every vCPU for good.
    pub(crate) fn end(&self) {
        self.ended.store(true, Ordering::SeqCst);
        let state = self.lock();
        self.kick_all(&state);
        drop(state);
        self.wake.notify_all();
    }

    pub(crate) fn ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }
}

impl memvisor_devices::PauseVm for Vcpus {
    fn pause_until_resumed(&self, why: String) -> bool {
        self.pause_for(PauseReason::DiskFull(why));
        drop(self.while_paused(self.lock()));
        !self.ended()
    }
}

impl VcpuControl for Vcpus {
    fn is_vcpu(&self, tid: i32) -> bool {
        self.lock().tids.contains(&tid)
    }

    fn kick(&self, tid: i32) -> std::io::Result<()> {
        signals::kick(tid)
    }

    fn pause(&self, why: PagerFailure) {
        self.pause_for(PauseReason::Pager(why));
    }

    fn pager_paused(&self) -> bool {
        self.pager_failed.load(Ordering::SeqCst)
    }

    /// The largest guest time of the vCPU threads, from `/proc/self/task/TID/stat`.
    fn guest_time(&self) -> Option<Duration> {
        let tids = self.lock().tids.clone();
        tids.iter()
            .filter_map(|tid| {
                let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
                guest_ticks(&stat)
            })
            .max()
            .map(ticks_to_duration)
    }
}

/// Field 43 of a `/proc/PID/stat` line, `guest_time`: clock ticks this thread ran a vCPU in
/// guest mode. Fields are counted after the command name, which may hold spaces and `)`.
fn guest_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts at field 3 (the state).
    rest.split_whitespace().nth(43 - 3)?.parse().ok()
}

fn ticks_to_duration(ticks: u64) -> Duration {
    // SAFETY: sysconf takes no pointers.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .ok()
        .filter(|&h| h > 0)
        .unwrap_or(100);
    Duration::from_secs(ticks / hz) + Duration::from_nanos(ticks % hz * 1_000_000_000 / hz)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn guest_time_is_read_from_the_thread_s_stat() {
        let line = "4242 (vcpu 0) (x)) S 1 2 3 0 -1 4194560 10 0 0 0 64 137 0 0 20 0 7 0 \
                    100 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 -1 1 0 0 0 50 0 0 0 0";
        assert_eq!(guest_ticks(line), Some(50));
        assert_eq!(guest_ticks("4242 (short) S 1 2"), None);
        assert_eq!(guest_ticks("no parenthesis"), None);
        assert_eq!(ticks_to_duration(0), Duration::ZERO);
        // This thread runs no guest: its own stat line has the field, at 0.
        let own = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        assert_eq!(guest_ticks(&own), Some(0));
        let v = Vcpus::default();
        assert_eq!(v.guest_time(), None, "no vCPU threads");
        v.register();
        assert_eq!(v.guest_time(), Some(Duration::ZERO));
    }

    #[test]
    fn a_parked_thread_waits_for_resume_and_a_pager_failure_outranks_a_request() {
        let v = Arc::new(Vcpus::default());
        assert!(v.pause_for(PauseReason::Requested));
        assert!(!v.pager_paused(), "a requested pause lets reclaim go on");
        let failure = PauseReason::Pager(PagerFailure::Reclaim {
            error: "later".into(),
        });
        assert!(!v.pause_for(failure.clone()));
        assert!(v.pager_paused());
        assert!(!v.pause_for(PauseReason::Requested));
        assert!(v.must_park());
        let t = {
            let v = v.clone();
            std::thread::spawn(move || v.park(0, &mut || Err("no vCPU".into())))
        };
        while v.paused().1 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(!t.is_finished());
        assert_eq!(v.resume(), Some(failure));
        t.join().unwrap();
        assert_eq!(v.paused(), (None, 0));
        assert!(!v.must_park());
        assert!(!v.pager_paused());
        assert_eq!(v.resume(), None);
    }

    #[test]
    fn ending_wakes_parked_threads() {
        let v = Arc::new(Vcpus::default());
        v.pause_for(PauseReason::Requested);
        let t = {
            let v = v.clone();
            std::thread::spawn(move || v.park(0, &mut || Err("no vCPU".into())))
        };
        while v.paused().1 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        v.end();
        t.join().unwrap();
        assert!(v.ended());
    }
}
