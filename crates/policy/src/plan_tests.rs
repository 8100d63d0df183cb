//! Tests of `plan.rs`: each free-memory state's balloons, limits and pauses, the growth
//! projection, headroom, the pool. (Here rather than in `plan.rs`, which would pass 900 lines.)

use super::*;
use crate::tick::fixtures::{host, vm, MIB};
use proptest::prelude::*;

#[test]
fn plenty_of_memory_asks_nothing() {
    let vms = [vm(512 * MIB, 100 * MIB, 1.0), vm(512 * MIB, 300 * MIB, 0.2)];
    let p = desired(
        &host(4096 * MIB),
        FreeState::High.into(),
        &vms,
        &[false, false],
    );
    assert_eq!(p.state, FreeState::High);
    for (a, v) in p.actions.iter().zip(&vms) {
        assert_eq!(a.target, v.max);
        assert_eq!(a.balloon, Some(0));
        assert_eq!(a.limit, v.max);
        assert!(!a.pause);
    }
}

#[test]
fn pressure_balloons_first_then_pages_then_pauses() {
    let budget = 1000 * MIB;
    let busy = vm(800 * MIB, 600 * MIB, 1.0);
    let idle = vm(800 * MIB, 350 * MIB, 0.0);
    // 1000 - (600 + 350 + 32) = 18 MiB free: 1.8 %, hard.
    let p = desired(
        &host(budget),
        FreeState::High.into(),
        &[busy, idle],
        &[false; 2],
    );
    assert_eq!(p.state, FreeState::Hard);
    let (b, i) = (p.actions[0], p.actions[1]);
    assert!(b.target > i.target, "{b:?} {i:?}");
    assert_eq!(i.balloon, Some(800 * MIB - i.target));
    // The pager takes what keeps free memory at the 2 % threshold (20 MiB, 18 free: 2 MiB),
    // from the VMs above their targets by how far above; the balloons move the rest.
    let over = |v: &VmObservation, a: &VmAction| v.resident.saturating_sub(a.target);
    let paged = |v: &VmObservation, a: &VmAction| v.resident - a.limit.min(v.resident);
    let deficit = 20 * MIB - 18 * MIB;
    assert!(over(&idle, &i) > 100 * MIB && i.limit > i.target, "{i:?}");
    assert!(paged(&busy, &b) + paged(&idle, &i) >= deficit);
    assert!(paged(&busy, &b) + paged(&idle, &i) <= deficit + 2);
    assert!(paged(&idle, &i) * over(&busy, &b) >= paged(&busy, &b) * over(&idle, &i));
    assert!(!i.pause, "hard does not pause");
    // Without a balloon, hard pages a VM to its target.
    let p = desired(
        &host(budget),
        FreeState::High.into(),
        &[
            busy,
            VmObservation {
                balloon: None,
                ..idle
            },
        ],
        &[false; 2],
    );
    assert_eq!(p.actions[1].limit, p.actions[1].target);
    // 5 MiB free: low; the idle VM is above its target and is paused. Its limit is cut as
    // in hard, by its part of what 5 MiB lacks to reach the 2 % threshold, not to its target.
    let idle = VmObservation {
        resident: 363 * MIB,
        ..idle
    };
    let p = desired(&host(budget), p.state.into(), &[busy, idle], &[false; 2]);
    assert_eq!(p.state, FreeState::Low);
    let (b, i) = (p.actions[0], p.actions[1]);
    assert!(i.pause);
    assert!(i.limit > i.target, "{i:?}");
    let paged = paged(&busy, &b) + paged(&idle, &i);
    assert!((15 * MIB..=15 * MIB + 2).contains(&paged), "{paged}");
    // Once the state is left it runs again, though still above its target: its limit
    // holds it.
    let idle = VmObservation {
        resident: 340 * MIB,
        limit: i.limit,
        ..idle
    };
    let busy = VmObservation {
        limit: b.limit,
        ..busy
    };
    let p = desired(&host(budget), p.state.into(), &[busy, idle], &[false; 2]);
    assert_eq!(p.state, FreeState::Hard);
    let i = p.actions[1];
    assert!(
        !i.pause && i.limit <= 340 * MIB && i.limit > i.target,
        "{i:?}"
    );
}

/// A VM its pager holds at its target runs a little past it between reclaim chunks; the low
/// state pauses only VMs above their targets by more than that.
#[test]
fn the_low_state_does_not_pause_a_vm_its_pager_holds_at_its_target() {
    let budget = 1000 * MIB;
    let t = |p: &Plan, i: usize| p.actions[i].target;
    // 1000 - (600 + 395 + 32) < 0: low.
    let a = vm(800 * MIB, 600 * MIB, 1.0);
    let b = vm(800 * MIB, 395 * MIB, 1.0);
    let p = desired(&host(budget), FreeState::Low.into(), &[a, b], &[false; 2]);
    assert_eq!(p.state, FreeState::Low);
    let (ta, tb) = (t(&p, 0), t(&p, 1));
    let at = |resident: u64, target: u64| VmObservation {
        resident,
        limit: target,
        ..vm(800 * MIB, resident, 1.0)
    };
    let over = |extra: u64| {
        desired(
            &host(budget),
            FreeState::Low.into(),
            &[at(ta + extra, ta), at(600 * MIB, tb)],
            &[false; 2],
        )
    };
    let p = over(PAUSE_SLACK);
    assert_eq!(p.state, FreeState::Low);
    assert!(!p.actions[0].pause, "at its target, within the slack");
    assert!(p.actions[1].pause, "far above its target");
    assert!(over(PAUSE_SLACK + 4096).actions[0].pause);
}

#[test]
fn soft_balloons_but_leaves_limits() {
    // 1000 - (600 + 330 + 32) = 38 MiB: 3.8 %, soft.
    let p = desired(
        &host(1000 * MIB),
        FreeState::High.into(),
        &[vm(800 * MIB, 600 * MIB, 1.0), vm(800 * MIB, 330 * MIB, 0.0)],
        &[false; 2],
    );
    assert_eq!(p.state, FreeState::Soft);
    let i = p.actions[1];
    assert_eq!(i.balloon, Some(800 * MIB - i.target));
    assert_eq!(i.limit, 800 * MIB);
}

/// `balloon_inflate = "deficit"`, the host's default: in soft a balloon inflates by its VM's
/// part of what free memory lacks to be back at the high threshold, less what balloons were
/// asked for and have not taken yet, shared with the paged VMs by how far each is above its
/// target; hard still takes balloons to their targets. Inflated to its target at once, a
/// balloon took more from its guest than the host lacked, and in `bench consolidate`'s
/// mixed scenario at 0.75 of the joint working set the VMs ran slower with balloons than
/// without (docs/bench.md, "Balloons inflate by the deficit").
#[test]
fn soft_inflates_a_balloon_by_the_deficit() {
    let h = HostParams {
        balloon_inflate: BalloonInflate::Deficit,
        ..host(1000 * MIB)
    };
    let busy = vm(800 * MIB, 600 * MIB, 1.0);
    let idle = vm(800 * MIB, 330 * MIB, 0.0);
    // 1000 - (600 + 330 + 32) = 38 MiB free, 60 MiB is 6 %: 22 MiB short, all of it the
    // idle VM's (the busy one is under its target).
    let p = desired(&h, FreeState::High.into(), &[busy, idle], &[false; 2]);
    assert_eq!(p.state, FreeState::Soft);
    let i = p.actions[1];
    assert!(i.target < 300 * MIB, "{i:?}");
    assert_eq!((i.balloon, i.limit), (Some(22 * MIB), 800 * MIB));
    assert_eq!(p.actions[0].balloon, Some(0));
    // Asked for 10 MiB of which its driver holds 4: 6 MiB are on their way.
    let asked = VmObservation {
        balloon: Some(10 * MIB),
        balloon_pending: 6 * MIB,
        ..idle
    };
    let p = desired(&h, FreeState::Soft.into(), &[busy, asked], &[false; 2]);
    assert_eq!(p.actions[1].balloon, Some(10 * MIB + 16 * MIB));
    // Beside a VM without a balloon as far above its target, each gives half.
    let unballooned = VmObservation {
        balloon: None,
        ..idle
    };
    let busy = vm(800 * MIB, 270 * MIB, 1.0);
    let p = desired(
        &h,
        FreeState::High.into(),
        &[busy, idle, unballooned],
        &[false; 3],
    );
    assert_eq!(p.state, FreeState::Soft);
    let (i, u) = (p.actions[1], p.actions[2]);
    let deficit = 60 * MIB - (1000 - 270 - 330 - 330 - 48) * MIB;
    let (ballooned, paged) = (i.balloon.unwrap(), 330 * MIB - u.limit);
    assert!((deficit..=deficit + 2).contains(&(ballooned + paged)));
    let (over_i, over_u) = (330 * MIB - i.target, 330 * MIB - u.target);
    assert!(ballooned.abs_diff(deficit * over_i / (over_i + over_u)) <= 1);
    assert!(p.actions[0].target > 270 * MIB && ballooned > deficit / 3 && paged > deficit / 3);
    // Never past its target.
    let near = VmObservation {
        balloon: Some(800 * MIB - i.target - MIB),
        ..idle
    };
    let p = desired(
        &h,
        FreeState::Soft.into(),
        &[busy, near, unballooned],
        &[false; 3],
    );
    assert_eq!(p.actions[1].balloon, Some(800 * MIB - p.actions[1].target));
    // Hard takes it to its target.
    let p = desired(
        &h,
        FreeState::Hard.into(),
        &[vm(800 * MIB, 620 * MIB, 1.0), idle],
        &[false; 2],
    );
    assert_eq!(p.state, FreeState::Hard);
    assert_eq!(p.actions[1].balloon, Some(800 * MIB - p.actions[1].target));
}

/// Soft still hands out free memory above its own threshold, as ESX hands free pages to
/// whoever touches them until hard: a VM whose balloon cannot go further (its guest
/// deflates on OOM) and whose limit a hard state left a few MiB under what it touches
/// swapped at that limit for 20 s while 46 MiB of the budget stayed free, between the soft
/// threshold and the high one that leads back to high (`bench consolidate --scenario
/// balance`, docs/bench.md).
#[test]
fn soft_raises_a_pressed_limit_into_free_memory_above_its_threshold() {
    // Both busy, equal shares: targets of (1000 - 32 - 60) / 2 = 454 MiB each. `a` is above
    // its target and pressed against its limit; 1000 - (560 + 354 + 32) = 54 MiB is free,
    // 5.4 %: a host in soft stays there.
    let a = VmObservation {
        limit: 560 * MIB,
        ..vm(800 * MIB, 560 * MIB, 1.0)
    };
    let b = VmObservation {
        limit: 380 * MIB,
        ..vm(800 * MIB, 354 * MIB, 1.0)
    };
    let soft = Before {
        state: FreeState::Soft,
    };
    let p = desired(&host(1000 * MIB), soft, &[a, b], &[false; 2]);
    assert_eq!((p.state, p.free), (FreeState::Soft, 54 * MIB));
    let (x, y) = (p.actions[0], p.actions[1]);
    assert!(x.target < a.resident, "{x:?}");
    // Its balloon still inflates toward its target; its limit takes what is above 4 %.
    assert_eq!(x.balloon, Some(800 * MIB - x.target));
    assert_eq!(x.limit, a.limit + 14 * MIB);
    assert_eq!(
        y.limit,
        y.target.max(b.limit),
        "not pressed: nothing handed out"
    );
    // The growth expected by the next tick comes out of it first: `b`'s, which has room
    // under its limit to grow as much again.
    let growing = VmObservation {
        grown: 10 * MIB,
        ..b
    };
    let p = desired(&host(1000 * MIB), soft, &[a, growing], &[false; 2]);
    assert_eq!((p.state, p.growth), (FreeState::Soft, 10 * MIB));
    assert_eq!(p.actions[0].limit, a.limit + 4 * MIB);
}

/// ESX §6.3: soft reclaims by ballooning, "and resorts to paging only in cases where
/// ballooning is not possible". A VM without a balloon above its target is paged in soft;
/// otherwise a host whose free memory stays between the hard and high thresholds would
/// never reclaim it. It is paged by what free memory lacks to be back at the high
/// threshold, not to its target at once: that freed more than the state needed, high
/// handed it back to the VMs pressed against their limits, and they refaulted what had
/// just been paged (docs/bench.md, "Soft pages the deficit").
#[test]
fn soft_pages_a_vm_that_has_no_balloon() {
    let busy = vm(800 * MIB, 600 * MIB, 1.0);
    let idle = VmObservation {
        balloon: None,
        ..vm(800 * MIB, 330 * MIB, 0.0)
    };
    let p = desired(
        &host(1000 * MIB),
        FreeState::High.into(),
        &[busy, idle],
        &[false; 2],
    );
    assert_eq!(p.state, FreeState::Soft);
    let i = p.actions[1];
    // 1000 - (600 + 330 + 32) = 38 MiB free; 60 MiB is 6 %.
    assert!(i.target < 330 * MIB - 22 * MIB, "{i:?}");
    assert_eq!((i.balloon, i.limit), (None, 330 * MIB - 22 * MIB));
    assert!(!i.pause);
    // The busy VM, under its target, keeps its limit.
    assert_eq!(p.actions[0].limit, 800 * MIB);
    // In high nothing shrinks, balloon or not.
    let p = desired(
        &host(4000 * MIB),
        FreeState::High.into(),
        &[busy, idle],
        &[false; 2],
    );
    assert_eq!((p.state, p.actions[1].limit), (FreeState::High, 800 * MIB));
}

/// ESX §3.2: a balloon driver may be "unavailable while a guest OS is booting, or
/// temporarily unable to reclaim memory quickly enough". A VM whose driver does not answer
/// is paged in soft as a VM without a balloon is; its balloon is still asked to inflate, so
/// a driver that loads late can show it answers. In hard it is not held back by the
/// backstop either: its limit is its target.
#[test]
fn a_balloon_whose_driver_does_not_answer_is_paged_instead() {
    let busy = vm(800 * MIB, 600 * MIB, 1.0);
    let idle = vm(800 * MIB, 330 * MIB, 0.0);
    let mute = VmObservation {
        balloon_usable: false,
        balloon_reread_cap: None,
        ..idle
    };
    let soft = |vms: &[VmObservation]| {
        desired(&host(1000 * MIB), FreeState::High.into(), vms, &[false; 2])
    };
    let (a, b) = (soft(&[busy, idle]), soft(&[busy, mute]));
    assert_eq!((a.state, b.state), (FreeState::Soft, FreeState::Soft));
    let (i, m) = (a.actions[1], b.actions[1]);
    assert_eq!(i.target, m.target, "the same target either way");
    assert_eq!(i.limit, 800 * MIB, "ballooned, not paged");
    assert_eq!(m.limit, 330 * MIB - 22 * MIB, "paged by the deficit");
    assert_eq!(m.balloon, Some(800 * MIB - m.target), "still asked");
    // Hard: 18 MiB free.
    let hard = |v: VmObservation| {
        desired(
            &host(1000 * MIB),
            FreeState::High.into(),
            &[
                busy,
                VmObservation {
                    resident: 350 * MIB,
                    ..v
                },
            ],
            &[false; 2],
        )
    };
    let (a, b) = (hard(idle), hard(mute));
    assert_eq!((a.state, b.state), (FreeState::Hard, FreeState::Hard));
    assert!(
        a.actions[1].limit > a.actions[1].target,
        "{:?}",
        a.actions[1]
    );
    assert_eq!(b.actions[1].limit, b.actions[1].target);
}

/// `balloon_max`: a balloon never holds more than that fraction of the VM's memory; what
/// the target needs beyond it is paged, in soft as in hard.
#[test]
fn a_balloon_stops_at_its_cap_and_the_rest_is_paged() {
    let busy = vm(800 * MIB, 600 * MIB, 1.0);
    let idle = vm(800 * MIB, 330 * MIB, 0.0);
    let with = |cap: f64| HostParams {
        balloon_max: cap,
        ..host(1000 * MIB)
    };
    let p = desired(
        &with(1.0),
        FreeState::High.into(),
        &[busy, idle],
        &[false; 2],
    );
    assert_eq!(p.state, FreeState::Soft);
    let free = p.actions[1];
    let give_back = 800 * MIB - free.target;
    assert!(give_back > 400 * MIB, "{free:?}");
    assert_eq!((free.balloon, free.limit), (Some(give_back), 800 * MIB));
    // Capped at half its memory: the balloon takes 400 MiB, the pager the rest.
    let p = desired(
        &with(0.5),
        FreeState::High.into(),
        &[busy, idle],
        &[false; 2],
    );
    let capped = p.actions[1];
    assert_eq!(capped.target, free.target);
    assert_eq!(capped.balloon, Some(400 * MIB));
    assert_eq!(capped.limit, 330 * MIB - 22 * MIB);
    // A cap above what the target needs changes nothing.
    let p = desired(
        &with(0.9),
        FreeState::High.into(),
        &[busy, idle],
        &[false; 2],
    );
    assert_eq!(p.actions[1], free);
    // In high, a balloon above the cap (the cap was lowered) deflates to it.
    let over = VmObservation {
        balloon: Some(700 * MIB),
        ..idle
    };
    let p = desired(&with(0.5), FreeState::High.into(), &[over], &[false]);
    assert_eq!(p.state, FreeState::High);
    assert_eq!(p.actions[0].balloon, Some(0));
    let p = desired(
        &with(0.5),
        FreeState::Soft.into(),
        &[busy, over],
        &[false; 2],
    );
    assert!(
        p.actions[1].balloon <= Some(400 * MIB),
        "{:?}",
        p.actions[1]
    );
}

/// Free memory at 5 % is `high`; if the VMs grew by 2 % of the budget since the last tick
/// and have room to grow as much again, it will be under 4 % by the next: ballooning starts
/// now. VMs at their limits cannot grow, whatever they did before, and another VM's room
/// under its own limit does not make up for it.
#[test]
fn growth_since_the_last_tick_brings_reclaim_forward() {
    let plan = |vms: &[VmObservation]| {
        desired(&host(1000 * MIB), FreeState::High.into(), vms, &[false; 2])
    };
    // 1000 - (2 * 459 + 32) = 50 MiB free: 5 %.
    let a = vm(800 * MIB, 459 * MIB, 1.0);
    let b = vm(800 * MIB, 459 * MIB, 0.5);
    let p = plan(&[a, b]);
    assert_eq!((p.state, p.growth), (FreeState::High, 0));
    let grown = |v: VmObservation, by: u64| VmObservation { grown: by, ..v };
    let p = plan(&[grown(a, 10 * MIB), grown(b, 10 * MIB)]);
    assert_eq!(
        (p.state, p.growth, p.free),
        (FreeState::Soft, 20 * MIB, 50 * MIB)
    );
    assert!(p.actions[1].balloon > Some(0), "{:?}", p.actions[1]);
    let at_limit = |v: VmObservation| VmObservation {
        limit: v.resident,
        ..v
    };
    let p = plan(&[at_limit(grown(a, 10 * MIB)), at_limit(grown(b, 10 * MIB))]);
    assert_eq!((p.state, p.growth), (FreeState::High, 0));
    // `a` grew 20 MiB up to its limit; `b`, with room under its own, did not grow.
    let p = plan(&[at_limit(grown(a, 20 * MIB)), b]);
    assert_eq!((p.state, p.growth), (FreeState::High, 0));
    // Growth that would take free memory under 1 % brings paging forward, not pausing.
    let p = plan(&[grown(a, 25 * MIB), grown(b, 25 * MIB)]);
    assert_eq!((p.state, p.growth), (FreeState::Hard, 50 * MIB));
    assert!(p.actions.iter().all(|x| !x.pause));
    assert!(p.actions[1].limit < b.resident, "{:?}", p.actions[1]);
}

/// In `high`, free memory above the soft threshold goes to the VMs pressed against their
/// limits, by shares; a VM under its limit gets none, and nothing goes past `max`.
#[test]
fn spare_memory_raises_the_limits_of_vms_pressed_against_them() {
    let budget = 1200 * MIB;
    let with = |shares: u64, resident: u64, active: f64| VmObservation {
        shares,
        ..vm(800 * MIB, resident, active)
    };
    let idle = with(1000, 50 * MIB, 0.0);
    // Where the targets are with the idle VM holding little.
    let first = desired(
        &host(budget),
        FreeState::High.into(),
        &[with(1000, 0, 1.0), with(3000, 0, 1.0), idle],
        &[false; 3],
    );
    let t: Vec<u64> = first.actions.iter().map(|x| x.target).collect();
    assert!(t[0] < t[1] && t[1] < 800 * MIB, "{t:?}");
    // Both busy VMs are at limits at their targets, which leave memory free.
    let at = |i: usize, shares: u64| VmObservation {
        limit: t[i],
        ..with(shares, t[i], 1.0)
    };
    let (a, b) = (at(0, 1000), at(1, 3000));
    let p = desired(
        &host(budget),
        FreeState::High.into(),
        &[a, b, idle],
        &[false; 3],
    );
    assert_eq!(p.state, FreeState::High);
    let spare = p.free - budget * 4 / 100;
    let extra: Vec<u64> = (0..2).map(|i| p.actions[i].limit - t[i]).collect();
    assert!(
        extra[0] > 0 && extra[0] + extra[1] <= spare,
        "{extra:?} of {spare}"
    );
    assert!(
        p.actions[1].limit == 800 * MIB || extra[1].abs_diff(3 * extra[0]) <= 4,
        "by shares: {extra:?}"
    );
    assert!(p.actions.iter().all(|x| x.limit <= 800 * MIB));
    assert_eq!(p.actions[2].limit, idle.limit, "the idle VM is not pressed");
}

/// When a VM exits, the others' targets rise at the next tick: balloons deflate and limits
/// rise at once, in whatever state.
#[test]
fn memory_goes_back_to_the_others_when_a_vm_exits() {
    let budget = 1000 * MIB;
    let squeezed = |resident: u64| VmObservation {
        balloon: Some(400 * MIB),
        limit: 400 * MIB,
        ..vm(800 * MIB, resident, 1.0)
    };
    let (a, b) = (squeezed(390 * MIB), squeezed(390 * MIB));
    let p = desired(&host(budget), FreeState::Soft.into(), &[a, b], &[false; 2]);
    assert!(
        p.actions[0].balloon >= Some(300 * MIB),
        "{:?}",
        p.actions[0]
    );
    let p = desired(&host(budget), p.state.into(), &[a], &[false]);
    let x = p.actions[0];
    assert!(x.target > 700 * MIB, "{x:?}");
    assert_eq!(x.balloon, Some(800 * MIB - x.target));
    assert!(x.limit >= x.target);
}

#[test]
fn an_oom_deflate_counts_as_demand_for_a_while() {
    let budget = 1000 * MIB;
    let a = vm(800 * MIB, 480 * MIB, 0.0);
    let b = vm(800 * MIB, 480 * MIB, 0.0);
    let p = desired(
        &host(budget),
        FreeState::High.into(),
        &[a, b],
        &[true, false],
    );
    assert!(p.actions[0].target > p.actions[1].target);
    assert_eq!(p.actions[0].oom_demand, 10);
    let a = VmObservation { oom_demand: 1, ..a };
    let p = desired(&host(budget), p.state.into(), &[a, b], &[false; 2]);
    assert_eq!(p.actions[0].oom_demand, 0);
}

#[test]
fn the_pool_is_set_aside_and_shared_by_what_each_vm_is_denied() {
    let busy = vm(800 * MIB, 400 * MIB, 1.0);
    let idle = vm(800 * MIB, 200 * MIB, 0.0);
    let with = HostParams {
        pool: 100 * MIB,
        ..host(1000 * MIB)
    };
    let a = desired(
        &host(1000 * MIB),
        FreeState::High.into(),
        &[busy, idle],
        &[false; 2],
    );
    let b = desired(&with, FreeState::High.into(), &[busy, idle], &[false; 2]);
    let sum = |p: &Plan| p.actions.iter().map(|a| a.target).sum::<u64>();
    assert_eq!(sum(&a) - sum(&b), 100 * MIB, "targets give up the pool");
    assert_eq!(b.pool, 100 * MIB, "the VMs leave room for all of it");
    let pools: Vec<u64> = b.actions.iter().map(|a| a.pool).collect();
    assert!(pools.iter().sum::<u64>() <= 100 * MIB && pools.iter().sum::<u64>() > 99 * MIB);
    assert!(pools[1] > pools[0], "the idle VM is denied more: {pools:?}");
    // Pooled memory is held memory.
    let pooled = VmObservation {
        pooled: 50 * MIB,
        ..busy
    };
    let c = desired(&with, FreeState::High.into(), &[pooled, idle], &[false; 2]);
    assert_eq!(b.free - c.free, 50 * MIB);
    assert_eq!(c.pool, b.pool, "a pool does not shrink itself by filling");
}

#[test]
fn the_pool_gives_way_as_the_vms_grow_and_spills_once_free_memory_is_under_the_reserve() {
    let with = HostParams {
        pool: 200 * MIB,
        ..host(1000 * MIB)
    };
    let reserve = 60 * MIB; // 6 % of the budget
    let pooled = 100 * MIB;
    let mut state = FreeState::High;
    let mut last = u64::MAX;
    for resident in (300..=480).step_by(30) {
        let a = VmObservation {
            pooled,
            ..vm(800 * MIB, resident * MIB, 1.0)
        };
        let b = vm(800 * MIB, resident * MIB, 1.0);
        let p = desired(&with, state.into(), &[a, b], &[false; 2]);
        state = p.state;
        let held = 2 * (resident * MIB + 16 * MIB);
        let want = (1000 * MIB).saturating_sub(held + reserve).min(200 * MIB);
        assert_eq!(p.pool, want, "resident {resident} MiB each");
        assert!(p.pool <= last, "the pool only shrinks as the VMs grow");
        last = p.pool;
        // Room above what the pools hold is free memory above the reserve (until either
        // is 0).
        if p.pool > 0 && p.free > 0 {
            assert_eq!(
                i128::from(p.pool) - i128::from(pooled),
                (i128::from(p.free) - i128::from(reserve))
                    .min(i128::from(200 * MIB) - i128::from(pooled)),
                "resident {resident} MiB each"
            );
        }
        let shares: u64 = p.actions.iter().map(|a| a.pool).sum();
        assert!(shares <= p.pool);
    }
    assert!(
        last < pooled,
        "under the reserve the pool is smaller than what it holds"
    );
    assert_ne!(state, FreeState::High);
}

proptest! {
    #[test]
    fn plans_respect_min_max_and_never_shrink_without_pressure(
        budget in 64u64..8192,
        vms in proptest::collection::vec(
            (0u64..1024, 1u64..2048, 1u64..4000, 0.0f64..=1.0, 0u64..2048, any::<bool>()),
            1..8),
        start in 0usize..4,
    ) {
        let obs: Vec<VmObservation> = vms
            .iter()
            .map(|&(min, max, shares, active, resident, balloon)| {
                let (min, max) = (min.min(max) * MIB, max * MIB);
                VmObservation {
                    min,
                    max,
                    shares,
                    active,
                    resident: resident.min(max / MIB) * MIB,
                    pooled: 0,
                    overhead: 8 * MIB,
                    balloon: balloon.then_some(max / 2),
                    balloon_pending: 0,
                    balloon_usable: true,
                    balloon_reread_cap: None,
                    limit: max / 2,
                                oom_demand: 0,
                    reclaimed: 0,
                    grown: 0,
                }
            })
            .collect();
        let state = [FreeState::High, FreeState::Soft, FreeState::Hard, FreeState::Low][start];
        let h = HostParams { balloon_max: 0.5, ..host(budget * MIB) };
        let p = desired(&h, state.into(), &obs, &[]);
        prop_assert_eq!(p.actions.len(), obs.len());
        for (a, v) in p.actions.iter().zip(&obs) {
            prop_assert!(a.target >= v.min && a.target <= v.max);
            prop_assert!(a.limit <= v.max);
            prop_assert!(a.limit >= a.target.min(v.max));
            if let Some(b) = a.balloon {
                prop_assert!(b <= v.max - v.min);
                prop_assert!(b <= v.max / 2, "the cap");
            }
            if p.state >= FreeState::Hard {
                prop_assert!(a.limit <= v.limit.max(a.target), "nothing handed out");
            }
            if p.state == FreeState::High {
                prop_assert!(a.limit >= v.limit, "no shrinking in high");
                prop_assert!(a.balloon <= v.balloon, "no inflating in high");
                prop_assert!(!a.pause);
            }
        }
        prop_assert_eq!(&p, &desired(&h, state.into(), &obs, &[]));
    }
}
