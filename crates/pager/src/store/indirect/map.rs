//! The map of one writable disk ([`Indirect`]): image block → swap-file block, with guest reads
//! served through it (split reads), guest writes ending indirections, and the log kept in step.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard};

use memvisor_devices::iobuf::IoBuf;

use super::error::{io_err, IndirectError};
use super::log::{Log, HEADER, RECORD};
use super::recovery::{copy_back, copy_blocks};
use crate::config::{Defrag, LogSync};
use crate::page::{Block, PAGE_SIZE};
use crate::stats::EventCounters;
use crate::store::swap::open_direct;

/// Most blocks guest reads queue for defragmentation to copy back first.
const URGENT_MAX: usize = 4096;
/// Most swap-file blocks of ended indirections held until the log that ends them is synced.
const UNSYNCED_ENDS_MAX: usize = 1024;
/// Most writes whose indirections wait for swap-file defragmentation to group them.
const GROUPS_MAX: usize = 4096;

/// What the indirections of one disk did; every field only grows.
#[derive(Debug, Default)]
pub struct IndirectCounters {
    /// Pages of guest disk writes that became indirections instead of being read back from the
    /// swap file (double paging avoided).
    pub elided: AtomicU64,
    /// Indirections ended by a guest write of their block.
    pub ended: AtomicU64,
    /// Guest reads (and Swap Mapper refaults) split between the image and the swap file.
    pub split_reads: AtomicU64,
    /// Blocks those reads took from the swap file.
    pub blocks_read: AtomicU64,
    /// Blocks copied back into the image because a guest write covered only part of them.
    pub copied_back: AtomicU64,
    /// Blocks copied back into the image at a clean exit.
    pub disentangled: AtomicU64,
    /// Pages of guest disk writes that stayed plain writes because the most indirections
    /// (`IndirectConfig::max`) were live.
    pub refused: AtomicU64,
    /// Times the log was rewritten to just the live map.
    pub compactions: AtomicU64,
    /// Blocks guest-disk defragmentation copied back into the image.
    pub defragmented: AtomicU64,
    /// Indirected blocks guest reads needed, which defragmentation then copied back first.
    pub defrag_urgent: AtomicU64,
    /// Reads split reads issued to the swap file (one per run of indirected blocks whose
    /// swap-file blocks follow each other).
    pub store_reads: AtomicU64,
    /// Blocks swap-file defragmentation moved next to the other blocks of their guest write.
    pub regrouped: AtomicU64,
    /// Guest writes whose indirections swap-file defragmentation grouped.
    pub regrouped_writes: AtomicU64,
}

pub(super) struct State {
    pub(super) map: BTreeMap<u32, Block>,
    pub(super) log: Option<Log>,
    /// Blocks of the write in progress that are to become indirections, and their targets
    /// (each holds a reference taken when it was elided).
    pub(super) pending: Vec<(u32, Block)>,
    /// The blocks of the guest write in progress (`first..end`): defragmentation leaves them
    /// alone, since the write may already have put newer data in the image.
    pub(super) writing: Option<(u32, u32)>,
    /// Indirected blocks guest reads needed, copied back first by defragmentation.
    pub(super) urgent: std::collections::VecDeque<u32>,
    /// Where defragmentation's walk through the map goes on from.
    pub(super) cursor: u32,
    /// The blocks defragmentation is copying without the lock: a guest write of one of them,
    /// and the end of the indirections, wait until the batch is done (`copied`).
    pub(super) defragging: Vec<u32>,
    /// The image blocks of guest writes that made indirections in scattered swap-file blocks,
    /// oldest first: what swap-file defragmentation groups.
    pub(super) groups: std::collections::VecDeque<Vec<u32>>,
    /// With [`LogSync::Flush`]: swap-file blocks of indirections that ended since the last
    /// flush. Their references are dropped once the log that ends them is synced, so a power
    /// loss never leaves a logged indirection to a block that was used again.
    pub(super) unsynced_ends: Vec<Block>,
    /// No compaction is tried while the log is this long or shorter: set after one failed.
    pub(super) compact_after: u64,
}

impl State {
    /// Whether image block `b` belongs to the guest write in progress.
    pub(super) fn being_written(&self, b: u32) -> bool {
        self.writing.is_some_and(|(f, e)| (f..e).contains(&b))
    }
}

/// The indirections of one writable disk.
pub struct Indirect {
    pub(super) image: PathBuf,
    pub(super) sync: LogSync,
    /// The defragmentation that runs, if any.
    pub(super) defrag: Option<Defrag>,
    /// The swap file, read directly (indirected blocks are never in the pool), and written by
    /// swap-file defragmentation only.
    pub(super) store: File,
    /// The image, for copying blocks back.
    pub(super) writer: File,
    pub(super) state: Mutex<State>,
    /// Signalled when a defragmentation batch is done.
    pub(super) copied: std::sync::Condvar,
    pub counters: IndirectCounters,
}

impl Indirect {
    /// Starts the indirections of `image` over the swap file at `store_path`.
    pub fn start(
        image: &Path,
        store_path: &Path,
        sync: LogSync,
        defrag: Option<Defrag>,
    ) -> Result<Self, IndirectError> {
        // Both with O_DIRECT where the file system allows, as the pager and the device use them:
        // the swap file has no page cache copy to go stale when a freed block is written again,
        // and blocks copied back do not sit dirty in the page cache, where the device's next
        // O_DIRECT read of them would have to write them out first.
        let store = open_direct(
            OpenOptions::new()
                .read(true)
                .write(defrag == Some(Defrag::Store)),
            store_path,
        )
        .map_err(io_err(store_path))?;
        let writer = open_direct(OpenOptions::new().write(true), image).map_err(io_err(image))?;
        let log = Log::create(image, store_path)?;
        Ok(Indirect {
            image: image.to_owned(),
            sync,
            defrag,
            store,
            writer,
            state: Mutex::new(State {
                map: BTreeMap::new(),
                log: Some(log),
                pending: Vec::new(),
                writing: None,
                urgent: std::collections::VecDeque::new(),
                cursor: 0,
                defragging: Vec::new(),
                groups: std::collections::VecDeque::new(),
                unsynced_ends: Vec::new(),
                compact_after: 0,
            }),
            copied: std::sync::Condvar::new(),
            counters: IndirectCounters::default(),
        })
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lock, once no block of `first..end` is being defragmented.
    pub(super) fn lock_without_defrag(&self, first: u32, end: u32) -> MutexGuard<'_, State> {
        let s = self.lock();
        self.copied
            .wait_while(s, |s| s.defragging.iter().any(|b| (first..end).contains(b)))
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Live indirections and the log's size in bytes.
    pub fn usage(&self) -> (u64, u64) {
        let s = self.lock();
        (s.map.len() as u64, s.log.as_ref().map_or(0, Log::len))
    }

    /// Records that `block` is to point at `target` once the write in progress lands (the
    /// caller took a reference on `target`).
    pub fn elide(&self, block: u32, target: Block) {
        self.lock().pending.push((block, target));
        EventCounters::add(&self.counters.elided, 1);
    }

    /// Reads `buf.len()` bytes at byte `offset` of the disk as the guest sees it from `image`
    /// (a read handle, `O_DIRECT` where possible: then `buf` and `offset` must be aligned):
    /// indirected blocks from the swap file, one read per run of them that lies in order in
    /// both files, and the rest from the image in runs. Returns false without reading if no
    /// block in the range is indirected.
    pub fn read(&self, image: &File, offset: u64, buf: &mut [u8]) -> std::io::Result<bool> {
        let first = u32::try_from(offset / PAGE_SIZE as u64).unwrap_or(u32::MAX);
        let end = u32::try_from((offset + buf.len() as u64).div_ceil(PAGE_SIZE as u64))
            .unwrap_or(u32::MAX);
        let s = self.lock();
        // Holes: runs of indirected blocks in order in both files (first image block, first
        // swap-file block, blocks).
        let mut holes: Vec<(u32, Block, u32)> = Vec::new();
        for (&b, &t) in s.map.range(first..end) {
            match holes.last_mut() {
                Some((hb, ht, n)) if *hb + *n == b && ht.checked_add(*n) == Some(t) => *n += 1,
                _ => holes.push((b, t, 1)),
            }
        }
        if holes.is_empty() {
            return Ok(false);
        }
        // The swap file first: one read for each run of holes whose blocks follow each other
        // there (whatever lies between them in the image), into `from_store` in hole order.
        let total: usize = holes.iter().map(|h| h.2 as usize).sum();
        let mut from_store = IoBuf::new(total * PAGE_SIZE);
        let data = from_store.get(total * PAGE_SIZE);
        let (mut reads, mut at, mut i) = (0u64, 0usize, 0usize);
        while i < holes.len() {
            let (mut j, mut n) = (i + 1, holes[i].2 as usize);
            while j < holes.len() && holes[j - 1].1.checked_add(holes[j - 1].2) == Some(holes[j].1)
            {
                n += holes[j].2 as usize;
                j += 1;
            }
            self.store.read_exact_at(
                &mut data[at * PAGE_SIZE..(at + n) * PAGE_SIZE],
                u64::from(holes[i].1) * PAGE_SIZE as u64,
            )?;
            reads += 1;
            at += n;
            i = j;
        }
        // Then the image between the holes, and the holes' bytes laid in.
        let aligned = offset % PAGE_SIZE as u64 == 0 && buf.len() % PAGE_SIZE == 0;
        let mut pos = offset;
        let end_byte = offset + buf.len() as u64;
        let mut tmp = IoBuf::new(PAGE_SIZE);
        let mut hole_data = 0usize;
        for hole in holes.iter().copied().map(Some).chain(std::iter::once(None)) {
            let run_end = hole.map_or(end_byte, |(b, _, _)| {
                (u64::from(b) * PAGE_SIZE as u64).max(pos)
            });
            if run_end > pos {
                let at = usize::try_from(pos - offset).unwrap_or(usize::MAX);
                let n = usize::try_from(run_end - pos).unwrap_or(usize::MAX);
                if aligned {
                    image.read_exact_at(&mut buf[at..at + n], pos)?;
                } else {
                    // An unaligned piece goes through whole blocks.
                    let mut p = pos;
                    while p < run_end {
                        let t = tmp.get(PAGE_SIZE);
                        image.read_exact_at(t, p / PAGE_SIZE as u64 * PAGE_SIZE as u64)?;
                        let from = usize::try_from(p % PAGE_SIZE as u64).unwrap_or(0);
                        let k = (PAGE_SIZE - from).min(usize::try_from(run_end - p).unwrap_or(0));
                        let at = usize::try_from(p - offset).unwrap_or(0);
                        buf[at..at + k].copy_from_slice(&t[from..from + k]);
                        p += k as u64;
                    }
                }
                pos = run_end;
            }
            let Some((b, _, n)) = hole else { break };
            let hole_start = u64::from(b) * PAGE_SIZE as u64;
            let hole_end = (hole_start + u64::from(n) * PAGE_SIZE as u64).min(end_byte);
            let from = hole_data * PAGE_SIZE + usize::try_from(pos - hole_start).unwrap_or(0);
            let k = usize::try_from(hole_end - pos).unwrap_or(0);
            let at = usize::try_from(pos - offset).unwrap_or(0);
            buf[at..at + k].copy_from_slice(&data[from..from + k]);
            hole_data += n as usize;
            pos = hole_end;
        }
        let blocks = holes.iter().flat_map(|&(b, _, n)| b..b + n);
        if self.defrag == Some(Defrag::Guest) {
            let mut s = s;
            for b in blocks.clone() {
                if s.urgent.len() < URGENT_MAX {
                    s.urgent.push_back(b);
                    EventCounters::add(&self.counters.defrag_urgent, 1);
                }
            }
        } else {
            drop(s);
        }
        EventCounters::add(&self.counters.split_reads, 1);
        EventCounters::add(&self.counters.blocks_read, blocks.count() as u64);
        EventCounters::add(&self.counters.store_reads, reads);
        Ok(true)
    }

    /// Before a guest write of `len` bytes at `offset`: its blocks are marked as being written,
    /// and an indirected block the write covers only in part is copied back into the image (its
    /// indirection ends when the write lands).
    pub fn write_begins(&self, offset: u64, len: u64) -> std::io::Result<()> {
        let b = PAGE_SIZE as u64;
        let block = |x: u64| u32::try_from(x).unwrap_or(u32::MAX);
        let (first, end) = (block(offset / b), block((offset + len).div_ceil(b)));
        let mut s = self.lock_without_defrag(first, end);
        s.writing = Some((first, end));
        let mut edges = Vec::new();
        if offset % b != 0 {
            edges.push(offset / b);
        }
        if (offset + len) % b != 0 {
            edges.push((offset + len) / b);
        }
        edges.dedup();
        let partial = edges
            .into_iter()
            .filter_map(|blk| u32::try_from(blk).ok())
            .filter_map(|blk| s.map.get(&blk).map(|&t| (blk, t)));
        let n = copy_blocks(&self.writer, &self.store, partial)?;
        EventCounters::add(&self.counters.copied_back, n);
        Ok(())
    }

    /// The guest's write of blocks `first..end` ended (`landed`: its data is in the image):
    /// logs and applies the new indirections and the ended ones, synced. Returns the swap-file
    /// blocks whose references the caller must drop: the ended indirections' targets, and on
    /// failure (or when the write did not land) the pending ones'.
    pub fn write_ends(
        &self,
        first: u32,
        end: u32,
        landed: bool,
        sync_store: impl FnOnce() -> std::io::Result<()>,
    ) -> (Vec<Block>, std::io::Result<()>) {
        let mut s = self.lock();
        s.writing = None;
        let pending = std::mem::take(&mut s.pending);
        if !landed {
            return (pending.iter().map(|&(_, t)| t).collect(), Ok(()));
        }
        // Every block of the range was written, directly or as a new indirection: the old
        // indirections there all end, and each drops its reference.
        let new: BTreeMap<u32, Block> = pending.iter().copied().collect();
        let mut changes: Vec<(u32, Option<Block>)> = Vec::new();
        let mut freed = Vec::new();
        for (&b, &t) in s.map.range(first..end) {
            freed.push(t);
            if !new.contains_key(&b) {
                changes.push((b, None));
            }
        }
        // A block elided twice in one request keeps the last; the first's reference goes.
        if new.len() < pending.len() {
            let mut kept: Vec<(u32, Block)> = new.iter().map(|(&b, &t)| (b, t)).collect();
            for &(b, t) in &pending {
                if let Some(i) = kept.iter().position(|&k| k == (b, t)) {
                    kept.swap_remove(i);
                } else {
                    freed.push(t);
                }
            }
        }
        for (&b, &t) in &new {
            changes.push((b, Some(t)));
        }
        if changes.is_empty() {
            return (freed, Ok(()));
        }
        // Every indirection whose block is freed here ended with this write: those the write
        // removed, those a new one replaced, and the first of a block elided twice.
        let ended = freed.len() as u64;
        let each = self.sync == LogSync::Write;
        let r = (|| {
            if each && !new.is_empty() {
                sync_store()?;
            }
            match s.log.as_mut() {
                Some(l) => l.append(&changes, each),
                None => Err(std::io::Error::other("the indirection log is closed")),
            }
        })();
        if let Err(e) = r {
            // Nothing changes: the guest gets an error, and the image blocks written stay
            // shadowed by their old indirections, as the log says.
            return (pending.iter().map(|&(_, t)| t).collect(), Err(e));
        }
        EventCounters::add(&self.counters.ended, ended);
        if !each {
            // Not yet synced: the ended indirections' blocks are freed at the next flush,
            // or once this many wait (a guest that seldom flushes would hold them all).
            s.unsynced_ends.append(&mut freed);
            if s.unsynced_ends.len() >= UNSYNCED_ENDS_MAX
                && s.log.as_ref().is_some_and(|l| l.file.sync_data().is_ok())
            {
                freed = std::mem::take(&mut s.unsynced_ends);
            }
        }
        if self.defrag == Some(Defrag::Store) && !in_order(&new) && s.groups.len() < GROUPS_MAX {
            s.groups.push_back(new.keys().copied().collect());
        }
        for (b, t) in changes {
            match t {
                Some(t) => {
                    s.map.insert(b, t);
                }
                None => {
                    s.map.remove(&b);
                }
            }
        }
        let live = s.map.len();
        let State {
            map,
            log,
            compact_after,
            ..
        } = &mut *s;
        if let Some(l) = log.as_mut() {
            if l.len() > (HEADER + 4 * (live + 1024) * RECORD) as u64 && l.len() > *compact_after {
                match Log::write_fresh(&l.path, &l.store, map) {
                    Ok(fresh) => {
                        *l = fresh;
                        EventCounters::add(&self.counters.compactions, 1);
                    }
                    Err(e) => {
                        // A jailed VMM cannot replace its log by path (a snapshot's flatten
                        // brings it there sooner): the log grows on, and is tried again once
                        // twice as long, not at every guest write.
                        *compact_after = l.len().saturating_mul(2);
                        tracing::warn!(
                            "indirection log: compaction failed ({e}); tried again at {} bytes",
                            *compact_after
                        );
                    }
                }
            }
        }
        (freed, Ok(()))
    }

    /// The guest flushed the disk: with [`LogSync::Flush`], the swap file (`sync_store`) and
    /// then the log are synced. Returns the swap-file blocks of the indirections the synced log
    /// ended, whose references the caller drops.
    pub fn flush(
        &self,
        sync_store: impl FnOnce() -> std::io::Result<()>,
    ) -> std::io::Result<Vec<Block>> {
        if self.sync != LogSync::Flush {
            return Ok(Vec::new());
        }
        let mut s = self.lock();
        if s.map.is_empty() && s.log.as_ref().is_none_or(Log::is_empty) {
            return Ok(std::mem::take(&mut s.unsynced_ends));
        }
        sync_store()?;
        if let Some(l) = &s.log {
            l.file.sync_data()?;
        }
        Ok(std::mem::take(&mut s.unsynced_ends))
    }

    /// Copies every indirected block back into the image and deletes the log (a clean exit);
    /// returns the swap-file blocks to free.
    pub fn disentangle(&self) -> Result<Vec<Block>, IndirectError> {
        let mut s = self.lock_without_defrag(0, u32::MAX);
        let n = copy_back(&self.writer, &self.store, &s.map).map_err(io_err(&self.image))?;
        EventCounters::add(&self.counters.disentangled, n);
        let mut targets: Vec<Block> = std::mem::take(&mut s.map).into_values().collect();
        targets.append(&mut s.unsynced_ends);
        if let Some(l) = s.log.take() {
            let path = l.path.clone();
            l.remove().map_err(io_err(&path))?;
        }
        Ok(targets)
    }

    /// Copies every indirected block back into the image and ends each indirection in the log
    /// (a snapshot: the image then stands alone, and the VM goes on making indirections);
    /// returns the swap-file blocks to free. The caller holds the guest's writes back (the VM
    /// is paused and its disks quiesced).
    ///
    /// The log is kept and written through its descriptor, never by path: the blocks go back
    /// and are synced first, then one synced record per block ends its indirection, as a guest
    /// write that overwrites it would. A crash in between leaves the log naming blocks whose
    /// copies already match, which recovery copies again. So a jailed VMM, which sees no
    /// image's directory, takes snapshots with indirections as an unjailed one does.
    pub fn flatten(&self) -> Result<Vec<Block>, IndirectError> {
        let mut s = self.lock_without_defrag(0, u32::MAX);
        let n = copy_back(&self.writer, &self.store, &s.map).map_err(io_err(&self.image))?;
        EventCounters::add(&self.counters.disentangled, n);
        let ends: Vec<(u32, Option<Block>)> = s.map.keys().map(|&b| (b, None)).collect();
        match s.log.as_mut() {
            Some(l) => {
                let path = l.path.clone();
                l.append(&ends, true).map_err(io_err(&path))?;
            }
            None if ends.is_empty() => {}
            None => {
                let closed = std::io::Error::other("the indirection log is closed");
                return Err(io_err(&self.image)(closed));
            }
        }
        let mut targets: Vec<Block> = std::mem::take(&mut s.map).into_values().collect();
        // The synced records above end these too.
        targets.append(&mut s.unsynced_ends);
        Ok(targets)
    }

    /// Leaves the log, synced, for the next start (`--keep-indirections`).
    pub fn keep(&self) -> std::io::Result<u64> {
        let mut s = self.lock_without_defrag(0, u32::MAX);
        if let Some(l) = s.log.take() {
            l.file.sync_data()?;
        }
        Ok(s.map.len() as u64)
    }

    pub fn image(&self) -> &Path {
        &self.image
    }
}

/// Whether the swap-file blocks of `map` follow each other in image-block order (a split read
/// takes them in one read): grouping them would save nothing.
pub(super) fn in_order(map: &BTreeMap<u32, Block>) -> bool {
    map.values()
        .zip(map.values().skip(1))
        .all(|(&t, &u)| t.checked_add(1) == Some(u))
}
