//! `memvisor bench sharing` and `zeroboot` (ESX Fig. 4, §6.3): page sharing through KSM, with
//! the guest timing probe. The modes and sizes are in `experiment`, the runs in `run`, the
//! outputs in `report`.

pub mod experiment;
pub mod report;
pub mod run;

use crate::args::BenchArgs;
use crate::harness::{choose, setup, Bench, Family};
use experiment::{modes, SharingPlan, Sizes};

/// `memvisor bench sharing` or `zeroboot` (its name).
pub struct Sharing(pub &'static str);

impl Family for Sharing {
    type Plan = SharingPlan;

    fn compares(&self) -> Option<&'static str> {
        Some("with sharing off and with QEMU in every table")
    }

    fn plan(&self, args: &BenchArgs) -> Result<SharingPlan, String> {
        let experiment = self.0;
        let chosen = choose(
            &args.configs,
            modes(experiment),
            |m| m.name,
            |n, all| format!("--configs '{n}': {experiment} runs {all}"),
        )?;
        if !args.scenario.is_empty() || !args.sizes.is_empty() {
            return Err(format!("{experiment} takes no --scenario or --sizes"));
        }
        if !memvisor_host::ksm::available() {
            return Err(format!(
                "{experiment} needs KSM and this kernel has none ({} is missing)",
                memvisor_host::ksm::KSM_DIR
            ));
        }
        let mut sizes = Sizes::of(experiment, args.scale);
        if !args.vms.is_empty() {
            if let Some(&n) = args.vms.iter().find(|&&n| n == 0 || n > 16) {
                return Err(format!("--vms {n}: give 1 to 16 VMs"));
            }
            sizes.vms.clone_from(&args.vms);
        }
        Ok(SharingPlan {
            experiment,
            modes: chosen.into_iter().copied().collect(),
            sizes,
            reps: args.reps.unwrap_or(1),
            qemu_overhead: None,
        })
    }

    fn run(&self, args: &BenchArgs, bench: &Bench, mut plan: SharingPlan) -> Result<(), String> {
        let _only_bench = setup::take_host(&args.swap_file)?;
        // QEMU under a limit swaps to the host, its own memory charged beside the guest's, as
        // its users set it up.
        if plan.sizes.limit.is_some() && plan.modes.iter().any(|m| m.qemu) {
            setup::host_swap(args)?;
            plan.qemu_overhead = Some(setup::qemu_overhead(&bench.exe, plan.sizes.mem)?.0);
        }
        let points = run::run(bench, &plan)?;
        report::write(bench, &plan, &points)
    }
}
