//! The host API: HTTP/JSON on a Unix socket, one request per connection (`docs/host-openapi.json`).
//!
//! | request | does |
//! |---|---|
//! | `GET /host` | the budget, free memory and state, reservations (`HostInfo`) |
//! | `PATCH /host` | changes the idle memory tax ([`HostUpdate`](memvisor_api::HostUpdate)) |
//! | `GET /events?since=S` | what happened after S seconds: admissions, refusals, pauses, exits, free-state changes |
//! | `GET /history?since=S` | each tick after S seconds: free memory and state, each VM's target, resident, active, balloon, swapped, limit |
//! | `GET /vms` | every VM: policy, target, allocation, active estimate, balloon, swap, state |
//! | `POST /vms` | adds a VM ([`VmSpec`](memvisor_api::VmSpec)); admission applies |
//! | `GET /vms/NAME` | one VM |
//! | `PATCH /vms/NAME` | changes its `min`, `max` or `shares` ([`PolicyUpdate`](memvisor_api::PolicyUpdate)) |
//! | `PUT /vms/NAME/stop` | stops it (SIGTERM to its VMM) |
//! | `PUT /vms/NAME/snapshot` | writes it to `STATE/NAME/snapshots/DIR` through its VMM's socket ([`SnapshotRequest`](memvisor_api::SnapshotRequest), `DIR` one name) |
//! | `DELETE /vms/NAME` | forgets a VM that ended or was refused (409 while it runs); calls off a VM moving here that has not switched over |
//! | `POST /vms/incoming` | takes a VM moving here from another host ([`IncomingRequest`](memvisor_api::IncomingRequest)): admission, then its VMM waits for the source; answers where and with what token |
//! | `POST /vms/NAME/migrate` | moves a VM to another host ([`HostMigrateRequest`](memvisor_api::HostMigrateRequest)); answers once the destination has taken it and the move has begun |
//! | `GET /metrics` | the host's and every VM's numbers in the OpenMetrics text format (docs/metrics.md); also on `metrics_addr` over TCP |
//!
//! Requests are parsed into a [`HostRequest`] by `memvisor_api` and handled here with one
//! `match`. A refused request gets 400 (404 for an unknown VM, 409 for removing a running one) with
//! `{"error": ...}` and changes nothing.

use std::net::TcpListener;
use std::os::unix::net::UnixListener;

use memvisor_api::server::{error, ok, refuse, serve as serve_socket, serve_tcp, Reply};
use memvisor_api::{parse_metrics_request, HostRequest, VmClient};

use crate::manager::{lock, metrics, Shared};
use crate::moving::{cancel, incoming, migrate};
use crate::registry::Refused;

/// Serves the host API on its own thread.
pub fn serve(listener: UnixListener, host: Shared) -> std::io::Result<()> {
    serve_socket(listener, "host-api", move |method, path, body| -> Reply {
        match HostRequest::parse(method, path, body) {
            Ok(request) => handle(&host, request),
            Err(e) => refuse(&e).into(),
        }
    })
}

/// Serves `GET /metrics` alone on `listener` (the `metrics_addr` of the config), on its own
/// thread.
pub fn serve_metrics(listener: TcpListener, host: Shared) -> std::io::Result<()> {
    serve_tcp(listener, "metrics", move |method, path, _body| -> Reply {
        match parse_metrics_request(method, path) {
            Ok(()) => Reply::metrics(metrics(&host)),
            Err(e) => refuse(&e).into(),
        }
    })
}

fn refused(r: Refused) -> (u16, String) {
    error(r.0, &r.1)
}

/// Does what `request` asks.
pub(crate) fn handle(host: &Shared, request: HostRequest) -> Reply {
    match request {
        HostRequest::Metrics => return Reply::metrics(metrics(host)),
        HostRequest::Info => ok(&lock(host).info()),
        HostRequest::Update(u) => lock(host).update_host(&u).map_or_else(refused, |h| ok(&h)),
        HostRequest::Events { since } => ok(&lock(host).events(since)),
        HostRequest::History { since } => ok(&lock(host).history(since)),
        HostRequest::Vms => ok(&lock(host).vms()),
        HostRequest::Add(spec) => {
            let mut h = lock(host);
            match h.resolve(*spec) {
                Err(e) => refused(e),
                Ok(spec) => h.add(spec).map_or_else(refused, |v| ok(&v)),
            }
        }
        HostRequest::Incoming(req) => incoming(host, *req).map_or_else(refused, |v| ok(&v)),
        HostRequest::Migrate(name, req) => {
            migrate(host, &name, req).map_or_else(refused, |v| ok(&v))
        }
        HostRequest::Vm(name) => lock(host).vm(&name).map_or_else(refused, |v| ok(&v)),
        HostRequest::UpdateVm(name, u) => lock(host)
            .update(&name, &u)
            .map_or_else(refused, |v| ok(&v)),
        HostRequest::Stop(name) => lock(host).stop(&name).map_or_else(refused, |v| ok(&v)),
        HostRequest::Snapshot(name, req) => {
            // Found under the lock, written without it: the VMM pauses its VM for as long as
            // its memory takes to write, and the host's ticks go on meanwhile.
            let target = lock(host).snapshot_target(&name, &req.dir);
            match target {
                Err(r) => refused(r),
                Ok((sock, dir)) => {
                    match VmClient::new(sock).snapshot(&dir.to_string_lossy(), req.stop) {
                        Ok(r) => ok(&r),
                        Err(e) => {
                            let why = e.reason().unwrap_or_else(|| e.to_string());
                            error(400, &format!("vm '{name}': {why}"))
                        }
                    }
                }
            }
        }
        HostRequest::Remove(name) => {
            let moving_here = lock(host).is_incoming(&name);
            if moving_here {
                cancel(host, &name).map_or_else(refused, |v| ok(&v))
            } else {
                lock(host).remove(&name).map_or_else(refused, |v| ok(&v))
            }
        }
    }
    .into()
}
