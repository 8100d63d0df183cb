//! The experiments `memvisor bench` runs: which guest kit workloads, on what memory, disk and
//! limit, under which configurations, and which configuration the others are compared with.

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
}

/// Names of the experiments, for error messages.
pub const NAMES: &[&str] = &["seqread", "alloc", "overhead"];

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
                    disk: Some(DataDisk {
                        size_mb: file + 56,
                        files: format!("seq:{file}M"),
                        writable: false,
                    }),
                }],
                configs: LIMITED,
                reference: "qemu",
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
                    disk: None,
                }],
                configs: LIMITED,
                reference: "qemu",
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
                        disk: None,
                    },
                    Step {
                        workload: "gcchurn",
                        cmdline: format!("heap_mb={heap} gen_mb={gen} gens={gens} live_pct=10"),
                        // gcchurn reports one phase, its whole run.
                        phases: vec!["done".into()],
                        disk: None,
                    },
                    Step {
                        workload: "mapreduce",
                        cmdline: format!("input=src input_mb={input} vocab={vocab} mappers=4"),
                        phases: vec!["map".into(), "reduce".into()],
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
                    assert!(super::super::configs::find(c).is_some(), "{c}");
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
        for name in NAMES {
            let e = find(name, Scale::Full).unwrap();
            if e.limit.is_some() {
                assert!(e.configs.contains(&"memvisor-fpr"), "{name}");
                assert!(e.configs.contains(&"memvisor-vswapper-fpr"), "{name}");
            }
        }
    }
}
