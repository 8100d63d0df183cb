//! Workloads selected by `workload=` on the command line. Each returns the
//! exit code for the debug-exit port and prints `RESULT ...` lines.

mod alloc;
mod boot;
mod common;
mod compile;
mod compress;
mod crashwrite;
mod exits;
mod gcchurn;
mod integrity;
mod kv;
mod mapreduce;
mod memhog;
pub mod pattern;
mod probe;
mod selftest;
mod seqread;
mod toucher;

use crate::cmdline::{Config, Workload};
use crate::debug_exit::ExitCode;

/// Whether the workload runs a task on every vCPU (APs wait for work instead of parking):
/// `seqread` does when it stays busy after its passes (`then=spin` or `then=write`).
pub fn uses_workers(cfg: &Config) -> bool {
    match cfg.workload {
        Workload::Integrity | Workload::Alloc | Workload::Compress => true,
        Workload::Seqread => seqread::busy_after(cfg),
        _ => false,
    }
}

/// Bytes of each AP's ring-3 stack the workload needs, if more than the usual.
pub fn ap_stack_bytes(w: Workload) -> Option<usize> {
    matches!(w, Workload::Compress).then_some(compress::AP_STACK_BYTES)
}

pub fn run(cfg: &Config, cpus: u32) -> ExitCode {
    let code = run_workload(cfg, cpus);
    hold(cfg);
    code
}

/// `hold_secs=N`: after the workload, the VM stays up N more seconds serving the balloon, so the
/// host can steer it once the work is done (e.g. measure what an inflation gives back).
fn hold(cfg: &Config) {
    let secs = match cfg.num("hold_secs", 0, 0, 86_400) {
        Ok(s) => s,
        Err(e) => {
            println!("{e}");
            return;
        }
    };
    if secs == 0 {
        return;
    }
    println!("hold: {secs} s");
    let end = crate::time::deadline_after_ms(secs * 1000);
    while crate::cpu::rdtsc() < end {
        if crate::mm::ready() {
            crate::mm::tick();
        }
        core::hint::spin_loop();
    }
    println!("hold: done");
}

fn run_workload(cfg: &Config, cpus: u32) -> ExitCode {
    match cfg.workload {
        Workload::Boot => {
            cfg.warn_unknown(&[crate::mm::KEYS]);
            boot::run(cpus)
        }
        Workload::Selftest => {
            cfg.warn_unknown(&[crate::mm::KEYS]);
            selftest::run(cfg, cpus)
        }
        Workload::Integrity => integrity::run(cfg, cpus),
        Workload::Seqread => seqread::run(cfg),
        Workload::Alloc => alloc::run(cfg, cpus),
        Workload::Compile => compile::run(cfg),
        Workload::Mapreduce => mapreduce::run(cfg),
        Workload::Kv => kv::run(cfg),
        Workload::Gcchurn => gcchurn::run(cfg),
        Workload::Memhog => memhog::run(cfg),
        Workload::Toucher => toucher::run(cfg),
        Workload::Crashwrite => crashwrite::run(cfg),
        Workload::Probe => probe::run(cfg),
        Workload::Compress => compress::run(cfg, cpus),
        Workload::Exits => exits::run(cfg),
    }
}
