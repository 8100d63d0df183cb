//! The priority of the threads a guest waits on (`--serving-nice`): its virtio devices' threads
//! and the pager's fault thread.
//!
//! While a guest's disk read, balloon request or page fault is served, the guest waits for the
//! VMM thread serving it. On a host whose CPUs run more vCPUs than they are (what overcommitment
//! is for), that thread wakes with its answer and then queues behind busy vCPUs of the same
//! priority, and the guest waits out their time slices on top of its request; a thread that
//! does more work per request (the Swap Mapper's digest and bookkeeping on every disk read)
//! uses up its share sooner and queues more often. Run at a lower nice value, these threads get
//! the CPU as soon as they are runnable. Their bursts are short and every one of them ends a
//! guest's wait, so the vCPUs lose little; the vCPU threads, and the VMM's background threads
//! (reclaim, sampling, the API), stay at the VMM's own priority. Measured in `docs/bench.md`
//! ("The threads a guest waits on").

use std::sync::atomic::{AtomicI32, Ordering};

/// The default nice value of the threads a guest waits on.
pub const SERVING_NICE: i32 = -10;

/// The nice values Linux accepts.
pub const NICE_RANGE: std::ops::RangeInclusive<i32> = -20..=19;

/// Sets the calling thread's nice value (Linux keeps one per thread): `nice` in [`NICE_RANGE`].
/// A value below the thread's present one needs `CAP_SYS_NICE` (or `RLIMIT_NICE`).
pub fn set_thread_nice(nice: i32) -> std::io::Result<()> {
    // SAFETY: no memory is passed; for PRIO_PROCESS, `who` 0 is the calling thread on Linux.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The calling thread's nice value.
pub fn thread_nice() -> std::io::Result<i32> {
    // getpriority may return -1 as a value: errno tells an error from it.
    // SAFETY: `__errno_location` is the calling thread's errno; nothing else is touched.
    unsafe { *libc::__errno_location() = 0 };
    // SAFETY: no memory is passed; for PRIO_PROCESS, `who` 0 is the calling thread.
    let n = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    let e = std::io::Error::last_os_error();
    if n == -1 && e.raw_os_error().is_some_and(|c| c != 0) {
        return Err(e);
    }
    Ok(n)
}

/// The nice value of the VMM's own threads, once [`inherit_serving`] has lowered the thread
/// that starts the others; `i32::MIN` until then.
static BASE: AtomicI32 = AtomicI32::new(i32::MIN);

/// Lowers the calling thread to `nice` for good, in a process about to give up `CAP_SYS_NICE`
/// where `RLIMIT_NICE` cannot be raised (a jailed VMM in a container): a thread without the
/// capability cannot lower itself, but it inherits the nice value of the thread that starts
/// it. So the serving threads start at `nice`, and every thread that does not serve the guest
/// calls [`background`] first, which raises it back to the VMM's own value: raising needs no
/// privilege.
pub fn inherit_serving(nice: i32) -> std::io::Result<()> {
    let base = thread_nice()?;
    if nice >= base {
        return Ok(());
    }
    set_thread_nice(nice)?;
    BASE.store(base, Ordering::SeqCst);
    Ok(())
}

/// Puts the calling thread back at the VMM's own nice value if [`inherit_serving`] lowered
/// the thread that started it; does nothing otherwise.
pub fn background() {
    let base = BASE.load(Ordering::SeqCst);
    if base != i32::MIN {
        if let Err(e) = set_thread_nice(base) {
            tracing::warn!("cannot go back to nice {base}: {e}");
        }
    }
}

/// Runs the calling thread at `nice` if that is not 0. A refusal (no `CAP_SYS_NICE`) is logged
/// under the thread's name, and the thread goes on at the VMM's priority.
pub fn serve_at(nice: i32) {
    // Already there: started by a thread that [`inherit_serving`] lowered.
    if nice == 0 || thread_nice().is_ok_and(|n| n == nice) {
        return;
    }
    if let Err(e) = set_thread_nice(nice) {
        let me = std::thread::current();
        let name = me.name().unwrap_or("unnamed");
        tracing::warn!(
            "thread {name}: cannot run at nice {nice} ({e}); it runs at the VMM's priority"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_s_nice_value_is_its_own() {
        let before = thread_nice().unwrap();
        let want = (before + 3).min(*NICE_RANGE.end());
        let inside = std::thread::spawn(move || {
            serve_at(want);
            thread_nice().unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(inside, want);
        assert_eq!(
            thread_nice().unwrap(),
            before,
            "another thread's change leaked"
        );
        // 0 leaves the thread as it is.
        let same = std::thread::spawn(|| {
            serve_at(0);
            thread_nice().unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(same, before);
        // Below the present value needs CAP_SYS_NICE, which root has (the tests run as root
        // for /dev/kvm); elsewhere the refusal is what is checked.
        let lower =
            std::thread::spawn(move || (set_thread_nice(before - 5), thread_nice().unwrap()))
                .join()
                .unwrap();
        // SAFETY: no arguments.
        if unsafe { libc::geteuid() } == 0 {
            assert!(lower.0.is_ok(), "{:?}", lower.0);
            assert_eq!(lower.1, before - 5);
        } else {
            assert!(lower.0.is_err());
            assert_eq!(lower.1, before);
        }
    }
}
