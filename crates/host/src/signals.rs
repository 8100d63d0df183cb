//! The host's termination signals (SIGINT, SIGTERM, SIGHUP), taken by a thread instead of
//! killing the process, so a host that is told to stop still stops its VMs and removes its
//! socket. `memvisor top` uses them the same way to restore the terminal.
//!
//! [`block`] must run before the process starts threads (they inherit the mask); then one
//! thread calls [`wait`] and turns the signal into an orderly stop. The VMM has its own, beside
//! the vCPU kick signal (`memvisor_vmm::signals`), so the host links no VMM code for them.

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
