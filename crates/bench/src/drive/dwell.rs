//! `memvisor bench dwell`: the flags checked, every policy run (`run::dwell`), then the outputs.

use std::time::Duration;

use crate::experiments::dwell::{Sizes, POLICIES};
use crate::harness::{finished, memvisor_exe, out_dir};
use crate::harness::{readings, teardown};
use crate::output;
use crate::run::dwell;
use crate::{BenchArgs, Outcome};

/// `memvisor bench dwell`: the dwell time of released pages per victim policy (HyperDealer2
/// Fig. 14), see `run::dwell`.
pub fn run(args: &BenchArgs) -> Outcome {
    let bad = |m: String| {
        eprintln!("memvisor bench: {m}");
        Outcome::BadInput
    };
    let mut policies: Vec<String> = Vec::new();
    for name in &args.configs {
        let name = name.trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return bad(format!(
                "--configs '{name}': give victim policies of memvisor run --victims, e.g. {}",
                POLICIES.join(",")
            ));
        }
        if !policies.iter().any(|p| p == name) {
            policies.push(name.to_owned());
        }
    }
    if policies.is_empty() {
        policies = POLICIES.iter().map(|p| (*p).to_owned()).collect();
    }
    if args.reps == Some(0) {
        return bad("--reps 0: give at least one repetition".into());
    }
    if let Some(r) = &args.reference {
        return bad(format!(
            "--reference {r}: dwell compares victim policies with each other and with the paper; leave it out"
        ));
    }
    if args.timeout == 0 {
        return bad("--timeout 0: give seconds, at least 1".into());
    }
    let exe = match memvisor_exe() {
        Ok(e) => e,
        Err(e) => return bad(e),
    };
    let out = match out_dir(args, "dwell") {
        Ok(o) => o,
        Err(e) => return bad(e),
    };
    let setup = dwell::Setup {
        exe,
        out,
        policies,
        sizes: Sizes::of(args.scale),
        reps: args.reps.unwrap_or(1),
        timeout: Duration::from_secs(args.timeout),
    };
    teardown::catch_signals();
    let guard = teardown::Guard;
    let env = readings::environment(&setup.out, "qemu-system-x86_64");
    let outcome = dwell::run(&setup).and_then(|points| output::dwell::write(&setup, &points, &env));
    drop(guard);
    finished("dwell", &setup.out, outcome)
}
