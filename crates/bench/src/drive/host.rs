//! `memvisor bench shares|idletax`: the flags checked, every repetition run on `memvisor host`
//! (`run::hostexp`), then the outputs (`output::host`).

use std::path::Path;

use crate::args::{BenchArgs, Outcome};
use crate::experiments::{self, host::HostExperiment};
use crate::harness::{readings, teardown};
use crate::output::host as hostreport;
use crate::run::hostexp;

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
    let Some(e) = experiments::host::find(&a.experiment, a.scale) else {
        eprintln!("memvisor bench: unknown experiment '{}'", a.experiment);
        return Outcome::BadInput;
    };
    if let Err(m) = check_flags(a) {
        eprintln!("memvisor bench: {m}");
        return Outcome::BadInput;
    }
    let out = match crate::harness::out_dir(a, e.name) {
        Ok(o) => o,
        Err(m) => {
            eprintln!("memvisor bench: {m}");
            return Outcome::BadInput;
        }
    };
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
    let exe = crate::harness::memvisor_exe()?;
    // Held until the end: another benchmark on the same machine would skew this one.
    let _only_bench = teardown::lock(&a.swap_file)?;
    let env = readings::environment(out, "qemu-system-x86_64");
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
        let run = hostexp::run_once(&exe, e, &rep_out, &label)?;
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
