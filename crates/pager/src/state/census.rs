//! How many guest pages are in each state, kept by the table (`table.rs`) as every change
//! happens.

use super::page_state::PageState;

/// How many guest pages are in each state, kept as running counts so reading them costs
/// nothing however large the VM is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Census {
    pub zero: u32,
    /// Resident pages, mirrored ones included.
    pub resident: u32,
    pub swapped: u32,
    pub ballooned: u32,
    pub reported: u32,
    /// Dropped while mirroring a disk block; they refault from the image.
    pub on_disk: u32,
    /// Resident and mirroring a disk block (also counted in `resident`).
    pub mirrored: u32,
    /// Out for a working-set sample.
    pub sampled: u32,
}

impl Census {
    /// The counters that hold a page in state `s`.
    fn slots(&mut self, s: PageState) -> [Option<&mut u32>; 2] {
        match s {
            PageState::Zero => [Some(&mut self.zero), None],
            PageState::Resident { .. } => [Some(&mut self.resident), None],
            PageState::Mirrored(_) => [Some(&mut self.resident), Some(&mut self.mirrored)],
            PageState::Swapped(_) => [Some(&mut self.swapped), None],
            PageState::Ballooned => [Some(&mut self.ballooned), None],
            PageState::Reported => [Some(&mut self.reported), None],
            PageState::OnDisk(_) => [Some(&mut self.on_disk), None],
            PageState::Sampled(_) => [Some(&mut self.sampled), None],
        }
    }

    /// Moves one page from the counters of state `from` to those of `to`.
    pub fn moved(&mut self, from: PageState, to: PageState) {
        self.moved_n(from, to, 1);
    }

    /// Moves `n` pages from the counters of state `from` to those of `to`.
    pub fn moved_n(&mut self, from: PageState, to: PageState, n: u32) {
        for c in self.slots(from).into_iter().flatten() {
            *c -= n;
        }
        for c in self.slots(to).into_iter().flatten() {
            *c += n;
        }
    }
}
