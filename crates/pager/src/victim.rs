//! Victim selection among resident pages: `random` (ESX §3.3), `clock` (second chance), or
//! HyperDealer2's reference-pattern order for the pages that mirror disk blocks (`hd2`,
//! `hd2-whole`: §4.5, the order itself in `pattern/pick.rs`, applied by
//! [`StateTable::pick_victims`](crate::state::table::StateTable::pick_victims)) with clock for
//! the rest.
//!
//! What "recently used" can mean here: the host cannot read the guest's accessed bits (KVM keeps
//! them in its own page tables, and this kernel has no idle page tracking), and testing a page by
//! unmapping it costs a whole fault. So `clock`'s reference bit is set by the events the pager
//! does see — a page's fault-in, its first write after a clean load, a guest disk read landing
//! in it — and cleared by the hand. That favours keeping pages that came in or were dirtied
//! recently; reads of pages that stay resident are invisible to it. The pages that mirror disk
//! blocks (the first victims) `clock` takes least recently used first by those same events, in
//! an exact order kept for them: a second-chance hand turning much slower than a guest refills
//! its page cache would pick among them almost at random (HyperDealer2's LRU baseline, §6.4,
//! is the order the guest's own reclaim follows).
//!
//! **The victim cache** (Tesseract §4.3, `--victim-cache`): chosen victims first *cool down*,
//! resident and write-protected, in a FIFO of a share of the limit; reclaim writes out the
//! oldest. A
//! victim the guest (or a device) writes while it cools leaves the cache and stays resident
//! (a hit, no write and no fault back). One the guest writes out to its own disk meanwhile
//! then mirrors that disk block (with the Swap Mapper on), so leaving the cache costs no write
//! to the swap file at all (caught). As with clock, reads are invisible: a page the guest only
//! reads while it cools is still written out.

use crate::page::PageIdx;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VictimPolicy {
    Random,
    Clock,
    /// HyperDealer2 (§4.5): mirrored pages by reference pattern, then the others by clock.
    Hd2,
    /// [`Self::Hd2`] taking a sequence whole once one of its pages is taken (WHOLE_SEQ).
    Hd2Whole,
}

impl VictimPolicy {
    /// Whether mirrored pages go in the reference patterns' order.
    pub fn is_hd2(self) -> bool {
        matches!(self, VictimPolicy::Hd2 | VictimPolicy::Hd2Whole)
    }
}

const ABSENT: u32 = u32::MAX;

/// The resident set, kept so a victim is found in O(1) (random) or amortised O(1) (clock).
#[derive(Debug)]
pub struct Victims {
    policy: VictimPolicy,
    /// Resident pages in no particular order.
    list: Vec<PageIdx>,
    /// Position of each page in `list`, or ABSENT.
    pos: Vec<u32>,
    /// Clock reference bits, by page.
    referenced: Vec<bool>,
    hand: usize,
    rng: u64,
    /// Resident pages that mirror disk blocks (dropping them costs no write), and their
    /// positions in that list.
    named: Vec<PageIdx>,
    named_pos: Vec<u32>,
    /// With [`VictimPolicy::Clock`]: the named pages, least recently used first (filled by a
    /// disk read, faulted in, written), each with the stamp of that use; an entry whose stamp
    /// is not the page's own any more is stale.
    named_order: std::collections::VecDeque<(PageIdx, u32)>,
    named_used: Vec<u32>,
    named_next: u32,
    /// Victims are taken in aligned clusters of this many pages (a power of two): a chosen page
    /// brings its resident neighbours, so they are written to consecutive blocks and a later
    /// fault reads them back in one I/O.
    cluster: u32,
    /// The victim cache: pages cooling down (resident, out of `list`), oldest first, each with
    /// the number it was cooled under; an entry whose number is not the page's own any more is
    /// stale (the page left, and maybe came back).
    cooling: std::collections::VecDeque<(PageIdx, u32)>,
    /// Per page: the number it cools under, or ABSENT when not cooling.
    cooled_as: Vec<u32>,
    cooled_next: u32,
    /// Pages cooling now, and taken out of the cache for writing but not yet gone.
    cool_len: u32,
    /// Percent of the limit the victim cache holds before reclaim writes its oldest (0: no
    /// cache).
    pub cache_percent: u8,
    /// Cooling victims written by the guest or a device: kept resident.
    pub cache_hits: u64,
    /// Cooling victims the guest wrote to its own disk, so they left without a swap write.
    pub cache_caught: u64,
}

impl Victims {
    pub fn new(pages: u32, policy: VictimPolicy, seed: u64, cluster: u32) -> Self {
        Victims {
            policy,
            list: Vec::new(),
            pos: vec![ABSENT; pages as usize],
            referenced: vec![false; pages as usize],
            named: Vec::new(),
            named_pos: vec![ABSENT; pages as usize],
            named_order: std::collections::VecDeque::new(),
            named_used: if policy == VictimPolicy::Clock {
                vec![ABSENT; pages as usize]
            } else {
                Vec::new()
            },
            named_next: 0,
            hand: 0,
            rng: seed | 1,
            cluster: cluster.max(1).next_power_of_two(),
            cooling: std::collections::VecDeque::new(),
            cooled_as: vec![ABSENT; pages as usize],
            cooled_next: 0,
            cool_len: 0,
            cache_percent: 0,
            cache_hits: 0,
            cache_caught: 0,
        }
    }

    /// Resident pages: those victims may be chosen from, and those cooling down.
    pub fn len(&self) -> u32 {
        u32::try_from(self.list.len())
            .unwrap_or(u32::MAX)
            .saturating_add(self.cool_len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Resident pages victims may be chosen from (not cooling).
    fn candidates(&self) -> u32 {
        u32::try_from(self.list.len()).unwrap_or(u32::MAX)
    }

    pub fn policy(&self) -> VictimPolicy {
        self.policy
    }

    /// Whether `p` is resident and may be chosen (not cooling).
    pub fn is_candidate(&self, p: PageIdx) -> bool {
        self.pos.get(p as usize).is_some_and(|&i| i != ABSENT)
    }

    /// Pages in the victim cache now.
    pub fn cooling(&self) -> u32 {
        self.cool_len
    }

    pub fn is_cooling(&self, p: PageIdx) -> bool {
        self.cooled_as[p as usize] != ABSENT
    }

    /// Moves `pages` (chosen by [`Self::pick`]) into the victim cache.
    pub(crate) fn cool(&mut self, pages: &[PageIdx]) {
        for &p in pages {
            if self.is_cooling(p) || self.pos[p as usize] == ABSENT {
                continue;
            }
            self.remove(p);
            let n = self.cooled_next;
            self.cooled_next = n.wrapping_add(1) % ABSENT;
            self.cooled_as[p as usize] = n;
            self.cooling.push_back((p, n));
            self.cool_len += 1;
        }
    }

    /// Takes up to `n` of the oldest cooling pages out of the cache, for reclaim to write out;
    /// they still count as resident (and cooling) until they go, or [`Self::warm`] puts one
    /// that stays back among the candidates. Sorted by page index.
    pub(crate) fn take_cooled(&mut self, n: u32) -> Vec<PageIdx> {
        let mut out = Vec::new();
        while out.len() < n as usize {
            let Some((p, k)) = self.cooling.pop_front() else {
                break;
            };
            if self.cooled_as[p as usize] == k {
                out.push(p);
            }
        }
        out.sort_unstable();
        out
    }

    /// `p` stays resident: if it was cooling, it is a candidate again. Returns whether it was.
    pub(crate) fn warm(&mut self, p: PageIdx) -> bool {
        if !self.is_cooling(p) {
            return false;
        }
        self.cooled_as[p as usize] = ABSENT;
        self.cool_len -= 1;
        self.insert(p);
        true
    }

    pub(crate) fn insert(&mut self, p: PageIdx) {
        if self.pos[p as usize] == ABSENT && !self.is_cooling(p) {
            self.pos[p as usize] = self.candidates();
            self.list.push(p);
        }
    }

    /// Marks resident page `p` as mirroring a disk block (or not).
    pub(crate) fn set_named(&mut self, p: PageIdx, named: bool) {
        let i = self.named_pos[p as usize];
        match (named && self.pos[p as usize] != ABSENT, i != ABSENT) {
            (true, false) => {
                self.named_pos[p as usize] = u32::try_from(self.named.len()).unwrap_or(ABSENT);
                self.named.push(p);
                self.named_use(p);
            }
            (false, true) => {
                let last = self.named.pop().expect("a named page is listed");
                if last != p {
                    self.named[i as usize] = last;
                    self.named_pos[last as usize] = i;
                }
                self.named_pos[p as usize] = ABSENT;
                if let Some(u) = self.named_used.get_mut(p as usize) {
                    *u = ABSENT;
                }
            }
            _ => {}
        }
    }

    /// Named page `p` was used: it goes to the most recent end of `named_order` (clock only).
    fn named_use(&mut self, p: PageIdx) {
        if self.named_used.is_empty() || self.named_pos[p as usize] == ABSENT {
            return;
        }
        let k = self.named_next;
        self.named_next = k.wrapping_add(1) % ABSENT;
        self.named_used[p as usize] = k;
        self.named_order.push_back((p, k));
        if self.named_order.len() > 2 * self.named.len() + 1024 {
            let used = &self.named_used;
            self.named_order.retain(|&(q, k)| used[q as usize] == k);
        }
    }

    pub(crate) fn remove(&mut self, p: PageIdx) {
        self.set_named(p, false);
        if self.is_cooling(p) {
            self.cooled_as[p as usize] = ABSENT;
            self.cool_len -= 1;
            return;
        }
        let i = self.pos[p as usize];
        if i == ABSENT {
            return;
        }
        let last = self.list.pop().expect("a resident page is listed");
        if last != p {
            self.list[i as usize] = last;
            self.pos[last as usize] = i;
        }
        self.pos[p as usize] = ABSENT;
        self.referenced[p as usize] = false;
    }

    /// Notes a use of `p` the pager saw.
    pub(crate) fn touch(&mut self, p: PageIdx) {
        self.referenced[p as usize] = true;
        self.named_use(p);
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*: fast, and a fixed seed makes runs repeatable.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Chooses up to `n` distinct resident pages to evict, sorted by page index (so runs of
    /// neighbours become contiguous writes and merged syscalls). They stay resident until the
    /// caller records their reclaim.
    pub fn pick(&mut self, n: u32) -> Vec<PageIdx> {
        self.pick_excluding(n, &[])
    }

    /// Adds up to `n` named pages not `taken` to `out`: with [`VictimPolicy::Clock`] least
    /// recently used first (exactly, by the uses the pager sees: they are few enough to keep
    /// in order), otherwise at random.
    fn take_named(
        &mut self,
        n: usize,
        taken: &mut std::collections::HashSet<PageIdx>,
        out: &mut Vec<PageIdx>,
    ) {
        let free = if taken.is_empty() {
            self.named.len()
        } else {
            self.named.iter().filter(|p| !taken.contains(p)).count()
        };
        let mut named_left = free.min(n);
        if self.policy == VictimPolicy::Clock {
            while let Some(&(q, k)) = self.named_order.front() {
                if self.named_used[q as usize] == k {
                    break;
                }
                self.named_order.pop_front();
            }
            for &(q, k) in &self.named_order {
                if named_left == 0 {
                    break;
                }
                if self.named_used[q as usize] == k && taken.insert(q) {
                    out.push(q);
                    named_left -= 1;
                }
            }
            return;
        }
        while named_left > 0 {
            let i = usize::try_from(self.next_random() % self.named.len() as u64).unwrap_or(0);
            let p = self.named[i];
            if taken.insert(p) {
                out.push(p);
                named_left -= 1;
            }
        }
    }

    /// [`Self::pick`] leaving out the pages of `exclude` (already chosen); with the HD2
    /// policies the named pages are not preferred (they come in pattern order, chosen by the
    /// caller) and the rest goes by clock.
    pub fn pick_excluding(&mut self, n: u32, exclude: &[PageIdx]) -> Vec<PageIdx> {
        let mut taken: std::collections::HashSet<PageIdx> = exclude.iter().copied().collect();
        let left = self
            .candidates()
            .saturating_sub(u32::try_from(exclude.len()).unwrap_or(u32::MAX));
        let n = n.min(left) as usize;
        let mut out = Vec::with_capacity(n + self.cluster as usize);
        // Pages that mirror disk blocks go first: they leave without a write and come back
        // from the image (VSwapper: no false page anonymity). They go singly: their neighbours
        // on the image, not in memory, are what a refault reads with them.
        if !self.policy.is_hd2() {
            self.take_named(n, &mut taken, &mut out);
        }
        match self.policy {
            VictimPolicy::Random => {
                while out.len() < n {
                    let i =
                        usize::try_from(self.next_random() % self.list.len() as u64).unwrap_or(0);
                    let p = self.list[i];
                    if !taken.contains(&p) {
                        self.take_cluster(p, false, &mut taken, &mut out);
                    }
                }
            }
            VictimPolicy::Clock | VictimPolicy::Hd2 | VictimPolicy::Hd2Whole => {
                // Two sweeps at most: the first clears reference bits.
                let mut steps = 2 * self.list.len();
                while out.len() < n && steps > 0 {
                    steps -= 1;
                    if self.hand >= self.list.len() {
                        self.hand = 0;
                    }
                    let p = self.list[self.hand];
                    self.hand += 1;
                    if std::mem::take(&mut self.referenced[p as usize]) {
                        continue;
                    }
                    if !taken.contains(&p) {
                        self.take_cluster(p, true, &mut taken, &mut out);
                    }
                }
            }
        }
        out.sort_unstable();
        out
    }

    /// Up to `n` distinct resident pages that mirror disk blocks (not cooling), in the order
    /// chosen: least recently used first with [`VictimPolicy::Clock`], otherwise uniformly at
    /// random.
    pub fn pick_named(&mut self, n: u32) -> Vec<PageIdx> {
        let len = self.named.len();
        let n = (n as usize).min(len);
        if n * 2 <= len || self.policy == VictimPolicy::Clock {
            // Few of them (or by clock): drawn one by one, a repeat drawn again.
            let mut taken = std::collections::HashSet::with_capacity(n);
            let mut out = Vec::with_capacity(n);
            self.take_named(n, &mut taken, &mut out);
            return out;
        }
        // Most of them: the first `n` of a partial shuffle.
        let mut all = self.named.clone();
        for i in 0..n {
            let left = (len - i) as u64;
            let j = i + usize::try_from(self.next_random() % left).unwrap_or(0);
            all.swap(i, j);
        }
        all.truncate(n);
        all
    }

    /// Up to `n` distinct resident pages chosen uniformly at random (for working-set samples:
    /// no clusters, no preference), in no particular order.
    pub fn sample(&mut self, n: u32) -> Vec<PageIdx> {
        let n = n.min(self.candidates()) as usize;
        let mut taken = std::collections::HashSet::with_capacity(n);
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let i = usize::try_from(self.next_random() % self.list.len() as u64).unwrap_or(0);
            if taken.insert(self.list[i]) {
                out.push(self.list[i]);
            }
        }
        out
    }

    /// Adds `p` and the resident pages of its aligned cluster (for clock, only unreferenced ones).
    fn take_cluster(
        &self,
        p: PageIdx,
        unreferenced_only: bool,
        taken: &mut std::collections::HashSet<PageIdx>,
        out: &mut Vec<PageIdx>,
    ) {
        let base = p & !(self.cluster - 1);
        let end = base
            .saturating_add(self.cluster)
            .min(u32::try_from(self.pos.len()).unwrap_or(u32::MAX));
        for q in base..end {
            let eligible = q == p
                || (self.pos[q as usize] != ABSENT
                    && !(unreferenced_only && self.referenced[q as usize]));
            if eligible && taken.insert(q) {
                out.push(q);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_picks_distinct_resident_pages() {
        let mut v = Victims::new(100, VictimPolicy::Random, 1, 1);
        for p in (0..100).step_by(2) {
            v.insert(p);
        }
        v.remove(10);
        let picked = v.pick(30);
        assert_eq!(picked.len(), 30);
        assert!(picked.windows(2).all(|w| w[0] < w[1]));
        assert!(picked.iter().all(|p| p % 2 == 0 && *p != 10));
        assert_eq!(v.pick(1000).len(), 49);
    }

    #[test]
    fn named_picks_are_distinct_named_pages() {
        let mut v = Victims::new(100, VictimPolicy::Random, 9, 1);
        for p in 0..100 {
            v.insert(p);
            v.set_named(p, p % 3 == 0);
        }
        v.cool(&[30]);
        for n in [1, 5, 20, 33, 34, 1000] {
            let mut got = v.pick_named(n);
            assert_eq!(got.len(), (n as usize).min(33), "{n}");
            assert!(got.iter().all(|p| p % 3 == 0 && *p != 30));
            got.sort_unstable();
            got.dedup();
            assert_eq!(got.len(), (n as usize).min(33), "distinct");
        }
    }

    #[test]
    fn clock_takes_the_least_recently_used_named_pages_first() {
        let mut v = Victims::new(16, VictimPolicy::Clock, 1, 1);
        for p in 0..16 {
            v.insert(p);
            v.set_named(p, p % 2 == 0);
        }
        // Pages 0..8 were used lately (a fault, a read landing): the others go first.
        for p in 0..8 {
            v.touch(p);
        }
        assert_eq!(v.pick_named(4), vec![8, 10, 12, 14]);
        assert_eq!(v.pick_named(7), vec![8, 10, 12, 14, 0, 2, 4]);
        // A page that stops mirroring leaves the order; one named again is the most recent.
        v.set_named(8, false);
        v.set_named(8, true);
        assert_eq!(v.pick_named(5), vec![10, 12, 14, 0, 2]);
        assert_eq!(v.pick_named(8).last(), Some(&8));
        // Reclaim's named victims go by the same hand.
        v.touch(6);
        let picked = v.pick(2);
        assert!(picked.iter().all(|p| p % 2 == 0 && *p != 6), "{picked:?}");
    }

    #[test]
    fn clock_spares_referenced_pages_once() {
        let mut v = Victims::new(8, VictimPolicy::Clock, 1, 1);
        for p in 0..8 {
            v.insert(p);
        }
        for p in 0..4 {
            v.touch(p);
        }
        assert_eq!(v.pick(4), vec![4, 5, 6, 7]);
        // Their bits were cleared by the first sweep: now they go.
        assert_eq!(v.pick(4), vec![0, 1, 2, 3]);
    }

    #[test]
    fn cooling_pages_stay_resident_leave_the_candidates_and_go_oldest_first() {
        let mut v = Victims::new(16, VictimPolicy::Random, 5, 1);
        for p in 0..16 {
            v.insert(p);
        }
        v.cool(&[3, 4, 5]);
        v.cool(&[9, 10]);
        assert_eq!(
            (v.len(), v.cooling()),
            (16, 5),
            "cooling pages are resident"
        );
        assert!(v.pick(100).iter().all(|p| !v.is_cooling(*p)));
        assert_eq!(v.pick(100).len(), 11, "only the others are candidates");
        // A write takes 4 back; 5 leaves guest RAM (its reclaim or a balloon).
        assert!(v.warm(4));
        assert!(!v.warm(4), "once");
        v.remove(5);
        assert_eq!((v.len(), v.cooling()), (15, 3));
        // 4 cools again: it is now the youngest, so its old place in the FIFO is stale.
        v.cool(&[4]);
        assert_eq!(v.take_cooled(2), vec![3, 9]);
        assert_eq!(v.take_cooled(10), vec![4, 10]);
        assert_eq!(
            v.cooling(),
            4,
            "taken pages count until they go or are kept"
        );
        for p in [3, 9, 4, 10] {
            assert!(v.warm(p));
        }
        assert_eq!((v.len(), v.cooling()), (15, 0));
        assert_eq!(v.pick(100).len(), 15);
    }

    #[test]
    fn clusters_bring_resident_neighbours() {
        let mut v = Victims::new(64, VictimPolicy::Random, 3, 8);
        for p in (0..64).filter(|p| p % 8 != 5) {
            v.insert(p);
        }
        let picked = v.pick(1);
        assert_eq!(
            picked.len(),
            7,
            "one cluster of eight, less its non-resident page"
        );
        let base = picked[0] & !7;
        assert!(picked.iter().all(|&p| p & !7 == base && p % 8 != 5));
        assert!(picked
            .windows(2)
            .all(|w| w[1] == w[0] + 1 || w[1] == w[0] + 2));
    }
}
