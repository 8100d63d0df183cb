//! `memvisor bench confinement`: what the VMM's seccomp filters cost where they fall, on a
//! guest exit's round trip and on a pager fault's, and on each call of those paths (`filters`).
//! The configurations and sizes are in `experiment`, a run in `run`, the outputs in `report`.
//! The jail's cost is `bench overhead`'s `memvisor-jailed` against `memvisor-unconfined`.

pub mod experiment;
pub mod filters;
pub mod report;
pub mod run;

use crate::args::BenchArgs;
use crate::harness::{choose, setup, Bench, Family};
use experiment::ConfinementPlan;

/// `memvisor bench confinement`.
pub struct Confinement;

impl Family for Confinement {
    type Plan = ConfinementPlan;

    fn plan(&self, args: &BenchArgs) -> Result<ConfinementPlan, String> {
        let configs = choose(
            &args.configs,
            &experiment::CONFIGS,
            |c| c.name,
            |n, all| format!("unknown configuration '{n}' for confinement; it runs: {all}"),
        )?;
        if let Some(r) = &args.reference {
            return Err(format!(
                "--reference {r}: confinement compares each confined configuration with its unconfined twin; leave it out"
            ));
        }
        Ok(ConfinementPlan {
            configs,
            sizes: experiment::Sizes::at(args.scale),
            reps: args.reps.unwrap_or(experiment::DEFAULT_REPS),
        })
    }

    fn run(&self, args: &BenchArgs, bench: &Bench, plan: ConfinementPlan) -> Result<(), String> {
        let _only_bench = setup::take_host(&args.swap_file)?;
        let load_before = experiment::load_average();
        let runs = run::run(bench, &plan)?;
        let load = (load_before, experiment::load_average());
        crate::report::write_report(
            &bench.out,
            "confinement",
            report::csv(&runs),
            |svg| report::plot(svg, &plan, &runs),
            report::markdown(&plan, &runs, load, &bench.env),
        )
    }
}
