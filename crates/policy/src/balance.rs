//! HyperDealer2's instant balancing on the host (Hwang, Park, Park, TPDS 2015, §4.3, §4.6,
//! §4.7): memory moves from victims to beneficiaries in one tick. A victim's clean page-cache
//! pages (guest pages that mirror disk blocks, so nothing is written) are released by its VMM
//! at once, without the guest's vCPUs, and the memory that frees goes to the beneficiaries in
//! the same tick, instead of waiting for free memory to fall far enough that balloons inflate
//! and the guests give pages back on their own time.
//!
//! Pure, like [`plan`](crate::plan()): it takes the plan of a tick and decides on top of it.
//!
//! - **Demand** ([`demand`], §4.6): the estimator's figure when there is one
//!   ([`BalanceObservation::demand`]); otherwise what the plan knows: a VM pressed against what
//!   it may hold (its pager limit, or what its balloon leaves its guest), or growing, needs its
//!   target minus what it holds, and a VM that deflated on OOM since the last tick needs what it
//!   deflated.
//! - **Beneficiaries** (§4.6): VMs whose demand is above the average demand of all the VMs and
//!   above a trigger ([`TRIGGER_PAGES`], the paper's 32 pages). Each wants its demand, at most
//!   the room it may grow into this tick: up to `max` in the high state (where limits do not
//!   shrink, so a raise sticks), up to the plan's limit otherwise, and never past what its
//!   balloon leaves its guest (the plan deflates balloons toward the target; HD2 does not
//!   deflate a guest past its target).
//! - **Victims** (§4.3): VMs that can release (the Swap Mapper, and a VMM that answers `PUT
//!   /memory/release`), are no beneficiary, and hold more than their targets. Each gives at most
//!   what it holds above its target and at most its clean pages; the rest of a shrink stays with
//!   the balloon and the pager limit as the plan decides it ("if the balancer consumes most of
//!   the candidates, it uses a ballooning scheme"). What the beneficiaries want is first taken
//!   from free memory above the high state's reserve (as far as the budget has room for it
//!   now), and only the rest released, largest supply first.
//! - **Cold first** (memvisor's own): while free memory is in the high state and the budget
//!   has room now for what the beneficiaries want, nothing is short, and a release there may
//!   take only what the victim's guest has left cold: pages of
//!   sequential streams behind a reader still reading them, or untouched since a probe
//!   ([`Decision::cold_only`]; `pattern.rs` in the pager). The paper's guest reports hits in
//!   its page cache, so a file it re-reads from its cache is known as a loop; here those hits
//!   are invisible, and a file re-read from the cache looked like a stream finished with, was
//!   taken first and read back from disk at once. Once free memory is below high, the paper's
//!   whole victim order applies.
//! - **Handing over** ([`settle`]): once the VMMs have answered, what they released is divided
//!   among the beneficiaries by what they want (never more than was released) and their pager
//!   limits raised by it; each victim's limit falls to what it holds after the release, so it
//!   does not fault the pages straight back.
//! - **Capacity gap** (§4.7): a released page is gone without its guest knowing, so a victim's
//!   guest believes it has more memory than the host gives it. The gap is the pages released
//!   less what its balloon has inflated by since; once a VM has been out of balancing, or idle,
//!   for [`BalanceParams::gap_idle_ticks`], its balloon inflates by the gap (reverse-ordered
//!   ballooning) and the gap is reset.

use serde::{Deserialize, Serialize};

use crate::budget::{held_at_most, hold, pressed_at, reserve, started, trimmable};
use crate::free_state::FreeState;
use crate::tick::{HostParams, Plan, VmAction, VmObservation};

/// A guest page.
pub const PAGE: u64 = 4096;

/// The paper's trigger for the balancer: a VM whose demand is below it is no beneficiary.
pub const TRIGGER_PAGES: u64 = 32;

/// How long a VM stays out of balancing (or idle) before its capacity gap is closed (§4.7).
pub const GAP_IDLE_SECONDS: f64 = 10.0;

/// An active fraction below this is idle, for the capacity gap reducer.
pub const IDLE_ACTIVE: f64 = 0.05;

/// The most one victim releases in one tick (8192 pages, 32 MiB): a release holds the VM's
/// page lock and the host's tick waits for its answer, so a larger need is met over several
/// ticks (or by the plan's balloon and limit meanwhile).
pub const MAX_RELEASE: u64 = 8192 * PAGE;

/// Growth in one tick above which a VM counts as growing, for [`demand`]: more than the few
/// pages a steady VM's resident count moves by between ticks.
pub const GROWING: u64 = 1 << 20;

/// The balancer's settings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct BalanceParams {
    /// Bytes of demand below which a VM is no beneficiary.
    pub trigger: u64,
    /// Ticks out of balancing, or idle, after which a VM's capacity gap is closed.
    pub gap_idle_ticks: u32,
    /// An active fraction below this is idle.
    pub idle_active: f64,
    /// The most one victim releases in one tick (bytes).
    #[serde(default = "max_release")]
    pub max_release: u64,
}

fn max_release() -> u64 {
    MAX_RELEASE
}

impl BalanceParams {
    /// The paper's settings for ticks of `tick` seconds and a gap closed after `gap_idle`
    /// seconds.
    #[must_use]
    pub fn new(tick: f64, gap_idle: f64) -> BalanceParams {
        // Finite and positive, so the quotient is a small positive number.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let ticks = (gap_idle / tick.max(1e-3)).ceil().clamp(1.0, 1e6) as u32;
        BalanceParams {
            trigger: TRIGGER_PAGES * PAGE,
            gap_idle_ticks: ticks,
            idle_active: IDLE_ACTIVE,
            max_release: MAX_RELEASE,
        }
    }
}

/// What the balancer knows of a VM besides its [`VmObservation`] (bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BalanceObservation {
    /// Its VMM can release clean pages now (the Swap Mapper is on, and `PUT /memory/release`
    /// has not failed); a VM that cannot is never a victim (its balloon and limit still work).
    pub releasable: bool,
    /// Resident guest pages identical to the disk block they were read from: what a release
    /// can take.
    pub clean: u64,
    /// The demand estimator's figure in bytes, when there is one; [`demand`] takes the larger
    /// of it and what the plan knows.
    pub demand: Option<u64>,
    /// Memory its balloon deflated on OOM since the last tick.
    pub oom: u64,
    /// Its capacity gap: released without its guest knowing, less what its balloon took since.
    pub gap: u64,
    /// Ticks it has been out of balancing, or idle.
    pub quiet: u32,
}

/// What the balancer decided for one VM (bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmBalance {
    /// Its demand.
    pub demand: u64,
    /// Above the average demand and the trigger.
    pub beneficiary: bool,
    /// What it may be given this tick (beneficiaries only).
    pub want: u64,
    /// What to release from it now (victims only; whole pages).
    pub release: u64,
    /// Its capacity gap after this tick's balloon, before this tick's release is added.
    pub gap: u64,
    /// What the plan's balloon takes back this tick beyond the gap it had: it covers as much of
    /// this tick's release.
    #[serde(default)]
    pub taken: u64,
    /// Ticks out of balancing or idle, for the next observation.
    pub quiet: u32,
    /// What its balloon inflates by this tick to close its capacity gap.
    pub inflate: u64,
    /// The capacity gap reducer acted on it this tick (its gap is reset, whatever its balloon
    /// could take).
    #[serde(default)]
    pub closed: bool,
}

/// The balancer's decision for one tick.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub vms: Vec<VmBalance>,
    /// The releases take only what their guests have left cold (`PUT /memory/release` with
    /// `cold_only`): in the high state, where no memory is short, while the budget has room now
    /// for what the beneficiaries want.
    #[serde(default)]
    pub cold_only: bool,
    /// The plan's actions with the capacity gap reducer's balloons.
    pub actions: Vec<VmAction>,
}

/// What a tick does once the releases were carried out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Settled {
    /// What each VM got of what was released.
    pub gives: Vec<u64>,
    /// Each VM's capacity gap, this tick's release included (less what the plan's balloon
    /// takes back in the same tick).
    pub gaps: Vec<u64>,
    /// What to ask of each VM.
    pub actions: Vec<VmAction>,
}

/// What `o` may hold now: its pager limit, and what its balloon leaves its guest.
fn allowed(o: &VmObservation) -> u64 {
    o.limit.min(o.max.saturating_sub(o.balloon.unwrap_or(0)))
}

/// How much more memory a VM needs (§4.6): the larger of the estimator's figure, when there is
/// one (`demand.rs`: page cache that would turn disk reads into hits, and the guest's own
/// swapping), and what the plan knows: its `target` minus what it holds if it is pressed
/// against what it may hold ([`pressed_at`]) or growing (by more than [`GROWING`] since
/// the last tick), plus what it deflated on OOM since the last tick. At most what it could
/// still grow to (`max`). None for a VM still waiting to start.
#[must_use]
pub fn demand(o: &VmObservation, b: &BalanceObservation, target: u64) -> u64 {
    if !started(o) {
        // Waiting for room: admission makes it ([`hold`]), not a release.
        return 0;
    }
    let room = allowed(o);
    let pressed = pressed_at(o, room);
    let short = if pressed || o.grown > GROWING {
        target.saturating_sub(o.resident)
    } else {
        0
    };
    let d = short.saturating_add(b.oom).max(b.demand.unwrap_or(0));
    d.min(o.max.saturating_sub(o.resident))
}

/// HyperDealer2's reference patterns (§4.4) applied to ESX's idle memory tax: a page of a
/// sequential stream was read once and will not be read again, so it is idle whatever the
/// sampler saw. The sampler counts a page touched in its period as active, and a stream touches
/// each of its pages once, so a VM whose memory is a page-cache stream looks fully active and
/// the tax cannot take the stream's cache. With balancing, the active fraction the plan sees is
/// at most the share of resident memory outside `streaming`, the sequences the guest is still
/// reading from its disk. Only those: once a stream stops, the host cannot tell a file read once
/// and done with from one the guest goes on re-reading from its own cache (those hits never
/// reach it), and the sampler, which sees the re-reads as touches, decides.
#[must_use]
pub fn active_outside_streams(active: f64, resident: u64, streaming: u64) -> f64 {
    if resident == 0 {
        return active;
    }
    let outside = 1.0 - (streaming.min(resident) as f64 / resident as f64);
    active.min(outside).max(0.0)
}

/// Decides the tick's releases and the capacity gap reducer's balloons, on top of `p`, the plan
/// of the same tick for `obs` (so `p.actions` and `obs` and `bal` are in the same order and of
/// the same length; missing entries count as VMs that cannot release and have no gap).
#[must_use]
pub fn decide(
    host: &HostParams,
    params: &BalanceParams,
    p: &Plan,
    obs: &[VmObservation],
    bal: &[BalanceObservation],
) -> Decision {
    let none = BalanceObservation::default();
    let n = obs.len().min(p.actions.len());
    let b = |i: usize| bal.get(i).unwrap_or(&none);
    let demands: Vec<u64> = (0..n)
        .map(|i| demand(&obs[i], b(i), p.actions[i].target))
        .collect();
    let total: u128 = demands.iter().map(|&d| u128::from(d)).sum();
    let mut vms: Vec<VmBalance> = demands
        .iter()
        .enumerate()
        .map(|(i, &d)| {
            // Above the average: d > total / n, without the division's rounding.
            let above = n > 0 && u128::from(d) * (n as u128) > total;
            let beneficiary = above && d > params.trigger;
            let (o, a) = (&obs[i], &p.actions[i]);
            // Outside high, up to the limit the plan wanted for it: at least its target, though
            // the budget may have held the limit lower until the releases make room.
            let cap = if p.state == FreeState::High {
                o.max
            } else {
                a.limit.max(a.target).min(o.max)
            }
            .min(o.max.saturating_sub(a.balloon.unwrap_or(0)));
            VmBalance {
                demand: d,
                beneficiary,
                want: if beneficiary {
                    d.min(cap.saturating_sub(o.resident))
                } else {
                    0
                },
                ..VmBalance::default()
            }
        })
        .collect();
    // Free memory above the reserve pays first (the plan's own headroom hands it out in high),
    // as far as the budget can give it within a tick: the room free now, and what limits above
    // what the other VMs hold free once they come down ([`hold`] trims them).
    let room = (0..n)
        .filter(|&i| !vms[i].beneficiary)
        .map(|i| trimmable(&obs[i]))
        .fold(
            host.budget.saturating_sub(held_at_most(host, obs)),
            u64::saturating_add,
        );
    let spare = if p.state == FreeState::High {
        p.free
            .saturating_sub(reserve(host))
            .saturating_sub(p.growth)
            .min(room)
    } else {
        0
    };
    let wanted: u64 = vms.iter().map(|v| v.want).fold(0, u64::saturating_add);
    let mut need = wanted.saturating_sub(spare).div_ceil(PAGE) * PAGE;
    // Nothing is short while the budget can give the beneficiaries what they want.
    let cold_only = p.state == FreeState::High && wanted <= room;
    // Victims, largest supply first (ties by order).
    let mut supply: Vec<(usize, u64)> = (0..n)
        .filter(|&i| !vms[i].beneficiary && b(i).releasable)
        .map(|i| {
            let above = obs[i].resident.saturating_sub(p.actions[i].target);
            let most = above.min(b(i).clean).min(params.max_release);
            (i, most / PAGE * PAGE)
        })
        .filter(|&(_, s)| s > 0)
        .collect();
    supply.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
    for (i, s) in supply {
        let r = s.min(need);
        vms[i].release = r;
        need -= r;
    }
    let mut actions = p.actions[..n].to_vec();
    for i in 0..n {
        let (o, a, v) = (&obs[i], &mut actions[i], &mut vms[i]);
        let before = o.balloon.unwrap_or(0);
        // What its balloon takes back this tick closes that much of the gap.
        let taken = a.balloon.unwrap_or(0).saturating_sub(before);
        v.gap = b(i).gap.saturating_sub(taken);
        v.taken = taken.saturating_sub(b(i).gap);
        let involved = v.beneficiary || v.release > 0;
        let idle = o.active < params.idle_active;
        v.quiet = if involved && !idle {
            0
        } else {
            b(i).quiet.saturating_add(1)
        };
        if v.gap > 0 && v.release == 0 && v.quiet >= params.gap_idle_ticks {
            if let Some(now) = a.balloon {
                // Never past what the balloon may hold (`max − min`), nor past what the plan
                // would deflate it back to at the next tick (`max − target`).
                let most = o
                    .max
                    .saturating_sub(o.min)
                    .min(o.max.saturating_sub(a.target));
                let to = now.max(now.saturating_add(v.gap).min(most));
                v.inflate = to - now;
                a.balloon = Some(to);
            }
            // Closed, or with no balloon to close it with: either way the reducer is done.
            v.gap = 0;
            v.quiet = 0;
            v.closed = true;
        }
    }
    Decision {
        vms,
        actions,
        cold_only,
    }
}

/// Hands out what was released: `released[i]` bytes came out of VM `i` (at most what
/// [`decide`] asked; less when its VMM released fewer pages or failed). The released total is
/// divided among the beneficiaries in proportion to what they want, each at most its want, and
/// their limits raised to hold it; each victim's limit falls to what it holds after the release
/// (never below its target), so the guest does not fault the pages straight back in.
#[must_use]
pub fn settle(host: &HostParams, d: &Decision, obs: &[VmObservation], released: &[u64]) -> Settled {
    let n = d.vms.len().min(obs.len()).min(d.actions.len());
    let got = |i: usize| released.get(i).copied().unwrap_or(0).min(d.vms[i].release);
    let total: u64 = (0..n).map(got).fold(0, u64::saturating_add);
    let wanted: u128 = d.vms[..n].iter().map(|v| u128::from(v.want)).sum();
    let mut gives: Vec<u64> = d.vms[..n]
        .iter()
        .map(|v| {
            if wanted == 0 {
                return 0;
            }
            let share = u128::from(total) * u128::from(v.want) / wanted;
            u64::try_from(share).unwrap_or(u64::MAX).min(v.want)
        })
        .collect();
    // Rounding leaves a few bytes: to the first beneficiaries with room.
    let mut left = total.saturating_sub(gives.iter().fold(0, |s, &g| s.saturating_add(g)));
    for (g, v) in gives.iter_mut().zip(&d.vms) {
        let more = v.want.saturating_sub(*g).min(left);
        *g += more;
        left -= more;
    }
    let mut actions = d.actions[..n].to_vec();
    for i in 0..n {
        let (o, a) = (&obs[i], &mut actions[i]);
        if gives[i] > 0 {
            a.limit = a.limit.max(o.resident.saturating_add(gives[i])).min(o.max);
        }
        let r = got(i);
        if r > 0 {
            a.limit = a.limit.min(o.resident.saturating_sub(r).max(a.target));
        }
    }
    // The budget holds: what was released is room now (a release lowers its VM's limit by as
    // much), and the raises come out of it. (Without a release the plan's limits stand: they
    // fit already.)
    if total == 0 {
        return Settled {
            gives,
            gaps: gaps(d, &got, n),
            actions,
        };
    }
    // A beneficiary given memory asks for it: counted as holding all of its limit (the budget
    // charges it that much anyway), it is pressed against it, and its raise is served.
    let after: Vec<VmObservation> = (0..n)
        .map(|i| {
            let limit = obs[i].limit.saturating_sub(got(i));
            let resident = obs[i].resident.saturating_sub(got(i));
            VmObservation {
                resident: if gives[i] > 0 {
                    resident.max(limit)
                } else {
                    resident
                },
                limit,
                ..obs[i]
            }
        })
        .collect();
    hold(host, &after, &mut actions);
    Settled {
        gives,
        gaps: gaps(d, &got, n),
        actions,
    }
}

/// What each VM's capacity gap is after its release.
fn gaps(d: &Decision, got: &dyn Fn(usize) -> u64, n: usize) -> Vec<u64> {
    (0..n)
        .map(|i| {
            d.vms[i]
                .gap
                .saturating_add(got(i).saturating_sub(d.vms[i].taken))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::free_state::Thresholds;
    use crate::plan::plan;
    use crate::tick::BalloonInflate;
    use proptest::prelude::*;

    const MIB: u64 = 1 << 20;

    fn host(budget: u64) -> HostParams {
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

    fn vm(max: u64, resident: u64, active: f64, limit: u64) -> VmObservation {
        VmObservation {
            min: 0,
            max,
            shares: 1000,
            active,
            resident,
            pooled: 0,
            overhead: 16 * MIB,
            balloon: None,
            balloon_pending: 0,
            balloon_usable: true,
            balloon_reread_cap: None,
            limit,
            oom_demand: 0,
            reclaimed: 0,
            grown: 0,
        }
    }

    fn params() -> BalanceParams {
        BalanceParams::new(0.25, 10.0)
    }

    /// An idle VM full of clean page cache and a busy one pressed against its limit: what free
    /// memory above the reserve does not cover comes out of the idle one's clean pages now.
    #[test]
    fn clean_pages_of_an_idle_vm_go_to_a_pressed_one_in_the_same_tick() {
        let h = host(1000 * MIB);
        let idle = vm(512 * MIB, 420 * MIB, 0.0, 512 * MIB);
        let busy = vm(512 * MIB, 448 * MIB, 1.0, 450 * MIB);
        let obs = [idle, busy];
        let p = plan(&h, FreeState::High.into(), &obs, &[false; 2]);
        assert_eq!(p.state, FreeState::High, "{p:?}");
        let t = |i: usize| p.actions[i].target;
        assert!(t(1) > busy.resident && t(0) < idle.resident, "{p:?}");
        let bal = [
            BalanceObservation {
                releasable: true,
                clean: 300 * MIB,
                ..BalanceObservation::default()
            },
            BalanceObservation {
                releasable: true,
                ..BalanceObservation::default()
            },
        ];
        let d = decide(&h, &params(), &p, &obs, &bal);
        assert!(d.vms[1].beneficiary && !d.vms[0].beneficiary, "{d:?}");
        assert_eq!(d.vms[1].demand, t(1) - busy.resident);
        assert_eq!(d.vms[0].demand, 0, "not pressed: no demand");
        let want = d.vms[1].want;
        assert_eq!(want, t(1) - busy.resident);
        let spare = p.free - h.budget * 6 / 100;
        let r = d.vms[0].release;
        let expect = (want - spare).min(idle.resident - t(0));
        assert!(
            r > 0 && r >= expect && r < expect + PAGE,
            "released {r} of {expect}"
        );
        assert_eq!(d.vms[1].release, 0);
        assert!(
            d.cold_only,
            "in high, a release takes only what its guest left cold"
        );
        // Its VMM released all but 10 pages: the beneficiary gets what was released.
        let s = settle(&h, &d, &obs, &[r - 10 * PAGE, 0]);
        assert_eq!(s.gives, vec![0, r - 10 * PAGE]);
        assert_eq!(s.actions[0].limit, idle.resident - (r - 10 * PAGE));
        // The budget held its limit at what was free; the release makes room for the rest.
        assert!(
            p.actions[1].limit < busy.resident + (r - 10 * PAGE),
            "{p:?}"
        );
        assert_eq!(s.actions[1].limit, busy.resident + (r - 10 * PAGE));
        assert_eq!(s.gaps, vec![r - 10 * PAGE, 0]);
        // Its VMM failed: nothing is given, and the victim keeps the plan's limit.
        let s = settle(&h, &d, &obs, &[0, 0]);
        assert_eq!((s.gives, s.actions), (vec![0, 0], p.actions.clone()));
        // Without clean pages, nothing is released: the plan's balloon and limit do it all.
        let none = [BalanceObservation::default(); 2];
        let d = decide(&h, &params(), &p, &obs, &none);
        assert!(d.vms.iter().all(|v| v.release == 0));
        assert_eq!(settle(&h, &d, &obs, &[0, 0]).actions, p.actions);
    }

    /// A VM growing toward a target its limit already allows needs the rest of it; one that
    /// holds still below its target needs nothing.
    #[test]
    fn a_growing_vm_needs_the_rest_of_its_target() {
        let o = vm(512 * MIB, 300 * MIB, 1.0, 450 * MIB);
        let grown = |grown: u64| VmObservation { grown, ..o };
        let b = BalanceObservation::default();
        assert_eq!(demand(&grown(0), &b, 450 * MIB), 0);
        assert_eq!(
            demand(&grown(GROWING), &b, 450 * MIB),
            0,
            "a steady VM's jitter"
        );
        assert_eq!(demand(&grown(8 * MIB), &b, 450 * MIB), 150 * MIB);
        // Pressed against its limit, it needs its target less what it holds, growing or not.
        let pressed = VmObservation {
            resident: 449 * MIB,
            ..o
        };
        assert_eq!(demand(&pressed, &b, 480 * MIB), 31 * MIB);
        // Never past max.
        assert_eq!(demand(&pressed, &b, 900 * MIB), 63 * MIB);
    }

    /// Outside high the beneficiary may grow up to the plan's limit, and no free memory pays.
    #[test]
    fn under_pressure_every_byte_wanted_is_released() {
        let h = host(1000 * MIB);
        let idle = vm(512 * MIB, 460 * MIB, 0.0, 512 * MIB);
        let busy = vm(512 * MIB, 470 * MIB, 1.0, 472 * MIB);
        let obs = [idle, busy];
        let p = plan(&h, FreeState::High.into(), &obs, &[false; 2]);
        assert_ne!(p.state, FreeState::High, "{p:?}");
        let bal = [BalanceObservation {
            releasable: true,
            clean: 300 * MIB,
            ..BalanceObservation::default()
        }; 2];
        let d = decide(&h, &params(), &p, &obs, &bal);
        let want = d.vms[1].want;
        assert!(
            want > 0 && want <= p.actions[1].limit.max(p.actions[1].target) - busy.resident,
            "{d:?}"
        );
        // 42 MiB wanted: 32 MiB this tick, the most one victim releases at once, in the whole
        // victim order.
        assert_eq!(d.vms[0].release, want.min(MAX_RELEASE));
        assert!(!d.cold_only);
        assert_eq!(d.vms[0].release, MAX_RELEASE);
        let unlimited = BalanceParams {
            max_release: u64::MAX,
            ..params()
        };
        let d = decide(&h, &unlimited, &p, &obs, &bal);
        assert!(d.vms[0].release >= want && d.vms[0].release < want + PAGE);
    }

    /// In high, free memory above the reserve pays for what beneficiaries want before any page
    /// is released.
    #[test]
    fn free_memory_pays_before_a_release() {
        let h = host(4000 * MIB);
        let idle = vm(512 * MIB, 420 * MIB, 0.0, 512 * MIB);
        let busy = vm(512 * MIB, 300 * MIB, 1.0, 300 * MIB);
        let p = plan(&h, FreeState::High.into(), &[idle, busy], &[false; 2]);
        let bal = [BalanceObservation {
            releasable: true,
            clean: 300 * MIB,
            demand: Some(0),
            ..BalanceObservation::default()
        }; 2];
        let bal = [
            bal[0],
            BalanceObservation {
                demand: Some(100 * MIB),
                ..bal[1]
            },
        ];
        let d = decide(&h, &params(), &p, &[idle, busy], &bal);
        assert!(d.vms[1].beneficiary);
        assert_eq!(d.vms[0].release, 0, "{d:?}");
    }

    /// Free memory held by the budget is not spare: an idle VM's limit at all of its memory
    /// (plain memory) leaves no room for a busy one pressed against its own, however much
    /// free memory the resident pages leave, so what the busy one wants is released now, and
    /// not only from pages its victim left cold.
    #[test]
    fn free_memory_the_budget_holds_is_not_spare() {
        let h = host(1000 * MIB);
        let idle = vm(512 * MIB, 480 * MIB, 0.0, 512 * MIB);
        let busy = vm(512 * MIB, 400 * MIB, 1.0, 400 * MIB);
        let obs = [idle, busy];
        let p = plan(&h, FreeState::High.into(), &obs, &[false; 2]);
        // 1000 - 480 - 400 - 32 = 88 MiB free: high, but 1000 - 512 - 400 - 32 = 56 MiB of
        // room, and 28 MiB more once the idle VM's limit comes down, a tick later.
        assert_eq!(p.state, FreeState::High, "{p:?}");
        let bal = [
            BalanceObservation {
                releasable: true,
                clean: 300 * MIB,
                ..BalanceObservation::default()
            },
            BalanceObservation {
                releasable: true,
                demand: Some(300 * MIB),
                ..BalanceObservation::default()
            },
        ];
        let d = decide(&h, &params(), &p, &obs, &bal);
        assert!(d.vms[1].beneficiary && d.vms[1].want > 84 * MIB, "{d:?}");
        assert!(d.vms[0].release > 0, "{d:?}");
        assert!(!d.cold_only, "{d:?}");
        // With room for it all within a tick, the same want is paid from free memory first,
        // and what is released comes from cold pages only.
        let h = host(2000 * MIB);
        let p = plan(&h, FreeState::High.into(), &obs, &[false; 2]);
        let d = decide(&h, &params(), &p, &obs, &bal);
        assert!(d.cold_only && d.vms[0].release == 0, "{d:?}");
    }

    /// A VM released from carries a gap; once out of balancing for the configured time, its
    /// balloon inflates by it and the gap is reset.
    #[test]
    fn the_capacity_gap_is_closed_by_the_balloon_after_a_quiet_spell() {
        let h = host(4000 * MIB);
        let o = VmObservation {
            balloon: Some(0),
            ..vm(512 * MIB, 200 * MIB, 0.5, 200 * MIB)
        };
        let mut p = plan(&h, FreeState::High.into(), &[o], &[false]);
        // A target below max, so the balloon may hold the gap.
        p.actions[0].target = 300 * MIB;
        let ps = params();
        assert_eq!(ps.gap_idle_ticks, 40);
        let mut b = BalanceObservation {
            releasable: true,
            gap: 30 * MIB,
            ..BalanceObservation::default()
        };
        for tick in 1..=40 {
            let d = decide(&h, &ps, &p, &[o], &[b]);
            let v = d.vms[0];
            if tick < 40 {
                assert_eq!((v.inflate, v.gap, v.quiet), (0, 30 * MIB, tick));
                assert_eq!(d.actions, p.actions);
            } else {
                assert_eq!((v.inflate, v.gap), (30 * MIB, 0));
                assert_eq!(d.actions[0].balloon, Some(30 * MIB));
            }
            b.quiet = v.quiet;
            b.gap = v.gap;
        }
        // What the plan's balloon takes back closes the gap as much.
        let soft = Plan {
            actions: vec![VmAction {
                balloon: Some(10 * MIB),
                ..p.actions[0]
            }],
            ..p.clone()
        };
        let d = decide(
            &h,
            &ps,
            &soft,
            &[o],
            &[BalanceObservation { quiet: 0, ..b }],
        );
        assert_eq!(d.vms[0].gap, 0);
        let d = decide(
            &h,
            &ps,
            &soft,
            &[o],
            &[BalanceObservation { gap: 25 * MIB, ..b }],
        );
        assert_eq!(d.vms[0].gap, 15 * MIB);
    }

    fn arb_vm() -> impl Strategy<Value = (VmObservation, BalanceObservation)> {
        (
            (
                1u64..1024,
                0u64..1024,
                0.0f64..=1.0,
                0u64..1024,
                any::<bool>(),
            ),
            (any::<bool>(), 0u64..1024, proptest::option::of(0u64..1024)),
            (0u64..64, 0u64..256, 0u32..50, 0u64..8),
        )
            .prop_map(
                |(
                    (max, res, active, lim, balloon),
                    (rel, clean, dem),
                    (oom, gap, quiet, grown),
                )| {
                    let max = max * MIB;
                    let resident = (res * MIB).min(max);
                    let o = VmObservation {
                        min: 0,
                        max,
                        shares: 1000,
                        active,
                        resident,
                        pooled: 0,
                        overhead: 8 * MIB,
                        balloon: balloon.then_some(max / 4),
                        balloon_pending: 0,
                        balloon_usable: true,
                        balloon_reread_cap: None,
                        limit: (lim * MIB).clamp(resident.min(max), max),
                        oom_demand: 0,
                        reclaimed: 0,
                        grown: grown * MIB,
                    };
                    let b = BalanceObservation {
                        releasable: rel,
                        clean: (clean * MIB).min(resident),
                        demand: dem.map(|d| d * MIB),
                        oom: oom * MIB,
                        gap: gap * MIB,
                        quiet,
                    };
                    (o, b)
                },
            )
    }

    #[test]
    fn a_stream_is_idle_and_the_rest_is_as_sampled() {
        // All of it a stream: idle, however active it looked.
        assert_eq!(active_outside_streams(1.0, 100 * MIB, 100 * MIB), 0.0);
        // A quarter outside streams: at most a quarter active.
        assert!((active_outside_streams(0.9, 100 * MIB, 75 * MIB) - 0.25).abs() < 1e-12);
        // What the sampler saw when that is less; no streams, no change.
        assert!((active_outside_streams(0.1, 100 * MIB, 75 * MIB) - 0.1).abs() < 1e-12);
        assert!((active_outside_streams(0.7, 100 * MIB, 0) - 0.7).abs() < 1e-12);
        // Nothing resident, or a count above it (stats from two moments): no panic, in range.
        assert!((active_outside_streams(0.5, 0, 10) - 0.5).abs() < 1e-12);
        assert_eq!(active_outside_streams(0.5, MIB, 2 * MIB), 0.0);
    }

    proptest! {
        #[test]
        fn releases_and_gives_stay_within_what_there_is(
            budget in 256u64..4096,
            vms in proptest::collection::vec(arb_vm(), 1..8),
            start in 0usize..4,
            shortfall in proptest::collection::vec(0u64..64, 8),
        ) {
            let h = host(budget * MIB);
            let obs: Vec<VmObservation> = vms.iter().map(|v| v.0).collect();
            let bal: Vec<BalanceObservation> = vms.iter().map(|v| v.1).collect();
            let state = [FreeState::High, FreeState::Soft, FreeState::Hard, FreeState::Low][start];
            let p = plan(&h, state.into(), &obs, &[]);
            let d = decide(&h, &params(), &p, &obs, &bal);
            prop_assert_eq!(d.vms.len(), obs.len());
            let n = obs.len() as u128;
            let total: u128 = d.vms.iter().map(|v| u128::from(v.demand)).sum();
            for ((v, o), (b, a)) in d.vms.iter().zip(&obs).zip(bal.iter().zip(&p.actions)) {
                // Never more than a victim's clean pages, nor than it holds above its target.
                prop_assert!(v.release <= b.clean);
                prop_assert!(v.release <= MAX_RELEASE);
                prop_assert!(v.release <= o.resident.saturating_sub(a.target));
                prop_assert_eq!(v.release % PAGE, 0);
                prop_assert!(v.release == 0 || (b.releasable && !v.beneficiary));
                // Beneficiaries only above the average demand and the trigger.
                if v.beneficiary {
                    prop_assert!(u128::from(v.demand) * n > total);
                    prop_assert!(v.demand > params().trigger);
                } else {
                    prop_assert_eq!(v.want, 0);
                }
                prop_assert!(o.resident + v.want <= o.max);
            }
            // Nothing is released that nobody wants.
            let released: u64 = d.vms.iter().map(|v| v.release).sum();
            let wanted: u64 = d.vms.iter().map(|v| v.want).sum();
            prop_assert!(released < wanted + PAGE || released == 0);
            // Whatever the VMMs manage to release, no more is given than was released.
            let got: Vec<u64> = d
                .vms
                .iter()
                .zip(&shortfall)
                .map(|(v, &s)| v.release.saturating_sub(s * MIB))
                .collect();
            let s = settle(&h, &d, &obs, &got);
            let given: u64 = s.gives.iter().sum();
            prop_assert!(given <= got.iter().sum::<u64>());
            for ((g, v), (o, a)) in s.gives.iter().zip(&d.vms).zip(obs.iter().zip(&s.actions)) {
                prop_assert!(*g <= v.want);
                prop_assert!(a.limit <= o.max);
                if let Some(b) = a.balloon {
                    prop_assert!(b <= o.max - o.min);
                }
            }
            for (i, a) in s.actions.iter().enumerate() {
                if got[i] > 0 {
                    prop_assert!(a.limit >= a.target && a.limit <= obs[i].resident - got[i]);
                }
            }
        }

        /// With no VM that can release and no gap, the balancer changes nothing of the plan.
        #[test]
        fn nothing_to_release_leaves_the_plan_alone(
            budget in 256u64..4096,
            vms in proptest::collection::vec(arb_vm(), 1..8),
            start in 0usize..4,
        ) {
            let h = host(budget * MIB);
            let obs: Vec<VmObservation> = vms.iter().map(|v| v.0).collect();
            let bal: Vec<BalanceObservation> = vms
                .iter()
                .map(|v| BalanceObservation { releasable: false, gap: 0, ..v.1 })
                .collect();
            let state = [FreeState::High, FreeState::Soft, FreeState::Hard, FreeState::Low][start];
            let p = plan(&h, state.into(), &obs, &[]);
            let d = decide(&h, &params(), &p, &obs, &bal);
            prop_assert!(d.vms.iter().all(|v| v.release == 0 && v.inflate == 0));
            let s = settle(&h, &d, &obs, &vec![0; obs.len()]);
            prop_assert_eq!(&s.actions, &p.actions);
            prop_assert!(s.gives.iter().all(|&g| g == 0));
        }
    }
}
