//! Free page reporting (Linux's `mm/page_reporting.c`): naturally aligned runs of free frames
//! taken off the free list while the balloon device is told they are free, then put back
//! marked reported.

use crate::mm_types::{PageKind, F_REPORTED, L_FREE};
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
                .all(|x| x.kind == PageKind::Free);
            let all_reported = self.frames[range].iter().all(|x| x.flags & F_REPORTED != 0);
            if all_free && !all_reported {
                for g in f..f + n {
                    self.unlink(g);
                    self.frames[g as usize].kind = PageKind::Reporting;
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
            assert_eq!(self.frames[g as usize].kind, PageKind::Reporting);
            let fr = &mut self.frames[g as usize];
            fr.kind = PageKind::Free;
            fr.flags = if reused { 0 } else { F_REPORTED };
            self.push_back(L_FREE, g);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::setup;
    use std::vec;

    #[test]
    fn free_page_reporting_takes_aligned_free_runs_once() {
        let (mut mm, mut be) = setup(64, 16, 0);
        // base pfn 0x100 is 8-aligned; order 3 = 8 frames.
        let f = mm.report_take(3, 64).unwrap();
        assert_eq!(mm.pfn(f) % 8, 0);
        assert_eq!(mm.free_pages(), 56);
        mm.report_done(f, 3, false);
        let mut seen = vec![f];
        while let Some(g) = mm.report_take(3, 64) {
            assert!(!seen.contains(&g));
            seen.push(g);
            mm.report_done(g, 3, false);
        }
        assert_eq!(seen.len(), 8, "every chunk reported once");
        // Allocating takes unreported (here: none left, so reported) pages, clearing the flag.
        let k = mm.alloc_kernel(&mut be).unwrap();
        mm.free_kernel(k);
        assert!(mm.report_take(3, 64).is_some());
        mm.verify().unwrap();
    }

    #[test]
    fn a_reported_run_the_driver_reused_is_reported_again() {
        let (mut mm, _be) = setup(64, 16, 0);
        let f = mm.report_take(3, 64).unwrap();
        mm.report_done(f, 3, true);
        let mut again = false;
        while let Some(g) = mm.report_take(3, 64) {
            again |= g == f;
            mm.report_done(g, 3, false);
        }
        assert!(again, "a reused run is free and unreported");
        mm.verify().unwrap();
    }
}
