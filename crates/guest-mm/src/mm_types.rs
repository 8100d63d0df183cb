//! Basic types of the memory manager, a leaf module that imports nothing of its crate (Linux's
//! `mm_types.h`, `page-flags.h` and `pgtable_types.h`): the page size, the "no frame" index,
//! the page-cache owner of swap-cache pages, the bits of a software page-table entry, a task's
//! address space (Linux's `mm_struct`), how a page-cache page will be used ([`Access`]), per-frame metadata ([`Frame`], Linux's `struct page`)
//! with its flags, and the heads of the intrusive frame lists.

/// Page size (and block size of both disks).
pub const PAGE_SIZE: usize = 4096;
/// "No frame" in lists, tables and page directories.
pub const NIL: u32 = u32::MAX;
/// Page-cache owner of swap-cache pages (the file number is the slot's owner, the index its slot).
pub(crate) const SWAP_OWNER: u32 = u32::MAX - 1;

/// Bits of a software PTE; the frame, or the swap slot of a swapped page, is in bits 12 and up.
pub(crate) const PTE_PRESENT: u64 = 1;
pub(crate) const PTE_ACCESSED: u64 = 2;
pub(crate) const PTE_DIRTY: u64 = 4;
pub(crate) const PTE_SWAPPED: u64 = 8;

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

/// A task's address space: the frame of its root directory (1024 little-endian u32 frame
/// numbers of page-table frames, `NIL` where none), allocated at its first fault.
#[derive(Clone, Copy)]
pub(crate) struct Task {
    pub(crate) used: bool,
    pub(crate) root: u32,
}

/// What a page frame currently holds, the kind of page it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageKind {
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

pub(crate) const F_REFERENCED: u8 = 1;
pub(crate) const F_DIRTY: u8 = 2;
pub(crate) const F_REPORTED: u8 = 4;

pub(crate) const L_NONE: u8 = 0;
pub(crate) const L_FREE: u8 = 1;
pub(crate) const L_ANON_INACTIVE: u8 = 2;
pub(crate) const L_ANON_ACTIVE: u8 = 3;
pub(crate) const L_FILE_INACTIVE: u8 = 4;
pub(crate) const L_FILE_ACTIVE: u8 = 5;
pub(crate) const NR_LISTS: usize = 6;

/// Per-page metadata (Linux's `struct page`, 20 bytes).
#[derive(Clone, Copy, Debug)]
pub struct Frame {
    pub(crate) prev: u32,
    pub(crate) next: u32,
    pub(crate) owner: u32,
    pub(crate) index: u32,
    pub(crate) kind: PageKind,
    pub(crate) list: u8,
    pub(crate) flags: u8,
    pub(crate) pins: u8,
}

impl Frame {
    /// A frame before [`Mm::new`](crate::Mm::new) puts it on the free list.
    pub const INIT: Frame = Frame {
        prev: NIL,
        next: NIL,
        owner: 0,
        index: 0,
        kind: PageKind::Kernel,
        list: L_NONE,
        flags: 0,
        pins: 0,
    };
}

#[derive(Clone, Copy)]
pub(crate) struct List {
    pub(crate) head: u32,
    pub(crate) tail: u32,
    pub(crate) len: u32,
}

pub(crate) const EMPTY_LIST: List = List {
    head: NIL,
    tail: NIL,
    len: 0,
};
