//! `memvisor bench seqread`: VSwapper §3.1, Fig. 9a–9d: the guest believes it has 512 MB, has 100 MB,
//! and reads a 200 MB file sequentially 8 times.

use super::experiment::{phases, DataDisk, Experiment, Measure, Step, LIMITED};
use crate::args::Scale;

/// `memvisor bench seqread` at `scale`.
pub fn experiment(scale: Scale) -> Experiment {
    let tiny = scale == Scale::Quick;
    let (mem, limit, file, passes) = if tiny {
        (128, 32, 96, 2)
    } else {
        (512, 100, 200, 8)
    };
    Experiment {
        name: "seqread",
        about: "VSwapper §3.1 / Fig. 9a–9d: sequential reads of a file larger than the memory the host gives the guest",
        mem: mem << 20,
        limit: Some(limit << 20),
        steps: vec![Step {
            workload: "seqread",
            cmdline: format!("file=seq passes={passes}"),
            phases: phases("pass", passes),
            guest_swap_mb: None,
            disk: Some(DataDisk {
                size_mb: file + 56,
                files: format!("seq:{file}M"),
                writable: false,
            }),
        }],
        configs: LIMITED,
        reference: "qemu",
        measure: Measure::Phases,
    }
}
