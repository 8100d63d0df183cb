//! The host API: HTTP/JSON on a Unix socket, one request per connection (`docs/host-openapi.json`).
//!
//! | request | does |
//! |---|---|
//! | `GET /host` | the budget, free memory and state, reservations (`HostInfo`) |
//! | `PATCH /host` | changes the idle memory tax ([`HostUpdate`]) |
//! | `GET /events?since=S` | what happened after S seconds: admissions, refusals, pauses, exits, free-state changes |
//! | `GET /history?since=S` | each tick after S seconds: free memory and state, each VM's target, resident, active, balloon, swapped, limit |
//! | `GET /vms` | every VM: policy, target, allocation, active estimate, balloon, swap, state |
//! | `POST /vms` | adds a VM ([`VmSpec`]); admission applies |
//! | `GET /vms/NAME` | one VM |
//! | `PATCH /vms/NAME` | changes its `min`, `max` or `shares` ([`PolicyUpdate`]) |
//! | `PUT /vms/NAME/stop` | stops it (SIGTERM to its VMM) |
//! | `DELETE /vms/NAME` | forgets a VM that ended or was refused (409 while it runs) |
//! | `GET /metrics` | the host's and every VM's numbers in the OpenMetrics text format (docs/metrics.md); also on `metrics_addr` over TCP |
//!
//! A refused request gets 400 (404 for an unknown VM, 409 for removing a running one) with
//! `{"error": ...}` and changes nothing.

use std::net::TcpListener;
use std::os::unix::net::UnixListener;

use memvisor_api::server::{error, ok, parse, serve as serve_socket, serve_tcp, Reply};
use memvisor_api::{HostUpdate, PolicyUpdate, VmSpec};

use crate::config::resolve_paths;
use crate::manager::{lock, metrics, Refused, Shared};

/// Serves the host API on its own thread.
pub fn serve(listener: UnixListener, host: Shared) -> std::io::Result<()> {
    serve_socket(listener, "host-api", move |method, path, body| -> Reply {
        match (method, path) {
            ("GET", "/metrics") => Reply::metrics(metrics(&host)),
            (_, "/metrics") => error(405, "use GET").into(),
            _ => handle(&host, method, path, body).into(),
        }
    })
}

/// Serves `GET /metrics` alone on `listener` (the `metrics_addr` of the config), on its own
/// thread.
pub fn serve_metrics(listener: TcpListener, host: Shared) -> std::io::Result<()> {
    serve_tcp(listener, "metrics", move |method, path, _body| -> Reply {
        match (method, path.split_once('?').map_or(path, |(p, _)| p)) {
            ("GET", "/metrics") => Reply::metrics(metrics(&host)),
            (_, "/metrics") => error(405, "use GET").into(),
            _ => error(
                404,
                &format!("no such path {path}; metrics are at /metrics"),
            )
            .into(),
        }
    })
}

fn refused(r: Refused) -> (u16, String) {
    error(r.0, &r.1)
}

/// `since=SECONDS`, the one query these paths take (0 when absent); an error answer when it
/// does not parse.
fn since(query: Option<&str>) -> Result<f64, (u16, String)> {
    match query.map(|q| q.split_once('=')) {
        None => Ok(0.0),
        Some(Some(("since", v))) => v
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite())
            .ok_or_else(|| error(400, &format!("since={v}: give seconds, e.g. since=12.5"))),
        Some(_) => Err(error(
            400,
            &format!(
                "unknown query '{}'; expected since=SECONDS",
                query.unwrap_or("")
            ),
        )),
    }
}

pub(crate) fn handle(host: &Shared, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    let (path, query) = match path.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path, None),
    };
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (method, parts.as_slice()) {
        ("GET", ["host"]) => ok(&lock(host).info()),
        ("PATCH", ["host"]) => match parse::<HostUpdate>(body) {
            Err(e) => e,
            Ok(u) => lock(host).update_host(&u).map_or_else(refused, |h| ok(&h)),
        },
        ("GET", ["events"]) => match since(query) {
            Ok(t) => ok(&lock(host).events(t)),
            Err(e) => e,
        },
        ("GET", ["history"]) => match since(query) {
            Ok(t) => ok(&lock(host).history(t)),
            Err(e) => e,
        },
        ("GET", ["vms"]) => ok(&lock(host).vms()),
        ("POST", ["vms"]) => {
            let spec = match parse::<VmSpec>(body) {
                Ok(s) => s,
                Err(e) => return e,
            };
            let mut h = lock(host);
            let base = h
                .config()
                .path
                .parent()
                .map(std::path::Path::to_path_buf)
                .unwrap_or_default();
            match resolve_paths(spec, &base) {
                Err(e) => error(400, &e),
                Ok(spec) => h.add(spec).map_or_else(refused, |v| ok(&v)),
            }
        }
        ("GET", ["vms", name]) => lock(host).vm(name).map_or_else(refused, |v| ok(&v)),
        ("PATCH", ["vms", name]) => match parse::<PolicyUpdate>(body) {
            Err(e) => e,
            Ok(u) => lock(host).update(name, &u).map_or_else(refused, |v| ok(&v)),
        },
        ("PUT", ["vms", name, "stop"]) => lock(host).stop(name).map_or_else(refused, |v| ok(&v)),
        ("DELETE", ["vms", name]) => lock(host).remove(name).map_or_else(refused, |v| ok(&v)),
        (_, ["host"] | ["events"] | ["history"] | ["vms"] | ["vms", _] | ["vms", _, "stop"]) => {
            error(405, &format!("{method} is not allowed on {path}"))
        }
        _ => error(404, &format!("no such path {path}")),
    }
}
