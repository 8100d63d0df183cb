//! The pager's state as the control API serves it ([`PagerStats`]), built from the
//! counters (`stats.rs`), the stores, the page census and the working-set estimate.

use crate::core::{limit_to_bytes, PagerCore};
use crate::page::PAGE_SIZE;
use crate::sample::Sampler;
use crate::stats::{get, EventCounters, StoreTotals};
use crate::store::PageStore;
use crate::takeover::Takeover;

/// The control API's view of a pager, built by [`Pager::stats`](crate::Pager::stats).
pub use memvisor_api::PagerStats;

impl PagerCore {
    /// Builds the snapshot [`Pager::snapshot`](crate::Pager::snapshot) returns.
    pub(crate) fn api_stats(&self, sampler: &Sampler, takeover: &Takeover) -> PagerStats {
        let s = self;
        let active = {
            let sampling = sampler.lock();
            let (touched, sampled) = Sampler::sampled_so_far(s, &sampling);
            let mut estimate = sampling.estimate;
            estimate.period_so_far(touched, sampled);
            memvisor_api::ActiveMemory {
                estimate: estimate.estimate(),
                slow: estimate.slow,
                fast: estimate.fast,
                current: estimate.current,
                periods: sampling.periods,
                last_touched_pages: sampling.last.0,
                last_sampled_pages: sampling.last.1,
                sampled_pages: sampled,
                touched_pages: touched,
            }
        };
        s.record_all_released();
        let mut pages = s.lock();
        // Released pages that came back are counted by the state table as they change state.
        let back = pages.table.released.take_refaults();
        EventCounters::add(&s.counters.released_refaults, back);
        let released = (
            pages.table.released.cache_pages(),
            pages.table.released.dwell_ms_log2,
        );
        let census = pages.table.census();
        let in_use = pages.table.blocks.in_use();
        let attached = pages.attached;
        let victims = &pages.table.victims;
        let (cooling, cache) = (
            victims.cooling(),
            (victims.cache_hits, victims.cache_caught),
        );
        // The page-cache statistics of HyperDealer2, with the Swap Mapper (which sees the
        // guest's disk reads and the pages that mirror its blocks).
        let patterns = pages.table.mech.mapper.then(|| {
            let ghost = &pages.table.mirrors.ghost;
            let c = pages.table.patterns.counts();
            memvisor_api::PatternStats {
                sequential: c.sequential,
                sequential_pages: c.sequential_pages,
                streaming_pages: pages
                    .table
                    .patterns
                    .streaming_pages(std::time::Instant::now()),
                loops: c.loops,
                loop_pages: c.loop_pages,
                unclassified_pages: c.unclassified_pages,
                reclamation_cache_pages: released.0.into(),
                dwell_ms_log2: released.1.to_vec(),
                ghost_entries: ghost.len() as u64,
                ghost_bucket_pages: ghost.bucket_pages(),
                ghost_hits: ghost.hits().to_vec(),
                ghost_misses: ghost.misses(),
                guest_rereads: pages.table.mirrors.guest_rereads,
            }
        });
        drop(pages);
        // Before the pager has taken RAM over the state table does not follow what the guest
        // touches: what the host holds is what the page map says is present.
        let resident = if attached {
            census.resident.into()
        } else {
            takeover.present_pages(s).unwrap_or(0)
        };
        let images = StoreTotals::of(s.stores.images().map(PageStore::counters));
        PagerStats {
            limit_bytes: limit_to_bytes(s.limit()),
            attached,
            pages: memvisor_api::PageCensus {
                resident_pages: resident,
                zero_pages: census.zero.into(),
                swapped_pages: census.swapped.into(),
                ballooned_pages: census.ballooned.into(),
                reported_pages: census.reported.into(),
                on_disk_pages: census.on_disk.into(),
                mirrored_pages: census.mirrored.into(),
                cooling_pages: cooling.into(),
                sampled_pages: census.sampled.into(),
            },
            swap_blocks_in_use: in_use.into(),
            counters: s.counters.load(s.stores.swap.counters(), &images, cache),
            fault_latency: s.fault_latency.summary(),
            swap_fault_latency: s.swap_fault_latency.summary(),
            reclaim_latency: s.reclaim_latency.summary(),
            active,
            pool: s.stores.swap.pool.as_ref().map(|p| {
                let c = &p.counters;
                let get = crate::store::pool::PoolCounters::get;
                let usage = p.usage();
                let stored_bytes = usage.pages * PAGE_SIZE as u64;
                let (compressed, raw) = (get(&c.compressed), get(&c.raw));
                memvisor_api::PoolStats {
                    compression: p.compression(),
                    chunk_bytes: p.chunk_bytes(),
                    capacity_bytes: p.capacity(),
                    used_bytes: usage.used_bytes,
                    stored_bytes,
                    compression_ratio: if usage.used_bytes == 0 {
                        1.0
                    } else {
                        stored_bytes as f64 / usage.used_bytes as f64
                    },
                    chunks: usage.chunks,
                    mapped_bytes: usage.chunks * p.chunk_bytes(),
                    compressed_pages: compressed,
                    raw_pages: raw,
                    pooled_pages: compressed + raw,
                    overflowed_pages: get(&c.overflowed),
                    hit_pages: get(&c.hits),
                    spilled_pages: get(&c.spilled),
                    spill_writes: get(&c.spill_writes),
                    spill_us: get(&c.spill_us),
                    purged_pages: get(&c.purged),
                    proactive_pool_pages: get(&c.proactive_from_pool),
                    proactive_disk_pages: get(&c.proactive_from_disk),
                }
            }),
            indirections: s.indirections.map(|_| {
                let mut t = memvisor_api::IndirectionStats::default();
                for ind in s.stores.images().filter_map(|i| i.indirect.as_ref()) {
                    let c = &ind.counters;
                    let (live, log) = ind.usage();
                    t.live += live;
                    t.log_bytes += log;
                    t.elided_pages += get(&c.elided);
                    t.ended += get(&c.ended);
                    t.split_reads += get(&c.split_reads);
                    t.blocks_read += get(&c.blocks_read);
                    t.copied_back += get(&c.copied_back);
                    t.disentangled += get(&c.disentangled);
                    t.refused_pages += get(&c.refused);
                    t.log_compactions += get(&c.compactions);
                    t.defragmented += get(&c.defragmented);
                    t.defrag_urgent += get(&c.defrag_urgent);
                    t.store_reads += get(&c.store_reads);
                    t.regrouped += get(&c.regrouped);
                    t.regrouped_writes += get(&c.regrouped_writes);
                }
                t
            }),
            patterns,
        }
    }
}
