//! `memvisor bench compile`: VSwapper §5.1, Fig. 12: a kernel build (Kernbench in the paper; the
//! guest kit's `compile`, many short tasks that read sources, compute in fresh memory and write
//! objects) in a guest whose memory the host limits, the limit swept as for Fig. 5: the build's
//! time against the memory the guest has (Fig. 12a), and the writes to reclaimed pages the False
//! Reads Preventer completed with no read (Fig. 12b).

use super::experiment::{DataDisk, Experiment, Measure, Step, Sweep};
use crate::args::Scale;

/// Fig. 12's series: ballooning (memvisor's and QEMU's), the baseline (the host swapping on its
/// own), the Swap Mapper alone and VSwapper, whose Preventer stops the vCPU on every write to a
/// reclaimed page as the paper's does (so its count is Fig. 12b's); ratios against memvisor's
/// balloon, as the paper's text gives them.
const CONFIGS: &[&str] = &[
    "qemu-balloon",
    "memvisor-balloon",
    "memvisor-baseline",
    "memvisor-mapper",
    "memvisor-vswapper-always",
];

/// `memvisor bench compile` at `scale`.
pub fn experiment(scale: Scale) -> Experiment {
    // The paper: a 512 MB guest given 128 to 512 MB. The sources read and the objects
    // written come to more than the guest has, as a kernel tree's do, so its page cache
    // reuses its own frames; each job's task memory is fresh, as a compiler's is; `work`
    // makes the compiler's own work most of the build's time with memory to spare (about
    // 0.7 ms a job), as it is in a kernel build.
    let (mem, src, jobs, task_kb, work, limits): (u64, u64, u64, u64, u64, &[u64]) = match scale {
        Scale::Full => (512, 384, 8000, 2048, 25, &[128, 192, 256, 512]),
        Scale::Quick => (128, 96, 2000, 512, 1, &[48, 128]),
    };
    // Each job's object takes up to 16 pages of `obj`: room for them and the sources.
    let disk_mb = src + jobs * 16 * 4 / 1024 + 32;
    Experiment {
        name: "compile",
        about: "VSwapper §5.1 / Fig. 12: a kernel build's time against the memory the host gives the guest",
        mem: mem << 20,
        limit: None,
        steps: vec![Step {
            workload: "compile",
            cmdline: format!("jobs={jobs} src=src src_mb={src} mem_kb={task_kb} work={work}"),
            phases: vec!["build".into()],
            guest_swap_mb: None,
            disk: Some(DataDisk {
                size_mb: disk_mb,
                files: format!("src:{src}M"),
                writable: true,
            }),
        }],
        configs: CONFIGS,
        reference: "memvisor-balloon",
        measure: Measure::Sweep(Sweep {
            limits: limits.iter().map(|l| l << 20).collect(),
            phase: "build",
        }),
    }
}
