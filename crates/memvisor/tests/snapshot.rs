//! Snapshots end to end: the integrity workload, with the pager's mechanisms on, is written to a
//! snapshot mid-run and ended, restored (under a limit, lazily from the snapshot's memory
//! file), snapshotted again and restored again, and checks every byte it wrote; a snapshot
//! that lets the VM run on is restored too; a guest writing to its disk loses no acknowledged
//! write across a snapshot, a restore and a crash; bad snapshots are refused before anything
//! starts; a jailed VMM with every mechanism on writes its snapshots into its snapshot
//! directory, refuses names that leave it, and its snapshots restore jailed and unjailed.

use std::path::Path;
use std::time::Duration;

mod common;
use common::{
    as_strs, assert_acknowledged_on_disk, crashwrite_vm, disk_spec, last_ack, memvisor,
    mkdisk_data, mkdisk_swap, ok, poll, run_command, stderr, stdout, TestVm,
};

/// The integrity workload's flags, with the Swap Mapper, the pool and sampling on.
const MECHANISMS: [&str; 8] = [
    "--mapper",
    "--pool",
    "16M",
    "--victims",
    "clock",
    "--sample-pages",
    "200",
    "--balloon",
];

/// Waits until the guest has done some of its work (a `RESULT ... phase=fill` line), so the
/// snapshot lands mid-run.
fn wait_for_fill(vm: &TestVm) {
    vm.stdout_line(Duration::from_secs(60), |l| l.contains("phase=fill"));
}

/// Snapshots `vm` into `dir/name` with `--stop` through `memvisor ctl`, and waits for it to end.
fn snapshot_and_stop(vm: TestVm, dir: &Path, name: &str) {
    let snap = dir.join(name);
    let out = memvisor(&[
        "ctl",
        "--api-sock",
        vm.sock().to_str().unwrap(),
        "snapshot",
        snap.to_str().unwrap(),
        "--stop",
    ]);
    assert!(out.status.success(), "ctl snapshot: {}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("\"stopped\": true"), "{text}");
    let out = vm.finish();
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("phase=done"),
        "the VM ran to its end instead of stopping at the snapshot"
    );
    assert!(snap.join("vm.state").exists() && snap.join("memory").exists());
}

fn restore_args<'a>(disk: &'a str, snap: &'a str, limit: &'a str) -> Vec<&'a str> {
    let mut a = vec![
        "--mem",
        "256M",
        "--mem-limit",
        limit,
        "--disk",
        disk,
        "--restore",
        snap,
    ];
    a.extend_from_slice(&MECHANISMS);
    a
}

#[test]
fn integrity_survives_repeated_snapshots_and_lazy_restores_under_a_limit() {
    let dir = tempfile::tempdir().unwrap();
    let disk = disk_spec(
        &mkdisk_data(dir.path().join("data.img"), "64M", &[]),
        "data",
    );
    let sock = dir.path().join("api.sock");
    let mut first = vec![
        "--mem",
        "256M",
        "--mem-limit",
        "96M",
        "--disk",
        &disk,
        "--workload",
        "integrity",
        "--cmdline",
        "anon_mb=120 file_mb=8 rounds=4 secs=4",
    ];
    first.extend_from_slice(&MECHANISMS);
    let vm = TestVm::start(&sock, &first);
    wait_for_fill(&vm);
    snapshot_and_stop(vm, dir.path(), "a");

    // Restored under a smaller limit than it ran with: most of it stays in the snapshot.
    let a = dir.path().join("a");
    let a = a.to_str().unwrap();
    let vm = TestVm::start(&sock, &restore_args(&disk, a, "64M"));
    let stats = poll(
        "the restored guest to fault pages in from the snapshot",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || vm.stats_if_running(),
        |s| {
            s.as_ref()
                .and_then(|s| s.pager.as_ref())
                .is_some_and(|p| p.counters.faults_restored > 0)
        },
    );
    let c = stats
        .and_then(|s| s.pager)
        .expect("the restored VM ended before it faulted")
        .counters;
    // A restored fault reads the swap store past its own blocks: a swap fault too.
    assert!(c.faults_swap >= c.faults_restored, "{c:?}");
    std::thread::sleep(Duration::from_secs(2));
    snapshot_and_stop(vm, dir.path(), "b");

    // And once more, from the second snapshot, to the end of the workload.
    let b = dir.path().join("b");
    let vm = TestVm::start(&sock, &restore_args(&disk, b.to_str().unwrap(), "80M"));
    let r = vm.intact("integrity");
    assert_eq!(r.u64("mismatches"), 0);
}

#[test]
fn a_snapshot_that_lets_the_vm_run_on_restores_too() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("api.sock");
    // No disk: the VM runs on after the snapshot and its restore is from the same memory.
    let vm = TestVm::start(
        &sock,
        &[
            "--mem",
            "128M",
            "--workload",
            "alloc",
            "--cmdline",
            "mb=48 rounds=6",
        ],
    );
    vm.stdout_line(Duration::from_secs(60), |l| l.contains("RESULT"));
    let snap = dir.path().join("s");
    let r = ok(vm.client().snapshot(snap.to_str().unwrap(), false));
    assert!(
        !r.stopped && r.copied_pages > 0 && r.zero_pages > 0,
        "{r:?}"
    );
    vm.succeeded();
    let vm = TestVm::start(
        &sock,
        &["--mem", "128M", "--restore", snap.to_str().unwrap()],
    );
    vm.succeeded();
}

/// A disk given by a relative path: the snapshot, taken on the filtered API thread, records
/// the image's absolute path (made before the filters, which refuse `getcwd`), and the VM
/// restores from it started elsewhere.
#[test]
fn a_vm_with_a_relative_disk_path_snapshots_and_restores() {
    let dir = tempfile::tempdir().unwrap();
    mkdisk_data(dir.path().join("data.img"), "16M", &[]);
    let sock = dir.path().join("api.sock");
    let mut cmd = run_command(
        &sock,
        &[
            "--mem",
            "128M",
            "--disk",
            "data.img,id=data",
            "--workload",
            "alloc",
            "--cmdline",
            "mb=48 rounds=6",
        ],
    );
    cmd.current_dir(dir.path());
    let vm = TestVm::spawn(&mut cmd, &sock);
    vm.stdout_line(Duration::from_secs(60), |l| l.contains("RESULT"));
    let snap = dir.path().join("s");
    let r = ok(vm.client().snapshot(snap.to_str().unwrap(), false));
    assert!(!r.stopped && r.copied_pages > 0, "{r:?}");
    vm.succeeded();
    let disk = format!("{},id=data", dir.path().join("data.img").display());
    let vm = TestVm::start(
        &sock,
        &[
            "--mem",
            "128M",
            "--disk",
            &disk,
            "--restore",
            snap.to_str().unwrap(),
        ],
    );
    vm.succeeded();
}

#[test]
fn acknowledged_writes_survive_a_snapshot_a_restore_and_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let data = disk_spec(
        &mkdisk_data(dir.path().join("data.img"), "64M", &[]),
        "data",
    );
    let swap = disk_spec(&mkdisk_swap(dir.path().join("swap.img"), "64M"), "swap");
    let sock = dir.path().join("api.sock");
    // The crash-consistency guest writes generations of its file and swaps to its own disk
    // under a limit, with Tesseract's indirections and the Swap Mapper on: the snapshot
    // disentangles the indirections, and the restored guest goes on writing.
    let vm_args = |extra: &[&str]| crashwrite_vm(&data, &swap, extra);
    let first = vm_args(&[
        "--workload",
        "crashwrite",
        "--cmdline",
        "mb=16 anon_mb=48 batch=128 secs=0 seed=4",
    ]);
    let vm = TestVm::start(&sock, &as_strs(&first));
    vm.acks(3);
    let snap = dir.path().join("s");
    let r = ok(vm.client().snapshot(snap.to_str().unwrap(), true));
    assert!(r.stopped, "{r:?}");
    let before = stdout(&vm.finish());
    let acked_before = last_ack(&before).expect("acknowledged writes before the snapshot");

    // Restored, it writes on; then the VMM is killed mid-write.
    let restored = vm_args(&["--restore", snap.to_str().unwrap()]);
    let vm = TestVm::start(&sock, &as_strs(&restored));
    vm.acks(2);
    vm.signal(libc::SIGKILL);
    let after = stdout(&vm.finish());
    let acked = last_ack(&after).unwrap_or(acked_before);

    // Each acknowledged write, before the snapshot and after the restore, is on the disk.
    assert_acknowledged_on_disk(&data, &swap, 4, &acked);
}

/// `memvisor run --restore` with `args`: must fail with status 2 and one line naming `want`.
fn refused(args: &[&str], want: &str) {
    let out = memvisor(&[&["run"], args].concat());
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(want), "expected {want:?} in {err:?}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn bad_snapshots_are_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("api.sock");
    let vm = TestVm::holding(&sock, "64M", "8", None);
    let snap = dir.path().join("s");
    ok(vm.client().snapshot(snap.to_str().unwrap(), true));
    vm.finish();
    let s = snap.to_str().unwrap();

    refused(&["--restore", "/nonexistent/snap"], "does not exist");
    refused(&["--mem", "32M", "--restore", s], "more than --mem");
    let copy = |name: &str| {
        let d = dir.path().join(name);
        std::fs::create_dir(&d).unwrap();
        for f in ["vm.state", "memory"] {
            std::fs::copy(snap.join(f), d.join(f)).unwrap();
        }
        d
    };
    let v = copy("version");
    let mut state = std::fs::read(v.join("vm.state")).unwrap();
    state[8] = 99;
    std::fs::write(v.join("vm.state"), &state).unwrap();
    refused(&["--restore", v.to_str().unwrap()], "version 99");
    let t = copy("truncated");
    let state = std::fs::read(t.join("vm.state")).unwrap();
    std::fs::write(t.join("vm.state"), &state[..state.len() / 2]).unwrap();
    refused(&["--restore", t.to_str().unwrap()], "truncated");
    let m = copy("short-memory");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(m.join("memory"))
        .unwrap();
    f.set_len(4096).unwrap();
    refused(&["--restore", m.to_str().unwrap()], "truncated");
    let c = copy("corrupt");
    let mut state = std::fs::read(c.join("vm.state")).unwrap();
    let last = state.len() - 2;
    state[last] ^= 0x20;
    std::fs::write(c.join("vm.state"), &state).unwrap();
    refused(&["--restore", c.to_str().unwrap()], "corrupt");
    refused(
        &["--restore", dir.path().to_str().unwrap()],
        "not a memvisor snapshot",
    );
    assert!(!sock.exists(), "no VM was started");
}

/// A jailed VMM restores from a snapshot (its files are opened before the jail); given no
/// snapshot directory, it refuses to take one and says what to give.
#[test]
fn a_jailed_vm_restores_a_snapshot_and_says_why_it_takes_none() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("api.sock");
    let vm = TestVm::holding(&sock, "128M", "48", None);
    let snap = dir.path().join("s");
    let r = ok(vm.client().snapshot(snap.to_str().unwrap(), true));
    assert!(r.stopped && r.copied_pages > 0, "{r:?}");
    vm.finish();

    let jail = dir.path().join("jail");
    std::fs::create_dir(&jail).unwrap();
    let args = [
        "--mem",
        "128M",
        "--restore",
        snap.to_str().unwrap(),
        "--jail",
        jail.to_str().unwrap(),
        "--uid",
        "900963",
        "--gid",
        "900963",
    ];
    let vm = TestVm::start(&sock, &args);
    let info = ok(vm.client().info());
    assert_eq!(info.state, memvisor_api::VmState::Running);
    let again = dir.path().join("t");
    let e = vm
        .client()
        .snapshot(again.to_str().unwrap(), false)
        .expect_err("a jailed VMM wrote a snapshot")
        .to_string();
    assert!(e.contains("jailed") && e.contains("--snapshot-dir"), "{e}");
    assert!(!again.exists());
    assert_eq!(ok(vm.client().info()).state, memvisor_api::VmState::Running);
}

/// Every mechanism (balloon, Swap Mapper, False Reads Preventer, Tesseract, a pool, KSM
/// sharing) under a limit, with the integrity workload on `disk`, and `extra`.
fn every_mechanism<'a>(disk: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "--mem=256M",
        "--mem-limit=64M",
        "--balloon",
        "--mapper",
        "--preventer",
        "--tesseract",
        "--pool=16M",
        "--sharing=host",
        "--sample-pages=200",
        "--disk",
        disk,
    ];
    a.extend_from_slice(extra);
    a
}

/// `ctl snapshot DIR --stop` on `vm`: its answer's `dir`, once the VM has ended.
fn ctl_snapshot_and_stop(vm: TestVm, dir: &str) -> String {
    let out = memvisor(&[
        "ctl",
        "--api-sock",
        vm.sock().to_str().unwrap(),
        "snapshot",
        dir,
        "--stop",
    ]);
    assert!(out.status.success(), "ctl snapshot {dir}: {}", stderr(&out));
    let r: memvisor_api::SnapshotResult = serde_json::from_slice(&out.stdout).unwrap();
    assert!(r.stopped && r.copied_pages > 0, "{r:?}");
    let end = vm.finish();
    assert!(
        !stdout(&end).contains("phase=done"),
        "the VM ran to its end instead of stopping at the snapshot"
    );
    r.dir
}

/// A jailed, filtered VMM with every mechanism on writes its snapshot by name into the snapshot
/// directory bound into its jail (`ctl` says where it landed, files the VM's uid's); names that
/// would leave it are refused with a 400 and write nothing; the snapshot restores jailed, which
/// snapshots again by the directory's full path, and that one restores unjailed, where the
/// integrity workload finds every byte it wrote.
#[test]
fn a_jailed_vmm_snapshots_into_its_directory_and_restores_intact() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let disk = disk_spec(
        &mkdisk_data(dir.path().join("data.img"), "64M", &[]),
        "data",
    );
    let uid = 900_964;
    let snaps = dir.path().join("snapshots");
    std::fs::create_dir(&snaps).unwrap();
    std::os::unix::fs::chown(&snaps, Some(uid), Some(uid)).unwrap();
    let s = snaps.to_str().unwrap();
    // Jailed as `uid`, in a new empty jail directory, with the snapshot directory.
    let jailed = |name: &str| -> Vec<String> {
        let j = dir.path().join(name);
        std::fs::create_dir(&j).unwrap();
        let (j, uid) = (j.display().to_string(), uid.to_string());
        [
            "--jail",
            &j,
            "--uid",
            &uid,
            "--gid",
            &uid,
            "--snapshot-dir",
            s,
        ]
        .map(String::from)
        .to_vec()
    };
    let sock = dir.path().join("api.sock");

    let mut first = jailed("jail1");
    first.extend([
        "--workload=integrity".to_owned(),
        "--cmdline=anon_mb=120 file_mb=8 rounds=4 secs=4".to_owned(),
    ]);
    let first = as_strs(&first);
    let vm = TestVm::start(&sock, &every_mechanism(&disk, &first));
    wait_for_fill(&vm);
    let info = ok(vm.client().info());
    assert_eq!(info.snapshot_dir.as_deref(), Some(s));
    // Names that leave the snapshot directory: refused, nothing written, the VM runs on.
    let outside = dir.path().join("escaped");
    let escaping = [
        "../escaped".to_owned(),
        "..".to_owned(),
        "a/b".to_owned(),
        outside.display().to_string(),
        format!("{s}/../escaped"),
        "/snapshots/x".to_owned(),
    ];
    for name in &escaping {
        let e = vm
            .client()
            .snapshot(name, false)
            .expect_err("a snapshot left its directory")
            .to_string();
        assert!(
            e.contains(&format!("writes snapshots only into {s}")),
            "{name}: {e}"
        );
    }
    let out = memvisor(&[
        "ctl",
        "--api-sock",
        sock.to_str().unwrap(),
        "snapshot",
        "../escaped",
    ]);
    // `ctl` sends a relative name to a jailed VMM as it is; the refusal is one line.
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("writes snapshots only into"), "{err}");
    assert!(!outside.exists() && !dir.path().join("a").exists());
    assert_eq!(std::fs::read_dir(&snaps).unwrap().count(), 0);
    assert_eq!(ok(vm.client().info()).state, memvisor_api::VmState::Running);

    // By name: it lands in the snapshot directory, the VM's uid's.
    let landed = ctl_snapshot_and_stop(vm, "a");
    let a = snaps.join("a");
    assert_eq!(landed, a.display().to_string());
    for f in ["vm.state", "memory"] {
        assert_eq!(std::fs::metadata(a.join(f)).unwrap().uid(), uid, "{f}");
    }

    // Restored jailed, under a smaller limit, and snapshotted again by the full path.
    let mut second = jailed("jail2");
    second.extend(["--restore".to_owned(), a.display().to_string()]);
    let second = as_strs(&second);
    let vm = TestVm::start(&sock, &every_mechanism(&disk, &second));
    vm.stats_until(
        "the restored guest faults pages in",
        Duration::from_secs(60),
        |st| {
            st.pager
                .as_ref()
                .is_some_and(|p| p.counters.faults_restored > 0)
        },
    );
    std::thread::sleep(Duration::from_secs(2));
    let b = snaps.join("b");
    assert_eq!(
        ctl_snapshot_and_stop(vm, b.to_str().unwrap()),
        b.display().to_string()
    );

    // And unjailed, to the end of the workload: every byte intact.
    let vm = TestVm::start(
        &sock,
        &every_mechanism(&disk, &["--restore", b.to_str().unwrap()]),
    );
    let r = vm.intact("integrity");
    assert_eq!(r.u64("mismatches"), 0);
}
