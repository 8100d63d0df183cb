//! Taking guest RAM over at run time, so a VM with no limit runs on plain memory with
//! transparent huge pages, as fast as under QEMU, and the pager still takes over the moment a
//! limit arrives.
//!
//! Until then (or a release, `release.rs`) RAM is not registered with userfaultfd: no fault reaches the pager, devices write plain
//! memory, and the state table only records what the balloon takes and, with the Swap Mapper,
//! the pages guest disk reads filled (resident mirrors, writable, with their digests). [`Takeover::attach`]
//! then, under the page lock:
//! 1. stops new huge pages (`MADV_NOHUGEPAGE`) and registers RAM in MISSING and WRITE_PROTECT
//!    modes: from here on a touch of an absent page faults to the pager (and waits for the lock);
//! 2. finds what the guest touched with one `PAGEMAP_SCAN` of each mapping;
//! 3. turns mappings of the shared zero page into holes: a write to one would copy it with no
//!    fault, behind the pager's back. They are write-protected first, scanned again, and only
//!    those still mapping the zero page are dropped, so a write that raced the first scan is kept
//!    (and its page, now write-protected, counts as resident; its next write unprotects it);
//! 4. records every present page as resident (a mirror stays a mirror), and every huge page for
//!    reclaim.
//!
//! The pager drops 4 KiB pages. Dropping part of a huge page unmaps it but frees nothing until
//! the whole huge page goes (the kernel splits it only when memory runs short), so before the
//! first drop inside a huge page every drop splits it (`MADV_COLD` on one 4 KiB page
//! of it splits the huge page into 4 KiB ones): see [`split_huge`], which reclaim, instant
//! release, the balloon, free page reporting and sampling call.
//!
//! A kernel without `PAGEMAP_SCAN` (before Linux 6.7) gets the pager from the start instead.
//!
//! The [`Takeover`] owns the page map it scans and borrows the core; what it records (whether
//! RAM is registered, and the huge pages not split yet) changes only under the page lock, so it
//! stays in [`Pages`].

use crate::core::{PagerCore, PagerError, Pages};
use crate::page::{PageIdx, PAGE_SIZE};
use crate::stats::EventCounters;
use crate::sys::pagemap::{PageMap, PageRegion, PAGE_IS_HUGE, PAGE_IS_PFNZERO, PAGE_IS_PRESENT};

pub(crate) const HUGE_PAGE: u64 = 2 << 20;

/// Taking guest RAM over at run time (see the module doc): the page map it scans; it works on
/// the core it is handed.
pub(crate) struct Takeover {
    /// How RAM is taken over at run time; `None`: this kernel cannot scan its page map, so RAM
    /// is registered from the start.
    pagemap: Option<PageMap>,
}

impl Takeover {
    pub fn new() -> Self {
        Takeover {
            pagemap: PageMap::open(),
        }
    }

    /// Whether RAM can be taken over at run time (the kernel scans its page map); if not, it
    /// is registered from the start.
    pub(crate) fn at_run_time(&self) -> bool {
        self.pagemap.is_some()
    }

    /// Guest pages the host holds before the pager has taken RAM over: present in the page
    /// map, less mappings of the shared zero page (they hold no memory). `None` without
    /// `PAGEMAP_SCAN` (then RAM was taken over at the start) or when a scan fails.
    pub(crate) fn present_pages(&self, core: &PagerCore) -> Option<u64> {
        let pagemap = self.pagemap.as_ref()?;
        let mut pages = 0u64;
        for (host, len) in core.map.host_ranges() {
            for r in pagemap
                .scan(host, host + len as u64, PAGE_IS_PRESENT, PAGE_IS_PFNZERO)
                .ok()?
            {
                if r.categories & PAGE_IS_PFNZERO == 0 {
                    pages += (r.end - r.start) / PAGE_SIZE as u64;
                }
            }
        }
        Some(pages)
    }

    /// Registers guest RAM with userfaultfd and records what the guest has touched (see the
    /// module docs). Does nothing if RAM is registered already.
    pub(crate) fn attach(&self, core: &PagerCore, pages: &mut Pages) -> Result<(), PagerError> {
        if pages.attached {
            return Ok(());
        }
        let t0 = std::time::Instant::now();
        let ranges: Vec<(u64, usize)> = core.map.host_ranges().collect();
        for &(host, len) in &ranges {
            // SAFETY: `host..host + len` is one live guest RAM mapping; the advice only changes
            // how the kernel backs it, never its contents.
            if unsafe { libc::madvise(host as *mut _, len, libc::MADV_NOHUGEPAGE) } != 0 {
                return Err(PagerError::Attach(std::io::Error::last_os_error()));
            }
            core.uffd
                .register(host, len)
                .map_err(PagerError::Register)?;
        }
        pages.attached = true;
        let Some(pagemap) = &self.pagemap else {
            // Registered before the guest ran: nothing is present.
            return Ok(());
        };
        let scan = |start, end, all, report| {
            pagemap
                .scan(start, end, all, report)
                .map_err(PagerError::Attach)
        };
        let mut zero = Vec::new();
        for &(host, len) in &ranges {
            for r in scan(
                host,
                host + len as u64,
                PAGE_IS_PRESENT,
                PAGE_IS_PFNZERO | PAGE_IS_HUGE,
            )? {
                if r.categories & PAGE_IS_PFNZERO != 0 {
                    zero.push(r);
                } else if r.categories & PAGE_IS_HUGE != 0 {
                    let mut b = r.start & !(HUGE_PAGE - 1);
                    while b < r.end {
                        pages.huge.insert(b);
                        b += HUGE_PAGE;
                    }
                }
            }
        }
        let mut dropped = 0u64;
        for z in &zero {
            for r in
                drop_zero_mappings(core, pagemap, z.start, z.end).map_err(PagerError::Attach)?
            {
                dropped += (r.end - r.start) / PAGE_SIZE as u64;
            }
        }
        let mut resident = 0u64;
        for &(host, len) in &ranges {
            for r in scan(host, host + len as u64, PAGE_IS_PRESENT, 0)? {
                let first = core.map.page_of_host(r.start);
                let n = (r.end - r.start) / PAGE_SIZE as u64;
                if let Some(first) = first {
                    let n = PageIdx::try_from(n).unwrap_or(0);
                    for p in first..first + n {
                        pages.table.seed_resident(p);
                    }
                    resident += u64::from(n);
                }
            }
        }
        EventCounters::add(&core.counters.attaches, 1);
        tracing::info!(
            "pager: took over guest RAM in {:.1} ms: {resident} pages resident ({} huge pages), {dropped} zero-page mappings dropped",
            t0.elapsed().as_secs_f64() * 1e3,
            pages.huge.len()
        );
        Ok(())
    }
}

/// Drops the mappings of the shared zero page in guest RAM's `start..end` (host addresses, in
/// one mapping) and returns the regions dropped. The range is write-protected first and scanned
/// again, and only what still maps the zero page is dropped, so a guest write that came first
/// is kept (its page stays, write-protected: its next write unprotects it) and one that comes
/// later waits on the protection, is woken when its fault is served (or by the caller), and
/// faults into the hole. The caller holds the page lock.
pub(crate) fn drop_zero_mappings(
    core: &PagerCore,
    pagemap: &PageMap,
    start: u64,
    end: u64,
) -> std::io::Result<Vec<PageRegion>> {
    let len = usize::try_from(end - start).unwrap_or(usize::MAX);
    core.uffd.write_protect(start, len)?;
    let zero = pagemap.scan(start, end, PAGE_IS_PRESENT | PAGE_IS_PFNZERO, 0)?;
    for r in &zero {
        let len = usize::try_from(r.end - r.start).unwrap_or(usize::MAX);
        // SAFETY: `r` lies in a guest RAM mapping and maps only the shared zero page
        // (write-protected, so it still does): dropping it loses nothing.
        if unsafe { libc::madvise(r.start as *mut _, len, libc::MADV_DONTNEED) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(zero)
}

/// Splits the huge pages that the run `first..first + n` (one mapping) lies in but does not
/// cover, if they are still whole, so dropping part of one frees its memory; a huge page the
/// run covers is freed whole by the drop and only forgotten. Every drop of guest pages
/// after the takeover calls it first: reclaim, instant release, the balloon, free page
/// reporting and working-set samples.
pub(crate) fn split_huge(core: &PagerCore, pages: &mut Pages, first: PageIdx, n: u32) {
    if pages.huge.is_empty() {
        return;
    }
    let start = core.map.host(first);
    let end = start + u64::from(n) * PAGE_SIZE as u64;
    let mut b = start & !(HUGE_PAGE - 1);
    while b < end {
        if pages.huge.remove(&b) && (b < start || b + HUGE_PAGE > end) {
            // One 4 KiB page of the run inside this huge page.
            let at = b.max(start);
            // SAFETY: `at` is a page of guest RAM the caller is about to drop; MADV_COLD
            // only splits and deactivates, it never changes contents.
            if unsafe { libc::madvise(at as *mut _, PAGE_SIZE, libc::MADV_COLD) } == 0 {
                EventCounters::add(&core.counters.huge_pages_split, 1);
            } else {
                tracing::debug!(
                    "pager: cannot split the huge page at {b:#x}: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
        b += HUGE_PAGE;
    }
}
