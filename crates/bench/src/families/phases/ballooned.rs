//! `memvisor bench ballooned`: ESX §3.2, Fig. 2: a VM ballooned down to a size against a VM
//! configured at that size, running a job whose speed depends on its page cache (dbench in the
//! paper; the guest kit's `compile`, whose sources are read at random places and whose objects
//! are written, more than the smallest size holds). The size is swept as the paper's, from half
//! the guest's RAM to all of it. Neither VM has a host limit: the ballooned one has what its
//! balloon leaves it, as in the paper, where ESX only ballooned.

use super::compile;
use super::experiment::{Experiment, Sweep};
use crate::args::Scale;

/// The configured and ballooned VM on each hypervisor.
pub const CONFIGS: &[&str] = &[
    "memvisor-sized",
    "memvisor-ballooned",
    "qemu-sized",
    "qemu-ballooned",
];

/// `memvisor bench ballooned` at `scale`.
pub fn experiment(scale: Scale) -> Experiment {
    // The paper: a 256 MB VM at 128, 160, 192, 224 and 256 MB. The sources are more than half
    // the guest, so the page cache of the smaller sizes misses where the largest hits, as
    // dbench's throughput rises with memory; a job computes for about 0.2 ms, so the build is
    // mostly its reads and writes, as a file server's load is.
    let (mem, src, jobs, task_kb, work, sizes): (u64, u64, u64, u64, u64, &[u64]) = match scale {
        Scale::Full => (256, 192, 6000, 1024, 1, &[128, 160, 192, 224, 256]),
        Scale::Quick => (128, 80, 1500, 512, 1, &[64, 128]),
    };
    Experiment {
        name: "ballooned",
        about: "ESX §3.2 / Fig. 2: a job's time in a VM ballooned down to a size against a VM configured at that size",
        mem: mem << 20,
        limit: None,
        steps: vec![compile::step(jobs, src, task_kb, work)],
        configs: CONFIGS,
        reference: "memvisor-sized",
        measure: Sweep::in_mib(sizes, "build"),
    }
}
