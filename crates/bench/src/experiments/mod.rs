//! The experiments `memvisor bench` runs: which guest kit workloads, on what memory, disk and
//! limit, under which configurations, and which configuration the others are compared with.

use std::time::Duration;

/// Full size (the papers' numbers) or tiny (the end-to-end test).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scale {
    Full,
    Tiny,
}

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
    /// Measured over time through the VM's API instead of per phase (`workingset`).
    pub series: Option<Series>,
    /// Memory taken away by a hog inside the guest and given back by the harness (`recovery`).
    pub release: Option<Release>,
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
        if self.series.is_some() {
            1
        } else if self.release.is_some() {
            2
        } else {
            3
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

/// `doublepaging`'s configurations: the host kernel's swap under QEMU, the pager without and
/// with Tesseract's indirections.
pub const DOUBLEPAGING: &[&str] = &[
    "qemu-hostswap",
    "memvisor-pager",
    "memvisor-tesseract",
    "memvisor-tesseract-flush",
    "memvisor-tesseract-defrag",
    "memvisor-tesseract-bsst",
    "memvisor-tesseract-victim",
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
    "memvisor-fpr",
    "memvisor-vswapper-fpr",
    "memvisor-vswapper-balloon",
];

/// `recovery`'s configurations: the pager with fault-driven swap-in from its swap file, the
/// pool with fault-driven and proactive swap-in, and QEMU with host swap or its balloon.
/// A pool variant is one more name here (and one entry of `CONFIGS`).
pub const RECOVERY: &[&str] = &[
    "memvisor-pager",
    "memvisor-pool",
    "memvisor-pool-proactive",
    "memvisor-pool-lz4",
    "qemu-hostswap",
    "qemu-balloon",
];

fn phases(prefix: &str, n: u64) -> Vec<String> {
    (1..=n).map(|i| format!("{prefix}{i}")).collect()
}

/// The experiment called `name` at `scale`.
pub fn find(name: &str, scale: Scale) -> Option<Experiment> {
    let tiny = scale == Scale::Tiny;
    let mib = |n: u64| n << 20;
    Some(match name {
        // VSwapper §3.1, Fig. 9: the guest believes it has 512 MB, has 100 MB, and reads a
        // 200 MB file sequentially 8 times.
        "seqread" => {
            let (mem, limit, file, passes) = if tiny {
                (128, 32, 96, 2)
            } else {
                (512, 100, 200, 8)
            };
            Experiment {
                name: "seqread",
                about: "VSwapper §3.1 / Fig. 9: sequential reads of a file larger than the memory the host gives the guest",
                mem: mib(mem),
                limit: Some(mib(limit)),
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
                series: None,
                release: None,
            }
        }
        // VSwapper Fig. 10: a fresh process allocates and touches 200 MB. The guest kit boots
        // one workload, so round 1 leaves the guest's free pages used (and swapped out by the
        // host) and rounds 2 and 3 allocate over them, as the paper's process does after the
        // Sysbench run.
        "alloc" => {
            let (mem, limit, mb, rounds) = if tiny {
                (128, 32, 96, 2)
            } else {
                (512, 100, 200, 3)
            };
            Experiment {
                name: "alloc",
                about: "VSwapper Fig. 10: a process allocating and touching memory the guest used before (false swap reads)",
                mem: mib(mem),
                limit: Some(mib(limit)),
                steps: vec![Step {
                    workload: "alloc",
                    cmdline: format!("mb={mb} rounds={rounds}"),
                    phases: phases("round", rounds),
                    guest_swap_mb: None,
                    disk: None,
                }],
                configs: LIMITED,
                reference: "qemu",
                series: None,
                release: None,
            }
        }
        // No limits: what running on memvisor costs against QEMU.
        "overhead" => {
            // (jobs, source MiB, disk MiB, kv records, kv operations): the object file grows
            // with the jobs, so the disk does too.
            let (jobs, src, disk_mb, records, ops) = if tiny {
                (20, 4, 48, 5000, 20_000)
            } else {
                (1000, 16, 256, 200_000, 2_000_000)
            };
            // (gcchurn heap MiB, generation MiB, generations; mapreduce input MiB, vocabulary):
            // a few seconds each. The vocabulary makes each mapper's table 16 MiB, so the map
            // phase's random accesses span far more memory than the TLB covers.
            let (heap, gen, gens, input, vocab) = if tiny {
                (32, 4, 10, 4, 50_000)
            } else {
                (256, 32, 500, 128, 500_000)
            };
            Experiment {
                name: "overhead",
                about: "no limit: memvisor against QEMU on a kernbench-like build, a YCSB-like key-value store, a generational collector's churn and a word count",
                mem: mib(512),
                limit: None,
                steps: vec![
                    Step {
                        workload: "compile",
                        cmdline: format!("jobs={jobs} src=src src_mb={src}"),
                        phases: vec!["build".into()],
                        guest_swap_mb: None,
                        disk: Some(DataDisk {
                            size_mb: disk_mb,
                            files: format!("src:{src}M"),
                            writable: true,
                        }),
                    },
                    Step {
                        workload: "kv",
                        cmdline: format!("records={records} ops={ops}"),
                        phases: vec!["load".into(), "run".into()],
                        guest_swap_mb: None,
                        disk: None,
                    },
                    Step {
                        workload: "gcchurn",
                        cmdline: format!("heap_mb={heap} gen_mb={gen} gens={gens} live_pct=10"),
                        // gcchurn reports one phase, its whole run.
                        phases: vec!["done".into()],
                        guest_swap_mb: None,
                        disk: None,
                    },
                    Step {
                        workload: "mapreduce",
                        cmdline: format!("input=src input_mb={input} vocab={vocab} mappers=4"),
                        phases: vec!["map".into(), "reduce".into()],
                        guest_swap_mb: None,
                        // Only read: one image for all runs.
                        disk: Some(DataDisk {
                            size_mb: input + 16,
                            files: format!("src:{input}M"),
                            writable: false,
                        }),
                    },
                ],
                configs: &["qemu", "memvisor"],
                reference: "qemu",
                series: None,
                release: None,
            }
        }
        // ESX §5.3, Fig. 6: the working-set estimate from sampled pages against a working set
        // that grows and shrinks. The limit is the guest's size: the pager holds guest RAM
        // (sampling needs it to) and never reclaims, so nothing but the sampling moves pages.
        // The steps: first a step up onto memory the guest never touched, then down, then up
        // again onto memory already resident, then down again after a shorter busy spell.
        "workingset" => {
            let (mem, schedule, every, pages, period) = if tiny {
                (
                    128,
                    vec![(8, 2), (48, 3), (16, 3)],
                    Duration::from_millis(250),
                    200,
                    Duration::from_millis(250),
                )
            } else {
                (
                    1024,
                    vec![(64, 30), (512, 60), (128, 80), (512, 30), (64, 60)],
                    Duration::from_secs(1),
                    400,
                    Duration::from_secs(2),
                )
            };
            let spec: Vec<String> = schedule.iter().map(|(m, s)| format!("{m}:{s}")).collect();
            Experiment {
                name: "workingset",
                about: "ESX §5.3 / Fig. 6: the working-set estimate from sampled pages while the guest's working set grows and shrinks",
                mem: mib(mem),
                limit: Some(mib(mem)),
                steps: vec![Step {
                    workload: "toucher",
                    cmdline: format!("schedule={}", spec.join(",")),
                    phases: phases("step", schedule.len() as u64),
                    guest_swap_mb: None,
                    disk: None,
                }],
                configs: &["memvisor-pager"],
                reference: "memvisor-pager",
                series: Some(Series {
                    every,
                    schedule,
                    sample_pages: pages,
                    sample_period: period,
                }),
                release: None,
            }
        }
        // MemFlex §4.1, Fig. 5: a key-value store under a read-only YCSB load (the paper's
        // Fig. 5(c)), a memory hog starting in the same VM 10 s into the run, the memory given
        // back 20 s later. The store fits under the limit alone, not with the hog; given back,
        // the limit is the guest's size, so everything fits.
        "recovery" => {
            // (guest MiB, limit MiB, kv records, hog MiB, hog MiB/s, hog at s, release at s,
            // run s): the store's table is records / 512 MiB (1 KiB records, half-full slots).
            let (mem, limit, records, hog, rate, hog_at, at, secs) = if tiny {
                (128, 64, 20_000, 40, 40, 2, 4, 8)
            } else {
                (1024, 512, 180_000, 400, 100, 10, 30, 70)
            };
            Experiment {
                name: "recovery",
                about: "MemFlex §4.1 / Fig. 5: a key-value store's throughput while a memory hog in the same VM pushes it past its limit, and how fast it recovers once the memory is given back",
                mem: mib(mem),
                limit: Some(mib(limit)),
                steps: vec![Step {
                    workload: "kv",
                    cmdline: format!(
                        "records={records} mix=c secs={secs} hog_mb={hog} hog_at={hog_at} hog_rate_mb_s={rate}"
                    ),
                    phases: vec!["load".into(), "run".into()],
                    // Only a guest whose balloon is inflated uses it.
                    guest_swap_mb: Some(mem),
                    disk: None,
                }],
                configs: RECOVERY,
                reference: "memvisor-pager",
                series: None,
                release: Some(Release {
                    after_phase: "load",
                    at: Duration::from_secs(at),
                    hog_at: Duration::from_secs(hog_at),
                    every: Duration::from_secs(1),
                }),
            }
        }
        // Tesseract §6.1: a hog fills memory and goes cold while the old space is swept hot, so
        // the host swaps the hog out; then a generational collector's churn (SPECjbb's part)
        // pushes the guest to swap its coldest pages, the hog's, to its own swap disk: each such
        // write needs pages the host swapped (double paging). Pauses are the collections'.
        "doublepaging" => {
            // 12.5 % host overcommitment (the paper's 5–20 %); the heap and the hog together
            // are larger than the guest, so the guest swaps part of the hog.
            let (mem, limit, heap, young, gens, hog, hog_secs) = if tiny {
                (128, 112, 88, 16, 20, 56, 2)
            } else {
                (256, 224, 176, 32, 100, 112, 5)
            };
            Experiment {
                name: "doublepaging",
                about: "Tesseract §6 / Figs. 10–12, Tables 1 and 4: a guest swapping to its own disk the pages its host has already swapped (double paging)",
                mem: mib(mem),
                limit: Some(mib(limit)),
                steps: vec![Step {
                    workload: "gcchurn",
                    cmdline: format!(
                        "heap_mb={heap} gen_mb={young} gens={gens} live_pct=10 hog_mb={hog} hog_secs={hog_secs}"
                    ),
                    phases: vec![
                        "hog".into(),
                        "run".into(),
                        "pause_max".into(),
                        "pause_total".into(),
                    ],
                    guest_swap_mb: Some(heap + hog + 64),
                    disk: None,
                }],
                configs: DOUBLEPAGING,
                reference: "qemu-hostswap",
                series: None,
                release: None,
            }
        }
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
        assert_eq!((o.limit, o.configs), (None, &["qemu", "memvisor"][..]));
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
            let s = e.series.as_ref().expect("a time series");
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
            full.series.unwrap().run_flags(),
            ["--sample-pages", "400", "--sample-period", "2"]
        );
        assert_eq!(find("seqread", Scale::Full).unwrap().default_reps(), 3);
    }
}
