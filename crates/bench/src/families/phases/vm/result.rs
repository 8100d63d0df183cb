//! What one run measured: how it ended ([`RunStatus`]), the host's view of each phase, the time
//! series and release it watched, the whole [`RunResult`].

use memvisor_api::{ActiveMemory, VmStats};

use crate::harness::readings::{CgroupState, ContextFaults, DiskOps, ProcIo};

/// How a run ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RunStatus {
    /// The guest reported success (exit status 1).
    #[default]
    Ok,
    /// SIGKILL from outside the harness: the host's OOM killer, for a memory cgroup.
    Killed,
    /// The guest crashed (exit status 4).
    Crashed,
    /// Any other failure: the guest reported failure, memvisor or QEMU failed.
    Failed,
    /// The harness ended it after `--timeout`.
    Timeout,
    /// The harness ended it on Ctrl-C.
    Interrupted,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Ok => "ok",
            RunStatus::Killed => "killed",
            RunStatus::Crashed => "crashed",
            RunStatus::Failed => "failed",
            RunStatus::Timeout => "timeout",
            RunStatus::Interrupted => "interrupted",
        }
    }
}

/// memvisor's own pager counters, as its API reports them.
pub use memvisor_api::PagerCounters;

/// What the host saw during one phase (or the whole run).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Phase {
    pub name: String,
    /// Host time from the start of the run to this phase's line (for `wall`, to the exit).
    pub at_ms: f64,
    /// The guest's own time for the phase (`ms=` of its `RESULT` line).
    pub guest_ms: Option<f64>,
    /// Host time from the previous phase's line (or the first console line) to this one's.
    pub host_ms: f64,
    pub swap_in: u64,
    pub swap_out: u64,
    pub io: ProcIo,
    pub pager: Option<PagerCounters>,
    /// The host's faults that read a page in, by context (VSwapper Fig. 9b–9c); `None` where
    /// they were not read (the `wall` phase, after the process is gone).
    pub faults: Option<ContextFaults>,
    /// Requests the host's disk completed meanwhile, every process's (VSwapper Fig. 11).
    pub disk_ops: Option<DiskOps>,
}

/// Everything measured in one run.
#[derive(Debug, Default)]
pub struct RunResult {
    pub status: RunStatus,
    /// The process's exit as the shell would print it (`1`, `137`, `signal 9`).
    pub exit: String,
    /// Why a run that is not `ok` ended, in the kernel's words when it was the kernel.
    pub reason: String,
    /// Phases completed, in order; `boot` first and `wall` (the whole run) last when reached.
    pub phases: Vec<Phase>,
    /// Peak RSS of the hypervisor process (`VmHWM`, sampled).
    pub peak_rss: u64,
    /// Peak use of the harness's host swap file (`/proc/swaps`, sampled).
    pub host_swap_peak: u64,
    /// The run's memory cgroup, last seen.
    pub cgroup: Option<CgroupState>,
    /// What happened to the balloon request.
    pub balloon: Option<String>,
    /// Host time from start to exit.
    pub elapsed_ms: f64,
    /// CPU time (user and system, every thread) of the run's process and the processes it
    /// waited for (QEMU under `memvisor run --hypervisor qemu`), from start to exit; `None` when
    /// it could not be read. On a loaded host the guest's own times include waiting for a CPU;
    /// this counts only the work.
    pub cpu_ms: Option<f64>,
    /// memvisor's stats when its VM ended (`--stats-json`).
    pub final_stats: Option<VmStats>,
    /// For a time-series experiment, the VM's answers to `GET /stats`, in order.
    pub series: Vec<StatsPoint>,
    /// For an experiment that gives memory back: what was done and when.
    pub given_back: Option<GivenBack>,
    /// For an experiment that gives memory back or tracks the Mapper, memvisor's answers to
    /// `GET /stats` with the
    /// host time (ms since the start of the run) each was asked at.
    pub stats: Vec<(f64, VmStats)>,
}

/// The release of a run: when its clock started and when the memory was given back.
#[derive(Clone, Debug, PartialEq)]
pub struct GivenBack {
    /// Host time (ms since the start of the run) of the guest line that started the clock.
    pub clock_ms: f64,
    /// Host time (ms since the start of the run) the release began; `None`: the run ended
    /// before (or the clock never started).
    pub at_ms: Option<f64>,
    /// How long the requests took.
    pub took_ms: f64,
    /// What was done, or why it failed.
    pub what: Result<String, String>,
}

impl GivenBack {
    /// When the release began on the clock (seconds since the clock started).
    pub fn on_clock_s(&self) -> Option<f64> {
        self.at_ms.map(|a| (a - self.clock_ms) / 1e3)
    }
}

/// One answer of the VM's API to `GET /stats`, as a time-series experiment keeps it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StatsPoint {
    /// Host time from the start of the run to the request.
    pub at_ms: f64,
    /// The working-set estimate (fractions of the pages sampled).
    pub active: ActiveMemory,
    /// Guest pages resident, and out of guest RAM for the period's sample: together, the pages
    /// the period's sample was drawn from (give or take what changed since it was drawn).
    pub resident_pages: u64,
    pub sampled_pages: u64,
}

impl StatsPoint {
    /// The sample of a `GET /stats` answer sent `at_ms` after the start; `None` without a pager.
    pub fn from_stats(at_ms: f64, stats: &VmStats) -> Option<StatsPoint> {
        let p = stats.pager.as_ref()?;
        Some(StatsPoint {
            at_ms,
            active: p.active,
            resident_pages: p.pages.resident_pages,
            sampled_pages: p.pages.sampled_pages,
        })
    }

    /// Bytes of the memory the sample is drawn from: resident pages and those out for it.
    pub fn base_bytes(&self) -> u64 {
        self.resident_pages.saturating_add(self.sampled_pages) << 12
    }

    /// A fraction of the sampled pages (the estimate or one of its averages) in bytes.
    pub fn bytes(&self, fraction: f64) -> f64 {
        fraction * self.base_bytes() as f64
    }
}

/// `(p50, p99)` of the pager's fault latency in a finished run's stats, if it served faults.
pub fn fault_latency(stats: &VmStats) -> Option<(u64, u64)> {
    let l = stats.pager.as_ref()?.fault_latency;
    (l.samples > 0).then_some((l.p50_us, l.p99_us))
}
