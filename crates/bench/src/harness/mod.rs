//! What every family of experiments shares to run: the driver's checks and exit
//! ([`finished`], [`out_dir`]), child processes (`child`), the one QMP client (`qmp`), running
//! and watching one VM (`vm`), the host set-up runs share (`setup`), the run order (`order`),
//! the host's `/proc` and cgroup readings (`readings`) and undoing it all (`teardown`).

pub mod child;
pub mod order;
pub mod qmp;
pub mod readings;
pub mod setup;
pub mod teardown;
pub mod vm;

use std::path::{Path, PathBuf};

use crate::{BenchArgs, Outcome};

/// The log filter of the memvisor processes a benchmark starts: the harness's own
/// `MEMVISOR_LOG` when it has one (e.g. `memvisor_pager::release=debug` to see a release's
/// steps in each VMM's `.stderr`), `info` otherwise.
pub(crate) fn log_filter() -> String {
    std::env::var("MEMVISOR_LOG").unwrap_or_else(|_| "info".to_owned())
}

/// The exit of an experiment that writes its own report in `out`: 130 when interrupted (its
/// partial results written), the failure's status with its message, or success with where
/// the report is.
pub fn finished<T>(name: &str, out: &Path, outcome: Result<T, String>) -> Outcome {
    match outcome {
        Ok(_) if teardown::interrupted() => {
            eprintln!("memvisor bench: interrupted; partial results written");
            Outcome::Interrupted
        }
        Ok(_) => {
            eprintln!(
                "memvisor bench: {name} done: {}",
                out.join("report.md").display()
            );
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
pub fn memvisor_exe() -> Result<PathBuf, String> {
    std::env::current_exe().map_err(|e| format!("cannot find memvisor itself: {e}"))
}

/// `--out`, or `bench-out/NAME`, made absolute, with its `logs` directory, checked writable; the
/// one line of bad input when it is not. Absolute because the runs hand paths under it to
/// children that resolve a relative path from elsewhere (`memvisor host` from its config's
/// directory).
pub fn out_dir(args: &BenchArgs, name: &str) -> Result<PathBuf, String> {
    let given = args
        .out
        .clone()
        .unwrap_or_else(|| Path::new("bench-out").join(name));
    let out = std::path::absolute(&given)
        .map_err(|e| format!("--out {}: {e}; give a directory", given.display()))?;
    std::fs::create_dir_all(out.join("logs"))
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
