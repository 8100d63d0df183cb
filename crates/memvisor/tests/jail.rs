//! The jail (`memvisor run --jail`, and `memvisor host`, which jails every VMM by default): a
//! VM with every mechanism on runs jailed with every byte verified, every one of its threads
//! without capabilities, with no new privileges, as the uid it was given, in a root of its own;
//! Tesseract's logs are put back after a jailed VMM is killed; a host's VMMs run jailed with a
//! uid each; bad input is refused with one line and nothing started.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use memvisor_api::HostVmState;

mod common;
use common::{disk_spec, memvisor, mkdisk_data, ok, stderr, Proc, TestHost, TestVm, MEMVISOR};

/// The process that runs a jailed VM: the one child of the process started, which waits
/// outside the VMM's PID namespace.
fn vmm_pid(started: u32) -> u32 {
    let children =
        std::fs::read_to_string(format!("/proc/{started}/task/{started}/children")).unwrap();
    let kids: Vec<u32> = children
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(kids.len(), 1, "the started process has one child: {kids:?}");
    kids[0]
}

/// A field of a `/proc/.../status` file.
fn field<'a>(status: &'a str, name: &str) -> &'a str {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {name} in {status}"))
        .trim()
}

/// Checks every thread of `pid`: no capability in any set, no new privileges, and `uid` as its
/// real, effective, saved and file-system uid (`gid` likewise). Returns the threads' names.
fn assert_confined(pid: u32, uid: u32, gid: u32) -> Vec<String> {
    let mut names = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = task.unwrap().path();
        let Ok(status) = std::fs::read_to_string(task.join("status")) else {
            continue; // a thread that has just ended
        };
        let name = field(&status, "Name").to_owned();
        for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            assert_eq!(field(&status, set), "0000000000000000", "{name}: {set}");
        }
        assert_eq!(field(&status, "NoNewPrivs"), "1", "{name}");
        assert_eq!(field(&status, "Uid"), format!("{uid}\t{uid}\t{uid}\t{uid}"));
        assert_eq!(field(&status, "Gid"), format!("{gid}\t{gid}\t{gid}\t{gid}"));
        assert_eq!(field(&status, "Groups"), "", "{name}");
        names.push(name);
    }
    names
}

/// Each thread of `pid`: its name and nice value (`/proc/PID/task/TID/stat`).
fn thread_nices(pid: u32) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let Ok(stat) = std::fs::read_to_string(task.unwrap().path().join("stat")) else {
            continue;
        };
        let (open, close) = (stat.find('(').unwrap(), stat.rfind(')').unwrap());
        // After "pid (comm)": state is field 3, nice field 19.
        let nice = stat[close + 1..].split_whitespace().nth(16).unwrap();
        out.push((stat[open + 1..close].to_owned(), nice.parse().unwrap()));
    }
    out
}

/// What `pid` sees as `/`: its root's entries, and the mount it is.
fn root_of(pid: u32) -> (Vec<String>, String) {
    let mut entries: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/root"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    entries.sort();
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let root = mountinfo
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some("/"))
        .unwrap_or_else(|| panic!("no / in {mountinfo}"))
        .to_owned();
    (entries, root)
}

/// A VM with every mechanism on (balloon, Swap Mapper, False Reads Preventer, Tesseract, a
/// pool, KSM sharing) runs jailed: each thread has no capability, no new privileges, a non-zero
/// uid; its root holds only /proc and the KSM knobs; the API, `ctl` and metrics answer; the
/// integrity workload checks every byte; what the jailed VMM could not delete by path is gone.
#[test]
fn a_vm_with_every_mechanism_runs_jailed_and_intact() {
    let dir = tempfile::tempdir().unwrap();
    let img = mkdisk_data(dir.path().join("data.img"), "64M", &[]);
    let jail = dir.path().join("jail");
    std::fs::create_dir(&jail).unwrap();
    let (uid, gid) = (900_901, 900_902);
    let sock = dir.path().join("api.sock");
    let stats = dir.path().join("stats.json");
    let args = [
        "--mem=256M",
        "--mem-limit=48M",
        "--balloon",
        "--mapper",
        "--preventer",
        "--tesseract",
        "--pool=16M",
        "--sharing=host",
        "--disk",
        &disk_spec(&img, "data"),
        "--workload=integrity",
        "--cmdline=anon_mb=160 file_mb=8 rounds=2 secs=4",
        "--jail",
        jail.to_str().unwrap(),
        &format!("--uid={uid}"),
        &format!("--gid={gid}"),
        "--stats-json",
        stats.to_str().unwrap(),
    ];
    let vm = TestVm::start(&sock, &args);
    let pid = vmm_pid(vm.pid());
    // The API answers from inside the jail, through its socket, which only root may use.
    let s = vm.stats_until("the pager pages", Duration::from_secs(60), |s| {
        s.pager.as_ref().is_some_and(|p| p.pages.swapped_pages > 0)
    });
    assert!(s.balloon.is_some() && s.sharing.is_some(), "{s:?}");
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    let out = memvisor(&["ctl", "--api-sock", sock.to_str().unwrap(), "stats"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let metrics = ok(vm.client().metrics());
    assert!(metrics.contains("memvisor_vm_faults_total"), "{metrics}");
    let names = assert_confined(pid, uid, gid);
    for t in [
        "vcpu0",
        "pager",
        "reclaim",
        "pool-flush",
        "blk-data",
        "balloon",
        "api",
        "signals",
    ] {
        assert!(names.iter().any(|n| n == t), "no thread {t} in {names:?}");
    }
    // Without CAP_SYS_NICE the threads the guest waits on still run at --serving-nice (-10),
    // and the others at the VMM's own value, the one it inherited from this test.
    // SAFETY: getpriority reads this process's nice value; it takes no pointer.
    let own = i64::from(unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) });
    for (name, nice) in thread_nices(pid) {
        let serving = ["pager", "blk-data", "balloon"].contains(&name.as_str());
        let want = if serving { -10 } else { own };
        if name != "kvm-nx-lpage-re" {
            assert_eq!(nice, want, "{name}");
        }
    }
    // Its root: a tmpfs on the jail directory holding /proc and the KSM knobs, nothing else.
    let (entries, root) = root_of(pid);
    assert_eq!(entries, ["proc", "sys"], "{root}");
    assert!(root.contains(" - tmpfs memvisor-jail ro,"), "{root}");
    assert!(!Path::new(&format!("/proc/{pid}/root/etc")).exists());
    let started = std::fs::read_to_string(format!("/proc/{}/status", vm.pid())).unwrap();
    assert_eq!(
        field(&started, "Uid"),
        "0\t0\t0\t0",
        "the waiting parent stays root"
    );

    vm.intact("integrity");
    let stats: memvisor_api::VmStats =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let pager = stats.pager.unwrap();
    assert!(
        pager.pool.is_some() && pager.indirections.is_some(),
        "{pager:?}"
    );
    // Every indirected block went back; the log it emptied and the swap file are gone.
    assert!(!memvisor_pager_log(&img).exists());
    assert_eq!(
        std::fs::read_dir(&jail).unwrap().count(),
        0,
        "the jail stays empty"
    );
    assert!(!sock.exists());
}

fn memvisor_pager_log(image: &Path) -> std::path::PathBuf {
    let mut p = image.as_os_str().to_owned();
    p.push(".indirections");
    p.into()
}

/// A jailed VMM killed with SIGKILL (the pid that was started, as `memvisor host` kills one)
/// takes its VMM with it and leaves its indirection logs and swap file; the next start, jailed
/// too, puts every block back before it enters its jail, and the guest reads every page it
/// was told was written.
#[test]
fn a_killed_jailed_vmm_leaves_its_logs_for_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let extra = ["--seed", "3", "--files", "crash:16M"];
    let data = mkdisk_data(dir.path().join("data.img"), "64M", &extra);
    let swap = common::mkdisk_swap(dir.path().join("swap.img"), "128M");
    let store = dir.path().join("store.swap");
    let jail = dir.path().join("jail");
    std::fs::create_dir(&jail).unwrap();
    let sock = dir.path().join("api.sock");
    let args = |cmdline: String| {
        let mut a: Vec<String> = ["--mem=48M", "--workload=crashwrite", "--uid=900903"]
            .map(String::from)
            .to_vec();
        a.extend([
            "--gid=900903".into(),
            "--jail".into(),
            jail.display().to_string(),
        ]);
        a.extend(["--disk".into(), disk_spec(&data, "data")]);
        a.extend(["--disk".into(), disk_spec(&swap, "swap")]);
        a.push(format!("--cmdline={cmdline}"));
        a
    };
    let mut first = args("mb=16 anon_mb=48 batch=128 secs=120 seed=4".into());
    first.extend(["--mem-limit=24M", "--tesseract", "--swap"].map(String::from));
    first.push(store.display().to_string());
    let first: Vec<&str> = first.iter().map(String::as_str).collect();
    let mut vm = TestVm::start(&sock, &first);
    let inner = vmm_pid(vm.pid());
    vm.stats_until("blocks are indirected", Duration::from_secs(120), |s| {
        s.pager
            .as_ref()
            .and_then(|p| p.indirections.as_ref())
            .is_some_and(|i| i.live > 0)
    });
    vm.signal(libc::SIGKILL);
    assert!(vm.ends_within(Duration::from_secs(10)));
    // The VMM dies a moment later: the next start below waits for its lock on the image.
    let console = vm.stdout_so_far();
    let ack = console
        .lines()
        .rev()
        .find(|l| l.starts_with("ACK "))
        .unwrap();
    let acked: Vec<&str> = ack.split_whitespace().skip(1).collect();
    let log = memvisor_pager_log(&swap);
    assert!(
        log.exists() && store.exists(),
        "the log and its swap file stay"
    );

    let check = args(format!("mb=16 seed=4 check=1 {}", acked.join(" ")));
    let mut cmd = Command::new(MEMVISOR);
    cmd.arg("run").args(&check);
    let out = cmd.output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("blocks put back from"), "{err}");
    assert!(!log.exists() && !store.exists(), "{err}");
    // Dead: gone, or a zombie that whoever reaps orphans has not reaped yet.
    assert!(
        std::fs::read_to_string(format!("/proc/{inner}/stat")).map_or(true, |s| s.contains(") Z ")),
        "the jailed VMM died with the process that started it"
    );
    let line = common::ResultLine::find(&common::stdout(&out), "crashwrite", "check");
    assert_eq!((line.u64("ok"), line.u64("lost")), (1, 0));
}

/// A writable image another VMM has open is refused (after a wait for a VMM on its way out):
/// one line, status 2.
#[test]
fn an_image_another_vmm_writes_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let img = mkdisk_data(dir.path().join("data.img"), "16M", &[]);
    let kernel = common::spin_kernel(dir.path());
    let disk = disk_spec(&img, "data");
    let k = kernel.to_str().unwrap();
    let args = ["--mem=64M", "--kernel", k, "--disk", &disk];
    let first = TestVm::start(&dir.path().join("a.sock"), &args);
    let out = memvisor(&[&["run"][..], &args].concat());
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("is in use by another process"), "{err}");
    drop(first);
}

/// `memvisor run --jail` with a jail directory that is missing or not empty, uid or gid 0, or
/// a `--snapshot-dir` the VMM could not write, is refused with one line and exit status 2, and
/// nothing starts (no socket appears).
#[test]
fn bad_jails_are_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let full = dir.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("x"), "").unwrap();
    let sock = dir.path().join("api.sock");
    let cases = [
        (dir.path().join("missing"), "1000", "1000", "does not exist"),
        (full, "1000", "1000", "is not empty"),
        (empty.clone(), "0", "1000", "--uid 0 is root"),
        (empty.clone(), "1000", "0", "--gid 0 is root's group"),
    ];
    for (jail, uid, gid, want) in cases {
        let out = Command::new(MEMVISOR)
            .args(["run", "--workload=boot", "--api-sock"])
            .arg(&sock)
            .arg("--jail")
            .arg(&jail)
            .args(["--uid", uid, "--gid", gid])
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("memvisor: ") && err.contains(want), "{err}");
        assert!(!sock.exists());
    }
    // A snapshot directory that is missing, a link, a file, or not the uid's to write.
    let snaps = dir.path().join("snaps");
    std::fs::create_dir(&snaps).unwrap();
    std::fs::set_permissions(&snaps, std::fs::Permissions::from_mode(0o755)).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&snaps, &link).unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, "").unwrap();
    let cases = [
        (dir.path().join("nowhere"), "does not exist".to_owned()),
        (link, "is a symbolic link".to_owned()),
        (file, "is not a directory".to_owned()),
        (
            snaps.clone(),
            format!(
                "is not writable by uid 1000 (it is uid 0's, mode 755): chown 1000 {}",
                snaps.display()
            ),
        ),
    ];
    for (snapshots, want) in cases {
        let out = Command::new(MEMVISOR)
            .args(["run", "--workload=boot", "--api-sock"])
            .arg(&sock)
            .arg("--jail")
            .arg(&empty)
            .args(["--uid", "1000", "--gid", "1000", "--snapshot-dir"])
            .arg(&snapshots)
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("--snapshot-dir") && err.contains(&want),
            "{err}"
        );
        assert!(!sock.exists());
    }
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
    // --snapshot-dir without --jail is clap's to refuse.
    let out = memvisor(&["run", "--snapshot-dir", snaps.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    // --uid without --jail, and --jail without --uid, are clap's to refuse (status 2 too).
    let out = memvisor(&["run", "--uid", "1000", "--gid", "1000"]);
    assert_eq!(out.status.code(), Some(2));
    let out = memvisor(&["run", "--jail", empty.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
}

/// A host jails every VMM by default, each as a uid of its own from `uid_range`: two VMs run
/// with distinct uids, no capabilities and no new privileges, each with a directory of its own
/// in the state directory and a snapshot directory that uid's; the VMs' sockets are 0600, the
/// host's 0660.
#[test]
fn a_host_jails_each_vmm_as_a_uid_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let kernel = common::spin_kernel(dir.path());
    let k = kernel.display();
    let host = TestHost::start(
        dir.path(),
        &format!(
            "[host]\nmemory = \"256M\"\nswap = \"1G\"\nuid_range = \"900910-900919\"\n\n\
             [[vm]]\nname = \"a\"\nmem = \"64M\"\nkernel = \"{k}\"\n\n\
             [[vm]]\nname = \"b\"\nmem = \"64M\"\nkernel = \"{k}\"\n"
        ),
    );
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(host.sock()), 0o660);
    // The host keeps the capabilities it needs to start jailed VMMs, and no others.
    let status = std::fs::read_to_string(format!("/proc/{}/status", host.pid())).unwrap();
    // (CAP_SYS_RESOURCE, kept if the host had it, is not in every container's sets.)
    let kept = 0x1a8_05e7_u64 | (1 << 34);
    let must = (1 << 21) | (1 << 19) | (1 << 7) | (1 << 6) | (1 << 5);
    for set in ["CapBnd", "CapPrm", "CapEff"] {
        let caps = u64::from_str_radix(field(&status, set), 16).unwrap();
        assert_eq!(caps & !kept, 0, "{set} {caps:x}");
        assert_eq!(caps & must, must, "{set} {caps:x}");
    }
    let mut uids = Vec::new();
    for name in ["a", "b"] {
        let v = host.wait_vm(name, 20, |v| v.state == HostVmState::Running);
        let pid = vmm_pid(v.pid.unwrap());
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let uid: u32 = field(&status, "Uid")
            .split('\t')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!((900_910..=900_919).contains(&uid), "{uid}");
        assert_confined(pid, uid, uid);
        uids.push(uid);
        let own = dir.path().join("host.state").join(name);
        assert_eq!(Path::new(&v.api_sock), own.join("api.sock"));
        assert_eq!(mode(&own.join("api.sock")), 0o600);
        assert_eq!(mode(&own), 0o700);
        assert_eq!(std::fs::read_dir(own.join("jail")).unwrap().count(), 0);
        // Its snapshot directory: its uid's alone, bound into its jail, named by the host.
        let snaps = own.join("snapshots");
        let m = std::fs::metadata(&snaps).unwrap();
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o777), (uid, uid, 0o700));
        assert_eq!(v.snapshot_dir.as_deref(), snaps.to_str());
        assert_eq!(root_of(pid).0, ["proc", "snapshots"]);
        // A snapshot by name, through the VM's socket and through the host's.
        let client = memvisor_api::VmClient::new(Path::new(&v.api_sock));
        let r = ok(client.snapshot("s1", false));
        assert_eq!(Path::new(&r.dir), snaps.join("s1"));
        let r = ok(host.client().snapshot(name, "s2", false));
        assert_eq!(Path::new(&r.dir), snaps.join("s2"));
        for s in ["s1", "s2"] {
            let state = std::fs::metadata(snaps.join(s).join("vm.state")).unwrap();
            assert_eq!((state.uid(), state.mode() & 0o777), (uid, 0o600));
        }
        for bad in ["../x", "a/b", "/tmp/x"] {
            let e = host.client().snapshot(name, bad, false).unwrap_err();
            assert!(e.to_string().contains("give one name"), "{bad}: {e}");
        }
        let e = host.client().snapshot(name, "s1", false).unwrap_err();
        assert!(e.to_string().contains("already holds a snapshot"), "{e}");
        let e = host.client().snapshot("nope", "s3", false).unwrap_err();
        assert!(e.to_string().contains("(404)"), "{e}");
        let sock = host.sock().to_str().unwrap();
        let out = memvisor(&["ctl", "--host-sock", sock, "snapshot", "--vm", name, "s3"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let r: memvisor_api::SnapshotResult = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(Path::new(&r.dir), snaps.join("s3"));
        // The host drives it through its socket.
        ok(host.client().stop(name));
        host.wait_vm(name, 20, |v| v.state == HostVmState::Exited);
    }
    assert_ne!(uids[0], uids[1]);
}

/// A host whose `uid_range` holds the uid of a running process (another host's VM, here a
/// `sleep`) refuses to start: one line naming the uid and the process, status 2.
#[test]
fn a_uid_range_a_process_runs_in_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut sleeper = Command::new("sleep");
    sleeper.arg("60").uid(900_930).gid(900_930);
    let sleeper = Proc::spawn(&mut sleeper);
    let config = dir.path().join("host.toml");
    std::fs::write(
        &config,
        "[host]\nmemory = \"256M\"\nswap = \"1G\"\nuid_range = \"900925-900935\"\n",
    )
    .unwrap();
    let out = memvisor(&["host", "--config", config.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let want = format!("uid 900930, which process {}", sleeper.pid());
    assert!(err.contains(&want), "{err}");
    assert!(!dir.path().join("host.state/host.sock").exists());
    drop(sleeper);
}
