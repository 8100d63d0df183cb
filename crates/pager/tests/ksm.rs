//! What KSM does to memory registered with userfaultfd on this kernel ([docs/sharing.md]).
//!
//! The pager write-protects pages with userfaultfd (clean pages, the Swap Mapper's mirrors, the
//! victim cache) and relies on the first write faulting to it. KSM merges identical pages by
//! replacing their page table entries with a read-only mapping of one shared page; if that
//! replacement dropped the uffd-wp bit, a guest write would break the copy-on-write silently
//! and the pager would never see it. These tests run KSM for real (the host's knobs are put
//! back afterwards) and check, on pages registered in MISSING and WRITE_PROTECT modes as the
//! pager registers guest RAM:
//! - identical pages are merged, and pages filled with zeros become the zero page with
//!   `use_zero_pages`;
//! - a write to a merged page that was write-protected before the merge still faults to
//!   userfaultfd (and a write to a merged page that was not protected breaks the sharing
//!   without one).
//!
//! They need root and a kernel with KSM; without either they say so and pass.

use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::time::Duration;

use common::wait_until;
use userfaultfd::{Event, RegisterMode, UffdBuilder};

mod common;

/// The longest a test waits for KSM, which scans in its own time.
const WAIT: Duration = Duration::from_secs(60);

const PAGE: usize = 4096;
const KSM: &str = "/sys/kernel/mm/ksm";

/// One test at a time drives the host's KSM.
static KSM_LOCK: Mutex<()> = Mutex::new(());

/// KSM's knobs as they were, put back on drop.
struct Knobs(Vec<(&'static str, String)>);

impl Knobs {
    /// Turns KSM on, scanning fast; `None` when this host has no KSM or we may not drive it.
    fn fast(zero_pages: bool) -> Option<Knobs> {
        let names = ["run", "pages_to_scan", "sleep_millisecs", "use_zero_pages"];
        let mut saved = Vec::new();
        for n in names {
            saved.push((n, std::fs::read_to_string(format!("{KSM}/{n}")).ok()?));
        }
        let knobs = Knobs(saved);
        let set = |n: &str, v: &str| std::fs::write(format!("{KSM}/{n}"), v).is_ok();
        // use_zero_pages can only change while ksmd has nothing merged in some kernels; set it first.
        if !(set("use_zero_pages", if zero_pages { "1" } else { "0" })
            && set("pages_to_scan", "5000")
            && set("sleep_millisecs", "10")
            && set("run", "1"))
        {
            return None;
        }
        Some(knobs)
    }
}

impl Drop for Knobs {
    fn drop(&mut self) {
        // `run` last, so the scan rate is back before ksmd runs (or stops) with it.
        for (n, v) in self.0.iter().rev() {
            let _ = std::fs::write(format!("{KSM}/{n}"), v.trim());
        }
    }
}

/// This process's `/proc/self/ksm_stat` field `name`.
fn ksm_stat(name: &str) -> u64 {
    std::fs::read_to_string("/proc/self/ksm_stat")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0)
}

/// An anonymous private mapping of `pages` pages, with a view of it as bytes.
struct Area {
    ptr: *mut u8,
    len: usize,
}

impl Area {
    fn new(pages: usize) -> Area {
        let len = pages * PAGE;
        // SAFETY: a fresh anonymous mapping, owned by the returned `Area`.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        Area {
            ptr: ptr.cast(),
            len,
        }
    }

    fn page(&self, p: usize) -> *mut u8 {
        assert!(p * PAGE < self.len);
        // SAFETY: inside the mapping (checked above).
        unsafe { self.ptr.add(p * PAGE) }
    }

    fn fill(&self, p: usize, byte: u8) {
        // SAFETY: one page inside the mapping, which nothing else uses yet.
        unsafe { std::ptr::write_bytes(self.page(p), byte, PAGE) };
    }

    fn mergeable(&self) {
        // SAFETY: the advice only marks the mapping for KSM; contents stay the same.
        let rc = unsafe { libc::madvise(self.ptr.cast(), self.len, libc::MADV_MERGEABLE) };
        assert_eq!(rc, 0, "MADV_MERGEABLE: {}", std::io::Error::last_os_error());
    }
}

impl Drop for Area {
    fn drop(&mut self) {
        // SAFETY: the mapping this `Area` made.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Writes one byte to page `p` of `area` from another thread and says whether that write
/// faulted to `uffd` as a write-protect fault (then the fault is resolved by unprotecting the
/// page) or went through without one.
fn write_faults(uffd: &userfaultfd::Uffd, area: &Area, p: usize) -> bool {
    let at = area.page(p) as usize;
    let writer = std::thread::spawn(move || {
        // SAFETY: `at` is a page of the live mapping the caller owns until we join.
        unsafe { std::ptr::write_volatile((at + 8) as *mut u8, 0x77) };
    });
    let mut faulted = false;
    loop {
        let mut pfd = libc::pollfd {
            fd: uffd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, 50) };
        if let Some(Event::Pagefault { kind, addr, .. }) = uffd.read_event().unwrap() {
            assert_eq!(addr as usize & !(PAGE - 1), at);
            assert_eq!(kind, userfaultfd::FaultKind::WriteProtected);
            faulted = true;
            uffd.remove_write_protection(at as *mut _, PAGE, true)
                .unwrap();
        }
        if writer.is_finished() {
            break;
        }
    }
    writer.join().unwrap();
    faulted
}

#[test]
fn a_merge_drops_userfaultfd_write_protection() {
    let _one = KSM_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_knobs) = Knobs::fast(true) else {
        eprintln!("skipped: no KSM on this host, or not allowed to drive it");
        return;
    };
    // Pages 0-3 hold one content, 4-7 another, 8-11 zeros (written, so present), 12 its own.
    let area = Area::new(13);
    area.fill(12, 0xee);
    for p in 0..4 {
        area.fill(p, 0xa5);
        area.fill(p + 4, 0x3c);
        area.fill(p + 8, 0);
    }
    let uffd = UffdBuilder::new()
        .close_on_exec(true)
        .non_blocking(true)
        .user_mode_only(false)
        .create()
        .unwrap();
    uffd.register_with_mode(
        area.ptr.cast(),
        area.len,
        RegisterMode::MISSING | RegisterMode::WRITE_PROTECT,
    )
    .unwrap();
    // Protected before the merge: pages 0, 1 (of the first content), 8 (zeros) and 12.
    uffd.write_protect(area.page(0).cast(), 2 * PAGE).unwrap();
    uffd.write_protect(area.page(8).cast(), PAGE).unwrap();
    uffd.write_protect(area.page(12).cast(), PAGE).unwrap();
    area.mergeable();

    wait_until("KSM merges the registered pages", WAIT, || {
        ksm_stat("ksm_merging_pages") >= 8 && ksm_stat("ksm_zero_pages") >= 4
    });
    eprintln!(
        "merged: ksm_merging_pages {}, ksm_zero_pages {}",
        ksm_stat("ksm_merging_pages"),
        ksm_stat("ksm_zero_pages")
    );

    // A protected page that is not merged (its content is its own) faults, as the pager expects.
    assert!(
        write_faults(&uffd, &area, 12),
        "a write to a protected page did not fault"
    );
    let merged = write_faults(&uffd, &area, 0);
    let zero = write_faults(&uffd, &area, 8);
    let unprotected = write_faults(&uffd, &area, 4);
    eprintln!("a write faults: merged while protected {merged}, zero page merged while protected {zero}, merged unprotected {unprotected}");
    assert!(
        !unprotected,
        "a write to a merged, unprotected page faulted"
    );
    // What the pager's exclusion rests on (docs/sharing.md): on this kernel a merge replaces
    // the page table entry without its uffd-wp bit, so the write is not seen.
    assert!(
        !merged && !zero,
        "a merge kept the write protection on this kernel (merged {merged}, zero {zero}): the pager's exclusion of protected pages from KSM may no longer be needed"
    );
    // Every page still holds what was written, the writes included.
    for p in 0..12 {
        // SAFETY: a page of the live mapping, read only.
        let bytes = unsafe { std::slice::from_raw_parts(area.page(p), PAGE) };
        let base = [0xa5, 0x3c, 0][p / 4];
        for (i, &b) in bytes.iter().enumerate() {
            let want = if i == 8 && matches!(p, 0 | 4 | 8) {
                0x77
            } else {
                base
            };
            assert_eq!(b, want, "page {p} byte {i}");
        }
    }
}
