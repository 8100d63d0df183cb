//! The capabilities the host keeps: those it needs to start jailed VMMs and to run itself
//! ([`NEEDED`]), taken out of every set of the process before its first thread starts, so that
//! neither the host nor a VMM it starts can ever get the others back.

use std::io;

/// What the host and the VMMs it starts need, and why (docs/security.md, "The jail").
pub const NEEDED: [(u32, &str); 12] = [
    (CAP_CHOWN, "giving the host socket to [host] group"),
    (
        CAP_KILL,
        "passing a stop on to a jailed VMM, which runs as another uid",
    ),
    (
        CAP_DAC_OVERRIDE,
        "opening disk images and kernels whoever owns them",
    ),
    (
        CAP_DAC_READ_SEARCH,
        "reaching them through directories whoever owns them",
    ),
    (
        CAP_SETGID,
        "a VMM's switch to its gid, and dropping its groups",
    ),
    (CAP_SETUID, "a VMM's switch to its uid"),
    (CAP_SETPCAP, "a VMM emptying its bounding set"),
    (
        CAP_NET_BIND_SERVICE,
        "metrics_addr or web_addr on a port below 1024",
    ),
    (
        CAP_SYS_PTRACE,
        "a VMM's userfaultfd that serves KVM's faults",
    ),
    (CAP_SYS_ADMIN, "a VMM's namespaces, mounts and pivot_root"),
    (
        CAP_SYS_NICE,
        "the serving threads' nice value (--serving-nice)",
    ),
    (
        CAP_SYSLOG,
        "reading which call a seccomp filter killed a VMM for, in the kernel log",
    ),
];

/// Also kept: a VMM raises `RLIMIT_NICE` for its serving threads before it drops the rest.
const CAP_SYS_RESOURCE: u32 = 24;

const CAP_CHOWN: u32 = 0;
const CAP_DAC_OVERRIDE: u32 = 1;
const CAP_DAC_READ_SEARCH: u32 = 2;
const CAP_KILL: u32 = 5;
const CAP_SETGID: u32 = 6;
const CAP_SETUID: u32 = 7;
const CAP_SETPCAP: u32 = 8;
const CAP_NET_BIND_SERVICE: u32 = 10;
const CAP_SYS_PTRACE: u32 = 19;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_SYS_NICE: u32 = 23;
const CAP_SYSLOG: u32 = 34;

/// Keeps [`NEEDED`] (and `CAP_SYS_RESOURCE`) in the bounding, permitted, effective and
/// inheritable sets and takes every other capability out of them. Called by the only thread of
/// the process; a host not run as root has nothing to drop.
pub fn keep_needed() -> io::Result<()> {
    let kept: Vec<u32> = NEEDED
        .iter()
        .map(|(c, _)| *c)
        .chain([CAP_SYS_RESOURCE])
        .collect();
    let mut cap = 0;
    // SAFETY: prctl with integer arguments; reading a capability past the last fails.
    while unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) } >= 0 {
        // SAFETY: as above; dropping one already out of the set is allowed.
        if !kept.contains(&cap) && unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0
        {
            let e = io::Error::last_os_error();
            // Without CAP_SETPCAP (not root) the set cannot shrink: nothing to keep either.
            if e.raw_os_error() == Some(libc::EPERM) {
                return Ok(());
            }
            return Err(e);
        }
        cap += 1;
    }
    let header = CapHeader {
        version: 0x2008_0522,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget writes two data structs that live across the call.
    if unsafe { libc::syscall(libc::SYS_capget, &header, data.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut mask = [0u32; 2];
    for c in &kept {
        mask[(c / 32) as usize] |= 1 << (c % 32);
    }
    for (d, m) in data.iter_mut().zip(mask) {
        d.effective &= m;
        d.permitted &= m;
        d.inheritable &= m;
    }
    // SAFETY: capset reads the header and two data structs, which live across the call.
    if unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}
