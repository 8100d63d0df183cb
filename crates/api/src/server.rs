//! The server side of a control socket, shared by the VMM's API and the host manager's: binding
//! the Unix socket, one thread answering one request per connection, and JSON answers in the
//! shape every client expects (a type of this crate, or [`ErrorBody`] with the status).

use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use crate::{read_request, write_response, ErrorBody};

/// How long the server waits for a request once a client has connected.
const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Binds the socket at `path`. A stale socket file (nobody listening) is replaced; a live one is
/// an error. Clients that connect before [`serve`] starts wait in the listen queue.
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
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
    let listener = UnixListener::bind(&tmp)?;
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(listener)
}

/// Answers the requests of `listener` on a thread named `name`: `handle(method, path, body)`
/// gives the status and JSON body. A request that is not HTTP gets 400.
pub fn serve<F>(listener: UnixListener, name: &str, handle: F) -> std::io::Result<()>
where
    F: Fn(&str, &str, &[u8]) -> (u16, String) + Send + 'static,
{
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(mut s) => {
                        // A client that connects and sends nothing must not hold the API.
                        if let Err(e) = s.set_read_timeout(Some(READ_TIMEOUT)) {
                            tracing::warn!("api: cannot set a read timeout: {e}");
                        }
                        let (status, body) = match read_request(&mut s) {
                            Ok(req) => handle(&req.method, &req.path, &req.body),
                            Err(e) => error(400, &e.to_string()),
                        };
                        if let Err(e) = write_response(&mut s, status, &body) {
                            tracing::debug!("api: cannot answer: {e}");
                        }
                    }
                    Err(e) => tracing::warn!("api: accept failed: {e}"),
                }
            }
        })?;
    Ok(())
}

/// Removes the socket file when dropped.
pub struct SocketFile(pub PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
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

/// A request body read as a `T`, or the 400 answer that says why not.
pub fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, (u16, String)> {
    serde_json::from_slice(body).map_err(|e| error(400, &format!("bad JSON body: {e}")))
}
