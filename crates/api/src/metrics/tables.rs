//! The three tables of rows, the one place that names metrics: a VMM's `VmStats`
//! (`memvisor_vm_`), the host's `HostInfo` (`memvisor_host_`) and each of its VMs' `HostVm`
//! (`memvisor_host_vm_`); and the catalogue of every metric they name. A test serializes every
//! type with every optional part present and checks that every field has a row and every row a
//! field.

use serde_json::Value;

use crate::host::{Balancing, FreeStateName, HostVmState};
use crate::metrics::rows::{
    counter, gauge, not, page_counter, page_gauge, state, Export, MetricKind, Row, Unit, MS, US,
};
use crate::spec::PoolCompress;

/// Maps of a type whose keys become a label: (path, label name).
pub(super) const VM_MAPS: &[(&str, &str)] = &[("disks", "disk")];

const FAULTS_HELP: &str = "Faults the pager served by installing a page, by where the page came from: zero (a zero page, also for pages the balloon or a free page report had taken), swap (the swap file), image (a disk image, Swap Mapper).";
const STORED_FAULTS_HELP: &str = "Faults on guest pages whose content was in a store (swapped, or dropped to its disk image block), by the context that took them: guest (a vCPU thread, the guest running) or vmm (another VMM thread, a device reading or writing guest memory above all).";
const RECLAIMED_HELP: &str = "Victim pages the pager reclaimed, by how: zero (dropped as all-zero), clean (dropped, its swap block still held it), written (written to the swap file), mirrored (dropped, it mirrored a disk block: Swap Mapper), shared (dropped, a pooled block already held exactly its content: share before swap).";
const EXITS_HELP: &str = "VM exits that reached the VMM, by kind: io (port I/O), mmio, other.";
const WRITE_HOLES_HELP: &str = "Write requests of a disk with holes (pages the host held outside guest RAM), by how many: 1-20, 21-50, over-50 (Tesseract Table 1).";
const GUEST_ERRORS_HELP: &str = "What the guest did wrong, by kind (the fields of GET /stats guest_errors): unclaimed port and MMIO accesses, refused virtio FEATURES_OK and DRIVER_OK, ignored virtio-mmio register writes, rejected virtio-blk requests, used ring write failures, bad balloon PFNs and reports.";
const GUEST_HOST_FAULTS_HELP: &str = "Host faults the guest's requests met, which it can repeat at will, by kind: disk image I/O, balloon page releases, serial output, the pager's page installs and write protection for devices.";

/// `VmStats` (a VMM's `GET /stats`): prefix `memvisor_vm_`.
#[rustfmt::skip]
pub(super) const VM_ROWS: &[Row] = &[
    gauge("pager.limit_bytes", "limit", Unit::Bytes, "The pager's resident limit (absent without one)."),
    gauge("pager.attached", "pager_attached", Unit::None, "1 once guest RAM is under the pager (registered with userfaultfd)."),
    page_gauge("pager.resident_pages", "resident", "Guest memory resident on the host."),
    page_gauge("pager.zero_pages", "zero", "Guest memory never touched, or dropped as all-zero."),
    page_gauge("pager.swapped_pages", "swapped", "Guest memory only in the pager's swap file."),
    page_gauge("pager.ballooned_pages", "ballooned", "Guest memory the balloon took."),
    page_gauge("pager.reported_pages", "reported", "Guest memory the guest reported free (content forgotten)."),
    page_gauge("pager.on_disk_pages", "on_disk", "Clean guest memory dropped because a disk image block holds it (Swap Mapper)."),
    page_gauge("pager.sampled_pages", "sampled", "Guest memory out of RAM for a working-set sample."),
    page_gauge("pager.mirrored_pages", "mirrored", "Resident guest memory identical to the disk image block it was read from (Swap Mapper)."),
    page_gauge("pager.cooling_pages", "cooling", "Resident victims cooling down in the victim cache before they are written out."),
    page_gauge("pager.swap_blocks_in_use", "swap_used", "Swap file space holding guest pages."),
    counter("pager.faults_zero", "faults", Unit::None, FAULTS_HELP).labelled("source", "zero"),
    counter("pager.faults_swap", "faults", Unit::None, FAULTS_HELP).labelled("source", "swap"),
    counter("pager.faults_image", "faults", Unit::None, FAULTS_HELP).labelled("source", "image"),
    counter("pager.faults_released", "released_faults", Unit::None, "Faults on pages the balloon or a free page report had taken (counted among the zero faults too)."),
    counter("pager.faults_restored", "restored_faults", Unit::None, "Faults served from the pages the VM was restored (a snapshot's memory file) or migrated from (counted among the swap faults too)."),
    counter("pager.stored_faults_guest", "stored_faults", Unit::None, STORED_FAULTS_HELP).labelled("context", "guest"),
    counter("pager.stored_faults_vmm", "stored_faults", Unit::None, STORED_FAULTS_HELP).labelled("context", "vmm"),
    counter("pager.false_reads_avoided", "false_reads_avoided", Unit::None, "Faults on pages the guest had reported free, answered with a zero page and no read (VSwapper's false reads, cooperative path)."),
    counter("pager.preventer_attempts", "preventer_attempts", Unit::None, "vCPUs the False Reads Preventer stopped on a write to a swapped or on-disk page."),
    counter("pager.preventer_completed", "preventer_completed", Unit::None, "Preventer attempts whose instruction overwrote the whole page, installed with no read."),
    counter("pager.preventer_fallbacks", "preventer_fallbacks", Unit::None, "Preventer attempts whose instruction did not overwrite the whole page, so it was read in."),
    counter("pager.preventer_timeouts", "preventer_timeouts", Unit::None, "Preventer attempts whose vCPU did not answer in time, so the pager read the page in itself."),
    counter("pager.preventer_passed", "preventer_passed", Unit::None, "Write faults on swapped or on-disk pages the Preventer left to an ordinary read, because a read has cost less per page than a prevention on this host."),
    counter("pager.device_installs", "device_installs", Unit::None, "Whole pages a device wrote into place without reading their old content."),
    counter("pager.write_faults", "write_faults", Unit::None, "First writes to clean, write-protected pages."),
    counter("pager.fault_reads_redone", "fault_reads_redone", Unit::None, "Faults whose store read, done without the page lock, found the faulting page changed meanwhile, so they were served again under the lock."),
    counter("pager.reclaimed_zero", "reclaimed_pages", Unit::None, RECLAIMED_HELP).labelled("how", "zero"),
    counter("pager.reclaimed_clean", "reclaimed_pages", Unit::None, RECLAIMED_HELP).labelled("how", "clean"),
    counter("pager.reclaimed_written", "reclaimed_pages", Unit::None, RECLAIMED_HELP).labelled("how", "written"),
    counter("pager.reclaimed_mirrored", "reclaimed_pages", Unit::None, RECLAIMED_HELP).labelled("how", "mirrored"),
    counter("pager.reclaimed_shared", "reclaimed_pages", Unit::None, RECLAIMED_HELP).labelled("how", "shared"),
    counter("pager.image_bytes_read", "image_read", Unit::Bytes, "Bytes read from disk images by image faults and consistency refetches (Swap Mapper)."),
    counter("pager.stale_reads_avoided", "stale_reads_avoided", Unit::None, "Pages a device read filled whole while their content was swapped or on disk (VSwapper's stale swap reads avoided)."),
    counter("pager.mapper_refetches", "mapper_refetches", Unit::None, "Pages brought back from the image before the guest overwrote the block they relied on (Swap Mapper)."),
    counter("pager.mirrors_checked", "mirrors_checked", Unit::None, "Victims a guest disk read had left writable as mirrors, whose digest reclaim compared with their block's (Swap Mapper)."),
    counter("pager.mirrors_changed", "mirrors_changed", Unit::None, "Mirrors reclaim found changed by guest writes, so not dropped as mirrors (Swap Mapper)."),
    counter("pager.mirror_digests_reused", "mirror_digests_reused", Unit::None, "Pages a guest disk read filled whose block's digest was known from an earlier read of the block, not written since (Swap Mapper)."),
    counter("pager.swap_bytes_read", "swap_read", Unit::Bytes, "Bytes read from the swap file."),
    counter("pager.swap_bytes_written", "swap_written", Unit::Bytes, "Bytes written to the swap file."),
    counter("pager.prefetched", "prefetched_pages", Unit::None, "Pages brought in next to a faulting page."),
    counter("pager.prefetch_hits", "prefetch_hits", Unit::None, "Prefetched pages brought in clean and later written by the guest (a lower bound)."),
    counter("pager.swapped_in_writable", "swapped_in_writable", Unit::None, "Pages a read fault brought in from swap writable, because the guest had been writing nearly every page it swapped in."),
    counter("pager.opened_ahead", "opened_ahead", Unit::None, "Pages kept clean made writable with a page the guest wrote beside them, for the same reason."),
    counter("pager.reclaim_batches", "reclaim_batches", Unit::None, "Reclaim batches run."),
    page_counter("pager.ballooned", "balloon_released", "Memory released by balloon inflation."),
    page_counter("pager.reported", "reporting_released", "Memory released by free page reporting."),
    counter("pager.deflated_mapped", "deflated_mapped", Unit::None, "Pages a balloon deflate gave back that were mapped at once to the zero page, so the guest's first touch is no fault round trip."),
    counter("pager.pauses", "io_failure_pauses", Unit::None, "Times the VM was paused because swap or image I/O failed."),
    counter("pager.attaches", "pager_attaches", Unit::None, "Times guest RAM was taken over from plain memory by the pager."),
    counter("pager.huge_pages_split", "huge_pages_split", Unit::None, "Huge pages split so that releasing part of one frees its memory."),
    counter("pager.victim_cache_hits", "victim_cache_hits", Unit::None, "Victims written by the guest or a device while they cooled in the victim cache: kept resident."),
    counter("pager.victim_cache_caught", "victim_cache_caught", Unit::None, "Victims the guest wrote to its own disk while they cooled, which then left without a swap-file write."),
    page_counter("pager.proactive_swap_ins", "proactive_swapin", "Guest memory brought back without a fault because the limit rose (proactive swap-in), from the pool or the swap file."),
    page_counter("pager.double_paging_swap_ins", "double_paging_swap_ins", "Guest memory a guest disk write read while it was swapped out: swapped in only to be written to the guest's disk (double paging)."),
    counter("pager.sequences_detected", "sequences_detected", Unit::None, "Sequential sequences detected in guest disk reads (HyperDealer2 4.4)."),
    counter("pager.loops_detected", "loops_detected", Unit::None, "Sequences read again, so they became loops."),
    counter("pager.sequences_probed", "sequences_probed", Unit::None, "Sequential sequences probed by a cold-only release."),
    counter("pager.releases", "releases", Unit::None, "Instant releases served (PUT /memory/release, HyperDealer2 4.3)."),
    page_counter("pager.released_pages", "released", "Guest memory instant releases took out of guest RAM."),
    counter("pager.release_changed", "release_changed_pages", Unit::None, "Release candidates found changed by the guest, so kept."),
    counter("pager.release_us", "release_time", Unit::Seconds, "Time instant releases took.").scaled(US),
    counter("pager.released_refaults", "released_refaults", Unit::None, "Released pages that came back (a fault or a guest disk read of their block)."),
    counter("pager.release_cache_copies", "release_cache_copies", Unit::None, "Released pages copied into the reclamation cache because they could not be moved (a kernel before 6.8, or a page shared by KSM)."),
    counter("pager.release_ready_lost", "release_ready_lost", Unit::None, "Pages made ready for release that guest writes took back, each with a write fault (--release-ready)."),
    counter("pager.release_ready_checked", "release_ready_checked", Unit::None, "Candidates write-protected and checked ahead of a release, so that the release only drops them (--release-ready)."),
    counter("pager.reclamation_cache_hits", "reclamation_cache_hits", Unit::None, "Refaults of released pages served from the reclamation cache, with no disk read."),
    gauge("pager.fault_latency.samples", "fault_latency_samples", Unit::None, "Recent faults the fault latency percentiles are taken over (at most 16384)."),
    gauge("pager.fault_latency.p50_us", "fault_latency_p50", Unit::Seconds, "Median time to serve a fault, over the recent ones.").scaled(US),
    gauge("pager.fault_latency.p99_us", "fault_latency_p99", Unit::Seconds, "99th percentile time to serve a fault, over the recent ones.").scaled(US),
    gauge("pager.fault_latency.max_us", "fault_latency_max", Unit::Seconds, "Longest time to serve a fault, over the recent ones.").scaled(US),
    gauge("pager.swap_fault_latency.samples", "swap_fault_latency_samples", Unit::None, "Recent swap-in faults the swap fault latency percentiles are taken over."),
    gauge("pager.swap_fault_latency.p50_us", "swap_fault_latency_p50", Unit::Seconds, "Median time to serve a fault on a swapped page, prefetch included.").scaled(US),
    gauge("pager.swap_fault_latency.p99_us", "swap_fault_latency_p99", Unit::Seconds, "99th percentile time to serve a fault on a swapped page.").scaled(US),
    gauge("pager.swap_fault_latency.max_us", "swap_fault_latency_max", Unit::Seconds, "Longest time to serve a fault on a swapped page.").scaled(US),
    gauge("pager.reclaim_latency.samples", "reclaim_latency_samples", Unit::None, "Recent reclaim batches the reclaim latency percentiles are taken over."),
    gauge("pager.reclaim_latency.p50_us", "reclaim_latency_p50", Unit::Seconds, "Median duration of a reclaim batch.").scaled(US),
    gauge("pager.reclaim_latency.p99_us", "reclaim_latency_p99", Unit::Seconds, "99th percentile duration of a reclaim batch.").scaled(US),
    gauge("pager.reclaim_latency.max_us", "reclaim_latency_max", Unit::Seconds, "Longest reclaim batch.").scaled(US),
    gauge("pager.active.estimate", "active_estimate", Unit::Ratio, "Active-memory estimate: the largest of the slow, fast and current averages of the sampled touched fraction (ESX 5.3)."),
    gauge("pager.active.slow", "active_slow", Unit::Ratio, "Slow moving average of the sampling periods' touched fractions."),
    gauge("pager.active.fast", "active_fast", Unit::Ratio, "Fast moving average of the sampling periods' touched fractions."),
    gauge("pager.active.current", "active_current", Unit::Ratio, "The fast average with the sampling period under way counted in."),
    counter("pager.active.periods", "sampling_periods", Unit::None, "Working-set sampling periods completed."),
    gauge("pager.active.last_sampled_pages", "sampling_last_sampled_pages", Unit::None, "Pages sampled in the last completed period."),
    gauge("pager.active.last_touched_pages", "sampling_last_touched_pages", Unit::None, "Of those, the ones the guest touched."),
    gauge("pager.active.sampled_pages", "sampling_sampled_pages", Unit::None, "Pages sampled in the period under way."),
    gauge("pager.active.touched_pages", "sampling_touched_pages", Unit::None, "Of those, the ones touched so far."),
    state("pager.pool.compression", "pool_compression", pool_compressions, "How the pool keeps pages (--pool-compress): 1 for the current way."),
    gauge("pager.pool.chunk_bytes", "pool_chunk", Unit::Bytes, "Size of one chunk of pool memory (--pool-chunk)."),
    gauge("pager.pool.capacity_bytes", "pool_capacity", Unit::Bytes, "Most memory the host-memory pool's pages may occupy (absent without a pool)."),
    gauge("pager.pool.used_bytes", "pool_used", Unit::Bytes, "Memory the pooled pages occupy (compressed or whole): what the capacity limits."),
    gauge("pager.pool.stored_bytes", "pool_stored", Unit::Bytes, "Swapped guest memory the pool holds (4 KiB a page, whatever it occupies)."),
    not("pager.pool.compression_ratio", "stored_bytes / used_bytes: a ratio of two exported gauges"),
    gauge("pager.pool.chunks", "pool_chunks", Unit::None, "Chunks of memory mapped for the pool."),
    gauge("pager.pool.mapped_bytes", "pool_mapped", Unit::Bytes, "Host memory mapped for the pool (whole chunks)."),
    page_counter("pager.pool.pooled_pages", "pool_pooled", "Swapped guest memory reclaim put in the pool."),
    page_counter("pager.pool.compressed_pages", "pool_compressed", "Guest memory put in the pool compressed (as its size before compression)."),
    page_counter("pager.pool.raw_pages", "pool_raw", "Guest memory put in the pool whole: without compression, or because it did not compress to 3/4 of a page."),
    page_counter("pager.pool.overflowed_pages", "pool_overflowed", "Swapped guest memory written to the swap file because the pool was full."),
    page_counter("pager.pool.hit_pages", "pool_hits", "Guest memory read back from the pool (memory copies, no I/O)."),
    page_counter("pager.pool.spilled_pages", "pool_spilled", "Memory the pool's flusher moved to the swap file."),
    counter("pager.pool.spill_writes", "pool_spill_writes", Unit::None, "Flusher writes, each a run of consecutive blocks."),
    counter("pager.pool.spill_us", "pool_spill", Unit::Seconds, "Time the pool's flusher spent spilling (copying out, decompressing, writing): with the spilled bytes, the spill bandwidth.").scaled(US),
    page_counter("pager.pool.purged_pages", "pool_purged", "Pool memory dropped because the guest no longer needed its content."),
    page_counter("pager.pool.proactive_pool_pages", "proactive_swapin_pool", "Guest memory brought back without a fault, from the pool."),
    page_counter("pager.pool.proactive_disk_pages", "proactive_swapin_disk", "Guest memory brought back without a fault, from the swap file."),
    gauge("pager.indirections.live", "indirections", Unit::None, "Guest disk blocks that refer to a block of the swap file instead of holding their data (Tesseract)."),
    gauge("pager.indirections.log_bytes", "indirection_log", Unit::Bytes, "Size of the disks' indirection logs."),
    page_counter("pager.indirections.elided_pages", "double_paging_elided", "Guest disk writes of swapped memory that became indirections instead of swap-ins (double paging avoided)."),
    counter("pager.indirections.ended", "indirections_ended", Unit::None, "Indirections ended because the guest wrote their block."),
    counter("pager.indirections.split_reads", "split_reads", Unit::None, "Guest disk reads and Swap Mapper refaults split between the image and the swap file."),
    counter("pager.indirections.blocks_read", "indirected_blocks_read", Unit::None, "Blocks those split reads took from the swap file."),
    counter("pager.indirections.copied_back", "indirections_copied_back", Unit::None, "Indirected blocks copied back into the image because a guest write covered part of one."),
    counter("pager.indirections.disentangled", "indirections_disentangled", Unit::None, "Indirected blocks copied back into the images at the VM's end."),
    page_counter("pager.indirections.refused_pages", "indirections_refused", "Guest disk writes of swapped memory that stayed plain writes because the most indirections were live."),
    counter("pager.indirections.defragmented", "indirections_defragmented", Unit::None, "Indirected blocks guest-disk defragmentation copied back into the images."),
    counter("pager.indirections.defrag_urgent", "indirections_defrag_urgent", Unit::None, "Indirected blocks guest reads needed, which defragmentation copied back first."),
    counter("pager.indirections.store_reads", "indirections_store_reads", Unit::None, "Reads split reads issued to the swap file, one per run of indirected blocks whose swap-file blocks follow each other."),
    counter("pager.indirections.regrouped", "indirections_regrouped", Unit::None, "Indirected blocks swap-file defragmentation moved next to the other blocks of their guest write."),
    counter("pager.indirections.regrouped_writes", "indirections_regrouped_writes", Unit::None, "Guest writes whose indirections swap-file defragmentation grouped."),
    counter("pager.indirections.log_compactions", "indirection_log_compactions", Unit::None, "Times an indirection log was rewritten to hold just its live indirections."),
    gauge("pager.patterns.sequential", "pattern_sequential_sequences", Unit::None, "Sequential sequences the pager knows now: runs of disk blocks the guest read front to back, once (HyperDealer2 4.4)."),
    page_gauge("pager.patterns.sequential_pages", "pattern_sequential", "Guest memory that mirrors blocks of sequential sequences."),
    page_gauge("pager.patterns.streaming_pages", "pattern_streaming", "Guest memory that mirrors blocks of sequential sequences the guest is still reading from its disk (a read within 0.5 s)."),
    gauge("pager.patterns.loops", "pattern_loop_sequences", Unit::None, "Loop sequences the pager knows now: sequential sequences the guest read again."),
    page_gauge("pager.patterns.loop_pages", "pattern_loop", "Guest memory that mirrors blocks of loop sequences."),
    page_gauge("pager.patterns.unclassified_pages", "pattern_unclassified", "Guest memory that mirrors disk blocks in no sequence."),
    counter("pager.patterns.guest_rereads", "guest_rereads", Unit::None, "Guest disk reads of blocks its page cache had given up (to its balloon, or evicting them) and the ghost cache still held; the host lowers the cap of a balloon whose guest does this."),
    not("pager.patterns", "the page-cache statistics not exported yet"),
    page_gauge("balloon.target_pages", "balloon_target", "Memory the balloon device asks the guest's driver to hold."),
    page_gauge("balloon.actual_pages", "balloon", "Memory the guest's balloon driver says it holds."),
    page_counter("balloon.inflated_pages", "balloon_inflated", "Memory the balloon driver gave by inflating."),
    page_counter("balloon.deflated_pages", "balloon_deflated", "Memory the balloon driver took back by deflating."),
    page_counter("balloon.reported_pages", "balloon_reported", "Memory the guest reported free (free page reporting)."),
    counter("balloon.invalid_pfns", "balloon_invalid_pfns", Unit::None, "Balloon PFNs or ranges outside guest RAM, ignored."),
    counter("balloon.stats_updates", "balloon_stats_updates", Unit::None, "Statistics buffers the balloon driver sent."),
    page_counter("balloon.oom_deflated_pages", "balloon_oom_deflated", "Memory the guest took back from the balloon on its own when out of memory (deflate-on-OOM)."),
    counter("balloon.oom_deflates", "balloon_oom_deflates", Unit::None, "Deflate-on-OOM events."),
    gauge("balloon.guest.age_ms", "guest_stats_age", Unit::Seconds, "How long ago the guest sent its memory statistics.").scaled(MS),
    counter("balloon.guest.swap_in_bytes", "guest_swap_in", Unit::Bytes, "Memory the guest swapped in (its own statistics)."),
    counter("balloon.guest.swap_out_bytes", "guest_swap_out", Unit::Bytes, "Memory the guest swapped out (its own statistics)."),
    counter("balloon.guest.major_faults", "guest_major_faults", Unit::None, "The guest's major page faults (its own statistics)."),
    counter("balloon.guest.minor_faults", "guest_minor_faults", Unit::None, "The guest's minor page faults (its own statistics)."),
    gauge("balloon.guest.free_memory_bytes", "guest_free_memory", Unit::Bytes, "Memory the guest leaves unused (its own statistics)."),
    gauge("balloon.guest.total_memory_bytes", "guest_total_memory", Unit::Bytes, "Memory the guest sees (its own statistics)."),
    gauge("balloon.guest.available_memory_bytes", "guest_available_memory", Unit::Bytes, "Memory available to new work in the guest without swapping (its own statistics)."),
    gauge("balloon.guest.disk_caches_bytes", "guest_disk_caches", Unit::Bytes, "The guest's page cache that can be freed (its own statistics)."),
    counter("balloon.guest.hugetlb_allocations", "guest_hugetlb_allocations", Unit::None, "The guest's successful huge page allocations (its own statistics)."),
    counter("balloon.guest.hugetlb_failures", "guest_hugetlb_failures", Unit::None, "The guest's failed huge page allocations (its own statistics)."),
    counter("disks.*.reads", "disk_reads", Unit::None, "Read requests a virtio-blk disk served."),
    counter("disks.*.writes", "disk_writes", Unit::None, "Write requests a virtio-blk disk served."),
    counter("disks.*.flushes", "disk_flushes", Unit::None, "Flush requests a virtio-blk disk served."),
    counter("disks.*.bytes_read", "disk_read", Unit::Bytes, "Bytes the guest read from a disk."),
    counter("disks.*.bytes_written", "disk_written", Unit::Bytes, "Bytes the guest wrote to a disk."),
    counter("disks.*.errors", "disk_errors", Unit::None, "Disk requests answered with an error, or dropped."),
    counter("disks.*.full_pauses", "disk_full_pauses", Unit::None, "Times a disk's write or flush found its file system full and paused the VM until a resume."),
    counter("disks.*.write_prepare_us", "disk_write_prepare", Unit::Seconds, "Time a disk's write requests spent before their data went to the image: gathering guest pages, swapping in those out of guest RAM (double paging).").scaled(US),
    gauge("disks.*.write_prepare_max_us", "disk_write_prepare_max", Unit::Seconds, "The longest time one write request of a disk spent before its data went to the image.").scaled(US),
    counter("disks.*.write_end_us", "disk_write_end", Unit::Seconds, "Time a disk's write requests spent after their data reached the image (logging Tesseract's indirections).").scaled(US),
    counter("disks.*.read_us", "disk_read_time", Unit::Seconds, "Time a disk's read requests took (with the bytes read, the read throughput).").scaled(US),
    counter("disks.*.writes_holes_1_20", "disk_writes_with_holes", Unit::None, WRITE_HOLES_HELP).labelled("holes", "1-20"),
    counter("disks.*.writes_holes_21_50", "disk_writes_with_holes", Unit::None, WRITE_HOLES_HELP).labelled("holes", "21-50"),
    counter("disks.*.writes_holes_over_50", "disk_writes_with_holes", Unit::None, WRITE_HOLES_HELP).labelled("holes", "over-50"),
    counter("disks.*.write_holes", "disk_write_holes", Unit::None, "Pages of a disk's write requests that the host held outside guest RAM (swapped back in, or left out as indirections)."),
    counter("disks.*.split_reads", "disk_split_reads", Unit::None, "Read requests of a disk some of whose blocks came from the pager's swap file (split reads)."),
    counter("disks.*.split_read_us", "disk_split_read_time", Unit::Seconds, "Time a disk's split read requests took (part of the read time).").scaled(US),
    counter("disks.*.notifies", "disk_notifies", Unit::None, "Queue notifications a disk processed, by either path."),
    counter("disks.*.kernel_notifies", "disk_kernel_notifies", Unit::None, "Queue notifications a disk's thread took from an ioeventfd, with no exit to the VMM."),
    counter("disks.*.ioevent_refusals", "disk_ioevent_refusals", Unit::None, "Queue ioeventfds KVM refused (those queues are served on the vCPU's exit)."),
    counter("exits.io", "exits", Unit::None, EXITS_HELP).labelled("kind", "io"),
    counter("exits.mmio", "exits", Unit::None, EXITS_HELP).labelled("kind", "mmio"),
    counter("exits.other", "exits", Unit::None, EXITS_HELP).labelled("kind", "other"),
    counter("guest_errors.unclaimed_port_accesses", "guest_errors", Unit::None, GUEST_ERRORS_HELP).labelled("kind", "unclaimed_port_accesses"),
    counter("guest_errors.unclaimed_mmio_accesses", "guest_errors", Unit::None, GUEST_ERRORS_HELP).labelled("kind", "unclaimed_mmio_accesses"),
    counter("guest_errors.refused_features", "guest_errors", Unit::None, GUEST_ERRORS_HELP).labelled("kind", "refused_features"),
    counter("guest_errors.refused_driver_ok", "guest_errors", Unit::None, GUEST_ERRORS_HELP).labelled("kind", "refused_driver_ok"),
    counter("guest_errors.ignored_register_writes", "guest_errors", Unit::None, GUEST_ERRORS_HELP).labelled("kind", "ignored_register_writes"),
    counter("guest_errors.bad_block_requests", "guest_errors", Unit::None, GUEST_ERRORS_HELP).labelled("kind", "bad_block_requests"),
    counter("guest_errors.used_ring_errors", "guest_errors", Unit::None, GUEST_ERRORS_HELP).labelled("kind", "used_ring_errors"),
    counter("guest_errors.bad_balloon_pages", "guest_errors", Unit::None, GUEST_ERRORS_HELP).labelled("kind", "bad_balloon_pages"),
    counter("guest_errors.disk_io_errors", "guest_host_faults", Unit::None, GUEST_HOST_FAULTS_HELP).labelled("kind", "disk_io"),
    counter("guest_errors.balloon_release_errors", "guest_host_faults", Unit::None, GUEST_HOST_FAULTS_HELP).labelled("kind", "balloon_release"),
    counter("guest_errors.serial_errors", "guest_host_faults", Unit::None, GUEST_HOST_FAULTS_HELP).labelled("kind", "serial"),
    counter("guest_errors.pager_device_errors", "guest_host_faults", Unit::None, GUEST_HOST_FAULTS_HELP).labelled("kind", "pager_device"),
    page_gauge("sharing.merging_pages", "sharing_merging", "Guest memory mapping a page KSM merged (sharing host)."),
    page_gauge("sharing.zero_pages", "sharing_zero", "Guest memory KSM merged with the kernel's zero page (sharing host)."),
    page_gauge("sharing.saved_pages", "sharing_saved", "Host memory the VM's page sharing saves: its zero pages and its share of the merged pages' duplicates."),
    gauge("sharing.profit_bytes", "sharing_profit", Unit::Bytes, "The kernel's KSM profit for the VMM: merged and zero pages less KSM's metadata."),
    counter("guest_errors.suppressed_messages", "guest_log_suppressed_messages", Unit::None, "Log messages about guest errors and host faults that were only counted (each kind logs its first 5, then one summary line per 10 s)."),
];

fn variants<T: serde::Serialize>(all: &[T]) -> Vec<String> {
    all.iter()
        .filter_map(|v| match serde_json::to_value(v) {
            Ok(Value::String(s)) => Some(s),
            _ => None,
        })
        .collect()
}

fn free_states() -> Vec<String> {
    variants(&FreeStateName::ALL)
}

fn pool_compressions() -> Vec<String> {
    variants(&PoolCompress::ALL)
}

fn balancings() -> Vec<String> {
    variants(&Balancing::ALL)
}

fn vm_states() -> Vec<String> {
    variants(&HostVmState::ALL)
}

/// `HostInfo` (the host's `GET /host`): prefix `memvisor_host_`.
#[rustfmt::skip]
pub(super) const HOST_ROWS: &[Row] = &[
    gauge("budget_bytes", "budget", Unit::Bytes, "Memory for every VM together, their VMMs' overheads included."),
    gauge("free_bytes", "free", Unit::Bytes, "The budget minus resident guest memory and VMM overheads, at the last tick."),
    state("free_state", "free_state", free_states, "The free-memory state at the last tick (ESX 6.3): 1 for the current state."),
    gauge("idle_tax", "idle_tax", Unit::Ratio, "The idle memory tax."),
    gauge("vm_overhead_bytes", "overhead_per_vm", Unit::Bytes, "Host memory each VMM is taken to need besides guest RAM."),
    gauge("pool_max_bytes", "pool_max", Unit::Bytes, "The most memory the VMs' pools may hold together (MemFlex)."),
    gauge("pool_bytes", "pool", Unit::Bytes, "The pools' size together at the last tick: what the VMs do not hold, less the high state's reserve."),
    gauge("memory_reserved_bytes", "memory_reserved", Unit::Bytes, "Memory admission has reserved: min plus overhead of every admitted VM."),
    gauge("swap_bytes", "swap", Unit::Bytes, "Swap space for the VMs' pagers."),
    gauge("swap_reserved_bytes", "swap_reserved", Unit::Bytes, "Swap admission has reserved: mem minus min of every admitted VM."),
    counter("ticks", "ticks", Unit::None, "Policy ticks done."),
    gauge("tick_seconds", "tick_interval", Unit::Seconds, "Time between policy ticks."),
    gauge("ksm.running", "ksm_running", Unit::None, "1 while KSM's scanner runs (absent while no VM shares)."),
    gauge("ksm.pages_to_scan", "ksm_pages_to_scan", Unit::None, "Pages KSM's scanner scans each time it wakes, as the host set it."),
    gauge("ksm.sleep_ms", "ksm_sleep", Unit::Seconds, "How long KSM's scanner sleeps between scans.").scaled(MS),
    page_gauge("ksm.shared_pages", "ksm_shared", "Merged pages KSM keeps, one per distinct content, every process's."),
    page_gauge("ksm.sharing_pages", "ksm_sharing", "Pages mapping a merged page besides the one kept: memory KSM saves."),
    page_gauge("ksm.zero_pages", "ksm_zero", "Pages KSM merged with the kernel's zero page."),
    counter("ksm.full_scans", "ksm_full_scans", Unit::None, "Full passes of KSM's scanner over mergeable memory."),
    counter("ksm.cpu_ms", "ksm_cpu", Unit::Seconds, "CPU time KSM's scanner (ksmd) used since the host took KSM over.").scaled(MS),
    gauge("ksm.cpu_fraction", "ksm_cpu", Unit::Ratio, "KSM's scanner's share of one CPU over the last tick."),
    state("balancing", "balancing", balancings, "How the host moves memory between VMs (balloon, or hd2: HyperDealer2 instant balancing): 1 for the current way."),
    counter("released_pages", "released_pages", Unit::None, "Pages the VMs' VMMs released at the host's request (HyperDealer2 balancing)."),
    counter("reallocations", "reallocations", Unit::None, "Ticks that moved released memory to a VM that needed it."),
    counter("gap_closed_pages", "gap_closed_pages", Unit::None, "Pages of capacity gap closed by inflating a victim's balloon (HyperDealer2 4.7)."),
    gauge("own_bytes", "own", Unit::Bytes, "The host process's own memory (its PSS) at the last tick: part of the budget."),
    gauge("committed_bytes", "committed", Unit::Bytes, "What the budget covered at the last tick: the host's own memory, the pools, each VM's resident memory or limit, whichever is more, and each VMM's overhead."),
    counter("migrated_in", "migrated_in", Unit::None, "VMs that moved here from another host and run here."),
    counter("migrated_out", "migrated_out", Unit::None, "VMs that moved from here to another host."),
    counter("migrations_failed", "migrations_failed", Unit::None, "Moves to another host that did not happen or broke off."),
];

/// `HostVm` (the host's `GET /vms`): prefix `memvisor_host_vm_`, labelled `vm`.
#[rustfmt::skip]
pub(super) const HOST_VM_ROWS: &[Row] = &[
    not("name", "the vm label"),
    state("state", "state", vm_states, "Where the VM is in its life: 1 for the current state."),
    not("why", "text"),
    gauge("pid", "pid", Unit::None, "Its VMM's process id (absent before start and after exit)."),
    gauge("exit_status", "exit_status", Unit::None, "Its VMM's exit status once exited (128 + N for signal N)."),
    gauge("mem_bytes", "mem", Unit::Bytes, "Guest RAM."),
    gauge("min_bytes", "min", Unit::Bytes, "Guaranteed host memory."),
    gauge("max_bytes", "max", Unit::Bytes, "Most host memory the VM is given."),
    gauge("shares", "shares", Unit::None, "Memory shares."),
    gauge("target_bytes", "target", Unit::Bytes, "Its allocation target at the last tick."),
    gauge("resident_bytes", "resident", Unit::Bytes, "Guest memory resident on the host (its allocation), as the host last read it."),
    gauge("active_bytes", "active", Unit::Bytes, "Estimated active memory: the active fraction of its resident memory."),
    gauge("active_fraction", "active", Unit::Ratio, "The active fraction the policy uses (frozen while the host pauses the VM)."),
    not("active", "the VMM's own memvisor_vm_active_* and memvisor_vm_sampling_*"),
    gauge("balloon_bytes", "balloon", Unit::Bytes, "Memory the balloon holds (absent without a balloon)."),
    gauge("balloon_target_bytes", "balloon_target", Unit::Bytes, "Memory the host asks the balloon to hold (absent without a balloon)."),
    gauge("balloon_usable", "balloon_usable", Unit::None, "1 while its balloon's driver answers, so the host balloons it rather than paging it (absent without a balloon)."),
    gauge("balloon_step_bytes", "balloon_step", Unit::Bytes, "How far above what its driver holds the host may raise its balloon's target at the next tick (absent without a balloon)."),
    gauge("balloon_reread_cap_bytes", "balloon_reread_cap", Unit::Bytes, "The most its balloon may hold since its guest read again from its disk what the balloon took, below the host's cap (absent without that cap)."),
    gauge("swapped_bytes", "swapped", Unit::Bytes, "Guest memory in its pager's swap file."),
    gauge("on_disk_bytes", "on_disk", Unit::Bytes, "Clean guest memory dropped because the disk image holds it (Swap Mapper)."),
    gauge("limit_bytes", "limit", Unit::Bytes, "Its pager's resident limit."),
    gauge("paused_by_host", "paused_by_host", Unit::None, "1 while the host pauses it (above its target with free memory low)."),
    gauge("pool_bytes", "pool", Unit::Bytes, "Its share of the host's pool."),
    gauge("pooled_bytes", "pooled", Unit::Bytes, "Swapped memory its pool holds."),
    counter("oom_deflated_pages", "oom_deflated_pages", Unit::None, "Pages its guest gave back on its own when out of memory (balloon deflate-on-OOM)."),
    gauge("shared_saved_bytes", "shared_saved", Unit::Bytes, "Host memory its page sharing saves, not counted in what it holds."),
    gauge("overhead_bytes", "overhead", Unit::Bytes, "What the budget charges its VMM besides guest memory and its pool (its measured PSS less both)."),
    not("api_sock", "text"),
    not("snapshot_dir", "text"),
    not("log", "text"),
];

/// Every metric either exposition can hold: (the name a point carries, kind, help), in table
/// order. The name a point carries is the name with its unit and, for a counter, `_total`.
pub fn catalogue() -> Vec<(String, MetricKind, &'static str)> {
    let mut out: Vec<(String, MetricKind, &'static str)> = Vec::new();
    for (prefix, rows) in [
        ("memvisor_vm_", VM_ROWS),
        ("memvisor_host_", HOST_ROWS),
        ("memvisor_host_vm_", HOST_VM_ROWS),
    ] {
        for r in rows {
            let (name, kind, unit, help) = match r.export {
                Export::Number {
                    name,
                    kind,
                    unit,
                    help,
                    ..
                } => (name, kind, unit, help),
                Export::State { name, help, .. } => (name, MetricKind::Gauge, Unit::None, help),
                Export::Not(_) => continue,
            };
            let mut full = format!("{prefix}{name}");
            if let Some(u) = unit.suffix() {
                full.push('_');
                full.push_str(u);
            }
            if kind == MetricKind::Counter {
                full.push_str("_total");
            }
            if !out.iter().any(|(n, _, _)| *n == full) {
                out.push((full, kind, help));
            }
        }
    }
    out
}

#[cfg(test)]
pub(super) mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::host::{HostInfo, HostVm};
    use crate::metrics::rows::{is_row_of, json, leaves, row_of, Export, Row};
    use crate::stats::{
        ActiveMemory, BalloonStats, DiskStats, GuestMemoryStats, PagerStats, VmStats,
    };

    /// Stats with every optional part present.
    pub(crate) fn full_stats() -> VmStats {
        let mut guest = GuestMemoryStats::default();
        for tag in 0..=u16::MAX {
            guest.set(tag, u64::from(tag) + 1);
        }
        VmStats {
            pager: Some(PagerStats {
                limit_bytes: Some(64 << 20),
                pool: Some(crate::stats::PoolStats::default()),
                indirections: Some(crate::stats::IndirectionStats::default()),
                patterns: Some(crate::stats::PatternStats::default()),
                ..PagerStats::default()
            }),
            balloon: Some(BalloonStats {
                actual_pages: 3,
                guest: Some(guest),
                ..BalloonStats::default()
            }),
            disks: [("data".to_owned(), DiskStats::default())].into(),
            sharing: Some(crate::stats::SharingStats::default()),
            ..VmStats::default()
        }
    }

    pub(crate) fn full_host() -> HostInfo {
        HostInfo {
            budget_bytes: 1 << 30,
            free_bytes: 1 << 29,
            free_state: FreeStateName::Soft,
            idle_tax: 0.75,
            vm_overhead_bytes: 24 << 20,
            pool_max_bytes: 1,
            pool_bytes: 1,
            memory_reserved_bytes: 1,
            swap_bytes: 1,
            swap_reserved_bytes: 1,
            ticks: 7,
            tick_seconds: 1.0,
            ksm: Some(crate::host::HostKsm::default()),
            balancing: crate::host::Balancing::Hd2,
            released_pages: 1,
            reallocations: 1,
            gap_closed_pages: 1,
            own_bytes: 1,
            committed_bytes: 1,
            migrated_in: 1,
            migrated_out: 1,
            migrations_failed: 1,
        }
    }

    pub(crate) fn full_vm(name: &str) -> HostVm {
        HostVm {
            name: name.into(),
            state: HostVmState::Running,
            why: Some("x".into()),
            pid: Some(10),
            exit_status: Some(-1),
            exit: None,
            mem_bytes: 1,
            min_bytes: 1,
            max_bytes: 1,
            shares: 1000,
            target_bytes: 1,
            resident_bytes: 1,
            active_bytes: 1,
            active_fraction: 0.5,
            active: ActiveMemory::default(),
            balloon_bytes: Some(1),
            balloon_target_bytes: Some(1),
            balloon_usable: Some(true),
            balloon_step_bytes: Some(1),
            balloon_reread_cap_bytes: Some(1),
            swapped_bytes: 1,
            on_disk_bytes: 1,
            limit_bytes: 1,
            paused_by_host: true,
            pool_bytes: 1,
            pooled_bytes: 1,
            oom_deflated_pages: 1,
            shared_saved_bytes: 1,
            overhead_bytes: 1,
            api_sock: "/s".into(),
            snapshot_dir: Some("/s/snapshots".into()),
            log: "/l".into(),
        }
    }

    /// Every field of the type is exported or left out by a row, and every row is a field.
    fn rows_match_fields(what: &str, rows: &[Row], maps: &[(&str, &str)], v: &Value) {
        let mut found = Vec::new();
        leaves(v, "", &[], maps, &mut found);
        let paths: Vec<&str> = found.iter().map(|l| l.path.as_str()).collect();
        for p in &paths {
            assert!(
                row_of(rows, p).is_some(),
                "{what}.{p} has no row in the metrics table: give it a metric (or a `not` row)"
            );
        }
        for r in rows {
            assert!(
                paths.iter().any(|p| is_row_of(r, p)),
                "the metrics row {what}.{} names no field",
                r.path
            );
        }
        let exact: BTreeSet<&str> = rows.iter().map(|r| r.path).collect();
        assert_eq!(exact.len(), rows.len(), "{what}: a field with two rows");
    }

    #[test]
    fn every_field_of_the_types_has_a_row() {
        rows_match_fields("VmStats", VM_ROWS, VM_MAPS, &json(&full_stats()));
        rows_match_fields("HostInfo", HOST_ROWS, &[], &json(&full_host()));
        rows_match_fields("HostVm", HOST_VM_ROWS, &[], &json(&full_vm("a")));
    }

    #[test]
    fn names_follow_the_conventions() {
        let cat = catalogue();
        for (name, kind, help) in &cat {
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{name}"
            );
            assert!(name.starts_with("memvisor_"), "{name}");
            assert_eq!(
                *kind == MetricKind::Counter,
                name.ends_with("_total"),
                "{name}"
            );
            for unit in ["_us", "_ms", "_pages_bytes", "_bytes_bytes"] {
                assert!(
                    !name.contains(&format!("{unit}_")) && !name.ends_with(unit),
                    "{name}"
                );
            }
            assert!(!help.is_empty() && !help.contains('\n'), "{name}");
        }
        // One help and kind per name, whichever rows share it.
        for rows in [VM_ROWS, HOST_ROWS, HOST_VM_ROWS] {
            for a in rows {
                for b in rows {
                    if let (
                        Export::Number {
                            name: n1,
                            kind: k1,
                            unit: u1,
                            help: h1,
                            label: l1,
                            ..
                        },
                        Export::Number {
                            name: n2,
                            kind: k2,
                            unit: u2,
                            help: h2,
                            label: l2,
                            ..
                        },
                    ) = (a.export, b.export)
                    {
                        if n1 == n2 && u1 == u2 && a.path != b.path {
                            assert_eq!((k1, h1), (k2, h2), "{n1}");
                            assert!(l1.is_some() && l2.is_some() && l1 != l2, "{n1}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_docs_list_every_metric() {
        let doc = include_str!("../../../../docs/metrics.md");
        for (name, _, _) in catalogue() {
            assert!(
                doc.contains(&format!("`{name}`")),
                "docs/metrics.md does not list {name}"
            );
        }
    }

    #[test]
    fn every_state_is_listed() {
        assert_eq!(free_states(), ["high", "soft", "hard", "low"]);
        assert_eq!(vm_states().len(), HostVmState::ALL.len());
        assert!(vm_states().contains(&"refused".to_owned()));
    }
}
