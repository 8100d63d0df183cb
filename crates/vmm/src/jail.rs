//! The jail a VMM enters once it has opened everything it needs ([`enter`]): new mount, IPC and
//! UTS namespaces (and network, for a VMM that cannot migrate out), a root of its own, no capabilities, no new privileges, an
//! unprivileged uid and gid, and resource limits.
//!
//! Step by step, in the one thread the process has at that point (namespaces, capabilities and
//! `no_new_privs` belong to a thread, and every thread started later inherits them):
//! 1. `unshare` the mount, IPC and UTS namespaces, and the network namespace unless the VMM
//!    may be migrated out ([`Jail::network`]), and make every mount private, so nothing mounted
//!    here reaches the host.
//! 2. Mount a small tmpfs on the jail directory: the root the VMM gets. Nothing is written to
//!    the directory itself, so it stays empty for the next start.
//! 3. Mount in it what the VMM still reads by path: `/proc` with only the process directories
//!    (`subset=pid`; in the PID namespace the VMM starts in, that is the VMM alone), for its
//!    own counters (`/proc/self/pagemap`, `/proc/self/task/*/stat`, `/proc/self/ksm_stat`), and
//!    with `--sharing host` the KSM knobs (`/sys/kernel/mm/ksm`), read-only; and the one place
//!    it writes by path, with `--snapshot-dir`: that directory bound at [`SNAPSHOTS`], where
//!    `PUT /vm/snapshot` writes (`crate::snapshot`). Then the tmpfs becomes read-only too.
//! 4. `pivot_root` into it and detach the old root.
//! 5. Resource limits: open files, the size of a file (where no file grows), no core dumps,
//!    and the nice value the serving threads ask for (`RLIMIT_NICE`, since `CAP_SYS_NICE` goes;
//!    where that limit cannot be raised, this thread takes the serving value for the threads
//!    it starts to inherit, `memvisor_devices::priority::inherit_serving`).
//! 6. No supplementary groups, then the gid; every capability out of the bounding and ambient
//!    sets; then the uid, which empties the permitted and effective sets; then the inheritable
//!    set; then `PR_SET_NO_NEW_PRIVS`. The process is made dumpable again (a uid change clears
//!    it), so that its own `/proc/self` files stay readable to it; with no core dumps and a uid
//!    no other process has, nobody else gains from that. The parent-death signal, which a uid
//!    change clears as well, is set again.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// Where and as whom a VMM runs once it has opened its files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Jail {
    /// An existing empty directory: the VMM's root.
    pub dir: PathBuf,
    pub uid: u32,
    pub gid: u32,
    /// The largest file the VMM may write (`RLIMIT_FSIZE`); `None` where a file grows (the
    /// indirection logs).
    pub file_size: Option<u64>,
    /// Mount the KSM knobs (`--sharing host`).
    pub ksm: bool,
    /// The lowest nice value a thread asks for (`--serving-nice`).
    pub nice: i32,
    /// Stay in the host's network namespace: a VMM with an API socket may be migrated out
    /// (`PUT /vm/migrate`), and its `migrate` thread connects to the destination. Its filter is
    /// the only one that lets a thread create a socket (TCP, to connect).
    pub network: bool,
    /// `--snapshot-dir`: a directory of the host's, bound writable into the jail at
    /// [`SNAPSHOTS`]: where a jailed VMM writes its snapshots. An absolute path.
    pub snapshots: Option<PathBuf>,
}

/// Where a jailed VMM sees its `--snapshot-dir`.
pub const SNAPSHOTS: &str = "/snapshots";

/// Most descriptors a jailed VMM may hold (`RLIMIT_NOFILE`): its images, eventfds, the API's
/// connections, with room to spare.
pub const MAX_FILES: u64 = 1024;

/// Why a VMM could not enter its jail.
#[derive(Debug, Error)]
#[error("cannot enter the jail {dir}: {what}")]
pub struct JailError {
    dir: PathBuf,
    what: String,
    #[source]
    source: io::Error,
}

/// Why a jail cannot be used: one sentence for the operator.
pub fn check(jail: &Jail) -> Result<(), String> {
    let dir = &jail.dir;
    if jail.uid == 0 {
        return Err("--uid 0 is root: a jail needs an unprivileged uid".into());
    }
    if jail.gid == 0 {
        return Err("--gid 0 is root's group: a jail needs an unprivileged gid".into());
    }
    let mut entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(format!("jail directory {} does not exist", dir.display()))
        }
        Err(e) => return Err(format!("cannot read jail directory {}: {e}", dir.display())),
    };
    if let Some(entry) = entries.next() {
        let name = entry.map(|e| e.file_name()).unwrap_or_default();
        return Err(format!(
            "jail directory {} is not empty (it holds {}): a jail starts empty",
            dir.display(),
            name.to_string_lossy()
        ));
    }
    if let Some(snapshots) = &jail.snapshots {
        check_snapshots(snapshots, jail.uid, jail.gid)?;
    }
    for ns in ["mnt", "pid", "ipc", "uts", "net"] {
        if !Path::new("/proc/self/ns").join(ns).exists() {
            return Err(format!(
                "this kernel has no {ns} namespaces (no /proc/self/ns/{ns}); --jail needs them"
            ));
        }
    }
    Ok(())
}

/// Why `dir` cannot be a jailed VMM's snapshot directory: it must be a directory (not a
/// symbolic link to one) that `uid` or `gid` may write and enter.
fn check_snapshots(dir: &Path, uid: u32, gid: u32) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let shown = dir.display();
    let m = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(format!("--snapshot-dir {shown} does not exist"))
        }
        Err(e) => return Err(format!("cannot read --snapshot-dir {shown}: {e}")),
    };
    if m.file_type().is_symlink() {
        return Err(format!(
            "--snapshot-dir {shown} is a symbolic link: give the directory itself"
        ));
    }
    if !m.is_dir() {
        return Err(format!("--snapshot-dir {shown} is not a directory"));
    }
    // Write and search: the owner's bits for its owner, the group's for its group, else the
    // others'.
    let bits = if m.uid() == uid {
        0o300
    } else if m.gid() == gid {
        0o030
    } else {
        0o003
    };
    if m.mode() & bits != bits {
        return Err(format!(
            "--snapshot-dir {shown} is not writable by uid {uid} (it is uid {}'s, mode {:o}): \
             chown {uid} {shown}",
            m.uid(),
            m.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Enters `jail` (the steps in the module's documentation). Called once, by the only thread of
/// the process, after every file the VMM needs is open and before any other thread starts.
pub fn enter(jail: &Jail) -> Result<(), JailError> {
    let err = |what: &str, source| JailError {
        dir: jail.dir.clone(),
        what: what.to_owned(),
        source,
    };
    // For the calls that return an io::Error, and for the raw ones, which leave it in errno.
    let failed = |what: &'static str| move |source| err(what, source);
    let fail = |what: &'static str| err(what, io::Error::last_os_error());
    let dir = cstr(&jail.dir);
    let net = if jail.network { 0 } else { libc::CLONE_NEWNET };
    // SAFETY: unshare takes flags only.
    if unsafe { libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS | net) }
        != 0
    {
        return Err(fail("unshare the mount, IPC, UTS and network namespaces"));
    }
    mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None)
        .map_err(failed("make the mounts private"))?;
    let hidden = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    mount(
        Some(c"memvisor-jail"),
        &dir,
        Some(c"tmpfs"),
        hidden,
        Some(c"size=64k,nr_inodes=32,mode=0755"),
    )
    .map_err(failed("mount a tmpfs on it"))?;
    let proc_dir = jail.dir.join("proc");
    mkdir(&proc_dir).map_err(failed("make /proc"))?;
    mount(
        Some(c"proc"),
        &cstr(&proc_dir),
        Some(c"proc"),
        hidden,
        Some(c"subset=pid"),
    )
    .map_err(failed("mount /proc"))?;
    if jail.ksm {
        let knobs = Path::new("/sys/kernel/mm/ksm");
        let mut at = jail.dir.clone();
        for part in ["sys", "kernel", "mm", "ksm"] {
            at.push(part);
            mkdir(&at).map_err(failed("make /sys/kernel/mm/ksm"))?;
        }
        let at = cstr(&at);
        mount(Some(&cstr(knobs)), &at, None, libc::MS_BIND, None)
            .map_err(failed("bind /sys/kernel/mm/ksm"))?;
        let ro = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | hidden;
        mount(None, &at, None, ro, None).map_err(failed("make /sys/kernel/mm/ksm read-only"))?;
    }
    if let Some(host) = &jail.snapshots {
        let at = jail.dir.join(SNAPSHOTS.trim_start_matches('/'));
        mkdir(&at).map_err(failed("make /snapshots"))?;
        let at = cstr(&at);
        mount(Some(&cstr(host)), &at, None, libc::MS_BIND, None)
            .map_err(failed("bind the snapshot directory"))?;
        let rw = libc::MS_BIND | libc::MS_REMOUNT | hidden;
        mount(None, &at, None, rw, None).map_err(failed("remount the snapshot directory"))?;
    }
    mount(
        None,
        &dir,
        None,
        libc::MS_REMOUNT | libc::MS_RDONLY | hidden,
        None,
    )
    .map_err(failed("make the jail's root read-only"))?;
    // SAFETY: chdir and pivot_root read NUL-terminated paths that outlive the calls.
    unsafe {
        if libc::chdir(dir.as_ptr()) != 0 {
            return Err(fail("enter it"));
        }
        if libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) != 0 {
            return Err(fail("pivot_root into it"));
        }
        // The old root is stacked on the new one: detach it.
        if libc::umount2(c".".as_ptr(), libc::MNT_DETACH) != 0 {
            return Err(fail("detach the old root"));
        }
        if libc::chdir(c"/".as_ptr()) != 0 {
            return Err(fail("enter its root"));
        }
    }
    let nice = u64::try_from(20 - jail.nice.min(0)).unwrap_or(20);
    if let Err(e) = setrlimit(libc::RLIMIT_NICE, nice) {
        // Raising a hard limit takes CAP_SYS_RESOURCE, which a container may not give: this
        // thread, which starts all the others, takes the serving value while it still may;
        // the threads that do not serve the guest go back up (`priority::inherit_serving`).
        tracing::debug!("jail: RLIMIT_NICE stays as it is ({e}); the serving threads inherit");
        memvisor_devices::priority::inherit_serving(jail.nice)
            .map_err(failed("lower the serving threads' nice value"))?;
    }
    let limits = [
        (libc::RLIMIT_NOFILE, MAX_FILES, "limit open files"),
        (libc::RLIMIT_CORE, 0, "turn core dumps off"),
    ];
    for (resource, value, what) in limits {
        setrlimit(resource, value).map_err(failed(what))?;
    }
    if let Some(bytes) = jail.file_size {
        setrlimit(libc::RLIMIT_FSIZE, bytes).map_err(failed("limit file sizes"))?;
    }
    drop_privileges(jail.uid, jail.gid).map_err(|(what, source)| JailError {
        dir: jail.dir.clone(),
        what: what.to_owned(),
        source,
    })
}

/// Step 6 of [`enter`].
fn drop_privileges(uid: u32, gid: u32) -> Result<(), (&'static str, io::Error)> {
    let fail = |what| (what, io::Error::last_os_error());
    let mut death_signal: libc::c_int = 0;
    // SAFETY: PR_GET_PDEATHSIG writes one int that lives across the call.
    if unsafe { libc::prctl(libc::PR_GET_PDEATHSIG, &mut death_signal, 0, 0, 0) } != 0 {
        return Err(fail("read the parent-death signal"));
    }
    // SAFETY: plain syscalls with integer arguments; setgroups is given no list.
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0 {
            return Err(fail("drop the supplementary groups"));
        }
        if libc::setresgid(gid, gid, gid) != 0 {
            return Err(fail("switch to the gid"));
        }
        // Every capability this kernel knows: dropping one past the last fails with EINVAL.
        let mut cap = 0;
        while libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) >= 0 {
            if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                return Err(fail("drop the bounding set"));
            }
            cap += 1;
        }
        if libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        ) != 0
        {
            return Err(fail("clear the ambient set"));
        }
        if libc::prctl(libc::PR_SET_KEEPCAPS, 0, 0, 0, 0) != 0 {
            return Err(fail("clear keep-caps"));
        }
        if libc::setresuid(uid, uid, uid) != 0 {
            return Err(fail("switch to the uid"));
        }
    }
    // The uid change emptied the permitted and effective sets; this empties the inheritable.
    let header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    // SAFETY: capset reads the header and two data structs, which live across the call.
    if unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) } != 0 {
        return Err(fail("empty the capability sets"));
    }
    // SAFETY: prctl with integer arguments.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(fail("set no_new_privs"));
        }
        if libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) != 0 {
            return Err(fail("keep its /proc readable to itself"));
        }
        // The uid change cleared it too: a VMM that dies with its parent still does.
        if death_signal != 0 && libc::prctl(libc::PR_SET_PDEATHSIG, death_signal, 0, 0, 0) != 0 {
            return Err(fail("set the parent-death signal again"));
        }
    }
    Ok(())
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

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

fn cstr(path: &Path) -> CString {
    // A path from the OS or a flag never holds a NUL in the middle; a made-up one is refused by
    // the call that gets the empty string instead.
    CString::new(path.as_os_str().as_bytes()).unwrap_or_default()
}

fn mkdir(path: &Path) -> io::Result<()> {
    match std::fs::create_dir(path) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

fn mount(
    source: Option<&std::ffi::CStr>,
    target: &std::ffi::CStr,
    fstype: Option<&std::ffi::CStr>,
    flags: libc::c_ulong,
    data: Option<&std::ffi::CStr>,
) -> io::Result<()> {
    let ptr = |s: Option<&std::ffi::CStr>| s.map_or(std::ptr::null(), std::ffi::CStr::as_ptr);
    // SAFETY: every pointer is null or a NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(
            ptr(source),
            target.as_ptr(),
            ptr(fstype),
            flags,
            ptr(data).cast(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn setrlimit(resource: libc::__rlimit_resource_t, value: u64) -> io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: setrlimit reads one rlimit struct that lives across the call.
    if unsafe { libc::setrlimit(resource, &limit) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
