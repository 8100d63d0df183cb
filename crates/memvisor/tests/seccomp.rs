//! The VMM's seccomp filters (docs/security.md): every thread of a VM with every mechanism on
//! runs filtered with no new privileges, and a call outside a thread's filter, made by each kind
//! of thread through the test hook (`MEMVISOR_SECCOMP_TEST_CALL`, compiled into test builds
//! only), kills the VMM with SIGSYS, which the host reports with the call and the thread.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{mkdisk_data, Proc, TestHost, TestVm};
use memvisor_api::{HostVmState, VmExit};

/// Each kind of thread (as the hook names it) and the name its thread has (`comm`).
const THREADS: [(&str, &str); 13] = [
    ("main", "memvisor"),
    ("signals", "signals"),
    ("vcpu", "vcpu0"),
    ("block", "blk-data"),
    ("balloon", "balloon"),
    ("pager", "pager"),
    ("reclaim", "reclaim"),
    ("pool-flush", "pool-flush"),
    ("defrag", "defrag"),
    ("release-ready", "release-ready"),
    ("api", "api"),
    // A migration's source threads, idle from the start in every VM with an API socket.
    ("migrate", "migrate"),
    ("migrate-rx", "migrate-rx"),
];

/// When the last VMM was killed, by any test here. The kernel rate-limits the audit lines that
/// name a killed call (`printk_ratelimit_burst`, 10, in `printk_ratelimit`, 5 s), so the tests
/// that get a VMM killed take turns and space their kills, and the host can name every call.
static LAST_KILL: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);

type KillsTurn = std::sync::MutexGuard<'static, Option<std::time::Instant>>;

fn kills_turn() -> KillsTurn {
    LAST_KILL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits until a kill now keeps within the kernel's rate (module doc of [`LAST_KILL`]).
fn space_kill(turn: &mut KillsTurn) {
    let gap = Duration::from_millis(600);
    if let Some(last) = **turn {
        std::thread::sleep(gap.saturating_sub(last.elapsed()));
    }
    **turn = Some(std::time::Instant::now());
}

/// `memvisor run` flags with every mechanism on, which start every kind of thread.
fn everything(disk: &Path) -> Vec<String> {
    [
        "--mem=256M",
        "--mem-limit=96M",
        "--balloon",
        "--mapper",
        "--preventer",
        "--tesseract",
        "--tesseract-defrag=guest",
        "--victim-cache=10",
        "--pool=16M",
        "--pool-compress=lz4",
        "--release-ready=4M",
        "--sharing=host",
        "--workload=integrity",
        "--cmdline=anon_mb=96 file_mb=8 rounds=2",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain([format!("--disk={},id=data", disk.display())])
    .collect()
}

#[test]
fn every_thread_of_a_vm_with_every_mechanism_runs_filtered() {
    let dir = tempfile::tempdir().unwrap();
    let disk = mkdisk_data(dir.path().join("data.img"), "64M", &["--files", "src:8M"]);
    let args = everything(&disk);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let vm = TestVm::start(&dir.path().join("vm.sock"), &args);
    // Every thread has started once the guest works under its limit.
    vm.stats_until("the pager swaps", Duration::from_secs(60), |s| {
        s.pager
            .as_ref()
            .is_some_and(|p| p.counters.swap_bytes_written > 0)
    });
    let mut names = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{}/task", vm.pid())).unwrap() {
        let task = task.unwrap().path();
        let Ok(status) = std::fs::read_to_string(task.join("status")) else {
            continue; // a thread that ended meanwhile (the read-ahead)
        };
        let comm = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
        let comm = comm.trim().to_owned();
        assert!(status.contains("\nSeccomp:\t2\n"), "{comm}: {status}");
        assert!(status.contains("\nNoNewPrivs:\t1\n"), "{comm}: {status}");
        names.push(comm);
    }
    for (_, comm) in THREADS {
        assert!(
            names.iter().any(|n| n == comm),
            "no thread {comm} in {names:?}"
        );
    }
    vm.intact("integrity");
}

#[test]
fn a_call_outside_its_filter_kills_the_vmm_and_the_host_names_it() {
    let vm = r#"
[[vm]]
name = "v"
mem = "256M"
workload = "integrity"
cmdline = "anon_mb=64 file_mb=8 rounds=50"
disks = ["data.img,id=data"]
balloon = true
mapper = true
tesseract = true
tesseract_defrag = "guest"
release_ready = "4M"
sharing = "host"
"#;
    let mut turn = kills_turn();
    for (kind, comm) in THREADS {
        // A host of its own each: a killed VMM leaves Tesseract's log for the next start.
        let dir = tempfile::tempdir().unwrap();
        mkdisk_data(dir.path().join("data.img"), "64M", &["--files", "src:8M"]);
        let path = dir.path().join("host.toml");
        std::fs::write(
            &path,
            format!(
                "[host]\nmemory = \"1G\"\npool = \"32M\"\nswap = \"1G\"\ntick = \"200ms\"\n{vm}"
            ),
        )
        .unwrap();
        space_kill(&mut turn);
        let mut cmd = common::host_command(&path);
        cmd.env("MEMVISOR_LOG", "info")
            .env("MEMVISOR_SECCOMP_TEST_CALL", kind);
        let host = TestHost::spawn(&mut cmd, dir.path());
        let v = host.wait_vm("v", 30, |v| v.state == HostVmState::Exited);
        let why = v.why.clone().unwrap_or_default();
        assert_eq!(v.exit, Some(VmExit::Seccomp), "{kind}: {v:?}");
        assert_eq!(v.exit_status, Some(128 + libc::SIGSYS), "{kind}: {v:?}");
        let named = format!(
            "killed by seccomp: syscall {} in thread {comm}",
            libc::SYS_execve
        );
        assert_eq!(why, named, "{kind}");
        drop(host);
        // The kernel writes audit records to its log at most 10 in 5 s when no audit daemon
        // takes them (printk's rate limit): one kill a second keeps every record.
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn a_bad_seccomp_mode_is_refused() {
    let out = common::memvisor(&["run", "--seccomp", "maybe", "--workload", "boot"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(common::stderr(&out).contains("--seccomp"));
}

/// A restored VM's prefetch thread, which runs only after `--restore`, has its filter too: its
/// call outside it kills the VMM. (`THREADS` are the threads of a VM that boots.)
#[test]
fn a_restored_vms_prefetch_thread_runs_filtered() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("vm.sock");
    let vm = TestVm::holding(&sock, "64M", "16", None);
    let snap = dir.path().join("s");
    common::ok(vm.client().snapshot(snap.to_str().unwrap(), true));
    vm.finish();
    let restore = [
        "run",
        "--mem",
        "64M",
        "--mem-limit",
        "48M",
        "--restore",
        snap.to_str().unwrap(),
    ];
    let mut turn = kills_turn();
    space_kill(&mut turn);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_memvisor"));
    cmd.args(restore)
        .env("MEMVISOR_SECCOMP_TEST_CALL", "prefetch");
    let out = cmd.output().unwrap();
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGSYS),
        "{:?}: {}",
        out.status,
        common::stderr(&out)
    );
}

/// A migration's destination runs `migrate-resume` only once a migration has switched over
/// (`migrate-rx` there confines with the same kind as the source's, in `THREADS`): its call
/// outside its filter kills the destination.
#[test]
fn a_migration_destinations_resume_thread_runs_filtered() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let source = TestVm::start(
        &dir.path().join("s.sock"),
        &[
            "--mem",
            "64M",
            "--workload",
            "alloc",
            "--cmdline",
            "mb=16 rounds=1 hold_secs=600",
        ],
    );
    source.stdout_line(Duration::from_secs(60), |l| l.starts_with("hold:"));
    let mut cmd = common::run_command(
        &dir.path().join("d.sock"),
        &[
            "--mem",
            "64M",
            "--incoming",
            "127.0.0.1:0",
            "--migration-token",
            "t",
        ],
    );
    cmd.stderr(std::process::Stdio::piped())
        .env("MEMVISOR_SECCOMP_TEST_CALL", "migrate-resume");
    let dest = Proc::spawn(&mut cmd);
    let line = dest.stderr_line(Duration::from_secs(30), |l| {
        l.contains("waiting for a migration on")
    });
    let addr = line.rsplit(' ').next().unwrap().to_owned();
    let mut turn = kills_turn();
    space_kill(&mut turn);
    let out = common::memvisor(&[
        "ctl",
        "--api-sock",
        source.sock().to_str().unwrap(),
        "migrate",
        "--to",
        &addr,
        "--token",
        "t",
    ]);
    let dest = dest.finish();
    assert_eq!(
        dest.status.signal(),
        Some(libc::SIGSYS),
        "{:?}: {}",
        dest.status,
        common::stderr(&dest)
    );
    // The source lost its destination after the switch: it keeps the VM, paused.
    assert!(!out.status.success(), "{}", common::stderr(&out));
}
