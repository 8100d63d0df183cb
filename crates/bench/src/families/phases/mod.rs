//! `memvisor bench` for the experiments of phases (the names of `catalog`): each as data
//! (`experiment`, one file each), on memvisor and QEMU configurations (`configs`): every
//! configuration run repetition by repetition on the same guest kit ELF, disks and memory
//! sizes (`run`, one VM at a time through `vm`), then
//! `results.csv`, `report.md` and the figure: the phases (`report`, `figure`), the phases at
//! each limit of a sweep (`sweep`), a time series (`workingset`) or a release (`recovery`).

mod alloc;
mod ballooned;
pub mod catalog;
mod compile;
mod compress;
pub mod configs;
mod doublepaging;
pub mod experiment;
pub mod figure;
mod gcchurn;
mod holes;
mod overhead;
mod patterns;
pub mod recovery;
pub mod report;
pub mod run;
mod seqread;
pub mod sweep;
pub mod tracked;
pub mod vm;
pub mod workingset;

use crate::args::BenchArgs;
use crate::harness::{choose, Bench, Family};
use catalog::find;
use configs::Config;
use experiment::{Experiment, Measure};
use run::PhasesPlan;

/// `memvisor bench` for the experiments of [`catalog::find`].
pub struct Phases;

impl Family for Phases {
    type Plan = PhasesPlan;

    /// The experiment, repetitions, configurations and reference the flags ask for, checked in
    /// that order.
    fn plan(&self, a: &BenchArgs) -> Result<PhasesPlan, String> {
        let exp = find(&a.experiment, a.scale)
            .ok_or_else(|| format!("unknown experiment '{}'", a.experiment))?;
        let reps = a.reps.unwrap_or_else(|| exp.default_reps());
        let configs = configs_of(a, &exp)?;
        check_measure(a, &exp, &configs)?;
        let reference = reference_of(a, &exp, &configs)?;
        Ok(PhasesPlan {
            exp,
            reps,
            configs,
            reference,
        })
    }

    fn run(&self, args: &BenchArgs, bench: &Bench, plan: PhasesPlan) -> Result<(), String> {
        match &plan.exp.measure {
            Measure::Sweep(s) => sweep::run(args, bench, &plan, s),
            _ => run::run(args, bench, &plan).map(|_| ()),
        }
    }
}

/// The configurations of `--configs`, or the experiment's; each once, in the order given.
fn configs_of(a: &BenchArgs, exp: &Experiment) -> Result<Vec<&'static Config>, String> {
    let names: Vec<String> = if a.configs.is_empty() {
        exp.configs.iter().map(|s| (*s).to_owned()).collect()
    } else {
        a.configs.clone()
    };
    let unknown = |n: &str, all: &str| format!("unknown configuration '{n}'; known: {all}");
    choose(&names, configs::CONFIGS, |c| c.name, unknown)
}

/// What the kind of experiment asks of the configurations and flags.
fn check_measure(
    a: &BenchArgs,
    exp: &Experiment,
    configs: &[&'static Config],
) -> Result<(), String> {
    let name = exp.name;
    if let Measure::Series(_) = exp.measure {
        // The working-set estimate is the pager's: only configurations where it holds guest RAM
        // have one, and nothing is compared, so there is no reference.
        if let Some(c) = configs.iter().find(|c| !c.pager_holds_ram()) {
            let holding = configs::CONFIGS.iter().filter(|c| c.pager_holds_ram());
            let holding: Vec<&str> = holding.map(|c| c.name).collect();
            let (c, holding) = (c.name, holding.join(", "));
            return Err(format!("{name} measures memvisor's working-set estimate, which only its pager makes; '{c}' has none (QEMU has no estimator); give configurations where memvisor's pager holds guest RAM: {holding}"));
        }
        if let Some(r) = &a.reference {
            return Err(format!(
                "--reference {r}: {name} compares no configurations (no ratios); leave it out"
            ));
        }
    }
    if let Measure::GiveBack(_) = exp.measure {
        // Memory is given back by raising a limit: a configuration without one has nothing
        // to give back.
        if let Some(c) = configs.iter().find(|c| !c.limits_ram()) {
            let (c, limited) = (c.name, recovery::CONFIGS.join(", "));
            return Err(format!("{name} gives memory back by raising the VM's limit; '{c}' has no limit; give configurations with one, e.g. {limited}"));
        }
    }
    Ok(())
}

/// The configuration ratios are taken against: `--reference`, or the experiment's; for a time
/// series (and a release whose reference is not run) the first configuration.
fn reference_of(
    a: &BenchArgs,
    exp: &Experiment,
    configs: &[&'static Config],
) -> Result<&'static str, String> {
    let default_missing = !configs.iter().any(|c| c.name == exp.reference);
    let first = match exp.measure {
        Measure::Series(_) => true,
        Measure::GiveBack(_) => default_missing,
        Measure::Phases | Measure::Sweep(_) | Measure::Tracked(_) => false,
    };
    let want = match (&a.reference, configs.first()) {
        (None, Some(c)) if first => c.name,
        _ => a.reference.as_deref().unwrap_or(exp.reference),
    };
    let run = configs.iter().find(|c| c.name == want).map(|c| c.name);
    run.ok_or_else(|| format!("the reference configuration '{want}' is not among those run; add it to --configs or pick --reference"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::Scale;
    use experiment::phases;
    use std::time::Duration;

    #[test]
    fn every_experiment_names_known_configurations() {
        for name in crate::families::figures::of(crate::families::figures::Family::Phases) {
            for scale in [Scale::Full, Scale::Quick] {
                let e = find(name, scale).unwrap();
                assert!(e.configs.contains(&e.reference));
                for c in e.configs {
                    assert!(configs::find(c).is_some(), "{c}");
                }
                assert!(e.steps.iter().all(|s| !s.phases.is_empty()));
            }
        }
        assert!(find("nope", Scale::Full).is_none());
        let s = find("seqread", Scale::Full).unwrap();
        assert_eq!((s.mem, s.limit), (512 << 20, Some(100 << 20)));
        assert_eq!(s.steps[0].phases.len(), 8);
        let o = find("overhead", Scale::Full).unwrap();
        let w: Vec<_> = o.steps.iter().map(|s| s.workload).collect();
        assert_eq!(w, ["compile", "kv", "gcchurn", "mapreduce"]);
        assert_eq!(o.limit, Some(o.mem));
        // Each hypervisor with and without a balloon device, standalone and on the pager.
        for c in o.configs {
            let c = configs::find(c).unwrap();
            let twin = c.without_balloon().map(|t| t.name);
            assert!(!c.balloon, "{}: never inflated", c.name);
            let twin_runs = twin.is_some_and(|t| o.configs.contains(&t));
            assert!(!c.balloon_device() || twin_runs, "{}", c.name);
        }
        for c in ["qemu-fpr", "memvisor-nolimit-fpr", "memvisor-fpr"] {
            assert!(o.configs.contains(&c), "{c}");
        }
        // mapreduce reads the file mkdisk wrote, and the disk has room for it.
        let m = &o.steps[3];
        let d = m.disk.as_ref().unwrap();
        assert!(m.cmdline.contains("input=src input_mb=128") && d.files == "src:128M");
        assert!(!d.writable && d.size_mb > 128);
        // VSwapper's experiments also run the cooperative path (free page reporting).
        for name in ["seqread", "alloc"] {
            let e = find(name, Scale::Full).unwrap();
            assert!(e.configs.contains(&"memvisor-fpr"), "{name}");
            assert!(e.configs.contains(&"memvisor-vswapper-fpr"), "{name}");
        }
        // Tesseract's runs the pager without and with its indirections, on a guest that swaps
        // to its own disk.
        let d = find("doublepaging", Scale::Full).unwrap();
        assert!(d.configs.contains(&"memvisor-pager") && d.configs.contains(&"memvisor-tesseract"));
        assert!(d.steps[0].guest_swap_mb.is_some() && d.steps[0].cmdline.contains("hog_mb="));
    }

    /// `workingset` (ESX Fig. 6): the toucher's schedule goes up and down, every step lasts
    /// several sampling periods, the pager holds guest RAM without pressure, and the guest is
    /// told the same schedule the report measures against.
    #[test]
    fn workingset_steps_last_several_sampling_periods() {
        for scale in [Scale::Full, Scale::Quick] {
            let e = find("workingset", scale).unwrap();
            let s = e.measure.series().expect("a time series");
            assert_eq!(e.limit, Some(e.mem), "{scale:?}");
            assert_eq!(e.configs, &["memvisor-pager"][..]);
            assert_eq!(e.default_reps(), 1);
            let step = &e.steps[0];
            assert_eq!((e.steps.len(), step.workload), (1, "toucher"));
            let spec: Vec<String> = s.schedule.iter().map(|(m, t)| format!("{m}:{t}")).collect();
            assert_eq!(step.cmdline, format!("schedule={}", spec.join(",")));
            assert_eq!(step.phases, phases("step", s.schedule.len() as u64));
            let sizes: Vec<u64> = s.schedule.iter().map(|x| x.0).collect();
            assert!(sizes.windows(2).any(|w| w[1] > w[0]), "a step up");
            assert!(sizes.windows(2).any(|w| w[1] < w[0]), "a step down");
            for &(mb, secs) in &s.schedule {
                let (periods, room) = (s.sample_period * 8, e.mem / 2);
                assert!(Duration::from_secs(secs) >= periods, "{scale:?}");
                assert!(
                    mb << 20 <= room,
                    "{scale:?}: {mb} MiB leaves the guest room"
                );
            }
            assert!(s.every <= s.sample_period * 4);
        }
        let full = find("workingset", Scale::Full).unwrap();
        let flags = full.measure.series().unwrap().run_flags();
        assert_eq!(flags, ["--sample-pages", "400", "--sample-period", "2"]);
        assert_eq!(find("seqread", Scale::Full).unwrap().default_reps(), 3);
    }
}
