//! Free page reporting (Linux's `mm/page_reporting.c`): naturally aligned runs of free frames
//! taken off the free list while the balloon device is told they are free, then put back
//! marked reported.

use crate::mm_types::{Kind, F_REPORTED, L_FREE};
use crate::Mm;

impl Mm<'_> {
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
}
