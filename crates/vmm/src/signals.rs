//! Termination signals (SIGINT, SIGTERM, SIGHUP) handled by a thread instead of killing the
//! process, so a VM that is told to stop still cleans up: its cgroup, its API socket file.
//!
//! [`block`] must run before the process starts threads (they inherit the mask); then one
//! thread calls [`wait`] and turns the signal into an orderly stop.

const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

fn set() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set we pass; sigaddset adds valid signal numbers.
    unsafe {
        let mut s: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut s);
        for sig in SIGNALS {
            libc::sigaddset(&mut s, sig);
        }
        s
    }
}

/// Blocks the termination signals in the calling thread (and the threads it starts later).
pub fn block() -> std::io::Result<()> {
    let s = set();
    // SAFETY: `s` is an initialised signal set; a null old-set pointer is allowed.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &s, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Waits for the next termination signal and returns its number.
pub fn wait() -> libc::c_int {
    let s = set();
    loop {
        let mut sig: libc::c_int = 0;
        // SAFETY: `s` is an initialised set of signals blocked in this thread; `sig` is written.
        if unsafe { libc::sigwait(&s, &mut sig) } == 0 {
            return sig;
        }
    }
}

/// The signal that stops a vCPU thread out of `KVM_RUN` (for the pager's False Reads Preventer).
pub const KICK: libc::c_int = libc::SIGUSR1;

extern "C" fn on_kick(_: libc::c_int) {}

/// Installs a handler for [`KICK`] that does nothing, without `SA_RESTART`, so a blocked
/// `KVM_RUN` returns `EINTR` instead of the process dying.
pub fn install_kick_handler() -> std::io::Result<()> {
    // SAFETY: a zeroed sigaction with a valid handler and an empty mask is a valid argument;
    // the handler does nothing, so it is async-signal-safe.
    let rc = unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_kick as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(KICK, &sa, std::ptr::null_mut())
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
