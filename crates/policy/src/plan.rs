//! One tick of the host: from what each VM is observed to hold and use, the free-memory state,
//! each VM's target, and what to ask of its VMM (balloon size, pager limit, pause) — ESX §5–§6
//! put together.
//!
//! - Free memory is the budget minus what the VMs hold (resident guest pages plus each VMM's
//!   overhead and pool). The state moves on free memory as it will be by the next tick: free
//!   memory minus what the VMs grew by since the last one ([`VmObservation::grown`]), each as
//!   far as its limit leaves it room to grow as much again, so a host whose VMs grow fast
//!   starts ballooning a tick before it crosses a threshold, not after ([`FreeState::next`] on
//!   the projection). The projection goes as far as `hard`; `low`, which pauses VMs, waits
//!   for free memory that is really under its threshold.
//! - Targets divide the budget minus overheads minus the high state's 6 % reserve by
//!   [`targets`]: shares per page with idle pages taxed, never below `min`, never above `max`.
//!   Aiming at 6 % free is what lets the state settle in `high` once every VM is at its target.
//! - Growing is always allowed: a balloon deflates and a pager limit rises toward a higher target
//!   in every state. Shrinking waits for pressure: in `soft` the VMs above their targets give
//!   their parts of the deficit to the high threshold (what free memory, less the growth
//!   expected and what balloons were asked for and do not hold yet, lacks to be back at it;
//!   shared by how far each VM is above its target, [`deficit_parts`]): a VM whose balloon
//!   takes it to its target inflates it by its part, never past `max − target`
//!   ([`BalloonInflate::Deficit`]; with [`BalloonInflate::Target`] to `max − target` at once, as
//!   ESX), and the VMs no balloon takes to their targets are paged (ESX: "resorts to paging
//!   only in cases where ballooning is not possible"), each held at its resident memory less
//!   its part; in `hard` the pager limits are
//!   the budget's backstop, not the way memory moves: a VM with a balloon is held at its
//!   resident memory less its part of the deficit to the hard threshold, a VM without one is
//!   set at its target; `low` sets the limits as `hard` does, and VMs above their targets (by more than
//!   [`PAUSE_SLACK`]) are also paused while it lasts: once the pager has taken the deficit, the
//!   state rises to `hard` and they run again, held at their limits.
//! - In `high` and `soft`, memory above the soft threshold (less the growth expected by the
//!   next tick and the pool's room to grow) is not left idle behind limits: VMs pressed against
//!   their pager limits share it in proportion to their shares, their limits raised toward
//!   `max` ([`headroom`]). A VM's limit is otherwise only its target, which is what it started
//!   with beside busy VMs; ESX has no limit before `hard` at all, and hands free pages to
//!   whoever touches them. When another VM exits, targets rise at the next tick, so balloons
//!   deflate and limits rise at once.
//! - A VM that deflated its balloon on its own (deflate-on-OOM) just showed it needs more than it
//!   has: for [`HostParams::oom_demand_ticks`] ticks it counts as fully active, whatever its
//!   sampled estimate.
//! - The pool (MemFlex): up to `pool` bytes of the budget are set aside for swapped pages, so
//!   targets divide what is left. The pool is what the VMs do not hold: at most the budget minus
//!   their resident pages, overheads and the high state's reserve ([`pool_size`]). Pooled pages
//!   are not subtracted, so the pool's room above what it holds is exactly free memory above the
//!   reserve: it grows in the high state and shrinks below what it holds (its least recent
//!   pages spill to disk) as soon as free memory drops under the reserve. It is shared among
//!   the VMs in proportion to what they are denied (`max − target`), equally when none is,
//!   since that is what they will swap.
//!
//! - The limits then go through [`hold`]: what each VM may hold until the next tick (its
//!   resident pages or its limit, whichever is more), its VMM's overhead, the pools and the
//!   host's own memory stay within the budget at every instant.
//!
//! Differences from ESX: ESX pages with its own swap daemon at the target; here the "pager limit"
//! is the VMM's resident limit, which reclaims synchronously down to it. So the hard state pages
//! only the deficit from a VM whose balloon is inflating: set at the target, the limit reclaimed
//! in one tick what the balloon was about to free without a write (in `bench consolidate` at 6
//! VMs, a projected hard state at 7 % free took one VM from 190 to 90 MiB in a tick and wrote
//! up to 436 MiB to swap per run), and the guest then freed those pages to its balloon anyway.
//! The low state does the same: with every limit set at its target there, the two largest of
//! six VMs growing together were taken from 286 and 218 MiB to 132 and 121 MiB in a tick, with
//! 278 MiB written to swap and 131 MiB read back. A VM stays paused only while the state is
//! low; held until it was under its target, a VM whose target had fallen below its limit stayed
//! paused for 3 s after the state was back in `high`. Soft pages the same way, by the deficit
//! to the high threshold: set at their targets, the paged VMs gave up more at once than soft
//! needed, high handed it back to whoever was pressed against a limit, and in `bench
//! consolidate` the limits of the VMs without a usable balloon went down and up by 10–15 MiB
//! every second, each time paged out and read back. Soft inflates balloons by the deficit too
//! (by default): taken to their targets at once, they left guests less than they were using
//! while free memory was still above the hard threshold, and in `bench consolidate`'s `mixed`
//! scenario at 0.75 of the joint working set the VMs ran slower with balloons than without.
//! ESX does not treat balloon deflate-on-OOM as demand (its balloon driver does not deflate on
//! OOM).

use crate::allocation::{targets, VmDemand};
use crate::budget::{fraction_of, hold, pool_size, pressed_at, usable};
use crate::free_state::FreeState;
use crate::tick::{BalloonInflate, Before, HostParams, Plan, VmAction, VmObservation, PAUSE_SLACK};

/// Decides one tick. `before` is what the last tick left; `oom_deflated` says, per VM, whether
/// it deflated its balloon on OOM since then. The limits are ESX's (`desired`) as far as the
/// budget allows ([`hold`]): raised only for VMs pressed against them and into room that is
/// free now, and lowered to make room for VMs pressed or waiting to start.
pub fn plan(
    host: &HostParams,
    before: Before,
    vms: &[VmObservation],
    oom_deflated: &[bool],
) -> Plan {
    let mut p = desired(host, before, vms, oom_deflated);
    hold(host, vms, &mut p.actions);
    p
}

/// One tick as ESX would decide it, before [`hold`] fits the limits into the budget.
pub(crate) fn desired(
    host: &HostParams,
    before: Before,
    vms: &[VmObservation],
    oom_deflated: &[bool],
) -> Plan {
    let held: u64 = vms
        .iter()
        .map(|v| {
            v.resident
                .saturating_add(v.overhead)
                .saturating_add(v.pooled)
        })
        .fold(host.own, u64::saturating_add);
    let free = host.budget.saturating_sub(held);
    // Growth since the last tick, each VM's as far as its limit leaves it room to grow as much
    // again: a VM that has grown up to its limit cannot grow until a plan raises it, whatever
    // room another VM leaves under its own.
    let growth: u64 = vms
        .iter()
        .map(|v| v.grown.min(v.limit.saturating_sub(v.resident)))
        .fold(0, u64::saturating_add);
    // Balloons and paging start on the projection; pausing, the last resort, waits for free
    // memory to be really low.
    let t = &host.thresholds;
    let state = before
        .state
        .next(free.saturating_sub(growth), host.budget, t)
        .min(FreeState::Hard)
        .max(before.state.next(free, host.budget, t));
    let reclaim = state.reclaim();
    let usable = usable(host, vms);
    let oom: Vec<u32> = vms
        .iter()
        .enumerate()
        .map(|(i, v)| {
            if oom_deflated.get(i).copied().unwrap_or(false) {
                host.oom_demand_ticks
            } else {
                v.oom_demand.saturating_sub(1)
            }
        })
        .collect();
    let demands: Vec<VmDemand> = vms
        .iter()
        .zip(&oom)
        .map(|(v, &o)| VmDemand {
            min: v.min,
            max: v.max,
            shares: v.shares,
            active: if o > 0 { 1.0 } else { v.active },
        })
        .collect();
    let targets = targets(usable, &demands, host.idle_tax);
    let denied: Vec<u64> = vms
        .iter()
        .zip(&targets)
        .map(|(v, &t)| v.max.saturating_sub(t))
        .collect();
    let total_denied: u64 = denied.iter().sum();
    let pool = pool_size(host, vms);
    let pools: Vec<u64> = denied
        .iter()
        .map(|&d| match (total_denied, vms.len() as u64) {
            (_, 0) => 0,
            (0, n) => pool / n,
            (all, _) => {
                u64::try_from(u128::from(pool) * u128::from(d) / u128::from(all)).unwrap_or(0)
            }
        })
        .collect();
    // Free memory above the soft threshold, less the growth expected and the pool's room to
    // grow (set aside for swapped pages, as targets set it aside): ESX hands free pages to
    // whoever touches them in high and soft, and pages only from hard on.
    let pooled: u64 = vms.iter().map(|v| v.pooled).fold(0, u64::saturating_add);
    let spare = if state <= FreeState::Soft {
        free.saturating_sub(fraction_of(host.budget, t.soft))
            .saturating_sub(growth)
            .saturating_sub(host.pool.saturating_sub(pooled))
    } else {
        0
    };
    let extra = headroom(spare, vms, &targets);
    // Whether each VM's balloon can take it to its target: a balloon whose driver answers
    // ([`crate::balloon`]), and a target that needs no more of it than the cap.
    let ballooned: Vec<bool> = vms
        .iter()
        .zip(&targets)
        .map(|(v, &t)| {
            v.balloon.is_some()
                && v.balloon_usable
                && v.max.saturating_sub(t) <= balloon_cap(v, host)
        })
        .collect();
    // What free memory, less the growth expected, lacks to stay at a threshold.
    let deficit =
        |at: f64| fraction_of(host.budget, at).saturating_sub(free.saturating_sub(growth));
    // What each VM gives this tick as its part of a deficit ([`deficit_parts`]): in hard, the
    // VMs a balloon takes to their targets page what is needed to stay at the hard threshold
    // (their balloons move the rest); in soft, what is needed to be back at the high one is
    // paged by the VMs no balloon takes to their targets and, inflating by the deficit, given
    // by the others' balloons beyond what they were asked for already.
    let by_deficit = host.balloon_inflate == BalloonInflate::Deficit;
    let cuts = match state {
        FreeState::High => vec![0; vms.len()],
        FreeState::Soft if by_deficit => {
            let pending: u64 = vms
                .iter()
                .zip(&ballooned)
                .filter(|(_, &b)| b)
                .map(|(v, _)| v.balloon_pending)
                .fold(0, u64::saturating_add);
            let every = vec![true; vms.len()];
            deficit_parts(
                deficit(t.high).saturating_sub(pending),
                vms,
                &targets,
                &every,
            )
        }
        FreeState::Soft => {
            let paged: Vec<bool> = ballooned.iter().map(|b| !b).collect();
            deficit_parts(deficit(t.high), vms, &targets, &paged)
        }
        FreeState::Hard | FreeState::Low => {
            deficit_parts(deficit(t.hard), vms, &targets, &ballooned)
        }
    };
    let actions: Vec<VmAction> = vms
        .iter()
        .zip(targets)
        .zip(oom)
        .zip(pools)
        .zip(extra)
        .zip(cuts)
        .zip(&ballooned)
        .map(
            |((((((v, target), oom_demand), pool), extra), cut), &ballooned)| {
                let give_back = v.max.saturating_sub(target);
                let cap = balloon_cap(v, host);
                let balloon = v.balloon.map(|now| {
                    if state == FreeState::Soft && by_deficit && ballooned {
                        now.saturating_add(cut).min(give_back).min(cap)
                    } else if reclaim.balloon {
                        give_back.min(cap)
                    } else {
                        now.min(give_back).min(cap)
                    }
                });
                // Soft pages only where no balloon can take the VM to its target: none, one whose
                // driver does not answer, or one the cap stops short of it.
                let page = reclaim.page || (reclaim.balloon && !ballooned);
                let stepped = if state == FreeState::Soft {
                    page
                } else {
                    state >= FreeState::Hard && ballooned
                };
                let limit = if stepped {
                    // Held where it is, less its part of the deficit.
                    v.limit.min(v.resident).saturating_sub(cut).max(target)
                } else if page {
                    target
                } else {
                    v.limit.max(target).saturating_add(extra)
                }
                .min(v.max);
                let above = v.resident > target.saturating_add(PAUSE_SLACK);
                let pause = above && reclaim.pause_above_target;
                VmAction {
                    target,
                    balloon,
                    limit,
                    pause,
                    pool,
                    oom_demand,
                }
            },
        )
        .collect();
    Plan {
        state,
        free,
        held,
        growth,
        pool,
        actions,
    }
}

/// The most `v`'s balloon may hold: the host's cap, or lower where its guest re-read what the
/// balloon took.
fn balloon_cap(v: &VmObservation, host: &HostParams) -> u64 {
    let cap = fraction_of(v.max, host.balloon_max);
    cap.min(v.balloon_reread_cap.unwrap_or(u64::MAX))
}

/// `deficit` bytes shared among the VMs `chosen` that are above their targets, in proportion
/// to how far above they are (what they hold or may hold, whichever is less), each at most that
/// far: what each must page this tick.
fn deficit_parts(
    deficit: u64,
    vms: &[VmObservation],
    targets: &[u64],
    chosen: &[bool],
) -> Vec<u64> {
    let excess: Vec<u64> = vms
        .iter()
        .zip(targets)
        .zip(chosen)
        .map(|((v, &t), &b)| {
            if b {
                v.limit.min(v.resident).saturating_sub(t)
            } else {
                0
            }
        })
        .collect();
    let all: u64 = excess.iter().copied().fold(0, u64::saturating_add);
    excess
        .iter()
        .map(|&e| {
            if all == 0 {
                return 0;
            }
            // Rounded up, so the parts cover the deficit.
            let part = (u128::from(deficit) * u128::from(e)).div_ceil(u128::from(all));
            u64::try_from(part).unwrap_or(u64::MAX).min(e)
        })
        .collect()
}

/// Shares `spare` bytes among the VMs pressed against their pager limits ([`pressed_at`]
/// `max(limit, target)`), in proportion to their shares: how much each one's limit may rise
/// above `max(limit, target)` this tick. Others get 0.
fn headroom(spare: u64, vms: &[VmObservation], targets: &[u64]) -> Vec<u64> {
    let pressed: Vec<bool> = vms
        .iter()
        .zip(targets)
        .map(|(v, &t)| pressed_at(v, v.limit.max(t)))
        .collect();
    let shares: u64 = vms
        .iter()
        .zip(&pressed)
        .filter(|(_, &p)| p)
        .map(|(v, _)| v.shares.max(1))
        .fold(0, u64::saturating_add);
    vms.iter()
        .zip(&pressed)
        .map(|(v, &p)| {
            if !p || shares == 0 {
                return 0;
            }
            let part = u128::from(spare) * u128::from(v.shares.max(1)) / u128::from(shares);
            u64::try_from(part).unwrap_or(u64::MAX)
        })
        .collect()
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
