//! Each family's outputs: `results.csv`, `report.md` and the figures (SVG and PNG).

pub mod plot;
pub mod recovery;
pub mod report;
pub mod workingset;
