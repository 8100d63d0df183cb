//! The experiments of phases by name ([`find`]), over their data files.

use crate::args::Scale;

use super::experiment::Experiment;
use super::{
    alloc, ballooned, compile, compress, doublepaging, gcchurn, overhead, patterns, recovery,
    seqread, tracked, workingset,
};

/// The experiment called `name` at `scale`.
pub fn find(name: &str, scale: Scale) -> Option<Experiment> {
    Some(match name {
        "seqread" => seqread::experiment(scale),
        "alloc" => alloc::experiment(scale),
        "overhead" => overhead::experiment(scale),
        "workingset" => workingset::experiment(scale),
        "doublepaging" => doublepaging::experiment(scale),
        "overcommit" => doublepaging::overcommit(scale),
        "pressure" => doublepaging::pressure(scale),
        "compress" => compress::experiment(scale),
        "compile" => compile::experiment(scale),
        "gcchurn" => gcchurn::experiment(scale),
        "patterns" => patterns::experiment(scale),
        "ballooned" => ballooned::experiment(scale),
        "tracked" => tracked::experiment(scale),
        // `recovery` and its other YCSB mixes.
        _ => recovery::experiment(scale, recovery::mix_of(name)?),
    })
}
