//! Every request of both APIs as a value: [`VmRequest`] for a VM's socket, [`HostRequest`] for
//! the host's, and the metrics port's one request ([`parse_metrics_request`]). Each is parsed
//! from (method, path, body) by one function, and spelled back into them for a client by
//! [`VmRequest::method`], [`VmRequest::path`] and [`VmRequest::body`] (the same for the host),
//! so the routes are written here and nowhere else. A server `match`es the parsed value; what
//! does not parse is a [`RequestError`] carrying the status (400, 404 or 405) and the sentence
//! to answer with.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::body::{
    BalloonUpdate, MemoryUpdate, MigrateRequest, PoolUpdate, ReleaseRequest, SnapshotRequest,
};
use crate::host::{HostMigrateRequest, HostUpdate, IncomingRequest, PolicyUpdate};
use crate::spec::VmSpec;

/// A request that names no route, uses the wrong method, or carries a body or query that does
/// not parse: the status to answer with (400, 404 or 405) and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RequestError {
    /// The HTTP status of the answer.
    pub status: u16,
    /// The sentence the answer's `error` carries.
    pub message: String,
}

impl RequestError {
    fn new(status: u16, message: impl Into<String>) -> RequestError {
        RequestError {
            status,
            message: message.into(),
        }
    }
}

/// A request body read as a `T`, or the 400 that says why not.
pub fn parse_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, RequestError> {
    serde_json::from_slice(body).map_err(|e| RequestError::new(400, format!("bad JSON body: {e}")))
}

fn json(v: &impl Serialize) -> Option<String> {
    // These types serialize to JSON whatever their values.
    Some(serde_json::to_string(v).unwrap_or_default())
}

/// A request to a VM's API socket (`memvisor run --api-sock`, `docs/openapi.json`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmRequest {
    /// `GET /vm`: configuration and state ([`VmInfo`](crate::VmInfo)).
    Info,
    /// `GET /stats`: every counter ([`VmStats`](crate::VmStats)).
    Stats,
    /// `GET /metrics`: the same numbers in the OpenMetrics text format.
    Metrics,
    /// `PUT /memory`: the resident-memory limit.
    SetLimit(MemoryUpdate),
    /// `PUT /memory/release`: release clean pages now ([`ReleaseResult`](crate::ReleaseResult)).
    Release(ReleaseRequest),
    /// `PUT /pool`: the host-memory pool's size.
    SetPool(PoolUpdate),
    /// `PUT /balloon`: the balloon's size.
    SetBalloon(BalloonUpdate),
    /// `PUT /vm/pause`.
    Pause,
    /// `PUT /vm/resume`.
    Resume,
    /// `PUT /vm/snapshot`: write the VM to a directory ([`SnapshotResult`](crate::SnapshotResult)).
    Snapshot(SnapshotRequest),
    /// `PUT /vm/migrate`: move the VM to another memvisor ([`MigrateResult`](crate::MigrateResult)).
    Migrate(MigrateRequest),
}

impl VmRequest {
    /// The request `method path` with `body`, or why it is none.
    pub fn parse(method: &str, path: &str, body: &[u8]) -> Result<VmRequest, RequestError> {
        Ok(match (method, path) {
            ("GET", "/vm") => VmRequest::Info,
            ("GET", "/stats") => VmRequest::Stats,
            ("GET", "/metrics") => VmRequest::Metrics,
            ("PUT", "/memory") => VmRequest::SetLimit(parse_body(body)?),
            ("PUT", "/memory/release") => VmRequest::Release(parse_body(body)?),
            ("PUT", "/pool") => VmRequest::SetPool(parse_body(body)?),
            ("PUT", "/balloon") => VmRequest::SetBalloon(parse_body(body)?),
            ("PUT", "/vm/pause") => VmRequest::Pause,
            ("PUT", "/vm/resume") => VmRequest::Resume,
            ("PUT", "/vm/snapshot") => VmRequest::Snapshot(parse_body(body)?),
            ("PUT", "/vm/migrate") => VmRequest::Migrate(parse_body(body)?),
            (_, "/vm" | "/stats" | "/metrics") => return Err(RequestError::new(405, "use GET")),
            (
                _,
                "/memory" | "/memory/release" | "/pool" | "/balloon" | "/vm/pause" | "/vm/resume"
                | "/vm/snapshot" | "/vm/migrate",
            ) => return Err(RequestError::new(405, "use PUT")),
            _ => return Err(RequestError::new(404, format!("no such path {path}"))),
        })
    }

    /// Its HTTP method.
    pub fn method(&self) -> &'static str {
        match self {
            VmRequest::Info | VmRequest::Stats | VmRequest::Metrics => "GET",
            _ => "PUT",
        }
    }

    /// Its path.
    pub fn path(&self) -> String {
        match self {
            VmRequest::Info => "/vm",
            VmRequest::Stats => "/stats",
            VmRequest::Metrics => "/metrics",
            VmRequest::SetLimit(_) => "/memory",
            VmRequest::Release(_) => "/memory/release",
            VmRequest::SetPool(_) => "/pool",
            VmRequest::SetBalloon(_) => "/balloon",
            VmRequest::Pause => "/vm/pause",
            VmRequest::Resume => "/vm/resume",
            VmRequest::Snapshot(_) => "/vm/snapshot",
            VmRequest::Migrate(_) => "/vm/migrate",
        }
        .to_owned()
    }

    /// Its JSON body, if it has one.
    pub fn body(&self) -> Option<String> {
        match self {
            VmRequest::SetLimit(u) => json(u),
            VmRequest::Release(u) => json(u),
            VmRequest::SetPool(u) => json(u),
            VmRequest::SetBalloon(u) => json(u),
            VmRequest::Snapshot(u) => json(u),
            VmRequest::Migrate(u) => json(u),
            _ => None,
        }
    }
}

/// A request to the host's API socket (`memvisor host`, `docs/host-openapi.json`).
#[derive(Clone, Debug, PartialEq)]
pub enum HostRequest {
    /// `GET /host` ([`HostInfo`](crate::HostInfo)).
    Info,
    /// `PATCH /host`: the idle memory tax.
    Update(HostUpdate),
    /// `GET /events?since=S`: what happened after `since` seconds.
    Events {
        /// Seconds since the host started (0: everything kept).
        since: f64,
    },
    /// `GET /history?since=S`: each tick after `since` seconds.
    History {
        /// Seconds since the host started (0: everything kept).
        since: f64,
    },
    /// `GET /vms`: every VM.
    Vms,
    /// `POST /vms`: adds a VM.
    Add(Box<VmSpec>),
    /// `GET /vms/NAME`: one VM.
    Vm(String),
    /// `PATCH /vms/NAME`: changes its policy.
    UpdateVm(String, PolicyUpdate),
    /// `PUT /vms/NAME/stop`: stops it.
    Stop(String),
    /// `PUT /vms/NAME/snapshot`: writes it to `STATE/NAME/snapshots/DIR`, `DIR` one name
    /// ([`SnapshotResult`](crate::SnapshotResult)).
    Snapshot(String, SnapshotRequest),
    /// `DELETE /vms/NAME`: forgets a VM that ended or was refused.
    Remove(String),
    /// `GET /metrics`: the host's and every VM's numbers in the OpenMetrics text format.
    Metrics,
    /// `POST /vms/incoming`: takes a VM moving here from another host.
    Incoming(Box<IncomingRequest>),
    /// `POST /vms/NAME/migrate`: moves a VM to another host.
    Migrate(String, HostMigrateRequest),
}

/// `since=SECONDS`, the one query `/events` and `/history` take (0 when absent).
fn since(query: Option<&str>) -> Result<f64, RequestError> {
    match query.map(|q| q.split_once('=')) {
        None => Ok(0.0),
        Some(Some(("since", v))) => {
            v.parse::<f64>()
                .ok()
                .filter(|s| s.is_finite())
                .ok_or_else(|| {
                    RequestError::new(400, format!("since={v}: give seconds, e.g. since=12.5"))
                })
        }
        Some(_) => Err(RequestError::new(
            400,
            format!(
                "unknown query '{}'; expected since=SECONDS",
                query.unwrap_or("")
            ),
        )),
    }
}

impl HostRequest {
    /// The request `method path` with `body`, or why it is none.
    pub fn parse(method: &str, path: &str, body: &[u8]) -> Result<HostRequest, RequestError> {
        match (method, path) {
            ("GET", "/metrics") => return Ok(HostRequest::Metrics),
            (_, "/metrics") => return Err(RequestError::new(405, "use GET")),
            _ => {}
        }
        let (path, query) = match path.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path, None),
        };
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let name = |n: &str| n.to_owned();
        Ok(match (method, parts.as_slice()) {
            ("GET", ["host"]) => HostRequest::Info,
            ("PATCH", ["host"]) => HostRequest::Update(parse_body(body)?),
            ("GET", ["events"]) => HostRequest::Events {
                since: since(query)?,
            },
            ("GET", ["history"]) => HostRequest::History {
                since: since(query)?,
            },
            ("GET", ["vms"]) => HostRequest::Vms,
            ("POST", ["vms"]) => HostRequest::Add(Box::new(parse_body(body)?)),
            ("POST", ["vms", "incoming"]) => HostRequest::Incoming(Box::new(parse_body(body)?)),
            ("POST", ["vms", n, "migrate"]) => HostRequest::Migrate(name(n), parse_body(body)?),
            ("GET", ["vms", n]) => HostRequest::Vm(name(n)),
            ("PATCH", ["vms", n]) => HostRequest::UpdateVm(name(n), parse_body(body)?),
            ("PUT", ["vms", n, "stop"]) => HostRequest::Stop(name(n)),
            ("PUT", ["vms", n, "snapshot"]) => HostRequest::Snapshot(name(n), parse_body(body)?),
            ("DELETE", ["vms", n]) => HostRequest::Remove(name(n)),
            (
                _,
                ["host"]
                | ["events"]
                | ["history"]
                | ["vms"]
                | ["vms", _]
                | ["vms", _, "stop" | "snapshot"]
                | ["vms", _, "migrate"],
            ) => {
                return Err(RequestError::new(
                    405,
                    format!("{method} is not allowed on {path}"),
                ))
            }
            _ => return Err(RequestError::new(404, format!("no such path {path}"))),
        })
    }

    /// Whether it only reads (what the live web page may pass on): the host, the VMs, the
    /// history and the events.
    pub fn is_page_read(&self) -> bool {
        matches!(
            self,
            HostRequest::Info
                | HostRequest::Vms
                | HostRequest::Events { .. }
                | HostRequest::History { .. }
        )
    }

    /// Its HTTP method.
    pub fn method(&self) -> &'static str {
        match self {
            HostRequest::Update(_) | HostRequest::UpdateVm(..) => "PATCH",
            HostRequest::Add(_) | HostRequest::Incoming(_) | HostRequest::Migrate(..) => "POST",
            HostRequest::Stop(_) | HostRequest::Snapshot(..) => "PUT",
            HostRequest::Remove(_) => "DELETE",
            _ => "GET",
        }
    }

    /// Its path, with the query.
    pub fn path(&self) -> String {
        let since = |s: f64| {
            if s == 0.0 {
                String::new()
            } else {
                format!("?since={s}")
            }
        };
        match self {
            HostRequest::Info | HostRequest::Update(_) => "/host".to_owned(),
            HostRequest::Events { since: s } => format!("/events{}", since(*s)),
            HostRequest::History { since: s } => format!("/history{}", since(*s)),
            HostRequest::Vms | HostRequest::Add(_) => "/vms".to_owned(),
            HostRequest::Vm(n) | HostRequest::UpdateVm(n, _) | HostRequest::Remove(n) => {
                format!("/vms/{n}")
            }
            HostRequest::Stop(n) => format!("/vms/{n}/stop"),
            HostRequest::Snapshot(n, _) => format!("/vms/{n}/snapshot"),
            HostRequest::Incoming(_) => "/vms/incoming".to_owned(),
            HostRequest::Migrate(n, _) => format!("/vms/{n}/migrate"),
            HostRequest::Metrics => "/metrics".to_owned(),
        }
    }

    /// Its JSON body, if it has one.
    pub fn body(&self) -> Option<String> {
        match self {
            HostRequest::Update(u) => json(u),
            HostRequest::Add(s) => json(s),
            HostRequest::UpdateVm(_, u) => json(u),
            HostRequest::Snapshot(_, s) => json(s),
            HostRequest::Incoming(r) => json(r),
            HostRequest::Migrate(_, r) => json(r),
            _ => None,
        }
    }
}

/// The one request of the host's `metrics_addr` port, `GET /metrics` (a query is ignored), or
/// why it is not that.
pub fn parse_metrics_request(method: &str, path: &str) -> Result<(), RequestError> {
    match (method, path.split_once('?').map_or(path, |(p, _)| p)) {
        ("GET", "/metrics") => Ok(()),
        (_, "/metrics") => Err(RequestError::new(405, "use GET")),
        _ => Err(RequestError::new(
            404,
            format!("no such path {path}; metrics are at /metrics"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_requests_spell_back_into_what_parses_to_them() {
        for r in [
            VmRequest::Info,
            VmRequest::Stats,
            VmRequest::Metrics,
            VmRequest::SetLimit(MemoryUpdate { limit: None }),
            VmRequest::SetLimit(MemoryUpdate {
                limit: Some(64 << 20),
            }),
            VmRequest::SetPool(PoolUpdate { bytes: 1 << 20 }),
            VmRequest::SetBalloon(BalloonUpdate { target: 4096 }),
            VmRequest::Release(ReleaseRequest {
                pages: 10_000,
                cold_only: false,
            }),
            VmRequest::Release(ReleaseRequest {
                pages: 1,
                cold_only: true,
            }),
            VmRequest::Pause,
            VmRequest::Resume,
            VmRequest::Snapshot(SnapshotRequest {
                dir: "/tmp/snap".into(),
                stop: true,
            }),
            VmRequest::Migrate(MigrateRequest {
                to: "127.0.0.1:4444".into(),
                token: "t".into(),
                recover: true,
                precopy_rounds: 2,
            }),
        ] {
            let body = r.body().unwrap_or_default();
            assert_eq!(
                VmRequest::parse(r.method(), &r.path(), body.as_bytes()),
                Ok(r)
            );
        }
    }

    #[test]
    fn host_requests_spell_back_into_what_parses_to_them() {
        for r in [
            HostRequest::Info,
            HostRequest::Update(HostUpdate {
                idle_tax: Some(0.5),
                balancing: None,
            }),
            HostRequest::Update(HostUpdate {
                idle_tax: None,
                balancing: Some(crate::host::Balancing::Hd2),
            }),
            HostRequest::Events { since: 0.0 },
            HostRequest::History { since: 12.5 },
            HostRequest::Vms,
            HostRequest::Vm("a".into()),
            HostRequest::UpdateVm("a".into(), PolicyUpdate::default()),
            HostRequest::Stop("a".into()),
            HostRequest::Snapshot(
                "a".into(),
                SnapshotRequest {
                    dir: "s1".into(),
                    stop: false,
                },
            ),
            HostRequest::Remove("a".into()),
            HostRequest::Metrics,
            HostRequest::Migrate(
                "a".into(),
                HostMigrateRequest {
                    to: Some("/run/b/host.sock".into()),
                    precopy_rounds: 2,
                    ..HostMigrateRequest::default()
                },
            ),
        ] {
            let body = r.body().unwrap_or_default();
            assert_eq!(
                HostRequest::parse(r.method(), &r.path(), body.as_bytes()),
                Ok(r)
            );
        }
    }

    #[test]
    fn what_is_not_a_request_gets_its_status() {
        let vm = |m, p, b: &str| VmRequest::parse(m, p, b.as_bytes()).unwrap_err().status;
        assert_eq!(vm("GET", "/nope", ""), 404);
        assert_eq!(vm("DELETE", "/vm", ""), 405);
        assert_eq!(vm("GET", "/memory", ""), 405);
        assert_eq!(vm("PUT", "/memory", "{}"), 400);
        assert_eq!(vm("PUT", "/balloon", "{\"target\": 1, \"x\": 2}"), 400);
        let host = |m, p, b: &str| HostRequest::parse(m, p, b.as_bytes()).unwrap_err().status;
        assert_eq!(host("GET", "/nope", ""), 404);
        assert_eq!(host("DELETE", "/vms", ""), 405);
        assert_eq!(host("POST", "/metrics", ""), 405);
        assert_eq!(host("GET", "/events?since=x", ""), 400);
        assert_eq!(host("GET", "/history?until=1", ""), 400);
        assert_eq!(host("POST", "/vms", "{"), 400);
        assert_eq!(host("GET", "/vms/a/snapshot", ""), 405);
        assert_eq!(host("PUT", "/vms/a/snapshot", "{}"), 400);
        assert_eq!(parse_metrics_request("GET", "/metrics?x"), Ok(()));
        assert_eq!(
            parse_metrics_request("PUT", "/metrics").unwrap_err().status,
            405
        );
        assert_eq!(parse_metrics_request("GET", "/").unwrap_err().status, 404);
    }
}
