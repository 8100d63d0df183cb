//! The sequences of the reference patterns, and the streams of reads that make them.

use std::collections::BTreeMap;
use std::time::Instant;

use super::PROBE_WAIT;
use crate::page::PageIdx;

/// A sequence's category.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SequenceKind {
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
    pub kind: SequenceKind,
    /// Observations between the starts of its last two passes (`None`: read once).
    pub period: Option<u64>,
    /// When its current pass began.
    pub(super) pass_start: u64,
    /// Where its current pass is: a re-reference before it begins a new pass.
    pub(super) cursor: u32,
    /// Where its reader was last seen: the first block of the last read or refault of it
    /// (its end until one is seen). A loop keeps the blocks from it to `cursor`, which the
    /// reader reads next, longest.
    pub(super) reader: u32,
    /// When it was last created, lengthened or read: its place in its category's order.
    pub(super) stamp: u64,
    /// Its pages, by block.
    pub(super) frames: BTreeMap<u32, PageIdx>,
    /// When a guest disk read last created, lengthened or read it.
    pub(super) read_at: Instant,
    /// When its probe was taken.
    pub(super) probed: Option<Instant>,
}

impl Sequence {
    /// Pages that hold its blocks now.
    pub fn pages(&self) -> usize {
        self.frames.len()
    }

    /// Whether its stream is still reading it: a guest disk read of it within [`PROBE_WAIT`]
    /// before `now`.
    pub(super) fn streaming(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.read_at) < PROBE_WAIT
    }
}

/// A stream of reads of one disk not (yet) known to be a sequence, or the one that made one.
#[derive(Debug)]
pub(super) struct Stream {
    pub(super) start: u32,
    /// The block a read continuing it starts at.
    pub(super) next: u32,
    pub(super) reads: u32,
    /// The sequence it made.
    pub(super) seq: Option<u32>,
    /// The pages its reads filled before it was a sequence, with the ticks they mirrored under.
    pub(super) pending: Vec<(PageIdx, u32, u32)>,
    pub(super) used: u64,
}
