//! QEMU's machine protocol (QMP) over its unix socket: the one client every family uses to set
//! and read a QEMU VM's balloon.

use std::io::{BufRead, BufReader, Write as _};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// A QMP connection, one command at a time.
pub struct Qmp {
    w: UnixStream,
    r: BufReader<UnixStream>,
}

impl Qmp {
    /// Connects to `sock`, reads the greeting and enters command mode (`qmp_capabilities`).
    pub fn connect(sock: &Path) -> Result<Qmp, String> {
        let s = UnixStream::connect(sock).map_err(|e| format!("QMP {}: {e}", sock.display()))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        let mut q = Qmp {
            r: BufReader::new(s.try_clone().map_err(|e| e.to_string())?),
            w: s,
        };
        let mut greeting = String::new();
        q.r.read_line(&mut greeting).map_err(|e| e.to_string())?;
        q.cmd(r#"{"execute":"qmp_capabilities"}"#)?;
        Ok(q)
    }

    /// Sends `json`; the `return` line (events before it skipped).
    pub fn cmd(&mut self, json: &str) -> Result<String, String> {
        writeln!(self.w, "{json}").map_err(|e| format!("QMP: {e}"))?;
        loop {
            let mut line = String::new();
            if self
                .r
                .read_line(&mut line)
                .map_err(|e| format!("QMP: {e}"))?
                == 0
            {
                return Err("QMP closed the connection".into());
            }
            if line.contains("\"error\"") {
                return Err(format!("QMP refused {json}: {}", line.trim()));
            }
            if line.contains("\"return\"") {
                return Ok(line);
            }
        }
    }

    /// Sets the balloon (`value`: the guest memory to leave, in bytes).
    pub fn balloon(&mut self, value: u64) -> Result<(), String> {
        self.cmd(&format!(
            r#"{{"execute":"balloon","arguments":{{"value":{value}}}}}"#
        ))
        .map(drop)
    }

    /// `query-balloon`'s `actual`: the guest's memory outside the balloon, in bytes.
    pub fn actual(&mut self) -> Result<u64, String> {
        let line = self.cmd(r#"{"execute":"query-balloon"}"#)?;
        balloon_actual(&line).ok_or_else(|| format!("no actual in {}", line.trim()))
    }
}

/// Sets a QEMU VM's balloon on one connection (`value`: the guest memory to leave).
pub fn set_balloon(sock: &Path, value: u64) -> Result<(), String> {
    Qmp::connect(sock)?.balloon(value)
}

/// `actual` of a `query-balloon` answer.
fn balloon_actual(line: &str) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(line.trim()).ok()?;
    v.get("return")?.get("actual")?.as_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balloon_answers_are_read() {
        let actual = balloon_actual(r#"{"return": {"actual": 100663296}}"#);
        assert_eq!(actual, Some(100_663_296));
        assert_eq!(balloon_actual(r#"{"return": {}}"#), None);
        assert_eq!(balloon_actual("garbage"), None);
    }
}
