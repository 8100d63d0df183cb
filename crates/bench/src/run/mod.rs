//! Running a configuration: memvisor or QEMU as child processes, `memvisor host` for the host
//! experiments, what the host measures meanwhile, and undoing everything afterwards.

pub mod consolidate;
pub mod dwell;
pub mod host;
pub mod hostexp;
pub mod reclaimdelay;
pub mod sharing;
pub mod swapin;
pub mod teardown;
pub mod vm;
