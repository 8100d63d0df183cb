//! Host memory of whole-page slots that pages are moved into and out of (the reclamation cache,
//! `released.rs`): one anonymous private mapping, reserved up front and resident only where a
//! page was moved in. It is registered with the pager's userfaultfd (MISSING mode), as
//! `UFFDIO_MOVE` wants of its destination; nothing reads an empty slot, and a fault on one
//! would be answered with a zero page (`fault.rs`).

use crate::page::PAGE_SIZE;

/// A mapping of `slots` pages.
#[derive(Debug)]
pub(crate) struct Slots {
    addr: u64,
    slots: u32,
}

impl Slots {
    /// Maps `slots` pages of address space (no memory until pages move in).
    pub fn new(slots: u32) -> std::io::Result<Slots> {
        let p = super::map_anonymous(slots as usize * PAGE_SIZE)?;
        Ok(Slots {
            addr: p as u64,
            slots,
        })
    }

    /// Host address of slot `s`.
    pub fn addr(&self, s: u32) -> u64 {
        debug_assert!(s < self.slots);
        self.addr + u64::from(s) * PAGE_SIZE as u64
    }

    /// The number of slots.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Bytes of the mapping.
    pub fn len(&self) -> usize {
        self.slots as usize * PAGE_SIZE
    }

    /// Whether host address `a` lies in the mapping.
    pub fn contains(&self, a: u64) -> bool {
        a >= self.addr && a < self.addr + self.len() as u64
    }

    /// Empties slots `s..s + n` (`MADV_DONTNEED`), so pages can move in.
    pub fn empty(&self, s: u32, n: u32) -> std::io::Result<()> {
        // SAFETY: the range lies in this mapping, which only the pager's moves fill; nothing
        // holds a reference into an emptied slot (the cache forgot its pages first).
        let rc = unsafe {
            libc::madvise(
                self.addr(s) as *mut libc::c_void,
                n as usize * PAGE_SIZE,
                libc::MADV_DONTNEED,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len()) };
    }
}
