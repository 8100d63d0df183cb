//! HyperDealer2's reference patterns (§4.4–§4.5), detected from guest disk reads, and the victim
//! order built on them. Pure: the page table feeds it page events and the pager's reads and
//! refaults; it answers which mirrored pages to give up first.
//!
//! - **Streams.** The paper tells file streams apart by (task, file descriptor) through
//!   hypercalls; here a stream is a run of blocks of one disk read front to back: a guest disk
//!   read that starts at the block where one of the disk's [`STREAMS_PER_DISK`] open streams
//!   ended continues it (least recently continued streams are forgotten first).
//! - **Sequential.** A stream continued by consecutive reads, [`SEQ_MIN_READS`] of them over
//!   [`SEQ_MIN_BLOCKS`] blocks or more, becomes a sequence: its disk, first and end block, and the
//!   guest pages (frames) that hold its blocks now. Later reads of the stream lengthen it.
//! - **Loop.** A read that lands on blocks of a sequence already detected reads it again, and so
//!   does a refault from the image of a page dropped from it: a sequential sequence becomes a
//!   loop, with the period (in observations: reads and refault runs) between its passes.
//! - A page belongs to one pattern at most: the last that read it (it moves). A page that stops
//!   mirroring its block (written, ballooned, dropped by reclaim) leaves its sequence; the
//!   sequence's blocks are remembered, so its refaults are still recognised. Mirrored pages in no
//!   sequence are *unclassified*, in the order they came to mirror (least recent first).
//! - **Victim order** ([`Patterns::pick`]): sequential sequences, most recently created or
//!   lengthened first, each from its first block; then loops, least recently read first, each
//!   from its first block; then unclassified pages, least recent first. With `whole` (the paper's
//!   WHOLE_SEQ), a sequence once begun is taken whole, up to [`WHOLE_SEQ_MAX`] pages more than
//!   asked.
//! - **Cold sequences** ([`Patterns::pick_cold`]). The paper's guest reports page-cache hits, so
//!   a file read again from the guest's cache is a loop at once. Here those hits never reach the
//!   host: a file the guest keeps re-reading from its own cache stays a sequential sequence after
//!   its one pass from disk, and looks just like an input read once and done with. A probe tells
//!   them apart. A sequence its stream is still reading (a disk read within [`PROBE_WAIT`]) is
//!   *cold* behind its reader: what the stream read, the guest has used. One its stream left
//!   longer ago is probed: its first [`PROBE_PAGES`] pages are released, and if it is still
//!   sequential [`PROBE_WAIT`] later (a guest re-reading it would have touched the probe pages,
//!   and their refault made it a loop), it is cold. A cold-only pick takes cold sequences (most
//!   recent first) and the probes of the others, nothing else.
//!
//! Every page event costs O(log n); the table holds at most [`MAX_SEQUENCES`] sequences (the
//! least recently read go first) and [`STREAMS_PER_DISK`] streams per disk.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use crate::keyed_hash::KeyedMap;
use crate::page::PageIdx;

/// Open streams remembered per disk.
pub const STREAMS_PER_DISK: usize = 16;
/// Consecutive reads of a stream before it is a sequential sequence (the paper: two or more).
pub const SEQ_MIN_READS: u32 = 2;
/// Blocks those reads cover at least (the paper: more than two).
pub const SEQ_MIN_BLOCKS: u32 = 3;
/// Sequences kept at once.
pub const MAX_SEQUENCES: usize = 4096;
/// Pages a whole-sequence pick takes beyond what was asked (the paper's Fig. 13: 64).
pub const WHOLE_SEQ_MAX: usize = 64;
/// Blocks behind where a sequence's pass has reached that a refault may come from and still be
/// of that pass (at most half the sequence): pages the guest read ahead and had not used yet
/// when the host dropped them. A refault further back begins a new pass.
pub const READAHEAD_SLACK: u32 = 64;
/// Pages of a sequential sequence released to probe it (see [`Patterns::pick_cold`]).
pub const PROBE_PAGES: usize = 16;
/// How long after its probe a sequence still sequential is cold (a few passes of a file the
/// guest re-reads from its cache: one pass of 128 MiB takes 0.1–0.3 s here), and how recent a
/// disk read of a sequence must be for it to count as still being read. A loop in its first
/// pass from disk is taken as a stream; its next pass refaults what was taken, and makes it a
/// loop.
pub const PROBE_WAIT: Duration = Duration::from_millis(500);
/// Pages of a stream's reads kept before it becomes a sequence.
const MAX_PENDING: usize = 4096;

/// Not a mirrored page.
const NONE: u32 = u32::MAX;
/// A mirrored page in no sequence.
const UNCLASSIFIED: u32 = u32::MAX - 1;

/// A sequence's category.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Read front to back once.
    Sequential,
    /// Read again.
    Loop,
}

/// One sequence: a run of blocks of one disk read front to back, and the pages holding them.
#[derive(Debug)]
pub struct Sequence {
    pub disk: u8,
    /// First block.
    pub start: u32,
    /// The block after the last.
    pub end: u32,
    pub kind: Kind,
    /// Observations between the starts of its last two passes (`None`: read once).
    pub period: Option<u64>,
    /// When its current pass began.
    pass_start: u64,
    /// Where its current pass is: a re-reference before it begins a new pass.
    cursor: u32,
    /// When it was last created, lengthened or read: its place in its category's order.
    stamp: u64,
    /// Its pages, by block.
    frames: BTreeMap<u32, PageIdx>,
    /// When a guest disk read last created, lengthened or read it.
    read_at: Instant,
    /// When its probe was taken.
    probed: Option<Instant>,
}

impl Sequence {
    /// Pages that hold its blocks now.
    pub fn pages(&self) -> usize {
        self.frames.len()
    }

    /// Whether its stream is still reading it: a guest disk read of it within [`PROBE_WAIT`]
    /// before `now`.
    fn streaming(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.read_at) < PROBE_WAIT
    }
}

/// A stream of reads of one disk not (yet) known to be a sequence, or the one that made one.
#[derive(Debug)]
struct Stream {
    start: u32,
    /// The block a read continuing it starts at.
    next: u32,
    reads: u32,
    /// The sequence it made.
    seq: Option<u32>,
    /// The pages its reads filled before it was a sequence, with the ticks they mirrored under.
    pending: Vec<(PageIdx, u32, u32)>,
    used: u64,
}

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
    seqs: KeyedMap<u32, Sequence>,
    next_id: u32,
    /// Sequences by (disk, first block).
    by_start: BTreeMap<(u8, u32), u32>,
    /// Sequences holding pages, by category, in stamp order.
    sequential: BTreeMap<u64, u32>,
    loops: BTreeMap<u64, u32>,
    /// Every sequence in stamp order (the least recent is dropped first).
    lru: BTreeMap<u64, u32>,
    /// Unclassified pages, least recent first, with the tick each was listed under (an entry
    /// whose tick is not its page's any more is stale).
    unclassified: VecDeque<(PageIdx, u32)>,
    unclassified_live: u64,
    tick: u32,
    streams: KeyedMap<u8, Vec<Stream>>,
    /// Observations so far (reads and refault runs): the clock of stamps and periods.
    now: u64,
    counts: PatternCounts,
    /// Sequences detected and loops detected, not yet taken by [`Self::take_detected`].
    detected: (u64, u64),
    /// Sequences probed, not yet taken by [`Self::take_probes`].
    probes: u64,
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
    /// [`PROBE_WAIT`] of `now`): cache the guest has just read once. A sequence read longer ago
    /// may be one the guest keeps re-reading from its own cache, which the host cannot see.
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

    fn is_listed(&self, p: PageIdx, t: u32) -> bool {
        self.seq[p as usize] == UNCLASSIFIED && self.key[p as usize] == t
    }

    fn pages_of(&mut self, kind: Kind) -> &mut u64 {
        match kind {
            Kind::Sequential => &mut self.counts.sequential_pages,
            Kind::Loop => &mut self.counts.loop_pages,
        }
    }

    fn order(&mut self, kind: Kind) -> &mut BTreeMap<u64, u32> {
        match kind {
            Kind::Sequential => &mut self.sequential,
            Kind::Loop => &mut self.loops,
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
            became_loop = s.kind == Kind::Sequential;
        } else {
            s.cursor = s.cursor.max(end);
        }
        if became_loop {
            let (stamp, pages, held) = (s.stamp, s.frames.len() as u64, !s.frames.is_empty());
            s.kind = Kind::Loop;
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
                kind: Kind::Sequential,
                period: None,
                pass_start: self.now,
                cursor: end,
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
            Kind::Sequential => self.counts.sequential -= 1,
            Kind::Loop => self.counts.loops -= 1,
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

    /// Up to `n` mirrored pages for which `eligible` holds, in the victim order of the module
    /// doc; with `whole`, a sequence once begun is taken whole, up to [`WHOLE_SEQ_MAX`] pages
    /// beyond `n`. In the order chosen.
    pub fn pick(&self, n: usize, whole: bool, eligible: impl Fn(PageIdx) -> bool) -> Vec<PageIdx> {
        let mut out = Vec::with_capacity(n);
        let ids = self.sequential.values().rev().chain(self.loops.values());
        for id in ids {
            if out.len() >= n {
                break;
            }
            take_from(&self.seqs[id], &mut out, n, whole, &eligible);
        }
        for &(p, t) in &self.unclassified {
            if out.len() >= n {
                break;
            }
            if self.is_listed(p, t) && eligible(p) {
                out.push(p);
            }
        }
        out
    }

    /// Up to `n` mirrored pages of cold sequences (see the module doc) for which `eligible`
    /// holds, most recent sequence first, each from its first block (whole, with `whole`, as in
    /// [`Self::pick`]); and the probes, [`PROBE_PAGES`] pages from the start of each sequential
    /// sequence neither still being read nor probed yet, counted in `n`. A sequence whose probe
    /// is out gives nothing until it is cold. Loops and unclassified pages are never taken.
    /// `now` is the time of the pick. Picking again before the probes are released probes
    /// nothing new.
    pub fn pick_cold(
        &mut self,
        n: usize,
        whole: bool,
        now: Instant,
        eligible: impl Fn(PageIdx) -> bool,
    ) -> Vec<PageIdx> {
        let mut out = Vec::with_capacity(n);
        let waited = |since: Instant| now.saturating_duration_since(since) >= PROBE_WAIT;
        for id in self.sequential.values().rev() {
            if out.len() >= n {
                break;
            }
            let Some(s) = self.seqs.get_mut(id) else {
                continue;
            };
            if s.streaming(now) || s.probed.is_some_and(waited) {
                take_from(s, &mut out, n, whole, &eligible);
            } else if s.probed.is_none() {
                s.probed = Some(now);
                self.probes += 1;
                let most = (out.len() + PROBE_PAGES).min(n);
                take_from(s, &mut out, most, false, &eligible);
            }
        }
        out
    }

    /// Sequences probed since the last call.
    pub fn take_probes(&mut self) -> u64 {
        std::mem::take(&mut self.probes)
    }
}

/// Appends `s`'s pages for which `eligible` holds to `out`, from its first block, until `out`
/// holds `n` (with `whole`, the sequence goes on to [`WHOLE_SEQ_MAX`] pages beyond `n`).
fn take_from(
    s: &Sequence,
    out: &mut Vec<PageIdx>,
    n: usize,
    whole: bool,
    eligible: &impl Fn(PageIdx) -> bool,
) {
    let cap = if whole { n + WHOLE_SEQ_MAX } else { n };
    for &p in s.frames.values() {
        if out.len() >= cap {
            break;
        }
        if eligible(p) {
            out.push(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A table over `pages` pages where page `p` holds block `p` of disk 0 when read.
    struct T {
        t: Patterns,
    }

    impl T {
        fn new(pages: u32) -> Self {
            T {
                t: Patterns::new(pages),
            }
        }

        /// A guest read of blocks `b..b + n` into pages `at..at + n`.
        fn read_into(&mut self, at: PageIdx, b: u32, n: u32) {
            self.read_when(at, b, n, Instant::now());
        }

        /// [`Self::read_into`], landed at `when`.
        fn read_when(&mut self, at: PageIdx, b: u32, n: u32, when: Instant) {
            let pages: Vec<(PageIdx, u32)> = (0..n).map(|i| (at + i, b + i)).collect();
            for &(p, _) in &pages {
                self.t.mirrored(p);
            }
            self.t.read(0, b, b + n, &pages, when);
        }

        fn read(&mut self, b: u32, n: u32) {
            self.read_into(b, b, n);
        }

        fn pick(&self, n: usize) -> Vec<PageIdx> {
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
            (0, 8, Kind::Sequential, 8)
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
            (Kind::Loop, Some(6)),
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
        assert_eq!(t.t.seqs[&long].kind, Kind::Sequential);
        t.t.refault(0, 399 - READAHEAD_SLACK, 400 - READAHEAD_SLACK, &[]);
        assert_eq!(t.t.seqs[&long].kind, Kind::Loop, "further back: a new pass");
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
        assert_eq!(t.t.sequence_of(5).unwrap().kind, Kind::Loop);
    }

    #[test]
    fn victims_go_sequential_mru_first_then_loops_lru_then_unclassified() {
        let mut t = T::new(128);
        // Sequences A (0..4), B (10..14), C (20..24), D (30..34), in that order.
        for base in [0, 10, 20, 30] {
            t.read(base, 2);
            t.read(base + 2, 2);
        }
        // A, then C, are read again: loops, C the most recent.
        t.read(0, 4);
        t.read(20, 4);
        // B is lengthened: the most recent sequential one.
        t.read(14, 2);
        // Unclassified pages, 60 before 50.
        t.read(60, 1);
        t.read(50, 1);
        let order = t.pick(128);
        let want: Vec<PageIdx> = [10..16, 30..34, 0..4, 20..24, 60..61, 50..51]
            .into_iter()
            .flatten()
            .collect();
        assert_eq!(order, want);
        // Fewer than a sequence holds: from its start.
        assert_eq!(t.pick(3), vec![10, 11, 12]);
        // Pages that may not be chosen (cooling) are skipped.
        assert_eq!(t.t.pick(3, false, |p| p % 2 == 1), vec![11, 13, 15]);
    }

    #[test]
    fn a_cold_pick_probes_each_stream_left_and_takes_those_not_read_again() {
        let mut t = T::new(256);
        // Streams A (0..40) and B (100..140), B the more recent, both read a while ago.
        for b in (0..40).step_by(4) {
            t.read(b, 4);
        }
        for b in (100..140).step_by(4) {
            t.read(b, 4);
        }
        let t0 = Instant::now() + PROBE_WAIT;
        let all = |_: PageIdx| true;
        // First pick: a probe from the start of each, most recent first, nothing more.
        let v = t.t.pick_cold(100, false, t0, all);
        let probes: Vec<PageIdx> = (100..116).chain(0..16).collect();
        assert_eq!(v, probes);
        assert_eq!(t.t.take_probes(), 2);
        // Picked again (a release's next round, or the next tick): nothing new is probed, and
        // nothing is cold yet.
        assert!(t
            .t
            .pick_cold(100, false, t0 + PROBE_WAIT / 2, all)
            .is_empty());
        assert_eq!(t.t.take_probes(), 0);
        // The probes are released; A's start comes back from the image (the guest reads it
        // again from its cache): a loop, never taken by a cold pick. B stays untouched: cold.
        for p in probes {
            t.t.left(p);
        }
        let back: Vec<(PageIdx, u32)> = (0..4).map(|b| (b, b)).collect();
        for &(p, _) in &back {
            t.t.mirrored(p);
        }
        t.t.refault(0, 0, 4, &back);
        assert_eq!(t.t.sequence_of(20).unwrap().kind, Kind::Loop);
        let later = t0 + PROBE_WAIT;
        assert_eq!(
            t.t.pick_cold(100, false, later, all),
            (116..140).collect::<Vec<_>>()
        );
        // Fewer asked than a probe holds: the probe is cut to what was asked.
        let mut u = T::new(64);
        u.read(0, 20);
        u.read(20, 20);
        let v = u.t.pick_cold(5, false, Instant::now() + PROBE_WAIT, all);
        assert_eq!(v, (0..5).collect::<Vec<_>>());
        assert_eq!(u.t.take_probes(), 1);
    }

    #[test]
    fn a_stream_still_being_read_is_taken_behind_its_reader_without_a_probe() {
        let mut t = T::new(256);
        let t0 = Instant::now();
        t.read_when(0, 0, 20, t0);
        t.read_when(20, 20, 20, t0);
        let all = |_: PageIdx| true;
        // Read within the wait: taken from its start, no probe.
        let v = t.t.pick_cold(10, false, t0 + PROBE_WAIT / 2, all);
        assert_eq!(v, (0..10).collect::<Vec<_>>());
        assert_eq!(t.t.take_probes(), 0);
        // Its stream stopped: probed once the wait has passed since its last read...
        let v = t.t.pick_cold(100, false, t0 + PROBE_WAIT, all);
        assert_eq!(v, (0..16).collect::<Vec<_>>());
        assert_eq!(t.t.take_probes(), 1);
        for p in 0..16 {
            t.t.left(p);
        }
        // ... but a read that lengthens it makes it a stream being read again.
        let t1 = t0 + PROBE_WAIT + PROBE_WAIT / 4;
        t.read_when(40, 40, 20, t1);
        let v = t.t.pick_cold(100, false, t1 + PROBE_WAIT / 4, all);
        assert_eq!(v, (16..60).collect::<Vec<_>>());
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
    fn a_whole_sequence_pick_takes_the_sequence_up_to_the_cap() {
        let mut t = T::new(1024);
        t.read(0, 100);
        t.read(100, 100);
        t.read(500, 10);
        t.read(510, 10);
        // The most recent (500..520) first, whole; the next begun and taken to the cap.
        let v = t.t.pick(1, true, |_| true);
        assert_eq!(v, (500..520).collect::<Vec<_>>());
        let v = t.t.pick(30, true, |_| true);
        assert_eq!(v.len(), 30 + WHOLE_SEQ_MAX);
        assert_eq!(&v[..20], &(500..520).collect::<Vec<_>>()[..]);
        assert_eq!(&v[20..], &(0..74).collect::<Vec<_>>()[..]);
        // Without whole: what was asked.
        assert_eq!(t.t.pick(30, false, |_| true).len(), 30);
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
                Kind::Sequential => (&mut c.sequential, &mut c.sequential_pages),
                Kind::Loop => (&mut c.loops, &mut c.loop_pages),
            };
            *n += 1;
            *pages += s.frames.len() as u64;
            for (&b, &p) in &s.frames {
                assert_eq!((t.seq[p as usize], t.key[p as usize]), (id, b));
            }
            let order = match s.kind {
                Kind::Sequential => &t.sequential,
                Kind::Loop => &t.loops,
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
                            prop_assert_eq!(kind, Some(Kind::Sequential), "page {} taken", p);
                        }
                    }
                }
                check(&t);
            }
        }
    }
}
