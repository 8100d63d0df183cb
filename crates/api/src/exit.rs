//! What a VMM's exit status means. `memvisor run` exits with the guest's debug-exit status
//! `(value << 1) | 1` (as QEMU's `isa-debug-exit`, so 1 is the guest reporting success), or with
//! one of [`status`]'s own codes; `--hypervisor qemu` keeps the same convention. The host, its
//! live page, `memvisor ctl vms` and `memvisor top` say what an exit means in these words.

use serde::{Deserialize, Serialize};

/// Exit statuses of `memvisor run` besides the guest's own debug-exit status.
pub mod status {
    /// The guest shut down normally.
    pub const SHUTDOWN: u8 = 0;
    /// The guest reported success through the debug-exit port (value 0).
    pub const GUEST_SUCCESS: u8 = 1;
    /// Bad input: a flag, a file or a size that cannot be used.
    pub const BAD_INPUT: u8 = 2;
    /// The guest crashed (triple fault, failed entry, KVM internal error).
    pub const GUEST_CRASH: u8 = 4;
    /// memvisor itself failed (a KVM call, a thread, the host), or QEMU did under `--hypervisor qemu`.
    pub const VMM_FAILURE: u8 = 5;
    /// `128 + N`: stopped by signal N (SIGTERM, SIGINT, SIGHUP), after a clean stop.
    pub const SIGNAL_BASE: u8 = 128;
}

/// What `memvisor run --hypervisor qemu` prints on stderr when the kernel's OOM killer ended
/// QEMU in the memory cgroup of its `--mem-limit` (QEMU then dies of SIGKILL, status 137, as if
/// anything else had killed it).
pub const QEMU_OOM_KILLED: &str = "QEMU was OOM-killed in its memory cgroup";

/// The signal a seccomp filter's `SECCOMP_RET_KILL_PROCESS` kills with (x86-64 Linux).
pub const SIGSYS: i32 = 31;

/// The highest signal number: statuses `128 + 1` to `128 + 64` are signals, not guest values.
const MAX_SIGNAL: i32 = 64;

/// How a VM's VMM ended (`GET /vms`: `exit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VmExit {
    /// The guest shut down (status 0).
    GuestShutdown,
    /// The guest reported success through the debug-exit port (status 1).
    GuestSuccess,
    /// The guest reported failure through the debug-exit port: any other odd status but 5.
    GuestFailure,
    /// The guest crashed: a triple fault, a failed entry, a KVM internal error (status 4).
    GuestCrashed,
    /// The VMM refused its flags or files (status 2).
    BadInput,
    /// The VMM itself failed (status 5).
    VmmFailed,
    /// Stopped by a signal it handled (status `128 + N`) or killed by one.
    Signal,
    /// Killed by its own seccomp filter (`SIGSYS`): one of its threads made a system call
    /// outside the filter of its kind (docs/security.md). Never the guest's doing alone.
    Seccomp,
    /// A status the convention does not know.
    Other,
}

/// What an exit means: its kind and the words for it, e.g. "the guest reported failure
/// (status 1)". `code` is the exit code when the VMM exited, `signal` the signal that killed it.
pub fn describe(code: Option<i32>, signal: Option<i32>) -> (VmExit, String) {
    let Some(c) = code else {
        return match signal {
            Some(SIGSYS) => (VmExit::Seccomp, "killed by seccomp".to_owned()),
            Some(s) => (VmExit::Signal, format!("killed by signal {s}")),
            None => (VmExit::Other, "its VMM ended".to_owned()),
        };
    };
    let base = i32::from(status::SIGNAL_BASE);
    let words = |kind, w: &str| (kind, w.to_owned());
    match u8::try_from(c) {
        Ok(status::SHUTDOWN) => words(VmExit::GuestShutdown, "the guest shut down"),
        Ok(status::GUEST_SUCCESS) => words(VmExit::GuestSuccess, "the guest reported success"),
        Ok(status::BAD_INPUT) => words(VmExit::BadInput, "its VMM refused its flags or files"),
        Ok(status::GUEST_CRASH) => words(VmExit::GuestCrashed, "the guest crashed"),
        Ok(status::VMM_FAILURE) => words(VmExit::VmmFailed, "its VMM failed"),
        _ if c > base && c <= base + MAX_SIGNAL => {
            (VmExit::Signal, format!("stopped by signal {}", c - base))
        }
        Ok(code) if code % 2 == 1 => (
            VmExit::GuestFailure,
            format!("the guest reported failure (status {})", code >> 1),
        ),
        _ => (VmExit::Other, format!("its VMM exited with status {c}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_exit_in_words() {
        for (code, signal, kind, words) in [
            (Some(0), None, VmExit::GuestShutdown, "the guest shut down"),
            (
                Some(1),
                None,
                VmExit::GuestSuccess,
                "the guest reported success",
            ),
            (
                Some(3),
                None,
                VmExit::GuestFailure,
                "the guest reported failure (status 1)",
            ),
            (
                Some(0xfd),
                None,
                VmExit::GuestFailure,
                "the guest reported failure (status 126)",
            ),
            (Some(4), None, VmExit::GuestCrashed, "the guest crashed"),
            (
                Some(2),
                None,
                VmExit::BadInput,
                "its VMM refused its flags or files",
            ),
            (Some(5), None, VmExit::VmmFailed, "its VMM failed"),
            (Some(143), None, VmExit::Signal, "stopped by signal 15"),
            (None, Some(9), VmExit::Signal, "killed by signal 9"),
            (None, Some(31), VmExit::Seccomp, "killed by seccomp"),
            (Some(6), None, VmExit::Other, "its VMM exited with status 6"),
            (None, None, VmExit::Other, "its VMM ended"),
        ] {
            assert_eq!(describe(code, signal), (kind, words.to_owned()));
        }
    }
}
