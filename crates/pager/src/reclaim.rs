//! Reclaim: taking pages out of guest RAM while resident pages exceed the limit.
//!
//! The limit is the high watermark; once above it, reclaim goes down to a low watermark
//! (`batch` or 1/64 of the limit below it, whichever is more) so it does not run on every
//! fault. It works in chunks of at most `batch` pages, each under the page lock once:
//!
//! 1. victims are chosen (`victim.rs`, through the page table) and write-protected first;
//! 2. each is classified: dropped as zero, dropped because a store slot still holds it (a clean
//!    swap block, or the image block it mirrors), or written to new swap blocks (runs of
//!    consecutive blocks in one write);
//! 3. only then are they released with `MADV_DONTNEED`. A write that arrives in between waits
//!    on the protection, finds the page gone, and faults it back in: no write is lost between
//!    checking and dropping.
//!
//! The pager thread reclaims down to the low watermark chunk by chunk and serves the faults that
//! arrived after each chunk ([`Shared::reclaim_to_limit`]), so a shrink of any size holds a
//! fault up for one chunk at most. Other threads that install pages pay with one chunk
//! ([`Shared::keep_limit`]) and leave the rest to the pager thread. A chunk that fails pauses
//! the VM; nothing is reclaimed while it is paused.

use std::time::Instant;

use memvisor_devices::ram::{dontneed, GuestRange, PAGE_SIZE};

use crate::pager::{PagerFailure, Pages, Shared, PAGE};
use crate::ram_map::runs;
use crate::state::{Disposition, PageIdx, PageState};
use crate::stats::Counters;
use crate::store;

impl Shared {
    /// The low watermark for `limit`: where a reclaim that started above the limit stops.
    fn low_watermark(&self, limit: u32) -> u32 {
        limit.saturating_sub(self.batch.max(limit / 64))
    }

    /// Pager thread: if over the limit, reclaims down to the low watermark one chunk at a time,
    /// serving pending faults between chunks. Returns why the pager cannot go on, if it cannot.
    pub(crate) fn reclaim_to_limit(&self) -> Result<(), String> {
        if self.lock().table.resident() <= self.limit() {
            return Ok(());
        }
        loop {
            let mut pages = self.lock();
            let low = self.low_watermark(self.limit());
            let resident = pages.table.resident();
            if resident <= low || self.vcpus.is_paused() {
                return Ok(());
            }
            if !self.reclaim_chunk(&mut pages, (resident - low).min(self.batch)) {
                return Ok(());
            }
            drop(pages);
            self.serve_pending_faults()?;
        }
    }

    /// Any thread that installed pages: if over the limit, reclaims one chunk toward the low
    /// watermark (the pager thread does the rest, between faults).
    pub(crate) fn keep_limit(&self, pages: &mut Pages) {
        let limit = self.limit();
        let resident = pages.table.resident();
        if resident <= limit || self.vcpus.is_paused() {
            return;
        }
        let n = (resident - self.low_watermark(limit)).min(self.batch);
        self.reclaim_chunk(pages, n);
    }

    /// Reclaims up to about `n` pages; returns whether it reclaimed any. A failure pauses the VM.
    fn reclaim_chunk(&self, pages: &mut Pages, n: u32) -> bool {
        match self.reclaim_batch(pages, n) {
            Ok(done) => done > 0,
            Err(e) => {
                self.pause(PagerFailure::Reclaim {
                    error: e.to_string(),
                });
                false
            }
        }
    }

    fn page_is_zero(&self, p: PageIdx) -> bool {
        let host = self.map.host(p) as *const u64;
        // SAFETY: `p` is resident (the caller checked the table) and write-protected, so the page
        // is mapped and nobody changes it while we read; it lies in a live guest RAM mapping.
        let words = unsafe { std::slice::from_raw_parts(host, PAGE / 8) };
        words.iter().all(|&w| w == 0)
    }

    fn reclaim_batch(&self, pages: &mut Pages, n: u32) -> std::io::Result<u32> {
        let t0 = Instant::now();
        let victims = pages.table.pick_victims(n);
        if victims.is_empty() {
            return Ok(0);
        }
        let victim_runs: Vec<(PageIdx, u32)> = runs(&victims)
            .into_iter()
            .flat_map(|(first, n)| self.map.split_by_region(first, n))
            .collect();
        for &(first, n) in &victim_runs {
            self.uffd
                .write_protect(self.map.host(first), n as usize * PAGE)?;
        }
        let mut to_write = Vec::new();
        let mut decided = Vec::with_capacity(victims.len());
        for &p in &victims {
            let dirty = matches!(pages.table.state(p), PageState::Resident { clean: None });
            let is_zero = pages.table.mech.zero_detection && dirty && self.page_is_zero(p);
            let d = pages.table.disposition(p, is_zero);
            if d == Disposition::Write {
                to_write.push(p);
            }
            decided.push((p, d));
        }
        let want = u32::try_from(to_write.len()).unwrap_or(u32::MAX);
        let blocks = pages.table.blocks.alloc(want);
        if blocks.len() < to_write.len() {
            blocks
                .into_iter()
                .for_each(|b| pages.table.blocks.release(b));
            return Err(std::io::Error::other("the swap store is full"));
        }
        // Write runs of consecutive blocks with one write each.
        let mut i = 0;
        while i < blocks.len() {
            let mut j = i + 1;
            while j < blocks.len() && blocks[j] == blocks[j - 1] + 1 {
                j += 1;
            }
            let buf = pages.io.get((j - i) * PAGE);
            for (k, &p) in to_write[i..j].iter().enumerate() {
                let src = self.map.host(p) as *const u8;
                // SAFETY: `p` is resident and write-protected: mapped, and unchanged while we copy.
                let page = unsafe { std::slice::from_raw_parts(src, PAGE) };
                buf[k * PAGE..(k + 1) * PAGE].copy_from_slice(page);
            }
            if let Err(e) = store::write(&self.stores.swap, blocks[i], buf) {
                blocks.iter().for_each(|&b| pages.table.blocks.release(b));
                return Err(e);
            }
            i = j;
        }
        // A run that cannot be released stays resident (still protected, its table entry
        // unchanged) and its new blocks go back; the error is returned once the rest is recorded.
        let mut kept: Vec<(PageIdx, u32)> = Vec::new();
        let mut release_error = None;
        for &(first, n) in &victim_runs {
            self.split_huge(pages, first, n);
            let range = GuestRange {
                addr: self.map.gpa(first),
                len: u64::from(n) * PAGE_SIZE,
            };
            if let Err(e) = dontneed(&self.mem, range) {
                kept.push((first, n));
                release_error = Some(std::io::Error::other(format!(
                    "releasing guest pages failed: {e}"
                )));
            }
        }
        let mut written = blocks.into_iter();
        for (p, d) in decided {
            let block = if d == Disposition::Write {
                written.next()
            } else {
                None
            };
            if kept.iter().any(|&(first, n)| p >= first && p < first + n) {
                if let Some(b) = block {
                    pages.table.blocks.release(b);
                }
                continue;
            }
            pages.prefetched[p as usize] = false;
            pages.table.reclaimed(p, d, block);
            let c = match d {
                Disposition::DropZero => &self.counters.reclaimed_zero,
                Disposition::DropClean(_) => &self.counters.reclaimed_clean,
                Disposition::Write => &self.counters.reclaimed_written,
                Disposition::DropMirrored(_) => &self.counters.reclaimed_mirrored,
            };
            Counters::add(c, 1);
        }
        Counters::add(&self.counters.reclaim_batches, 1);
        self.reclaim_latency.record(t0.elapsed());
        if let Some(e) = release_error {
            return Err(e);
        }
        Ok(u32::try_from(victims.len()).unwrap_or(0))
    }
}
