//! What decides each tick: memvisor's policy (`memvisor_policy::plan`, unchanged) or one of the
//! simulator's own baselines to compare it with. The baselines are not memvisor's policy: they
//! are simple rules written here to measure it against, returning the same [`VmAction`]s so the
//! simulated VMs carry them out the same way.

use memvisor_policy::{plan, Before, FreeState, HostParams, Plan, VmAction, VmObservation};

use crate::scenario::{PolicyKind, Scenario};

/// What a baseline needs that the policy does not see: each guest's free memory (MOM reads it
/// from a guest agent).
pub struct Extra<'a> {
    pub guest_free: &'a [u64],
    pub static_share: &'a [u64],
}

/// One tick's decisions.
pub fn decide(
    s: &Scenario,
    before: Before,
    obs: &[VmObservation],
    oom: &[bool],
    extra: &Extra<'_>,
) -> Plan {
    let host = s.params();
    match s.host.policy {
        PolicyKind::Esx => plan(&host, before, obs, oom),
        PolicyKind::Static => fixed(&host, before.state, obs, extra.static_share),
        PolicyKind::Threshold => threshold(s, &host, before.state, obs, extra.guest_free),
    }
}

/// What the VMs hold, and the free memory that leaves.
fn held_free(host: &HostParams, obs: &[VmObservation]) -> (u64, u64) {
    let held: u64 = obs.iter().map(|v| v.resident + v.overhead + v.pooled).sum();
    (held, host.budget.saturating_sub(held))
}

/// Each VM's share of the budget by shares (less overheads), at most its `max`: the static
/// baseline's fixed allocation, computed once at start.
pub fn static_shares(host: &HostParams, obs: &[VmObservation]) -> Vec<u64> {
    let overheads: u64 = obs.iter().map(|v| v.overhead).sum();
    let usable = host.budget.saturating_sub(overheads) as f64;
    let shares: f64 = obs.iter().map(|v| v.shares as f64).sum::<f64>().max(1.0);
    obs.iter()
        .map(|v| {
            // A fraction of the budget: in range.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let s = (usable * v.shares as f64 / shares) as u64;
            s.min(v.max)
        })
        .collect()
}

/// Static balloons: a balloon leaves each VM its fixed share from the start; a VM without a
/// balloon has its pager limit there. Nothing moves after.
fn fixed(host: &HostParams, state: FreeState, obs: &[VmObservation], share: &[u64]) -> Plan {
    let (held, free) = held_free(host, obs);
    let actions = obs
        .iter()
        .zip(share)
        .map(|(v, &t)| VmAction {
            target: t,
            balloon: v.balloon.map(|_| v.max - t),
            limit: if v.balloon.is_some() { v.max } else { t },
            pause: false,
            pool: 0,
            oom_demand: 0,
        })
        .collect();
    Plan {
        state: state.next(free, host.budget, &host.thresholds),
        free,
        held,
        growth: 0,
        pool: 0,
        actions,
    }
}

/// A MOM-like threshold rule: below `mom_low` of the budget free, each ballooned guest gives a
/// twentieth of its free memory per tick; above `mom_high`, each balloon gives back a twentieth
/// of the guest's memory. No targets, no paging, no pauses.
fn threshold(
    s: &Scenario,
    host: &HostParams,
    state: FreeState,
    obs: &[VmObservation],
    guest_free: &[u64],
) -> Plan {
    let (held, free) = held_free(host, obs);
    let frac = free as f64 / host.budget as f64;
    let actions = obs
        .iter()
        .zip(guest_free)
        .map(|(v, &gf)| {
            let balloon = v.balloon.map(|b| {
                if frac < s.host.mom_low {
                    (b + gf / 20).min(v.max.saturating_sub(v.min))
                } else if frac > s.host.mom_high {
                    b.saturating_sub(v.max / 20)
                } else {
                    b
                }
            });
            VmAction {
                target: v.max - balloon.unwrap_or(0),
                balloon,
                limit: v.max,
                pause: false,
                pool: 0,
                oom_demand: 0,
            }
        })
        .collect();
    Plan {
        state: state.next(free, host.budget, &host.thresholds),
        free,
        held,
        growth: 0,
        pool: 0,
        actions,
    }
}
