//! Everything the harness changes on the host, recorded as it happens so that one teardown undoes
//! it — at the end, on an error, on Ctrl-C (SIGINT) or SIGTERM: the processes it started (ended
//! by PID), the memory cgroups their runs left, its host swap file (swapped off and removed),
//! `vm.swappiness`, and its temporary files. Also the check before a run that refuses to start
//! when an earlier run left state behind that cannot be cleaned.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::readings;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// What there is to undo.
#[derive(Default)]
struct State {
    pids: Vec<u32>,
    cgroups: Vec<PathBuf>,
    swap_file: Option<PathBuf>,
    swappiness: Option<String>,
    files: Vec<PathBuf>,
}

static STATE: Mutex<State> = Mutex::new(State {
    pids: Vec::new(),
    cgroups: Vec::new(),
    swap_file: None,
    swappiness: None,
    files: Vec::new(),
});

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Makes SIGINT and SIGTERM set a flag the harness polls (it then tears down and exits) instead
/// of killing it on the spot.
pub fn catch_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe; the function
        // pointer stays valid for the life of the process.
        unsafe {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
    }
}

/// Whether SIGINT or SIGTERM arrived.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Records a process the harness started (ended by PID at teardown unless forgotten first).
pub fn track_pid(pid: u32) {
    state().pids.push(pid);
}

/// The process has been reaped: its PID may be reused, so teardown must not signal it.
pub fn forget_pid(pid: u32) {
    state().pids.retain(|&p| p != pid);
}

/// Records a cgroup a run may leave (a killed `memvisor run` cannot remove its own).
pub fn track_cgroup(dir: PathBuf) {
    state().cgroups.push(dir);
}

/// Records a file to remove at teardown.
pub fn track_file(path: PathBuf) {
    state().files.push(path);
}

/// Sends SIGKILL to `pid`.
pub fn kill(pid: u32) {
    signal(pid, libc::SIGKILL);
}

/// SIGKILL to the process group `pid` leads (a child started with `process_group(0)`, and
/// what it started); nothing when there is no such group.
pub fn kill_group(pid: u32) {
    if let Ok(pg) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) takes no pointers; the group is one the harness started and has not
        // reaped.
        unsafe {
            libc::kill(-pg, libc::SIGKILL);
        }
    }
}

/// Sends `sig` to `pid`.
pub fn signal(pid: u32, sig: libc::c_int) {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) takes no pointers; a PID the harness started and has not reaped is its own.
    unsafe {
        libc::kill(p, sig);
    }
}

/// Removes a memory cgroup once its processes are gone, retrying while its charges drain.
pub fn remove_cgroup(dir: &Path) -> std::io::Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    for pid in procs.split_whitespace() {
        // Move stragglers out to the root before removing.
        let _ = std::fs::write(Path::new(readings::CGROUP_ROOT).join("cgroup.procs"), pid);
    }
    let mut last = Ok(());
    for _ in 0..100 {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => last = Err(e),
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    last
}

fn run_tool(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = std::process::Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {cmd}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        let (args, err) = (args.join(" "), String::from_utf8_lossy(&out.stderr));
        Err(format!("{cmd} {args}: {}", err.trim()))
    }
}

fn remove_swap_file(path: &Path) -> Result<(), String> {
    if readings::swap_used(path).is_some() {
        run_tool("swapoff", &[&path.display().to_string()])?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("cannot remove {}: {e}", path.display())),
    }
}

/// Creates, formats and enables the host swap file (recorded for teardown before it exists).
pub fn enable_swap_file(path: &Path, size: u64) -> Result<(), String> {
    state().swap_file = Some(path.to_owned());
    let p = path.display().to_string();
    run_tool("fallocate", &["-l", &size.to_string(), &p])?;
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .map_err(|e| format!("chmod {p}: {e}"))?;
    run_tool("mkswap", &["-q", &p])?;
    run_tool("swapon", &[&p])
}

/// Sets `vm.swappiness`, which new memory cgroups inherit, remembering the old value.
pub fn set_swappiness(v: u32) -> Result<(), String> {
    const F: &str = "/proc/sys/vm/swappiness";
    let old = std::fs::read_to_string(F).map_err(|e| format!("{F}: {e}"))?;
    {
        let mut s = state();
        if s.swappiness.is_none() {
            s.swappiness = Some(old.trim().to_owned());
        }
    }
    std::fs::write(F, v.to_string()).map_err(|e| format!("{F}: {e}"))
}

/// Undoes everything recorded: kills processes, removes cgroups, swaps off and removes the swap
/// file, restores `vm.swappiness`, removes files. Returns what could not be undone.
pub fn teardown() -> Vec<String> {
    let mut s = state();
    let mut failed = Vec::new();
    for pid in s.pids.drain(..) {
        kill(pid);
        // Reap our own children; a grandchild (QEMU) is reaped by its parent or init.
        if let Ok(p) = libc::pid_t::try_from(pid) {
            let mut st = 0;
            // SAFETY: waitpid writes the status to a local; WNOHANG never blocks.
            unsafe {
                libc::waitpid(p, &mut st, libc::WNOHANG);
            }
        }
    }
    // Give killed processes a moment to leave their cgroups.
    if !s.cgroups.is_empty() {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    for dir in s.cgroups.drain(..) {
        if let Err(e) = remove_cgroup(&dir) {
            failed.push(format!("cgroup {}: {e}", dir.display()));
        }
    }
    if let Some(path) = s.swap_file.take() {
        if let Err(e) = remove_swap_file(&path) {
            failed.push(e);
        }
    }
    if let Some(v) = s.swappiness.take() {
        if let Err(e) = std::fs::write("/proc/sys/vm/swappiness", &v) {
            failed.push(format!("cannot restore vm.swappiness={v}: {e}"));
        }
    }
    for f in s.files.drain(..) {
        let _ = std::fs::remove_file(&f);
    }
    failed
}

/// Runs [`teardown`] when dropped, so an early return or a panic still cleans up.
pub struct Guard;

impl Drop for Guard {
    fn drop(&mut self) {
        for f in teardown() {
            eprintln!("memvisor bench: teardown: {f}");
        }
    }
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Held by the running bench: `flock` on `SWAP_FILE.lock`, released by the kernel however the
/// process ends. A bench that ends normally deletes the file (a killed one leaves it, empty and
/// unlocked: the next bench takes it). No bench waits for the lock, so deleting it cannot hand
/// one bench's lock to another that is about to take it.
pub struct BenchLock {
    /// Closed (which releases the lock) after `drop` deleted the file.
    _held: std::fs::File,
    path: std::path::PathBuf,
}

impl Drop for BenchLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Takes the lock of benches using `swap_file`, or says who holds it.
pub fn lock(swap_file: &Path) -> Result<BenchLock, String> {
    let mut path = swap_file.as_os_str().to_owned();
    path.push(".lock");
    let path = std::path::PathBuf::from(path);
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("cannot open the bench lock {}: {e}", path.display()))?;
    // SAFETY: flock(2) on a descriptor we own.
    let rc = unsafe {
        libc::flock(
            std::os::fd::AsRawFd::as_raw_fd(&f),
            libc::LOCK_EX | libc::LOCK_NB,
        )
    };
    if rc != 0 {
        return Err(format!(
            "another memvisor bench is running (it holds {}): let it finish, or give this one its own --swap-file",
            path.display()
        ));
    }
    Ok(BenchLock { _held: f, path })
}

/// Cleans what an earlier run left (its swap file, `memvisor-*` cgroups of dead processes), or
/// says why it cannot: the harness then refuses to start.
pub fn preflight(swap_file: &Path) -> Result<Vec<String>, String> {
    let mut cleaned = Vec::new();
    if swap_file.exists() || readings::swap_used(swap_file).is_some() {
        let file = swap_file.display();
        remove_swap_file(swap_file).map_err(|e| format!("a previous run left the swap file {file} and it cannot be removed ({e}); run `swapoff {file}; rm {file}` or give --swap-file"))?;
        cleaned.push(format!("removed swap file {file}"));
    }
    let Ok(entries) = std::fs::read_dir(readings::CGROUP_ROOT) else {
        return Ok(cleaned);
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("memvisor-")
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let path = e.path();
        let dir = path.display();
        let tasks = std::fs::read_to_string(path.join("cgroup.procs")).unwrap_or_default();
        let tasks: Vec<&str> = tasks.split_whitespace().collect();
        if alive(pid) || tasks.iter().any(|t| t.parse().is_ok_and(alive)) {
            let who = if tasks.is_empty() {
                pid.to_string()
            } else {
                tasks.join(", ")
            };
            return Err(format!("cgroup {dir} belongs to a running process ({who}): let that run finish or end it, then start again"));
        }
        remove_cgroup(&path).map_err(|err| format!("a previous run left cgroup {dir} and it cannot be removed ({err}); remove it with rmdir"))?;
        cleaned.push(format!("removed cgroup {dir}"));
    }
    Ok(cleaned)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_second_bench_on_the_same_swap_file_is_refused_until_the_first_ends() {
        let dir = tempfile::tempdir().unwrap();
        let swap = dir.path().join("bench.swap");
        let first = super::lock(&swap).unwrap();
        let err = super::lock(&swap).err().unwrap();
        assert!(err.contains("another memvisor bench is running"), "{err}");
        drop(first);
        super::lock(&swap).unwrap();
    }
}
