//! The guest kit's memory manager core: page frames, free and LRU lists, tasks' software page tables, the page cache with readahead and writeback, swap slots, reclaim, the balloon driver's inflation hold-off and the on-disk file format — pure logic over frame indices, with the memory and the disks behind a [`Backend`].
//!
//! It is `no_std` and allocates nothing: the caller hands in the metadata arrays (one
//! [`Frame`] per managed page, the page-cache hash table, the swap bitmap) and a [`Backend`]
//! that reaches page contents and does block I/O. The guest kit backs it with real RAM and
//! virtio-blk; the host tests back it with vectors. `docs/guest-kit.md` says which Linux
//! behaviour each part models.
#![no_std]
// Frame numbers, swap slots, task-virtual and file page indices are u32 by design (the frame
// count is asserted below u32::MAX in `Mm::new`, swap slots are capped at u32 in `set_swap`,
// virtual pages are below TASK_PAGES = 2^19, file pages are checked against the file size), so
// the narrowing casts between them and u64/usize arithmetic cannot truncate.
#![allow(clippy::cast_possible_truncation)]

pub mod format;
pub mod hist;
pub mod holdoff;

use format::{Extent, FileEntry, Superblock, BLOCK_SIZE, ENTRIES_PER_BLOCK, ENTRY_SIZE};

/// Page size (and block size of both disks).
pub const PAGE_SIZE: usize = 4096;
/// "No frame" in lists, tables and page directories.
pub const NIL: u32 = u32::MAX;
/// Root entries of a task's software page table; each covers 512 pages (2 MiB).
pub const ROOT_ENTRIES: usize = 1024;
/// Virtual pages per task (2 GiB).
pub const TASK_PAGES: u64 = (ROOT_ENTRIES * 512) as u64;
/// Tasks that may exist at once.
pub const MAX_TASKS: usize = 64;
/// Files the in-memory table holds.
pub const MAX_FILES: usize = 64;
/// Page-cache owner of swap-cache pages (the file number is the slot's owner, the index its slot).
const SWAP_OWNER: u32 = u32::MAX - 1;
/// Largest batch of pages in one disk request.
pub const MAX_BATCH: usize = 64;

/// What a frame currently holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// On the free list.
    Free,
    /// Anonymous memory of a task (`owner` = task, `index` = virtual page).
    Anon,
    /// Page-cache page (`owner` = file, `index` = page of the file).
    File,
    /// A page of a task's software page table.
    PageTable,
    /// Held by the balloon driver.
    Balloon,
    /// Off the free list while the balloon device is told it is free.
    Reporting,
    /// Allocated to the kit for its own use.
    Kernel,
}

const F_REFERENCED: u8 = 1;
const F_DIRTY: u8 = 2;
const F_REPORTED: u8 = 4;

const L_NONE: u8 = 0;
const L_FREE: u8 = 1;
const L_ANON_INACTIVE: u8 = 2;
const L_ANON_ACTIVE: u8 = 3;
const L_FILE_INACTIVE: u8 = 4;
const L_FILE_ACTIVE: u8 = 5;
const NR_LISTS: usize = 6;

/// Per-page metadata (Linux's `struct page`, 20 bytes).
#[derive(Clone, Copy, Debug)]
pub struct Frame {
    prev: u32,
    next: u32,
    owner: u32,
    index: u32,
    kind: Kind,
    list: u8,
    flags: u8,
    pins: u8,
}

impl Frame {
    /// A frame before [`Mm::new`] puts it on the free list.
    pub const INIT: Frame = Frame {
        prev: NIL,
        next: NIL,
        owner: 0,
        index: 0,
        kind: Kind::Kernel,
        list: L_NONE,
        flags: 0,
        pins: 0,
    };
}

#[derive(Clone, Copy)]
struct List {
    head: u32,
    tail: u32,
    len: u32,
}

const EMPTY_LIST: List = List {
    head: NIL,
    tail: NIL,
    len: 0,
};

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

/// Event counters (Linux's `/proc/vmstat` names where they exist).
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    /// Minor faults: first touch of an anonymous page.
    pub pgfault: u64,
    /// Major faults: an anonymous page read back from swap.
    pub pgmajfault: u64,
    /// Pages read from swap.
    pub pswpin: u64,
    /// Pages written to swap.
    pub pswpout: u64,
    /// Pages scanned by reclaim.
    pub pgscan: u64,
    /// Pages freed by reclaim.
    pub pgsteal: u64,
    /// Page-cache pages freed by reclaim.
    pub pgsteal_file: u64,
    /// Anonymous pages freed by reclaim (swapped out).
    pub pgsteal_anon: u64,
    /// Pages moved to an active list.
    pub pgactivate: u64,
    /// Pages moved to an inactive list.
    pub pgdeactivate: u64,
    /// File pages read from disk.
    pub pgpgin: u64,
    /// File pages written to disk.
    pub pgpgout: u64,
    /// File pages read ahead of the page asked for.
    pub readahead: u64,
    /// Page-cache lookups that found the page.
    pub cache_hits: u64,
    /// Page-cache lookups that missed.
    pub cache_misses: u64,
    /// Swap slots read ahead of the one faulted on (into the swap cache).
    pub swap_ra: u64,
    /// Faults on swapped pages satisfied from the swap cache.
    pub swap_ra_hits: u64,
    /// Pages zeroed on allocation.
    pub zeroed: u64,
    /// Allocations that failed after reclaim.
    pub oom: u64,
    /// Page-cache pages dropped by `drop_caches`.
    pub dropped: u64,
    /// Disk requests issued.
    pub io_requests: u64,
}

/// Counters plus the current page counts.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    /// Event counters.
    pub counters: Counters,
    /// Managed frames.
    pub total: u32,
    /// Free frames.
    pub free: u32,
    /// Page-cache frames.
    pub cached: u32,
    /// Dirty page-cache frames.
    pub dirty: u32,
    /// Anonymous frames.
    pub anon: u32,
    /// Frames of software page tables.
    pub page_tables: u32,
    /// Frames held by the balloon.
    pub balloon: u32,
    /// Frames held by the kit.
    pub kernel: u32,
    /// Swap slots in use.
    pub swap_used: u32,
    /// Swap slots.
    pub swap_total: u32,
    /// Frames on the active lists (anon + file).
    pub active: u32,
    /// Frames on the inactive lists.
    pub inactive: u32,
}

const PTE_PRESENT: u64 = 1;
const PTE_ACCESSED: u64 = 2;
const PTE_DIRTY: u64 = 4;
const PTE_SWAPPED: u64 = 8;

/// A task's address space: the frame of its root directory (1024 little-endian u32 frame
/// numbers of page-table frames, `NIL` where none), allocated at its first fault.
#[derive(Clone, Copy)]
struct Task {
    used: bool,
    root: u32,
}

/// How a page-cache page will be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read it (a miss reads the page from disk, with readahead).
    Read,
    /// Change part of it (a miss reads it; the page becomes dirty).
    Write,
    /// Overwrite all of it (a miss allocates without reading; the page becomes dirty).
    Overwrite,
}

/// The memory manager.
pub struct Mm<'a> {
    frames: &'a mut [Frame],
    base_pfn: u64,
    lists: [List; NR_LISTS],
    cache: &'a mut [u32],
    cache_len: u32,
    swap_map: &'a mut [u64],
    swap_slots: u32,
    swap_used: u32,
    swap_cursor: u32,
    tasks: [Task; MAX_TASKS],
    sb: Option<Superblock>,
    files: [FileEntry; MAX_FILES],
    report_cursor: u32,
    /// Tunables; may be changed at any time.
    pub params: Params,
    counters: Counters,
    dirty: u32,
    anon: u32,
    cached: u32,
    page_tables: u32,
    balloon: u32,
    kernel: u32,
}

fn hash(file: u32, index: u32) -> u32 {
    let x = (u64::from(file) << 32 | u64::from(index)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 32) as u32
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
        cache.fill(NIL);
        let mut mm = Mm {
            frames,
            base_pfn,
            lists: [EMPTY_LIST; NR_LISTS],
            cache,
            cache_len: 0,
            swap_map,
            swap_slots: 0,
            swap_used: 0,
            swap_cursor: 0,
            tasks: [Task {
                used: false,
                root: NIL,
            }; MAX_TASKS],
            sb: None,
            files: [FileEntry::new("", 0); MAX_FILES],
            report_cursor: 0,
            params,
            counters: Counters::default(),
            dirty: 0,
            anon: 0,
            cached: 0,
            page_tables: 0,
            balloon: 0,
            kernel: 0,
        };
        for f in 0..mm.frames.len() as u32 {
            mm.frames[f as usize] = Frame::INIT;
            mm.frames[f as usize].kind = Kind::Free;
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
    pub fn kind(&self, frame: u32) -> Kind {
        self.frames[frame as usize].kind
    }

    /// Free frames.
    pub fn free_pages(&self) -> u32 {
        self.lists[usize::from(L_FREE)].len
    }

    // ---- intrusive doubly linked lists ----

    fn unlink(&mut self, f: u32) {
        let fr = self.frames[f as usize];
        let l = usize::from(fr.list);
        debug_assert!(l != usize::from(L_NONE));
        if fr.prev == NIL {
            self.lists[l].head = fr.next;
        } else {
            self.frames[fr.prev as usize].next = fr.next;
        }
        if fr.next == NIL {
            self.lists[l].tail = fr.prev;
        } else {
            self.frames[fr.next as usize].prev = fr.prev;
        }
        self.lists[l].len -= 1;
        let fr = &mut self.frames[f as usize];
        fr.prev = NIL;
        fr.next = NIL;
        fr.list = L_NONE;
    }

    fn push_front(&mut self, list: u8, f: u32) {
        let l = usize::from(list);
        let head = self.lists[l].head;
        {
            let fr = &mut self.frames[f as usize];
            fr.list = list;
            fr.prev = NIL;
            fr.next = head;
        }
        if head == NIL {
            self.lists[l].tail = f;
        } else {
            self.frames[head as usize].prev = f;
        }
        self.lists[l].head = f;
        self.lists[l].len += 1;
    }

    fn push_back(&mut self, list: u8, f: u32) {
        let l = usize::from(list);
        let tail = self.lists[l].tail;
        {
            let fr = &mut self.frames[f as usize];
            fr.list = list;
            fr.next = NIL;
            fr.prev = tail;
        }
        if tail == NIL {
            self.lists[l].head = f;
        } else {
            self.frames[tail as usize].next = f;
        }
        self.lists[l].tail = f;
        self.lists[l].len += 1;
    }

    // ---- page allocator ----

    /// Takes a free frame, reclaiming first when free memory is below the low watermark.
    fn get_free<B: Backend>(&mut self, be: &mut B) -> Result<u32, MmError> {
        if self.free_pages() < self.params.low_free {
            self.reclaim(be, self.params.high_free)?;
        }
        let f = self.lists[usize::from(L_FREE)].head;
        if f == NIL {
            self.counters.oom += 1;
            return Err(MmError::OutOfMemory);
        }
        self.unlink(f);
        let fr = &mut self.frames[f as usize];
        fr.flags = 0;
        fr.pins = 0;
        Ok(f)
    }

    fn put_free(&mut self, f: u32) {
        let fr = &mut self.frames[f as usize];
        debug_assert!(fr.pins == 0 && fr.list == L_NONE);
        fr.kind = Kind::Free;
        fr.flags = 0;
        self.push_front(L_FREE, f);
    }

    /// Allocates a frame for the kit's own use (contents undefined).
    pub fn alloc_kernel<B: Backend>(&mut self, be: &mut B) -> Result<u32, MmError> {
        let f = self.get_free(be)?;
        self.frames[f as usize].kind = Kind::Kernel;
        self.kernel += 1;
        Ok(f)
    }

    /// Frees a frame from [`Mm::alloc_kernel`].
    pub fn free_kernel(&mut self, f: u32) {
        assert_eq!(self.frames[f as usize].kind, Kind::Kernel);
        self.kernel -= 1;
        self.put_free(f);
    }

    /// Takes a frame for the balloon (inflate), reclaiming if needed. Does not reclaim below
    /// the min watermark's worth of other memory: fails with `OutOfMemory` instead.
    pub fn alloc_balloon<B: Backend>(&mut self, be: &mut B) -> Result<u32, MmError> {
        if self.free_pages() <= self.params.min_free {
            self.reclaim(be, self.params.high_free)?;
            if self.free_pages() <= self.params.min_free {
                return Err(MmError::OutOfMemory);
            }
        }
        let f = self.get_free(be)?;
        self.frames[f as usize].kind = Kind::Balloon;
        self.balloon += 1;
        Ok(f)
    }

    /// The first frame of kind `kind` at or after `from`.
    pub fn find_kind(&self, kind: Kind, from: u32) -> Option<u32> {
        (from..self.total()).find(|&f| self.frames[f as usize].kind == kind)
    }

    /// Returns a balloon frame to the free list (deflate).
    pub fn free_balloon(&mut self, f: u32) {
        assert_eq!(self.frames[f as usize].kind, Kind::Balloon);
        self.balloon -= 1;
        self.put_free(f);
    }

    // ---- free page reporting ----

    /// Finds a naturally aligned run of `1 << order` free frames not all reported yet, scanning
    /// at most `max_scan` frames from where the last call stopped, takes them off the free list
    /// and returns the first. Give them back with [`Mm::report_done`].
    pub fn report_take(&mut self, order: u32, max_scan: u32) -> Option<u32> {
        let n = 1u32 << order;
        let total = self.total();
        if n > total {
            return None;
        }
        let align = u64::from(n);
        let mut scanned = 0;
        while scanned < max_scan {
            let mut f = self.report_cursor;
            // Round up to the next aligned chunk start.
            let pfn = self.pfn(f);
            let up = pfn.div_ceil(align) * align;
            f += (up - pfn) as u32;
            if f + n > total {
                self.report_cursor = 0;
                scanned += n;
                continue;
            }
            self.report_cursor = f + n;
            scanned += n;
            let range = f as usize..(f + n) as usize;
            let all_free = self.frames[range.clone()]
                .iter()
                .all(|x| x.kind == Kind::Free);
            let all_reported = self.frames[range].iter().all(|x| x.flags & F_REPORTED != 0);
            if all_free && !all_reported {
                for g in f..f + n {
                    self.unlink(g);
                    self.frames[g as usize].kind = Kind::Reporting;
                }
                return Some(f);
            }
        }
        None
    }

    /// Puts a reported run back on the free list (at the tail, so it is reused last), marked
    /// reported unless the caller `reused` it meanwhile (then it is reported again).
    pub fn report_done(&mut self, first: u32, order: u32, reused: bool) {
        for g in first..first + (1 << order) {
            assert_eq!(self.frames[g as usize].kind, Kind::Reporting);
            let fr = &mut self.frames[g as usize];
            fr.kind = Kind::Free;
            fr.flags = if reused { 0 } else { F_REPORTED };
            self.push_back(L_FREE, g);
        }
    }

    // ---- swap slots ----

    /// Uses a swap disk of `slots` slots (`swap_map` must hold at least `slots` bits).
    /// Only valid while no slot is in use.
    pub fn set_swap(&mut self, slots: u32) {
        assert_eq!(self.swap_used, 0);
        let slots = slots.min((self.swap_map.len() * 64) as u32);
        self.swap_map.fill(0);
        self.swap_slots = slots;
        self.swap_cursor = 0;
    }

    /// Allocates a swap slot, next-fit from the last one (so successive swap-outs land in
    /// consecutive slots, like Linux's cluster allocator).
    pub fn swap_alloc(&mut self) -> Option<u32> {
        if self.swap_used >= self.swap_slots {
            return None;
        }
        let mut s = self.swap_cursor;
        for _ in 0..self.swap_slots {
            if s >= self.swap_slots {
                s = 0;
            }
            let (w, b) = ((s / 64) as usize, s % 64);
            if self.swap_map[w] & (1 << b) == 0 {
                self.swap_map[w] |= 1 << b;
                self.swap_used += 1;
                self.swap_cursor = s + 1;
                return Some(s);
            }
            s += 1;
        }
        None
    }

    /// Frees a swap slot.
    pub fn swap_free(&mut self, s: u32) {
        let (w, b) = ((s / 64) as usize, s % 64);
        assert!(
            s < self.swap_slots && self.swap_map[w] & (1 << b) != 0,
            "swap slot {s} is not in use"
        );
        self.swap_map[w] &= !(1 << b);
        self.swap_used -= 1;
        // A copy read ahead into the swap cache is stale from now on.
        if let Some((_, f)) = self.cache_find(SWAP_OWNER, s) {
            self.evict_file(f);
        }
    }

    // ---- tasks and anonymous memory ----

    /// Creates a task with an empty address space.
    pub fn task_create(&mut self) -> Result<u32, MmError> {
        let t = self
            .tasks
            .iter()
            .position(|t| !t.used)
            .ok_or(MmError::NoSpace)?;
        self.tasks[t] = Task {
            used: true,
            root: NIL,
        };
        Ok(t as u32)
    }

    fn pte_ptr<B: Backend>(be: &mut B, pt: u32, i: usize) -> u64 {
        let p = be.page(pt);
        let mut w = [0u8; 8];
        w.copy_from_slice(&p[i * 8..i * 8 + 8]);
        u64::from_le_bytes(w)
    }

    fn set_pte<B: Backend>(be: &mut B, pt: u32, i: usize, v: u64) {
        be.page(pt)[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }

    fn root_entry<B: Backend>(&self, be: &mut B, t: usize, r: usize) -> u32 {
        let root = self.tasks[t].root;
        if root == NIL {
            return NIL;
        }
        let p = be.page(root);
        let mut w = [0u8; 4];
        w.copy_from_slice(&p[r * 4..r * 4 + 4]);
        u32::from_le_bytes(w)
    }

    fn new_table<B: Backend>(&mut self, be: &mut B, fill: u8) -> Result<u32, MmError> {
        let f = self.get_free(be)?;
        be.page(f).fill(fill);
        self.frames[f as usize].kind = Kind::PageTable;
        self.page_tables += 1;
        Ok(f)
    }

    /// Ends a task: frees its pages, swap slots and page tables.
    pub fn task_exit<B: Backend>(&mut self, be: &mut B, t: u32) {
        let t = t as usize;
        assert!(self.tasks[t].used, "task {t} does not exist");
        let root = self.tasks[t].root;
        for r in 0..ROOT_ENTRIES {
            let pt = self.root_entry(be, t, r);
            if pt == NIL {
                continue;
            }
            for i in 0..512 {
                let pte = Self::pte_ptr(be, pt, i);
                if pte & PTE_PRESENT != 0 {
                    let f = (pte >> 12) as u32;
                    assert_eq!(self.frames[f as usize].pins, 0, "exit with a pinned page");
                    self.unlink(f);
                    self.anon -= 1;
                    self.put_free(f);
                } else if pte & PTE_SWAPPED != 0 {
                    self.swap_free((pte >> 12) as u32);
                }
            }
            self.page_tables -= 1;
            self.put_free(pt);
        }
        if root != NIL {
            self.page_tables -= 1;
            self.put_free(root);
        }
        self.tasks[t] = Task {
            used: false,
            root: NIL,
        };
    }

    /// The access path: returns the frame backing virtual page `vpn` of task `t`, faulting it
    /// in (zero-filled on first touch, read from swap after a swap-out) and setting the
    /// accessed bit, and the dirty bit when `write`. With `pin`, the frame cannot be reclaimed
    /// until [`Mm::unpin`].
    pub fn access<B: Backend>(
        &mut self,
        be: &mut B,
        t: u32,
        vpn: u64,
        write: bool,
        pin: bool,
    ) -> Result<u32, MmError> {
        let ti = t as usize;
        if ti >= MAX_TASKS || !self.tasks[ti].used {
            return Err(MmError::NotFound);
        }
        if vpn >= TASK_PAGES {
            return Err(MmError::BadAddress);
        }
        let (r, i) = ((vpn / 512) as usize, (vpn % 512) as usize);
        if self.tasks[ti].root == NIL {
            self.tasks[ti].root = self.new_table(be, 0xff)?;
        }
        let mut pt = self.root_entry(be, ti, r);
        if pt == NIL {
            pt = self.new_table(be, 0)?;
            let root = self.tasks[ti].root;
            be.page(root)[r * 4..r * 4 + 4].copy_from_slice(&pt.to_le_bytes());
        }
        let pte = Self::pte_ptr(be, pt, i);
        let wbit = if write { PTE_DIRTY } else { 0 };
        if pte & PTE_PRESENT != 0 {
            Self::set_pte(be, pt, i, pte | PTE_ACCESSED | wbit);
            let f = (pte >> 12) as u32;
            if pin {
                self.pin(f);
            }
            return Ok(f);
        }
        // Reclaim never changes a non-present entry, so `pte` stays current across allocations.
        let f;
        let mut new = PTE_PRESENT | PTE_ACCESSED | wbit;
        if pte & PTE_SWAPPED != 0 {
            let slot = (pte >> 12) as u32;
            if let Some((s, g)) = self.cache_find(SWAP_OWNER, slot) {
                // Brought in by swap readahead: take it out of the swap cache (a minor fault).
                self.cache_remove_slot(s);
                self.unlink(g);
                self.cached -= 1;
                self.counters.swap_ra_hits += 1;
                self.counters.pgfault += 1;
                f = g;
            } else {
                f = self.swap_in(be, slot)?;
                self.counters.pgmajfault += 1;
            }
            self.swap_free(slot);
            // The swap copy is gone, so the page must be written again if evicted.
            new |= PTE_DIRTY;
        } else {
            f = self.get_free(be)?;
            if self.params.zero_on_alloc {
                be.zero(f);
                self.counters.zeroed += 1;
            }
            self.counters.pgfault += 1;
        }
        new |= u64::from(f) << 12;
        Self::set_pte(be, pt, i, new);
        let fr = &mut self.frames[f as usize];
        fr.kind = Kind::Anon;
        fr.flags = 0;
        fr.owner = t;
        fr.index = vpn as u32; // vpn < TASK_PAGES < 2^32
        self.anon += 1;
        self.push_front(L_ANON_INACTIVE, f);
        if pin {
            self.pin(f);
        }
        Ok(f)
    }

    /// Reads swap slot `slot` into a new frame, with the other in-use slots of its aligned
    /// cluster of `1 << page_cluster` slots (Linux's swap readahead), in one request per run
    /// of consecutive slots. The neighbours go into the swap cache (clean, inactive), where the
    /// fault that wants them finds them.
    fn swap_in<B: Backend>(&mut self, be: &mut B, slot: u32) -> Result<u32, MmError> {
        let window = 1u32 << self.params.page_cluster.min(6);
        let start = slot & !(window - 1);
        let mut frames = [NIL; 64];
        frames[(slot - start) as usize] = self.get_free(be)?;
        for s in start..(start + window).min(self.swap_slots) {
            let k = (s - start) as usize;
            let in_use = self.swap_map[(s / 64) as usize] & (1 << (s % 64)) != 0;
            if s == slot || !in_use || self.cache_find(SWAP_OWNER, s).is_some() {
                continue;
            }
            if self.free_pages() <= self.params.low_free {
                break; // readahead must not cause reclaim
            }
            match self.get_free(be) {
                Ok(f) => frames[k] = f,
                Err(_) => break,
            }
        }
        let n = window as usize;
        let mut k = 0;
        while k < n {
            if frames[k] == NIL {
                k += 1;
                continue;
            }
            let mut run = 1;
            while k + run < n && frames[k + run] != NIL {
                run += 1;
            }
            self.counters.io_requests += 1;
            if let Err(e) = be.read(
                Dev::Swap,
                1 + u64::from(start) + k as u64,
                &frames[k..k + run],
            ) {
                for &f in frames[..n].iter().filter(|&&f| f != NIL) {
                    self.put_free(f);
                }
                return Err(e.into());
            }
            k += run;
        }
        for (k, &f) in frames[..n].iter().enumerate() {
            if f == NIL {
                continue;
            }
            self.counters.pswpin += 1;
            let s = start + k as u32;
            if s != slot {
                self.counters.swap_ra += 1;
                self.add_to_cache(f, SWAP_OWNER, s);
            }
        }
        Ok(frames[(slot - start) as usize])
    }

    /// Whether virtual page `vpn` of task `t` is resident, swapped or untouched:
    /// `(present, swapped)`.
    pub fn page_state<B: Backend>(&self, be: &mut B, t: u32, vpn: u64) -> (bool, bool) {
        let pt = self.root_entry(be, t as usize, (vpn / 512) as usize);
        if pt == NIL {
            return (false, false);
        }
        let pte = Self::pte_ptr(be, pt, (vpn % 512) as usize);
        (pte & PTE_PRESENT != 0, pte & PTE_SWAPPED != 0)
    }

    fn pin(&mut self, f: u32) {
        let fr = &mut self.frames[f as usize];
        fr.pins = fr.pins.checked_add(1).expect("too many pins on one page");
    }

    /// Releases a pin from [`Mm::access`] or [`Mm::file_page`].
    pub fn unpin(&mut self, f: u32) {
        let fr = &mut self.frames[f as usize];
        fr.pins = fr.pins.checked_sub(1).expect("unpin of an unpinned page");
    }

    // ---- files ----

    /// Reads the superblock and file table of the data disk.
    pub fn mount<B: Backend>(&mut self, be: &mut B) -> Result<(), MmError> {
        let scratch = self.alloc_kernel(be)?;
        let r = self.mount_with(be, scratch);
        self.free_kernel(scratch);
        r
    }

    fn mount_with<B: Backend>(&mut self, be: &mut B, scratch: u32) -> Result<(), MmError> {
        self.counters.io_requests += 1;
        be.read(Dev::Data, 0, &[scratch])?;
        let sb = Superblock::decode(be.page(scratch)).map_err(|_| MmError::BadFs)?;
        let n = (sb.nr_files as usize).min(MAX_FILES);
        for b in 0..n.div_ceil(ENTRIES_PER_BLOCK) {
            self.counters.io_requests += 1;
            be.read(Dev::Data, 1 + b as u64, &[scratch])?;
            for e in 0..ENTRIES_PER_BLOCK {
                let i = b * ENTRIES_PER_BLOCK + e;
                if i >= n {
                    break;
                }
                let slot = &be.page(scratch)[e * ENTRY_SIZE..(e + 1) * ENTRY_SIZE];
                self.files[i] = FileEntry::decode(slot, &sb).map_err(|_| MmError::BadFs)?;
            }
        }
        self.sb = Some(Superblock {
            nr_files: n as u32,
            ..sb
        });
        Ok(())
    }

    /// The file system's superblock, once mounted.
    pub fn superblock(&self) -> Option<&Superblock> {
        self.sb.as_ref()
    }

    /// Number of files.
    pub fn nr_files(&self) -> u32 {
        self.sb.map_or(0, |s| s.nr_files)
    }

    /// A file's table entry.
    pub fn file(&self, id: u32) -> Option<&FileEntry> {
        (id < self.nr_files()).then(|| &self.files[id as usize])
    }

    /// Finds a file by name.
    pub fn lookup(&self, name: &str) -> Option<u32> {
        (0..self.nr_files()).find(|&i| self.files[i as usize].name() == name)
    }

    /// Pages of a file.
    pub fn file_pages(&self, id: u32) -> u64 {
        self.file(id)
            .map_or(0, |f| f.size.div_ceil(PAGE_SIZE as u64))
    }

    /// Creates a file of `size` bytes in one extent (contents undefined until written) and
    /// writes the superblock and the table block to disk.
    pub fn file_create<B: Backend>(
        &mut self,
        be: &mut B,
        name: &str,
        size: u64,
    ) -> Result<u32, MmError> {
        let mut sb = self.sb.ok_or(MmError::BadFs)?;
        let id = sb.nr_files as usize;
        if id >= MAX_FILES.min(sb.max_files()) {
            return Err(MmError::NoSpace);
        }
        let blocks = size.div_ceil(BLOCK_SIZE as u64);
        let end = sb.next_free.checked_add(blocks).ok_or(MmError::NoSpace)?;
        if end > sb.total_blocks {
            return Err(MmError::NoSpace);
        }
        let mut e = FileEntry::new(name, size);
        e.extents[0] = Extent {
            start: sb.next_free,
            len: blocks,
        };
        sb.next_free = end;
        sb.nr_files += 1;
        self.files[id] = e;
        self.sb = Some(sb);
        let scratch = self.alloc_kernel(be)?;
        let r = self.write_meta(be, scratch, id);
        self.free_kernel(scratch);
        r.map(|()| id as u32)
    }

    fn write_meta<B: Backend>(
        &mut self,
        be: &mut B,
        scratch: u32,
        id: usize,
    ) -> Result<(), MmError> {
        let sb = self.sb.ok_or(MmError::BadFs)?;
        let b = id / ENTRIES_PER_BLOCK;
        let page = be.page(scratch);
        page.fill(0);
        for e in 0..ENTRIES_PER_BLOCK {
            let i = b * ENTRIES_PER_BLOCK + e;
            if i < sb.nr_files as usize {
                self.files[i].encode(&mut page[e * ENTRY_SIZE..(e + 1) * ENTRY_SIZE]);
            }
        }
        self.counters.io_requests += 2;
        be.write(Dev::Data, 1 + b as u64, &[scratch])?;
        sb.encode(be.page(scratch));
        be.write(Dev::Data, 0, &[scratch])?;
        Ok(())
    }

    // ---- page cache ----

    fn cache_find(&self, file: u32, index: u32) -> Option<(usize, u32)> {
        let mask = self.cache.len() - 1;
        let mut s = hash(file, index) as usize & mask;
        loop {
            let f = self.cache[s];
            if f == NIL {
                return None;
            }
            let fr = &self.frames[f as usize];
            if fr.owner == file && fr.index == index {
                return Some((s, f));
            }
            s = (s + 1) & mask;
        }
    }

    fn cache_insert(&mut self, f: u32) {
        let mask = self.cache.len() - 1;
        let fr = self.frames[f as usize];
        let mut s = hash(fr.owner, fr.index) as usize & mask;
        while self.cache[s] != NIL {
            s = (s + 1) & mask;
        }
        self.cache[s] = f;
        self.cache_len += 1;
    }

    /// Removes slot `s` with backward-shift deletion (linear probing, no tombstones).
    fn cache_remove_slot(&mut self, mut s: usize) {
        let mask = self.cache.len() - 1;
        self.cache[s] = NIL;
        self.cache_len -= 1;
        let mut j = s;
        loop {
            j = (j + 1) & mask;
            let f = self.cache[j];
            if f == NIL {
                return;
            }
            let fr = &self.frames[f as usize];
            let home = hash(fr.owner, fr.index) as usize & mask;
            // Move the entry back if its home is not cyclically within (s, j].
            let between = if s <= j {
                s < home && home <= j
            } else {
                s < home || home <= j
            };
            if !between {
                self.cache[s] = f;
                self.cache[j] = NIL;
                s = j;
            }
        }
    }

    /// Linux's `mark_page_accessed`: an inactive page referenced twice becomes active.
    fn mark_accessed(&mut self, f: u32) {
        let fr = self.frames[f as usize];
        if fr.list == L_FILE_INACTIVE && fr.flags & F_REFERENCED != 0 {
            self.unlink(f);
            self.frames[f as usize].flags &= !F_REFERENCED;
            self.push_front(L_FILE_ACTIVE, f);
            self.counters.pgactivate += 1;
        } else {
            self.frames[f as usize].flags |= F_REFERENCED;
        }
    }

    /// Returns the frame holding page `index` of file `file`, reading it (and up to
    /// `readahead_pages - 1` following pages, in one request) on a miss.
    pub fn file_page<B: Backend>(
        &mut self,
        be: &mut B,
        file: u32,
        index: u64,
        access: Access,
        pin: bool,
    ) -> Result<u32, MmError> {
        let pages = self.file_pages(file);
        if index >= pages {
            return Err(MmError::NotFound);
        }
        let idx = index as u32;
        let f = match self.cache_find(file, idx) {
            Some((_, f)) => {
                self.counters.cache_hits += 1;
                self.mark_accessed(f);
                f
            }
            None => {
                self.counters.cache_misses += 1;
                if access == Access::Overwrite {
                    let f = self.get_free(be)?;
                    self.add_to_cache(f, file, idx);
                    self.frames[f as usize].flags |= F_REFERENCED;
                    f
                } else {
                    self.read_pages(be, file, index, pages)?
                }
            }
        };
        if pin {
            self.pin(f);
        }
        if access != Access::Read && self.frames[f as usize].flags & F_DIRTY == 0 {
            self.frames[f as usize].flags |= F_DIRTY;
            self.dirty += 1;
            if self.dirty > self.params.dirty_limit {
                // balance_dirty_pages: the writer writes back down to the background level.
                self.pin(f);
                let r = self.writeback(be, self.params.dirty_background);
                self.unpin(f);
                r?;
            }
        }
        Ok(f)
    }

    fn add_to_cache(&mut self, f: u32, file: u32, idx: u32) {
        let fr = &mut self.frames[f as usize];
        fr.kind = Kind::File;
        fr.owner = file;
        fr.index = idx;
        self.cache_insert(f);
        self.cached += 1;
        self.push_front(L_FILE_INACTIVE, f);
    }

    /// Reads page `index` and the readahead window after it; returns the frame of `index`.
    fn read_pages<B: Backend>(
        &mut self,
        be: &mut B,
        file: u32,
        index: u64,
        pages: u64,
    ) -> Result<u32, MmError> {
        let (block, contig) = self.files[file as usize]
            .map(index)
            .ok_or(MmError::NotFound)?;
        let window = u64::from(self.params.readahead_pages.max(1))
            .min(pages - index)
            .min(contig)
            .min(MAX_BATCH as u64) as usize;
        let mut batch = [NIL; MAX_BATCH];
        let mut n = 0;
        while n < window {
            let i = (index + n as u64) as u32;
            if n > 0 && self.cache_find(file, i).is_some() {
                break;
            }
            match self.get_free(be) {
                Ok(f) => {
                    batch[n] = f;
                    n += 1;
                }
                Err(e) if n == 0 => return Err(e),
                Err(_) => break,
            }
        }
        self.counters.io_requests += 1;
        if let Err(e) = be.read(Dev::Data, block, &batch[..n]) {
            for &f in &batch[..n] {
                self.put_free(f);
            }
            return Err(e.into());
        }
        self.counters.pgpgin += n as u64;
        self.counters.readahead += n as u64 - 1;
        // Insert in reverse so the requested page ends up nearest the list head.
        for k in (0..n).rev() {
            self.add_to_cache(batch[k], file, (index + k as u64) as u32);
        }
        self.frames[batch[0] as usize].flags |= F_REFERENCED;
        Ok(batch[0])
    }

    /// Writes back the dirty run of pages starting at frame `f` (unpinned; up to [`MAX_BATCH`]
    /// unpinned pages of the same file, consecutive on disk) in one request.
    fn write_run<B: Backend>(&mut self, be: &mut B, f: u32) -> Result<u32, MmError> {
        let fr = self.frames[f as usize];
        let file = fr.owner;
        let (block, contig) = self.files[file as usize]
            .map(u64::from(fr.index))
            .ok_or(MmError::NotFound)?;
        let mut batch = [NIL; MAX_BATCH];
        batch[0] = f;
        let mut n = 1;
        while n < MAX_BATCH && (n as u64) < contig {
            match self.cache_find(file, fr.index + n as u32) {
                Some((_, g))
                    if self.frames[g as usize].flags & F_DIRTY != 0
                        && self.frames[g as usize].pins == 0 =>
                {
                    batch[n] = g;
                    n += 1;
                }
                _ => break,
            }
        }
        self.counters.io_requests += 1;
        be.write(Dev::Data, block, &batch[..n])?;
        for &g in &batch[..n] {
            self.frames[g as usize].flags &= !F_DIRTY;
        }
        self.dirty -= n as u32;
        self.counters.pgpgout += n as u64;
        Ok(n as u32)
    }

    /// Writes back dirty page-cache pages, oldest (inactive tail) first, until at most `target` are dirty.
    pub fn writeback<B: Backend>(&mut self, be: &mut B, target: u32) -> Result<(), MmError> {
        for list in [L_FILE_INACTIVE, L_FILE_ACTIVE] {
            let mut f = self.lists[usize::from(list)].tail;
            while f != NIL && self.dirty > target {
                let prev = self.frames[f as usize].prev;
                // A pinned page may be half-way through a change: its writer marks it dirty
                // when it pins it, so it is written on a later pass (Linux: the page lock).
                let fr = self.frames[f as usize];
                if fr.flags & F_DIRTY != 0 && fr.pins == 0 {
                    self.write_run(be, f)?;
                }
                f = prev;
            }
        }
        Ok(())
    }

    /// Writes every dirty page-cache page that is not pinned (`sync`; pinned pages are being
    /// changed and stay dirty).
    pub fn sync<B: Backend>(&mut self, be: &mut B) -> Result<(), MmError> {
        self.writeback(be, 0)
    }

    /// `sync; echo 1 > /proc/sys/vm/drop_caches`: writes dirty pages, then frees every
    /// unpinned page-cache page. Returns the pages dropped.
    pub fn drop_caches<B: Backend>(&mut self, be: &mut B) -> Result<u32, MmError> {
        self.sync(be)?;
        let mut dropped = 0;
        for list in [L_FILE_INACTIVE, L_FILE_ACTIVE] {
            let mut f = self.lists[usize::from(list)].tail;
            while f != NIL {
                let prev = self.frames[f as usize].prev;
                if self.frames[f as usize].pins == 0 {
                    self.evict_file(f);
                    dropped += 1;
                }
                f = prev;
            }
        }
        self.counters.dropped += u64::from(dropped);
        Ok(dropped)
    }

    fn evict_file(&mut self, f: u32) {
        let fr = self.frames[f as usize];
        debug_assert!(fr.flags & F_DIRTY == 0);
        let (s, _) = self
            .cache_find(fr.owner, fr.index)
            .expect("page-cache page missing from the hash table");
        self.cache_remove_slot(s);
        self.unlink(f);
        self.cached -= 1;
        self.put_free(f);
    }

    // ---- reclaim ----

    /// Frees pages until `target` are free or nothing more can be freed: scans the inactive
    /// lists from their tails in batches of 32 split between anon and file by swappiness
    /// (anon share = swappiness / 200 while swap slots are free), refilling an inactive list
    /// from its active list when it is smaller. Returns the pages freed.
    pub fn reclaim<B: Backend>(&mut self, be: &mut B, target: u32) -> Result<u32, MmError> {
        const BATCH: u32 = 32;
        let mut freed = 0;
        let lru = self.anon + self.cached;
        let mut budget = 4 * u64::from(lru) + u64::from(BATCH);
        while self.free_pages() < target && budget > 0 {
            let anon_ok = self.swap_used < self.swap_slots && self.anon > 0;
            let file_ok = self.cached > 0;
            let (na, nf) = match (anon_ok, file_ok) {
                (false, false) => break,
                (true, false) => (BATCH, 0),
                (false, true) => (0, BATCH),
                (true, true) => {
                    let a = BATCH * self.params.swappiness.min(200) / 200;
                    (a, BATCH - a)
                }
            };
            freed += self.shrink(be, L_FILE_INACTIVE, L_FILE_ACTIVE, nf)?;
            freed += self.shrink(be, L_ANON_INACTIVE, L_ANON_ACTIVE, na)?;
            budget = budget.saturating_sub(u64::from(BATCH));
        }
        Ok(freed)
    }

    fn anon_pte<B: Backend>(&self, be: &mut B, f: u32) -> (u32, usize, u64) {
        let fr = self.frames[f as usize];
        let pt = self.root_entry(be, fr.owner as usize, fr.index as usize / 512);
        let i = fr.index as usize % 512;
        (pt, i, Self::pte_ptr(be, pt, i))
    }

    fn shrink<B: Backend>(
        &mut self,
        be: &mut B,
        inactive: u8,
        active: u8,
        n: u32,
    ) -> Result<u32, MmError> {
        if n == 0 {
            return Ok(0);
        }
        // Refill the inactive list (Linux's inactive_is_low with ratio 1, below 1 GiB).
        let mut k = 0;
        while k < n && self.lists[usize::from(inactive)].len < self.lists[usize::from(active)].len {
            let f = self.lists[usize::from(active)].tail;
            self.unlink(f);
            if inactive == L_ANON_INACTIVE {
                let (pt, i, pte) = self.anon_pte(be, f);
                Self::set_pte(be, pt, i, pte & !PTE_ACCESSED);
            } else {
                self.frames[f as usize].flags &= !F_REFERENCED;
            }
            self.push_front(inactive, f);
            self.counters.pgdeactivate += 1;
            k += 1;
        }
        let mut freed = 0;
        // Anonymous victims are collected and written to swap in runs of consecutive slots.
        let mut victims = [NIL; MAX_BATCH];
        let mut slots = [0u32; MAX_BATCH];
        let mut nv = 0;
        for _ in 0..n {
            let f = self.lists[usize::from(inactive)].tail;
            if f == NIL {
                break;
            }
            self.counters.pgscan += 1;
            if self.frames[f as usize].pins > 0 {
                self.unlink(f);
                self.push_front(inactive, f);
                continue;
            }
            if inactive == L_ANON_INACTIVE {
                if let Some(slot) = self.anon_victim(be, f) {
                    // Off the LRU while its write is pending.
                    self.unlink(f);
                    victims[nv] = f;
                    slots[nv] = slot;
                    nv += 1;
                    if nv == MAX_BATCH {
                        freed += self.swap_out(be, &victims[..nv], &slots[..nv])?;
                        nv = 0;
                    }
                }
            } else {
                if self.frames[f as usize].flags & F_DIRTY != 0 {
                    self.write_run(be, f)?;
                }
                self.evict_file(f);
                freed += 1;
                self.counters.pgsteal += 1;
                self.counters.pgsteal_file += 1;
            }
        }
        if nv > 0 {
            freed += self.swap_out(be, &victims[..nv], &slots[..nv])?;
        }
        Ok(freed)
    }

    /// Decides about an inactive anonymous page: referenced pages get a second chance on the
    /// active list; otherwise a swap slot is allocated for it.
    fn anon_victim<B: Backend>(&mut self, be: &mut B, f: u32) -> Option<u32> {
        let (pt, i, pte) = self.anon_pte(be, f);
        debug_assert_eq!(pte >> 12, u64::from(f));
        if pte & PTE_ACCESSED != 0 {
            Self::set_pte(be, pt, i, pte & !PTE_ACCESSED);
            self.unlink(f);
            self.push_front(L_ANON_ACTIVE, f);
            self.counters.pgactivate += 1;
            return None;
        }
        let slot = self.swap_alloc();
        if slot.is_none() {
            self.unlink(f);
            self.push_front(L_ANON_ACTIVE, f);
        }
        slot
    }

    /// Writes the victims to their slots (one request per run of consecutive slots), points
    /// their PTEs at the slots and frees the frames.
    fn swap_out<B: Backend>(
        &mut self,
        be: &mut B,
        victims: &[u32],
        slots: &[u32],
    ) -> Result<u32, MmError> {
        let mut k = 0;
        while k < victims.len() {
            let mut run = 1;
            while k + run < victims.len() && slots[k + run] == slots[k] + run as u32 {
                run += 1;
            }
            self.counters.io_requests += 1;
            if let Err(e) = be.write(Dev::Swap, 1 + u64::from(slots[k]), &victims[k..k + run]) {
                // Nothing from here on was swapped: put the pages back, free their slots.
                for j in k..victims.len() {
                    self.swap_free(slots[j]);
                    self.push_front(L_ANON_ACTIVE, victims[j]);
                }
                return Err(e.into());
            }
            k += run;
        }
        for (&f, &slot) in victims.iter().zip(slots) {
            let (pt, i, _) = self.anon_pte(be, f);
            Self::set_pte(be, pt, i, (u64::from(slot) << 12) | PTE_SWAPPED);
            self.anon -= 1;
            self.put_free(f);
        }
        let n = victims.len() as u64;
        self.counters.pswpout += n;
        self.counters.pgsteal += n;
        self.counters.pgsteal_anon += n;
        Ok(victims.len() as u32)
    }

    // ---- reporting ----

    /// Counters and page counts.
    pub fn stats(&self) -> Stats {
        let len = |l: u8| self.lists[usize::from(l)].len;
        Stats {
            counters: self.counters,
            total: self.total(),
            free: self.free_pages(),
            cached: self.cached,
            dirty: self.dirty,
            anon: self.anon,
            page_tables: self.page_tables,
            balloon: self.balloon,
            kernel: self.kernel,
            swap_used: self.swap_used,
            swap_total: self.swap_slots,
            active: len(L_ANON_ACTIVE) + len(L_FILE_ACTIVE),
            inactive: len(L_ANON_INACTIVE) + len(L_FILE_INACTIVE),
        }
    }

    /// Checks the internal invariants (list links and lengths, kinds vs. lists, page-cache
    /// index, counts). Costs a pass over all frames.
    pub fn verify(&self) -> Result<(), &'static str> {
        for (l, list) in self.lists.iter().enumerate() {
            let mut count = 0u32;
            let mut f = list.head;
            let mut prev = NIL;
            while f != NIL {
                let fr = &self.frames[f as usize];
                if usize::from(fr.list) != l || fr.prev != prev {
                    return Err("broken list link");
                }
                count += 1;
                if count > self.total() {
                    return Err("list cycle");
                }
                prev = f;
                f = fr.next;
            }
            if list.tail != prev || list.len != count {
                return Err("list tail or length wrong");
            }
        }
        let mut by_kind = [0u32; 7];
        for (i, fr) in self.frames.iter().enumerate() {
            let want = match fr.kind {
                Kind::Free => fr.list == L_FREE,
                Kind::Anon => fr.list == L_ANON_ACTIVE || fr.list == L_ANON_INACTIVE,
                Kind::File => fr.list == L_FILE_ACTIVE || fr.list == L_FILE_INACTIVE,
                _ => fr.list == L_NONE,
            };
            if !want {
                return Err("frame kind and list disagree");
            }
            if fr.kind == Kind::File
                && self.cache_find(fr.owner, fr.index).map(|(_, f)| f) != Some(i as u32)
            {
                return Err("page-cache page not found by its key");
            }
            by_kind[fr.kind as usize] += 1;
        }
        let dirty = self
            .frames
            .iter()
            .filter(|f| f.kind == Kind::File && f.flags & F_DIRTY != 0)
            .count() as u32;
        if by_kind[Kind::Anon as usize] != self.anon
            || by_kind[Kind::File as usize] != self.cached
            || self.cache_len != self.cached
            || by_kind[Kind::PageTable as usize] != self.page_tables
            || by_kind[Kind::Balloon as usize] != self.balloon
            || dirty != self.dirty
        {
            return Err("page counts wrong");
        }
        let used: u32 = self.swap_map.iter().map(|w| w.count_ones()).sum();
        if used != self.swap_used {
            return Err("swap slot count wrong");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
