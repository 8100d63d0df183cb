//! Watching a run while it is alive: tick by tick the hypervisor process's I/O and peak RSS,
//! the run's memory cgroup and the host swap file's use ([`HostReadings`]); line by line the
//! guest's console, closing a phase at each `RESULT` line; and what the harness does to the
//! run meanwhile (the balloon, a time series' polls, a given_back, the timeout), until the run's
//! [`RunResult`].

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use memvisor_api::{VmClient, VmStats};

use super::control::{api_stats, api_vm_stats, give_back, RunSpec};
use super::result::{GivenBack, PagerCounters, Phase, RunResult, RunStatus, StatsPoint};
use crate::families::phases::configs::{Hv, Limit};
use crate::families::phases::experiment::Series;
use crate::harness::child::{exit_text, exited, ConsoleEvent, TICK};
use crate::harness::guest::parse_result;
use crate::harness::readings::{self, CgroupState, ContextFaults, DiskOps, ProcIo, Vmstat};
use crate::harness::{qmp, teardown};

/// What is sampled every tick while a run is alive.
pub(super) struct HostReadings<'a> {
    pub(super) pid: u32,
    /// The hypervisor process: memvisor itself, or once it is found the QEMU child, or a
    /// jailed memvisor's child (pid 1 of its PID namespace, which runs the VMM).
    pub(super) hv_pid: Option<u32>,
    /// The name of that child, while it is to be found.
    pub(super) hv_child: &'static str,
    pub(super) cgroup_dir: Option<PathBuf>,
    pub(super) host_swap_file: &'a Path,
    pub(super) last_io: ProcIo,
    pub(super) peak_rss: u64,
    pub(super) host_swap_peak: u64,
    pub(super) cg: Option<CgroupState>,
}

impl HostReadings<'_> {
    fn read(&mut self) {
        if self.hv_pid.is_none() {
            self.hv_pid = readings::child_named(self.pid, self.hv_child);
            if let Some(q) = self.hv_pid {
                teardown::track_pid(q);
            }
        }
        if let Some(h) = self.hv_pid {
            if let Some(io) = readings::proc_io(h) {
                self.last_io = io;
            }
            if let Some(r) = readings::peak_rss(h) {
                self.peak_rss = self.peak_rss.max(r);
            }
        }
        if let Some(dir) = &self.cgroup_dir {
            if let Some(s) = readings::cgroup_state(dir) {
                self.cg = Some(s);
            }
            if let Some(u) = readings::swap_used(self.host_swap_file) {
                self.host_swap_peak = self.host_swap_peak.max(u);
            }
        }
    }
}

#[derive(Clone, Copy)]
pub(super) struct Snap {
    pub(super) at: Instant,
    pub(super) vm: Vmstat,
    pub(super) io: ProcIo,
    pub(super) pager: Option<PagerCounters>,
    /// The hypervisor process's major faults by context.
    pub(super) major_faults: Option<ContextFaults>,
    /// The host's disk (the one that holds the run's files).
    pub(super) disk: Option<DiskOps>,
}

impl Snap {
    /// The host's faults that read a page in so far, by context: the hypervisor process's major
    /// faults and, for memvisor, its pager's faults on swapped or on-disk pages.
    fn faults(&self) -> Option<ContextFaults> {
        let pager = self.pager.map(|p| ContextFaults {
            guest: p.stored_faults_guest,
            vmm: p.stored_faults_vmm,
        });
        match (pager, self.major_faults) {
            (Some(a), Some(b)) => Some(a.plus(&b)),
            (a, b) => a.or(b),
        }
    }
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
        faults: match (a.faults(), b.faults()) {
            (Some(x), Some(y)) => Some(y.since(&x)),
            _ => None,
        },
        disk_ops: match (a.disk, b.disk) {
            (Some(x), Some(y)) => Some(y.since(&x)),
            _ => None,
        },
    }
}

/// A run while it is alive: what has been measured so far and what the harness did to it.
pub(super) struct RunMonitor<'a> {
    spec: &'a RunSpec<'a>,
    sock: &'a Path,
    pub(super) pid: u32,
    /// The host before the run started.
    s0: Snap,
    pub(super) sm: HostReadings<'a>,
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
    forced: Option<RunStatus>,
    /// When the harness asked it to end (SIGTERM); SIGKILL follows 3 s later.
    forced_at: Option<Instant>,
    last_progress: Instant,
    /// The last phase done.
    current: String,
    /// The guest's `ok=` on its `done` line.
    guest_ok: Option<String>,
    samples: Vec<StatsPoint>,
    next_poll: Instant,
    /// The release experiment's clock: when its `after_phase` ended.
    clock: Option<Instant>,
    given_back: Option<GivenBack>,
    stats: Vec<(f64, VmStats)>,
}

impl<'a> RunMonitor<'a> {
    pub(super) fn new(
        spec: &'a RunSpec<'a>,
        sock: &'a Path,
        pid: u32,
        s0: Snap,
        cgroup_dir: &Path,
    ) -> RunMonitor<'a> {
        let c = spec.config;
        RunMonitor {
            spec,
            sock,
            pid,
            s0,
            sm: HostReadings {
                pid,
                hv_pid: (c.hv == Hv::Memvisor && !c.jail).then_some(pid),
                hv_child: if c.hv == Hv::Qemu { "qemu" } else { "memvisor" },
                cgroup_dir: (c.limit == Limit::HostSwap).then(|| cgroup_dir.to_path_buf()),
                host_swap_file: spec.host_swap_file,
                last_io: ProcIo::default(),
                peak_rss: 0,
                host_swap_peak: 0,
                cg: None,
            },
            series: spec.measure.series().filter(|_| c.hv == Hv::Memvisor),
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
            given_back: None,
            stats: Vec::new(),
        }
    }

    /// Follows the run tick by tick until its console has ended and its process exited.
    pub(super) fn follow(&mut self, rx: &mpsc::Receiver<ConsoleEvent>) {
        loop {
            match rx.recv_timeout(TICK) {
                Ok(ConsoleEvent::Line(line, at)) => self.line(&line, at),
                Ok(ConsoleEvent::Eof) => self.eof = true,
                Err(mpsc::RecvTimeoutError::Timeout) => self.sm.read(),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    self.eof = true;
                    std::thread::sleep(TICK);
                    self.sm.read();
                }
            }
            self.set_balloon();
            self.poll_series();
            self.give_back_on_time();
            self.poll_stats();
            self.say_progress();
            self.end_when_due();
            if self.eof && exited(self.pid) {
                if self.spec.config.hv == Hv::Memvisor {
                    if let Some(io) = readings::proc_io(self.pid) {
                        self.sm.last_io = io;
                    }
                }
                return;
            }
        }
    }

    /// A console line: the boot phase ends at the first, a guest phase at its `RESULT` line.
    fn line(&mut self, line: &str, at: Instant) {
        self.sm.read();
        let prev_pager = self.prev.pager;
        let snap = |sm: &HostReadings<'_>| Snap {
            at,
            vm: readings::vmstat(),
            io: sm.last_io,
            pager: if self.spec.config.hv == Hv::Memvisor {
                api_stats(self.sock).or(prev_pager)
            } else {
                prev_pager
            },
            major_faults: sm.hv_pid.and_then(readings::major_faults),
            disk: readings::disk_ops(self.spec.work),
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
        let give_back = self.spec.measure.give_back();
        if give_back.is_some_and(|r| r.after_phase == phase) {
            self.clock.get_or_insert(at);
        }
        if self.spec.step.phases.contains(&phase) && !self.phases.iter().any(|p| p.name == phase) {
            let s = snap(&self.sm);
            let done = phase_between(&phase, ms, self.s0.at, &self.prev, &s);
            self.phases.push(done);
            self.prev = s;
            let (label, elapsed) = (&self.spec.label, self.s0.at.elapsed().as_secs_f64());
            let guest = ms.map_or("?".into(), |m| format!("{m:.0}"));
            eprintln!("{label} {phase} done: guest {guest} ms ({elapsed:.1} s elapsed)");
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
        let inflate = spec.mem - target;
        let r = match c.hv {
            Hv::Qemu => qmp::set_balloon(self.sock, target),
            Hv::Memvisor => {
                let api = VmClient::new(self.sock);
                api.set_balloon(inflate)
                    .map(drop)
                    .map_err(|e| e.to_string())
            }
        };
        let (at, phase, mib) = (
            self.s0.at.elapsed().as_millis(),
            &self.current,
            inflate >> 20,
        );
        self.balloon = Some(match r {
            Ok(()) => format!("balloon set to {mib} MiB at {at} ms (phase {phase})"),
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
                .and_then(|st| StatsPoint::from_stats(at_ms, st))
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

    /// A given_back: the memory given back when its time on the clock comes.
    fn give_back_on_time(&mut self) {
        let (Some(r), Some(t0)) = (self.spec.measure.give_back(), self.clock) else {
            return;
        };
        let (c, spec) = (self.spec.config, self.spec);
        let now = Instant::now();
        if self.given_back.is_none() && now >= t0 + r.at && !self.eof {
            let what = give_back(c, self.sock, self.pid, spec.mem, spec.limit);
            let at_ms = now.duration_since(self.s0.at).as_secs_f64() * 1e3;
            eprintln!(
                "{} memory given back {:.1} s into the run phase: {}",
                spec.label,
                now.duration_since(t0).as_secs_f64(),
                what.as_ref().unwrap_or_else(|e| e)
            );
            self.given_back = Some(GivenBack {
                clock_ms: t0.duration_since(self.s0.at).as_secs_f64() * 1e3,
                at_ms: Some(at_ms),
                took_ms: now.elapsed().as_secs_f64() * 1e3,
                what,
            });
        }
    }

    /// memvisor's `GET /stats` kept when the next poll is due: from boot, or once a given_back's
    /// clock runs.
    fn poll_stats(&mut self) {
        let Some((every, from_boot)) = self.spec.measure.polls_stats() else {
            return;
        };
        let now = Instant::now();
        let due = now >= self.next_poll && (from_boot || self.clock.is_some());
        if self.spec.config.hv == Hv::Memvisor && due && !self.eof && self.sock.exists() {
            let at_ms = now.duration_since(self.s0.at).as_secs_f64() * 1e3;
            if let Some(st) = api_vm_stats(self.sock) {
                self.stats.push((at_ms, st));
            }
            while self.next_poll <= now {
                self.next_poll += every;
            }
        }
    }

    /// A line every 10 s without a phase done, so a person sees the run is alive.
    fn say_progress(&mut self) {
        if self.last_progress.elapsed() < Duration::from_secs(10) {
            return;
        }
        let mib = |x: &StatsPoint| x.bytes(x.active.estimate) / f64::from(1u32 << 20);
        let estimate = self.samples.last().map(mib);
        let estimate = estimate.map_or(String::new(), |e| {
            format!(", working-set estimate {e:.0} MiB")
        });
        let (label, after, elapsed) = (&self.spec.label, &self.current, self.s0.at.elapsed());
        eprintln!(
            "{label} running, after {after} ({:.0} s elapsed{estimate})",
            elapsed.as_secs_f64()
        );
        self.last_progress = Instant::now();
    }

    /// Ends the run on Ctrl-C or at its timeout: SIGTERM, then SIGKILL 3 s later.
    fn end_when_due(&mut self) {
        let pid = self.pid;
        if self.forced.is_none() {
            if teardown::interrupted() {
                self.forced = Some(RunStatus::Interrupted);
            } else if self.s0.at.elapsed() > self.spec.timeout {
                self.forced = Some(RunStatus::Timeout);
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
            teardown::kill(pid);
            if let Some(hv) = self.sm.hv_pid.filter(|&h| h != pid) {
                teardown::kill(hv);
            }
            self.forced_at = None;
        }
    }

    /// How the run ended, and why in words when it did not end well.
    pub(super) fn verdict(
        &self,
        exit: std::process::ExitStatus,
        stderr: &str,
        dmesg_last: Option<&String>,
    ) -> (RunStatus, String) {
        let killed =
            exit.signal() == Some(libc::SIGKILL) || exit.code() == Some(128 + libc::SIGKILL);
        let ours = |l: &&str| l.contains("memvisor:") || l.contains("qemu");
        let last_err = stderr.lines().rev().find(ours).map_or("", |l| l.trim());
        match (self.forced, exit.code()) {
            (Some(RunStatus::Timeout), _) => {
                let secs = self.spec.timeout.as_secs();
                (
                    RunStatus::Timeout,
                    format!("ended by the harness after --timeout {secs} s"),
                )
            }
            (Some(f), _) => (f, "ended by the harness on Ctrl-C".into()),
            (None, Some(1)) if self.guest_ok.as_deref() != Some("0") => {
                (RunStatus::Ok, String::new())
            }
            (None, _) if killed => (RunStatus::Killed, self.why_killed(dmesg_last)),
            (None, Some(4)) => (RunStatus::Crashed, format!("guest crash: {last_err}")),
            (None, _) => {
                let why = if last_err.is_empty() {
                    "guest reported failure"
                } else {
                    last_err
                };
                (
                    RunStatus::Failed,
                    format!("exit {}: {why}", exit_text(exit)),
                )
            }
        }
    }

    /// Why a run was SIGKILLed: an OOM kill of its memory cgroup, with the cgroup's state and
    /// the kernel's lines about it, or a kill from outside.
    fn why_killed(&self, dmesg_last: Option<&String>) -> String {
        let pid = self.pid;
        let cg = self.sm.cg;
        let new = readings::dmesg_since(dmesg_last);
        let lines = readings::oom_lines(&new, pid, &[pid, self.sm.hv_pid.unwrap_or(pid)]);
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
        let killed = lines.iter().find(|l| l.contains("Killed process"));
        if let Some(l) = killed.or(lines.first()) {
            why.push_str("; kernel: ");
            why.push_str(l);
        }
        if let Some(m) = readings::memcg_oom_summary(&new, pid) {
            why.push_str("; kernel's memcg report: ");
            why.push_str(&m);
        }
        why
    }

    /// The run's result; a run that went well gets its whole run as one more phase, `wall`.
    pub(super) fn result(
        self,
        status: RunStatus,
        reason: String,
        exit: std::process::ExitStatus,
        end: &Snap,
        final_stats: Option<VmStats>,
    ) -> RunResult {
        let start = self.s0.at;
        let mut phases = self.phases;
        if status == RunStatus::Ok {
            let mut whole = phase_between("wall", None, start, &self.s0, end);
            whole.pager = final_stats
                .as_ref()
                .and_then(|s| s.pager.as_ref())
                .map(|p| p.counters);
            phases.push(whole);
        }
        RunResult {
            status,
            exit: exit_text(exit),
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
            given_back: self.given_back.or_else(|| {
                self.clock.map(|t0| GivenBack {
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
