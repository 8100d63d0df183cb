//! `memvisor bench swapin` (MemFlex Table 1's totals, Figs. 7a and 7b): the time to bring swapped
//! memory back, from the pool, the swap file or both, proactively or by faults. The sizes and modes are in
//! `experiment`, a run in `run`, the outputs in `report`.

pub mod experiment;
pub mod report;
pub mod run;

use crate::args::BenchArgs;
use crate::harness::{choose, Bench, Family};
use experiment::SwapinPlan;

/// `memvisor bench swapin`.
pub struct Swapin;

impl Family for Swapin {
    type Plan = SwapinPlan;

    fn compares(&self) -> Option<&'static str> {
        Some("its modes with MemFlex's figures, not with a reference configuration")
    }

    fn plan(&self, args: &BenchArgs) -> Result<SwapinPlan, String> {
        let modes = choose(
            &args.configs,
            &experiment::MODES,
            |m| m.name,
            |n, all| format!("unknown mode '{n}' for swapin; it runs: {all}"),
        )?;
        let mut sizes = Vec::new();
        for &s in if args.sizes.is_empty() {
            &experiment::DEFAULT_SIZES[..]
        } else {
            &args.sizes[..]
        } {
            match experiment::check_size(s) {
                Ok(s) if !sizes.contains(&s) => sizes.push(s),
                Ok(_) => {}
                Err(m) => return Err(m),
            }
        }
        Ok(SwapinPlan {
            sizes,
            modes,
            reps: args.reps.unwrap_or(2),
        })
    }

    fn run(&self, _: &BenchArgs, bench: &Bench, plan: SwapinPlan) -> Result<(), String> {
        let points = run::run(bench, &plan)?;
        crate::report::write_report(
            &bench.out,
            "swapin",
            report::csv(&points),
            |svg| report::plot(svg, &plan.modes, &points),
            report::markdown(&plan, &points, &bench.env),
        )
    }
}
