//! `memvisor bench reclaimdelay` (HyperDealer2 Table 2, Figs. 11–12): the time to obtain pages
//! from victim VMs by the balloon and by instant release. The methods, states and sizes are in
//! `experiment`, a group of victims in `run`, the outputs in `report`.

pub mod experiment;
pub mod report;
pub mod run;

use crate::args::BenchArgs;
use crate::harness::{choose, Bench, Family};
use experiment::{ReclaimPlan, Sizes};

/// `memvisor bench reclaimdelay`.
pub struct ReclaimDelay;

impl Family for ReclaimDelay {
    type Plan = ReclaimPlan;

    fn compares(&self) -> Option<&'static str> {
        Some("its methods with qemu-balloon and balloon")
    }

    fn plan(&self, args: &BenchArgs) -> Result<ReclaimPlan, String> {
        let methods = choose(
            &args.configs,
            &experiment::METHODS,
            |m| m.name,
            |n, all| format!("unknown method '{n}' for reclaimdelay; it runs: {all}"),
        )?;
        let states = choose(
            &args.scenario,
            &experiment::STATES,
            |s| s.name,
            |n, all| format!("unknown state '{n}' for reclaimdelay; the victims can be: {all}"),
        )?;
        let mut sizes = Sizes::of(args.scale);
        if let Some(v) = counts(&args.vms, "--vms", "victims")? {
            sizes.victims = v;
        }
        if let Some(v) = counts(&args.vcpus, "--vcpus", "vCPUs per victim")? {
            sizes.vcpus = v;
        }
        Ok(ReclaimPlan {
            methods,
            states,
            sizes,
            reps: args.reps.unwrap_or(3),
        })
    }

    fn run(&self, _: &BenchArgs, bench: &Bench, plan: ReclaimPlan) -> Result<(), String> {
        let points = run::run(bench, &plan)?;
        crate::report::write_report(
            &bench.out,
            "reclaimdelay",
            report::csv(&points),
            |svg| report::plot(svg, &plan, &points),
            report::markdown(&plan, &points, &bench.env),
        )
    }
}

/// The numbers a flag gave (`None` when it was not given), each checked to be 1 to 8, in
/// ascending order, each once.
fn counts(given: &[u32], flag: &str, what: &str) -> Result<Option<Vec<u32>>, String> {
    if given.is_empty() {
        return Ok(None);
    }
    if let Some(n) = given.iter().find(|&&n| !(1..=8).contains(&n)) {
        return Err(format!("{flag} {n}: give 1 to 8 {what}"));
    }
    let mut v = given.to_vec();
    v.sort_unstable();
    v.dedup();
    Ok(Some(v))
}
