//! The readings of the host, from `/proc` and the cgroup v1 memory controller, independent of
//! memvisor's own counters: swap traffic, a process's I/O and peak RSS, a memory cgroup's
//! failures and OOM kills, the kernel log, and the environment of the run.

use std::path::Path;

/// The cgroup v1 memory controller's root.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup/memory";

/// Host-wide swap counters from `/proc/vmstat`, in pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Vmstat {
    pub pswpin: u64,
    pub pswpout: u64,
    /// Pages swapped out that were all zero: the kernel (6.12 on) marks them in the swap map
    /// and writes nothing.
    pub swpout_zero: u64,
}

fn field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        let k = w.next()?;
        let v = w.next()?.parse().ok();
        v.filter(|_| k.trim_end_matches(':') == key.trim_end_matches(':'))
    })
}

/// `/proc/vmstat` now.
pub fn vmstat() -> Vmstat {
    let t = std::fs::read_to_string("/proc/vmstat").unwrap_or_default();
    Vmstat {
        pswpin: field(&t, "pswpin").unwrap_or(0),
        pswpout: field(&t, "pswpout").unwrap_or(0),
        swpout_zero: field(&t, "swpout_zero").unwrap_or(0),
    }
}

/// A process's storage I/O from `/proc/PID/io`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcIo {
    /// Bytes the process caused to be read from storage.
    pub read_bytes: u64,
    /// Bytes the process caused to be written to storage.
    pub write_bytes: u64,
}

/// `/proc/PID/io`, or `None` once the process is gone.
pub fn proc_io(pid: u32) -> Option<ProcIo> {
    let t = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    Some(ProcIo {
        read_bytes: field(&t, "read_bytes")?,
        write_bytes: field(&t, "write_bytes")?,
    })
}

/// Requests the host's block device completed: what VSwapper's Fig. 11 counts as disk
/// operations. Every image and swap file of a run is opened `O_DIRECT` (by memvisor, and by QEMU
/// with `cache=none`), so a request is counted as the run makes it, not when writeback gets to it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskOps {
    pub reads: u64,
    pub writes: u64,
}

impl DiskOps {
    /// What happened between `earlier` and `self`.
    #[must_use]
    pub fn since(&self, earlier: &Self) -> Self {
        DiskOps {
            reads: self.reads.saturating_sub(earlier.reads),
            writes: self.writes.saturating_sub(earlier.writes),
        }
    }

    pub fn total(&self) -> u64 {
        self.reads + self.writes
    }
}

/// The requests completed so far by the block device that holds `dir` (the first and fifth
/// fields of its `stat` in sysfs: reads and writes completed, every process's). `None` where
/// `dir` is on no block device (tmpfs, an overlay).
pub fn disk_ops(dir: &Path) -> Option<DiskOps> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(dir).ok()?.dev();
    // The kernel's encoding of a device number (glibc's `major` and `minor`).
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    if major == 0 {
        return None;
    }
    let t = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/stat")).ok()?;
    let mut f = t.split_whitespace().map(str::parse::<u64>);
    let reads = f.next()?.ok()?;
    let writes = f.nth(3)?.ok()?;
    Some(DiskOps { reads, writes })
}

/// Peak resident memory (`VmHWM`) of a process in bytes.
pub fn peak_rss(pid: u32) -> Option<u64> {
    let t = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    field(&t, "VmHWM").map(|kb| kb << 10)
}

/// The processes whose parent is `pid`, with their command names, in process id order.
fn children_named(pid: u32) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(cpid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{cpid}/stat")) else {
            continue;
        };
        let Some((comm, rest)) = stat_fields(&stat) else {
            continue;
        };
        if rest.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(pid) {
            out.push((cpid, comm.to_owned()));
        }
    }
    out.sort_unstable();
    out
}

/// The processes whose parent is `pid`, in process id order.
pub fn children(pid: u32) -> Vec<u32> {
    children_named(pid).into_iter().map(|c| c.0).collect()
}

/// The first child of `pid` whose command name starts with `prefix` (QEMU under `memvisor run`).
pub fn child_named(pid: u32, prefix: &str) -> Option<u32> {
    let mut named = children_named(pid).into_iter();
    named.find(|c| c.1.starts_with(prefix)).map(|c| c.0)
}

/// The VMM processes of `vm`, a VM's process as `memvisor host` lists it: itself, or for a
/// jailed VMM (which that process waits for outside its PID namespace, `memvisor run --jail`)
/// its child.
pub fn vmm_processes(vm: u32) -> Vec<u32> {
    match children(vm).as_slice() {
        [] => vec![vm],
        vmm => vmm.to_vec(),
    }
}

/// The threads of process `pid` now (none once it is gone).
pub fn threads(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse().ok())
        .collect()
}

/// A `/proc/.../stat` line's command name and its fields after it (the state first): the name
/// may hold spaces and parentheses, so the split is at the last `)`.
fn stat_fields(stat: &str) -> Option<(&str, Vec<&str>)> {
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    let comm = stat.get(open + 1..close)?;
    Some((comm, stat[close + 1..].split_whitespace().collect()))
}

/// The major faults (`majflt`, the 12th field) of a `/proc/.../stat` line, with its command name.
fn majflt(stat: &str) -> Option<(&str, u64)> {
    let (comm, rest) = stat_fields(stat)?;
    Some((comm, rest.get(9)?.parse().ok()?))
}

/// Host faults that read a page from storage, by the context that took them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ContextFaults {
    /// Taken by a vCPU thread: the guest running (VSwapper Fig. 9c).
    pub guest: u64,
    /// Taken by any other thread: the hypervisor's own code serving the guest (Fig. 9b).
    pub vmm: u64,
}

impl ContextFaults {
    /// What happened between `earlier` and `self`.
    #[must_use]
    pub fn since(&self, earlier: &Self) -> Self {
        ContextFaults {
            guest: self.guest.saturating_sub(earlier.guest),
            vmm: self.vmm.saturating_sub(earlier.vmm),
        }
    }

    /// Both counts together.
    #[must_use]
    pub fn plus(&self, other: &Self) -> Self {
        ContextFaults {
            guest: self.guest + other.guest,
            vmm: self.vmm + other.vmm,
        }
    }
}

/// Whether a thread's command name is a vCPU's: QEMU's `CPU n/KVM`, memvisor's `vcpuN`.
fn is_vcpu_thread(comm: &str) -> bool {
    let qemu = comm.starts_with("CPU ") && comm.ends_with("/KVM");
    let memvisor = comm
        .strip_prefix("vcpu")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    qemu || memvisor
}

/// The major faults (faults the kernel served by reading storage) of hypervisor process `pid` so
/// far, by context: its vCPU threads' (KVM's faults on guest memory count on the thread that
/// runs the vCPU) against the rest of the process's, threads that have exited included (the
/// process's own count keeps theirs). `None` once it is gone.
pub fn major_faults(pid: u32) -> Option<ContextFaults> {
    let all = majflt(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)?.1;
    let guest = threads(pid)
        .into_iter()
        .filter_map(|t| std::fs::read_to_string(format!("/proc/{pid}/task/{t}/stat")).ok())
        .filter_map(|stat| {
            let (comm, n) = majflt(&stat)?;
            is_vcpu_thread(comm).then_some(n)
        })
        .sum::<u64>();
    Some(ContextFaults {
        guest,
        vmm: all.saturating_sub(guest),
    })
}

/// Pins every thread of process `pid` to CPU `cpu` (`sched_setaffinity` per thread, as
/// `taskset -a -p` does); threads started later are pinned by the next call.
pub fn pin(pid: u32, cpu: usize) {
    for tid in threads(pid) {
        let Ok(tid) = libc::pid_t::try_from(tid) else {
            continue;
        };
        // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes within it; the call
        // reads the set we own. A thread that has exited makes it fail, which is fine.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
}

/// Bytes of a memory cgroup's processes in swap (`swap` of `memory.stat`).
pub fn cgroup_swap(dir: &Path) -> Option<u64> {
    let t = std::fs::read_to_string(dir.join("memory.stat")).ok()?;
    field(&t, "swap")
}

/// Resident memory of a process outside its guest RAM mapping (a mapping of exactly `mem`
/// bytes), from `/proc/PID/smaps` ([`memvisor_host::smaps_beside_ram`] of `Rss`): the
/// hypervisor's own overhead.
pub fn rss_outside_guest(pid: u32, mem: u64) -> Option<u64> {
    memvisor_host::smaps_beside_ram(&format!("/proc/{pid}/smaps"), "Rss", mem)
}

/// What a memory cgroup says about itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupState {
    /// Times usage hit the limit (`memory.failcnt`).
    pub failcnt: u64,
    /// Processes the OOM killer killed in it (`oom_kill` of `memory.oom_control`).
    pub oom_kills: u64,
    /// Highest usage (`memory.max_usage_in_bytes`).
    pub max_usage: u64,
    /// The limit (`memory.limit_in_bytes`).
    pub limit: u64,
}

/// The memory cgroup `memvisor run` with process id `pid` creates for a host-enforced limit.
pub fn run_cgroup(pid: u32) -> std::path::PathBuf {
    Path::new(CGROUP_ROOT).join(format!("memvisor-{pid}"))
}

/// The state of the memory cgroup at `dir`, or `None` if it does not exist.
pub fn cgroup_state(dir: &Path) -> Option<CgroupState> {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    let num = |f: &str| read(f).and_then(|s| s.trim().parse::<u64>().ok());
    let oom = read("memory.oom_control")?;
    Some(CgroupState {
        failcnt: num("memory.failcnt").unwrap_or(0),
        oom_kills: field(&oom, "oom_kill").unwrap_or(0),
        max_usage: num("memory.max_usage_in_bytes").unwrap_or(0),
        limit: num("memory.limit_in_bytes").unwrap_or(0),
    })
}

/// The kernel log's lines now (`dmesg`), empty if it cannot be read.
pub fn dmesg() -> Vec<String> {
    let out = std::process::Command::new("dmesg").output();
    let text = out
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    text.lines().map(str::to_owned).collect()
}

/// The kernel log's lines after `last` (a line [`dmesg`] returned before; its ring buffer may
/// have dropped older lines since, so counting lines would not do), all of them without it.
pub fn dmesg_since(last: Option<&String>) -> Vec<String> {
    let mut all = dmesg();
    let from = last.and_then(|l| all.iter().rposition(|x| x == l));
    all.drain(..from.map_or(0, |i| i + 1));
    all
}

/// The kernel's OOM lines among `new` that concern cgroup `memvisor-<cg_pid>` or process `pid`.
pub fn oom_lines(new: &[String], cg_pid: u32, pids: &[u32]) -> Vec<String> {
    let cg = format!("memvisor-{cg_pid}");
    let killed = |l: &str| {
        pids.iter()
            .any(|p| l.contains(&format!("Killed process {p} ")))
    };
    let ours = |l: &&String| l.contains(&cg) || (l.contains("out of memory") && killed(l));
    new.iter().filter(ours).map(|l| strip(l)).collect()
}

/// A kernel log line without its timestamp.
fn strip(l: &str) -> String {
    l.split_once("] ").map_or(l, |(_, r)| r).trim().to_owned()
}

/// The kernel's view of cgroup `memvisor-<cg_pid>` when its OOM killer ran: the usage line and
/// the anon LRU sizes and swap of the `Memory cgroup stats` block, from `dmesg` lines `new`.
pub fn memcg_oom_summary(new: &[String], cg_pid: u32) -> Option<String> {
    let head = format!("Memory cgroup stats for /memvisor-{cg_pid}:");
    let at = new.iter().position(|l| l.contains(&head))?;
    let mut parts = Vec::new();
    if let Some(u) = new[at.saturating_sub(4)..at]
        .iter()
        .find(|l| l.contains("memory: usage"))
    {
        parts.push(strip(u));
    }
    let mut lru = Vec::new();
    for l in new[at + 1..].iter().take(60) {
        let t = strip(l);
        let mut w = t.split_whitespace();
        if let (Some(k), Some(v)) = (w.next(), w.next()) {
            if ["inactive_anon", "active_anon", "swap"].contains(&k) {
                if let Ok(b) = v.parse::<u64>() {
                    lru.push(format!("{k} {} MiB", b >> 20));
                }
            }
        }
        if lru.len() == 3 {
            break;
        }
    }
    if !lru.is_empty() {
        parts.push(lru.join(", "));
    }
    Some(parts.join("; "))
}

/// Bytes of swap in use on `file` per `/proc/swaps`, or `None` if it is not enabled.
pub fn swap_used(file: &Path) -> Option<u64> {
    let t = std::fs::read_to_string("/proc/swaps").ok()?;
    let name = file.display().to_string();
    t.lines().skip(1).find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        let kb = w.get(3)?.parse::<u64>().ok();
        kb.filter(|_| w.first() == Some(&name.as_str()))
            .map(|kb| kb << 10)
    })
}

/// Swap areas enabled on the host, as `/proc/swaps` names them.
pub fn swap_areas() -> Vec<String> {
    let swaps = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
    let name = |l: &str| l.split_whitespace().next().map(str::to_owned);
    swaps.lines().skip(1).filter_map(name).collect()
}

/// What `cmd args` prints: its first line, or its last when `last`; `?` when it cannot run.
fn output_line(cmd: &str, args: &[&str], last: bool) -> String {
    let out = std::process::Command::new(cmd).args(args).output();
    let text = out
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let line = if last {
        text.lines().last()
    } else {
        text.lines().next()
    };
    line.unwrap_or("?").to_owned()
}

/// The CPUs this process may run on (0 if unknown).
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(0, usize::from)
}

/// The run's environment, as `(what, value)` lines for the report.
pub fn environment(out: &Path, qemu: &str) -> Vec<(String, String)> {
    // A file's text without the whitespace around it (its final line break).
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_else(|| "?".into());
    let cpus = cpus();
    let meminfo = read("/proc/meminfo");
    let mib = |k: &str| field(&meminfo, k).map_or("?".into(), |kb| format!("{} MiB", kb >> 10));
    vec![
        ("kernel".into(), read("/proc/sys/kernel/osrelease")),
        ("CPU".into(), format!("{cpu} ({cpus} CPUs online)")),
        (
            "memory".into(),
            format!(
                "{} total, {} free, {} available at start",
                mib("MemTotal"),
                mib("MemFree"),
                mib("MemAvailable")
            ),
        ),
        (
            "disk (results, images, swap)".into(),
            output_line("df", &["-hT", &out.display().to_string()], true),
        ),
        ("QEMU".into(), output_line(qemu, &["--version"], false)),
        (
            "transparent huge pages".into(),
            read("/sys/kernel/mm/transparent_hugepage/enabled"),
        ),
        ("vm.page-cluster".into(), read("/proc/sys/vm/page-cluster")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The crate's own directory is on the machine's disk, as a bench's work directory is: an
    /// `O_DIRECT` write there is a request the disk's counters show at once; `/proc` is on no
    /// block device.
    #[test]
    fn disk_ops_count_a_direct_write() {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let before = disk_ops(dir.path()).expect("the crate is on a block device");
        let path = dir.path().join("direct");
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .unwrap();
        let layout = std::alloc::Layout::from_size_align(4096, 4096).unwrap();
        // SAFETY: a non-zero size; the block is freed below with the same layout.
        let buf = unsafe { std::alloc::alloc_zeroed(layout) };
        // SAFETY: `buf` holds 4096 initialized bytes while the slice lives.
        let page = unsafe { std::slice::from_raw_parts(buf, 4096) };
        for _ in 0..8 {
            f.write_all(page).unwrap();
        }
        // SAFETY: allocated above with this layout.
        unsafe { std::alloc::dealloc(buf, layout) };
        let after = disk_ops(dir.path()).unwrap();
        assert!(after.since(&before).writes >= 1, "{before:?} {after:?}");
        assert_eq!(disk_ops(Path::new("/proc")), None);
    }

    #[test]
    fn stat_lines() {
        let t = "4242 (CPU 0/KVM) S 4200 4200 9 0 -1 4194368 1500 0 37 0 5 6 0 0 20 0 4 0";
        assert_eq!(majflt(t), Some(("CPU 0/KVM", 37)));
        let t = "7 (a (b) c) R 1 7 7 0 -1 0 1 2 3 4";
        assert_eq!(majflt(t), Some(("a (b) c", 3)));
        assert_eq!(stat_fields(t).map(|(_, f)| f[1]), Some("1"));
        assert_eq!(majflt("7 (x) R 1"), None);
        assert_eq!(majflt("no parentheses"), None);
        assert!(is_vcpu_thread("CPU 1/KVM") && is_vcpu_thread("vcpu12"));
        assert!(!is_vcpu_thread("vcpu") && !is_vcpu_thread("virtio-blk") && !is_vcpu_thread("CPU"));
        let (a, b) = (
            ContextFaults { guest: 5, vmm: 9 },
            ContextFaults { guest: 7, vmm: 8 },
        );
        assert_eq!(b.since(&a), ContextFaults { guest: 2, vmm: 0 });
    }

    #[test]
    fn fields_and_oom_lines() {
        let t = "pswpin 12\npswpout 34\nVmHWM:\t  2048 kB\n";
        assert_eq!(field(t, "pswpout"), Some(34));
        assert_eq!(field(t, "VmHWM"), Some(2048));
        assert_eq!(field(t, "nope"), None);
        let lines = vec![
            "[ 1.0] oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/memvisor-77,task=qemu".into(),
            "[ 1.1] Memory cgroup out of memory: Killed process 78 (qemu-system-x86) total-vm:1kB"
                .into(),
            "[ 1.2] unrelated".into(),
        ];
        let block: Vec<String> = [
            "[ 1.0] memory: usage 155536kB, limit 155536kB, failcnt 72",
            "[ 1.0] Memory cgroup stats for /memvisor-77:",
            "[ 1.0] swap 9949184",
            "[ 1.0] inactive_anon 0",
            "[ 1.0] active_anon 156405760",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        assert_eq!(
            memcg_oom_summary(&block, 77).unwrap(),
            "memory: usage 155536kB, limit 155536kB, failcnt 72; swap 9 MiB, inactive_anon 0 MiB, active_anon 149 MiB"
        );
        let got = oom_lines(&lines, 77, &[78]);
        assert_eq!(got.len(), 2);
        assert!(got[1].starts_with("Memory cgroup out of memory"));
    }

    #[test]
    fn own_process_is_measured() {
        let me = std::process::id();
        assert!(proc_io(me).is_some());
        assert!(peak_rss(me).unwrap() > 0);
        assert!(rss_outside_guest(me, 1).unwrap() > 0);
        // The swap counters the harness takes deltas of are where it looks for them.
        let text = std::fs::read_to_string("/proc/vmstat").unwrap();
        assert!(field(&text, "pswpin").is_some() && field(&text, "pswpout").is_some());
    }
}
