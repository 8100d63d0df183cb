//! A tick's inputs and its plan: the host-wide parameters, what the tick before left, what is
//! observed of each VM, and what to ask of it.

use crate::free_state::{FreeState, Thresholds};

/// How long a VM that deflated on OOM counts as fully active, in seconds; the host turns it into
/// ticks ([`HostParams::oom_demand_ticks`]).
pub const OOM_DEMAND_SECONDS: f64 = 10.0;

/// How far above its target a VM may be before the low state pauses it. A pager holding a VM at
/// its limit lets it run past the limit by up to one reclaim chunk (256 pages) and one fault's
/// install (32 pages) before reclaim catches up; such a VM is held at its target already, and
/// pausing it would stop it for nothing. (Before this margin, a VM that had just joined with its
/// limit at its target was paused in the low state for being 0.1 MiB over.)
pub const PAUSE_SLACK: u64 = 2 << 20;

/// The host-wide inputs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostParams {
    /// Memory for every VM together, their VMMs' overheads and the host's own memory included.
    pub budget: u64,
    /// The host's own memory (the host process, measured each tick): part of the budget.
    pub own: u64,
    /// The idle memory tax, 0 to 1.
    pub idle_tax: f64,
    pub thresholds: Thresholds,
    /// The most memory the VMs' pools may hold together (0: no pools).
    pub pool: u64,
    /// Ticks during which a VM that deflated on OOM counts as fully active
    /// ([`OOM_DEMAND_SECONDS`] of the host's ticks).
    pub oom_demand_ticks: u32,
    /// The most of a VM's memory (`max`) its balloon holds, 0 to 1 (`[host] balloon_max`,
    /// [`BALLOON_MAX`](crate::balloon::BALLOON_MAX)); what a target needs beyond it is paged.
    pub balloon_max: f64,
    /// How far balloons inflate in the soft state (`[host] balloon_inflate`).
    pub balloon_inflate: BalloonInflate,
}

/// How far a balloon inflates in the soft state (`[host] balloon_inflate`); in `hard` and
/// `low` it goes to its target either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BalloonInflate {
    /// By its part of what free memory lacks to be back at the high threshold, as the VMs
    /// without a balloon are paged there ([`crate::plan`]).
    #[default]
    Deficit,
    /// To its target at once, as ESX does.
    Target,
}

impl HostParams {
    /// Ticks of `tick` seconds that last [`OOM_DEMAND_SECONDS`] (at least one).
    #[must_use]
    pub fn oom_demand_ticks(tick: f64) -> u32 {
        // Finite and positive, so the quotient is a small positive number.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let n = (OOM_DEMAND_SECONDS / tick.max(1e-3)).ceil().clamp(1.0, 1e6) as u32;
        n
    }
}

/// What the tick before left.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Before {
    /// Its free-memory state.
    pub state: FreeState,
}

impl From<FreeState> for Before {
    /// A tick with no tick before it in `state`.
    fn from(state: FreeState) -> Before {
        Before { state }
    }
}

/// What is known of one VM at a tick (bytes).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct VmObservation {
    pub min: u64,
    pub max: u64,
    pub shares: u64,
    /// The sampled active fraction of its resident pages, 0 to 1.
    pub active: f64,
    /// Guest pages resident on the host.
    pub resident: u64,
    /// Memory its pool holds.
    pub pooled: u64,
    /// Host memory its VMM needs besides guest RAM.
    pub overhead: u64,
    /// The balloon's size now asked for; `None` without a balloon device.
    pub balloon: Option<u64>,
    /// What its balloon was asked for and its driver does not hold yet: memory on its way
    /// (0 in traces written before it was recorded).
    #[serde(default)]
    pub balloon_pending: u64,
    /// Its balloon's driver answers ([`BalloonWatch`](crate::balloon::BalloonWatch)): without
    /// that, it is planned for as a VM without a balloon (true in traces written before).
    #[serde(default = "yes")]
    pub balloon_usable: bool,
    /// The most its balloon may hold since its guest re-read what the balloon took
    /// ([`BalloonWatch::take_rereads`](crate::balloon::BalloonWatch::take_rereads)), below
    /// the host's cap; `None`: only the host's cap.
    #[serde(default)]
    pub balloon_reread_cap: Option<u64>,
    /// The pager's resident limit now.
    pub limit: u64,
    /// Ticks left during which it counts as fully active after a deflate-on-OOM.
    pub oom_demand: u32,
    /// Memory its pager reclaimed since the last tick to keep it under its limit: it is
    /// pressed against its limit, however far below the limit its resident pages were when
    /// observed (a pager reclaims in batches, so they may be well below it).
    #[serde(default)]
    pub reclaimed: u64,
    /// What its resident guest pages grew by since the last tick (0 at its first, and in
    /// traces written before it was recorded).
    #[serde(default)]
    pub grown: u64,
}

fn yes() -> bool {
    true
}

/// What to ask of one VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VmAction {
    pub target: u64,
    /// The balloon size to ask for; `None` without a balloon device.
    pub balloon: Option<u64>,
    /// The pager's resident limit.
    pub limit: u64,
    /// Keep (or put) the VM paused.
    pub pause: bool,
    /// Its share of the pool.
    pub pool: u64,
    /// Ticks left of OOM demand, for the next observation.
    pub oom_demand: u32,
}

/// The plan for one tick.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub state: FreeState,
    /// Free memory: the budget minus resident guest pages and overheads (0 when above it).
    pub free: u64,
    /// What the VMs hold: resident guest pages, overheads and pools.
    pub held: u64,
    /// What the VMs grew by since the tick before, each at most the room left under its limit:
    /// the growth the state anticipated.
    pub growth: u64,
    /// The pools' size together this tick ([`pool_size`](crate::budget::pool_size)).
    pub pool: u64,
    pub actions: Vec<VmAction>,
}

#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;

    pub const MIB: u64 = 1 << 20;

    /// A host of `budget` bytes with the idle tax at 0.75, no pool, 10 ticks of OOM demand, no
    /// cap on balloons, and balloons inflated to their targets in soft (ESX's way).
    pub fn host(budget: u64) -> HostParams {
        HostParams {
            budget,
            own: 0,
            idle_tax: 0.75,
            thresholds: Thresholds::default(),
            pool: 0,
            oom_demand_ticks: 10,
            balloon_max: 1.0,
            balloon_inflate: BalloonInflate::Target,
        }
    }

    pub fn vm(max: u64, resident: u64, active: f64) -> VmObservation {
        VmObservation {
            min: 0,
            max,
            shares: 1000,
            active,
            resident,
            pooled: 0,
            overhead: 16 * MIB,
            balloon: Some(0),
            balloon_pending: 0,
            balloon_usable: true,
            balloon_reread_cap: None,
            limit: max,
            oom_demand: 0,
            reclaimed: 0,
            grown: 0,
        }
    }
}
