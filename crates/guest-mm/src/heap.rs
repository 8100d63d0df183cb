//! The free ranges of the guest kit's heap: a first-fit allocator of address ranges over one
//! region set aside at boot, for the few workloads that use a library which allocates (the
//! `compress` workload's DEFLATE). It is pure bookkeeping over numbers: the guest kit's global
//! allocator holds one behind a lock and hands out the addresses.
//!
//! Free memory is a table of at most [`MAX_FREE`] ranges, sorted by address, never touching one
//! another (a freed range is merged with its neighbours). An allocation takes the first range
//! the aligned request fits in, splitting it. A free that would need a range more than the
//! table holds leaves that memory out (counted in [`Ranges::lost`]): correct, only smaller. The
//! workloads allocate a few large buffers per vCPU up front, so the table never comes near full.

/// Free ranges the table holds at most.
pub const MAX_FREE: usize = 64;

/// Free address ranges `[start, end)`, and what is handed out.
pub struct Ranges {
    free: [(usize, usize); MAX_FREE],
    n: usize,
    used: usize,
    peak: usize,
    lost: usize,
}

impl Default for Ranges {
    fn default() -> Self {
        Self::new()
    }
}

impl Ranges {
    pub const fn new() -> Self {
        Ranges {
            free: [(0, 0); MAX_FREE],
            n: 0,
            used: 0,
            peak: 0,
            lost: 0,
        }
    }

    /// Bytes handed out now.
    pub fn used(&self) -> usize {
        self.used
    }

    /// The most bytes handed out at once.
    pub fn peak(&self) -> usize {
        self.peak
    }

    /// Bytes left out because the table was full when they were freed.
    pub fn lost(&self) -> usize {
        self.lost
    }

    /// Free bytes (in however many ranges).
    pub fn free_bytes(&self) -> usize {
        self.free[..self.n].iter().map(|(s, e)| e - s).sum()
    }

    /// The free ranges, by address.
    pub fn ranges(&self) -> &[(usize, usize)] {
        &self.free[..self.n]
    }

    /// Adds `[start, start + len)` as free memory (the region, at start).
    pub fn add(&mut self, start: usize, len: usize) {
        if len > 0 {
            self.put(start, start + len);
        }
    }

    /// `size` bytes (at least 1) aligned to `align` (a power of two), or `None`.
    pub fn alloc(&mut self, size: usize, align: usize) -> Option<usize> {
        let size = size.max(1);
        let align = align.max(1);
        for i in 0..self.n {
            let (s, e) = self.free[i];
            let Some(a) = s.checked_add(align - 1).map(|x| x & !(align - 1)) else {
                continue;
            };
            let Some(end) = a.checked_add(size) else {
                continue;
            };
            if end > e {
                continue;
            }
            match (a > s, end < e) {
                (false, false) => self.remove(i),
                (true, false) => self.free[i].1 = a,
                (false, true) => self.free[i].0 = end,
                (true, true) => {
                    if self.n == MAX_FREE {
                        // Splitting needs a slot; another range may fit without one.
                        continue;
                    }
                    self.free[i].1 = a;
                    self.insert(i + 1, (end, e));
                }
            }
            self.used += size;
            self.peak = self.peak.max(self.used);
            return Some(a);
        }
        None
    }

    /// Gives back `[start, start + size)` from [`Ranges::alloc`] (the same size asked for).
    ///
    /// # Panics
    /// If the range overlaps free memory: a double free.
    pub fn free(&mut self, start: usize, size: usize) {
        let size = size.max(1);
        self.used -= size;
        self.put(start, start + size);
    }

    /// Marks `[s, e)` free, merged with the ranges it touches.
    fn put(&mut self, s: usize, e: usize) {
        // The first range starting after s.
        let i = self.free[..self.n].partition_point(|r| r.0 <= s);
        if i > 0 {
            assert!(self.free[i - 1].1 <= s, "heap: {s:#x} freed twice");
        }
        if i < self.n {
            assert!(e <= self.free[i].0, "heap: {s:#x} freed twice");
        }
        let joins_prev = i > 0 && self.free[i - 1].1 == s;
        let joins_next = i < self.n && self.free[i].0 == e;
        match (joins_prev, joins_next) {
            (true, true) => {
                self.free[i - 1].1 = self.free[i].1;
                self.remove(i);
            }
            (true, false) => self.free[i - 1].1 = e,
            (false, true) => self.free[i].0 = s,
            (false, false) => {
                if self.n == MAX_FREE {
                    self.lost += e - s;
                } else {
                    self.insert(i, (s, e));
                }
            }
        }
    }

    fn remove(&mut self, i: usize) {
        self.free.copy_within(i + 1..self.n, i);
        self.n -= 1;
    }

    fn insert(&mut self, i: usize, r: (usize, usize)) {
        self.free.copy_within(i..self.n, i + 1);
        self.free[i] = r;
        self.n += 1;
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use proptest::prelude::*;
    use std::vec::Vec;

    #[test]
    fn alloc_splits_and_free_merges_back() {
        let mut h = Ranges::new();
        h.add(0x1000, 0x10000);
        let a = h.alloc(100, 8).unwrap();
        assert_eq!(a, 0x1000);
        // Aligned past the first allocation: the gap before it stays free.
        let b = h.alloc(0x1000, 0x1000).unwrap();
        assert_eq!(b, 0x2000);
        assert_eq!(h.ranges(), &[(0x1000 + 100, 0x2000), (0x3000, 0x11000)]);
        assert_eq!(h.used(), 100 + 0x1000);
        h.free(a, 100);
        h.free(b, 0x1000);
        assert_eq!(h.ranges(), &[(0x1000, 0x11000)]);
        assert_eq!((h.used(), h.peak(), h.lost()), (0, 100 + 0x1000, 0));
        assert_eq!(h.alloc(0x10001, 1), None);
        assert_eq!(h.alloc(0x10000, 1), Some(0x1000));
        assert_eq!(h.free_bytes(), 0);
    }

    #[test]
    #[should_panic(expected = "freed twice")]
    fn a_double_free_is_caught() {
        let mut h = Ranges::new();
        h.add(0, 4096);
        let a = h.alloc(64, 8).unwrap();
        let _b = h.alloc(64, 8).unwrap();
        h.free(a, 64);
        h.free(a, 64);
    }

    #[test]
    fn a_full_table_loses_memory_rather_than_overlapping() {
        let mut h = Ranges::new();
        h.add(0, 4096 * 1024);
        let blocks: Vec<usize> = (0..2 * MAX_FREE + 2)
            .map(|_| h.alloc(16, 16).unwrap())
            .collect();
        // Free every other block: each is a range of its own, until the table is full.
        for &b in blocks.iter().step_by(2) {
            h.free(b, 16);
        }
        assert_eq!(h.ranges().len(), MAX_FREE);
        assert!(h.lost() > 0);
        let total = h.free_bytes() + h.used() + h.lost();
        assert_eq!(total, 4096 * 1024);
    }

    proptest! {
        /// Random allocations and frees: what is handed out is aligned, inside the region and
        /// never overlaps; free, used and lost add up to the region; freeing all merges it back.
        #[test]
        fn allocations_never_overlap(ops in proptest::collection::vec((0usize..5000, 0u32..7, any::<bool>()), 1..300)) {
            let region = (0x10_0000usize, 1usize << 20);
            let mut h = Ranges::new();
            h.add(region.0, region.1);
            let mut live: Vec<(usize, usize)> = Vec::new();
            for (size, align_log, free) in ops {
                if free && !live.is_empty() {
                    let (a, s) = live.swap_remove(size % live.len());
                    h.free(a, s);
                } else if let Some(a) = h.alloc(size, 1 << align_log) {
                    let s = size.max(1);
                    prop_assert_eq!(a % (1 << align_log), 0);
                    prop_assert!(a >= region.0 && a + s <= region.0 + region.1);
                    for &(b, t) in &live {
                        prop_assert!(a + s <= b || b + t <= a, "{a:#x}+{s} overlaps {b:#x}+{t}");
                    }
                    live.push((a, s));
                }
                prop_assert_eq!(h.free_bytes() + h.used() + h.lost(), region.1);
                let r = h.ranges();
                for w in r.windows(2) {
                    prop_assert!(w[0].1 < w[1].0);
                }
            }
            for (a, s) in live.drain(..) {
                h.free(a, s);
            }
            if h.lost() == 0 {
                prop_assert_eq!(h.ranges(), &[(region.0, region.0 + region.1)][..]);
            }
        }
    }
}
