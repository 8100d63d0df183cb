//! `memvisor bench patterns`: HyperDealer2 §6.4, Fig. 10: the reference patterns the hypervisor
//! detects in each benchmark's disk reads (sequential, loop, other). The paper ran SPEC CPU2006,
//! Tiobench and Dbench; here the guest kit's workloads that read a disk run one after another,
//! each in a fresh VM on memvisor's pager with the Swap Mapper and HyperDealer2's detection, and
//! the report gives the guest's page cache by pattern when each run ended. The limit is the
//! guest's size, so nothing is reclaimed: the patterns are what the reads formed.

use super::experiment::{phases, DataDisk, Experiment, Measure, Step};
use super::{compile, compress};
use crate::args::Scale;

/// `memvisor bench patterns` at `scale`.
pub fn experiment(scale: Scale) -> Experiment {
    // (guest MiB, seqread's file MiB, the file MiB of compress and mapreduce and of compile's
    // sources, compile's jobs). seqread's file is larger than the guest, so its second pass reads
    // the disk again: only then can the host see a loop.
    let (mem, seq, file, jobs) = match scale {
        Scale::Full => (256, 384, 128, 4000),
        Scale::Quick => (128, 160, 32, 500),
    };
    let read_only = |files: String, size_mb: u64| {
        Some(DataDisk {
            size_mb,
            files,
            writable: false,
        })
    };
    Experiment {
        name: "patterns",
        about: "HyperDealer2 §6.4 / Fig. 10: the reference patterns detected in each workload's disk reads",
        mem: mem << 20,
        limit: Some(mem << 20),
        steps: vec![
            // A file read twice from the disk: a sequence, then a loop.
            Step {
                workload: "seqread",
                cmdline: "file=seq passes=2".into(),
                phases: phases("pass", 2),
                guest_swap_mb: None,
                disk: read_only(format!("seq:{seq}M"), seq + 16),
            },
            // Input read once, in order, by several mappers.
            Step {
                workload: "mapreduce",
                cmdline: format!("input=src input_mb={file} vocab=50000 mappers=4"),
                phases: vec!["map".into(), "reduce".into()],
                guest_swap_mb: None,
                disk: read_only(format!("src:{file}M"), file + 16),
            },
            // Short runs at random places of the sources, objects written.
            compile::step(jobs, file, 512, 1),
            // A text written, dropped, read once in blocks, its compressed form written.
            compress::step(file),
        ],
        configs: &["memvisor-hd2"],
        reference: "memvisor-hd2",
        measure: Measure::Phases,
    }
}
