//! Reading this process's page map with `PAGEMAP_SCAN` (Linux 6.7), which takeover uses to
//! find the pages the guest touched before the pager took RAM over.

use std::os::fd::AsRawFd;

use crate::page::PAGE_SIZE;

pub(crate) const PAGE_IS_PRESENT: u64 = 1 << 3;
pub(crate) const PAGE_IS_PFNZERO: u64 = 1 << 5;
pub(crate) const PAGE_IS_HUGE: u64 = 1 << 6;
/// `_IOWR('f', 16, struct pm_scan_arg)`.
const PAGEMAP_SCAN: u64 = 0xc060_6610;

/// `struct pm_scan_arg` (Linux `uapi/linux/fs.h`).
#[repr(C)]
#[derive(Default)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `struct page_region`: `start..end` whose pages all have `categories`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PageRegion {
    pub start: u64,
    pub end: u64,
    pub categories: u64,
}

/// This process's page map, scanned with `PAGEMAP_SCAN`.
pub(crate) struct PageMap(std::fs::File);

impl PageMap {
    /// Opens the page map if the kernel can scan it; `None` if it cannot.
    pub fn open() -> Option<PageMap> {
        let map = PageMap(std::fs::File::open("/proc/self/pagemap").ok()?);
        let probe = 0u64;
        let at = std::ptr::addr_of!(probe) as u64 & !(PAGE_SIZE as u64 - 1);
        map.scan(at, at + PAGE_SIZE as u64, PAGE_IS_PRESENT, 0)
            .ok()
            .map(|_| map)
    }

    /// The regions of `start..end` whose pages have every category of `all` (reported with
    /// their categories among `report`, merged where those agree).
    pub fn scan(
        &self,
        start: u64,
        end: u64,
        all: u64,
        report: u64,
    ) -> std::io::Result<Vec<PageRegion>> {
        let mut out = Vec::new();
        let mut buf = vec![PageRegion::default(); 512];
        let mut at = start;
        while at < end {
            let mut arg = PmScanArg {
                size: std::mem::size_of::<PmScanArg>() as u64,
                start: at,
                end,
                vec: buf.as_mut_ptr() as u64,
                vec_len: buf.len() as u64,
                category_mask: all,
                return_mask: report | all,
                ..PmScanArg::default()
            };
            // SAFETY: `arg` is a valid pm_scan_arg whose `vec` points at `buf`, `vec_len`
            // entries long, alive for the call; the kernel only reads this process's page map.
            let n = unsafe { libc::ioctl(self.0.as_raw_fd(), PAGEMAP_SCAN, &mut arg) };
            let n = usize::try_from(n).map_err(|_| std::io::Error::last_os_error())?;
            out.extend_from_slice(&buf[..n.min(buf.len())]);
            if arg.walk_end <= at {
                break;
            }
            at = arg.walk_end;
        }
        Ok(out)
    }
}
