//! `memvisor bench compress`: VSwapper §5.1, Fig. 5: a parallel compressor (pbzip2 in the paper;
//! the guest kit's `compress`, a real DEFLATE) compressing a file in a guest whose memory the
//! host limits, the limit swept from a fraction of the guest's RAM to all of it: the time of the
//! job against the memory the guest has, ballooning against the uncooperative swappers, and the
//! host disk's requests meanwhile with the writes among them (Fig. 11a–b).

use super::experiment::{DataDisk, Experiment, Step, Sweep};
use crate::args::Scale;

/// VSwapper Fig. 5's series: ballooning (memvisor's and QEMU's), the baseline (the host swapping
/// on its own), the Swap Mapper alone and VSwapper; ratios against memvisor's balloon, as the
/// paper's text gives them.
const CONFIGS: &[&str] = &[
    "qemu-balloon",
    "memvisor-balloon",
    "memvisor-baseline",
    "memvisor-mapper",
    "memvisor-vswapper",
];

/// `memvisor bench compress` at `scale`.
pub fn experiment(scale: Scale) -> Experiment {
    // The paper: a 512 MB guest given 128 to 512 MB; the input larger than the smallest.
    let (mem, file, limits): (u64, u64, &[u64]) = match scale {
        Scale::Full => (512, 192, &[128, 192, 256, 512]),
        Scale::Quick => (128, 40, &[48, 128]),
    };
    Experiment {
        name: "compress",
        about: "VSwapper §5.1 / Fig. 5: a parallel compressor's time against the memory the host gives the guest",
        mem: mem << 20,
        limit: None,
        steps: vec![step(file)],
        configs: CONFIGS,
        reference: "memvisor-balloon",
        measure: Sweep::in_mib(limits, "compress").counting_disk_ops(),
    }
}

/// The guest kit's `compress` over a text of `file` MiB it writes itself.
pub fn step(file: u64) -> Step {
    Step {
        workload: "compress",
        cmdline: format!("file=text file_mb={file} block_kb=900 level=6 out=text.mvz"),
        phases: vec!["compress".into(), "check".into()],
        guest_swap_mb: None,
        // The guest writes the text and the compressed output: a fresh disk per run.
        disk: Some(DataDisk {
            size_mb: file * 2 + 64,
            files: String::new(),
            writable: true,
        }),
    }
}
