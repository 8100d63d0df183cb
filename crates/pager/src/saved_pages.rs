//! What a snapshot holds of guest memory ([`SavedPages`]: each page's kind, as runs) and what
//! a restored pager starts from ([`RestoreFrom`]). Pure data, with serde; imports only `page.rs`
//! and the `PageStore` trait.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::page::PageIdx;

/// A snapshot a pager starts from: where its copied pages are read (the snapshot's memory file,
/// or a migration's source) and what each guest page was.
#[derive(Clone)]
pub struct RestoreFrom {
    /// Page `p` of the guest is page `p` of this store.
    pub memory: Arc<dyn crate::store::PageStore>,
    pub pages: Arc<SavedPages>,
}

impl std::fmt::Debug for RestoreFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestoreFrom")
            .field("memory", &self.memory.describe())
            .field("pages", &self.pages)
            .finish()
    }
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
        self.push_run(p, 1, kind);
    }

    /// Adds pages `first..first + count` (the next ones) as `kind` (of a disk, blocks from
    /// `kind`'s on).
    pub fn push_run(&mut self, first: PageIdx, count: u32, kind: SavedKind) {
        self.pages = first + count;
        if let Some(last) = self.runs.last_mut() {
            let follows = match (last.kind, kind) {
                (SavedKind::Disk { disk, block }, SavedKind::Disk { disk: d, block: b }) => {
                    d == disk && block.checked_add(last.count) == Some(b)
                }
                (a, b) => a == b,
            };
            if follows && last.first + last.count == first {
                last.count += count;
                return;
            }
        }
        self.runs.push(SavedRun { first, count, kind });
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
