//! The pager's counters, named after what happened, latency distributions, and the snapshot
//! the API serves. The page census is kept by the page table as pages change state, so a
//! snapshot costs the same however large the VM is.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::pager::{limit_to_bytes, Pager};
use crate::store::{PageStore, StoreCounters};

/// Counters of one pager; every field only grows.
#[derive(Debug, Default)]
pub struct Counters {
    /// Faults answered with a zero page (first touch, or a page dropped as zero).
    pub faults_zero: AtomicU64,
    /// Faults on pages the balloon or a free page report had taken.
    pub faults_released: AtomicU64,
    /// Faults on pages the guest had reported free, answered with a zero page instead of their
    /// old content (VSwapper's false reads, avoided cooperatively).
    pub false_reads_avoided: AtomicU64,
    /// vCPUs stopped by the Preventer on a write to a swapped or on-disk page.
    pub preventer_attempts: AtomicU64,
    /// ... whose instruction overwrote the whole page, so it went in with no read.
    pub preventer_completed: AtomicU64,
    /// ... whose instruction did not, so the page was swapped in.
    pub preventer_fallbacks: AtomicU64,
    /// ... that did not answer in time, so the pager swapped the page in itself.
    pub preventer_timeouts: AtomicU64,
    /// Whole pages a device wrote into place without reading their old content.
    pub device_installs: AtomicU64,
    /// First writes to clean, write-protected pages.
    pub write_faults: AtomicU64,
    /// Victims dropped because they were all zero.
    pub reclaimed_zero: AtomicU64,
    /// Clean victims dropped because their swap block still held them.
    pub reclaimed_clean: AtomicU64,
    /// Victims written to the swap store.
    pub reclaimed_written: AtomicU64,
    /// Victims dropped because they mirrored a disk image block (VSwapper: silent swap writes
    /// avoided).
    pub reclaimed_mirrored: AtomicU64,
    /// Device reads that landed in non-resident pages without reading their old content
    /// (VSwapper: stale swap reads avoided).
    pub stale_reads_avoided: AtomicU64,
    /// Pages whose content was brought back from the image before the guest overwrote the
    /// block they relied on (the Mapper's write consistency).
    pub mapper_refetches: AtomicU64,
    /// Pages brought in next to a faulting page.
    pub prefetched: AtomicU64,
    /// Prefetched pages later written by the guest (a lower bound on prefetch hits: reads of
    /// resident pages are invisible to the host).
    pub prefetch_hits: AtomicU64,
    pub reclaim_batches: AtomicU64,
    /// Pages released by the balloon and by free page reporting.
    pub ballooned: AtomicU64,
    pub reported: AtomicU64,
    /// Times the VM was paused because swap or image I/O failed.
    pub pauses: AtomicU64,
    /// Times guest RAM was taken over (registered with userfaultfd): at start with a limit, or
    /// when the first limit arrived.
    pub attaches: AtomicU64,
    /// Huge pages split before reclaim released part of them.
    pub huge_pages_split: AtomicU64,
}

impl Counters {
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// The most recent samples of a latency, for percentiles.
#[derive(Debug)]
pub struct Latency {
    samples: Mutex<(Vec<u32>, usize)>,
}

const KEEP: usize = 16384;

impl Default for Latency {
    fn default() -> Self {
        Latency {
            samples: Mutex::new((Vec::with_capacity(KEEP), 0)),
        }
    }
}

impl Latency {
    pub fn record(&self, d: Duration) {
        let us = u32::try_from(d.as_micros()).unwrap_or(u32::MAX);
        let mut g = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let (v, next) = &mut *g;
        if v.len() < KEEP {
            v.push(us);
        } else {
            v[*next] = us;
            *next = (*next + 1) % KEEP;
        }
    }

    /// (count kept, p50, p99) in microseconds over the kept samples.
    pub fn summary(&self) -> (usize, u32, u32) {
        let g = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let mut v = g.0.clone();
        drop(g);
        if v.is_empty() {
            return (0, 0, 0);
        }
        v.sort_unstable();
        let at = |q: usize| v[(v.len() - 1) * q / 100];
        (v.len(), at(50), at(99))
    }
}

/// A snapshot of the pager for the API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PagerSnapshot {
    pub limit_bytes: Option<u64>,
    pub resident_pages: u64,
    pub zero_pages: u64,
    pub swapped_pages: u64,
    pub ballooned_pages: u64,
    pub reported_pages: u64,
    /// Dropped while mirroring a disk block; they refault from the image.
    pub on_disk_pages: u64,
    /// Resident and mirroring a disk block.
    pub mirrored_pages: u64,
    pub swap_blocks_in_use: u64,
    pub counters: Vec<(&'static str, u64)>,
    pub fault_latency_us: (usize, u32, u32),
    /// Faults served from the swap store only (the page was in swap when it faulted).
    pub swap_fault_latency_us: (usize, u32, u32),
    pub reclaim_latency_us: (usize, u32, u32),
}

impl Pager {
    pub fn snapshot(&self) -> PagerSnapshot {
        let s = &self.shared;
        let pages = s.lock();
        let census = pages.table.census();
        let in_use = pages.table.blocks.in_use();
        drop(pages);
        let limit_bytes = limit_to_bytes(s.limit());
        let c = &s.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let swap = s.stores.swap.counters();
        let images = |f: fn(&StoreCounters) -> &AtomicU64| -> u64 {
            s.stores.images().map(|i| get(f(i.counters()))).sum()
        };
        PagerSnapshot {
            limit_bytes,
            resident_pages: census.resident.into(),
            zero_pages: census.zero.into(),
            swapped_pages: census.swapped.into(),
            ballooned_pages: census.ballooned.into(),
            reported_pages: census.reported.into(),
            on_disk_pages: census.on_disk.into(),
            mirrored_pages: census.mirrored.into(),
            swap_blocks_in_use: in_use.into(),
            counters: vec![
                ("faults_zero", get(&c.faults_zero)),
                ("faults_swap", get(&swap.faults)),
                ("faults_released", get(&c.faults_released)),
                ("false_reads_avoided", get(&c.false_reads_avoided)),
                ("preventer_attempts", get(&c.preventer_attempts)),
                ("preventer_completed", get(&c.preventer_completed)),
                ("preventer_fallbacks", get(&c.preventer_fallbacks)),
                ("preventer_timeouts", get(&c.preventer_timeouts)),
                ("device_installs", get(&c.device_installs)),
                ("write_faults", get(&c.write_faults)),
                ("reclaimed_zero", get(&c.reclaimed_zero)),
                ("reclaimed_clean", get(&c.reclaimed_clean)),
                ("reclaimed_written", get(&c.reclaimed_written)),
                ("reclaimed_mirrored", get(&c.reclaimed_mirrored)),
                ("faults_image", images(|c| &c.faults)),
                ("image_bytes_read", images(|c| &c.bytes_read)),
                ("stale_reads_avoided", get(&c.stale_reads_avoided)),
                ("mapper_refetches", get(&c.mapper_refetches)),
                ("swap_bytes_read", get(&swap.bytes_read)),
                ("swap_bytes_written", get(&swap.bytes_written)),
                ("prefetched", get(&c.prefetched)),
                ("prefetch_hits", get(&c.prefetch_hits)),
                ("reclaim_batches", get(&c.reclaim_batches)),
                ("ballooned", get(&c.ballooned)),
                ("reported", get(&c.reported)),
                ("pauses", get(&c.pauses)),
                ("attaches", get(&c.attaches)),
                ("huge_pages_split", get(&c.huge_pages_split)),
            ],
            fault_latency_us: s.fault_latency.summary(),
            swap_fault_latency_us: s.swap_fault_latency.summary(),
            reclaim_latency_us: s.reclaim_latency.summary(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_known_samples() {
        let l = Latency::default();
        assert_eq!(l.summary(), (0, 0, 0));
        for us in 1..=100 {
            l.record(Duration::from_micros(us));
        }
        assert_eq!(l.summary(), (100, 50, 99));
    }
}
