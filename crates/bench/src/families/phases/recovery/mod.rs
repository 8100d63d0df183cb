//! `memvisor bench recovery`: MemFlex §4.1, Fig. 5(c): a key-value store under a read-only YCSB load
//! (the paper's Fig. 5(c)), a memory hog starting in the same VM 10 s into the run, the memory
//! given back 20 s later. The store fits under the limit alone, not with the hog; given back, the
//! limit is the guest's size, so everything fits.

pub mod report;
pub mod trace;

use std::time::Duration;

use crate::args::Scale;
use crate::families::phases::experiment::{Experiment, GiveBack, Measure, Step};

/// `recovery`'s configurations: the pager with fault-driven swap-in from its swap file, the
/// pool with fault-driven and proactive swap-in, and QEMU with host swap or its balloon.
/// A pool variant is one more name here (and one entry of `CONFIGS`).
pub const CONFIGS: &[&str] = &[
    "memvisor-pager",
    "memvisor-pool",
    "memvisor-pool-proactive",
    "memvisor-pool-lz4",
    "qemu-hostswap",
    "qemu-balloon",
];

/// `memvisor bench recovery` at `scale`.
pub fn experiment(scale: Scale) -> Experiment {
    let tiny = scale == Scale::Quick;
    // (guest MiB, limit MiB, kv records, hog MiB, hog MiB/s, hog at s, release at s,
    // run s): the store's table is records / 512 MiB (1 KiB records, half-full slots).
    let (mem, limit, records, hog, rate, hog_at, at, secs) = if tiny {
        (128, 64, 20_000, 40, 40, 2, 4, 8)
    } else {
        (1024, 512, 180_000, 400, 100, 10, 30, 70)
    };
    Experiment {
        name: "recovery",
        about: "MemFlex §4.1 / Fig. 5(c): a key-value store's throughput (and each second's read p99 latency) while a memory hog in the same VM pushes it past its limit, and how fast it recovers once the memory is given back",
        mem: mem << 20,
        limit: Some(limit << 20),
        steps: vec![Step {
            workload: "kv",
            cmdline: format!(
                "records={records} mix=c secs={secs} hog_mb={hog} hog_at={hog_at} hog_rate_mb_s={rate}"
            ),
            phases: vec!["load".into(), "run".into()],
            // Only a guest whose balloon is inflated uses it.
            guest_swap_mb: Some(mem),
            disk: None,
        }],
        configs: CONFIGS,
        reference: "memvisor-pager",
        measure: Measure::GiveBack(GiveBack {
            after_phase: "load",
            at: Duration::from_secs(at),
            hog_at: Duration::from_secs(hog_at),
            every: Duration::from_secs(1),
        }),
    }
}
