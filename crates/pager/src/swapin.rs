//! Moving pages between the pool and the rest without a fault asking for it: the pool's flusher
//! (MemFlex §3.3, hybrid swap-out) and proactive swap-in (§3.4).
//!
//! - **Flusher** (thread `pool-flush`): while the pool is above its spill mark, its least recent
//!   blocks go to the swap file in sorted runs ([`crate::pool::Pool::spill`]); on every wake-up
//!   (at least once a second) it first drops blocks the page table has freed.
//! - **Proactive swap-in** (on the reclaim thread): when the limit rises (or goes), swapped pages
//!   come back in runs of up to [`RUN`] pages without waiting for their faults: pooled pages
//!   first, most recently pooled first (MemFlex's order: the last swapped out is the likeliest
//!   to be used), then pages in the swap file in block order (long sequential reads). The page
//!   lock is taken for [`BATCH`] runs at a time, so the pager thread serves faults in between;
//!   it stops when the room under the limit (less a reclaim chunk, so reclaim is not woken) is
//!   used up or the limit shrinks again. Pages come back clean, write-protected and keep their
//!   blocks, as after a read fault.

use std::sync::atomic::Ordering;

use crate::pager::{PagerFailure, Pages, Shared, PAGE};
use crate::pool::{PoolCounters, FLUSH_BATCH};
use crate::state::{Block, PageIdx, PageState};
use crate::store;
use crate::swap::AlignedBuf;

/// Most pages brought back by one read and one `UFFDIO_COPY`.
pub(crate) const RUN: u32 = 64;
/// Runs per hold of the page lock.
const BATCH: usize = 16;

impl Shared {
    /// The pool's flusher thread.
    pub(crate) fn flush_thread(&self) {
        let Some(pool) = &self.stores.swap.pool else {
            return;
        };
        let mut buf = AlignedBuf::new(FLUSH_BATCH * PAGE);
        loop {
            pool.wait_for_work();
            // Freed blocks are dropped once per wake-up (a scan of the whole pool), then the
            // pool spills round by round down to its mark.
            pool.purge(|blocks: &[Block]| {
                let pages = self.lock();
                blocks
                    .iter()
                    .map(|&b| pages.table.blocks.refs(b) > 0)
                    .collect()
            });
            loop {
                match pool.spill(&self.stores.swap.file, &mut buf) {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => {
                        // Nothing is lost (the blocks stay in the pool), but the pool cannot
                        // make room: once it is full, reclaim writes to the file, which fails
                        // the same way and pauses the VM. Tried again every second.
                        tracing::error!("pager: the pool cannot spill: {e}");
                        break;
                    }
                }
            }
        }
    }

    /// Pages that may come in without taking the VM over its limit less one reclaim chunk.
    fn room(&self, pages: &Pages) -> u32 {
        self.limit()
            .saturating_sub(self.batch)
            .saturating_sub(pages.table.resident())
    }

    /// Proactive swap-in, when asked for (the limit rose): see the module doc.
    pub(crate) fn swap_in_proactively(&self) {
        if !self.proactive || !self.swap_in_wanted.swap(false, Ordering::SeqCst) {
            return;
        }
        let Some(pool) = &self.stores.swap.pool else {
            return;
        };
        let (pooled, on_disk) = {
            let pages = self.lock();
            if !pages.attached || pages.table.census().swapped == 0 || self.room(&pages) == 0 {
                return;
            }
            let recency = pool.recency();
            let mut pooled = Vec::new();
            let mut on_disk = Vec::new();
            for p in 0..pages.table.len() {
                if let PageState::Swapped(b) = pages.table.state(p) {
                    match recency.get(&b) {
                        Some(&seq) => pooled.push((std::cmp::Reverse(seq), p)),
                        None => on_disk.push((b, p)),
                    }
                }
            }
            pooled.sort_unstable();
            on_disk.sort_unstable();
            (
                pooled.into_iter().map(|(_, p)| p).collect::<Vec<_>>(),
                on_disk.into_iter().map(|(_, p)| p).collect::<Vec<_>>(),
            )
        };
        let c = &pool.counters;
        for (list, counter) in [
            (pooled, &c.proactive_from_pool),
            (on_disk, &c.proactive_from_disk),
        ] {
            for batch in list.chunks(BATCH) {
                let mut pages = self.lock();
                for &p in batch {
                    if self.room(&pages) == 0 || self.swap_in_wanted.load(Ordering::SeqCst) {
                        // Full, or the limit moved again: start over from the new one.
                        return;
                    }
                    match self.install_swapped_run(&mut pages, p, counter) {
                        Ok(()) => {}
                        Err(e) => {
                            drop(pages);
                            self.pause(PagerFailure::Fault {
                                page: p,
                                error: e.to_string(),
                            });
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Brings back `p` and the pages after it whose blocks follow its block (up to [`RUN`] and
    /// the room left), if `p` is still swapped and not in a reclaim chunk.
    fn install_swapped_run(
        &self,
        pages: &mut Pages,
        p: PageIdx,
        counter: &std::sync::atomic::AtomicU64,
    ) -> std::io::Result<()> {
        let PageState::Swapped(b) = pages.table.state(p) else {
            return Ok(());
        };
        let max = RUN.min(self.room(pages)).min(pages.table.len() - p);
        let mut n = 1;
        while n < max
            && self.map.same_region(p, p + n)
            && pages.table.state(p + n) == PageState::Swapped(b + n)
        {
            n += 1;
        }
        let len = n as usize * PAGE;
        let buf = pages.io.get(len);
        store::read(&self.stores.swap, b, buf)?;
        // SAFETY: `buf` is the page lock's I/O buffer (at least RUN pages), `len` bytes long, alive for the call.
        let copied = unsafe { self.uffd.copy(buf.as_ptr(), self.map.host(p), len, true) };
        let done = copied.as_ref().map_or_else(|e| e.pages.min(n), |()| n);
        pages.table.install_run(p, done, true);
        PoolCounters::add(counter, done);
        copied?;
        Ok(())
    }
}
