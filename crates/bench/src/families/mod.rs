//! The families of experiments, one folder each. A family's `mod.rs` holds the
//! [`Family`](crate::harness::Family) the one driver runs (its flags checked into its plan);
//! beside it its experiments as data (`experiment`), its runs (`run`) and its outputs
//! (`report`, and where it has them `summary` and `figure`). Adding an experiment family is
//! adding a folder and its line in [`run`].

pub mod confinement;
pub mod consolidate;
pub mod dwell;
pub mod host;
pub mod phases;
pub mod reclaimdelay;
pub mod sharing;
pub mod swapin;

use crate::args::{BenchArgs, Outcome};
use crate::harness::drive;

/// The experiment named in `args`, through its family's driver; an unknown name is bad input.
pub fn run(args: &BenchArgs) -> Outcome {
    match args.experiment.as_str() {
        "consolidate" => drive(&consolidate::Consolidate { balance: false }, args),
        "balance" => drive(&consolidate::Consolidate { balance: true }, args),
        "swapin" => drive(&swapin::Swapin, args),
        "confinement" => drive(&confinement::Confinement, args),
        "reclaimdelay" => drive(&reclaimdelay::ReclaimDelay, args),
        "dwell" => drive(&dwell::Dwell, args),
        "sharing" => drive(&sharing::Sharing("sharing"), args),
        "zeroboot" => drive(&sharing::Sharing("zeroboot"), args),
        name if host::catalog::NAMES.contains(&name) => drive(&host::Host, args),
        name if phases::catalog::NAMES.contains(&name) => drive(&phases::Phases, args),
        name => {
            eprintln!(
                "memvisor bench: unknown experiment '{name}'; memvisor bench runs: {}, {}, consolidate, balance, swapin, reclaimdelay, dwell, sharing, zeroboot, confinement",
                phases::catalog::NAMES.join(", "),
                host::catalog::NAMES.join(", ")
            );
            Outcome::BadInput
        }
    }
}
