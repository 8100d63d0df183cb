//! Typed clients of both APIs: [`VmClient`] for a VM's socket (`memvisor run --api-sock`) and
//! [`HostClient`] for a host's (`memvisor host`), one method per request, each answer read into
//! its type. Routes come from [`VmRequest`] and [`HostRequest`], never written here.
//!
//! What goes wrong is a [`ClientError`] whose message is one sentence for an operator: a socket
//! that is not there, one nobody listens on, one this user may not open, a server that does not
//! answer in time, a refusal (with the server's reason), or an answer outside the schema.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use thiserror::Error;

use crate::body::{
    BalloonUpdate, ErrorBody, MemoryUpdate, MigrateRequest, MigrateResult, PoolUpdate,
    ReleaseRequest, ReleaseResult, SnapshotRequest, SnapshotResult,
};
use crate::host::{
    HostEvent, HostInfo, HostMigrateRequest, HostSample, HostUpdate, HostVm, IncomingRequest,
    IncomingVm, PolicyUpdate,
};
use crate::http::{connect, exchange_on, HttpError, Response, CALL_TIMEOUT};
use crate::request::{HostRequest, VmRequest};
use crate::spec::VmSpec;
use crate::stats::VmStats;
use crate::vm::VmInfo;

/// Which API a socket serves, for what an error tells the operator to check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// A VM's socket (`memvisor run --api-sock PATH`).
    Vm,
    /// A host's socket (`memvisor host`, in its `state_dir`).
    Host,
}

impl Api {
    /// "a memvisor VM" or "a memvisor host".
    fn what(self) -> &'static str {
        match self {
            Api::Vm => "a memvisor VM",
            Api::Host => "a memvisor host",
        }
    }

    /// How to start a server of this API.
    fn start(self) -> &'static str {
        match self {
            Api::Vm => "start one with `memvisor run --api-sock PATH`",
            Api::Host => {
                "start one with `memvisor host --config FILE`, whose `state_dir` holds its socket"
            }
        }
    }
}

/// Why a call to an API failed.
#[derive(Debug, Error)]
pub enum ClientError {
    /// The socket file does not exist.
    #[error("no {} is listening at {}: there is no such file: {}", .api.what().trim_start_matches("a "), .sock.display(), .api.start())]
    NoSocket {
        /// The API the socket should serve.
        api: Api,
        /// The socket's path.
        sock: PathBuf,
    },
    /// The socket file exists, but nothing listens on it (connection refused).
    #[error("no {} is listening at {}: the socket file is there but nothing answers on it (a {} that exited leaves it behind): {}", .api.what().trim_start_matches("a "), .sock.display(), .api.what().trim_start_matches("a memvisor "), .api.start())]
    NotListening {
        /// The API the socket should serve.
        api: Api,
        /// The socket's path.
        sock: PathBuf,
    },
    /// This user may not open the socket.
    #[error("cannot open {} (the socket of {}): permission denied: run as a user who may open it", .sock.display(), .api.what())]
    PermissionDenied {
        /// The API the socket should serve.
        api: Api,
        /// The socket's path.
        sock: PathBuf,
    },
    /// The server took the connection but did not take the request or answer it in time.
    #[error("{} at {} did not answer {request} within {} s: it may be stuck or overloaded; try again, or look at its log", .api.what(), .sock.display(), .after.as_secs_f64())]
    TimedOut {
        /// The API the socket serves.
        api: Api,
        /// The socket's path.
        sock: PathBuf,
        /// The request, as `METHOD PATH`.
        request: String,
        /// How long the client waited.
        after: Duration,
    },
    /// Another failure of the connection; `error` says which.
    #[error("cannot talk to {} at {}: {error}", .api.what(), .sock.display())]
    Connection {
        /// The API the socket serves.
        api: Api,
        /// The socket's path.
        sock: PathBuf,
        /// What failed.
        error: String,
    },
    /// The server refused the request; `body` is its answer (`{"error": ...}`).
    #[error("{request} refused ({status}): {body}")]
    Refused {
        /// The request, as `METHOD PATH`.
        request: String,
        /// The answer's HTTP status.
        status: u16,
        /// The answer's body.
        body: String,
    },
    /// The server answered with something outside the API's schema.
    #[error("the answer to {request} does not follow the API schema ({error}): {body}")]
    Schema {
        /// The request, as `METHOD PATH`.
        request: String,
        /// Why it does not parse.
        error: String,
        /// The answer's body.
        body: String,
    },
}

impl ClientError {
    /// The error of a connection to `sock`, an [`Api`] socket, that failed with `e`: each kind
    /// that has a remedy gets its own variant.
    pub fn connecting(api: Api, sock: &Path, e: &std::io::Error) -> ClientError {
        let sock = sock.to_owned();
        match e.kind() {
            ErrorKind::NotFound => ClientError::NoSocket { api, sock },
            ErrorKind::ConnectionRefused => ClientError::NotListening { api, sock },
            ErrorKind::PermissionDenied => ClientError::PermissionDenied { api, sock },
            _ => ClientError::Connection {
                api,
                sock,
                error: e.to_string(),
            },
        }
    }

    /// Whether the server could not be reached or did not answer (rather than answering badly).
    pub fn is_unreachable(&self) -> bool {
        !matches!(
            self,
            ClientError::Refused { .. } | ClientError::Schema { .. }
        )
    }

    /// For a refusal, the server's own reason (its `{"error": ...}`).
    pub fn reason(&self) -> Option<String> {
        match self {
            ClientError::Refused { body, .. } => Some(
                serde_json::from_str::<ErrorBody>(body).map_or_else(|_| body.clone(), |b| b.error),
            ),
            _ => None,
        }
    }
}

/// A socket of `api` and how long a call waits for it.
#[derive(Clone, Debug)]
struct Socket {
    api: Api,
    sock: PathBuf,
    timeout: Duration,
}

impl Socket {
    /// Sends `method path` with `body` and returns the answer, whatever its status.
    fn send(&self, method: &str, path: &str, body: Option<&str>) -> Result<Response, ClientError> {
        let stream = connect(&self.sock, self.timeout)
            .map_err(|e| ClientError::connecting(self.api, &self.sock, &e))?;
        exchange_on(stream, method, path, body).map_err(|e| match e {
            HttpError::Io(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                ClientError::TimedOut {
                    api: self.api,
                    sock: self.sock.clone(),
                    request: format!("{method} {path}"),
                    after: self.timeout,
                }
            }
            e => ClientError::Connection {
                api: self.api,
                sock: self.sock.clone(),
                error: e.to_string(),
            },
        })
    }

    /// Sends `method path` with `body`; a 200 answer's body, or the refusal.
    fn ok(&self, method: &str, path: &str, body: Option<&str>) -> Result<String, ClientError> {
        let r = self.send(method, path, body)?;
        if r.status == 200 {
            Ok(r.body)
        } else {
            Err(ClientError::Refused {
                request: format!("{method} {path}"),
                status: r.status,
                body: r.body,
            })
        }
    }

    /// Sends `method path` with `body` and reads a 200 answer into a `T`.
    fn typed<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> Result<T, ClientError> {
        let text = self.ok(method, path, body)?;
        serde_json::from_str(&text).map_err(|e| ClientError::Schema {
            request: format!("{method} {path}"),
            error: e.to_string(),
            body: text,
        })
    }
}

/// A client of a VM's API socket (`memvisor run --api-sock PATH`).
#[derive(Clone, Debug)]
pub struct VmClient(Socket);

impl VmClient {
    /// A client of the VM whose socket is `sock`, waiting at most [`CALL_TIMEOUT`] for each
    /// answer.
    pub fn new(sock: impl Into<PathBuf>) -> VmClient {
        VmClient(Socket {
            api: Api::Vm,
            sock: sock.into(),
            timeout: CALL_TIMEOUT,
        })
    }

    /// The same client, waiting at most `timeout` without progress.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> VmClient {
        self.0.timeout = timeout;
        self
    }

    /// Its socket.
    pub fn sock(&self) -> &Path {
        &self.0.sock
    }

    /// Sends `request` and returns the answer whatever its status (for checking the server's
    /// refusals); only a failed connection is an error.
    pub fn send(&self, request: &VmRequest) -> Result<Response, ClientError> {
        self.0
            .send(request.method(), &request.path(), request.body().as_deref())
    }

    fn call<T: DeserializeOwned>(&self, request: &VmRequest) -> Result<T, ClientError> {
        self.0
            .typed(request.method(), &request.path(), request.body().as_deref())
    }

    /// `GET /vm`: its configuration and state.
    pub fn info(&self) -> Result<VmInfo, ClientError> {
        self.call(&VmRequest::Info)
    }

    /// `GET /stats`: every counter.
    pub fn stats(&self) -> Result<VmStats, ClientError> {
        self.call(&VmRequest::Stats)
    }

    /// `GET /metrics`: the counters in the OpenMetrics text format.
    pub fn metrics(&self) -> Result<String, ClientError> {
        let r = VmRequest::Metrics;
        self.0.ok(r.method(), &r.path(), None)
    }

    /// `PUT /memory`: sets the resident-memory limit (`None` removes it).
    pub fn set_limit(&self, limit: Option<u64>) -> Result<VmInfo, ClientError> {
        self.call(&VmRequest::SetLimit(MemoryUpdate { limit }))
    }

    /// `PUT /memory/release`: releases up to `pages` clean pages now, without the guest's vCPUs.
    pub fn release(&self, pages: u64) -> Result<ReleaseResult, ClientError> {
        self.release_with(ReleaseRequest {
            pages,
            cold_only: false,
        })
    }

    /// `PUT /memory/release` with every field of the request.
    pub fn release_with(&self, r: ReleaseRequest) -> Result<ReleaseResult, ClientError> {
        self.call(&VmRequest::Release(r))
    }

    /// `PUT /pool`: resizes the host-memory pool.
    pub fn set_pool(&self, bytes: u64) -> Result<VmInfo, ClientError> {
        self.call(&VmRequest::SetPool(PoolUpdate { bytes }))
    }

    /// `PUT /balloon`: sets the balloon's size in bytes.
    pub fn set_balloon(&self, target: u64) -> Result<VmInfo, ClientError> {
        self.call(&VmRequest::SetBalloon(BalloonUpdate { target }))
    }

    /// `PUT /vm/pause`: parks every vCPU.
    pub fn pause(&self) -> Result<VmInfo, ClientError> {
        self.call(&VmRequest::Pause)
    }

    /// `PUT /vm/resume`: resumes a paused VM.
    pub fn resume(&self) -> Result<VmInfo, ClientError> {
        self.call(&VmRequest::Resume)
    }

    /// `PUT /vm/snapshot`: writes the VM to `dir`, then lets it run on (or ends it, `stop`).
    pub fn snapshot(&self, dir: &str, stop: bool) -> Result<SnapshotResult, ClientError> {
        self.call(&VmRequest::Snapshot(SnapshotRequest {
            dir: dir.to_owned(),
            stop,
        }))
    }

    /// `PUT /vm/migrate`: moves the VM to the destination at `req.to`; answers once the
    /// destination has every page (this VM then ends). With `recover`, resumes one whose
    /// connection broke in post-copy.
    pub fn migrate(&self, req: MigrateRequest) -> Result<MigrateResult, ClientError> {
        self.call(&VmRequest::Migrate(req))
    }
}

/// A client of a host's API socket (`memvisor host`, `api_sock` in its `state_dir`).
#[derive(Clone, Debug)]
pub struct HostClient(Socket);

impl HostClient {
    /// A client of the host whose socket is `sock`, waiting at most [`CALL_TIMEOUT`] for each
    /// answer.
    pub fn new(sock: impl Into<PathBuf>) -> HostClient {
        HostClient(Socket {
            api: Api::Host,
            sock: sock.into(),
            timeout: CALL_TIMEOUT,
        })
    }

    /// The same client, waiting at most `timeout` without progress.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> HostClient {
        self.0.timeout = timeout;
        self
    }

    /// Its socket.
    pub fn sock(&self) -> &Path {
        &self.0.sock
    }

    /// Sends `request` and returns the answer whatever its status (for checking the server's
    /// refusals); only a failed connection is an error.
    pub fn send(&self, request: &HostRequest) -> Result<Response, ClientError> {
        self.0
            .send(request.method(), &request.path(), request.body().as_deref())
    }

    fn call<T: DeserializeOwned>(&self, request: &HostRequest) -> Result<T, ClientError> {
        self.0
            .typed(request.method(), &request.path(), request.body().as_deref())
    }

    /// `GET /host`: the budget, free memory and its state, reservations.
    pub fn info(&self) -> Result<HostInfo, ClientError> {
        self.call(&HostRequest::Info)
    }

    /// `PATCH /host`: changes the idle memory tax.
    pub fn update(&self, update: HostUpdate) -> Result<HostInfo, ClientError> {
        self.call(&HostRequest::Update(update))
    }

    /// `GET /events?since=S`: what happened after `since` seconds.
    pub fn events(&self, since: f64) -> Result<Vec<HostEvent>, ClientError> {
        self.call(&HostRequest::Events { since })
    }

    /// `GET /history?since=S`: each tick after `since` seconds.
    pub fn history(&self, since: f64) -> Result<Vec<HostSample>, ClientError> {
        self.call(&HostRequest::History { since })
    }

    /// `GET /vms`: every VM.
    pub fn vms(&self) -> Result<Vec<HostVm>, ClientError> {
        self.call(&HostRequest::Vms)
    }

    /// `POST /vms`: adds a VM (admission applies).
    pub fn add(&self, spec: &VmSpec) -> Result<HostVm, ClientError> {
        self.call(&HostRequest::Add(Box::new(spec.clone())))
    }

    /// `GET /vms/NAME`: one VM.
    pub fn vm(&self, name: &str) -> Result<HostVm, ClientError> {
        self.call(&HostRequest::Vm(name.to_owned()))
    }

    /// `PATCH /vms/NAME`: changes its `min`, `max` or `shares`.
    pub fn update_vm(&self, name: &str, update: PolicyUpdate) -> Result<HostVm, ClientError> {
        self.call(&HostRequest::UpdateVm(name.to_owned(), update))
    }

    /// `PUT /vms/NAME/stop`: stops it.
    pub fn stop(&self, name: &str) -> Result<HostVm, ClientError> {
        self.call(&HostRequest::Stop(name.to_owned()))
    }

    /// `PUT /vms/NAME/snapshot`: writes the VM to `STATE/NAME/snapshots/DIR`, `DIR` one name,
    /// then lets it run on (or ends it, `stop`); the answer's `dir` is where it landed.
    pub fn snapshot(
        &self,
        name: &str,
        dir: &str,
        stop: bool,
    ) -> Result<SnapshotResult, ClientError> {
        self.call(&HostRequest::Snapshot(
            name.to_owned(),
            SnapshotRequest {
                dir: dir.to_owned(),
                stop,
            },
        ))
    }

    /// `DELETE /vms/NAME`: forgets a VM that ended or was refused.
    pub fn remove(&self, name: &str) -> Result<HostVm, ClientError> {
        self.call(&HostRequest::Remove(name.to_owned()))
    }

    /// `POST /vms/incoming`: asks this host to take a VM moving here (admission applies); the
    /// address and token its VMM waits on.
    pub fn incoming(&self, request: IncomingRequest) -> Result<IncomingVm, ClientError> {
        self.call(&HostRequest::Incoming(Box::new(request)))
    }

    /// `POST /vms/NAME/migrate`: moves a VM to another host; answers once the destination has
    /// admitted it and the move has begun (state `migrating`).
    pub fn migrate(&self, name: &str, request: HostMigrateRequest) -> Result<HostVm, ClientError> {
        self.call(&HostRequest::Migrate(name.to_owned(), request))
    }

    /// `GET /metrics`: the host's and every VM's numbers in the OpenMetrics text format.
    pub fn metrics(&self) -> Result<String, ClientError> {
        let r = HostRequest::Metrics;
        self.0.ok(r.method(), &r.path(), None)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixListener;

    use super::*;

    #[test]
    fn a_missing_socket_says_so_and_how_to_start_a_host() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("host.sock");
        let e = HostClient::new(&sock).info().unwrap_err();
        assert!(matches!(e, ClientError::NoSocket { .. }), "{e:?}");
        let m = e.to_string();
        assert!(
            m.contains("no such file") && m.contains("memvisor host --config FILE"),
            "{m}"
        );
        assert!(m.contains(&sock.display().to_string()), "{m}");
        let e = VmClient::new(&sock).stats().unwrap_err();
        assert!(
            e.to_string().contains("memvisor run --api-sock PATH"),
            "{e}"
        );
    }

    #[test]
    fn a_socket_nobody_listens_on_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("vm.sock");
        drop(UnixListener::bind(&sock).unwrap());
        let e = VmClient::new(&sock).info().unwrap_err();
        assert!(matches!(e, ClientError::NotListening { .. }), "{e:?}");
        let m = e.to_string();
        assert!(
            m.contains("nothing answers") && m.contains("a VM that exited"),
            "{m}"
        );
        let e = HostClient::new(&sock).vms().unwrap_err();
        assert!(e.to_string().contains("a host that exited"), "{e}");
        assert!(e.is_unreachable());
    }

    #[test]
    fn each_connection_error_kind_has_its_own_message() {
        let sock = Path::new("host.state/host.sock");
        let kinds = [
            ErrorKind::NotFound,
            ErrorKind::ConnectionRefused,
            ErrorKind::PermissionDenied,
            ErrorKind::Other,
        ];
        let messages: Vec<String> = kinds
            .into_iter()
            .map(|k| ClientError::connecting(Api::Host, sock, &k.into()).to_string())
            .collect();
        assert!(messages[2].contains("permission denied: run as a user who may open it"));
        for (i, m) in messages.iter().enumerate() {
            assert!(m.contains("host.state/host.sock"), "{m}");
            assert!(!m.contains('\n'), "{m}");
            assert!(messages[..i].iter().all(|o| o != m), "{m}");
        }
    }

    #[test]
    fn a_server_that_does_not_answer_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("vm.sock");
        // Listening, never accepting: the request sits in the backlog unanswered.
        let _listener = UnixListener::bind(&sock).unwrap();
        let e = VmClient::new(&sock)
            .with_timeout(Duration::from_millis(50))
            .stats()
            .unwrap_err();
        assert!(matches!(e, ClientError::TimedOut { .. }), "{e:?}");
        assert!(e.to_string().contains("did not answer GET /stats"), "{e}");
    }
}
