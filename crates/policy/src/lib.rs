//! Memory allocation decisions for a host of VMs, as pure functions of observations: ESX's share-based allocation with the idle memory tax, active-memory estimates, free-memory states and admission control; HyperDealer2's ghost cache and demand estimate. No syscalls and no clocks, so the host manager and a simulator get the same answers from the same inputs.
//!
//! | file | decides | paper |
//! |---|---|---|
//! | `allocation.rs` | each VM's target: min-funding revocation on shares per page, idle pages taxed | ESX §5.1–§5.2 |
//! | `active.rs` | the active-memory estimate from sampled pages: fast and slow EWMAs and the current period | ESX §5.3 |
//! | `free_state.rs` | the free-memory state (high / soft / hard / low) with hysteresis, and what each state does | ESX §6.3 |
//! | `admission.rs` | whether a VM may start: `min` + overhead in memory, `max − min` in swap | ESX §6.2 |
//! | `ghost.rs` | the ghost cache: Mattson stack distances of blocks that left a VM's memory | HD2 §5.3 |
//! | `demand.rs` | which VMs need memory and how much, from ghost hits and swap activity | HD2 §4.6 |
//! | `balloon.rs` | whether a VM's balloon is usable (its driver answers within a deadline), and the adaptive step its target moves by per tick | ESX §3.2, §6.3 |
//! | `tick.rs` | a tick's inputs and its plan: the host's parameters, what the tick before left, each VM's observation and action | – |
//! | `budget.rs` | what the budget leaves for the VMs: the high state's reserve, what targets divide, the pools' size, a new VM's start limit; limits that keep what the VMs may hold, their VMMs and the host within the budget at every instant (`hold`): admission at `min` and overhead, raises for VMs pressed against their limits, idle limits trimmed | ESX §6.2–§6.3; MemFlex |
//! | `budget_tests.rs` | (tests) `hold` through `plan`: the budget at every tick, a VM waiting for its `min` and overhead, not its target, idle limits trimmed before paging | – |
//! | `plan.rs` | one tick of the host: free memory, targets, and each VM's balloon (paged where it is not usable, capped at `balloon_max` of its memory), limit and pause | ESX §3.2, §5–§6 |
//! | `plan_tests.rs` | (tests) `plan.rs`: each state's balloons, limits and pauses, the growth projection, headroom, the pool | – |
//! | `balance.rs` | on top of a tick's plan: demand, beneficiaries, instant releases of victims' clean pages handed to them in the same tick, and the capacity gap reducer | HyperDealer2 §4.3, §4.6, §4.7 |
//! | `trace.rs` | a tick's inputs and plan as a JSON line, and replaying a trace through `plan` | – |

pub mod active;
pub mod admission;
pub mod allocation;
pub mod balance;
pub mod balloon;
pub mod budget;
#[cfg(test)]
mod budget_tests;
pub mod demand;
pub mod free_state;
pub mod ghost;
pub mod plan;
pub mod tick;
pub mod trace;

pub use active::ActiveEstimate;
pub use admission::{admit, unreserve, AdmissionRefusal, Reservations};
pub use allocation::{targets, VmDemand};
pub use balance::{BalanceObservation, BalanceParams, Decision, Settled, VmBalance};
pub use balloon::{BalloonReading, BalloonWatch};
pub use budget::start_limit;
pub use demand::{assess, estimate, Demand, DemandInput, DemandParams, Observation};
pub use free_state::{FreeState, Reclaim, Thresholds};
pub use ghost::{Ghost, GhostError, GHOST_BUCKETS};
pub use plan::plan;
pub use tick::{Before, HostParams, Plan, VmAction, VmObservation};
