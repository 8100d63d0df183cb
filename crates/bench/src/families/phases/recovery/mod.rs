//! `memvisor bench recovery`: MemFlex §4.1, Fig. 5(c): a key-value store under a read-only YCSB load
//! (the paper's Fig. 5(c)), a memory hog starting in the same VM 10 s into the run, the memory
//! given back 20 s later. The store fits under the limit alone, not with the hog; given back, the
//! limit is the guest's size, so everything fits. `recovery-insert`, `recovery-update` and
//! `recovery-scan` run the same under the paper's other YCSB workloads ([`MIXES`]).

pub mod report;
pub mod trace;

use std::fmt::Write as _;
use std::time::Duration;

use crate::args::Scale;
use crate::families::phases::experiment::{Experiment, GiveBack, Measure, Step};

/// `recovery`'s configurations: the pager with fault-driven swap-in from its swap file, the
/// pool with fault-driven and proactive swap-in, the guest swapping to its own disk or to a
/// ramdisk while ballooned (the paper's HDD and Ramdisk cases), and QEMU with host swap or its
/// balloon. A pool variant is one more name here (and one entry of `CONFIGS`).
pub const CONFIGS: &[&str] = &[
    "memvisor-pager",
    "memvisor-pool",
    "memvisor-pool-proactive",
    "memvisor-pool-lz4",
    "memvisor-balloon",
    "memvisor-balloon-ramdisk",
    "qemu-hostswap",
    "qemu-balloon",
];

/// The other mixes' configurations: the paper's HDD (fault-driven swap-in from the swap file)
/// and MemFlex (the pool, proactive swap-in) on memvisor, and QEMU's balloon.
const MIX_CONFIGS: &[&str] = &["memvisor-pager", "memvisor-pool-proactive", "qemu-balloon"];

/// A YCSB workload the store runs through the hog and back (MemFlex §4.1 runs Insert, Read,
/// Update and Scan): one experiment each.
pub struct Mix {
    pub experiment: &'static str,
    /// kv's `mix=`.
    pub mix: &'static str,
    /// The operation it times (its per-second `OP_p99_us=`).
    pub op: &'static str,
    /// What it does, for the report.
    pub what: &'static str,
    pub about: &'static str,
    pub configs: &'static [&'static str],
}

/// Every mix, Read (the paper's Fig. 5(c)) first.
pub const MIXES: [Mix; 4] = [
    Mix {
        experiment: "recovery",
        mix: "c",
        op: "read",
        what: "YCSB Read: 100 % reads of zipfian keys",
        about: "MemFlex §4.1 / Fig. 5(c): a key-value store's throughput (and each second's read p99 latency) while a memory hog in the same VM pushes it past its limit, and how fast it recovers once the memory is given back",
        configs: CONFIGS,
    },
    Mix {
        experiment: "recovery-insert",
        mix: "insert",
        op: "insert",
        what: "YCSB Insert: 100 % inserts of new keys, paced at a rate the table is sized for (YCSB's `-target`), every inserted record read back at the end",
        about: "MemFlex §4.1 / Fig. 5 and 6 under YCSB Insert: a key-value store's throughput and each second's insert p99 latency through a memory hog and back",
        configs: MIX_CONFIGS,
    },
    Mix {
        experiment: "recovery-update",
        mix: "update",
        op: "update",
        what: "YCSB Update: 100 % updates of zipfian keys",
        about: "MemFlex §4.1 / Fig. 5 and 6 under YCSB Update: a key-value store's throughput and each second's update p99 latency through a memory hog and back",
        configs: MIX_CONFIGS,
    },
    Mix {
        experiment: "recovery-scan",
        mix: "scan",
        op: "scan",
        what: "YCSB Scan: 100 % scans of 1 to 100 records from zipfian keys",
        about: "MemFlex §4.1 / Fig. 5 and 6 under YCSB Scan: a key-value store's throughput and each second's scan p99 latency through a memory hog and back",
        configs: MIX_CONFIGS,
    },
];

/// The mix of the recovery experiment called `name`.
pub fn mix_of(name: &str) -> Option<&'static Mix> {
    MIXES.iter().find(|m| m.experiment == name)
}

/// The recovery experiment of `mix` at `scale`.
pub fn experiment(scale: Scale, mix: &Mix) -> Experiment {
    let tiny = scale == Scale::Quick;
    // (guest MiB, limit MiB, kv records, hog MiB, hog MiB/s, hog at s, release at s,
    // run s): the store's table is records / 512 MiB (1 KiB records, half-full slots).
    let (mem, limit, mut records, hog, rate, hog_at, at, secs) = if tiny {
        (128, 64, 20_000, 40, 40, 2, 4, 8)
    } else {
        (1024, 512, 180_000, 400, 100, 10, 30, 70)
    };
    // Inserts grow the table: fewer records loaded, room for the inserts a paced run makes
    // (its rate times its length, and a tenth more).
    let mut more = String::new();
    if mix.mix == "insert" {
        records /= 2;
        let pace = if tiny { 1000 } else { 2000 };
        let _ = write!(
            more,
            " inserts={} target_ops_s={pace}",
            pace * secs * 11 / 10
        );
    }
    Experiment {
        name: mix.experiment,
        about: mix.about,
        mem: mem << 20,
        limit: Some(limit << 20),
        steps: vec![Step {
            workload: "kv",
            cmdline: format!(
                "records={records} mix={} secs={secs} hog_mb={hog} hog_at={hog_at} hog_rate_mb_s={rate}{more}",
                mix.mix
            ),
            phases: vec!["load".into(), "run".into()],
            // Only a guest whose balloon is inflated uses it.
            guest_swap_mb: Some(mem),
            disk: None,
        }],
        configs: mix.configs,
        reference: "memvisor-pager",
        measure: Measure::GiveBack(GiveBack {
            after_phase: "load",
            at: Duration::from_secs(at),
            hog_at: Duration::from_secs(hog_at),
            every: Duration::from_secs(1),
        }),
    }
}
