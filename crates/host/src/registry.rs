//! The host's VMs: each one's entry (its spec, its VMM, what the host last observed of it) and
//! the reservations admission made for them; finding, stopping, reaping and forgetting them.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use memvisor_api::{
    GuestMemoryStats, HostEventKind, HostVm, HostVmState, PolicyUpdate, VmExit, VmInfo, VmSample,
    VmSpec, VmStats,
};
use memvisor_policy::admission::{admit, unreserve, AdmissionRefusal, Reservations};
use memvisor_policy::balloon::BalloonWatch;

use crate::balancing::VmBalancing;
use crate::journal::Journal;
use crate::process::{describe_exit, Launch, Vmm, VmmFiles};

/// An API request the host refused: the HTTP status and why.
#[derive(Debug)]
pub struct Refused(pub u16, pub String);

/// A VM moving here: where its VMM listens and the token it takes the VM with.
#[derive(Clone, Debug)]
pub struct Incoming {
    pub listen: String,
    pub token: String,
}

impl Incoming {
    /// Its VMM's `--incoming` address and token.
    pub fn flags(&self) -> (&str, &str) {
        (&self.listen, &self.token)
    }
}

/// A VM moving away: where to (the destination host's socket, or its VMM's address when the
/// caller prepared the destination), the host to call the destination's VM off on, and the
/// address and token of its VMM there.
#[derive(Clone, Debug)]
pub struct Outgoing {
    pub to: String,
    pub host: Option<String>,
    pub addr: String,
    pub token: String,
    /// It broke off after the switch: its VMM is kept for `migrate-recover`.
    pub broken: bool,
}

/// The host's moves, counted (`GET /host`, `GET /metrics`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Moves {
    pub migrated_in: u64,
    pub migrated_out: u64,
    pub failed: u64,
}

/// One VM of the host: its spec, its VMM, and what the host last observed of it.
pub struct VmEntry {
    pub spec: VmSpec,
    pub max: u64,
    pub state: HostVmState,
    pub why: Option<String>,
    pub vmm: Option<Vmm>,
    pub files: VmmFiles,
    pub exit_status: Option<i32>,
    pub exit: Option<VmExit>,
    /// Its `min` and `max` are in the reservations.
    pub reserved: bool,
    pub stop_asked: bool,
    pub target: u64,
    pub stats: Option<VmStats>,
    pub info: Option<VmInfo>,
    pub paused_by_host: bool,
    /// The active fraction when the host paused it: a paused guest touches nothing, and
    /// sampling must not read that as idleness.
    pub active_at_pause: Option<f64>,
    pub oom_demand: u32,
    /// `oom_deflated_pages` at the last tick.
    pub oom_seen: u64,
    /// [`VmEntry::reclaimed`] at the last tick.
    pub reclaimed_seen: u64,
    /// What it held at the last tick (resident guest pages), for its growth since.
    pub resident_seen: Option<u64>,
    /// When its VMM ended or admission refused it: the host forgets it `keep` later.
    pub ended: Option<Instant>,
    /// What HyperDealer2's balancing remembers of it.
    pub balancing: VmBalancing,
    /// Whether its balloon's driver answers, and the step its balloon's target moves by
    /// (`memvisor_policy::balloon`); unused without a balloon device.
    pub balloon_watch: BalloonWatch,
    /// What its VMM process held besides guest RAM and its pool at the last observations,
    /// newest last, at most [`OVERHEAD_SAMPLES`].
    pub overheads: VecDeque<u64>,
    /// Admitted, waiting for room in the budget before its VMM starts.
    pub waiting: bool,
    /// What the last tick charged its VMM besides guest memory ([`VmEntry::overhead`]).
    pub charged: u64,
    /// The limit its VMM started with (its whole memory: plain memory), until its API answers.
    pub launch_limit: u64,
    /// Moving here from another host (`POST /vms/incoming`), until it runs here.
    pub incoming: Option<Incoming>,
    /// Moving to another host (`POST /vms/NAME/migrate`), and, after a break in post-copy,
    /// kept: the tick neither observes it nor sends it orders meanwhile.
    pub outgoing: Option<Outgoing>,
    /// It moved to another host: its VMM ends on its own, and its state says where it went.
    pub migrated: bool,
    /// Forgotten as soon as its VMM ends: an incoming VM whose move was called off.
    pub forget_on_exit: bool,
}

/// How many of a VMM's last overhead measurements its charge is the largest of: a VMM's own
/// memory moves with what it does (I/O buffers, the reclamation cache), and the largest of the
/// last two seconds of 250 ms ticks keeps a dip between two measurements from lending the
/// guests memory the VMM takes back at once.
pub const OVERHEAD_SAMPLES: usize = 8;

impl VmEntry {
    /// A VM with no VMM yet, nothing reserved and nothing observed.
    pub fn new(spec: VmSpec, files: VmmFiles, state: HostVmState, why: Option<String>) -> VmEntry {
        VmEntry {
            max: spec.mem,
            target: 0,
            spec,
            state,
            why,
            vmm: None,
            files,
            exit_status: None,
            exit: None,
            reserved: false,
            stop_asked: false,
            stats: None,
            info: None,
            paused_by_host: false,
            active_at_pause: None,
            oom_demand: 0,
            oom_seen: 0,
            reclaimed_seen: 0,
            resident_seen: None,
            ended: (state == HostVmState::Refused).then(Instant::now),
            balancing: VmBalancing::default(),
            balloon_watch: BalloonWatch::default(),
            overheads: VecDeque::new(),
            waiting: false,
            charged: 0,
            launch_limit: 0,
            incoming: None,
            outgoing: None,
            migrated: false,
            forget_on_exit: false,
        }
    }

    pub fn live(&self) -> bool {
        self.vmm.is_some()
    }

    pub fn resident(&self) -> u64 {
        self.stats
            .as_ref()
            .and_then(|s| s.pager.as_ref())
            .map_or(0, |p| p.pages.resident_pages * 4096)
    }

    /// The active fraction, as it was when the host paused it. Once the pager has taken guest
    /// RAM over and ended a sampling period, its sampled estimate; before, no page has been
    /// sampled (RAM is plain memory, or the first period is under way), so the guest's own
    /// statistics say it when it has a balloon ([`guest_active`]), and 1 otherwise. (Switching
    /// at the takeover, a VM the guest's statistics put at 0.3 jumped to 1, the sampler's
    /// assumption before its first period.)
    pub fn active(&self) -> f64 {
        self.active_at_pause.unwrap_or_else(|| {
            let stats = self.stats.as_ref();
            let pager = stats.and_then(|s| s.pager.as_ref());
            match pager {
                Some(p) if p.attached && p.active.periods > 0 => p.active.estimate,
                _ => stats
                    .and_then(|s| s.balloon.as_ref())
                    .and_then(|b| b.guest.as_ref())
                    .and_then(|g| guest_active(g, self.resident()))
                    .unwrap_or_else(|| pager.map_or(1.0, |p| p.active.estimate)),
            }
        })
    }

    /// What the budget charges its VMM besides guest memory and its pool: the largest of its
    /// last [`OVERHEAD_SAMPLES`] measurements, and at least `default` (`vm_overhead`) until it
    /// has that many. A VMM's memory grows while its guest boots; charged its first
    /// measurement, a VMM starting beside others was charged less than it held a second later.
    pub fn overhead(&self, default: u64) -> u64 {
        let measured = self.overheads.iter().copied().max();
        if self.overheads.len() < OVERHEAD_SAMPLES {
            measured.unwrap_or(0).max(default)
        } else {
            measured.unwrap_or(default)
        }
    }

    /// Notes what its VMM process holds besides guest RAM (`beside`,
    /// [`crate::process::Vmm::pss_beside_ram`]), less its pool's mapped memory by its VMM's
    /// last statistics (the pool is charged apart).
    pub fn measured(&mut self, beside: u64) {
        let mapped = self
            .stats
            .as_ref()
            .and_then(|s| s.pager.as_ref())
            .and_then(|p| p.pool)
            .map_or(0, |p| p.mapped_bytes);
        let overhead = beside.saturating_sub(mapped);
        if self.overheads.len() == OVERHEAD_SAMPLES {
            self.overheads.pop_front();
        }
        self.overheads.push_back(overhead);
    }

    /// Memory its pool holds now.
    pub fn pooled(&self) -> u64 {
        self.stats
            .as_ref()
            .and_then(|s| s.pager.as_ref())
            .and_then(|p| p.pool)
            .map_or(0, |p| p.used_bytes)
    }

    /// Its pool's size now.
    pub fn pool_capacity(&self) -> Option<u64> {
        self.stats
            .as_ref()
            .and_then(|s| s.pager.as_ref())
            .and_then(|p| p.pool)
            .map(|p| p.capacity_bytes)
    }

    /// Host memory its page sharing saves (KSM), by its VMM's last count.
    pub fn shared_saved(&self) -> u64 {
        self.stats
            .as_ref()
            .and_then(|s| s.sharing.as_ref())
            .map_or(0, |s| s.saved_pages * 4096)
    }

    pub fn shares_pages(&self) -> bool {
        self.spec.sharing.as_deref() == Some("host")
    }

    /// Resident memory in sequential sequences its guest is still reading from disk, from its
    /// Swap Mapper's pattern table (0 without).
    pub fn streaming(&self) -> u64 {
        self.stats
            .as_ref()
            .and_then(|s| s.pager.as_ref())
            .and_then(|p| p.patterns.as_ref())
            .map_or(0, |pat| pat.streaming_pages * 4096)
    }

    /// Resident memory that mirrors a disk block (Swap Mapper): what a release can take.
    pub fn clean(&self) -> u64 {
        self.stats
            .as_ref()
            .and_then(|s| s.pager.as_ref())
            .map_or(0, |p| p.pages.mirrored_pages * 4096)
    }

    /// Pages its pager has reclaimed to keep it under its limit, by its VMM's last count.
    pub fn reclaimed(&self) -> u64 {
        self.stats
            .as_ref()
            .and_then(|s| s.pager.as_ref())
            .map_or(0, |p| {
                let c = &p.counters;
                [
                    c.reclaimed_zero,
                    c.reclaimed_clean,
                    c.reclaimed_written,
                    c.reclaimed_mirrored,
                    c.reclaimed_shared,
                ]
                .into_iter()
                .fold(0, u64::saturating_add)
            })
    }

    pub fn oom_deflated(&self) -> u64 {
        self.stats
            .as_ref()
            .and_then(|s| s.balloon.as_ref())
            .map_or(0, |b| b.oom_deflated_pages)
    }

    pub fn status(&self) -> HostVm {
        let pager = self.stats.as_ref().and_then(|s| s.pager.as_ref());
        let balloon = self.stats.as_ref().and_then(|s| s.balloon.as_ref());
        let active_fraction = self.active();
        let resident = self.resident();
        HostVm {
            name: self.spec.name.clone(),
            state: self.state,
            why: self.why.clone(),
            pid: self.vmm.as_ref().map(Vmm::pid),
            exit_status: self.exit_status,
            exit: self.exit,
            mem_bytes: self.spec.mem,
            min_bytes: self.spec.min,
            max_bytes: self.max,
            shares: self.spec.shares,
            target_bytes: self.target,
            resident_bytes: resident,
            // A fraction (0 to 1) of a byte count: in range.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            active_bytes: (resident as f64 * active_fraction) as u64,
            active_fraction,
            active: pager.map(|p| p.active).unwrap_or_default(),
            balloon_bytes: balloon.map(|b| b.actual_pages * 4096),
            balloon_target_bytes: self.info.as_ref().and_then(|i| i.balloon_target_bytes),
            balloon_usable: self.spec.balloon.then_some(self.balloon_watch.usable),
            balloon_step_bytes: self.spec.balloon.then_some(self.balloon_watch.step),
            balloon_reread_cap_bytes: self.balloon_watch.reread_cap,
            swapped_bytes: pager.map_or(0, |p| p.pages.swapped_pages * 4096),
            on_disk_bytes: pager.map_or(0, |p| p.pages.on_disk_pages * 4096),
            limit_bytes: pager.and_then(|p| p.limit_bytes).unwrap_or(self.max),
            paused_by_host: self.paused_by_host,
            pool_bytes: self.pool_capacity().unwrap_or(0),
            pooled_bytes: self.pooled(),
            oom_deflated_pages: self.oom_deflated(),
            shared_saved_bytes: self.shared_saved(),
            overhead_bytes: if self.live() { self.charged } else { 0 },
            api_sock: self.files.sock.display().to_string(),
            // A jailed VMM's, or one that ran jailed: its snapshots stay there after it ends.
            snapshot_dir: match &self.vmm {
                Some(v) => v.uid().is_some(),
                None => self.files.snapshots.is_dir(),
            }
            .then(|| self.files.snapshots.display().to_string()),
            log: self.files.log.display().to_string(),
        }
    }
}

/// The active fraction a guest's own balloon statistics give for `resident` bytes of its RAM:
/// what it holds that is in use, as a fraction of what it holds; `None` without those
/// statistics or resident memory. ESX samples instead; before the pager has taken RAM over, a
/// page cannot be sampled, and the guest can only say what is free and what is clean page
/// cache, not what it will read again. So the cache counts as in use (total less free): a low
/// target makes the guest drop its cache, a VM reading one file over and over included
/// (docs/host.md). Under HyperDealer2's balancing a stream the guest is reading from its disk
/// is idle all the same: the plan caps the fraction
/// ([`memvisor_policy::balance::active_outside_streams`]).
pub fn guest_active(g: &GuestMemoryStats, resident: u64) -> Option<f64> {
    let total = g.total_memory_bytes?;
    let free = g.free_memory_bytes?;
    if resident == 0 {
        return None;
    }
    let used = total.saturating_sub(free);
    Some((used as f64 / resident as f64).clamp(0.0, 1.0))
}

/// The host's VMs, and what admission reserved for them.
pub struct Registry {
    pub vms: Vec<VmEntry>,
    pub reservations: Reservations,
    /// Files of ended VMMs, to remove on a thread of their own ([`Registry::take_trash`]):
    /// removing a swap file can take seconds (ext4 with `discard` trims its blocks in `unlink`;
    /// 23 s was seen here), and neither the API nor the next tick may wait for it.
    trash: Vec<VmmFiles>,
    /// VMs moved in from and out to other hosts, and moves that failed.
    pub moves: Moves,
}

impl Registry {
    /// No VMs yet, and `reservations` to admit them by.
    pub fn new(reservations: Reservations) -> Registry {
        Registry {
            vms: Vec::new(),
            reservations,
            trash: Vec::new(),
            moves: Moves::default(),
        }
    }

    pub fn find(&self, name: &str) -> Result<usize, Refused> {
        self.vms
            .iter()
            .position(|v| v.spec.name == name)
            .ok_or_else(|| Refused(404, format!("no VM named '{name}' on this host")))
    }

    /// VM `name`, if the host still has it (the tick's phases find VMs again by name: the list
    /// may change while it reads them without the lock).
    pub fn named_mut(&mut self, name: &str) -> Option<&mut VmEntry> {
        self.vms.iter_mut().find(|v| v.spec.name == name)
    }

    /// The name of the VM at `i`, `?` for one that is gone.
    pub fn name_at(&self, i: usize) -> String {
        self.vms
            .get(i)
            .map_or_else(|| "?".to_owned(), |v| v.spec.name.clone())
    }

    pub fn vm(&self, name: &str) -> Result<HostVm, Refused> {
        self.find(name).map(|i| self.vms[i].status())
    }

    pub fn statuses(&self) -> Vec<HostVm> {
        self.vms.iter().map(VmEntry::status).collect()
    }

    /// Every live VM as a tick of `GET /history` shows it.
    pub fn tick_points(&self) -> Vec<VmSample> {
        self.vms
            .iter()
            .filter(|v| v.live())
            .map(|v| {
                let st = v.status();
                VmSample {
                    name: st.name,
                    state: st.state,
                    target_bytes: st.target_bytes,
                    resident_bytes: st.resident_bytes,
                    active_bytes: st.active_bytes,
                    balloon_bytes: st.balloon_bytes.unwrap_or(0),
                    swapped_bytes: st.swapped_bytes,
                    on_disk_bytes: st.on_disk_bytes,
                    limit_bytes: st.limit_bytes,
                    pooled_bytes: st.pooled_bytes,
                    shared_saved_bytes: st.shared_saved_bytes,
                }
            })
            .collect()
    }

    /// Forgets VMs that ended more than `keep` ago: what the host holds stays bounded however
    /// many VMs come and go.
    pub fn forget_ended(&mut self, keep: Duration) {
        self.vms
            .retain(|v| v.ended.is_none_or(|t| t.elapsed() < keep));
    }

    /// Records a VM that admission refused: it is listed as refused, in `state_dir`.
    pub fn refuse(
        &mut self,
        journal: &mut Journal,
        state_dir: &std::path::Path,
        spec: VmSpec,
        why: &AdmissionRefusal,
    ) {
        journal.event(
            HostEventKind::Refused,
            Some(&spec.name),
            format!("refused: {why}"),
        );
        let files = VmmFiles::new(state_dir, &spec.name);
        let v = VmEntry::new(spec, files, HostVmState::Refused, Some(why.to_string()));
        self.vms.push(v);
    }

    /// Forgets a VM that ended or was refused (`DELETE /vms/NAME`); a live one must be stopped
    /// first.
    pub fn remove(&mut self, name: &str) -> Result<HostVm, Refused> {
        let i = self.find(name)?;
        if self.vms[i].ended.is_none() {
            return Err(Refused(
                409,
                format!("vm '{name}' is still running; stop it first (PUT /vms/{name}/stop)"),
            ));
        }
        Ok(self.vms.remove(i).status())
    }

    /// Changes a VM's `min`, `max` or `shares`; refused (and nothing changed) unless
    /// `min <= max <= mem` and the new reservation, with `overhead` per VMM, is admitted.
    pub fn update(
        &mut self,
        name: &str,
        u: &PolicyUpdate,
        overhead: u64,
    ) -> Result<HostVm, Refused> {
        let i = self.find(name)?;
        let v = &self.vms[i];
        if !v.live() {
            return Err(Refused(400, format!("vm '{name}' is not running")));
        }
        let min = u.min.unwrap_or(v.spec.min);
        let max = u.max.unwrap_or(v.max);
        let shares = u.shares.unwrap_or(v.spec.shares);
        if max > v.spec.mem {
            return Err(Refused(
                400,
                format!("max {max} is above vm '{name}''s mem {}", v.spec.mem),
            ));
        }
        if min > max {
            return Err(Refused(400, format!("min {min} is above max {max}")));
        }
        if !(1..=1_000_000).contains(&shares) {
            return Err(Refused(
                400,
                format!("shares {shares} must be 1 to 1000000"),
            ));
        }
        let o = overhead;
        // Admission counts swap for the guest's whole RAM beyond min (`mem - min`): a lower max
        // is a policy that may be raised again, so it reserves no less.
        let without = unreserve(&self.reservations, v.spec.min, v.spec.mem, o);
        let next = admit(&without, min, v.spec.mem, o)
            .map_err(|e| Refused(400, format!("vm '{name}': {e}")))?;
        self.reservations = next;
        let v = &mut self.vms[i];
        v.spec.min = min;
        v.spec.shares = shares;
        v.max = max;
        Ok(v.status())
    }

    /// Asks a VM's VMM to stop; a VM still waiting for room ends at once (`overhead` per VMM
    /// goes back to the reservations).
    pub fn stop(
        &mut self,
        journal: &mut Journal,
        name: &str,
        overhead: u64,
    ) -> Result<HostVm, Refused> {
        let i = self.find(name)?;
        if self.vms[i].waiting {
            self.end_waiting(journal, i, "stopped before it started".into(), overhead);
            return Ok(self.vms[i].status());
        }
        let v = &mut self.vms[i];
        if let Some(out) = &v.outgoing {
            return Err(Refused(
                409,
                format!(
                    "vm '{name}' is moving to {} (or its move broke off and its VMM holds pages the destination needs): stop it through its VMM's socket if you mean it",
                    out.to
                ),
            ));
        }
        match &v.vmm {
            None => return Err(Refused(400, format!("vm '{name}' is not running"))),
            Some(vmm) => vmm.terminate(),
        }
        v.stop_asked = true;
        v.state = HostVmState::Stopping;
        let status = v.status();
        journal.event(
            HostEventKind::Stopping,
            Some(name),
            "asked to stop".to_owned(),
        );
        Ok(status)
    }

    /// Starts the VMM of waiting VM `i`, with pager limit `limit` (its whole memory: plain
    /// memory, no limit) and `pool`; a VMM that cannot start ends the VM, its reservation
    /// (with `overhead`) back.
    pub fn start(
        &mut self,
        journal: &mut Journal,
        (launch, jail): (&Launch, Option<&std::ops::RangeInclusive<u32>>),
        i: usize,
        (limit, pool): (u64, Option<u64>),
        overhead: u64,
    ) {
        let uid = match jail {
            None => None,
            Some(range) => {
                let taken: Vec<u32> = (self.vms.iter())
                    .filter_map(|v| v.vmm.as_ref()?.uid())
                    .collect();
                match crate::jailing::free_uid(range, &taken) {
                    Some(uid) => Some(uid),
                    None => {
                        let (first, last) = (range.start(), range.end());
                        let why = format!("every uid of [host] uid_range {first}-{last} is taken");
                        return self.end_waiting(journal, i, why, overhead);
                    }
                }
            }
        };
        let v = &mut self.vms[i];
        let incoming = v.incoming.as_ref().map(Incoming::flags);
        match Vmm::spawn(launch, &v.spec, &v.files, (limit, pool), uid, incoming) {
            Ok(vmm) => {
                let how = if limit >= v.spec.mem {
                    "no limit: plain memory".to_owned()
                } else {
                    format!("its limit {} MiB", limit >> 20)
                };
                journal.event(
                    HostEventKind::Admitted,
                    Some(&v.spec.name),
                    format!("started: its VMM is pid {}, {how}", vmm.pid()),
                );
                v.vmm = Some(vmm);
                v.waiting = false;
                v.why = v
                    .incoming
                    .as_ref()
                    .map(|_| "its VMM is starting to wait for the source".to_owned());
                v.launch_limit = limit.min(v.spec.mem);
                v.target = limit;
            }
            Err(e) => {
                let why = format!("cannot start a VMM: {e}");
                self.end_waiting(journal, i, why, overhead);
            }
        }
    }

    /// Ends waiting VM `i` before its VMM started, for `why`: its reservation (with `overhead`)
    /// goes back to the budget.
    pub fn end_waiting(&mut self, journal: &mut Journal, i: usize, why: String, overhead: u64) {
        let v = &mut self.vms[i];
        v.waiting = false;
        v.state = HostVmState::Exited;
        v.ended = Some(Instant::now());
        if v.reserved {
            self.reservations = unreserve(&self.reservations, v.spec.min, v.spec.mem, overhead);
            v.reserved = false;
        }
        v.why = Some(why.clone());
        journal.event(HostEventKind::Exited, Some(&v.spec.name), why);
    }

    /// Where `PUT /vms/NAME/snapshot` writes snapshot `dir` of VM `name`, and the socket of
    /// its VMM, which writes it: `STATE/NAME/snapshots/DIR`, `DIR` one name (a jailed VMM takes
    /// nothing else; an unjailed one gets the same place, the directory made for it).
    pub fn snapshot_target(&self, name: &str, dir: &str) -> Result<(PathBuf, PathBuf), Refused> {
        let v = &self.vms[self.find(name)?];
        if v.vmm.is_none() || v.waiting {
            return Err(Refused(400, format!("vm '{name}' is not running")));
        }
        let mut parts = std::path::Path::new(dir).components();
        let (Some(std::path::Component::Normal(one)), None) = (parts.next(), parts.next()) else {
            return Err(Refused(
                400,
                format!(
                    "snapshot {dir:?}: give one name (e.g. \"snap1\"), without '/' or '..': it \
                     is written to {}/NAME",
                    v.files.snapshots.display()
                ),
            ));
        };
        if v.vmm.as_ref().is_some_and(|vmm| vmm.uid().is_none()) {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .mode(0o700)
                .recursive(true)
                .create(&v.files.snapshots)
                .map_err(|e| {
                    Refused(
                        400,
                        format!("cannot make {}: {e}", v.files.snapshots.display()),
                    )
                })?;
        }
        Ok((v.files.sock.clone(), v.files.snapshots.join(one)))
    }

    /// Asks every VMM to stop (a VM still waiting for room ends at once); returns how many are
    /// still alive.
    pub fn stop_all(&mut self, journal: &mut Journal, overhead: u64) -> usize {
        let waiting: Vec<usize> = (0..self.vms.len())
            .filter(|&i| self.vms[i].waiting)
            .collect();
        for i in waiting {
            self.end_waiting(journal, i, "stopped before it started".into(), overhead);
        }
        for v in &mut self.vms {
            if let Some(vmm) = &v.vmm {
                vmm.terminate();
                v.stop_asked = true;
                v.state = HostVmState::Stopping;
            }
        }
        self.reap(journal, overhead);
        self.vms.iter().filter(|v| v.live()).count()
    }

    /// Kills every VMM still alive.
    pub fn kill_all(&mut self, journal: &mut Journal, overhead: u64) {
        for v in &mut self.vms {
            if let Some(vmm) = &mut v.vmm {
                tracing::warn!("vm {}: did not stop in time; killed", v.spec.name);
                vmm.kill();
            }
        }
        self.reap(journal, overhead);
    }

    /// The files of VMMs that ended since the last call, to remove without the lock.
    pub fn take_trash(&mut self) -> Vec<VmmFiles> {
        std::mem::take(&mut self.trash)
    }

    /// Notes VMMs that ended: state, why, and their reservation (with `overhead` per VMM) back
    /// in the budget; their files go to the trash.
    pub fn reap(&mut self, journal: &mut Journal, overhead: u64) {
        let o = overhead;
        let mut ended = Vec::new();
        for v in &mut self.vms {
            let Some(vmm) = &mut v.vmm else { continue };
            let Some(status) = vmm.try_wait() else {
                continue;
            };
            let (code, kind, why) = describe_exit(status, vmm.pid(), &v.files.log);
            if v.migrated {
                // Its state and why say where it went (its VMM's exit there is no guest's
                // end); its reservation went back then.
            } else if let Some(out) = &v.outgoing {
                (v.exit_status, v.exit) = (Some(code), Some(kind));
                if out.broken {
                    v.why = Some(format!(
                        "its VMM ended after its move to {} broke off ({why}): if `migrate-recover` finished the move, the VM runs there",
                        out.to
                    ));
                    v.state = HostVmState::Exited;
                } else {
                    // The move's thread has its VMM's answer, or is about to: it says how the
                    // move ended (a VMM that moved its VM ends at once).
                    v.why = Some(format!(
                        "its VMM ended ({why}) as its move to {} ended",
                        out.to
                    ));
                }
            } else {
                (v.exit_status, v.exit) = (Some(code), Some(kind));
                v.why = Some(if v.stop_asked && kind != VmExit::Signal {
                    format!("stopped: {why}")
                } else {
                    why
                });
                v.state = HostVmState::Exited;
            }
            v.ended = Some(Instant::now());
            v.vmm = None;
            v.paused_by_host = false;
            v.active_at_pause = None;
            self.trash.push(v.files.clone());
            if v.reserved {
                self.reservations = unreserve(&self.reservations, v.spec.min, v.spec.mem, o);
                v.reserved = false;
            }
            if !v.migrated && v.outgoing.as_ref().is_none_or(|o| o.broken) {
                ended.push((v.spec.name.clone(), v.why.clone().unwrap_or_default()));
            }
        }
        for (name, why) in ended {
            journal.event(HostEventKind::Exited, Some(&name), why);
        }
        // An incoming VM whose move was called off leaves nothing behind.
        self.vms.retain(|v| !(v.forget_on_exit && v.vmm.is_none()));
    }

    /// The VMMs to observe this tick: name, socket (by name, not index: the list may change
    /// while the tick reads them without the lock), and whether it is a VM migrating in, whose
    /// VMM serves its API only once the VM's state has come from the source.
    pub fn to_observe(&self) -> Vec<(String, PathBuf, bool)> {
        self.vms
            .iter()
            .filter(|v| v.live() && v.outgoing.is_none() && !v.migrated)
            .map(|v| {
                let name = v.spec.name.clone();
                (name, v.files.sock.clone(), v.incoming.is_some())
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_guests_statistics_give_its_active_fraction_before_the_pager_runs() {
        let g = GuestMemoryStats {
            total_memory_bytes: Some(512 * MIB),
            free_memory_bytes: Some(400 * MIB),
            available_memory_bytes: Some(456 * MIB),
            disk_caches_bytes: Some(56 * MIB),
            ..GuestMemoryStats::default()
        };
        // 112 MiB not free (56 of them page cache, in use too), of 224 MiB it holds.
        assert_eq!(guest_active(&g, 224 * MIB), Some(0.5));
        // Without free memory in the statistics, nothing is known.
        let no_free = GuestMemoryStats {
            free_memory_bytes: None,
            ..g.clone()
        };
        assert_eq!(guest_active(&no_free, 224 * MIB), None);
        assert_eq!(guest_active(&g, 0), None);
        assert_eq!(guest_active(&GuestMemoryStats::default(), MIB), None);
        // Never above 1, whatever the guest says.
        assert_eq!(guest_active(&g, MIB), Some(1.0));
    }

    /// A VMM is charged `vm_overhead` until it has been measured a few times, then the most it
    /// held besides guest RAM and its pool in its last measurements, less than `vm_overhead`
    /// or more.
    #[test]
    fn a_vmm_is_charged_its_measured_overhead_once_measured() {
        let spec: VmSpec = serde_json::from_str(r#"{"name": "a", "mem": "256M"}"#).unwrap();
        let dir = std::path::Path::new("/nonexistent");
        let mut v = VmEntry::new(spec, VmmFiles::new(dir, "a"), HostVmState::Running, None);
        let o = 32 * MIB;
        assert_eq!(v.overhead(o), o, "not measured yet");
        v.measured(40 * MIB);
        assert_eq!(v.overhead(o), 40 * MIB, "more than the default at once");
        for _ in 0..OVERHEAD_SAMPLES {
            v.measured(20 * MIB);
        }
        assert_eq!(v.overhead(o), 20 * MIB, "less once measured enough");
        v.measured(26 * MIB);
        v.measured(22 * MIB);
        assert_eq!(v.overhead(o), 26 * MIB, "the most of the last measurements");
        // The pool is charged apart.
        v.stats = Some(VmStats {
            pager: Some(memvisor_api::PagerStats {
                pool: Some(memvisor_api::PoolStats {
                    mapped_bytes: 100 * MIB,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        for _ in 0..OVERHEAD_SAMPLES {
            v.measured(124 * MIB);
        }
        assert_eq!(v.overhead(o), 24 * MIB);
    }
}
