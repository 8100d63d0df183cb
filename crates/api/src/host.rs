//! The host manager's API (`memvisor host`): the host's budget and free-memory state, and each
//! VM's policy, allocation and state. Published in `docs/host-openapi.json`.

#![deny(missing_docs)]

use serde::{Deserialize, Serialize};

use crate::spec::size;
use crate::stats::ActiveMemory;

/// The free-memory state (ESX §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FreeStateName {
    /// At least 6 % of the budget free (4 % once below): nothing is reclaimed.
    High,
    /// Below 4 %: balloons move VMs toward their targets.
    Soft,
    /// Below 2 %: pager limits enforce the targets too.
    Hard,
    /// Below 1 %: VMs above their targets are also paused while it lasts.
    Low,
}

impl FreeStateName {
    /// Every state, from most free memory to least.
    pub const ALL: [FreeStateName; 4] = [Self::High, Self::Soft, Self::Hard, Self::Low];
}

/// How the host moves memory between VMs (`[host] balancing`, `PATCH /host`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Balancing {
    /// ESX's policy alone: balloons and pager limits move VMs toward their targets under
    /// pressure.
    #[default]
    Balloon,
    /// HyperDealer2 on top: victims' clean page-cache pages are released at once and handed to
    /// the VMs that need memory in the same tick (VMs with the Swap Mapper; docs/hd2.md).
    Hd2,
}

impl Balancing {
    /// Every way, the default first.
    pub const ALL: [Balancing; 2] = [Self::Balloon, Self::Hd2];
}

/// `GET /host`: the budget and how it is used.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    /// Memory for every VM together, their VMMs' overheads included.
    pub budget_bytes: u64,
    /// The budget minus resident guest memory and overheads, at the last tick.
    pub free_bytes: u64,
    /// The free-memory state at the last tick.
    pub free_state: FreeStateName,
    /// The idle memory tax, 0 to 1.
    pub idle_tax: f64,
    /// Host memory each VMM is taken to need besides guest RAM.
    pub vm_overhead_bytes: u64,
    /// The most memory the VMs' pools may hold together (MemFlex); 0: no pools.
    pub pool_max_bytes: u64,
    /// The pools' size together at the last tick: what the VMs do not hold, less the high
    /// state's reserve, at most `pool_max_bytes`.
    pub pool_bytes: u64,
    /// Memory admission has reserved: `min` plus overhead of every admitted VM.
    pub memory_reserved_bytes: u64,
    /// Swap space for the VMs' pagers.
    pub swap_bytes: u64,
    /// Swap admission has reserved: `mem - min` of every admitted VM.
    pub swap_reserved_bytes: u64,
    /// Policy ticks done.
    pub ticks: u64,
    /// Seconds between ticks.
    pub tick_seconds: f64,
    /// The host kernel's KSM as the host drives it; `null` while no VM shares (`sharing =
    /// "host"`), when the host leaves KSM as it found it.
    #[serde(default)]
    pub ksm: Option<HostKsm>,
    /// How the host moves memory between VMs.
    #[serde(default)]
    pub balancing: Balancing,
    /// Pages the VMs' VMMs released at the host's request (HyperDealer2 balancing).
    #[serde(default)]
    pub released_pages: u64,
    /// Ticks that moved released memory to a VM that needed it.
    #[serde(default)]
    pub reallocations: u64,
    /// Pages of capacity gap closed by inflating a victim's balloon (HyperDealer2 §4.7).
    #[serde(default)]
    pub gap_closed_pages: u64,
    /// The host process's own memory (its PSS) at the last tick: part of the budget.
    #[serde(default)]
    pub own_bytes: u64,
    /// What the budget covered at the last tick: the host's own memory, the pools' most, and
    /// for each VM its resident guest memory or its limit, whichever is more (all of its memory
    /// on plain memory), and its VMM's overhead.
    #[serde(default)]
    pub committed_bytes: u64,
    /// VMs that moved here from another host (`POST /vms/incoming`) and run here now.
    #[serde(default)]
    pub migrated_in: u64,
    /// VMs that moved from here to another host (`POST /vms/NAME/migrate`).
    #[serde(default)]
    pub migrated_out: u64,
    /// Moves to another host that did not happen or broke off (the destination refused, the
    /// migration failed before the switch, or broke after it).
    #[serde(default)]
    pub migrations_failed: u64,
}

/// KSM, the kernel's page-merging scanner, as the host drives it (docs/sharing.md).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostKsm {
    /// The scanner runs (`/sys/kernel/mm/ksm/run` 1).
    pub running: bool,
    /// Pages it scans each time it wakes (`pages_to_scan`), as the host set it this tick.
    pub pages_to_scan: u64,
    /// How long it sleeps between scans (`sleep_millisecs`).
    pub sleep_ms: u64,
    /// Merged pages kept, one per distinct content (`pages_shared`), every process's.
    pub shared_pages: u64,
    /// Pages mapping one of them besides it, i.e. saved (`pages_sharing`).
    pub sharing_pages: u64,
    /// Pages merged with the kernel's zero page (`ksm_zero_pages`), also saved.
    pub zero_pages: u64,
    /// Full passes of the scanner over mergeable memory (`full_scans`).
    pub full_scans: u64,
    /// CPU time the scanner thread (`ksmd`) used since the host took KSM over.
    pub cpu_ms: u64,
    /// Its share of one CPU over the last tick, 0 to 1.
    pub cpu_fraction: f64,
}

/// Where a VM of the host is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostVmState {
    /// Admitted and waiting for room in the budget for its `min` and its VMM's overhead, or its
    /// VMM is starting and its API is not answering yet.
    Starting,
    /// Its vCPUs run.
    Running,
    /// Its vCPUs are parked: by the host (low free memory) or by its own pager (`why`).
    Paused,
    /// Asked to stop; its VMM is shutting down.
    Stopping,
    /// Its VMM has ended (`why` says how); its reservation is back in the budget.
    Exited,
    /// Refused at start by admission control (`why` says which reservation failed).
    Refused,
    /// Admitted to move here from another host (`POST /vms/incoming`): its VMM waits for the
    /// source, or has the VM and has not answered yet.
    Incoming,
    /// Moving to another host (`POST /vms/NAME/migrate`); `why` says where, or, after a break
    /// in post-copy, what is left.
    Migrating,
    /// Moved to another host (`why` says where and what was sent); its reservation is back in
    /// the budget.
    Migrated,
}

impl HostVmState {
    /// Every state, in the order of a VM's life.
    pub const ALL: [HostVmState; 9] = [
        Self::Starting,
        Self::Running,
        Self::Paused,
        Self::Stopping,
        Self::Exited,
        Self::Refused,
        Self::Incoming,
        Self::Migrating,
        Self::Migrated,
    ];
}

/// A new state fails to compile here until it is in `ALL` too (`GET /metrics` lists them).
#[allow(dead_code)]
fn every_state_is_in_all(s: HostVmState, f: FreeStateName) {
    match s {
        HostVmState::Starting
        | HostVmState::Running
        | HostVmState::Paused
        | HostVmState::Stopping
        | HostVmState::Exited
        | HostVmState::Refused
        | HostVmState::Incoming
        | HostVmState::Migrating
        | HostVmState::Migrated => {}
    }
    match f {
        FreeStateName::High | FreeStateName::Soft | FreeStateName::Hard | FreeStateName::Low => {}
    }
}

/// One VM as the host sees it (`GET /vms`, `GET /vms/NAME`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostVm {
    /// Its name.
    pub name: String,
    /// Where it is in its life.
    pub state: HostVmState,
    /// Why it is paused, exited or refused; `null` otherwise.
    pub why: Option<String>,
    /// Its VMM's process id; `null` before start and after exit.
    pub pid: Option<u32>,
    /// Its VMM's exit status once exited (`128 + N` for signal N); `null` before.
    pub exit_status: Option<i32>,
    /// What that exit means (`why` says it in words); `null` before.
    pub exit: Option<crate::exit::VmExit>,
    /// Guest RAM.
    pub mem_bytes: u64,
    /// Guaranteed host memory.
    pub min_bytes: u64,
    /// Most host memory it is given (at most `mem_bytes`).
    pub max_bytes: u64,
    /// Memory shares.
    pub shares: u64,
    /// Its allocation target at the last tick.
    pub target_bytes: u64,
    /// Guest memory resident on the host (its allocation).
    pub resident_bytes: u64,
    /// Estimated active memory: the sampled active fraction of its resident memory.
    pub active_bytes: u64,
    /// The active fraction the policy uses, 0 to 1: the VMM's estimate (`active.estimate`),
    /// frozen while the host pauses the VM.
    pub active_fraction: f64,
    /// The VMM's working-set sampling: the estimate, its moving averages, the samples.
    pub active: ActiveMemory,
    /// Memory the balloon holds now; `null` without a balloon device.
    pub balloon_bytes: Option<u64>,
    /// Memory the host asks the balloon to hold; `null` without a balloon device.
    pub balloon_target_bytes: Option<u64>,
    /// Whether its balloon's driver answers, so the host balloons it rather than paging it
    /// (docs/host.md); `null` without a balloon device.
    #[serde(default)]
    pub balloon_usable: Option<bool>,
    /// How far above what its driver holds the host may raise its balloon's target at the next
    /// tick (the adaptive rate); `null` without a balloon device.
    #[serde(default)]
    pub balloon_step_bytes: Option<u64>,
    /// The most its balloon may hold since its guest re-read what the balloon took, below the
    /// host's cap (docs/host.md); `null` without a balloon device or without that cap.
    #[serde(default)]
    pub balloon_reread_cap_bytes: Option<u64>,
    /// Guest memory in its pager's swap file.
    pub swapped_bytes: u64,
    /// Clean guest memory dropped because the disk image holds it (Swap Mapper).
    pub on_disk_bytes: u64,
    /// The pager's resident limit.
    pub limit_bytes: u64,
    /// Paused by the host because it is above its target in the low state.
    pub paused_by_host: bool,
    /// Its share of the host's pool (0 without pools).
    pub pool_bytes: u64,
    /// Swapped memory its pool holds now.
    pub pooled_bytes: u64,
    /// Pages its guest gave back on its own when out of memory (balloon deflate-on-OOM).
    pub oom_deflated_pages: u64,
    /// Host memory its page sharing saves (KSM, `sharing = "host"`): not counted in the
    /// memory it holds. 0 with sharing off.
    #[serde(default)]
    pub shared_saved_bytes: u64,
    /// What the budget charges its VMM besides guest memory and its pool: its PSS less both,
    /// the most of its last measurements (`vm_overhead` until then); 0 before it starts.
    #[serde(default)]
    pub overhead_bytes: u64,
    /// Its VMM's API socket.
    pub api_sock: String,
    /// Jailed: the directory its VMM writes snapshots into, `PUT /vm/snapshot {"dir": NAME}`
    /// on `api_sock` writing `snapshot_dir/NAME`, where they stay after it ends; `null`
    /// unjailed (the VMM writes any path it is given).
    #[serde(default)]
    pub snapshot_dir: Option<String>,
    /// Its VMM's log (console and messages).
    pub log: String,
}

/// `POST /vms/incoming`: take a VM that moves here from another host. Admission applies as
/// for `POST /vms`; admitted, its VMM starts waiting for the source (`memvisor run --incoming
/// LISTEN --migration-token T`, T fresh and random).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IncomingRequest {
    /// The VM as the source runs it: its name, memory, policy, disks (the same image paths)
    /// and mechanisms.
    pub vm: crate::spec::VmSpec,
    /// The TCP address its VMM listens on for the source, `ip:port` (port 0: any free one);
    /// default `127.0.0.1:0`, for a source on this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
}

/// The answer to `POST /vms/incoming`: where and with what token the source's VMM sends the
/// VM (`PUT /vm/migrate {"to": addr, "token": token}` on the source's VMM).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IncomingVm {
    /// The VM as this host lists it (state `incoming`).
    pub vm: HostVm,
    /// The address its VMM listens on, `ip:port`.
    pub addr: String,
    /// The one-time token its VMM takes the VM with.
    pub token: String,
}

/// `POST /vms/NAME/migrate`: move a running VM to another host.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostMigrateRequest {
    /// The destination host's API socket (a path on this machine, or one an orchestrator
    /// forwards to another machine's host): this host asks it to take the VM. Or give `addr`
    /// and `token` instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// The address of a destination VMM an orchestrator has had a destination host start
    /// already (`IncomingVm::addr` of its `POST /vms/incoming`), with `token`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
    /// The token of that VMM (`IncomingVm::token`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The TCP address the destination's VMM listens on (`IncomingRequest::listen`): one this
    /// host's VMMs reach; default `127.0.0.1:0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// Rounds of pre-copy before the switch (`PUT /vm/migrate`'s `precopy_rounds`).
    #[serde(default)]
    pub precopy_rounds: u32,
}

/// `PATCH /vms/NAME`: new policy values; absent ones are kept.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyUpdate {
    /// Guaranteed host memory (admission reserves it).
    #[serde(
        default,
        with = "size::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub min: Option<u64>,
    /// Most host memory it is given, at most its `mem`.
    #[serde(
        default,
        with = "size::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub max: Option<u64>,
    /// Memory shares, 1 to 1000000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shares: Option<u64>,
}

/// `PATCH /host`: new host-wide policy values; absent ones are kept.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostUpdate {
    /// The idle memory tax, from 0 up to (not including) 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_tax: Option<f64>,
    /// How the host moves memory between VMs: `balloon` or `hd2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balancing: Option<Balancing>,
}

/// What happened on the host (`GET /events`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostEventKind {
    /// A VM's VMM started (after admission, once the budget had room for it).
    Admitted,
    /// A VM was admitted and waits for room in the budget before its VMM starts.
    Waiting,
    /// Admission refused a VM.
    Refused,
    /// The host paused a VM (above its target with free memory low).
    Paused,
    /// The host resumed a VM it had paused.
    Resumed,
    /// A VM was asked to stop.
    Stopping,
    /// A VM's VMM ended.
    Exited,
    /// The free-memory state changed.
    FreeState,
    /// Memory moved in one tick: clean pages released from victims, handed to a VM that needed
    /// it (HyperDealer2 balancing).
    Reallocated,
    /// A VM's balloon inflated by its capacity gap, so its guest knows what it really has.
    GapClosed,
    /// A VM's VMM cannot release pages: it is balanced by its balloon and limit only.
    BalloonFallback,
    /// A VM's balloon driver stopped answering (or never did within the deadline): the host
    /// pages it instead of ballooning it.
    BalloonUnusable,
    /// A VM's balloon driver answers (again): the host balloons it.
    BalloonUsable,
    /// A VM's guest read again from its disk what its balloon took: its balloon holds less, and
    /// host paging takes the rest; or, quiet long enough, that cap was lifted.
    BalloonRereadCap,
    /// A VM was admitted to move here from another host; its VMM waits for the source.
    Incoming,
    /// A VM that moved here from another host runs here.
    MigratedIn,
    /// A VM began to move to another host (the destination admitted it).
    Migrating,
    /// A VM moved to another host: the destination holds every page, its VMM here ended.
    MigratedOut,
    /// A move to another host did not happen or broke off: the message says what is left.
    MigrationFailed,
}

/// One event (`GET /events`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostEvent {
    /// Seconds since the host started.
    pub seconds: f64,
    /// What happened.
    pub kind: HostEventKind,
    /// The VM it happened to; `null` for the host's own events.
    pub vm: Option<String>,
    /// What happened, in words.
    pub message: String,
}

/// One VM at one tick (`GET /history`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VmSample {
    /// Its name.
    pub name: String,
    /// Where it was in its life.
    pub state: HostVmState,
    /// Its allocation target.
    pub target_bytes: u64,
    /// Guest memory resident on the host.
    pub resident_bytes: u64,
    /// Estimated active memory.
    pub active_bytes: u64,
    /// Memory its balloon held (0 without one).
    pub balloon_bytes: u64,
    /// Guest memory in its swap file.
    pub swapped_bytes: u64,
    /// Clean guest memory left in its disk images (Swap Mapper).
    pub on_disk_bytes: u64,
    /// Its pager's resident limit.
    pub limit_bytes: u64,
    /// Swapped memory its pool held.
    pub pooled_bytes: u64,
    /// Host memory its page sharing saved (KSM), not counted in what it held.
    #[serde(default)]
    pub shared_saved_bytes: u64,
}

/// The host at one tick (`GET /history`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostSample {
    /// Seconds since the host started.
    pub seconds: f64,
    /// Free memory: the budget minus resident guest memory and overheads.
    pub free_bytes: u64,
    /// The free-memory state.
    pub free_state: FreeStateName,
    /// Every VM with a running VMM.
    pub vms: Vec<VmSample>,
}
