//! The reference-pattern table: which pattern each mirrored page belongs to, the orders of the
//! sequences, and the sequences detected from the guest's disk reads and image refaults.

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use super::sequence::{Sequence, SequenceKind, Stream};
use super::{
    MAX_PENDING, MAX_SEQUENCES, READAHEAD_SLACK, SEQ_MIN_BLOCKS, SEQ_MIN_READS, STREAMS_PER_DISK,
};
use crate::keyed_hash::KeyedMap;
use crate::page::PageIdx;

/// Not a mirrored page.
const NONE: u32 = u32::MAX;
/// A mirrored page in no sequence.
const UNCLASSIFIED: u32 = u32::MAX - 1;

/// The gauges of [`Patterns`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PatternCounts {
    pub sequential: u64,
    pub sequential_pages: u64,
    pub loops: u64,
    pub loop_pages: u64,
    pub unclassified_pages: u64,
}

/// The reference-pattern table (see the module doc).
#[derive(Debug)]
pub struct Patterns {
    /// Per page: its sequence's id, [`UNCLASSIFIED`] or [`NONE`].
    seq: Vec<u32>,
    /// Per page: its block when in a sequence, its tick when unclassified.
    key: Vec<u32>,
    pub(super) seqs: KeyedMap<u32, Sequence>,
    next_id: u32,
    /// Sequences by (disk, first block).
    by_start: BTreeMap<(u8, u32), u32>,
    /// Sequences holding pages, by category, in stamp order.
    pub(super) sequential: BTreeMap<u64, u32>,
    pub(super) loops: BTreeMap<u64, u32>,
    /// Every sequence in stamp order (the least recent is dropped first).
    lru: BTreeMap<u64, u32>,
    /// Unclassified pages, least recent first, with the tick each was listed under (an entry
    /// whose tick is not its page's any more is stale).
    pub(super) unclassified: VecDeque<(PageIdx, u32)>,
    unclassified_live: u64,
    tick: u32,
    streams: KeyedMap<u8, Vec<Stream>>,
    /// Observations so far (reads and refault runs): the clock of stamps and periods.
    now: u64,
    counts: PatternCounts,
    /// Sequences detected and loops detected, not yet taken by [`Self::take_detected`].
    detected: (u64, u64),
    /// Sequences probed, not yet taken by [`Self::take_probes`].
    pub(super) probes: u64,
}

impl Patterns {
    pub fn new(pages: u32) -> Self {
        Patterns {
            seq: vec![NONE; pages as usize],
            key: vec![0; pages as usize],
            seqs: KeyedMap::default(),
            next_id: 0,
            by_start: BTreeMap::new(),
            sequential: BTreeMap::new(),
            loops: BTreeMap::new(),
            lru: BTreeMap::new(),
            unclassified: VecDeque::new(),
            unclassified_live: 0,
            tick: 0,
            streams: KeyedMap::default(),
            now: 0,
            counts: PatternCounts::default(),
            detected: (0, 0),
            probes: 0,
        }
    }

    /// The gauges.
    pub fn counts(&self) -> PatternCounts {
        PatternCounts {
            unclassified_pages: self.unclassified_live,
            ..self.counts
        }
    }

    /// Pages of the sequential sequences their streams are still reading (a disk read within
    /// [`PROBE_WAIT`](super::PROBE_WAIT) of `now`): cache the guest has just read once. A
    /// sequence read longer ago may be one the guest keeps re-reading from its own cache, which
    /// the host cannot see.
    pub fn streaming_pages(&self, now: Instant) -> u64 {
        self.sequential
            .values()
            .filter_map(|id| self.seqs.get(id))
            .filter(|s| s.streaming(now))
            .map(|s| s.frames.len() as u64)
            .sum()
    }

    /// Sequences and loops detected since the last call.
    pub fn take_detected(&mut self) -> (u64, u64) {
        std::mem::take(&mut self.detected)
    }

    /// The sequence page `p` belongs to, if any.
    pub fn sequence_of(&self, p: PageIdx) -> Option<&Sequence> {
        self.seqs.get(self.seq.get(p as usize)?)
    }

    /// Whether `p` is a mirrored page in no sequence.
    pub fn is_unclassified(&self, p: PageIdx) -> bool {
        self.seq.get(p as usize) == Some(&UNCLASSIFIED)
    }

    /// The sequences, in no particular order.
    pub fn sequences(&self) -> impl Iterator<Item = &Sequence> {
        self.seqs.values()
    }

    /// Page `p` came to mirror a disk block (again): unclassified until a read places it.
    pub fn mirrored(&mut self, p: PageIdx) {
        self.left(p);
        self.tick = self.tick.wrapping_add(1);
        self.seq[p as usize] = UNCLASSIFIED;
        self.key[p as usize] = self.tick;
        self.unclassified.push_back((p, self.tick));
        self.unclassified_live += 1;
    }

    /// Page `p` does not mirror a block any more (written, dropped, released).
    pub fn left(&mut self, p: PageIdx) {
        self.detach(p);
        self.seq[p as usize] = NONE;
        self.trim();
    }

    /// Takes `p` out of its sequence or the unclassified list; its `seq` is stale after.
    fn detach(&mut self, p: PageIdx) {
        match self.seq[p as usize] {
            NONE => {}
            UNCLASSIFIED => self.unclassified_live -= 1,
            id => {
                let block = self.key[p as usize];
                if let Some(s) = self.seqs.get_mut(&id) {
                    if s.frames.get(&block) == Some(&p) {
                        s.frames.remove(&block);
                        let (kind, stamp, empty) = (s.kind, s.stamp, s.frames.is_empty());
                        *self.pages_of(kind) -= 1;
                        if empty {
                            self.order(kind).remove(&stamp);
                        }
                    }
                }
            }
        }
    }

    /// Drops stale entries of the unclassified list: at its front, and all of them once they
    /// outnumber the live ones.
    fn trim(&mut self) {
        while let Some(&(p, t)) = self.unclassified.front() {
            if self.is_listed(p, t) {
                break;
            }
            self.unclassified.pop_front();
        }
        if self.unclassified.len() as u64 > 2 * self.unclassified_live + 64 {
            let mut list = std::mem::take(&mut self.unclassified);
            list.retain(|&(p, t)| self.is_listed(p, t));
            self.unclassified = list;
        }
    }

    pub(super) fn is_listed(&self, p: PageIdx, t: u32) -> bool {
        self.seq[p as usize] == UNCLASSIFIED && self.key[p as usize] == t
    }

    fn pages_of(&mut self, kind: SequenceKind) -> &mut u64 {
        match kind {
            SequenceKind::Sequential => &mut self.counts.sequential_pages,
            SequenceKind::Loop => &mut self.counts.loop_pages,
        }
    }

    fn order(&mut self, kind: SequenceKind) -> &mut BTreeMap<u64, u32> {
        match kind {
            SequenceKind::Sequential => &mut self.sequential,
            SequenceKind::Loop => &mut self.loops,
        }
    }

    /// Mirrored page `p`, holding `block`, joins sequence `id` (leaving any other pattern).
    fn join(&mut self, p: PageIdx, id: u32, block: u32) {
        if self.seq.get(p as usize).is_none_or(|&s| s == NONE) {
            return;
        }
        self.detach(p);
        self.seq[p as usize] = NONE;
        let Some(s) = self.seqs.get_mut(&id) else {
            return;
        };
        let was_empty = s.frames.is_empty();
        let (kind, stamp) = (s.kind, s.stamp);
        let other = s.frames.insert(block, p);
        self.seq[p as usize] = id;
        self.key[p as usize] = block;
        *self.pages_of(kind) += 1;
        if was_empty {
            self.order(kind).insert(stamp, id);
        }
        // Two pages holding one block: the earlier is unclassified now.
        if let Some(q) = other.filter(|&q| q != p) {
            *self.pages_of(kind) -= 1;
            self.seq[q as usize] = NONE;
            self.mirrored(q);
        }
        self.trim();
    }

    /// Moves sequence `id` to now in its category's order and in the table's.
    fn touch(&mut self, id: u32) {
        let now = self.now;
        let Some(s) = self.seqs.get_mut(&id) else {
            return;
        };
        let (old, kind, held) = (s.stamp, s.kind, !s.frames.is_empty());
        s.stamp = now;
        self.lru.remove(&old);
        self.lru.insert(now, id);
        if held {
            let order = self.order(kind);
            order.remove(&old);
            order.insert(now, id);
        }
    }

    /// The sequence of `disk` that holds blocks of `start..end`, if any.
    fn overlapping(&self, disk: u8, start: u32, end: u32) -> Option<u32> {
        let (_, &id) = self.by_start.range((disk, 0)..(disk, end)).next_back()?;
        (self.seqs[&id].end > start).then_some(id)
    }

    /// Sequence `id` is referenced again at `start..end` (by a refault if `refault`): a
    /// reference before where its current pass is (for a refault, more than the read-ahead
    /// slack before) begins a new pass, and a sequential sequence becomes a loop.
    fn reread(&mut self, id: u32, start: u32, end: u32, refault: bool) {
        let now = self.now;
        let Some(s) = self.seqs.get_mut(&id) else {
            return;
        };
        let slack = if refault {
            READAHEAD_SLACK.min((s.end - s.start) / 2)
        } else {
            0
        };
        let mut became_loop = false;
        if start < s.cursor.saturating_sub(slack) {
            s.period = Some(now - s.pass_start);
            s.pass_start = now;
            s.cursor = end;
            became_loop = s.kind == SequenceKind::Sequential;
        } else {
            s.cursor = s.cursor.max(end);
        }
        s.reader = start;
        if became_loop {
            let (stamp, pages, held) = (s.stamp, s.frames.len() as u64, !s.frames.is_empty());
            s.kind = SequenceKind::Loop;
            self.counts.sequential -= 1;
            self.counts.loops += 1;
            self.counts.sequential_pages -= pages;
            self.counts.loop_pages += pages;
            if held {
                self.sequential.remove(&stamp);
                self.loops.insert(stamp, id);
            }
            self.detected.1 += 1;
        }
        self.touch(id);
    }

    /// One guest disk read of blocks `start..end` of `disk`, which filled `pages` (each with
    /// its block; pages that mirror their block now, the others left out), landed at `at`.
    pub fn read(&mut self, disk: u8, start: u32, end: u32, pages: &[(PageIdx, u32)], at: Instant) {
        if start >= end {
            return;
        }
        self.now += 1;
        let now = self.now;
        // Blocks of a sequence read again.
        if let Some(id) = self.overlapping(disk, start, end) {
            self.reread(id, start, end, false);
            let first = match self.seqs.get_mut(&id) {
                Some(s) => {
                    s.end = s.end.max(end);
                    s.read_at = at;
                    s.start
                }
                None => return,
            };
            for &(p, b) in pages {
                if b >= first {
                    self.join(p, id, b);
                }
            }
            let st = self.stream_at(disk, start);
            st.next = end;
            st.reads += 1;
            st.seq = Some(id);
            st.pending.clear();
            st.used = now;
            return;
        }
        let tick = &self.key;
        let seq = &self.seq;
        let listed: Vec<(PageIdx, u32, u32)> = pages
            .iter()
            .filter(|&&(p, _)| seq.get(p as usize) == Some(&UNCLASSIFIED))
            .map(|&(p, b)| (p, b, tick[p as usize]))
            .collect();
        let streams = self.streams.entry(disk).or_default();
        let Some(i) = streams.iter().position(|s| s.next == start) else {
            // A new stream, in place of the least recently continued one.
            if streams.len() >= STREAMS_PER_DISK {
                if let Some(j) = (0..streams.len()).min_by_key(|&j| streams[j].used) {
                    streams.swap_remove(j);
                }
            }
            let mut pending = listed;
            pending.truncate(MAX_PENDING);
            streams.push(Stream {
                start,
                next: end,
                reads: 1,
                seq: None,
                pending,
                used: now,
            });
            return;
        };
        let st = &mut streams[i];
        st.next = end;
        st.reads += 1;
        st.used = now;
        let (first, made) = (st.start, st.seq);
        match made.filter(|id| self.seqs.contains_key(id)) {
            Some(id) => {
                // The sequence is lengthened.
                if let Some(s) = self.seqs.get_mut(&id) {
                    s.end = s.end.max(end);
                    s.cursor = s.cursor.max(end);
                    s.reader = start;
                    s.read_at = at;
                }
                for &(p, b) in pages {
                    self.join(p, id, b);
                }
                self.touch(id);
            }
            None => {
                let room = MAX_PENDING.saturating_sub(st.pending.len());
                st.pending.extend(listed.into_iter().take(room));
                if st.reads < SEQ_MIN_READS || end - first < SEQ_MIN_BLOCKS {
                    st.seq = None;
                    return;
                }
                let pending = std::mem::take(&mut st.pending);
                let id = self.create(disk, first, end, at);
                if let Some(st) = self
                    .streams
                    .get_mut(&disk)
                    .and_then(|v| v.iter_mut().find(|s| s.next == end && s.start == first))
                {
                    st.seq = Some(id);
                }
                for (p, b, t) in pending {
                    if self.is_listed(p, t) {
                        self.join(p, id, b);
                    }
                }
            }
        }
    }

    /// The stream of `disk` continued by a read at `start`, or a new one there.
    fn stream_at(&mut self, disk: u8, start: u32) -> &mut Stream {
        let streams = self.streams.entry(disk).or_default();
        let i = match streams.iter().position(|s| s.next == start) {
            Some(i) => i,
            None => {
                if streams.len() >= STREAMS_PER_DISK {
                    if let Some(j) = (0..streams.len()).min_by_key(|&j| streams[j].used) {
                        streams.swap_remove(j);
                    }
                }
                streams.push(Stream {
                    start,
                    next: start,
                    reads: 0,
                    seq: None,
                    pending: Vec::new(),
                    used: 0,
                });
                streams.len() - 1
            }
        };
        &mut streams[i]
    }

    /// A new sequential sequence of blocks `start..end` of `disk`; the least recently read
    /// sequence goes if the table is full.
    fn create(&mut self, disk: u8, start: u32, end: u32, at: Instant) -> u32 {
        if let Some(old) = self.by_start.get(&(disk, start)).copied() {
            self.drop_sequence(old);
        }
        while self.seqs.len() >= MAX_SEQUENCES {
            let Some((_, &old)) = self.lru.iter().next() else {
                break;
            };
            self.drop_sequence(old);
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1) % UNCLASSIFIED;
        self.seqs.insert(
            id,
            Sequence {
                disk,
                start,
                end,
                kind: SequenceKind::Sequential,
                period: None,
                pass_start: self.now,
                cursor: end,
                reader: end,
                stamp: self.now,
                frames: BTreeMap::new(),
                read_at: at,
                probed: None,
            },
        );
        self.by_start.insert((disk, start), id);
        self.lru.insert(self.now, id);
        self.counts.sequential += 1;
        self.detected.0 += 1;
        id
    }

    /// Forgets sequence `id`: its pages are unclassified.
    fn drop_sequence(&mut self, id: u32) {
        let Some(s) = self.seqs.remove(&id) else {
            return;
        };
        self.by_start.remove(&(s.disk, s.start));
        self.lru.remove(&s.stamp);
        self.order(s.kind).remove(&s.stamp);
        match s.kind {
            SequenceKind::Sequential => self.counts.sequential -= 1,
            SequenceKind::Loop => self.counts.loops -= 1,
        }
        *self.pages_of(s.kind) -= s.frames.len() as u64;
        for (_, p) in s.frames {
            self.seq[p as usize] = NONE;
            self.mirrored(p);
        }
    }

    /// Pages dropped while mirroring blocks `start..end` of `disk` came back from the image in
    /// one run, and `pages` (each with its block) mirror them again: if a sequence holds those
    /// blocks, it is referenced again and they rejoin it.
    pub fn refault(&mut self, disk: u8, start: u32, end: u32, pages: &[(PageIdx, u32)]) {
        if start >= end {
            return;
        }
        self.now += 1;
        let Some(id) = self.overlapping(disk, start, end) else {
            return;
        };
        self.reread(id, start, end, true);
        let (lo, hi) = (self.seqs[&id].start, self.seqs[&id].end);
        for &(p, b) in pages {
            if (lo..hi).contains(&b) {
                self.join(p, id, b);
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::pattern::PROBE_WAIT;
    use proptest::prelude::*;
    use std::time::Duration;

    /// A table over `pages` pages where page `p` holds block `p` of disk 0 when read.
    pub(crate) struct T {
        pub t: Patterns,
    }

    impl T {
        pub fn new(pages: u32) -> Self {
            T {
                t: Patterns::new(pages),
            }
        }

        /// A guest read of blocks `b..b + n` into pages `at..at + n`.
        pub fn read_into(&mut self, at: PageIdx, b: u32, n: u32) {
            self.read_when(at, b, n, Instant::now());
        }

        /// [`Self::read_into`], landed at `when`.
        pub fn read_when(&mut self, at: PageIdx, b: u32, n: u32, when: Instant) {
            let pages: Vec<(PageIdx, u32)> = (0..n).map(|i| (at + i, b + i)).collect();
            for &(p, _) in &pages {
                self.t.mirrored(p);
            }
            self.t.read(0, b, b + n, &pages, when);
        }

        pub fn read(&mut self, b: u32, n: u32) {
            self.read_into(b, b, n);
        }

        pub fn pick(&self, n: usize) -> Vec<PageIdx> {
            self.t.pick(n, false, |_| true)
        }
    }

    #[test]
    fn consecutive_reads_make_a_sequential_sequence() {
        let mut t = T::new(64);
        t.read(0, 2);
        assert_eq!(t.t.counts().sequential, 0, "one read is no stream yet");
        assert_eq!(t.t.counts().unclassified_pages, 2);
        t.read(2, 2);
        let c = t.t.counts();
        assert_eq!((c.sequential, c.sequential_pages), (1, 4));
        assert_eq!(c.unclassified_pages, 0);
        assert_eq!(t.t.take_detected(), (1, 0));
        t.read(4, 4);
        let s = t.t.sequence_of(7).unwrap();
        assert_eq!(
            (s.start, s.end, s.kind, s.pages()),
            (0, 8, SequenceKind::Sequential, 8)
        );
        assert_eq!(s.period, None);
        assert_eq!(t.t.take_detected(), (0, 0), "lengthened, not a new one");
        // Two one-block reads cover two blocks only: no sequence.
        t.read(20, 1);
        t.read(21, 1);
        assert!(t.t.sequence_of(21).is_none());
        t.read(22, 1);
        assert_eq!(t.t.sequence_of(20).unwrap().pages(), 3, "three blocks: one");
        // Scattered reads are not streams.
        for b in [40, 50, 45, 60] {
            t.read(b, 2);
        }
        assert_eq!(t.t.counts().sequential, 2);
        assert_eq!(t.t.counts().unclassified_pages, 8);
    }

    #[test]
    fn reading_a_sequence_again_makes_it_a_loop_with_its_period() {
        let mut t = T::new(64);
        for b in (0..8).step_by(2) {
            t.read(b, 2);
        }
        // Other reads between the passes.
        for b in [30, 40, 50] {
            t.read(b, 1);
        }
        // The second pass reads the same blocks into other pages.
        t.read_into(16, 0, 4);
        let s = t.t.sequence_of(16).unwrap();
        assert_eq!(
            (s.kind, s.period),
            (SequenceKind::Loop, Some(6)),
            "created at read 2, read again at 8"
        );
        assert_eq!(t.t.take_detected(), (1, 1));
        t.read_into(20, 4, 4);
        let c = t.t.counts();
        assert_eq!((c.sequential, c.loops), (0, 1));
        // Pages 0..8 held its blocks before: unclassified now.
        assert!(
            t.t.sequence_of(3).is_none(),
            "block 3 is held by page 19 now"
        );
        assert!(t.t.is_unclassified(3));
        assert_eq!(c.loop_pages, 8);
        // A third pass: the period is measured again, still one loop.
        t.read_into(16, 0, 8);
        assert_eq!(t.t.sequence_of(16).unwrap().period, Some(2));
        assert_eq!(t.t.take_detected(), (0, 0));
    }

    #[test]
    fn a_refault_into_a_sequence_makes_it_a_loop() {
        let mut t = T::new(64);
        for b in (0..8).step_by(4) {
            t.read(b, 4);
        }
        // Reclaim drops pages 0..4, the guest touches them again: they refault from the image.
        for p in 0..4 {
            t.t.left(p);
        }
        assert_eq!(t.t.counts().sequential_pages, 4);
        for p in 0..4 {
            t.t.mirrored(p);
        }
        t.t.refault(0, 0, 4, &[(0, 0), (1, 1), (2, 2), (3, 3)]);
        let c = t.t.counts();
        assert_eq!((c.loops, c.loop_pages, c.unclassified_pages), (1, 8, 0));
        // A refault just behind where a pass is comes from pages read ahead and not used yet:
        // the same pass.
        for b in (100..400).step_by(100) {
            t.t.read(0, b, b + 100, &[], Instant::now());
        }
        let long = t.t.overlapping(0, 100, 101).unwrap();
        assert_eq!(t.t.seqs[&long].end, 400);
        t.t.refault(0, 400 - READAHEAD_SLACK, 400 - READAHEAD_SLACK + 8, &[]);
        assert_eq!(t.t.seqs[&long].kind, SequenceKind::Sequential);
        t.t.refault(0, 399 - READAHEAD_SLACK, 400 - READAHEAD_SLACK, &[]);
        assert_eq!(
            t.t.seqs[&long].kind,
            SequenceKind::Loop,
            "further back: a new pass"
        );
        // A refault outside every sequence leaves the pages unclassified.
        t.t.mirrored(40);
        t.t.refault(0, 40, 41, &[(40, 40)]);
        assert!(t.t.is_unclassified(40));
    }

    #[test]
    fn a_page_in_two_patterns_belongs_to_the_last() {
        let mut t = T::new(64);
        // Stream A reads blocks 0..6 into pages 0..6.
        t.read(0, 3);
        t.read(3, 3);
        // Stream B reads blocks 100..106 into pages 3..9 (the guest reused pages 3..6).
        t.read_into(3, 100, 3);
        t.read_into(6, 103, 3);
        let a = t.t.sequence_of(0).unwrap();
        assert_eq!((a.start, a.pages()), (0, 3));
        let b = t.t.sequence_of(3).unwrap();
        assert_eq!((b.start, b.end, b.pages()), (100, 106, 6));
        assert_eq!(t.t.counts().sequential_pages, 9);
    }

    #[test]
    fn a_page_that_stops_mirroring_leaves_its_sequence() {
        let mut t = T::new(16);
        t.read(0, 4);
        t.read(4, 4);
        t.t.left(5); // the guest wrote it
        assert!(t.t.sequence_of(5).is_none());
        assert!(!t.t.is_unclassified(5));
        assert_eq!(t.t.counts().sequential_pages, 7);
        assert!(!t.pick(16).contains(&5));
        // The sequence keeps its blocks: a page reading block 5 again rejoins (as a loop).
        t.read(5, 1);
        assert_eq!(t.t.sequence_of(5).unwrap().kind, SequenceKind::Loop);
    }

    #[test]
    fn only_sequences_still_being_read_count_as_streaming() {
        let mut t = T::new(256);
        let t0 = Instant::now();
        // Two streams: one read at t0, one lengthened half a wait later.
        t.read_when(0, 0, 20, t0);
        t.read_when(20, 20, 20, t0);
        t.read_when(100, 100, 10, t0);
        t.read_when(110, 110, 10, t0 + PROBE_WAIT / 2);
        assert_eq!(t.t.counts().sequential_pages, 60);
        assert_eq!(t.t.streaming_pages(t0), 60);
        assert_eq!(t.t.streaming_pages(t0 + PROBE_WAIT), 20);
        assert_eq!(t.t.streaming_pages(t0 + PROBE_WAIT * 2), 0);
        // Still sequential (nothing read it again from disk), no longer streaming.
        assert_eq!(t.t.counts().sequential_pages, 60);
        // A loop is not a stream, however recently it was read.
        let t1 = t0 + PROBE_WAIT * 2;
        t.read_when(0, 0, 20, t1);
        assert_eq!(t.t.counts().loop_pages, 40);
        assert_eq!(t.t.streaming_pages(t1), 0);
    }

    #[test]
    fn the_table_keeps_at_most_max_sequences() {
        let mut t = T::new(8);
        for i in 0..(u32::try_from(MAX_SEQUENCES).unwrap() + 10) {
            let b = i * 10;
            t.t.read(0, b, b + 2, &[], Instant::now());
            t.t.read(0, b + 2, b + 4, &[], Instant::now());
        }
        assert_eq!(t.t.seqs.len(), MAX_SEQUENCES);
        assert_eq!(t.t.by_start.len(), MAX_SEQUENCES);
        assert_eq!(t.t.lru.len(), MAX_SEQUENCES);
        assert_eq!(t.t.counts().sequential, MAX_SEQUENCES as u64);
        // The oldest went.
        assert!(t.t.overlapping(0, 0, 4).is_none());
        assert!(t.t.streams[&0u8].len() <= STREAMS_PER_DISK);
    }

    /// The gauges and orders, recomputed from the sequences and pages.
    fn check(t: &Patterns) {
        let mut c = PatternCounts::default();
        for (&id, s) in &t.seqs {
            let (n, pages) = match s.kind {
                SequenceKind::Sequential => (&mut c.sequential, &mut c.sequential_pages),
                SequenceKind::Loop => (&mut c.loops, &mut c.loop_pages),
            };
            *n += 1;
            *pages += s.frames.len() as u64;
            for (&b, &p) in &s.frames {
                assert_eq!((t.seq[p as usize], t.key[p as usize]), (id, b));
            }
            let order = match s.kind {
                SequenceKind::Sequential => &t.sequential,
                SequenceKind::Loop => &t.loops,
            };
            assert_eq!(order.get(&s.stamp) == Some(&id), !s.frames.is_empty());
            assert_eq!(t.lru.get(&s.stamp), Some(&id));
            assert_eq!(t.by_start.get(&(s.disk, s.start)), Some(&id));
        }
        assert_eq!(t.sequential.len() + t.loops.len(), {
            t.seqs.values().filter(|s| !s.frames.is_empty()).count()
        });
        c.unclassified_pages = t.seq.iter().filter(|&&s| s == UNCLASSIFIED).count() as u64;
        assert_eq!(t.counts(), c);
        for (p, &s) in t.seq.iter().enumerate() {
            if s != NONE && s != UNCLASSIFIED {
                assert_eq!(
                    t.seqs[&s].frames.get(&t.key[p]),
                    Some(&u32::try_from(p).unwrap())
                );
            }
        }
        // Every mirrored page is a candidate exactly once.
        let all = t.pick(t.seq.len(), false, |_| true);
        let mut sorted = all.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), all.len(), "no page twice");
        let mirrored = t.seq.iter().filter(|&&s| s != NONE).count();
        assert_eq!(all.len(), mirrored);
    }

    #[derive(Clone, Debug)]
    enum Op {
        /// A read of `n` blocks from block `b` into pages from `p`.
        Read(u32, u32, u32),
        Left(u32),
        Refault(u32, u32),
        /// A cold pick of up to `n` pages, this many milliseconds after the start.
        Cold(usize, u64),
    }

    const PAGES: u32 = 40;

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..PAGES, 0u32..48, 1u32..6).prop_map(|(p, b, n)| Op::Read(p, b, n)),
            2 => (0..PAGES).prop_map(Op::Left),
            1 => (0..PAGES, 0u32..48).prop_map(|(p, b)| Op::Refault(p, b)),
            1 => (1usize..30, 0u64..2000).prop_map(|(n, ms)| Op::Cold(n, ms)),
        ]
    }

    proptest! {
        #[test]
        fn the_table_stays_consistent(ops in proptest::collection::vec(op(), 1..300)) {
            let mut t = Patterns::new(PAGES);
            let t0 = Instant::now();
            for op in ops {
                match op {
                    Op::Read(p, b, n) => {
                        let n = n.min(PAGES - p);
                        let pages: Vec<(PageIdx, u32)> = (0..n).map(|i| (p + i, b + i)).collect();
                        for &(q, _) in &pages {
                            t.mirrored(q);
                        }
                        t.read(1, b, b + n, &pages, t0);
                    }
                    Op::Left(p) => t.left(p),
                    Op::Refault(p, b) => {
                        t.mirrored(p);
                        t.refault(1, b, b + 1, &[(p, b)]);
                    }
                    Op::Cold(n, ms) => {
                        let v = t.pick_cold(n, false, t0 + Duration::from_millis(ms), |_| true);
                        prop_assert!(v.len() <= n);
                        let mut sorted = v.clone();
                        sorted.sort_unstable();
                        sorted.dedup();
                        prop_assert_eq!(sorted.len(), v.len(), "no page twice");
                        for p in v {
                            let kind = t.sequence_of(p).map(|s| s.kind);
                            prop_assert_eq!(
                                kind,
                                Some(SequenceKind::Sequential),
                                "page {} taken",
                                p
                            );
                        }
                    }
                }
                check(&t);
            }
        }
    }
}
