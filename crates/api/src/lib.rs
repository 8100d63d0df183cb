//! The control APIs of the VMM and of the host manager: one serde schema for requests and answers (published in `docs/openapi.json` and `docs/host-openapi.json`), every request parsed into one enum (`VmRequest`, `HostRequest`), typed clients (`VmClient`, `HostClient`) with errors for an operator, and the small HTTP/1.1 framing; with the `server` feature, the server side both APIs share and their Prometheus exposition (`metrics`).
//!
//! | file | owns |
//! |---|---|
//! | `spec.rs` | a VM as the operator describes it (`VmSpec`, disks, sizes and durations) |
//! | `vm.rs` | `GET /vm`: the VM's configuration and state |
//! | `stats.rs` | `GET /stats`: every counter of a VM, one struct per source |
//! | `exit.rs` | what a VMM's exit status means |
//! | `host.rs` | the host manager's API: its budget and state, each VM's policy and allocation, events and history |
//! | `http.rs` | the small HTTP/1.1 framing of a control socket |
//! | `request.rs` | every request of both APIs as one enum each, parsed from and spelled back into method, path and body |
//! | `client.rs` | the typed clients, `VmClient` and `HostClient` |
//! | `server.rs` | the server side both APIs share (feature `server`) |
//! | `metrics/rows.rs` | what a row of a metrics table is: a field, how it is exported, how a field finds its row |
//! | `metrics/tables.rs` | the three tables that name every metric, and their catalogue |
//! | `metrics/exposition.rs` | an API value walked through its table into the OpenMetrics text format |
//! | `lib.rs` | the small request and answer bodies (`MemoryUpdate`, `ReleaseRequest`, `ErrorBody`, ...) |

mod client;
pub mod exit;
mod host;
mod http;
#[cfg(feature = "server")]
pub mod metrics;
mod request;
#[cfg(feature = "server")]
pub mod server;
pub mod spec;
mod stats;
mod vm;

pub use client::{Api, ClientError, HostClient, VmClient};
pub use exit::VmExit;
pub use host::{
    Balancing, FreeStateName, HostEvent, HostEventKind, HostInfo, HostKsm, HostSample, HostUpdate,
    HostVm, HostVmState, PolicyUpdate, VmSample,
};
pub use http::{
    call, call_within, exchange, read_request, write_response, write_response_as, HttpError,
    Request, Response, CALL_TIMEOUT, MAX_BODY,
};
pub use request::{parse_body, parse_metrics_request, HostRequest, RequestError, VmRequest};
pub use spec::{parse_duration, parse_size, DiskSpec, PoolCompress, VmSpec};
pub use stats::{
    ActiveMemory, BalloonStats, DiskStats, ExitStats, GuestErrors, GuestMemoryStats,
    IndirectionStats, LatencySummary, PageCensus, PagerCounters, PagerStats, PatternStats,
    PoolStats, SharingStats, VmStats,
};
pub use vm::{DiskInfo, PagerMode, VmInfo, VmState};

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
/// release; never below [`spec::MIN_LIMIT`]: near it, fewer are released). `pages` is in 4 KiB
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

/// An error answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
}
