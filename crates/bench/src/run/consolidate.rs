//! `memvisor bench consolidate`'s runs: N VMs started [`INTERVAL`] apart under `memvisor host`
//! (one VM a configuration's way, [`spec`]) or as QEMU processes with static balloons, each
//! VM's completion time read from its console, and what was measured handed to a [`Sink`] as it
//! comes. The configurations are in `experiments::consolidate`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use memvisor_api::{HostClient, HostSample, HostVm, HostVmState};

use crate::experiments::consolidate::{
    spec, Kind, BUDGET, CMDLINE, INPUT_MB, INTERVAL, MEM, RUN_TIMEOUT,
};

/// Where the runs hand what they measured, as they go: so the outputs are written after each
/// run and an interrupted bench leaves what it measured.
pub trait Sink {
    /// Every record so far, after each run.
    fn records(&mut self, records: &[Record]) -> Result<(), String>;
    /// The host's ticks over one run of `memvisor host`, whose files are in `dir`.
    fn history(&self, dir: &Path, history: &[HostSample]) -> Result<(), String>;
}

/// One VM of one run.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub config: String,
    pub n: u32,
    pub rep: u32,
    pub vm: u32,
    /// The guest's own time for the job; `None` if it did not finish.
    pub secs: Option<f64>,
    pub ok: bool,
    pub note: String,
}

/// What to run.
pub struct Setup {
    pub exe: PathBuf,
    pub out: PathBuf,
    pub ns: Vec<u32>,
    pub configs: Vec<(&'static str, Kind)>,
    pub reps: u32,
}

/// Runs every configuration for every N, repetitions interleaved; writes `results.csv`,
/// `report.md` and `consolidate.svg` to `out` after each run (so an interrupted bench leaves
/// what it measured).
pub fn run(s: &Setup, interrupted: &dyn Fn() -> bool, sink: &mut dyn Sink) -> Result<(), String> {
    let work = s.out.join("work");
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let image = work.join("src.img");
    if !image.exists() {
        let st = Command::new(&s.exe)
            .args(["mkdisk", "data", "--force", "--out"])
            .arg(&image)
            .args([
                "--size",
                &format!("{}M", INPUT_MB + 16),
                "--files",
                &format!("src:{INPUT_MB}M"),
            ])
            .stdout(Stdio::null())
            .status()
            .map_err(|e| format!("mkdisk: {e}"))?;
        if !st.success() {
            return Err("mkdisk failed".into());
        }
    }
    let mut records = Vec::new();
    let runs = u64::from(s.reps) * s.ns.len() as u64 * s.configs.len() as u64;
    let bar = crate::progress::bar(runs, "runs");
    bar.set_message("consolidate");
    for rep in 1..=s.reps {
        for &n in &s.ns {
            for &(name, kind) in &s.configs {
                if interrupted() {
                    return Ok(());
                }
                let dir = s.out.join("logs").join(format!("{name}-n{n}-rep{rep}"));
                let _ = std::fs::remove_dir_all(&dir);
                std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                crate::progress::say(
                    &bar,
                    &format!("memvisor bench: consolidate {name}, {n} VMs, rep {rep}"),
                );
                let got = match kind {
                    Kind::Host { .. } => run_host(&s.exe, kind, n, &image, &dir, sink),
                    Kind::QemuStaticBalloon => run_qemu(&s.exe, n, &image, &dir),
                };
                let got = got.unwrap_or_else(|e| {
                    (0..n)
                        .map(|_| (None, false, format!("the run failed: {e}")))
                        .collect()
                });
                for (vm, (secs, ok, note)) in got.into_iter().enumerate() {
                    records.push(Record {
                        config: name.to_owned(),
                        n,
                        rep,
                        vm: u32::try_from(vm).unwrap_or(u32::MAX) + 1,
                        secs,
                        ok,
                        note,
                    });
                }
                sink.records(&records)?;
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    Ok(())
}

/// Completion of each VM: (seconds, finished with the guest's success, what went wrong).
type Outcome = Vec<(Option<f64>, bool, String)>;

struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            // SIGTERM first: the host stops its VMs cleanly.
            crate::run::teardown::signal(self.0.id(), libc::SIGTERM);
            let t = Instant::now();
            while matches!(self.0.try_wait(), Ok(None)) && t.elapsed() < Duration::from_secs(40) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// The guest's own time for the whole job (`RESULT ... phase=done ok=1 ... ms=`), in seconds:
/// what the guest measured from its start to its end, the same for every hypervisor (no VMM
/// start-up, no polling delay).
fn guest_secs(log: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(log).ok()?;
    let done = text
        .lines()
        .find(|x| x.starts_with("RESULT workload=mapreduce phase=done ok=1"))?;
    let ms = done
        .split_whitespace()
        .find_map(|w| w.strip_prefix("ms="))?
        .parse::<f64>()
        .ok()?;
    Some(ms / 1e3)
}

fn run_host(
    exe: &Path,
    kind: Kind,
    n: u32,
    image: &Path,
    dir: &Path,
    sink: &dyn Sink,
) -> Result<Outcome, String> {
    let (host, sock) = start_host(exe, dir)?;
    for i in 1..=n {
        HostClient::new(&sock)
            .add(&spec(i, kind, image))
            .map_err(|e| e.to_string())?;
        if i < n {
            std::thread::sleep(INTERVAL);
        }
    }
    let vms = wait_for_exits(&sock)?;
    hand_history(&sock, dir, sink);
    drop(host);
    Ok(vms
        .iter()
        .map(|v| {
            let secs = guest_secs(&dir.join("state").join(format!("{}.log", v.name)));
            let ok = v.exit_status == Some(1) && secs.is_some();
            let note = if ok {
                String::new()
            } else {
                v.why.clone().unwrap_or_else(|| format!("{:?}", v.state))
            };
            (secs.filter(|_| ok), ok, note)
        })
        .collect())
}

/// Starts `memvisor host` with the budget and no VM, its files in `dir`; returns it with its
/// socket once the socket is there.
fn start_host(exe: &Path, dir: &Path) -> Result<(Reaped, PathBuf), String> {
    let config = dir.join("host.toml");
    std::fs::write(
        &config,
        format!(
            // The live page on a free loopback port: its address is in host.log.
            "[host]\nmemory = {BUDGET}\nswap = \"16G\"\ntick = \"500ms\"\nsample_period = \"5s\"\nstate_dir = \"state\"\nweb_addr = \"127.0.0.1:0\"\n"
        ),
    )
    .map_err(|e| e.to_string())?;
    let log = std::fs::File::create(dir.join("host.log")).map_err(|e| e.to_string())?;
    let host = Reaped(
        Command::new(exe)
            .args(["host", "--config"])
            .arg(&config)
            .env("MEMVISOR_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start memvisor host: {e}"))?,
    );
    let sock = dir.join("state/host.sock");
    let t = Instant::now();
    while !sock.exists() {
        if t.elapsed() > Duration::from_secs(10) {
            return Err("the host's socket never appeared (see host.log)".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((host, sock))
}

/// The host's VMs once every one has exited, or as they are at [`RUN_TIMEOUT`].
fn wait_for_exits(sock: &Path) -> Result<Vec<HostVm>, String> {
    let t = Instant::now();
    loop {
        let vms = HostClient::new(sock).vms().map_err(|e| e.to_string())?;
        if vms.iter().all(|v| v.state == HostVmState::Exited) {
            return Ok(vms);
        }
        if t.elapsed() > RUN_TIMEOUT {
            return Ok(vms);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
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

fn run_qemu(exe: &Path, n: u32, image: &Path, dir: &Path) -> Result<Outcome, String> {
    // Each guest gets its share of the budget (less what a QEMU process needs besides guest
    // RAM, taken as memvisor's default VMM overhead), never more than its RAM.
    let share = (BUDGET / u64::from(n)).saturating_sub(24 << 20).min(MEM);
    let mut vms = Vec::new();
    for i in 1..=n {
        let log =
            std::fs::File::create(dir.join(format!("vm{i}.log"))).map_err(|e| e.to_string())?;
        let qmp = dir.join(format!("vm{i}.qmp"));
        let t0 = Instant::now();
        let child = Command::new(exe)
            .args([
                "run",
                "--hypervisor",
                "qemu",
                "--balloon",
                "--mem",
                &MEM.to_string(),
            ])
            .arg("--qmp-sock")
            .arg(&qmp)
            .arg("--disk")
            .arg(format!("{},ro,id=data", image.display()))
            .args(["--workload", "mapreduce", "--cmdline", CMDLINE])
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start QEMU: {e}"))?;
        let vm = Reaped(child);
        if share < MEM {
            let t = Instant::now();
            while !qmp.exists() && t.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(5));
            }
            crate::run::vm::qmp_balloon(&qmp, share)?;
        }
        vms.push((vm, t0));
        if i < n {
            std::thread::sleep(INTERVAL);
        }
    }
    let mut out = Vec::new();
    for (i, (mut vm, t0)) in vms.into_iter().enumerate() {
        let mut status = None;
        while t0.elapsed() < RUN_TIMEOUT {
            if let Ok(Some(st)) = vm.0.try_wait() {
                status = Some(st);
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let log = dir.join(format!("vm{}.log", i + 1));
        match (status, guest_secs(&log)) {
            (Some(st), Some(secs)) if st.code() == Some(1) => {
                out.push((Some(secs), true, String::new()));
            }
            (Some(st), _) => out.push((None, false, format!("exited with {st}"))),
            (None, _) => out.push((None, false, "timed out".into())),
        }
        drop(vm);
    }
    Ok(out)
}
