//! The host-memory tier in front of the swap file (MemFlex §3.2–§3.4): [`SwapStore`] is the
//! [`PageStore`] of swap blocks, and with a pool, a block's content lives in host memory until
//! the pool is `spill_at` full; then the flusher thread writes the least recently pooled blocks
//! to the swap file in long sequential runs, so the most recent victims stay in memory. A fault
//! on a pooled block is a memory copy.
//!
//! - The pool holds whole blocks, keyed by block number: the page table does not know which
//!   tier a `Swapped(b)` page is in, so the fault path and reclaim are unchanged (a read of a
//!   run takes the pooled blocks from memory and the others from the file; a write puts blocks
//!   in the pool while it has room, the rest in the file).
//! - Memory comes in chunks of [`CHUNK_PAGES`] pages (2 MiB), mapped when a slot is needed and
//!   unmapped when their last slot is freed, so the pool holds only what it uses. The host
//!   kernel zeroes a chunk before any process maps it again: no VM sees another's pages.
//! - A block the page table has freed is dropped from the pool by the flusher (it asks the
//!   page table which pooled blocks are still referenced) instead of being written out.
//! - Ordering: the page lock is taken before the pool lock, never after it.
//!
//! Differences from MemFlex: each VMM holds its own pool memory, sized at run time (`PUT
//! /pool`), and the host manager divides its budget among the pools instead of sharing one
//! memory region; blocks keep their swap-file numbers, so a pooled block's place on disk is
//! fixed when it is first swapped out (MemFlex allocates disk space when it spills).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::state::Block;
use crate::store::{PageStore, StoreCounters};
use crate::swap::{AlignedBuf, SwapFile, BLOCK};

/// Pages per chunk of pool memory (2 MiB).
pub const CHUNK_PAGES: u32 = 512;
/// Blocks the flusher writes per round (4 MiB).
pub(crate) const FLUSH_BATCH: usize = 1024;
/// Freed blocks the flusher drops per hold of the pool's lock.
const PURGE_BATCH: usize = 4096;

/// What the pool has done; every field only grows.
#[derive(Debug, Default)]
pub struct PoolCounters {
    /// Blocks written into the pool (reclaim's victims that went to memory).
    pub pooled: AtomicU64,
    /// Blocks that went to the swap file because the pool was full.
    pub overflowed: AtomicU64,
    /// Blocks read from the pool (faults and proactive swap-in).
    pub hits: AtomicU64,
    /// Blocks the flusher wrote to the swap file.
    pub spilled: AtomicU64,
    /// Flusher writes (each a run of blocks).
    pub spill_writes: AtomicU64,
    /// Blocks dropped from the pool because the page table had freed them.
    pub purged: AtomicU64,
    /// Pages installed by proactive swap-in from the pool.
    pub proactive_from_pool: AtomicU64,
    /// Pages installed by proactive swap-in from the swap file.
    pub proactive_from_disk: AtomicU64,
}

impl PoolCounters {
    pub(crate) fn add(c: &AtomicU64, n: u32) {
        c.fetch_add(u64::from(n), Ordering::Relaxed);
    }

    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

/// One pooled block.
#[derive(Clone, Copy, Debug)]
struct Entry {
    slot: u32,
    /// When it was last written (higher: more recent).
    seq: u64,
}

/// A mapped chunk of pool memory.
struct Chunk {
    ptr: *mut u8,
    used: u32,
}

// SAFETY: a chunk is plain memory owned by the pool and only reached under its lock.
unsafe impl Send for Chunk {}

impl Chunk {
    fn map() -> std::io::Result<Chunk> {
        let len = CHUNK_PAGES as usize * BLOCK;
        // SAFETY: an anonymous private mapping; no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Chunk {
            ptr: ptr.cast(),
            used: 0,
        })
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        // SAFETY: `ptr` is the mapping made in `map`, of this length, not used after this.
        if unsafe { libc::munmap(self.ptr.cast(), CHUNK_PAGES as usize * BLOCK) } != 0 {
            tracing::warn!(
                "pager: cannot unmap a pool chunk: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

struct Inner {
    chunks: Vec<Option<Chunk>>,
    /// Free slots of mapped chunks; the lowest is taken first, so chunks empty from the top.
    free: BTreeSet<u32>,
    entries: HashMap<Block, Entry>,
    /// Pooled blocks by `seq`: the least recent first.
    order: BTreeMap<u64, Block>,
    next_seq: u64,
}

impl Inner {
    fn page(&self, slot: u32) -> *mut u8 {
        let c = self.chunks[(slot / CHUNK_PAGES) as usize]
            .as_ref()
            .expect("a slot in use is in a mapped chunk");
        // SAFETY: the offset is inside the chunk's mapping.
        unsafe { c.ptr.add((slot % CHUNK_PAGES) as usize * BLOCK) }
    }

    fn alloc(&mut self) -> std::io::Result<u32> {
        let slot = match self.free.pop_first() {
            Some(s) => s,
            None => {
                let i = match self.chunks.iter().position(Option::is_none) {
                    Some(i) => i,
                    None => {
                        self.chunks.push(None);
                        self.chunks.len() - 1
                    }
                };
                self.chunks[i] = Some(Chunk::map()?);
                let base = u32::try_from(i).unwrap_or(u32::MAX) * CHUNK_PAGES;
                self.free.extend(base + 1..base + CHUNK_PAGES);
                base
            }
        };
        if let Some(c) = &mut self.chunks[(slot / CHUNK_PAGES) as usize] {
            c.used += 1;
        }
        Ok(slot)
    }

    fn free_slot(&mut self, slot: u32) {
        let i = (slot / CHUNK_PAGES) as usize;
        let Some(c) = &mut self.chunks[i] else { return };
        c.used -= 1;
        if c.used == 0 {
            self.chunks[i] = None;
            let base = u32::try_from(i).unwrap_or(u32::MAX) * CHUNK_PAGES;
            // The chunk's other free slots go with it: at most a chunk's worth of removals
            // (a `retain` over the whole free set, once per chunk emptied, took seconds when
            // a proactive swap-in had just freed a 2 GiB pool).
            let gone: Vec<u32> = self.free.range(base..base + CHUNK_PAGES).copied().collect();
            for s in gone {
                self.free.remove(&s);
            }
        } else {
            self.free.insert(slot);
        }
    }

    fn remove(&mut self, b: Block) {
        if let Some(e) = self.entries.remove(&b) {
            self.order.remove(&e.seq);
            self.free_slot(e.slot);
        }
    }

    fn used(&self) -> u32 {
        u32::try_from(self.entries.len()).unwrap_or(u32::MAX)
    }
}

/// The pool of one pager.
pub struct Pool {
    inner: Mutex<Inner>,
    /// Most pages it may hold.
    capacity: AtomicU32,
    /// Fraction of the capacity above which the flusher spills, in thousandths.
    spill_at_milli: u32,
    /// Wakes the flusher.
    wake: Condvar,
    pub counters: PoolCounters,
}

impl Pool {
    pub fn new(capacity_pages: u32, spill_at: f64) -> Pool {
        let milli = (spill_at.clamp(0.1, 1.0) * 1000.0).round();
        Pool {
            inner: Mutex::new(Inner {
                chunks: Vec::new(),
                free: BTreeSet::new(),
                entries: HashMap::new(),
                order: BTreeMap::new(),
                next_seq: 0,
            }),
            capacity: AtomicU32::new(capacity_pages),
            // A fraction in 0.1..=1 scaled to 100..=1000.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            spill_at_milli: milli as u32,
            wake: Condvar::new(),
            counters: PoolCounters::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn capacity(&self) -> u32 {
        self.capacity.load(Ordering::Relaxed)
    }

    /// Changes the capacity; a smaller one is reached by spilling.
    pub fn set_capacity(&self, pages: u32) {
        self.capacity.store(pages, Ordering::Relaxed);
        self.wake.notify_all();
    }

    /// Blocks held now.
    pub fn used(&self) -> u32 {
        self.lock().used()
    }

    /// Memory mapped for the pool now (whole chunks).
    pub fn mapped_bytes(&self) -> u64 {
        let n = self.lock().chunks.iter().flatten().count() as u64;
        n * u64::from(CHUNK_PAGES) * BLOCK as u64
    }

    fn spill_mark(&self) -> u32 {
        let cap = u64::from(self.capacity());
        u32::try_from(cap * u64::from(self.spill_at_milli) / 1000).unwrap_or(u32::MAX)
    }

    pub fn contains(&self, b: Block) -> bool {
        self.lock().entries.contains_key(&b)
    }

    /// Pooled blocks, the most recently pooled first.
    pub fn blocks_by_recency(&self) -> Vec<Block> {
        self.lock().order.values().rev().copied().collect()
    }

    /// Copies the pooled blocks of `first..` into `buf`; returns which were pooled.
    fn read_pooled(&self, first: Block, buf: &mut [u8]) -> Vec<bool> {
        let inner = self.lock();
        buf.chunks_exact_mut(BLOCK)
            .enumerate()
            .map(|(i, page)| {
                let b = first + u32::try_from(i).unwrap_or(u32::MAX);
                let Some(e) = inner.entries.get(&b) else {
                    return false;
                };
                // SAFETY: the slot is a live page of pool memory, not written while we hold
                // the lock.
                let src = unsafe { std::slice::from_raw_parts(inner.page(e.slot), BLOCK) };
                page.copy_from_slice(src);
                true
            })
            .collect()
    }

    /// Hands `copy` the pool memory of blocks `first..first + n` under the pool's lock, in
    /// pieces of consecutive memory: `copy(source, offset in pages, pages)`. Calls nothing and
    /// returns `Ok(false)` unless all of them are pooled. Proactive swap-in installs pooled
    /// pages from here with no copy into a buffer first.
    pub(crate) fn copy_run<E>(
        &self,
        first: Block,
        n: u32,
        mut copy: impl FnMut(*const u8, u32, u32) -> Result<(), E>,
    ) -> Result<bool, E> {
        let inner = self.lock();
        let mut src = Vec::with_capacity(n as usize);
        for b in first..first + n {
            match inner.entries.get(&b) {
                Some(e) => src.push(inner.page(e.slot).cast_const()),
                None => return Ok(false),
            }
        }
        let mut i = 0;
        while i < src.len() {
            let mut j = i + 1;
            while j < src.len() && src[j] == src[j - 1].wrapping_add(BLOCK) {
                j += 1;
            }
            let (off, len) = (u32::try_from(i), u32::try_from(j - i));
            copy(src[i], off.unwrap_or(u32::MAX), len.unwrap_or(0))?;
            i = j;
        }
        self.counters
            .hits
            .fetch_add(u64::from(n), Ordering::Relaxed);
        Ok(true)
    }

    /// Puts what fits of `data` (blocks from `first` on) into the pool; returns, for each
    /// block, whether it went there.
    fn write_pooled(&self, first: Block, data: &[u8]) -> std::io::Result<Vec<bool>> {
        let cap = self.capacity();
        let mut inner = self.lock();
        let mut placed = Vec::with_capacity(data.len() / BLOCK);
        for (i, page) in data.chunks_exact(BLOCK).enumerate() {
            let b = first + u32::try_from(i).unwrap_or(u32::MAX);
            let slot = match inner.entries.get(&b) {
                Some(e) => {
                    let (slot, seq) = (e.slot, e.seq);
                    inner.order.remove(&seq);
                    Some(slot)
                }
                None if inner.used() < cap => Some(inner.alloc()?),
                None => None,
            };
            let Some(slot) = slot else {
                placed.push(false);
                continue;
            };
            let seq = inner.next_seq;
            inner.next_seq += 1;
            // SAFETY: the slot is a live page of pool memory, ours under the lock.
            unsafe { std::ptr::copy_nonoverlapping(page.as_ptr(), inner.page(slot), BLOCK) };
            inner.entries.insert(b, Entry { slot, seq });
            inner.order.insert(seq, b);
            placed.push(true);
        }
        if inner.used() > self.spill_mark() {
            self.wake.notify_all();
        }
        Ok(placed)
    }
}

/// The swap store: the swap file, with a pool in front of it when there is one.
pub struct SwapStore {
    pub file: SwapFile,
    pub pool: Option<Pool>,
}

impl PageStore for SwapStore {
    fn describe(&self) -> String {
        self.file.describe()
    }

    fn read(&self, first: Block, buf: &mut [u8]) -> std::io::Result<()> {
        let Some(pool) = &self.pool else {
            return self.file.read(first, buf);
        };
        // The pool first, then the file for the blocks it does not hold: the flusher writes a
        // block to the file before it drops it from the pool, so a block missing from the pool
        // here is in the file by the time it is read there. (The file first and the pool after
        // could miss a block spilled in between and keep the file's older copy.)
        let pooled = pool.read_pooled(first, buf);
        let mut i = 0;
        while i < pooled.len() {
            if pooled[i] {
                i += 1;
                continue;
            }
            let mut j = i + 1;
            while j < pooled.len() && !pooled[j] {
                j += 1;
            }
            let b = first + u32::try_from(i).unwrap_or(u32::MAX);
            self.file.read(b, &mut buf[i * BLOCK..j * BLOCK])?;
            i = j;
        }
        let hits = pooled.iter().filter(|&&p| p).count() as u64;
        pool.counters.hits.fetch_add(hits, Ordering::Relaxed);
        Ok(())
    }

    fn write(&self, first: Block, data: &[u8]) -> std::io::Result<()> {
        let Some(pool) = &self.pool else {
            return self.file.write(first, data);
        };
        let placed = pool.write_pooled(first, data)?;
        let mut i = 0;
        while i < placed.len() {
            if placed[i] {
                i += 1;
                continue;
            }
            let mut j = i + 1;
            while j < placed.len() && !placed[j] {
                j += 1;
            }
            let b = first + u32::try_from(i).unwrap_or(u32::MAX);
            self.file.write(b, &data[i * BLOCK..j * BLOCK])?;
            i = j;
        }
        let pooled = placed.iter().filter(|&&p| p).count() as u64;
        let c = &pool.counters;
        c.pooled.fetch_add(pooled, Ordering::Relaxed);
        c.overflowed
            .fetch_add(placed.len() as u64 - pooled, Ordering::Relaxed);
        Ok(())
    }

    fn counters(&self) -> &StoreCounters {
        self.file.counters()
    }
}

impl Pool {
    /// Waits until the flusher has work (the pool is above its spill mark), or a second passed
    /// (time to drop freed blocks).
    pub(crate) fn wait_for_work(&self) {
        let inner = self.lock();
        if inner.used() <= self.spill_mark() {
            let _ = self
                .wake
                .wait_timeout(inner, Duration::from_secs(1))
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// A purge then a spill, as the flusher does after a wake-up.
    #[cfg(test)]
    fn flush_round(
        &self,
        file: &SwapFile,
        live: impl FnOnce(&[Block]) -> Vec<bool>,
        buf: &mut AlignedBuf,
    ) -> std::io::Result<bool> {
        self.purge(live);
        self.spill(file, buf)
    }

    /// Drops the pooled blocks `live` says the page table has freed (and not written again
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
    /// Returns whether it spilled anything (so there may be more to do).
    pub(crate) fn spill(&self, file: &SwapFile, buf: &mut AlignedBuf) -> std::io::Result<bool> {
        // Down to 90 % of the mark, so the flusher does not start again at once.
        let low = u32::try_from(u64::from(self.spill_mark()) * 9 / 10).unwrap_or(0);
        let mut batch: Vec<(Block, u64)> = {
            let inner = self.lock();
            let over = inner.used().saturating_sub(low) as usize;
            inner
                .order
                .iter()
                .take(over.min(FLUSH_BATCH))
                .map(|(&seq, &b)| (b, seq))
                .collect()
        };
        if batch.is_empty() {
            return Ok(false);
        }
        batch.sort_unstable();
        let data = buf.get(batch.len() * BLOCK);
        {
            let inner = self.lock();
            for (i, (b, _)) in batch.iter().enumerate() {
                let Some(e) = inner.entries.get(b) else {
                    continue;
                };
                // SAFETY: a live pool page, not written while we hold the lock.
                let src = unsafe { std::slice::from_raw_parts(inner.page(e.slot), BLOCK) };
                data[i * BLOCK..(i + 1) * BLOCK].copy_from_slice(src);
            }
        }
        let mut i = 0;
        while i < batch.len() {
            let mut j = i + 1;
            while j < batch.len() && batch[j].0 == batch[j - 1].0 + 1 {
                j += 1;
            }
            crate::store::write(file, batch[i].0, &data[i * BLOCK..j * BLOCK])?;
            self.counters.spill_writes.fetch_add(1, Ordering::Relaxed);
            i = j;
        }
        let mut inner = self.lock();
        let mut spilled = 0;
        for (b, seq) in batch {
            // Rewritten (or dropped) meanwhile: the pool's copy is newer; keep it.
            if inner.entries.get(&b).is_some_and(|e| e.seq == seq) {
                inner.remove(b);
                spilled += 1;
            }
        }
        self.counters.spilled.fetch_add(spilled, Ordering::Relaxed);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(v: u8) -> Vec<u8> {
        vec![v; BLOCK]
    }

    fn store(cap: u32) -> (tempfile::TempDir, SwapStore) {
        let dir = tempfile::tempdir().unwrap();
        let file = SwapFile::create(&dir.path().join("swap"), 4096, true).unwrap();
        (
            dir,
            SwapStore {
                file,
                pool: Some(Pool::new(cap, 0.8)),
            },
        )
    }

    fn read(s: &SwapStore, b: Block, n: usize) -> Vec<u8> {
        let mut buf = AlignedBuf::new(n * BLOCK);
        s.read(b, buf.get(n * BLOCK)).unwrap();
        buf.get(n * BLOCK).to_vec()
    }

    fn write(s: &SwapStore, b: Block, pages: &[u8]) {
        let mut buf = AlignedBuf::new(pages.len() * BLOCK);
        for (i, &v) in pages.iter().enumerate() {
            buf.get(pages.len() * BLOCK)[i * BLOCK..(i + 1) * BLOCK].copy_from_slice(&page(v));
        }
        s.write(b, buf.get(pages.len() * BLOCK)).unwrap();
    }

    #[test]
    fn blocks_go_to_the_pool_until_it_is_full_then_to_the_file_and_read_back_whole() {
        let (_d, s) = store(4);
        write(&s, 10, &[1, 2, 3]);
        write(&s, 20, &[4, 5, 6]);
        let pool = s.pool.as_ref().unwrap();
        assert_eq!(pool.used(), 4, "the pool took what fitted");
        assert_eq!(pool.counters.overflowed.load(Ordering::Relaxed), 2);
        let got = read(&s, 10, 3);
        assert!(got[..BLOCK].iter().all(|&x| x == 1) && got[2 * BLOCK..].iter().all(|&x| x == 3));
        let got = read(&s, 20, 3);
        for (i, v) in [4u8, 5, 6].iter().enumerate() {
            assert!(
                got[i * BLOCK..(i + 1) * BLOCK].iter().all(|x| x == v),
                "block {i}"
            );
        }
        // Rewriting a pooled block replaces it in place, even with the pool full.
        write(&s, 11, &[9]);
        assert!(read(&s, 11, 1).iter().all(|&x| x == 9));
        assert_eq!(pool.used(), 4);
    }

    #[test]
    fn proactive_swap_in_sees_the_pool_by_recency_and_copies_runs_from_its_memory() {
        let (_d, s) = store(8);
        write(&s, 10, &[1, 2, 3]);
        write(&s, 20, &[4]);
        let pool = s.pool.as_ref().unwrap();
        assert_eq!(pool.blocks_by_recency(), vec![20, 12, 11, 10]);
        let mut got = Vec::new();
        let all = pool
            .copy_run(10, 3, |src, off, k| {
                // SAFETY: `copy_run` hands out `k` live pages of pool memory.
                let bytes = unsafe { std::slice::from_raw_parts(src, k as usize * BLOCK) };
                got.push((off, k, bytes[0], bytes[(k as usize - 1) * BLOCK]));
                Ok::<(), ()>(())
            })
            .unwrap();
        // Written in one run, the three blocks sit in consecutive slots: one piece.
        assert!(all);
        assert_eq!(got, vec![(0, 3, 1, 3)]);
        assert_eq!(pool.counters.hits.load(Ordering::Relaxed), 3);
        // A run not wholly pooled is not handed out at all.
        let none = pool
            .copy_run(19, 2, |_, _, _| -> Result<(), ()> {
                panic!("block 19 is not pooled")
            })
            .unwrap();
        assert!(!none);
        assert_eq!(pool.counters.hits.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn the_flusher_spills_the_least_recent_blocks_and_drops_freed_ones() {
        let (_d, s) = store(10);
        let pool = s.pool.as_ref().unwrap();
        for b in 0..10u32 {
            write(&s, b, &[u8::try_from(b).unwrap() + 1]);
        }
        assert_eq!(pool.used(), 10);
        let mut buf = AlignedBuf::new(FLUSH_BATCH * BLOCK);
        // Block 3 was freed by the page table: dropped, not written.
        let spilled = pool
            .flush_round(&s.file, |bs| bs.iter().map(|&b| b != 3).collect(), &mut buf)
            .unwrap();
        assert!(spilled);
        // The mark is 8, the flusher goes down to 7: after dropping block 3, 9 are left and
        // the 2 least recent (0 and 1) are spilled.
        assert_eq!(pool.used(), 7);
        assert!(!pool.contains(0) && !pool.contains(1) && !pool.contains(3));
        assert!(pool.contains(9));
        assert_eq!(pool.counters.spilled.load(Ordering::Relaxed), 2);
        assert_eq!(pool.counters.purged.load(Ordering::Relaxed), 1);
        // Spilled blocks read back from the file.
        for b in [0u32, 1, 9] {
            let v = u8::try_from(b).unwrap() + 1;
            assert!(read(&s, b, 1).iter().all(|&x| x == v), "block {b}");
        }
        // A shrunk pool spills down to its new mark.
        pool.set_capacity(2);
        while pool
            .flush_round(&s.file, |bs| vec![true; bs.len()], &mut buf)
            .unwrap()
        {}
        assert!(pool.used() <= 1);
        for b in [2u32, 4, 5, 6, 7, 8, 9] {
            let v = u8::try_from(b).unwrap() + 1;
            assert!(read(&s, b, 1).iter().all(|&x| x == v), "block {b}");
        }
    }

    #[test]
    fn chunks_are_mapped_on_demand_and_unmapped_when_empty() {
        let (_d, s) = store(2 * CHUNK_PAGES);
        let pool = s.pool.as_ref().unwrap();
        assert_eq!(pool.mapped_bytes(), 0);
        let pages: Vec<u8> = vec![7; CHUNK_PAGES as usize + 1];
        write(&s, 0, &pages);
        assert_eq!(
            pool.mapped_bytes(),
            2 * u64::from(CHUNK_PAGES) * BLOCK as u64
        );
        pool.set_capacity(0);
        let mut buf = AlignedBuf::new(FLUSH_BATCH * BLOCK);
        while pool
            .flush_round(&s.file, |bs| vec![true; bs.len()], &mut buf)
            .unwrap()
        {}
        assert_eq!(pool.used(), 0);
        assert_eq!(pool.mapped_bytes(), 0, "empty chunks go back to the host");
        assert!(read(&s, CHUNK_PAGES, 1).iter().all(|&x| x == 7));
    }
}
