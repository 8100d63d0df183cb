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
//! 4. Stop the host (SIGTERM: every VM stops) and read its events: a [`HostRun`], from which
//!    the family's `report` writes `results.csv`, `report.md` and `EXPERIMENT.svg`.
//!
//! The experiments themselves, as data, are in `experiment`, `shares` and `idletax`.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use memvisor_api::{HostClient, HostEvent, HostSample, HostUpdate, VmSample};
use memvisor_host::VmmFiles;

use super::experiment::{config_text, HostExperiment, PlannedVm};
use crate::harness::child::start_host;
use crate::harness::guest::value;
use crate::harness::teardown;

/// How often the host's history and the VMs' consoles are read.
const POLL: Duration = Duration::from_millis(500);

/// One throughput reading of a VM: operations (or touches) per second, when the harness read it.
#[derive(Clone, Debug, PartialEq)]
pub struct Throughput {
    pub seconds: f64,
    pub vm: String,
    pub rate: f64,
}

/// Everything one run measured. Times are seconds since the host started.
#[derive(Clone, Debug, Default)]
pub struct HostRun {
    /// The host's ticks (`GET /history`).
    pub samples: Vec<HostSample>,
    pub events: Vec<HostEvent>,
    pub throughput: Vec<Throughput>,
    /// The idle tax from each time on, the first at 0.
    pub taxes: Vec<(f64, f64)>,
    /// When each VM joined.
    pub joined: Vec<(String, f64)>,
    /// What went wrong on the way, one line each.
    pub notes: Vec<String>,
}

/// A VM's sampled active fraction at a tick (0 with nothing resident).
pub fn active_fraction(v: &VmSample) -> f64 {
    let f = v.active_bytes as f64 / v.resident_bytes.max(1) as f64;
    f.clamp(0.0, 1.0)
}

/// A throughput line of a VM's console: `kv: t=Ns ops_s=N`, or a toucher step's RESULT line
/// (touches per second over the step).
pub fn throughput_of(line: &str) -> Option<f64> {
    if line.starts_with("kv: t=") {
        return value(line, "ops_s");
    }
    if line.starts_with("RESULT workload=toucher phase=step") {
        let (touches, ms): (f64, f64) = (value(line, "touches")?, value(line, "ms")?);
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

/// One run of `e`: the host's history, events and the VMs' throughput.
pub fn run_once(
    exe: &Path,
    e: &HostExperiment,
    out: &Path,
    label: &str,
) -> Result<HostRun, String> {
    let state = std::env::temp_dir().join(format!("memvisor-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    std::fs::create_dir_all(&state).map_err(|err| format!("{}: {err}", state.display()))?;
    let config = state.join("host.toml");
    std::fs::write(&config, config_text(e, &state))
        .map_err(|err| format!("{}: {err}", config.display()))?;
    let sock = state.join("host.sock");
    let started = Instant::now();
    let result = start_host(exe, &config, &out.join("logs").join("host.log"), &sock)
        .and_then(|mut host| drive(e, &sock, &state, &mut host.0, started, label));
    for v in &e.vms {
        let from = VmmFiles::new(&state, &v.spec.name).log;
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
) -> Result<HostRun, String> {
    let now = || started.elapsed().as_secs_f64();
    let at_start = e.vms.iter().filter(|v| v.at <= 0.0);
    let mut run = HostRun {
        taxes: vec![(0.0, e.idle_tax)],
        joined: at_start.map(|v| (v.spec.name.clone(), 0.0)).collect(),
        ..HostRun::default()
    };
    let tail = |v: &PlannedVm| {
        (
            v.spec.name.clone(),
            Tail::new(VmmFiles::new(state, &v.spec.name).log),
        )
    };
    let mut tails: Vec<(String, Tail)> = e.vms.iter().map(tail).collect();
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
        add_due_vms(sock, &mut pending_vms, t, &now, &mut run);
        change_due_taxes(sock, &mut pending_tax, t, &now, &mut run);
        match HostClient::new(sock).history(since) {
            Ok(new) => {
                if let Some(last) = new.last() {
                    since = last.seconds;
                }
                run.samples.extend(new);
            }
            Err(err) => tracing::debug!("{err}"),
        }
        read_throughput(&mut tails, now(), &mut run);
        if t >= next_progress {
            next_progress += 10.0;
            eprintln!("{label} {}", progress(&run, e.duration));
        }
        std::thread::sleep(POLL);
    }
    if let Ok(new) = HostClient::new(sock).history(since) {
        run.samples.extend(new);
    }
    match HostClient::new(sock).events(0.0) {
        Ok(ev) => run.events = ev,
        Err(err) => run
            .notes
            .push(format!("the host's events could not be read: {err}")),
    }
    Ok(run)
}

/// Adds the VMs whose time `t` has reached (`POST /vms`), noting when each joined.
fn add_due_vms(
    sock: &Path,
    pending: &mut Vec<&PlannedVm>,
    t: f64,
    now: &dyn Fn() -> f64,
    run: &mut HostRun,
) {
    pending.retain(|v| {
        if t < v.at {
            return true;
        }
        match HostClient::new(sock).add(&v.spec) {
            Ok(_) => run.joined.push((v.spec.name.clone(), now())),
            Err(err) => run
                .notes
                .push(format!("adding {} failed: {err}", v.spec.name)),
        }
        false
    });
}

/// Sets the idle taxes whose time `t` has reached (`PATCH /host`), noting when each took effect.
fn change_due_taxes(
    sock: &Path,
    pending: &mut Vec<(f64, f64)>,
    t: f64,
    now: &dyn Fn() -> f64,
    run: &mut HostRun,
) {
    pending.retain(|&(at, tax)| {
        if t < at {
            return true;
        }
        let update = HostUpdate {
            idle_tax: Some(tax),
            ..HostUpdate::default()
        };
        match HostClient::new(sock).update(update) {
            Ok(_) => run.taxes.push((now(), tax)),
            Err(err) => run
                .notes
                .push(format!("setting the idle tax failed: {err}")),
        }
        false
    });
}

/// The throughput lines the VMs' consoles printed since the last read, timed `read_at`.
fn read_throughput(tails: &mut [(String, Tail)], read_at: f64, run: &mut HostRun) {
    for (name, tail) in tails {
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
}

/// A progress line: each VM's allocation and target, and the free state.
fn progress(run: &HostRun, duration: f64) -> String {
    let Some(s) = run.samples.last() else {
        return "no tick yet".into();
    };
    let vm = |v: &VmSample| {
        let (resident, target) = (v.resident_bytes >> 20, v.target_bytes >> 20);
        let active = active_fraction(v) * 100.0;
        format!(
            "{} {resident} MiB (target {target}, active {active:.0} %)",
            v.name
        )
    };
    let vms: Vec<String> = s.vms.iter().map(vm).collect();
    let (at, free, state) = (s.seconds, s.free_bytes >> 20, s.free_state);
    format!(
        "{at:.0}/{duration:.0} s: {}; free {free} MiB, {state:?}",
        vms.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throughput_lines() {
        assert_eq!(throughput_of("kv: t=3s ops_s=812345"), Some(812_345.0));
        let step = "RESULT workload=toucher phase=step2 ws_mb=480 secs=10 ms=10000.5 touches=2000100 pgfault=1";
        assert_eq!(throughput_of(step), Some(2_000_100.0 / 10_000.5 * 1000.0));
        let done = "RESULT workload=toucher phase=done ok=1 ms=3";
        assert_eq!(throughput_of(done), None);
        assert_eq!(throughput_of("kv: t=3s ops_s=many"), None);
        let no_time = "RESULT workload=toucher phase=step1 ms=0 touches=5";
        assert_eq!(throughput_of(no_time), None);
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
