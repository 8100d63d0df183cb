//! The pager: owns every guest page and every move of one — faults, reclaim under a per-VM limit, the page stores, and the balloon's releases.
//!
//! | file | owns |
//! |---|---|
//! | `pager.rs` | the [`Pager`] handle, its thread, its locks, the limit, [`VcpuControl`] |
//! | `takeover.rs` | taking RAM over at run time from transparent huge pages |
//! | `ram_map.rs` | page numbers ↔ guest-physical and host addresses across RAM mappings |
//! | `uffd.rs` | the userfaultfd calls, with typed errors |
//! | `state.rs` | the page table of states and its decisions (pure, model-tested) |
//! | `victim.rs` | victim selection (random, clock) |
//! | `fault.rs` | the fault path |
//! | `reclaim.rs` | reclaim in bounded chunks |
//! | `facade.rs` | how devices reach guest RAM ([`memvisor_devices::ram::GuestRam`]) |
//! | `preventer.rs` | VSwapper's False Reads Preventer |
//! | `store.rs`, `swap.rs`, `image.rs` | the [`store::PageStore`] trait and its stores |
//! | `indirect.rs` | Tesseract's indirections: disk blocks that refer to swap-file blocks, their log, disentangling |
//! | `pool.rs` | the host-memory pool in front of the swap file (MemFlex), pages kept whole or compressed |
//! | `swapin.rs` | the pool's flusher and proactive swap-in |
//! | `sample.rs` | working-set sampling and its store |
//! | `stats.rs` | counters, latencies and the API's snapshot |

mod blocks;
mod config;
mod facade;
mod fault;
pub mod page;
mod pager;
pub mod preventer;
mod reclaim;
mod sample;
mod snapshot;
pub mod state;
pub mod stats;
pub mod store;
mod swapin;
pub mod sys;
mod takeover;
pub mod victim;

pub use config::{IndirectConfig, Mechanisms, PagerConfig, PoolConfig};
pub use pager::{NoVcpus, Pager, PagerError, PagerFailure, VcpuControl, MIN_LIMIT};
pub use preventer::CpuState;
pub use snapshot::PagerSnapshot;
pub use store::{image, indirect, pool, swap};
pub use sys::uffd;
pub use victim::VictimPolicy;
