//! The families of experiments, one folder each. A family's `mod.rs` holds the
//! [`Family`](crate::harness::Family) the one driver runs (its flags checked into its plan);
//! beside it its experiments as data (`experiment`), its runs (`run`) and its outputs
//! (`report`, and where it has them `summary` and `figure`). What each experiment reproduces
//! is data in [`figures`]. Adding an experiment family is adding a folder, its [`figures::Family`]
//! and its line in [`run`].

pub mod confinement;
pub mod consolidate;
pub mod dwell;
pub mod figures;
pub mod host;
pub mod mobility;
pub mod phases;
pub mod published;
pub mod reclaimdelay;
pub mod sharing;
pub mod swapin;

use crate::args::{BenchArgs, Outcome};
use crate::harness::drive;
use figures::Family;

/// The experiment named in `args`, through its family's driver; an unknown name is bad input.
pub fn run(args: &BenchArgs) -> Outcome {
    let Some(e) = figures::find(&args.experiment) else {
        eprintln!(
            "memvisor bench: unknown experiment '{}'; memvisor bench runs: {}",
            args.experiment,
            figures::names()
        );
        return Outcome::BadInput;
    };
    if let Some(more) = &args.paper {
        eprintln!(
            "memvisor bench {}: '{more}' is one name too many: a paper's set runs as `memvisor bench reproduce PAPER`",
            e.name
        );
        return Outcome::BadInput;
    }
    match e.family {
        Family::Consolidate => drive(&consolidate::Consolidation::Consolidate, args),
        Family::Balance => drive(&consolidate::Consolidation::Balance, args),
        Family::Allocate => drive(&consolidate::Consolidation::Allocate, args),
        Family::Swapin => drive(&swapin::Swapin, args),
        Family::Confinement => drive(&confinement::Confinement, args),
        Family::Mobility => drive(&mobility::Mobility, args),
        Family::ReclaimDelay => drive(&reclaimdelay::ReclaimDelay, args),
        Family::Dwell => drive(&dwell::Dwell, args),
        Family::Sharing => drive(&sharing::Sharing(e.name), args),
        Family::Host => drive(&host::Host, args),
        Family::Phases => drive(&phases::Phases, args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::Scale;

    /// Each family can run every experiment the data gives it; no name is there twice.
    #[test]
    fn the_families_run_what_the_data_names() {
        for scale in [Scale::Full, Scale::Quick] {
            for name in figures::of(Family::Phases) {
                assert!(phases::catalog::find(name, scale).is_some(), "{name}");
            }
            for name in figures::of(Family::Host) {
                assert!(host::catalog::find(name, scale).is_some(), "{name}");
            }
        }
        let mut names: Vec<&str> = figures::EXPERIMENTS.iter().map(|e| e.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), figures::EXPERIMENTS.len(), "a name twice");
        for e in figures::EXPERIMENTS {
            assert!(!e.label().is_empty() && !e.peer.is_empty(), "{}", e.name);
        }
    }
}
