//! The host experiments by name ([`find`]), over their data files.

use crate::args::Scale;

use super::experiment::HostExperiment;
use super::{idletax, reallocation, shares};

/// The host experiment called `name` at `scale`.
pub fn find(name: &str, scale: Scale) -> Option<HostExperiment> {
    Some(match name {
        "shares" => shares::experiment(scale),
        "idletax" => idletax::experiment(scale),
        "reallocation" => reallocation::experiment(scale),
        _ => return None,
    })
}
