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

/// The signal that stops a vCPU thread out of `KVM_RUN` (a pause, the end of the VM, the pager's
/// False Reads Preventer).
pub const KICK: libc::c_int = libc::SIGUSR1;

thread_local! {
    /// This thread's `kvm_run.immediate_exit`, if it is a vCPU thread.
    static IMMEDIATE_EXIT: std::cell::Cell<*mut u8> = const { std::cell::Cell::new(std::ptr::null_mut()) };
}

/// Points the kick handler of the calling vCPU thread at its `kvm_run.immediate_exit` (null:
/// no more). A kick that lands while the thread is outside `KVM_RUN` then makes the next
/// `KVM_RUN` return `EINTR` at once instead of being lost; the thread clears the flag after
/// each `EINTR`.
///
/// # Safety
/// `flag` must stay valid (the vCPU's `kvm_run` mapping alive) until it is replaced with null.
pub unsafe fn set_immediate_exit(flag: *mut u8) {
    IMMEDIATE_EXIT.with(|c| c.set(flag));
}

extern "C" fn on_kick(_: libc::c_int) {
    // A const-initialised thread-local without a destructor is plain TLS: safe in a handler.
    let flag = IMMEDIATE_EXIT.with(std::cell::Cell::get);
    if !flag.is_null() {
        // SAFETY: `set_immediate_exit`'s contract keeps `flag` valid while it is set; a
        // volatile byte store is async-signal-safe.
        unsafe { flag.write_volatile(1) };
    }
}

/// The calling thread's id.
pub fn current_tid() -> i32 {
    // SAFETY: gettid(2) has no arguments and cannot fail.
    unsafe { libc::gettid() }
}

/// Sends [`KICK`] to thread `tid` of this process.
pub fn kick(tid: i32) -> std::io::Result<()> {
    // SAFETY: tgkill(2) of a thread of this process; a stale id fails with ESRCH.
    let rc = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, KICK) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Installs the handler for [`KICK`], without `SA_RESTART`, so a blocked `KVM_RUN` returns
/// `EINTR` instead of the process dying.
pub fn install_kick_handler() -> std::io::Result<()> {
    // SAFETY: a zeroed sigaction with a valid handler and an empty mask is a valid argument;
    // the handler only stores a byte, so it is async-signal-safe.
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
