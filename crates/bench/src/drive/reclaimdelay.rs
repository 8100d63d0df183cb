//! `memvisor bench reclaimdelay`: the flags checked, every group of victims run
//! (`run::reclaimdelay`), then the outputs.

use std::time::Duration;

use crate::args::{BenchArgs, Outcome};
use crate::experiments::reclaimdelay::{self as experiment, Sizes};
use crate::harness::{finished, memvisor_exe, out_dir};
use crate::harness::{readings, teardown};
use crate::output;
use crate::run::reclaimdelay;

/// `memvisor bench reclaimdelay`: the time to obtain pages from victim VMs by the balloon and
/// by instant release (HyperDealer2 Table 2, Figs. 11–12), see `run::reclaimdelay`.
pub fn run(args: &BenchArgs) -> Outcome {
    let bad = |m: String| {
        eprintln!("memvisor bench: {m}");
        Outcome::BadInput
    };
    let mut methods = Vec::new();
    for name in &args.configs {
        match experiment::method(name.trim()) {
            Some(m) if !methods.contains(&m) => methods.push(m),
            Some(_) => {}
            None => {
                return bad(format!(
                    "unknown method '{name}' for reclaimdelay; it runs: {}",
                    experiment::METHODS.map(|m| m.name).join(", ")
                ))
            }
        }
    }
    if methods.is_empty() {
        methods = experiment::METHODS.iter().collect();
    }
    let mut states = Vec::new();
    for name in &args.scenario {
        match experiment::state(name.trim()) {
            Some(s) if !states.contains(&s) => states.push(s),
            Some(_) => {}
            None => {
                return bad(format!(
                    "unknown state '{name}' for reclaimdelay; the victims can be: {}",
                    experiment::STATES.map(|s| s.name).join(", ")
                ))
            }
        }
    }
    if states.is_empty() {
        states = experiment::STATES.iter().collect();
    }
    let mut sizes = Sizes::of(args.scale);
    if !args.vms.is_empty() {
        if let Some(n) = args.vms.iter().find(|&&n| !(1..=8).contains(&n)) {
            return bad(format!("--vms {n}: give 1 to 8 victims"));
        }
        sizes.victims.clone_from(&args.vms);
        sizes.victims.sort_unstable();
        sizes.victims.dedup();
    }
    if args.reps == Some(0) {
        return bad("--reps 0: give at least one repetition".into());
    }
    if let Some(r) = &args.reference {
        return bad(format!(
            "--reference {r}: reclaimdelay gives its ratios against qemu-balloon and balloon; leave it out"
        ));
    }
    if args.timeout == 0 {
        return bad("--timeout 0: give seconds, at least 1".into());
    }
    let exe = match memvisor_exe() {
        Ok(e) => e,
        Err(e) => return bad(e),
    };
    let out = match out_dir(args, "reclaimdelay") {
        Ok(o) => o,
        Err(e) => return bad(e),
    };
    let setup = reclaimdelay::Setup {
        exe,
        out,
        methods,
        states,
        sizes,
        reps: args.reps.unwrap_or(3),
        timeout: Duration::from_secs(args.timeout),
    };
    teardown::catch_signals();
    let guard = teardown::Guard;
    let env = readings::environment(&setup.out, "qemu-system-x86_64");
    let outcome = reclaimdelay::run(&setup)
        .and_then(|points| output::reclaimdelay::write(&setup, &points, &env));
    drop(guard);
    finished("reclaimdelay", &setup.out, outcome)
}
