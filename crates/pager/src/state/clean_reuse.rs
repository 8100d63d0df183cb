//! Whether swapped-in pages kept clean are worth keeping so: the outcomes of the last of them.

use crate::page::PageIdx;

/// What became of the swapped-in pages kept clean, write-protected with their blocks
/// (`reuse_clean`): a guest write costs a write fault and frees the block; reclaim dropping
/// one unwritten saves a write. When the guest writes nearly every page it swaps in (a
/// collector's heap), keeping them costs a fault each and saves nothing, so loads from swap
/// bring pages in writable, but in the control clusters, one of every
/// [`Self::CONTROL_EVERY`], which keep them clean to go on telling which way it goes. The
/// counts halve every [`Self::WINDOW`] outcomes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CleanReuse {
    /// Kept pages the guest wrote.
    pub written: u32,
    /// Kept pages reclaim dropped unwritten.
    pub dropped: u32,
}

impl CleanReuse {
    const WINDOW: u32 = 4096;
    const CONTROL_EVERY: u32 = 8;
    /// Pages of a cluster that decides together (the pager's default cluster).
    const CLUSTER: u32 = 16;

    /// Counts one outcome of a page kept clean: written by the guest, or dropped unwritten.
    pub fn count(&mut self, written: bool) {
        if written {
            self.written += 1;
        } else {
            self.dropped += 1;
        }
        if self.written + self.dropped >= Self::WINDOW {
            self.written /= 2;
            self.dropped /= 2;
        }
    }

    /// Whether the guest writes nearly every page kept clean: more than 7 in 8 of the recent
    /// outcomes (at least 128 of them) were writes.
    pub fn writing(&self) -> bool {
        self.written + self.dropped >= Self::CONTROL_EVERY * Self::CLUSTER
            && self.written > 7 * self.dropped
    }

    /// Whether a load of `p` from swap for a read keeps it clean: unless the guest is
    /// [`Self::writing`], and always in the control clusters.
    pub fn keep(&self, p: PageIdx) -> bool {
        !self.writing() || (p / Self::CLUSTER) % Self::CONTROL_EVERY == 0
    }
}
