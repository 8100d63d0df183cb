//! Post-copy live migration end to end, between two memvisor processes on this machine: the
//! integrity workload, under a limit with the Swap Mapper, the pool and sampling on, is
//! migrated mid-run (after a migration with a wrong token was refused and changed nothing) and
//! finishes on the destination with every byte it wrote intact; bad input is one line and
//! exit status 2.

use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::{
    disk_spec, memvisor, mkdisk_data, run_command, stderr, stdout, Proc, ResultLine, TestVm,
};

/// The integrity workload's mechanisms, on both ends.
const MECHANISMS: [&str; 10] = [
    "--mem",
    "256M",
    "--mem-limit",
    "96M",
    "--mapper",
    "--pool",
    "16M",
    "--victims",
    "clock",
    "--balloon",
];

/// A destination: `memvisor run --incoming 127.0.0.1:0 --migration-token TOKEN`, and the
/// address it printed once listening.
fn destination(sock: &std::path::Path, disk: &str, token: &str) -> (Proc, String) {
    let mut args = vec![
        "--disk",
        disk,
        "--incoming",
        "127.0.0.1:0",
        "--migration-token",
        token,
    ];
    args.extend_from_slice(&MECHANISMS);
    let mut cmd: Command = run_command(sock, &args);
    cmd.stderr(Stdio::piped());
    let dest = Proc::spawn(&mut cmd);
    let line = dest.stderr_line(Duration::from_secs(30), |l| {
        l.contains("waiting for a migration on")
    });
    let addr = line.rsplit(' ').next().unwrap().to_owned();
    (dest, addr)
}

fn migrate(source: &TestVm, to: &str, token: &str) -> std::process::Output {
    memvisor(&[
        "ctl",
        "--api-sock",
        source.sock().to_str().unwrap(),
        "migrate",
        "--to",
        to,
        "--token",
        token,
    ])
}

#[test]
fn integrity_survives_post_copy_migration_under_a_limit() {
    let dir = tempfile::tempdir().unwrap();
    let disk = disk_spec(
        &mkdisk_data(dir.path().join("data.img"), "64M", &[]),
        "data",
    );
    let dsock = dir.path().join("dest.sock");
    let (mut dest, addr) = destination(&dsock, &disk, "the-right-token");

    let ssock = dir.path().join("source.sock");
    let mut args = vec![
        "--disk",
        &disk,
        "--workload",
        "integrity",
        "--cmdline",
        "anon_mb=120 file_mb=8 rounds=4 secs=4",
        "--sample-pages",
        "200",
    ];
    args.extend_from_slice(&MECHANISMS);
    let source = TestVm::start(&ssock, &args);
    source.stdout_line(Duration::from_secs(60), |l| l.contains("phase=fill"));

    // A wrong token: refused, the VM runs on here, nothing starts there.
    let out = migrate(&source, &addr, "a-wrong-token");
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("refused the token"),
        "{}",
        stderr(&out)
    );
    let vm = common::ok(source.client().info());
    assert_eq!(vm.state, memvisor_api::VmState::Running);
    assert!(dest.running() && !dsock.exists(), "nothing started there");
    dest.stderr_line(Duration::from_secs(10), |l| l.contains("wrong token"));

    // The right one: the VM moves mid-run and the source ends once every page is there.
    let out = migrate(&source, &addr, "the-right-token");
    assert!(out.status.success(), "ctl migrate: {}", stderr(&out));
    let r: memvisor_api::MigrateResult = serde_json::from_slice(&out.stdout).unwrap();
    assert!(r.copied_pages > 0 && r.recorded_pages > 0, "{r:?}");
    let src = source.finish();
    assert!(
        !stdout(&src).contains("phase=done"),
        "the source ran the workload to its end instead of handing it over"
    );
    let out = dest.finish();
    let console = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{console}{}", stderr(&out));
    let done = ResultLine::find(&console, "integrity", "done");
    done.assert_intact();
    assert_eq!(done.u64("mismatches"), 0);
}

/// `memvisor ARGS`: must fail with status 2 and one line naming `want`.
fn refused(args: &[&str], want: &str) {
    let out = memvisor(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(want), "expected {want:?} in {err:?}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn bad_migration_input_is_one_line_and_status_2() {
    refused(
        &[
            "run",
            "--incoming",
            "no-port-here",
            "--migration-token",
            "t",
        ],
        "not a TCP address",
    );
    refused(&["run", "--incoming", "127.0.0.1:0"], "--migration-token");
    refused(
        &["run", "--migration-token", "t"],
        "--migration-token goes with --incoming",
    );
    refused(
        &[
            "ctl",
            "--api-sock",
            "/nonexistent.sock",
            "migrate",
            "--to",
            "127.0.0.1:1",
        ],
        "--token",
    );
    refused(
        &[
            "ctl",
            "--api-sock",
            "/nonexistent.sock",
            "migrate",
            "--to",
            "nowhere",
            "--token",
            "t",
        ],
        "not a TCP address",
    );
}
