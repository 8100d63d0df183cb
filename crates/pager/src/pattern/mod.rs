//! HyperDealer2's reference patterns (§4.4–§4.5), detected from guest disk reads, and the
//! victim order built on them. Pure: the state table feeds it page events and the pager's reads
//! and refaults; it answers which mirrored pages to give up first.
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
//! - **Victim order** ([`Patterns::pick`](table::Patterns::pick)): sequential sequences, most
//!   recently created or lengthened first, each from its first block; then loops, least recently
//!   read first, each from its last block down to how far its pass has brought blocks in (its
//!   cursor), then from the block behind its reader (the first block of its last read or
//!   refault) back to its start, then the blocks between the reader and the cursor; then
//!   unclassified pages, least recent first. With `whole` (the paper's WHOLE_SEQ), a sequence
//!   once begun is taken whole, up to [`WHOLE_SEQ_MAX`] pages more than asked. The paper takes a
//!   loop from its start as it does a stream; a loop larger than the memory left for it is then
//!   taken just before its next pass reads each page again, the least recently used page being
//!   the one needed soonest. Taken from its end while its reader is in its resident first part,
//!   and behind its reader once it refaults in the tail (most recently used first, as the
//!   unified buffer management HyperDealer2 cites does for loops), the first part stays
//!   resident, the rest stays one run that refaults in large windows, and a refault's window,
//!   just ahead of the reader, goes last.
//! - **Cold sequences** ([`Patterns::pick_cold`](table::Patterns::pick_cold)). The paper's guest
//!   reports page-cache hits, so a file read again from the guest's cache is a loop at once. Here
//!   those hits never reach the host: a file the guest keeps re-reading from its own cache stays a
//!   sequential sequence after its one pass from disk, and looks just like an input read once and
//!   done with. A probe tells them apart. A sequence its stream is still reading (a disk read
//!   within [`PROBE_WAIT`]) is *cold* behind its reader: what the stream read, the guest has used.
//!   One its stream left longer ago is probed: its first [`PROBE_PAGES`] pages are released, and if
//!   it is still sequential [`PROBE_WAIT`] later (a guest re-reading it would have touched the
//!   probe pages, and their refault made it a loop), it is cold. A cold-only pick takes cold
//!   sequences (most recent first) and the probes of the others, nothing else.
//!
//! Every page event costs O(log n); the table holds at most [`MAX_SEQUENCES`] sequences (the
//! least recently read go first) and [`STREAMS_PER_DISK`] streams per disk.

use std::time::Duration;

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
/// Pages of a sequential sequence released to probe it (see
/// [`Patterns::pick_cold`](table::Patterns::pick_cold)).
pub const PROBE_PAGES: usize = 16;
/// How long after its probe a sequence still sequential is cold (a few passes of a file the
/// guest re-reads from its cache: one pass of 128 MiB takes 0.1–0.3 s here), and how recent a
/// disk read of a sequence must be for it to count as still being read. A loop in its first
/// pass from disk is taken as a stream; its next pass refaults what was taken, and makes it a
/// loop.
pub const PROBE_WAIT: Duration = Duration::from_millis(500);
/// Pages of a stream's reads kept before it becomes a sequence.
const MAX_PENDING: usize = 4096;

pub mod pick;
pub mod sequence;
pub mod table;
