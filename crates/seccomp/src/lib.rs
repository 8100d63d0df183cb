//! Seccomp filters for the VMM, one per kind of thread, each installed by the thread itself before it touches anything the guest wrote.
//!
//! | file | owns |
//! |---|---|
//! | `lib.rs` | the [`Mode`] (`--seccomp on\|log\|off`), [`check_kernel`] and [`confine`], which compiles a thread's filters and installs them |
//! | `thread.rs` | the kinds of [`Thread`] (a leaf) |
//! | `rules.rs` | what each kind of thread may call, with the arguments checked where a filter can see them (ioctl numbers, `mmap`/`mprotect` without `PROT_EXEC`, `madvise` advice, `fcntl` commands, `clone` flags, `openat` flags: read-only, or a new file not through a link) |
//!
//! A thread's filters are built with rust-vmm's `seccompiler` and stacked, so that the kernel
//! answers each call with the strictest of them:
//!
//! 1. the *allow list* (installed last): every call the thread makes, with its arguments; anything else kills the
//!    whole VMM (`SECCOMP_RET_KILL_PROCESS`), or is let through and logged by the kernel
//!    (`SECCOMP_RET_LOG`) with `--seccomp log`;
//! 2. `clone3` fails with `ENOSYS`: its flags are in memory a filter cannot read, and glibc then
//!    creates threads with `clone`, whose flags the allow list checks (threads, never processes);
//! 3. for threads that open no file, `openat` fails with `EACCES`: glibc opens
//!    `/sys/devices/system/cpu/online` and `/proc/sys/vm/overcommit_memory` for its heap in
//!    whichever thread happens to need them, and runs on without them.
//!
//! Filters are per thread and never relaxed; a thread started by a confined thread inherits
//! its filters (the reclaim thread's read-ahead). `no_new_privs` is set first: the kernel takes a
//! filter from a process without `CAP_SYS_ADMIN` only then, and it keeps an `execve` from gaining
//! privileges. The order at start is: the VMM opens what it needs (KVM, guest RAM, the
//! userfaultfd, disks, swap file, sockets), then each thread installs its filter as it starts;
//! the main thread installs its own once every other thread has started. The jail
//! (`memvisor_vmm::jail`) goes before the first filter: the filters refuse the calls it is made
//! with.

mod rules;
mod thread;

use std::sync::atomic::{AtomicU8, Ordering};

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter};
use thiserror::Error;

pub use rules::{FORBIDDEN_BY_ALL, KVM_RUN};
/// `UFFDIO_COPY`, the ioctl a pager fault is answered with.
pub const UFFDIO_COPY: u64 = userfaultfd_sys::UFFDIO_COPY as u64;
pub use thread::Thread;

/// What a thread's filter does with a call outside its allow list (`memvisor run --seccomp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The call kills the VMM (`SECCOMP_RET_KILL_PROCESS`); the default.
    On,
    /// The call goes through and the kernel logs it (`SECCOMP_RET_LOG`, an audit line in the
    /// kernel log): for finding what a new code path needs.
    Log,
    /// No filters.
    Off,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::On => "on",
            Mode::Log => "log",
            Mode::Off => "off",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "on" => Ok(Mode::On),
            "log" => Ok(Mode::Log),
            "off" => Ok(Mode::Off),
            other => Err(format!("seccomp mode '{other}': expected on, log or off")),
        }
    }
}

/// Why filters cannot be used or installed.
#[derive(Debug, Error)]
pub enum SeccompError {
    #[error("this kernel has no seccomp filters (built without CONFIG_SECCOMP_FILTER); turn them off (--seccomp off) to run without")]
    Unsupported,
    #[error("this kernel's seccomp cannot {0} (it lacks that action)")]
    MissingAction(&'static str),
    #[error("cannot build the seccomp filter of the {thread} thread: {source}")]
    Build {
        thread: &'static str,
        #[source]
        source: seccompiler::BackendError,
    },
    #[error("cannot install the seccomp filter of the {thread} thread: {source}")]
    Install {
        thread: &'static str,
        #[source]
        source: seccompiler::Error,
    },
}

/// 0: not set (no filters: a library user, a unit test), else `Mode as u8 + 1`.
static MODE: AtomicU8 = AtomicU8::new(0);

/// Sets the mode every later [`confine`] follows, once, before the VMM starts its threads.
pub fn set_mode(mode: Mode) {
    let v = match mode {
        Mode::On => 1,
        Mode::Log => 2,
        Mode::Off => 3,
    };
    MODE.store(v, Ordering::SeqCst);
}

/// The mode [`set_mode`] set; [`Mode::Off`] if none was.
pub fn mode() -> Mode {
    match MODE.load(Ordering::SeqCst) {
        1 => Mode::On,
        2 => Mode::Log,
        _ => Mode::Off,
    }
}

/// Checks that this kernel can install the filters `mode` needs: seccomp filters, and the
/// action `mode` takes on a call outside them.
pub fn check_kernel(mode: Mode) -> Result<(), SeccompError> {
    if mode == Mode::Off {
        return Ok(());
    }
    // SAFETY: PR_GET_SECCOMP takes no pointer; it fails with EINVAL without CONFIG_SECCOMP.
    if unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) } < 0 {
        return Err(SeccompError::Unsupported);
    }
    let Ok(actions) = std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail") else {
        return Err(SeccompError::Unsupported);
    };
    let (action, what) = match mode {
        Mode::Log => ("log", "log a call and let it through"),
        _ => ("kill_process", "kill a whole process"),
    };
    let has = |a: &str| actions.split_whitespace().any(|w| w == a);
    if !has(action) {
        return Err(SeccompError::MissingAction(what));
    }
    if !has("errno") {
        return Err(SeccompError::MissingAction("fail a call with an errno"));
    }
    Ok(())
}

/// The filters of `thread` under `mode` (none with [`Mode::Off`]), in the order they go in:
/// the allow list last.
pub fn filters(thread: Thread, mode: Mode) -> Result<Vec<BpfProgram>, SeccompError> {
    let outside = match mode {
        Mode::Off => return Ok(Vec::new()),
        Mode::On => SeccompAction::KillProcess,
        Mode::Log => SeccompAction::Log,
    };
    let arch = seccompiler::TargetArch::x86_64;
    let build = |rules, mismatch, matched| {
        SeccompFilter::new(rules, mismatch, matched, arch)
            .and_then(BpfProgram::try_from)
            .map_err(|source| SeccompError::Build {
                thread: thread.name(),
                source,
            })
    };
    let only = |nr: i64| std::iter::once((nr, Vec::new())).collect();
    let mut out = vec![build(
        only(libc::SYS_clone3),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS.unsigned_abs()),
    )?];
    if !rules::opens_files(thread) {
        out.push(build(
            only(libc::SYS_openat),
            SeccompAction::Allow,
            SeccompAction::Errno(libc::EACCES.unsigned_abs()),
        )?);
    }
    // Last: it allows neither `prctl` nor `seccomp`, so nothing goes in after it.
    let allowed = rules::allowed(thread).map_err(|source| SeccompError::Build {
        thread: thread.name(),
        source,
    })?;
    out.push(build(allowed, outside, SeccompAction::Allow)?);
    Ok(out)
}

/// Installs the filters of `thread` on the calling thread, under the mode [`set_mode`] set
/// (nothing with [`Mode::Off`] or none set). Sets `no_new_privs` first.
pub fn try_confine(thread: Thread) -> Result<(), SeccompError> {
    install(thread, mode())?;
    #[cfg(feature = "test-hook")]
    test_hook::forbidden_call(thread);
    Ok(())
}

/// Installs the filters of `thread` under `mode` on the calling thread (nothing with
/// [`Mode::Off`]), setting `no_new_privs` first: what [`try_confine`] does, and what `memvisor
/// bench confinement` times a call through.
pub fn install(thread: Thread, mode: Mode) -> Result<(), SeccompError> {
    for filter in filters(thread, mode)? {
        // `apply_filter` sets no_new_privs, then installs the filter on this thread only.
        seccompiler::apply_filter(&filter).map_err(|source| SeccompError::Install {
            thread: thread.name(),
            source,
        })?;
    }
    Ok(())
}

/// [`try_confine`], or the VMM ends at once with status 5: a thread that cannot be confined
/// must not go on to serve the guest.
pub fn confine(thread: Thread) {
    if let Err(e) = try_confine(thread) {
        let mut line = e.to_string();
        if let Some(s) = std::error::Error::source(&e) {
            line = format!("{line}: {s}");
        }
        eprintln!("memvisor: {line}");
        std::process::exit(5);
    }
}

#[cfg(feature = "test-hook")]
mod test_hook {
    use super::Thread;

    /// Names the kind of thread that makes [`super::FORBIDDEN_BY_ALL`] right after its filter
    /// is installed (test builds only).
    pub const VAR: &str = "MEMVISOR_SECCOMP_TEST_CALL";

    pub(super) fn forbidden_call(thread: Thread) {
        if std::env::var(VAR).is_ok_and(|v| v == thread.name()) {
            let path = c"/memvisor-seccomp-test-hook";
            let argv = [std::ptr::null::<libc::c_char>()];
            // SAFETY: execve of a path that does not exist, with empty argv and envp: without
            // a filter it fails with ENOENT and changes nothing.
            let rc = unsafe {
                libc::syscall(
                    super::FORBIDDEN_BY_ALL,
                    path.as_ptr(),
                    argv.as_ptr(),
                    argv.as_ptr(),
                )
            };
            eprintln!(
                "memvisor: test hook: the {} thread made syscall {} and lives on (returned {rc})",
                thread.name(),
                super::FORBIDDEN_BY_ALL
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_thread_has_filters_that_compile() {
        for t in Thread::ALL {
            for m in [Mode::On, Mode::Log] {
                let f = filters(t, m).unwrap();
                assert!(f.len() >= 2, "{t:?}");
                assert!(f.iter().all(|p| !p.is_empty() && p.len() < 4096), "{t:?}");
            }
            assert!(filters(t, Mode::Off).unwrap().is_empty());
        }
    }

    #[test]
    fn modes_parse_and_print() {
        for m in [Mode::On, Mode::Log, Mode::Off] {
            assert_eq!(m.as_str().parse::<Mode>().unwrap(), m);
        }
        assert!("yes"
            .parse::<Mode>()
            .unwrap_err()
            .contains("on, log or off"));
    }

    #[test]
    fn this_kernel_has_what_the_filters_need() {
        check_kernel(Mode::On).unwrap();
        check_kernel(Mode::Log).unwrap();
    }

    /// Runs `f` in a new thread confined as `thread` under `mode`, and returns what it returned.
    fn in_confined_thread<T: Send + 'static>(
        thread: Thread,
        mode: Mode,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        std::thread::spawn(move || {
            for p in filters(thread, mode).unwrap() {
                seccompiler::apply_filter(&p).unwrap();
            }
            f()
        })
        .join()
        .unwrap()
    }

    #[test]
    fn a_filtered_thread_is_confined_and_others_are_not() {
        let status = in_confined_thread(Thread::Vcpu, Mode::Log, || {
            let s = std::fs::read_to_string("/proc/thread-self/status");
            // openat fails with EACCES in a thread that opens no file.
            s.map_err(|e| e.raw_os_error())
        });
        assert_eq!(status, Err(Some(libc::EACCES)));
        let own = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        assert!(own.contains("Seccomp:\t0"), "{own}");
    }

    /// Runs `call` in a forked child confined as `thread` under `mode`; returns how it ended
    /// (`Ok(status)` from `_exit`, `Err(signal)`).
    fn in_confined_child(thread: Thread, call: impl Fn() -> libc::c_int) -> Result<i32, i32> {
        let filters = filters(thread, Mode::On).unwrap();
        // SAFETY: the child makes only system calls (the filters are built before the fork,
        // and `apply_filter` and `call` allocate nothing) and leaves with `_exit`.
        unsafe {
            let pid = libc::fork();
            assert!(pid >= 0);
            if pid == 0 {
                for f in &filters {
                    if seccompiler::apply_filter(f).is_err() {
                        libc::_exit(99);
                    }
                }
                libc::_exit(call());
            }
            let mut status = 0;
            assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
            if libc::WIFSIGNALED(status) {
                Err(libc::WTERMSIG(status))
            } else {
                Ok(libc::WEXITSTATUS(status))
            }
        }
    }

    /// The API thread, which writes snapshots, creates files only new and not through a link,
    /// and opens no existing file to write: that kills the VMM.
    #[test]
    fn the_api_thread_creates_new_files_and_writes_no_existing_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| std::ffi::CString::new(format!("{}/{name}", dir.path().display()));
        let (new, existing) = (path("new").unwrap(), path("existing").unwrap());
        std::fs::write(dir.path().join("existing"), "x").unwrap();
        let open = |p: &std::ffi::CString, flags: libc::c_int| {
            let p = p.as_ptr();
            // SAFETY: open reads a NUL-terminated path; the descriptor is left to `_exit`.
            move || i32::from(unsafe { libc::open(p, flags, 0o600) } < 0)
        };
        let exclusive = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW;
        assert_eq!(in_confined_child(Thread::Api, open(&new, exclusive)), Ok(0));
        assert!(dir.path().join("new").exists());
        assert_eq!(
            in_confined_child(Thread::Api, open(&existing, libc::O_RDONLY)),
            Ok(0)
        );
        for flags in [
            libc::O_WRONLY,
            libc::O_RDWR,
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
        ] {
            assert_eq!(
                in_confined_child(Thread::Api, open(&existing, flags)),
                Err(libc::SIGSYS),
                "flags {flags:#x}"
            );
        }
        assert_eq!(std::fs::read(dir.path().join("existing")).unwrap(), b"x");
    }

    #[test]
    fn a_thread_that_opens_files_still_can_and_threads_still_start() {
        let (opened, joined) = in_confined_thread(Thread::Reclaim, Mode::On, || {
            let status = std::fs::read_to_string("/proc/thread-self/status").unwrap_or_default();
            // clone3 answers ENOSYS and glibc falls back to clone, which the filter lets
            // through for threads.
            let joined = std::thread::spawn(|| 7).join().unwrap();
            (status, joined)
        });
        assert!(opened.is_empty(), "reclaim opens no file by path");
        assert_eq!(joined, 7);
        let api = in_confined_thread(Thread::Api, Mode::On, || {
            std::fs::read_to_string("/proc/thread-self/status").unwrap()
        });
        assert!(api.contains("Seccomp:\t2"), "{api}");
        assert!(api.contains("NoNewPrivs:\t1"), "{api}");
    }
}
