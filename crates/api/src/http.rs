//! Just enough HTTP/1.1 for a control socket (and the host's metrics port): one request per
//! connection, bodies with a `Content-Length` (JSON, or the metrics' text), bounded sizes, clear
//! errors.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use thiserror::Error;

/// Largest request body accepted.
pub const MAX_BODY: usize = 64 << 10;
const MAX_HEADER_LINES: usize = 64;
const MAX_LINE: usize = 8192;

#[derive(Debug, Error)]
pub enum HttpError {
    #[error("I/O error on the API socket")]
    Io(#[from] std::io::Error),
    #[error("malformed request: {0}")]
    Malformed(&'static str),
    #[error("request body larger than {MAX_BODY} bytes")]
    TooLarge,
    #[error("the server closed the connection without an answer (its VM or host ended, say)")]
    NoAnswer,
}

/// A parsed request.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub body: Vec<u8>,
}

fn read_line(r: &mut impl BufRead) -> Result<String, HttpError> {
    let mut line = Vec::new();
    r.take(MAX_LINE as u64).read_until(b'\n', &mut line)?;
    if !line.ends_with(b"\n") {
        return Err(HttpError::Malformed("line too long or connection closed"));
    }
    let s = String::from_utf8(line).map_err(|_| HttpError::Malformed("not UTF-8"))?;
    Ok(s.trim_end_matches(['\r', '\n']).to_owned())
}

/// Reads one request from `stream`.
pub fn read_request(stream: &mut impl Read) -> Result<Request, HttpError> {
    let mut r = BufReader::new(stream);
    let start = read_line(&mut r)?;
    let mut parts = start.split(' ');
    let (Some(method), Some(path), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HttpError::Malformed(
            "request line is not METHOD PATH VERSION",
        ));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(HttpError::Malformed("not HTTP/1.x"));
    }
    let mut len = 0usize;
    for i in 0.. {
        if i == MAX_HEADER_LINES {
            return Err(HttpError::Malformed("too many header lines"));
        }
        let line = read_line(&mut r)?;
        if line.is_empty() {
            break;
        }
        let (name, value) = line
            .split_once(':')
            .ok_or(HttpError::Malformed("header without a colon"))?;
        if name.eq_ignore_ascii_case("content-length") {
            len = value
                .trim()
                .parse()
                .map_err(|_| HttpError::Malformed("bad Content-Length"))?;
            if len > MAX_BODY {
                return Err(HttpError::TooLarge);
            }
        }
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    Ok(Request {
        method: method.to_owned(),
        path: path.to_owned(),
        body,
    })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Internal Server Error",
    }
}

/// Writes a response with a JSON body (or none for 204).
pub fn write_response(stream: &mut impl Write, status: u16, body: &str) -> std::io::Result<()> {
    write_response_as(stream, status, "application/json", body.as_bytes())
}

/// Writes a response with a body of type `content_type`.
pub fn write_response_as(
    stream: &mut impl Write,
    status: u16,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<()> {
    write!(
        stream,
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        reason(status),
        body.len()
    )?;
    stream.write_all(body)?;
    stream.flush()
}

/// An answer as a client reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// The `Content-Type` header, if the server sent one.
    pub content_type: Option<String>,
    pub body: String,
}

/// How long [`call`] waits for the server to take a request or answer it.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Sends one request to the API socket at `sock` and returns the status and body; gives up
/// after [`CALL_TIMEOUT`] without progress.
pub fn call(
    sock: &Path,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<(u16, String), HttpError> {
    call_within(sock, method, path, body, CALL_TIMEOUT)
}

/// [`call`], giving up after `timeout` without progress (a server that hangs is an I/O error).
pub fn call_within(
    sock: &Path,
    method: &str,
    path: &str,
    body: Option<&str>,
    timeout: Duration,
) -> Result<(u16, String), HttpError> {
    exchange(sock, method, path, body, timeout).map(|r| (r.status, r.body))
}

/// [`call_within`], with the answer's content type.
pub fn exchange(
    sock: &Path,
    method: &str,
    path: &str,
    body: Option<&str>,
    timeout: Duration,
) -> Result<Response, HttpError> {
    exchange_on(connect(sock, timeout)?, method, path, body)
}

/// A connection to the socket at `sock` that gives up after `timeout` without progress.
pub(crate) fn connect(sock: &Path, timeout: Duration) -> std::io::Result<UnixStream> {
    let s = UnixStream::connect(crate::sockpath::reachable(sock)?.path)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    Ok(s)
}

/// Sends one request on `s` and reads the answer.
pub(crate) fn exchange_on(
    mut s: UnixStream,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<Response, HttpError> {
    let body = body.unwrap_or("");
    write!(s, "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len())?;
    s.flush()?;
    let mut r = BufReader::new(s);
    if r.fill_buf()?.is_empty() {
        return Err(HttpError::NoAnswer);
    }
    let status_line = read_line(&mut r)?;
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or(HttpError::Malformed("bad status line"))?;
    let mut len = None;
    let mut content_type = None;
    loop {
        let line = read_line(&mut r)?;
        if line.is_empty() {
            break;
        }
        if let Some((n, v)) = line.split_once(':') {
            if n.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse::<usize>().ok();
            } else if n.eq_ignore_ascii_case("content-type") {
                content_type = Some(v.trim().to_owned());
            }
        }
    }
    let mut out = Vec::new();
    match len {
        Some(n) => {
            out.resize(n.min(16 << 20), 0);
            r.read_exact(&mut out)?;
        }
        None => {
            r.read_to_end(&mut out)?;
        }
    }
    Ok(Response {
        status,
        content_type,
        body: String::from_utf8_lossy(&out).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_put_with_body() {
        let raw = b"PUT /memory HTTP/1.1\r\nHost: x\r\nContent-Length: 14\r\n\r\n{\"limit\":4096}";
        let r = read_request(&mut &raw[..]).unwrap();
        assert_eq!(
            r,
            Request {
                method: "PUT".into(),
                path: "/memory".into(),
                body: b"{\"limit\":4096}".to_vec()
            }
        );
    }

    #[test]
    fn rejects_malformed_requests() {
        for raw in [
            &b"GARBAGE\r\n\r\n"[..],
            b"GET / SPDY/3\r\n\r\n",
            b"GET /vm HTTP/1.1\r\nNoColonHere\r\n\r\n",
            b"PUT /memory HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
            b"PUT /memory HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n",
            b"PUT /memory HTTP/1.1\r\nContent-Length: 10\r\n\r\n{}",
            b"GET /vm HTTP/1.1\r\n",
            b"",
        ] {
            assert!(
                read_request(&mut &raw[..]).is_err(),
                "{:?}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn response_framing() {
        let mut out = Vec::new();
        write_response(&mut out, 400, "{\"error\":\"x\"}").unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(s.starts_with("HTTP/1.1 400 Bad Request\r\n"));
        assert!(s.ends_with("\r\n\r\n{\"error\":\"x\"}"));
    }

    #[test]
    fn a_server_that_closes_without_an_answer_is_told_apart() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let server = std::thread::spawn(move || {
            let mut theirs = theirs;
            read_request(&mut theirs).unwrap();
        });
        let e = exchange_on(ours, "PUT", "/vm/migrate", Some("{}")).unwrap_err();
        server.join().unwrap();
        assert!(matches!(e, HttpError::NoAnswer), "{e}");
    }
}
