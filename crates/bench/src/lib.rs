//! `memvisor bench`: the papers' experiments on memvisor and QEMU, their runs, CSV, reports and plots.
//!
//! Every experiment runs in one go on the same guest kit ELF, disks and memory sizes, with
//! memvisor (the binary that calls [`run`], found as the current executable) and QEMU as child
//! processes.
//!
//! The crate is layered, each layer importing only those below it:
//! - `experiments` (and `configs`): what each experiment runs, as data, one file per experiment;
//! - `harness`: what every family shares to run: child processes, the one QMP client, running
//!   and watching one VM (`harness::vm`), host set-up (`harness::setup`), the run order, the
//!   host's `/proc` and cgroup readings (`harness::readings`), and undoing it all
//!   (`harness::teardown`);
//! - `run`: running each family's configurations (memvisor or QEMU child processes,
//!   `memvisor host`);
//! - `report`: what every report shares: `results.csv`'s one quoting rule (`report::csv`), the
//!   numbers (`report::numbers`), drawing a figure (`report::figure`), writing the outputs;
//! - `output`: each family's `results.csv`, `report.md` and figures;
//! - `drive`: each family of experiments from its flags to its outputs.
//!
//! How a benchmark goes:
//! 1. Check the input (experiment, configurations, repetitions, output directory): bad input is
//!    one line and [`Outcome::BadInput`] (exit status 2).
//! 2. Clean what an earlier run left (its host swap file, `memvisor-*` cgroups of dead
//!    processes), or refuse to start saying what is left and why it cannot go.
//! 3. Set up: data disks (`memvisor mkdisk`), the host swap file and `vm.swappiness` if a
//!    configuration needs host swap, QEMU's overhead measured by a calibration run (printed, and
//!    passed to QEMU runs for their cgroup limit).
//! 4. Run repetition by repetition, each repetition running every configuration once (in an
//!    order that changes per repetition, `harness::order`), so drift and what one run leaves the
//!    next hit all configurations alike (`harness::order`, `harness::vm`).
//! 5. Write `results.csv`, `report.md` and `<experiment>.svg` (`output::report`, `output::plot`;
//!    for the time series of `workingset`, `output::workingset`; for the throughput over time of
//!    `recovery`, `output::recovery`).
//! 6. Tear down (`harness::teardown`) — also on Ctrl-C, SIGTERM, a crashed guest or an error.

mod configs;
mod drive;
mod experiments;
mod harness;
mod output;
pub mod progress;
mod report;
mod run;

use std::path::PathBuf;

use experiments::Scale;

/// `memvisor bench` flags.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// The experiment: seqread (VSwapper Fig. 9), alloc (Fig. 10), overhead (no limit),
    /// workingset (ESX Fig. 6), recovery (MemFlex Fig. 5), doublepaging (Tesseract §6), shares (ESX §5.1 on memvisor host),
    /// idletax (ESX §5.2, Fig. 7), consolidate (VSwapper Fig. 14), swapin (MemFlex Table 1,
    /// Fig. 7), reclaimdelay (HyperDealer2 Table 2, Figs. 11–12), dwell (HyperDealer2 Fig. 14),
    /// balance (HyperDealer2 Tables 3–4), sharing (ESX Fig. 4, with the guest timing probe) or
    /// zeroboot (ESX §6.3).
    pub experiment: String,
    /// Repetitions of every configuration, interleaved (default 3; 2 for recovery and swapin; 1
    /// for workingset, shares, idletax, consolidate and balance).
    #[arg(long)]
    pub reps: Option<u32>,
    /// Configurations to run, comma-separated (default: the experiment's list; for swapin its
    /// modes: pool-proactive, pool-faults, disk-proactive, disk-faults; for reclaimdelay its
    /// methods: hd2, balloon, qemu-balloon; for dwell the victim policies of memvisor run
    /// --victims: clock, random, hd2, hd2-whole; for sharing memvisor-off, memvisor-host,
    /// qemu-merge; for zeroboot memvisor, memvisor-ksm, qemu, qemu-ksm).
    #[arg(long, value_delimiter = ',')]
    pub configs: Vec<String>,
    /// Directory for results.csv, report.md, the plot, logs and disk images (default bench-out/EXPERIMENT).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The configuration ratios are taken against (default: the experiment's, qemu).
    #[arg(long)]
    pub reference: Option<String>,
    /// `full` (the papers' sizes) or `tiny` (seconds; for tests).
    #[arg(long, value_enum, default_value_t = Scale::Full)]
    pub scale: Scale,
    /// The host swap file the harness creates, enables and removes.
    #[arg(long, default_value = "/var/tmp/memvisor-bench.swap")]
    pub swap_file: PathBuf,
    /// Size of the host swap file.
    #[arg(long, default_value = "2G", value_parser = memvisor_api::parse_size)]
    pub swap_size: u64,
    /// vm.swappiness during the run (host-swap configurations' cgroups inherit it; restored after).
    #[arg(long, default_value_t = 100)]
    pub swappiness: u32,
    /// End a run that takes longer than this many seconds (recorded as timeout).
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
    /// consolidate: the numbers of VMs to run, e.g. 1,2,4 (default 2,4,6; runs of at most as
    /// many VMs as the host has cores pin each VMM to a core of its own); balance: default 6.
    /// reclaimdelay: the
    /// numbers of victims (1 to 8; default 1,2,4). sharing: identical VMs (default 1,2,4,6);
    /// zeroboot: VMs that zero their memory (default 5).
    #[arg(long, value_delimiter = ',')]
    pub vms: Vec<u32>,
    /// consolidate: the scenarios, `mapreduce`, `mixed` and/or `balance` (default the first
    /// two). reclaimdelay: the
    /// victims' states, `idle`, `busy-cpu` and/or `busy-dirty` (default all three).
    #[arg(long, value_delimiter = ',')]
    pub scenario: Vec<String>,
    /// swapin: the sizes of memory to bring back, e.g. 256M,1G (default 256M,512M,1G,2G).
    #[arg(long, value_delimiter = ',', value_parser = memvisor_api::parse_size)]
    pub sizes: Vec<u64>,
}

/// How `memvisor bench` ended; the binary turns it into its exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The benchmark ran (runs killed by the host are recorded, not errors).
    Done,
    /// Ctrl-C or SIGTERM: partial results written, the host cleaned up.
    Interrupted,
    /// Bad input, reported as one line.
    BadInput,
    /// The benchmark could not run (a command, a file, the host), reported as one line.
    Failed,
}

/// `memvisor bench`: the experiment named in `args`, run from its flags to its outputs.
pub fn run(args: BenchArgs) -> Outcome {
    match args.experiment.as_str() {
        "consolidate" => drive::consolidate::run(&args),
        "balance" => drive::consolidate::run_balance(&args),
        "swapin" => drive::swapin::run(&args),
        "reclaimdelay" => drive::reclaimdelay::run(&args),
        "dwell" => drive::dwell::run(&args),
        "sharing" => drive::sharing::run(&args, "sharing"),
        "zeroboot" => drive::sharing::run(&args, "zeroboot"),
        name if experiments::host::NAMES.contains(&name) => drive::host::run(&args),
        _ => drive::phases::run(&args),
    }
}
