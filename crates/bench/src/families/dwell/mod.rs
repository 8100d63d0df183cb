//! `memvisor bench dwell` (HyperDealer2 §6.4, Fig. 14): the dwell time of released pages per
//! victim policy. The family's plan and sizes are in `experiment`, its runs in `run`, its
//! outputs in `report`.

pub mod experiment;
pub mod report;
pub mod run;

use crate::args::BenchArgs;
use crate::harness::{Bench, Family};
use experiment::{DwellPlan, Sizes, POLICIES};

/// `memvisor bench dwell`.
pub struct Dwell;

impl Family for Dwell {
    type Plan = DwellPlan;

    fn compares(&self) -> Option<&'static str> {
        Some("victim policies with each other and with the paper")
    }

    fn plan(&self, args: &BenchArgs) -> Result<DwellPlan, String> {
        let mut policies: Vec<String> = Vec::new();
        for name in &args.configs {
            let name = name.trim();
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                return Err(format!(
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
        Ok(DwellPlan {
            policies,
            sizes: Sizes::of(args.scale),
            reps: args.reps.unwrap_or(1),
        })
    }

    fn run(&self, _: &BenchArgs, bench: &Bench, plan: DwellPlan) -> Result<(), String> {
        let points = run::run(bench, &plan)?;
        crate::report::write_report(
            &bench.out,
            "dwell",
            report::csv(&points),
            |svg| report::plot(svg, &plan, &points),
            report::markdown(&plan, &points, &bench.env),
        )
    }
}
