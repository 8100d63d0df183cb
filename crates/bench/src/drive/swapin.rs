//! `memvisor bench swapin`: the flags checked, every size and mode run (`run::swapin`), then the
//! outputs.

use std::time::Duration;

use crate::args::{BenchArgs, Outcome};
use crate::experiments::swapin as experiment;
use crate::harness::{finished, memvisor_exe, out_dir};
use crate::harness::{readings, teardown};
use crate::output;
use crate::run::swapin;

/// `memvisor bench swapin`: the time to bring swapped memory back, from the pool or the swap
/// file, proactively or by faults (MemFlex Table 1, Fig. 7), see `run::swapin`.
pub fn run(args: &BenchArgs) -> Outcome {
    let bad = |m: String| {
        eprintln!("memvisor bench: {m}");
        Outcome::BadInput
    };
    let mut modes = Vec::new();
    for name in &args.configs {
        match experiment::mode(name.trim()) {
            Some(m) if !modes.contains(&m) => modes.push(m),
            Some(_) => {}
            None => {
                return bad(format!(
                    "unknown mode '{name}' for swapin; it runs: {}",
                    experiment::MODES.map(|m| m.name).join(", ")
                ))
            }
        }
    }
    if modes.is_empty() {
        modes = experiment::MODES.iter().collect();
    }
    let mut sizes = Vec::new();
    for &s in if args.sizes.is_empty() {
        &experiment::DEFAULT_SIZES[..]
    } else {
        &args.sizes[..]
    } {
        match experiment::check_size(s) {
            Ok(s) if !sizes.contains(&s) => sizes.push(s),
            Ok(_) => {}
            Err(m) => return bad(m),
        }
    }
    if args.reps == Some(0) {
        return bad("--reps 0: give at least one repetition".into());
    }
    if let Some(r) = &args.reference {
        return bad(format!(
            "--reference {r}: swapin compares its modes with MemFlex's figures, not with a reference configuration; leave it out"
        ));
    }
    if args.timeout == 0 {
        return bad("--timeout 0: give seconds, at least 1".into());
    }
    let exe = match memvisor_exe() {
        Ok(e) => e,
        Err(e) => return bad(e),
    };
    let out = match out_dir(args, "swapin") {
        Ok(o) => o,
        Err(e) => return bad(e),
    };
    let setup = swapin::Setup {
        exe,
        out,
        sizes,
        modes,
        reps: args.reps.unwrap_or(2),
        timeout: Duration::from_secs(args.timeout),
    };
    teardown::catch_signals();
    let guard = teardown::Guard;
    let env = readings::environment(&setup.out, "qemu-system-x86_64");
    let outcome =
        swapin::run(&setup).and_then(|points| output::swapin::write(&setup, &points, &env));
    drop(guard);
    finished("swapin", &setup.out, outcome)
}
