//! `memvisor bench shares` and `memvisor bench idletax`: ESX's allocation policy (Waldspurger,
//! OSDI 2002, §5.1 share-based allocation, §5.2 the idle memory tax and Fig. 7) measured on a
//! running `memvisor host`. There is no QEMU peer: QEMU has no share-based allocator, so these
//! report how close the allocations come to what the paper says, not a ratio against QEMU.
//!
//! How a run goes:
//! 1. Write a host config (`[host]` and the VMs that start at once) into a state directory.
//! 2. Start `memvisor host` on it; add the VMs that join later (`POST /vms`) and change the
//!    idle tax (`PATCH /host`) when the experiment says.
//! 3. Every tick, read the host's `GET /history` (free memory and state; each VM's target,
//!    resident, active, balloon, swapped and limit) and the new lines of each VM's console
//!    (throughput: `kv: t=Ns ops_s=N` lines and `toucher` steps).
//! 4. Stop the host (SIGTERM: every VM stops), read its events, and write `results.csv`,
//!    `report.md` and `EXPERIMENT.svg` (`hostreport`).

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use memvisor_api::{HostEvent, HostSample, HostUpdate, VmSpec};

use crate::experiments::Scale;
use crate::output::host::{self as hostreport, Kind, Run, Throughput};
use crate::run::{host, teardown};
use crate::{BenchArgs, Outcome};

/// The host experiments.
pub const NAMES: &[&str] = &["shares", "idletax"];

/// How often the host's history and the VMs' consoles are read.
const POLL: Duration = Duration::from_millis(500);
/// How long the host gets to stop its VMs before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(40);

/// One VM of an experiment and when it joins the host.
#[derive(Clone, Debug)]
pub struct PlannedVm {
    pub spec: VmSpec,
    /// Seconds after the host starts; 0: in the config file.
    pub at: f64,
}

/// A host experiment.
#[derive(Clone, Debug)]
pub struct HostExperiment {
    pub name: &'static str,
    pub about: &'static str,
    /// The host's budget in bytes.
    pub memory: u64,
    /// The idle tax the host starts with.
    pub idle_tax: f64,
    pub sample_pages: u32,
    pub sample_period: Duration,
    pub tick: Duration,
    pub vms: Vec<PlannedVm>,
    /// `(seconds after the host starts, new idle tax)`.
    pub tax_changes: Vec<(f64, f64)>,
    /// Seconds from the host's start to its stop.
    pub duration: f64,
    pub kind: Kind,
    /// Why the configuration is what it is, one line each, for the report.
    pub why: Vec<String>,
}

fn vm(name: &str, mem_mb: u64, shares: u64, workload: &str, cmdline: String) -> VmSpec {
    VmSpec {
        name: name.into(),
        mem: mem_mb << 20,
        min: 0,
        shares,
        vcpus: 1,
        workload: Some(workload.into()),
        kernel: None,
        cmdline,
        disks: Vec::new(),
        balloon: false,
        mapper: false,
        preventer: false,
        tesseract: false,
        tesseract_max: None,
        tesseract_sync: None,
        tesseract_defrag: None,
        victim_cache: 0,
        victims: None,
        pager: None,
    }
}

/// The budget that leaves `usable` bytes to divide among `n` VMs: targets divide the budget
/// minus each VMM's overhead and the high state's 6 % reserve.
fn budget_for(usable_mb: u64, n: u64) -> u64 {
    let overhead = memvisor_host::config::DEFAULT_VM_OVERHEAD >> 20;
    // budget - n * overhead - 0.06 * budget = usable
    ((usable_mb + n * overhead) * 100).div_ceil(94) << 20
}

/// The experiment called `name` at `scale`.
pub fn find(name: &str, scale: Scale) -> Option<HostExperiment> {
    let tiny = scale == Scale::Tiny;
    Some(match name {
        // ESX §5.1: two VMs that both want more than they can get, shares 2:1. The smaller one
        // starts alone and takes all it wants; the one with twice the shares joins later, and
        // memory must move to it.
        "shares" => {
            let (mem, ws, usable, join, duration, period) = if tiny {
                (128, 120, 150, 10u32, 60u32, 2)
            } else {
                (512, 480, 600, 30, 240, 5)
            };
            // One long toucher run in steps, so each step's RESULT line gives a touch rate.
            let steps = |secs: u32| {
                let n = (duration / secs + 2).min(32);
                let s: Vec<String> = (0..n).map(|_| format!("{ws}:{secs}")).collect();
                format!("schedule={}", s.join(","))
            };
            HostExperiment {
                name: "shares",
                about: "ESX §5.1: two VMs that both touch more memory than the host can give them, with shares 2:1, should get allocations in the ratio 2:1",
                memory: budget_for(usable, 2),
                idle_tax: 0.75,
                sample_pages: 100,
                sample_period: Duration::from_secs(period),
                tick: Duration::from_millis(500),
                vms: vec![
                    PlannedVm {
                        spec: vm("small", mem, 1000, "toucher", steps(10)),
                        at: 0.0,
                    },
                    PlannedVm {
                        spec: vm("big", mem, 2000, "toucher", steps(10)),
                        at: f64::from(join),
                    },
                ],
                tax_changes: Vec::new(),
                duration: f64::from(duration),
                kind: Kind::Shares {
                    big: "big",
                    small: "small",
                    ratio: 2.0,
                },
                why: vec![
                    format!("two {mem} MiB guests each sweep a {ws} MiB working set for the whole run (`toucher`), so both always want more than they get: {usable} MiB are left for the two after overheads and the 6 % reserve, 2/3 of it is {} MiB and 1/3 is {} MiB", usable * 2 / 3, usable / 3),
                    format!("`small` (1000 shares) starts alone and takes all it wants; `big` (2000 shares) joins {join} s later, so the run shows memory moving to a VM with more shares, and the time it takes"),
                    "the idle tax stays at ESX's default 0.75: both VMs are fully active, so it does not change their targets, as long as the sampled estimates stay near 1".into(),
                    "no balloon: the guest kit has no swap disk here, so a balloon could only take its free pages, and the toucher keeps none free; the pager's limit enforces every target (what ESX does when ballooning is not possible)".into(),
                    format!("sampling: 100 pages per period as in ESX, a period of {period} s of guest time (ESX: 30 s): long enough that a VM sweeping {ws} MiB while it waits for its faults touches all of it within a period several times (measured alone: one sweep in about 1.2 s of guest time, 11 s of wall-clock time, with 200 MiB resident), so its estimate stays near 1; with the idle tax at 0.75 an estimate of 0.96 costs a VM 12 % of its allocation, and 2 s periods let it dip that far; ticks every 500 ms"),
                ],
            }
        }
        // ESX §5.2, Fig. 7: equal shares, one VM idle after touching its memory at boot, one
        // busy; the tax at 0, then 0.75.
        "idletax" => {
            let (mem, idle_mb, records, usable, join, switch, duration) = if tiny {
                (128, 96, 60_000u64, 140, 10u32, 40u32, 70u32)
            } else {
                (256, 200, 120_000, 300, 20, 170, 320)
            };
            HostExperiment {
                name: "idletax",
                about: "ESX §5.2 / Fig. 7: two VMs with equal shares, one idle after touching its memory at boot, one running a memory-hungry workload; with the idle tax at 0 both get the same allocation, at 0.75 the idle VM's memory moves to the busy one, which speeds up",
                memory: budget_for(usable, 2),
                idle_tax: 0.0,
                sample_pages: 100,
                sample_period: Duration::from_secs(2),
                tick: Duration::from_millis(500),
                vms: vec![
                    PlannedVm {
                        spec: vm(
                            "idle",
                            mem,
                            1000,
                            "toucher",
                            format!("schedule={idle_mb}:5,1:86400"),
                        ),
                        at: 0.0,
                    },
                    PlannedVm {
                        spec: vm(
                            "busy",
                            mem,
                            1000,
                            "kv",
                            format!("records={records} mix=b secs={duration}"),
                        ),
                        at: f64::from(join),
                    },
                ],
                tax_changes: vec![(f64::from(switch), 0.75)],
                duration: f64::from(duration),
                kind: Kind::IdleTax {
                    idle: "idle",
                    busy: "busy",
                    switch: f64::from(switch),
                },
                why: vec![
                    format!("two {mem} MiB guests with equal shares, {usable} MiB left for them after overheads and the 6 % reserve (the paper: two 256 MB VMs, about 360 MB for VMs): the busy VM's working set has to be larger than its untaxed half and fit in what the tax gives it"),
                    format!("`idle` touches {idle_mb} MiB in its first 5 s (as the paper's Windows VM zeroed its memory at boot) and then only 1 MiB (`toucher schedule={idle_mb}:5,1:86400`)"),
                    format!("`busy` joins at {join} s and runs `kv records={records} mix=b` (YCSB B, scrambled zipfian keys, 95 % reads): its table touches about {} MiB, of which it keeps using about 185–205 MiB (the scrambled keys never pick about a third of the records), more than half of the memory left; its throughput (printed every second) falls steeply when the host keeps less of that resident", (records * 2 * 1024 * 87 / 100) >> 20),
                    format!("the tax is 0 until {switch} s and 0.75 after (`PATCH /host`), in the same run, as in the paper"),
                    "no balloon: the idle guest's touched pages belong to its toucher task and the guest kit has no swap disk here, so the balloon could not take them; the pager's limit reclaims them (random victims)".into(),
                    "sampling: 100 pages per period as in ESX, a period of 2 s of guest time (ESX: 30 s) so the idle VM's estimate falls within the run; ticks every 500 ms".into(),
                ],
            }
        }
        _ => return None,
    })
}

/// The config file's text for the VMs that start with the host.
pub fn config_text(e: &HostExperiment, state_dir: &Path) -> String {
    let mut s = format!(
        "[host]\nmemory = {}\nidle_tax = {}\nsample_pages = {}\nsample_period = \"{}ms\"\ntick = \"{}ms\"\nstate_dir = \"{}\"\n",
        e.memory,
        e.idle_tax,
        e.sample_pages,
        e.sample_period.as_millis(),
        e.tick.as_millis(),
        state_dir.display()
    );
    for v in e.vms.iter().filter(|v| v.at <= 0.0) {
        s.push_str(&format!(
            "\n[[vm]]\nname = \"{}\"\nmem = {}\nshares = {}\nworkload = \"{}\"\ncmdline = \"{}\"\n",
            v.spec.name,
            v.spec.mem,
            v.spec.shares,
            v.spec.workload.as_deref().unwrap_or("boot"),
            v.spec.cmdline
        ));
    }
    s
}

/// A throughput line of a VM's console: `kv: t=Ns ops_s=N`, or a toucher step's RESULT line
/// (touches per second over the step).
pub fn throughput_of(line: &str) -> Option<f64> {
    let words = || line.split_whitespace().filter_map(|w| w.split_once('='));
    if line.starts_with("kv: t=") {
        return words().find(|(k, _)| *k == "ops_s")?.1.parse().ok();
    }
    if line.starts_with("RESULT workload=toucher phase=step") {
        let touches: f64 = words().find(|(k, _)| *k == "touches")?.1.parse().ok()?;
        let ms: f64 = words().find(|(k, _)| *k == "ms")?.1.parse().ok()?;
        return (ms > 0.0).then(|| touches / ms * 1000.0);
    }
    None
}

/// The new complete lines of a growing file.
struct Tail {
    path: PathBuf,
    offset: u64,
    partial: String,
}

impl Tail {
    fn new(path: PathBuf) -> Tail {
        Tail {
            path,
            offset: 0,
            partial: String::new(),
        }
    }

    fn lines(&mut self) -> Vec<String> {
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return Vec::new();
        };
        if f.seek(SeekFrom::Start(self.offset)).is_err() {
            return Vec::new();
        }
        let mut buf = Vec::new();
        if f.read_to_end(&mut buf).is_err() {
            return Vec::new();
        }
        self.offset += buf.len() as u64;
        self.partial.push_str(&String::from_utf8_lossy(&buf));
        let mut out: Vec<String> = self.partial.split('\n').map(str::to_owned).collect();
        self.partial = out.pop().unwrap_or_default();
        out
    }
}

fn host_get<T: serde::de::DeserializeOwned>(sock: &Path, path: &str) -> Result<T, String> {
    match memvisor_api::call(sock, "GET", path, None) {
        Ok((200, body)) => serde_json::from_str(&body)
            .map_err(|e| format!("GET {path}: not the host's schema: {e}")),
        Ok((code, body)) => Err(format!("GET {path}: {code} {body}")),
        Err(e) => Err(format!("GET {path}: {e}")),
    }
}

fn host_send(sock: &Path, method: &str, path: &str, body: &str) -> Result<(), String> {
    match memvisor_api::call(sock, method, path, Some(body)) {
        Ok((200, _)) => Ok(()),
        Ok((code, answer)) => Err(format!("{method} {path} {body}: {code} {answer}")),
        Err(e) => Err(format!("{method} {path} {body}: {e}")),
    }
}

/// Stops the host with SIGTERM (it stops every VM), killing it if it has not ended in time.
fn stop_host(child: &mut Child) {
    teardown::signal(child.id(), libc::SIGTERM);
    let deadline = Instant::now() + STOP_GRACE;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            teardown::forget_pid(child.id());
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("memvisor bench: the host did not stop within {STOP_GRACE:?}; killed");
    let _ = child.kill();
    let _ = child.wait();
    teardown::forget_pid(child.id());
}

/// One run of `e`: the host's history, events and the VMs' throughput.
fn run_once(exe: &Path, e: &HostExperiment, out: &Path, label: &str) -> Result<Run, String> {
    let state = std::env::temp_dir().join(format!("memvisor-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    std::fs::create_dir_all(&state).map_err(|err| format!("{}: {err}", state.display()))?;
    let config = state.join("host.toml");
    std::fs::write(&config, config_text(e, &state))
        .map_err(|err| format!("{}: {err}", config.display()))?;
    let sock = state.join("host.sock");
    let host_log = out.join("logs").join("host.log");
    let log =
        std::fs::File::create(&host_log).map_err(|err| format!("{}: {err}", host_log.display()))?;
    let mut child = Command::new(exe)
        .args(["host", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|err| err.to_string())?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .map_err(|err| format!("cannot start memvisor host: {err}"))?;
    teardown::track_pid(child.id());
    let started = Instant::now();
    let result = drive(e, &sock, &state, &mut child, started, label);
    stop_host(&mut child);
    for v in &e.vms {
        let from = state.join(format!("{}.log", v.spec.name));
        let to = out.join("logs").join(format!("{}.console", v.spec.name));
        let _ = std::fs::copy(&from, &to);
    }
    let _ = std::fs::remove_dir_all(&state);
    result
}

/// Runs the experiment's timeline against a started host until its end (or Ctrl-C).
fn drive(
    e: &HostExperiment,
    sock: &Path,
    state: &Path,
    child: &mut Child,
    started: Instant,
    label: &str,
) -> Result<Run, String> {
    let now = || started.elapsed().as_secs_f64();
    while !sock.exists() {
        if now() > 20.0 {
            return Err(format!(
                "the host did not open {} within 20 s",
                sock.display()
            ));
        }
        if let Ok(Some(st)) = child.try_wait() {
            return Err(format!(
                "memvisor host ended at once ({st}); see logs/host.log"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut run = Run {
        samples: Vec::new(),
        events: Vec::new(),
        throughput: Vec::new(),
        taxes: vec![(0.0, e.idle_tax)],
        joined: Vec::new(),
        notes: Vec::new(),
    };
    for v in e.vms.iter().filter(|v| v.at <= 0.0) {
        run.joined.push((v.spec.name.clone(), 0.0));
    }
    let mut tails: Vec<(String, Tail)> = e
        .vms
        .iter()
        .map(|v| {
            (
                v.spec.name.clone(),
                Tail::new(state.join(format!("{}.log", v.spec.name))),
            )
        })
        .collect();
    let mut pending_vms: Vec<&PlannedVm> = e.vms.iter().filter(|v| v.at > 0.0).collect();
    let mut pending_tax: Vec<(f64, f64)> = e.tax_changes.clone();
    let mut since = -1.0f64;
    let mut next_progress = 10.0;
    loop {
        let t = now();
        if t >= e.duration || teardown::interrupted() {
            break;
        }
        if let Ok(Some(st)) = child.try_wait() {
            run.notes
                .push(format!("the host ended on its own at {t:.1} s ({st})"));
            break;
        }
        pending_vms.retain(|v| {
            if t < v.at {
                return true;
            }
            let body = serde_json::to_string(&v.spec).unwrap_or_default();
            match host_send(sock, "POST", "/vms", &body) {
                Ok(()) => run.joined.push((v.spec.name.clone(), now())),
                Err(err) => run
                    .notes
                    .push(format!("adding {} failed: {err}", v.spec.name)),
            }
            false
        });
        pending_tax.retain(|&(at, tax)| {
            if t < at {
                return true;
            }
            let body = serde_json::to_string(&HostUpdate {
                idle_tax: Some(tax),
            })
            .unwrap_or_default();
            match host_send(sock, "PATCH", "/host", &body) {
                Ok(()) => run.taxes.push((now(), tax)),
                Err(err) => run
                    .notes
                    .push(format!("setting the idle tax failed: {err}")),
            }
            false
        });
        match host_get::<Vec<HostSample>>(sock, &format!("/history?since={since}")) {
            Ok(new) => {
                if let Some(last) = new.last() {
                    since = last.seconds;
                }
                run.samples.extend(new);
            }
            Err(err) => tracing::debug!("{err}"),
        }
        let read_at = now();
        for (name, tail) in &mut tails {
            for line in tail.lines() {
                if let Some(rate) = throughput_of(line.trim()) {
                    run.throughput.push(Throughput {
                        seconds: read_at,
                        vm: name.clone(),
                        rate,
                    });
                }
            }
        }
        if t >= next_progress {
            next_progress += 10.0;
            eprintln!("{label} {}", progress(&run, e.duration));
        }
        std::thread::sleep(POLL);
    }
    if let Ok(new) = host_get::<Vec<HostSample>>(sock, &format!("/history?since={since}")) {
        run.samples.extend(new);
    }
    match host_get::<Vec<HostEvent>>(sock, "/events") {
        Ok(ev) => run.events = ev,
        Err(err) => run
            .notes
            .push(format!("the host's events could not be read: {err}")),
    }
    Ok(run)
}

/// A progress line: each VM's allocation and target, and the free state.
fn progress(run: &Run, duration: f64) -> String {
    let Some(s) = run.samples.last() else {
        return "no tick yet".into();
    };
    let vms: Vec<String> = s
        .vms
        .iter()
        .map(|v| {
            format!(
                "{} {} MiB (target {}, active {:.0} %)",
                v.name,
                v.resident_bytes >> 20,
                v.target_bytes >> 20,
                hostreport::active_fraction(v) * 100.0
            )
        })
        .collect();
    format!(
        "{:.0}/{duration:.0} s: {}; free {} MiB, {:?}",
        s.seconds,
        vms.join(", "),
        s.free_bytes >> 20,
        s.free_state
    )
}

/// The flags of `memvisor bench` that do not apply to a host experiment.
fn check_flags(a: &BenchArgs) -> Result<(), String> {
    if !a.configs.is_empty() || a.reference.is_some() {
        return Err(format!(
            "{} runs memvisor host only (QEMU has no share-based allocator): --configs and --reference do not apply",
            a.experiment
        ));
    }
    if a.reps == Some(0) {
        return Err("--reps 0: give at least one repetition".into());
    }
    Ok(())
}

/// `memvisor bench shares|idletax`.
pub fn run(a: &BenchArgs) -> Outcome {
    let Some(e) = find(&a.experiment, a.scale) else {
        eprintln!("memvisor bench: unknown experiment '{}'", a.experiment);
        return Outcome::BadInput;
    };
    if let Err(m) = check_flags(a) {
        eprintln!("memvisor bench: {m}");
        return Outcome::BadInput;
    }
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| Path::new("bench-out").join(e.name));
    if let Err(err) = std::fs::create_dir_all(out.join("logs"))
        .and_then(|()| std::fs::write(out.join(".write-test"), b""))
        .and_then(|()| std::fs::remove_file(out.join(".write-test")))
    {
        eprintln!(
            "memvisor bench: --out {}: cannot write there ({err}); give a writable directory",
            out.display()
        );
        return Outcome::BadInput;
    }
    teardown::catch_signals();
    let guard = teardown::Guard;
    let outcome = bench(a, &e, &out);
    drop(guard);
    match outcome {
        Ok(()) if teardown::interrupted() => {
            eprintln!("memvisor bench: interrupted; partial results written, host cleaned up");
            Outcome::Interrupted
        }
        Ok(()) => Outcome::Done,
        Err(err) => {
            eprintln!("memvisor bench: {err}");
            Outcome::Failed
        }
    }
}

fn bench(a: &BenchArgs, e: &HostExperiment, out: &Path) -> Result<(), String> {
    let exe =
        std::env::current_exe().map_err(|err| format!("cannot find memvisor itself: {err}"))?;
    // Held until the end: another benchmark on the same machine would skew this one.
    let _only_bench = teardown::lock(&a.swap_file)?;
    let env = host::environment(out, "qemu-system-x86_64");
    let reps = a.reps.unwrap_or(1);
    let mut runs = Vec::new();
    for rep in 1..=reps {
        if teardown::interrupted() {
            break;
        }
        let label = format!("[{} rep {rep}/{reps}]", e.name);
        eprintln!(
            "{label} starting memvisor host: budget {} MiB, {:.0} s",
            e.memory >> 20,
            e.duration
        );
        let rep_out = if reps == 1 {
            out.to_owned()
        } else {
            out.join(format!("rep{rep}"))
        };
        std::fs::create_dir_all(rep_out.join("logs"))
            .map_err(|err| format!("{}: {err}", rep_out.display()))?;
        let run = run_once(&exe, e, &rep_out, &label)?;
        eprintln!("{label} done: {}", hostreport::headline(e, &run));
        runs.push(run);
    }
    let csv = out.join("results.csv");
    std::fs::write(&csv, hostreport::csv(e, &runs))
        .map_err(|err| format!("{}: {err}", csv.display()))?;
    let md = hostreport::markdown(e, &runs, &env);
    let md_path = out.join("report.md");
    std::fs::write(&md_path, &md).map_err(|err| format!("{}: {err}", md_path.display()))?;
    let svg = out.join(format!("{}.svg", e.name));
    if let Some(first) = runs.first() {
        if let Err(err) = hostreport::plot(&svg, e, first) {
            eprintln!("memvisor bench: cannot draw {}: {err}", svg.display());
        }
    }
    println!("{md}");
    eprintln!(
        "memvisor bench: wrote {}, {} and {}",
        csv.display(),
        md_path.display(),
        svg.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_host_experiment_is_consistent() {
        for name in NAMES {
            for scale in [Scale::Full, Scale::Tiny] {
                let e = find(name, scale).unwrap();
                assert_eq!(e.name, *name);
                let names: Vec<&str> = e.vms.iter().map(|v| v.spec.name.as_str()).collect();
                match e.kind {
                    Kind::Shares { big, small, ratio } => {
                        assert!(names.contains(&big) && names.contains(&small));
                        let s = |n: &str| e.vms.iter().find(|v| v.spec.name == n).unwrap();
                        #[allow(clippy::cast_precision_loss)]
                        let r = s(big).spec.shares as f64 / s(small).spec.shares as f64;
                        assert!((r - ratio).abs() < 1e-9);
                        // Both want more than the budget can give them together.
                        let usable = e.memory - 2 * (24 << 20) - e.memory * 6 / 100;
                        assert!(e.vms.iter().all(|v| v.spec.mem > usable / 2));
                    }
                    Kind::IdleTax { idle, busy, switch } => {
                        assert!(names.contains(&idle) && names.contains(&busy));
                        assert_eq!(e.idle_tax, 0.0);
                        assert_eq!(e.tax_changes, vec![(switch, 0.75)]);
                        assert!(e.vms.iter().all(|v| v.at < switch) && switch < e.duration);
                        assert!(e.vms[0].spec.shares == e.vms[1].spec.shares);
                    }
                }
                for v in &e.vms {
                    v.spec.check().unwrap();
                    assert!(v.at < e.duration);
                }
                // The config the host reads parses, with the VMs that start at once.
                let dir = Path::new("/tmp/state");
                let text = config_text(&e, dir);
                let c =
                    memvisor_host::HostConfig::parse(Path::new("/tmp/host.toml"), &text).unwrap();
                assert_eq!(c.memory, e.memory);
                assert_eq!(c.idle_tax, e.idle_tax);
                assert_eq!(c.sample_period, e.sample_period);
                assert_eq!(c.tick, e.tick);
                assert_eq!(c.state_dir, dir);
                let at_start: Vec<&VmSpec> = e
                    .vms
                    .iter()
                    .filter(|v| v.at <= 0.0)
                    .map(|v| &v.spec)
                    .collect();
                assert_eq!(c.vms.len(), at_start.len());
                for (got, want) in c.vms.iter().zip(at_start) {
                    assert_eq!(got, want);
                }
            }
        }
        assert!(find("seqread", Scale::Full).is_none());
    }

    #[test]
    fn the_budget_leaves_what_the_targets_divide() {
        let b = budget_for(360, 2);
        let usable = (b >> 20) - 48 - (b >> 20) * 6 / 100;
        assert!((359..=361).contains(&usable), "{b} {usable}");
    }

    #[test]
    fn throughput_lines() {
        assert_eq!(throughput_of("kv: t=3s ops_s=812345"), Some(812_345.0));
        assert_eq!(
            throughput_of("RESULT workload=toucher phase=step2 ws_mb=480 secs=10 ms=10000.5 touches=2000100 pgfault=1"),
            Some(2_000_100.0 / 10_000.5 * 1000.0)
        );
        assert_eq!(
            throughput_of("RESULT workload=toucher phase=done ok=1 ms=3"),
            None
        );
        assert_eq!(throughput_of("kv: t=3s ops_s=many"), None);
        assert_eq!(
            throughput_of("RESULT workload=toucher phase=step1 ms=0 touches=5"),
            None
        );
        assert_eq!(throughput_of("memvisor guest kit: booting"), None);
    }

    #[test]
    fn a_tail_returns_whole_lines_once() {
        let dir = std::env::temp_dir().join(format!("memvisor-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("log");
        std::fs::write(&p, "one\ntw").unwrap();
        let mut t = Tail::new(p.clone());
        assert_eq!(t.lines(), vec!["one"]);
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        std::io::Write::write_all(&mut f, b"o\nthree\n").unwrap();
        assert_eq!(t.lines(), vec!["two", "three"]);
        assert!(t.lines().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
