//! The families of experiments, one folder each: its plan and sizes (`experiment`), its runs
//! (`run`), its outputs (`report`), and in its `mod.rs` the [`crate::harness::Family`] the
//! driver runs.

pub mod consolidate;
pub mod dwell;
pub mod host;
pub mod reclaimdelay;
pub mod sharing;
pub mod swapin;
