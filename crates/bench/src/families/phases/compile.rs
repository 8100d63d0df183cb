//! `memvisor bench compile`: VSwapper §5.1, Fig. 12: a kernel build (Kernbench in the paper; the
//! guest kit's `compile`, many short tasks that read sources, compute in fresh memory and write
//! objects) in a guest whose memory the host limits, the limit swept as for Fig. 5: the build's
//! time against the memory the guest has (Fig. 12a), and the writes to reclaimed pages the False
//! Reads Preventer completed with no read (Fig. 12b).

use super::experiment::{DataDisk, Experiment, Step, Sweep, PREVENTING_ALWAYS};
use crate::args::Scale;

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
    Experiment {
        name: "compile",
        about: "VSwapper §5.1 / Fig. 12: a kernel build's time against the memory the host gives the guest",
        mem: mem << 20,
        limit: None,
        steps: vec![step(jobs, src, task_kb, work)],
        configs: PREVENTING_ALWAYS,
        reference: "memvisor-balloon",
        measure: Sweep::in_mib(limits, "build"),
    }
}

/// The guest kit's `compile`: `jobs` jobs over `src` MiB of sources, each with `task_kb` KiB of
/// fresh memory and `work` hash rounds per source word, on a fresh disk of its own.
pub fn step(jobs: u64, src: u64, task_kb: u64, work: u64) -> Step {
    Step {
        workload: "compile",
        cmdline: format!("jobs={jobs} src=src src_mb={src} mem_kb={task_kb} work={work}"),
        phases: vec!["build".into()],
        guest_swap_mb: None,
        disk: Some(DataDisk {
            // Each job's object takes up to 16 pages of `obj`: room for them and the sources.
            size_mb: src + jobs * 16 * 4 / 1024 + 32,
            files: format!("src:{src}M"),
            writable: true,
        }),
    }
}
