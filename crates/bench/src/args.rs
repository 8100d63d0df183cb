//! What `memvisor bench` is asked ([`BenchArgs`], with its [`Scale`]) and how it ended
//! ([`Outcome`]): the leaf every family and the harness import.

use std::path::PathBuf;

/// Full size (the papers' numbers) or quick (seconds to minutes: a smoke run, and the
/// end-to-end tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scale {
    Full,
    Quick,
}

/// `memvisor bench` flags.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// The experiment (its list, with what each reproduces, is in `--help`).
    #[arg(long_help = crate::families::figures::help())]
    pub experiment: String,
    /// `reproduce` only: the paper whose set of experiments to run (esx, vswapper, tesseract,
    /// memflex, hd2).
    pub paper: Option<String>,
    /// `reproduce` only: run nothing; judge the paper's values again against the experiments'
    /// reports under `--out`, which an earlier run of the set left, and write its report again.
    #[arg(long)]
    pub judge: bool,
    /// Repetitions of every configuration, interleaved (default 3; 7 for confinement and
    /// mobility; 2 for
    /// recovery and swapin; 1 for workingset, shares, idletax, consolidate and balance).
    #[arg(long)]
    pub reps: Option<u32>,
    /// Configurations to run, comma-separated (default: the experiment's list; for swapin its
    /// modes: pool-proactive, pool-faults, disk-proactive, disk-faults; for reclaimdelay its
    /// methods: hd2, hd2-ready, balloon, qemu-balloon; for dwell the victim policies of memvisor run
    /// --victims: clock, random, hd2, hd2-whole; for sharing memvisor-off, memvisor-host,
    /// qemu-merge; for zeroboot memvisor, memvisor-ksm, qemu, qemu-ksm; for mobility
    /// memvisor-start, memvisor-restore, memvisor-postcopy, memvisor-precopy, qemu-start,
    /// qemu-restore, qemu-precopy, qemu-postcopy; for consolidate and balance a host
    /// configuration may add [host] settings after a +, e.g. hd2+balloon_max=0.3).
    #[arg(long, value_delimiter = ',')]
    pub configs: Vec<String>,
    /// Directory for results.csv, report.md, the plot, logs and disk images (default bench-out/EXPERIMENT).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The configuration ratios are taken against (default: the experiment's, qemu).
    #[arg(long)]
    pub reference: Option<String>,
    /// `full` (the papers' sizes) or `quick` (seconds; a smoke run, and the tests).
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
    /// consolidate: the numbers of VMs to run, e.g. 1,2,4 (default 6; runs of at most as
    /// many VMs as the host has cores pin each VMM to a core of its own); balance: default 6.
    /// reclaimdelay: the
    /// numbers of victims of one vCPU (1 to 8; default 1,2,4). sharing: identical VMs (default 1,2,4,6);
    /// zeroboot: VMs that zero their memory (default 5).
    #[arg(long, value_delimiter = ',')]
    pub vms: Vec<u32>,
    /// reclaimdelay: the numbers of vCPUs of one victim (1 to 8; default 1,2,4), beside the
    /// numbers of victims of one vCPU that `--vms` gives.
    #[arg(long, value_delimiter = ',')]
    pub vcpus: Vec<u32>,
    /// consolidate: the scenarios, `mapreduce`, `mixed` and/or `balance` (default the first
    /// two). reclaimdelay: the
    /// victims' states, `idle`, `busy-cpu` and/or `busy-dirty` (default all three).
    #[arg(long, value_delimiter = ',')]
    pub scenario: Vec<String>,
    /// consolidate: the budgets every VM shares, each a fraction of the scenario's joint working
    /// set (what its VMs and VMMs hold at the peak on QEMU with no limit, measured first) or an
    /// amount, e.g. 1,0.75,0.5 (the default) or 1G (balance: default 1G).
    #[arg(long, value_delimiter = ',')]
    pub budget: Vec<String>,
    /// consolidate: between two VMs' starts, e.g. 500ms (the default) or 2s.
    #[arg(long, value_parser = memvisor_api::parse_duration)]
    pub interval: Option<std::time::Duration>,
    /// consolidate, balance: keys of `memvisor host`'s `[host]` table for its runs, as
    /// KEY=VALUE in TOML (docs/host.md), e.g. balloon_max=0.3 or pool_compress="lz4";
    /// comma-separated or repeated. The keys the bench sets itself are refused.
    #[arg(long = "host-set", value_delimiter = ',')]
    pub host_set: Vec<String>,
    /// swapin: the sizes of memory to bring back, e.g. 256M,1G (default 256M,512M,1G,2G);
    /// mobility: the guest sizes (default 256M,1G,2G).
    #[arg(long, value_delimiter = ',', value_parser = memvisor_api::parse_size)]
    pub sizes: Vec<u64>,
    /// mobility: the guests' working sets in percent of guest RAM, e.g. 10,50,80 (the default).
    #[arg(long, value_delimiter = ',')]
    pub ws: Vec<u32>,
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
