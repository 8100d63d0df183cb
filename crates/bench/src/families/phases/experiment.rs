//! What an experiment of phases is, as data: which guest kit workloads, on what memory, disk
//! and limit, under which configurations, which configuration the others are compared with,
//! and what is measured ([`Measure`]: the phases, the phases against the limit, a time series,
//! or a release). The experiments themselves are `seqread`, `alloc`, `overhead`, `doublepaging`,
//! `compress`, `compile`, `gcchurn`, `patterns`, `ballooned`, `tracked`, `workingset` and
//! `recovery`.

use std::time::Duration;

/// A data disk made with `memvisor mkdisk data`.
#[derive(Clone, Debug)]
pub struct DataDisk {
    /// Disk size in MiB.
    pub size_mb: u64,
    /// `--files` of mkdisk, e.g. `seq:200M`.
    pub files: String,
    /// The guest writes to it: each run gets a fresh copy; otherwise one image read-only for all.
    pub writable: bool,
}

/// One boot of the guest per configuration and repetition.
#[derive(Clone, Debug)]
pub struct Step {
    pub workload: &'static str,
    pub cmdline: String,
    /// The guest's `RESULT` phases this step reports, in order.
    pub phases: Vec<String>,
    pub disk: Option<DataDisk>,
    /// A fresh swap disk for the guest kit per run (MiB; `id=swap`), where the guest swaps as
    /// Linux would to its own disk.
    pub guest_swap_mb: Option<u64>,
}

/// An experiment of `memvisor bench`.
#[derive(Clone, Debug)]
pub struct Experiment {
    pub name: &'static str,
    /// What it reproduces, for the report.
    pub about: &'static str,
    /// Guest RAM in bytes.
    pub mem: u64,
    /// Guest RAM the host may keep resident, for configurations with a limit (a sweep sets it
    /// at each of its points).
    pub limit: Option<u64>,
    pub steps: Vec<Step>,
    /// Configurations run when `--configs` is not given.
    pub configs: &'static [&'static str],
    /// The configuration every ratio is taken against.
    pub reference: &'static str,
    /// What is measured, and so how runs are driven and reported.
    pub measure: Measure,
}

/// The kinds of experiment `memvisor bench` runs on memvisor and QEMU (the host experiments,
/// `consolidate` and `swapin` have their own runs).
#[derive(Clone, Debug)]
pub enum Measure {
    /// The time of each of the guest's `RESULT` phases, with the host's counters per phase,
    /// compared against a reference configuration.
    Phases,
    /// The phases at each of several limits, every configuration at each (VSwapper §5.1's
    /// figures: a job's time against the memory the guest is given).
    Sweep(Sweep),
    /// Measured over time through the VM's API instead of per phase (`workingset`).
    Series(Series),
    /// Memory taken away by a hog inside the guest and given back by the harness (`recovery`).
    GiveBack(GiveBack),
    /// The phases, with memvisor's `GET /stats` polled from boot to the end (`tracked`: what the
    /// Swap Mapper tracks beside the guest's page cache over time).
    Tracked(Tracked),
}

impl Measure {
    /// A sweep that also counts the host disk's requests ([`Sweep::disk_ops`]); any other
    /// measure as it is.
    #[must_use]
    pub fn counting_disk_ops(self) -> Measure {
        match self {
            Measure::Sweep(s) => Measure::Sweep(Sweep {
                disk_ops: true,
                ..s
            }),
            other => other,
        }
    }

    /// The time series polled from the VM's API, for [`Measure::Series`].
    pub fn series(&self) -> Option<&Series> {
        match self {
            Measure::Series(s) => Some(s),
            _ => None,
        }
    }

    /// How often memvisor's `GET /stats` is kept in a run's `stats`, and whether from boot (else
    /// from the clock of [`Measure::GiveBack`]).
    pub fn polls_stats(&self) -> Option<(Duration, bool)> {
        match self {
            Measure::GiveBack(g) => Some((g.every, false)),
            Measure::Tracked(t) => Some((t.every, true)),
            _ => None,
        }
    }

    /// When and how memory is given back, for [`Measure::GiveBack`].
    pub fn give_back(&self) -> Option<&GiveBack> {
        match self {
            Measure::GiveBack(g) => Some(g),
            _ => None,
        }
    }
}

/// What a sweep varies, the points it runs at and the phases it plots against them.
#[derive(Clone, Debug)]
pub struct Sweep {
    pub along: Along,
    /// The values of `along` in the order run: bytes for the limit, the argument's own value
    /// for a workload argument.
    pub points: Vec<u64>,
    /// The guest phase whose time is the sweep's result (the job, not its checks).
    pub phase: &'static str,
    /// Other phases the report tables and plots beside it.
    pub also: &'static [&'static str],
    /// The report also counts the host disk's requests in `phase` at each point, and the writes
    /// among them (VSwapper Fig. 11a–b).
    pub disk_ops: bool,
}

/// What a [`Sweep`] varies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Along {
    /// Guest RAM the host may keep resident.
    Limit,
    /// An argument of the first step's workload (`KEY=N` on its command line), in MiB; the
    /// limit stays the experiment's.
    Arg(&'static str),
}

impl Sweep {
    /// A sweep of `phase` over `limits` given in MiB, as a measure.
    pub fn in_mib(limits: &[u64], phase: &'static str) -> Measure {
        Measure::Sweep(Sweep {
            along: Along::Limit,
            points: limits.iter().map(|l| l << 20).collect(),
            phase,
            also: &[],
            disk_ops: false,
        })
    }

    /// A sweep of `phase` (and `also`) over the workload argument `key` set to each of `values`
    /// MiB, as a measure.
    pub fn of_arg(
        key: &'static str,
        values: &[u64],
        phase: &'static str,
        also: &'static [&'static str],
    ) -> Measure {
        Measure::Sweep(Sweep {
            along: Along::Arg(key),
            points: values.to_vec(),
            phase,
            also,
            disk_ops: false,
        })
    }

    /// A point's value on the sweep's axis, in MiB.
    pub fn x(&self, at: u64) -> u64 {
        match self.along {
            Along::Limit => at >> 20,
            Along::Arg(_) => at,
        }
    }

    /// The directory of the runs at `at`, under the sweep's.
    pub fn dir(&self, at: u64) -> String {
        match self.along {
            Along::Limit => format!("limit-{}m", at >> 20),
            Along::Arg(key) => format!("{key}-{at}"),
        }
    }

    /// The axis as a column heading: `limit MiB`, or the argument.
    pub fn label(&self) -> String {
        match self.along {
            Along::Limit => "limit MiB".into(),
            Along::Arg(key) => format!("{key} MiB"),
        }
    }

    /// The axis as a CSV column: `limit_mib`, or the argument.
    pub fn column(&self) -> &'static str {
        match self.along {
            Along::Limit => "limit_mib",
            Along::Arg(key) => key,
        }
    }

    /// `exp` at the point `at`: its limit, or its first step with the argument set.
    pub fn at(&self, exp: &Experiment, at: u64) -> Experiment {
        let mut exp = Experiment {
            measure: Measure::Phases,
            ..exp.clone()
        };
        match self.along {
            Along::Limit => exp.limit = Some(at),
            Along::Arg(key) => {
                let step = &mut exp.steps[0];
                let prefix = format!("{key}=");
                let set = format!("{prefix}{at}");
                let words = step.cmdline.split(' ').filter(|w| !w.starts_with(&prefix));
                step.cmdline = words.chain([set.as_str()]).collect::<Vec<_>>().join(" ");
            }
        }
        exp
    }

    /// Every phase the sweep reports: its result's, then the others.
    pub fn phases(&self) -> impl Iterator<Item = &'static str> + '_ {
        std::iter::once(self.phase).chain(self.also.iter().copied())
    }
}

/// An experiment whose result is the guest's throughput second by second (`kv`'s `t=Ns
/// ops_s=N` lines) while a hog inside the guest pushes it past its limit and the harness then
/// gives the VM its memory back (MemFlex §4.1, Fig. 5).
#[derive(Clone, Debug)]
pub struct GiveBack {
    /// The guest phase whose `RESULT` line starts the clock: the run phase starts right after it.
    pub after_phase: &'static str,
    /// When the harness gives the memory back, on that clock.
    pub at: Duration,
    /// When the hog starts (the guest's `hog_at`), on the same clock.
    pub hog_at: Duration,
    /// How often the harness asks memvisor's API for `GET /stats` (the pager's census and the
    /// pool's counters over time).
    pub every: Duration,
}

/// How often [`Measure::Tracked`] asks for `GET /stats`.
#[derive(Clone, Debug)]
pub struct Tracked {
    pub every: Duration,
}

/// An experiment whose result is a time series of the VM's `GET /stats`: one VM runs the
/// `toucher` workload along a schedule while the harness polls its API socket.
#[derive(Clone, Debug)]
pub struct Series {
    /// How often the harness asks for `GET /stats`.
    pub every: Duration,
    /// The toucher's schedule: working-set MiB and seconds, step by step.
    pub schedule: Vec<(u64, u64)>,
    /// Pages sampled per period (`--sample-pages`).
    pub sample_pages: u32,
    /// The sampling period (`--sample-period`).
    pub sample_period: Duration,
}

impl Series {
    /// The `memvisor run` flags that set the sampling.
    pub fn run_flags(&self) -> Vec<String> {
        let (pages, period) = (self.sample_pages, self.sample_period.as_secs_f64());
        let flags = format!("--sample-pages {pages} --sample-period {period}");
        flags.split(' ').map(str::to_owned).collect()
    }
}

impl Experiment {
    /// Repetitions when `--reps` is not given: one for a time series (a run takes minutes and
    /// is one curve), three otherwise (medians need more than one).
    pub fn default_reps(&self) -> u32 {
        match self.measure {
            Measure::Series(_) | Measure::Tracked(_) => 1,
            Measure::GiveBack(_) => 2,
            Measure::Phases | Measure::Sweep(_) => 3,
        }
    }
}

/// VSwapper §5.1's series for Figs. 12 and 13: ballooning (memvisor's and QEMU's), the baseline
/// (the host swapping on its own), the Swap Mapper alone and VSwapper with the Preventer
/// stopping the vCPU on every write to a reclaimed page, as the paper's does (so its count of
/// false reads removed is the paper's).
pub const PREVENTING_ALWAYS: &[&str] = &[
    "qemu-balloon",
    "memvisor-balloon",
    "memvisor-baseline",
    "memvisor-mapper",
    "memvisor-vswapper-always",
];

pub const LIMITED: &[&str] = &[
    "qemu",
    "qemu-hostswap",
    "qemu-balloon",
    "memvisor",
    "memvisor-hostswap",
    "memvisor-baseline",
    "memvisor-pager",
    "memvisor-balloon",
    "memvisor-mapper",
    "memvisor-vswapper",
    "memvisor-vswapper-always",
    "memvisor-fpr",
    "memvisor-vswapper-fpr",
    "memvisor-vswapper-balloon",
];

pub fn phases(prefix: &str, n: u64) -> Vec<String> {
    (1..=n).map(|i| format!("{prefix}{i}")).collect()
}
