//! The host simulator: a discrete-time model of one host of many simulated VMs, driving `memvisor_policy::plan` unchanged every tick, with workload generators, a memory model of the mechanisms' costs, scenario files and reports.
//!
//! | file | owns |
//! |---|---|
//! | `rng.rs` | the seeded generator (one stream per VM) |
//! | `units.rs` | sizes and durations as a scenario writes them |
//! | `costs.rs` | what each mechanism costs (measured values as defaults) |
//! | `workload.rs` | the generators: step, idle, hot set, stream, loop, burst |
//! | `vm.rs` | one VM's memory model, its observation and how it carries out an action |
//! | `scenario.rs` | the scenario file and its checks |
//! | `baseline.rs` | what decides: `plan`, or the simulator's own baselines |
//! | `sim.rs` | the run: admission, start limits, ticks |
//! | `fleet.rs` | several hosts, and an orchestrator placing VMs on them by what each host's API says |
//! | `stats.rs`, `report.rs` | summaries, CSVs, markdown and SVG plots |
//! | `calibrate.rs` | a real host's trace beside the simulated run of the same VMs, with the error |
//! | `cli.rs` | `memvisor sim` |
//!
//! A run's trace (`--trace`) and its replay (`--replay`) are the host's format, written and read
//! by `memvisor_policy::trace`.

pub mod baseline;
pub mod calibrate;
pub mod cli;
pub mod costs;
pub mod fleet;
pub mod report;
pub mod rng;
pub mod scenario;
pub mod sim;
pub mod stats;
pub mod units;
pub mod vm;
pub mod workload;

pub use scenario::{Scenario, ScenarioError};
pub use sim::Sim;
