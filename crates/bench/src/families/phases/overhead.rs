//! `memvisor bench overhead`: what running on memvisor costs against QEMU when memory is
//! plentiful: without a limit, and on the pager at a limit equal to guest RAM (as a VM under
//! `memvisor host` runs); each hypervisor with and without a balloon device that is never
//! inflated (statistics, deflate-on-OOM, free page reporting), so the balloon's own cost shows;
//! and memvisor on the pager jailed and filtered against neither, so confinement's shows.

use super::experiment::{DataDisk, Experiment, Measure, Step};
use crate::args::Scale;

/// `memvisor bench overhead` at `scale`.
pub fn experiment(scale: Scale) -> Experiment {
    let tiny = scale == Scale::Quick;
    // (jobs, source MiB, disk MiB, kv records, kv operations): the object file grows
    // with the jobs, so the disk does too.
    let (jobs, src, disk_mb, records, ops) = if tiny {
        (20, 4, 48, 5000, 20_000)
    } else {
        (1000, 16, 256, 200_000, 2_000_000)
    };
    // (gcchurn heap MiB, generation MiB, generations; mapreduce input MiB, vocabulary):
    // a few seconds each. The vocabulary makes each mapper's table 16 MiB, so the map
    // phase's random accesses span far more memory than the TLB covers.
    let (heap, gen, gens, input, vocab) = if tiny {
        (32, 4, 10, 4, 50_000)
    } else {
        (256, 32, 500, 128, 500_000)
    };
    Experiment {
        name: "overhead",
        about: "memory to spare: memvisor against QEMU on a kernbench-like build, a YCSB-like key-value store, a generational collector's churn and a word count, without a limit and on memvisor's pager at a limit equal to guest RAM, each with and without a balloon device that is never inflated",
        mem: 512 << 20,
        // Only the pager configurations take it: they hold guest RAM from boot, as under
        // `memvisor host`; nothing is ever reclaimed.
        limit: Some(512 << 20),
        steps: vec![
            Step {
                workload: "compile",
                cmdline: format!("jobs={jobs} src=src src_mb={src}"),
                phases: vec!["build".into()],
                guest_swap_mb: None,
                disk: Some(DataDisk {
                    size_mb: disk_mb,
                    files: format!("src:{src}M"),
                    writable: true,
                }),
            },
            Step {
                workload: "kv",
                cmdline: format!("records={records} ops={ops}"),
                phases: vec!["load".into(), "run".into()],
                guest_swap_mb: None,
                disk: None,
            },
            Step {
                workload: "gcchurn",
                cmdline: format!("heap_mb={heap} gen_mb={gen} gens={gens} live_pct=10"),
                // gcchurn reports one phase, its whole run.
                phases: vec!["done".into()],
                guest_swap_mb: None,
                disk: None,
            },
            Step {
                workload: "mapreduce",
                cmdline: format!("input=src input_mb={input} vocab={vocab} mappers=4"),
                phases: vec!["map".into(), "reduce".into()],
                guest_swap_mb: None,
                // Only read: one image for all runs.
                disk: Some(DataDisk {
                    size_mb: input + 16,
                    files: format!("src:{input}M"),
                    writable: false,
                }),
            },
        ],
        configs: &[
            "qemu",
            "qemu-fpr",
            "memvisor",
            "memvisor-nolimit-fpr",
            "memvisor-pager",
            "memvisor-fpr",
            "memvisor-hd2",
            "memvisor-nolimit-hd2",
            "memvisor-jailed",
            "memvisor-unconfined",
        ],
        reference: "qemu",
        measure: Measure::Phases,
    }
}
