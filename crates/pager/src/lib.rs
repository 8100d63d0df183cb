//! The pager: owns every guest page and every move of one — faults, reclaim under a per-VM limit, the page stores, and the balloon's releases.
//!
//! | file | owns |
//! |---|---|
//! | `page.rs` | the basic types: page size, page index, blocks, slots, store ids (a leaf) |
//! | `sys/` | the system calls: userfaultfd with typed errors (`uffd.rs`), page numbers ↔ guest-physical and host addresses (`ram_map.rs`), the page map scan (`pagemap.rs`) |
//! | `config.rs` | every configuration type ([`PagerConfig`], [`Mechanisms`], [`PoolConfig`], [`IndirectConfig`]) |
//! | `digest.rs` | the keyed page digest (SipHash-1-3, 128-bit output, a random key per pager) the Swap Mapper checks mirrors with |
//! | `state/` | the state table (`StateTable`: every page's state) and its decisions (`table.rs`; pure, model-tested in `tests.rs`), its parts each owning its state: the states (`page_state.rs`), the Swap Mapper's mirrors, their digests and the ghost cache of the blocks that left guest RAM (`mirrors.rs`), the census of pages by state (`census.rs`), whether swapped-in pages are worth keeping clean (`clean_reuse.rs`), and the reads in flight without the page lock (`in_flight.rs`) |
//! | `blocks.rs` | the swap file's block allocator and reference counts (pure) |
//! | `pattern/` | HyperDealer2's reference patterns (§4.4–§4.5; pure): the tuning constants (`mod.rs`), the sequences and the streams of reads that make them (`sequence.rs`), the table of which pattern each mirrored page belongs to, with the sequential and loop sequences detected from guest disk reads and image refaults (`table.rs`), and the victim order of mirrored pages built on them (`pick.rs`) |
//! | `victim.rs` | victim selection (random, clock, hd2) and the victim cache |
//! | `stats.rs` | counters (the pager's and each store's) and latencies |
//! | `store/` | the [`store::PageStore`] trait (`mod.rs`), every store of a pager (`stores.rs`) and the stores: the swap file (`swap.rs`), the host-memory pool in front of it (`pool/`, MemFlex: the pool and the flusher's state (`mod.rs`), its slab allocator (`slab.rs`), compression (`compress.rs`), the flusher's spills (`spill.rs`)), the disk images (`image.rs`), the working-set sample (`sample.rs`), a restored snapshot's memory file (`saved.rs`; a migration's pages still on the source are a store of the VMM's, `RestoreFrom::memory`), and Tesseract's indirections (`indirect/`: the error type (`error.rs`), the map of a disk with its counters and limits (`map.rs`), its log (`log.rs`), recovery (`recovery.rs`), both defragmentations (`defrag.rs`); `mod.rs` only re-exports) |
//! | `core.rs` | `PagerCore`: what every mechanism works on (memory, the RAM map, userfaultfd, the state table under the page lock, the stores, counters, the limit, [`VcpuControl`]) and the errors |
//! | `fault.rs` | the fault path: the `FaultHandler`, which owns its buffers and unresolved faults and borrows the core |
//! | `reclaim.rs` | reclaim in bounded chunks: the `Reclaimer`, which owns its wake-up and the signal that a chunk was recorded and borrows the core |
//! | `release.rs` | instant release of pages that mirror disk blocks (HyperDealer2 §4.3, `PUT /memory/release`), on the calling thread, on the core |
//! | `released.rs` | what the state table keeps of released pages: those a release took and the table has yet to record, when each left (dwell times) and the reclamation cache of their contents (HyperDealer2 §4.2; pure) |
//! | `swapin.rs` | the pool's flusher thread, and proactive swap-in: the `SwapIn`, which owns its state and borrows the core |
//! | `sample.rs` | working-set sampling: the `Sampler`, which owns its state and borrows the core |
//! | `takeover.rs` | taking RAM over at run time from transparent huge pages: the `Takeover`, which owns the page map and borrows the core |
//! | `preventer.rs` | VSwapper's False Reads Preventer: the `Preventer`, which owns the vCPUs it stopped and what preventions and reads have cost per page, and borrows the core |
//! | `guest_ram.rs` | how devices reach guest RAM ([`memvisor_devices::ram::GuestRam`]): `PagedRam`, the core with the `Reclaimer` |
//! | `pager.rs` | the [`Pager`] handle (the core and its owners: the fault path, reclaim, the takeover, the sampler, proactive swap-in, the Preventer), its threads and its lock order |
//! | `api_stats.rs` | the pager's state as the API serves it ([`PagerStats`]) |
//! | `saved_pages.rs` | what a snapshot holds of guest memory (page kinds as runs, the prefetch list) and what a restored pager starts from (the page kinds and the store its copied pages are read from) |
//! | `written.rs` | the pages devices wrote or the pager forgot, noted while a migration's pre-copy rounds run (the vCPUs' writes are KVM's dirty log) |
//! | `persist.rs` | guest memory in a VM snapshot: every page written from where it is, the states a restored pager starts from, and the prefetch of the pages the guest had in RAM; for a migration's source, the page kinds without content, a page read from where it is, the pages with content (what pre-copy sends first) and the pages given back once the destination has them |

mod api_stats;
mod block_links;
mod blocks;
mod config;
mod core;
mod digest;
mod fault;
mod guest_ram;
pub mod keyed_hash;
pub mod page;
mod page_map;
mod pager;
pub mod pattern;
mod persist;
pub mod preventer;
mod reclaim;
mod release;
pub mod released;
mod sample;
mod saved_pages;
pub mod state;
pub mod stats;
pub mod store;
mod swapin;
pub mod sys;
mod takeover;
pub mod victim;
mod written;

pub use crate::core::{NoVcpus, PagerError, PagerFailure, VcpuControl, MIN_LIMIT};
pub use api_stats::PagerStats;
pub use config::{
    IndirectConfig, Mechanisms, PagerConfig, PoolConfig, Preventing, DEFAULT_RELEASE_CACHE,
};
pub use pager::{open_indirect, Pager, PagerFiles};
pub use preventer::CpuState;
pub use release::ReleaseOutcome;
pub use saved_pages::{RestoreFrom, SavedKind, SavedPages, SavedRun};
pub use store::{image, indirect, pool, swap};
pub use sys::uffd;
pub use victim::VictimPolicy;
