//! The control API's HTTP framing and JSON bodies: arbitrary bytes arrive on a connection,
//! `memvisor_api::server::answer` reads one request and answers it, and the handler reads the
//! body as the request type of its route, as the VMM's and the host's APIs do.

#![no_main]

use std::io::{Cursor, Read, Write};

use libfuzzer_sys::fuzz_target;
use memvisor_api::server::{answer, error, ok, parse};
use memvisor_api::{BalloonUpdate, HostUpdate, MemoryUpdate, PolicyUpdate, PoolUpdate, VmSpec};

/// A connection held in memory: reads come from the input, writes go to `out`.
struct Conn<'a> {
    input: Cursor<&'a [u8]>,
    out: Vec<u8>,
}

impl Read for Conn<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.input.read(buf)
    }
}

impl Write for Conn<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.out.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A body read as a `T` and written back, as the APIs answer with the state they set.
fn echo<T: serde::de::DeserializeOwned + serde::Serialize>(body: &[u8]) -> (u16, String) {
    match parse::<T>(body) {
        Ok(v) => ok(&v),
        Err(e) => e,
    }
}

/// The routes of the VMM's and the host's APIs that take a body.
fn route(method: &str, path: &str, body: &[u8]) -> (u16, String) {
    match (method, path) {
        ("PUT", "/memory") => echo::<MemoryUpdate>(body),
        ("PUT", "/pool") => echo::<PoolUpdate>(body),
        ("PUT", "/balloon") => echo::<BalloonUpdate>(body),
        ("PATCH", "/host") => echo::<HostUpdate>(body),
        ("POST", "/vms") => match parse::<VmSpec>(body) {
            Ok(spec) => match spec.check() {
                Ok(()) => ok(&spec),
                Err(e) => error(400, &e),
            },
            Err(e) => e,
        },
        ("PATCH", p) if p.starts_with("/vms/") => echo::<PolicyUpdate>(body),
        _ => error(404, "no such route"),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut conn = Conn {
        input: Cursor::new(data),
        out: Vec::new(),
    };
    answer(&mut conn, &route);
    // Every request, well formed or not, gets an HTTP answer.
    assert!(conn.out.starts_with(b"HTTP/1.1 "));
});
