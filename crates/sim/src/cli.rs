//! `memvisor sim SCENARIO [--out DIR]` and `memvisor sim --scale N`.

use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;

use crate::report::{summary, write_all};
use crate::scenario::Scenario;
use crate::sim::Sim;
use crate::vm::SimVm;

/// Simulate a host of many VMs under the policy: a scenario file in, CSVs, a summary and plots
/// out (docs/sim.md).
#[derive(Args, Debug)]
pub struct SimArgs {
    /// The scenario (TOML); with several, each runs in turn and a comparison table follows.
    #[arg(required_unless_present_any = ["scale", "replay"])]
    pub scenarios: Vec<PathBuf>,
    /// Where to write vms.csv, host.csv, summary.md and the plots (default: sim-out/NAME; with
    /// several scenarios, DIR/NAME for each and DIR/comparison.md).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Instead of a scenario: time the ticks of a host of N VMs (1.5x overcommit, a mix of
    /// workloads) and print the time per tick and the memory per VM.
    #[arg(long, conflicts_with = "scenarios")]
    pub scale: Option<u32>,
    /// Also write trace.jsonl: every tick's observations and plan (memvisor's policy only), the
    /// format --replay reads.
    #[arg(long)]
    pub trace: bool,
    /// Instead of a scenario: replay a trace (JSON lines, docs/sim.md) through the policy and
    /// report every tick whose decisions differ from the recorded ones.
    #[arg(long, conflicts_with_all = ["scenarios", "scale"])]
    pub replay: Option<PathBuf>,
    /// Set a real host's trace (`[host] trace`) beside the simulated run of the one scenario
    /// given (one group per VM, named as the host's VMs): per VM the RMS error of its resident
    /// memory over time and when each stopped; writes calibration.md, .csv and .svg to --out.
    #[arg(long, conflicts_with_all = ["scale", "replay"], requires = "scenarios")]
    pub calibrate: Option<PathBuf>,
    /// Ticks to time with --scale.
    #[arg(long, default_value_t = 100)]
    pub ticks: u32,
}

/// Runs the subcommand. Exit status: 0 when the run was written, 2 for bad input, 5 when the
/// output cannot be written.
pub fn run(args: SimArgs) -> ExitCode {
    if let Some(n) = args.scale {
        return scale(n, args.ticks);
    }
    if let Some(path) = args.replay {
        return replay(&path);
    }
    if let Some(trace) = args.calibrate {
        return calibrate(&trace, &args.scenarios, args.out);
    }
    // Every file is checked before anything runs.
    let mut runs = Vec::new();
    for path in &args.scenarios {
        match Scenario::load(path) {
            Ok(s) => runs.push((path, s)),
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        }
    }
    let several = runs.len() > 1;
    let mut table = String::from(COMPARISON_HEADER);
    for (path, sc) in runs {
        let name = path
            .file_stem()
            .map_or_else(|| "sim".to_owned(), |s| s.to_string_lossy().into_owned());
        let dir = match (&args.out, several) {
            (Some(d), false) => d.clone(),
            (Some(d), true) => d.join(&name),
            (None, _) => PathBuf::from("sim-out").join(&name),
        };
        let written = if sc.fleet.is_some() {
            write_fleet_run(sc, &dir, &name)
        } else {
            write_run(sc, &dir, &name, args.trace)
        };
        match written {
            Ok((text, row)) => {
                if several {
                    table.push_str(&row);
                } else {
                    print!("{text}");
                }
                println!("{name}: written to {}", dir.display());
            }
            Err(e) => {
                eprintln!("{}: {e}", dir.display());
                return ExitCode::from(5);
            }
        }
    }
    if several {
        let dir = args.out.unwrap_or_else(|| PathBuf::from("sim-out"));
        print!("\n{table}");
        if let Err(e) = std::fs::write(dir.join("comparison.md"), &table) {
            eprintln!("{}: {e}", dir.display());
            return ExitCode::from(5);
        }
    }
    ExitCode::SUCCESS
}

const COMPARISON_HEADER: &str = "| scenario | overcommit | policy | mean slowdown | p99 slowdown | fairness | pauses | completed | move mean / p99 s | ticks over budget |\n|---|---|---|---|---|---|---|---|---|---|\n";

/// Runs a scenario into `dir` (with its trace if `trace`); returns the summary's text and its row of a comparison table.
pub fn write_run(
    sc: Scenario,
    dir: &std::path::Path,
    name: &str,
    trace: bool,
) -> std::io::Result<(String, String)> {
    std::fs::create_dir_all(dir)?;
    let mut csv = BufWriter::new(std::fs::File::create(dir.join("vms.csv"))?);
    let mut sim = Sim::new(sc);
    if trace {
        sim.trace = Some(Box::new(BufWriter::new(std::fs::File::create(
            dir.join("trace.jsonl"),
        )?)));
    }
    sim.run(Some(&mut csv))?;
    csv.flush()?;
    write_all(&sim, dir, name)?;
    let s = summary(&sim);
    let maxes: u64 = sim.vms.iter().map(|v| v.cfg.max).sum();
    let h = &sim.scenario.host;
    let policy = match h.policy {
        crate::scenario::PolicyKind::Esx if h.balancing == crate::scenario::Balancing::Hd2 => {
            format!("esx + hd2, tax {}", h.idle_tax)
        }
        crate::scenario::PolicyKind::Esx => format!("esx, tax {}", h.idle_tax),
        crate::scenario::PolicyKind::Static => "static (baseline)".into(),
        crate::scenario::PolicyKind::Threshold => "threshold (baseline)".into(),
    };
    let row = format!(
        "| {name} | {:.2}x | {policy} | {:.3} | {:.3} | {:.3} | {} | {} of {} | {:.1} / {:.1} | {} |\n",
        maxes as f64 / h.budget.0 as f64,
        s.mean_slowdown,
        s.p99_slowdown,
        s.fairness,
        s.pauses,
        s.completed,
        sim.vms.iter().filter(|v| v.cfg.work.is_some()).count(),
        s.move_mean_s,
        s.move_p99_s,
        s.ticks_over_budget
    );
    Ok((std::fs::read_to_string(dir.join("summary.md"))?, row))
}

/// Runs a fleet scenario into `dir`; returns its report's text and its row of a comparison
/// table.
pub fn write_fleet_run(
    sc: Scenario,
    dir: &std::path::Path,
    name: &str,
) -> std::io::Result<(String, String)> {
    let Some(mut f) = crate::fleet::Fleet::new(sc) else {
        return Err(std::io::Error::other("not a fleet scenario"));
    };
    f.run()?;
    crate::fleet::write_fleet(&f, dir, name)?;
    let s = crate::fleet::fleet_summary(&f);
    let sc = &f.scenario;
    let maxes: u64 = sc.groups.iter().map(|g| g.mem.0 * u64::from(g.count)).sum();
    let row = format!(
        "| {name} | {:.2}x | esx, tax {}, {} hosts, placement {}, {} refused | {:.3} | {:.3} | {:.3} | {} | {} of {} | - | {} |\n",
        maxes as f64 / (sc.host.budget.0 * u64::from(f.fleet.hosts)) as f64,
        sc.host.idle_tax,
        f.fleet.hosts,
        f.fleet.placement.name(),
        s.refused,
        s.mean_slowdown,
        s.p99_slowdown,
        s.fairness,
        s.pauses,
        s.completed,
        s.with_work,
        s.ticks_over_budget
    );
    Ok((std::fs::read_to_string(dir.join("fleet.md"))?, row))
}

fn calibrate(trace: &std::path::Path, scenarios: &[PathBuf], out: Option<PathBuf>) -> ExitCode {
    let [path] = scenarios else {
        eprintln!("--calibrate: give one scenario");
        return ExitCode::from(2);
    };
    let sc = match Scenario::load(path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let dir = out.unwrap_or_else(|| PathBuf::from("sim-out").join("calibration"));
    match crate::calibrate::run(trace, sc, &path.display().to_string(), &dir) {
        Ok(md) => {
            print!("{md}");
            println!("written to {}", dir.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}

fn replay(path: &std::path::Path) -> ExitCode {
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    match memvisor_policy::trace::replay(std::io::BufReader::new(f)) {
        Ok((n, bad)) => {
            for m in bad.iter().take(50) {
                println!("{}: line {}: {}", path.display(), m.line, m.what);
            }
            println!("{} ticks replayed, {} decisions differ", n, bad.len());
            if bad.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            ExitCode::from(2)
        }
    }
}

/// A host of `n` VMs for the scale measurement: four groups (stepping, idle, hot set, bursts)
/// of 1 GiB each, 1.5x overcommitted.
pub fn scale_scenario(n: u32, ticks: u32) -> Scenario {
    let q = n / 4;
    let counts = [n - 3 * q, q, q, q];
    let budget = (u64::from(n) << 30) * 2 / 3;
    let text = format!(
        r#"
seed = 1
duration = {ticks}
[host]
budget = {budget}
[[group]]
name = "step"
count = {}
mem = "1G"
workload = {{ kind = "step", steps = [[0, "256M"], [20, "768M"], [60, "384M"]], rate = "40M", jitter = 30 }}
[[group]]
name = "idle"
count = {}
mem = "1G"
workload = {{ kind = "idle" }}
[[group]]
name = "kv"
count = {}
mem = "1G"
shares = 2000
workload = {{ kind = "hot", hot = "300M", cold = "500M", rate = "80M" }}
[[group]]
name = "burst"
count = {}
mem = "1G"
balloon = false
workload = {{ kind = "burst", base = "128M", peak = "900M", period = 120, duty = 0.25, rate = "60M" }}
"#,
        counts[0], counts[1], counts[2], counts[3]
    );
    Scenario::parse("--scale", &text).expect("the scale scenario parses")
}

/// Past this many VMs, --scale starts them without start limits (each is O(n log n), so
/// starting n VMs is quadratic).
const SCALE_START_LIMITS: u32 = 10_000;

fn scale(n: u32, ticks: u32) -> ExitCode {
    if n == 0 || ticks == 0 {
        eprintln!("--scale {n} --ticks {ticks}: give 1 or more of each");
        return ExitCode::from(2);
    }
    let sc = scale_scenario(n, ticks);
    let t0 = Instant::now();
    let start_limits = n <= SCALE_START_LIMITS;
    let mut sim = Sim::start(sc, start_limits);
    let start = t0.elapsed();
    // One start limit beside all the others, timed on its own.
    let (obs, _) = sim.observations();
    let t1 = Instant::now();
    if let Some((last, rest)) = obs.split_last() {
        let _ = memvisor_policy::start_limit(&sim.scenario.params(), rest, last);
    }
    let one_start = t1.elapsed();
    let (mut plan_s, mut total) = (0.0, 0.0);
    for _ in 0..ticks {
        let t = Instant::now();
        let (obs, oom) = sim.observations();
        let p = Instant::now();
        let _ = sim.decide(&obs, &oom);
        plan_s += p.elapsed().as_secs_f64();
        // The step decides again: the decision is timed on its own above.
        if let Err(e) = sim.step(None) {
            eprintln!("{e}");
            return ExitCode::from(5);
        }
        total += t.elapsed().as_secs_f64();
    }
    let tick_s = (total - plan_s) / f64::from(ticks);
    let plan_per = plan_s / f64::from(ticks);
    let per_vm = std::mem::size_of::<SimVm>()
        + sim.vms.first().map_or(0, SimVm::heap_bytes)
        + std::mem::size_of::<crate::stats::VmRunSummary>()
        + std::mem::size_of::<memvisor_policy::VmObservation>()
        + std::mem::size_of::<memvisor_policy::VmAction>();
    let s = summary(&sim);
    println!(
        "{n} VMs, {ticks} ticks: start ({}) {:.3} s, one more start_limit {:.3} ms; per tick {:.3} ms ({:.3} ms in the policy's plan, {:.3} ms the rest); {:.1} µs per VM per tick; memory per VM {} bytes; an hour of 1 s ticks: {:.1} s",
        if start_limits {
            "admission and start limits"
        } else {
            "admission; limits at max"
        },
        start.as_secs_f64(),
        one_start.as_secs_f64() * 1e3,
        tick_s * 1e3,
        plan_per * 1e3,
        (tick_s - plan_per) * 1e3,
        tick_s / f64::from(n) * 1e6,
        per_vm,
        tick_s * 3600.0
    );
    println!(
        "(mean slowdown {:.3}, p99 {:.3}, pauses {})",
        s.mean_slowdown, s.p99_slowdown, s.pauses
    );
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(scenarios: Vec<PathBuf>, out: Option<PathBuf>) -> SimArgs {
        SimArgs {
            scenarios,
            out,
            scale: None,
            trace: true,
            replay: None,
            calibrate: None,
            ticks: 100,
        }
    }

    fn parse(argv: &[&str]) -> Result<SimArgs, clap::Error> {
        use clap::{Args as _, FromArgMatches as _};
        let cmd = SimArgs::augment_args(clap::Command::new("sim"));
        cmd.clone().debug_assert();
        SimArgs::from_arg_matches(&cmd.try_get_matches_from(argv)?)
    }

    #[test]
    fn the_flags_parse_and_conflict_as_documented() {
        let a = parse(&["sim", "a.toml", "b.toml", "--out", "d"]).unwrap();
        assert_eq!(a.scenarios.len(), 2);
        assert_eq!(
            parse(&["sim", "--scale", "1000"]).unwrap().scale,
            Some(1000)
        );
        assert!(parse(&["sim", "--replay", "t.jsonl"])
            .unwrap()
            .replay
            .is_some());
        assert!(parse(&["sim"]).is_err(), "a scenario, --scale or --replay");
        assert!(parse(&["sim", "a.toml", "--scale", "10"]).is_err());
    }

    #[test]
    fn a_run_writes_its_files_and_bad_input_exits_2() {
        let dir = std::env::temp_dir().join(format!("memvisor-sim-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, "duration = 10\n[host]\nbudget = -1\n").unwrap();
        assert_eq!(run(args(vec![bad], None)), ExitCode::from(2));
        let good = dir.join("good.toml");
        std::fs::write(
            &good,
            "duration = 30\n[host]\nbudget = \"1G\"\n[[group]]\nname = \"a\"\ncount = 2\nmem = \"768M\"\nworkload = { kind = \"idle\" }\n",
        )
        .unwrap();
        let out = dir.join("out");
        assert_eq!(run(args(vec![good], Some(out.clone()))), ExitCode::SUCCESS);
        for f in [
            "vms.csv",
            "host.csv",
            "summary.md",
            "host.svg",
            "groups.svg",
            "slowdown.svg",
            "trace.jsonl",
        ] {
            assert!(out.join(f).metadata().unwrap().len() > 0, "{f}");
        }
        let csv = std::fs::read_to_string(out.join("vms.csv")).unwrap();
        assert_eq!(csv.lines().count(), 1 + 30 * 2);
        assert!(csv.starts_with(crate::sim::VM_CSV_HEADER));
        let replay = SimArgs {
            replay: Some(out.join("trace.jsonl")),
            ..args(Vec::new(), None)
        };
        assert_eq!(run(replay), ExitCode::SUCCESS);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
