//! `memvisor bench alloc`: VSwapper Fig. 10: a fresh process allocates and touches 200 MB. The
//! guest kit boots one workload, so round 1 leaves the guest's free pages used (and swapped out by
//! the host) and rounds 2 and 3 allocate over them, as the paper's process does after the Sysbench
//! run.

use super::experiment::{phases, Experiment, Measure, Step, LIMITED};
use crate::args::Scale;

/// `memvisor bench alloc` at `scale`.
pub fn experiment(scale: Scale) -> Experiment {
    let tiny = scale == Scale::Quick;
    let (mem, limit, mb, rounds) = if tiny {
        (128, 32, 96, 2)
    } else {
        (512, 100, 200, 3)
    };
    Experiment {
        name: "alloc",
        about: "VSwapper Fig. 10: a process allocating and touching memory the guest used before (false swap reads)",
        mem: mem << 20,
        limit: Some(limit << 20),
        steps: vec![Step {
            workload: "alloc",
            cmdline: format!("mb={mb} rounds={rounds}"),
            phases: phases("round", rounds),
            guest_swap_mb: None,
            disk: None,
        }],
        configs: LIMITED,
        reference: "qemu",
        measure: Measure::Phases,
    }
}
