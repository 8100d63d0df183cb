//! The small request and answer bodies: `PUT /memory`, `PUT /balloon`, `PUT /pool`,
//! `PUT /memory/release` and its answer, and the error answer every request may get.

use serde::{Deserialize, Serialize};

/// `PUT /memory`: the VM's resident-memory limit in bytes; `null` removes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryUpdate {
    /// Required, even as `null` (a `deserialize_with` field has no implicit default).
    #[serde(deserialize_with = "Option::deserialize")]
    pub limit: Option<u64>,
}

/// `PUT /balloon`: the balloon's size in bytes (memory taken from the guest).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BalloonUpdate {
    pub target: u64,
}

/// `PUT /pool`: the host-memory pool's size in bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolUpdate {
    pub bytes: u64,
}

/// `PUT /memory/release`: release up to `pages` clean guest pages now, without the guest's
/// vCPUs (HyperDealer2's instant reclamation, docs/hd2.md): pages that mirror disk blocks (Swap
/// Mapper), chosen by the VM's victim order, dropped after their digest is checked; the limit
/// falls by what was released (a VM without a limit gets one at its resident memory after the
/// release; never below [`MIN_LIMIT`](crate::spec::MIN_LIMIT): near it, fewer are released). `pages` is in 4 KiB
/// pages, 1 to the VM's page count. With `cold_only`, only pages of sequential streams the guest
/// has left cold (behind a stream still being read, or untouched since a probe), and a few
/// pages of each other stream as a probe (with the `hd2` victim orders; with another order,
/// none): what a host takes when memory is not short.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    pub pages: u64,
    #[serde(default)]
    pub cold_only: bool,
}

/// The answer to `PUT /memory/release`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseResult {
    /// Pages asked for.
    pub asked_pages: u64,
    /// Pages released: out of guest RAM, their memory back with the host.
    pub released_pages: u64,
    /// Candidates found changed by the guest when checked, so kept (not released).
    pub changed_pages: u64,
    /// From the request's arrival at the pager to the last page released, in microseconds.
    pub micros: u64,
    /// The limit after the release; `null`: none.
    pub limit_bytes: Option<u64>,
}

/// `PUT /vm/snapshot`: write the VM to directory `dir` (created if missing, empty), then let it
/// run on, or end it with `stop`. A jailed VMM writes only into its snapshot directory
/// (`VmInfo::snapshot_dir`): `dir` is one name there, or that directory's path and one name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotRequest {
    pub dir: String,
    #[serde(default)]
    pub stop: bool,
}

/// The answer to `PUT /vm/snapshot`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotResult {
    /// The directory written, as the host sees it.
    pub dir: String,
    /// Guest pages copied into the memory file.
    pub copied_pages: u64,
    /// All-zero or never-touched pages, recorded, not copied.
    pub zero_pages: u64,
    /// Pages identical to guest disk blocks (the Swap Mapper's), recorded, not copied.
    pub disk_pages: u64,
    /// Pages the balloon held or the guest reported free: no content.
    pub released_pages: u64,
    /// How long the vCPUs were stopped, in milliseconds.
    pub paused_ms: u64,
    /// The VM ends now (`stop`) instead of running on.
    pub stopped: bool,
}

/// The most pre-copy rounds a migration may ask for (`MigrateRequest::precopy_rounds`).
pub const MAX_PRECOPY_ROUNDS: u32 = 16;

/// `PUT /vm/migrate`: move the VM to the destination listening on `to` (`memvisor run
/// --incoming ADDR --migration-token T`), post-copy (docs/migration.md).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigrateRequest {
    /// The destination's TCP address, `ip:port` (`memvisor ctl` resolves a host name first).
    pub to: String,
    /// The one-time token the destination was started with.
    pub token: String,
    /// Resume a migration whose connection broke in post-copy (`ctl migrate-recover`): connect
    /// to `to` again and send the pages the destination has not acknowledged.
    #[serde(default)]
    pub recover: bool,
    /// Rounds of pre-copy before the switch, at most (0: post-copy only): each sends, while
    /// the vCPUs run, the pages written since the round before (the first: every page with
    /// content). The rounds end sooner when more would not help ([`PrecopyEnd`]).
    #[serde(default)]
    pub precopy_rounds: u32,
}

/// Why a migration's pre-copy rounds ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PrecopyEnd {
    /// The rounds asked for ran.
    Asked,
    /// A round sent so few pages that another would find next to nothing to send.
    Converged,
    /// The pages written since a round were most of what it sent: the guest writes as fast as
    /// the rounds send, so post-copy sends those pages, once.
    NotShrinking,
}

/// The answer to `PUT /vm/migrate`, once the destination has acknowledged every page (this
/// VM then ends).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrateResult {
    /// The destination's address.
    pub to: String,
    /// Guest pages with content, each sent once at least.
    pub copied_pages: u64,
    /// Of those, sent because a fault on the destination asked for them.
    pub requested_pages: u64,
    /// Pages sent more than once (asked for while already on the way).
    pub resent_pages: u64,
    /// All-zero, never-touched, released and disk-block pages: recorded, not sent.
    pub recorded_pages: u64,
    /// Pages written to the connection, before and after the switch, each send counted.
    pub sent_pages: u64,
    /// Copied pages the destination has acknowledged (after the switch; those it held from
    /// pre-copy count from the switch on).
    pub acked_pages: u64,
    /// Acknowledged pages whose memory, pool slot or swap block the source has given back.
    pub freed_pages: u64,
    /// Pages sent in each pre-copy round (`precopy_rounds`), in order; empty without.
    pub precopy_round_pages: Vec<u64>,
    /// Why the pre-copy rounds ended; `None` without pre-copy.
    #[serde(default)]
    pub precopy_end: Option<PrecopyEnd>,
    /// Copied pages the destination held from pre-copy, not written since, at the switch:
    /// not sent again.
    pub precopied_pages: u64,
    /// Bytes written to the connection in all.
    pub sent_bytes: u64,
    /// From the pause here to the destination's go-ahead (the vCPUs stopped), in milliseconds.
    pub downtime_ms: u64,
    /// From the pause here to the last page acknowledged, in milliseconds.
    pub total_ms: u64,
}

/// An error answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
}
