//! How devices move data into and out of guest RAM and give RAM back to the host.
//!
//! Devices never `madvise` or install pages themselves: they call a [`GuestRam`], which is the
//! pager when one runs (it may install a whole page a device writes without reading the page's old
//! content) and [`PlainRam`] otherwise.

use std::sync::Arc;

use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryError, GuestMemoryRegion};

use crate::GuestMem;

/// The size of a guest page, of a swap-file block and of a disk block the pager maps: the one
/// definition of 4096 in the workspace.
pub const PAGE_SIZE: usize = 4096;

/// A guest-physical range, `len` bytes from `addr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuestRange {
    pub addr: u64,
    pub len: u64,
}

/// Why a range's content is forgotten.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discard {
    /// The balloon took it (inflate).
    Balloon,
    /// The guest reported it free (free page reporting).
    Reported,
}

/// A whole, page-aligned page of a disk request: the image block and the guest page holding it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskPage {
    pub block: u64,
    pub addr: GuestAddress,
}

/// Guest RAM as devices use it.
///
/// Disk devices also report what they move (the `disk_*` calls, in this order for a write:
/// `disk_write_begin`, then for each piece `disk_write_elide`, `disk_write_sources`, the write,
/// `disk_write_done`, and last `disk_write_end`), so a pager can know which guest pages mirror
/// which disk blocks (VSwapper's Swap Mapper) and which disk blocks refer to its swap file
/// instead of holding their data (Tesseract's indirections); reads ask `disk_read_split` first.
/// Without a pager they do nothing.
pub trait GuestRam: Send + Sync {
    /// The guest memory map (for descriptor rings and small accesses).
    fn mem(&self) -> &GuestMem;

    /// Device → guest data (e.g. a disk read).
    fn write(&self, addr: GuestAddress, data: &[u8]) -> Result<(), GuestMemoryError> {
        self.mem().write_slice(data, addr)
    }

    /// Guest → device data (e.g. a disk write).
    fn read(&self, addr: GuestAddress, data: &mut [u8]) -> Result<(), GuestMemoryError> {
        self.mem().read_slice(data, addr)
    }

    /// Forgets the content of whole pages in `ranges` (page aligned, inside RAM) and releases
    /// their host memory. Returns the pages released.
    fn discard(&self, ranges: &[GuestRange], why: Discard) -> std::io::Result<u64>;

    /// Balloon deflate: the pages in `ranges` are the guest's again (they read as zero).
    fn deflate(&self, _ranges: &[GuestRange]) {}

    /// A device read landed: each of `pages` now holds exactly its block of disk `disk`.
    fn disk_read(&self, _disk: u8, _pages: &[DiskPage]) {}

    /// [`Self::disk_read`] with the bytes the device read: `data` holds `disk` from byte
    /// `offset` on, so each of `pages` was filled from its block's part of it. A pager can learn
    /// from these what the block holds, whatever happened to the page since. By default, only
    /// [`Self::disk_read`].
    fn disk_read_data(&self, disk: u8, pages: &[DiskPage], _offset: u64, _data: &[u8]) {
        self.disk_read(disk, pages);
    }

    /// `len` bytes at byte `offset` of `disk` are about to be overwritten: whatever relies on
    /// the old content of their blocks must get it first.
    fn disk_write_begin(&self, _disk: u8, _offset: u64, _len: u64) -> std::io::Result<()> {
        Ok(())
    }

    /// Of `pages`, about to be written to their blocks, the blocks whose pages the pager holds
    /// in its swap file: the device neither reads those pages nor writes those blocks, which
    /// refer to the swap file once [`Self::disk_write_end`] succeeds.
    fn disk_write_elide(&self, _disk: u8, _pages: &[DiskPage]) -> Vec<u64> {
        Vec::new()
    }

    /// The write of `len` bytes at byte `offset` of `disk` ended; `landed`: all of it is in
    /// the image (but the elided blocks). The guest may be told the write succeeded only if
    /// this succeeds.
    fn disk_write_end(
        &self,
        _disk: u8,
        _offset: u64,
        _len: u64,
        _landed: bool,
    ) -> std::io::Result<()> {
        Ok(())
    }

    /// The guest flushed `disk`: what its writes' completion relied on outside the image (the
    /// pager's indirection log and swap file) must be durable before the flush completes.
    fn disk_flush(&self, _disk: u8) -> std::io::Result<()> {
        Ok(())
    }

    /// Reads `buf.len()` bytes at byte `offset` of `disk` if some of its blocks there refer to
    /// the pager's swap file (a split read); `false`: none does, the device reads the image.
    fn disk_read_split(&self, _disk: u8, _offset: u64, _buf: &mut [u8]) -> std::io::Result<bool> {
        Ok(false)
    }

    /// `pages` are about to be copied out and written to their blocks. Returns how many of them
    /// the pager holds outside guest RAM, each read back before it can be written (double
    /// paging).
    fn disk_write_sources(&self, _disk: u8, _pages: &[DiskPage]) -> usize {
        0
    }

    /// The write of `pages` to their blocks landed; `data` is what was written, `disk` from byte
    /// `offset` on (each of `pages` was copied into its block's part of it).
    fn disk_write_done(&self, _disk: u8, _pages: &[DiskPage], _offset: u64, _data: &[u8]) {}
}

/// Guest RAM without a pager: plain anonymous memory, released with `MADV_DONTNEED`.
pub struct PlainRam {
    mem: Arc<GuestMem>,
}

impl PlainRam {
    pub fn new(mem: Arc<GuestMem>) -> Self {
        PlainRam { mem }
    }
}

/// Releases the host memory behind page-aligned guest range `r` of `mem` with `MADV_DONTNEED`.
pub fn dontneed(mem: &GuestMem, r: GuestRange) -> std::io::Result<()> {
    let len = usize::try_from(r.len).map_err(std::io::Error::other)?;
    let host = mem
        .get_host_address(GuestAddress(r.addr))
        .map_err(std::io::Error::other)?;
    let region = mem
        .find_region(GuestAddress(r.addr))
        .ok_or_else(|| std::io::Error::other("range outside guest RAM"))?;
    let fits = r
        .addr
        .checked_add(r.len)
        .is_some_and(|end| end <= region.start_addr().0 + region.len());
    if !fits || r.addr % PAGE_SIZE as u64 != 0 || r.len % PAGE_SIZE as u64 != 0 {
        return Err(std::io::Error::other(
            "range is not whole pages of one RAM region",
        ));
    }
    // SAFETY: `host..host + len` lies inside one mapping of guest RAM (checked above). Dropping
    // anonymous private pages only makes them read as zero next time, which is what the caller asks.
    let rc = unsafe { libc::madvise(host.cast(), len, libc::MADV_DONTNEED) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

impl GuestRam for PlainRam {
    fn mem(&self) -> &GuestMem {
        &self.mem
    }

    fn discard(&self, ranges: &[GuestRange], _why: Discard) -> std::io::Result<u64> {
        let mut pages = 0;
        for r in ranges {
            dontneed(&self.mem, *r)?;
            pages += r.len / PAGE_SIZE as u64;
        }
        Ok(pages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dontneed_zeroes_and_checks_bounds() {
        let mem = Arc::new(GuestMem::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap());
        mem.write_slice(&[7u8; 8192], GuestAddress(0x2000)).unwrap();
        let ram = PlainRam::new(mem.clone());
        let n = ram
            .discard(
                &[GuestRange {
                    addr: 0x2000,
                    len: 4096,
                }],
                Discard::Balloon,
            )
            .unwrap();
        assert_eq!(n, 1);
        let mut b = [1u8; 8192];
        mem.read_slice(&mut b, GuestAddress(0x2000)).unwrap();
        assert!(b[..4096].iter().all(|&x| x == 0));
        assert!(b[4096..].iter().all(|&x| x == 7));
        assert!(dontneed(
            &mem,
            GuestRange {
                addr: 0x100,
                len: 4096
            }
        )
        .is_err());
        assert!(dontneed(
            &mem,
            GuestRange {
                addr: 0xff000,
                len: 8192
            }
        )
        .is_err());
        assert!(dontneed(
            &mem,
            GuestRange {
                addr: 1 << 20,
                len: 4096
            }
        )
        .is_err());
    }
}
