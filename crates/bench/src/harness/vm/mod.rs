//! One run: `memvisor run` as a child process (the same binary), measured from the host while it
//! runs. The guest's console is read line by line; at each `RESULT` line of a phase the host
//! counters are read, so every phase gets its own deltas. Between lines the harness samples every
//! [`TICK`]: the hypervisor process's I/O and peak RSS, the run's memory cgroup, the host swap
//! file's use, and moves the balloon once the VM answers on its socket. For a time-series
//! experiment it also asks the VM's API for `GET /stats` every [`crate::experiments::Series::every`] and keeps the
//! working-set estimate and page census of each answer. For an experiment that gives memory
//! back ([`Release`]), it starts a clock at the guest's line that begins the measured phase,
//! gives the VM its memory back when the clock reaches the release time (raising the pager's
//! limit, the cgroup's limit, deflating the balloon), and keeps memvisor's `GET /stats` answers.

mod monitor;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use memvisor_api::{ActiveMemory, ClientError, VmClient, VmStats};

use crate::configs::{Config, Hv, Limit, RunFiles};
use crate::experiments::{Kind, Step};
use crate::harness::child::{children_cpu_ms, tee_console};
use crate::harness::readings::{self, CgroupState, ProcIo};
use crate::harness::{qmp, teardown};
use monitor::{RunMonitor, Snap};

/// How often a running VM is sampled.
pub const TICK: Duration = Duration::from_millis(50);

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// The guest reported success (exit status 1).
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

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Killed => "killed",
            Status::Crashed => "crashed",
            Status::Failed => "failed",
            Status::Timeout => "timeout",
            Status::Interrupted => "interrupted",
        }
    }
}

/// memvisor's own pager counters, as its API reports them.
pub use memvisor_api::PagerCounters;

/// What the host saw during one phase (or the whole run).
#[derive(Clone, Debug, PartialEq)]
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
}

/// Everything measured in one run.
#[derive(Debug)]
pub struct RunResult {
    pub status: Status,
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
    pub series: Vec<StatsSample>,
    /// For an experiment that gives memory back: what was done and when.
    pub release: Option<Released>,
    /// For an experiment that gives memory back, memvisor's answers to `GET /stats` with the
    /// host time (ms since the start of the run) each was asked at.
    pub stats: Vec<(f64, VmStats)>,
}

/// The release of a run: when its clock started and when the memory was given back.
#[derive(Clone, Debug, PartialEq)]
pub struct Released {
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

impl Released {
    /// When the release began on the clock (seconds since the clock started).
    pub fn on_clock_s(&self) -> Option<f64> {
        self.at_ms.map(|a| (a - self.clock_ms) / 1e3)
    }
}

/// One answer of the VM's API to `GET /stats`, as a time-series experiment keeps it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StatsSample {
    /// Host time from the start of the run to the request.
    pub at_ms: f64,
    /// The working-set estimate (fractions of the pages sampled).
    pub active: ActiveMemory,
    /// Guest pages resident, and out of guest RAM for the period's sample: together, the pages
    /// the period's sample was drawn from (give or take what changed since it was drawn).
    pub resident_pages: u64,
    pub sampled_pages: u64,
}

impl StatsSample {
    /// The sample of a `GET /stats` answer sent `at_ms` after the start; `None` without a pager.
    pub fn from_stats(at_ms: f64, stats: &VmStats) -> Option<StatsSample> {
        let p = stats.pager.as_ref()?;
        Some(StatsSample {
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
    #[allow(clippy::cast_precision_loss)]
    pub fn bytes(&self, fraction: f64) -> f64 {
        fraction * self.base_bytes() as f64
    }
}

/// `(p50, p99)` of the pager's fault latency in a finished run's stats, if it served faults.
pub fn fault_latency(stats: &VmStats) -> Option<(u64, u64)> {
    let l = stats.pager.as_ref()?.fault_latency;
    (l.samples > 0).then_some((l.p50_us, l.p99_us))
}

/// The stats `memvisor run --stats-json PATH` wrote when its VM ended.
pub fn read_final_stats(path: &Path) -> Option<VmStats> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text)
        .map_err(|e| tracing::warn!("{} is not memvisor's stats: {e}", path.display()))
        .ok()
}

/// One run to do.
pub struct RunSpec<'a> {
    pub exe: &'a Path,
    pub config: &'static Config,
    pub step: &'a Step,
    pub mem: u64,
    pub limit: Option<u64>,
    pub disk: Option<(PathBuf, bool)>,
    /// Directory for the run's socket and pager swap file.
    pub work: &'a Path,
    /// Where the console and log of the run are kept.
    pub log_prefix: PathBuf,
    pub qemu_overhead: Option<u64>,
    pub host_swap_file: &'a Path,
    pub timeout: Duration,
    /// What the experiment measures: with a time series the VM's API is polled and the answers
    /// kept (memvisor configurations only); with a release the VM gets its memory back during
    /// the run.
    pub kind: &'a Kind,
    /// A swap disk image for the guest kit (`id=swap`).
    pub guest_swap: Option<PathBuf>,
    /// Progress line prefix (`[seqread 3/24 rep 1/3 qemu-hostswap]`).
    pub label: String,
}

/// `(phase, ms)` of a guest `RESULT` line.
pub fn parse_result(line: &str) -> Option<(String, Option<f64>, Option<String>)> {
    let rest = line.trim().strip_prefix("RESULT ")?;
    let (mut phase, mut ms, mut ok) = (None, None, None);
    for w in rest.split_whitespace() {
        match w.split_once('=') {
            Some(("phase", p)) => phase = Some(p.to_owned()),
            Some(("ms", m)) => ms = m.parse().ok(),
            Some(("ok", o)) => ok = Some(o.to_owned()),
            _ => {}
        }
    }
    Some((phase?, ms, ok))
}

fn api_stats(sock: &Path) -> Option<PagerCounters> {
    api_vm_stats(sock)?.pager.map(|p| p.counters)
}

/// `GET /stats` as the API's type; `None` when the VM does not answer (yet, or any more).
fn api_vm_stats(sock: &Path) -> Option<VmStats> {
    match VmClient::new(sock).stats() {
        Ok(stats) => Some(stats),
        Err(e @ ClientError::Schema { .. }) => {
            tracing::warn!("{e}");
            None
        }
        Err(_) => None,
    }
}

/// Runs one VM and measures it. Errors only when the run cannot be started.
pub fn run(spec: &RunSpec<'_>) -> Result<RunResult, String> {
    let c = spec.config;
    let sock = spec.work.join(format!("{}.sock", c.name));
    let _ = std::fs::remove_file(&sock);
    let stats_path = spec.work.join(format!("{}.stats.json", c.name));
    let _ = std::fs::remove_file(&stats_path);
    let mut cmd = command(spec, &sock, &stats_path);
    // The kernel log's last line now: what follows it later is new (the ring buffer may be full,
    // so counting lines would not do).
    let dmesg_last = readings::dmesg().pop();
    let s0 = Snap {
        at: Instant::now(),
        vm: readings::vmstat(),
        io: ProcIo::default(),
        pager: (c.hv == Hv::Memvisor).then(PagerCounters::default),
    };
    let cpu0 = children_cpu_ms();
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", spec.exe.display()))?;
    let pid = child.id();
    teardown::track_pid(pid);
    teardown::track_file(sock.clone());
    let cgroup_dir = readings::run_cgroup(pid);
    if c.limit == Limit::HostSwap {
        teardown::track_cgroup(cgroup_dir.clone());
    }
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (rx, out_thread) = tee_console(stdout, spec.log_prefix.with_extension("console"));
    let mut stderr = child.stderr.take().ok_or("no stderr")?;
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });

    let mut w = RunMonitor::new(spec, &sock, pid, s0, &cgroup_dir);
    w.follow(&rx);
    let exit = child
        .wait()
        .map_err(|e| format!("cannot wait for run: {e}"))?;
    let cpu_ms = match (cpu0, children_cpu_ms()) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    teardown::forget_pid(pid);
    if let Some(h) = w.sm.hv_pid {
        teardown::forget_pid(h);
    }
    let end = Snap {
        at: Instant::now(),
        vm: readings::vmstat(),
        io: w.sm.last_io,
        pager: None,
    };
    let _ = out_thread.join();
    let stderr = err_thread.join().unwrap_or_default();
    let _ = std::fs::write(spec.log_prefix.with_extension("stderr"), &stderr);
    if let Some(s) = readings::cgroup_state(&cgroup_dir) {
        w.sm.cg = Some(s);
    }
    if c.limit == Limit::HostSwap {
        // A killed `memvisor run` could not remove its cgroup.
        let _ = teardown::remove_cgroup(&cgroup_dir);
    }
    let _ = std::fs::remove_file(&sock);
    let final_stats = read_final_stats(&stats_path);
    let _ = std::fs::remove_file(&stats_path);
    let (status, reason) = w.verdict(exit, &stderr, dmesg_last.as_ref());
    let mut r = w.result(status, reason, exit, &end, final_stats);
    r.cpu_ms = cpu_ms;
    Ok(r)
}

/// The `memvisor run` command of a run: the configuration's flags, the step's workload, its
/// disks, sampling for a time series, the stats file, and the environment.
fn command(spec: &RunSpec<'_>, sock: &Path, stats_path: &Path) -> Command {
    let c = spec.config;
    let mut cmd = Command::new(spec.exe);
    cmd.arg("run")
        .args(["--mem", &spec.mem.to_string()])
        .args(c.run_flags(spec.limit, &RunFiles { sock }))
        .args(["--workload", spec.step.workload])
        .args(["--cmdline", &spec.step.cmdline]);
    if let Some(s) = spec.kind.series().filter(|_| c.hv == Hv::Memvisor) {
        cmd.args(s.run_flags());
    }
    if let Some((disk, writable)) = &spec.disk {
        let ro = if *writable { "" } else { ",ro" };
        cmd.args(["--disk", &format!("{},id=data{ro}", disk.display())]);
    }
    if let Some(swap) = &spec.guest_swap {
        cmd.args(["--disk", &format!("{},id=swap", swap.display())]);
    }
    if c.hv == Hv::Memvisor {
        cmd.arg("--stats-json").arg(stats_path);
    }
    // The pager's unnamed swap file goes in the run's work directory, on the disk under --out
    // (a tmpfs $TMPDIR would make its "swap" host memory).
    cmd.env("MEMVISOR_LOG", crate::harness::child::log_filter())
        .env("TMPDIR", spec.work)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group: a Ctrl-C at the terminal reaches the harness only, which then
        // ends the run by PID and cleans up after it.
        .process_group(0);
    if let Some(o) = spec.qemu_overhead {
        cmd.env("MEMVISOR_QEMU_OVERHEAD", o.to_string());
    }
    cmd
}

/// Gives a VM its memory back: the balloon deflated, the cgroup's limit raised by what the
/// guest lacked (guest RAM minus the limit), the pager's limit raised to the guest's size. Says
/// what it did, or the first request that failed.
pub fn give_back(
    c: &Config,
    sock: &Path,
    pid: u32,
    mem: u64,
    limit: Option<u64>,
) -> Result<String, String> {
    let mut done = Vec::new();
    if c.limit == Limit::HostSwap {
        let raise = mem.saturating_sub(limit.unwrap_or(mem));
        let file = readings::run_cgroup(pid).join("memory.limit_in_bytes");
        let now: u64 = std::fs::read_to_string(&file)
            .map_err(|e| format!("{}: {e}", file.display()))?
            .trim()
            .parse()
            .map_err(|e| format!("{}: {e}", file.display()))?;
        let new = now.saturating_add(raise);
        std::fs::write(&file, new.to_string()).map_err(|e| format!("{}: {e}", file.display()))?;
        done.push(format!("cgroup limit {} → {} MiB", now >> 20, new >> 20));
    }
    if c.balloon {
        match c.hv {
            Hv::Qemu => qmp::set_balloon(sock, mem)?,
            Hv::Memvisor => {
                VmClient::new(sock)
                    .set_balloon(0)
                    .map_err(|e| e.to_string())?;
            }
        }
        done.push("balloon deflated".into());
    }
    if c.pager_holds_ram() {
        VmClient::new(sock)
            .set_limit(Some(mem))
            .map_err(|e| e.to_string())?;
        done.push(format!("pager limit → {} MiB", mem >> 20));
    }
    if done.is_empty() {
        return Err(format!("{} has no limit to raise", c.name));
    }
    Ok(done.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_result_lines_and_the_pager_stats() {
        assert_eq!(
            parse_result("RESULT workload=seqread phase=pass2 ms=857.541 mb_s=244"),
            Some(("pass2".into(), Some(857.541), None))
        );
        assert_eq!(
            parse_result("RESULT workload=alloc phase=done ok=1 ms=5"),
            Some(("done".into(), Some(5.0), Some("1".into())))
        );
        assert_eq!(parse_result("seqread: pass 1"), None);
        let stats = VmStats {
            pager: Some(memvisor_api::PagerStats {
                counters: PagerCounters {
                    swap_bytes_written: 7,
                    faults_swap: 2,
                    ..PagerCounters::default()
                },
                fault_latency: memvisor_api::LatencySummary {
                    samples: 1,
                    p50_us: 2,
                    p99_us: 3,
                    max_us: 4,
                },
                ..memvisor_api::PagerStats::default()
            }),
            ..VmStats::default()
        };
        let body = serde_json::to_string(&stats).unwrap();
        assert_eq!(fault_latency(&stats), Some((2, 3)));
        assert_eq!(fault_latency(&VmStats::default()), None);

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        std::fs::write(&path, format!("{body}\n")).unwrap();
        assert_eq!(read_final_stats(&path), Some(stats));
        std::fs::write(&path, "pager: PagerSnapshot { .. }").unwrap();
        assert_eq!(read_final_stats(&path), None);
    }
}
