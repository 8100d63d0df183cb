//! Page-aligned buffers for `O_DIRECT` I/O: [`IoBuf`].
//!
//! Where a buffer lies in physical memory decides what one direct I/O costs. The block layer
//! builds a request with one segment per physically contiguous piece of the buffer, and on a
//! host whose own disk is virtual each segment costs its hypervisor more work: a 40 KiB
//! `O_DIRECT` write took 80 µs from ten scattered 4 KiB pages and 44 µs from one transparent
//! huge page on the machines memvisor is measured on (docs/bench.md, "What `overhead` shows").
//! QEMU writes straight from guest RAM, which is on huge pages. So the long-lived buffers of the
//! hot paths (a disk's bounce buffer, the pager's fault, reclaim and swap-in buffers) are made
//! with [`IoBuf::huge`]: mapped 2 MiB-aligned with `MADV_HUGEPAGE` and touched at once. Each
//! takes at least one huge page of host memory; short-lived ones use [`IoBuf::new`].

use std::ptr::NonNull;

use crate::ram::PAGE_SIZE;
const HUGE_PAGE: usize = 2 << 20;

/// A zeroed, page-aligned buffer of a fixed size, mapped for itself and unmapped when dropped.
pub struct IoBuf {
    /// The mapping: `mapped` bytes from `map`.
    map: NonNull<u8>,
    mapped: usize,
    /// The buffer within it.
    start: NonNull<u8>,
    len: usize,
}

// SAFETY: an IoBuf owns its mapping outright, like a Vec<u8>; `&IoBuf` gives no access to it.
unsafe impl Send for IoBuf {}
// SAFETY: as above: shared references cannot reach the bytes.
unsafe impl Sync for IoBuf {}

impl IoBuf {
    /// `len` bytes (rounded up to whole pages) on ordinary pages.
    pub fn new(len: usize) -> IoBuf {
        IoBuf::map(len, false)
    }

    /// `len` bytes on transparent huge pages where the host gives them (else ordinary pages),
    /// so that each 2 MiB of the buffer is physically contiguous.
    pub fn huge(len: usize) -> IoBuf {
        IoBuf::map(len, true)
    }

    fn map(len: usize, huge: bool) -> IoBuf {
        let len = len.max(1).next_multiple_of(PAGE_SIZE);
        let (want, align) = if huge {
            (len.next_multiple_of(HUGE_PAGE), HUGE_PAGE)
        } else {
            (len, PAGE_SIZE)
        };
        // Room to align the start.
        let mapped = want + align - PAGE_SIZE;
        // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            // As a Vec that cannot grow: out of memory is not an error a caller can handle.
            panic!(
                "cannot map a {mapped}-byte I/O buffer: {}",
                std::io::Error::last_os_error()
            );
        }
        let map = NonNull::new(p.cast::<u8>()).expect("mmap returned a null mapping");
        let skip = map.as_ptr().align_offset(align);
        // SAFETY: `skip + want <= mapped` (align_offset of a page-aligned address to `align` is
        // below `align`), so the start and the buffer are inside the mapping.
        let start = unsafe { map.add(skip) };
        if huge {
            // SAFETY: the range is inside our own mapping. A refusal (THP off) leaves ordinary
            // pages, which still work.
            unsafe { libc::madvise(start.as_ptr().cast(), want, libc::MADV_HUGEPAGE) };
        }
        // Fault it all in now, not in the middle of an I/O.
        // SAFETY: `len` bytes from `start` are inside the mapping, writable and ours.
        unsafe { std::ptr::write_bytes(start.as_ptr(), 0, len) };
        IoBuf {
            map,
            mapped,
            start,
            len,
        }
    }

    /// The buffer's first `len` bytes.
    pub fn get(&mut self, len: usize) -> &mut [u8] {
        assert!(
            len <= self.len,
            "I/O of {len} bytes exceeds the {} byte buffer",
            self.len
        );
        // SAFETY: `len` bytes from `start` are inside the mapping; `&mut self` makes the slice
        // the only reference to them.
        unsafe { std::slice::from_raw_parts_mut(self.start.as_ptr(), len) }
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for IoBuf {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `map` with this address and length, and nothing
        // refers to it once the IoBuf goes.
        if unsafe { libc::munmap(self.map.as_ptr().cast(), self.mapped) } != 0 {
            tracing::warn!(
                "cannot unmap a {}-byte I/O buffer: {}",
                self.mapped,
                std::io::Error::last_os_error()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_zeroed_and_usable_to_their_end() {
        for (len, huge) in [(1, false), (4096, false), (40960, true), (3 << 20, true)] {
            let mut b = if huge {
                IoBuf::huge(len)
            } else {
                IoBuf::new(len)
            };
            assert!(b.len() >= len);
            let all = b.len();
            let s = b.get(all);
            let align = if huge { HUGE_PAGE } else { PAGE_SIZE };
            assert_eq!(s.as_ptr() as usize % align, 0, "{len} {huge}");
            assert!(s.iter().all(|&x| x == 0));
            s.fill(0x5a);
            assert!(b.get(len).iter().all(|&x| x == 0x5a));
        }
    }

    #[test]
    #[should_panic(expected = "exceeds")]
    fn asking_past_the_end_panics() {
        IoBuf::new(4096).get(8192);
    }
}
