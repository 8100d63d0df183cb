//! The ghost cache (HyperDealer2 §5.3): Mattson's stack distance over the blocks whose pages
//! left a VM's memory.
//!
//! Keys are the storage locations of pages that left guest RAM, most recent first. A read of a
//! block the cache holds is a hit at *stack distance* `d`: the number of entries that left more
//! recently than it. By LRU's inclusion property, `d + 1` more pages of cache would have kept
//! the block in memory, so the histogram of hit distances says how many reads each extra page
//! would save. A hit removes the entry (the block is in memory again); a read of a block the
//! cache does not hold is a miss. The cache keeps at most `capacity` entries: the least recent
//! one falls off when a new one comes.
//!
//! Every operation is O(log n): each entry carries the stamp of its insertion, a Fenwick tree
//! over the stamps counts the live entries at or below a stamp, so the distance of an entry is
//! the live count minus its prefix count. Stamps are handed out in increasing order; when they
//! run out, the live entries are renumbered in order (amortised O(1) per insertion, since the
//! stamp space is then at least twice what is live).
//!
//! Pure: no syscalls, no clocks.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};

use thiserror::Error;

/// Buckets of the hit histogram the pager keeps.
pub const GHOST_BUCKETS: usize = 32;

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum GhostError {
    #[error("a ghost cache needs a capacity of at least one entry")]
    NoCapacity,
    #[error("a ghost cache needs at least one histogram bucket")]
    NoBuckets,
}

/// A ghost cache of keys `K` (for the pager, a disk and block), hashed by `S`.
#[derive(Clone, Debug)]
pub struct Ghost<K, S = RandomState> {
    capacity: usize,
    /// Stamp of each live key.
    stamps: HashMap<K, usize, S>,
    /// The key at each stamp, `None` where it left.
    slots: Vec<Option<K>>,
    /// Fenwick tree over `slots`: 1 per live key.
    tree: Vec<u32>,
    /// The next stamp to hand out.
    next: usize,
    /// No live stamp is below it.
    oldest: usize,
    bucket_pages: u64,
    hits: Vec<u64>,
    misses: u64,
}

impl<K: Copy + Eq + Hash, S: BuildHasher + Default> Ghost<K, S> {
    /// A ghost cache of at most `capacity` entries whose hit histogram has `buckets` buckets
    /// covering the whole capacity: each is `ceil(capacity / buckets)` distances wide.
    pub fn new(capacity: usize, buckets: usize) -> Result<Self, GhostError> {
        if capacity == 0 {
            return Err(GhostError::NoCapacity);
        }
        if buckets == 0 {
            return Err(GhostError::NoBuckets);
        }
        // The tree counts in u32: a capacity past what a VM's page index spans is not needed.
        let capacity = capacity.min(u32::MAX as usize / 2);
        Ok(Ghost {
            capacity,
            stamps: HashMap::default(),
            slots: Vec::new(),
            tree: Vec::new(),
            next: 0,
            oldest: 0,
            bucket_pages: capacity.div_ceil(buckets) as u64,
            hits: vec![0; buckets],
            misses: 0,
        })
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Entries held now.
    pub fn len(&self) -> usize {
        self.stamps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.stamps.is_empty()
    }

    pub fn contains(&self, key: &K) -> bool {
        self.stamps.contains_key(key)
    }

    /// Distances per histogram bucket.
    pub fn bucket_pages(&self) -> u64 {
        self.bucket_pages
    }

    /// Hits so far by bucket: element `i` counts distances in
    /// `[i * bucket_pages, (i + 1) * bucket_pages)`.
    pub fn hits(&self) -> &[u64] {
        &self.hits
    }

    /// Lookups that found nothing so far.
    pub fn misses(&self) -> u64 {
        self.misses
    }

    /// `key` left memory: it goes in at the most recent end (moved there if it was in). The
    /// least recent entry falls off if the cache is full.
    pub fn insert(&mut self, key: K) {
        if self.next == self.slots.len() {
            self.compact();
        }
        let s = self.next;
        self.next += 1;
        // One lookup of `key`, which is seldom in already (every lookup is a cache miss in a
        // table as large as the page cache).
        if let Some(old) = self.stamps.insert(key, s) {
            self.slots[old] = None;
            self.add(old, -1);
        }
        self.slots[s] = Some(key);
        self.add(s, 1);
        if self.len() > self.capacity {
            self.evict_oldest();
        }
    }

    /// A read of `key` missed the guest's memory: if the cache holds it, a hit at the returned
    /// stack distance (entries more recent than it), counted in its bucket, and the entry
    /// leaves; otherwise a miss, counted.
    pub fn access(&mut self, key: &K) -> Option<u64> {
        match self.take(key) {
            Some(d) => {
                let b = usize::try_from(d / self.bucket_pages).unwrap_or(usize::MAX);
                let last = self.hits.len() - 1;
                self.hits[b.min(last)] += 1;
                Some(d)
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    /// `key` is back in memory without a read that missed (uncounted): the entry leaves.
    /// Returns whether it was there.
    pub fn remove(&mut self, key: &K) -> bool {
        self.take(key).is_some()
    }

    /// Removes `key`, returning its distance if it was there.
    fn take(&mut self, key: &K) -> Option<u64> {
        let s = self.stamps.remove(key)?;
        // Live entries stamped after it: all live ones but those at or below its stamp.
        let d = (self.len() + 1) as u64 - u64::from(self.prefix(s));
        self.slots[s] = None;
        self.add(s, -1);
        Some(d)
    }

    fn evict_oldest(&mut self) {
        while self.oldest < self.next {
            if let Some(k) = self.slots[self.oldest] {
                self.take(&k);
                return;
            }
            self.oldest += 1;
        }
    }

    /// Renumbers the live entries `0..len` in order, in a stamp space at least twice as large
    /// (at most twice the capacity).
    fn compact(&mut self) {
        let live: Vec<K> = self.slots[self.oldest.min(self.next)..self.next]
            .iter()
            .flatten()
            .copied()
            .collect();
        let size = (2 * (live.len() + 1))
            .max(64)
            .min(2 * self.capacity)
            .max(live.len() + 1);
        self.slots = vec![None; size];
        self.tree = vec![0; size];
        for (i, k) in live.iter().enumerate() {
            self.slots[i] = Some(*k);
            self.stamps.insert(*k, i);
            // Linear build: each node passes its count to its parent.
            self.tree[i] += 1;
        }
        for i in 0..size {
            let parent = i | (i + 1);
            if parent < size {
                self.tree[parent] += self.tree[i];
            }
        }
        self.next = live.len();
        self.oldest = 0;
    }

    /// Live entries stamped `0..=s`.
    fn prefix(&self, s: usize) -> u32 {
        // Node `j - 1` covers stamps `(j & (j - 1))..j`.
        let mut j = s + 1;
        let mut sum = 0;
        while j > 0 {
            sum += self.tree[j - 1];
            j &= j - 1;
        }
        sum
    }

    fn add(&mut self, s: usize, delta: i32) {
        let mut i = s;
        while i < self.tree.len() {
            self.tree[i] = self.tree[i].wrapping_add_signed(delta);
            i |= i + 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The reference: an LRU stack in a vector, most recent last.
    struct Naive {
        stack: Vec<u32>,
        capacity: usize,
    }

    impl Naive {
        fn insert(&mut self, k: u32) {
            self.stack.retain(|&x| x != k);
            if self.stack.len() == self.capacity {
                self.stack.remove(0);
            }
            self.stack.push(k);
        }

        fn access(&mut self, k: u32) -> Option<u64> {
            let i = self.stack.iter().position(|&x| x == k)?;
            self.stack.remove(i);
            Some((self.stack.len() - i) as u64)
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u32),
        Access(u32),
        Remove(u32),
    }

    fn op(keys: u32) -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0..keys).prop_map(Op::Insert),
            2 => (0..keys).prop_map(Op::Access),
            1 => (0..keys).prop_map(Op::Remove),
        ]
    }

    #[test]
    fn a_hit_is_at_the_number_of_entries_more_recent_and_leaves() {
        let mut g = Ghost::<u32>::new(8, 4).unwrap();
        for k in 0..5u32 {
            g.insert(k);
        }
        assert_eq!(g.access(&4), Some(0));
        assert_eq!(g.access(&0), Some(3), "1, 2 and 3 left after 0");
        assert_eq!(g.access(&0), None, "a hit removes the entry");
        g.insert(1); // moves it to the most recent end
        assert_eq!(g.access(&2), Some(2));
        assert_eq!(
            g.hits(),
            &[1, 2, 0, 0],
            "distances 0 | 2, 3 in buckets of two"
        );
        assert_eq!(g.misses(), 1);
        assert_eq!(g.len(), 2);
    }

    #[test]
    fn the_least_recent_entry_falls_off_when_full() {
        let mut g = Ghost::<u32>::new(3, 1).unwrap();
        for k in 0..5u32 {
            g.insert(k);
        }
        assert_eq!(g.len(), 3);
        assert!(!g.contains(&1) && g.contains(&2));
        assert_eq!(g.access(&2), Some(2));
    }

    #[test]
    fn a_zero_capacity_or_no_buckets_is_refused() {
        assert_eq!(Ghost::<u32>::new(0, 4).unwrap_err(), GhostError::NoCapacity);
        assert_eq!(Ghost::<u32>::new(4, 0).unwrap_err(), GhostError::NoBuckets);
    }

    #[test]
    fn distances_survive_many_renumberings() {
        // Far more insertions than stamps: compaction renumbers again and again.
        let mut g = Ghost::<u32>::new(100, 10).unwrap();
        for k in 0..100_000u32 {
            g.insert(k % 150);
        }
        // The last 100 inserted are 49_900..100_000 mod 150; the oldest of them has 99 above.
        let oldest = 99_900 % 150;
        assert_eq!(g.access(&oldest), Some(99));
        assert_eq!(g.access(&(99_999 % 150)), Some(0));
    }

    proptest! {
        #[test]
        fn distances_equal_a_naive_lru_stack(
            capacity in 1usize..40,
            ops in proptest::collection::vec(op(60), 0..400),
        ) {
            let mut g = Ghost::<u32>::new(capacity, 4).unwrap();
            let mut n = Naive { stack: Vec::new(), capacity };
            let (mut hits, mut misses) = (0u64, 0u64);
            for o in &ops {
                match *o {
                    Op::Insert(k) => {
                        g.insert(k);
                        n.insert(k);
                    }
                    Op::Access(k) => {
                        let want = n.access(k);
                        prop_assert_eq!(g.access(&k), want, "after {:?}", ops);
                        if want.is_some() { hits += 1 } else { misses += 1 }
                    }
                    Op::Remove(k) => {
                        prop_assert_eq!(g.remove(&k), n.access(k).is_some());
                    }
                }
                prop_assert!(g.len() <= capacity);
                prop_assert_eq!(g.len(), n.stack.len());
            }
            prop_assert_eq!(g.hits().iter().sum::<u64>(), hits);
            prop_assert_eq!(g.misses(), misses);
            // What is left is in the same order.
            let left = n.stack.clone();
            for (i, k) in left.iter().enumerate() {
                prop_assert_eq!(g.access(k), Some((left.len() - 1 - i) as u64));
            }
        }

        #[test]
        fn every_hit_lands_in_its_bucket(
            capacity in 1usize..200,
            buckets in 1usize..40,
            keys in proptest::collection::vec(0u32..300, 0..600),
        ) {
            let mut g = Ghost::<u32>::new(capacity, buckets).unwrap();
            let mut expect = vec![0u64; buckets];
            for (i, &k) in keys.iter().enumerate() {
                if i % 3 == 2 {
                    if let Some(d) = g.access(&k) {
                        prop_assert!(d < capacity as u64);
                        expect[usize::try_from(d / g.bucket_pages()).unwrap()] += 1;
                    }
                } else {
                    g.insert(k);
                }
            }
            prop_assert!(g.bucket_pages() * buckets as u64 >= capacity as u64);
            prop_assert_eq!(g.hits(), &expect[..]);
        }
    }
}
