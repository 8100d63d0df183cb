//! What every family of experiments shares to run: the one driver ([`drive`]) every
//! [`Family`] goes through (the shared checks, the output directory, teardown and interrupts,
//! the exit), child processes (`child`), their CPU time by thread (`cpu`), what the guest and the VMM say (`guest`), the one QMP
//! client (`qmp`), a started `memvisor run` and the waits on it (`vm`), the host set-up runs
//! share (`setup`), the run order (`order`), the host's `/proc` and cgroup readings
//! (`readings`) and undoing it all (`teardown`).

pub mod child;
pub mod cpu;
pub mod guest;
pub mod order;
pub mod qmp;
pub mod readings;
pub mod setup;
pub mod teardown;
pub mod vm;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::args::{BenchArgs, Outcome};

/// A family of experiments, as the driver ([`drive`]) runs it: its flags checked into a plan,
/// then the plan run to its outputs. Everything else (the checks every family makes, the
/// output directory, the memvisor binary, signals and teardown, the exit) is the driver's.
pub trait Family {
    /// What the flags ask for, checked.
    type Plan;

    /// Checks the flags of `args` beyond those every family checks: the plan, or the one line
    /// of bad input.
    fn plan(&self, args: &BenchArgs) -> Result<Self::Plan, String>;

    /// What the family compares its runs with, for a family that takes no `--reference` (the
    /// driver refuses one, saying so); `None` for a family that takes one, or checks it itself.
    fn compares(&self) -> Option<&'static str> {
        None
    }

    /// Sets up, runs and writes the outputs into `bench.out` (partial ones when interrupted).
    fn run(&self, args: &BenchArgs, bench: &Bench, plan: Self::Plan) -> Result<(), String>;
}

/// What the driver gives every family's run: the memvisor binary its runs start, the output
/// directory, its `work` directory (disk images, sockets and the pager's swap files, made
/// before the run and removed after it), `--timeout` and the host's environment for the report.
pub struct Bench {
    pub exe: PathBuf,
    pub out: PathBuf,
    pub work: PathBuf,
    /// How long one run may take.
    pub timeout: Duration,
    pub env: Vec<(String, String)>,
}

/// `memvisor bench` for one family: the flags checked (bad input is one line and
/// [`Outcome::BadInput`]), the output directory made, signals caught, the family's run, the
/// host torn down, and the exit.
pub fn drive<F: Family>(family: &F, args: &BenchArgs) -> Outcome {
    let bad = |m: String| {
        eprintln!("memvisor bench: {m}");
        Outcome::BadInput
    };
    if args.reps == Some(0) {
        return bad("--reps 0: give at least one repetition".into());
    }
    if args.timeout == 0 {
        return bad("--timeout 0: give seconds, at least 1".into());
    }
    if let (Some(r), Some(what)) = (&args.reference, family.compares()) {
        let name = &args.experiment;
        return bad(format!(
            "--reference {r}: {name} compares {what}; leave it out"
        ));
    }
    let plan = match family.plan(args) {
        Ok(p) => p,
        Err(m) => return bad(m),
    };
    let exe = match memvisor_exe() {
        Ok(e) => e,
        Err(m) => return bad(m),
    };
    let out = match out_dir(args.out.as_deref(), &args.experiment) {
        Ok(o) => o,
        Err(m) => return bad(m),
    };
    teardown::catch_signals();
    let guard = teardown::Guard;
    let env = readings::environment(&out, "qemu-system-x86_64");
    let work = out.join("work");
    let bench = Bench {
        exe,
        out,
        work,
        timeout: Duration::from_secs(args.timeout),
        env,
    };
    let made =
        |dir: &Path| std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()));
    let outcome = made(&bench.work)
        .and_then(|()| made(&bench.out.join("logs")))
        .and_then(|()| family.run(args, &bench, plan));
    let _ = std::fs::remove_dir_all(&bench.work);
    drop(guard);
    finished(&args.experiment, &bench.out, outcome)
}

/// How a measurement of something the VMM may lack ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MeasureStatus {
    #[default]
    Ok,
    /// The VMM does not have it: it refused the flag, or answered 501.
    NotAvailable,
    Failed,
}

impl MeasureStatus {
    pub fn name(self) -> &'static str {
        match self {
            MeasureStatus::Ok => "ok",
            MeasureStatus::NotAvailable => "not-available",
            MeasureStatus::Failed => "failed",
        }
    }
}

/// What a list flag (`--configs`, `--scenario`) names among `all`, each once in the order
/// given, or all of them when it names none; an unknown name is the line `unknown(name, the
/// names known)`.
pub fn choose<'a, T>(
    asked: &[String],
    all: &'a [T],
    name: impl Fn(&T) -> &str,
    unknown: impl Fn(&str, &str) -> String,
) -> Result<Vec<&'a T>, String> {
    let mut chosen: Vec<&T> = Vec::new();
    for a in asked.iter().map(|a| a.trim()) {
        let Some(t) = all.iter().find(|t| name(t) == a) else {
            let names: Vec<&str> = all.iter().map(&name).collect();
            return Err(unknown(a, &names.join(", ")));
        };
        if !chosen.iter().any(|c| std::ptr::eq(*c, t)) {
            chosen.push(t);
        }
    }
    if chosen.is_empty() {
        chosen = all.iter().collect();
    }
    Ok(chosen)
}

/// The exit of an experiment that writes its own report in `out`: 130 when interrupted (its
/// partial results written), the failure's status with its message, or success with where
/// the report is.
fn finished(name: &str, out: &Path, outcome: Result<(), String>) -> Outcome {
    match outcome {
        Ok(()) if teardown::interrupted() => {
            eprintln!("memvisor bench: interrupted; partial results written, host cleaned up");
            Outcome::Interrupted
        }
        Ok(()) => {
            let report = out.join("report.md");
            eprintln!("memvisor bench: {name} done: {}", report.display());
            Outcome::Done
        }
        Err(e) => {
            eprintln!("memvisor bench: {e}");
            Outcome::Failed
        }
    }
}

/// The memvisor binary every run starts as a child process (`memvisor run`, `memvisor host`,
/// `memvisor mkdisk`): the executable that called [`crate::run`], that is `memvisor bench`
/// itself, so a benchmark measures the build it came with.
fn memvisor_exe() -> Result<PathBuf, String> {
    std::env::current_exe().map_err(|e| format!("cannot find memvisor itself: {e}"))
}

/// `--out`, or `bench-out/NAME`, made absolute, created and checked writable; the
/// one line of bad input when it is not. Absolute because the runs hand paths under it to
/// children that resolve a relative path from elsewhere (`memvisor host` from its config's
/// directory).
pub fn out_dir(given: Option<&Path>, name: &str) -> Result<PathBuf, String> {
    let given = given.map_or_else(|| Path::new("bench-out").join(name), Path::to_path_buf);
    let out = std::path::absolute(&given)
        .map_err(|e| format!("--out {}: {e}; give a directory", given.display()))?;
    std::fs::create_dir_all(&out)
        .and_then(|()| std::fs::write(out.join(".write-test"), b""))
        .and_then(|()| std::fs::remove_file(out.join(".write-test")))
        .map_err(|e| {
            format!(
                "--out {}: cannot write there ({e}); give a writable directory",
                out.display()
            )
        })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_named() {
        assert_eq!(MeasureStatus::NotAvailable.name(), "not-available");
    }
}
