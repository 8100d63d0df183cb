//! The pool's slab allocator: memory is mapped in chunks, each given to one size class and cut
//! into slots of that class's size (a multiple of [`GRANULE`]); a class fills its
//! lowest-numbered chunk with room first, and a chunk whose last slot is freed is unmapped.
//! Everything here is reached under the pool's lock.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::compress::{Unpacker, MAX_COMPRESSED};
use crate::page::{Block, PAGE_SIZE};

/// Every slot is a whole number of these bytes.
pub const GRANULE: usize = 256;

/// The size class of whole pages; classes below it hold compressed pages of
/// `(class + 1) * GRANULE` bytes at most.
pub(super) const RAW: usize = MAX_COMPRESSED / GRANULE;
pub(super) const CLASSES: usize = RAW + 1;
/// Bytes of a slot of `class`.
pub(super) fn slot_bytes(class: usize) -> usize {
    if class == RAW {
        PAGE_SIZE
    } else {
        (class + 1) * GRANULE
    }
}

/// The class of a page kept in `len` bytes.
pub(super) fn class_of(len: usize) -> usize {
    if len > MAX_COMPRESSED {
        RAW
    } else {
        len.div_ceil(GRANULE).max(1) - 1
    }
}

/// Where a pooled page is: a slot of a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Loc {
    pub(super) chunk: u32,
    pub(super) slot: u32,
}

/// One pooled block.
#[derive(Clone, Copy, Debug)]
pub(super) struct Entry {
    pub(super) loc: Loc,
    /// Bytes kept: `PAGE_SIZE` for a whole page, less for a compressed one.
    pub(super) len: u32,
    /// When it was last written (higher: more recent).
    pub(super) seq: u64,
}

impl Entry {
    pub(super) fn class(&self) -> usize {
        class_of(self.len as usize)
    }
}

/// A mapped chunk of pool memory, cut into slots of one class.
pub(super) struct Chunk {
    pub(super) ptr: *mut u8,
    pub(super) len: usize,
    pub(super) class: usize,
    /// Slots it has room for.
    pub(super) slots: u32,
    /// Slots in use.
    pub(super) used: u32,
    /// Slots below this were handed out at least once; the rest never were.
    pub(super) fresh: u32,
    /// Slots below `fresh` freed since.
    pub(super) freed: Vec<u32>,
}

// SAFETY: a chunk is plain memory owned by the pool and only reached under its lock.
unsafe impl Send for Chunk {}

impl Chunk {
    pub(super) fn map(len: usize, class: usize) -> std::io::Result<Chunk> {
        let ptr = crate::sys::map_anonymous(len)?;
        Ok(Chunk {
            ptr,
            len,
            class,
            slots: u32::try_from(len / slot_bytes(class)).unwrap_or(u32::MAX),
            used: 0,
            fresh: 0,
            freed: Vec::new(),
        })
    }

    /// Takes a free slot, if there is one.
    pub(super) fn take(&mut self) -> Option<u32> {
        let slot = match self.freed.pop() {
            Some(s) => s,
            None if self.fresh < self.slots => {
                self.fresh += 1;
                self.fresh - 1
            }
            None => return None,
        };
        self.used += 1;
        Some(slot)
    }

    pub(super) fn full(&self) -> bool {
        self.used == self.slots
    }

    /// The memory of `slot`.
    pub(super) fn slot(&self, slot: u32) -> *mut u8 {
        let off = slot as usize * slot_bytes(self.class);
        debug_assert!(off + slot_bytes(self.class) <= self.len);
        // SAFETY: `slot < slots`, so the offset is inside the mapping.
        unsafe { self.ptr.add(off) }
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        // SAFETY: `ptr` is the mapping made in `map`, of this length, not used after this.
        if unsafe { libc::munmap(self.ptr.cast(), self.len) } != 0 {
            tracing::warn!(
                "pager: cannot unmap a pool chunk: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

pub(super) struct Inner {
    pub(super) chunk_bytes: usize,
    pub(super) chunks: Vec<Option<Chunk>>,
    /// For each class, its mapped chunks with a free slot; the lowest is filled first, so the
    /// highest empty out.
    pub(super) partial: [BTreeSet<u32>; CLASSES],
    pub(super) entries: HashMap<Block, Entry>,
    /// Pooled blocks by `seq`: the least recent first.
    pub(super) order: BTreeMap<u64, Block>,
    pub(super) next_seq: u64,
    /// Bytes of the slots in use.
    pub(super) used_bytes: u64,
    /// Decompresses for reads.
    pub(super) unpack: Unpacker,
}

/// The bytes kept for `e` (a live entry).
pub(super) fn kept<'a>(chunks: &'a [Option<Chunk>], e: &Entry) -> &'a [u8] {
    let c = chunks[e.loc.chunk as usize]
        .as_ref()
        .expect("a slot in use is in a mapped chunk");
    // SAFETY: the slot is live pool memory of at least `len` bytes (its class holds `len`),
    // not written while the caller holds the pool lock (which `chunks` is borrowed from).
    unsafe { std::slice::from_raw_parts(c.slot(e.loc.slot), e.len as usize) }
}

impl Inner {
    /// A free slot of `class`, mapping a chunk for it if none has room.
    pub(super) fn alloc(&mut self, class: usize) -> std::io::Result<Loc> {
        if let Some(&c) = self.partial[class].first() {
            let chunk = self.chunks[c as usize]
                .as_mut()
                .expect("a chunk with room is mapped");
            let slot = chunk.take().expect("a chunk with room has a free slot");
            if chunk.full() {
                self.partial[class].remove(&c);
            }
            return Ok(Loc { chunk: c, slot });
        }
        let i = match self.chunks.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.chunks.push(None);
                self.chunks.len() - 1
            }
        };
        let c = u32::try_from(i).map_err(|_| std::io::Error::other("too many pool chunks"))?;
        let mut chunk = Chunk::map(self.chunk_bytes, class)?;
        let slot = chunk.take().expect("a new chunk has a free slot");
        if !chunk.full() {
            self.partial[class].insert(c);
        }
        self.chunks[i] = Some(chunk);
        Ok(Loc { chunk: c, slot })
    }

    pub(super) fn free_loc(&mut self, loc: Loc) {
        let i = loc.chunk as usize;
        let Some(c) = &mut self.chunks[i] else { return };
        c.used -= 1;
        let class = c.class;
        if c.used == 0 {
            self.partial[class].remove(&loc.chunk);
            self.chunks[i] = None;
        } else {
            c.freed.push(loc.slot);
            self.partial[class].insert(loc.chunk);
        }
    }

    pub(super) fn remove(&mut self, b: Block) {
        if let Some(e) = self.entries.remove(&b) {
            self.order.remove(&e.seq);
            self.used_bytes -= slot_bytes(e.class()) as u64;
            self.free_loc(e.loc);
        }
    }

    /// Copies `src` (a page as kept: whole or compressed) into `loc`.
    pub(super) fn put(&self, loc: Loc, src: &[u8]) {
        let c = self.chunks[loc.chunk as usize]
            .as_ref()
            .expect("a slot just taken is in a mapped chunk");
        debug_assert!(src.len() <= slot_bytes(c.class));
        // SAFETY: the slot is live pool memory of its class's size, at least `src.len()`
        // bytes, ours under the lock.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), c.slot(loc.slot), src.len()) };
    }
}
