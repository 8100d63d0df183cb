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
use crate::tick::{HostParams, VmAction, VmObservation, PAUSE_SLACK};

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

/// How far above its resident pages a limit trimmed to make room for others is left: room for
/// its VM to grow until the next tick, and more than [`PAUSE_SLACK`], so that a trimmed VM is
/// not pressed against its new limit at once (pressed, it would take the room back at the next
/// tick).
pub const TRIM_MARGIN: u64 = 2 * PAUSE_SLACK;

/// How far `v`'s limit can come down without paging it: to [`TRIM_MARGIN`] above what it holds,
/// below its `min` too. A `min` is a guarantee against reclaim, not room held for its VM: what
/// a VM does not use of it is lent, as ESX lends reserved memory a VM has not touched (§6.3,
/// Fig. 8), and a VM that grows into it again is pressed below its target, so room is made for
/// it by paging others ([`hold`]'s third step).
pub fn trimmable(v: &VmObservation) -> u64 {
    if !started(v) {
        return 0;
    }
    v.limit
        .saturating_sub(v.resident.saturating_add(TRIM_MARGIN))
}

/// Whether `v` is pressed against its pager limit: the limit is below its `max`, and it holds
/// within [`PAUSE_SLACK`] of it or its pager reclaimed since the last tick to stay under it. A
/// VM that touches new pages is; one with room under its limit is not.
pub fn pressed(v: &VmObservation) -> bool {
    pressed_at(v, v.limit)
}

/// Whether `v` would be [`pressed`] against a limit of `limit`.
pub fn pressed_at(v: &VmObservation, limit: u64) -> bool {
    limit < v.max
        && (v.resident.saturating_add(PAUSE_SLACK) >= limit
            || (v.reclaimed > 0 && limit <= v.limit))
}

/// The smallest limit a VM starts with: its `min`, and at least a page (a started VM has a
/// limit; 0 is a VM still waiting).
pub fn first_limit(v: &VmObservation) -> u64 {
    v.min.max(PAGE).min(v.max)
}

/// What a VM about to start needs free before its VMM starts (ESX §6.2's reservation): its
/// [`first_limit`] (its `min`) and its VMM's overhead. Its limit starts there, and higher only
/// where the budget has room now; the plan's targets and the balancing hand it the rest over
/// the next ticks.
pub fn start_need(v: &VmObservation) -> u64 {
    first_limit(v).saturating_add(v.overhead)
}

/// A guest page.
const PAGE: u64 = 4096;

/// Keeps a tick's `actions` within the budget ([module docs](self)), in four steps:
///
/// 1. **Admission** (ESX §6.2). VMs about to start ([`started`] is false) start in their order
///    while the room free now (the budget less [`held_at_most`]) has their [`start_need`]; the
///    first that does not fit waits, and so do all after it, with a limit of 0 (the host keeps
///    its VMM unstarted), their needs set aside from the room. While a VM waits, every raise
///    waits too.
/// 2. **Trimming**. A limit is raised only for a VM pressed against it ([`pressed`]): one with
///    room under its limit does not need more yet, and room handed to it would be idle. When
///    the raises and the VMs waiting to start do not fit the budget, limits above what their
///    VMs hold come down toward it ([`TRIM_MARGIN`] above, below a target or a `min` included:
///    see [`trimmable`]), in proportion to how far above they are. This moves no page, and a VM on
///    plain memory, charged all of it, goes under the pager that way: it stays on plain memory
///    only while the budget has room for all of it.
/// 3. **Paging**, for VMs pressed against their limits below their targets (a target is what
///    a VM is entitled to, and with limits holding the budget, free memory, counted from
///    resident pages, may never fall far enough for the free-memory states to reclaim for it),
///    for a VM waiting to start, or on a host already past its budget (a VMM measured larger
///    than it was charged): raises beyond targets wait, and VMs above their targets are paged
///    toward them, in proportion to how far above they are, by as much as is short, not to
///    their targets; toward their `min` too for the last two. With HyperDealer2's balancing
///    the releases of the same tick come first, so a victim's clean pages move rather than
///    being paged.
/// 4. **Raises** get the room there is now, first up to each VM's target, then beyond it, in
///    proportion to what each asks. A VM starting starts at its [`first_limit`] and the room
///    still left, shared among the VMs starting in proportion to the rest of their memory; on
///    plain memory (its limit at its `max`) when that is all of it. Nobody else was pressed
///    for that room, and trimming takes it back when somebody is.
///
/// A lowered limit frees nothing this tick (a pager reclaims down to it after the order, not
/// at it), so only room that is free now is handed out: at every instant the VMs, their VMMs,
/// the pools and the host hold at most the budget.
pub fn hold(host: &HostParams, vms: &[VmObservation], actions: &mut [VmAction]) {
    let n = vms.len().min(actions.len());
    let (vms, actions) = (&vms[..n], &mut actions[..n]);
    let room = host.budget.saturating_sub(held_at_most(host, vms));
    // 1. Admission, first come first served.
    let mut starting = vec![false; n];
    let mut free = room;
    let mut waiting = false;
    for i in (0..n).filter(|&i| !started(&vms[i])) {
        let need = start_need(&vms[i]);
        if !waiting && need <= free {
            starting[i] = true;
            free -= need;
        } else {
            waiting = true;
            free = free.saturating_sub(need);
        }
    }
    // 2. Raises for VMs pressed against their limits, and none while a VM waits.
    let mut raising = vec![false; n];
    for i in (0..n).filter(|&i| started(&vms[i])) {
        let (v, a) = (&vms[i], &mut actions[i]);
        if a.limit > v.limit {
            if pressed(v) && !waiting {
                raising[i] = true;
            } else {
                a.limit = v.limit;
            }
        }
    }
    let short = next(host, vms, actions, &raising, Raise::All).saturating_sub(host.budget);
    if short > 0 {
        let idle: Vec<u64> = (0..n)
            .map(|i| {
                let v = &vms[i];
                if started(v) && !raising[i] {
                    trimmable(&VmObservation {
                        limit: actions[i].limit,
                        ..*v
                    })
                } else {
                    0
                }
            })
            .collect();
        page(actions, &shares_up(short, &idle));
    }
    // 3. Paging: toward targets for VMs pressed below theirs, a VM waiting to start or a host
    // past its budget; toward `min` only for the last two.
    let entitled = next(host, vms, actions, &raising, Raise::ToTarget).saturating_sub(host.budget);
    let short = next(host, vms, actions, &raising, Raise::None).saturating_sub(host.budget);
    if entitled.max(short) > 0 {
        // A VM below its target comes before growth beyond one: those raises wait, and those
        // VMs may be paged.
        for i in 0..n {
            let (v, a) = (&vms[i], &mut actions[i]);
            if raising[i] && v.limit >= a.target {
                a.limit = v.limit;
                raising[i] = false;
            }
        }
        let movable = |i: usize, a: &VmAction, floor: u64| {
            if started(&vms[i]) && !raising[i] {
                a.limit.saturating_sub(floor)
            } else {
                0
            }
        };
        let above: Vec<u64> = (0..n)
            .map(|i| movable(i, &actions[i], actions[i].target.max(vms[i].min)))
            .collect();
        let parts = shares_up(entitled.max(short), &above);
        page(actions, &parts);
        let left = short.saturating_sub(sum(&parts));
        if left > 0 {
            let above_min: Vec<u64> = (0..n)
                .map(|i| movable(i, &actions[i], vms[i].min))
                .collect();
            page(actions, &shares_up(left, &above_min));
        }
    }
    // 4. Raises, into the room there is now.
    let base = |i: usize| vms[i].resident.max(vms[i].limit);
    let asks = |to_target: bool| -> Vec<u64> {
        (0..n)
            .map(|i| {
                let a = &actions[i];
                if !raising[i] {
                    return 0;
                }
                let top = if to_target {
                    a.limit.min(a.target)
                } else {
                    a.limit
                };
                top.saturating_sub(base(i))
            })
            .collect()
    };
    let (to_target, all) = (asks(true), asks(false));
    let first = shares_down(free, &to_target);
    free -= sum(&first);
    let beyond: Vec<u64> = (0..n).map(|i| all[i].saturating_sub(first[i])).collect();
    let second = shares_down(free, &beyond);
    free -= sum(&second);
    // What is left is free memory nobody is pressed for: the VMs starting share it, each in
    // proportion to the rest of its memory (all of it is plain memory).
    let rest: Vec<u64> = (0..n)
        .map(|i| {
            if starting[i] {
                vms[i].max.saturating_sub(first_limit(&vms[i]))
            } else {
                0
            }
        })
        .collect();
    let third = shares_down(free, &rest);
    for i in 0..n {
        let (v, a) = (&vms[i], &mut actions[i]);
        if raising[i] {
            a.limit = a.limit.min(base(i) + first[i] + second[i]);
        } else if starting[i] {
            a.limit = first_limit(v) + third[i];
        } else if !started(v) {
            a.limit = 0;
        }
    }
}

/// How far [`next`] counts the raises.
#[derive(Clone, Copy)]
enum Raise {
    /// Each to the limit the plan wants.
    All,
    /// Each as far as its target.
    ToTarget,
    /// None: each VM at its limit now.
    None,
}

/// What the budget covers by the next tick with `actions`: a VM whose limit is not raised is
/// under its new limit by then, a raised one at the limit `raise` says, and a VM about to start
/// at what it needs to start.
fn next(
    host: &HostParams,
    vms: &[VmObservation],
    actions: &[VmAction],
    raising: &[bool],
    raise: Raise,
) -> u64 {
    vms.iter()
        .zip(actions)
        .enumerate()
        .map(|(i, (v, a))| {
            if !started(v) {
                start_need(v)
            } else if raising[i] {
                let limit = match raise {
                    Raise::All => a.limit,
                    Raise::ToTarget => a.limit.min(a.target).max(v.limit),
                    Raise::None => v.limit,
                };
                charge(v, limit)
            } else {
                charge(&VmObservation { resident: 0, ..*v }, a.limit)
            }
        })
        .fold(host.own.saturating_add(host.pool), u64::saturating_add)
}

/// Lowers each VM's limit by its part in `parts`: below what it holds, its pager pages it.
fn page(actions: &mut [VmAction], parts: &[u64]) {
    for (a, &p) in actions.iter_mut().zip(parts) {
        a.limit -= p;
    }
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
