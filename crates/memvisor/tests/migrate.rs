//! Post-copy live migration end to end, between two memvisor processes on this machine: the
//! integrity workload, under a limit with the Swap Mapper, the pool and sampling on, is
//! migrated mid-run (after a migration with a wrong token was refused and changed nothing) and
//! finishes on the destination with every byte it wrote intact, between plain VMMs and between
//! jailed ones, and twice in one run; a destination that refuses the
//! state leaves the VM running on the source; a source that dies in post-copy leaves the
//! destination's VM paused; a connection cut in post-copy pauses the destination, and
//! `migrate-recover` finishes the move with every byte intact; the crash-consistency guest,
//! moved mid-write and killed on the destination, loses no write it saw acknowledged; bad
//! input is one line and exit status 2.

use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::{
    as_strs, assert_acknowledged_on_disk, crashwrite_vm, cutting_proxy, disk_spec, last_ack,
    memvisor, mkdisk_data, mkdisk_swap, run_command, stderr, stdout, Proc, ResultLine, TestVm,
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

/// A destination: `memvisor run --incoming 127.0.0.1:0 --migration-token TOKEN` with `extra`
/// flags, and the address it printed once listening.
fn destination(sock: &std::path::Path, disk: &str, token: &str, extra: &[&str]) -> (Proc, String) {
    let mut args = vec![
        "--disk",
        disk,
        "--incoming",
        "127.0.0.1:0",
        "--migration-token",
        token,
    ];
    args.extend_from_slice(&MECHANISMS);
    args.extend_from_slice(extra);
    listening(sock, &args)
}

/// `memvisor run` with `args` (an `--incoming` destination's), and the address it printed once
/// listening.
fn listening(sock: &std::path::Path, args: &[&str]) -> (Proc, String) {
    let mut cmd: Command = run_command(sock, args);
    cmd.stderr(Stdio::piped());
    let dest = Proc::spawn(&mut cmd);
    let line = dest.stderr_line(Duration::from_secs(30), |l| {
        l.contains("waiting for a migration on")
    });
    let addr = line.rsplit(' ').next().unwrap().to_owned();
    (dest, addr)
}

/// A source: the integrity workload on `disk` with the mechanisms of both ends and `extra`
/// flags, once it has filled its memory.
fn integrity_source(sock: &std::path::Path, disk: &str, extra: &[&str]) -> TestVm {
    let mut args = vec![
        "--disk",
        disk,
        "--workload",
        "integrity",
        "--cmdline",
        "anon_mb=120 file_mb=8 rounds=4 secs=4",
    ];
    args.extend_from_slice(&MECHANISMS);
    args.extend_from_slice(extra);
    let source = TestVm::start(sock, &args);
    source.stdout_line(Duration::from_secs(60), |l| l.contains("phase=fill"));
    source
}

/// Waits for `dest` to end with the guest's success: the integrity workload done, every byte it
/// wrote intact.
fn ends_intact(dest: Proc) {
    let out = dest.finish();
    let console = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{console}{}", stderr(&out));
    let done = ResultLine::find(&console, "integrity", "done");
    done.assert_intact();
    assert_eq!(done.u64("mismatches"), 0);
}

fn migrate(source: &TestVm, to: &str, token: &str) -> std::process::Output {
    migrate_with(source, to, token, &[])
}

fn migrate_with(source: &TestVm, to: &str, token: &str, more: &[&str]) -> std::process::Output {
    migrate_from(source.sock(), to, token, more)
}

/// `memvisor ctl migrate` of the VMM whose API socket is `sock`.
fn migrate_from(
    sock: &std::path::Path,
    to: &str,
    token: &str,
    more: &[&str],
) -> std::process::Output {
    let mut args = vec![
        "ctl",
        "--api-sock",
        sock.to_str().unwrap(),
        "migrate",
        "--to",
        to,
        "--token",
        token,
    ];
    args.extend_from_slice(more);
    memvisor(&args)
}

/// Guest pages that hold content on the source (resident but for disk mirrors, swapped,
/// sampled), from its pager's census.
fn held_pages(source: &TestVm) -> u64 {
    let pager = source.client().stats().unwrap().pager.unwrap();
    let c = pager.pages;
    c.resident_pages - c.mirrored_pages + c.swapped_pages + c.sampled_pages
}

#[test]
fn integrity_survives_post_copy_migration_under_a_limit() {
    integrity_survives_post_copy_migration(false);
}

/// The same with both ends jailed: the source connects out of its jail, the destination takes
/// the VM on the listener it bound before its jail.
#[test]
fn integrity_survives_post_copy_migration_between_jailed_vmms() {
    integrity_survives_post_copy_migration(true);
}

fn integrity_survives_post_copy_migration(jailed: bool) {
    let dir = tempfile::tempdir().unwrap();
    let disk = disk_spec(
        &mkdisk_data(dir.path().join("data.img"), "64M", &[]),
        "data",
    );
    let jail = |name: &str| {
        let d = dir.path().join(name);
        std::fs::create_dir(&d).unwrap();
        d.to_str().unwrap().to_owned()
    };
    let (sjail, djail) = (jail("source-jail"), jail("dest-jail"));
    let jail_flags = |d: &str, uid: &str| -> Vec<String> {
        if jailed {
            ["--jail", d, "--uid", uid, "--gid", uid]
                .map(str::to_owned)
                .to_vec()
        } else {
            Vec::new()
        }
    };
    let (sflags, dflags) = (jail_flags(&sjail, "900960"), jail_flags(&djail, "900961"));
    let dsock = dir.path().join("dest.sock");
    let dflags: Vec<&str> = dflags.iter().map(String::as_str).collect();
    let (mut dest, addr) = destination(&dsock, &disk, "the-right-token", &dflags);

    let mut extra = vec!["--sample-pages", "200"];
    extra.extend(sflags.iter().map(String::as_str));
    let source = integrity_source(&dir.path().join("source.sock"), &disk, &extra);

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
    ends_intact(dest);
}

#[test]
fn integrity_survives_pre_copy_rounds_then_post_copy() {
    let dir = tempfile::tempdir().unwrap();
    let disk = disk_spec(
        &mkdisk_data(dir.path().join("data.img"), "64M", &[]),
        "data",
    );
    let dsock = dir.path().join("dest.sock");
    let (dest, addr) = destination(&dsock, &disk, "t", &[]);
    let source = integrity_source(
        &dir.path().join("source.sock"),
        &disk,
        &["--sample-pages", "200"],
    );

    let out = migrate_with(&source, &addr, "t", &["--precopy-rounds", "2"]);
    assert!(out.status.success(), "ctl migrate: {}", stderr(&out));
    let r: memvisor_api::MigrateResult = serde_json::from_slice(&out.stdout).unwrap();
    // Two rounds ran; the destination held pages from them at the switch, which post-copy
    // did not send again; every page was acknowledged, and given back here.
    assert_eq!(r.precopy_round_pages.len(), 2, "{r:?}");
    assert_eq!(
        r.precopy_end,
        Some(memvisor_api::PrecopyEnd::Asked),
        "{r:?}"
    );
    assert!(r.precopy_round_pages[0] > 0, "{r:?}");
    assert!(r.precopied_pages > 0, "{r:?}");
    assert_eq!(r.acked_pages, r.copied_pages, "{r:?}");
    assert_eq!(r.freed_pages, r.acked_pages, "{r:?}");
    let pre: u64 = r.precopy_round_pages.iter().sum();
    assert!(
        r.sent_pages >= pre + r.copied_pages - r.precopied_pages,
        "{r:?}"
    );
    let src = source.finish();
    assert!(!stdout(&src).contains("phase=done"));
    ends_intact(dest);
}

/// The VM moves twice in one run of the integrity workload: by post-copy, then, once every page
/// is there, on from its new VMM by pre-copy rounds and post-copy. It finishes on the third
/// with every byte it wrote intact.
#[test]
fn integrity_survives_two_moves_in_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let disk = disk_spec(
        &mkdisk_data(dir.path().join("data.img"), "64M", &[]),
        "data",
    );
    let (sock1, sock2) = (dir.path().join("dest1.sock"), dir.path().join("dest2.sock"));
    let (dest1, addr1) = destination(&sock1, &disk, "t1", &[]);
    let (dest2, addr2) = destination(&sock2, &disk, "t2", &[]);
    let source = integrity_source(
        &dir.path().join("source.sock"),
        &disk,
        &["--sample-pages", "200"],
    );

    let out = migrate(&source, &addr1, "t1");
    assert!(out.status.success(), "first move: {}", stderr(&out));
    // `ctl migrate` answered: every page is on the first destination.
    assert!(!stdout(&source.finish()).contains("phase=done"));

    let out = migrate_from(&sock1, &addr2, "t2", &["--precopy-rounds", "2"]);
    assert!(out.status.success(), "second move: {}", stderr(&out));
    let r: memvisor_api::MigrateResult = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r.acked_pages, r.copied_pages, "{r:?}");
    let first = dest1.finish();
    assert!(
        !stdout(&first).contains("phase=done"),
        "the first destination ran the workload to its end instead of handing it on"
    );
    ends_intact(dest2);
}

/// The crash-consistency guest writes generations of its file and swaps to its own disk under
/// a limit, with Tesseract's indirections and the Swap Mapper on; it moves mid-write (the source
/// disentangles its indirections first), writes on at the destination, whose VMM is then
/// killed mid-write. A fresh boot finds every write the guest saw acknowledged, on either side.
#[test]
fn acknowledged_writes_survive_a_migration_and_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let data = disk_spec(
        &mkdisk_data(dir.path().join("data.img"), "64M", &[]),
        "data",
    );
    let swap = disk_spec(&mkdisk_swap(dir.path().join("swap.img"), "64M"), "swap");
    let dest_args = crashwrite_vm(
        &data,
        &swap,
        &[
            "--incoming",
            "127.0.0.1:0",
            "--migration-token",
            "crash-token",
        ],
    );
    let (dest, addr) = listening(&dir.path().join("dest.sock"), &as_strs(&dest_args));
    let first = crashwrite_vm(
        &data,
        &swap,
        &[
            "--workload",
            "crashwrite",
            "--cmdline",
            "mb=16 anon_mb=48 batch=128 secs=0 seed=6",
        ],
    );
    let source = TestVm::start(&dir.path().join("source.sock"), &as_strs(&first));
    source.acks(3);
    let out = migrate(&source, &addr, "crash-token");
    assert!(out.status.success(), "ctl migrate: {}", stderr(&out));
    let before = stdout(&source.finish());
    let acked_before = last_ack(&before).expect("acknowledged writes before the move");

    // On the destination it writes on; then its VMM is killed mid-write.
    dest.acks(2);
    dest.signal(libc::SIGKILL);
    let after = stdout(&dest.finish());
    let acked = last_ack(&after).unwrap_or(acked_before);

    // Each acknowledged write, before the move and after it, is on the disk.
    assert_acknowledged_on_disk(&data, &swap, 6, &acked);
}

#[test]
fn a_destination_that_refuses_the_state_leaves_the_vm_running_on_the_source() {
    let dir = tempfile::tempdir().unwrap();
    let disk = disk_spec(&mkdisk_data(dir.path().join("a.img"), "16M", &[]), "data");
    let source = TestVm::holding(&dir.path().join("s.sock"), "64M", "8", Some(&disk));
    // Another image under the same id: the destination refuses the state once it has it.
    let other = disk_spec(&mkdisk_data(dir.path().join("b.img"), "16M", &[]), "data");
    let mut cmd = run_command(
        &dir.path().join("d.sock"),
        &[
            "--mem",
            "64M",
            "--disk",
            &other,
            "--incoming",
            "127.0.0.1:0",
            "--migration-token",
            "t",
        ],
    );
    cmd.stderr(Stdio::piped());
    let dest = Proc::spawn(&mut cmd);
    let line = dest.stderr_line(Duration::from_secs(30), |l| {
        l.contains("waiting for a migration")
    });
    let addr = line.rsplit(' ').next().unwrap().to_owned();

    let out = migrate(&source, &addr, "t");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("runs on here"), "{}", stderr(&out));
    let out = dest.finish();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("changed since"), "{}", stderr(&out));
    assert!(
        !dir.path().join("d.sock").exists(),
        "no VM was started there"
    );
    let vm = common::ok(source.client().info());
    assert_eq!(vm.state, memvisor_api::VmState::Running, "resumed here");
}

#[test]
fn a_source_that_dies_in_post_copy_leaves_the_destination_paused() {
    let dir = tempfile::tempdir().unwrap();
    let source = TestVm::holding(&dir.path().join("s.sock"), "1G", "700", None);
    let dsock = dir.path().join("d.sock");
    let mut cmd = run_command(
        &dsock,
        &[
            "--mem",
            "1G",
            "--incoming",
            "127.0.0.1:0",
            "--migration-token",
            "t",
        ],
    );
    cmd.stderr(Stdio::piped());
    let mut dest = Proc::spawn(&mut cmd);
    let line = dest.stderr_line(Duration::from_secs(30), |l| {
        l.contains("waiting for a migration")
    });
    let addr = line.rsplit(' ').next().unwrap().to_owned();

    // The migration runs on its own; once the destination runs the VM, the source is killed
    // while 700 MiB are still on their way.
    let mut ctl = Command::new(common::MEMVISOR);
    ctl.args(["ctl", "--api-sock", source.sock().to_str().unwrap()])
        .args(["migrate", "--to", &addr, "--token", "t"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let ctl = Proc::spawn(&mut ctl);
    dest.wait_for_file(&dsock);
    let client = memvisor_api::VmClient::new(&dsock);
    common::poll(
        "the destination to run the VM",
        Duration::from_secs(60),
        Duration::from_millis(5),
        || client.info().ok().map(|v| v.state),
        |s| s.is_some(),
    );
    source.signal(libc::SIGKILL);
    let vm = common::poll(
        "the destination to pause",
        Duration::from_secs(60),
        Duration::from_millis(50),
        || common::ok(client.info()),
        |v| v.state == memvisor_api::VmState::Paused,
    );
    let why = vm.paused_because.unwrap_or_default();
    // Paused by the broken stream or by a fault on a page that never arrived, whichever came
    // first: either way no page was invented.
    assert!(why.contains("migration"), "{why}");
    assert!(dest.running(), "the destination keeps the paused VM");
    let out = ctl.finish();
    assert!(!out.status.success());
}

#[test]
fn a_connection_cut_in_post_copy_pauses_and_migrate_recover_finishes_intact() {
    let dir = tempfile::tempdir().unwrap();
    let disk = disk_spec(
        &mkdisk_data(dir.path().join("data.img"), "64M", &[]),
        "data",
    );
    let dsock = dir.path().join("dest.sock");
    let (mut dest, addr) = destination(&dsock, &disk, "t", &[]);
    let source = integrity_source(&dir.path().join("source.sock"), &disk, &[]);

    // Through a proxy that cuts the stream 40 MiB in: well after the switch, before the end.
    let proxy = cutting_proxy(addr.clone(), 40 << 20);
    let out = migrate(&source, &proxy, "t");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("migrate-recover"), "{}", stderr(&out));
    let client = memvisor_api::VmClient::new(&dsock);
    let vm = common::poll(
        "the destination to pause",
        Duration::from_secs(60),
        Duration::from_millis(50),
        || common::ok(client.info()),
        |v| v.state == memvisor_api::VmState::Paused,
    );
    let why = vm.paused_because.unwrap_or_default();
    // Paused by the broken stream or by a fault on a page that never arrived, whichever came
    // first: either way no page was invented.
    assert!(why.contains("migration"), "{why}");
    let src = common::ok(source.client().info());
    assert_eq!(
        src.state,
        memvisor_api::VmState::Paused,
        "the source keeps it"
    );

    // What was acknowledged is given back here: the pages still held are at most those not
    // acknowledged (disk mirrors, not sent, aside). Nothing here writes guest memory after
    // the switch, not even the balloon when GET /stats asks it for statistics.
    let m = src
        .migration
        .expect("the broken migration, kept for recovery");
    assert!(m.acked_pages > 0 && m.acked_pages < m.copied_pages, "{m:?}");
    assert_eq!(m.freed_pages, m.acked_pages, "{m:?}");
    assert!(m.sent_pages >= m.acked_pages, "{m:?}");
    let held = held_pages(&source);
    assert!(
        held <= m.copied_pages - m.freed_pages,
        "{held} pages held here, {} copied, {} freed",
        m.copied_pages,
        m.freed_pages
    );

    // Straight to the destination this time: the rest arrives and the guest finishes there.
    let out = memvisor(&[
        "ctl",
        "--api-sock",
        source.sock().to_str().unwrap(),
        "migrate-recover",
        "--to",
        &addr,
        "--token",
        "t",
    ]);
    assert!(out.status.success(), "migrate-recover: {}", stderr(&out));
    let src = source.finish();
    assert!(!stdout(&src).contains("phase=done"));
    assert!(dest.running() || dest.ends_within(Duration::from_secs(1)));
    ends_intact(dest);
}

#[test]
fn a_pre_copy_cut_short_leaves_the_vm_running_and_a_vm_without_a_limit_moves_intact() {
    let dir = tempfile::tempdir().unwrap();
    let disk = disk_spec(
        &mkdisk_data(dir.path().join("data.img"), "64M", &[]),
        "data",
    );
    // Neither end has a limit: the source's pager has not taken guest RAM over, so pre-copy
    // sends every page and the source frees them all as plain memory.
    let dsock = dir.path().join("dest.sock");
    let mut cmd = run_command(
        &dsock,
        &[
            "--mem",
            "256M",
            "--disk",
            &disk,
            "--incoming",
            "127.0.0.1:0",
            "--migration-token",
            "t",
        ],
    );
    cmd.stderr(Stdio::piped());
    let mut dest = Proc::spawn(&mut cmd);
    let line = dest.stderr_line(Duration::from_secs(30), |l| {
        l.contains("waiting for a migration on")
    });
    let addr = line.rsplit(' ').next().unwrap().to_owned();
    let source = TestVm::start(
        &dir.path().join("source.sock"),
        &[
            "--mem",
            "256M",
            "--disk",
            &disk,
            "--workload",
            "integrity",
            "--cmdline",
            "anon_mb=120 file_mb=8 rounds=4 secs=4",
        ],
    );
    source.stdout_line(Duration::from_secs(60), |l| l.contains("phase=fill"));

    // Cut 8 MiB into the first round: the VM was never paused and runs on here; the
    // destination drops what it got and waits on.
    let proxy = cutting_proxy(addr.clone(), 8 << 20);
    let out = migrate_with(&source, &proxy, "t", &["--precopy-rounds", "2"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("runs on here"), "{}", stderr(&out));
    let vm = common::ok(source.client().info());
    assert_eq!(vm.state, memvisor_api::VmState::Running);
    assert!(vm.migration.is_none(), "nothing to recover: {vm:?}");
    dest.stderr_line(Duration::from_secs(30), |l| l.contains("still waiting"));
    assert!(
        dest.running(),
        "the destination waits on, its VM built but not run"
    );

    // Again, straight there: every page of the first round, then post-copy for the rest.
    let out = migrate_with(&source, &addr, "t", &["--precopy-rounds", "1"]);
    assert!(out.status.success(), "ctl migrate: {}", stderr(&out));
    let r: memvisor_api::MigrateResult = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r.precopy_round_pages.len(), 1, "{r:?}");
    assert_eq!(
        r.precopy_end,
        Some(memvisor_api::PrecopyEnd::Asked),
        "{r:?}"
    );
    assert!(r.precopy_round_pages[0] >= r.copied_pages / 2, "{r:?}");
    assert!(r.precopied_pages > 0, "{r:?}");
    assert_eq!(r.freed_pages, r.copied_pages, "{r:?}");
    let src = source.finish();
    assert!(!stdout(&src).contains("phase=done"));
    ends_intact(dest);
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
    refused(
        &[
            "ctl",
            "--api-sock",
            "/nonexistent.sock",
            "migrate",
            "--to",
            "127.0.0.1:1",
            "--token",
            "t",
            "--precopy-rounds",
            "17",
        ],
        "at most 16",
    );
}
