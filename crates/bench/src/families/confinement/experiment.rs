//! `memvisor bench confinement`: its configurations, in confined and unconfined pairs, the
//! sizes of a run and what each run measures. How a run goes is in `run`.

use crate::args::Scale;

/// Repetitions when `--reps` is not given: the fewest the project takes a speed claim from.
pub const DEFAULT_REPS: u32 = 7;

/// The guest workload a configuration runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// `exits`: the round trips of port writes and of first touches (pager faults).
    Exits,
    /// `kv` at `bench overhead`'s sizes: a YCSB-like load and run.
    Kv,
}

/// One configuration: a workload with or without the filters and the jail.
#[derive(Debug, PartialEq, Eq)]
pub struct Config {
    pub name: &'static str,
    pub workload: Workload,
    /// `--seccomp on` (otherwise `off`).
    pub seccomp: bool,
    /// `--jail DIR --uid U --gid G`.
    pub jail: bool,
    /// The configuration it is compared with (its unconfined twin), for the confined ones.
    pub against: Option<&'static str>,
    pub about: &'static str,
}

/// The configurations, in the order of the report.
pub const CONFIGS: [Config; 4] = [
    Config {
        name: "exits-seccomp-on",
        workload: Workload::Exits,
        seccomp: true,
        jail: false,
        against: Some("exits-seccomp-off"),
        about: "`exits` on the pager (`--mem-limit` = guest RAM), `--seccomp on`: every vCPU and pager call goes through its thread's filter",
    },
    Config {
        name: "exits-seccomp-off",
        workload: Workload::Exits,
        seccomp: false,
        jail: false,
        against: None,
        about: "the same, `--seccomp off`",
    },
    Config {
        name: "kv-confined",
        workload: Workload::Kv,
        seccomp: true,
        jail: true,
        against: Some("kv-unconfined"),
        about: "`bench overhead`'s `kv` on the pager at a limit equal to guest RAM (as `memvisor host` runs a VM), jailed (`--jail`, its own uid and gid) and filtered (`--seccomp on`)",
    },
    Config {
        name: "kv-unconfined",
        workload: Workload::Kv,
        seccomp: false,
        jail: false,
        against: None,
        about: "the same, unconfined: no jail, `--seccomp off`",
    },
];

/// The uid and gid a jailed run takes (any but 0; no other process uses them here).
pub const JAIL_ID: u32 = 900_951;

/// What a run measures: `(name, unit, RESULT phase, RESULT key)`. A lower value is better for
/// every one.
pub const MEASURES: [(Workload, &str, &str, &str, &str); 6] = [
    (Workload::Exits, "exit p50", "ns", "exits", "exit_ns_p50"),
    (Workload::Exits, "exit p99", "ns", "exits", "exit_ns_p99"),
    (Workload::Exits, "fault p50", "ns", "faults", "fault_ns_p50"),
    (Workload::Exits, "fault p99", "ns", "faults", "fault_ns_p99"),
    (Workload::Kv, "kv load", "ms", "load", "ms"),
    (Workload::Kv, "kv run", "ms", "run", "ms"),
];

/// The sizes of a run.
pub struct Sizes {
    /// Guest RAM, and the pager's limit (equal: the pager holds RAM, nothing is reclaimed).
    pub mem: u64,
    /// The `exits` workload's command line.
    pub exits: String,
    /// The `kv` workload's command line (`bench overhead`'s at full scale).
    pub kv: String,
}

impl Sizes {
    pub fn at(scale: Scale) -> Sizes {
        match scale {
            Scale::Full => Sizes {
                mem: 512 << 20,
                exits: "batches=200 batch=1000 fault_mb=256 fault_stride=64".into(),
                kv: "records=200000 ops=2000000".into(),
            },
            Scale::Tiny => Sizes {
                mem: 128 << 20,
                exits: "batches=20 batch=100 fault_mb=16 fault_stride=64".into(),
                kv: "records=5000 ops=20000".into(),
            },
        }
    }

    /// The command line of `workload`.
    pub fn cmdline(&self, w: Workload) -> &str {
        match w {
            Workload::Exits => &self.exits,
            Workload::Kv => &self.kv,
        }
    }
}

/// What a run needs.
pub struct ConfinementPlan {
    pub configs: Vec<&'static Config>,
    pub sizes: Sizes,
    pub reps: u32,
}

/// The host's load average over 1, 5 and 15 minutes, as `/proc/loadavg` says it.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "?".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_confined_configuration_has_its_twin() {
        for c in &CONFIGS {
            if let Some(t) = c.against {
                let twin = CONFIGS.iter().find(|o| o.name == t).unwrap();
                assert_eq!(twin.workload, c.workload, "{}", c.name);
                assert!(!twin.seccomp && !twin.jail && twin.against.is_none());
                assert!(c.seccomp);
            }
        }
        for w in [Workload::Exits, Workload::Kv] {
            assert!(MEASURES.iter().any(|m| m.0 == w));
        }
    }
}
