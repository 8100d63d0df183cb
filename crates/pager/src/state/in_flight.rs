//! The reads in flight: runs of pages whose slots are being read from their stores without the
//! page lock (the fault path, `fault.rs`), and which of their pages changed state meanwhile.

use crate::page::PageIdx;

/// A run of pages whose slots are being read without the page lock, and which of them changed
/// state meanwhile.
#[derive(Debug)]
struct ReadInFlight {
    id: u64,
    first: PageIdx,
    changed: Vec<bool>,
}

/// The runs being read from their stores without the page lock.
#[derive(Debug, Default)]
pub struct ReadsInFlight {
    reads: Vec<ReadInFlight>,
    next_id: u64,
}

impl ReadsInFlight {
    /// Starts noting which pages of `first..first + n` change state; [`Self::end`] with the id
    /// returned tells which did.
    pub fn begin(&mut self, first: PageIdx, n: u32) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.reads.push(ReadInFlight {
            id,
            first,
            changed: vec![false; n as usize],
        });
        id
    }

    /// Ends read `id`: for each page of its run, whether it changed state since
    /// [`Self::begin`].
    pub fn end(&mut self, id: u64) -> Vec<bool> {
        match self.reads.iter().position(|r| r.id == id) {
            Some(i) => self.reads.swap_remove(i).changed,
            None => Vec::new(),
        }
    }

    /// Page `p` changed state: noted in every run that holds it.
    pub fn changed(&mut self, p: PageIdx) {
        for r in &mut self.reads {
            if let Some(c) = p
                .checked_sub(r.first)
                .and_then(|i| r.changed.get_mut(i as usize))
            {
                *c = true;
            }
        }
    }
}
