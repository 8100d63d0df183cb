//! Working-set sampling (ESX §5.3): how much of its memory a VM actively uses, measured without
//! the guest's help.
//!
//! Each period (`sample_period`, 30 s by default, of the VM's execution time: see
//! [`PeriodClock`]) the pager thread:
//! 1. brings back the pages of the last period's sample that were not touched (no fault came for
//!    them), counting how many were: a touch is a fault on a sampled page, which loads it from
//!    the sample store like any other store;
//! 2. feeds `touched / sampled` to the VM's [`ActiveEstimate`] (fast and slow averages);
//! 3. picks `sample_pages` resident pages at random (100 by default) and takes each out of guest
//!    RAM: write-protected first, copied to a slot of the [`SampleStore`] (host memory), then
//!    dropped, so its next access, read or write, faults, and nothing written is lost in
//!    between (a write waits on the protection and then faults the page back in).
//!
//! A sampled page comes back dirty: a clean page's swap block or a mirrored page's image block is
//! given up when it is taken out. Sampling runs once guest RAM is under the pager (a limit, the
//! Swap Mapper or the Preventer); before that nothing can fault, and the estimate stays at its
//! start (all active).
//!
//! A period is counted in the time the guest ran (ESX: "a configurable sampling period defined
//! in units of VM execution time"), not on the wall clock. A page counts as active when the
//! guest touches it within a period, so a wall-clock period would read a VM that runs slowly as
//! idle: a VM that thrashes spends most of its time waiting for its own faults, sweeps its
//! working set more slowly, touches fewer of its sampled pages per second, would be given
//! less memory, and would thrash more. Counted in guest time, that feedback is gone, and
//! neither a VM the host paused nor one the host did not run for a while looks idle.
//!
//! Until a period has been measured, a period lasts at most [`FIRST_PERIOD`] (ESX does not say
//! how its first estimate is made), and until the takeover the pager thread looks for it every
//! [`ATTACH_LOOK`] of wall-clock time, so the first sample is taken as the takeover ends. The
//! estimate starts at all active, and a host that shrinks VMs by their estimates cannot tell
//! them apart until one is measured: with a 5 s period and six VMs on two cores, the first
//! sample was taken up to a period after the takeover and measured a period later, about 20 s of
//! wall-clock time, while the host held busy VMs and ones with idle page cache at the same
//! target (`bench consolidate --scenario balance`, docs/bench.md). A short first period is
//! noisier, and the next periods correct it: the fast average within a period or two, the slow
//! one more slowly.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use memvisor_devices::ram::{dontneed, GuestRange};
use memvisor_policy::ActiveEstimate;

use crate::core::{PagerCore, Pages};
use crate::page::{PageIdx, PAGE_SIZE};
use crate::state::page_state::PageState;
use crate::store::{PageStore, StoreCounters};

/// The longest the first measured period lasts, in the guest's execution time: a VM's first
/// estimate comes within about this much of the pager taking RAM over, not a whole period
/// later (see the module doc).
pub const FIRST_PERIOD: Duration = Duration::from_millis(500);

/// How often the pager thread looks whether the takeover has happened, on the wall clock, until
/// it has: the first sample is taken within this much of it.
pub const ATTACH_LOOK: Duration = Duration::from_millis(100);

/// How long a period of a sampler set to `period` lasts: [`FIRST_PERIOD`] at most until one has
/// been `measured`.
fn period_for(period: Duration, measured: bool) -> Duration {
    if measured {
        period
    } else {
        period.min(FIRST_PERIOD)
    }
}

/// A sampling period ends once the guest has run this many periods' worth of wall-clock time at
/// the most, whether or not it ran: a guest whose vCPUs halt (or a VMM whose kernel does not
/// report guest time) is still sampled, and reads as idle.
pub const MAX_STRETCH: u32 = 10;

/// Guest time is reported in clock ticks (10 ms): the shortest wait before looking again.
const MIN_RECHECK: Duration = Duration::from_millis(20);

/// When a sampling period ends: after `period` of the guest's execution time (the busiest vCPU's
/// time in guest mode, [`VcpuControl::guest_time`](crate::VcpuControl::guest_time)), or after
/// [`MAX_STRETCH`] periods of wall-clock time; after `period` of wall-clock time when guest time
/// is not known. Guest time runs no faster than the wall clock, so the guest's time is read only
/// when the period could be over, not at every fault.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PeriodClock {
    period: Duration,
    started: Instant,
    guest_at_start: Option<Duration>,
    /// The period is not over before this.
    check_at: Instant,
}

impl PeriodClock {
    pub fn start(period: Duration, now: Instant, guest: Option<Duration>) -> Self {
        PeriodClock {
            period,
            started: now,
            guest_at_start: guest,
            check_at: now + period,
        }
    }

    /// `None` when the period is over; otherwise how long to wait before asking again.
    /// `guest` reads the guest's execution time; it is called only when the period may be over.
    pub fn remaining(
        &mut self,
        now: Instant,
        guest: impl FnOnce() -> Option<Duration>,
    ) -> Option<Duration> {
        if now < self.check_at {
            return Some(self.check_at - now);
        }
        let wall = now.saturating_duration_since(self.started);
        let cap = self.period.saturating_mul(MAX_STRETCH);
        if wall >= cap {
            return None;
        }
        let ran = match (self.guest_at_start, guest()) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            _ => wall,
        };
        if ran >= self.period {
            return None;
        }
        let wait = (self.period - ran).max(MIN_RECHECK).min(cap - wall);
        self.check_at = now + wait;
        Some(wait)
    }
}

/// The sampling state of one VM.
pub(crate) struct Sampling {
    pub estimate: ActiveEstimate,
    /// This period's sample: page `out[n]` went to slot `n`.
    pub out: Vec<PageIdx>,
    /// The sample store's fault count when this period began.
    faults_at_start: u64,
    /// When this period ends.
    clock: PeriodClock,
    /// Periods measured so far.
    pub periods: u64,
    /// The last period's sample: pages touched, pages sampled.
    pub last: (u64, u64),
}

impl Sampling {
    pub fn new(period: Duration, guest: Option<Duration>) -> Self {
        Sampling {
            estimate: ActiveEstimate::default(),
            out: Vec::new(),
            faults_at_start: 0,
            clock: PeriodClock::start(period, Instant::now(), guest),
            periods: 0,
            last: (0, 0),
        }
    }
}

/// Working-set sampling: the sampling state and settings, working on the core it is given.
pub(crate) struct Sampler {
    /// Resident pages taken out each period (0: sampling is off).
    pages: u32,
    /// How long a period lasts.
    period: Duration,
    /// Taken before the page lock, never after it.
    state: Mutex<Sampling>,
}

impl Sampler {
    pub fn new(pages: u32, period: Duration, guest: Option<Duration>) -> Self {
        Sampler {
            pages,
            period,
            state: Mutex::new(Sampling::new(period_for(period, false), guest)),
        }
    }

    /// The sampling state (taken before the page lock, never after it).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Sampling> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn faults(core: &PagerCore) -> u64 {
        StoreCounters::get(&core.stores.sample.counters().faults)
    }

    /// Sampled pages touched so far this period, and pages sampled.
    pub(crate) fn sampled_so_far(core: &PagerCore, s: &Sampling) -> (u64, u64) {
        let n = s.out.len() as u64;
        ((Self::faults(core) - s.faults_at_start).min(n), n)
    }

    /// Pager thread: ends the sampling period if it is due and starts the next one. Returns how
    /// long until the next period ends (`None`: sampling is off).
    pub(crate) fn tick(&self, core: &PagerCore) -> Option<Duration> {
        if self.pages == 0 {
            return None;
        }
        let mut sampling = self.lock();
        let now = Instant::now();
        if let Some(wait) = sampling.clock.remaining(now, || core.vcpus.guest_time()) {
            return Some(wait);
        }
        let guest = core.vcpus.guest_time();
        let mut pages = core.lock();
        if !pages.attached {
            sampling.clock = PeriodClock::start(ATTACH_LOOK, now, None);
            return Some(ATTACH_LOOK);
        }
        let (touched, n) = Self::sampled_so_far(core, &sampling);
        let out = std::mem::take(&mut sampling.out);
        for (slot, &p) in (0u32..).zip(&out) {
            if pages.table.state(p) == PageState::Sampled(slot) {
                if let Err(e) = Self::bring_back(core, &mut pages, p, slot) {
                    tracing::warn!("pager: sampled page {p} could not be put back: {e}");
                }
            }
        }
        if n > 0 {
            sampling.estimate.period_done(touched, n);
            sampling.periods += 1;
            sampling.last = (touched, n);
        }
        sampling.out = self.take_sample(core, &mut pages);
        sampling.faults_at_start = Self::faults(core);
        let period = period_for(self.period, sampling.estimate.measured());
        sampling.clock = PeriodClock::start(period, now, guest);
        Some(period)
    }

    /// Puts untouched sampled page `p` back from its slot (not counted as a touch).
    fn bring_back(
        core: &PagerCore,
        pages: &mut Pages,
        p: PageIdx,
        slot: u32,
    ) -> std::io::Result<()> {
        let buf = pages.io.get(PAGE_SIZE);
        core.stores.sample.read(slot, buf)?;
        // SAFETY: `buf` is the page lock's I/O buffer, a page long, alive for the call.
        unsafe {
            core.uffd
                .copy(buf.as_ptr(), core.map.host(p), PAGE_SIZE, false)
        }?;
        pages.table.install_run(p, 1, false);
        Ok(())
    }

    /// Takes up to `sample_pages` random resident pages out of guest RAM into the sample store.
    fn take_sample(&self, core: &PagerCore, pages: &mut Pages) -> Vec<PageIdx> {
        let mut out = Vec::new();
        for p in pages.table.victims.sample(self.pages) {
            if pages.in_flight.binary_search(&p).is_ok() {
                continue;
            }
            let slot = u32::try_from(out.len()).unwrap_or(u32::MAX);
            let host = core.map.host(p);
            if let Err(e) = core.uffd.write_protect(host, PAGE_SIZE) {
                tracing::debug!("pager: cannot protect page {p} for a sample: {e}");
                continue;
            }
            // SAFETY: `p` is resident and write-protected: mapped, and unchanged while we copy.
            let content = unsafe { std::slice::from_raw_parts(host as *const u8, PAGE_SIZE) };
            if let Err(e) = core.stores.sample.write(slot, content) {
                tracing::debug!("pager: cannot keep page {p} for a sample: {e}");
                continue;
            }
            let range = GuestRange {
                addr: core.map.gpa(p),
                len: PAGE_SIZE as u64,
            };
            crate::takeover::split_huge(core, pages, p, 1);
            // A page that cannot be dropped stays resident (and protected: its next write
            // just ends the protection).
            if dontneed(&core.mem, range).is_ok() && pages.table.sample(p, slot) {
                pages.prefetched[p as usize] = false;
                out.push(p);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_period_is_counted_in_guest_time() {
        let t0 = Instant::now();
        let mut c = PeriodClock::start(S * 2, t0, Some(S * 100));
        // Not before the wall clock could have reached it: guest time is not even read.
        assert_eq!(c.remaining(t0 + S, || panic!("read too early")), Some(S));
        // 2 s later the guest has run 0.5 s (it waited for its faults): 1.5 s to go.
        assert_eq!(
            c.remaining(t0 + S * 2, || Some(S * 100 + S / 2)),
            Some(S * 3 / 2)
        );
        assert!(c
            .remaining(t0 + S * 3, || panic!("read too early"))
            .is_some());
        assert_eq!(c.remaining(t0 + S * 7 / 2, || Some(S * 101)), Some(S));
        assert_eq!(c.remaining(t0 + S * 9 / 2, || Some(S * 102)), None);
    }

    #[test]
    fn a_guest_that_does_not_run_is_sampled_after_max_stretch_periods() {
        let t0 = Instant::now();
        let mut c = PeriodClock::start(S, t0, Some(S));
        let mut now = t0;
        let mut waited = Duration::ZERO;
        while let Some(w) = c.remaining(now, || Some(S)) {
            assert!(w >= MIN_RECHECK.min(S * MAX_STRETCH - waited), "{w:?}");
            now += w;
            waited += w;
        }
        assert_eq!(waited, S * MAX_STRETCH);
    }

    #[test]
    fn without_guest_time_a_period_is_wall_clock_time() {
        let t0 = Instant::now();
        let mut c = PeriodClock::start(S, t0, None);
        assert_eq!(c.remaining(t0 + S / 2, || None), Some(S / 2));
        assert_eq!(c.remaining(t0 + S, || None), None);
        // Guest time that appears only later is no use without its start.
        let mut c = PeriodClock::start(S, t0, None);
        assert_eq!(c.remaining(t0 + S, || Some(Duration::ZERO)), None);
        // Guest time that went backwards (the busiest vCPU ended) counts as none run.
        let mut c = PeriodClock::start(S, t0, Some(S * 5));
        assert_eq!(c.remaining(t0 + S, || Some(S)), Some(S));
    }
}
