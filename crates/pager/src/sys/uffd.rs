//! The userfaultfd calls the pager makes, with errno turned into typed errors.
//!
//! Guest RAM is registered in MISSING and WRITE_PROTECT modes and reports kernel-mode faults too
//! (KVM's faults, and `pread` into guest memory, are kernel-mode). Only the pager thread reads
//! fault events; any thread may install pages. Every call that fills or protects a range takes
//! a run of whole pages inside one RAM mapping.
//!
//! **Sharing** (`--sharing host`, [docs/sharing.md]): on this kernel a KSM merge replaces a page
//! table entry without its uffd-wp bit (`crates/pager/tests/ksm.rs` shows it), so a guest write
//! to a page merged while the pager protected it would break the copy-on-write without a fault,
//! behind the pager's back. When RAM is shared, every call here keeps one rule: **a page the
//! pager protects is never in a mergeable range.** A range is made unmergeable
//! (`MADV_UNMERGEABLE`, which also un-merges it) before it is protected or filled protected, and
//! mergeable again once it is filled or unprotected without protection. Every protect and
//! unprotect runs under the page lock, so two of them never interleave on one page.

use std::os::fd::{AsRawFd, RawFd};

use thiserror::Error;
use userfaultfd::{Event, EventBuffer, FaultKind, ReadWrite, RegisterMode, Uffd, UffdBuilder};
use userfaultfd_sys::{
    uffdio_copy, uffdio_range, uffdio_writeprotect, uffdio_zeropage, UFFDIO_COPY,
    UFFDIO_COPY_MODE_WP, UFFDIO_WAKE, UFFDIO_WRITEPROTECT, UFFDIO_WRITEPROTECT_MODE_WP,
    UFFDIO_ZEROPAGE,
};

/// `struct uffdio_move` (Linux 6.8; not in `userfaultfd-sys`).
#[repr(C)]
struct UffdioMove {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    /// Bytes moved (a negated errno when none).
    moved: i64,
}

/// `UFFDIO_MOVE`: `_IOWR(0xAA, 0x05, struct uffdio_move)`.
const UFFDIO_MOVE: u32 = 0xC028_AA05;

/// Why a userfaultfd call failed.
#[derive(Debug, Error)]
pub enum UffdError {
    /// A page of the range is mapped already (`EEXIST`): someone installed it first.
    #[error("a page of the range is already mapped")]
    PageExists,
    /// The range is no longer registered, or the process is exiting (`ENOENT`, `ESRCH`).
    #[error("the range is no longer registered guest memory")]
    RangeGone,
    #[error("userfaultfd call failed")]
    Io(#[source] std::io::Error),
}

impl UffdError {
    fn last() -> Self {
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EEXIST) => UffdError::PageExists,
            Some(libc::ENOENT | libc::ESRCH) => UffdError::RangeGone,
            _ => UffdError::Io(e),
        }
    }
}

/// A `UFFDIO_COPY` or `UFFDIO_ZEROPAGE` that stopped partway: the first `pages` pages of the
/// range are in place (the caller must record them), the rest are not.
#[derive(Debug, Error)]
#[error("{error} (after {pages} pages of the run were installed)")]
pub struct CopyError {
    pub pages: u32,
    #[source]
    pub error: UffdError,
}

impl From<CopyError> for std::io::Error {
    fn from(e: CopyError) -> Self {
        std::io::Error::other(e)
    }
}

impl From<UffdError> for std::io::Error {
    fn from(e: UffdError) -> Self {
        match e {
            UffdError::Io(e) => e,
            other => std::io::Error::other(other),
        }
    }
}

/// One fault event.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fault {
    /// Host address that faulted.
    pub addr: u64,
    /// A write (for a missing fault) or a write to a write-protected page.
    pub write: bool,
    /// The page is mapped and write-protected (otherwise: not mapped).
    pub protected: bool,
    /// Thread id of the faulting thread.
    pub tid: i32,
}

/// The pager's userfaultfd.
pub(crate) struct Userfault {
    uffd: Uffd,
    /// `UFFDIO_MOVE` is tried (off only to try the copies a kernel before 6.8 gets).
    moves: std::sync::atomic::AtomicBool,
    /// Guest RAM is mergeable by KSM: protected ranges are taken out of it (module docs).
    sharing: bool,
}

impl Userfault {
    /// A non-blocking userfaultfd that reports kernel-mode faults and the faulting thread.
    pub fn new(sharing: bool) -> Result<Self, userfaultfd::Error> {
        let uffd = UffdBuilder::new()
            .close_on_exec(true)
            .non_blocking(true)
            .user_mode_only(false)
            .require_features(userfaultfd::FeatureFlags::THREAD_ID)
            .create()?;
        Ok(Userfault {
            uffd,
            moves: std::sync::atomic::AtomicBool::new(true),
            sharing,
        })
    }

    /// With sharing on, marks `len` bytes at `start` mergeable or not (`MADV_MERGEABLE`,
    /// `MADV_UNMERGEABLE`; the latter un-merges the range's merged pages first).
    fn mergeable(&self, start: u64, len: usize, yes: bool) -> Result<(), UffdError> {
        if !self.sharing {
            return Ok(());
        }
        let advice = if yes {
            libc::MADV_MERGEABLE
        } else {
            libc::MADV_UNMERGEABLE
        };
        // SAFETY: `start..start + len` lies in one guest RAM mapping (every caller's contract);
        // the advice changes whether KSM may merge it, never its contents.
        if unsafe { libc::madvise(start as *mut _, len, advice) } == 0 {
            Ok(())
        } else {
            Err(UffdError::Io(std::io::Error::last_os_error()))
        }
    }

    /// Registers `len` bytes at `host` in MISSING and WRITE_PROTECT modes.
    pub fn register(&self, host: u64, len: usize) -> Result<(), userfaultfd::Error> {
        self.uffd
            .register_with_mode(
                host as *mut _,
                len,
                RegisterMode::MISSING | RegisterMode::WRITE_PROTECT,
            )
            .map(|_| ())
    }

    /// Registers `len` bytes at `host` in MISSING mode only: memory the pager moves pages into
    /// ([`Self::move_pages`] needs its destination registered), never filled on a fault.
    pub fn register_missing(&self, host: u64, len: usize) -> Result<(), userfaultfd::Error> {
        self.uffd
            .register_with_mode(host as *mut _, len, RegisterMode::MISSING)
            .map(|_| ())
    }

    /// Moves the `len` bytes of mapped pages at `src` to the empty, registered range at `dst`
    /// (`UFFDIO_MOVE`): their page table entries change hands, nothing is copied, and `src`
    /// is missing afterwards. Refused for a page the process does not hold alone (KSM-merged,
    /// pinned) and across mappings; then the caller keeps what moved and leaves the rest. On
    /// failure: the bytes moved, and why.
    pub fn move_pages(&self, src: u64, dst: u64, len: usize) -> Result<(), (usize, UffdError)> {
        if !self.moves.load(std::sync::atomic::Ordering::Relaxed) {
            let e = std::io::Error::from_raw_os_error(libc::ENOTTY);
            return Err((0, UffdError::Io(e)));
        }
        self.fill(dst, len, |at, n| {
            let off = at - dst;
            let mut m = UffdioMove {
                dst: at,
                src: src + off,
                len: n as u64,
                mode: 0,
                moved: 0,
            };
            self.ioctl(UFFDIO_MOVE, &mut m)
                .map_err(|e| (usize::try_from(m.moved).unwrap_or(0), e))
        })
    }

    /// From now on [`Self::move_pages`] fails as on a kernel without `UFFDIO_MOVE`.
    pub fn without_moves(&self) {
        self.moves
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }

    /// Runs one userfaultfd ioctl on `arg`.
    fn ioctl<T>(&self, request: u32, arg: &mut T) -> Result<(), UffdError> {
        // SAFETY: every caller passes the argument struct that `request` is defined with; the
        // kernel checks the ranges in it against the registered mappings.
        let rc = unsafe { libc::ioctl(self.uffd.as_raw_fd(), request.into(), arg as *mut T) };
        if rc == 0 {
            Ok(())
        } else {
            Err(UffdError::last())
        }
    }

    /// Fills the missing pages at `dst` with `len` bytes from `src` (wakes their waiters);
    /// write-protected if `write_protect`. A partial copy is continued until done; a copy that
    /// fails after some pages went in says how many did, so the caller records them.
    ///
    /// # Safety
    /// `src..src + len` must be readable host memory for the whole call.
    pub unsafe fn copy(
        &self,
        src: *const u8,
        dst: u64,
        len: usize,
        write_protect: bool,
    ) -> Result<(), CopyError> {
        if write_protect {
            self.mergeable(dst, len, false)
                .map_err(|error| CopyError { pages: 0, error })?;
        }
        self.fill(dst, len, |at, n| {
            let off = at - dst;
            let mut c = uffdio_copy {
                dst: at,
                src: src as u64 + off,
                len: n as u64,
                mode: if write_protect {
                    UFFDIO_COPY_MODE_WP
                } else {
                    0
                },
                copy: 0,
            };
            // On failure `copy` holds the bytes copied before it (a negated errno when none).
            self.ioctl(UFFDIO_COPY, &mut c)
                .map_err(|e| (usize::try_from(c.copy).unwrap_or(0), e))
        })
        .map_err(|(done, error)| CopyError {
            pages: u32::try_from(done / crate::page::PAGE_SIZE).unwrap_or(u32::MAX),
            error,
        })?;
        if !write_protect {
            self.may_merge(dst, len);
        }
        Ok(())
    }

    /// With sharing on, lets KSM merge `len` bytes at `start` again (none of it is protected).
    /// A failure only costs sharing: logged, not returned.
    fn may_merge(&self, start: u64, len: usize) {
        if let Err(e) = self.mergeable(start, len, true) {
            tracing::debug!("pager: cannot make {len} bytes at {start:#x} mergeable again: {e}");
        }
    }

    /// Maps the shared zero page at the `len` missing bytes at `dst` and wakes their waiters. A
    /// call that fails after some pages were mapped says how many were, as [`Self::copy`] does.
    pub fn zeropage(&self, dst: u64, len: usize) -> Result<(), CopyError> {
        self.fill(dst, len, |at, n| {
            let mut z = uffdio_zeropage {
                range: uffdio_range {
                    start: at,
                    len: n as u64,
                },
                mode: 0,
                zeropage: 0,
            };
            // On failure `zeropage` holds the bytes mapped before it (a negated errno when none).
            self.ioctl(UFFDIO_ZEROPAGE, &mut z)
                .map_err(|e| (usize::try_from(z.zeropage).unwrap_or(0), e))
        })
        .map_err(|(done, error)| CopyError {
            pages: u32::try_from(done / crate::page::PAGE_SIZE).unwrap_or(u32::MAX),
            error,
        })
    }

    /// Runs a filling call (`UFFDIO_COPY`, `UFFDIO_ZEROPAGE`, `UFFDIO_MOVE`) over `len` bytes at `dst`: `call(at,
    /// n)` fills `n` bytes at `at`, or fails after some bytes with an error. A call that is
    /// interrupted goes on from where it stopped. One call fills only inside one mapping (VMA),
    /// and guest RAM is one mapping until something splits it: with sharing on, every protected
    /// run is split off as unmergeable. A run that crosses such a boundary is refused whole
    /// (`ENOENT`), so it is filled again page by page. On failure: the bytes filled, and why.
    fn fill(
        &self,
        dst: u64,
        len: usize,
        mut call: impl FnMut(u64, usize) -> Result<(), (usize, UffdError)>,
    ) -> Result<(), (usize, UffdError)> {
        let page = crate::page::PAGE_SIZE;
        let mut done = 0usize;
        let mut step = len;
        while done < len {
            let n = (len - done).min(step);
            match call(dst + done as u64, n) {
                Ok(()) => done += n,
                Err((got, error)) => {
                    done += got;
                    match &error {
                        UffdError::Io(e)
                            if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EAGAIN)) => {}
                        UffdError::RangeGone if got == 0 && n > page => step = page,
                        _ => return Err((done, error)),
                    }
                }
            }
        }
        Ok(())
    }

    /// Write-protects the mapped pages of `len` bytes at `start`.
    pub fn write_protect(&self, start: u64, len: usize) -> Result<(), UffdError> {
        self.mergeable(start, len, false)?;
        self.protection(start, len, UFFDIO_WRITEPROTECT_MODE_WP)
    }

    /// Removes the write protection of `len` bytes at `start` and wakes the writers waiting on it.
    pub fn unprotect(&self, start: u64, len: usize) -> Result<(), UffdError> {
        self.protection(start, len, 0)?;
        self.may_merge(start, len);
        Ok(())
    }

    fn protection(&self, start: u64, len: usize, mode: u64) -> Result<(), UffdError> {
        let mut w = uffdio_writeprotect {
            range: uffdio_range {
                start,
                len: len as u64,
            },
            mode,
        };
        self.ioctl(UFFDIO_WRITEPROTECT, &mut w)
    }

    /// Wakes the threads waiting on faults in `len` bytes at `start` (they fault again if the
    /// page is still missing).
    pub fn wake(&self, start: u64, len: usize) -> Result<(), UffdError> {
        let mut r = uffdio_range {
            start,
            len: len as u64,
        };
        self.ioctl(UFFDIO_WAKE, &mut r)
    }

    /// Reads the pending fault events without blocking (none: an empty list).
    pub fn read_faults(&self, buf: &mut EventBuffer) -> Result<Vec<Fault>, userfaultfd::Error> {
        Ok(self
            .uffd
            .read_events(buf)?
            .filter_map(|e| match e {
                Ok(Event::Pagefault {
                    kind,
                    rw,
                    addr,
                    thread_id,
                }) => Some(Fault {
                    addr: addr as u64,
                    write: rw == ReadWrite::Write,
                    protected: kind == FaultKind::WriteProtected,
                    tid: thread_id.as_raw(),
                }),
                Ok(other) => {
                    tracing::debug!("pager: ignoring event {other:?}");
                    None
                }
                Err(e) => {
                    tracing::warn!("pager: bad event: {e}");
                    None
                }
            })
            .collect())
    }
}

impl AsRawFd for Userfault {
    fn as_raw_fd(&self) -> RawFd {
        self.uffd.as_raw_fd()
    }
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)] // page numbers below 8
mod tests {
    use super::*;
    use crate::page::PAGE_SIZE;

    /// A private anonymous mapping of the tests' own, unmapped when dropped.
    struct Mapping(*mut libc::c_void, usize);

    impl Mapping {
        fn new(len: usize) -> Self {
            // SAFETY: a fresh private anonymous mapping that nothing else refers to.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(base, libc::MAP_FAILED);
            Mapping(base, len)
        }
    }

    impl Drop for Mapping {
        fn drop(&mut self) {
            // SAFETY: the mapping `new` made; the test that owned it is done with it.
            unsafe { libc::munmap(self.0, self.1) };
        }
    }

    /// A copy over a run with a page already mapped in its middle stops there and says how many
    /// pages went in before it; those hold the data, and the rest stay missing.
    #[test]
    fn a_copy_that_stops_partway_says_how_many_pages_went_in() {
        let len = 8 * PAGE_SIZE;
        let map = Mapping::new(len);
        let (base, host) = (map.0, map.0 as u64);
        let uffd = Userfault::new(false).unwrap();
        uffd.register(host, len).unwrap();
        uffd.zeropage(host + 3 * PAGE_SIZE as u64, PAGE_SIZE)
            .unwrap();
        let src: Vec<u8> = (0..len).map(|i| (i / PAGE_SIZE + 1) as u8).collect();
        // SAFETY: `src` is `len` readable bytes for the call.
        let e = unsafe { uffd.copy(src.as_ptr(), host, len, false) }.unwrap_err();
        assert_eq!(e.pages, 3, "{e}");
        assert!(matches!(e.error, UffdError::PageExists), "{e}");
        // SAFETY: pages 0..4 are mapped now (3 copied, 1 zero page); nothing else touches them.
        let mapped = unsafe { std::slice::from_raw_parts(base as *const u8, 4 * PAGE_SIZE) };
        for p in 0..3 {
            assert!(mapped[p * PAGE_SIZE..(p + 1) * PAGE_SIZE]
                .iter()
                .all(|&b| b == (p + 1) as u8));
        }
        assert!(mapped[3 * PAGE_SIZE..].iter().all(|&b| b == 0));
        // Page 4 is still missing: a copy of it alone succeeds.
        // SAFETY: as above.
        unsafe { uffd.copy(src.as_ptr(), host + 4 * PAGE_SIZE as u64, PAGE_SIZE, false) }.unwrap();
    }

    /// A run that crosses mapping boundaries (as sharing makes, splitting protected runs off
    /// as unmergeable) is filled whole, by a copy or with zero pages.
    #[test]
    fn a_run_across_split_mappings_is_filled_whole() {
        let len = 8 * PAGE_SIZE;
        let map = Mapping::new(len);
        let (base, host) = (map.0, map.0 as u64);
        let uffd = Userfault::new(true).unwrap();
        uffd.register(host, len).unwrap();
        let at = |p: usize| host + (p * PAGE_SIZE) as u64;
        // Mergeable all over but pages 2 and 5, still missing: five mappings.
        if uffd.mergeable(host, len, true).is_err() {
            eprintln!("no KSM on this kernel: nothing splits the mapping, nothing to check");
            return;
        }
        uffd.mergeable(at(2), PAGE_SIZE, false).unwrap();
        uffd.mergeable(at(5), PAGE_SIZE, false).unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let starts_inside = maps
            .lines()
            .filter_map(|l| {
                let (lo, _) = l.split_whitespace().next()?.split_once('-')?;
                u64::from_str_radix(lo, 16).ok()
            })
            .filter(|&lo| lo > host && lo < host + len as u64)
            .count();
        assert_eq!(starts_inside, 4, "{maps}");
        let src: Vec<u8> = (0..len).map(|i| (i / PAGE_SIZE + 1) as u8).collect();
        // SAFETY: `src` is readable for the call.
        unsafe { uffd.copy(src.as_ptr(), at(0), 4 * PAGE_SIZE, false) }.unwrap();
        uffd.zeropage(at(4), 4 * PAGE_SIZE).unwrap();
        // SAFETY: all 8 pages are mapped now.
        let mapped = unsafe { std::slice::from_raw_parts(base as *const u8, len) };
        for p in 0..4 {
            assert!(mapped[p * PAGE_SIZE..(p + 1) * PAGE_SIZE]
                .iter()
                .all(|&b| b == (p + 1) as u8));
        }
        assert!(mapped[4 * PAGE_SIZE..].iter().all(|&b| b == 0));
    }
}
