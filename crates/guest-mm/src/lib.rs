//! The guest kit's memory manager core: page frames, free and LRU lists, tasks' software page tables, the page cache with readahead and writeback, swap slots, reclaim, the balloon driver's inflation hold-off and the on-disk file format — pure logic over frame indices, with the memory and the disks behind a [`Backend`].
//!
//! It is `no_std` and allocates nothing: the caller hands in the metadata arrays (one
//! [`Frame`] per managed page, the page-cache hash table, the swap bitmap) and a [`Backend`]
//! that reaches page contents and does block I/O. The guest kit backs it with real RAM and
//! virtio-blk; the host tests back it with vectors. `docs/guest-kit.md` says which Linux
//! behaviour each part models.
//!
//! The state is one [`Mm`] (this file, with the [`Backend`] it runs over and the [`Params`]);
//! each part of it is one `impl Mm` block in a file named after the Linux file that does the
//! same: the frame lists in `list`, the allocator in `page_alloc`, tasks' page tables and
//! faults in `memory`, the file system in `fs`, the page cache in `filemap` with `readahead`
//! and `writeback`, swap in `swap`, reclaim in `vmscan`, the balloon's hooks in `balloon` and
//! `page_reporting`, statistics in `vmstat`, invariant checks in `debug`. Those files import
//! this one, and this one imports only leaves, which import nothing of the crate but
//! `mm_types`: the basic types in `mm_types`, the two parts that own their state in a struct of
//! their own that `Mm` holds (the page-cache hash table in `cache_index`, the swap slot bitmap
//! in `swapfile`), the counters in `vm_event`, and the on-disk format in `format`. Four more
//! leaves serve the guest kit beside `Mm`: when the balloon may inflate again (`holdoff`), a
//! latency histogram (`hist`), the free ranges of its heap (`heap`) and text-like file content
//! for its compressor (`text`, which uses `format`'s mixer).
#![no_std]
// Frame numbers, swap slots, task-virtual and file page indices are u32 by design (the frame
// count is asserted below u32::MAX in `Mm::new`, swap slots are capped at u32 in `set_swap`,
// virtual pages are below TASK_PAGES = 2^19, file pages are checked against the file size), so
// the narrowing casts between them and u64/usize arithmetic cannot truncate.
#![allow(clippy::cast_possible_truncation)]

#[cfg(test)]
extern crate std;

mod balloon;
mod cache_index;
mod debug;
mod filemap;
pub mod format;
mod fs;
pub mod heap;
pub mod hist;
pub mod holdoff;
mod list;
mod memory;
mod mm_types;
mod page_alloc;
mod page_reporting;
mod readahead;
mod swap;
mod swapfile;
pub mod text;
mod vm_event;
mod vmscan;
mod vmstat;
mod writeback;

pub use mm_types::{Access, Frame, PageKind, NIL, PAGE_SIZE};
pub use vm_event::{Stats, VmEvents};

use cache_index::CacheIndex;
use format::{FileEntry, Superblock};
use mm_types::{List, Task, EMPTY_LIST, L_FREE, NR_LISTS};
use swapfile::SwapInfo;

/// Root entries of a task's software page table; each covers 512 pages (2 MiB).
pub const ROOT_ENTRIES: usize = 1024;
/// Virtual pages per task (2 GiB).
pub const TASK_PAGES: u64 = (ROOT_ENTRIES * 512) as u64;
/// Tasks that may exist at once.
pub const MAX_TASKS: usize = 64;
/// Files the in-memory table holds.
pub const MAX_FILES: usize = 64;
/// Largest batch of pages in one disk request.
pub const MAX_BATCH: usize = 64;

/// Which disk a request goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dev {
    /// The data disk holding the file system.
    Data,
    /// The swap disk.
    Swap,
}

/// A disk request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoError;

/// What the memory manager needs from its environment.
pub trait Backend {
    /// The contents of frame `frame`.
    fn page(&mut self, frame: u32) -> &mut [u8; PAGE_SIZE];
    /// Zeroes a frame (the guest uses `rep stosb`, like Linux's `clear_page_erms`).
    fn zero(&mut self, frame: u32) {
        self.page(frame).fill(0);
    }
    /// Reads `frames.len()` consecutive blocks starting at `block` into the frames.
    fn read(&mut self, dev: Dev, block: u64, frames: &[u32]) -> Result<(), IoError>;
    /// Writes the frames to `frames.len()` consecutive blocks starting at `block`.
    fn write(&mut self, dev: Dev, block: u64, frames: &[u32]) -> Result<(), IoError>;
}

/// Why an operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmError {
    /// No free frame even after reclaim.
    OutOfMemory,
    /// A disk request failed.
    Io,
    /// A virtual page outside the task's range.
    BadAddress,
    /// No task slot, file-table slot or disk space left.
    NoSpace,
    /// No such task or file, or a file offset past its end.
    NotFound,
    /// The data disk holds no valid file system.
    BadFs,
}

impl From<IoError> for MmError {
    fn from(_: IoError) -> Self {
        MmError::Io
    }
}

/// Tunables (Linux's names in parentheses).
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// Zero a page when it is allocated for anonymous memory (`init_on_alloc`-like, always on in Linux for anon pages).
    pub zero_on_alloc: bool,
    /// Pages read per page-cache miss (`read_ahead_kb` / 4).
    pub readahead_pages: u32,
    /// Anon vs. file reclaim balance, 0..=200 (`vm.swappiness`).
    pub swappiness: u32,
    /// Below this many free pages, allocation reclaims directly (`min_free_kbytes`).
    pub min_free: u32,
    /// Below this, reclaim starts (low watermark).
    pub low_free: u32,
    /// Reclaim stops at this (high watermark).
    pub high_free: u32,
    /// Swap readahead: slots read per major fault are `1 << page_cluster` (`vm.page-cluster`).
    pub page_cluster: u32,
    /// Dirty page-cache pages above which writers write back (`vm.dirty_ratio`).
    pub dirty_limit: u32,
    /// Writeback started by the dirty limit stops here (`vm.dirty_background_ratio`).
    pub dirty_background: u32,
}

fn isqrt(n: u64) -> u64 {
    let mut x = n;
    let mut y = x.div_ceil(2);
    while y < x {
        x = y;
        y = (x + n / x) / 2;
    }
    x
}

impl Params {
    /// Linux's defaults scaled to `frames` pages: `min_free_kbytes = sqrt(16 * RAM in KiB)`,
    /// low = min × 5/4, high = min × 3/2, readahead 128 KiB, swappiness 60, dirty ratio 20 %,
    /// background 10 %.
    pub fn for_frames(frames: u32) -> Self {
        let kib = u64::from(frames) * 4;
        let min = u32::try_from((isqrt(16 * kib) / 4).clamp(16, 16384))
            .unwrap_or(16384)
            .min(frames / 8)
            .max(4);
        Params {
            zero_on_alloc: true,
            readahead_pages: 32,
            swappiness: 60,
            page_cluster: 3,
            min_free: min,
            low_free: min * 5 / 4,
            high_free: min * 3 / 2,
            dirty_limit: (frames / 5).max(8),
            dirty_background: (frames / 10).max(4),
        }
    }
}

/// The memory manager.
pub struct Mm<'a> {
    frames: &'a mut [Frame],
    base_pfn: u64,
    lists: [List; NR_LISTS],
    cache: CacheIndex<'a>,
    swap: SwapInfo<'a>,
    tasks: [Task; MAX_TASKS],
    sb: Option<Superblock>,
    files: [FileEntry; MAX_FILES],
    report_cursor: u32,
    /// Tunables; may be changed at any time.
    pub params: Params,
    events: VmEvents,
    dirty: u32,
    anon: u32,
    cached: u32,
    page_tables: u32,
    balloon: u32,
    kernel: u32,
}

impl<'a> Mm<'a> {
    /// Manages `frames.len()` pages starting at physical page `base_pfn`, all free.
    /// `cache` (at least twice as many entries as frames, a power of two) is the page-cache
    /// hash table; `swap_map` holds one bit per swap slot (see [`Mm::set_swap`]).
    pub fn new(
        frames: &'a mut [Frame],
        base_pfn: u64,
        cache: &'a mut [u32],
        swap_map: &'a mut [u64],
        params: Params,
    ) -> Self {
        assert!(frames.len() < NIL as usize);
        assert!(cache.len().is_power_of_two() && cache.len() >= 2 * frames.len());
        let mut mm = Mm {
            frames,
            base_pfn,
            lists: [EMPTY_LIST; NR_LISTS],
            cache: CacheIndex::new(cache),
            swap: SwapInfo::new(swap_map),
            tasks: [Task {
                used: false,
                root: NIL,
            }; MAX_TASKS],
            sb: None,
            files: [FileEntry::new("", 0); MAX_FILES],
            report_cursor: 0,
            params,
            events: VmEvents::default(),
            dirty: 0,
            anon: 0,
            cached: 0,
            page_tables: 0,
            balloon: 0,
            kernel: 0,
        };
        for f in 0..mm.frames.len() as u32 {
            mm.frames[f as usize] = Frame::INIT;
            mm.frames[f as usize].kind = PageKind::Free;
            mm.push_back(L_FREE, f);
        }
        mm
    }

    /// Number of managed frames.
    pub fn total(&self) -> u32 {
        self.frames.len() as u32
    }

    /// Physical page number of a frame.
    pub fn pfn(&self, frame: u32) -> u64 {
        self.base_pfn + u64::from(frame)
    }

    /// Frame of a physical page number, if managed.
    pub fn frame_of_pfn(&self, pfn: u64) -> Option<u32> {
        let f = pfn.checked_sub(self.base_pfn)?;
        (f < u64::from(self.total())).then_some(f as u32)
    }

    /// What a frame holds.
    pub fn kind(&self, frame: u32) -> PageKind {
        self.frames[frame as usize].kind
    }
}

#[cfg(test)]
mod tests;
