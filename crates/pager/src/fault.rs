//! The fault path: what the pager thread does with one fault event.
//!
//! 1. **Missing fault** on a page that is not mapped: the state table says what to install — a
//!    zero page (with the following never-touched pages, in one `UFFDIO_ZEROPAGE`, or real
//!    zeroed pages for a write), or a load from the page's store slot with the run of neighbours
//!    whose slots follow it (one store read, one `UFFDIO_COPY`). Pages loaded for a read come in
//!    clean and write-protected and keep their slot. The pager thread reads the swap file or an
//!    image without the page lock (a read the disk holds up must not hold up reclaim, devices
//!    and `GET /stats`): the state table notes the run as a read in flight, and only the pages
//!    that did not change state are installed from what was read (see
//!    [`StateTable::begin_read`]); should the faulting page itself have changed, its fault is
//!    served again under the lock.
//! 2. **Write fault** on a write-protected page: the page is dirty from now on; its slot is
//!    freed and the protection removed, which wakes the writer.
//! 3. A vCPU's write to a page whose content is in a store may go to the Preventer instead
//!    (`preventer.rs`).
//! 4. A page instant release took (`release.rs`) whose content the reclamation cache still
//!    holds comes back from that copy, under the page lock, with no read (`released.rs`).
//!
//! After each fault the page's installs are paid for by one bounded reclaim chunk when the VM
//! is over its limit (`reclaim.rs`). A fault that cannot be resolved pauses the VM.

use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::Instant;

use memvisor_devices::iobuf::IoBuf;
use userfaultfd::EventBuffer;

use crate::config::Preventing;
use crate::core::{PagerCore, PagerFailure, Pages};
use crate::page::{PageIdx, Slot, StoreId, PAGE_SIZE};
use crate::preventer::{Preventer, ReadFrom};
use crate::reclaim::Reclaimer;
use crate::state::page_state::PageState;
use crate::state::table::{FaultAction, StateTable};
use crate::stats::EventCounters;
use crate::store::{self, PageStore};
use crate::sys::uffd::{Fault, UffdError};

/// What a fault read from a store: the run from `lo` around faulting page `p`, to come in
/// clean and write-protected if `keep`.
struct Read<'a> {
    p: PageIdx,
    lo: PageIdx,
    data: &'a [u8],
    keep: bool,
    /// A read fault that brings swapped pages in writable, because keeping them clean has not
    /// been paying ([`crate::state::clean_reuse::CleanReuse`]): counted in `swapped_in_writable`.
    writable_read: bool,
    /// The page comes from the pages the VM was restored or migrated from (`store/saved.rs`):
    /// counted in `faults_restored`.
    restored: bool,
    source: &'a dyn PageStore,
}

/// Whether a page read from `from` comes from the pages the VM was restored or migrated from.
fn restored(table: &StateTable, from: Slot) -> bool {
    from.store == StoreId::Swap && table.blocks.is_saved(from.index)
}

/// Whether a fault (a write if `write`) loading from `from` as `keep` says brings swapped pages
/// in writable although it is a read.
fn writable_read(table: &StateTable, from: Slot, write: bool, keep: bool) -> bool {
    from.store == StoreId::Swap && table.mech.reuse_clean && !write && !keep
}

/// Pages that hold nothing (never touched, or reported free) installed with a faulting one
/// (128 KiB) ...
const ZERO_WINDOW: u32 = 32;
/// ... doubling, up to 1 MiB, while each zero fault lands on the page after the last run
/// installed (or the page before it): a guest filling memory in order, or taking back the 2 MiB
/// chunks it reported free, takes a few faults per chunk rather than 16.
const ZERO_WINDOW_MAX: u32 = 256;

/// The aligned window of pages kept clean that become writable with one the guest writes
/// ([`FaultHandler::open_around`]): 256 KiB.
const OPEN_AROUND: u32 = 64;

/// The fault path (see the module doc): the buffers it reads into and the faults it could not
/// resolve; it works on the core it is handed, from the pager thread (and, for retries and the
/// Preventer's fallbacks, from the threads that call it).
pub(crate) struct FaultHandler {
    /// The buffer a fault's store read goes into without the page lock; taken only with
    /// `try_lock`, so a second fault meanwhile reads under the page lock instead (into
    /// [`Pages::io`]).
    fault_io: Mutex<IoBuf>,
    /// Fault events read by the pager thread.
    events: Mutex<EventBuffer>,
    /// Faults that could not be resolved: their threads (a vCPU, or a device thread in the
    /// middle of a request) wait in the kernel until the page is installed, so a resume serves
    /// them again ([`Pager::retry`](crate::Pager::retry)).
    unresolved: Mutex<Vec<Fault>>,
    /// A zeroed source for installing fresh writable pages.
    zeros: Vec<u8>,
}

/// Where a missing fault's page is read from, and whether the faulting thread is a vCPU (the
/// guest's context), asked once per fault of a page in a store.
#[derive(Clone, Copy)]
struct Stored {
    from: ReadFrom,
    vcpu: bool,
}

impl FaultHandler {
    /// A fault path whose lock-free reads take up to `io_len` bytes.
    pub fn new(io_len: usize) -> Self {
        FaultHandler {
            // Huge pages for the hot path's buffer; the page lock's (`Pages::io`) serves the
            // retries and the Swap Mapper's refetches.
            fault_io: Mutex::new(IoBuf::huge(io_len)),
            events: Mutex::new(EventBuffer::new(64)),
            unresolved: Mutex::new(Vec::new()),
            zeros: vec![0u8; ZERO_WINDOW_MAX as usize * PAGE_SIZE],
        }
    }

    /// Serves the fault events that are pending, without waiting for more. Returns why the
    /// pager cannot go on, if it cannot.
    pub(crate) fn serve_pending(
        &self,
        core: &PagerCore,
        preventer: &Preventer,
        reclaim: &Reclaimer,
    ) -> Result<(), String> {
        let faults = {
            let mut buf = self.events.lock().unwrap_or_else(|e| e.into_inner());
            core.uffd
                .read_faults(&mut buf)
                .map_err(|e| format!("reading fault events failed: {e}"))?
        };
        for f in faults {
            self.serve_fault(core, preventer, reclaim, f);
        }
        Ok(())
    }

    /// After a resume: serves again the faults that could not be resolved, which wakes the
    /// threads waiting on them.
    pub(crate) fn retry(&self, core: &PagerCore, preventer: &Preventer, reclaim: &Reclaimer) {
        let faults =
            std::mem::take(&mut *self.unresolved.lock().unwrap_or_else(|e| e.into_inner()));
        for f in faults {
            self.serve_fault(core, preventer, reclaim, f);
        }
    }

    /// Swaps in the pages of vCPUs the Preventer stopped that did not answer in time
    /// ([`Preventer::expire`]); a page that cannot be installed is a fault left unresolved.
    pub(crate) fn swap_in_expired(&self, core: &PagerCore, late: Vec<PageIdx>) {
        for p in late {
            let mut pages = core.lock();
            if let Err(e) = self.missing_fault(core, &mut pages, p, true) {
                let f = Fault {
                    addr: core.map.host(p),
                    write: true,
                    protected: false,
                    tid: 0,
                };
                self.unresolved(core, f, p, e);
            }
        }
    }

    /// Swaps in page `p` for a vCPU the Preventer stopped and could not serve
    /// ([`Preventer::vcpu_interrupted`]), on the vCPU's thread; a failure pauses the VM. The
    /// read is timed for the Preventer's comparison: where every attempt falls back, it is the
    /// only read of its kind there is.
    pub(crate) fn preventer_fallback(
        &self,
        core: &PagerCore,
        reclaim: &Reclaimer,
        preventer: &Preventer,
        p: PageIdx,
    ) {
        let mut pages = core.lock();
        let from = ReadFrom::of(pages.table.state(p));
        let before = pages.table.resident();
        let t0 = Instant::now();
        match self.missing_fault(core, &mut pages, p, true) {
            Ok(()) => {
                if let (Some(kind), Preventing::Measured) = (from, pages.table.mech.preventer) {
                    let brought = pages.table.resident().saturating_sub(before).max(1);
                    preventer.read_took(kind, t0.elapsed(), u64::from(brought));
                }
            }
            Err(e) => core.pause(PagerFailure::Fault {
                page: p,
                error: e.to_string(),
            }),
        }
        drop(reclaim.hold_to_cap(core, pages));
    }

    /// Resolves one fault event and records its service time.
    pub(crate) fn serve_fault(
        &self,
        core: &PagerCore,
        preventer: &Preventer,
        reclaim: &Reclaimer,
        f: Fault,
    ) {
        let t0 = Instant::now();
        let Some(p) = core.map.page_of_host(f.addr) else {
            if core
                .release_slots
                .as_ref()
                .is_some_and(|s| s.contains(f.addr))
            {
                // Nothing reads an empty slot of the reclamation cache; if something did, it
                // gets zeros rather than waiting for ever.
                tracing::warn!(
                    "pager: fault at {:#x} on an empty reclamation cache slot",
                    f.addr
                );
                let page = f.addr & !(PAGE_SIZE as u64 - 1);
                if let Err(e) = core.uffd.zeropage(page, PAGE_SIZE) {
                    tracing::warn!("pager: cannot fill the empty slot at {page:#x}: {e}");
                }
                return;
            }
            tracing::warn!("pager: fault at {:#x} outside guest RAM", f.addr);
            return;
        };
        let mut pages = core.lock();
        // Read once under this lock: the Preventer, the counts and the latency below all go by
        // it.
        let stored = match f.protected {
            true => None,
            false => ReadFrom::of(pages.table.state(p)).map(|from| Stored {
                from,
                vcpu: core.vcpus.is_vcpu(f.tid),
            }),
        };
        let r = if f.protected {
            self.write_fault(core, &mut pages, p)
        } else {
            let r;
            (pages, r) = self.fault(core, pages, preventer, p, f, stored);
            r
        };
        match (r, stored) {
            (Ok(()), Some(s)) => {
                let by = if s.vcpu {
                    &core.counters.stored_faults_guest
                } else {
                    &core.counters.stored_faults_vmm
                };
                EventCounters::add(by, 1);
            }
            (Ok(()), None) => {}
            (Err(e), _) => self.unresolved(core, f, p, e),
        }
        drop(reclaim.hold_to_cap(core, pages));
        let took = t0.elapsed();
        core.fault_latency.record(took);
        if stored.is_some_and(|s| s.from == ReadFrom::Swap) {
            core.swap_fault_latency.record(took);
        }
    }

    /// A fault that failed: its thread keeps waiting, the VM is paused, and the resume serves
    /// it again. The retry goes straight to the fault path (not to the Preventer).
    pub(crate) fn unresolved(&self, core: &PagerCore, f: Fault, p: PageIdx, e: std::io::Error) {
        self.unresolved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Fault { tid: 0, ..f });
        core.pause(PagerFailure::Fault {
            page: p,
            error: e.to_string(),
        });
    }

    fn wake(&self, core: &PagerCore, p: PageIdx) -> Result<(), UffdError> {
        core.uffd.wake(core.map.host(p), PAGE_SIZE)
    }

    /// Missing fault `f` on a page whose content is in the store `stored` says, if any: a vCPU's
    /// write to a page whose content is in a store goes to the Preventer (the vCPU is stopped
    /// and asked what it is writing); everything else is resolved here, a load from the swap
    /// file or an image without the page lock.
    fn fault<'a>(
        &self,
        core: &'a PagerCore,
        mut pages: MutexGuard<'a, Pages>,
        preventer: &Preventer,
        p: PageIdx,
        f: Fault,
        stored: Option<Stored>,
    ) -> (MutexGuard<'a, Pages>, std::io::Result<()>) {
        let write = f.write;
        // A hit installs the page; a miss leaves its state as `stored` read it.
        if let Some(r) = self.install_from_release_cache(core, &mut pages, p, write) {
            return (pages, r);
        }
        let mode = pages.table.mech.preventer;
        if let Some(Stored { from, vcpu: true }) = stored {
            if write && mode != Preventing::Off && preventer.stop(core, f.tid, p, from, mode) {
                return (pages, Ok(()));
            }
        }
        match pages.table.fault(p, write) {
            FaultAction::Load { from, keep } if from.store != StoreId::Sample => {
                // Timed only for a Preventer that compares reads with preventions.
                let timed = stored
                    .map(|s| s.from)
                    .filter(|_| mode == Preventing::Measured);
                let t0 = timed.map(|kind| (kind, Instant::now()));
                let (pages, r) = self.load_unlocked(core, pages, p, write, from, keep);
                if let (Ok(Some(n)), Some((kind, t0))) = (&r, t0) {
                    preventer.read_took(kind, t0.elapsed(), u64::from(*n));
                }
                (pages, r.map(|_| ()))
            }
            _ => {
                let r = self.missing_fault(core, &mut pages, p, write);
                (pages, r)
            }
        }
    }

    /// Loads `p` and the run that comes with it from slot `from` of a disk store, reading
    /// without the page lock (module doc). Falls back to [`Self::missing_fault`] under the lock
    /// when another thread's load has the buffer, and when `p` changed state during the read.
    /// Says how many pages the read brought, or `None` after a fallback.
    fn load_unlocked<'a>(
        &self,
        core: &'a PagerCore,
        mut pages: MutexGuard<'a, Pages>,
        p: PageIdx,
        write: bool,
        from: Slot,
        keep: bool,
    ) -> (MutexGuard<'a, Pages>, std::io::Result<Option<u32>>) {
        let mut io = match self.fault_io.try_lock() {
            Ok(io) => io,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => {
                let r = self.missing_fault(core, &mut pages, p, write);
                return (pages, r.map(|()| None));
            }
        };
        let (lo, n) = self.region_run(core, p, pages.table.load_run(p));
        let in_flight = pages.table.begin_read(lo, n);
        drop(pages);
        let buf = io.get(n as usize * PAGE_SIZE);
        let read = core
            .stores
            .get(from.store)
            .and_then(|source| store::read(source, from.index - (p - lo), buf).map(|()| source));
        let mut pages = core.lock();
        let changed = pages.table.end_read(in_flight);
        let source = match read {
            Ok(source) => source,
            Err(e) => return (pages, Err(e)),
        };
        if changed.get((p - lo) as usize) != Some(&false) {
            EventCounters::add(&core.counters.fault_reads_redone, 1);
            let r = self.missing_fault(core, &mut pages, p, write);
            return (pages, r.map(|()| None));
        }
        let Pages {
            table, prefetched, ..
        } = &mut *pages;
        let read = Read {
            p,
            lo,
            data: buf,
            keep,
            writable_read: writable_read(table, from, write, keep),
            restored: restored(table, from),
            source,
        };
        let r = self.install_read(core, table, prefetched, &read, |i| !changed[i as usize]);
        (pages, r.map(|()| Some(n)))
    }

    /// Installs what `read` holds: the pages `i` (counted from its first) for which
    /// `unchanged(i)` holds, one `UFFDIO_COPY` per run of them. Counts the fault and the pages
    /// that came with it.
    fn install_read(
        &self,
        core: &PagerCore,
        table: &mut StateTable,
        prefetched: &mut [bool],
        read: &Read<'_>,
        unchanged: impl Fn(u32) -> bool,
    ) -> std::io::Result<()> {
        let Read {
            p,
            lo,
            data,
            keep,
            writable_read,
            restored,
            source,
        } = *read;
        let n = u32::try_from(data.len() / PAGE_SIZE).unwrap_or(u32::MAX);
        // A refault from the image reads blocks that missed guest RAM: the ghost cache's lookups.
        table.image_refault(lo, n);
        let mut installed = 0;
        let mut i = 0;
        while i < n {
            if !unchanged(i) {
                i += 1;
                continue;
            }
            let mut k = 1;
            while i + k < n && unchanged(i + k) {
                k += 1;
            }
            let at = i as usize * PAGE_SIZE;
            let len = k as usize * PAGE_SIZE;
            // SAFETY: `data[at..at + len]` is inside `data`, alive for the call.
            if let Err(e) = unsafe {
                core.uffd
                    .copy(data[at..].as_ptr(), core.map.host(lo + i), len, keep)
            } {
                // What went in is in guest memory: the table must say so.
                table.install_run(lo + i, e.pages.min(k), keep);
                return Err(e.into());
            }
            table.install_run(lo + i, k, keep);
            for q in lo + i..lo + i + k {
                // Prefetch hits are seen only as writes to protected pages.
                prefetched[q as usize] = q != p && keep;
            }
            installed += k;
            i += k;
        }
        EventCounters::add(&source.counters().faults, 1);
        if restored {
            EventCounters::add(&core.counters.faults_restored, 1);
        }
        EventCounters::add(&core.counters.prefetched, u64::from(installed - 1));
        if writable_read {
            EventCounters::add(&core.counters.swapped_in_writable, u64::from(installed));
        }
        core.counters.add_patterns(&mut table.patterns);
        Ok(())
    }

    /// `run` (first page, count) around `p`, or `p` alone if the run crosses a mapping
    /// boundary.
    fn region_run(&self, core: &PagerCore, p: PageIdx, (lo, n): (PageIdx, u32)) -> (PageIdx, u32) {
        if core.map.same_region(lo, lo + n - 1) {
            (lo, n)
        } else {
            (p, 1)
        }
    }

    /// Installs missing page `p` (and the run that comes with it) as the table says.
    pub(crate) fn missing_fault(
        &self,
        core: &PagerCore,
        pages: &mut Pages,
        p: PageIdx,
        write: bool,
    ) -> std::io::Result<()> {
        match pages.table.fault(p, write) {
            FaultAction::Wake => Ok(self.wake(core, p)?),
            FaultAction::Zero => self.install_zero(core, pages, p, write),
            FaultAction::Load { .. } if pages.table.released.cached_slot(p).is_some() => self
                .install_from_release_cache(core, pages, p, write)
                .unwrap_or(Ok(())),
            FaultAction::Load { from, keep } => {
                let run = pages.table.load_run(p);
                self.bring_run(core, pages, p, run, (write, keep), from)
            }
        }
    }

    /// A page instant release took whose content the reclamation cache still holds
    /// (`released.rs`) comes back as a copy of its slot, under the page lock, with no disk read:
    /// alone, clean and write-protected after a read, as from its block. `None`: not such a
    /// page. (The slot keeps its memory until the cache's ring comes round to it.)
    fn install_from_release_cache(
        &self,
        core: &PagerCore,
        pages: &mut Pages,
        p: PageIdx,
        write: bool,
    ) -> Option<std::io::Result<()>> {
        if !matches!(pages.table.state(p), PageState::OnDisk(_)) {
            return None;
        }
        let keep = !write;
        let slot = pages.table.released.cached_slot(p)?;
        let src = core.release_slots.as_ref()?.addr(slot) as *const u8;
        // SAFETY: the slot holds `p`'s page (moved in by its release), mapped for the call: only
        // a release empties slots, and it holds the page lock, as the caller does.
        if let Err(e) = unsafe { core.uffd.copy(src, core.map.host(p), PAGE_SIZE, keep) } {
            if e.pages > 0 {
                pages.table.install_run(p, 1, keep);
            }
            return Some(Err(e.into()));
        }
        pages.table.install_run(p, 1, keep);
        pages.prefetched[p as usize] = false;
        EventCounters::add(&core.counters.reclamation_cache_hits, 1);
        core.counters.add_patterns(&mut pages.table.patterns);
        Some(Ok(()))
    }

    /// Installs zero pages at `p` and its neighbours whose content is nothing (never touched,
    /// or reported free or given back by the balloon), up to a window ([`ZERO_WINDOW`], doubled
    /// while the faults follow each other, [`ZERO_WINDOW_MAX`]), in one call: a guest that
    /// reuses memory it reported free takes it back a window at a time, not a page. The window
    /// runs on from `p` the way the last one was followed (after it, or before it) and then the
    /// other way: a guest allocator hands out pages it freed last first, and a run freed in
    /// address order is taken back from its top down.
    fn install_zero(
        &self,
        core: &PagerCore,
        pages: &mut Pages,
        p: PageIdx,
        write: bool,
    ) -> std::io::Result<()> {
        match pages.table.state(p) {
            PageState::Ballooned => EventCounters::add(&core.counters.faults_released, 1),
            PageState::Reported => {
                // The guest said the page was free: its old content is not read back.
                EventCounters::add(&core.counters.faults_released, 1);
                EventCounters::add(&core.counters.false_reads_avoided, 1);
            }
            _ => {}
        }
        let (last_lo, last_hi, last) = pages.zero_stream;
        let down = p + 1 == last_lo;
        let window = if p == last_hi || down {
            // Beyond the base window, only into room under the limit: a grown window must
            // not take the VM further past it than a fault always could.
            let room = core.limit().saturating_sub(pages.table.resident());
            last.saturating_mul(2)
                .clamp(ZERO_WINDOW, ZERO_WINDOW_MAX)
                .min(room.max(ZERO_WINDOW))
        } else {
            ZERO_WINDOW
        };
        let table = &pages.table;
        let mut reported = 0;
        let mut nothing = |q: PageIdx| {
            if !core.map.same_region(p, q) {
                return false;
            }
            match table.state(q) {
                PageState::Zero => true,
                PageState::Reported => {
                    reported += 1;
                    true
                }
                _ => false,
            }
        };
        let (mut lo, mut hi) = (p, p + 1);
        for up in [!down, down] {
            if up {
                while hi - lo < window && hi < table.len() && nothing(hi) {
                    hi += 1;
                }
            } else {
                while hi - lo < window && lo > 0 && nothing(lo - 1) {
                    lo -= 1;
                }
            }
        }
        // Reported pages taken back with this one: their old content is not read either.
        EventCounters::add(&core.counters.false_reads_avoided, reported);
        let n = hi - lo;
        let len = n as usize * PAGE_SIZE;
        let r = if write {
            // A write would at once copy a shared zero page in the kernel (a second fault per
            // page): install real zeroed pages, writable, in one copy.
            // SAFETY: `zeros` is a live buffer of ZERO_WINDOW_MAX pages, at least `len` bytes.
            unsafe {
                core.uffd
                    .copy(self.zeros.as_ptr(), core.map.host(lo), len, false)
            }
        } else {
            core.uffd.zeropage(core.map.host(lo), len)
        };
        if let Err(e) = r {
            for q in lo..lo + e.pages.min(n) {
                pages.table.installed(q, FaultAction::Zero);
            }
            return Err(e.into());
        }
        for q in lo..hi {
            pages.table.installed(q, FaultAction::Zero);
        }
        pages.zero_stream = (lo, hi, window);
        EventCounters::add(&core.counters.faults_zero, 1);
        Ok(())
    }

    /// Brings in `run` (first page, count) around faulting page `p` with one read from the store
    /// that holds `p` (at slot `from`) and one `UFFDIO_COPY`. The run comes in as the faulting
    /// page does: after a read, clean and write-protected with its slots kept; after a write,
    /// writable (a written page's neighbours are usually written next, and each protected one
    /// would cost a write fault).
    fn bring_run(
        &self,
        core: &PagerCore,
        pages: &mut Pages,
        p: PageIdx,
        (lo, n): (PageIdx, u32),
        (write, keep): (bool, bool),
        from: Slot,
    ) -> std::io::Result<()> {
        let (lo, n) = self.region_run(core, p, (lo, n));
        let Pages {
            table,
            io,
            prefetched,
            ..
        } = pages;
        let buf = io.get(n as usize * PAGE_SIZE);
        let source = core.stores.get(from.store)?;
        store::read(source, from.index - (p - lo), buf)?;
        let read = Read {
            p,
            lo,
            data: buf,
            keep,
            writable_read: writable_read(table, from, write, keep),
            restored: restored(table, from),
            source,
        };
        self.install_read(core, table, prefetched, &read, |_| true)
    }

    /// After a guest write to `p`, a page kept clean: the other pages of its aligned window of
    /// [`OPEN_AROUND`] that a load now would bring in writable
    /// ([`StateTable::open_with_neighbour`]: the guest writes nearly every page it gets clean)
    /// become writable with it, so a guest writing through pages that came in clean before that
    /// was known (a restore's or a migration's prefetch, a swap-in's cluster) takes about one
    /// write fault per window, in whatever order it writes them. Returns the runs to unprotect,
    /// `p`'s among them, within `p`'s mapping.
    fn open_around(core: &PagerCore, pages: &mut Pages, p: PageIdx) -> Vec<(PageIdx, u32)> {
        let Pages {
            table,
            in_flight,
            prefetched,
            ..
        } = pages;
        let lo = p - p % OPEN_AROUND;
        let hi = (lo + OPEN_AROUND).min(core.map.pages());
        let mut open = vec![p];
        for q in lo..hi {
            let opens = q != p
                && core.map.same_region(p, q)
                && in_flight.binary_search(&q).is_err()
                && table.open_with_neighbour(q);
            if opens {
                table.opened(q);
                prefetched[q as usize] = false;
                open.push(q);
            }
        }
        if open.len() > 1 {
            EventCounters::add(&core.counters.opened_ahead, open.len() as u64 - 1);
        }
        open.sort_unstable();
        core.map.region_runs(&open)
    }

    fn write_fault(&self, core: &PagerCore, pages: &mut Pages, p: PageIdx) -> std::io::Result<()> {
        if pages.in_flight.binary_search(&p).is_ok() {
            // Reclaim is writing this page out: the writer waits until the chunk is recorded
            // (reclaim wakes it), then faults the page back in.
            return Ok(());
        }
        let cooling = pages.table.victims.is_cooling(p);
        if !pages.table.write_fault(p) {
            return Ok(self.wake(core, p)?);
        }
        EventCounters::add(&core.counters.write_faults, 1);
        if std::mem::take(&mut pages.prefetched[p as usize]) {
            EventCounters::add(&core.counters.prefetch_hits, 1);
        }
        if !cooling && !pages.table.clean_reuse.writing() {
            // Keeping pages clean still pays: only this one opens, with no window to look at.
            return Ok(core.uffd.unprotect(core.map.host(p), PAGE_SIZE)?);
        }
        if !cooling {
            for (first, n) in Self::open_around(core, pages, p) {
                core.uffd
                    .unprotect(core.map.host(first), n as usize * PAGE_SIZE)?;
            }
            return Ok(());
        }
        // A victim cache hit: its cluster's other cooling pages come back with it, one ioctl
        // per run.
        let Pages {
            table, in_flight, ..
        } = pages;
        let mut open = table.warm_cluster(p, |q| in_flight.binary_search(&q).is_ok());
        open.push(p);
        open.sort_unstable();
        for (first, n) in core.map.region_runs(&open) {
            core.uffd
                .unprotect(core.map.host(first), n as usize * PAGE_SIZE)?;
        }
        Ok(())
    }
}
