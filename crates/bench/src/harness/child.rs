//! The harness's child processes: starting a VMM with its console copied to a log and read
//! line by line, `memvisor host` started and stopped, whether a child exited, its exit in
//! words, the CPU time children used.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::harness::teardown;

/// How often a running VM is sampled.
pub const TICK: Duration = Duration::from_millis(50);

/// Reads a console until `line` answers for one of its lines (`Some(Ok)`: what was waited
/// for; `Some(Err)`: the guest went wrong), `deadline` passes, the console ends or the bench is
/// interrupted; `what` names what is waited for in the error.
pub fn wait_for<T>(
    lines: &mpsc::Receiver<ConsoleEvent>,
    deadline: Instant,
    what: &str,
    mut line: impl FnMut(&str, Instant) -> Option<Result<T, String>>,
) -> Result<T, String> {
    loop {
        if teardown::interrupted() {
            return Err("interrupted".into());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("timed out waiting for {what}"));
        }
        match lines.recv_timeout(left.min(Duration::from_millis(200))) {
            Ok(ConsoleEvent::Line(l, at)) => {
                if let Some(answer) = line(&l, at) {
                    return answer;
                }
            }
            Ok(ConsoleEvent::Eof) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(format!("the VM ended before {what}"));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    }
}

/// How [`stop`] ended a child.
pub struct Stopped {
    /// Its exit, when it could be waited for.
    pub status: Option<std::process::ExitStatus>,
    /// It did not end within the grace time and was killed.
    pub killed: bool,
}

/// Stops a child the harness started: SIGTERM (a VMM then stops its guest, QEMU and cgroup
/// itself), then after `grace` SIGKILL to it and its process group; reaped, and no longer
/// tracked for teardown.
pub fn stop(child: &mut std::process::Child, grace: Duration) -> Stopped {
    let pid = child.id();
    teardown::signal(pid, libc::SIGTERM);
    let t = Instant::now();
    let mut status = child.try_wait().ok().flatten();
    while status.is_none() && t.elapsed() < grace {
        std::thread::sleep(Duration::from_millis(20));
        status = child.try_wait().ok().flatten();
    }
    let killed = status.is_none();
    if killed {
        teardown::kill_group(pid);
        teardown::kill(pid);
        status = child.wait().ok();
    }
    teardown::forget_pid(pid);
    Stopped { status, killed }
}

/// A child the harness stops when it drops: SIGTERM first (a host stops its VMs cleanly, a
/// `memvisor run` stops QEMU and removes its cgroup), SIGKILL after 40 s.
pub struct Reaped(pub std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if stop(&mut self.0, Duration::from_secs(40)).killed {
            eprintln!(
                "memvisor bench: process {} did not stop within 40 s; killed",
                self.0.id()
            );
        }
    }
}

/// Starts `memvisor host --config CONFIG` (its output to `log`, logging as the harness does, in
/// its own process group, tracked for teardown) and waits up to 20 s for its socket `sock`; an
/// error if the socket does not come or the host ends first.
pub fn start_host(exe: &Path, config: &Path, log: &Path, sock: &Path) -> Result<Reaped, String> {
    let out = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let mut cmd = Command::new(exe);
    cmd.args(["host", "--config"])
        .arg(config)
        .env("MEMVISOR_LOG", log_filter())
        .stdin(Stdio::null())
        .stdout(out.try_clone().map_err(|e| e.to_string())?)
        .stderr(out)
        .process_group(0);
    let spawned = cmd.spawn();
    let mut host = Reaped(spawned.map_err(|e| format!("cannot start memvisor host: {e}"))?);
    teardown::track_pid(host.0.id());
    let t = Instant::now();
    while !sock.exists() {
        if let Ok(Some(st)) = host.0.try_wait() {
            return Err(format!(
                "memvisor host ended at once ({st}); see {}",
                log.display()
            ));
        }
        if t.elapsed() > Duration::from_secs(20) {
            let (s, l) = (sock.display(), log.display());
            return Err(format!("the host did not open {s} within 20 s (see {l})"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(host)
}

/// Starts `cmd` (a `memvisor run`) as the harness starts every VM of its own: logging at info,
/// `TMPDIR` the run's `work` directory (the pager's unnamed swap file lands on the disk under
/// --out, not on a tmpfs), stdin closed, stderr to `LOG.stderr`, its own process group (a Ctrl-C
/// at the terminal reaches the harness only), its pid tracked for teardown, and its console
/// copied to `LOG.console` and returned line by line.
pub fn spawn_logged(
    mut cmd: Command,
    work: &Path,
    log: &Path,
) -> Result<(std::process::Child, mpsc::Receiver<ConsoleEvent>), String> {
    let stderr = std::fs::File::create(log.with_extension("stderr"))
        .map_err(|e| format!("{}: {e}", log.display()))?;
    cmd.env("MEMVISOR_LOG", log_filter())
        .env("TMPDIR", work)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .process_group(0);
    let program = Path::new(cmd.get_program()).display().to_string();
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    teardown::track_pid(child.id());
    let stdout = child.stdout.take().ok_or("no stdout")?;
    Ok((child, tee_console(stdout, log.with_extension("console"))))
}

/// A console line with the time it arrived, or the console's end.
pub enum ConsoleEvent {
    Line(String, Instant),
    Eof,
}

/// Copies a VMM's console (`stdout`), line by line, to the file `path` and to the returned
/// channel, then sends [`ConsoleEvent::Eof`]. Once the receiver is gone it keeps reading, so the VMM
/// never blocks on a full pipe.
fn tee_console(
    mut stdout: std::process::ChildStdout,
    path: PathBuf,
) -> mpsc::Receiver<ConsoleEvent> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut log = std::fs::File::create(path).ok();
        let mut r = BufReader::new(&mut stdout);
        let mut line = String::new();
        loop {
            line.clear();
            match r.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if let Some(f) = log.as_mut() {
                        let _ = f.write_all(line.as_bytes());
                    }
                    if tx
                        .send(ConsoleEvent::Line(line.clone(), Instant::now()))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
        let _ = stdout.read_to_end(&mut Vec::new());
        let _ = tx.send(ConsoleEvent::Eof);
    });
    rx
}

/// Exited (without reaping it, so `/proc/PID/io` can still be read)?
pub fn exited(pid: u32) -> bool {
    let id: libc::id_t = pid;
    // SAFETY: siginfo_t is plain data that waitid fills; zeroed is a valid initial value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid writes only to `info`; WNOWAIT leaves the child waitable, WNOHANG never blocks.
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            id,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: after a successful waitid the si_pid field is initialised (0 if nothing exited).
    r != 0 || unsafe { info.si_pid() } != 0
}

pub fn exit_text(s: std::process::ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => c.to_string(),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => "?".into(),
    }
}

/// User and system CPU time of this process's children that ended and were waited for, in ms.
pub fn children_cpu_ms() -> Option<f64> {
    // SAFETY: rusage is plain data that getrusage fills; zeroed is a valid initial value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes only to `ru`.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) } != 0 {
        return None;
    }
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    Some(ms(ru.ru_utime) + ms(ru.ru_stime))
}

/// The log filter of the memvisor processes a benchmark starts: the harness's own
/// `MEMVISOR_LOG` when it has one (e.g. `memvisor_pager::release=debug` to see a release's
/// steps in each VMM's `.stderr`), `info` otherwise.
pub fn log_filter() -> String {
    std::env::var("MEMVISOR_LOG").unwrap_or_else(|_| "info".to_owned())
}
