//! The reads in flight: runs of pages whose slots are being read from their stores without the
//! page lock (the fault path, `fault.rs`), and which of their pages changed state meanwhile.

use crate::page::PageIdx;

/// A run of pages whose slots are being read without the page lock, and which of them changed
/// state meanwhile.
#[derive(Debug)]
struct Watch {
    id: u64,
    first: PageIdx,
    changed: Vec<bool>,
}

/// The runs being read from their stores without the page lock.
#[derive(Debug, Default)]
pub struct ReadsInFlight {
    watched: Vec<Watch>,
    next_watch: u64,
}

impl ReadsInFlight {
    /// Starts noting which pages of `first..first + n` change state; [`Self::unwatch`] with the
    /// id returned tells which did.
    pub fn watch(&mut self, first: PageIdx, n: u32) -> u64 {
        let id = self.next_watch;
        self.next_watch += 1;
        self.watched.push(Watch {
            id,
            first,
            changed: vec![false; n as usize],
        });
        id
    }

    /// Ends watch `id`: for each page of its run, whether it changed state since
    /// [`Self::watch`].
    pub fn unwatch(&mut self, id: u64) -> Vec<bool> {
        match self.watched.iter().position(|w| w.id == id) {
            Some(i) => self.watched.swap_remove(i).changed,
            None => Vec::new(),
        }
    }

    /// Page `p` changed state: noted in every run that holds it.
    pub fn changed(&mut self, p: PageIdx) {
        for w in &mut self.watched {
            if let Some(c) = p
                .checked_sub(w.first)
                .and_then(|i| w.changed.get_mut(i as usize))
            {
                *c = true;
            }
        }
    }
}
