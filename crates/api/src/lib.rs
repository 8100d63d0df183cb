//! The control APIs of the VMM and of the host manager: one serde schema for requests and answers (published in `docs/openapi.json` and `docs/host-openapi.json`), every request parsed into one enum (`VmRequest`, `HostRequest`), typed clients (`VmClient`, `HostClient`) with errors for an operator, and the small HTTP/1.1 framing; with the `server` feature, the server side both APIs share and their Prometheus exposition (`metrics`).
//!
//! | file | owns |
//! |---|---|
//! | `spec.rs` | a VM as the operator describes it (`VmSpec`, disks, sizes and durations) |
//! | `vm.rs` | `GET /vm`: the VM's configuration and state |
//! | `stats.rs` | `GET /stats`: every counter of a VM, one struct per source |
//! | `exit.rs` | what a VMM's exit status means |
//! | `host.rs` | the host manager's API: its budget and state, each VM's policy and allocation, events and history, a VM moving between hosts (`IncomingRequest`, `IncomingVm`, `HostMigrateRequest`) |
//! | `body.rs` | the small request and answer bodies (`MemoryUpdate`, `ReleaseRequest`, `ErrorBody`, ...) |
//! | `http.rs` | the small HTTP/1.1 framing of a control socket |
//! | `request.rs` | every request of both APIs as one enum each, parsed from and spelled back into method, path and body |
//! | `client.rs` | the typed clients, `VmClient` and `HostClient` |
//! | `server.rs` | the server side both APIs share (feature `server`) |
//! | `metrics/mod.rs` | `GET /metrics`: how the APIs' numbers are named and exposed, and the module's public face |
//! | `metrics/rows.rs` | what a row of a metrics table is: a field, how it is exported, how a field finds its row |
//! | `metrics/tables.rs` | the three tables that name every metric, and their catalogue |
//! | `metrics/exposition.rs` | an API value walked through its table into the OpenMetrics text format |

mod body;
mod client;
pub mod exit;
mod host;
mod http;
#[cfg(feature = "server")]
pub mod metrics;
mod request;
#[cfg(feature = "server")]
pub mod server;
pub mod sockpath;
pub mod spec;
mod stats;
mod vm;

pub use body::{
    BalloonUpdate, ErrorBody, MemoryUpdate, MigrateRequest, MigrateResult, PoolUpdate, PrecopyEnd,
    ReleaseRequest, ReleaseResult, SnapshotRequest, SnapshotResult, MAX_PRECOPY_ROUNDS,
};
pub use client::{Api, ClientError, HostClient, VmClient};
pub use exit::VmExit;
pub use host::{
    Balancing, FreeStateName, HostEvent, HostEventKind, HostInfo, HostKsm, HostMigrateRequest,
    HostSample, HostUpdate, HostVm, HostVmState, IncomingRequest, IncomingVm, PolicyUpdate,
    VmSample,
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
