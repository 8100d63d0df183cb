//! The control API's HTTP framing and JSON bodies: arbitrary bytes arrive on a connection,
//! `memvisor_api::server::answer` reads one request and answers it, and the handler parses it
//! with `VmRequest::parse` and `HostRequest::parse`, as the VMM's and the host's APIs do.

#![no_main]

use std::io::{Cursor, Read, Write};

use libfuzzer_sys::fuzz_target;
use memvisor_api::server::{answer, error, ok, refuse};
use memvisor_api::{HostRequest, VmRequest};

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

/// The request parsed as the VMM's API parses it, then as the host's, with the parsed body
/// written back, as the APIs answer with the state they set.
fn route(method: &str, path: &str, body: &[u8]) -> (u16, String) {
    let vm = match VmRequest::parse(method, path, body) {
        Ok(VmRequest::SetLimit(u)) => return ok(&u),
        Ok(VmRequest::SetPool(u)) => return ok(&u),
        Ok(VmRequest::SetBalloon(u)) => return ok(&u),
        Ok(r) => return ok(&r.path()),
        Err(e) => e,
    };
    match HostRequest::parse(method, path, body) {
        Ok(HostRequest::Update(u)) => ok(&u),
        Ok(HostRequest::Add(spec)) => match spec.check() {
            Ok(()) => ok(&spec),
            Err(e) => error(400, &e),
        },
        Ok(HostRequest::UpdateVm(_, u)) => ok(&u),
        Ok(r) => ok(&r.path()),
        Err(e) if e.status == 404 => refuse(&vm),
        Err(e) => refuse(&e),
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
