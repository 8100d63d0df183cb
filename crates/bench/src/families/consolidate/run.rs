//! `memvisor bench consolidate`'s runs: N VMs started an interval apart under `memvisor host`
//! (one VM a configuration's way, [`spec`]) or as QEMU processes (a static balloon and a memory
//! cgroup, or no limit), watched every [`TICK`] until all have ended ([`FleetMonitor`]): when each job
//! ended, each VMM process's PSS, each QEMU cgroup's failures, OOM kills
//! and swap, and (with N <= the cores) every VMM's threads pinned to a core of their own. What
//! was measured is handed to a [`Sink`] after each run. Budgets that are fractions of a scenario's
//! joint working set are sized first ([`size_working_sets`]). The configurations and scenarios
//! are in `experiment`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use memvisor_api::{HostClient, HostSample, HostVm, HostVmState};
use memvisor_host::VmmFiles;

use super::experiment::{
    bounded, host_budget, job_secs, memory_summary, overlap_fraction, qemu_share, sized_on, spec,
    Budget, Config, ConsolidatePlan, HostLaunch, Launch, Sample, INPUT_MB, MEM, RUN_TIMEOUT,
};
use super::scenario::{disk, job, own_disk, Scenario, BALANCE_DISK_MB, BALANCE_FILES};
use crate::harness::child::{self, Reaped};
use crate::harness::cpu::{CpuMeter, CpuUse, MachineCpu};
use crate::harness::guest::read_final_stats;
use crate::harness::order::interleave;
use crate::harness::{readings, Bench};

/// Between two looks at the VMs.
pub const TICK: Duration = Duration::from_millis(200);

/// Longest wait for the VMs a VM waits for to be warm ([`Scenario::warm`]).
const WARM_TIMEOUT: Duration = Duration::from_secs(120);

/// What a VM whose job the run does not measure ([`Scenario::measured`]) is told when the
/// measured ones are done.
const STOPPED: &str = "stopped once the measured VMs were done";

/// Where the runs hand what they measured, as they go: so the outputs are written after each
/// run and an interrupted bench leaves what it measured.
pub trait Sink {
    /// Every VM's record and every run's summary so far, after each run.
    fn records(&mut self, records: &[Record], runs: &[RunTrace]) -> Result<(), String>;
    /// The host's ticks over one run of `memvisor host`, whose files are in `dir`.
    fn history(&self, dir: &Path, history: &[HostSample]) -> Result<(), String>;
}

/// What one QEMU VM's memory cgroup said, last seen before QEMU ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupSeen {
    /// `memory.limit_in_bytes`.
    pub limit: u64,
    /// The cgroup's highest usage (`memory.max_usage_in_bytes`).
    pub max_usage: u64,
    /// Times usage hit the limit.
    pub failcnt: u64,
    /// Processes the kernel's OOM killer killed in it.
    pub oom_kills: u64,
    /// The most of its memory in host swap at once.
    pub swap_peak: u64,
}

/// One VM of one run.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub config: String,
    pub scenario: Scenario,
    pub n: u32,
    /// The budget its run had; `None` for a configuration no budget holds.
    pub budget: Option<Budget>,
    pub pinned: bool,
    pub rep: u32,
    pub vm: u32,
    pub workload: &'static str,
    /// The guest's own time for the job; `None` if it did not finish.
    pub secs: Option<f64>,
    /// When the job ran, in seconds from the run's start: its end as the harness saw the done
    /// line, less the guest's own time.
    pub interval: Option<(f64, f64)>,
    pub ok: bool,
    pub note: String,
    /// A limited QEMU VM's cgroup.
    pub cgroup: Option<CgroupSeen>,
    /// A memvisor VM's longest fault among its last 16,384 (its pager's
    /// `fault_latency.max_us` when it ended), in microseconds.
    pub longest_fault_us: Option<u64>,
    /// The CPU time its VMM process used, by role.
    pub cpu: Option<CpuUse>,
}

/// One run as a whole.
#[derive(Clone, Debug, PartialEq)]
pub struct RunTrace {
    pub config: String,
    pub scenario: Scenario,
    pub n: u32,
    /// The budget, and what it came to in bytes; `None` for a configuration no budget holds.
    pub budget: Option<(Budget, u64)>,
    pub pinned: bool,
    pub rep: u32,
    /// From the first VM's start to the last one's end.
    pub wall_secs: f64,
    /// The fraction of the run during which all N jobs ran.
    pub overlap: Option<f64>,
    /// Each VMM process's PSS, every [`TICK`].
    pub memory: Vec<Sample>,
    /// Every VMM process's CPU time together, by role.
    pub cpu: CpuUse,
    /// The CPU seconds of `memvisor host` itself (0 for QEMU).
    pub host_cpu: f64,
    /// What the whole machine's CPUs did meanwhile (`None` without `/proc/stat`).
    pub machine: Option<MachineCpu>,
}

/// One run to do.
#[derive(Clone, Copy)]
struct RunCase {
    kind: Launch,
    scenario: Scenario,
    n: u32,
    pinned: Option<usize>,
    /// The budget in bytes; `None` for a configuration no budget holds.
    limit: Option<u64>,
    /// Between two VMs' starts.
    interval: Duration,
}

/// A configuration at one budget (`None`: one that no budget holds, run once).
type AtBudget<'a> = (&'a Config, Option<Budget>);

/// Every configuration at every budget of `s`, but each one that no budget holds once.
fn at_budgets(s: &ConsolidatePlan) -> Vec<AtBudget<'_>> {
    let mut out = Vec::new();
    for c in &s.configs {
        match bounded(c.launch) {
            true => out.extend(s.budgets.iter().map(|&b| (c, Some(b)))),
            false => out.push((c, None)),
        }
    }
    out
}

/// Makes the disk images `s`'s scenarios read, unless they are there.
fn make_disks(bench: &Bench, s: &ConsolidatePlan) -> Result<(), String> {
    let work = &bench.work;
    let (src, balance) = (work.join("src.img"), work.join("balance.img"));
    if s.scenarios.iter().any(|sc| !sc.own_disks()) {
        mkdisk_once(&bench.exe, &src, INPUT_MB + 16, &format!("src:{INPUT_MB}M"))?;
    }
    if s.scenarios.iter().any(|sc| sc.own_disks()) {
        mkdisk_once(&bench.exe, &balance, BALANCE_DISK_MB, BALANCE_FILES)?;
    }
    Ok(())
}

/// Measures the joint working set of every scenario and N of `s`: the VMs run once with no limit
/// (on QEMU, or memvisor's where the scenario says so: [`Scenario::sized_on`]), and the most
/// their processes held together (summed PSS) is what they need with nothing in their way, their
/// VMMs' own memory included.
pub fn size_working_sets(
    bench: &Bench,
    s: &ConsolidatePlan,
    sink: &mut dyn Sink,
) -> Result<Vec<(Scenario, u32, u64)>, String> {
    make_disks(bench, s)?;
    let mut out = Vec::new();
    for &scenario in &s.scenarios {
        for &n in &s.ns {
            let dir = bench
                .out
                .join("logs")
                .join(format!("size-{}-n{n}", scenario.name()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            fresh_disks(&bench.work, scenario, n)?;
            let case = RunCase {
                kind: sized_on(scenario),
                scenario,
                n,
                pinned: (n as usize <= s.cores).then_some(s.cores),
                limit: None,
                interval: s.interval,
            };
            let what = format!("{} with {n} VMs", scenario.name());
            let (vms, watch) = match case.kind {
                Launch::Host(_) => {
                    eprintln!("memvisor bench: measuring the joint working set of {what} (memvisor, no limit)");
                    run_host(&bench.exe, &case, &[], (&bench.work, &dir), sink)?
                }
                _ => {
                    eprintln!("memvisor bench: measuring the joint working set of {what} (QEMU, no limit)");
                    run_qemu(bench, s, &case, &bench.work, &dir)?
                }
            };
            if let Some((i, v)) = vms.iter().enumerate().find(|(_, v)| !v.ok) {
                let why = &v.note;
                return Err(format!(
                    "measuring the joint working set of {what}: vm{} did not finish ({why}); see {}",
                    i + 1,
                    dir.display()
                ));
            }
            let peak = memory_summary(&watch.memory, None).peak;
            eprintln!(
                "memvisor bench: the joint working set of {what}: {} MiB",
                peak >> 20
            );
            out.push((scenario, n, peak));
        }
    }
    Ok(out)
}

/// Runs every scenario, N and configuration, repetitions interleaved (the configurations
/// in `order::of_rep`'s order); hands the records to `sink` after each run. The disk images
/// are in the bench's `work` directory.
pub fn run(bench: &Bench, s: &ConsolidatePlan, sink: &mut dyn Sink) -> Result<(), String> {
    let work = &bench.work;
    make_disks(bench, s)?;
    let (mut records, mut traces) = (Vec::new(), Vec::new());
    let cells = |_| {
        let each = s
            .scenarios
            .iter()
            .map(|&sc| s.ns.iter().map(move |&n| (sc, n)));
        each.flatten().collect::<Vec<_>>()
    };
    let what = |&(sc, n): &(Scenario, u32), (c, b): &AtBudget| {
        let budget = b.map_or(String::new(), |b| format!(", budget {}", b.label()));
        format!("{} {} {n} VMs{budget}", c.name, sc.name())
    };
    interleave("consolidate", s.reps, cells, &at_budgets(s), what, |t| {
        let ((scenario, n), (config, budget), rep) = (*t.cell, *t.config, t.rep);
        let (name, kind) = (config.name.as_str(), config.launch);
        let pinned = (n as usize <= s.cores).then_some(s.cores);
        let bytes = |b| {
            let sc = scenario.name();
            let no = || format!("no joint working set measured for {sc} with {n} VMs");
            s.budget_bytes(scenario, n, b).ok_or_else(no)
        };
        let budget = budget.map(|b| bytes(b).map(|by| (b, by))).transpose()?;
        let limit = budget.map(|b| b.1);
        let plan = RunCase {
            kind,
            scenario,
            n,
            pinned,
            limit,
            interval: s.interval,
        };
        // A setting's quotes and spaces are left out of the directory's name.
        let safe = |c: char| c.is_ascii_alphanumeric() || "+=._-".contains(c);
        let tag = format!(
            "{}-{}-n{n}{}{}-rep{rep}",
            name.replace(|c| !safe(c), ""),
            scenario.name(),
            budget.map_or(String::new(), |b| format!(
                "-b{}",
                b.0.label().replace(' ', "")
            )),
            if pinned.is_some() { "-pinned" } else { "" }
        );
        let dir = bench.out.join("logs").join(&tag);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let got = fresh_disks(work, scenario, n).and_then(|()| match kind {
            Launch::Host(_) => run_host(&bench.exe, &plan, &config.host_set, (work, &dir), sink),
            Launch::QemuStatic | Launch::QemuNoLimit => run_qemu(bench, s, &plan, work, &dir),
        });
        let (vms, watch) = got.unwrap_or_else(|e| {
            let vms = (0..n)
                .map(|_| Outcome {
                    ok: false,
                    secs: None,
                    note: format!("the run failed: {e}"),
                    cgroup: None,
                    longest_fault_us: None,
                })
                .collect();
            (vms, FleetMonitor::new(plan.scenario, Vec::new(), None))
        });
        let mut intervals = Vec::new();
        let cpu_each = watch.cpu.each(vms.len());
        for (i, v) in vms.into_iter().enumerate() {
            let end = watch.ends.get(i).copied().flatten();
            let interval = v
                .secs
                .zip(end)
                .map(|(secs, end)| ((end - secs).max(0.0), end));
            intervals.push(interval);
            let vm = u32::try_from(i).unwrap_or(u32::MAX) + 1;
            records.push(Record {
                config: name.to_owned(),
                scenario,
                n,
                budget: budget.map(|b| b.0),
                pinned: pinned.is_some(),
                rep,
                vm,
                workload: job(scenario, vm).0,
                secs: v.secs,
                interval,
                ok: v.ok,
                note: v.note,
                cgroup: v.cgroup,
                longest_fault_us: v.longest_fault_us,
                cpu: cpu_each.get(i).copied(),
            });
        }
        let trace = RunTrace {
            config: name.to_owned(),
            scenario,
            n,
            budget,
            pinned: pinned.is_some(),
            rep,
            wall_secs: watch.t0.elapsed().as_secs_f64(),
            overlap: overlap_fraction(&intervals),
            memory: watch.memory,
            cpu: CpuUse::sum(&cpu_each),
            host_cpu: CpuUse::sum(&watch.host_cpu.each(1)).total(),
            machine: MachineCpu::now()
                .zip(watch.machine0)
                .map(|(now, then)| now.since(then)),
        };
        let all_at_once = |o: f64| format!("{:.0} % of the run", o * 100.0);
        let overlap = trace
            .overlap
            .map_or("? (a job did not finish)".into(), all_at_once);
        let jobs = match scenario.allocates() {
            true => String::new(),
            false => format!(", all {n} jobs at once for {overlap}"),
        };
        t.say(&format!("{tag}: {:.0} s{jobs}", trace.wall_secs));
        let mem = memory_summary(&trace.memory, limit);
        if let Some(limit) = limit.filter(|_| mem.over_samples > 0) {
            t.say(&format!(
                "{tag}: the VMMs' summed PSS was above the {} MiB budget for {:.1} s (peak {} MiB)",
                limit >> 20,
                mem.over_secs,
                mem.peak >> 20
            ));
        }
        traces.push(trace);
        sink.records(&records, &traces)?;
        Ok(Vec::<()>::new())
    })?;
    Ok(())
}

/// Makes `out` with `memvisor mkdisk data` (`size_mb`, `files`) unless it is there.
fn mkdisk_once(exe: &Path, out: &Path, size_mb: u64, files: &str) -> Result<(), String> {
    if out.exists() {
        return Ok(());
    }
    crate::harness::setup::mkdisk(exe, out, size_mb, Some(files))
}

/// In a scenario whose VMs have disks of their own, each of the `n` VMs gets a fresh copy of the
/// template, so every run starts from the same files (the last one's guests wrote to theirs).
fn fresh_disks(work: &Path, scenario: Scenario, n: u32) -> Result<(), String> {
    if !scenario.own_disks() {
        return Ok(());
    }
    let template = work.join("balance.img");
    for i in 1..=n {
        let to = own_disk(work, i);
        std::fs::copy(&template, &to).map_err(|e| format!("{}: {e}", to.display()))?;
    }
    Ok(())
}

/// How one VM ended.
struct Outcome {
    ok: bool,
    secs: Option<f64>,
    note: String,
    cgroup: Option<CgroupSeen>,
    longest_fault_us: Option<u64>,
}

/// What the harness sees of a run while it goes.
struct FleetMonitor {
    t0: Instant,
    scenario: Scenario,
    /// Each VM's console.
    logs: Vec<PathBuf>,
    /// When the harness first saw each VM's done line, in seconds from `t0`.
    ends: Vec<Option<f64>>,
    /// The line a VM of the scenario waits for the VMs started before it to print
    /// ([`Scenario::warm`]), and whether each VM has printed it.
    warm_line: Option<&'static str>,
    warm: Vec<bool>,
    /// Pin VMM k to CPU k mod this.
    pinned: Option<usize>,
    memory: Vec<Sample>,
    /// Each QEMU VM's cgroup and what it last said.
    cgroups: Vec<Option<(PathBuf, CgroupSeen)>>,
    /// The VMM processes' threads, charged to their VMs.
    cpu: CpuMeter,
    /// `memvisor host`, when it runs the VMs.
    host: Option<u32>,
    host_cpu: CpuMeter,
    /// The machine's CPU times at `t0`.
    machine0: Option<MachineCpu>,
}

impl FleetMonitor {
    fn new(scenario: Scenario, logs: Vec<PathBuf>, pinned: Option<usize>) -> FleetMonitor {
        let n = logs.len();
        let vms = 1..=u32::try_from(n).unwrap_or(u32::MAX);
        FleetMonitor {
            t0: Instant::now(),
            scenario,
            ends: vec![None; n],
            warm_line: vms.into_iter().find_map(|vm| scenario.warm(vm)),
            warm: vec![false; n],
            logs,
            pinned,
            memory: Vec::new(),
            cgroups: vec![None; n],
            cpu: CpuMeter::default(),
            host: None,
            host_cpu: CpuMeter::default(),
            machine0: MachineCpu::now(),
        }
    }

    /// One look: jobs that ended and VMs that are warm, each VMM's PSS and CPU time, pinning,
    /// cgroups. `vms` has
    /// each VM's process (`None` while it has none): its VMM, or for a jailed VMM the host's
    /// child that waits for it ([`readings::vmm_processes`]).
    fn tick(&mut self, vms: &[Option<u32>]) {
        let now = self.t0.elapsed().as_secs_f64();
        for (i, log) in self.logs.iter().enumerate() {
            if self.ends[i].is_some() {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(log) else {
                continue;
            };
            let vm = u32::try_from(i).unwrap_or(u32::MAX) + 1;
            let (workload, _) = job(self.scenario, vm);
            if text.contains(&format!("RESULT workload={workload} phase=done")) {
                self.ends[i] = Some(now);
            }
            if let Some(line) = self.warm_line {
                self.warm[i] |= text.contains(line);
            }
        }
        let mut each = vec![0; vms.len()];
        for (k, top) in vms.iter().enumerate() {
            for pid in top.map(readings::vmm_processes).unwrap_or_default() {
                let pss = memvisor_host::pss(&format!("/proc/{pid}/smaps_rollup"));
                each[k] += pss.unwrap_or(0);
                self.cpu.look(k, pid);
                if let Some(cores) = self.pinned {
                    readings::pin(pid, k % cores.max(1));
                }
            }
        }
        self.memory.push(Sample { t: now, each });
        if let Some(host) = self.host {
            self.host_cpu.look(0, host);
        }
        for (dir, seen) in self.cgroups.iter_mut().flatten() {
            if let Some(c) = readings::cgroup_state(dir) {
                seen.limit = c.limit;
                seen.max_usage = c.max_usage;
                seen.failcnt = c.failcnt;
                seen.oom_kills = c.oom_kills;
            }
            if let Some(swap) = readings::cgroup_swap(dir) {
                seen.swap_peak = seen.swap_peak.max(swap);
            }
        }
    }

    /// Before VM `vm` starts, waits until each VM of `started` has printed the line the
    /// scenario has it wait for ([`Scenario::warm`]), as [`Self::tick`] sees it every
    /// [`TICK`]; an error after [`WARM_TIMEOUT`].
    fn wait_warm(
        &mut self,
        vm: u32,
        started: &[u32],
        vms: &dyn Fn() -> Vec<Option<u32>>,
    ) -> Result<(), String> {
        let Some(line) = self.scenario.warm(vm) else {
            return Ok(());
        };
        let t = Instant::now();
        let cold = |warm: &[bool]| -> Vec<u32> {
            let cold = started.iter().filter(|&&i| !warm[i as usize - 1]);
            cold.copied().collect()
        };
        while !cold(&self.warm).is_empty() {
            if t.elapsed() > WARM_TIMEOUT {
                let cold: Vec<String> = cold(&self.warm).iter().map(|i| format!("vm{i}")).collect();
                return Err(format!(
                    "vm{vm} waits for its victims' page caches: {} printed no `{}` in {} s",
                    cold.join(", "),
                    line.trim(),
                    WARM_TIMEOUT.as_secs()
                ));
            }
            self.wait(TICK, vms);
        }
        Ok(())
    }

    /// Waits `d`, looking every [`TICK`].
    fn wait(&mut self, d: Duration, vms: &dyn Fn() -> Vec<Option<u32>>) {
        let t = Instant::now();
        while t.elapsed() < d {
            std::thread::sleep(TICK.min(d.saturating_sub(t.elapsed())));
            self.tick(&vms());
        }
    }
}

fn run_host(
    exe: &Path,
    plan: &RunCase,
    host_set: &[String],
    (work, dir): (&Path, &Path),
    sink: &dyn Sink,
) -> Result<(Vec<Outcome>, FleetMonitor), String> {
    let hd2 = matches!(plan.kind, Launch::Host(HostLaunch { hd2: Some(_), .. }));
    let budget = host_budget(plan.kind, plan.n, plan.limit.unwrap_or(0));
    let (host, sock) = start_host(exe, dir, budget, hd2, host_set)?;
    let host_pid = host.0.id();
    // Each VM's process, as the host lists it.
    let vmms = || {
        let listed = HostClient::new(&sock).vms().unwrap_or_default();
        let pid = |i: u32| {
            let name = format!("vm{i}");
            listed.iter().find(|v| v.name == name).and_then(|v| v.pid)
        };
        (1..=plan.n).map(pid).collect::<Vec<_>>()
    };
    let logs = (1..=plan.n)
        .map(|i| VmmFiles::new(&dir.join("state"), &format!("vm{i}")).log)
        .collect();
    let mut watch = FleetMonitor::new(plan.scenario, logs, plan.pinned);
    watch.host = Some(host_pid);
    let mut started = Vec::new();
    for i in plan.scenario.start_order(plan.n) {
        if !started.is_empty() {
            watch.wait(plan.interval, &vmms);
        }
        watch.wait_warm(i, &started, &vmms)?;
        let vm = spec(i, plan.kind, plan.scenario, &disk(plan.scenario, i, work));
        HostClient::new(&sock).add(&vm).map_err(|e| e.to_string())?;
        started.push(i);
    }
    let mut stopped = Vec::new();
    let vms = loop {
        let vms = HostClient::new(&sock).vms().map_err(|e| e.to_string())?;
        let exited = |v: &&HostVm| v.state == HostVmState::Exited;
        let vm_of = |v: &HostVm| v.name.strip_prefix("vm").and_then(|i| i.parse().ok());
        let measured = |v: &&HostVm| vm_of(v).is_some_and(|i| plan.scenario.measured(i));
        if stopped.is_empty() && vms.iter().filter(measured).all(|v| exited(&v)) {
            for v in vms.iter().filter(|v| !measured(v) && !exited(v)) {
                if HostClient::new(&sock).stop(&v.name).is_ok() {
                    stopped.push(v.name.clone());
                }
            }
        }
        if vms.iter().all(|v| exited(&v)) || watch.t0.elapsed() > RUN_TIMEOUT {
            break vms;
        }
        watch.wait(TICK, &vmms);
    };
    watch.tick(&[]);
    hand_history(&sock, dir, sink);
    drop(host);
    let mut out = Vec::new();
    for i in 1..=plan.n {
        let name = format!("vm{i}");
        let v: Option<&HostVm> = vms.iter().find(|v| v.name == name);
        let (workload, _) = job(plan.scenario, i);
        let files = VmmFiles::new(&dir.join("state"), &name);
        let secs = std::fs::read_to_string(&files.log)
            .ok()
            .and_then(|t| job_secs(&t, workload));
        let ok = v.is_some_and(|v| v.exit_status == Some(1)) && secs.is_some();
        let was_stopped = stopped.contains(&name);
        let note = match v {
            _ if ok => String::new(),
            _ if was_stopped => STOPPED.into(),
            Some(v) => v.why.clone().unwrap_or_else(|| format!("{:?}", v.state)),
            None => "the host does not list it".into(),
        };
        let stats = read_final_stats(&files.stats);
        out.push(Outcome {
            ok: ok || was_stopped,
            secs: secs.filter(|_| ok),
            note,
            cgroup: None,
            longest_fault_us: stats.and_then(|s| s.pager).map(|p| p.fault_latency.max_us),
        });
    }
    Ok((out, watch))
}

/// Starts `memvisor host` with `budget` and no VM (balancing by HyperDealer2 if `hd2`), its
/// files in `dir`; returns it with its socket once the socket is there.
fn start_host(
    exe: &Path,
    dir: &Path,
    budget: u64,
    hd2: bool,
    host_set: &[String],
) -> Result<(Reaped, PathBuf), String> {
    let (config, sock) = (dir.join("host.toml"), dir.join("state/host.sock"));
    let balancing = if hd2 { "hd2" } else { "balloon" };
    // The live page on a free loopback port: its address is in host.log.
    let text = format!("[host]\nmemory = {budget}\nswap = \"16G\"\nsample_period = \"5s\"\nstate_dir = \"state\"\nweb_addr = \"127.0.0.1:0\"\nbalancing = \"{balancing}\"\n");
    let text = host_set.iter().fold(text, |t, l| t + l + "\n");
    std::fs::write(&config, text).map_err(|e| e.to_string())?;
    let host = crate::harness::child::start_host(exe, &config, &dir.join("host.log"), &sock)?;
    Ok((host, sock))
}

/// Every tick of the run, each VM's allocation over time, handed to the sink for the run's
/// directory; a failure is said, not fatal.
fn hand_history(sock: &Path, dir: &Path, sink: &dyn Sink) {
    match HostClient::new(sock).history(0.0) {
        Ok(history) => {
            if let Err(e) = sink.history(dir, &history) {
                eprintln!(
                    "memvisor bench: allocation over time in {}: {e}",
                    dir.display()
                );
            }
        }
        Err(e) => eprintln!("memvisor bench: the host's history: {e}"),
    }
}

/// The QEMU process of each of `launchers` (each `memvisor run --hypervisor qemu`, `None` for a
/// VM not started yet), in VM order.
fn qemus(launchers: &[Option<u32>]) -> Vec<Option<u32>> {
    let qemu = |l: &Option<u32>| l.and_then(|l| readings::child_named(l, "qemu"));
    launchers.iter().map(qemu).collect()
}

fn run_qemu(
    bench: &Bench,
    s: &ConsolidatePlan,
    plan: &RunCase,
    work: &Path,
    dir: &Path,
) -> Result<(Vec<Outcome>, FleetMonitor), String> {
    let limited = plan.kind == Launch::QemuStatic;
    let share = qemu_share(plan.limit.unwrap_or(u64::MAX), plan.n, MEM, s.qemu_overhead);
    let n = plan.n as usize;
    let logs = (1..=plan.n)
        .map(|i| dir.join(format!("vm{i}.log")))
        .collect();
    let mut watch = FleetMonitor::new(plan.scenario, logs, plan.pinned);
    // Each VM's launcher and its pid, at the VM's index (VM i at i - 1), once started.
    let mut vms: Vec<Option<Reaped>> = (0..n).map(|_| None).collect();
    let mut pids: Vec<Option<u32>> = vec![None; n];
    let mut started = Vec::new();
    for i in plan.scenario.start_order(plan.n) {
        let k = i as usize - 1;
        let p = pids.clone();
        if !started.is_empty() {
            watch.wait(plan.interval, &|| qemus(&p));
        }
        watch.wait_warm(i, &started, &|| qemus(&p))?;
        started.push(i);
        let (workload, cmdline) = job(plan.scenario, i);
        let log =
            std::fs::File::create(dir.join(format!("vm{i}.log"))).map_err(|e| e.to_string())?;
        let qmp = dir.join(format!("vm{i}.qmp"));
        let mut cmd = Command::new(&bench.exe);
        cmd.args(["run", "--hypervisor", "qemu", "--mem", &MEM.to_string()]);
        if limited {
            // The cgroup's limit: the guest's share, plus QEMU's measured overhead (which the
            // share already left room for in the budget), plus the launcher's RSS and 16 MiB
            // slack (`memvisor run`'s host limit).
            cmd.args(["--balloon", "--mem-limit", &share.to_string()])
                .env("MEMVISOR_QEMU_OVERHEAD", s.qemu_overhead.to_string())
                .arg("--qmp-sock")
                .arg(&qmp);
        }
        let child = cmd
            .arg("--disk")
            .arg(disk(plan.scenario, i, work))
            .args(["--workload", workload, "--cmdline", cmdline])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start QEMU: {e}"))?;
        let pid = child.id();
        crate::harness::teardown::track_pid(pid);
        vms[k] = Some(Reaped(child));
        pids[k] = Some(pid);
        if limited {
            let cg = readings::run_cgroup(pid);
            crate::harness::teardown::track_cgroup(cg.clone());
            watch.cgroups[k] = Some((cg, CgroupSeen::default()));
        }
        if limited && share < MEM {
            let t = Instant::now();
            while !qmp.exists() && t.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(5));
            }
            // QEMU creates its QMP socket before it listens on it: retry while it refuses.
            let t = Instant::now();
            loop {
                match crate::harness::qmp::set_balloon(&qmp, share) {
                    Ok(()) => break,
                    Err(e) if t.elapsed() > Duration::from_secs(10) => {
                        return Err(format!("setting vm{i}'s balloon: {e}"))
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
    }
    let mut status = vec![None; n];
    let mut stopped = vec![false; n];
    let measured = |k: usize| {
        plan.scenario
            .measured(u32::try_from(k).unwrap_or(u32::MAX) + 1)
    };
    loop {
        for (st, vm) in status.iter_mut().zip(vms.iter_mut()) {
            if let (None, Some(vm)) = (&st, vm) {
                *st = vm.0.try_wait().ok().flatten();
            }
        }
        if (0..n).filter(|&k| measured(k)).all(|k| status[k].is_some()) {
            let running: Vec<usize> = (0..n).filter(|&k| status[k].is_none()).collect();
            for k in running.into_iter().filter(|&k| !measured(k)) {
                if let Some(vm) = vms[k].as_mut() {
                    // The launcher stops QEMU and removes its cgroup.
                    status[k] = child::stop(&mut vm.0, Duration::from_secs(10)).status;
                    stopped[k] = true;
                }
            }
        }
        if status.iter().all(Option::is_some) || watch.t0.elapsed() > RUN_TIMEOUT {
            break;
        }
        let p = pids.clone();
        watch.wait(TICK, &|| qemus(&p));
    }
    watch.tick(&[]);
    let mut out = Vec::new();
    for (k, st) in status.into_iter().enumerate() {
        let vm = u32::try_from(k).unwrap_or(u32::MAX) + 1;
        let (workload, _) = job(plan.scenario, vm);
        let log = std::fs::read_to_string(dir.join(format!("vm{vm}.log"))).unwrap_or_default();
        let secs = job_secs(&log, workload);
        let mut cgroup = watch.cgroups[k].as_ref().map(|c| c.1);
        // The cgroup goes with its launcher, often before a sample saw the kill: the launcher
        // says so in the log.
        if let Some(c) = cgroup.as_mut() {
            if log.contains(memvisor_api::exit::QEMU_OOM_KILLED) {
                c.oom_kills = c.oom_kills.max(1);
            }
        }
        let (ok, note) = match (st, secs) {
            _ if stopped[k] => (true, STOPPED.to_owned()),
            (Some(st), Some(_)) if st.code() == Some(1) => (true, String::new()),
            (Some(st), _) => (false, format!("exited with {st}")),
            (None, _) => (false, "timed out".into()),
        };
        let note = match cgroup {
            Some(c) if c.oom_kills > 0 => format!("{note} (cgroup OOM kills: {})", c.oom_kills),
            _ => note,
        };
        out.push(Outcome {
            ok,
            secs: secs.filter(|_| ok && !stopped[k]),
            note,
            cgroup,
            longest_fault_us: None,
        });
    }
    drop(vms);
    Ok((out, watch))
}
