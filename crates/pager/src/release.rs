//! Instant release (HyperDealer2 §4.3, `PUT /memory/release`): up to N guest pages that mirror
//! disk blocks taken out of guest RAM at once, without the guest's vCPUs and without the reclaim
//! thread: asked by the API's thread, served by the pager thread ([`Releases`]). Under the page
//! lock, in one hold:
//!
//! 1. the candidates: resident pages that mirror a disk block ([`StateTable::pick_clean`], in
//!    the victim order; for a cold-only release, only pages of sequential streams the guest has
//!    left cold, and probes of the others), less the victims of a reclaim
//!    chunk in flight (reclaim has decided their fate; see `reclaim.rs`), at most as many as
//!    keep the limit at or above [`MIN_LIMIT`]. Those already protected come first, in the
//!    same order ([`StateTable::pick_protected`]; not for a cold-only release): they need
//!    neither step 2 nor 3;
//! 2. those a guest disk read (or write) left writable are write-protected, one ioctl per run
//!    of neighbours, so what is checked next is what is dropped: a guest (or device) write from
//!    now on faults and waits for the page lock (the others have been protected since they came
//!    to hold their blocks);
//! 3. each of those has its keyed digest compared with the block's (`digest.rs`); one that
//!    differs was written by the guest, is an ordinary dirty page from now on and stays (its
//!    next write costs one fault); the others are protected mirrors. If some differed, steps 1–3
//!    run again with others, each round checking at least as many as the rounds before it: a
//!    guest that keeps rewriting its files leaves many such candidates (the pages its disk
//!    writes made mirrors), and a release should still obtain what it asked;
//! 4. the last of the unchanged ones, as many as the reclamation cache holds, are moved into it
//!    (`UFFDIO_MOVE`, one call per run: their page table entries change hands, nothing is
//!    copied; `released.rs`, `sys/slots.rs`); a page that cannot move (KSM-merged, say, or on a
//!    kernel before 6.8) is copied into its slot instead (`UFFDIO_COPY`);
//! 5. the rest are dropped with `MADV_DONTNEED`, one call per run, and all marked `OnDisk`: each
//!    refaults from its block (or from the reclamation cache);
//! 6. the limit falls by the number released (a VM without a limit gets one at its resident
//!    pages after the release), and the release answers.
//!
//! What the released pages' leaving tells the ghost cache (their blocks enter it) and the
//! dwell clock (the time each left) is recorded after the answer (`StateTable::record_released`):
//! by the releasing thread once it has answered ([`Pager::after_release`](crate::Pager::after_release)),
//! a few hundred pages to a hold of the page lock, and by every holder of the page lock a few
//! hundred at a time on its way in. That bookkeeping cost 0.3–1.2 µs a page here, as long as the
//! rest of a release of 10,000 ready pages together, and the host does not wait for it; nor
//! does the release, when the thread it wakes as it lets the page lock go takes its core.
//!
//! With release readiness (`--release-ready`, [`make_ready`]) a `release-ready` thread does
//! steps 2–3 ahead for the first candidates, so a release finds them protected and checked.
//!
//! A VM still on plain memory (no limit yet) is taken over first, as by a first limit: its
//! mirrors were recorded all along, and the takeover keeps them.
//!
//! Nothing is written anywhere: a release does no I/O, and a device access waiting for the
//! page lock meanwhile finds the released pages not resident and installs or refaults them as
//! it would after reclaim.

use std::sync::{mpsc, Mutex};
use std::time::Instant;

use memvisor_devices::ram::{dontneed, GuestRange};
use vmm_sys_util::eventfd::EventFd;

use crate::core::{limit_to_bytes, PagerCore, PagerError, Pages, MIN_LIMIT};
use crate::digest::Digest;
use crate::page::{PageIdx, PAGE_SIZE};
use crate::state::page_state::PageState;
use crate::state::table::StateTable;
use crate::stats::EventCounters;
use crate::takeover::Takeover;

/// What a release did: the API's [`ReleaseResult`](memvisor_api::ReleaseResult).
pub type ReleaseOutcome = memvisor_api::ReleaseResult;

/// Where a release's time went, for the log (microseconds).
#[derive(Debug, Default)]
struct Times {
    pick: u64,
    check: u64,
    cache: u64,
    drop: u64,
    mark: u64,
    unlock: u64,
    /// Runs of neighbours dropped (one `madvise` each).
    runs: u64,
}

/// The CPU time the calling thread has used, in microseconds (0 if it cannot be read): beside a
/// release's wall time, it tells its own work from its waits for a CPU or a lock.
fn thread_cpu_us() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } != 0 {
        return 0;
    }
    let us = i128::from(t.tv_sec) * 1_000_000 + i128::from(t.tv_nsec) / 1_000;
    u64::try_from(us).unwrap_or(0)
}

/// How long the calling thread has waited, runnable, for a CPU, in microseconds (the second
/// field of `/proc/thread-self/schedstat`; 0 if it cannot be read): a release's wall time less
/// its CPU time and this is time it slept (for a lock, say).
fn thread_queued_us() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |ns| ns / 1_000)
}

/// The pages of `to_check` (resident and write-protected, under the page lock held by the
/// caller; sorted) whose content no longer has the digest given with each, sorted.
fn changed_mirrors(core: &PagerCore, to_check: &[(PageIdx, Digest)]) -> Vec<PageIdx> {
    to_check
        .iter()
        .filter(|&&(p, want)| {
            // SAFETY: `p` is resident and write-protected, and the caller holds the page lock:
            // it is mapped and nothing changes it while it is read; it lies in a live guest RAM
            // mapping.
            let page =
                unsafe { std::slice::from_raw_parts(core.map.host(p) as *const u8, PAGE_SIZE) };
            core.digest.page(page) != want
        })
        .map(|&(p, _)| p)
        .collect()
}

/// Records `changed` (sorted, write-protected for the check), mirrors a check found written
/// since their reads: counted, ordinary dirty pages and used from now on
/// ([`StateTable::mirror_changed`]), and writable again, one ioctl per run. The guest wrote them,
/// so it is likely to write them again, and each would otherwise cost it a write fault that
/// tells the pager nothing new. (In `bench consolidate`'s `mapreduce`, whose guests reuse the
/// frames of the input they read once, 12,000–32,000 of those faults a run followed the
/// releases.) A page left protected when the ioctl fails is made writable by its write fault.
pub(crate) fn mirrors_found_changed(core: &PagerCore, table: &mut StateTable, changed: &[PageIdx]) {
    EventCounters::add(&core.counters.mirrors_changed, changed.len() as u64);
    for &p in changed {
        table.mirror_changed(p);
    }
    for (first, k) in core.map.region_runs(changed) {
        if let Err(e) = core
            .uffd
            .unprotect(core.map.host(first), k as usize * PAGE_SIZE)
        {
            tracing::debug!("pager: changed mirrors {first}+{k} stay protected: {e}");
        }
    }
}

/// What [`protect_and_check`] found.
struct Checked {
    /// Protected and unchanged: protected mirrors now, with no digest left to check.
    unchanged: Vec<PageIdx>,
    /// Found changed by the guest: ordinary dirty pages now, writable again.
    changed: usize,
    /// Could not be protected, so not checked; as they were.
    unprotected: Vec<PageIdx>,
}

/// Steps 2–3 for `chosen` (sorted; resident mirrors, none in a reclaim chunk in flight), under
/// the page lock held by the caller: those a guest disk read or write left writable (they carry
/// a digest) are write-protected, one ioctl per run of neighbours, then compared with their
/// digests; the others have been protected since they came to hold their blocks. From then on a
/// guest or device write to an unchanged one faults and ends the mirror.
fn protect_and_check(core: &PagerCore, pages: &mut Pages, chosen: Vec<PageIdx>) -> Checked {
    let (to_check, mut unchanged): (Vec<PageIdx>, Vec<PageIdx>) = chosen
        .into_iter()
        .partition(|&p| pages.table.mirror_digest(p).is_some());
    let mut failed: Vec<(PageIdx, u32)> = Vec::new();
    for (first, k) in core.map.region_runs(&to_check) {
        if let Err(e) = core
            .uffd
            .write_protect(core.map.host(first), k as usize * PAGE_SIZE)
        {
            tracing::warn!("pager: cannot protect mirrors {first}+{k}: {e}");
            failed.push((first, k));
        }
    }
    let (to_check, unprotected): (Vec<PageIdx>, Vec<PageIdx>) = to_check
        .into_iter()
        .partition(|&p| !failed.iter().any(|&(f, k)| p >= f && p < f + k));
    let to_check: Vec<(PageIdx, Digest)> = to_check
        .into_iter()
        .filter_map(|p| Some((p, pages.table.mirror_digest(p)?)))
        .collect();
    let changed = changed_mirrors(core, &to_check);
    EventCounters::add(&core.counters.mirrors_checked, to_check.len() as u64);
    mirrors_found_changed(core, &mut pages.table, &changed);
    for &(p, _) in &to_check {
        if changed.binary_search(&p).is_err() {
            pages.table.mirror_protected(p);
            unchanged.push(p);
        }
    }
    unchanged.sort_unstable();
    Checked {
        unchanged,
        changed: changed.len(),
        unprotected,
    }
}

/// Whether a release of `n` pages may be asked: 1 to the VM's page count.
pub(crate) fn check_amount(core: &PagerCore, n: u64) -> Result<(), PagerError> {
    let size = core.map.pages();
    if n == 0 {
        return Err(PagerError::ReleaseNothing);
    }
    if n > u64::from(size) {
        return Err(PagerError::ReleaseTooMany { asked: n, size });
    }
    Ok(())
}

/// Releases up to `n` clean pages (see the module doc), asked at `t0`. `n` must be 1 to the VM's page count;
/// a pager that has not taken guest RAM over, or runs without the Swap Mapper, knows no page
/// that mirrors a block and releases none.
pub(crate) fn release_clean(
    core: &PagerCore,
    takeover: &Takeover,
    n: u64,
    cold_only: bool,
    t0: Instant,
) -> Result<ReleaseOutcome, PagerError> {
    check_amount(core, n)?;
    let mut out = ReleaseOutcome {
        asked_pages: n,
        ..ReleaseOutcome::default()
    };
    let mut times = Times::default();
    // For the debug line alone: a clock read and a /proc read a release need not make otherwise.
    let debug = tracing::enabled!(tracing::Level::DEBUG);
    let cpu0 = debug.then(thread_cpu_us);
    let queued0 = debug.then(thread_queued_us);
    let mut lap = Instant::now();
    let mut split = |t: &mut u64| {
        let now = Instant::now();
        *t += u64::try_from((now - lap).as_micros()).unwrap_or(u64::MAX);
        lap = now;
    };
    let mut pages = core.lock();
    EventCounters::add(&core.counters.releases, 1);
    if !core.mech.mapper {
        out.limit_bytes = limit_to_bytes(core.limit());
        return Ok(out);
    }
    // The Swap Mapper keeps its mirrors on plain memory too; the first release, like the first
    // limit, takes guest RAM over (`takeover.rs`), keeping them.
    takeover.attach(core, &mut pages)?;
    let min = u32::try_from(MIN_LIMIT / PAGE_SIZE as u64).unwrap_or(u32::MAX);
    let limit = core.limit();
    let base = if limit == u32::MAX {
        pages.table.resident()
    } else {
        limit
    };
    let want = u32::try_from(n)
        .unwrap_or(u32::MAX)
        .min(base.saturating_sub(min));
    // 1.–3. in rounds: candidates found changed stop mirroring, so the next round's are others;
    // each round checks at least as many as all before it, so a release that meets many
    // changed candidates (a guest rewriting its files) makes few rounds. Every round that goes
    // on found a page changed (it leaves the mirrors) or passed one over: the rounds end.
    let busy = pages.in_flight.len();
    // 0. Protected mirrors first, in the victim order: they need no check (release readiness
    // checked them, or they came back from their blocks), where a writable candidate costs a
    // protection change and a digest. A guest that writes its page cache makes new writable
    // mirrors at the head of the order faster than readiness (which paces itself then) checks
    // them; those come after. A cold-only release keeps the order as it is: it probes sequences.
    let mut drop_list: Vec<PageIdx> = if cold_only {
        Vec::new()
    } else {
        let mut v = pages
            .table
            .pick_protected(want.saturating_add(u32::try_from(busy).unwrap_or(u32::MAX)));
        v.retain(|p| pages.in_flight.binary_search(p).is_err());
        v.truncate(want as usize);
        v.sort_unstable();
        v
    };
    split(&mut times.pick);
    let mut passed_over: Vec<PageIdx> = Vec::new();
    let mut checked = 0usize;
    loop {
        let need = (want as usize).saturating_sub(drop_list.len());
        if need == 0 {
            break;
        }
        let take = need.max(checked);
        // 1. The candidates, less a reclaim chunk's victims and those taken or passed over.
        let asked = take + busy + drop_list.len() + passed_over.len();
        let mut chosen = pages.table.pick_clean(
            u32::try_from(asked).unwrap_or(u32::MAX),
            cold_only.then_some(t0),
        );
        chosen.retain(|p| {
            pages.in_flight.binary_search(p).is_err()
                && drop_list.binary_search(p).is_err()
                && passed_over.binary_search(p).is_err()
        });
        chosen.truncate(take);
        if chosen.is_empty() {
            break;
        }
        checked += chosen.len();
        chosen.sort_unstable();
        split(&mut times.pick);
        // 2.–3. Protected, so what is checked is what is dropped; checked.
        let checked_now = protect_and_check(core, &mut pages, chosen);
        out.changed_pages += checked_now.changed as u64;
        let mut fine = checked_now.unchanged;
        let failed = checked_now.unprotected;
        let changed = checked_now.changed;
        // Beyond `need`, the unchanged ones stay, protected mirrors now.
        fine.truncate(need);
        drop_list.extend(fine);
        drop_list.sort_unstable();
        passed_over.extend(failed);
        passed_over.sort_unstable();
        split(&mut times.check);
        if changed == 0 {
            break;
        }
    }
    core.counters.add_patterns(&mut pages.table.patterns);
    // 4. The last of the list, as many as the reclamation cache holds, moved into it.
    let room = pages.table.released.cache_capacity() as usize;
    if let Some(slots) = &core.release_slots {
        let tail = &drop_list[drop_list.len().saturating_sub(room)..];
        for (first, k) in core.map.region_runs(tail) {
            crate::takeover::split_huge(core, &mut pages, first, k);
            for at in pages.table.released.cache_place(first, k) {
                let len = at.n as usize * PAGE_SIZE;
                let moved = if at.empty_first {
                    slots
                        .empty(at.slot, at.n)
                        .map_err(|e| (0, crate::sys::uffd::UffdError::Io(e)))
                } else {
                    Ok(())
                }
                .and_then(|()| {
                    core.uffd
                        .move_pages(core.map.host(at.page), slots.addr(at.slot), len)
                });
                let Err((done, e)) = moved else { continue };
                // A kernel without `UFFDIO_MOVE` (before 6.8), or a page the process does not
                // hold alone: the rest are copied into their slots instead.
                let done = u32::try_from(done / PAGE_SIZE).unwrap_or(at.n).min(at.n);
                let rest = at.n - done;
                // SAFETY: the rest of the run is resident, protected and unchanged while the
                // page lock is held, so it is readable for the call.
                let copied = match unsafe {
                    core.uffd.copy(
                        core.map.host(at.page + done) as *const u8,
                        slots.addr(at.slot + done),
                        rest as usize * PAGE_SIZE,
                        false,
                    )
                } {
                    Ok(()) => {
                        EventCounters::add(&core.counters.release_cache_copies, u64::from(rest));
                        rest
                    }
                    Err(c) => {
                        tracing::debug!(
                            "pager: release can neither move ({e}) nor copy ({c}) pages {}+{} \
                             into the reclamation cache; they are dropped",
                            at.page + done,
                            rest
                        );
                        let copied = c.pages.min(rest);
                        EventCounters::add(&core.counters.release_cache_copies, u64::from(copied));
                        copied
                    }
                };
                for q in at.page + done + copied..at.page + at.n {
                    pages.table.released.cache_remove(q);
                }
            }
        }
    }
    split(&mut times.cache);
    // 5. Dropped, one call per run; a run that cannot be stays resident (and protected).
    let mut failed: Vec<(PageIdx, u32)> = Vec::new();
    for (first, k) in core.map.region_runs(&drop_list) {
        times.runs += 1;
        crate::takeover::split_huge(core, &mut pages, first, k);
        let range = GuestRange {
            addr: core.map.gpa(first),
            len: u64::from(k) * PAGE_SIZE as u64,
        };
        if let Err(e) = dontneed(&core.mem, range) {
            tracing::warn!("pager: release cannot drop pages {first}+{k}: {e}");
            failed.push((first, k));
        }
    }
    split(&mut times.drop);
    let now = Instant::now();
    for p in drop_list {
        if failed.iter().any(|&(f, k)| p >= f && p < f + k) {
            pages.table.released.cache_remove(p);
            continue;
        }
        let PageState::Mirrored(ib) = pages.table.state(p) else {
            unreachable!("a page picked clean and checked unchanged mirrors its block");
        };
        pages.table.release(p, ib, now);
        pages.prefetched[p as usize] = false;
        out.released_pages += 1;
    }
    split(&mut times.mark);
    // 6. The limit falls by what was released.
    let released = u32::try_from(out.released_pages).unwrap_or(u32::MAX);
    if released > 0 {
        let resident = pages.table.resident();
        let _ = core.limit.fetch_update(
            std::sync::atomic::Ordering::SeqCst,
            std::sync::atomic::Ordering::SeqCst,
            |l| {
                Some(if l == u32::MAX {
                    resident.max(min)
                } else {
                    l.saturating_sub(released).max(min)
                })
            },
        );
    }
    EventCounters::add(
        &core.counters.released_refaults,
        pages.table.released.take_refaults(),
    );
    drop(pages);
    split(&mut times.unlock);
    out.micros = u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX);
    out.limit_bytes = limit_to_bytes(core.limit());
    EventCounters::add(&core.counters.released_pages, out.released_pages);
    EventCounters::add(&core.counters.release_changed, out.changed_pages);
    EventCounters::add(&core.counters.release_us, out.micros);
    tracing::debug!(
        "pager: released {} of {n} pages ({} changed) in {} us, {} of them on a CPU and {} \
         waiting for one: choosing {} us, protecting and checking {} us, moving into the \
         reclamation cache {} us, dropping {} us in {} runs, marking them out {} us, handing \
         the page lock on {} us",
        out.released_pages,
        out.changed_pages,
        out.micros,
        cpu0.map_or(0, |c| thread_cpu_us().saturating_sub(c)),
        queued0.map_or(0, |q| thread_queued_us().saturating_sub(q)),
        times.pick,
        times.check,
        times.cache,
        times.drop,
        times.runs,
        times.mark,
        times.unlock
    );
    Ok(out)
}

/// Releases handed to the pager thread, which serves them between fault events at the nice
/// value of the threads a guest waits on (`--serving-nice`): the host waits for a release as a
/// guest waits for its faults, and on a loaded host a release at the VMM's own priority waited
/// out other threads' time slices in the middle of its drop (10,000 ready pages in 5–74 ms of
/// which 3–73 ms dropping, where the drop takes 2–3 ms on an idle core). The releasing thread
/// asks and waits ([`Releases::ask`]); the pager thread wakes on [`Releases::fd`] and serves
/// them ([`Releases::serve`]).
pub(crate) struct Releases {
    /// An eventfd the pager thread polls beside the userfaultfd.
    wake: EventFd,
    asked: Mutex<(mpsc::Sender<Asked>, mpsc::Receiver<Asked>)>,
    /// The pager thread serves releases; `false` once it has stopped.
    serving: std::sync::atomic::AtomicBool,
}

/// One release asked of the pager thread: its arguments, when it was asked, and where to
/// answer.
struct Asked {
    n: u64,
    cold_only: bool,
    t0: Instant,
    answer: mpsc::Sender<Result<ReleaseOutcome, PagerError>>,
}

impl Releases {
    pub fn new() -> std::io::Result<Releases> {
        Ok(Releases {
            wake: EventFd::new(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC)?,
            asked: Mutex::new(mpsc::channel()),
            serving: std::sync::atomic::AtomicBool::new(true),
        })
    }

    /// The descriptor the pager thread polls: readable when releases are asked.
    pub fn fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.wake)
    }

    /// Asks the pager thread for a release of `n` pages and waits for its answer. `n` and the
    /// takeover were checked by the caller (the pager thread's filter has no `UFFDIO_REGISTER`).
    pub fn ask(&self, n: u64, cold_only: bool, t0: Instant) -> Result<ReleaseOutcome, PagerError> {
        let (answer, answered) = mpsc::channel();
        {
            let asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
            if !self.serving.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(PagerError::Stopped);
            }
            let _ = asked.0.send(Asked {
                n,
                cold_only,
                t0,
                answer,
            });
        }
        if let Err(e) = self.wake.write(1) {
            tracing::debug!("pager: cannot wake the pager thread for a release: {e}");
        }
        // The pager thread answers every release it takes; if it stops first, those left are
        // dropped with it (`stopped`), their answers too.
        answered.recv().unwrap_or(Err(PagerError::Stopped))
    }

    /// The pager thread: serves the releases asked since the last call, each in one hold of
    /// the page lock ([`release_clean`]).
    pub fn serve(&self, core: &PagerCore, takeover: &Takeover) {
        // Non-blocking: nothing to read is not an error here.
        let _ = self.wake.read();
        loop {
            let next = {
                let asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
                asked.1.try_recv()
            };
            let Ok(a) = next else { return };
            let done = release_clean(core, takeover, a.n, a.cold_only, a.t0);
            let _ = a.answer.send(done);
        }
    }

    /// The pager thread has stopped: releases asked from now on fail, and those it left are
    /// dropped (their askers get [`PagerError::Stopped`]).
    pub fn stopped(&self) {
        let asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
        self.serving
            .store(false, std::sync::atomic::Ordering::SeqCst);
        while asked.1.try_recv().is_ok() {}
    }
}

/// Pages made ready in one hold of the page lock, so a guest fault waits at most that long.
const READY_CHUNK: usize = 256;

/// How often [`make_ready`] looks for new candidates, at most and at least ([`ReadyPace`]).
pub(crate) const READY_PERIOD: std::time::Duration = std::time::Duration::from_millis(100);
pub(crate) const READY_PERIOD_MAX: std::time::Duration = std::time::Duration::from_millis(25_600);

/// What one pass of [`make_ready`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ReadyPass {
    /// Candidates protected and checked.
    pub checked: u64,
    /// Of them, found unchanged and so made ready.
    pub made: u64,
    /// Pages made ready (by earlier passes) that guest writes took back since the last pass.
    pub lost: u64,
    /// A release was served since the last pass.
    pub released: bool,
}

/// The period of release readiness. A guest that writes the frames at the head of the victim
/// order (its page cache reusing its oldest pages, which are HyperDealer2's first candidates)
/// takes back what is made ready, paying a write fault for each, and each pass then mostly
/// replaces what it took back: while what a pass makes ready is no more than twice what the
/// guest took back since the last one, the period doubles, up to [`READY_PERIOD_MAX`]; when the
/// guest took back none, or less than an eighth of what the pass made ready, it halves again.
/// While the host takes memory from the VM (a release since the last pass), readiness is what
/// it is for: the period is the shortest whatever the guest takes back.
#[derive(Debug)]
pub(crate) struct ReadyPace {
    period: std::time::Duration,
}

impl ReadyPace {
    pub fn new() -> Self {
        ReadyPace {
            period: READY_PERIOD,
        }
    }

    /// The wait before the next pass, after `pass`.
    pub fn next(&mut self, pass: ReadyPass) -> std::time::Duration {
        if pass.released {
            self.period = READY_PERIOD;
        } else if pass.lost > 0 && pass.lost * 2 >= pass.made {
            self.period = (self.period * 2).min(READY_PERIOD_MAX);
        } else if pass.lost * 8 < pass.made || pass.lost == 0 {
            self.period = (self.period / 2).max(READY_PERIOD);
        }
        self.period
    }
}

/// Release readiness (`--release-ready`): steps 1–3 done ahead of a release, so that the
/// release itself only moves, drops and records (steps 4–6). Of the first `ready` candidates in
/// the victim order, those a guest disk read or write left writable are write-protected and
/// checked now ([`check_in_chunks`]). Nothing is done while no mirror has
/// been recorded or has left since the last call (`generation`, updated); `releases`, the
/// releases served by the last call, is updated too.
///
/// The price: a guest write to a page made ready faults once (and ends the mirror), as every
/// write to a mirrored page refaulted from its block does ([`ReadyPace`] keeps it down).
pub(crate) fn make_ready(
    core: &PagerCore,
    ready: u32,
    generation: &mut u64,
    releases: &mut u64,
) -> ReadyPass {
    let served = crate::stats::get(&core.counters.releases);
    let mut pass = ReadyPass {
        released: served != *releases,
        ..ReadyPass::default()
    };
    *releases = served;
    let todo: Vec<PageIdx> = {
        let mut pages = core.lock();
        pass.lost = pages.table.take_ready_lost();
        EventCounters::add(&core.counters.release_ready_lost, pass.lost);
        let now = pages.table.mirror_generation();
        if !core.mech.mapper || !pages.attached || now == *generation {
            return pass;
        }
        *generation = now;
        let mut v = pages.table.pick_clean(ready, None);
        v.retain(|&p| pages.table.mirror_digest(p).is_some());
        v.sort_unstable();
        v
    };
    (pass.checked, pass.made) = check_in_chunks(core, &todo, |table, p| table.made_ready(p));
    EventCounters::add(&core.counters.release_ready_checked, pass.checked);
    pass
}

/// Steps 2–3 of a release for `todo` (sorted writable mirrors picked without the page lock),
/// [`READY_CHUNK`] at a time, each chunk under its own hold of the page lock and each page
/// checked again there (still a writable mirror, not in a reclaim chunk, not cooling in the
/// victim cache); `unchanged` is called for each page found unchanged. Returns the pages
/// checked and those unchanged.
fn check_in_chunks(
    core: &PagerCore,
    todo: &[PageIdx],
    mut unchanged: impl FnMut(&mut StateTable, PageIdx),
) -> (u64, u64) {
    let (mut checked, mut kept) = (0, 0);
    for chunk in todo.chunks(READY_CHUNK) {
        let mut pages = core.lock();
        let chosen: Vec<PageIdx> = chunk
            .iter()
            .copied()
            .filter(|&p| {
                pages.table.mirror_digest(p).is_some()
                    && pages.table.victims.is_candidate(p)
                    && pages.in_flight.binary_search(&p).is_err()
            })
            .collect();
        checked += chosen.len() as u64;
        let found = protect_and_check(core, &mut pages, chosen);
        for &p in &found.unchanged {
            unchanged(&mut pages.table, p);
        }
        kept += found.unchanged.len() as u64;
    }
    (checked, kept)
}

/// Before a migration's pause, the VM running: every mirror a guest disk read left writable is
/// write-protected and checked against its block now ([`check_in_chunks`]). The pause then
/// finds them protected, recorded as their blocks without a look at their content, or changed,
/// copied: the paused source would otherwise digest each one (288 ms of downtime with 512 MiB
/// of page cache read just before). Returns the pages checked.
pub(crate) fn protect_mirrors(core: &PagerCore) -> u64 {
    let todo: Vec<PageIdx> = {
        let pages = core.lock();
        if !core.mech.mapper || !pages.attached {
            return 0;
        }
        // The states first, a slice read: only a mirror may carry a digest.
        let table = &pages.table;
        (0..table.len())
            .zip(table.states())
            .filter(|&(p, s)| {
                matches!(s, PageState::Mirrored(_)) && table.mirror_digest(p).is_some()
            })
            .map(|(p, _)| p)
            .collect()
    };
    check_in_chunks(core, &todo, |_, _| {}).0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pass(made: u64, lost: u64) -> ReadyPass {
        ReadyPass {
            checked: made,
            made,
            lost,
            released: false,
        }
    }

    #[test]
    fn readiness_slows_down_while_the_guest_takes_back_what_it_makes_ready() {
        let mut pace = ReadyPace::new();
        // An idle guest: 10,000 made ready once, none taken back, nothing more to do.
        assert_eq!(pace.next(pass(10_000, 0)), READY_PERIOD);
        assert_eq!(pace.next(pass(0, 0)), READY_PERIOD);
        // A guest reading new files: new candidates made ready, a few taken back.
        assert_eq!(pace.next(pass(2_000, 100)), READY_PERIOD);
        // A guest that writes them: each pass makes ready what it took back.
        let periods: Vec<u128> = (0..10)
            .map(|_| pace.next(pass(600, 600)).as_millis())
            .collect();
        assert_eq!(
            periods,
            [200, 400, 800, 1600, 3200, 6400, 12800, 25600, 25600, 25600]
        );
        // Between the two: the period stays.
        assert_eq!(pace.next(pass(4_000, 1_000)), READY_PERIOD_MAX);
        // It stops: back to the shortest period, halving.
        let periods: Vec<u128> = (0..9).map(|_| pace.next(pass(0, 0)).as_millis()).collect();
        assert_eq!(periods, [12800, 6400, 3200, 1600, 800, 400, 200, 100, 100]);
        // The host takes memory from the VM: the shortest period, then slowing down again.
        let released = ReadyPass {
            released: true,
            ..pass(600, 600)
        };
        assert_eq!(pace.next(released), READY_PERIOD);
        assert_eq!(pace.next(pass(600, 600)).as_millis(), 200);
        assert_eq!(pace.next(released), READY_PERIOD);
    }
}
