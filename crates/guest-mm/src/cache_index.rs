//! The page-cache index (Linux's per-file `i_pages`, here one table for all files): an
//! open-addressing hash table of frame numbers keyed by the frames' (owner, index). A leaf:
//! the page cache (`filemap.rs`) looks pages up in it, and [`Mm`](crate::Mm) holds it.

use crate::mm_types::{Frame, NIL};

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
    pub(crate) fn find(&self, frames: &[Frame], file: u32, index: u32) -> Option<(usize, u32)> {
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
    pub(crate) fn insert(&mut self, frames: &[Frame], f: u32) {
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
    pub(crate) fn remove_slot(&mut self, frames: &[Frame], mut s: usize) {
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::vec;

    use proptest::prelude::*;

    use super::CacheIndex;
    use crate::mm_types::{Frame, NIL};

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
