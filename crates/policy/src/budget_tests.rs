//! Tests of [`crate::budget::hold`] through [`crate::plan::plan`]: the budget holds at every
//! tick, room is made for a VM waiting to start, and every VM starts. (Here rather than in
//! `budget.rs`, which `plan.rs` imports.)

use proptest::prelude::*;

use crate::budget::{charge, committed, held_at_most, TRIM_MARGIN};
use crate::free_state::FreeState;
use crate::plan::plan;
use crate::tick::fixtures::{host, vm, MIB};
use crate::tick::{Before, HostParams, Plan, VmObservation};

/// A VM about to start (nothing resident, no limit yet).
fn pending(max: u64) -> VmObservation {
    VmObservation {
        limit: 0,
        ..vm(max, 0, 1.0)
    }
}

fn at_most_after(h: &HostParams, vms: &[VmObservation], p: &Plan) -> u64 {
    vms.iter()
        .zip(&p.actions)
        .map(|(v, a)| committed(v).max(charge(v, a.limit)))
        .fold(h.own + h.pool, u64::saturating_add)
}

/// A VM on plain memory is charged all of it. A new VM starts as soon as the budget has room
/// for its `min` and its VMM's overhead (ESX §6.2), not for its whole target: until then it
/// waits (limit 0), the plain VM goes under the pager and is paged by as much as the new VM
/// needs, no more; a tick later the new VM starts at its `min` and the plain VM keeps the rest.
#[test]
fn a_new_vm_waits_for_its_min_and_overhead_not_its_target() {
    let h = HostParams {
        own: 8 * MIB,
        ..host(440 * MIB)
    };
    let first = VmObservation {
        limit: 384 * MIB,
        ..vm(384 * MIB, 380 * MIB, 1.0)
    };
    let new = VmObservation {
        min: 32 * MIB,
        ..pending(384 * MIB)
    };
    // 440 - 8 - (384 + 16) = 32 MiB free: not the 48 MiB the new VM needs.
    let p = plan(&h, FreeState::High.into(), &[first, new], &[false; 2]);
    let (a, b) = (p.actions[0], p.actions[1]);
    assert_eq!(b.limit, 0, "it waits: {p:?}");
    assert!(b.target > 100 * MIB, "{b:?}");
    // 380 MiB held, 4 of them above what the new VM needs by the next tick: paged by 12 MiB.
    assert_eq!(a.limit, 368 * MIB, "{a:?}");
    assert!(
        a.limit > a.target,
        "paged toward the new VM's need, not to its target: {a:?}"
    );
    assert!(at_most_after(&h, &[first, new], &p) <= h.budget);
    // Once it is observed there, the new VM starts at its min: all there is room for.
    let first = VmObservation {
        limit: a.limit,
        resident: a.limit,
        ..first
    };
    let p = plan(&h, p.state.into(), &[first, new], &[false; 2]);
    assert_eq!(p.actions[1].limit, 32 * MIB, "{p:?}");
    assert!(
        p.actions[0].limit >= a.limit.min(p.actions[0].target),
        "{p:?}"
    );
    assert!(at_most_after(&h, &[first, new], &p) <= h.budget);
    // With room to spare, it starts at once beyond its min, and on plain memory when the
    // budget has room for all of it.
    let p = plan(
        &host(2048 * MIB),
        FreeState::High.into(),
        &[first, new],
        &[false; 2],
    );
    assert_eq!(p.actions[1].limit, 384 * MIB, "{p:?}");
}

/// A `min` its VM does not use is lent (ESX §6.3, Fig. 8): the limit of a VM holding 40 MiB of
/// its 160 MiB `min` is trimmed below it for a VM pressed against its own; when it grows into its
/// `min` again, it is below its target, and the other is paged to make room for it.
#[test]
fn an_unused_min_is_lent_and_given_back() {
    let h = host(600 * MIB);
    let client = VmObservation {
        min: 160 * MIB,
        limit: 160 * MIB,
        ..vm(320 * MIB, 40 * MIB, 0.1)
    };
    let grower = VmObservation {
        limit: 400 * MIB,
        ..vm(800 * MIB, 400 * MIB, 1.0)
    };
    let obs = [client, grower];
    let p = plan(&h, FreeState::High.into(), &obs, &[false; 2]);
    let (c, g) = (p.actions[0], p.actions[1]);
    assert!(
        c.target >= 160 * MIB,
        "its min stays its entitlement: {c:?}"
    );
    assert!(
        c.limit < 160 * MIB && c.limit >= 40 * MIB + TRIM_MARGIN,
        "lent, not paged: {c:?}"
    );
    assert!(g.limit > 400 * MIB, "the grower gets it: {g:?}");
    assert!(at_most_after(&h, &obs, &p) <= h.budget);
    // The client grows into its limit again, and the grower has taken what it was given.
    let client = VmObservation {
        limit: c.limit,
        resident: c.limit,
        active: 1.0,
        ..client
    };
    let grower = VmObservation {
        limit: g.limit,
        resident: g.limit,
        ..grower
    };
    let obs = [client, grower];
    let p = plan(&h, p.state.into(), &obs, &[false; 2]);
    let (c2, g2) = (p.actions[0], p.actions[1]);
    assert!(c2.target >= 160 * MIB, "{c2:?}");
    assert!(
        g2.limit < g.limit,
        "the grower is paged to give the client its min back: {g2:?}"
    );
    assert!(at_most_after(&h, &obs, &p) <= h.budget);
}

/// Limits above what their VMs hold come down first, without paging, to let another VM grow;
/// a VM with room under its limit gives way to one pressed against its own, even below its
/// target (it is raised again when it is pressed).
#[test]
fn idle_limits_make_room_before_paging() {
    let h = host(1000 * MIB);
    let roomy = VmObservation {
        limit: 600 * MIB,
        ..vm(800 * MIB, 200 * MIB, 0.0)
    };
    let pressed = VmObservation {
        limit: 300 * MIB,
        ..vm(800 * MIB, 300 * MIB, 1.0)
    };
    let obs = [roomy, pressed];
    let p = plan(&h, FreeState::High.into(), &obs, &[false; 2]);
    let (r, q) = (p.actions[0], p.actions[1]);
    assert!(
        q.target > 300 * MIB && q.limit > 300 * MIB && q.limit < q.target,
        "{q:?}"
    );
    assert!(
        r.limit < 600 * MIB && r.limit >= 200 * MIB + TRIM_MARGIN,
        "not paged: {r:?}"
    );
    assert!(at_most_after(&h, &obs, &p) <= h.budget);
    // A VM with many shares holding little under a large limit, beside one with few shares
    // pressed against its limit, above its target.
    let h = host(600 * MIB);
    let idle = VmObservation {
        shares: 8000,
        limit: 460 * MIB,
        ..vm(800 * MIB, 16 * MIB, 1.0)
    };
    let reader = VmObservation {
        limit: 80 * MIB,
        ..vm(800 * MIB, 80 * MIB, 1.0)
    };
    let obs = [idle, reader];
    let p = plan(&h, FreeState::High.into(), &obs, &[false; 2]);
    let (i, r) = (p.actions[0], p.actions[1]);
    assert!(i.target > 16 * MIB + TRIM_MARGIN, "{i:?}");
    assert!(r.target < 80 * MIB, "{r:?}");
    // Trimmed below its target, as far as the reader asks (all the memory above the soft
    // threshold), not paged.
    assert!(
        i.limit < 100 * MIB && i.limit >= 16 * MIB + TRIM_MARGIN,
        "{i:?}"
    );
    // The room that frees is free once the idle VM is observed under its new limit, a tick
    // later: now the reader gets what is free, 600 - (460 + 16 + 80 + 16) MiB.
    assert_eq!(r.limit, 108 * MIB, "{r:?}");
    assert!(at_most_after(&h, &obs, &p) <= h.budget);
}

/// A VM pressed against its limit below its target on a full host gets its entitlement: the VM
/// above its target is paged by as much as the pressed one is short of its target, not to its
/// own target, and the pressed one gets what is free now (the paged memory is free once the
/// pager has reclaimed it, a tick later).
#[test]
fn a_pressed_vm_below_its_target_has_room_made_by_paging() {
    let h = host(1000 * MIB);
    let above = VmObservation {
        limit: 600 * MIB,
        ..vm(800 * MIB, 600 * MIB, 0.0)
    };
    let below = VmObservation {
        limit: 300 * MIB,
        ..vm(800 * MIB, 300 * MIB, 1.0)
    };
    let obs = [above, below];
    let p = plan(&h, FreeState::High.into(), &obs, &[false; 2]);
    let (a, b) = (p.actions[0], p.actions[1]);
    // 1000 - (600 + 16) - (300 + 16) = 68 MiB free now.
    assert_eq!(b.limit, 368 * MIB, "{b:?}");
    assert!(b.target > b.limit, "{b:?}");
    assert_eq!(a.limit, 600 * MIB - (b.target - b.limit), "{a:?} {b:?}");
    assert!(
        a.limit > a.target,
        "paged by what is short, not to its target: {a:?}"
    );
    assert!(at_most_after(&h, &obs, &p) <= h.budget);
    // A VM below its target with room under its limit asks for nothing: nobody is paged (its
    // idle room may be trimmed for the other's growth).
    let roomy = VmObservation {
        limit: 360 * MIB,
        ..below
    };
    let p = plan(&h, FreeState::High.into(), &[above, roomy], &[false; 2]);
    assert!(p.actions[0].limit >= 600 * MIB, "{p:?}");
    assert!(p.actions[1].limit >= 300 * MIB + TRIM_MARGIN, "{p:?}");
}

fn arb_vm() -> impl Strategy<Value = (u64, u64, u64, u64, f64, bool)> {
    (
        64u64..1024,
        0u64..1024,
        0u64..1024,
        1u64..4000,
        0.0f64..=1.0,
        any::<bool>(),
    )
}

fn observation(
    (max, resident, limit, shares, active, balloon): (u64, u64, u64, u64, f64, bool),
) -> VmObservation {
    VmObservation {
        shares,
        balloon: balloon.then_some(0),
        limit: limit.min(max) * MIB,
        ..vm(max * MIB, resident.min(max) * MIB, active)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever a tick sees, the limits it sets never let the VMs hold more than the budget
    /// (nor more than they may hold now, on a host already past it).
    #[test]
    fn a_plan_never_commits_past_the_budget(
        budget in 128u64..4096,
        own in 0u64..64,
        vms in proptest::collection::vec(arb_vm(), 1..8),
        start in 0usize..4,
    ) {
        let h = HostParams { own: own * MIB, ..host(budget * MIB) };
        let obs: Vec<VmObservation> = vms.into_iter().map(observation).collect();
        let state = [FreeState::High, FreeState::Soft, FreeState::Hard, FreeState::Low][start];
        let p = plan(&h, state.into(), &obs, &[]);
        let now = held_at_most(&h, &obs);
        prop_assert!(at_most_after(&h, &obs, &p) <= now.max(h.budget));
        for (a, v) in p.actions.iter().zip(&obs) {
            prop_assert!(a.limit <= v.max);
        }
    }

    /// Ticks of a host whose VMs come one after another and do their worst between ticks
    /// (each grows to its limit or stays above a lowered one): at no instant do they, their
    /// overheads and the host hold more than the budget; and where each VM shrinks to what
    /// it is asked, every VM starts.
    #[test]
    fn the_budget_holds_at_every_tick_and_every_vm_starts(
        budget in 256u64..2048,
        own in 0u64..32,
        vms in proptest::collection::vec((64u64..1024, 0.0f64..=1.0, 1u64..4000, any::<bool>()), 1..7),
        moves in proptest::collection::vec(0u64..=1000, 64),
        cooperative in any::<bool>(),
    ) {
        let h = HostParams { own: own * MIB, ..host(budget * MIB) };
        // Each VM: its observation, and whether it runs.
        let mut world: Vec<(VmObservation, bool)> = Vec::new();
        let mut state = FreeState::High;
        for tick in 0..60usize {
            // One more VM every 4 ticks, all of them pending first.
            if tick % 4 == 0 && tick / 4 < vms.len() {
                let (max, active, shares, balloon) = vms[tick / 4];
                let new = VmObservation {
                    shares,
                    balloon: balloon.then_some(0),
                    ..pending(max * MIB)
                };
                world.push((VmObservation { active, ..new }, false));
            }
            let obs: Vec<VmObservation> = world
                .iter()
                .map(|(o, run)| if *run { *o } else { VmObservation { active: 1.0, ..*o } })
                .collect();
            let now = held_at_most(&h, &obs);
            prop_assert!(now <= h.budget, "tick {tick}: {now} held of {}", h.budget);
            let p = plan(&h, Before { state }, &obs, &[]);
            prop_assert!(at_most_after(&h, &obs, &p) <= h.budget);
            state = p.state;
            for (k, ((o, run), a)) in world.iter_mut().zip(&p.actions).enumerate() {
                if !*run {
                    // Starts once its min and its VMM's overhead are room, at its min or more.
                    if a.limit > 0 {
                        prop_assert!(a.limit >= o.min.min(o.max), "{a:?}");
                        *run = true;
                        o.limit = a.limit;
                    }
                    continue;
                }
                let m = moves[(tick * 7 + k) % moves.len()];
                let most = o.resident.max(a.limit);
                let resident = if cooperative {
                    // It holds what it is let hold, up to a part of its memory.
                    (o.max / 1000 * m).min(a.limit)
                } else if o.resident > a.limit {
                    // Its pager takes it down part of the way.
                    a.limit + (o.resident - a.limit) / 1000 * m
                } else {
                    most / 1000 * m
                };
                o.resident = resident.min(most);
                o.limit = a.limit;
                o.balloon = a.balloon;
            }
        }
        if cooperative {
            prop_assert!(world.iter().all(|(_, run)| *run), "a VM never started");
        }
    }
}
