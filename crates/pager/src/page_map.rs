//! [`PageMap`]: a map from guest page to a value, stored densely, one slot per page.
//!
//! The state table notes a few things about some pages: the digest a mirror left writable must
//! keep, the block a page mirrored last. A guest disk read changes them for every page it fills,
//! and the digest is looked up again for every page a device overwrites. In hash maps each of those
//! was a probe at a random place in a table as large as the page cache: in `bench seqread` with the
//! Swap Mapper, the digest lookups on the device's writes alone were about a twentieth of the disk
//! thread's time. Here a note is an index into an array (one bit per page says whether it holds
//! one). The array is allocated at the first note, so a VM that never takes one (no Swap Mapper)
//! pays nothing; once allocated it costs `size_of::<T>()` and one bit per guest page, about what a
//! hash map holding every page costs, and less than one holding most of them.

use crate::page::PageIdx;

/// A value per guest page, for some pages.
#[derive(Debug)]
pub struct PageMap<T> {
    /// Guest pages, the keys' bound.
    pages: u32,
    /// One bit per page: whether `values` holds its value. Empty until the first insert.
    has: Vec<u64>,
    values: Vec<T>,
}

impl<T: Copy + Default> PageMap<T> {
    /// An empty map over pages `0..pages`; nothing is allocated yet.
    pub fn new(pages: u32) -> Self {
        PageMap {
            pages,
            has: Vec::new(),
            values: Vec::new(),
        }
    }

    fn bit(p: PageIdx) -> (usize, u64) {
        ((p / 64) as usize, 1u64 << (p % 64))
    }

    pub fn contains_key(&self, p: PageIdx) -> bool {
        let (w, b) = Self::bit(p);
        self.has.get(w).is_some_and(|x| x & b != 0)
    }

    pub fn get(&self, p: PageIdx) -> Option<T> {
        self.contains_key(p).then(|| self.values[p as usize])
    }

    /// Sets `p`'s value; returns the one it replaces. A page outside the map's range is the
    /// caller's bug: it is ignored, so a bad index cannot grow the map.
    pub fn insert(&mut self, p: PageIdx, v: T) -> Option<T> {
        if p >= self.pages {
            debug_assert!(false, "page {p} outside a map of {} pages", self.pages);
            return None;
        }
        if self.has.is_empty() {
            self.has = vec![0; self.pages.div_ceil(64) as usize];
            self.values = vec![T::default(); self.pages as usize];
        }
        let old = self.get(p);
        let (w, b) = Self::bit(p);
        self.has[w] |= b;
        self.values[p as usize] = v;
        old
    }

    pub fn remove(&mut self, p: PageIdx) -> Option<T> {
        let old = self.get(p)?;
        let (w, b) = Self::bit(p);
        self.has[w] &= !b;
        Some(old)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    #[allow(clippy::cast_possible_truncation)] // small values of a random walk
    fn behaves_as_a_map_and_allocates_at_the_first_insert() {
        let mut m: PageMap<u128> = PageMap::new(200);
        assert_eq!(m.get(5), None);
        assert_eq!(m.remove(5), None);
        assert!(m.values.is_empty());
        let mut model: HashMap<u32, u128> = HashMap::new();
        // A deterministic walk of inserts, replacements and removals over every page.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for i in 0..5000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let p = (x % 200) as u32;
            if x % 3 == 0 {
                assert_eq!(m.remove(p), model.remove(&p));
            } else {
                let v = u128::from(i) << 64 | u128::from(p);
                assert_eq!(m.insert(p, v), model.insert(p, v));
            }
        }
        for p in 0..200 {
            assert_eq!(m.get(p), model.get(&p).copied());
            assert_eq!(m.contains_key(p), model.contains_key(&p));
        }
        assert_eq!(m.values.len(), 200);
    }

    #[test]
    fn a_page_outside_the_range_is_never_present() {
        let m: PageMap<u64> = PageMap::new(64);
        assert!(!m.contains_key(64));
        assert!(!m.contains_key(u32::MAX));
        assert_eq!(m.get(u32::MAX), None);
    }
}
