//! The victim order of the mirrored pages: the picks of the reference-pattern table.

use std::time::Instant;

use super::table::Patterns;
use super::{PROBE_PAGES, PROBE_WAIT, WHOLE_SEQ_MAX};
use crate::page::PageIdx;

impl Patterns {
    /// Up to `n` mirrored pages for which `eligible` holds, in the victim order of the module
    /// doc; with `whole`, a sequence once begun is taken whole, up to [`WHOLE_SEQ_MAX`] pages
    /// beyond `n`. In the order chosen.
    pub fn pick(&self, n: usize, whole: bool, eligible: impl Fn(PageIdx) -> bool) -> Vec<PageIdx> {
        let mut out = Vec::with_capacity(n);
        for id in self.sequential.values().rev() {
            if out.len() >= n {
                break;
            }
            take_from(self.seqs[id].frames.values(), &mut out, n, whole, &eligible);
        }
        for id in self.loops.values() {
            if out.len() >= n {
                break;
            }
            let s = &self.seqs[id];
            // Its last blocks first, down to what its pass has brought in ahead of the reader;
            // then behind the reader, the block read last (needed again a whole pass later)
            // first; the blocks brought in ahead of it, needed first, last.
            // The cursor is never behind the reader (both move with each read or refault, the
            // cursor to its end); `max` keeps the ranges well formed all the same.
            let (reader, cursor) = (s.reader, s.cursor.max(s.reader));
            let beyond = s.frames.range(cursor..).rev();
            let behind = s.frames.range(..reader).rev();
            let ahead = s.frames.range(reader..cursor).rev();
            let order = beyond.chain(behind).chain(ahead).map(|(_, p)| p);
            take_from(order, &mut out, n, whole, &eligible);
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
                take_from(s.frames.values(), &mut out, n, whole, &eligible);
            } else if s.probed.is_none() {
                s.probed = Some(now);
                self.probes += 1;
                let most = (out.len() + PROBE_PAGES).min(n);
                take_from(s.frames.values(), &mut out, most, false, &eligible);
            }
        }
        out
    }

    /// Sequences probed since the last call.
    pub fn take_probes(&mut self) -> u64 {
        std::mem::take(&mut self.probes)
    }
}

/// Appends the pages of `frames` (a sequence's, in the order to take them) for which `eligible`
/// holds to `out`, until `out` holds `n` (with `whole`, the sequence goes on to
/// [`WHOLE_SEQ_MAX`] pages beyond `n`).
fn take_from<'a>(
    frames: impl Iterator<Item = &'a PageIdx>,
    out: &mut Vec<PageIdx>,
    n: usize,
    whole: bool,
    eligible: &impl Fn(PageIdx) -> bool,
) {
    let cap = if whole { n + WHOLE_SEQ_MAX } else { n };
    for &p in frames {
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
    use crate::pattern::sequence::SequenceKind;
    use crate::pattern::table::tests::T;

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
        let loops = [0..4, 20..24].into_iter().flat_map(|r| r.rev());
        let want: Vec<PageIdx> = [10..16, 30..34]
            .into_iter()
            .flatten()
            .chain(loops)
            .chain([60, 50])
            .collect();
        assert_eq!(order, want);
        // Fewer than a sequence holds: a stream from its start; a loop whose reader is at its
        // start, from its end.
        assert_eq!(t.pick(3), vec![10, 11, 12]);
        assert_eq!(
            t.pick(12),
            vec![10, 11, 12, 13, 14, 15, 30, 31, 32, 33, 3, 2]
        );
        // Pages that may not be chosen (cooling) are skipped.
        assert_eq!(t.t.pick(3, false, |p| p % 2 == 1), vec![11, 13, 15]);
    }

    /// A loop gives up its last blocks first, down to what its pass has brought in ahead of
    /// its reader; then the blocks its reader read last, back to its start; the blocks brought
    /// in just ahead of the reader (a refault's window), read next, go last.
    #[test]
    fn a_loop_gives_up_what_its_reader_read_last_and_keeps_what_it_reads_next() {
        let mut t = T::new(64);
        for b in (0..12).step_by(4) {
            t.read(b, 4);
        }
        // Read again from its start: a loop, its reader at its start, so from its end.
        t.read(0, 12);
        assert_eq!(t.t.sequence_of(0).unwrap().kind, SequenceKind::Loop);
        assert_eq!(t.pick(12), (0..12).rev().collect::<Vec<_>>());
        // Blocks 4 and 5 were dropped and the reader refaults on them: it has just read 0..4
        // from its cache, reads 4 and 5 next, and the rest of the pass after them.
        let back: Vec<(PageIdx, u32)> = vec![(4, 4), (5, 5)];
        for &(p, _) in &back {
            t.t.left(p);
            t.t.mirrored(p);
        }
        t.t.refault(0, 4, 6, &back);
        assert_eq!(t.pick(12), vec![11, 10, 9, 8, 7, 6, 3, 2, 1, 0, 5, 4]);
        // Once the blocks beyond are gone (the loop's tail, which the pass refaults in turn),
        // what the reader has just read goes before the window it has just brought in.
        for p in 6..12 {
            t.t.left(p);
        }
        assert_eq!(t.pick(3), vec![3, 2, 1]);
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
        assert_eq!(t.t.sequence_of(20).unwrap().kind, SequenceKind::Loop);
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
}
