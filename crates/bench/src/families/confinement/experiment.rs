//! `memvisor bench confinement`: its configurations, in confined and unconfined pairs, the
//! sizes of a run and what each run measures. How a run goes is in `run`.

use crate::args::Scale;

/// Repetitions when `--reps` is not given: the fewest the project takes a speed claim from.
pub const DEFAULT_REPS: u32 = 7;

/// What a configuration runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// The guest kit's `exits`: the round trips of port writes and of first touches (pager
    /// faults).
    Exits,
    /// No VM: the calls of those two paths timed in the bench itself, without a filter and
    /// then through their thread's (`filters`).
    Calls,
}

/// One configuration: a workload with or without the filters.
#[derive(Debug, PartialEq, Eq)]
pub struct Config {
    pub name: &'static str,
    pub workload: Workload,
    /// `--seccomp on` (otherwise `off`).
    pub seccomp: bool,
    /// The configuration it is compared with (its unfiltered twin), for the filtered one.
    pub against: Option<&'static str>,
    pub about: &'static str,
}

/// The configurations, in the order of the report. The jail's cost is measured by `bench
/// overhead` (`memvisor-jailed` against `memvisor-unconfined`), on every workload it runs.
pub const CONFIGS: [Config; 3] = [
    Config {
        name: "exits-seccomp-on",
        workload: Workload::Exits,
        seccomp: true,
        against: Some("exits-seccomp-off"),
        about: "`exits` on the pager (`--mem-limit` = guest RAM), `--seccomp on`: every vCPU and pager call goes through its thread's filter",
    },
    Config {
        name: "exits-seccomp-off",
        workload: Workload::Exits,
        seccomp: false,
        against: None,
        about: "the same, `--seccomp off`",
    },
    Config {
        name: "filter-calls",
        workload: Workload::Calls,
        seccomp: true,
        against: None,
        about: "no VM: each call a guest exit and a pager fault make, timed in a thread of the bench without a filter and then through the filters of the VMM thread that makes it (`--seccomp log`'s, which differ from `on`'s only in what a call outside them gets)",
    },
];

/// A guest exit or a pager fault: the two paths whose calls go through a filter each time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    Exit,
    Fault,
}

/// A call on one of those paths, as its thread makes it. Per event, counted with `strace -f`
/// on `memvisor run --mem-limit M --workload exits`: an exit is one `KVM_RUN` on its vCPU
/// thread (20,749 `ioctl`s for 20,000 exits, the rest the boot's); a fault is one `poll`,
/// one `read` of the userfaultfd and one `UFFDIO_COPY` on the pager thread (516 of each for
/// 512 faults), the vCPU waiting inside its `KVM_RUN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    pub path: Path,
    pub thread: memvisor_seccomp::Thread,
    pub syscall: Syscall,
}

/// The system calls of those paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syscall {
    KvmRun,
    Poll,
    Read,
    UffdioCopy,
}

impl Syscall {
    /// How the report names it.
    pub fn name(self) -> &'static str {
        match self {
            Syscall::KvmRun => "ioctl(KVM_RUN)",
            Syscall::Poll => "poll",
            Syscall::Read => "read",
            Syscall::UffdioCopy => "ioctl(UFFDIO_COPY)",
        }
    }
}

/// The calls timed, in the order of the report.
pub const CALLS: [Call; 4] = [
    Call {
        path: Path::Exit,
        thread: memvisor_seccomp::Thread::Vcpu,
        syscall: Syscall::KvmRun,
    },
    Call {
        path: Path::Fault,
        thread: memvisor_seccomp::Thread::Pager,
        syscall: Syscall::Poll,
    },
    Call {
        path: Path::Fault,
        thread: memvisor_seccomp::Thread::Pager,
        syscall: Syscall::Read,
    },
    Call {
        path: Path::Fault,
        thread: memvisor_seccomp::Thread::Pager,
        syscall: Syscall::UffdioCopy,
    },
];

/// What a guest run measures: `(workload, name, unit, RESULT phase, RESULT key)`. A lower
/// value is better for every one. `filter-calls` measures, per call of [`CALLS`], its time
/// without and with the filter (`filters::measure`).
pub const MEASURES: [(Workload, &str, &str, &str, &str); 4] = [
    (Workload::Exits, "exit p50", "ns", "exits", "exit_ns_p50"),
    (Workload::Exits, "exit p99", "ns", "exits", "exit_ns_p99"),
    (Workload::Exits, "fault p50", "ns", "faults", "fault_ns_p50"),
    (Workload::Exits, "fault p99", "ns", "faults", "fault_ns_p99"),
];

/// The sizes of a run.
pub struct Sizes {
    /// Guest RAM, and the pager's limit (equal: the pager holds RAM, nothing is reclaimed).
    pub mem: u64,
    /// The `exits` workload's command line.
    pub exits: String,
    /// `filter-calls`: batches of each call, without and then with the filter.
    pub call_batches: u32,
    /// `filter-calls`: calls per batch.
    pub calls_per_batch: u32,
}

impl Sizes {
    pub fn at(scale: Scale) -> Sizes {
        match scale {
            Scale::Full => Sizes {
                mem: 512 << 20,
                exits: "batches=200 batch=1000 fault_mb=256 fault_stride=64".into(),
                call_batches: 50,
                calls_per_batch: 10_000,
            },
            Scale::Quick => Sizes {
                mem: 128 << 20,
                exits: "batches=20 batch=100 fault_mb=16 fault_stride=64".into(),
                call_batches: 5,
                calls_per_batch: 1000,
            },
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
    fn every_filtered_configuration_has_its_twin() {
        for c in &CONFIGS {
            if let Some(t) = c.against {
                let twin = CONFIGS.iter().find(|o| o.name == t).unwrap();
                assert_eq!(twin.workload, c.workload, "{}", c.name);
                assert!(!twin.seccomp && twin.against.is_none());
                assert!(c.seccomp);
            }
        }
        assert!(MEASURES.iter().all(|m| m.0 == Workload::Exits));
        for p in [Path::Exit, Path::Fault] {
            assert!(CALLS.iter().any(|c| c.path == p));
        }
    }
}
