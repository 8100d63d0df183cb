//! One run: `memvisor run` as a child process (the same binary), measured from the host while it
//! runs. The guest's console is read line by line; at each `RESULT` line of a phase the host
//! counters are read, so every phase gets its own deltas. Between lines the harness samples every
//! [`TICK`]: the hypervisor process's I/O and peak RSS, the run's memory cgroup, the host swap
//! file's use, and moves the balloon once the VM answers on its socket. For a time-series
//! experiment it also asks the VM's API for `GET /stats` every [`Series::every`] and keeps the
//! working-set estimate and page census of each answer. For an experiment that gives memory
//! back ([`Release`]), it starts a clock at the guest's line that begins the measured phase,
//! gives the VM its memory back when the clock reaches the release time (raising the pager's
//! limit, the cgroup's limit, deflating the balloon), and keeps memvisor's `GET /stats` answers.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use memvisor_api::{ActiveMemory, ClientError, VmClient, VmStats};

use super::{qmp, teardown};
use crate::configs::{Config, Hv, Limit, RunFiles};
use crate::experiments::{Kind, Series, Step};
use crate::run::host::{self, CgroupState, ProcIo, Vmstat};

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

/// What is sampled every tick while a run is alive.
struct Sampler<'a> {
    pid: u32,
    /// The hypervisor process: memvisor itself, or the QEMU child once it is found.
    hv_pid: Option<u32>,
    cgroup_dir: Option<PathBuf>,
    host_swap_file: &'a Path,
    last_io: ProcIo,
    peak_rss: u64,
    host_swap_peak: u64,
    cg: Option<CgroupState>,
}

impl Sampler<'_> {
    fn sample(&mut self) {
        if self.hv_pid.is_none() {
            self.hv_pid = host::child_named(self.pid, "qemu");
            if let Some(q) = self.hv_pid {
                teardown::track_pid(q);
            }
        }
        if let Some(h) = self.hv_pid {
            if let Some(io) = host::proc_io(h) {
                self.last_io = io;
            }
            if let Some(r) = host::peak_rss(h) {
                self.peak_rss = self.peak_rss.max(r);
            }
        }
        if let Some(dir) = &self.cgroup_dir {
            if let Some(s) = host::cgroup_state(dir) {
                self.cg = Some(s);
            }
            if let Some(u) = host::swap_used(self.host_swap_file) {
                self.host_swap_peak = self.host_swap_peak.max(u);
            }
        }
    }
}

#[derive(Clone, Copy)]
struct Snap {
    at: Instant,
    vm: Vmstat,
    io: ProcIo,
    pager: Option<PagerCounters>,
}

/// Starts `cmd` (a `memvisor run`) as the harness starts every VM of its own: logging at info,
/// `TMPDIR` the run's `work` directory (the pager's unnamed swap file lands on the disk under
/// --out, not on a tmpfs), stdin closed, stderr to `LOG.stderr`, its own process group (a Ctrl-C
/// at the terminal reaches the harness only), its pid tracked for teardown, and its console
/// copied to `LOG.console` and returned line by line.
pub(super) fn spawn_logged(
    mut cmd: Command,
    work: &Path,
    log: &Path,
) -> Result<(std::process::Child, mpsc::Receiver<Msg>), String> {
    let stderr = std::fs::File::create(log.with_extension("stderr"))
        .map_err(|e| format!("{}: {e}", log.display()))?;
    cmd.env("MEMVISOR_LOG", super::log_filter())
        .env("TMPDIR", work)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .process_group(0);
    let mut child = cmd.spawn().map_err(|e| {
        format!(
            "cannot start {}: {e}",
            Path::new(cmd.get_program()).display()
        )
    })?;
    teardown::track_pid(child.id());
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (lines, _) = tee_console(stdout, log.with_extension("console"));
    Ok((child, lines))
}

/// A console line with the time it arrived, or the console's end.
pub(super) enum Msg {
    Line(String, Instant),
    Eof,
}

/// Copies a VMM's console (`stdout`), line by line, to the file `path` and to the returned
/// channel, then sends [`Msg::Eof`]. Once the receiver is gone it keeps reading, so the VMM
/// never blocks on a full pipe.
pub(super) fn tee_console(
    mut stdout: std::process::ChildStdout,
    path: PathBuf,
) -> (mpsc::Receiver<Msg>, std::thread::JoinHandle<()>) {
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let mut log = std::fs::File::create(path).ok();
        let mut r = BufReader::new(&mut stdout);
        let mut line = String::new();
        loop {
            line.clear();
            match r.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if let Some(f) = log.as_mut() {
                        let _ = f.write_all(line.as_bytes());
                    }
                    if tx.send(Msg::Line(line.clone(), Instant::now())).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = stdout.read_to_end(&mut Vec::new());
        let _ = tx.send(Msg::Eof);
    });
    (rx, thread)
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

/// Exited (without reaping it, so `/proc/PID/io` can still be read)?
fn exited(pid: u32) -> bool {
    let id: libc::id_t = pid;
    // SAFETY: siginfo_t is plain data that waitid fills; zeroed is a valid initial value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid writes only to `info`; WNOWAIT leaves the child waitable, WNOHANG never blocks.
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            id,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: after a successful waitid the si_pid field is initialised (0 if nothing exited).
    r != 0 || unsafe { info.si_pid() } != 0
}

fn fmt_exit(s: std::process::ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => c.to_string(),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => "?".into(),
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
    let dmesg_last = host::dmesg().pop();
    let s0 = Snap {
        at: Instant::now(),
        vm: host::vmstat(),
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
    let cgroup_dir = host::run_cgroup(pid);
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

    let mut w = Watch::new(spec, &sock, pid, s0, &cgroup_dir);
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
        vm: host::vmstat(),
        io: w.sm.last_io,
        pager: None,
    };
    let _ = out_thread.join();
    let stderr = err_thread.join().unwrap_or_default();
    let _ = std::fs::write(spec.log_prefix.with_extension("stderr"), &stderr);
    if let Some(s) = host::cgroup_state(&cgroup_dir) {
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

/// User and system CPU time of this process's children that ended and were waited for, in ms.
fn children_cpu_ms() -> Option<f64> {
    // SAFETY: rusage is plain data that getrusage fills; zeroed is a valid initial value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes only to `ru`.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) } != 0 {
        return None;
    }
    #[allow(clippy::cast_precision_loss)]
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    Some(ms(ru.ru_utime) + ms(ru.ru_stime))
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
    cmd.env("MEMVISOR_LOG", super::log_filter())
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

/// What happened between snapshots `a` and `b` of a run that started at `start`: one phase.
fn phase_between(name: &str, guest_ms: Option<f64>, start: Instant, a: &Snap, b: &Snap) -> Phase {
    Phase {
        name: name.to_owned(),
        at_ms: b.at.duration_since(start).as_secs_f64() * 1e3,
        guest_ms,
        host_ms: b.at.duration_since(a.at).as_secs_f64() * 1e3,
        swap_in: (b.vm.pswpin.saturating_sub(a.vm.pswpin)) << 12,
        swap_out: (b.vm.pswpout.saturating_sub(a.vm.pswpout)) << 12,
        io: ProcIo {
            read_bytes: b.io.read_bytes.saturating_sub(a.io.read_bytes),
            write_bytes: b.io.write_bytes.saturating_sub(a.io.write_bytes),
        },
        pager: match (a.pager, b.pager) {
            (Some(x), Some(y)) => Some(y.since(&x)),
            _ => None,
        },
    }
}

/// A run while it is alive: what has been measured so far and what the harness did to it.
struct Watch<'a> {
    spec: &'a RunSpec<'a>,
    sock: &'a Path,
    pid: u32,
    /// The host before the run started.
    s0: Snap,
    sm: Sampler<'a>,
    /// The time series polled from the API (memvisor configurations only).
    series: Option<&'a Series>,
    /// What was done with the balloon, once done.
    balloon: Option<String>,
    phases: Vec<Phase>,
    /// The host at the end of the last phase.
    prev: Snap,
    /// The console has ended.
    eof: bool,
    /// Ended by the harness: interrupted or timed out.
    forced: Option<Status>,
    /// When the harness asked it to end (SIGTERM); SIGKILL follows 3 s later.
    forced_at: Option<Instant>,
    last_progress: Instant,
    /// The last phase done.
    current: String,
    /// The guest's `ok=` on its `done` line.
    guest_ok: Option<String>,
    samples: Vec<StatsSample>,
    next_poll: Instant,
    /// The release experiment's clock: when its `after_phase` ended.
    clock: Option<Instant>,
    released: Option<Released>,
    stats: Vec<(f64, VmStats)>,
}

impl<'a> Watch<'a> {
    fn new(
        spec: &'a RunSpec<'a>,
        sock: &'a Path,
        pid: u32,
        s0: Snap,
        cgroup_dir: &Path,
    ) -> Watch<'a> {
        let c = spec.config;
        Watch {
            spec,
            sock,
            pid,
            s0,
            sm: Sampler {
                pid,
                hv_pid: (c.hv == Hv::Memvisor).then_some(pid),
                cgroup_dir: (c.limit == Limit::HostSwap).then(|| cgroup_dir.to_path_buf()),
                host_swap_file: spec.host_swap_file,
                last_io: ProcIo::default(),
                peak_rss: 0,
                host_swap_peak: 0,
                cg: None,
            },
            series: spec.kind.series().filter(|_| c.hv == Hv::Memvisor),
            balloon: None,
            phases: Vec::new(),
            prev: s0,
            eof: false,
            forced: None,
            forced_at: None,
            last_progress: Instant::now(),
            current: "boot".to_owned(),
            guest_ok: None,
            samples: Vec::new(),
            next_poll: Instant::now(),
            clock: None,
            released: None,
            stats: Vec::new(),
        }
    }

    /// Follows the run tick by tick until its console has ended and its process exited.
    fn follow(&mut self, rx: &mpsc::Receiver<Msg>) {
        loop {
            match rx.recv_timeout(TICK) {
                Ok(Msg::Line(line, at)) => self.line(&line, at),
                Ok(Msg::Eof) => self.eof = true,
                Err(mpsc::RecvTimeoutError::Timeout) => self.sm.sample(),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    self.eof = true;
                    std::thread::sleep(TICK);
                    self.sm.sample();
                }
            }
            self.set_balloon();
            self.poll_series();
            self.release();
            self.say_progress();
            self.end_when_due();
            if self.eof && exited(self.pid) {
                if self.spec.config.hv == Hv::Memvisor {
                    if let Some(io) = host::proc_io(self.pid) {
                        self.sm.last_io = io;
                    }
                }
                return;
            }
        }
    }

    /// A console line: the boot phase ends at the first, a guest phase at its `RESULT` line.
    fn line(&mut self, line: &str, at: Instant) {
        self.sm.sample();
        let prev_pager = self.prev.pager;
        let snap = |sm: &Sampler<'_>| Snap {
            at,
            vm: host::vmstat(),
            io: sm.last_io,
            pager: if self.spec.config.hv == Hv::Memvisor {
                api_stats(self.sock).or(prev_pager)
            } else {
                prev_pager
            },
        };
        if self.phases.is_empty() {
            let s = snap(&self.sm);
            let boot = phase_between("boot", None, self.s0.at, &self.s0, &s);
            self.phases.push(boot);
            self.prev = s;
        }
        let Some((phase, ms, ok)) = parse_result(line) else {
            return;
        };
        if phase == "done" {
            self.guest_ok = ok;
        }
        if self
            .spec
            .kind
            .release()
            .is_some_and(|r| r.after_phase == phase)
            && self.clock.is_none()
        {
            self.clock = Some(at);
        }
        if self.spec.step.phases.contains(&phase) && !self.phases.iter().any(|p| p.name == phase) {
            let s = snap(&self.sm);
            let done = phase_between(&phase, ms, self.s0.at, &self.prev, &s);
            self.phases.push(done);
            self.prev = s;
            eprintln!(
                "{} {phase} done: guest {} ms ({:.1} s elapsed)",
                self.spec.label,
                ms.map_or("?".into(), |m| format!("{m:.0}")),
                self.s0.at.elapsed().as_secs_f64()
            );
            self.current = phase;
            self.last_progress = Instant::now();
        }
    }

    /// Sets the balloon target of a balloon configuration once its socket is there.
    fn set_balloon(&mut self) {
        let (c, spec) = (self.spec.config, self.spec);
        if !c.balloon || self.balloon.is_some() || !self.sock.exists() {
            return;
        }
        let target = spec.limit.unwrap_or(spec.mem);
        let r = match c.hv {
            Hv::Qemu => qmp::set_balloon(self.sock, target),
            Hv::Memvisor => VmClient::new(self.sock)
                .set_balloon(spec.mem - target)
                .map(drop)
                .map_err(|e| e.to_string()),
        };
        let at = self.s0.at.elapsed().as_millis();
        self.balloon = Some(match r {
            Ok(()) => format!(
                "balloon set to {} MiB at {at} ms (phase {})",
                (spec.mem - target) >> 20,
                self.current
            ),
            Err(e) => format!("balloon request failed at {at} ms: {e}"),
        });
    }

    /// A time series: `GET /stats` when the next poll is due.
    fn poll_series(&mut self) {
        let Some(s) = self.series else {
            return;
        };
        let now = Instant::now();
        if now >= self.next_poll && !self.eof && self.sock.exists() {
            let at_ms = now.duration_since(self.s0.at).as_secs_f64() * 1e3;
            if let Some(x) = api_vm_stats(self.sock)
                .as_ref()
                .and_then(|st| StatsSample::from_stats(at_ms, st))
            {
                self.samples.push(x);
            }
            // The next poll one interval after this one was due, not after the answer:
            // a slow answer does not shift the rest of the series.
            while self.next_poll <= now {
                self.next_poll += s.every;
            }
        }
    }

    /// A release: the memory given back when its time on the clock comes, and memvisor's
    /// `GET /stats` polled once the clock runs.
    fn release(&mut self) {
        let (Some(r), Some(t0)) = (self.spec.kind.release(), self.clock) else {
            return;
        };
        let (c, spec) = (self.spec.config, self.spec);
        let now = Instant::now();
        if self.released.is_none() && now >= t0 + r.at && !self.eof {
            let what = give_back(c, self.sock, self.pid, spec.mem, spec.limit);
            let at_ms = now.duration_since(self.s0.at).as_secs_f64() * 1e3;
            eprintln!(
                "{} memory given back {:.1} s into the run phase: {}",
                spec.label,
                now.duration_since(t0).as_secs_f64(),
                what.as_ref().unwrap_or_else(|e| e)
            );
            self.released = Some(Released {
                clock_ms: t0.duration_since(self.s0.at).as_secs_f64() * 1e3,
                at_ms: Some(at_ms),
                took_ms: now.elapsed().as_secs_f64() * 1e3,
                what,
            });
        }
        if c.hv == Hv::Memvisor && now >= self.next_poll && !self.eof && self.sock.exists() {
            let at_ms = now.duration_since(self.s0.at).as_secs_f64() * 1e3;
            if let Some(st) = api_vm_stats(self.sock) {
                self.stats.push((at_ms, st));
            }
            while self.next_poll <= now {
                self.next_poll += r.every;
            }
        }
    }

    /// A line every 10 s without a phase done, so a person sees the run is alive.
    fn say_progress(&mut self) {
        if self.last_progress.elapsed() < Duration::from_secs(10) {
            return;
        }
        let estimate = self
            .samples
            .last()
            .map(|x| {
                format!(
                    ", working-set estimate {:.0} MiB",
                    x.bytes(x.active.estimate) / f64::from(1u32 << 20)
                )
            })
            .unwrap_or_default();
        eprintln!(
            "{} running, after {} ({:.0} s elapsed{estimate})",
            self.spec.label,
            self.current,
            self.s0.at.elapsed().as_secs_f64()
        );
        self.last_progress = Instant::now();
    }

    /// Ends the run on Ctrl-C or at its timeout: SIGTERM, then SIGKILL 3 s later.
    fn end_when_due(&mut self) {
        let pid = self.pid;
        if self.forced.is_none() {
            if teardown::interrupted() {
                self.forced = Some(Status::Interrupted);
            } else if self.s0.at.elapsed() > self.spec.timeout {
                self.forced = Some(Status::Timeout);
            }
            if self.forced.is_some() {
                // SIGTERM first: `memvisor run` then stops QEMU and removes its cgroup itself.
                teardown::signal(pid, libc::SIGTERM);
                self.forced_at = Some(Instant::now());
            }
        }
        if self
            .forced_at
            .is_some_and(|t| t.elapsed() > Duration::from_secs(3))
        {
            for p in [Some(pid), self.sm.hv_pid.filter(|&h| h != pid)]
                .into_iter()
                .flatten()
            {
                teardown::kill(p);
            }
            self.forced_at = None;
        }
    }

    /// How the run ended, and why in words when it did not end well.
    fn verdict(
        &self,
        exit: std::process::ExitStatus,
        stderr: &str,
        dmesg_last: Option<&String>,
    ) -> (Status, String) {
        let killed =
            exit.signal() == Some(libc::SIGKILL) || exit.code() == Some(128 + libc::SIGKILL);
        let last_err = stderr
            .lines()
            .rev()
            .find(|l| l.contains("memvisor:") || l.contains("qemu"))
            .map(|l| l.trim().to_owned())
            .unwrap_or_default();
        match (self.forced, exit.code()) {
            (Some(f), _) => (
                f,
                match f {
                    Status::Timeout => format!(
                        "ended by the harness after --timeout {} s",
                        self.spec.timeout.as_secs()
                    ),
                    _ => "ended by the harness on Ctrl-C".into(),
                },
            ),
            (None, Some(1)) if self.guest_ok.as_deref() != Some("0") => (Status::Ok, String::new()),
            (None, _) if killed => (Status::Killed, self.why_killed(dmesg_last)),
            (None, Some(4)) => (Status::Crashed, format!("guest crash: {last_err}")),
            (None, _) => (
                Status::Failed,
                format!(
                    "exit {}: {}",
                    fmt_exit(exit),
                    if last_err.is_empty() {
                        "guest reported failure"
                    } else {
                        &last_err
                    }
                ),
            ),
        }
    }

    /// Why a run was SIGKILLed: an OOM kill of its memory cgroup, with the cgroup's state and
    /// the kernel's lines about it, or a kill from outside.
    fn why_killed(&self, dmesg_last: Option<&String>) -> String {
        let pid = self.pid;
        let cg = self.sm.cg;
        let all = host::dmesg();
        let from = dmesg_last
            .and_then(|l| all.iter().rposition(|x| x == l))
            .map_or(0, |i| i + 1);
        let new = &all[from..];
        let lines = host::oom_lines(new, pid, &[pid, self.sm.hv_pid.unwrap_or(pid)]);
        let oom = cg.is_some_and(|s| s.oom_kills > 0)
            || lines.iter().any(|l| l.contains("out of memory"));
        let mut why = if oom {
            "memory cgroup OOM kill".to_owned()
        } else {
            "SIGKILL from outside the harness, no OOM kill recorded".to_owned()
        };
        if let Some(s) = cg {
            why.push_str(&format!(
                " (cgroup last seen: oom_kill={}, failcnt={}, peak usage {} MiB of limit {} MiB)",
                s.oom_kills,
                s.failcnt,
                s.max_usage >> 20,
                s.limit >> 20
            ));
        }
        if let Some(l) = lines
            .iter()
            .find(|l| l.contains("Killed process"))
            .or(lines.first())
        {
            why.push_str("; kernel: ");
            why.push_str(l);
        }
        if let Some(m) = host::memcg_oom_summary(new, pid) {
            why.push_str("; kernel's memcg report: ");
            why.push_str(&m);
        }
        why
    }

    /// The run's result; a run that went well gets its whole run as one more phase, `wall`.
    fn result(
        self,
        status: Status,
        reason: String,
        exit: std::process::ExitStatus,
        end: &Snap,
        final_stats: Option<VmStats>,
    ) -> RunResult {
        let start = self.s0.at;
        let mut phases = self.phases;
        if status == Status::Ok {
            let mut whole = phase_between("wall", None, start, &self.s0, end);
            whole.pager = final_stats
                .as_ref()
                .and_then(|s| s.pager.as_ref())
                .map(|p| p.counters);
            phases.push(whole);
        }
        RunResult {
            status,
            exit: fmt_exit(exit),
            reason,
            phases,
            peak_rss: self.sm.peak_rss,
            host_swap_peak: self.sm.host_swap_peak,
            cgroup: self.sm.cg,
            balloon: self.balloon,
            elapsed_ms: end.at.duration_since(start).as_secs_f64() * 1e3,
            cpu_ms: None,
            final_stats,
            series: self.samples,
            release: self.released.or_else(|| {
                self.clock.map(|t0| Released {
                    clock_ms: t0.duration_since(start).as_secs_f64() * 1e3,
                    at_ms: None,
                    took_ms: 0.0,
                    what: Err("the run ended before the release time".into()),
                })
            }),
            stats: self.stats,
        }
    }
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
        let file = host::run_cgroup(pid).join("memory.limit_in_bytes");
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

/// Makes a guest kit disk of `size_mb` MiB at `path` with `memvisor mkdisk`, replacing what is
/// there: a data disk holding `files` (as `--files` takes them), or without them a swap disk.
pub fn mkdisk(exe: &Path, path: &Path, size_mb: u64, files: Option<&str>) -> Result<(), String> {
    let kind = if files.is_some() { "data" } else { "swap" };
    let mut cmd = Command::new(exe);
    cmd.args(["mkdisk", kind, "--force", "--out"])
        .arg(path)
        .args(["--size", &format!("{size_mb}M")]);
    if let Some(f) = files {
        cmd.args(["--files", f]);
    }
    let st = cmd
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run mkdisk: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("mkdisk {kind} {} failed ({st})", path.display()))
    }
}

/// QEMU's own resident memory besides guest RAM: a short QEMU run of the guest kit, its RSS
/// outside the guest RAM mapping sampled from `/proc/PID/smaps`, the largest value seen.
pub fn measure_qemu_overhead(exe: &Path, mem: u64) -> Result<u64, String> {
    let mut child = Command::new(exe)
        .args(["run", "--hypervisor", "qemu", "--mem", &mem.to_string()])
        .args(["--workload", "memhog", "--cmdline", "mb=8 secs=2"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    let pid = child.id();
    teardown::track_pid(pid);
    let mut qemu = None;
    let mut most = 0u64;
    while !exited(pid) && !teardown::interrupted() {
        if qemu.is_none() {
            qemu = host::child_named(pid, "qemu");
            if let Some(q) = qemu {
                teardown::track_pid(q);
            }
        }
        if let Some(o) = qemu.and_then(|q| host::rss_outside_guest(q, mem)) {
            most = most.max(o);
        }
        std::thread::sleep(TICK);
    }
    if teardown::interrupted() {
        teardown::kill(pid);
    }
    let st = child.wait().map_err(|e| e.to_string())?;
    teardown::forget_pid(pid);
    if let Some(q) = qemu {
        teardown::forget_pid(q);
    }
    if st.code() != Some(1) || most == 0 {
        return Err(format!(
            "the QEMU calibration run exited {} with {most} bytes measured",
            fmt_exit(st)
        ));
    }
    Ok(most)
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
