//! What the budget leaves for the VMs: the high state's reserve, what targets divide, the pools'
//! size, the pager limit a new VM starts with, and the limits that keep the budget whole
//! ([`hold`]).
//!
//! The budget holds by construction: at every instant, what each VM may hold before the next
//! tick ([`committed`]: its resident pages, or its limit when that is more, which for a VM on
//! plain memory is all of its memory), each VMM's overhead, the pools' most and the host's own
//! memory sum to at most the budget. A limit is raised only into room that is free now; a
//! lowered limit frees nothing until the VM is observed under it, since its pager reclaims down
//! to it after the order, not at it.

use crate::allocation::{targets, VmDemand};
use crate::tick::{HostParams, VmAction, VmObservation};

/// What targets divide: the budget minus the VMMs' overheads, the host's own memory, the pool
/// and the high state's reserve.
pub(crate) fn usable(host: &HostParams, vms: &[VmObservation]) -> u64 {
    host.budget
        .saturating_sub(beside_guests(host, vms))
        .saturating_sub(reserve(host))
}

/// What targets set aside besides guest memory: the host's own memory, the pools' most (set
/// aside whole) and each VMM's overhead, a VM about to start included.
pub fn beside_guests(host: &HostParams, vms: &[VmObservation]) -> u64 {
    vms.iter()
        .map(|v| v.overhead)
        .fold(host.own.saturating_add(host.pool), u64::saturating_add)
}

/// Whether a VM has started: a VM about to start is observed with no resident pages and no
/// limit (a started one's limit is at least the pager's smallest, or all of its memory).
pub fn started(v: &VmObservation) -> bool {
    v.limit > 0 || v.resident > 0
}

/// What the budget must cover of a VM until the next tick with its limit at `limit`: its
/// resident pages, or the limit when that is more (it may fill it meanwhile), and its VMM's
/// overhead; nothing for a VM about to start that is given no limit. A VM on plain memory has
/// no limit: its limit is all of its memory.
pub fn charge(v: &VmObservation, limit: u64) -> u64 {
    if limit == 0 && v.resident == 0 {
        0
    } else {
        v.resident.max(limit).saturating_add(v.overhead)
    }
}

/// What the budget must cover of a VM now: its [`charge`] at its limit now.
pub fn committed(v: &VmObservation) -> u64 {
    charge(v, v.limit)
}

/// Everything the budget covers now: the host's own memory, the pools' most and every VM's
/// [`committed`] memory.
pub fn held_at_most(host: &HostParams, vms: &[VmObservation]) -> u64 {
    vms.iter()
        .map(committed)
        .fold(host.own.saturating_add(host.pool), u64::saturating_add)
}

/// The high state's reserve: the part of the budget targets leave free.
pub(crate) fn reserve(host: &HostParams) -> u64 {
    fraction_of(host.budget, host.thresholds.high)
}

/// The pools' size together: what the VMs do not hold (the budget minus their resident pages
/// and overheads, less the high state's reserve), at most `pool`. What the pools hold now is
/// not subtracted, so a pool does not shrink itself by filling: `pool_size − pooled` is free
/// memory minus the reserve, positive (room to grow) in the high state, negative (pooled pages
/// to spill) once free memory is under the reserve.
pub fn pool_size(host: &HostParams, vms: &[VmObservation]) -> u64 {
    let held: u64 = vms
        .iter()
        .map(|v| v.resident.saturating_add(v.overhead))
        .fold(host.own, u64::saturating_add);
    host.budget
        .saturating_sub(held)
        .saturating_sub(reserve(host))
        .min(host.pool)
}

/// The pager limit for a VM about to start beside `vms`: its target as if it were fully active
/// (it has not been sampled yet), at most its `max`. Limits are not raised past targets and
/// shrink only under pressure, so a VM started with no limit on a host short of memory would
/// take more than its share before the next tick, and the host would go past its budget until
/// reclaim caught up.
pub fn start_limit(host: &HostParams, vms: &[VmObservation], new: &VmObservation) -> u64 {
    let mut all: Vec<VmObservation> = vms.to_vec();
    all.push(VmObservation {
        active: 1.0,
        ..*new
    });
    let demands: Vec<VmDemand> = all
        .iter()
        .map(|v| VmDemand {
            min: v.min,
            max: v.max,
            shares: v.shares,
            active: if v.oom_demand > 0 { 1.0 } else { v.active },
        })
        .collect();
    targets(usable(host, &all), &demands, host.idle_tax)
        .last()
        .copied()
        .unwrap_or(new.max)
        .min(new.max)
}

/// How far above its resident pages a limit that makes room for others is left: room for its
/// VM to grow until the next tick raises it again.
pub const TRIM_MARGIN: u64 = 2 << 20;

/// Keeps a tick's `actions` within the budget ([module docs](self)). Lowered limits stay as the
/// plan lowered them. Raised ones get the room there is now ([`held_at_most`] below the budget),
/// first up to each VM's target (a VM about to start asks for its whole target), then beyond
/// it, in proportion to what each asks. When the raises up to targets, or a host already over
/// its budget, need more than that room, room is made for the next ticks: limits above what
/// their VMs hold come down toward it (never below the VM's target; a VM on plain memory goes
/// under the pager that way), and then, if that is not enough, VMs above their targets are
/// paged toward them, each in proportion to how far above it is. Limits above what their VMs
/// hold also come down, the same way, to make room for growth beyond targets.
pub fn hold(host: &HostParams, vms: &[VmObservation], actions: &mut [VmAction]) {
    let n = vms.len().min(actions.len());
    let (vms, actions) = (&vms[..n], &mut actions[..n]);
    if next(host, vms, actions, true) > host.budget {
        // A VM short of its target waits for room: raises beyond targets wait too, and VMs
        // above their targets give way.
        for (v, a) in vms.iter().zip(actions.iter_mut()) {
            if a.limit > v.limit {
                a.limit = a.limit.min(v.limit.max(a.target));
            }
        }
    }
    let room = host.budget.saturating_sub(held_at_most(host, vms));
    let raising: Vec<bool> = vms
        .iter()
        .zip(actions.iter())
        .map(|(v, a)| a.limit > v.limit)
        .collect();
    // What each raise costs: how much more its VM may hold at the new limit.
    let cost = |i: usize, limit: u64| {
        if raising[i] {
            charge(&vms[i], limit).saturating_sub(committed(&vms[i]))
        } else {
            0
        }
    };
    let want: Vec<u64> = (0..n).map(|i| cost(i, actions[i].limit)).collect();
    let entitled: Vec<u64> = (0..n)
        .map(|i| cost(i, actions[i].limit.min(actions[i].target)))
        .collect();
    let short = next(host, vms, actions, false).saturating_sub(host.budget);
    let mut short_entitled = next(host, vms, actions, true).saturating_sub(host.budget);
    if short > 0 {
        // Limits above what their VMs hold: lowering them costs nothing.
        let idle: Vec<u64> = (0..n)
            .map(|i| {
                let (v, a) = (&vms[i], &actions[i]);
                let floor = v.resident.saturating_add(TRIM_MARGIN).max(a.target);
                if raising[i] {
                    0
                } else {
                    a.limit.saturating_sub(floor)
                }
            })
            .collect();
        let parts = shares_up(short, &idle);
        for (a, p) in actions.iter_mut().zip(&parts) {
            a.limit -= p;
        }
        short_entitled = short_entitled.saturating_sub(sum(&parts));
    }
    if short_entitled > 0 {
        // Then paging, from the VMs above their targets.
        let above: Vec<u64> = (0..n)
            .map(|i| {
                let (v, a) = (&vms[i], &actions[i]);
                if raising[i] {
                    0
                } else {
                    a.limit.min(v.resident).saturating_sub(a.target)
                }
            })
            .collect();
        let parts = shares_up(short_entitled, &above);
        for ((a, v), &p) in actions.iter_mut().zip(vms).zip(&parts) {
            if p > 0 {
                a.limit = a.limit.min(v.resident) - p;
            }
        }
    }
    let first = shares_down(room, &entitled);
    let beyond: Vec<u64> = want.iter().zip(&entitled).map(|(w, e)| w - e).collect();
    let second = shares_down(room - sum(&first), &beyond);
    for i in (0..n).filter(|&i| raising[i]) {
        let v = &vms[i];
        let granted = committed(v)
            .saturating_add(first[i])
            .saturating_add(second[i])
            .saturating_sub(v.overhead);
        actions[i].limit = actions[i].limit.min(granted);
    }
}

/// What the budget would cover once every VM whose limit is not raised is under its new limit
/// (or has grown to it) and every raise is granted, up to the VM's target only if `to_targets`.
fn next(host: &HostParams, vms: &[VmObservation], actions: &[VmAction], to_targets: bool) -> u64 {
    vms.iter()
        .zip(actions)
        .map(|(v, a)| {
            if a.limit > v.limit {
                let bound = if to_targets {
                    a.limit.min(a.target)
                } else {
                    a.limit
                };
                committed(v).max(charge(v, bound))
            } else {
                // Under its limit by then.
                charge(&VmObservation { resident: 0, ..*v }, a.limit)
            }
        })
        .fold(host.own.saturating_add(host.pool), u64::saturating_add)
}

fn sum(xs: &[u64]) -> u64 {
    xs.iter().copied().fold(0, u64::saturating_add)
}

/// `total` shared in proportion to `caps`, each part rounded up and at most its cap: parts that
/// cover `total` when the caps do.
fn shares_up(total: u64, caps: &[u64]) -> Vec<u64> {
    let all = sum(caps);
    if total >= all {
        return caps.to_vec();
    }
    caps.iter()
        .map(|&c| {
            let part = (u128::from(total) * u128::from(c)).div_ceil(u128::from(all));
            u64::try_from(part).unwrap_or(u64::MAX).min(c)
        })
        .collect()
}

/// `total` shared in proportion to `caps`, each part rounded down: parts that never sum above
/// `total`.
fn shares_down(total: u64, caps: &[u64]) -> Vec<u64> {
    let all = sum(caps);
    if total >= all {
        return caps.to_vec();
    }
    caps.iter()
        .map(|&c| {
            let part = u128::from(total) * u128::from(c) / u128::from(all);
            u64::try_from(part).unwrap_or(u64::MAX).min(c)
        })
        .collect()
}

/// `fraction` of `budget` in bytes.
pub(crate) fn fraction_of(budget: u64, fraction: f64) -> u64 {
    // A fraction of the budget, so in 0..=budget (`as` saturates a NaN or negative to 0).
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let b = (budget as f64 * fraction.clamp(0.0, 1.0)) as u64;
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tick::fixtures::{host, vm, MIB};

    #[test]
    fn a_vm_starts_limited_to_its_share_when_memory_is_short() {
        let budget = 700 * MIB;
        // Alone, it gets everything it can use.
        let new = VmObservation {
            shares: 2000,
            resident: 0,
            ..vm(512 * MIB, 0, 0.0)
        };
        assert_eq!(start_limit(&host(budget), &[], &new), 512 * MIB);
        // Beside a busy VM with half its shares: two thirds of what is left for the VMs.
        let busy = vm(512 * MIB, 480 * MIB, 1.0);
        let l = start_limit(&host(budget), &[busy], &new);
        let usable = budget - 32 * MIB - budget * 6 / 100;
        assert!(l.abs_diff(usable * 2 / 3) <= budget / 1024 + 1, "{l}");
        // Beside an idle VM, with the tax, it gets all it can use.
        let idle = vm(512 * MIB, 480 * MIB, 0.0);
        assert_eq!(start_limit(&host(budget), &[idle], &new), 512 * MIB);
    }
}
