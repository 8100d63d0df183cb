//! `memvisor run --jail`: the VMM as the first process of a PID namespace of its own, and the
//! process that started it, which stays outside the jail.
//!
//! A process cannot move itself into a new PID namespace: `unshare(CLONE_NEWPID)` puts its next
//! child there. So `memvisor run` forks once, before it opens anything or starts a thread; the
//! child (pid 1 in its namespace) runs the VMM, which opens its files and enters the jail
//! (`memvisor_vmm::jail`). The parent is what whoever started `memvisor run` sees (a shell, or
//! `memvisor host`, which signals and waits for that pid):
//! - it passes the stopping signals it gets on to the VMM, and the VMM dies with it
//!   (`PR_SET_PDEATHSIG`), so `kill -9` of the pid one started ends the VM too;
//! - it exits with the VMM's status, or dies of the VMM's signal (a seccomp kill stays a
//!   `SIGSYS`);
//! - it removes what the jailed VMM cannot reach any more by path: its API socket, the logs it
//!   emptied after putting every block back, and then a temporary swap file nothing refers to.

use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// What the parent removes once the VMM has ended.
pub struct Leftovers {
    pub api_sock: Option<PathBuf>,
    /// Writable images run with indirections: their logs.
    pub logs: Vec<PathBuf>,
    /// A swap file made for this run only.
    pub temporary_swap: Option<PathBuf>,
}

/// Which side of the fork this is.
pub enum Side {
    /// The VMM, pid 1 of its PID namespace.
    Vmm,
    /// The parent, after the VMM ended: exit with this.
    Ended(ExitCode),
}

/// The signals passed on to the VMM: those it stops on (`memvisor_vmm::signals`). The VMM
/// keeps them blocked from the fork on: as pid 1 of its namespace it would be sent none it had
/// not blocked or caught, and a stop asked before it reached its signal thread would be lost.
const FORWARDED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Forks the VMM into a new PID namespace; in the parent, waits for it (the module's doc).
pub fn fork(leftovers: &Leftovers) -> io::Result<Side> {
    let threads = std::fs::read_to_string("/proc/self/status")?
        .lines()
        .find_map(|l| l.strip_prefix("Threads:").map(|n| n.trim().to_owned()));
    if threads.as_deref() != Some("1") {
        return Err(io::Error::other(
            "a jailed VMM must be forked before any thread starts",
        ));
    }
    // SAFETY: sigset operations on a local set; sigprocmask changes this thread's mask only.
    let (set, old) = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in FORWARDED.iter().chain(&[libc::SIGCHLD]) {
            libc::sigaddset(&mut set, *sig);
        }
        if libc::sigprocmask(libc::SIG_BLOCK, &set, &mut old) != 0 {
            return Err(io::Error::last_os_error());
        }
        (set, old)
    };
    // SAFETY: unshare takes flags only; CLONE_NEWPID applies to the children forked after.
    if unsafe { libc::unshare(libc::CLONE_NEWPID) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the process has one thread (checked above), so the child is a whole copy.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(io::Error::last_os_error());
    }
    if child == 0 {
        // SAFETY: prctl with integer arguments; sigprocmask sets the mask saved above with the
        // forwarded signals added, from a local set.
        unsafe {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            let mut mask = old;
            for sig in FORWARDED {
                libc::sigaddset(&mut mask, sig);
            }
            libc::sigprocmask(libc::SIG_SETMASK, &mask, std::ptr::null_mut());
        }
        return Ok(Side::Vmm);
    }
    let status = wait(child, &set);
    remove(leftovers);
    if libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSYS {
        // The kernel's record names the VMM's pid, which only this process knows.
        if let Some(kill) = memvisor_host::kmsg::seccomp_kill(child.unsigned_abs()) {
            eprintln!(
                "memvisor: {}: {kill}",
                memvisor_host::kmsg::KILLED_BY_SECCOMP
            );
        }
    }
    Ok(Side::Ended(exit_as(status)))
}

/// Passes signals on to `child` until it ends; returns its wait status.
fn wait(child: libc::pid_t, set: &libc::sigset_t) -> libc::c_int {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes one int that lives across the call.
        let done = unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) };
        if done == child {
            return status;
        }
        if done < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return status;
        }
        // SAFETY: sigwaitinfo reads the set and writes one siginfo_t, both live across it.
        let sig = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::sigwaitinfo(set, &mut info)
        };
        if FORWARDED.contains(&sig) {
            // SAFETY: kill has no memory effects; the child is ours and not yet reaped.
            unsafe { libc::kill(child, sig) };
        }
    }
}

/// The parent's exit: the VMM's status, or the VMM's signal raised again on itself.
fn exit_as(status: libc::c_int) -> ExitCode {
    if libc::WIFEXITED(status) {
        return ExitCode::from(u8::try_from(libc::WEXITSTATUS(status)).unwrap_or(1));
    }
    let sig = libc::WTERMSIG(status);
    // SAFETY: the default action for `sig`, unblocked, with no core file: the process ends as
    // its VMM did. The calls take integers and a local set.
    unsafe {
        let none = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &none);
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
    ExitCode::from(u8::try_from(128 + sig).unwrap_or(1))
}

/// Removes the socket if nobody serves it, every emptied log, and the temporary swap file if
/// no log refers to it any more.
fn remove(leftovers: &Leftovers) {
    if let Some(sock) = &leftovers.api_sock {
        let served = memvisor_api::sockpath::reachable(sock)
            .and_then(|at| std::os::unix::net::UnixStream::connect(at.path));
        if served.is_err() {
            let _ = std::fs::remove_file(sock);
        }
    }
    let mut logs_left = false;
    for log in &leftovers.logs {
        match std::fs::metadata(log) {
            Ok(m) if m.len() == 0 => {
                let _ = std::fs::remove_file(log);
            }
            Ok(_) => logs_left = true,
            Err(_) => {}
        }
    }
    if let Some(swap) = &leftovers.temporary_swap {
        if !logs_left && Path::new(swap).exists() {
            let _ = std::fs::remove_file(swap);
        }
    }
}
