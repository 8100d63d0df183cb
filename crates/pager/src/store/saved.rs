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
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::page::{PageIdx, PAGE_SIZE};
use crate::store::{PageStore, StoreCounters};

/// A snapshot a pager starts from: its memory file and what each guest page was.
#[derive(Clone, Debug)]
pub struct RestoreFrom {
    pub memory: Arc<File>,
    pub pages: Arc<SavedPages>,
}

/// What a snapshot holds of a run of guest pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SavedKind {
    /// All zero or never touched: not in the memory file.
    Zero,
    /// In the memory file, at the page's own offset.
    Copied,
    /// Held by the balloon: no content.
    Ballooned,
    /// Reported free by the guest: no content.
    Reported,
    /// Identical to the blocks of guest disk `disk` from `block` on (one per page): not copied.
    Disk { disk: u8, block: u32 },
}

/// `count` pages from `first` on, all of one kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedRun {
    pub first: PageIdx,
    pub count: u32,
    pub kind: SavedKind,
}

/// Every guest page of a snapshot, as runs in page order, and the pages to bring back first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedPages {
    /// Guest pages in all.
    pub pages: u32,
    pub runs: Vec<SavedRun>,
    /// The pages the guest had in RAM when the snapshot was taken (its working set, under a
    /// limit), as `(first, count)` runs: a restore brings them in before the guest asks.
    pub prefetch: Vec<(PageIdx, u32)>,
}

impl SavedPages {
    /// Adds page `p` (the next one) as `kind`.
    pub fn push(&mut self, p: PageIdx, kind: SavedKind) {
        self.pages = p + 1;
        if let Some(last) = self.runs.last_mut() {
            let follows = match (last.kind, kind) {
                (SavedKind::Disk { disk, block }, SavedKind::Disk { disk: d, block: b }) => {
                    d == disk && block.checked_add(last.count) == Some(b)
                }
                (a, b) => a == b,
            };
            if follows && last.first + last.count == p {
                last.count += 1;
                return;
            }
        }
        self.runs.push(SavedRun {
            first: p,
            count: 1,
            kind,
        });
    }

    /// Pages of each kind: (copied, zero, on disk, released).
    pub fn census(&self) -> (u64, u64, u64, u64) {
        let mut c = (0, 0, 0, 0);
        for r in &self.runs {
            let n = u64::from(r.count);
            match r.kind {
                SavedKind::Copied => c.0 += n,
                SavedKind::Zero => c.1 += n,
                SavedKind::Disk { .. } => c.2 += n,
                SavedKind::Ballooned | SavedKind::Reported => c.3 += n,
            }
        }
        c
    }

    /// Checks that the runs cover pages `0..pages` once each, in order.
    pub fn check(&self) -> Result<(), String> {
        let mut next = 0u32;
        for r in &self.runs {
            if r.first != next || r.count == 0 {
                return Err(format!(
                    "page run at {} does not follow page {next}",
                    r.first
                ));
            }
            next = r.first.checked_add(r.count).ok_or("a page run overflows")?;
        }
        if next != self.pages {
            return Err(format!("page runs end at {next}, not {}", self.pages));
        }
        if self
            .prefetch
            .iter()
            .any(|&(f, n)| f.checked_add(n).is_none_or(|e| e > self.pages))
        {
            return Err("a prefetch run lies outside guest RAM".into());
        }
        Ok(())
    }
}

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
