//! Which call a VMM's seccomp filter killed it for, from the kernel log. A filter's
//! `SECCOMP_RET_KILL_PROCESS` cannot be caught, so the VMM cannot say it; the kernel does, in an
//! audit record (type 1326) it writes to the kernel log as it kills: the process's pid, the
//! name of the thread that made the call (`comm`, which each VMM thread sets) and the system
//! call's number. Reading `/dev/kmsg` takes `CAP_SYSLOG` (or `kernel.dmesg_restrict = 0`); a
//! host without it, or with `auditd` taking the records, still reports the kill, without the call.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::time::{Duration, Instant};

/// The audit record type of a seccomp action.
const AUDIT_SECCOMP: &str = "type=1326";
/// `SECCOMP_RET_KILL_PROCESS` as the record's `code`.
const KILL_PROCESS: &str = "code=0x80000000";
/// How long the record may take to reach the log after the process is gone: the kernel's audit
/// thread writes it, and on a loaded host it was seen to take more than half a second. Waited
/// only after a VMM died by `SIGSYS`.
const WAIT: Duration = Duration::from_secs(3);

/// How a jailed VMM's parent writes the kill it found (`memvisor: killed by seccomp: KILL`) to
/// the VMM's log, since the record names the VMM's pid, which the host does not know.
pub const KILLED_BY_SECCOMP: &str = "killed by seccomp";

/// A VMM's kill by its seccomp filter: the call and the thread that made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeccompKill {
    pub syscall: i64,
    pub thread: String,
}

impl std::fmt::Display for SeccompKill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "syscall {} in thread {}", self.syscall, self.thread)
    }
}

/// The last seccomp kill of process `pid` in the kernel log, waiting a little for its record.
pub fn seccomp_kill(pid: u32) -> Option<SeccompKill> {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(k) = read_log().and_then(|log| find(&log, pid)) {
            return Some(k);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every record now in the kernel log, one per line.
fn read_log() -> Option<String> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")
        .ok()?;
    let mut all = String::new();
    // One record per read; EAGAIN at the end; EPIPE when a record was overwritten meanwhile.
    let mut buf = vec![0u8; 8192];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                all.push_str(&String::from_utf8_lossy(&buf[..n]));
                if !all.ends_with('\n') {
                    all.push('\n');
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => {}
            Err(_) => break,
        }
    }
    Some(all)
}

/// The last kill record of `pid` in `log`.
fn find(log: &str, pid: u32) -> Option<SeccompKill> {
    let pid = format!(" pid={pid} ");
    log.lines()
        .rev()
        .filter(|l| l.contains(AUDIT_SECCOMP) && l.contains(KILL_PROCESS) && l.contains(&pid))
        .find_map(parse)
}

fn parse(line: &str) -> Option<SeccompKill> {
    let syscall = field(line, "syscall=")?.parse().ok()?;
    let comm = field(line, "comm=")?;
    let thread = match comm.strip_prefix('"') {
        Some(quoted) => quoted.trim_end_matches('"').to_owned(),
        // A name with a space or quote in it comes hex-encoded.
        None => (0..comm.len())
            .step_by(2)
            .map(|i| {
                u8::from_str_radix(comm.get(i..i + 2)?, 16)
                    .ok()
                    .map(char::from)
            })
            .collect::<Option<String>>()?,
    };
    Some(SeccompKill { syscall, thread })
}

/// The value of `key` in an audit record: up to the next space (a quoted name has none).
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(&format!(" {key}"))? + 1 + key.len();
    line[at..].split(' ').next()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "6,1,2,-;audit: type=1326 audit(1795948631.634:2): auid=4294967295 uid=0 gid=0 ses=4294967295 pid=13682 comm=\"vcpu0\" exe=\"/x/memvisor\" sig=31 arch=c000003e syscall=59 compat=0 ip=0x7f79f54434f7 code=0x80000000
6,2,3,-;audit: type=1326 audit(1795948632.634:3): auid=4294967295 uid=0 gid=0 ses=4294967295 pid=13682 comm=\"api\" exe=\"/x/memvisor\" sig=0 arch=c000003e syscall=41 compat=0 ip=0x7f79f54434f7 code=0x7ffc0000
6,3,4,-;audit: type=1326 audit(1795948633.634:4): auid=4294967295 uid=0 gid=0 ses=4294967295 pid=99 comm=626C6B2D61 exe=\"/x/memvisor\" sig=31 arch=c000003e syscall=2 compat=0 ip=0x1 code=0x80000000
";

    #[test]
    fn the_kill_record_of_the_pid_names_call_and_thread() {
        let k = find(LOG, 13682).unwrap();
        assert_eq!(k.to_string(), "syscall 59 in thread vcpu0");
        // A logged call (--seccomp log) is not a kill; another pid is another process.
        assert_eq!(find(LOG, 1368), None);
        assert_eq!(
            find(LOG, 99),
            Some(SeccompKill {
                syscall: 2,
                thread: "blk-a".into()
            })
        );
    }
}
