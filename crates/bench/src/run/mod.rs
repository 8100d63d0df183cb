//! Running a configuration: memvisor or QEMU as child processes, `memvisor host` for the host
//! experiments, what the host measures meanwhile, and undoing everything afterwards.

pub mod child;
pub mod consolidate;
pub mod dwell;
pub mod hostexp;
pub mod order;
pub mod qmp;
pub mod readings;
pub mod reclaimdelay;
pub mod sharing;
pub mod swapin;
pub mod teardown;
pub mod vm;

/// The log filter of the memvisor processes a benchmark starts: the harness's own
/// `MEMVISOR_LOG` when it has one (e.g. `memvisor_pager::release=debug` to see a release's
/// steps in each VMM's `.stderr`), `info` otherwise.
pub(crate) fn log_filter() -> String {
    std::env::var("MEMVISOR_LOG").unwrap_or_else(|_| "info".to_owned())
}
