//! `GET /stats`: every counter of a VM, one typed struct per source. The same [`VmStats`] is
//! what `memvisor run --stats-json PATH` writes when the VM ends.
//!
//! Counters only grow. A field named `_bytes`, `_pages` or `_us` holds that unit; a field
//! without a unit counts events (faults, requests, exits), and the pager's event counters that
//! move pages count one per page.

#![deny(missing_docs)]

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `GET /stats`: the pager, the balloon, the disks, the VM exits and the guest's errors.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VmStats {
    /// memvisor's pager; `null` with `--pager off`.
    pub pager: Option<PagerStats>,
    /// The virtio-balloon device; `null` without `--balloon`.
    pub balloon: Option<BalloonStats>,
    /// Each virtio-blk disk by its id.
    pub disks: BTreeMap<String, DiskStats>,
    /// VM exits the vCPUs took.
    pub exits: ExitStats,
    /// What the guest did wrong, and host faults it can repeat at will.
    pub guest_errors: GuestErrors,
    /// Content-based page sharing through the host kernel's KSM (`--sharing host`); `null`
    /// with sharing off.
    #[serde(default)]
    pub sharing: Option<SharingStats>,
}

/// What KSM merged of this VMM's memory (the kernel's `/proc/PID/ksm_stat`, docs/sharing.md).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharingStats {
    /// Pages of this VMM mapping a page KSM merged (shared with this VM's other pages or any
    /// other process's): `ksm_merging_pages`.
    pub merging_pages: u64,
    /// Pages of this VMM KSM replaced with the kernel's zero page (`use_zero_pages`):
    /// `ksm_zero_pages`. They hold no memory.
    pub zero_pages: u64,
    /// Host pages its sharing saves: every zero page, and of its merging pages the fraction
    /// that is not the one copy kept (host-wide `pages_sharing / (pages_sharing +
    /// pages_shared)`); the host counts the VM's resident memory less this.
    pub saved_pages: u64,
    /// The kernel's profit for this process: merged and zero pages less KSM's own metadata
    /// (`ksm_process_profit`, bytes; negative when the metadata costs more).
    pub profit_bytes: i64,
}

/// The pager: its limit, where every guest page is, what it did, and how long it took.
///
/// On the wire the census and the counters are fields of this object itself (flattened).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PagerStats {
    /// Most guest RAM resident on the host; `null`: no limit.
    pub limit_bytes: Option<u64>,
    /// Guest RAM is under the pager (registered with userfaultfd). Until a limit, a release or
    /// the Preventer asks for it, RAM is plain memory on transparent huge pages and the census
    /// counts only what the balloon took and, with the Swap Mapper, the pages disk reads
    /// filled: every other page shows as zero.
    pub attached: bool,
    /// Guest pages by state.
    #[serde(flatten)]
    pub pages: PageCensus,
    /// Swap file blocks holding a page (4 KiB each).
    pub swap_blocks_in_use: u64,
    /// What the pager did since the VM started.
    #[serde(flatten)]
    pub counters: PagerCounters,
    /// Every fault the pager served, from reading its event to the page in place.
    pub fault_latency: LatencySummary,
    /// Only the faults on pages that were in the swap store (a swap-in, with its prefetch run).
    pub swap_fault_latency: LatencySummary,
    /// Each reclaim batch, from picking its victims to the last page dropped.
    pub reclaim_latency: LatencySummary,
    /// The working set, measured by sampling.
    pub active: ActiveMemory,
    /// The host-memory pool in front of the swap file; `null` without one (`--pool`).
    pub pool: Option<PoolStats>,
    /// Tesseract's indirections; `null` without them (`--tesseract`).
    pub indirections: Option<IndirectionStats>,
    /// The guest's page cache as guest disk reads show it (HyperDealer2, docs/hd2.md):
    /// reference patterns, the reclamation cache and the ghost cache; `null` without the Swap
    /// Mapper.
    #[serde(default)]
    pub patterns: Option<PatternStats>,
}

/// The guest's page cache as the pager sees it through guest disk reads (HyperDealer2 §4.4–§4.6,
/// §5.3): the sequences its reads form, the reclamation cache, and the ghost cache of blocks
/// that left guest RAM. Gauges, except the histograms, which only grow.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PatternStats {
    /// Sequential sequences live now: runs of blocks read front to back, once.
    pub sequential: u64,
    /// Resident pages in them.
    pub sequential_pages: u64,
    /// Of those, the pages of sequences the guest's streams are still reading from the disk (a
    /// read of the sequence within the last 0.5 s): cache read once, just now. The host's idle
    /// memory tax counts them idle with HyperDealer2's balancing.
    pub streaming_pages: u64,
    /// Loop sequences live now: sequential sequences read again.
    pub loops: u64,
    /// Resident pages in them.
    pub loop_pages: u64,
    /// Resident pages that mirror a disk block and belong to no sequence.
    pub unclassified_pages: u64,
    /// Pages whose content the reclamation cache holds now (released pages kept in host memory
    /// until the cache needs the room, so a mistaken release costs a copy, not a disk read).
    pub reclamation_cache_pages: u64,
    /// Blocks the ghost cache remembers now: blocks whose pages left guest RAM (released,
    /// dropped by reclaim, or evicted by the guest, seen when it reads another block into the
    /// same page).
    pub ghost_entries: u64,
    /// Pages per bucket of `ghost_hits`.
    pub ghost_bucket_pages: u64,
    /// Block reads that missed guest RAM (guest disk reads, and the blocks of refaults from the
    /// image of pages the pager dropped) of a block the ghost cache held, by stack distance:
    /// element `i` counts those found between `i * ghost_bucket_pages` and
    /// `(i + 1) * ghost_bucket_pages` from the most recent end (Mattson): reads that that many
    /// more pages of memory would have saved.
    pub ghost_hits: Vec<u64>,
    /// Block reads that missed guest RAM (as for `ghost_hits`) of a block the ghost cache did
    /// not hold.
    pub ghost_misses: u64,
    /// The guest's own disk reads among the hits of `ghost_hits`: blocks its page cache had
    /// given up (to its balloon, or evicting them for others) and read again. The host lowers
    /// the cap of a balloon whose guest does this (docs/host.md).
    #[serde(default)]
    pub guest_rereads: u64,
    /// Released pages that came back (a fault or a guest disk read), by how long they stayed
    /// out: element `i` counts dwell times in `[2^i, 2^(i+1))` ms (element 0 also below 1 ms).
    pub dwell_ms_log2: Vec<u64>,
}

/// Tesseract's indirections, over all writable disks: guest disk blocks that refer to blocks of
/// the pager's swap file instead of holding their data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndirectionStats {
    /// Indirections live now.
    pub live: u64,
    /// Bytes of the disks' indirection logs.
    pub log_bytes: u64,
    /// Pages of guest disk writes that became indirections instead of being read back from the
    /// swap file: double-paging swap-ins avoided.
    pub elided_pages: u64,
    /// Indirections ended because the guest wrote their block.
    pub ended: u64,
    /// Guest disk reads (and Swap Mapper refaults) split between the image and the swap file.
    pub split_reads: u64,
    /// Blocks those reads took from the swap file.
    pub blocks_read: u64,
    /// Indirected blocks copied back into the image because a guest write covered part of one.
    pub copied_back: u64,
    /// Blocks copied back into the images at the VM's end (disentangling).
    pub disentangled: u64,
    /// Pages of guest disk writes that stayed plain writes because the most indirections were live.
    pub refused_pages: u64,
    /// Times a log was rewritten to hold just its live indirections.
    pub log_compactions: u64,
    /// Blocks guest-disk defragmentation copied back into the images (`--tesseract-defrag`).
    pub defragmented: u64,
    /// Indirected blocks guest reads needed, which defragmentation then copied back first.
    pub defrag_urgent: u64,
    /// Reads the split reads issued to the swap file: one per run of indirected blocks whose
    /// swap-file blocks follow each other.
    pub store_reads: u64,
    /// Indirected blocks swap-file defragmentation moved next to the other blocks of their
    /// guest write (`--tesseract-defrag store`).
    pub regrouped: u64,
    /// Guest writes whose indirections swap-file defragmentation grouped.
    pub regrouped_writes: u64,
}

/// The host-memory pool (MemFlex): swapped pages kept in host memory until it is `spill_at`
/// full, then the least recent spilled to the swap file. With compression, each page is kept in
/// a slot of its compressed size (whole 256-byte granules), or whole when it does not compress
/// to 3/4 of a page or less.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolStats {
    /// How pages are stored (`--pool-compress`).
    pub compression: crate::spec::PoolCompress,
    /// Size of one chunk of pool memory (`--pool-chunk`); each chunk holds slots of one size.
    pub chunk_bytes: u64,
    /// Most memory the pool's pages may occupy.
    pub capacity_bytes: u64,
    /// Memory the pooled pages occupy now (their slots): what the capacity limits.
    pub used_bytes: u64,
    /// Guest memory the pool holds now (4 KiB per page, whatever it occupies).
    pub stored_bytes: u64,
    /// `stored_bytes / used_bytes`: how many times more guest memory the pool holds than it
    /// occupies (1 without compression; 1 when empty).
    pub compression_ratio: f64,
    /// Chunks mapped now.
    pub chunks: u64,
    /// Host memory mapped for the pool now (`chunks` whole chunks).
    pub mapped_bytes: u64,
    /// Pages reclaim put in the pool.
    pub pooled_pages: u64,
    /// Pages put in the pool compressed.
    pub compressed_pages: u64,
    /// Pages put in the pool whole: without compression, or because they did not compress
    /// to 3/4 of a page.
    pub raw_pages: u64,
    /// Pages reclaim wrote to the swap file because the pool was full.
    pub overflowed_pages: u64,
    /// Pages read back from the pool (faults and proactive swap-in): memory copies, no I/O.
    pub hit_pages: u64,
    /// Pages the flusher moved from the pool to the swap file.
    pub spilled_pages: u64,
    /// Flusher writes (each a run of consecutive blocks).
    pub spill_writes: u64,
    /// Time the flusher spent spilling (copying out, decompressing and writing), in
    /// microseconds: with `spilled_pages`, the spill bandwidth.
    pub spill_us: u64,
    /// Pages dropped from the pool because the guest no longer needed their content.
    pub purged_pages: u64,
    /// Pages brought back without a fault, from the pool.
    pub proactive_pool_pages: u64,
    /// Pages brought back without a fault, from the swap file.
    pub proactive_disk_pages: u64,
}

/// The active-memory estimate from sampled pages (ESX §5.3): each period the pager takes
/// `sampled` random resident pages out of guest RAM and counts those the guest touches.
/// Fractions are of the sampled pages, 0 to 1; before the first period they are 1 (all active).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ActiveMemory {
    /// The estimate: the largest of the three averages below.
    pub estimate: f64,
    /// Slow moving average of the periods' touched fractions.
    pub slow: f64,
    /// Fast moving average.
    pub fast: f64,
    /// The fast average with the period under way counted in.
    pub current: f64,
    /// Sampling periods completed.
    pub periods: u64,
    /// Pages sampled in the last completed period.
    pub last_sampled_pages: u64,
    /// Of those, the ones the guest touched.
    pub last_touched_pages: u64,
    /// Pages sampled in the period under way.
    pub sampled_pages: u64,
    /// Of those, the ones touched so far.
    pub touched_pages: u64,
}

/// Guest pages by state: every page of guest RAM is in exactly one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageCensus {
    /// Mapped in host memory (mirrored pages included).
    pub resident_pages: u64,
    /// Never touched, or dropped as all-zero.
    pub zero_pages: u64,
    /// Only in the swap store.
    pub swapped_pages: u64,
    /// Taken by the balloon.
    pub ballooned_pages: u64,
    /// Reported free by the guest; content forgotten.
    pub reported_pages: u64,
    /// Dropped while mirroring a disk image block; they refault from the image (Swap Mapper).
    pub on_disk_pages: u64,
    /// Out of guest RAM for a working-set sample; their next access faults them back.
    pub sampled_pages: u64,
    /// Resident and identical to the disk image block they were read from (Swap Mapper).
    pub mirrored_pages: u64,
    /// Resident victims cooling down in the victim cache before they are written out
    /// (`--victim-cache`; counted among the resident ones too).
    pub cooling_pages: u64,
}

impl PageCensus {
    /// All guest pages (mirrored pages are counted among the resident ones).
    pub fn total_pages(&self) -> u64 {
        self.resident_pages
            + self.zero_pages
            + self.swapped_pages
            + self.ballooned_pages
            + self.reported_pages
            + self.on_disk_pages
            + self.sampled_pages
    }
}

/// Defines [`PagerCounters`] from one list, so its field names, [`PagerCounters::fields`] and
/// [`PagerCounters::since`] cannot disagree.
macro_rules! pager_counters {
    ($($(#[doc = $doc:literal])+ $name:ident,)+) => {
        /// What the pager did since the VM started, one field per counter; every one only grows.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        pub struct PagerCounters {
            $($(#[doc = $doc])+ pub $name: u64,)+
        }

        impl PagerCounters {
            /// Every counter as `(wire name, value)`, in declaration order.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name),)+]
            }

            /// What happened between `earlier` and `self` (zero for a counter that went back,
            /// which only a different VM does).
            #[must_use]
            pub fn since(&self, earlier: &Self) -> Self {
                Self { $($name: self.$name.saturating_sub(earlier.$name),)+ }
            }
        }
    };
}

impl PagerCounters {
    /// Faults that brought a page in: zero pages (pages the balloon or a free page report had
    /// taken included), swap-ins and image reads. First writes to clean pages are not counted.
    pub fn faults(&self) -> u64 {
        self.faults_zero
            .saturating_add(self.faults_swap)
            .saturating_add(self.faults_image)
    }
}

pager_counters! {
    /// Faults answered with a zero page (first touch, or a page dropped as zero).
    faults_zero,
    /// Faults answered from the swap store.
    faults_swap,
    /// Faults on pages the balloon or a free page report had taken.
    faults_released,
    /// Faults served from the pages the VM was restored from (`--restore`: the snapshot's
    /// memory file) or migrated from (`--incoming`): counted among `faults_swap` too.
    faults_restored,
    /// Faults on pages whose content was in a store (swapped, or dropped to its image block)
    /// taken by a vCPU thread, while the guest ran (VSwapper Fig. 9c).
    stored_faults_guest,
    /// ... taken by another thread of the VMM, while its own code ran for the guest: a device
    /// reading or writing guest memory above all (VSwapper Fig. 9b).
    stored_faults_vmm,
    /// Faults on pages the guest had reported free, answered with a zero page and no read
    /// (VSwapper's false reads, cooperative path).
    false_reads_avoided,
    /// vCPUs stopped by the False Reads Preventer on a write to a swapped or on-disk page.
    preventer_attempts,
    /// ... whose instruction overwrote the whole page, so it went in with no read.
    preventer_completed,
    /// ... whose instruction did not, so the page was swapped in.
    preventer_fallbacks,
    /// ... that did not answer in time, so the pager swapped the page in itself.
    preventer_timeouts,
    /// Write faults on swapped or on-disk pages the Preventer left to an ordinary read, because
    /// a read has cost less per page than a prevention on this host.
    preventer_passed,
    /// Whole pages a device wrote into place without reading their old content.
    device_installs,
    /// First writes to clean, write-protected pages.
    write_faults,
    /// Faults whose store read, done without the page lock, found the faulting page changed
    /// meanwhile (a device wrote it, the balloon took it), so they were served again.
    fault_reads_redone,
    /// Victims (pages) dropped as all-zero, with no write.
    reclaimed_zero,
    /// Clean victims (pages) dropped because their swap block still held them, with no write.
    reclaimed_clean,
    /// Victims (pages) written to the swap store.
    reclaimed_written,
    /// Victims (pages) dropped because they mirrored a disk block: VSwapper's silent swap
    /// writes avoided.
    reclaimed_mirrored,
    /// Victims (pages) dropped because a block of the pool already held exactly their content
    /// (share before swap, compared in full): writes of 4 KiB avoided, and the block shared.
    reclaimed_shared,
    /// Faults answered from the disk image (Swap Mapper).
    faults_image,
    /// Bytes read from disk images by those faults and by consistency refetches.
    image_bytes_read,
    /// Pages a device read filled whole while their content was swapped or on disk: VSwapper's
    /// stale swap reads avoided.
    stale_reads_avoided,
    /// Pages brought back from the image before the guest overwrote the block they relied on.
    mapper_refetches,
    /// Victims (pages) a guest disk read had left writable as mirrors, whose digest reclaim
    /// compared with their block's (Swap Mapper).
    mirrors_checked,
    /// ... and found changed: the guest had written them, so they were not dropped as mirrors.
    mirrors_changed,
    /// Pages a guest disk read filled whose block's digest was known from an earlier read of the
    /// block, not written since, so it was not taken again (Swap Mapper).
    mirror_digests_reused,
    /// Bytes read from the swap store.
    swap_bytes_read,
    /// Bytes written to the swap store.
    swap_bytes_written,
    /// Pages brought in next to a faulting page.
    prefetched,
    /// Prefetched pages brought in clean and later written by the guest (a lower bound: reads
    /// of resident pages are invisible to the host, and so are writes to pages brought in
    /// writable).
    prefetch_hits,
    /// Pages a read fault brought in from swap writable, their swap blocks freed, because the
    /// guest had been writing nearly every page it swapped in, so keeping them clean cost a
    /// write fault each and saved nothing.
    swapped_in_writable,
    /// Pages kept clean made writable together with a page the guest wrote beside them (in its
    /// 64-page window), for the same reason: a guest writing through pages that came in clean
    /// (a restore's or a migration's prefetch, a swap-in's cluster) takes about one write fault
    /// per window of them.
    opened_ahead,
    /// Reclaim batches run.
    reclaim_batches,
    /// Pages released by balloon inflation.
    ballooned,
    /// Pages released by free page reporting.
    reported,
    /// Pages a balloon deflate gave back that were mapped at once to the zero page, so that the
    /// guest's first touch of each is no fault round trip through the pager.
    deflated_mapped,
    /// Times the VM was paused because swap or image I/O failed.
    pauses,
    /// Times guest RAM was taken over from plain memory (registered with userfaultfd): at start
    /// with a limit or the Preventer, or when the first limit or release arrived.
    attaches,
    /// Huge pages split so that releasing part of one frees its memory.
    huge_pages_split,
    /// Pages brought back from the swap store (pool or file) without a fault, because the limit
    /// rose (proactive swap-in).
    proactive_swap_ins,
    /// Pages a guest disk write read while they were swapped out (to the swap file or the pool,
    /// or dropped for the disk image): swapped in only to be written to the guest's disk (double
    /// paging; Tesseract's indirections avoid them). A page out for a working-set sample comes
    /// back from host memory and is not counted.
    double_paging_swap_ins,
    /// Victims written by the guest (or a device) while they cooled in the victim cache: kept
    /// resident, with no write and no fault back.
    victim_cache_hits,
    /// Victims the guest wrote to its own disk while they cooled, so they then left without a
    /// write to the swap file (they mirrored the disk block; with the Swap Mapper).
    victim_cache_caught,
    /// Sequential sequences detected in guest disk reads (HyperDealer2 §4.4).
    sequences_detected,
    /// Sequences read again, so they became loops.
    loops_detected,
    /// Sequential sequences probed by a cold-only release: a few of their pages released to see
    /// whether the guest still reads them (docs/hd2.md).
    sequences_probed,
    /// `PUT /memory/release` requests served (HyperDealer2's instant reclamation).
    releases,
    /// Pages they released.
    released_pages,
    /// Candidates they found changed by the guest, so kept.
    release_changed,
    /// Time they took, in microseconds.
    release_us,
    /// Released pages that came back: a fault, or a guest disk read of their block.
    released_refaults,
    /// Candidates checked ahead of a release (`--release-ready`): write-protected and compared
    /// with their digests in the background, so a release only drops them.
    release_ready_checked,
    /// Pages made ready for release that guest writes then took back (each cost the guest a
    /// write fault; the readiness thread slows down while this is most of what it makes ready).
    release_ready_lost,
    /// Released pages copied into the reclamation cache because they could not be moved there
    /// (a kernel before 6.8, or a page shared by KSM).
    release_cache_copies,
    /// Refaults served from the reclamation cache, with no disk read.
    reclamation_cache_hits,
}

/// A latency distribution over the most recent samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Samples the percentiles are taken over (the most recent ones, at most 16384).
    pub samples: u64,
    /// Median; 0 without samples.
    pub p50_us: u64,
    /// 99th percentile; 0 without samples.
    pub p99_us: u64,
    /// The longest of them; 0 without samples.
    pub max_us: u64,
}

/// The virtio-balloon device, and what the guest last said about its memory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BalloonStats {
    /// Pages the device asks the driver to hold.
    pub target_pages: u64,
    /// Pages the driver says it holds.
    pub actual_pages: u64,
    /// Pages the driver gave by inflating.
    pub inflated_pages: u64,
    /// Pages the driver took back by deflating.
    pub deflated_pages: u64,
    /// Of those, pages that took the balloon below the target: the guest deflated on its own
    /// because it ran out of memory (deflate-on-OOM), so it needed them.
    pub oom_deflated_pages: u64,
    /// Deflate requests that took the balloon below the target.
    pub oom_deflates: u64,
    /// Pages the driver reported free (free page reporting).
    pub reported_pages: u64,
    /// PFNs or ranges outside guest RAM, ignored.
    pub invalid_pfns: u64,
    /// Statistics buffers the driver sent.
    pub stats_updates: u64,
    /// The guest's last statistics; `null` until it sent some.
    pub guest: Option<GuestMemoryStats>,
}

/// The guest's own memory statistics (virtio-balloon statistics queue). A field the guest did
/// not send is `null`; a tag this version does not know is left out.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestMemoryStats {
    /// How long ago the guest sent them, in milliseconds.
    pub age_ms: u64,
    /// Memory swapped in (`VIRTIO_BALLOON_S_SWAP_IN`).
    pub swap_in_bytes: Option<u64>,
    /// Memory swapped out (`VIRTIO_BALLOON_S_SWAP_OUT`).
    pub swap_out_bytes: Option<u64>,
    /// Major page faults (`VIRTIO_BALLOON_S_MAJFLT`).
    pub major_faults: Option<u64>,
    /// Minor page faults (`VIRTIO_BALLOON_S_MINFLT`).
    pub minor_faults: Option<u64>,
    /// Unused memory (`VIRTIO_BALLOON_S_MEMFREE`).
    pub free_memory_bytes: Option<u64>,
    /// Memory the guest sees (`VIRTIO_BALLOON_S_MEMTOT`).
    pub total_memory_bytes: Option<u64>,
    /// Memory available to new work without swapping (`VIRTIO_BALLOON_S_AVAIL`).
    pub available_memory_bytes: Option<u64>,
    /// Memory in the page cache that can be freed (`VIRTIO_BALLOON_S_CACHES`).
    pub disk_caches_bytes: Option<u64>,
    /// Successful huge page allocations (`VIRTIO_BALLOON_S_HTLB_PGALLOC`).
    pub hugetlb_allocations: Option<u64>,
    /// Failed huge page allocations (`VIRTIO_BALLOON_S_HTLB_PGFAIL`).
    pub hugetlb_failures: Option<u64>,
}

impl GuestMemoryStats {
    /// Sets the field of virtio statistics tag `tag`; returns false for a tag it does not know.
    pub fn set(&mut self, tag: u16, value: u64) -> bool {
        let field = match tag {
            0 => &mut self.swap_in_bytes,
            1 => &mut self.swap_out_bytes,
            2 => &mut self.major_faults,
            3 => &mut self.minor_faults,
            4 => &mut self.free_memory_bytes,
            5 => &mut self.total_memory_bytes,
            6 => &mut self.available_memory_bytes,
            7 => &mut self.disk_caches_bytes,
            8 => &mut self.hugetlb_allocations,
            9 => &mut self.hugetlb_failures,
            _ => return false,
        };
        *field = Some(value);
        true
    }
}

/// One virtio-blk disk.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskStats {
    /// Read requests served.
    pub reads: u64,
    /// Write requests served.
    pub writes: u64,
    /// Flush requests served.
    pub flushes: u64,
    /// Bytes the guest read.
    pub bytes_read: u64,
    /// Bytes the guest wrote.
    pub bytes_written: u64,
    /// Requests answered with an error, or dropped.
    pub errors: u64,
    /// Times a write or flush found the image's file system full and paused the VM until a
    /// resume (the request is then tried again).
    pub full_pauses: u64,
    /// Time write requests spent before their data went to the image, in µs (all of them):
    /// gathering the guest's pages, swapping in those that were out of guest RAM (double paging).
    pub write_prepare_us: u64,
    /// The longest of those, in µs.
    pub write_prepare_max_us: u64,
    /// Time write requests spent after their data reached the image (logging Tesseract's
    /// indirections), in µs (all of them).
    pub write_end_us: u64,
    /// Time read requests took, in µs (all of them): with `bytes_read`, the read throughput.
    pub read_us: u64,
    /// Write requests with holes (pages the host held outside guest RAM, each swapped back in
    /// for the write or left out of it as one of Tesseract's indirections), by how many they
    /// had: 1–20, 21–50, more than 50 (Tesseract Table 1's classes). These have 1–20.
    #[serde(default)]
    pub writes_holes_1_20: u64,
    /// Of those, the ones with 21–50 holes.
    #[serde(default)]
    pub writes_holes_21_50: u64,
    /// Of those, the ones with more than 50 holes.
    #[serde(default)]
    pub writes_holes_over_50: u64,
    /// The holes of all write requests, in pages.
    #[serde(default)]
    pub write_holes: u64,
    /// Read requests some of whose blocks came from the pager's swap file (split reads).
    #[serde(default)]
    pub split_reads: u64,
    /// The time those took, in µs (part of `read_us`).
    #[serde(default)]
    pub split_read_us: u64,
    /// Queue notifications the device processed, by either path.
    pub notifies: u64,
    /// Of those, the ones its thread took from an ioeventfd, with no exit to memvisor (several
    /// guest writes between two reads of the eventfd count once).
    pub kernel_notifies: u64,
    /// Queue ioeventfds KVM refused: those queues are served on the vCPU's exit instead.
    pub ioevent_refusals: u64,
}

/// VM exits that reached memvisor, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitStats {
    /// Port I/O.
    pub io: u64,
    /// MMIO.
    pub mmio: u64,
    /// Everything else (system events, halts, failed entries).
    pub other: u64,
}

impl ExitStats {
    /// All exits.
    pub fn total(&self) -> u64 {
        self.io + self.mmio + self.other
    }
}

/// What the guest did wrong, by kind, as the devices and the VMM counted it: every occurrence,
/// whether its message was logged or not (each kind logs its first 5, then one summary line per
/// 10 s). The last four count host faults the guest's requests met, which it can repeat at will.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestErrors {
    /// Reads and writes of I/O ports no device claims.
    pub unclaimed_port_accesses: u64,
    /// Reads and writes of MMIO addresses no device claims.
    pub unclaimed_mmio_accesses: u64,
    /// Virtio FEATURES_OK refused: features the device did not offer, or not VERSION_1.
    pub refused_features: u64,
    /// Virtio DRIVER_OK refused (features not accepted, or a ready queue outside guest memory).
    pub refused_driver_ok: u64,
    /// Writes to virtio-mmio registers that take none at that point of the protocol, or of a
    /// width other than 4 bytes.
    pub ignored_register_writes: u64,
    /// virtio-blk requests rejected (malformed, outside guest memory or the disk, a write to a
    /// read-only disk) or of an unsupported type.
    pub bad_block_requests: u64,
    /// Used buffers a virtio device could not return (the used ring outside guest memory).
    pub used_ring_errors: u64,
    /// Balloon PFNs and free page reports outside guest RAM, or PFN arrays it could not read.
    pub bad_balloon_pages: u64,
    /// Host fault: disk image reads, writes and flushes that failed.
    pub disk_io_errors: u64,
    /// Host fault: releases of ballooned or reported pages that failed.
    pub balloon_release_errors: u64,
    /// Host fault: writes of the serial port's output that failed.
    pub serial_errors: u64,
    /// Host fault: guest pages the pager could not install or write-protect for a device
    /// request (a userfaultfd call failed).
    pub pager_device_errors: u64,
    /// Messages about all of these that were not logged (only counted, and summarized).
    pub suppressed_messages: u64,
}

impl GuestErrors {
    /// Every counter as `(wire name, value)`, in declaration order.
    pub fn fields(&self) -> [(&'static str, u64); 13] {
        [
            ("unclaimed_port_accesses", self.unclaimed_port_accesses),
            ("unclaimed_mmio_accesses", self.unclaimed_mmio_accesses),
            ("refused_features", self.refused_features),
            ("refused_driver_ok", self.refused_driver_ok),
            ("ignored_register_writes", self.ignored_register_writes),
            ("bad_block_requests", self.bad_block_requests),
            ("used_ring_errors", self.used_ring_errors),
            ("bad_balloon_pages", self.bad_balloon_pages),
            ("disk_io_errors", self.disk_io_errors),
            ("balloon_release_errors", self.balloon_release_errors),
            ("serial_errors", self.serial_errors),
            ("pager_device_errors", self.pager_device_errors),
            ("suppressed_messages", self.suppressed_messages),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_since_and_fields() {
        let a = PagerCounters {
            faults_zero: 5,
            swap_bytes_read: 4096,
            ..PagerCounters::default()
        };
        let b = PagerCounters {
            faults_zero: 7,
            swap_bytes_read: 1024,
            pauses: 1,
            ..PagerCounters::default()
        };
        let d = b.since(&a);
        assert_eq!((d.faults_zero, d.swap_bytes_read, d.pauses), (2, 0, 1));
        let f = d.fields();
        assert_eq!(f.len(), 56);
        assert_eq!(f[0], ("faults_zero", 2));
        assert!(f.contains(&("pauses", 1)));
    }

    #[test]
    fn pager_stats_are_one_flat_object() {
        let s = PagerStats {
            limit_bytes: Some(1 << 20),
            pages: PageCensus {
                resident_pages: 3,
                ..PageCensus::default()
            },
            counters: PagerCounters {
                faults_swap: 9,
                ..PagerCounters::default()
            },
            ..PagerStats::default()
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["resident_pages"], 3);
        assert_eq!(v["faults_swap"], 9);
        assert_eq!(v["fault_latency"]["p99_us"], 0);
        let back: PagerStats = serde_json::from_value(v).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn guest_errors_fields_are_the_wire_fields() {
        let e = GuestErrors {
            refused_driver_ok: 3,
            suppressed_messages: 4,
            ..GuestErrors::default()
        };
        let v = serde_json::to_value(&e).unwrap();
        let wire = v.as_object().unwrap();
        let fields = e.fields();
        assert_eq!(fields.len(), wire.len());
        for (name, n) in fields {
            assert_eq!(wire[name], n, "{name}");
        }
    }

    #[test]
    fn guest_statistics_by_tag() {
        let mut g = GuestMemoryStats::default();
        assert!(g.set(4, 100));
        assert!(g.set(2, 7));
        assert!(!g.set(99, 1));
        assert_eq!(g.free_memory_bytes, Some(100));
        assert_eq!(g.major_faults, Some(7));
        assert_eq!(g.swap_in_bytes, None);
        let v = serde_json::to_value(&g).unwrap();
        assert!(v["swap_in_bytes"].is_null());
    }
}
