//! `memvisor bench consolidate`: the flags checked, then every configuration and number of VMs
//! run (`run::consolidate`), the outputs written after each run.

use std::path::Path;

use super::{finished, memvisor_exe};
use memvisor_api::HostSample;

use crate::experiments::consolidate::{self as experiment, Kind};
use crate::output::consolidate as output;
use crate::run::consolidate::{self, Record, Sink};
use crate::run::teardown;
use crate::{BenchArgs, Outcome};

/// `memvisor bench consolidate`: many VMs under `memvisor host` (and QEMU with static
/// balloons), see `experiments::consolidate`.
pub fn run(args: &BenchArgs) -> Outcome {
    let bad = |m: String| {
        eprintln!("memvisor bench: {m}");
        Outcome::BadInput
    };
    let mut configs = Vec::new();
    for name in &args.configs {
        match experiment::CONFIGS.iter().find(|(c, _)| *c == name.trim()) {
            Some(&c) => configs.push(c),
            None => {
                return bad(format!(
                    "unknown configuration '{name}' for consolidate; it runs: {}",
                    experiment::CONFIGS.map(|c| c.0).join(", ")
                ))
            }
        }
    }
    if configs.is_empty() {
        configs = experiment::CONFIGS.to_vec();
    }
    let ns = if args.vms.is_empty() {
        vec![1, 2, 3, 4, 6]
    } else {
        args.vms.clone()
    };
    if let Some(n) = ns.iter().find(|&&n| n == 0 || n > 16) {
        return bad(format!("--vms {n}: give 1 to 16 VMs"));
    }
    if args.reps == Some(0) {
        return bad("--reps 0: give at least one repetition".into());
    }
    let exe = match memvisor_exe() {
        Ok(e) => e,
        Err(e) => return bad(e),
    };
    let setup = consolidate::Setup {
        exe,
        out: args
            .out
            .clone()
            .unwrap_or_else(|| Path::new("bench-out").join("consolidate")),
        ns,
        configs,
        reps: args.reps.unwrap_or(1),
    };
    if let Err(e) = std::fs::create_dir_all(setup.out.join("logs")) {
        return bad(format!("--out {}: {e}", setup.out.display()));
    }
    teardown::catch_signals();
    let mut sink = Outputs {
        out: &setup.out,
        configs: &setup.configs,
        ns: &setup.ns,
    };
    let outcome = consolidate::run(&setup, &teardown::interrupted, &mut sink);
    finished("consolidate", &setup.out, outcome)
}

/// The outputs, written as the runs hand over what they measured.
struct Outputs<'a> {
    out: &'a Path,
    configs: &'a [(&'static str, Kind)],
    ns: &'a [u32],
}

impl Sink for Outputs<'_> {
    fn records(&mut self, records: &[Record]) -> Result<(), String> {
        output::write_outputs(self.out, records, self.configs, self.ns)
    }

    fn history(&self, dir: &Path, history: &[HostSample]) -> Result<(), String> {
        output::write_allocation(dir, history)
    }
}
