//! Tesseract's two defragmentations (§5), run in batches on a background thread: guest-disk
//! defragmentation copies indirected blocks back into the image, swap-file defragmentation
//! moves each write's indirected blocks next to each other in the swap file.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;

use memvisor_devices::iobuf::IoBuf;

use super::map::{in_order, Indirect};
use super::recovery::copy_blocks;
use crate::page::{Block, PAGE_SIZE};
use crate::stats::EventCounters;

/// Most blocks swap-file defragmentation moves at once (one swap-file write and sync).
const REGROUP_MAX: usize = 256;

impl Indirect {
    /// Guest-disk defragmentation (§5.2), one batch: copies up to `max` indirected blocks back
    /// into the image (first those guest reads needed, then the map in block order), skipping
    /// the blocks of a guest write in progress, and ends their indirections in the log, the
    /// image synced first and the log after, whatever `LogSync` says: the blocks are freed
    /// once no log can name them. Returns the swap-file blocks whose references the caller
    /// drops; empty when there is nothing to do.
    pub fn defragment(&self, max: usize) -> std::io::Result<Vec<Block>> {
        let mut s = self.lock();
        if s.log.is_none() || s.map.is_empty() {
            return Ok(Vec::new());
        }
        let mut batch: Vec<(u32, Block)> = Vec::new();
        while batch.len() < max {
            let Some(b) = s.urgent.pop_front() else { break };
            if let Some(&t) = s.map.get(&b) {
                if !s.being_written(b) && !batch.iter().any(|x| x.0 == b) {
                    batch.push((b, t));
                }
            }
        }
        let from = s.cursor;
        let walk: Vec<(u32, Block)> = s
            .map
            .range(from..)
            .chain(s.map.range(..from))
            .map(|(&b, &t)| (b, t))
            .filter(|&(b, _)| !s.being_written(b) && !batch.iter().any(|x| x.0 == b))
            .take(max - batch.len())
            .collect();
        batch.extend(walk);
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        // The copies go without the lock, so guest reads (which read these blocks from the
        // swap file meanwhile) do not wait for them; guest writes of them do.
        s.defragging = batch.iter().map(|&(b, _)| b).collect();
        drop(s);
        let copied = copy_blocks(&self.writer, &self.store, batch.iter().copied())
            .and_then(|_| self.writer.sync_data());
        let mut s = self.lock();
        s.defragging.clear();
        self.copied.notify_all();
        copied?;
        // Nothing but this batch ends these indirections while they are copied.
        let batch: Vec<(u32, Block)> = batch
            .into_iter()
            .filter(|&(b, t)| s.map.get(&b) == Some(&t))
            .collect();
        let changes: Vec<(u32, Option<Block>)> = batch.iter().map(|&(b, _)| (b, None)).collect();
        match s.log.as_mut() {
            Some(l) => l.append(&changes, true)?,
            None => return Ok(Vec::new()),
        }
        for &(b, _) in &batch {
            s.map.remove(&b);
        }
        s.cursor = batch.last().map_or(0, |&(b, _)| b.saturating_add(1));
        EventCounters::add(&self.counters.defragmented, batch.len() as u64);
        Ok(batch.into_iter().map(|(_, t)| t).collect())
    }

    /// Swap-file defragmentation (§5.1), one guest write's worth: the indirections the oldest
    /// queued write made, if they are still live and scattered in the swap file, are copied to
    /// `alloc(n)`, a run of `n` free swap-file blocks the caller reserves (each with a reference
    /// for its indirection), in image-block order; the swap file is synced, then the log of the
    /// moves. Nothing waits for the copy; an indirection a guest write ended meanwhile stays
    /// ended, and its new block is given back. Returns the
    /// swap-file blocks whose references the caller drops (the old targets, and the new blocks
    /// not used, all of them on failure), and whether a group was moved (false: nothing to
    /// group, or no room for the run).
    pub fn regroup(
        &self,
        alloc: impl FnOnce(u32) -> Option<Block>,
    ) -> (Vec<Block>, std::io::Result<bool>) {
        let mut s = self.lock();
        // The queued writes' live, scattered indirections, write after write, each in image
        // order, up to REGROUP_MAX blocks: they go to one run, so each write's blocks follow
        // each other there.
        let (mut batch, mut taken) = (Vec::new(), std::collections::HashSet::new());
        let mut writes = 0u64;
        while batch.len() < REGROUP_MAX {
            let Some(blocks) = s.groups.pop_front() else {
                break;
            };
            let live: BTreeMap<u32, Block> = blocks
                .into_iter()
                .filter(|&b| !s.being_written(b) && !taken.contains(&b))
                .filter_map(|b| s.map.get(&b).map(|&t| (b, t)))
                .collect();
            if !in_order(&live) {
                taken.extend(live.keys().copied());
                batch.extend(live);
                writes += 1;
            }
        }
        if batch.is_empty() {
            return (Vec::new(), Ok(false));
        }
        let n = u32::try_from(batch.len()).unwrap_or(u32::MAX);
        // Nothing waits for the copy: it writes only the new run, which nothing else uses, and
        // the old blocks keep their references until the moves are logged.
        drop(s);
        let moved = alloc(n).map(|to| (to, self.move_blocks(&batch, to)));
        let mut s = self.lock();
        let Some((to, copied)) = moved else {
            // No room in the swap file (or under the maximum): these stay as they are.
            return (Vec::new(), Ok(false));
        };
        let fresh = (to..to + n).collect::<Vec<Block>>();
        if let Err(e) = copied {
            return (fresh, Err(e));
        }
        // A guest write (or the VM's end) may have ended some of these indirections meanwhile.
        let mut changes = Vec::new();
        let mut freed = Vec::new();
        for (&(b, old), new) in batch.iter().zip(fresh) {
            if s.map.get(&b) == Some(&old) {
                changes.push((b, Some(new)));
                freed.push(old);
            } else {
                freed.push(new);
            }
        }
        let logged = match s.log.as_mut() {
            _ if changes.is_empty() => Ok(()),
            Some(l) => l.append(&changes, true),
            None => Err(std::io::Error::other("the indirection log is closed")),
        };
        if let Err(e) = logged {
            // The log may hold some of the moves: their old blocks stay referenced, and so do
            // the new ones (a crash then reads whichever the log names; both hold the data).
            let unused = batch
                .iter()
                .zip(to..to + n)
                .filter(|&(&(b, old), _)| s.map.get(&b) != Some(&old))
                .map(|(_, new)| new)
                .collect();
            return (unused, Err(e));
        }
        for &(b, t) in &changes {
            if let Some(t) = t {
                s.map.insert(b, t);
            }
        }
        EventCounters::add(&self.counters.regrouped, changes.len() as u64);
        EventCounters::add(&self.counters.regrouped_writes, writes);
        (freed, Ok(true))
    }

    /// Copies the swap-file blocks of `batch` (in its order) to the run at `to`: one read per
    /// run of them that follow each other, one write, then a sync of the swap file.
    fn move_blocks(&self, batch: &[(u32, Block)], to: Block) -> std::io::Result<()> {
        let mut buf = IoBuf::new(batch.len() * PAGE_SIZE);
        let data = buf.get(batch.len() * PAGE_SIZE);
        let mut k = 0;
        while k < batch.len() {
            let mut n = 1;
            while k + n < batch.len() && batch[k + n - 1].1.checked_add(1) == Some(batch[k + n].1) {
                n += 1;
            }
            self.store.read_exact_at(
                &mut data[k * PAGE_SIZE..(k + n) * PAGE_SIZE],
                u64::from(batch[k].1) * PAGE_SIZE as u64,
            )?;
            k += n;
        }
        self.store
            .write_all_at(data, u64::from(to) * PAGE_SIZE as u64)?;
        self.store.sync_data()
    }
}
