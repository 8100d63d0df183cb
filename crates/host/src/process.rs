//! One VMM process: `memvisor run` for one VM, started with the host's flags (its API socket,
//! swap file and stats file in the state directory, working-set sampling, its pager holding
//! guest RAM from the start), its console and messages in a log file, driven through its API
//! socket. The VMM gets SIGTERM if the manager dies, so no VM outlives its host.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use memvisor_api::{VmClient, VmExit, VmSpec};

/// How long a call to a VMM's API may take before the VMM counts as not answering.
const API_TIMEOUT: Duration = Duration::from_secs(2);

/// Where a VMM keeps its files: a directory of its own in the state directory, `NAME/`, only
/// root's, with its API socket, log, swap file, final counters, its jail (an empty
/// directory, the VMM's root once it has opened the rest) and, jailed, `snapshots/`, the VM's
/// uid's, the one directory the jailed VMM writes (`memvisor run --snapshot-dir`).
#[derive(Clone, Debug)]
pub struct VmmFiles {
    pub dir: PathBuf,
    pub sock: PathBuf,
    pub log: PathBuf,
    pub swap: PathBuf,
    pub stats: PathBuf,
    pub jail: PathBuf,
    pub snapshots: PathBuf,
}

impl VmmFiles {
    pub fn new(state_dir: &Path, name: &str) -> VmmFiles {
        let dir = state_dir.join(name);
        VmmFiles {
            sock: dir.join("api.sock"),
            log: dir.join("vmm.log"),
            swap: dir.join("swap"),
            stats: dir.join("stats.json"),
            jail: dir.join("jail"),
            snapshots: dir.join("snapshots"),
            dir,
        }
    }

    /// Removes what a VMM leaves behind once it has ended (its swap file, a stale socket).
    pub fn clean(&self) {
        for p in [&self.sock, &self.swap] {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// How the host runs each VMM.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The memvisor binary.
    pub exe: PathBuf,
    pub sample_pages: u32,
    pub sample_period: Duration,
    /// How the VMs' pools keep pages (`[host] pool_compress`).
    pub pool_compress: memvisor_api::PoolCompress,
    /// Size of a chunk of their pool memory (`[host] pool_chunk`).
    pub pool_chunk: u64,
    /// What the VMMs' seccomp filters do (`[host] seccomp`, `memvisor run --seccomp`).
    pub seccomp: SeccompMode,
    /// Release readiness for the VMs with the Swap Mapper whose spec sets no `release_ready`
    /// (bytes; 0: none): see [`Launch::release_ready_for`].
    pub release_ready: u64,
}

impl Launch {
    /// The default release readiness of a host that balances with `balancing`, as it starts.
    /// HyperDealer2's balancing releases up to `MAX_RELEASE` (32 MiB) a tick from a victim, and
    /// a release whose pages are not ready checks each one's digest (2-7 µs a page here: 20-55
    /// ms for 10,000 pages, against 4-5 ms ready; docs/hd2.md), so every VM with the Swap Mapper
    /// keeps that much ready. A host balancing with balloons alone releases nothing and keeps
    /// none: readiness costs a writing guest a fault per ready page it writes.
    pub fn release_ready_for(balancing: memvisor_api::Balancing) -> u64 {
        match balancing {
            memvisor_api::Balancing::Hd2 => memvisor_policy::balance::MAX_RELEASE,
            memvisor_api::Balancing::Balloon => 0,
        }
    }

    /// `--release-ready` for `spec` when it sets none and has the Swap Mapper: the host's
    /// default, at most the VM's memory.
    fn release_ready_arg(&self, spec: &VmSpec) -> Option<String> {
        let bytes = self.release_ready.min(spec.mem / 4096 * 4096);
        (spec.mapper && spec.release_ready.is_none() && bytes > 0)
            .then(|| format!("--release-ready={bytes}"))
    }
}

/// What a VMM's seccomp filters do with a call outside them (`[host] seccomp`, passed to each
/// VMM as `memvisor run --seccomp`; docs/security.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SeccompMode {
    /// A call outside its thread's filter kills the VMM; the host reports the call.
    #[default]
    On,
    /// The call goes through and the kernel logs it.
    Log,
    /// No filters.
    Off,
}

impl SeccompMode {
    pub fn mode(self) -> memvisor_seccomp::Mode {
        match self {
            SeccompMode::On => memvisor_seccomp::Mode::On,
            SeccompMode::Log => memvisor_seccomp::Mode::Log,
            SeccompMode::Off => memvisor_seccomp::Mode::Off,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SeccompMode::On => "on",
            SeccompMode::Log => "log",
            SeccompMode::Off => "off",
        }
    }
}

/// A running (or ended) VMM process.
pub struct Vmm {
    child: Child,
    /// The uid it runs as, jailed; `None`: unjailed, as the host.
    uid: Option<u32>,
    /// How long its log was when it started: what it writes is after.
    log_start: u64,
}

impl Vmm {
    /// Starts `memvisor run` for `spec` with its pager's limit at `limit`. A VM started at its
    /// whole `mem` gets no limit: its RAM stays plain memory on huge pages, as a VM of its own
    /// (`memvisor run` without `--mem-limit`), until the host first shrinks it. Given
    /// `incoming` (an address and a token), it waits there for a VM migrating in (`--incoming`;
    /// the token goes in its environment, which other users cannot read, not on its command
    /// line).
    pub fn spawn(
        launch: &Launch,
        spec: &VmSpec,
        files: &VmmFiles,
        (limit, pool): (u64, Option<u64>),
        uid: Option<u32>,
        incoming: Option<(&str, &str)>,
    ) -> std::io::Result<Vmm> {
        {
            use std::os::unix::fs::DirBuilderExt;
            let mut dirs = std::fs::DirBuilder::new();
            dirs.recursive(true).mode(0o700);
            dirs.create(&files.dir)?;
            if let Some(uid) = uid {
                dirs.create(&files.jail)?;
                // Its snapshots, its own: made again for the uid this start gives it (the
                // snapshots of an earlier start stay the uid that wrote them, read-only to it).
                dirs.create(&files.snapshots)?;
                std::os::unix::fs::chown(&files.snapshots, Some(uid), Some(uid))?;
            }
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&files.log)?;
        let log_start = log.metadata()?.len();
        let _ = std::fs::remove_file(&files.sock);
        let mut cmd = Command::new(&launch.exe);
        cmd.arg("run")
            .args(spec.run_args())
            .arg("--api-sock")
            .arg(&files.sock)
            .arg("--swap")
            .arg(&files.swap)
            .arg("--stats-json")
            .arg(&files.stats)
            .arg(format!("--seccomp={}", launch.seccomp.as_str()))
            .arg("--sample-pages")
            .arg(launch.sample_pages.to_string())
            .arg("--sample-period")
            .arg(launch.sample_period.as_secs_f64().to_string())
            .args((limit < spec.mem).then(|| format!("--mem-limit={limit}")))
            .args(launch.release_ready_arg(spec))
            .args(pool.into_iter().flat_map(|p| {
                let p = p.max(4096);
                // A share smaller than a chunk gets chunks of its own size (whole pages).
                let chunk = launch.pool_chunk.min(p / 4096 * 4096);
                [
                    format!("--pool={p}"),
                    format!("--pool-compress={}", launch.pool_compress),
                    format!("--pool-chunk={chunk}"),
                ]
            }))
            .args(uid.into_iter().flat_map(|u| {
                let jail = files.jail.display().to_string();
                [
                    "--jail".to_owned(),
                    jail,
                    format!("--uid={u}"),
                    format!("--gid={u}"),
                    "--snapshot-dir".to_owned(),
                    files.snapshots.display().to_string(),
                ]
            }))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if let Some((listen, token)) = incoming {
            cmd.arg("--incoming")
                .arg(listen)
                .env("MEMVISOR_MIGRATION_TOKEN", token);
        }
        // SAFETY: the closure runs in the child between fork and exec and only makes
        // async-signal-safe system calls, on a signal set of its own stack.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The host blocks the stopping signals for its signal thread, and a child
                // inherits its mask: a VMM that has not set up its own yet (one waiting for a
                // migration to come in) would keep a SIGTERM pending for ever.
                let mut none: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut none);
                if libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        Ok(Vmm {
            child,
            uid,
            log_start,
        })
    }

    /// Where its log was when it started.
    pub fn log_start(&self) -> u64 {
        self.log_start
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The uid it runs as, jailed.
    pub fn uid(&self) -> Option<u32> {
        self.uid
    }

    /// The process that runs the VM: a jailed VMM is the child of the process started, which
    /// waits outside its PID namespace (`memvisor run --jail`).
    fn vm_pid(&self) -> u32 {
        let pid = self.child.id();
        if self.uid.is_none() {
            return pid;
        }
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .ok()
            .and_then(|c| c.split_whitespace().next()?.parse().ok())
            .unwrap_or(pid)
    }

    /// What the VMM process holds besides its guest RAM, in bytes ([`pss_beside_ram`] for a VM
    /// of `mem` bytes), and, jailed, the whole proportional set size ([`pss`]) of the process
    /// outside its jail that waits for it; `None` once the VMM is gone.
    pub fn pss_beside_ram(&self, mem: u64) -> Option<u64> {
        let (started, vmm) = (self.child.id(), self.vm_pid());
        let outside = if vmm == started {
            0
        } else {
            pss(&format!("/proc/{started}/smaps_rollup")).unwrap_or(0)
        };
        Some(pss_beside_ram(&format!("/proc/{vmm}/smaps"), mem)? + outside)
    }

    /// The exit status, once the process has ended.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Asks the VMM to stop its VM cleanly.
    pub fn terminate(&self) {
        signal(self.child.id(), libc::SIGTERM);
    }

    /// Kills the VMM and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client of the VMM whose API socket is `sock`, which gives up after [`API_TIMEOUT`].
pub fn client(sock: &Path) -> VmClient {
    VmClient::new(sock).with_timeout(API_TIMEOUT)
}

fn signal(pid: u32, sig: libc::c_int) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill has no memory effects; the pid is our own child, not yet reaped.
    if unsafe { libc::kill(pid, sig) } != 0 {
        // ESRCH: it has just exited (the next reap sees it); anything else is worth a word.
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ESRCH) {
            tracing::warn!("cannot send signal {sig} to VMM {pid}: {e}");
        }
    }
}

/// What an exit status says ([`memvisor_api::exit::describe`]): the code (`128 + N` for signal
/// N), its kind and its words, with the VMM's last message from its log when something failed.
/// A VMM its seccomp filter killed is reported with the call and thread the kernel log names.
pub fn describe_exit(status: ExitStatus, pid: u32, log: &Path) -> (i32, VmExit, String) {
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1);
    let (kind, how) = memvisor_api::exit::describe(status.code(), status.signal());
    let failed = matches!(
        kind,
        VmExit::GuestCrashed | VmExit::BadInput | VmExit::VmmFailed | VmExit::Other
    );
    if kind == VmExit::Seccomp {
        let jailed = || {
            let line = last_message(log)?;
            let rest = line.strip_prefix("memvisor: ")?;
            rest.strip_prefix(crate::kmsg::KILLED_BY_SECCOMP)?
                .strip_prefix(": ")
                .map(str::to_owned)
        };
        let kill = crate::kmsg::seccomp_kill(pid).map(|k| k.to_string());
        return match kill.or_else(jailed) {
            Some(k) => (code, kind, format!("{how}: {k}")),
            None => (
                code,
                kind,
                format!("{how} (the kernel log does not say which call)"),
            ),
        };
    }
    match last_message(log) {
        Some(m) if failed => (code, kind, format!("{how}: {m}")),
        _ => (code, kind, how),
    }
}

/// The last line memvisor itself wrote to `log` (`memvisor: ...` or a logged error).
fn last_message(log: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(log).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(8192))).ok()?;
    let mut tail = Vec::new();
    f.read_to_end(&mut tail).ok()?;
    let tail = String::from_utf8_lossy(&tail);
    tail.lines()
        .rev()
        .find(|l| l.starts_with("memvisor: ") || l.contains("ERROR"))
        .map(|l| l.trim().chars().take(300).collect())
}

/// The proportional set size of a process in bytes, from its `smaps_rollup` at `path`: its
/// resident pages, each shared one divided among the processes that map it. This is what the
/// process holds of host memory, counted so that the processes' figures add up; RSS counts a
/// page shared with another process (a KSM-merged page, the binary's text) once in each.
/// `None` when the file cannot be read (the process is gone) or has no `Pss:` line.
pub fn pss(path: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|l| field_bytes(l, "Pss"))?
}

/// The value of an `smaps` line `FIELD:   N kB` in bytes: `None` for another line,
/// `Some(None)` for this field unreadable.
fn field_bytes(line: &str, field: &str) -> Option<Option<u64>> {
    let v = line.strip_prefix(field)?.strip_prefix(':')?;
    Some(
        v.trim()
            .strip_suffix("kB")
            .and_then(|k| k.trim().parse::<u64>().ok())
            .map(|k| k * 1024),
    )
}

/// The size of the mapping an `smaps` header line (`START-END PERMS ...`) describes.
fn mapping_size(line: &str) -> Option<u64> {
    let (a, b) = line.split_once(' ')?.0.split_once('-')?;
    let (a, b) = (
        u64::from_str_radix(a, 16).ok()?,
        u64::from_str_radix(b, 16).ok()?,
    );
    Some(b.saturating_sub(a))
}

/// The proportional set size in bytes of a VMM's mappings other than its guest RAM, from its
/// `smaps` at `path` ([`smaps_beside_ram`] of `Pss`). Read in one pass: the VMM's whole PSS
/// less a resident count read at another moment was off by what the guest faulted in or gave
/// up in between, up to several MiB a reading.
pub fn pss_beside_ram(path: &str, mem: u64) -> Option<u64> {
    smaps_beside_ram(path, "Pss", mem)
}

/// `field` (`Pss`, `Rss`: any of `smaps`' sizes in kB) in bytes, summed over a hypervisor
/// process's mappings in its `smaps` at `path` but its guest RAM's: the mappings registered
/// with memvisor's pager's userfaultfd (`um` among their `VmFlags`; nothing else is), and any
/// mapping of exactly the VM's `mem` bytes (guest RAM before the pager takes it over, and
/// QEMU's). `None` when the file cannot be read (the process is gone), has no such field, or
/// one that does not parse.
pub fn smaps_beside_ram(path: &str, field: &str, mem: u64) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    // Each mapping is its header line, then its fields, `VmFlags` last.
    let (mut total, mut seen) = (0u64, false);
    let (mut size, mut value) = (0u64, 0u64);
    for line in text.lines() {
        if let Some(v) = field_bytes(line, field) {
            value = v?;
            seen = true;
        } else if let Some(flags) = line.strip_prefix("VmFlags:") {
            let uffd = flags.split_whitespace().any(|f| f == "um");
            if !uffd && size != mem {
                total += value;
            }
            value = 0;
        } else if let Some(s) = mapping_size(line) {
            size = s;
        }
    }
    seen.then_some(total)
}

/// The host process's own proportional set size ([`pss`]).
pub fn own_pss() -> Option<u64> {
    pss("/proc/self/smaps_rollup")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vms_with_the_mapper_keep_one_tick_of_release_ready_on_a_host_balancing_with_hd2() {
        let launch = |balancing| Launch {
            exe: PathBuf::from("memvisor"),
            sample_pages: 0,
            sample_period: Duration::from_secs(1),
            pool_compress: memvisor_api::PoolCompress::default(),
            pool_chunk: 1 << 20,
            seccomp: SeccompMode::On,
            release_ready: Launch::release_ready_for(balancing),
        };
        let spec = |json: &str| -> VmSpec { serde_json::from_str(json).unwrap() };
        let (hd2, balloon) = (
            launch(memvisor_api::Balancing::Hd2),
            launch(memvisor_api::Balancing::Balloon),
        );
        let mapper = spec(r#"{"name":"a","mem":"256M","mapper":true}"#);
        assert_eq!(
            hd2.release_ready_arg(&mapper).as_deref(),
            Some("--release-ready=33554432")
        );
        assert_eq!(balloon.release_ready_arg(&mapper), None);
        // Without the Swap Mapper there is nothing to make ready; a spec's own value stands.
        let plain = spec(r#"{"name":"a","mem":"256M"}"#);
        assert_eq!(hd2.release_ready_arg(&plain), None);
        let own = spec(r#"{"name":"a","mem":"256M","mapper":true,"release_ready":"0"}"#);
        assert_eq!(hd2.release_ready_arg(&own), None);
        // At most the VM's memory.
        let small = spec(r#"{"name":"a","mem":"24M","mapper":true}"#);
        assert_eq!(
            hd2.release_ready_arg(&small).as_deref(),
            Some("--release-ready=25165824")
        );
    }

    #[test]
    fn pss_reads_smaps_rollup() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("smaps_rollup");
        std::fs::write(
            &f,
            "55d0c0000000-7ffd00000000 ---p 00000000 00:00 0  [rollup]\nRss:  40960 kB\nPss:  30721 kB\nPss_Anon:  20000 kB\n",
        )
        .unwrap();
        assert_eq!(pss(f.to_str().unwrap()), Some(30721 * 1024));
        std::fs::write(&f, "Rss: 1 kB\n").unwrap();
        assert_eq!(pss(f.to_str().unwrap()), None);
        assert_eq!(pss("/nonexistent/smaps_rollup"), None);
        assert!(own_pss().is_some_and(|b| b > 0));
    }

    /// Guest RAM is left out whether the pager has registered it or not, and only guest RAM.
    #[test]
    fn pss_beside_ram_leaves_out_guest_ram() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("smaps");
        let path = f.to_str().unwrap();
        let mapping = |range: &str, pss_kb: u64, flags: &str| {
            format!("{range} rw-p 00000000 00:00 0 \nSize: 1 kB\nPss: {pss_kb} kB\nPss_Dirty: 0 kB\nVmFlags: {flags}\n")
        };
        let mem = 0x1000_0000; // 256 MiB
        let vmm = [
            mapping("55d0c0000000-55d0c0200000", 900, "rd ex mr mw me"),
            mapping("7f1000000000-7f1000200000", 2048, "rd wr mr mw me ac hg"),
            mapping("7f2000000000-7f2000021000", 100, "rd wr mr mw me ac"),
        ]
        .concat();
        let beside = (900 + 2048 + 100) * 1024;
        // Under the pager, split in two (by whatever): both registered, both left out.
        let pager = [
            mapping(
                "7f0000000000-7f0008000000",
                65536,
                "rd wr mr mw me ac nh um uw",
            ),
            mapping(
                "7f0008000000-7f0010000000",
                1000,
                "rd wr mr mw me ac nh um uw",
            ),
        ]
        .concat();
        std::fs::write(&f, format!("{vmm}{pager}")).unwrap();
        assert_eq!(pss_beside_ram(path, mem), Some(beside));
        // Plain memory: one mapping of the VM's size, not registered.
        let plain = mapping("7f0000000000-7f0010000000", 66536, "rd wr mr mw me ac hg");
        std::fs::write(&f, format!("{plain}{vmm}")).unwrap();
        assert_eq!(pss_beside_ram(path, mem), Some(beside));
        // A mapping of another size is the VMM's own.
        assert_eq!(pss_beside_ram(path, mem / 2), Some(beside + 66536 * 1024));
        std::fs::write(&f, "Rss: 1 kB\n").unwrap();
        assert_eq!(pss_beside_ram(path, mem), None);
        assert_eq!(pss_beside_ram("/nonexistent/smaps", mem), None);
        assert!(pss_beside_ram("/proc/self/smaps", 1).is_some_and(|b| b > 0));
    }
}
