//! The pager: owns every guest page and every move of one — faults, reclaim under a per-VM limit, the swap store, and the balloon's releases.

pub mod state;
pub mod victim;

mod pager;
pub mod preventer;
pub mod stats;
pub mod swap;

pub use pager::{Pager, PagerConfig, PagerError, PagerSnapshot, MIN_LIMIT};
pub use preventer::CpuState;
pub use state::Mechanisms;
pub use victim::VictimPolicy;
