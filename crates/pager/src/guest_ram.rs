//! How devices reach guest RAM under the pager: the pager's [`GuestRam`] implementation.
//!
//! - A device writing whole pages that are not resident installs them with one `UFFDIO_COPY`
//!   per run, without reading their old content (VSwapper: no stale swap reads); whole pages that
//!   are resident but write-protected lose their protection first, one ioctl per run. Anything
//!   else is a plain access that faults like the guest's.
//! - Disk devices report what they move (the `disk_*` calls), which the Swap Mapper turns into
//!   page <-> block associations (`state/`): a read's pages stay writable, recorded with the
//!   keyed digest of the bytes read (`digest.rs`), which reclaim checks; a write's source pages
//!   are not protected either: once the write lands, each that still holds what the device wrote
//!   (the digests of its buffer and of the page agree) mirrors its block, writable, with that
//!   digest.
//! - With Tesseract's indirections (`store/indirect/`), a disk write's whole pages that are only in
//!   the swap file (not in the pool) are not read: the device skips them and their blocks refer
//!   to the swap-file blocks once the write ends; disk reads lay those blocks over the image.
//! - The balloon and free page reporting discard ranges: dropped first, recorded after, so a
//!   failed drop leaves pages resident and recorded as such.

use memvisor_devices::ram::{dontneed, Discard, DiskPage, GuestRam, GuestRange};
use memvisor_devices::GuestMem;
use vm_memory::{Bytes, GuestAddress, GuestMemoryError};

use crate::core::{PagerCore, Pages};
use crate::digest::Digest;
use crate::page::{ImageBlock, PageIdx, Slot, PAGE_SIZE};
use crate::reclaim::Reclaimer;
use crate::state::page_state::{is_resident, PageState};
use crate::state::table::FaultAction;
use crate::stats::EventCounters;
use crate::store::{self};
use crate::sys::ram_map::runs;

/// Guest RAM as devices reach it under the pager (without one they reach `PlainRam`): the core
/// it works on, and reclaim, whose chunks in flight it waits for and which it wakes when its
/// installs take the VM over its limit.
pub(crate) struct PagedRam<'a> {
    pub core: &'a PagerCore,
    pub reclaim: &'a Reclaimer,
}

impl PagedRam<'_> {
    /// The guest pages and image blocks of a disk request's whole pages.
    fn disk_pages(&self, disk: u8, pages: &[DiskPage]) -> Vec<(PageIdx, ImageBlock)> {
        pages
            .iter()
            .filter_map(|dp| {
                let p = self.core.map.page_of_gpa(dp.addr.0)?;
                let block = u32::try_from(dp.block).ok()?;
                Some((p, ImageBlock { disk, block }))
            })
            .collect()
    }

    /// With the Swap Mapper: records each resident one of a disk write's source `pages` as about
    /// to be copied out. They are not write-protected (each protection change costs the guest a
    /// shadow page-table flush on kvm_pvm): [`GuestRam::disk_write_done`] compares what each
    /// holds then with what the device wrote.
    ///
    /// Before the takeover nothing is recorded: RAM is not registered, so a page written to the
    /// disk does not become a mirror (only pages a disk read fills do).
    fn record_sources(&self, state: &mut Pages, pages: Vec<(PageIdx, ImageBlock)>) {
        if !state.table.mech.mapper || !state.attached {
            return;
        }
        for (p, ib) in pages {
            if !state.table.device_can_install(p) {
                state.table.disk_write_source(p, ib);
            }
        }
    }

    /// With the Swap Mapper: records that each of `read` (page, image block, digest of the
    /// block's content) now mirrors its block, if it is resident. The pages stay writable.
    /// Before the takeover every page a device filled is in plain memory, so it is recorded as
    /// resident first; the takeover keeps what the table says of pages it finds present.
    /// The request is one observation of the reference patterns (`pattern/`).
    fn record_reads(&self, state: &mut Pages, disk: u8, read: Vec<(PageIdx, ImageBlock, Digest)>) {
        let seen: Vec<(PageIdx, u32)> = read.iter().map(|&(p, ib, _)| (p, ib.block)).collect();
        for (p, ib, d) in read {
            if !state.attached {
                state.table.seed_resident(p);
            }
            state.table.read_from_disk(p, ib, d);
        }
        state.table.disk_read_seen(disk, &seen);
        self.core.counters.add_patterns(&mut state.table.patterns);
    }

    /// The run of pages from `p`, at most `max` long and inside one mapping, for which `fits`
    /// holds.
    fn run_from(&self, p: PageIdx, max: u32, fits: impl Fn(PageIdx) -> bool) -> u32 {
        let mut run = 0;
        while run < max
            && p + run < self.core.map.pages()
            && self.core.map.same_region(p, p + run)
            && fits(p + run)
        {
            run += 1;
        }
        run
    }

    /// Installs `data` (whole pages) at non-resident page `p` and the run after it that is not
    /// resident either; returns the bytes installed (0: `p` is resident, or the copy failed at
    /// once; after a copy that failed partway, what went in), and the caller goes on page by
    /// page from there.
    fn install_for_device(&self, p: PageIdx, data: &[u8]) -> usize {
        let mut pages = self.reclaim.lock_settled(self.core);
        if !pages.attached {
            // Plain memory until the takeover: nothing to install.
            return 0;
        }
        let whole = u32::try_from(data.len() / PAGE_SIZE).unwrap_or(u32::MAX);
        let run = self.run_from(p, whole, |q| pages.table.device_can_install(q));
        if run == 0 {
            return 0;
        }
        let len = run as usize * PAGE_SIZE;
        // SAFETY: `data` holds at least `len` bytes (whole pages counted above), alive for the call.
        let run = match unsafe {
            self.core
                .uffd
                .copy(data.as_ptr(), self.core.map.host(p), len, false)
        } {
            Ok(()) => run,
            Err(e) => {
                // Page by page then: a missing page faults in as for the guest.
                memvisor_devices::guest_error!(
                    PagerDeviceError,
                    "pager: device install of pages {p}+{run} failed: {e}"
                );
                e.pages.min(run)
            }
        };
        if run == 0 {
            return 0;
        }
        let len = run as usize * PAGE_SIZE;
        for q in p..p + run {
            if matches!(
                pages.table.state(q),
                PageState::Swapped(_) | PageState::OnDisk(_)
            ) {
                EventCounters::add(&self.core.counters.stale_reads_avoided, 1);
            }
            pages.table.device_installed(q);
            pages.prefetched[q as usize] = false;
        }
        EventCounters::add(&self.core.counters.device_installs, u64::from(run));
        // The device's thread waits for reclaim if it took the VM well past its limit.
        drop(self.reclaim.hold_to_cap(self.core, pages));
        len
    }

    /// Device → guest data: whole pages a device overwrites installed or unprotected in runs,
    /// the rest written in place.
    fn write_through(&self, addr: GuestAddress, data: &[u8]) -> Result<(), GuestMemoryError> {
        let s = self.core;
        let mut off = 0usize;
        while off < data.len() {
            let gpa = addr.0 + off as u64;
            let in_page = PAGE_SIZE - usize::try_from(gpa % PAGE_SIZE as u64).unwrap_or(0);
            let n = in_page.min(data.len() - off);
            if let (true, Some(p)) = (
                gpa % PAGE_SIZE as u64 == 0 && n == PAGE_SIZE,
                s.map.page_of_gpa(gpa),
            ) {
                let installed = self.install_for_device(p, &data[off..]);
                if installed > 0 {
                    off += installed;
                    continue;
                }
                let whole = u32::try_from((data.len() - off) / PAGE_SIZE).unwrap_or(u32::MAX);
                let run = self.unprotect_for_device(p, whole);
                if run > 0 {
                    let len = run as usize * PAGE_SIZE;
                    s.mem
                        .write_slice(&data[off..off + len], GuestAddress(gpa))?;
                    off += len;
                    continue;
                }
            }
            s.mem.write_slice(&data[off..off + n], GuestAddress(gpa))?;
            off += n;
        }
        Ok(())
    }

    /// Ends the write protection of the protected pages from `p` that a device overwrites whole
    /// (`max` pages at most), one ioctl per run, instead of through write faults the device's
    /// thread would wait on; mirrors left writable in the run only stop mirroring (no ioctl,
    /// which would also make kvm_pvm drop their shadow mappings). Returns the pages it covers.
    fn unprotect_for_device(&self, p: PageIdx, max: u32) -> u32 {
        let mut pages = self.reclaim.lock_settled(self.core);
        let run = self.run_from(p, max, |q| {
            matches!(
                pages.table.state(q),
                PageState::Mirrored(_) | PageState::Resident { clean: Some(_) }
            ) || pages.table.victims.is_cooling(q)
        });
        let mut protected = false;
        for q in p..p + run {
            protected |=
                pages.table.mirror_digest(q).is_none() || pages.table.victims.is_cooling(q);
            pages.table.write_fault(q);
            pages.prefetched[q as usize] = false;
        }
        if run > 0 && protected {
            if let Err(e) = self
                .core
                .uffd
                .unprotect(self.core.map.host(p), run as usize * PAGE_SIZE)
            {
                tracing::debug!("pager: unprotecting pages {p}+{run} for a device failed: {e}");
            }
        }
        run
    }
}

/// The bytes of block `ib` in `data`, which holds its disk from byte `offset` on, if they are
/// there whole.
fn block_bytes(ib: ImageBlock, offset: u64, data: &[u8]) -> Option<&[u8]> {
    let at = (u64::from(ib.block) * PAGE_SIZE as u64).checked_sub(offset)?;
    let at = usize::try_from(at).ok()?;
    data.get(at..at.checked_add(PAGE_SIZE)?)
}

impl GuestRam for PagedRam<'_> {
    fn mem(&self) -> &GuestMem {
        &self.core.mem
    }

    fn write(&self, addr: GuestAddress, data: &[u8]) -> Result<(), GuestMemoryError> {
        let written = self.write_through(addr, data);
        // Noted once written (a failed write too: part of it may have landed), so that a
        // pre-copy round that takes the note before the write lands sees it in the next.
        let s = self.core;
        if s.written.tracking() {
            let end = addr.0 + (data.len() as u64).saturating_sub(1);
            if let (Some(first), Some(last)) = (s.map.page_of_gpa(addr.0), s.map.page_of_gpa(end)) {
                s.written.note(first, last.saturating_sub(first) + 1);
            }
        }
        written
    }

    fn disk_read(&self, disk: u8, pages: &[DiskPage]) {
        // Without the bytes read: the digests are of the pages as they are now.
        let s = self.core;
        let mut state = self.reclaim.lock_settled(s);
        if !state.table.mech.mapper {
            return;
        }
        let read = self
            .disk_pages(disk, pages)
            .into_iter()
            .filter(|&(p, _)| !state.attached || is_resident(state.table.state(p)))
            .map(|(p, ib)| {
                // SAFETY: `p` is resident and the page lock is held, so it stays mapped while
                // it is read; it lies in a live guest RAM mapping.
                let page =
                    unsafe { std::slice::from_raw_parts(s.map.host(p) as *const u8, PAGE_SIZE) };
                (p, ib, s.digest.page(page))
            })
            .collect();
        self.record_reads(&mut state, disk, read);
    }

    fn disk_read_data(&self, disk: u8, pages: &[DiskPage], offset: u64, data: &[u8]) {
        // The digests are of what the disk holds, taken before the page lock: a guest write to
        // a page since it was filled makes it differ, and reclaim then finds it changed.
        // A block read before and not written since keeps its digest (`BlockDigests`).
        let s = self.core;
        if !s.mech.mapper {
            return;
        }
        let read: Vec<_> = {
            let mut known = s.block_digests.lock().unwrap_or_else(|e| e.into_inner());
            let before = known.reused;
            let read = self
                .disk_pages(disk, pages)
                .into_iter()
                .filter_map(|(p, ib)| {
                    let block = block_bytes(ib, offset, data)?;
                    Some((p, ib, known.of_block(&s.digest, disk, ib.block, block)))
                })
                .collect();
            EventCounters::add(&s.counters.mirror_digests_reused, known.reused - before);
            read
        };
        let mut state = self.reclaim.lock_settled(s);
        self.record_reads(&mut state, disk, read);
    }

    fn disk_write_begin(&self, disk: u8, offset: u64, len: u64) -> std::io::Result<()> {
        let s = self.core;
        if s.mech.mapper {
            s.block_digests
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .forget(
                    disk,
                    offset / PAGE_SIZE as u64,
                    (offset + len).div_ceil(PAGE_SIZE as u64),
                );
        }
        if let Some(ind) = s.stores.indirect(disk) {
            ind.write_begins(offset, len)?;
        }
        let mut state = self.reclaim.lock_settled(s);
        if !state.table.mech.mapper {
            return Ok(());
        }
        let first = offset / PAGE_SIZE as u64;
        for block in first..(offset + len).div_ceil(PAGE_SIZE as u64) {
            let Ok(block) = u32::try_from(block) else {
                break;
            };
            let ib = ImageBlock { disk, block };
            for p in state.table.disk_write_begins(ib) {
                // `p` was dropped relying on this block's old content: bring it back first.
                let slot = Slot::image(ib);
                let buf = state.io.get(PAGE_SIZE);
                store::read(s.stores.get(slot.store)?, slot.index, buf)?;
                // SAFETY: `buf` is the page lock's I/O buffer, a page long, alive for the call.
                unsafe { s.uffd.copy(buf.as_ptr(), s.map.host(p), PAGE_SIZE, false) }?;
                EventCounters::add(&s.counters.mapper_refetches, 1);
                state.table.refetched(p);
            }
        }
        drop(self.reclaim.hold_to_cap(s, state));
        Ok(())
    }

    fn disk_write_elide(&self, disk: u8, pages: &[DiskPage]) -> Vec<u64> {
        let s = self.core;
        let (Some(cfg), Some(ind)) = (s.indirections, s.stores.indirect(disk)) else {
            return Vec::new();
        };
        let mut state = self.reclaim.lock_settled(s);
        if !state.attached {
            return Vec::new();
        }
        let pool = s.stores.swap.pool.as_ref();
        let mut elided = Vec::new();
        for (p, ib) in self.disk_pages(disk, pages) {
            let PageState::Swapped(b) = state.table.state(p) else {
                continue;
            };
            // A restored page's block is in the snapshot's memory file, which the log cannot
            // name: the write goes to the image as usual.
            if state.table.blocks.is_saved(b) {
                continue;
            }
            if state.indirections >= cfg.max {
                EventCounters::add(&ind.counters.refused, 1);
                continue;
            }
            // A pooled block would not survive a crash; reading it is a memory copy anyway.
            if pool.is_some_and(|pool| pool.contains(b)) || !state.table.blocks.add_ref(b) {
                continue;
            }
            state.indirections += 1;
            ind.elide(ib.block, b);
            elided.push(u64::from(ib.block));
        }
        elided.sort_unstable();
        elided
    }

    fn disk_write_end(&self, disk: u8, offset: u64, len: u64, landed: bool) -> std::io::Result<()> {
        let s = self.core;
        let Some(ind) = s.stores.indirect(disk) else {
            return Ok(());
        };
        let first = u32::try_from(offset / PAGE_SIZE as u64).unwrap_or(u32::MAX);
        let end = u32::try_from((offset + len).div_ceil(PAGE_SIZE as u64)).unwrap_or(u32::MAX);
        let (freed, r) =
            ind.write_ends(first, end, landed, || s.stores.swap.file.sync_if_written());
        s.free_indirections(freed);
        r
    }

    fn disk_flush(&self, disk: u8) -> std::io::Result<()> {
        let s = self.core;
        let Some(ind) = s.stores.indirect(disk) else {
            return Ok(());
        };
        let freed = ind.flush(|| s.stores.swap.file.sync_if_written())?;
        s.free_indirections(freed);
        Ok(())
    }

    fn disk_read_split(&self, disk: u8, offset: u64, buf: &mut [u8]) -> std::io::Result<bool> {
        match self.core.stores.image(disk) {
            Some(image) => image.read_split(offset, buf),
            None => Ok(false),
        }
    }

    fn disk_write_sources(&self, disk: u8, pages: &[DiskPage]) -> usize {
        let s = self.core;
        let mut state = self.reclaim.lock_settled(s);
        let sources = self.disk_pages(disk, pages);
        // The pages the device is about to read that are swapped out: each will be swapped in
        // only to be written out (double paging). A sampled page comes back from the sample
        // store, in host memory.
        let out = if state.attached {
            sources
                .iter()
                .filter(|&&(p, _)| {
                    matches!(
                        state.table.state(p),
                        PageState::Swapped(_) | PageState::OnDisk(_)
                    )
                })
                .count()
        } else {
            0
        };
        EventCounters::add(&s.counters.double_paging_swap_ins, out as u64);
        self.record_sources(&mut state, sources);
        out
    }

    fn disk_write_done(&self, disk: u8, pages: &[DiskPage], offset: u64, data: &[u8]) {
        let s = self.core;
        if !s.mech.mapper {
            return;
        }
        let mut state = self.reclaim.lock_settled(s);
        for (p, ib) in self.disk_pages(disk, pages) {
            // Only the sources recorded as pending (none before the takeover) are digested:
            // what the device wrote, from its buffer, and what the page holds now.
            if !state.table.write_pending(p, ib) || !is_resident(state.table.state(p)) {
                continue;
            }
            let Some(block) = block_bytes(ib, offset, data) else {
                continue;
            };
            // SAFETY: `p` is resident and the page lock is held, so it stays mapped while it is
            // read; it lies in a live guest RAM mapping. A guest write racing the read makes
            // the digests differ (no mirror) or is caught by the digest at reclaim.
            let page = unsafe { std::slice::from_raw_parts(s.map.host(p) as *const u8, PAGE_SIZE) };
            let (written, now) = (s.digest.page(block), s.digest.page(page));
            state.table.disk_write_done(p, ib, written, now);
        }
    }

    fn discard(&self, ranges: &[GuestRange], why: Discard) -> std::io::Result<u64> {
        let s = self.core;
        let to = match why {
            Discard::Balloon => PageState::Ballooned,
            Discard::Reported => PageState::Reported,
        };
        let mut state = self.reclaim.lock_settled(s);
        let mut discarded = 0u64;
        for r in ranges {
            let (Some(first), true) = (s.map.page_of_gpa(r.addr), r.len > 0) else {
                continue;
            };
            let n = u32::try_from(r.len / PAGE_SIZE as u64).unwrap_or(0);
            // Dropped first; the table changes only for what was dropped, so a failure
            // leaves pages resident and recorded as such.
            let mut mapped = Vec::new();
            for p in first..first + n {
                // Before the takeover no page is known to be resident: drop them all.
                if !state.attached || is_resident(state.table.state(p)) {
                    mapped.push(p);
                } else {
                    state.table.discard(p, to);
                }
            }
            for (f, c) in runs(&mapped) {
                crate::takeover::split_huge(s, &mut state, f, c);
                dontneed(
                    &s.mem,
                    GuestRange {
                        addr: s.map.gpa(f),
                        len: u64::from(c) * PAGE_SIZE as u64,
                    },
                )?;
                for p in f..f + c {
                    state.table.discard(p, to);
                    state.prefetched[p as usize] = false;
                }
            }
            s.written.note(first, n);
            discarded += u64::from(n);
        }
        let c = if why == Discard::Balloon {
            &s.counters.ballooned
        } else {
            &s.counters.reported
        };
        EventCounters::add(c, discarded);
        Ok(discarded)
    }

    /// The deflated pages are the guest's again. After the takeover they are mapped at once to
    /// the shared zero page, as far as there is room under the limit: the guest takes them back
    /// in the order its allocator hands them out, scattered, and each first touch would
    /// otherwise be a fault round trip through the pager for one page. Mapped, a read costs
    /// nothing and a write copies the zero page in the kernel, as it would with no pager; no
    /// memory is taken until the guest writes.
    fn deflate(&self, ranges: &[GuestRange]) {
        let s = self.core;
        let mut state = self.reclaim.lock_settled(s);
        let mut back = Vec::new();
        for r in ranges {
            if let Some(first) = s.map.page_of_gpa(r.addr) {
                for p in first..first + u32::try_from(r.len / PAGE_SIZE as u64).unwrap_or(0) {
                    if state.table.deflate(p) {
                        back.push(p);
                    }
                }
            }
        }
        if !state.attached || back.is_empty() || !self.reclaim.sees_zero_mappings() {
            return;
        }
        back.sort_unstable();
        let mut room = s.limit().saturating_sub(state.table.resident());
        let mut mapped = 0u64;
        for (first, n) in s.map.region_runs(&back) {
            let n = n.min(room);
            if n == 0 {
                break;
            }
            let r = s.uffd.zeropage(s.map.host(first), n as usize * PAGE_SIZE);
            let done = r.as_ref().map_or_else(|e| e.pages.min(n), |()| n);
            for p in first..first + done {
                state.table.installed(p, FaultAction::Zero);
                state.deflated.push(p);
            }
            s.written.note(first, done);
            mapped += u64::from(done);
            room -= done;
            if let Err(e) = r {
                // The rest stay zero pages to be faulted in: nothing is lost.
                tracing::debug!("pager: cannot map deflated pages at {first}: {e}");
                break;
            }
        }
        EventCounters::add(&s.counters.deflated_mapped, mapped);
        if state.deflated.len() > state.table.len() as usize {
            // A balloon that keeps moving lists pages again and again; keep those that may
            // still map the zero page, once each.
            let Pages {
                table, deflated, ..
            } = &mut *state;
            let mut seen = std::collections::HashSet::new();
            deflated.retain(|&p| {
                table.state(p) == PageState::Resident { clean: None } && seen.insert(p)
            });
        }
    }
}
