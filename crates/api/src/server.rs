//! The server side of a control socket, shared by the VMM's API and the host manager's: binding
//! the Unix socket, one thread answering one request per connection, and JSON answers in the
//! shape every client expects (a type of this crate, or [`ErrorBody`] with the status). The
//! host's metrics port is served the same way over TCP ([`serve_tcp`]).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use crate::body::ErrorBody;
use crate::http::{read_request, write_response_as};
use crate::sockpath::reachable;

/// How long the server waits for a request once a client has connected.
const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The mode of a socket [`bind`] makes: its owner's alone.
pub const SOCKET_MODE: u32 = 0o600;

/// Binds the socket at `path`. A stale socket file (nobody listening) is replaced; a live one is
/// an error. Clients that connect before [`serve`] starts wait in the listen queue.
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    if path.exists() {
        if UnixStream::connect(reachable(path)?.path).is_ok() {
            return Err(std::io::Error::other(format!(
                "{} is served by another process",
                path.display()
            )));
        }
        std::fs::remove_file(path)?;
    }
    // Bound under a temporary name and renamed into place once listening: a client that sees
    // the socket file can connect (between bind and listen, a connect is refused).
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let listener = UnixListener::bind(reachable(&tmp)?.path)?;
    // Only its owner may connect (connecting takes write permission), whatever the umask: the
    // API pauses, resizes and stops the VM.
    if let Err(e) = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(SOCKET_MODE)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(listener)
}

/// An answer: its status, media type and body, and what to do once it is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
    /// Run by the serving thread once the answer is written, for
    /// a request whose last step ends the process that answers it: `PUT /vm/snapshot` with
    /// `stop` must not lose its answer to the VMM's exit.
    pub then: Option<Then>,
}

/// What a [`Reply`] does once written.
#[derive(Clone)]
pub struct Then(pub std::sync::Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for Then {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Then(..)")
    }
}

/// Two answers are the same whatever they do next: what they do is no part of what they say.
impl PartialEq for Then {
    fn eq(&self, _: &Then) -> bool {
        true
    }
}

impl Eq for Then {}

/// The media type of every answer but the metrics.
pub const JSON: &str = "application/json";

impl From<(u16, String)> for Reply {
    /// A JSON answer.
    fn from((status, body): (u16, String)) -> Reply {
        Reply {
            status,
            content_type: JSON,
            body,
            then: None,
        }
    }
}

impl Reply {
    /// A 200 answer to `GET /metrics`.
    pub fn metrics(text: String) -> Reply {
        Reply {
            status: 200,
            content_type: crate::metrics::CONTENT_TYPE,
            body: text,
            then: None,
        }
    }
}

/// Reads one request from `s` and answers it. Public only for the fuzz targets in `fuzz/`,
/// which drive it with in-memory streams.
#[doc(hidden)]
pub fn answer<S, F, R>(s: &mut S, handle: &F)
where
    S: Read + Write,
    F: Fn(&str, &str, &[u8]) -> R,
    R: Into<Reply>,
{
    let reply = match read_request(s) {
        Ok(req) => handle(&req.method, &req.path, &req.body).into(),
        Err(e) => error(400, &e.to_string()).into(),
    };
    if let Err(e) = write_response_as(s, reply.status, reply.content_type, reply.body.as_bytes()) {
        tracing::debug!("api: cannot answer: {e}");
    }
    if let Some(Then(then)) = reply.then {
        // The client is waiting for the answer just written; what comes after it is not. Woken
        // on a host whose cores are busy (vCPUs that poll), the client otherwise queued behind
        // this thread's work for a time slice: after an instant release of 10,000 pages, whose
        // bookkeeping follows here, the caller had its answer 2.2 ms after it was written
        // (`bench reclaimdelay`, docs/hd2.md); yielding first lets it run.
        std::thread::yield_now();
        then();
    }
}

/// Answers the requests of `listener` on a thread named `name`: `handle(method, path, body)`
/// gives the answer (a status and JSON body, or a [`Reply`]). A request that is not HTTP gets
/// 400.
pub fn serve<F, R>(listener: UnixListener, name: &str, handle: F) -> std::io::Result<()>
where
    F: Fn(&str, &str, &[u8]) -> R + Send + 'static,
    R: Into<Reply>,
{
    serve_after(listener, name, || {}, handle)
}

/// [`serve`], with `first` run by the serving thread before it accepts anything (the VMM
/// installs the thread's seccomp filter there).
pub fn serve_after<F, R>(
    listener: UnixListener,
    name: &str,
    first: impl FnOnce() + Send + 'static,
    handle: F,
) -> std::io::Result<()>
where
    F: Fn(&str, &str, &[u8]) -> R + Send + 'static,
    R: Into<Reply>,
{
    let accept = move || listener.accept().map(|(s, _)| s);
    serve_with(
        name,
        "api".to_owned(),
        first,
        accept,
        handle,
        |s: &UnixStream| {
            // A client that connects and sends nothing must not hold the API.
            if let Err(e) = s.set_read_timeout(Some(READ_TIMEOUT)) {
                tracing::warn!("api: cannot set a read timeout: {e}");
            }
            true
        },
    )
}

/// [`serve`] over TCP. A client also has [`READ_TIMEOUT`] to take its answer, so one that stops
/// reading does not hold the port either.
pub fn serve_tcp<F, R>(listener: TcpListener, name: &str, handle: F) -> std::io::Result<()>
where
    F: Fn(&str, &str, &[u8]) -> R + Send + 'static,
    R: Into<Reply>,
{
    let label = listener_name(&listener);
    let accept = move || listener.accept().map(|(s, _)| s);
    serve_with(
        name,
        label,
        || {},
        accept,
        handle,
        |s: &TcpStream| {
            let timeouts = s
                .set_read_timeout(Some(READ_TIMEOUT))
                .and_then(|()| s.set_write_timeout(Some(READ_TIMEOUT)));
            if let Err(e) = &timeouts {
                tracing::warn!("cannot set timeouts on a connection: {e}");
            }
            timeouts.is_ok()
        },
    )
}

/// The serving thread of [`serve`] and [`serve_tcp`]: runs `first`, then accepts connections for
/// ever, `prepare`s each (false: drop it) and answers its one request.
fn serve_with<S, A, P, F, R>(
    name: &str,
    label: String,
    first: impl FnOnce() + Send + 'static,
    mut accept: A,
    handle: F,
    prepare: P,
) -> std::io::Result<()>
where
    S: Read + Write,
    A: FnMut() -> std::io::Result<S> + Send + 'static,
    P: Fn(&S) -> bool + Send + 'static,
    F: Fn(&str, &str, &[u8]) -> R + Send + 'static,
    R: Into<Reply>,
{
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            first();
            loop {
                match accept() {
                    Ok(mut s) => {
                        if prepare(&s) {
                            answer(&mut s, &handle);
                        }
                    }
                    Err(e) => tracing::warn!("{label}: accept failed: {e}"),
                }
            }
        })?;
    Ok(())
}

fn listener_name(l: &TcpListener) -> String {
    l.local_addr()
        .map_or_else(|_| "tcp".to_owned(), |a| a.to_string())
}

/// The socket file a server bound, removed when dropped if the path still names that socket:
/// another server may have found it stale and bound its own there since (a VMM still shutting
/// down while a new one starts on the same path), and that one must keep its socket.
pub struct SocketFile {
    path: PathBuf,
    /// The bound socket's device, inode and change time (an inode number may be reused at once
    /// when a file is replaced; two sockets bound on one path within a tick of the file clock
    /// on a reused inode look the same, and the older one's end removes the newer).
    id: Option<(u64, u64, i64, i64)>,
}

fn file_id(path: &Path) -> Option<(u64, u64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino(), m.ctime(), m.ctime_nsec()))
}

impl SocketFile {
    /// The socket just bound at `path` ([`bind`]).
    pub fn new(path: PathBuf) -> SocketFile {
        let id = file_id(&path);
        SocketFile { path, id }
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        if self.id.is_some() && file_id(&self.path) == self.id {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// An error answer: `status` with `{"error": msg}`.
pub fn error(status: u16, msg: &str) -> (u16, String) {
    (
        status,
        serde_json::to_string(&ErrorBody {
            error: msg.to_owned(),
        })
        .unwrap_or_default(),
    )
}

/// A 200 answer with `v` as its body.
pub fn ok(v: &impl serde::Serialize) -> (u16, String) {
    match serde_json::to_string(v) {
        Ok(body) => (200, body),
        Err(e) => error(500, &format!("cannot encode the answer: {e}")),
    }
}

/// The answer to a request that did not parse: its status with `{"error": ...}`.
pub fn refuse(e: &crate::request::RequestError) -> (u16, String) {
    error(e.status, &e.message)
}

#[cfg(test)]
mod socket_file_tests {
    use super::*;

    #[test]
    fn a_socket_file_removes_only_its_own_socket() {
        let dir = std::env::temp_dir().join(format!("memvisor-sockfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("api.sock");
        let first = bind(&path).unwrap();
        let owner = SocketFile::new(path.clone());
        // The first server stops listening; a second finds the file stale and binds its own
        // (a clock tick later: file times are coarse, and the inode number may be reused).
        drop(first);
        std::thread::sleep(std::time::Duration::from_millis(50));
        let _second = bind(&path).unwrap();
        let newer = SocketFile::new(path.clone());
        drop(owner);
        assert!(path.exists(), "the second server's socket stays");
        drop(newer);
        assert!(!path.exists(), "and goes with it");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
