//! What the page table remembers of the pages instant release took (HyperDealer2 §4.2, §6.4;
//! `release.rs` does the release): when each left, so its dwell time is known when it comes
//! back, and the reclamation cache, a fixed number of released pages' contents kept in host
//! memory so that a refault of a page released recently is a copy rather than a disk read.
//! Pure: no system calls. The page table calls [`Released::state_changed`] on every change of
//! state of a page, so a released page that comes back by any path (a fault, a device writing
//! it whole, a guest disk read landing on it, a refetch before its block is overwritten) ends
//! its dwell, and its cached copy goes.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use crate::page::{PageIdx, PAGE_SIZE};

/// Buckets of the dwell histogram: element `i` counts dwell times in `[2^i, 2^(i+1))` ms
/// (element 0 also those below 1 ms, the last also those longer).
pub const DWELL_BUCKETS: usize = 24;

/// The histogram bucket of a dwell of `ms` milliseconds.
pub fn dwell_bucket(ms: u64) -> usize {
    if ms == 0 {
        return 0;
    }
    (63 - ms.leading_zeros() as usize).min(DWELL_BUCKETS - 1)
}

/// Released pages not back yet, their dwell times once back, and the reclamation cache.
#[derive(Debug)]
pub struct Released {
    /// Released pages out of guest RAM now: when each left.
    out: HashMap<PageIdx, Instant>,
    cache: ReclamationCache,
    /// Released pages that came back, by dwell time (see [`DWELL_BUCKETS`]).
    pub dwell_ms_log2: [u64; DWELL_BUCKETS],
    /// Released pages that came back and are not yet counted in the pager's counters
    /// ([`Self::take_refaults`]).
    refaults: u64,
}

impl Released {
    /// Nothing released yet; a reclamation cache of `cache_pages` pages (0: none).
    pub fn new(cache_pages: u32) -> Self {
        Released {
            out: HashMap::new(),
            cache: ReclamationCache::new(cache_pages),
            dwell_ms_log2: [0; DWELL_BUCKETS],
            refaults: 0,
        }
    }

    /// Page `p` was released at `at` (it is out of guest RAM now, and refaults from its block).
    pub fn left(&mut self, p: PageIdx, at: Instant) {
        self.out.insert(p, at);
    }

    /// Whether `p` is out because instant release took it.
    pub fn is_out(&self, p: PageIdx) -> bool {
        self.out.contains_key(&p)
    }

    /// Page `p` changes state (`resident`: it is back in guest RAM now). A released page ends
    /// its dwell: if it came back, its dwell time is counted; either way its cached copy goes.
    pub fn state_changed(&mut self, p: PageIdx, resident: bool) {
        let Some(at) = self.out.remove(&p) else {
            return;
        };
        self.cache.remove(p);
        if resident {
            let ms = u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX);
            self.dwell_ms_log2[dwell_bucket(ms)] += 1;
            self.refaults += 1;
        }
    }

    /// The released pages that came back since the last call.
    pub fn take_refaults(&mut self) -> u64 {
        std::mem::take(&mut self.refaults)
    }

    /// Keeps a copy of `page` (one page) for `p`, about to be released, in the reclamation
    /// cache, evicting the least recently released page if the cache is full. No-op without a
    /// cache.
    pub fn cache_put(&mut self, p: PageIdx, page: &[u8]) {
        self.cache.put(p, page);
    }

    /// Forgets `p`'s copy (its release did not happen after all).
    pub fn cache_remove(&mut self, p: PageIdx) {
        self.cache.remove(p);
    }

    /// The cached content of released page `p`, if the cache still holds it.
    pub fn cached(&self, p: PageIdx) -> Option<&[u8]> {
        if !self.out.contains_key(&p) {
            return None;
        }
        self.cache.get(p)
    }

    /// Pages the reclamation cache holds now.
    pub fn cache_pages(&self) -> u32 {
        self.cache.len()
    }

    /// The most pages the reclamation cache holds.
    pub fn cache_capacity(&self) -> u32 {
        self.cache.cap
    }
}

/// A fixed number of page-sized slots in host memory, used least recently released first
/// (a hit takes its page out, so released order is use order). Its memory is allocated as
/// slots are first used, and counts in the VMM's resident memory.
#[derive(Debug)]
struct ReclamationCache {
    cap: u32,
    /// `slots in use so far * PAGE_SIZE` bytes, at most `cap` slots.
    data: Vec<u8>,
    /// The slot holding each cached page.
    slot_of: HashMap<PageIdx, u32>,
    /// Per slot: the page it holds, and the number of its current use.
    owner: Vec<(Option<PageIdx>, u64)>,
    /// Slots in the order they were filled (with the number of that use; an entry whose number
    /// is not the slot's current one is stale).
    order: VecDeque<(u32, u64)>,
    free: Vec<u32>,
    uses: u64,
}

impl ReclamationCache {
    fn new(cap: u32) -> Self {
        ReclamationCache {
            cap,
            data: Vec::new(),
            slot_of: HashMap::new(),
            owner: Vec::new(),
            order: VecDeque::new(),
            free: Vec::new(),
            uses: 0,
        }
    }

    fn len(&self) -> u32 {
        u32::try_from(self.slot_of.len()).unwrap_or(u32::MAX)
    }

    fn remove(&mut self, p: PageIdx) {
        if let Some(s) = self.slot_of.remove(&p) {
            self.owner[s as usize].0 = None;
            self.free.push(s);
        }
    }

    /// A slot for a new page: a free one, a new one, or the least recently filled one.
    fn slot(&mut self) -> Option<u32> {
        if let Some(s) = self.free.pop() {
            return Some(s);
        }
        let used = u32::try_from(self.owner.len()).unwrap_or(u32::MAX);
        if used < self.cap {
            self.owner.push((None, 0));
            self.data.resize((used as usize + 1) * PAGE_SIZE, 0);
            return Some(used);
        }
        while let Some((s, n)) = self.order.pop_front() {
            if let (Some(q), m) = self.owner[s as usize] {
                if m == n {
                    self.slot_of.remove(&q);
                    self.owner[s as usize].0 = None;
                    return Some(s);
                }
            }
        }
        None
    }

    fn put(&mut self, p: PageIdx, page: &[u8]) {
        if self.cap == 0 || page.len() != PAGE_SIZE {
            return;
        }
        self.remove(p);
        let Some(s) = self.slot() else {
            return;
        };
        let at = s as usize * PAGE_SIZE;
        self.data[at..at + PAGE_SIZE].copy_from_slice(page);
        self.uses += 1;
        self.owner[s as usize] = (Some(p), self.uses);
        self.slot_of.insert(p, s);
        self.order.push_back((s, self.uses));
        // Entries of slots freed by hits stay until eviction reaches them: drop them once they
        // outnumber the live ones, so the queue stays within twice the cache.
        if self.order.len() > 2 * self.cap as usize {
            let owner = &self.owner;
            self.order
                .retain(|&(s, n)| matches!(owner[s as usize], (Some(_), m) if m == n));
        }
    }

    fn get(&self, p: PageIdx) -> Option<&[u8]> {
        let s = *self.slot_of.get(&p)? as usize;
        self.data.get(s * PAGE_SIZE..(s + 1) * PAGE_SIZE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn page(v: u8) -> Vec<u8> {
        vec![v; PAGE_SIZE]
    }

    #[test]
    fn dwell_buckets_are_powers_of_two_of_milliseconds() {
        assert_eq!(dwell_bucket(0), 0);
        assert_eq!(dwell_bucket(1), 0);
        assert_eq!(dwell_bucket(2), 1);
        assert_eq!(dwell_bucket(3), 1);
        assert_eq!(dwell_bucket(4), 2);
        assert_eq!(dwell_bucket(1023), 9);
        assert_eq!(dwell_bucket(1024), 10);
        assert_eq!(dwell_bucket(1 << 23), 23);
        assert_eq!(dwell_bucket(u64::MAX), DWELL_BUCKETS - 1);
    }

    #[test]
    fn a_page_that_comes_back_counts_its_dwell_and_one_that_goes_elsewhere_does_not() {
        let mut r = Released::new(0);
        let long_ago = Instant::now() - Duration::from_millis(300);
        r.left(1, long_ago);
        r.left(2, Instant::now());
        r.left(3, Instant::now());
        assert!(r.is_out(1));
        r.state_changed(1, true);
        r.state_changed(2, false); // ballooned, say
        r.state_changed(4, true); // never released
        assert_eq!(r.take_refaults(), 1);
        assert_eq!(r.take_refaults(), 0, "taken once");
        // 300 ms (or a little more on a slow machine) is in [256, 512).
        assert_eq!(r.dwell_ms_log2[8], 1, "{:?}", r.dwell_ms_log2);
        assert_eq!(r.dwell_ms_log2.iter().sum::<u64>(), 1);
        assert!(!r.is_out(1) && !r.is_out(2) && r.is_out(3));
    }

    #[test]
    fn the_cache_keeps_the_most_recently_released_pages_and_drops_them_when_they_change() {
        let mut r = Released::new(3);
        let now = Instant::now();
        for p in 0..5u32 {
            r.cache_put(p, &page(p as u8 + 1));
            r.left(p, now);
        }
        assert_eq!(r.cache_pages(), 3);
        assert_eq!(r.cached(0), None, "the oldest went first");
        assert_eq!(r.cached(1), None);
        for p in 2..5u32 {
            assert_eq!(r.cached(p), Some(&page(p as u8 + 1)[..]), "page {p}");
        }
        // Page 3 comes back (a hit), page 2 goes to the balloon: both copies go.
        r.state_changed(3, true);
        r.state_changed(2, false);
        assert_eq!((r.cached(3), r.cached(2)), (None, None));
        assert_eq!(r.cache_pages(), 1);
        // Their slots are reused before page 4, now the oldest, is evicted.
        r.cache_put(7, &page(70));
        r.left(7, now);
        r.cache_put(8, &page(80));
        r.left(8, now);
        assert_eq!(r.cached(4), Some(&page(5)[..]));
        r.cache_put(9, &page(90));
        r.left(9, now);
        assert_eq!(r.cached(4), None);
        assert_eq!(r.cached(9), Some(&page(90)[..]));
        assert_eq!(r.cache_pages(), 3);
        // A copy whose release did not happen is not served.
        r.cache_put(10, &page(100));
        assert_eq!(r.cached(10), None, "not out");
        r.cache_remove(10);
        assert_eq!(r.cache_pages(), 2);
    }

    #[test]
    fn many_hits_do_not_grow_the_cache_past_its_slots() {
        let mut r = Released::new(4);
        let now = Instant::now();
        for p in 0..10_000u32 {
            r.cache_put(p, &page(1));
            r.left(p, now);
            r.state_changed(p, true);
        }
        assert_eq!(r.cache_pages(), 0);
        assert!(r.cache.order.len() <= 8);
        assert_eq!(r.cache.data.len(), PAGE_SIZE);
        assert_eq!(r.take_refaults(), 10_000);
    }

    #[test]
    fn no_cache_holds_nothing() {
        let mut r = Released::new(0);
        r.cache_put(1, &page(1));
        r.left(1, Instant::now());
        assert_eq!(r.cached(1), None);
        assert_eq!(r.cache_pages(), 0);
    }
}
