//! The table of page states: where each 4 KiB guest page's content is, and the decisions that
//! move it. Pure: no syscalls. The pager thread asks the table what to do and carries it out;
//! the model test (`tests.rs`) carries the same decisions out on a simulated memory.

pub mod census;
pub mod clean_reuse;
pub mod in_flight;
pub mod mirrors;
pub mod page_state;
pub mod table;
#[cfg(test)]
mod tests;
