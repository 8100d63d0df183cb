//! The host's state and its tick: the VMs, admission, and carrying out the policy's plan.
//!
//! A tick (every `tick` of the config) reaps VMMs that ended, reads every live VM's `GET /vm`
//! and `GET /stats`, hands the observations to [`memvisor_policy::plan`], and sends each VMM
//! what changed: `PUT /balloon`, `PUT /memory`, `PUT /vm/pause` or `PUT /vm/resume`. The state
//! lock is never held while a VMM is called, so the host API answers while a VMM is slow.
//!
//! With `[host] balancing = "hd2"` (HyperDealer2, docs/hd2.md) the balancer
//! ([`memvisor_policy::balance`]) decides on top of the plan: the victims' VMMs are asked to
//! release clean pages first (`PUT /memory/release`, one request per victim), and once they have
//! answered, what they released is handed to the VMs that need it with the tick's other orders.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use memvisor_api::metrics::HostVmMetrics;
use memvisor_api::{
    Balancing, ClientError, FreeStateName, HostEvent, HostEventKind, HostInfo, HostSample,
    HostUpdate, HostVm, HostVmState, PolicyUpdate, ReleaseRequest, ReleaseResult, VmInfo, VmSpec,
    VmState, VmStats,
};
use memvisor_policy::balance::{self, BalanceObservation, BalanceParams, Decision};
use memvisor_policy::trace::{self, BalanceRecord, TraceTick};
use memvisor_policy::{
    admit, plan, start_limit, AdmissionRefusal, Before, FreeState, HostParams, Plan, Reservations,
    Thresholds, VmAction, VmObservation,
};

use crate::balancing::{estimate_demand, Balancer, ReleaseOrder};
use crate::config::HostConfig;
use crate::journal::Journal;
use crate::process::{client, Launch, Vmm, VmmFiles};
use crate::registry::{Refused, Registry, VmEntry};
use memvisor_api::spec::MIN_LIMIT;

/// The overhead the policy charges a VMM: `configured` (`vm_overhead`), or what the process
/// holds besides guest pages and its pool when that is more (`rss` less `guest`). A VMM's own
/// memory grows with what it runs: the reclamation cache, its I/O buffers, the page table's
/// maps; charged at the configured figure alone, seven VMMs of HyperDealer2's balancing held
/// 1,031 MiB of a 1,024 MiB budget while the policy counted 37 MiB free (`bench consolidate`).
pub fn charged_overhead(configured: u64, rss: Option<u64>, guest: u64) -> u64 {
    rss.map_or(configured, |r| configured.max(r.saturating_sub(guest)))
}

/// Everything the host knows, behind one lock.
pub struct Host {
    config: HostConfig,
    launch: Launch,
    registry: Registry,
    free_state: FreeState,
    free: u64,
    /// What the VMs held at the last tick (`None` before the first).
    held: Option<u64>,
    /// The pools' size together at the last tick.
    pool: u64,
    ticks: u64,
    journal: Journal,
    /// The kernel's KSM while a running VM shares; dropped (its knobs put back) when none does.
    ksm: Option<crate::ksm::Ksm>,
    /// Where each tick's observations and plan are written (`[host] trace`).
    pub trace: Option<std::io::BufWriter<std::fs::File>>,
    /// The tick decided but not yet carried out (between [`Host::decide`] and
    /// [`Host::settle`]).
    pending: Option<Pending>,
    /// HyperDealer2's balancing's counters.
    balancer: Balancer,
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

/// The host, shared by the tick loop and the API server.
pub type Shared = Arc<Mutex<Host>>;

/// Locks the host state (a panic elsewhere does not make it unusable).
pub fn lock(h: &Shared) -> MutexGuard<'_, Host> {
    h.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a tick sends one VMM.
struct Order {
    index: usize,
    balloon: Option<u64>,
    limit: Option<u64>,
    pool: Option<u64>,
    pause: Option<bool>,
}

fn free_state_name(s: FreeState) -> FreeStateName {
    match s {
        FreeState::High => FreeStateName::High,
        FreeState::Soft => FreeStateName::Soft,
        FreeState::Hard => FreeStateName::Hard,
        FreeState::Low => FreeStateName::Low,
    }
}

impl Host {
    pub fn new(config: HostConfig, launch: Launch) -> Host {
        Host {
            registry: Registry::new(Reservations {
                // The pool is set aside first: admission reserves what is left.
                memory: config.memory - config.pool,
                swap: config.swap.unwrap_or(0),
                ..Reservations::default()
            }),
            config,
            launch,
            free_state: FreeState::High,
            free: 0,
            held: None,
            pool: 0,
            ticks: 0,
            journal: Journal::new(),
            ksm: None,
            trace: None,
            pending: None,
            balancer: Balancer::default(),
        }
    }

    /// Events after `since` seconds.
    pub fn events(&self, since: f64) -> Vec<HostEvent> {
        self.journal.events(since)
    }

    /// Ticks after `since` seconds.
    pub fn history(&self, since: f64) -> Vec<HostSample> {
        self.journal.history(since)
    }

    fn record_tick(&mut self) {
        let vms = self.registry.tick_points();
        self.journal.record_tick(HostSample {
            seconds: self.journal.seconds(),
            free_bytes: self.free,
            free_state: free_state_name(self.free_state),
            vms,
        });
        self.forget_old();
    }

    /// Forgets what is older than `keep`: ticks, events, and VMs that ended. What the host holds
    /// stays bounded however long it runs and however many VMs come and go.
    fn forget_old(&mut self) {
        let keep = self.config.keep;
        self.journal.forget_older_than(keep);
        self.registry.forget_ended(keep);
    }

    pub fn config(&self) -> &HostConfig {
        &self.config
    }

    /// Admits and starts `spec`; a refusal says which reservation failed.
    pub fn add(&mut self, spec: VmSpec) -> Result<HostVm, Refused> {
        spec.check().map_err(|e| Refused(400, e))?;
        if let Some((_, e)) = crate::config::missing_files(&spec).into_iter().next() {
            return Err(Refused(400, e));
        }
        let vms = &mut self.registry.vms;
        if let Some(i) = vms.iter().position(|v| v.spec.name == spec.name) {
            if vms[i].ended.is_some() {
                vms.remove(i);
            } else {
                return Err(Refused(
                    400,
                    format!("a VM named '{}' is already on this host", spec.name),
                ));
            }
        }
        let next = admit(
            &self.registry.reservations,
            spec.min,
            spec.mem,
            self.config.vm_overhead,
        )
        .map_err(|e| {
            let msg = format!("vm '{}' refused: {e}", spec.name);
            self.journal
                .event(HostEventKind::Refused, Some(&spec.name), msg.clone());
            Refused(400, msg)
        })?;
        let files = VmmFiles::new(&self.config.state_dir, &spec.name);
        let limit = self.start_limit(&spec);
        let pool = (self.config.pool > 0).then(|| {
            let live = self.registry.vms.iter().filter(|v| v.live()).count() as u64;
            self.config.pool / (live + 1)
        });
        let vmm = Vmm::spawn(&self.launch, &spec, &files, limit, pool).map_err(|e| {
            Refused(
                500,
                format!("cannot start a VMM for vm '{}': {e}", spec.name),
            )
        })?;
        self.registry.reservations = next;
        self.journal.event(
            HostEventKind::Admitted,
            Some(&spec.name),
            format!(
                "admitted; its VMM is pid {}, its limit {} MiB",
                vmm.pid(),
                limit >> 20
            ),
        );
        let mut v = VmEntry::new(spec, files, HostVmState::Starting, None);
        v.target = limit;
        v.vmm = Some(vmm);
        v.reserved = true;
        let status = v.status();
        self.registry.vms.push(v);
        Ok(status)
    }

    /// Records a VM of the config that admission refused at start.
    pub fn refuse(&mut self, spec: VmSpec, why: &AdmissionRefusal) {
        self.registry
            .refuse(&mut self.journal, &self.config.state_dir, spec, why);
    }

    /// Starts every VM of the config, in order; those admission refuses are listed as refused.
    pub fn start_config(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        for spec in self.config.vms.clone() {
            match admit(
                &self.registry.reservations,
                spec.min,
                spec.mem,
                self.config.vm_overhead,
            ) {
                Err(e) => {
                    problems.push(format!("vm '{}' refused: {e}", spec.name));
                    self.refuse(spec, &e);
                }
                Ok(_) => {
                    if let Err(Refused(_, e)) = self.add(spec) {
                        problems.push(e);
                    }
                }
            }
        }
        problems
    }

    pub fn vm(&self, name: &str) -> Result<HostVm, Refused> {
        self.registry.vm(name)
    }

    /// Forgets a VM that ended or was refused (`DELETE /vms/NAME`); a live one must be stopped
    /// first.
    pub fn remove(&mut self, name: &str) -> Result<HostVm, Refused> {
        self.registry.remove(name)
    }

    pub fn vms(&self) -> Vec<HostVm> {
        self.registry.statuses()
    }

    /// What `GET /metrics` shows: the host, and every VM with its VMM's last stats while the
    /// VMM runs.
    pub fn metrics_snapshot(&self) -> (HostInfo, Vec<(HostVm, Option<VmStats>)>) {
        let vms = self
            .registry
            .vms
            .iter()
            .map(|v| (v.status(), v.stats.clone().filter(|_| v.live())))
            .collect();
        (self.info(), vms)
    }

    pub fn info(&self) -> HostInfo {
        let reservations = &self.registry.reservations;
        HostInfo {
            budget_bytes: self.config.memory,
            free_bytes: self.free,
            free_state: free_state_name(self.free_state),
            idle_tax: self.config.idle_tax,
            vm_overhead_bytes: self.config.vm_overhead,
            pool_max_bytes: self.config.pool,
            pool_bytes: self.pool,
            memory_reserved_bytes: reservations.memory_reserved,
            swap_bytes: reservations.swap,
            swap_reserved_bytes: reservations.swap_reserved,
            ticks: self.ticks,
            tick_seconds: self.config.tick.as_secs_f64(),
            ksm: self.ksm.as_ref().map(crate::ksm::Ksm::info),
            balancing: self.config.balancing,
            released_pages: self.balancer.released_pages,
            reallocations: self.balancer.reallocations,
            gap_closed_pages: self.balancer.gap_closed_pages,
        }
    }

    /// Changes a VM's `min`, `max` or `shares`; refused (and nothing changed) unless
    /// `min <= max <= mem` and the new reservation is admitted.
    pub fn update(&mut self, name: &str, u: &PolicyUpdate) -> Result<HostVm, Refused> {
        self.registry.update(name, u, self.config.vm_overhead)
    }

    /// Changes the host-wide policy (the idle memory tax, the balancing); refused, and nothing
    /// changed, when a value is out of range. The next tick plans with it.
    pub fn update_host(&mut self, u: &HostUpdate) -> Result<HostInfo, Refused> {
        if let Some(t) = u.idle_tax {
            if !(0.0..1.0).contains(&t) {
                return Err(Refused(
                    400,
                    format!(
                        "idle_tax {t}: give a fraction from 0 up to (not including) 1, e.g. 0.75"
                    ),
                ));
            }
            if t != self.config.idle_tax {
                tracing::info!("idle memory tax {} -> {t}", self.config.idle_tax);
            }
            self.config.idle_tax = t;
        }
        if let Some(b) = u.balancing {
            if b != self.config.balancing {
                tracing::info!("balancing {:?} -> {b:?}", self.config.balancing);
            }
            self.config.balancing = b;
        }
        Ok(self.info())
    }

    /// Asks a VM's VMM to stop.
    pub fn stop(&mut self, name: &str) -> Result<HostVm, Refused> {
        self.registry.stop(&mut self.journal, name)
    }

    /// Asks every VMM to stop; returns how many are still alive.
    pub fn stop_all(&mut self) -> usize {
        self.registry
            .stop_all(&mut self.journal, self.config.vm_overhead)
    }

    /// Kills every VMM still alive.
    pub fn kill_all(&mut self) {
        self.registry
            .kill_all(&mut self.journal, self.config.vm_overhead)
    }

    /// The files of VMMs that ended since the last call, to remove without the lock.
    pub fn take_trash(&mut self) -> Vec<VmmFiles> {
        self.registry.take_trash()
    }

    /// Notes VMMs that ended: state, why, and their reservation back in the budget; their files
    /// go to the trash.
    pub fn reap(&mut self) {
        self.registry
            .reap(&mut self.journal, self.config.vm_overhead);
    }

    /// What the last tick left, for the next plan.
    fn before(&self) -> Before {
        Before {
            state: self.free_state,
            held: self.held,
        }
    }

    fn params(&self) -> HostParams {
        HostParams {
            budget: self.config.memory,
            idle_tax: self.config.idle_tax,
            thresholds: Thresholds::default(),
            pool: self.config.pool,
            oom_demand_ticks: HostParams::oom_demand_ticks(self.config.tick.as_secs_f64()),
        }
    }

    /// What the policy sees of `v`, from its last observation.
    fn observe(&self, v: &VmEntry) -> VmObservation {
        // What it really holds: a page KSM merged is held once for all who map it, and the
        // memory that frees is free for the policy to hand out (docs/sharing.md).
        let resident = v.resident().saturating_sub(v.shared_saved());
        let active = if self.config.balancing == Balancing::Hd2 {
            balance::active_outside_streams(v.active(), resident, v.streaming())
        } else {
            v.active()
        };
        VmObservation {
            min: v.spec.min,
            max: v.max,
            shares: v.spec.shares,
            active,
            resident,
            pooled: v.pooled(),
            overhead: charged_overhead(
                self.config.vm_overhead,
                v.vmm_rss,
                v.resident().saturating_add(v.pooled()),
            ),
            balloon: if v.spec.balloon {
                Some(
                    v.info
                        .as_ref()
                        .and_then(|i| i.balloon_target_bytes)
                        .unwrap_or(0),
                )
            } else {
                None
            },
            limit: v
                .info
                .as_ref()
                .and_then(|i| i.limit_bytes)
                .unwrap_or(v.spec.mem),
            oom_demand: v.oom_demand,
        }
    }

    /// The pager limit a VM of `spec` starts with: its share beside the running VMs
    /// ([`start_limit`]), never below the pager's smallest limit.
    fn start_limit(&self, spec: &VmSpec) -> u64 {
        let running: Vec<VmObservation> = self
            .registry
            .vms
            .iter()
            .filter(|v| v.live() && !v.stop_asked)
            .map(|v| self.observe(v))
            .collect();
        let new = VmObservation {
            min: spec.min,
            max: spec.mem,
            shares: spec.shares,
            active: 1.0,
            resident: 0,
            pooled: 0,
            overhead: self.config.vm_overhead,
            balloon: spec.balloon.then_some(0),
            limit: spec.mem,
            oom_demand: 0,
        };
        start_limit(&self.params(), &running, &new)
            .max(MIN_LIMIT)
            .min(spec.mem)
    }

    /// Takes in what was observed and decides; returns the releases to ask for before the
    /// tick's other orders ([`Host::settle`] gives those).
    fn decide(&mut self, seen: Vec<(String, Option<(VmInfo, VmStats)>)>) -> Vec<ReleaseOrder> {
        for (name, obs) in seen {
            let Some(v) = self.registry.named_mut(&name) else {
                continue;
            };
            if !v.live() {
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
                v.info = Some(info);
                v.stats = Some(stats);
                v.vmm_rss = v.vmm.as_ref().and_then(Vmm::rss);
            }
        }
        let live: Vec<usize> = (0..self.registry.vms.len())
            .filter(|&i| self.registry.vms[i].live() && !self.registry.vms[i].stop_asked)
            .collect();
        let obs: Vec<VmObservation> = live
            .iter()
            .map(|&i| self.observe(&self.registry.vms[i]))
            .collect();
        let oom: Vec<bool> = live
            .iter()
            .map(|&i| self.registry.vms[i].oom_deflated() > self.registry.vms[i].oom_seen)
            .collect();
        let before = self.before();
        let p = plan(&self.params(), before, &obs, &oom);
        if p.state != self.free_state {
            let growing = if p.growth > 0 {
                format!(", {} MiB more held than a tick ago", p.growth >> 20)
            } else {
                String::new()
            };
            let msg = format!(
                "free memory {} MiB of {} MiB{growing}: state {:?} -> {:?}",
                p.free >> 20,
                self.config.memory >> 20,
                self.free_state,
                p.state
            );
            self.journal.event(HostEventKind::FreeState, None, msg);
        }
        self.free_state = p.state;
        self.free = p.free;
        self.held = Some(p.held);
        self.drive_ksm(&live, p.state, p.free);
        self.pool = p.pool;
        self.ticks += 1;
        let balance = (self.config.balancing == Balancing::Hd2).then(|| {
            let params = BalanceParams::new(
                self.config.tick.as_secs_f64(),
                self.config.gap_idle.as_secs_f64(),
            );
            let estimated = estimate_demand(
                live.iter()
                    .map(|&i| {
                        let v = &mut self.registry.vms[i];
                        v.balancing.demand_input(v.stats.as_ref())
                    })
                    .collect(),
            );
            let bal: Vec<BalanceObservation> = live
                .iter()
                .zip(&obs)
                .zip(&estimated)
                .map(|((&i, o), &d)| {
                    let v = &self.registry.vms[i];
                    BalanceObservation {
                        demand: d,
                        ..v.balancing.observation(
                            v.spec.mapper,
                            v.paused_by_host,
                            v.clean(),
                            v.oom_deflated().saturating_sub(v.oom_seen) * 4096,
                            o.resident,
                        )
                    }
                })
                .collect();
            let d = balance::decide(&self.params(), &params, &p, &obs, &bal);
            (params, bal, d)
        });
        let releases = match &balance {
            Some((_, _, d)) => live
                .iter()
                .zip(&d.vms)
                .filter(|(_, b)| b.release > 0)
                .map(|(&i, b)| ReleaseOrder {
                    name: self.registry.vms[i].spec.name.clone(),
                    sock: self.registry.vms[i].files.sock.clone(),
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
                .map(|&i| (i, self.registry.vms[i].spec.name.clone()))
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
    fn settle(
        &mut self,
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
            .map(|(i, name)| match self.registry.vms.get(i) {
                Some(v) if v.spec.name == name => i,
                _ => self
                    .registry
                    .vms
                    .iter()
                    .position(|v| v.spec.name == name)
                    .unwrap_or(usize::MAX),
            })
            .collect();
        let mut got = vec![0u64; live.len()];
        // The limit each victim's VMM has after its release.
        let mut limit_now: Vec<Option<u64>> = vec![None; live.len()];
        let mut micros = 0u64;
        for (name, r) in released {
            let Some(k) = live
                .iter()
                .position(|&i| i != usize::MAX && self.registry.vms[i].spec.name == name)
            else {
                continue;
            };
            let v = &mut self.registry.vms[live[k]];
            if let Some(r) = self
                .balancer
                .answered(&mut v.balancing, &mut self.journal, &name, r)
            {
                got[k] = r.released_pages * balance::PAGE;
                limit_now[k] = Some(r.limit_bytes.unwrap_or(v.spec.mem));
                micros = micros.max(r.micros);
            }
        }
        let mut actions: Vec<VmAction> = p.actions.clone();
        if let Some((params, bal, d)) = &balance {
            let s = balance::settle(d, &obs, &got);
            actions.clone_from(&s.actions);
            let names: Vec<String> = live.iter().map(|&i| self.registry.name_at(i)).collect();
            self.balancer
                .reallocated(&mut self.journal, &names, d, &got, &s.gives, micros);
            for (k, &i) in live.iter().enumerate() {
                if i == usize::MAX {
                    continue;
                }
                let v = &mut self.registry.vms[i];
                self.balancer.settled(
                    &mut v.balancing,
                    &mut self.journal,
                    &names[k],
                    s.gaps[k],
                    &d.vms[k],
                );
            }
            self.write_trace(
                &live,
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
            self.write_trace(&live, &obs, &oom, before, &p, None);
        }
        let mut orders = Vec::new();
        for (k, ((&i, o), a)) in live.iter().zip(&obs).zip(&actions).enumerate() {
            if i == usize::MAX {
                continue;
            }
            let v = &mut self.registry.vms[i];
            v.target = a.target;
            v.balancing.last_resident = Some(o.resident);
            v.oom_demand = a.oom_demand;
            v.oom_seen = v.oom_deflated();
            if v.info.is_none() {
                continue; // not answering yet: nothing to send
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
            let shrinking = limit < o.limit || a.balloon.unwrap_or(0) > o.balloon.unwrap_or(0);
            let take_over = shrinking && !attached;
            // The pool moves in whole MiB: smaller changes are not worth a spill.
            let pool = v
                .pool_capacity()
                .filter(|&now| now.abs_diff(a.pool) >= 1 << 20)
                .map(|_| a.pool);
            let order = Order {
                index: i,
                balloon: a.balloon.filter(|&b| Some(b) != o.balloon),
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
        self.record_tick();
        orders
    }

    /// Puts KSM's knobs back as the host found them (the host is ending).
    pub fn let_ksm_go(&mut self) {
        self.ksm = None;
    }

    /// Takes KSM over while a running VM shares and lets it go when none does; sets its scan
    /// rate from this tick's free memory.
    fn drive_ksm(&mut self, live: &[usize], state: FreeState, free: u64) {
        let sharing = live.iter().any(|&i| self.registry.vms[i].shares_pages());
        match (&mut self.ksm, sharing) {
            (None, true) => {
                let total = crate::config::meminfo("MemTotal").unwrap_or(self.config.memory);
                match crate::ksm::Ksm::take(total) {
                    Ok(k) => self.ksm = Some(k),
                    Err(e) => tracing::warn!("KSM: cannot drive the scanner: {e}"),
                }
            }
            (Some(_), false) => self.ksm = None,
            _ => {}
        }
        if let Some(k) = &mut self.ksm {
            k.tick(state, free, self.config.memory);
        }
    }

    /// Writes this tick's inputs and plan (and its balancing) to the trace, if there is one; a
    /// failed write ends the trace (with a warning) rather than the host.
    fn write_trace(
        &mut self,
        live: &[usize],
        obs: &[VmObservation],
        oom: &[bool],
        before: Before,
        p: &Plan,
        balance: Option<&BalanceRecord<'_>>,
    ) {
        let Some(mut w) = self.trace.take() else {
            return;
        };
        let names: Vec<String> = live
            .iter()
            .map(|&i| {
                self.registry
                    .vms
                    .get(i)
                    .map_or_else(|| "?".to_owned(), |v| v.spec.name.clone())
            })
            .collect();
        let mut line = TraceTick::new(
            self.journal.seconds(),
            &self.params(),
            before,
            &names,
            obs,
            oom,
            p,
        );
        if let Some(b) = balance {
            line = line.with_balance(b);
        }
        match trace::write_line(&mut w, &line).and_then(|()| std::io::Write::flush(&mut w)) {
            Ok(()) => self.trace = Some(w),
            Err(e) => tracing::warn!("the trace stops: cannot write it: {e}"),
        }
    }

    /// After orders were sent: what the VMMs accepted.
    fn sent(&mut self, done: Vec<(String, bool)>) {
        for (name, p) in done {
            if let Some(v) = self.registry.named_mut(&name) {
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
                self.journal.event(kind, Some(&name), msg.to_owned());
            }
        }
    }
}

/// The host's `GET /metrics` answer (written without the lock).
pub fn metrics(host: &Shared) -> String {
    let (info, vms) = lock(host).metrics_snapshot();
    let list: Vec<HostVmMetrics> = vms
        .iter()
        .map(|(vm, stats)| HostVmMetrics {
            vm,
            stats: stats.as_ref(),
        })
        .collect();
    memvisor_api::metrics::host(&info, &list)
}

/// One tick: reap, observe (without the lock), plan, send (without the lock).
pub fn tick(host: &Shared) {
    let (socks, trash) = {
        let mut h = lock(host);
        h.reap();
        (h.registry.to_observe(), h.take_trash())
    };
    if !trash.is_empty() {
        // Off the tick too: the policy must not wait on a file system.
        let spawned = std::thread::Builder::new()
            .name("vmm-cleanup".into())
            .spawn(move || trash.iter().for_each(VmmFiles::clean));
        if let Err(e) = spawned {
            tracing::warn!("cannot start a thread to remove ended VMMs' files: {e}");
        }
    }
    let seen: Vec<(String, Option<(VmInfo, VmStats)>)> = socks
        .into_iter()
        .map(|(name, sock)| {
            let vmm = client(&sock);
            let obs = vmm.info().ok().zip(vmm.stats().ok());
            (name, obs)
        })
        .collect();
    let releases = lock(host).decide(seen);
    // HD2: the victims' releases first, each VMM on its own (without the lock), so the memory
    // is free before the beneficiaries' orders go out.
    let released: Vec<(String, Result<ReleaseResult, ClientError>)> = releases
        .into_iter()
        .map(|r| {
            let pages = r.ask.pages;
            let result = client(&r.sock).release_with(r.ask);
            if let Err(e) = &result {
                tracing::debug!("vm {}: release of {pages} pages: {e}", r.name);
            }
            (r.name, result)
        })
        .collect();
    let orders: Vec<(Order, String, PathBuf)> = {
        let mut h = lock(host);
        let orders = h.settle(released);
        orders
            .into_iter()
            .map(|o| {
                let v = &h.registry.vms[o.index];
                let (name, sock) = (v.spec.name.clone(), v.files.sock.clone());
                (o, name, sock)
            })
            .collect()
    };
    let mut done = Vec::new();
    for (o, name, sock) in &orders {
        let vmm = client(sock);
        let taken = |r: Result<VmInfo, ClientError>| {
            if let Err(e) = r {
                order_failed(name, &e);
            }
        };
        if let Some(b) = o.balloon {
            taken(vmm.set_balloon(b));
        }
        if let Some(bytes) = o.pool {
            taken(vmm.set_pool(bytes));
        }
        if let Some(l) = o.limit {
            taken(vmm.set_limit(Some(l)));
        }
        if let Some(p) = o.pause {
            match if p { vmm.pause() } else { vmm.resume() } {
                Ok(_) => done.push((name.clone(), p)),
                Err(e) => order_failed(name, &e),
            }
        }
    }
    lock(host).sent(done);
}

/// Logs an order a VMM did not take. A VMM whose socket is gone has exited between the tick's
/// decision and its order (a job that just ended): the host records that exit when it reaps
/// the process, so this is no warning.
fn order_failed(name: &str, e: &ClientError) {
    match e {
        ClientError::NoSocket { .. } | ClientError::NotListening { .. } => {
            tracing::debug!("vm {name}: an order found its VMM gone: {e}");
        }
        _ => tracing::warn!("vm {name}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_vmm_is_charged_what_it_holds_besides_guest_pages_when_that_is_more() {
        let o = 24 * MIB;
        assert_eq!(charged_overhead(o, None, 100 * MIB), o, "not measured yet");
        assert_eq!(charged_overhead(o, Some(110 * MIB), 100 * MIB), o);
        assert_eq!(charged_overhead(o, Some(131 * MIB), 100 * MIB), 31 * MIB);
        assert_eq!(
            charged_overhead(o, Some(50 * MIB), 100 * MIB),
            o,
            "guest pages counted twice"
        );
    }
}
