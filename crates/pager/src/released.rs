//! What the state table remembers of the pages instant release took (HyperDealer2 §4.2, §6.4;
//! `release.rs` does the release): when each left, so its dwell time is known when it comes back,
//! and the reclamation cache, a fixed number of released pages kept in host memory so that a
//! refault of a page released recently is a copy rather than a disk read. Pure: no system calls
//! (the cache here says which slot holds which page; the slots' memory is `sys/slots.rs`, and
//! `release.rs` moves the pages into it). The state table calls [`Released::state_changed`] on
//! every change of state of a page, so a released page that comes back by any path (a fault, a
//! device writing it whole, a guest disk read landing on it, a refetch before its block is
//! overwritten) ends its dwell, and its cached copy goes.

use std::collections::HashMap;
use std::time::Instant;

use crate::page::PageIdx;

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
    /// Pages releases took whose leaving the ghost cache and the dwell clock have not been
    /// told yet ([`Self::took`]), oldest release first.
    unrecorded: std::collections::VecDeque<Unrecorded>,
}

/// The pages one release took, in increasing order, and when; those before `next` are
/// recorded.
#[derive(Debug)]
struct Unrecorded {
    at: Instant,
    pages: Vec<PageIdx>,
    next: usize,
}

impl Unrecorded {
    /// Where `p` is among the pages not recorded yet.
    fn find(&self, p: PageIdx) -> Option<usize> {
        let i = self.pages[self.next..].binary_search(&p).ok()?;
        Some(self.next + i)
    }
}

impl Released {
    /// Nothing released yet; a reclamation cache of `cache_pages` pages (0: none).
    pub fn new(cache_pages: u32) -> Self {
        Released {
            out: HashMap::new(),
            cache: ReclamationCache::new(cache_pages),
            dwell_ms_log2: [0; DWELL_BUCKETS],
            refaults: 0,
            unrecorded: std::collections::VecDeque::new(),
        }
    }

    /// A release took `p` at `at`; the table records it later, with
    /// [`Self::take_unrecorded`]. A release gives its pages in increasing order, all with one
    /// `at`.
    pub fn took(&mut self, p: PageIdx, at: Instant) {
        match self.unrecorded.back_mut() {
            Some(u) if u.at == at && u.pages.last().is_some_and(|&l| l < p) => u.pages.push(p),
            _ => self.unrecorded.push_back(Unrecorded {
                at,
                pages: vec![p],
                next: 0,
            }),
        }
    }

    /// Whether pages a release took are left to record.
    pub fn has_unrecorded(&self) -> bool {
        !self.unrecorded.is_empty()
    }

    /// Up to `n` of the pages releases took and left to record, oldest release first, each
    /// with when it left; they count as recorded from now on (the caller records them).
    pub fn take_unrecorded(&mut self, n: usize) -> Vec<(PageIdx, Instant)> {
        let mut out = Vec::with_capacity(n.min(self.unrecorded_len()));
        while out.len() < n {
            let Some(u) = self.unrecorded.front_mut() else {
                break;
            };
            let end = u.pages.len().min(u.next + (n - out.len()));
            out.extend(u.pages[u.next..end].iter().map(|&p| (p, u.at)));
            u.next = end;
            if u.next == u.pages.len() {
                self.unrecorded.pop_front();
            }
        }
        out
    }

    /// Pages left to record.
    fn unrecorded_len(&self) -> usize {
        self.unrecorded.iter().map(|u| u.pages.len() - u.next).sum()
    }

    /// If `p` is a page a release took and not recorded yet: when it left, and it is taken
    /// off the list (it is back, or gone elsewhere, before its recording).
    fn take_unrecorded_page(&mut self, p: PageIdx) -> Option<Instant> {
        // The newest release first: a page taken twice before its recording left last then.
        self.unrecorded.iter_mut().rev().find_map(|u| {
            let i = u.find(p)?;
            u.pages.remove(i);
            Some(u.at)
        })
    }

    /// Page `p` was released at `at` (it is out of guest RAM now, and refaults from its block).
    pub fn left(&mut self, p: PageIdx, at: Instant) {
        self.out.insert(p, at);
    }

    /// Whether `p` is out because instant release took it.
    /// Counts the pages releases took that are not recorded yet too.
    pub fn is_out(&self, p: PageIdx) -> bool {
        self.out.contains_key(&p) || self.unrecorded.iter().any(|u| u.find(p).is_some())
    }

    /// Page `p` changes state (`resident`: it is back in guest RAM now). A released page ends
    /// its dwell: if it came back, its dwell time is counted; either way its cached copy goes.
    /// A page taken and not recorded yet ends its dwell too, and is taken off the list to
    /// record (so the cache never serves a page that came back).
    pub fn state_changed(&mut self, p: PageIdx, resident: bool) {
        let at = match self.out.remove(&p) {
            Some(at) => at,
            None if self.unrecorded.is_empty() => return,
            None => match self.take_unrecorded_page(p) {
                Some(at) => at,
                None => return,
            },
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

    /// Slots for the run of `k` pages from `p`, about to be released, in the reclamation
    /// cache: the next slots in ring order, so the least recently filled are reused first and
    /// the run gets neighbouring slots (two runs of them where the ring wraps). The pages they
    /// held are forgotten. At most as many pages as the cache holds, the last ones of the run;
    /// none without a cache. The caller moves each part in and calls [`Self::cache_remove`]
    /// for the pages that did not make it.
    pub fn cache_place(&mut self, p: PageIdx, k: u32) -> Vec<Placement> {
        self.cache.place(p, k)
    }

    /// Forgets `p`'s copy (its release did not happen after all, or it could not move in).
    pub fn cache_remove(&mut self, p: PageIdx) {
        self.cache.remove(p);
    }

    /// The slot holding the content of released page `p`, if the cache still holds it.
    pub fn cached_slot(&self, p: PageIdx) -> Option<u32> {
        let slot = self.cache.slot_of.get(&p).copied()?;
        self.is_out(p).then_some(slot)
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

/// Where part of a run of released pages goes in the reclamation cache: pages `page..page + n`
/// into slots `slot..slot + n`, which must be emptied first if `empty_first` (some held a page).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub page: PageIdx,
    pub slot: u32,
    pub n: u32,
    pub empty_first: bool,
}

/// A fixed number of page-sized slots, filled in ring order: the least recently filled slot is
/// reused first, so the least recently released page is evicted first. A hit takes its page
/// out and leaves its slot free until the ring comes round.
#[derive(Debug)]
struct ReclamationCache {
    cap: u32,
    /// The next slot to fill.
    next: u32,
    /// Per slot: the page it holds for the cache.
    owner: Vec<Option<PageIdx>>,
    /// Per slot: its memory may hold a page (held, or left by a hit or a failed move), so it
    /// must be emptied before a page moves in.
    occupied: Vec<bool>,
    /// The slot holding each cached page.
    slot_of: HashMap<PageIdx, u32>,
}

impl ReclamationCache {
    fn new(cap: u32) -> Self {
        ReclamationCache {
            cap,
            next: 0,
            owner: vec![None; cap as usize],
            occupied: vec![false; cap as usize],
            slot_of: HashMap::new(),
        }
    }

    fn len(&self) -> u32 {
        u32::try_from(self.slot_of.len()).unwrap_or(u32::MAX)
    }

    fn remove(&mut self, p: PageIdx) {
        if let Some(s) = self.slot_of.remove(&p) {
            self.owner[s as usize] = None;
        }
    }

    fn place(&mut self, p: PageIdx, k: u32) -> Vec<Placement> {
        let n = k.min(self.cap);
        let mut page = p + (k - n);
        let mut left = n;
        let mut out = Vec::new();
        while left > 0 {
            let slot = self.next;
            let n = left.min(self.cap - slot);
            let mut empty_first = false;
            for i in 0..n {
                let s = (slot + i) as usize;
                if let Some(q) = self.owner[s].take() {
                    self.slot_of.remove(&q);
                }
                empty_first |= self.occupied[s];
                self.occupied[s] = true;
                self.remove(page + i);
                self.owner[s] = Some(page + i);
                self.slot_of.insert(page + i, slot + i);
            }
            out.push(Placement {
                page,
                slot,
                n,
                empty_first,
            });
            self.next = (slot + n) % self.cap;
            page += n;
            left -= n;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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

    fn pl(page: PageIdx, slot: u32, n: u32, empty_first: bool) -> Placement {
        Placement {
            page,
            slot,
            n,
            empty_first,
        }
    }

    #[test]
    fn the_cache_fills_its_slots_in_ring_order_and_evicts_the_least_recently_released() {
        let mut r = Released::new(4);
        let now = Instant::now();
        // A run of 3 gets slots 0..3; the next run of 3 gets slot 3 and, round the ring, 0..2,
        // whose pages (10, 11) are evicted; the slots held pages, so they are emptied first.
        assert_eq!(r.cache_place(10, 3), [pl(10, 0, 3, false)]);
        assert_eq!(
            r.cache_place(20, 3),
            [pl(20, 3, 1, false), pl(21, 0, 2, true)]
        );
        for p in [10, 11, 12, 20, 21, 22] {
            r.left(p, now);
        }
        assert_eq!(r.cache_pages(), 4);
        assert_eq!((r.cached_slot(10), r.cached_slot(11)), (None, None));
        assert_eq!(r.cached_slot(12), Some(2));
        assert_eq!(r.cached_slot(20), Some(3));
        assert_eq!((r.cached_slot(21), r.cached_slot(22)), (Some(0), Some(1)));
        // A run longer than the cache: only its last pages.
        assert_eq!(
            r.cache_place(100, 6),
            [pl(102, 2, 2, true), pl(104, 0, 2, true)]
        );
        assert_eq!(r.cache_pages(), 4);
    }

    #[test]
    fn a_page_back_or_gone_leaves_the_cache_and_only_released_pages_are_served() {
        let mut r = Released::new(3);
        let now = Instant::now();
        r.cache_place(1, 3);
        for p in 1..=3 {
            r.left(p, now);
        }
        // Page 2 comes back (a hit), page 3 goes to the balloon: both leave the cache.
        r.state_changed(2, true);
        r.state_changed(3, false);
        assert_eq!((r.cached_slot(2), r.cached_slot(3)), (None, None));
        assert_eq!(r.cached_slot(1), Some(0));
        assert_eq!(r.cache_pages(), 1);
        // A page placed whose release did not happen is not served, and can be forgotten.
        assert_eq!(r.cache_place(7, 1), [pl(7, 0, 1, true)]);
        assert_eq!(r.cached_slot(7), None, "not out");
        r.cache_remove(7);
        assert_eq!(r.cache_pages(), 0);
        // Slots a hit freed are refilled when the ring comes round, emptied first.
        assert_eq!(r.cache_place(8, 2), [pl(8, 1, 2, true)]);
    }

    #[test]
    fn pages_taken_and_not_recorded_yet_are_out_for_the_cache_and_the_dwell_clock() {
        let mut r = Released::new(4);
        let at = Instant::now() - Duration::from_millis(300);
        r.cache_place(10, 3);
        for p in 10..13 {
            r.took(p, at);
        }
        r.took(5, at); // not after the last: a list of its own
        assert!(r.has_unrecorded());
        assert!(r.is_out(11) && r.is_out(5) && !r.is_out(6));
        assert_eq!(r.cached_slot(11), Some(1));
        // Page 11 comes back before its recording: its dwell counts, its slot goes, and it
        // leaves the list.
        r.state_changed(11, true);
        assert_eq!(r.cached_slot(11), None);
        assert!(!r.is_out(11));
        assert_eq!(r.take_refaults(), 1);
        assert_eq!(r.dwell_ms_log2[8], 1, "{:?}", r.dwell_ms_log2);
        let first: Vec<PageIdx> = r.take_unrecorded(1).iter().map(|&(p, _)| p).collect();
        assert_eq!(first, [10]);
        let rest: Vec<PageIdx> = r.take_unrecorded(10).iter().map(|&(p, _)| p).collect();
        assert_eq!(rest, [12, 5]);
        assert!(!r.has_unrecorded());
        assert!(r.take_unrecorded(10).is_empty());
    }

    #[test]
    fn many_hits_do_not_grow_the_cache_past_its_slots() {
        let mut r = Released::new(4);
        let now = Instant::now();
        for p in 0..10_000u32 {
            r.cache_place(p, 1);
            r.left(p, now);
            r.state_changed(p, true);
        }
        assert_eq!(r.cache_pages(), 0);
        assert!(r.cache.slot_of.is_empty());
        assert_eq!(r.take_refaults(), 10_000);
    }

    #[test]
    fn no_cache_holds_nothing() {
        let mut r = Released::new(0);
        assert!(r.cache_place(1, 1).is_empty());
        r.left(1, Instant::now());
        assert_eq!(r.cached_slot(1), None);
        assert_eq!(r.cache_pages(), 0);
    }
}
