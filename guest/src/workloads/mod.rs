//! Workloads selected by `workload=` on the command line. Each returns the
//! exit code for the debug-exit port and prints one `RESULT ...` line.

mod boot;
pub mod pattern;
mod selftest;

use crate::cmdline::{Config, Workload};
use crate::cpu::ExitCode;

pub fn run(cfg: &Config, cpus: u32) -> ExitCode {
    match cfg.workload {
        Workload::Boot => boot::run(cpus),
        Workload::Selftest => selftest::run(cfg, cpus),
    }
}
