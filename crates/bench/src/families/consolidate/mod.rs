//! `memvisor bench consolidate`, `memvisor bench balance` (its `balance` scenario with
//! HyperDealer2's configurations) and `memvisor bench allocate` (its `allocate` scenarios with
//! them): the flags checked, the host set up (the bench lock, what an
//! earlier run left cleaned, the host swap file and `vm.swappiness` for `qemu-static`, QEMU's
//! overhead measured, each scenario's joint working set measured where a budget is relative
//! to it), then every scenario, number of VMs, budget and configuration run (`run`), the
//! outputs written after each run (`report`, its CPU tables from `cpu`). The configurations
//! and scenarios are in `experiment`.

mod cpu;
pub mod experiment;
pub mod report;
pub mod run;
pub mod scenario;

use std::path::Path;

use memvisor_api::HostSample;

use crate::args::BenchArgs;
use crate::harness::{setup, Bench, Family};
use experiment::{Budget, Config, ConsolidatePlan, Launch, MEM};
use run::{Record, RunTrace, Sink};
use scenario::Scenario;

/// The family's three experiments: `memvisor bench consolidate`, many VMs under `memvisor host`
/// and on QEMU; `balance` and `allocate`, each its own scenarios under ballooning and
/// HyperDealer2 with each victim order ([`experiment::BALANCE_CONFIGS`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Consolidation {
    /// VSwapper's Fig. 14 workload and the mixed host, in budgets swept.
    Consolidate,
    /// HyperDealer2's Table 4 (in Table 3's load scenario): the `balance` scenario, its VMs'
    /// page caches warmed.
    Balance,
    /// HyperDealer2's Fig. 13: a beneficiary allocating beside idle or busy victims.
    Allocate,
}

impl Family for Consolidation {
    type Plan = ConsolidatePlan;

    fn plan(&self, args: &BenchArgs) -> Result<ConsolidatePlan, String> {
        let name = args.experiment.as_str();
        let preset = *self;
        let host_set = args
            .host_set
            .iter()
            .map(|kv| experiment::host_setting(kv).map_err(|e| format!("--host-set {e}")))
            .collect::<Result<Vec<String>, String>>()?;
        let mut configs: Vec<Config> = Vec::new();
        for spec in &args.configs {
            let c = Config::parse(spec).map_err(|e| format!("--configs of {name}: {e}"))?;
            if !configs.iter().any(|had| had.name == c.name) {
                configs.push(c);
            }
        }
        if configs.is_empty() {
            configs = match preset {
                Consolidation::Consolidate => experiment::consolidate_configs(),
                Consolidation::Balance | Consolidation::Allocate => experiment::balance_configs(),
            };
        }
        let configs = configs.into_iter().map(|c| c.under(&host_set)).collect();
        if args.reference.is_some() {
            let to = match preset {
                Consolidation::Balance => {
                    "vswapper-balloon (ballooning, as HyperDealer2's Table 4)"
                }
                _ => "qemu-nolimit (balance's scenario: vswapper-balloon)",
            };
            return Err(format!("--reference: {name} takes its ratios to {to}"));
        }
        if preset == Consolidation::Balance && !args.scenario.is_empty() {
            return Err("--scenario: balance runs its own scenario; see bench consolidate".into());
        }
        let mut scenarios = Vec::new();
        for s in &args.scenario {
            match Scenario::parse(s) {
                Ok(s) if preset == Consolidation::Allocate && !s.allocates() => {
                    let all = Scenario::ALLOCATE.map(Scenario::name).join(", ");
                    return Err(format!("--scenario {}: allocate runs {all}", s.name()));
                }
                Ok(s) if !scenarios.contains(&s) => scenarios.push(s),
                Ok(_) => {}
                Err(e) => return Err(format!("--scenario: {e}")),
            }
        }
        if scenarios.is_empty() {
            scenarios = match preset {
                Consolidation::Consolidate => Scenario::CONSOLIDATE.to_vec(),
                Consolidation::Balance => vec![Scenario::Balance],
                Consolidation::Allocate => Scenario::ALLOCATE.to_vec(),
            };
        }
        let ns = match (args.vms.is_empty(), preset) {
            (false, _) => args.vms.clone(),
            (true, Consolidation::Consolidate) => vec![6],
            (true, Consolidation::Balance) => vec![experiment::BALANCE_VMS],
            (true, Consolidation::Allocate) => experiment::ALLOCATE_VMS.to_vec(),
        };
        if preset == Consolidation::Allocate && ns.contains(&1) {
            return Err("--vms 1: allocate needs a victim beside its beneficiary".into());
        }
        let mut budgets = Vec::new();
        for b in &args.budget {
            match Budget::parse(b) {
                Ok(b) if !budgets.contains(&b) => budgets.push(b),
                Ok(_) => {}
                Err(e) => return Err(format!("--budget: {e}")),
            }
        }
        if budgets.is_empty() {
            budgets = match preset {
                Consolidation::Consolidate => experiment::FRACTIONS.map(Budget::Fraction).to_vec(),
                Consolidation::Balance => vec![Budget::Bytes(experiment::BUDGET)],
                Consolidation::Allocate => vec![Budget::Less(experiment::ALLOCATE_SHORT)],
            };
        }
        if let Some(n) = ns.iter().find(|&&n| n == 0 || n > 16) {
            return Err(format!("--vms {n}: give 1 to 16 VMs"));
        }
        Ok(ConsolidatePlan {
            ns,
            scenarios,
            configs,
            reps: args.reps.unwrap_or(1),
            cores: std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
            budgets,
            interval: args.interval.unwrap_or(experiment::INTERVAL),
            working_sets: Vec::new(),
            qemu_overhead: 0,
            notes: host_set
                .iter()
                .map(|l| {
                    format!("`memvisor host` runs with `{l}` in its `[host]` table (`--host-set`)")
                })
                .collect(),
        })
    }

    fn run(
        &self,
        args: &BenchArgs,
        bench: &Bench,
        mut plan: ConsolidatePlan,
    ) -> Result<(), String> {
        let _only_bench = setup::take_host(&args.swap_file)?;
        if plan.configs.iter().any(|c| c.launch == Launch::QemuStatic) {
            plan.notes.extend(setup::host_swap(args)?);
            let (overhead, note) = setup::qemu_overhead(&bench.exe, MEM)?;
            plan.qemu_overhead = overhead;
            plan.notes.push(note);
        }
        if plan.sizes_working_sets() {
            let sized = run::size_working_sets(bench, &plan, &mut Outputs { bench, plan: &plan })?;
            plan.working_sets = sized;
            for &(sc, n, ws) in &plan.working_sets {
                let whose = match experiment::sized_on(sc) {
                    Launch::Host(_) => "memvisor's VMMs under `memvisor host` (`hd2-nolimit`)",
                    _ => "QEMU's processes",
                };
                plan.notes.push(format!(
                    "The joint working set of `{}` with {n} VMs: {} MiB, the summed PSS of {whose} at its peak with no limit (one run before the others); a budget of 0.75 is three quarters of it.",
                    sc.name(),
                    ws >> 20
                ));
            }
        }
        let mut sink = Outputs { bench, plan: &plan };
        run::run(bench, &plan, &mut sink)
    }
}

/// The outputs, written as the runs hand over what they measured.
struct Outputs<'a> {
    bench: &'a Bench,
    plan: &'a ConsolidatePlan,
}

impl Sink for Outputs<'_> {
    fn records(&mut self, records: &[Record], runs: &[RunTrace]) -> Result<(), String> {
        report::write_outputs(&self.bench.out, records, runs, self.plan)
    }

    fn history(&self, dir: &Path, history: &[HostSample]) -> Result<(), String> {
        report::write_allocation(dir, history)
    }
}
