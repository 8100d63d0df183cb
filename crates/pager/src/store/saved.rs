//! A restored snapshot's memory file as a page store: page `n` of the file is the content guest
//! page `n` had when the snapshot was taken (holes read as zeros), read-only to the pager.
//!
//! The file's pages are numbered after the swap file's blocks (`BlockMap::with_saved`), so a
//! restored page is an ordinary `Swapped(b)` page whose block the allocator never hands out:
//! it faults in clean (write-protected, keeping `b`) and reclaim drops it again without a
//! write while the guest has not written it, as it does a swapped-in page that still has its
//! swap block. The swap store reads blocks past the base here (`pool/mod.rs`), so every path
//! that reads a swapped page (faults, proactive swap-in, the Preventer's fallbacks) reads a
//! restored one without knowing it. Nothing writes it: a block is written only when the
//! allocator gives it to a victim.

use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::page::PAGE_SIZE;
use crate::store::{PageStore, StoreCounters};

/// A snapshot's memory file, read by page.
pub struct SavedMemory {
    file: File,
    counters: StoreCounters,
}

impl SavedMemory {
    pub fn new(file: File) -> Self {
        SavedMemory {
            file,
            counters: StoreCounters::default(),
        }
    }
}

impl PageStore for SavedMemory {
    fn describe(&self) -> String {
        "the snapshot's memory file".into()
    }

    fn read(&self, first: u32, buf: &mut [u8]) -> std::io::Result<()> {
        self.file
            .read_exact_at(buf, u64::from(first) * PAGE_SIZE as u64)
    }

    fn write(&self, first: u32, _: &[u8]) -> std::io::Result<()> {
        Err(std::io::Error::other(format!(
            "the snapshot's memory file is read-only (a write of page {first})"
        )))
    }

    fn counters(&self) -> &StoreCounters {
        &self.counters
    }
}
