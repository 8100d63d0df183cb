//! `memvisor bench sharing` and `zeroboot`: the flags checked, KSM and (for `zeroboot`) host
//! swap set up, every run (`run::sharing`), then the outputs.

use std::time::Duration;

use crate::args::{BenchArgs, Outcome};
use crate::experiments::sharing::{modes, Sizes};
use crate::harness::{finished, memvisor_exe, out_dir};
use crate::harness::{readings, teardown};
use crate::output;
use crate::run::sharing;

/// `memvisor bench sharing|zeroboot` (ESX Fig. 4, §6.3), see `run::sharing`.
pub fn run(args: &BenchArgs, experiment: &'static str) -> Outcome {
    let bad = |m: String| {
        eprintln!("memvisor bench: {m}");
        Outcome::BadInput
    };
    let all = modes(experiment);
    let mut chosen = Vec::new();
    for name in &args.configs {
        let Some(m) = all.iter().find(|m| m.name == name.trim()) else {
            let names: Vec<&str> = all.iter().map(|m| m.name).collect();
            return bad(format!(
                "--configs '{name}': {experiment} runs {}",
                names.join(", ")
            ));
        };
        if !chosen.contains(m) {
            chosen.push(*m);
        }
    }
    if chosen.is_empty() {
        chosen = all.to_vec();
    }
    if args.reps == Some(0) {
        return bad("--reps 0: give at least one repetition".into());
    }
    if let Some(r) = &args.reference {
        return bad(format!(
            "--reference {r}: {experiment} compares with sharing off and with QEMU in every table; leave it out"
        ));
    }
    if !args.scenario.is_empty() || !args.sizes.is_empty() {
        return bad(format!("{experiment} takes no --scenario or --sizes"));
    }
    if args.timeout == 0 {
        return bad("--timeout 0: give seconds, at least 1".into());
    }
    if !memvisor_host::ksm::available() {
        return bad(format!(
            "{experiment} needs KSM and this kernel has none ({} is missing)",
            memvisor_host::ksm::KSM_DIR
        ));
    }
    let mut sizes = Sizes::of(experiment, args.scale);
    if !args.vms.is_empty() {
        if let Some(&n) = args.vms.iter().find(|&&n| n == 0 || n > 16) {
            return bad(format!("--vms {n}: give 1 to 16 VMs"));
        }
        sizes.vms.clone_from(&args.vms);
    }
    let exe = match memvisor_exe() {
        Ok(e) => e,
        Err(e) => return bad(e),
    };
    let out = match out_dir(args, experiment) {
        Ok(o) => o,
        Err(e) => return bad(e),
    };
    let _only_bench = match teardown::lock(&args.swap_file) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("memvisor bench: {e}");
            return Outcome::Failed;
        }
    };
    match teardown::preflight(&args.swap_file) {
        Ok(lines) => lines.iter().for_each(|l| eprintln!("memvisor bench: {l}")),
        Err(e) => {
            eprintln!("memvisor bench: {e}");
            return Outcome::Failed;
        }
    }
    teardown::catch_signals();
    let guard = teardown::Guard;
    // QEMU under a limit swaps to the host, its own memory charged beside the guest's, as its
    // users set it up.
    let mut qemu_overhead = None;
    if sizes.limit.is_some() && chosen.iter().any(|m| m.qemu) {
        let set_up = crate::harness::setup::host_swap(args).and_then(|_| {
            eprintln!("memvisor bench: measuring QEMU's overhead (RSS outside guest RAM)");
            crate::harness::setup::measure_qemu_overhead(&exe, sizes.mem)
        });
        match set_up {
            Ok(o) => qemu_overhead = Some(o),
            Err(e) => {
                drop(guard);
                return finished(experiment, &out, Err::<(), _>(e));
            }
        }
    }
    let setup = sharing::Setup {
        exe,
        out,
        experiment,
        modes: chosen,
        sizes,
        reps: args.reps.unwrap_or(1),
        timeout: Duration::from_secs(args.timeout),
        qemu_overhead,
    };
    let env = readings::environment(&setup.out, "qemu-system-x86_64");
    let outcome =
        sharing::run(&setup).and_then(|points| output::sharing::write(&setup, &points, &env));
    drop(guard);
    finished(experiment, &setup.out, outcome)
}
