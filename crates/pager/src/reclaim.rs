//! Reclaim: taking pages out of guest RAM while resident pages exceed the limit, on its own
//! thread (`reclaim`), so the pager thread goes on serving faults while a chunk is written.
//!
//! The limit is the high watermark; once above it, reclaim goes down to a low watermark
//! (`batch` or 1/64 of the limit below it, whichever is more) so it does not run on every
//! fault. Pages a balloon deflate mapped to the shared zero page that the guest has not written
//! since go first, with no write ([`Reclaimer::drop_unwritten_deflated`]); then it works in
//! chunks of at most `batch` pages:
//!
//! 1. under the page lock, victims are chosen (`victim.rs`, through the state table) and
//!    write-protected; each is classified (dropped as zero, dropped because a store slot still
//!    holds it, or to be written to new swap blocks), the pages to write are copied out to the
//!    reclaim thread's buffer, and the chunk's victims are marked *in flight*;
//! 2. without the lock, the copies are written to the swap file (runs of consecutive blocks in
//!    one write each);
//! 3. under the lock again, the victims are dropped with `MADV_DONTNEED`, recorded, no longer in
//!    flight, and their waiters woken.
//!
//! While a chunk is in flight its victims are mapped and write-protected and their fate is
//! decided, so nothing may change them: a guest write to one waits on the protection (the
//! pager thread leaves the fault unresolved, and step 3 wakes it; it then faults the page back
//! in from its new block), and every device access goes through [`Reclaimer::lock_settled`], which
//! waits for the chunk to be recorded. No write is lost between checking and dropping.
//!
//! Installing threads (the pager thread after a fault, devices) wake the reclaim thread when
//! they take the VM over its limit, and wait for its next chunk ([`Reclaimer::hold_to_cap`]) only
//! once installs have added a chunk's worth of pages since the last chunk was recorded: a
//! shrink goes on while faults are served, and installs cannot outrun reclaim when the disk is
//! slow. A chunk that fails pauses the VM; nothing is reclaimed while it is paused.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use memvisor_devices::ram::{dontneed, GuestRange};

use crate::core::{PagerCore, PagerFailure, Pages};
use crate::digest::Digest;
use crate::page::{Block, PageIdx, PAGE_SIZE};
use crate::state::page_state::PageState;
use crate::state::table::Disposition;
use crate::stats::EventCounters;
use crate::store;
use crate::swapin::SwapIn;
use crate::sys::pagemap::{PageMap, PageRegion, PAGE_IS_PFNZERO, PAGE_IS_PRESENT};
use crate::takeover::{drop_zero_mappings, split_huge};
use memvisor_devices::iobuf::IoBuf;

/// How choosing a reclaim chunk's victims ended.
enum Begin {
    /// The chunk, to write.
    Flight(Flight),
    /// No victim to take.
    Nothing,
    /// Every victim was a mirror the guest had changed, kept this time: choose again.
    Again,
}

/// A chunk between its decisions and its drop: what step 3 needs.
struct Flight {
    t0: Instant,
    victim_runs: Vec<(PageIdx, u32)>,
    decided: Vec<(PageIdx, Disposition)>,
    /// New blocks for the pages written, in `decided` order.
    blocks: Vec<Block>,
    /// With share before swap, the digest of each page written, in the same order.
    digests: Vec<Digest>,
}

/// A chunk that takes this long says where its time went (at info).
const SLOW_CHUNK: Duration = Duration::from_millis(100);

/// Reclaim (see the module doc): how its thread is woken, and how the threads that wait for a
/// chunk to be recorded are told; it works on the core it is handed, on its own thread.
pub(crate) struct Reclaimer {
    /// This process's page map, to tell which pages a deflate mapped still map the shared zero
    /// page; without it (a kernel before 6.7) a deflate maps nothing.
    pagemap: Option<PageMap>,
    /// Signalled (with the page lock) when a reclaim chunk has been recorded or reclaim gave up.
    settled: Condvar,
    /// Set to wake the reclaim thread, with `wake`.
    wanted: Mutex<bool>,
    wake: Condvar,
}

impl Reclaimer {
    pub fn new() -> Self {
        Reclaimer {
            pagemap: PageMap::open(),
            settled: Condvar::new(),
            wanted: Mutex::new(false),
            wake: Condvar::new(),
        }
    }

    /// Wakes the threads waiting for a chunk to be recorded (after a resume, or when the reclaim
    /// thread is gone).
    pub(crate) fn notify_settled(&self) {
        self.settled.notify_all();
    }

    /// The low watermark for `limit`: where a reclaim that started above the limit stops.
    fn low_watermark(&self, core: &PagerCore, limit: u32) -> u32 {
        limit.saturating_sub(core.batch.max(limit / 64))
    }

    /// The page lock, once no reclaim chunk is in flight (for everything but the pager thread's
    /// fault path and the reclaim thread itself).
    pub(crate) fn lock_settled<'a>(&self, core: &'a PagerCore) -> MutexGuard<'a, Pages> {
        let mut pages = core.lock();
        while !pages.in_flight.is_empty() {
            pages = self.settled.wait(pages).unwrap_or_else(|e| e.into_inner());
            crate::core::record_released(&mut pages);
        }
        pages
    }

    /// Wakes the reclaim thread.
    pub(crate) fn want_reclaim(&self) {
        let mut wanted = self.wanted.lock().unwrap_or_else(|e| e.into_inner());
        *wanted = true;
        self.wake.notify_one();
    }

    /// After an install: wakes the reclaim thread if the VM is over its limit, and, if installs
    /// have added more than a chunk since the last chunk was recorded, waits for the next one
    /// (for 10 s at most: a reclaim thread held up that long by its disk is reported, and the
    /// guest goes on past its limit rather than hang). The limit is read again at every look:
    /// one raised meanwhile ends the wait, since reclaim does not act below it.
    pub(crate) fn hold_to_cap<'a>(
        &self,
        core: &'a PagerCore,
        mut pages: MutexGuard<'a, Pages>,
    ) -> MutexGuard<'a, Pages> {
        if pages.table.resident() <= core.limit() || core.vcpus.pager_paused() {
            return pages;
        }
        self.want_reclaim();
        let t0 = Instant::now();
        while pages.table.resident() > core.limit()
            && pages.table.resident() > pages.resident_after_chunk.saturating_add(core.batch)
            && !core.vcpus.pager_paused()
        {
            if t0.elapsed() >= Duration::from_secs(10) {
                tracing::warn!("pager: reclaim made no progress for 10 s; going on past the limit");
                break;
            }
            pages = self
                .settled
                .wait_timeout(pages, Duration::from_millis(10))
                .unwrap_or_else(|e| e.into_inner())
                .0;
            crate::core::record_released(&mut pages);
        }
        pages
    }

    /// The reclaim thread: reclaims down to the low watermark whenever woken over the limit.
    pub(crate) fn run(&self, core: &PagerCore, swap_in: &SwapIn) {
        // A chunk writes at most a batch plus one cluster less a page.
        let cluster = core.lock().table.mech.cluster.max(1);
        let mut buf = IoBuf::huge((core.batch + cluster) as usize * PAGE_SIZE);
        loop {
            {
                // Woken when wanted, and every 100 ms anyway. The page lock is not taken while
                // this one is held: threads holding the page lock take this one to wake us.
                let mut wanted = self.wanted.lock().unwrap_or_else(|e| e.into_inner());
                if !*wanted {
                    wanted = self
                        .wake
                        .wait_timeout(wanted, Duration::from_millis(100))
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                *wanted = false;
            }
            if core.lock().table.resident() > core.limit() {
                self.reclaim_to_low_watermark(core, &mut buf);
            } else {
                swap_in.run(core);
            }
        }
    }

    fn reclaim_to_low_watermark(&self, core: &PagerCore, buf: &mut IoBuf) {
        loop {
            let mut pages = core.lock();
            let low = self.low_watermark(core, core.limit());
            let resident = pages.table.resident();
            if resident <= low || core.vcpus.pager_paused() {
                return;
            }
            let n = (resident - low).min(core.batch);
            if !pages.deflated.is_empty() {
                match self.drop_unwritten_deflated(core, &mut pages, n) {
                    Ok(0) => {}
                    Ok(_) => {
                        // Installers waiting for a chunk need not wait for one now.
                        self.settled.notify_all();
                        continue;
                    }
                    Err(e) => {
                        drop(pages);
                        self.reclaim_failed(core, e);
                        return;
                    }
                }
            }
            let flight = match self.reclaim_begin(core, &mut pages, n, buf) {
                Ok(Begin::Flight(f)) => f,
                // Every victim was a mirror the guest had changed: they are not any more.
                Ok(Begin::Again) => continue,
                Ok(Begin::Nothing) => {
                    // No chunk is coming: those waiting for one go on.
                    pages.resident_after_chunk = resident;
                    drop(pages);
                    self.settled.notify_all();
                    return;
                }
                Err(e) => {
                    drop(pages);
                    self.reclaim_failed(core, e);
                    return;
                }
            };
            drop(pages);
            let (t0, chosen) = (flight.t0, flight.decided.len());
            let began = t0.elapsed();
            let written = self.write_flight(core, &flight, buf);
            let wrote = t0.elapsed();
            let mut pages = core.lock();
            let locked = t0.elapsed();
            let result = self.reclaim_end(core, &mut pages, flight, written);
            drop(pages);
            self.settled.notify_all();
            let took = t0.elapsed();
            if took >= SLOW_CHUNK {
                tracing::info!(
                    "pager: slow reclaim chunk of {chosen} pages, {} ms: choosing, protecting and \
                     copying {} ms (page lock held), writing {} ms, waiting for the page lock {} \
                     ms, releasing {} ms (page lock held)",
                    took.as_millis(),
                    began.as_millis(),
                    (wrote - began).as_millis(),
                    (locked - wrote).as_millis(),
                    (took - locked).as_millis()
                );
            }
            if let Err(e) = result {
                self.reclaim_failed(core, e);
                return;
            }
        }
    }

    /// Whether a deflate may map the pages it gives back to the zero page: only if reclaim can
    /// tell the ones the guest has not written since.
    pub(crate) fn sees_zero_mappings(&self) -> bool {
        self.pagemap.is_some()
    }

    /// Drops up to `n` of the pages a deflate mapped to the shared zero page that still map it,
    /// oldest first: they hold no memory and nothing to write, so they go before any victim.
    /// Those the guest has written since count as used now (`clock` saw no fault for them).
    /// Each is write-protected before it is checked again and dropped, so a guest write meanwhile
    /// either came first (the page is the guest's, and stays) or waits and then finds the page
    /// gone and faults in a zero page. Returns how many were dropped.
    fn drop_unwritten_deflated(
        &self,
        core: &PagerCore,
        pages: &mut Pages,
        n: u32,
    ) -> std::io::Result<u32> {
        let Some(pagemap) = &self.pagemap else {
            pages.deflated.clear();
            return Ok(0);
        };
        let listed = std::mem::take(&mut pages.deflated);
        let mut candidates: Vec<PageIdx> = listed
            .iter()
            .copied()
            .filter(|&p| {
                pages.table.state(p) == PageState::Resident { clean: None }
                    && !pages.table.victims.is_cooling(p)
            })
            .collect();
        candidates.sort_unstable();
        candidates.dedup();
        // Those that map the zero page: one walk over their span in each mapping, however
        // scattered they are, not a call per run.
        let mut zero = Vec::new();
        if let (Some(&lo), Some(&hi)) = (candidates.first(), candidates.last()) {
            for (first, c) in core.map.split_by_region(lo, hi - lo + 1) {
                let start = core.map.host(first);
                let end = start + u64::from(c) * PAGE_SIZE as u64;
                for r in pagemap.scan(start, end, PAGE_IS_PRESENT | PAGE_IS_PFNZERO, 0)? {
                    zero.extend(
                        region_pages(core, &r).filter(|p| candidates.binary_search(p).is_ok()),
                    );
                }
            }
        }
        // The others the guest has written since they were deflated: a use the fault path would
        // have seen had they not been mapped, and told the victim order, so it is told now.
        for &p in &candidates {
            if zero.binary_search(&p).is_err() {
                pages.table.victims.touch(p);
            }
        }
        // The oldest first, in the order they were deflated; the rest stay listed.
        let mut chosen = Vec::new();
        for &p in &listed {
            if zero.binary_search(&p).is_ok() {
                if chosen.len() < n as usize {
                    chosen.push(p);
                } else {
                    pages.deflated.push(p);
                }
            }
        }
        chosen.sort_unstable();
        chosen.dedup();
        let runs = core.map.region_runs(&chosen);
        let mut dropped = 0u32;
        for &(first, c) in &runs {
            let start = core.map.host(first);
            let end = start + u64::from(c) * PAGE_SIZE as u64;
            for r in drop_zero_mappings(core, pagemap, start, end)? {
                for p in region_pages(core, &r) {
                    pages.prefetched[p as usize] = false;
                    pages.table.reclaimed(p, Disposition::DropZero, None);
                    dropped += 1;
                }
            }
        }
        // Writers waiting on a dropped page fault it back in as a zero page; those whose write
        // came first go on.
        for &(first, c) in &runs {
            if let Err(e) = core.uffd.wake(core.map.host(first), c as usize * PAGE_SIZE) {
                tracing::debug!("pager: waking writers of pages {first}+{c} failed: {e}");
            }
        }
        EventCounters::add(&core.counters.reclaimed_zero, u64::from(dropped));
        pages.resident_after_chunk = pages.table.resident();
        Ok(dropped)
    }

    fn reclaim_failed(&self, core: &PagerCore, e: std::io::Error) {
        core.pause(PagerFailure::Reclaim {
            error: e.to_string(),
        });
        self.settled.notify_all();
    }

    fn page_is_zero(&self, core: &PagerCore, p: PageIdx) -> bool {
        let host = core.map.host(p) as *const u64;
        // SAFETY: `p` is resident (the caller checked the table) and write-protected, so the page
        // is mapped and nobody changes it while we read; it lies in a live guest RAM mapping.
        let words = unsafe { std::slice::from_raw_parts(host, PAGE_SIZE / 8) };
        words.iter().all(|&w| w == 0)
    }

    /// Victim `p`'s bytes.
    fn page<'a>(&self, core: &'a PagerCore, p: PageIdx) -> &'a [u8] {
        // SAFETY: as in `page_is_zero`: `p` is a resident, write-protected victim, mapped and
        // unchanged while the page lock is held.
        unsafe { std::slice::from_raw_parts(core.map.host(p) as *const u8, PAGE_SIZE) }
    }

    /// Step 1: chooses up to about `n` victims, protects and classifies them, copies the ones to
    /// write into `buf` and allocates their blocks, and marks them all in flight. `None`: no
    /// victim.
    fn reclaim_begin(
        &self,
        core: &PagerCore,
        pages: &mut Pages,
        n: u32,
        buf: &mut IoBuf,
    ) -> std::io::Result<Begin> {
        let t0 = Instant::now();
        let (cooled, victims) = pages.table.reclaim_victims(n, core.limit());
        // Victims that begin to cool are protected now, so a write takes them back out of the
        // cache (`write_fault`).
        for (first, n) in core.map.region_runs(&cooled) {
            if let Err(e) = core
                .uffd
                .write_protect(core.map.host(first), n as usize * PAGE_SIZE)
            {
                cooled.iter().for_each(|&p| pages.table.kept(p));
                return Err(e.into());
            }
        }
        if victims.is_empty() {
            return Ok(Begin::Nothing);
        }
        let victim_runs = core.map.region_runs(&victims);
        for &(first, n) in &victim_runs {
            // Nothing is decided yet: a page left protected costs its next write one fault.
            if let Err(e) = core
                .uffd
                .write_protect(core.map.host(first), n as usize * PAGE_SIZE)
            {
                victims.iter().for_each(|&p| pages.table.kept(p));
                return Err(e.into());
            }
        }
        let mut to_write = Vec::new();
        let mut digests = Vec::new();
        let mut decided = Vec::with_capacity(victims.len());
        // The mirrors a victim brings from its image cluster may turn out changed, so there may
        // be more to write than the buffer holds: those beyond it stay resident this time.
        let room = buf.len() / PAGE_SIZE;
        let mut stay = Vec::new();
        let mut changed = Vec::new();
        for &p in &victims {
            if let Some(want) = pages.table.mirror_digest(p) {
                // A mirror a disk read left writable: protected now, so what is compared is what
                // would be dropped.
                EventCounters::add(&core.counters.mirrors_checked, 1);
                if core.digest.page(self.page(core, p)) != want {
                    // The guest wrote it since (often a frame its page cache gave up, reused for
                    // other data): in use, so it stays this time, an ordinary dirty page now and
                    // writable again, and another victim is taken in its place.
                    changed.push(p);
                    continue;
                }
            }
            let dirty = matches!(pages.table.state(p), PageState::Resident { clean: None });
            let is_zero = pages.table.mech.zero_detection && dirty && self.page_is_zero(core, p);
            let mut d = pages.table.disposition(p, is_zero);
            if d == Disposition::Write {
                match self.shared_copy(core, pages, p) {
                    Ok(b) => d = Disposition::DropShared(b),
                    Err(digest) => {
                        if to_write.len() == room {
                            stay.push(p);
                            continue;
                        }
                        to_write.push(p);
                        digests.extend(digest);
                    }
                }
            }
            decided.push((p, d));
        }
        changed.sort_unstable();
        crate::release::mirrors_found_changed(core, &mut pages.table, &changed);
        stay.extend(changed);
        if decided.is_empty() {
            stay.iter().for_each(|&p| pages.table.kept(p));
            return Ok(Begin::Again);
        }
        let (victims, victim_runs) = if stay.is_empty() {
            (victims, victim_runs)
        } else {
            // Those not found changed are still protected: a write to one costs one fault, as
            // for any kept victim.
            stay.iter().for_each(|&p| pages.table.kept(p));
            let victims: Vec<PageIdx> = decided.iter().map(|&(p, _)| p).collect();
            let runs = core.map.region_runs(&victims);
            (victims, runs)
        };
        let want = u32::try_from(to_write.len()).unwrap_or(u32::MAX);
        let blocks = pages.table.blocks.alloc(want);
        if blocks.len() < to_write.len() {
            blocks
                .into_iter()
                .for_each(|b| pages.table.blocks.drop_ref(b));
            drop_shares(pages, &decided);
            victims.iter().for_each(|&p| pages.table.kept(p));
            return Err(std::io::Error::other("the swap store is full"));
        }
        let out = buf.get(to_write.len() * PAGE_SIZE);
        for (k, &p) in to_write.iter().enumerate() {
            let src = core.map.host(p) as *const u8;
            // SAFETY: `p` is resident and write-protected: mapped, and unchanged while we copy.
            let page = unsafe { std::slice::from_raw_parts(src, PAGE_SIZE) };
            out[k * PAGE_SIZE..(k + 1) * PAGE_SIZE].copy_from_slice(page);
        }
        pages.in_flight = victims;
        Ok(Begin::Flight(Flight {
            t0,
            victim_runs,
            decided,
            blocks,
            digests,
        }))
    }

    /// Share before swap (ESX §4.2): a block of the pool that holds exactly what victim `p`
    /// (dirty, to be written, protected) holds, now with one more reference, so `p` is dropped
    /// referring to it instead of being written again. `Err` with `p`'s digest (to remember once
    /// it is written) when there is none; `Err(None)` when share before swap is off: without a
    /// pool (a block on disk would need a read to compare in full) or with the baseline pager.
    fn shared_copy(
        &self,
        core: &PagerCore,
        pages: &mut Pages,
        p: PageIdx,
    ) -> Result<Block, Option<Digest>> {
        let Some(pool) = core.stores.swap.pool.as_ref() else {
            return Err(None);
        };
        if !pages.table.mech.zero_detection {
            return Err(None);
        }
        let page = self.page(core, p);
        let digest = core.digest.page(page);
        let Some(&b) = pages.written.get(&digest) else {
            return Err(Some(digest));
        };
        if pages.table.blocks.refs(b) > 0 && pool.holds(b, page) && pages.table.blocks.add_ref(b) {
            EventCounters::add(&core.counters.reclaimed_shared, 1);
            return Ok(b);
        }
        // Freed, spilled or reused since: forget it; this page's write takes its place.
        pages.written.remove(&digest);
        Err(Some(digest))
    }

    /// Step 2: writes the copies in `buf` to their blocks, one write per run of consecutive
    /// blocks.
    fn write_flight(
        &self,
        core: &PagerCore,
        flight: &Flight,
        buf: &mut IoBuf,
    ) -> std::io::Result<()> {
        let blocks = &flight.blocks;
        let data = buf.get(blocks.len() * PAGE_SIZE);
        let mut i = 0;
        while i < blocks.len() {
            let mut j = i + 1;
            while j < blocks.len() && blocks[j] == blocks[j - 1] + 1 {
                j += 1;
            }
            store::write(
                &core.stores.swap,
                blocks[i],
                &data[i * PAGE_SIZE..j * PAGE_SIZE],
            )?;
            i = j;
        }
        Ok(())
    }

    /// Step 3: drops and records the chunk (or, if the write failed, gives its blocks back and
    /// leaves its pages resident), ends the flight and wakes the victims' waiters.
    fn reclaim_end(
        &self,
        core: &PagerCore,
        pages: &mut Pages,
        flight: Flight,
        written: std::io::Result<()>,
    ) -> std::io::Result<u32> {
        let Flight {
            t0,
            victim_runs,
            decided,
            blocks,
            digests,
        } = flight;
        let result = match written {
            Err(e) => {
                blocks
                    .into_iter()
                    .for_each(|b| pages.table.blocks.drop_ref(b));
                drop_shares(pages, &decided);
                Err(e)
            }
            Ok(()) => {
                remember_written(core, pages, &digests, &blocks);
                self.drop_chunk(core, pages, &victim_runs, decided, blocks)
            }
        };
        // Victims that stayed resident may be chosen again.
        for p in std::mem::take(&mut pages.in_flight) {
            pages.table.kept(p);
        }
        pages.resident_after_chunk = pages.table.resident();
        // Writers that waited on a victim's protection try again: the page is gone (they fault
        // it back in) or, if it stayed, its protection is theirs to end.
        for &(first, n) in &victim_runs {
            if let Err(e) = core.uffd.wake(core.map.host(first), n as usize * PAGE_SIZE) {
                tracing::debug!("pager: waking writers of pages {first}+{n} failed: {e}");
            }
        }
        EventCounters::add(&core.counters.reclaim_batches, 1);
        core.reclaim_latency.record(t0.elapsed());
        result
    }

    /// Drops the victims and records them. A run that cannot be dropped stays resident (still
    /// protected, its table entry unchanged) and its new blocks go back; the error is returned
    /// once the rest is recorded.
    fn drop_chunk(
        &self,
        core: &PagerCore,
        pages: &mut Pages,
        victim_runs: &[(PageIdx, u32)],
        decided: Vec<(PageIdx, Disposition)>,
        blocks: Vec<Block>,
    ) -> std::io::Result<u32> {
        let mut kept: Vec<(PageIdx, u32)> = Vec::new();
        let mut drop_error = None;
        for &(first, n) in victim_runs {
            split_huge(core, pages, first, n);
            let range = GuestRange {
                addr: core.map.gpa(first),
                len: u64::from(n) * PAGE_SIZE as u64,
            };
            if let Err(e) = dontneed(&core.mem, range) {
                kept.push((first, n));
                drop_error = Some(std::io::Error::other(format!(
                    "releasing guest pages failed: {e}"
                )));
            }
        }
        let count = u32::try_from(decided.len()).unwrap_or(0);
        let mut written = blocks.into_iter();
        for (p, d) in decided {
            let block = if d == Disposition::Write {
                written.next()
            } else {
                None
            };
            if kept.iter().any(|&(first, n)| p >= first && p < first + n) {
                if let Some(b) = block {
                    pages.table.blocks.drop_ref(b);
                }
                drop_shares(pages, &[(p, d)]);
                continue;
            }
            pages.prefetched[p as usize] = false;
            pages.table.reclaimed(p, d, block);
            let c = match d {
                Disposition::DropZero => &core.counters.reclaimed_zero,
                Disposition::DropClean(_) => &core.counters.reclaimed_clean,
                Disposition::Write => &core.counters.reclaimed_written,
                Disposition::DropMirrored(_) => &core.counters.reclaimed_mirrored,
                // Counted when decided (`shared_copy`).
                Disposition::DropShared(_) => continue,
            };
            EventCounters::add(c, 1);
        }
        match drop_error {
            Some(e) => Err(e),
            None => Ok(count),
        }
    }
}

/// The guest pages of page-map region `r` (none if it is not in guest RAM).
fn region_pages(core: &PagerCore, r: &PageRegion) -> std::ops::Range<PageIdx> {
    let Some(first) = core.map.page_of_host(r.start) else {
        return 0..0;
    };
    first..first + PageIdx::try_from((r.end - r.start) / PAGE_SIZE as u64).unwrap_or(0)
}

/// Gives back the references share before swap took for `decided` victims that stay resident.
fn drop_shares(pages: &mut Pages, decided: &[(PageIdx, Disposition)]) {
    for &(_, d) in decided {
        if let Disposition::DropShared(b) = d {
            pages.table.blocks.drop_ref(b);
        }
    }
}

/// Remembers the digest of each page just written with its block (share before swap), and
/// prunes entries whose blocks are free or out of the pool once they are twice the blocks in use.
fn remember_written(core: &PagerCore, pages: &mut Pages, digests: &[Digest], blocks: &[Block]) {
    let Some(pool) = core.stores.swap.pool.as_ref() else {
        return;
    };
    for (&d, &b) in digests.iter().zip(blocks) {
        pages.written.insert(d, b);
    }
    let most = 2 * pages.table.blocks.in_use().max(1024) as usize;
    if pages.written.len() > most {
        let table = &pages.table;
        pages
            .written
            .retain(|_, b| table.blocks.refs(*b) > 0 && pool.contains(*b));
    }
}
