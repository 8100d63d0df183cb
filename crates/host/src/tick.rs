//! The tick's decisions: what the policy sees of each VM, the plan, HyperDealer2's releases, and
//! the orders that follow; what the tick leaves for the next one; KSM's scan rate; the trace.
//!
//! A tick (every `tick` of the config) reaps VMMs that ended, reads every live VM's `GET /vm`
//! and `GET /stats`, and hands the observations to [`Tick::decide`], which runs
//! [`memvisor_policy::plan()`]; each VMM is then sent what changed ([`Tick::settle`] gives the
//! orders): `PUT /balloon`, `PUT /memory`, `PUT /vm/pause` or `PUT /vm/resume`. The calls to
//! the VMMs are made by `manager::tick` without the state lock. A VM admitted but waiting for
//! room is planned for like the others (nothing resident, no limit); its VMM starts at the
//! first tick whose plan has room for its `min` and its VMM's overhead, with the limit the
//! plan gives it ([`memvisor_policy::budget::hold`]); the ticks after raise it.
//!
//! With `[host] balancing = "hd2"` (HyperDealer2, docs/hd2.md) the balancer
//! ([`memvisor_policy::balance`]) decides on top of the plan: the victims' VMMs are asked to
//! release clean pages first (`PUT /memory/release`, one request per victim), and once they have
//! answered, what they released is handed to the VMs that need it with the tick's other orders.

use std::io::BufWriter;

use memvisor_api::spec::MIN_LIMIT;
use memvisor_api::{
    Balancing, ClientError, FreeStateName, HostEventKind, HostSample, HostVmState, ReleaseRequest,
    ReleaseResult, VmInfo, VmState, VmStats,
};
use memvisor_policy::balance::{self, BalanceObservation, BalanceParams, Decision};
use memvisor_policy::balloon::{BalloonReading, RereadCap};
use memvisor_policy::budget;
use memvisor_policy::free_state::{FreeState, Thresholds};
use memvisor_policy::plan::plan;
use memvisor_policy::tick::{Before, HostParams, Plan, VmAction, VmObservation};
use memvisor_policy::trace::{self, BalanceRecord, TraceTick};

use crate::balancing::{estimate_demand, Balancer, ReleaseOrder};
use crate::config::HostConfig;
use crate::journal::Journal;
use crate::ksm::Ksm;
use crate::process::Launch;
use crate::registry::{Registry, VmEntry};

/// The free-memory state as the API names it.
pub fn free_state_name(s: FreeState) -> FreeStateName {
    match s {
        FreeState::High => FreeStateName::High,
        FreeState::Soft => FreeStateName::Soft,
        FreeState::Hard => FreeStateName::Hard,
        FreeState::Low => FreeStateName::Low,
    }
}

/// The policy's host-wide inputs from `config`, with the host's own memory `own`.
pub fn params(config: &HostConfig, own: u64) -> HostParams {
    HostParams {
        budget: config.memory,
        own,
        idle_tax: config.idle_tax,
        thresholds: Thresholds::default(),
        pool: config.pool,
        oom_demand_ticks: HostParams::oom_demand_ticks(config.tick.as_secs_f64()),
        balloon_max: config.balloon_max,
        balloon_inflate: config.balloon_inflate,
    }
}

/// What the policy sees of `v`, from its last observation. A VM waiting for room has nothing
/// resident and no limit, and is taken as fully active (it has not run yet), its VMM charged
/// `vm_overhead`. The policy's `min` is never below the pager's smallest limit, which the host
/// would set anyway.
pub fn observe(config: &HostConfig, v: &VmEntry) -> VmObservation {
    let min = v.spec.min.max(MIN_LIMIT).min(v.max);
    if v.waiting {
        return VmObservation {
            min,
            max: v.max,
            shares: v.spec.shares,
            active: 1.0,
            resident: 0,
            pooled: 0,
            overhead: config.vm_overhead,
            balloon: v.spec.balloon.then_some(0),
            balloon_pending: 0,
            balloon_usable: false,
            balloon_reread_cap: None,
            limit: 0,
            oom_demand: 0,
            reclaimed: 0,
            grown: 0,
        };
    }
    // What it really holds: a page KSM merged is held once for all who map it, and the
    // memory that frees is free for the policy to hand out (docs/sharing.md).
    let resident = v.resident().saturating_sub(v.shared_saved());
    let active = if config.balancing == Balancing::Hd2 {
        balance::active_outside_streams(v.active(), resident, v.streaming())
    } else {
        v.active()
    };
    // What its balloon is asked to take (the device's target) and what its driver holds.
    let asked = v
        .info
        .as_ref()
        .and_then(|i| i.balloon_target_bytes)
        .unwrap_or(0);
    let held = v
        .stats
        .as_ref()
        .and_then(|s| s.balloon.as_ref())
        .map_or(0, |b| b.actual_pages.saturating_mul(4096));
    VmObservation {
        min,
        max: v.max,
        shares: v.spec.shares,
        active,
        resident,
        pooled: v.pooled(),
        overhead: v.overhead(config.vm_overhead),
        balloon: v.spec.balloon.then_some(asked),
        balloon_pending: asked.saturating_sub(held),
        balloon_usable: v.balloon_watch.usable,
        balloon_reread_cap: v.balloon_watch.reread_cap,
        // No limit is plain memory: all of it. Until its API answers, what it started with.
        limit: v
            .info
            .as_ref()
            .map_or(v.launch_limit, |i| i.limit_bytes.unwrap_or(v.spec.mem)),
        oom_demand: v.oom_demand,
        reclaimed: v.reclaimed().saturating_sub(v.reclaimed_seen) * 4096,
        grown: v
            .resident_seen
            .map_or(0, |seen| resident.saturating_sub(seen)),
    }
}

/// Takes in what `v`'s balloon device says of its driver ([`memvisor_policy::balloon`]) and
/// says so in the journal when the balloon becomes usable or stops being usable; with
/// `rereads`, what its guest re-read ([`watch_rereads`]).
fn watch_balloon(
    journal: &mut Journal,
    v: &mut VmEntry,
    info: &VmInfo,
    stats: &VmStats,
    rereads: bool,
) {
    let Some(b) = stats.balloon.as_ref() else {
        return;
    };
    let reading = BalloonReading {
        now: journal.seconds(),
        target: info
            .balloon_target_bytes
            .unwrap_or(b.target_pages.saturating_mul(4096)),
        actual: b.actual_pages.saturating_mul(4096),
        answered: b.inflated_pages > 0 || b.stats_updates > 0,
    };
    if rereads {
        watch_rereads(journal, v, &reading, stats);
    }
    let Some(usable) = v.balloon_watch.observe(reading) else {
        return;
    };
    let (kind, msg) = if usable {
        let holds = if reading.target > 0 {
            format!(
                " (holds {} of {} MiB asked)",
                reading.actual >> 20,
                reading.target >> 20
            )
        } else {
            String::new()
        };
        (
            HostEventKind::BalloonUsable,
            format!("its balloon driver answers{holds}: ballooned, not paged"),
        )
    } else {
        let why = if reading.answered {
            "has made no progress"
        } else {
            "has never answered"
        };
        (
            HostEventKind::BalloonUnusable,
            format!(
                "its balloon driver {why} toward {} MiB (holds {} MiB) for over {} s: paged instead of ballooned",
                reading.target >> 20,
                reading.actual >> 20,
                memvisor_policy::balloon::ANSWER_DEADLINE
            ),
        )
    };
    journal.event(kind, Some(&v.spec.name), msg);
}

/// Takes in the guest's re-reads of blocks its page cache gave up, as its Swap Mapper counts
/// them, for the cap they set on its balloon
/// ([`memvisor_policy::balloon::BalloonWatch::take_rereads`]), and says so in
/// the journal when the cap is set or lifted. Nothing without the Swap Mapper's statistics.
fn watch_rereads(journal: &mut Journal, v: &mut VmEntry, r: &BalloonReading, stats: &VmStats) {
    let patterns = stats.pager.as_ref().and_then(|p| p.patterns.as_ref());
    let Some(total) = patterns.map(|p| p.guest_rereads) else {
        return;
    };
    let msg = match v.balloon_watch.take_rereads(r.now, r.actual, total) {
        Some(RereadCap::Set(cap)) => format!(
            "its guest reads again from its disk what its balloon took: the balloon holds at most {} MiB (it held {} MiB), host paging takes the rest",
            cap >> 20,
            r.actual >> 20
        ),
        Some(RereadCap::Lifted) => format!(
            "its guest re-read nothing for {} s: its balloon's cap is the host's again",
            memvisor_policy::balloon::REREAD_QUIET
        ),
        None => return,
    };
    journal.event(HostEventKind::BalloonRereadCap, Some(&v.spec.name), msg);
}

/// What a tick sends one VMM.
pub struct Order {
    /// The VM, by index into the registry's list.
    pub index: usize,
    pub balloon: Option<u64>,
    pub limit: Option<u64>,
    pub pool: Option<u64>,
    pub pause: Option<bool>,
}

/// A tick between its decision and its orders: the releases go out first, without the lock.
struct Pending {
    /// The VMs planned for, by index into `vms` and by name (the list may change meanwhile).
    live: Vec<(usize, String)>,
    obs: Vec<VmObservation>,
    oom: Vec<bool>,
    before: Before,
    plan: Plan,
    /// With HD2 balancing: what the balancer knew and decided.
    balance: Option<(BalanceParams, Vec<BalanceObservation>, Decision)>,
}

/// What the ticks leave for the next one and for `GET /host`, KSM while a VM shares, and the
/// trace.
pub struct Tick {
    pub free_state: FreeState,
    pub free: u64,
    /// The host process's own memory at the last tick (its PSS).
    pub own: u64,
    /// What the budget covered at the last tick: the host's own memory, the pools' most, and
    /// each VM's resident pages or limit, whichever is more, and its VMM's overhead.
    pub committed: u64,
    /// The pools' size together at the last tick.
    pub pool: u64,
    pub ticks: u64,
    /// The tick decided but not yet carried out (between [`Tick::decide`] and
    /// [`Tick::settle`]).
    pending: Option<Pending>,
    /// The kernel's KSM while a running VM shares; dropped (its knobs put back) when none does.
    pub ksm: Option<Ksm>,
    /// Where each tick's observations and plan are written (`[host] trace`).
    trace: Option<BufWriter<std::fs::File>>,
}

impl Tick {
    /// Before the first tick, writing the ticks to `trace` if given.
    pub fn new(trace: Option<BufWriter<std::fs::File>>) -> Tick {
        Tick {
            free_state: FreeState::High,
            free: 0,
            own: 0,
            committed: 0,
            pool: 0,
            ticks: 0,
            pending: None,
            ksm: None,
            trace,
        }
    }

    /// What the last tick left, for the next plan.
    fn before(&self) -> Before {
        Before {
            state: self.free_state,
        }
    }

    /// Takes in what was observed and decides; returns the releases to ask for before the
    /// tick's other orders ([`Tick::settle`] gives those).
    pub fn decide(
        &mut self,
        config: &HostConfig,
        registry: &mut Registry,
        journal: &mut Journal,
        seen: Vec<(String, Option<(VmInfo, VmStats)>)>,
    ) -> Vec<ReleaseOrder> {
        let mut arrived = Vec::new();
        for (name, obs) in seen {
            let Some(v) = registry.named_mut(&name) else {
                continue;
            };
            // A move may have begun while the tick read this VM without the lock: from then
            // on the move says what the VM is, not the observation.
            if !v.live() || v.outgoing.is_some() || v.migrated {
                continue;
            }
            if let Some((info, stats)) = obs {
                v.state = match (info.state, v.stop_asked) {
                    (_, true) => HostVmState::Stopping,
                    (VmState::Paused, _) => HostVmState::Paused,
                    (VmState::Created, _) => HostVmState::Starting,
                    (VmState::Running, _) => HostVmState::Running,
                };
                v.why = match (&info.paused_because, v.paused_by_host) {
                    (Some(_), true) => {
                        Some("paused by the host: above its target with free memory low".into())
                    }
                    (Some(w), false) => Some(w.clone()),
                    (None, _) => None,
                };
                if v.incoming.is_some() {
                    if info.state == VmState::Created {
                        v.state = HostVmState::Incoming;
                        v.why =
                            Some("its VMM has the VM's state and waits for the go-ahead".into());
                    } else {
                        // The switch is done: the VM runs here, its memory following.
                        v.incoming = None;
                        arrived.push(name.clone());
                    }
                }
                if v.spec.balloon {
                    watch_balloon(journal, v, &info, &stats, config.balloon_rereads);
                }
                v.info = Some(info);
                v.stats = Some(stats);
                let mem = v.spec.mem;
                if let Some(beside) = v.vmm.as_ref().and_then(|m| m.pss_beside_ram(mem)) {
                    v.measured(beside);
                }
            }
        }
        for name in arrived {
            registry.moves.migrated_in += 1;
            let msg = "moved here: it runs here, its memory following from the source";
            journal.event(HostEventKind::MigratedIn, Some(&name), msg.into());
        }
        let vms = &mut registry.vms;
        let live: Vec<usize> = (0..vms.len())
            .filter(|&i| (vms[i].live() || vms[i].waiting) && !vms[i].stop_asked)
            .collect();
        let obs: Vec<VmObservation> = live.iter().map(|&i| observe(config, &vms[i])).collect();
        for (&i, o) in live.iter().zip(&obs) {
            vms[i].charged = o.overhead;
        }
        let oom: Vec<bool> = live
            .iter()
            .map(|&i| vms[i].oom_deflated() > vms[i].oom_seen)
            .collect();
        let before = self.before();
        // The host's own memory counts: measured each tick, the last figure until then.
        if let Some(own) = crate::process::own_pss() {
            self.own = own;
        }
        let host = params(config, self.own);
        let p = plan(&host, before, &obs, &oom);
        self.committed = budget::held_at_most(&host, &obs);
        if p.state != self.free_state {
            let growing = if p.growth > 0 {
                format!(", {} MiB more held than a tick ago", p.growth >> 20)
            } else {
                String::new()
            };
            let msg = format!(
                "free memory {} MiB of {} MiB{growing}: state {:?} -> {:?}",
                p.free >> 20,
                config.memory >> 20,
                self.free_state,
                p.state
            );
            journal.event(HostEventKind::FreeState, None, msg);
        }
        self.free_state = p.state;
        self.free = p.free;
        self.drive_ksm(config, vms, &live, p.state, p.free);
        self.pool = p.pool;
        self.ticks += 1;
        let balance = (config.balancing == Balancing::Hd2).then(|| {
            let params =
                BalanceParams::new(config.tick.as_secs_f64(), config.gap_idle.as_secs_f64());
            let estimated = estimate_demand(
                live.iter()
                    .map(|&i| {
                        let v = &mut vms[i];
                        v.balancing.demand_input(v.stats.as_ref())
                    })
                    .collect(),
            );
            let bal: Vec<BalanceObservation> = live
                .iter()
                .zip(&estimated)
                .map(|(&i, &d)| {
                    let v = &vms[i];
                    BalanceObservation {
                        demand: d,
                        ..v.balancing.observation(
                            v.spec.mapper,
                            v.paused_by_host,
                            v.clean(),
                            v.oom_deflated().saturating_sub(v.oom_seen) * 4096,
                        )
                    }
                })
                .collect();
            let d = balance::decide(&host, &params, &p, &obs, &bal);
            (params, bal, d)
        });
        let releases = match &balance {
            Some((_, _, d)) => live
                .iter()
                .zip(&d.vms)
                .filter(|(_, b)| b.release > 0)
                .map(|(&i, b)| ReleaseOrder {
                    name: vms[i].spec.name.clone(),
                    sock: vms[i].files.sock.clone(),
                    ask: ReleaseRequest {
                        pages: b.release / balance::PAGE,
                        cold_only: d.cold_only,
                    },
                })
                .collect(),
            None => Vec::new(),
        };
        self.pending = Some(Pending {
            live: live
                .iter()
                .map(|&i| (i, vms[i].spec.name.clone()))
                .collect(),
            obs,
            oom,
            before,
            plan: p,
            balance,
        });
        releases
    }

    /// Takes in what the victims' VMMs released (by name), hands it out, and returns the tick's
    /// orders.
    pub fn settle(
        &mut self,
        config: &HostConfig,
        registry: &mut Registry,
        journal: &mut Journal,
        balancer: &mut Balancer,
        launch: &Launch,
        released: Vec<(String, Result<ReleaseResult, ClientError>)>,
    ) -> Vec<Order> {
        let Some(Pending {
            live,
            obs,
            oom,
            before,
            plan: p,
            balance,
        }) = self.pending.take()
        else {
            return Vec::new();
        };
        // The list may have changed between the decision and now: find each VM again by name
        // (`usize::MAX` for one that is gone).
        let live: Vec<usize> = live
            .into_iter()
            .map(|(i, name)| match registry.vms.get(i) {
                Some(v) if v.spec.name == name => i,
                _ => registry
                    .vms
                    .iter()
                    .position(|v| v.spec.name == name)
                    .unwrap_or(usize::MAX),
            })
            .collect();
        let names: Vec<String> = live.iter().map(|&i| registry.name_at(i)).collect();
        let steps: Vec<Option<u64>> = live
            .iter()
            .map(|&i| {
                registry
                    .vms
                    .get(i)
                    .filter(|v| v.spec.balloon)
                    .map(|v| v.balloon_watch.step)
            })
            .collect();
        let mut got = vec![0u64; live.len()];
        // The limit each victim's VMM has after its release.
        let mut limit_now: Vec<Option<u64>> = vec![None; live.len()];
        let mut micros = 0u64;
        for (name, r) in released {
            let Some(k) = live
                .iter()
                .position(|&i| i != usize::MAX && registry.vms[i].spec.name == name)
            else {
                continue;
            };
            let v = &mut registry.vms[live[k]];
            if let Some(r) = balancer.answered(&mut v.balancing, journal, &name, r) {
                got[k] = r.released_pages * balance::PAGE;
                limit_now[k] = Some(r.limit_bytes.unwrap_or(v.spec.mem));
                micros = micros.max(r.micros);
            }
        }
        let host_params = params(config, self.own);
        let mut actions: Vec<VmAction> = p.actions.clone();
        if let Some((params, bal, d)) = &balance {
            let s = balance::settle(&host_params, d, &obs, &got);
            actions.clone_from(&s.actions);
            balancer.reallocated(journal, &names, d, &got, &s.gives, micros);
            for (k, &i) in live.iter().enumerate() {
                if i == usize::MAX {
                    continue;
                }
                let v = &mut registry.vms[i];
                balancer.settled(&mut v.balancing, journal, &names[k], s.gaps[k], &d.vms[k]);
            }
            self.write_trace(
                config,
                journal,
                (&names, &steps),
                &obs,
                &oom,
                before,
                &p,
                Some(&BalanceRecord {
                    params,
                    obs: bal,
                    decision: d,
                    released: &got,
                    settled: &s,
                }),
            );
        } else {
            self.write_trace(
                config,
                journal,
                (&names, &steps),
                &obs,
                &oom,
                before,
                &p,
                None,
            );
        }
        let mut orders = Vec::new();
        let mut starts = Vec::new();
        for (k, ((&i, o), a)) in live.iter().zip(&obs).zip(&actions).enumerate() {
            if i == usize::MAX {
                continue;
            }
            let v = &mut registry.vms[i];
            v.target = a.target;
            v.resident_seen = Some(o.resident);
            v.oom_demand = a.oom_demand;
            v.oom_seen = v.oom_deflated();
            v.reclaimed_seen = v.reclaimed();
            if v.waiting {
                // Its VMM starts once the budget has room for its min and its overhead: the
                // plan gives it a limit then (0 while it waits).
                if a.limit > 0 {
                    starts.push((i, a.limit, (config.pool > 0).then_some(a.pool)));
                } else {
                    v.why = Some(format!(
                        "waiting for room in the budget: {} MiB for its min and its VMM",
                        budget::start_need(o).div_ceil(1 << 20)
                    ));
                }
                continue;
            }
            if v.info.is_none() || v.incoming.is_some() || v.outgoing.is_some() {
                // Not answering yet, or moving between hosts: nothing to send.
                continue;
            }
            let limit = a.limit.max(MIN_LIMIT);
            // What its VMM's limit is now: after a release, what the release left.
            let limit_before = limit_now[k].unwrap_or(o.limit);
            // A VM on plain memory goes under the pager the first time the host shrinks it,
            // by its balloon or its limit: `PUT /memory` (at `mem` when only the balloon moves)
            // takes its RAM over, so sampling starts and the limit can follow.
            let attached = v
                .stats
                .as_ref()
                .and_then(|s| s.pager.as_ref())
                .is_some_and(|p| p.attached);
            // The adaptive rate: a balloon's target rises by at most its step above what the
            // driver holds (deflating is not held back).
            let balloon = a
                .balloon
                .map(|b| v.balloon_watch.next(o.balloon.unwrap_or(0), b));
            let shrinking = limit < o.limit || balloon.unwrap_or(0) > o.balloon.unwrap_or(0);
            let take_over = shrinking && !attached;
            // The pool moves in whole MiB: smaller changes are not worth a spill.
            let pool = v
                .pool_capacity()
                .filter(|&now| now.abs_diff(a.pool) >= 1 << 20)
                .map(|_| a.pool);
            let order = Order {
                index: i,
                balloon: balloon.filter(|&b| Some(b) != o.balloon),
                limit: (limit != limit_before || take_over).then_some(limit),
                pool,
                pause: (a.pause != v.paused_by_host).then_some(a.pause),
            };
            if order.balloon.is_some()
                || order.limit.is_some()
                || order.pool.is_some()
                || order.pause.is_some()
            {
                orders.push(order);
            }
        }
        for (i, limit, pool) in starts {
            let how = (launch, config.jail.as_ref());
            registry.start(journal, how, i, (limit, pool), config.vm_overhead);
        }
        self.record(config, registry, journal);
        orders
    }

    /// Records the tick in the journal, and forgets what is older than `keep`: ticks, events,
    /// and VMs that ended. What the host holds stays bounded however long it runs and however
    /// many VMs come and go.
    fn record(&self, config: &HostConfig, registry: &mut Registry, journal: &mut Journal) {
        journal.record_tick(HostSample {
            seconds: journal.seconds(),
            free_bytes: self.free,
            free_state: free_state_name(self.free_state),
            vms: registry.tick_points(),
        });
        journal.forget_older_than(config.keep);
        registry.forget_ended(config.keep);
    }

    /// Puts KSM's knobs back as the host found them (the host is ending).
    pub fn let_ksm_go(&mut self) {
        self.ksm = None;
    }

    /// Takes KSM over while a running VM shares and lets it go when none does; sets its scan
    /// rate from this tick's free memory.
    fn drive_ksm(
        &mut self,
        config: &HostConfig,
        vms: &[VmEntry],
        live: &[usize],
        state: FreeState,
        free: u64,
    ) {
        let sharing = live.iter().any(|&i| vms[i].shares_pages());
        match (&mut self.ksm, sharing) {
            (None, true) => {
                let total = crate::config::meminfo("MemTotal").unwrap_or(config.memory);
                match Ksm::take(total) {
                    Ok(k) => self.ksm = Some(k),
                    Err(e) => tracing::warn!("KSM: cannot drive the scanner: {e}"),
                }
            }
            (Some(_), false) => self.ksm = None,
            _ => {}
        }
        if let Some(k) = &mut self.ksm {
            k.tick(state, free, config.memory);
        }
    }

    /// Writes this tick's inputs and plan (and its balancing) to the trace, if there is one; a
    /// failed write ends the trace (with a warning) rather than the host. `names` are the
    /// tick's VMs, `steps` their balloons' steps.
    #[allow(clippy::too_many_arguments)]
    fn write_trace(
        &mut self,
        config: &HostConfig,
        journal: &Journal,
        (names, steps): (&[String], &[Option<u64>]),
        obs: &[VmObservation],
        oom: &[bool],
        before: Before,
        p: &Plan,
        balance: Option<&BalanceRecord<'_>>,
    ) {
        let Some(mut w) = self.trace.take() else {
            return;
        };
        let mut line = TraceTick::new(
            journal.seconds(),
            &params(config, self.own),
            before,
            names,
            obs,
            oom,
            p,
        )
        .with_balloon_steps(steps);
        if let Some(b) = balance {
            line = line.with_balance(b);
        }
        match trace::write_line(&mut w, &line).and_then(|()| std::io::Write::flush(&mut w)) {
            Ok(()) => self.trace = Some(w),
            Err(e) => tracing::warn!("the trace stops: cannot write it: {e}"),
        }
    }
}

/// After orders were sent: what the VMMs accepted (`done`: each VM paused or resumed).
pub fn sent(registry: &mut Registry, journal: &mut Journal, done: Vec<(String, bool)>) {
    for (name, p) in done {
        if let Some(v) = registry.named_mut(&name) {
            v.active_at_pause = p.then(|| v.active());
            v.paused_by_host = p;
            let (kind, msg) = if p {
                (
                    HostEventKind::Paused,
                    "paused: above its target with free memory low",
                )
            } else {
                (HostEventKind::Resumed, "resumed: free memory no longer low")
            };
            journal.event(kind, Some(&name), msg.to_owned());
        }
    }
}
