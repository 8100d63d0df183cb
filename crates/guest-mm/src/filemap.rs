//! The page cache (Linux's `mm/filemap.c`): a hash table keyed by (file, page index) over the
//! frames, the lookup that reads a page on a miss, `mark_page_accessed`, and dropping pages.

use crate::mm_types::{
    Frame, PageKind, F_DIRTY, F_REFERENCED, L_FILE_ACTIVE, L_FILE_INACTIVE, NIL,
};
use crate::{Backend, Mm, MmError};

/// How a page-cache page will be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read it (a miss reads the page from disk, with readahead).
    Read,
    /// Change part of it (a miss reads it; the page becomes dirty).
    Write,
    /// Overwrite all of it (a miss allocates without reading; the page becomes dirty).
    Overwrite,
}

fn hash(file: u32, index: u32) -> u32 {
    let x = (u64::from(file) << 32 | u64::from(index)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 32) as u32
}

/// The page-cache index (Linux's per-file `i_pages`, here one table for all files): an
/// open-addressing hash table of frame numbers keyed by the frames' (owner, index), with linear
/// probing. Its slice is handed in by [`Mm::new`](crate::Mm::new): a power of two, at least
/// twice the frames, so it never fills.
pub(crate) struct CacheIndex<'a> {
    slots: &'a mut [u32],
    len: u32,
}

impl<'a> CacheIndex<'a> {
    /// An empty index over `slots`.
    pub(crate) fn new(slots: &'a mut [u32]) -> Self {
        slots.fill(NIL);
        CacheIndex { slots, len: 0 }
    }

    /// Entries in the index.
    pub(crate) fn len(&self) -> u32 {
        self.len
    }

    /// The slot and frame of the page with key (`file`, `index`), if cached.
    fn find(&self, frames: &[Frame], file: u32, index: u32) -> Option<(usize, u32)> {
        let mask = self.slots.len() - 1;
        let mut s = hash(file, index) as usize & mask;
        loop {
            let f = self.slots[s];
            if f == NIL {
                return None;
            }
            let fr = &frames[f as usize];
            if fr.owner == file && fr.index == index {
                return Some((s, f));
            }
            s = (s + 1) & mask;
        }
    }

    /// Adds frame `f` under its (owner, index).
    fn insert(&mut self, frames: &[Frame], f: u32) {
        let mask = self.slots.len() - 1;
        let fr = frames[f as usize];
        let mut s = hash(fr.owner, fr.index) as usize & mask;
        while self.slots[s] != NIL {
            s = (s + 1) & mask;
        }
        self.slots[s] = f;
        self.len += 1;
    }

    /// Removes slot `s` with backward-shift deletion (linear probing, no tombstones).
    fn remove_slot(&mut self, frames: &[Frame], mut s: usize) {
        let mask = self.slots.len() - 1;
        self.slots[s] = NIL;
        self.len -= 1;
        let mut j = s;
        loop {
            j = (j + 1) & mask;
            let f = self.slots[j];
            if f == NIL {
                return;
            }
            let fr = &frames[f as usize];
            let home = hash(fr.owner, fr.index) as usize & mask;
            // Move the entry back if its home is not cyclically within (s, j].
            let between = if s <= j {
                s < home && home <= j
            } else {
                s < home || home <= j
            };
            if !between {
                self.slots[s] = f;
                self.slots[j] = NIL;
                s = j;
            }
        }
    }
}

impl Mm<'_> {
    /// The slot in the page-cache index and the frame of page `index` of `file`, if cached.
    pub(crate) fn cache_find(&self, file: u32, index: u32) -> Option<(usize, u32)> {
        self.cache.find(self.frames, file, index)
    }

    fn cache_insert(&mut self, f: u32) {
        self.cache.insert(self.frames, f);
    }

    /// Removes slot `s` of the page-cache index.
    pub(crate) fn cache_remove_slot(&mut self, s: usize) {
        self.cache.remove_slot(self.frames, s);
    }

    /// Linux's `mark_page_accessed`: an inactive page referenced twice becomes active.
    fn mark_accessed(&mut self, f: u32) {
        let fr = self.frames[f as usize];
        if fr.list == L_FILE_INACTIVE && fr.flags & F_REFERENCED != 0 {
            self.unlink(f);
            self.frames[f as usize].flags &= !F_REFERENCED;
            self.push_front(L_FILE_ACTIVE, f);
            self.events.pgactivate += 1;
        } else {
            self.frames[f as usize].flags |= F_REFERENCED;
        }
    }

    /// Returns the frame holding page `index` of file `file`, reading it (and up to
    /// `readahead_pages - 1` following pages, in one request) on a miss.
    pub fn file_page<B: Backend>(
        &mut self,
        be: &mut B,
        file: u32,
        index: u64,
        access: Access,
        pin: bool,
    ) -> Result<u32, MmError> {
        let pages = self.file_pages(file);
        if index >= pages {
            return Err(MmError::NotFound);
        }
        let idx = index as u32;
        let f = match self.cache_find(file, idx) {
            Some((_, f)) => {
                self.events.cache_hits += 1;
                self.mark_accessed(f);
                f
            }
            None => {
                self.events.cache_misses += 1;
                if access == Access::Overwrite {
                    let f = self.get_free(be)?;
                    self.add_to_cache(f, file, idx);
                    self.frames[f as usize].flags |= F_REFERENCED;
                    f
                } else {
                    self.read_pages(be, file, index, pages)?
                }
            }
        };
        if pin {
            self.pin(f);
        }
        if access != Access::Read && self.frames[f as usize].flags & F_DIRTY == 0 {
            self.frames[f as usize].flags |= F_DIRTY;
            self.dirty += 1;
            if self.dirty > self.params.dirty_limit {
                // balance_dirty_pages: the writer writes back down to the background level.
                self.pin(f);
                let r = self.writeback(be, self.params.dirty_background);
                self.unpin(f);
                r?;
            }
        }
        Ok(f)
    }

    pub(crate) fn add_to_cache(&mut self, f: u32, file: u32, idx: u32) {
        let fr = &mut self.frames[f as usize];
        fr.kind = PageKind::File;
        fr.owner = file;
        fr.index = idx;
        self.cache_insert(f);
        self.cached += 1;
        self.push_front(L_FILE_INACTIVE, f);
    }

    /// `sync; echo 1 > /proc/sys/vm/drop_caches`: writes dirty pages, then frees every
    /// unpinned page-cache page. Returns the pages dropped.
    pub fn drop_caches<B: Backend>(&mut self, be: &mut B) -> Result<u32, MmError> {
        self.sync(be)?;
        let mut dropped = 0;
        for list in [L_FILE_INACTIVE, L_FILE_ACTIVE] {
            let mut f = self.lists[usize::from(list)].tail;
            while f != NIL {
                let prev = self.frames[f as usize].prev;
                if self.frames[f as usize].pins == 0 {
                    self.evict_file(f);
                    dropped += 1;
                }
                f = prev;
            }
        }
        self.events.dropped += u64::from(dropped);
        Ok(dropped)
    }

    pub(crate) fn evict_file(&mut self, f: u32) {
        let fr = self.frames[f as usize];
        debug_assert!(fr.flags & F_DIRTY == 0);
        let (s, _) = self
            .cache_find(fr.owner, fr.index)
            .expect("page-cache page missing from the hash table");
        self.cache_remove_slot(s);
        self.unlink(f);
        self.cached -= 1;
        self.put_free(f);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::vec;

    use proptest::prelude::*;

    use super::CacheIndex;
    use crate::{Frame, NIL};

    proptest! {
        /// Inserts and removals in any order, with keys that collide in a small table: every
        /// key is found at its frame while cached and not at all once removed.
        #[test]
        fn the_index_finds_exactly_the_cached_keys(
            ops in proptest::collection::vec((any::<bool>(), 0u32..16, 0u32..8), 1..200),
        ) {
            const FRAMES: usize = 16;
            let mut frames = vec![Frame::INIT; FRAMES];
            let mut slots = vec![0u32; 2 * FRAMES];
            let mut index = CacheIndex::new(&mut slots);
            // Model: key -> frame, and which frames are in use.
            let mut model: HashMap<(u32, u32), u32> = HashMap::new();
            for (insert, file, page) in ops {
                let key = (file % 4, page);
                match (insert, model.get(&key).copied()) {
                    (true, None) => {
                        let Some(f) = (0..FRAMES as u32).find(|f| !model.values().any(|g| g == f))
                        else {
                            continue;
                        };
                        frames[f as usize].owner = key.0;
                        frames[f as usize].index = key.1;
                        index.insert(&frames, f);
                        model.insert(key, f);
                    }
                    (false, Some(f)) => {
                        let (s, g) = index.find(&frames, key.0, key.1).unwrap();
                        prop_assert_eq!(g, f);
                        index.remove_slot(&frames, s);
                        model.remove(&key);
                    }
                    _ => {}
                }
                prop_assert_eq!(index.len() as usize, model.len());
                for file in 0..4 {
                    for page in 0..8 {
                        let want = model.get(&(file, page)).copied();
                        prop_assert_eq!(index.find(&frames, file, page).map(|(_, f)| f), want);
                    }
                }
            }
            prop_assert!(slots.iter().filter(|&&f| f != NIL).count() == model.len());
        }
    }
}
