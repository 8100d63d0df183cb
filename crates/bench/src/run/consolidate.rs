//! `memvisor bench consolidate` (VSwapper §5.2, Fig. 14): N = 1, 2, ... VMs each run `mapreduce`
//! (a Metis-like word count: large in-memory tables and a file read through the page cache),
//! started one after the other `INTERVAL` apart, in one fixed memory budget; the result is the
//! mean completion time against N, for each way of handling the overcommitment:
//!
//! | configuration | what |
//! |---|---|
//! | `balloon` | `memvisor host`, balloons moved by the host's policy, the pager in baseline mode |
//! | `pager` | `memvisor host`, no balloon: the pager's limits alone |
//! | `vswapper` | `memvisor host`, no balloon, the pager with VSwapper's Mapper and Preventer |
//! | `vswapper-balloon` | both (the paper's reference) |
//! | `qemu-balloon` | QEMU VMs with static balloons: each guest gets its share of the budget |
//!
//! The paper's guests have 2 GB and use about 1 GB, in an 8 GB host, ten seconds apart; here
//! each guest has [`MEM`], uses about 260 MiB (four 32 MiB tables and a 128 MiB input through
//! its page cache), in a [`BUDGET`] budget, [`INTERVAL`] apart, so pressure starts at three
//! VMs. The input is one read-only image shared by every VM (the host reads it with `O_DIRECT`,
//! so no VM gains from another's reads).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use memvisor_api::{HostSample, HostVm, HostVmState, VmSpec};
use plotters::prelude::*;

use crate::output::csv;

/// Guest RAM of each VM.
pub const MEM: u64 = 320 << 20;
/// The host's budget for every VM together.
pub const BUDGET: u64 = 1024 << 20;
/// Between two VMs' starts.
pub const INTERVAL: Duration = Duration::from_secs(3);
const INPUT_MB: u64 = 128;
const CMDLINE: &str = "input=src input_mb=128 vocab=1000000 mappers=4";
/// Longest one run (all its VMs) may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(900);

/// How one configuration runs its VMs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Host {
        balloon: bool,
        vswapper: bool,
        baseline: bool,
    },
    QemuStaticBalloon,
}

pub const CONFIGS: [(&str, Kind); 5] = [
    (
        "balloon",
        Kind::Host {
            balloon: true,
            vswapper: false,
            baseline: true,
        },
    ),
    (
        "pager",
        Kind::Host {
            balloon: false,
            vswapper: false,
            baseline: false,
        },
    ),
    (
        "vswapper",
        Kind::Host {
            balloon: false,
            vswapper: true,
            baseline: false,
        },
    ),
    (
        "vswapper-balloon",
        Kind::Host {
            balloon: true,
            vswapper: true,
            baseline: false,
        },
    ),
    ("qemu-balloon", Kind::QemuStaticBalloon),
];

/// The paper's reference: the combination.
pub const REFERENCE: &str = "vswapper-balloon";

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
pub fn run(s: &Setup, interrupted: &dyn Fn() -> bool) -> Result<(), String> {
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
                    Kind::Host { .. } => run_host(&s.exe, kind, n, &image, &dir),
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
                write_outputs(&s.out, &records, &s.configs, &s.ns)?;
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    Ok(())
}

fn spec(i: u32, kind: Kind, image: &Path) -> VmSpec {
    let Kind::Host {
        balloon,
        vswapper,
        baseline,
    } = kind
    else {
        unreachable!("a host configuration");
    };
    VmSpec {
        name: format!("vm{i}"),
        mem: MEM,
        min: 0,
        shares: 1000,
        vcpus: 1,
        workload: Some("mapreduce".into()),
        kernel: None,
        cmdline: CMDLINE.into(),
        disks: vec![format!("{},ro,id=data", image.display())],
        balloon,
        mapper: vswapper,
        preventer: vswapper,
        tesseract: false,
        tesseract_max: None,
        tesseract_sync: None,
        tesseract_defrag: None,
        victim_cache: 0,
        victims: None,
        pager: baseline.then(|| "baseline".into()),
    }
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

fn run_host(exe: &Path, kind: Kind, n: u32, image: &Path, dir: &Path) -> Result<Outcome, String> {
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
    for i in 1..=n {
        let body = serde_json::to_string(&spec(i, kind, image)).map_err(|e| e.to_string())?;
        match memvisor_api::call(&sock, "POST", "/vms", Some(&body)) {
            Ok((200, _)) => {}
            Ok((code, e)) => return Err(format!("POST /vms refused ({code}): {e}")),
            Err(e) => return Err(format!("POST /vms: {e}")),
        }
        if i < n {
            std::thread::sleep(INTERVAL);
        }
    }
    let t = Instant::now();
    let vms: Vec<HostVm> = loop {
        let (_, body) =
            memvisor_api::call(&sock, "GET", "/vms", None).map_err(|e| e.to_string())?;
        let vms: Vec<HostVm> = serde_json::from_str(&body).map_err(|e| e.to_string())?;
        if vms.iter().all(|v| v.state == HostVmState::Exited) {
            break vms;
        }
        if t.elapsed() > RUN_TIMEOUT {
            break vms;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    // Every tick of the run: each VM's allocation over time, as CSV and a plot in the run's
    // directory.
    match memvisor_api::call(&sock, "GET", "/history", None)
        .map_err(|e| e.to_string())
        .and_then(|(_, body)| {
            serde_json::from_str::<Vec<HostSample>>(&body).map_err(|e| e.to_string())
        }) {
        Ok(history) => {
            if let Err(e) = write_allocation(dir, &history) {
                eprintln!(
                    "memvisor bench: allocation over time in {}: {e}",
                    dir.display()
                );
            }
        }
        Err(e) => eprintln!("memvisor bench: the host's history: {e}"),
    }
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

/// `allocation.csv` (one row per VM per tick) and `allocation.svg`/`.png` (each VM's resident
/// memory and target over the run) in a run's directory.
fn write_allocation(dir: &Path, history: &[HostSample]) -> Result<(), String> {
    let mut csv = String::from("seconds,vm,state,resident_bytes,target_bytes,balloon_bytes,swapped_bytes,limit_bytes,free_bytes,free_state\n");
    let mut names: Vec<String> = Vec::new();
    for t in history {
        for v in &t.vms {
            let _ = writeln!(
                csv,
                "{:.2},{},{:?},{},{},{},{},{},{},{:?}",
                t.seconds,
                v.name,
                v.state,
                v.resident_bytes,
                v.target_bytes,
                v.balloon_bytes,
                v.swapped_bytes,
                v.limit_bytes,
                t.free_bytes,
                t.free_state
            );
            if !names.contains(&v.name) {
                names.push(v.name.clone());
            }
        }
    }
    std::fs::write(dir.join("allocation.csv"), csv).map_err(|e| e.to_string())?;
    let end = history.last().map_or(1.0, |t| t.seconds).max(1.0);
    crate::output::plot::svg_and_png!(&dir.join("allocation.svg"), (900, 450), |root| {
        draw_allocation(root, history, &names, end)
    })
}

fn draw_allocation<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    history: &[HostSample],
    names: &[String],
    end: f64,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    const MIB: f64 = 1048576.0;
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    #[allow(clippy::cast_precision_loss)]
    let top = (MEM as f64 / MIB) * 1.1;
    let mut chart = ChartBuilder::on(root)
        .caption(
            "allocation over time: resident (solid) and target (dashed) per VM",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(0f64..end, 0f64..top)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("MiB")
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, name) in names.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        #[allow(clippy::cast_precision_loss)]
        let series = |f: &dyn Fn(&memvisor_api::VmSample) -> u64| -> Vec<(f64, f64)> {
            history
                .iter()
                .filter_map(|t| {
                    t.vms
                        .iter()
                        .find(|v| &v.name == name)
                        .map(|v| (t.seconds, f(v) as f64 / MIB))
                })
                .collect()
        };
        chart
            .draw_series(LineSeries::new(
                series(&|v| v.resident_bytes),
                color.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(DashedLineSeries::new(
                series(&|v| v.target_bytes),
                6,
                4,
                color.into(),
            ))
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}

/// Mean completion seconds of `config` with `n` VMs, over the VMs that finished, and how many
/// did not.
fn mean(records: &[Record], config: &str, n: u32) -> Option<(f64, usize)> {
    let mine: Vec<&Record> = records
        .iter()
        .filter(|r| r.config == config && r.n == n)
        .collect();
    let done: Vec<f64> = mine.iter().filter_map(|r| r.secs).collect();
    if done.is_empty() {
        return None;
    }
    #[allow(clippy::cast_precision_loss)]
    let m = done.iter().sum::<f64>() / done.len() as f64;
    Some((m, mine.len() - done.len()))
}

fn write_outputs(
    out: &Path,
    records: &[Record],
    configs: &[(&'static str, Kind)],
    ns: &[u32],
) -> Result<(), String> {
    let mut csv = String::from("config,vms,rep,vm,seconds,ok,note\n");
    for r in records {
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{},{}",
            r.config,
            r.n,
            r.rep,
            r.vm,
            r.secs.map_or(String::new(), |s| format!("{s:.2}")),
            u8::from(r.ok),
            csv::quoted(&r.note.replace('"', "'"))
        );
    }
    let w = |name: &str, text: &str| {
        std::fs::write(out.join(name), text).map_err(|e| format!("{name}: {e}"))
    };
    w("results.csv", &csv)?;
    let mut md = format!(
        "# consolidate (VSwapper §5.2, Fig. 14)\n\nN VMs of {} MiB each run `mapreduce {CMDLINE}`, started {} s apart, in a {} MiB budget. Mean completion time in seconds (the guest's own time for the whole job) over the VMs that finished; in brackets the ratio to `{REFERENCE}` (the paper: balloon only, baseline and VSwapper are 0.96–1.84x, 0.96–1.79x and 0.97–1.11x the combination); `n failed` counts VMs that did not finish.\n\n| VMs |",
        MEM >> 20,
        INTERVAL.as_secs(),
        BUDGET >> 20
    );
    for (c, _) in configs {
        let _ = write!(md, " {c} |");
    }
    md.push_str("\n|---|");
    for _ in configs {
        md.push_str("---|");
    }
    md.push('\n');
    for &n in ns {
        let _ = write!(md, "| {n} |");
        let reference = mean(records, REFERENCE, n).map(|m| m.0);
        for (c, _) in configs {
            match mean(records, c, n) {
                None => md.push_str(" – |"),
                Some((m, failed)) => {
                    let _ = write!(md, " {m:.1}");
                    if let Some(r) = reference.filter(|_| *c != REFERENCE) {
                        let _ = write!(md, " ({:.2}x)", m / r);
                    }
                    if failed > 0 {
                        let _ = write!(md, ", {failed} failed");
                    }
                    md.push_str(" |");
                }
            }
        }
        md.push('\n');
    }
    md.push_str("\n![consolidate](consolidate.png)\n\nQEMU's guests get a static balloon at their share of the budget (less 24 MiB) when N VMs of their size do not fit; memvisor's are run by `memvisor host` with its defaults (idle tax 0.75, 5 s sampling). Logs of every VM are under `logs/`.\n");
    w("report.md", &md)?;
    plot(&out.join("consolidate.svg"), records, configs, ns)
}

fn plot(
    path: &Path,
    records: &[Record],
    configs: &[(&'static str, Kind)],
    ns: &[u32],
) -> Result<(), String> {
    let top = configs
        .iter()
        .flat_map(|(c, _)| ns.iter().filter_map(|&n| mean(records, c, n).map(|m| m.0)))
        .fold(1.0f64, f64::max);
    let right = ns.iter().copied().max().unwrap_or(1);
    crate::output::plot::svg_and_png!(path, (800, 500), |root| draw(
        root, records, configs, ns, top, right
    ))
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    records: &[Record],
    configs: &[(&'static str, Kind)],
    ns: &[u32],
    top: f64,
    right: u32,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(root)
        .caption(
            "consolidate: mean completion time against VMs",
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0u32..right + 1, 0f64..top * 1.15)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("VMs")
        .y_desc("seconds")
        .draw()
        .map_err(|e| e.to_string())?;
    let colors = [
        RGBColor(230, 97, 1),
        RGBColor(94, 60, 153),
        RGBColor(27, 120, 55),
        RGBColor(0, 0, 0),
        RGBColor(33, 102, 172),
    ];
    for (i, (c, _)) in configs.iter().enumerate() {
        let color = colors[i % colors.len()];
        let pts: Vec<(u32, f64)> = ns
            .iter()
            .filter_map(|&n| mean(records, c, n).map(|m| (n, m.0)))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(*c)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(config: &str, n: u32, secs: Option<f64>) -> Record {
        Record {
            config: config.into(),
            n,
            rep: 1,
            vm: 1,
            secs,
            ok: secs.is_some(),
            note: String::new(),
        }
    }

    #[test]
    fn means_ratios_and_failures_reach_the_report() {
        let dir = tempfile::tempdir().unwrap();
        let records = vec![
            rec("vswapper-balloon", 2, Some(10.0)),
            rec("vswapper-balloon", 2, Some(12.0)),
            rec("pager", 2, Some(22.0)),
            rec("pager", 2, None),
        ];
        let configs: Vec<_> = CONFIGS
            .iter()
            .filter(|(c, _)| *c == "pager" || *c == REFERENCE)
            .copied()
            .collect();
        write_outputs(dir.path(), &records, &configs, &[2]).unwrap();
        let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
        assert!(md.contains("| 2 | 22.0 (2.00x), 1 failed | 11.0 |"), "{md}");
        let csv = std::fs::read_to_string(dir.path().join("results.csv")).unwrap();
        assert_eq!(csv.lines().count(), 5);
        assert!(dir.path().join("consolidate.svg").exists());
    }

    #[test]
    fn host_configurations_spell_their_mechanisms() {
        let image = Path::new("/x/src.img");
        let find = |name: &str| CONFIGS.iter().find(|(c, _)| *c == name).unwrap().1;
        let s = spec(3, find("vswapper-balloon"), image);
        assert!(s.balloon && s.mapper && s.preventer && s.pager.is_none());
        assert_eq!(s.name, "vm3");
        assert!(s.check().is_ok());
        let s = spec(1, find("balloon"), image);
        assert!(s.balloon && !s.mapper && s.pager.as_deref() == Some("baseline"));
        assert!(s.check().is_ok());
    }
}
