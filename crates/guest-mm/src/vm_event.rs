//! What the memory manager counts (Linux's `vm_event_item.h`): the VM event counters under
//! `/proc/vmstat`'s names ([`VmEvents`]), and with them the current page counts ([`Stats`]). A
//! leaf: [`Mm`](crate::Mm) holds the counters and `vmstat.rs` reads them out.

/// The VM event counters (Linux's `vm_event_state`, with `/proc/vmstat`'s names where they
/// exist).
#[derive(Clone, Copy, Debug, Default)]
pub struct VmEvents {
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

/// The event counters plus the current page counts.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    /// Event counters.
    pub events: VmEvents,
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
