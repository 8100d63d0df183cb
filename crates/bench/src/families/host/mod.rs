//! `memvisor bench shares`, `idletax` and `reallocation` (ESX §5.1, §5.2 and Figs. 7–8) on a
//! running `memvisor host`: the experiments' common form in `experiment`, each in its own file
//! (`shares`, `idletax`, `reallocation`), a run in `run`, and its outputs: the numbers (`summary`),
//! `results.csv` and `report.md` (`report`) and the plot (`figure`).

pub mod catalog;
pub mod experiment;
pub mod figure;
mod idletax;
mod reallocation;
pub mod report;
pub mod run;
mod shares;
pub mod summary;

use crate::args::BenchArgs;
use crate::harness::order::interleave;
use crate::harness::{setup, Bench, Family};
use catalog::find;
use experiment::HostExperiment;

/// `memvisor bench shares|idletax|reallocation`.
pub struct Host;

impl Family for Host {
    type Plan = HostExperiment;

    fn plan(&self, a: &BenchArgs) -> Result<HostExperiment, String> {
        let e = find(&a.experiment, a.scale)
            .ok_or_else(|| format!("unknown experiment '{}'", a.experiment))?;
        if !a.configs.is_empty() || a.reference.is_some() {
            return Err(format!(
                "{} runs memvisor host only (QEMU has no share-based allocator): --configs and --reference do not apply",
                a.experiment
            ));
        }
        Ok(e)
    }

    fn run(&self, a: &BenchArgs, bench: &Bench, e: HostExperiment) -> Result<(), String> {
        let _only_bench = setup::take_host(&a.swap_file)?;
        let (exe, out, env) = (&bench.exe, &bench.out, &bench.env);
        let what = |(): &(), (): &()| "memvisor host".to_owned();
        let reps = a.reps.unwrap_or(1);
        let once = |_| vec![()];
        let runs = interleave(e.name, reps, once, &[()], what, |t| {
            let budget = e.memory >> 20;
            t.say(&format!("budget {budget} MiB, {:.0} s", e.duration));
            let rep_out = if reps == 1 {
                out.to_owned()
            } else {
                out.join(format!("rep{}", t.rep))
            };
            std::fs::create_dir_all(rep_out.join("logs"))
                .map_err(|err| format!("{}: {err}", rep_out.display()))?;
            let run = run::run_once(exe, &e, &rep_out, &t.label)?;
            t.say(&format!("done: {}", summary::headline(&e, &run)));
            Ok(vec![run])
        })?;
        let first = runs.first().ok_or_else(|| "no run to plot".to_owned());
        let (csv, md) = (report::csv(&e, &runs), report::markdown(&e, &runs, env));
        crate::report::write_report(out, e.name, csv, |svg| figure::plot(svg, &e, first?), md)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::Scale;
    use experiment::{budget_for, config_text, Goal};
    use memvisor_api::VmSpec;
    use std::path::Path;

    #[test]
    fn every_host_experiment_is_consistent() {
        for name in crate::families::figures::of(crate::families::figures::Family::Host) {
            for scale in [Scale::Full, Scale::Quick] {
                let e = find(name, scale).unwrap();
                assert_eq!(e.name, name);
                let names: Vec<&str> = e.vms.iter().map(|v| v.spec.name.as_str()).collect();
                match e.goal {
                    Goal::Shares { big, small, ratio } => {
                        assert!(names.contains(&big) && names.contains(&small));
                        let s = |n: &str| e.vms.iter().find(|v| v.spec.name == n).unwrap();
                        let r = s(big).spec.shares as f64 / s(small).spec.shares as f64;
                        assert!((r - ratio).abs() < 1e-9);
                        // Both want more than the budget can give them together.
                        let usable = e.memory - 2 * (24 << 20) - e.memory * 6 / 100;
                        assert!(e.vms.iter().all(|v| v.spec.mem > usable / 2));
                    }
                    Goal::IdleTax { idle, busy, switch } => {
                        assert!(names.contains(&idle) && names.contains(&busy));
                        assert_eq!(e.idle_tax, 0.0);
                        assert_eq!(e.tax_changes, vec![(switch, 0.75)]);
                        assert!(e.vms.iter().all(|v| v.at < switch) && switch < e.duration);
                        assert!(e.vms[0].spec.shares == e.vms[1].spec.shares);
                    }
                    Goal::Reallocation { returns, idle } => {
                        assert!(names.contains(&returns));
                        assert!(0.0 < idle.0 && idle.0 < idle.1 && idle.1 < e.duration);
                        // min = max / 2, shares in proportion to max, a balloon each; more
                        // memory than the budget.
                        for v in &e.vms {
                            assert_eq!(v.spec.min * 2, v.spec.mem);
                            assert_eq!(v.spec.shares * (1 << 20), v.spec.mem * 10);
                            assert!(v.spec.balloon && v.at <= 0.0);
                        }
                        let all: u64 = e.vms.iter().map(|v| v.spec.mem).sum();
                        assert!(all > e.memory);
                    }
                }
                for v in &e.vms {
                    v.spec.check().unwrap();
                    assert!(v.at < e.duration);
                }
                // The config the host reads parses, with the VMs that start at once.
                let dir = Path::new("/tmp/state");
                let text = config_text(&e, dir);
                let c =
                    memvisor_host::HostConfig::parse(Path::new("/tmp/host.toml"), &text).unwrap();
                assert_eq!(c.memory, e.memory);
                assert_eq!(c.idle_tax, e.idle_tax);
                assert_eq!(c.sample_period, e.sample_period);
                assert_eq!(c.tick, e.tick);
                assert_eq!(c.state_dir, dir);
                let at_start: Vec<&VmSpec> = e
                    .vms
                    .iter()
                    .filter(|v| v.at <= 0.0)
                    .map(|v| &v.spec)
                    .collect();
                assert_eq!(c.vms.len(), at_start.len());
                for (got, want) in c.vms.iter().zip(at_start) {
                    assert_eq!(got, want);
                }
            }
        }
        assert!(find("seqread", Scale::Full).is_none());
    }

    #[test]
    fn the_budget_leaves_what_the_targets_divide() {
        let b = budget_for(360, 2);
        let usable = (b >> 20) - 48 - (b >> 20) * 6 / 100;
        assert!((359..=361).contains(&usable), "{b} {usable}");
    }
}
