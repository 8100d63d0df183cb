//! The host-memory tier in front of the swap file (MemFlex §3.2–§3.4): [`SwapStore`] is the
//! [`PageStore`] of swap blocks, and with a pool, a block's content lives in host memory until
//! the pool is `spill_at` full; then the flusher thread writes the least recently pooled blocks
//! to the swap file in long sequential runs, so the most recent victims stay in memory. A fault
//! on a pooled block is a memory copy (and a decompression, with compression).
//!
//! - The pool holds whole blocks, keyed by block number: the state table does not know which
//!   tier a `Swapped(b)` page is in, so the fault path and reclaim are unchanged (a read of a
//!   run takes the pooled blocks from memory and the others from the file; a write puts blocks
//!   in the pool while it has room, the rest in the file).
//! - Compression (`--pool-compress lz4|zstd`, as zswap does in Linux): each page is compressed
//!   on its way in, outside the pool lock, and kept at its compressed size; a page that does
//!   not compress to [`MAX_COMPRESSED`] (3/4 of a page) or less is kept whole, since the little
//!   it would save does not pay for decompressing it on every read. Reads (faults, proactive
//!   swap-in) decompress under the pool lock, straight into the caller's buffer; the flusher
//!   copies the compressed bytes out under the lock and decompresses them after it.
//! - Slots: a page takes a slot of its size rounded up to [`GRANULE`] (256 bytes): 13 size
//!   classes, 256 B to 3 KiB for compressed pages and 4 KiB for whole ones. Memory comes in
//!   chunks (`--pool-chunk`, 2 MiB by default), each given to one class when it is mapped and
//!   cut into slots of that size (as Linux's zbud and z3fold dedicate pages to a layout); a
//!   class fills its lowest-numbered chunk with room first, so the highest ones empty out, and
//!   a chunk whose last slot is freed is unmapped. The host kernel zeroes a chunk before any
//!   process maps it again: no VM sees another's pages.
//! - The capacity counts the bytes of the slots in use, so compression lets the pool hold
//!   more pages; the memory mapped is also reported (`mapped_bytes`): the difference is the
//!   free slots of partly used chunks, at most about one chunk per class.
//! - A pooled block stays pooled until the flusher takes it out: a rewrite of it (the block
//!   was freed and given to a new victim) replaces it in the pool even when the pool is full.
//!   So the flusher, which takes a block out only if it was not rewritten while it was being
//!   written to the file, never leaves the file's copy newer than the pool's, and a pooled
//!   block always goes over the file's copy.
//! - A block the state table has freed is dropped from the pool by the flusher (it asks the
//!   state table which pooled blocks are still referenced) instead of being written out.
//! - Ordering: the page lock is taken before the pool lock, never after it. The compressor's
//!   lock (reclaim's) and the flusher's own state are taken before the pool lock.
//!
//! Differences from MemFlex: each VMM holds its own pool memory, sized at run time (`PUT
//! /pool`), and the host manager divides its budget among the pools instead of sharing one
//! memory region; blocks keep their swap-file numbers, so a pooled block's place on disk is
//! fixed when it is first swapped out (MemFlex allocates disk space when it spills). MemFlex
//! keeps pages whole; compression is beyond it.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use memvisor_api::PoolCompress;
use thiserror::Error;

use crate::page::{Block, PAGE_SIZE};
use crate::store::swap::SwapFile;
use crate::store::{PageStore, StoreCounters};

// The pool is one module to the rest of the crate, split in files that import each other only
// downwards: this file holds the `Pool` with the flusher's state and the batch sizes, and uses
// the compressor and the slab allocator; the flusher's side (`spill.rs`) works on the `Pool`.
mod compress;
mod slab;
mod spill;

pub use compress::MAX_COMPRESSED;
use compress::{Packer, Unpacker, STRIDE};
pub use slab::GRANULE;
use slab::{class_of, kept, slot_bytes, Entry, Inner};

pub use memvisor_api::spec::{
    check_chunk, check_chunk_size, ChunkSizeError, DEFAULT_CHUNK_BYTES, MAX_CHUNK_BYTES,
};
/// Blocks the flusher writes per round (4 MiB).
pub(crate) const FLUSH_BATCH: usize = 1024;
/// Freed blocks the flusher drops per hold of the pool's lock.
const PURGE_BATCH: usize = 4096;

/// The flusher's own state: the compressed bytes of a round and its decompressor.
struct SpillState {
    staged: Vec<u8>,
    unpack: Unpacker,
}

/// Why a pool cannot be set up.
#[derive(Debug, Error)]
pub enum PoolError {
    #[error("bad pool chunk size")]
    Chunk(#[from] ChunkSizeError),
    #[error("cannot set up the pool's compression")]
    Codec(#[source] std::io::Error),
}

/// What the pool has done; every field only grows.
#[derive(Debug, Default)]
pub struct PoolCounters {
    /// Blocks written into the pool kept compressed (all written: `compressed + raw`).
    pub compressed: AtomicU64,
    /// Blocks written into the pool kept whole (no compression, or incompressible).
    pub raw: AtomicU64,
    /// Blocks that went to the swap file because the pool was full.
    pub overflowed: AtomicU64,
    /// Blocks read from the pool (faults and proactive swap-in).
    pub hits: AtomicU64,
    /// Blocks the flusher wrote to the swap file.
    pub spilled: AtomicU64,
    /// Flusher writes (each a run of blocks).
    pub spill_writes: AtomicU64,
    /// Time the flusher spent spilling, in microseconds.
    pub spill_us: AtomicU64,
    /// Blocks dropped from the pool because the state table had freed them.
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

/// How much the pool holds now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolUsage {
    /// Bytes of the slots in use (what the capacity limits).
    pub used_bytes: u64,
    /// Pages held.
    pub pages: u64,
    /// Chunks mapped.
    pub chunks: u64,
}

/// The pool of one pager.
pub struct Pool {
    inner: Mutex<Inner>,
    packer: Mutex<Packer>,
    spill_state: Mutex<SpillState>,
    how: PoolCompress,
    chunk_bytes: u64,
    /// Most bytes of slots in use.
    capacity: AtomicU64,
    /// Fraction of the capacity above which the flusher spills, in thousandths.
    spill_at_milli: u64,
    /// Wakes the flusher.
    wake: Condvar,
    pub counters: PoolCounters,
}

impl Pool {
    /// A pool of `capacity` bytes that spills above `spill_at` of it, keeping pages as `how`
    /// says in chunks of `chunk_bytes`.
    pub fn new(
        capacity: u64,
        spill_at: f64,
        how: PoolCompress,
        chunk_bytes: u64,
    ) -> Result<Pool, PoolError> {
        check_chunk_size(chunk_bytes)?;
        let milli = (spill_at.clamp(0.1, 1.0) * 1000.0).round();
        Ok(Pool {
            inner: Mutex::new(Inner {
                // At most MAX_CHUNK_BYTES, checked above.
                chunk_bytes: usize::try_from(chunk_bytes).unwrap_or(usize::MAX),
                chunks: Vec::new(),
                partial: Default::default(),
                entries: HashMap::new(),
                order: BTreeMap::new(),
                next_seq: 0,
                used_bytes: 0,
                unpack: Unpacker::new(how).map_err(PoolError::Codec)?,
            }),
            packer: Mutex::new(Packer::new(how).map_err(PoolError::Codec)?),
            spill_state: Mutex::new(SpillState {
                staged: Vec::new(),
                unpack: Unpacker::new(how).map_err(PoolError::Codec)?,
            }),
            how,
            chunk_bytes,
            capacity: AtomicU64::new(capacity),
            // A fraction in 0.1..=1 scaled to 100..=1000.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            spill_at_milli: milli as u64,
            wake: Condvar::new(),
            counters: PoolCounters::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How pages are kept.
    pub fn compression(&self) -> PoolCompress {
        self.how
    }

    /// Bytes of one chunk.
    pub fn chunk_bytes(&self) -> u64 {
        self.chunk_bytes
    }

    /// Most bytes of slots in use.
    pub fn capacity(&self) -> u64 {
        self.capacity.load(Ordering::Relaxed)
    }

    /// Changes the capacity; a smaller one is reached by spilling.
    pub fn set_capacity(&self, bytes: u64) {
        self.capacity.store(bytes, Ordering::Relaxed);
        self.wake.notify_all();
    }

    /// What the pool holds now.
    pub fn usage(&self) -> PoolUsage {
        let inner = self.lock();
        PoolUsage {
            used_bytes: inner.used_bytes,
            pages: inner.entries.len() as u64,
            chunks: inner.chunks.iter().flatten().count() as u64,
        }
    }

    /// Blocks held now.
    pub fn used(&self) -> u64 {
        self.usage().pages
    }

    /// Memory mapped for the pool now (whole chunks).
    pub fn mapped_bytes(&self) -> u64 {
        self.usage().chunks * self.chunk_bytes
    }

    fn spill_mark(&self) -> u64 {
        self.capacity() * self.spill_at_milli / 1000
    }

    pub fn contains(&self, b: Block) -> bool {
        self.lock().entries.contains_key(&b)
    }

    /// Whether block `b` is pooled and holds exactly `page` (share before swap compares a
    /// victim with it in full before it refers to it instead of writing it).
    pub fn holds(&self, b: Block, page: &[u8]) -> bool {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let Some(e) = inner.entries.get(&b) else {
            return false;
        };
        let k = kept(&inner.chunks, e);
        if e.len as usize == PAGE_SIZE {
            return k == page;
        }
        let mut whole = [0u8; PAGE_SIZE];
        inner.unpack.unpack(k, &mut whole).is_ok() && whole[..] == page[..]
    }

    /// Pooled blocks, the most recently pooled first.
    pub fn blocks_by_recency(&self) -> Vec<Block> {
        self.lock().order.values().rev().copied().collect()
    }

    /// Copies the pooled blocks of `first..` into `buf` (decompressing them); returns which
    /// were pooled.
    fn read_pooled(&self, first: Block, buf: &mut [u8]) -> std::io::Result<Vec<bool>> {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let mut pooled = Vec::with_capacity(buf.len() / PAGE_SIZE);
        for (i, page) in buf.chunks_exact_mut(PAGE_SIZE).enumerate() {
            let b = first + u32::try_from(i).unwrap_or(u32::MAX);
            match inner.entries.get(&b) {
                Some(e) => {
                    inner.unpack.unpack(kept(&inner.chunks, e), page)?;
                    pooled.push(true);
                }
                None => pooled.push(false),
            }
        }
        Ok(pooled)
    }

    /// Hands `copy` the pool memory of blocks `first..first + n` under the pool's lock, in
    /// pieces of consecutive memory: `copy(source, offset in pages, pages)`. Calls nothing and
    /// returns `Ok(false)` unless all of them are pooled whole (a compressed page needs its
    /// decompression into a buffer first). Proactive swap-in installs pooled pages from here
    /// with no copy into a buffer first.
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
                Some(e) if e.len as usize == PAGE_SIZE => {
                    src.push(kept(&inner.chunks, e).as_ptr());
                }
                _ => return Ok(false),
            }
        }
        let mut i = 0;
        while i < src.len() {
            let mut j = i + 1;
            while j < src.len() && src[j] == src[j - 1].wrapping_add(PAGE_SIZE) {
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

    /// Puts what fits of `data` (blocks from `first` on) into the pool, compressed as the pool
    /// says; returns, for each block, whether it went there. A block already pooled is
    /// replaced in the pool whatever the room (see the module doc); it fails only if no memory
    /// can be mapped for it.
    fn write_pooled(&self, first: Block, data: &[u8]) -> std::io::Result<Vec<bool>> {
        let mut packer = self.packer.lock().unwrap_or_else(|e| e.into_inner());
        let lens = packer.pack(data);
        let cap = self.capacity();
        let mut inner = self.lock();
        let mut placed = Vec::with_capacity(lens.len());
        let (mut compressed, mut raw) = (0, 0);
        for (i, (page, len)) in data.chunks_exact(PAGE_SIZE).zip(lens).enumerate() {
            let b = first + u32::try_from(i).unwrap_or(u32::MAX);
            let src = match len {
                Some(l) => &packer.out[i * STRIDE..i * STRIDE + l],
                None => page,
            };
            let class = class_of(src.len());
            let size = slot_bytes(class) as u64;
            let loc = match inner.entries.get(&b).copied() {
                Some(old) if old.class() == class => {
                    inner.order.remove(&old.seq);
                    inner.used_bytes -= size;
                    old.loc
                }
                Some(old) => {
                    let loc = inner.alloc(class)?;
                    inner.order.remove(&old.seq);
                    inner.used_bytes -= slot_bytes(old.class()) as u64;
                    inner.free_loc(old.loc);
                    loc
                }
                None if inner.used_bytes + size <= cap => match inner.alloc(class) {
                    Ok(loc) => loc,
                    Err(e) => {
                        tracing::warn!(
                            "pager: cannot map pool memory ({e}); writing to the swap file"
                        );
                        placed.push(false);
                        continue;
                    }
                },
                None => {
                    placed.push(false);
                    continue;
                }
            };
            inner.put(loc, src);
            let seq = inner.next_seq;
            inner.next_seq += 1;
            inner.used_bytes += size;
            inner.entries.insert(
                b,
                Entry {
                    loc,
                    len: u32::try_from(src.len()).unwrap_or(u32::MAX),
                    seq,
                },
            );
            inner.order.insert(seq, b);
            if src.len() < PAGE_SIZE {
                compressed += 1;
            } else {
                raw += 1;
            }
            placed.push(true);
        }
        if inner.used_bytes > self.spill_mark() {
            self.wake.notify_all();
        }
        self.counters
            .compressed
            .fetch_add(compressed, Ordering::Relaxed);
        self.counters.raw.fetch_add(raw, Ordering::Relaxed);
        Ok(placed)
    }
}

/// The swap store: the swap file, with a pool in front of it when there is one, and, in a
/// restored VM, the snapshot's memory file as the blocks from its base on (`saved.rs`).
pub struct SwapStore {
    pub file: SwapFile,
    pub pool: Option<Pool>,
    /// Set once, before the guest runs, by `Pager::restore`.
    pub saved: std::sync::OnceLock<(Block, std::sync::Arc<dyn PageStore>)>,
}

impl SwapStore {
    /// Reads blocks of the swap file (through the pool).
    fn read_swap(&self, first: Block, buf: &mut [u8]) -> std::io::Result<()> {
        let Some(pool) = &self.pool else {
            return self.file.read(first, buf);
        };
        // The pool first, then the file for the blocks it does not hold: the flusher writes a
        // block to the file before it drops it from the pool, so a block missing from the pool
        // here is in the file by the time it is read there. (The file first and the pool after
        // could miss a block spilled in between and keep the file's older copy.)
        let pooled = pool.read_pooled(first, buf)?;
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
            self.file.read(b, &mut buf[i * PAGE_SIZE..j * PAGE_SIZE])?;
            i = j;
        }
        let hits = pooled.iter().filter(|&&p| p).count() as u64;
        pool.counters.hits.fetch_add(hits, Ordering::Relaxed);
        Ok(())
    }
}

impl PageStore for SwapStore {
    fn describe(&self) -> String {
        self.file.describe()
    }

    /// A run that reaches the snapshot's blocks reads them from its memory file, the rest from
    /// the swap file.
    fn read(&self, first: Block, buf: &mut [u8]) -> std::io::Result<()> {
        let Some((base, saved)) = self.saved.get() else {
            return self.read_swap(first, buf);
        };
        let below = (base.saturating_sub(first) as usize * PAGE_SIZE).min(buf.len());
        let (swap, restored) = buf.split_at_mut(below);
        if !restored.is_empty() {
            crate::store::read(saved.as_ref(), first.max(*base) - base, restored)?;
        }
        if swap.is_empty() {
            return Ok(());
        }
        self.read_swap(first, swap)
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
            self.file.write(b, &data[i * PAGE_SIZE..j * PAGE_SIZE])?;
            i = j;
        }
        let pooled = placed.iter().filter(|&&p| p).count() as u64;
        let c = &pool.counters;
        c.overflowed
            .fetch_add(placed.len() as u64 - pooled, Ordering::Relaxed);
        Ok(())
    }

    fn counters(&self) -> &StoreCounters {
        self.file.counters()
    }
}

#[cfg(test)]
mod tests {
    use super::slab::RAW;
    use super::*;
    use memvisor_devices::iobuf::IoBuf;

    fn page(v: u8) -> Vec<u8> {
        vec![v; PAGE_SIZE]
    }

    /// A page of `kind`: 0 incompressible (random), 1 compressible (one random byte in each
    /// 8), 2 all zero but one byte.
    fn content(kind: u8, seed: u64) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut p = vec![0u8; PAGE_SIZE];
        match kind {
            0 => p
                .chunks_exact_mut(8)
                .for_each(|w| w.copy_from_slice(&next().to_le_bytes())),
            1 => p
                .chunks_exact_mut(8)
                .for_each(|w| w[0] = next().to_le_bytes()[0]),
            _ => p[usize::try_from(seed % 4096).unwrap()] = 1,
        }
        p
    }

    fn pool_store(cap: u64, how: PoolCompress, chunk: u64) -> (tempfile::TempDir, SwapStore) {
        let dir = tempfile::tempdir().unwrap();
        let file = SwapFile::create(&dir.path().join("swap"), 4096, true).unwrap();
        (
            dir,
            SwapStore {
                file,
                pool: Some(Pool::new(cap, 0.8, how, chunk).unwrap()),
                saved: std::sync::OnceLock::new(),
            },
        )
    }

    fn store(pages: u64) -> (tempfile::TempDir, SwapStore) {
        pool_store(
            pages * PAGE_SIZE as u64,
            PoolCompress::None,
            DEFAULT_CHUNK_BYTES,
        )
    }

    fn read(s: &SwapStore, b: Block, n: usize) -> Vec<u8> {
        let mut buf = IoBuf::new(n * PAGE_SIZE);
        s.read(b, buf.get(n * PAGE_SIZE)).unwrap();
        buf.get(n * PAGE_SIZE).to_vec()
    }

    fn write_pages(s: &SwapStore, b: Block, pages: &[Vec<u8>]) {
        let len = pages.len() * PAGE_SIZE;
        let mut buf = IoBuf::new(len);
        for (i, p) in pages.iter().enumerate() {
            buf.get(len)[i * PAGE_SIZE..(i + 1) * PAGE_SIZE].copy_from_slice(p);
        }
        s.write(b, buf.get(len)).unwrap();
    }

    fn write(s: &SwapStore, b: Block, pages: &[u8]) {
        let pages: Vec<Vec<u8>> = pages.iter().map(|&v| page(v)).collect();
        write_pages(s, b, &pages);
    }

    fn drain(s: &SwapStore) {
        let pool = s.pool.as_ref().unwrap();
        pool.set_capacity(0);
        let mut buf = IoBuf::new(FLUSH_BATCH * PAGE_SIZE);
        while pool
            .flush_round(&s.file, |bs| vec![true; bs.len()], &mut buf)
            .unwrap()
        {}
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
        assert!(
            got[..PAGE_SIZE].iter().all(|&x| x == 1)
                && got[2 * PAGE_SIZE..].iter().all(|&x| x == 3)
        );
        let got = read(&s, 20, 3);
        for (i, v) in [4u8, 5, 6].iter().enumerate() {
            assert!(
                got[i * PAGE_SIZE..(i + 1) * PAGE_SIZE]
                    .iter()
                    .all(|x| x == v),
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
                let bytes = unsafe { std::slice::from_raw_parts(src, k as usize * PAGE_SIZE) };
                got.push((off, k, bytes[0], bytes[(k as usize - 1) * PAGE_SIZE]));
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
        let mut buf = IoBuf::new(FLUSH_BATCH * PAGE_SIZE);
        // Block 3 was freed by the state table: dropped, not written.
        let spilled = pool
            .flush_round(&s.file, |bs| bs.iter().map(|&b| b != 3).collect(), &mut buf)
            .unwrap();
        assert!(spilled);
        // The mark is 8 pages, the flusher goes down to 7.2: after dropping block 3, 9 are
        // left and the 2 least recent (0 and 1) are spilled.
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
        pool.set_capacity(2 * PAGE_SIZE as u64);
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
        let chunk_pages = DEFAULT_CHUNK_BYTES / PAGE_SIZE as u64;
        let (_d, s) = store(2 * chunk_pages);
        let pool = s.pool.as_ref().unwrap();
        assert_eq!(pool.mapped_bytes(), 0);
        let pages: Vec<u8> = vec![7; usize::try_from(chunk_pages).unwrap() + 1];
        write(&s, 0, &pages);
        assert_eq!(pool.mapped_bytes(), 2 * DEFAULT_CHUNK_BYTES);
        drain(&s);
        assert_eq!(pool.used(), 0);
        assert_eq!(pool.mapped_bytes(), 0, "empty chunks go back to the host");
        assert!(read(&s, u32::try_from(chunk_pages).unwrap(), 1)
            .iter()
            .all(|&x| x == 7));
    }

    /// Compressible, incompressible and nearly empty pages, alone and mixed in runs, read back
    /// exactly from the pool, through a spill and from the file, with either compressor.
    #[test]
    fn compressed_incompressible_and_mixed_runs_read_back_exactly() {
        for how in [PoolCompress::Lz4, PoolCompress::Zstd] {
            let (_d, s) = pool_store(64 << 20, how, 64 << 10);
            let pool = s.pool.as_ref().unwrap();
            let kinds: [&[u8]; 4] = [&[1; 40], &[0; 40], &[2; 40], &[0, 1, 1, 2, 0, 1, 2, 2]];
            let mut want: HashMap<Block, Vec<u8>> = HashMap::new();
            let mut b = 0;
            for (run, ks) in kinds.iter().enumerate() {
                let pages: Vec<Vec<u8>> = ks
                    .iter()
                    .enumerate()
                    .map(|(i, &k)| content(k, (run * 1000 + i) as u64 + 1))
                    .collect();
                write_pages(&s, b, &pages);
                for (i, p) in pages.into_iter().enumerate() {
                    want.insert(b + u32::try_from(i).unwrap(), p);
                }
                b += 64;
            }
            let c = &pool.counters;
            let (compressed, raw) = (PoolCounters::get(&c.compressed), PoolCounters::get(&c.raw));
            // Kind 0 is random: kept whole; the others compress.
            assert_eq!(raw, 40 + 2, "{how}");
            assert_eq!(compressed, 40 + 40 + 6, "{how}");
            let u = pool.usage();
            assert_eq!(u.pages, 128);
            assert!(
                u.used_bytes < u.pages * PAGE_SIZE as u64 * 2 / 3,
                "{how}: {} bytes for {} pages",
                u.used_bytes,
                u.pages
            );
            let check = |s: &SwapStore| {
                for (&b, p) in &want {
                    assert!(read(s, b, 1) == *p, "{how}: block {b}");
                }
                // Whole runs too (one call, every page of it in the pool or not).
                for first in [0, 64, 128, 192] {
                    let n = kinds[usize::try_from(first / 64).unwrap()].len();
                    let got = read(s, first, n);
                    for i in 0..n {
                        let b = first + u32::try_from(i).unwrap();
                        assert!(
                            got[i * PAGE_SIZE..(i + 1) * PAGE_SIZE] == want[&b][..],
                            "{how}: {b}"
                        );
                    }
                }
            };
            check(&s);
            // Half spilled: runs read partly from the file, partly from the pool.
            pool.set_capacity(u.used_bytes / 2);
            let mut buf = IoBuf::new(FLUSH_BATCH * PAGE_SIZE);
            while pool
                .flush_round(&s.file, |bs| vec![true; bs.len()], &mut buf)
                .unwrap()
            {}
            assert!(pool.usage().pages > 0 && pool.usage().pages < 128, "{how}");
            check(&s);
            drain(&s);
            assert_eq!(pool.usage(), PoolUsage::default(), "{how}");
            check(&s);
            assert!(PoolCounters::get(&c.spill_us) > 0);
        }
    }

    /// The capacity counts bytes of slots: compressed pages fit more of them in, incompressible
    /// ones no more than without compression.
    #[test]
    fn the_capacity_counts_bytes_so_compression_holds_more_pages() {
        let cap = 16 * PAGE_SIZE as u64;
        let (_d, s) = pool_store(cap, PoolCompress::Lz4, DEFAULT_CHUNK_BYTES);
        let pool = s.pool.as_ref().unwrap();
        let random: Vec<Vec<u8>> = (0..32).map(|i| content(0, i + 1)).collect();
        write_pages(&s, 0, &random);
        assert_eq!(
            pool.used(),
            16,
            "whole pages: as many as without compression"
        );
        assert_eq!(pool.usage().used_bytes, cap);
        drain(&s);
        pool.set_capacity(cap);
        let packed: Vec<Vec<u8>> = (0..64).map(|i| content(1, i + 100)).collect();
        write_pages(&s, 100, &packed);
        let u = pool.usage();
        assert!(u.pages > 16, "only {} compressed pages held", u.pages);
        assert!(u.used_bytes <= cap, "{} bytes used of {cap}", u.used_bytes);
        assert_eq!(
            PoolCounters::get(&pool.counters.overflowed),
            32 - 16 + 64 - u.pages
        );
        for (i, p) in packed.iter().enumerate() {
            assert!(read(&s, 100 + u32::try_from(i).unwrap(), 1) == *p, "{i}");
        }
    }

    /// Each chunk holds one size class; a chunk is unmapped when its last slot goes, whatever
    /// the others hold.
    #[test]
    fn a_chunk_is_freed_when_its_last_slot_is() {
        let (_d, s) = pool_store(1 << 20, PoolCompress::Lz4, 8 << 10);
        let pool = s.pool.as_ref().unwrap();
        // 2 nearly empty pages (the smallest class, 32 to an 8 KiB chunk) and 3 random ones
        // (whole, 2 to a chunk): 1 + 2 chunks.
        write_pages(&s, 0, &[content(2, 1), content(2, 2)]);
        write_pages(&s, 10, &[content(0, 1), content(0, 2), content(0, 3)]);
        assert_eq!(pool.usage().chunks, 3);
        // The state table frees the third whole page: its chunk goes.
        pool.purge(|bs| bs.iter().map(|&b| b != 12).collect());
        assert_eq!(pool.usage().chunks, 2);
        assert_eq!(pool.mapped_bytes(), 2 * (8 << 10));
        // Then the small ones: one page leaves its chunk in use, both free it.
        pool.purge(|bs| bs.iter().map(|&b| b != 0).collect());
        assert_eq!(pool.usage().chunks, 2);
        pool.purge(|bs| bs.iter().map(|&b| b != 1).collect());
        assert_eq!(pool.usage().chunks, 1);
        assert!(read(&s, 10, 2) == [content(0, 1), content(0, 2)].concat());
        drain(&s);
        assert_eq!(pool.mapped_bytes(), 0);
    }

    /// A pooled block rewritten while the pool is full stays in the pool, in a slot of its new
    /// size, so the flusher's copy in the file can never be newer than the pool's.
    #[test]
    fn a_rewrite_of_a_pooled_block_stays_in_the_pool_at_its_new_size() {
        let (_d, s) = pool_store(2 * PAGE_SIZE as u64, PoolCompress::Zstd, 64 << 10);
        let pool = s.pool.as_ref().unwrap();
        write_pages(&s, 0, &[content(0, 1), content(0, 2)]);
        assert_eq!(pool.usage().used_bytes, 2 * PAGE_SIZE as u64);
        write_pages(&s, 1, &[content(1, 3)]);
        assert!(pool.contains(1));
        assert!(pool.usage().used_bytes < 2 * PAGE_SIZE as u64);
        // Full, then a rewrite with a page that no longer compresses: over the capacity, in
        // the pool all the same.
        write_pages(&s, 2, &[content(0, 4)]);
        write_pages(&s, 1, &[content(0, 5)]);
        assert!(pool.contains(1) && !pool.contains(2));
        assert!(read(&s, 0, 3) == [content(0, 1), content(0, 5), content(0, 4)].concat());
    }

    #[test]
    fn bad_chunk_sizes_are_refused() {
        assert_eq!(check_chunk(0, 1 << 20), Err(ChunkSizeError::Zero));
        assert_eq!(
            check_chunk(3000, 1 << 20),
            Err(ChunkSizeError::NotPages(3000))
        );
        assert_eq!(
            check_chunk(4 << 20, 2 << 20),
            Err(ChunkSizeError::LargerThanPool {
                chunk: 4 << 20,
                pool: 2 << 20
            })
        );
        assert_eq!(
            check_chunk(2 << 30, 8 << 30),
            Err(ChunkSizeError::TooLarge(2 << 30))
        );
        assert_eq!(check_chunk(4096, 4096), Ok(()));
        assert_eq!(check_chunk(DEFAULT_CHUNK_BYTES, 256 << 20), Ok(()));
        let e = check_chunk(5000, 1 << 20).unwrap_err().to_string();
        assert!(e.starts_with("5000 ") && e.contains("4 KiB"), "{e}");
        assert!(Pool::new(1 << 20, 0.8, PoolCompress::Lz4, 6000).is_err());
        assert!(Pool::new(1 << 20, 0.8, PoolCompress::Lz4, 0).is_err());
    }

    #[test]
    fn size_classes_cover_every_length() {
        assert_eq!(class_of(1), 0);
        assert_eq!(class_of(GRANULE), 0);
        assert_eq!(class_of(GRANULE + 1), 1);
        assert_eq!(class_of(MAX_COMPRESSED), RAW - 1);
        assert_eq!(class_of(MAX_COMPRESSED + 1), RAW);
        assert_eq!(class_of(PAGE_SIZE), RAW);
        for len in 1..=PAGE_SIZE {
            assert!(slot_bytes(class_of(len)) >= len);
        }
    }
}
