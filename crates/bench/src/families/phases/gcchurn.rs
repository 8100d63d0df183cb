//! `memvisor bench gcchurn`: VSwapper §5.1, Fig. 13: a garbage-collected program (Eclipse from
//! DaCapo on a JVM with a 128 MB heap in the paper; the guest kit's `gcchurn`, a generational
//! collector's allocation, copying and drops) in a guest whose memory the host limits, the limit
//! swept: the program's time against the memory the guest has, against VSwapper as the paper
//! gives its ratios.

use super::experiment::{Experiment, Step, Sweep, PREVENTING_ALWAYS};
use crate::args::Scale;

/// `memvisor bench gcchurn` at `scale`.
pub fn experiment(scale: Scale) -> Experiment {
    // The paper: a 512 MB guest, a 128 MB heap in a JVM whose whole footprint is larger. Here
    // the heap is the program's footprint: a young space allocated afresh each generation and
    // an old space the survivors are copied into, as a ring.
    let (mem, heap, young, gens, limits): (u64, u64, u64, u64, &[u64]) = match scale {
        Scale::Full => (512, 256, 32, 300, &[192, 256, 384, 512]),
        Scale::Quick => (128, 96, 8, 100, &[48, 128]),
    };
    Experiment {
        name: "gcchurn",
        about: "VSwapper §5.1 / Fig. 13: a garbage-collected program's time against the memory the host gives the guest",
        mem: mem << 20,
        limit: None,
        steps: vec![Step {
            workload: "gcchurn",
            cmdline: format!("heap_mb={heap} gen_mb={young} gens={gens} live_pct=10"),
            // gcchurn reports one phase, its whole run.
            phases: vec!["done".into()],
            // A ballooned guest swaps the heap it cannot hold to its own disk, as Linux would.
            guest_swap_mb: Some(mem),
            disk: None,
        }],
        configs: PREVENTING_ALWAYS,
        // The paper gives its ratios against VSwapper.
        reference: "memvisor-vswapper-always",
        measure: Sweep::in_mib(limits, "done"),
    }
}
