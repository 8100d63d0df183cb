//! The map from guest pages to guest-physical and host addresses: guest RAM is one or more
//! mappings (low RAM, and RAM above 4 GiB), and pages are numbered across all of them.
//! One syscall may cover a run of pages only inside one mapping, so the map also splits runs.

use crate::page::{PageIdx, PAGE_SIZE};
use memvisor_devices::GuestMem;
use vm_memory::{GuestMemoryBackend, GuestMemoryRegion};

/// One mapping of guest RAM.
struct Region {
    gpa: u64,
    host: u64,
    first: PageIdx,
    pages: u32,
}

pub(crate) struct RamMap {
    regions: Vec<Region>,
    pages: u32,
}

impl RamMap {
    pub fn new(mem: &GuestMem) -> Self {
        let mut regions = Vec::new();
        let mut first = 0u32;
        for r in mem.iter() {
            let pages = u32::try_from(r.len() / PAGE_SIZE as u64).unwrap_or(u32::MAX);
            regions.push(Region {
                gpa: r.start_addr().0,
                host: r.as_ptr() as u64,
                first,
                pages,
            });
            first += pages;
        }
        RamMap {
            regions,
            pages: first,
        }
    }

    /// Pages of guest RAM.
    pub fn pages(&self) -> u32 {
        self.pages
    }

    /// Host address and length of each mapping.
    pub fn host_ranges(&self) -> impl Iterator<Item = (u64, usize)> + '_ {
        self.regions
            .iter()
            .map(|r| (r.host, r.pages as usize * PAGE_SIZE))
    }

    fn region_of(&self, p: PageIdx) -> &Region {
        self.regions
            .iter()
            .rfind(|r| r.first <= p)
            .expect("page 0 is in the first region")
    }

    /// Host address of page `p`.
    pub fn host(&self, p: PageIdx) -> u64 {
        let r = self.region_of(p);
        r.host + u64::from(p - r.first) * PAGE_SIZE as u64
    }

    /// Guest-physical address of page `p`.
    pub fn gpa(&self, p: PageIdx) -> u64 {
        let r = self.region_of(p);
        r.gpa + u64::from(p - r.first) * PAGE_SIZE as u64
    }

    pub fn page_of_host(&self, addr: u64) -> Option<PageIdx> {
        self.regions.iter().find_map(|r| {
            let i = addr.checked_sub(r.host)? / PAGE_SIZE as u64;
            (i < u64::from(r.pages)).then(|| r.first + u32::try_from(i).unwrap_or(0))
        })
    }

    pub fn page_of_gpa(&self, gpa: u64) -> Option<PageIdx> {
        self.regions.iter().find_map(|r| {
            let i = gpa.checked_sub(r.gpa)? / PAGE_SIZE as u64;
            (i < u64::from(r.pages)).then(|| r.first + u32::try_from(i).unwrap_or(0))
        })
    }

    /// Whether `p` and `q` are in the same mapping (so one syscall may cover both).
    pub fn same_region(&self, p: PageIdx, q: PageIdx) -> bool {
        self.regions
            .iter()
            .any(|r| p >= r.first && q >= r.first && p < r.first + r.pages && q < r.first + r.pages)
    }

    /// Splits the run `first..first + n` where it crosses from one mapping into the next.
    pub fn split_by_region(&self, first: PageIdx, n: u32) -> Vec<(PageIdx, u32)> {
        self.split_runs(&[(first, n)])
    }

    /// Runs of consecutive pages among sorted `pages`, each inside one mapping: what one
    /// syscall may cover.
    pub fn region_runs(&self, pages: &[PageIdx]) -> Vec<(PageIdx, u32)> {
        self.split_runs(&runs(pages))
    }

    /// `runs` (`(first, count)` in page order), each split where it crosses from one mapping
    /// into the next: the mappings number the pages in order, so a run splits at their ends,
    /// however long it is.
    pub fn split_runs(&self, runs: &[(PageIdx, u32)]) -> Vec<(PageIdx, u32)> {
        let mut out = Vec::with_capacity(runs.len());
        for &(first, n) in runs {
            let end = first.saturating_add(n);
            for r in &self.regions {
                let (a, b) = (first.max(r.first), end.min(r.first + r.pages));
                if a < b {
                    out.push((a, b - a));
                }
            }
        }
        out
    }
}

/// Consecutive runs in a sorted list of pages: (first, count).
pub(crate) fn runs(pages: &[PageIdx]) -> Vec<(PageIdx, u32)> {
    let mut out: Vec<(PageIdx, u32)> = Vec::new();
    for &p in pages {
        match out.last_mut() {
            Some((first, n)) if *first + *n == p => *n += 1,
            _ => out.push((p, 1)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::GuestAddress;

    #[test]
    fn runs_merge_neighbours() {
        assert_eq!(runs(&[1, 2, 3, 7, 9, 10]), vec![(1, 3), (7, 1), (9, 2)]);
        assert!(runs(&[]).is_empty());
    }

    #[test]
    fn pages_are_numbered_across_mappings_and_runs_split_between_them() {
        let mem = GuestMem::from_ranges(&[
            (GuestAddress(0), 4 * 4096),
            (GuestAddress(1 << 32), 4 * 4096),
        ])
        .unwrap();
        let m = RamMap::new(&mem);
        assert_eq!(m.pages(), 8);
        assert_eq!(m.gpa(5), (1 << 32) + 4096);
        assert_eq!(m.page_of_gpa((1 << 32) + 3 * 4096 + 7), Some(7));
        assert_eq!(m.page_of_gpa(4 * 4096), None);
        assert_eq!(m.page_of_host(m.host(6) + 12), Some(6));
        assert!(m.same_region(0, 3) && !m.same_region(3, 4));
        assert_eq!(m.split_by_region(2, 4), vec![(2, 2), (4, 2)]);
        assert_eq!(
            m.split_runs(&[(0, 1), (2, 6)]),
            vec![(0, 1), (2, 2), (4, 4)]
        );
        assert_eq!(
            m.region_runs(&[1, 2, 3, 4, 7]),
            vec![(1, 3), (4, 1), (7, 1)]
        );
    }
}
