//! The papers' published values, typed in as data with the section that states them, each set
//! beside the cell of an experiment's report that holds ours ([`Claim`]). `memvisor bench
//! reproduce PAPER` reads them after running the paper's experiments ([`super::figures`] says
//! which experiments and with which flags).

use crate::report::claims::{Cell, Claim, Ours, Paper};

/// The cell of `experiment`'s report under `section`, row `row`, column `column`.
const fn at(
    experiment: &'static str,
    section: &'static str,
    row: &'static [&'static str],
    column: &'static str,
) -> Cell {
    Cell {
        experiment,
        section,
        row,
        column,
    }
}

/// A phases experiment's whole-run wall time (median, s) of configuration `row`.
const fn wall(experiment: &'static str, row: &'static [&'static str]) -> Cell {
    at(experiment, "Whole run", row, "wall s median")
}

pub const SEQREAD: &[Claim] = &[
    Claim {
        figure: "Fig. 3",
        measures:
            "time to read the file, the baseline (the host swapping on its own) over ballooning",
        paper: Paper::Value(12.5),
        source: "§2.2",
        ours: Ours::Ratio(
            wall("seqread", &["memvisor-baseline"]),
            wall("seqread", &["memvisor-balloon"]),
        ),
        why: "",
    },
    Claim {
        figure: "Fig. 3",
        measures: "the same time, the baseline over VSwapper",
        paper: Paper::Value(9.7),
        source: "§2.2",
        ours: Ours::Ratio(
            wall("seqread", &["memvisor-baseline"]),
            wall("seqread", &["memvisor-vswapper"]),
        ),
        why: "",
    },
    Claim {
        figure: "Fig. 3",
        measures: "the same time, VSwapper over ballooning",
        paper: Paper::Value(1.3),
        source: "§2.2",
        ours: Ours::Ratio(
            wall("seqread", &["memvisor-vswapper"]),
            wall("seqread", &["memvisor-balloon"]),
        ),
        why: "",
    },
    Claim {
        figure: "Fig. 9d",
        measures: "written to the host's swap with VSwapper, MiB in the whole run",
        paper: Paper::Value(0.0),
        source: "§3.1",
        ours: Ours::Cell(at(
            "seqread",
            "Host measurements",
            &["memvisor-vswapper"],
            "pager swap written",
        )),
        why: "",
    },
];

pub const ALLOC: &[Claim] = &[Claim {
    figure: "Fig. 10",
    measures: "time to allocate and touch memory after the reads, the Swap Mapper alone over VSwapper with the False Reads Preventer",
    paper: Paper::Above(2.0),
    source: "§3.1",
    ours: Ours::Ratio(wall("alloc", &["memvisor-mapper"]), wall("alloc", &["memvisor-vswapper"])),
    why: "a prevention costs about 140 µs here and a page of a 16-page swap read about 7 µs, so memvisor prevents only where it has paid (docs/vswapper.md)",
}];

/// The largest over the limits of `compress`'s ratio of `config` to ballooning.
const fn worst(config: &'static str) -> Cell {
    at("compress", "Against memvisor-balloon", &["largest"], config)
}

/// `compress`'s count of the host disk's requests (`Disk operations`, or `Disk writes`) of
/// `config` at the limit of 128 MiB, the paper's smallest.
const fn disk(section: &'static str, config: &'static str) -> Cell {
    at("compress", section, &["128"], config)
}

pub const COMPRESS: &[Claim] = &[
    Claim {
        figure: "Fig. 5",
        measures: "the compressor's time, the baseline (the host swapping on its own) over ballooning, the largest over the limits",
        paper: Paper::Value(1.66),
        source: "§5.1",
        ours: Ours::Cell(worst("memvisor-baseline")),
        why: "",
    },
    Claim {
        figure: "Fig. 5",
        measures: "the same, the Swap Mapper alone over ballooning",
        paper: Paper::Value(1.13),
        source: "§5.1",
        ours: Ours::Cell(worst("memvisor-mapper")),
        why: "",
    },
    Claim {
        figure: "Fig. 5",
        measures: "the same, VSwapper over ballooning",
        paper: Paper::Value(1.08),
        source: "§5.1",
        ours: Ours::Cell(worst("memvisor-vswapper")),
        why: "",
    },
    Claim {
        figure: "Fig. 11a",
        measures: "the host disk's requests during the compression at 128 MiB, VSwapper over the baseline (the paper: VSwapper and the Mapper \"significantly reduce the number of disk operations\")",
        paper: Paper::Below(1.0),
        source: "§5.1",
        ours: Ours::Ratio(
            disk("Disk operations", "memvisor-vswapper"),
            disk("Disk operations", "memvisor-baseline"),
        ),
        why: "",
    },
    Claim {
        figure: "Fig. 11b",
        measures: "the writes among them, the baseline over ballooning, which writes only the compressed output (the paper: the baseline's operations \"include a notable component of writes\", taken as more than 10 % above)",
        paper: Paper::Above(1.1),
        source: "§5.1",
        ours: Ours::Ratio(
            disk("Disk writes", "memvisor-baseline"),
            disk("Disk writes", "memvisor-balloon"),
        ),
        why: "",
    },
    Claim {
        figure: "Fig. 11b",
        measures: "the same, VSwapper over ballooning (the paper: that component \"largely eliminated by VSwapper\", taken as within 10 % of ballooning's writes)",
        paper: Paper::Below(1.1),
        source: "§5.1",
        ours: Ours::Ratio(
            disk("Disk writes", "memvisor-vswapper"),
            disk("Disk writes", "memvisor-balloon"),
        ),
        why: "",
    },
];

pub const BALLOONED: &[Claim] = &[Claim {
    figure: "Fig. 2",
    measures: "the job's time in the VM ballooned down to a size over the VM configured at it, the largest over the sizes (the paper: 4.4 % less throughput at 128 MB, 1.4 % at 224 MB)",
    paper: Paper::Value(1.046),
    source: "§3.2",
    ours: Ours::Cell(at(
        "ballooned",
        "Against memvisor-sized",
        &["largest"],
        "memvisor-ballooned",
    )),
    why: "",
}];

/// The largest over the limits of `compile`'s ratio of `config` to ballooning.
const fn worst_build(config: &'static str) -> Cell {
    at("compile", "Against memvisor-balloon", &["largest"], config)
}

/// Why the build's ratios are larger here than in the paper.
const BUILD_WHY: &str = "a job of the guest kit's build works for about 1 ms where a compiler works for about a second on a file, so memory and I/O are more of its time, over sources read at random; and each access to a page the host took costs a userfault round trip through kvm_pvm (docs/vswapper.md)";

pub const COMPILE: &[Claim] = &[
    Claim {
        figure: "Fig. 12a",
        measures: "the build's time, the baseline over ballooning, the largest over the limits",
        paper: Paper::Value(1.10),
        source: "§5.1",
        ours: Ours::Cell(worst_build("memvisor-baseline")),
        why: BUILD_WHY,
    },
    Claim {
        figure: "Fig. 12a",
        measures: "the same, the Swap Mapper alone over ballooning",
        paper: Paper::Value(1.05),
        source: "§5.1",
        ours: Ours::Cell(worst_build("memvisor-mapper")),
        why: BUILD_WHY,
    },
    Claim {
        figure: "Fig. 12a",
        measures: "the same, VSwapper over ballooning",
        paper: Paper::Value(1.01),
        source: "§5.1",
        ours: Ours::Cell(worst_build("memvisor-vswapper-always")),
        why: BUILD_WHY,
    },
    Claim {
        figure: "Fig. 12b",
        measures: "false reads the Preventer removed in one build, the most at any limit",
        paper: Paper::Value(80_000.0),
        source: "§5.1",
        ours: Ours::Cell(at(
            "compile",
            "False reads removed",
            &["largest"],
            "memvisor-vswapper-always",
        )),
        why: "the guest kit's build is smaller than a kernel's: 8,000 jobs over 384 MiB of sources",
    },
];

/// The largest over the limits of `gcchurn`'s ratio of `config` to VSwapper.
const fn worst_churn(config: &'static str) -> Cell {
    at(
        "gcchurn",
        "Against memvisor-vswapper-always",
        &["largest"],
        config,
    )
}

pub const GCCHURN: &[Claim] = &[
    Claim {
        figure: "Fig. 13",
        measures: "the program's time, the baseline over VSwapper, the largest over the limits",
        paper: Paper::Value(1.28),
        source: "§5.1",
        ours: Ours::Cell(worst_churn("memvisor-baseline")),
        why: "memvisor's baseline writes every page it evicts and reads each back alone, with none of the pager's own mechanisms, where the paper's is Linux's swapping with its swap cache and readahead",
    },
    Claim {
        figure: "Fig. 13",
        measures: "the same, the Swap Mapper alone over VSwapper",
        paper: Paper::Value(1.08),
        source: "§5.1",
        ours: Ours::Cell(worst_churn("memvisor-mapper")),
        why: "",
    },
    Claim {
        figure: "Fig. 13",
        measures: "the same, ballooning over VSwapper (the paper: ballooning 1–4 % faster wherever Eclipse was not killed)",
        paper: Paper::Below(1.0),
        source: "§5.1",
        ours: Ours::Cell(worst_churn("memvisor-balloon")),
        why: "below the program's footprint a ballooned guest swaps it to its own disk (the guest kit has no OOM killer), where Eclipse was killed and the paper has no point",
    },
];

pub const TRACKED: &[Claim] = &[Claim {
    figure: "Fig. 15",
    measures: "the memory the Swap Mapper tracks over the guest's page cache, the median over a run (the paper: they coincide, less the cache's dirty pages)",
    paper: Paper::Value(1.0),
    source: "§5.3",
    ours: Ours::Cell(at(
        "tracked",
        "Tracked over the page cache per configuration",
        &["memvisor-vswapper-fpr"],
        "tracked / page cache",
    )),
    why: "",
}];

pub const DOUBLEPAGING: &[Claim] = &[
    Claim {
        figure: "Table 1",
        measures: "pages swapped in only to be written to the guest's swap disk, with Tesseract",
        paper: Paper::Value(0.0),
        source: "§6.3",
        ours: Ours::Cell(at("doublepaging", "The guest's swap-disk writes and their holes", &["memvisor-tesseract"], "double-paging swap-ins (pages)")),
        why: "",
    },
    Claim {
        figure: "Table 4",
        measures: "mean write prepare time of the guest's swap-disk writes, without Tesseract over with it",
        paper: Paper::Value(24_262.0 / 220.0),
        source: "§6.7",
        ours: Ours::Ratio(
            at("doublepaging", "The guest's swap-disk writes and their holes", &["memvisor-pager"], "write prepare µs, mean per write"),
            at("doublepaging", "The guest's swap-disk writes and their holes", &["memvisor-tesseract"], "write prepare µs, mean per write"),
        ),
        why: "the paper's swap-ins were random reads of a 7200 rpm disk; here a read takes about 100 µs",
    },
    Claim {
        figure: "Fig. 11",
        measures: "the longest collector pause, without Tesseract over with it",
        paper: Paper::Value(30.0 / 7.0),
        source: "§6.2.1",
        ours: Ours::Ratio(
            at("doublepaging", "Guest time per phase", &["memvisor-pager"], "pause_max"),
            at("doublepaging", "Guest time per phase", &["memvisor-tesseract"], "pause_max"),
        ),
        why: "double paging costs tens of milliseconds a run on this disk, not the paper's seconds, so the pauses are the collector's own",
    },
];

pub const SWAPIN: &[Claim] = &[
    Claim {
        figure: "Table 1",
        measures: "time to swap memory back in, by faults over proactively (MemFlex without and with proactive swap-in), at the largest size",
        paper: Paper::Value(150.19 / 3.46),
        source: "§4.2",
        ours: Ours::Ratio(
            at("swapin", "Time to bring the memory back", &["*", "pool-faults"], "seconds"),
            at("swapin", "Time to bring the memory back", &["*", "pool-proactive"], "seconds"),
        ),
        why: "a fault here costs a quarter of MemFlex's: the host installs the page, and no guest page table is searched",
    },
    Claim {
        figure: "Table 1",
        measures: "proactive swap-in from the pool, ns a page, at the largest size",
        paper: Paper::Value(6_045.0),
        source: "§4.2",
        ours: Ours::Cell(at("swapin", "Time to bring the memory back", &["*", "pool-proactive"], "ns per page")),
        why: "",
    },
];

/// HyperDealer2's Table 2 (§6.2.1; ms per one-time reclamation of 100, 1,000 and 10,000 pages
/// from one victim): HD2, the balloon with an idle victim, the balloon with a victim whose pages
/// are all dirty. `reclaimdelay`'s report prints them beside its own.
pub const PAPER_HD2_MS: [(u64, f64); 3] = [(100, 0.1), (1_000, 0.7), (10_000, 6.4)];
pub const PAPER_BALLOON_IDLE_MS: [(u64, f64); 3] = [(100, 9.4), (1_000, 12.6), (10_000, 40.5)];
pub const PAPER_BALLOON_DIRTY_MS: [(u64, f64); 3] = [(100, 53.1), (1_000, 674.9), (10_000, 1601.2)];

/// A cell of `reclaimdelay`'s one-victim table.
const fn one_victim(method: &'static [&'static str], column: &'static str) -> Cell {
    at(
        "reclaimdelay",
        "One victim, beside HyperDealer2's Table 2",
        method,
        column,
    )
}

pub const RECLAIMDELAY: &[Claim] = &[
    Claim {
        figure: "Table 2",
        measures: "HD2's instant release of 100 pages from an idle victim, ms",
        paper: Paper::Value(PAPER_HD2_MS[0].1),
        source: "§6.2.1",
        ours: Ours::Cell(one_victim(&["hd2-ready", "idle"], "100 pages (ms)")),
        why: "the release is handed to the pager's fault thread and back: about 0.4 ms on a quiet machine",
    },
    Claim {
        figure: "Table 2",
        measures: "HD2's instant release of 1,000 pages from an idle victim, ms",
        paper: Paper::Value(PAPER_HD2_MS[1].1),
        source: "§6.2.1",
        ours: Ours::Cell(one_victim(&["hd2-ready", "idle"], "1000 pages (ms)")),
        why: "",
    },
    Claim {
        figure: "Table 2",
        measures: "the balloon's 1,000 pages from an idle victim, ms",
        paper: Paper::Value(PAPER_BALLOON_IDLE_MS[1].1),
        source: "§6.2.1",
        ours: Ours::Cell(one_victim(&["balloon", "idle"], "1000 pages (ms)")),
        why: "",
    },
    Claim {
        figure: "Table 2",
        measures: "1,000 pages from a victim whose pages are dirty, the balloon over HD2's release",
        paper: Paper::Value(PAPER_BALLOON_DIRTY_MS[1].1 / PAPER_HD2_MS[1].1),
        source: "§6.2.1",
        ours: Ours::Ratio(
            one_victim(&["balloon", "busy-dirty"], "1000 pages (ms)"),
            one_victim(&["hd2-ready", "busy-dirty"], "1000 pages (ms)"),
        ),
        why: "the guest kit's balloon driver gives pages without writing them back, where Linux's first writes the dirty page cache; and the release checks the pages a writing guest changed",
    },
    Claim {
        figure: "Fig. 12 (f)–(h)",
        measures: "the largest amount from one writing victim whose vCPUs all work, the balloon's time with 4 vCPUs over with 1 (4 busy vCPUs outnumber the cores)",
        paper: Paper::Above(1.0),
        source: "§6.2.3",
        ours: four_over_one(&["balloon", "busy-dirty", "*"]),
        why: "",
    },
    Claim {
        figure: "Fig. 12 (f)–(h)",
        measures: "the same for HD2's instant release: \"little variances in delay\", read as under 2x",
        paper: Paper::Below(2.0),
        source: "§6.2.3",
        ours: four_over_one(&["hd2-ready", "busy-dirty", "*"]),
        why: "",
    },
];

/// In `reclaimdelay`'s several-vCPUs table, the time of a method, state and amount (`row`)
/// with 4 vCPUs over with 1.
const fn four_over_one(row: &'static [&'static str]) -> Ours {
    let table = "One victim of several vCPUs (Fig. 12)";
    Ours::Ratio(
        at("reclaimdelay", table, row, "4 vCPU(s)"),
        at("reclaimdelay", table, row, "1 vCPU(s)"),
    )
}

/// The rows of `reallocation`'s table against the paper (ESX Fig. 8 (a) and (d)).
pub const REALLOCATION_HIGH_SOFT: &str = "time in `high` or `soft`, % of the run";
pub const REALLOCATION_IDLE_LOW: &str =
    "the idle VM's lowest allocation in the second half of its idle phase over its min";

/// ESX Fig. 8's run: the host's states and the idle VM against its min.
pub const REALLOCATION: &[Claim] = &[
    Claim {
        figure: "Fig. 8a",
        measures: "time the host spends in the `high` or `soft` free-memory state, % of the run (the paper: nearly all)",
        paper: Paper::Above(90.0),
        source: "§6.3",
        ours: Ours::Cell(at(
            "reallocation",
            "Against the paper",
            &[REALLOCATION_HIGH_SOFT],
            "ours",
        )),
        why: "",
    },
    Claim {
        figure: "Fig. 8d",
        measures: "the idle VM's lowest allocation while it idles over its min (the paper: SQL Server drops to its min of 160 MB)",
        paper: Paper::Below(1.05),
        source: "§6.3",
        ours: Ours::Cell(at(
            "reallocation",
            "Against the paper",
            &[REALLOCATION_IDLE_LOW],
            "ours",
        )),
        why: "",
    },
];

pub const SHARING: &[Claim] = &[
    Claim {
        figure: "Fig. 4",
        measures: "memory shared, % of all guest memory present, with the most VMs run",
        paper: Paper::Value(67.0),
        source: "§4.3",
        ours: Ours::Cell(at(
            "sharing",
            "Memory shared and reclaimed at steady state",
            &["*", "memvisor-host"],
            "shared",
        )),
        why: "",
    },
    Claim {
        figure: "Fig. 4",
        measures:
            "memory reclaimed by sharing, % of all guest memory present, with the most VMs run",
        paper: Paper::Value(60.0),
        source: "§4.3",
        ours: Ours::Cell(at(
            "sharing",
            "Memory shared and reclaimed at steady state",
            &["*", "memvisor-host"],
            "reclaimed",
        )),
        why: "",
    },
];

/// A cell of `idletax`'s results, at idle tax `tax`.
const fn taxed(tax: &'static [&'static str], column: &'static str) -> Cell {
    at("idletax", "Results", tax, column)
}

pub const IDLETAX: &[Claim] = &[
    Claim {
        figure: "Fig. 7",
        measures: "the busy VM's memory at an idle tax of 75 % over at 0",
        paper: Paper::Above(1.0),
        source: "§5.4",
        ours: Ours::Ratio(
            taxed(&["0.75"], "busy MiB (target)"),
            taxed(&["0"], "busy MiB (target)"),
        ),
        why: "",
    },
    Claim {
        figure: "Fig. 7",
        measures: "the busy VM's throughput at an idle tax of 75 % over at 0",
        paper: Paper::Above(1.3),
        source: "§5.4",
        ours: Ours::Ratio(taxed(&["0.75"], "busy ops/s"), taxed(&["0"], "busy ops/s")),
        why: "",
    },
];

pub const DWELL: &[Claim] = &[Claim {
    figure: "Fig. 14",
    measures: "the median dwell of released pages that came back, HD2's sequential order over LRU (the host's clock)",
    paper: Paper::Above(1.0),
    source: "§6.4",
    ours: Ours::Ratio(
        at("dwell", "Per policy", &["hd2"], "median dwell of those back (bucket middle)"),
        at("dwell", "Per policy", &["clock"], "median dwell of those back (bucket middle)"),
    ),
    why: "",
}];

/// A cell of `recovery`'s table.
const fn recovered(config: &'static [&'static str]) -> Cell {
    at("recovery", "Recovery", config, "recovery s (median)")
}

pub const RECOVERY: &[Claim] = &[
    Claim {
        figure: "Fig. 5(c)",
        measures: "seconds from the memory given back to full throughput, with the pool and proactive swap-in (MemFlex)",
        paper: Paper::Value(5.0),
        source: "§4.1",
        ours: Ours::Cell(recovered(&["memvisor-pool-proactive"])),
        why: "",
    },
    Claim {
        figure: "Fig. 5(c)",
        measures: "the same, by faults from the swap file over with the pool and proactive swap-in (the paper: a ramdisk, more than 80 s, and an HDD, longer, against MemFlex's 5 s)",
        paper: Paper::Above(80.0 / 5.0),
        source: "§4.1",
        ours: Ours::Ratio(recovered(&["memvisor-pager"]), recovered(&["memvisor-pool-proactive"])),
        why: "the swap file here is on a virtual disk that reads 4 KiB at random in about 100 µs, not an HDD",
    },
    Claim {
        figure: "Fig. 5(c)",
        measures: "the same, the guest swapping to a ramdisk (its swap disk in host memory) while ballooned, over with the pool and proactive swap-in (the paper: more than 80 s against 5 s)",
        paper: Paper::Above(80.0 / 5.0),
        source: "§4.1",
        ours: Ours::Ratio(recovered(&["memvisor-balloon-ramdisk"]), recovered(&["memvisor-pool-proactive"])),
        why: "the guest kit swaps in from its ramdisk through its own polling virtio driver, which the VMM serves from host memory: no guest or host kernel block layer on the way, where the paper's ramdisk has both",
    },
];

pub const CONSOLIDATE: &[Claim] = &[Claim {
    figure: "Fig. 14",
    measures: "mean job time of map-reduce guests, ballooning over balloon + VSwapper, with the most VMs run (the paper: 1.84 at 10 guests, 0.96 with no memory pressure)",
    paper: Paper::Value(1.84),
    source: "§5.2",
    ours: Ours::Ratio(
        at("consolidate", "scenario `mapreduce`", &["*"], "balloon"),
        at("consolidate", "scenario `mapreduce`", &["*"], "vswapper-balloon"),
    ),
    why: "",
}];

pub const BALANCE: &[Claim] = &[Claim {
    figure: "Table 4",
    measures: "mean job time with HD2's balancing (SEQ order) over ballooning (the paper: 0.49–0.93 for its memory-intensive benchmarks, 0.96–1.00 for the CPU-bound)",
    paper: Paper::Below(1.0),
    source: "§6.5",
    ours: Ours::Ratio(
        at("balance", "scenario `balance`", &["*"], "hd2"),
        at("balance", "scenario `balance`", &["*"], "vswapper-balloon"),
    ),
    why: "",
}];
