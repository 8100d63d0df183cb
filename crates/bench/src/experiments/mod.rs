//! The experiments `memvisor bench` runs, as data, one file each: which guest kit workloads, on
//! what memory, disk and limit, under which configurations, and which configuration the others
//! are compared with (`seqread`, `alloc`, `overhead`, `workingset`, `recovery`, `doublepaging`,
//! found by [`find`]); the host experiments on `memvisor host` (`host`, with `shares` and
//! `idletax`); many VMs (`consolidate`); bringing swapped memory back (`swapin`); taking pages
//! from victim VMs (`reclaimdelay`); balancing page cache between VMs (`balance`, a scenario of
//! `consolidate`); page sharing through KSM (`sharing`, `zeroboot`).

mod alloc;
mod doublepaging;
mod overhead;
mod recovery;
mod seqread;
mod workingset;

use std::time::Duration;

pub use crate::args::Scale;

pub use recovery::CONFIGS as RECOVERY;

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
    /// Guest RAM the host may keep resident, for configurations with a limit.
    pub limit: Option<u64>,
    pub steps: Vec<Step>,
    /// Configurations run when `--configs` is not given.
    pub configs: &'static [&'static str],
    /// The configuration every ratio is taken against.
    pub reference: &'static str,
    /// What is measured, and so how runs are driven and reported.
    pub kind: Kind,
}

/// The kinds of experiment `memvisor bench` runs on memvisor and QEMU (the host experiments,
/// `consolidate` and `swapin` have their own runs).
#[derive(Clone, Debug)]
pub enum Kind {
    /// The time of each of the guest's `RESULT` phases, with the host's counters per phase,
    /// compared against a reference configuration.
    Phases,
    /// Measured over time through the VM's API instead of per phase (`workingset`).
    Series(Series),
    /// Memory taken away by a hog inside the guest and given back by the harness (`recovery`).
    Release(Release),
}

impl Kind {
    /// The time series polled from the VM's API, for [`Kind::Series`].
    pub fn series(&self) -> Option<&Series> {
        match self {
            Kind::Series(s) => Some(s),
            _ => None,
        }
    }

    /// When and how memory is given back, for [`Kind::Release`].
    pub fn release(&self) -> Option<&Release> {
        match self {
            Kind::Release(r) => Some(r),
            _ => None,
        }
    }
}

/// An experiment whose result is the guest's throughput second by second (`kv`'s `t=Ns
/// ops_s=N` lines) while a hog inside the guest pushes it past its limit and the harness then
/// gives the VM its memory back (MemFlex §4.1, Fig. 5).
#[derive(Clone, Debug)]
pub struct Release {
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
        vec![
            "--sample-pages".into(),
            self.sample_pages.to_string(),
            "--sample-period".into(),
            format!("{}", self.sample_period.as_secs_f64()),
        ]
    }
}

impl Experiment {
    /// Repetitions when `--reps` is not given: one for a time series (a run takes minutes and
    /// is one curve), three otherwise (medians need more than one).
    pub fn default_reps(&self) -> u32 {
        match self.kind {
            Kind::Series(_) => 1,
            Kind::Release(_) => 2,
            Kind::Phases => 3,
        }
    }
}

/// Names of the experiments, for error messages.
pub const NAMES: &[&str] = &[
    "seqread",
    "alloc",
    "overhead",
    "workingset",
    "recovery",
    "doublepaging",
];

const LIMITED: &[&str] = &[
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

/// `n` MiB in bytes.
fn mib(n: u64) -> u64 {
    n << 20
}

fn phases(prefix: &str, n: u64) -> Vec<String> {
    (1..=n).map(|i| format!("{prefix}{i}")).collect()
}

/// The experiment called `name` at `scale`.
pub fn find(name: &str, scale: Scale) -> Option<Experiment> {
    Some(match name {
        "seqread" => seqread::experiment(scale),
        "alloc" => alloc::experiment(scale),
        "overhead" => overhead::experiment(scale),
        "workingset" => workingset::experiment(scale),
        "recovery" => recovery::experiment(scale),
        "doublepaging" => doublepaging::experiment(scale),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_experiment_names_known_configurations() {
        for name in NAMES {
            for scale in [Scale::Full, Scale::Tiny] {
                let e = find(name, scale).unwrap();
                assert!(e.configs.contains(&e.reference));
                for c in e.configs {
                    assert!(crate::configs::find(c).is_some(), "{c}");
                }
                assert!(e.steps.iter().all(|s| !s.phases.is_empty()));
            }
        }
        assert!(find("nope", Scale::Full).is_none());
        let s = find("seqread", Scale::Full).unwrap();
        assert_eq!((s.mem, s.limit), (512 << 20, Some(100 << 20)));
        assert_eq!(s.steps[0].phases.len(), 8);
        let o = find("overhead", Scale::Full).unwrap();
        let w: Vec<_> = o.steps.iter().map(|s| s.workload).collect();
        assert_eq!(w, ["compile", "kv", "gcchurn", "mapreduce"]);
        assert_eq!(o.limit, Some(o.mem));
        // Each hypervisor with and without a balloon device, standalone and on the pager.
        for c in o.configs {
            let c = crate::configs::find(c).unwrap();
            let twin = c.without_balloon().map(|t| t.name);
            assert!(!c.balloon, "{}: never inflated", c.name);
            assert!(
                !c.balloon_device() || twin.is_some_and(|t| o.configs.contains(&t)),
                "{}",
                c.name
            );
        }
        for c in ["qemu-fpr", "memvisor-nolimit-fpr", "memvisor-fpr"] {
            assert!(o.configs.contains(&c), "{c}");
        }
        // mapreduce reads the file mkdisk wrote, and the disk has room for it.
        let m = &o.steps[3];
        let d = m.disk.as_ref().unwrap();
        assert!(m.cmdline.contains("input=src input_mb=128") && d.files == "src:128M");
        assert!(!d.writable && d.size_mb > 128);
        // VSwapper's experiments also run the cooperative path (free page reporting).
        for name in ["seqread", "alloc"] {
            let e = find(name, Scale::Full).unwrap();
            assert!(e.configs.contains(&"memvisor-fpr"), "{name}");
            assert!(e.configs.contains(&"memvisor-vswapper-fpr"), "{name}");
        }
        // Tesseract's runs the pager without and with its indirections, on a guest that swaps
        // to its own disk.
        let d = find("doublepaging", Scale::Full).unwrap();
        assert!(d.configs.contains(&"memvisor-pager") && d.configs.contains(&"memvisor-tesseract"));
        assert!(d.steps[0].guest_swap_mb.is_some() && d.steps[0].cmdline.contains("hog_mb="));
    }

    /// `workingset` (ESX Fig. 6): the toucher's schedule goes up and down, every step lasts
    /// several sampling periods, the pager holds guest RAM without pressure, and the guest is
    /// told the same schedule the report measures against.
    #[test]
    fn workingset_steps_last_several_sampling_periods() {
        for scale in [Scale::Full, Scale::Tiny] {
            let e = find("workingset", scale).unwrap();
            let s = e.kind.series().expect("a time series");
            assert_eq!(e.limit, Some(e.mem), "{scale:?}");
            assert_eq!(e.configs, &["memvisor-pager"][..]);
            assert_eq!(e.default_reps(), 1);
            let step = &e.steps[0];
            assert_eq!((e.steps.len(), step.workload), (1, "toucher"));
            let spec: Vec<String> = s.schedule.iter().map(|(m, t)| format!("{m}:{t}")).collect();
            assert_eq!(step.cmdline, format!("schedule={}", spec.join(",")));
            assert_eq!(step.phases, phases("step", s.schedule.len() as u64));
            let sizes: Vec<u64> = s.schedule.iter().map(|x| x.0).collect();
            assert!(sizes.windows(2).any(|w| w[1] > w[0]), "a step up");
            assert!(sizes.windows(2).any(|w| w[1] < w[0]), "a step down");
            for &(mb, secs) in &s.schedule {
                assert!(
                    Duration::from_secs(secs) >= s.sample_period * 8,
                    "{scale:?}"
                );
                assert!(
                    mb << 20 <= e.mem / 2,
                    "{scale:?}: {mb} MiB leaves the guest room"
                );
            }
            assert!(s.every <= s.sample_period * 4);
        }
        let full = find("workingset", Scale::Full).unwrap();
        assert_eq!(
            full.kind.series().unwrap().run_flags(),
            ["--sample-pages", "400", "--sample-period", "2"]
        );
        assert_eq!(find("seqread", Scale::Full).unwrap().default_reps(), 3);
    }
}
