//! The flusher's side of the pool: waiting for work, writing the least recently pooled blocks
//! to the swap file in long runs (spilling), and dropping blocks the state table has freed.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use memvisor_devices::iobuf::IoBuf;

use super::slab::{kept, slot_bytes};
use super::{Pool, FLUSH_BATCH, PURGE_BATCH};
use crate::page::{Block, PAGE_SIZE};
use crate::store::swap::SwapFile;

impl Pool {
    /// Waits until the flusher has work (the pool is above its spill mark), or a second passed
    /// (time to drop freed blocks).
    pub(crate) fn wait_for_work(&self) {
        let inner = self.lock();
        if inner.used_bytes <= self.spill_mark() {
            let _ = self
                .wake
                .wait_timeout(inner, Duration::from_secs(1))
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// A purge then a spill, as the flusher does after a wake-up.
    #[cfg(test)]
    pub(super) fn flush_round(
        &self,
        file: &SwapFile,
        live: impl FnOnce(&[Block]) -> Vec<bool>,
        buf: &mut IoBuf,
    ) -> std::io::Result<bool> {
        self.purge(live);
        self.spill(file, buf)
    }

    /// Drops the pooled blocks `live` says the state table has freed (and not written again
    /// since: a freed block may have been reused).
    pub(crate) fn purge(&self, live: impl FnOnce(&[Block]) -> Vec<bool>) {
        let pooled: Vec<(Block, u64)> = self
            .lock()
            .entries
            .iter()
            .map(|(&b, e)| (b, e.seq))
            .collect();
        let blocks: Vec<Block> = pooled.iter().map(|&(b, _)| b).collect();
        let alive = live(&blocks);
        // In batches, so faults reading the pool and `GET /stats` wait for one batch at most.
        for (pooled, alive) in pooled.chunks(PURGE_BATCH).zip(alive.chunks(PURGE_BATCH)) {
            let mut inner = self.lock();
            let mut purged = 0;
            for (&(b, seq), &keep) in pooled.iter().zip(alive) {
                if !keep && inner.entries.get(&b).is_some_and(|e| e.seq == seq) {
                    inner.remove(b);
                    purged += 1;
                }
            }
            self.counters.purged.fetch_add(purged, Ordering::Relaxed);
        }
    }

    /// While the pool is above its spill mark, writes its least recent blocks (up to
    /// [`FLUSH_BATCH`], sorted by block so runs are sequential) to `file` and frees their slots.
    /// The blocks' bytes are copied out under the pool lock and decompressed after it.
    /// Returns whether it spilled anything (so there may be more to do).
    pub(crate) fn spill(&self, file: &SwapFile, buf: &mut IoBuf) -> std::io::Result<bool> {
        let t0 = Instant::now();
        // Down to 90 % of the mark, so the flusher does not start again at once.
        let low = self.spill_mark() * 9 / 10;
        let mut st = self.spill_state.lock().unwrap_or_else(|e| e.into_inner());
        let st = &mut *st;
        // (block, seq, where its bytes are in `staged`, how many)
        let mut batch: Vec<(Block, u64, usize, usize)> = {
            let inner = self.lock();
            let mut over = inner.used_bytes.saturating_sub(low);
            let mut batch = Vec::new();
            for (&seq, &b) in &inner.order {
                if over == 0 || batch.len() == FLUSH_BATCH {
                    break;
                }
                let size = inner.entries.get(&b).map_or(0, |e| slot_bytes(e.class()));
                over = over.saturating_sub(size as u64);
                batch.push((b, seq, 0, 0));
            }
            batch
        };
        if batch.is_empty() {
            return Ok(false);
        }
        batch.sort_unstable();
        st.staged.clear();
        {
            let inner = self.lock();
            for item in &mut batch {
                // Only the flusher takes blocks out, so each is still there; one rewritten
                // meanwhile is newer, and written as it is now.
                if let Some(e) = inner.entries.get(&item.0) {
                    item.2 = st.staged.len();
                    st.staged.extend_from_slice(kept(&inner.chunks, e));
                    item.3 = st.staged.len() - item.2;
                }
            }
        }
        let data = buf.get(batch.len() * PAGE_SIZE);
        for (i, &(_, _, off, len)) in batch.iter().enumerate() {
            if len > 0 {
                st.unpack.unpack(
                    &st.staged[off..off + len],
                    &mut data[i * PAGE_SIZE..(i + 1) * PAGE_SIZE],
                )?;
            }
        }
        let mut i = 0;
        while i < batch.len() {
            if batch[i].3 == 0 {
                i += 1;
                continue;
            }
            let mut j = i + 1;
            while j < batch.len() && batch[j].0 == batch[j - 1].0 + 1 && batch[j].3 > 0 {
                j += 1;
            }
            crate::store::write(file, batch[i].0, &data[i * PAGE_SIZE..j * PAGE_SIZE])?;
            self.counters.spill_writes.fetch_add(1, Ordering::Relaxed);
            i = j;
        }
        let mut inner = self.lock();
        let mut spilled = 0;
        for (b, seq, _, len) in batch {
            // Rewritten meanwhile: the pool's copy is newer; keep it.
            if len > 0 && inner.entries.get(&b).is_some_and(|e| e.seq == seq) {
                inner.remove(b);
                spilled += 1;
            }
        }
        drop(inner);
        self.counters.spilled.fetch_add(spilled, Ordering::Relaxed);
        let us = u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.counters.spill_us.fetch_add(us, Ordering::Relaxed);
        Ok(true)
    }
}
