//! The pager's counters, named after what happened, each store's counters, and latency
//! distributions; `api_stats.rs` builds the API's `PagerStats` from them. They leave the pager as
//! the control API's types ([`PagerCounters`], [`LatencySummary`]), which the API serializes
//! once; nothing parses them back out of text. The page census is kept by the state table as
//! pages change state, so reading them costs the same however large the VM is.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use memvisor_api::{LatencySummary, PagerCounters};

/// The counts of what happened in one pager (faults, reclaim, releases, ...); every field only
/// grows.
#[derive(Debug, Default)]
pub struct EventCounters {
    /// Faults answered with a zero page (first touch, or a page dropped as zero).
    pub faults_zero: AtomicU64,
    /// Faults on pages the balloon or a free page report had taken.
    pub faults_released: AtomicU64,
    /// Faults served from the pages a VM was restored or migrated from (a snapshot's memory
    /// file, or a migration's pages): counted among the swap faults too.
    pub faults_restored: AtomicU64,
    /// Faults on pages whose content was in a store (swapped, or dropped to its image block)
    /// taken by a vCPU thread: the guest running (VSwapper Fig. 9c).
    pub stored_faults_guest: AtomicU64,
    /// ... taken by any other thread: the VMM's own code serving the guest, a device's read
    /// or write of guest memory above all (VSwapper Fig. 9b).
    pub stored_faults_vmm: AtomicU64,
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
    /// Write faults on swapped or on-disk pages the Preventer left to an ordinary read, because
    /// a read has cost less per page than a prevention on this host.
    pub preventer_passed: AtomicU64,
    /// Whole pages a device wrote into place without reading their old content.
    pub device_installs: AtomicU64,
    /// First writes to clean, write-protected pages.
    pub write_faults: AtomicU64,
    /// Faults whose store read, done without the page lock, found the faulting page changed
    /// meanwhile (a device wrote it, the balloon took it), so they were served again.
    pub fault_reads_redone: AtomicU64,
    /// Victims dropped because they were all zero.
    pub reclaimed_zero: AtomicU64,
    /// Clean victims dropped because their swap block still held them.
    pub reclaimed_clean: AtomicU64,
    /// Victims written to the swap store.
    pub reclaimed_written: AtomicU64,
    /// Victims dropped because they mirrored a disk image block (VSwapper: silent swap writes
    /// avoided).
    pub reclaimed_mirrored: AtomicU64,
    /// Victims dropped because a pooled block held exactly their content (share before swap).
    pub reclaimed_shared: AtomicU64,
    /// Device reads that landed in non-resident pages without reading their old content
    /// (VSwapper: stale swap reads avoided).
    pub stale_reads_avoided: AtomicU64,
    /// Pages whose content was brought back from the image before the guest overwrote the
    /// block they relied on (the Mapper's write consistency).
    pub mapper_refetches: AtomicU64,
    /// Victims left writable as mirrors by a disk read whose digest reclaim compared.
    pub mirrors_checked: AtomicU64,
    /// ... and found changed (the guest had written them).
    pub mirrors_changed: AtomicU64,
    /// Pages a guest disk read filled whose block's digest was known from an earlier read.
    pub mirror_digests_reused: AtomicU64,
    /// Pages brought in next to a faulting page.
    pub prefetched: AtomicU64,
    /// Prefetched pages brought in clean and later written by the guest (a lower bound on
    /// prefetch hits: reads of resident pages are invisible to the host, and so are writes to
    /// pages brought in writable).
    pub prefetch_hits: AtomicU64,
    /// Pages a read fault brought in from swap writable, their blocks freed, because the guest
    /// had been writing nearly every page it swapped in (`CleanReuse`).
    pub swapped_in_writable: AtomicU64,
    /// Pages kept clean made writable with a written page beside them, for the same reason
    /// (`FaultHandler::open_around`).
    pub opened_ahead: AtomicU64,
    pub reclaim_batches: AtomicU64,
    /// Pages released by the balloon and by free page reporting.
    pub ballooned: AtomicU64,
    pub reported: AtomicU64,
    /// Pages a balloon deflate gave back that were mapped at once to the zero page, so that
    /// the guest's first touch of each is no fault round trip.
    pub deflated_mapped: AtomicU64,
    /// Times the VM was paused because swap or image I/O failed.
    pub pauses: AtomicU64,
    /// Times guest RAM was taken over (registered with userfaultfd): at start with a limit, or
    /// when the first limit arrived.
    pub attaches: AtomicU64,
    /// Huge pages split before a release took part of them.
    pub huge_pages_split: AtomicU64,
    /// Pages brought back without a fault (proactive swap-in), from the pool or the file.
    pub proactive_swap_ins: AtomicU64,
    /// Pages a guest disk write read while they were out of guest RAM: swapped in only to be
    /// written to the guest's disk (double paging).
    pub double_paging_swap_ins: AtomicU64,
    /// Sequential sequences detected in guest disk reads.
    pub sequences_detected: AtomicU64,
    /// Sequences read again, so they became loops.
    pub loops_detected: AtomicU64,
    /// Sequential sequences probed by a cold-only release (some pages released to see whether
    /// the guest still uses them).
    pub sequences_probed: AtomicU64,
    /// Instant releases served (`PUT /memory/release`).
    pub releases: AtomicU64,
    /// Pages they released.
    pub released_pages: AtomicU64,
    /// Candidates they found changed by the guest, so kept.
    pub release_changed: AtomicU64,
    /// Time they took, in microseconds.
    pub release_us: AtomicU64,
    /// Released pages that came back.
    pub released_refaults: AtomicU64,
    /// Candidates protected and checked ahead of a release (`--release-ready`).
    pub release_ready_checked: AtomicU64,
    /// Released pages copied into the reclamation cache because they could not be moved.
    pub release_cache_copies: AtomicU64,
    /// Pages made ready for release that guest writes took back.
    pub release_ready_lost: AtomicU64,
    /// Refaults of released pages served from the reclamation cache.
    pub reclamation_cache_hits: AtomicU64,
}

impl EventCounters {
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts the sequences and loops the state table's reference patterns detected, and the
    /// sequences probed, since this was last called (after each guest disk read, image refault
    /// and release).
    pub(crate) fn add_patterns(&self, patterns: &mut crate::pattern::table::Patterns) {
        let probed = patterns.take_probes();
        if probed > 0 {
            EventCounters::add(&self.sequences_probed, probed);
        }
        let (sequences, loops) = patterns.take_detected();
        if sequences > 0 {
            EventCounters::add(&self.sequences_detected, sequences);
        }
        if loops > 0 {
            EventCounters::add(&self.loops_detected, loops);
        }
    }

    /// The counters now, as the API's [`PagerCounters`], with what the stores did (the swap
    /// file's, and all disk images' together). Each is read on its own (they are independent
    /// event counts, not a consistent cut).
    /// `cache` is the victim cache's hits and catches.
    pub fn load(
        &self,
        swap: &StoreCounters,
        images: &StoreTotals,
        cache: (u64, u64),
    ) -> PagerCounters {
        // Destructured without `..`: a counter added here and not to the API type, or the other
        // way round, does not compile.
        let EventCounters {
            faults_zero,
            faults_released,
            faults_restored,
            stored_faults_guest,
            stored_faults_vmm,
            false_reads_avoided,
            preventer_attempts,
            preventer_completed,
            preventer_fallbacks,
            preventer_timeouts,
            preventer_passed,
            device_installs,
            write_faults,
            fault_reads_redone,
            reclaimed_zero,
            reclaimed_clean,
            reclaimed_written,
            reclaimed_mirrored,
            reclaimed_shared,
            stale_reads_avoided,
            mapper_refetches,
            mirrors_checked,
            mirrors_changed,
            mirror_digests_reused,
            prefetched,
            prefetch_hits,
            swapped_in_writable,
            opened_ahead,
            reclaim_batches,
            ballooned,
            reported,
            deflated_mapped,
            pauses,
            attaches,
            huge_pages_split,
            proactive_swap_ins,
            double_paging_swap_ins,
            sequences_detected,
            loops_detected,
            sequences_probed,
            releases,
            released_pages,
            release_changed,
            release_us,
            released_refaults,
            release_ready_checked,
            release_cache_copies,
            release_ready_lost,
            reclamation_cache_hits,
        } = self;
        PagerCounters {
            faults_zero: get(faults_zero),
            faults_swap: get(&swap.faults),
            faults_released: get(faults_released),
            faults_restored: get(faults_restored),
            stored_faults_guest: get(stored_faults_guest),
            stored_faults_vmm: get(stored_faults_vmm),
            false_reads_avoided: get(false_reads_avoided),
            preventer_attempts: get(preventer_attempts),
            preventer_completed: get(preventer_completed),
            preventer_fallbacks: get(preventer_fallbacks),
            preventer_timeouts: get(preventer_timeouts),
            preventer_passed: get(preventer_passed),
            device_installs: get(device_installs),
            write_faults: get(write_faults),
            fault_reads_redone: get(fault_reads_redone),
            reclaimed_zero: get(reclaimed_zero),
            reclaimed_clean: get(reclaimed_clean),
            reclaimed_written: get(reclaimed_written),
            reclaimed_mirrored: get(reclaimed_mirrored),
            reclaimed_shared: get(reclaimed_shared),
            faults_image: images.faults,
            image_bytes_read: images.bytes_read,
            stale_reads_avoided: get(stale_reads_avoided),
            mapper_refetches: get(mapper_refetches),
            mirrors_checked: get(mirrors_checked),
            mirrors_changed: get(mirrors_changed),
            mirror_digests_reused: get(mirror_digests_reused),
            swap_bytes_read: get(&swap.bytes_read),
            swap_bytes_written: get(&swap.bytes_written),
            prefetched: get(prefetched),
            prefetch_hits: get(prefetch_hits),
            swapped_in_writable: get(swapped_in_writable),
            opened_ahead: get(opened_ahead),
            reclaim_batches: get(reclaim_batches),
            ballooned: get(ballooned),
            reported: get(reported),
            deflated_mapped: get(deflated_mapped),
            pauses: get(pauses),
            attaches: get(attaches),
            huge_pages_split: get(huge_pages_split),
            proactive_swap_ins: get(proactive_swap_ins),
            double_paging_swap_ins: get(double_paging_swap_ins),
            victim_cache_hits: cache.0,
            victim_cache_caught: cache.1,
            sequences_detected: get(sequences_detected),
            loops_detected: get(loops_detected),
            sequences_probed: get(sequences_probed),
            releases: get(releases),
            released_pages: get(released_pages),
            release_changed: get(release_changed),
            release_us: get(release_us),
            released_refaults: get(released_refaults),
            release_ready_checked: get(release_ready_checked),
            release_cache_copies: get(release_cache_copies),
            release_ready_lost: get(release_ready_lost),
            reclamation_cache_hits: get(reclamation_cache_hits),
        }
    }
}

pub(crate) fn get(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// What one store has done; every field only grows.
#[derive(Debug, Default)]
pub struct StoreCounters {
    /// Faults served by a read from this store (with the run that came along).
    pub faults: AtomicU64,
    /// Read calls (each a run of one or more pages).
    pub reads: AtomicU64,
    pub bytes_read: AtomicU64,
    /// Write calls (each a run of one or more pages).
    pub writes: AtomicU64,
    pub bytes_written: AtomicU64,
}

impl StoreCounters {
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    pub(crate) fn count(calls: &AtomicU64, bytes: &AtomicU64, len: usize) {
        calls.fetch_add(1, Ordering::Relaxed);
        bytes.fetch_add(len as u64, Ordering::Relaxed);
    }
}

/// What several stores did, added up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreTotals {
    pub faults: u64,
    pub bytes_read: u64,
}

impl StoreTotals {
    pub fn of<'a>(stores: impl Iterator<Item = &'a StoreCounters>) -> Self {
        stores.fold(StoreTotals::default(), |t, c| StoreTotals {
            faults: t.faults + get(&c.faults),
            bytes_read: t.bytes_read + get(&c.bytes_read),
        })
    }
}

/// The most recent measurements of a latency, for percentiles.
#[derive(Debug)]
pub struct Latency {
    recent: Mutex<(Vec<u32>, usize)>,
}

const KEEP: usize = 16384;

impl Default for Latency {
    fn default() -> Self {
        Latency {
            recent: Mutex::new((Vec::with_capacity(KEEP), 0)),
        }
    }
}

impl Latency {
    pub fn record(&self, d: Duration) {
        let us = u32::try_from(d.as_micros()).unwrap_or(u32::MAX);
        let mut g = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        let (v, next) = &mut *g;
        if v.len() < KEEP {
            v.push(us);
        } else {
            v[*next] = us;
            *next = (*next + 1) % KEEP;
        }
    }

    /// Measurements kept (the API's `samples`), median, 99th percentile and maximum over them;
    /// all zero without measurements.
    pub fn summary(&self) -> LatencySummary {
        let g = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        let mut v = g.0.clone();
        drop(g);
        if v.is_empty() {
            return LatencySummary::default();
        }
        v.sort_unstable();
        let at = |q: usize| u64::from(v[(v.len() - 1) * q / 100]);
        LatencySummary {
            samples: v.len() as u64,
            p50_us: at(50),
            p99_us: at(99),
            max_us: at(100),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_known_latencies() {
        let l = Latency::default();
        assert_eq!(l.summary(), LatencySummary::default());
        for us in 1..=100 {
            l.record(Duration::from_micros(us));
        }
        assert_eq!(
            l.summary(),
            LatencySummary {
                samples: 100,
                p50_us: 50,
                p99_us: 99,
                max_us: 100,
            }
        );
    }

    #[test]
    fn counters_load_by_name() {
        let c = EventCounters::default();
        let swap = StoreCounters::default();
        swap.faults.fetch_add(3, Ordering::Relaxed);
        swap.bytes_written.fetch_add(8192, Ordering::Relaxed);
        EventCounters::add(&c.pauses, 1);
        let p = c.load(&swap, &StoreTotals::default(), (0, 0));
        assert_eq!(
            (p.faults_swap, p.swap_bytes_written, p.pauses, p.faults_zero),
            (3, 8192, 1, 0)
        );
        let v = serde_json::to_value(p).unwrap();
        assert_eq!(v["swap_bytes_written"], 8192);
    }
}
