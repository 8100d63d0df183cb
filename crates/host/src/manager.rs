//! The host manager's core: one [`Host`] behind one lock, made of its parts, each owning its
//! state: the VMs and their reservations ([`Registry`]), the events and the ticks it
//! remembers ([`Journal`]), what the ticks decide ([`Tick`]), and HyperDealer2's balancing
//! ([`Balancer`]). The API's requests come here and go to the part they concern; a tick
//! ([`tick`]) runs its phases under the lock and calls the VMMs without it, so the host API
//! answers while a VMM is slow.

use std::io::BufWriter;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use memvisor_api::metrics::HostVmMetrics;
use memvisor_api::{
    ClientError, HostEvent, HostEventKind, HostInfo, HostSample, HostUpdate, HostVm, HostVmState,
    PolicyUpdate, ReleaseResult, VmInfo, VmSpec, VmStats,
};
use memvisor_policy::admission::{admit, unreserve, AdmissionRefusal, Reservations};

use crate::balancing::Balancer;
use crate::config::HostConfig;
use crate::journal::Journal;
use crate::process::{client, Launch, VmmFiles};
use crate::registry::{Incoming, Outgoing, Refused, Registry, VmEntry};
use crate::tick::{free_state_name, sent, Order, Tick};

/// Everything the host knows, behind one lock.
pub struct Host {
    config: HostConfig,
    launch: Launch,
    registry: Registry,
    journal: Journal,
    tick: Tick,
    balancer: Balancer,
}

/// The host, shared by the tick loop and the API server.
pub type Shared = Arc<Mutex<Host>>;

/// Locks the host state (a panic elsewhere does not make it unusable).
pub fn lock(h: &Shared) -> MutexGuard<'_, Host> {
    h.lock().unwrap_or_else(|e| e.into_inner())
}

impl Host {
    /// The host of `config`, with no VM started yet; each tick's observations and plan go to
    /// `trace` if given (`[host] trace`).
    pub fn new(
        config: HostConfig,
        launch: Launch,
        trace: Option<BufWriter<std::fs::File>>,
    ) -> Host {
        Host {
            registry: Registry::new(Reservations {
                // The pool is set aside first: admission reserves what is left.
                memory: config.memory - config.pool,
                swap: config.swap.unwrap_or(0),
                ..Reservations::default()
            }),
            config,
            launch,
            journal: Journal::new(),
            tick: Tick::new(trace),
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

    pub fn config(&self) -> &HostConfig {
        &self.config
    }

    /// Admits `spec`; a refusal says which reservation failed. Its VMM starts at a tick, once
    /// the budget has room for its `min` and its VMM's overhead; until then it is `starting`,
    /// waiting for room.
    pub fn add(&mut self, spec: VmSpec) -> Result<HostVm, Refused> {
        self.add_as(spec, None)
    }

    /// `spec` with its relative paths taken from the config file's directory.
    pub fn resolve(&self, spec: VmSpec) -> Result<VmSpec, Refused> {
        let base = (self.config.path.parent())
            .map(std::path::Path::to_path_buf)
            .unwrap_or_default();
        crate::config::resolve_paths(spec, &base).map_err(|e| Refused(400, e))
    }

    /// [`Host::add`], for a VM moving here from another host when `incoming` is given: its
    /// VMM waits for the source (`moving.rs`).
    pub fn add_as(&mut self, spec: VmSpec, incoming: Option<Incoming>) -> Result<HostVm, Refused> {
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
        self.registry.reservations = next;
        let (kind, state, what) = match incoming {
            None => (HostEventKind::Waiting, HostVmState::Starting, "admitted"),
            Some(_) => (
                HostEventKind::Incoming,
                HostVmState::Incoming,
                "admitted to move here",
            ),
        };
        self.journal.event(
            kind,
            Some(&spec.name),
            format!("{what}; its VMM starts once the budget has room for its min and its VMM"),
        );
        let mut v = VmEntry::new(
            spec,
            files,
            state,
            Some("waiting for room in the budget".into()),
        );
        v.waiting = true;
        v.reserved = true;
        v.incoming = incoming;
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
            free_bytes: self.tick.free,
            free_state: free_state_name(self.tick.free_state),
            idle_tax: self.config.idle_tax,
            vm_overhead_bytes: self.config.vm_overhead,
            pool_max_bytes: self.config.pool,
            pool_bytes: self.tick.pool,
            memory_reserved_bytes: reservations.memory_reserved,
            swap_bytes: reservations.swap,
            swap_reserved_bytes: reservations.swap_reserved,
            ticks: self.tick.ticks,
            tick_seconds: self.config.tick.as_secs_f64(),
            ksm: self.tick.ksm.as_ref().map(crate::ksm::Ksm::info),
            balancing: self.config.balancing,
            released_pages: self.balancer.released_pages,
            reallocations: self.balancer.reallocations,
            gap_closed_pages: self.balancer.gap_closed_pages,
            own_bytes: self.tick.own,
            committed_bytes: self.tick.committed,
            migrated_in: self.registry.moves.migrated_in,
            migrated_out: self.registry.moves.migrated_out,
            migrations_failed: self.registry.moves.failed,
        }
    }

    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Records an event of VM `name`.
    pub fn journal_event(&mut self, kind: HostEventKind, name: &str, message: String) {
        self.journal.event(kind, Some(name), message);
    }

    /// Calls off VM `name` and forgets it: at once if it has no VMM, or once its VMM (asked to
    /// stop) has ended; its reservation goes back. `None` if there is no such VM.
    pub fn call_off(&mut self, name: &str) -> Option<HostVm> {
        let o = self.config.vm_overhead;
        let i = self.registry.find(name).ok()?;
        if self.registry.vms[i].waiting {
            let why = "called off before its VMM started".to_owned();
            self.registry.end_waiting(&mut self.journal, i, why, o);
        }
        let v = &mut self.registry.vms[i];
        let status = v.status();
        match &v.vmm {
            Some(vmm) => {
                vmm.terminate();
                v.stop_asked = true;
                v.forget_on_exit = true;
                v.state = HostVmState::Stopping;
                v.why = Some("called off: its VMM is stopping".into());
                self.journal
                    .event(HostEventKind::Stopping, Some(name), "called off".into());
            }
            None => {
                self.registry.vms.remove(i);
            }
        }
        Some(status)
    }

    /// Whether VM `name` is moving here and has not run here yet.
    pub fn is_incoming(&self, name: &str) -> bool {
        (self.registry.find(name).ok()).is_some_and(|i| self.registry.vms[i].incoming.is_some())
    }

    /// What VM `name` is moving to, while it moves.
    pub fn vm_outgoing(&self, name: &str) -> Option<Outgoing> {
        let i = self.registry.find(name).ok()?;
        self.registry.vms[i].outgoing.clone()
    }

    /// A move of VM `name` that did not happen: it runs on here as before (the tick observes
    /// it again); `why` goes to the journal.
    pub fn move_failed(&mut self, name: &str, why: &str) {
        self.registry.moves.failed += 1;
        self.journal
            .event(HostEventKind::MigrationFailed, Some(name), why.to_owned());
        if let Some(v) = self.registry.named_mut(name) {
            v.outgoing = None;
            if v.live() && !v.stop_asked {
                v.state = HostVmState::Running;
                v.why = None;
            } else if !v.live() {
                // Its VMM ended during the move: the move's words say why.
                v.state = HostVmState::Exited;
                v.why = Some(why.to_owned());
            }
        }
    }

    /// A move of VM `name` that broke off at or after the switch: its VMM is left as it is
    /// (for `migrate-recover`, or a resume), and `why` says so.
    pub fn move_broken(&mut self, name: &str, why: String) {
        self.registry.moves.failed += 1;
        self.journal
            .event(HostEventKind::MigrationFailed, Some(name), why.clone());
        if let Some(v) = self.registry.named_mut(name) {
            if let Some(out) = &mut v.outgoing {
                out.broken = true;
            }
            if v.live() {
                v.state = HostVmState::Migrating;
            }
            v.why = Some(why);
        }
    }

    /// VM `name` moved away: its reservation goes back, its VMM ends on its own.
    pub fn moved_out(&mut self, name: &str, why: String) {
        let o = self.config.vm_overhead;
        self.registry.moves.migrated_out += 1;
        self.journal
            .event(HostEventKind::MigratedOut, Some(name), why.clone());
        let reservations = self.registry.reservations;
        let Some(v) = self.registry.named_mut(name) else {
            return;
        };
        v.state = HostVmState::Migrated;
        v.why = Some(why);
        v.migrated = true;
        // A VMM that moved its VM exits 0, which is no guest's end.
        (v.exit_status, v.exit) = (None, None);
        v.outgoing = None;
        v.stop_asked = true;
        v.paused_by_host = false;
        v.ended = Some(std::time::Instant::now());
        if v.reserved {
            v.reserved = false;
            let (min, mem) = (v.spec.min, v.spec.mem);
            self.registry.reservations = unreserve(&reservations, min, mem, o);
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
        self.registry
            .stop(&mut self.journal, name, self.config.vm_overhead)
    }

    /// Where `PUT /vms/NAME/snapshot` writes, and through which socket
    /// ([`Registry::snapshot_target`]).
    pub fn snapshot_target(
        &self,
        name: &str,
        dir: &str,
    ) -> Result<(std::path::PathBuf, std::path::PathBuf), Refused> {
        self.registry.snapshot_target(name, dir)
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

    /// Puts KSM's knobs back as the host found them (the host is ending).
    pub fn let_ksm_go(&mut self) {
        self.tick.let_ksm_go();
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

/// How long a tick waits for a VMM migrating in to answer.
const INCOMING_POLL: std::time::Duration = std::time::Duration::from_millis(100);

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
        .map(|(name, sock, incoming)| {
            // A VMM migrating in answers once the state has come, after the source's pre-copy:
            // the tick does not wait for it meanwhile.
            let vmm = match incoming {
                true => client(&sock).with_timeout(INCOMING_POLL),
                false => client(&sock),
            };
            let obs = vmm.info().ok().zip(vmm.stats().ok());
            (name, obs)
        })
        .collect();
    let releases = {
        let mut h = lock(host);
        let h = &mut *h;
        h.tick
            .decide(&h.config, &mut h.registry, &mut h.journal, seen)
    };
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
        let h = &mut *h;
        let orders = h.tick.settle(
            &h.config,
            &mut h.registry,
            &mut h.journal,
            &mut h.balancer,
            &h.launch,
            released,
        );
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
    let mut h = lock(host);
    let h = &mut *h;
    sent(&mut h.registry, &mut h.journal, done);
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
