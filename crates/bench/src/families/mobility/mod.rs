//! `memvisor bench mobility`: what moving a VM costs, restored from a snapshot and migrated
//! live on localhost (post-copy, with and without pre-copy rounds), beside QEMU microvm doing
//! the same with the same guest. The configurations, the grid of guest sizes and working sets
//! are in `experiment`, memvisor's runs in `run`, QEMU's in `qemu`, the outputs in `report`;
//! the one loop over them all, interleaved, here.

pub mod experiment;
pub mod qemu;
pub mod report;
pub mod run;

use crate::args::BenchArgs;
use crate::harness::{choose, Bench, Family};
use experiment::{Cell, Config, MobilityPlan};

/// `memvisor bench mobility`.
pub struct Mobility;

impl Family for Mobility {
    type Plan = MobilityPlan;

    fn compares(&self) -> Option<&'static str> {
        Some("each move with a VM that never stopped and with QEMU's, not with a reference configuration")
    }

    fn plan(&self, args: &BenchArgs) -> Result<MobilityPlan, String> {
        let configs = choose(
            &args.configs,
            &experiment::CONFIGS,
            |c| c.name,
            |n, all| format!("unknown configuration '{n}' for mobility; it runs: {all}"),
        )?;
        let mut sizes = Vec::new();
        let tiny = args.scale == crate::args::Scale::Quick;
        let given = if args.sizes.is_empty() && tiny {
            &experiment::TINY_SIZES[..]
        } else if args.sizes.is_empty() {
            &experiment::DEFAULT_SIZES[..]
        } else {
            &args.sizes[..]
        };
        for &s in given {
            let s = experiment::check_size(s, args.scale)?;
            if !sizes.contains(&s) {
                sizes.push(s);
            }
        }
        let mut ws = Vec::new();
        let given = if args.ws.is_empty() && tiny {
            &experiment::TINY_WS[..]
        } else if args.ws.is_empty() {
            &experiment::DEFAULT_WS[..]
        } else {
            &args.ws[..]
        };
        for &w in given {
            let w = experiment::check_ws(w)?;
            if !ws.contains(&w) {
                ws.push(w);
            }
        }
        let cells = sizes
            .iter()
            .flat_map(|&size| ws.iter().map(move |&ws_pct| Cell { size, ws_pct }))
            .collect();
        Ok(MobilityPlan {
            configs,
            cells,
            reps: args.reps.unwrap_or(experiment::DEFAULT_REPS),
        })
    }

    fn run(&self, _: &BenchArgs, bench: &Bench, plan: MobilityPlan) -> Result<(), String> {
        let load_before = experiment::load_average();
        let runs = run_all(bench, &plan)?;
        let load = (load_before, experiment::load_average());
        crate::report::write_report(
            &bench.out,
            "mobility",
            report::csv(&runs),
            |svg| report::plot(svg, &plan, &runs),
            report::markdown(&plan, &runs, load, &bench.env),
        )
    }
}

/// Runs every configuration at every cell, repetition by repetition, interleaved.
fn run_all(bench: &Bench, plan: &MobilityPlan) -> Result<Vec<run::MobRun>, String> {
    let what = |c: &Cell, k: &&'static Config| format!("{} {}", k.name, c.name());
    crate::harness::order::interleave(
        "mobility",
        plan.reps,
        |_| plan.cells.clone(),
        &plan.configs,
        what,
        |turn| {
            let (config, cell) = (*turn.config, *turn.cell);
            let r = if config.qemu {
                qemu::measure(bench, config, cell, turn.rep)
            } else {
                run::measure(bench, config, cell, turn.rep)
            };
            let vals: Vec<String> = r
                .values
                .iter()
                .map(|(k, v)| format!("{k} {v:.1}"))
                .collect();
            turn.say(&format!(
                "{}: {} {}",
                r.status.name(),
                vals.join(", "),
                r.error
            ));
            Ok(vec![r])
        },
    )
}
