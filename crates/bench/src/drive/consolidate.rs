//! `memvisor bench consolidate` and `memvisor bench balance` (its `balance` scenario with
//! HyperDealer2's configurations): the flags checked, the host set up (the bench lock, what an
//! earlier run left cleaned, the host swap file and `vm.swappiness` for `qemu-static`, QEMU's
//! overhead measured), then every scenario, number of VMs and configuration run
//! (`run::consolidate`), the outputs written after each run, and the host torn down.

use std::path::Path;

use crate::harness::{finished, memvisor_exe};
use memvisor_api::HostSample;

use crate::args::{BenchArgs, Outcome};
use crate::experiments::consolidate::{self as experiment, Kind, Scenario, MEM};
use crate::harness::{setup, teardown};
use crate::output::consolidate as output;
use crate::run::consolidate::{self, Record, RunTrace, Sink};

/// `memvisor bench consolidate`: many VMs under `memvisor host` and on QEMU, see
/// `experiments::consolidate`.
pub fn run(args: &BenchArgs) -> Outcome {
    run_as(args, "consolidate")
}

/// `memvisor bench balance` (HyperDealer2 Tables 3–4): consolidate's `balance` scenario, its
/// VMs' page caches warmed, under ballooning and HyperDealer2 with each victim order.
pub fn run_balance(args: &BenchArgs) -> Outcome {
    run_as(args, "balance")
}

fn run_as(args: &BenchArgs, experiment_name: &str) -> Outcome {
    let balance = experiment_name == "balance";
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
                    "unknown configuration '{name}' for {experiment_name}; it runs: {}",
                    experiment::CONFIGS.map(|c| c.0).join(", ")
                ))
            }
        }
    }
    if configs.is_empty() {
        configs = if balance {
            experiment::CONFIGS
                .iter()
                .copied()
                .filter(|(c, _)| experiment::BALANCE_CONFIGS.contains(c))
                .collect()
        } else {
            experiment::consolidate_configs()
        };
    }
    if args.reference.is_some() {
        return bad(format!(
            "--reference: {experiment_name} takes its ratios to {}",
            if balance {
                "vswapper-balloon (ballooning, as HyperDealer2's Table 4)"
            } else {
                "qemu-nolimit (balance's scenario: vswapper-balloon)"
            }
        ));
    }
    if balance && !args.scenario.is_empty() {
        return bad("--scenario: balance runs its own scenario; see bench consolidate".into());
    }
    let mut scenarios = Vec::new();
    for s in &args.scenario {
        match Scenario::parse(s) {
            Ok(s) if !scenarios.contains(&s) => scenarios.push(s),
            Ok(_) => {}
            Err(e) => return bad(format!("--scenario: {e}")),
        }
    }
    if scenarios.is_empty() {
        scenarios = if balance {
            vec![Scenario::Balance]
        } else {
            Scenario::CONSOLIDATE.to_vec()
        };
    }
    let ns = match (args.vms.is_empty(), balance) {
        (false, _) => args.vms.clone(),
        (true, true) => vec![experiment::BALANCE_VMS],
        (true, false) => vec![2, 4, 6],
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
    let out = match crate::harness::out_dir(args, experiment_name) {
        Ok(o) => o,
        Err(e) => return bad(e),
    };
    teardown::catch_signals();
    let guard = teardown::Guard;
    let outcome = bench(args, exe, out.clone(), ns, scenarios, configs);
    drop(guard);
    finished(experiment_name, &out, outcome)
}

fn bench(
    args: &BenchArgs,
    exe: std::path::PathBuf,
    out: std::path::PathBuf,
    ns: Vec<u32>,
    scenarios: Vec<Scenario>,
    configs: Vec<(&'static str, Kind)>,
) -> Result<(), String> {
    // Held until the end: another benchmark on the same machine would skew this one.
    let _only_bench = teardown::lock(&args.swap_file)?;
    let mut notes = Vec::new();
    for line in teardown::preflight(&args.swap_file)? {
        eprintln!("memvisor bench: {line}");
    }
    let limited = configs.iter().any(|c| c.1 == Kind::QemuStatic);
    let mut qemu_overhead = 0;
    if limited {
        notes.extend(crate::harness::setup::host_swap(args)?);
        eprintln!("memvisor bench: measuring QEMU's overhead (RSS outside guest RAM)");
        qemu_overhead = setup::measure_qemu_overhead(&exe, MEM)?;
        notes.push(format!(
            "QEMU's overhead, measured in this run (RSS outside the guest RAM mapping, peak over a short guest kit run): {:.1} MiB",
            qemu_overhead as f64 / 1048576.0
        ));
        eprintln!(
            "memvisor bench: {}",
            notes.last().map_or("", String::as_str)
        );
    }
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let setup = consolidate::Setup {
        exe,
        out,
        ns,
        scenarios,
        configs,
        reps: args.reps.unwrap_or(1),
        cores,
        qemu_overhead,
    };
    let mut sink = Outputs {
        setup: &setup,
        notes: &notes,
    };
    consolidate::run(&setup, &teardown::interrupted, &mut sink)
}

/// The outputs, written as the runs hand over what they measured.
struct Outputs<'a> {
    setup: &'a consolidate::Setup,
    notes: &'a [String],
}

impl Sink for Outputs<'_> {
    fn records(&mut self, records: &[Record], runs: &[RunTrace]) -> Result<(), String> {
        output::write_outputs(
            &self.setup.out,
            records,
            runs,
            &output::Shape {
                configs: &self.setup.configs,
                ns: &self.setup.ns,
                scenarios: &self.setup.scenarios,
                cores: self.setup.cores,
                qemu_overhead: self.setup.qemu_overhead,
                notes: self.notes,
            },
        )
    }

    fn history(&self, dir: &Path, history: &[HostSample]) -> Result<(), String> {
        output::write_allocation(dir, history)
    }
}
