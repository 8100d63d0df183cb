//! A VM moving between two `memvisor host`s on this machine, each with its own state
//! directory, socket, budget and uids (the harness gives each host a range of its own), every
//! VMM jailed: the integrity workload moves from a host under pressure to one with room
//! mid-run and finds every byte it wrote intact there,
//! both hosts' budgets, events and metrics showing the move; a destination whose admission
//! control refuses the VM leaves both hosts as they were; the destination's call alone, as an
//! orchestrator makes it, admits a VM and is called off again without a trace; and a move made
//! call by call fails before the switch with a wrong token, the VM running on, then succeeds;
//! one broken off in post-copy is left for `migrate-recover`, which finishes it intact.

use std::path::Path;
use std::time::Duration;

use memvisor_api::{HostEvent, HostEventKind, HostInfo, HostVm, HostVmState, IncomingVm};
use serde_json::Value;

mod common;
use common::openapi::{self, typed};
use common::{mkdisk_data, ok, spin_kernel, ResultLine, TestHost, MIB};

fn spec() -> Value {
    openapi::load("host-openapi.json")
}

/// Starts a host in a directory of its own under `dir` (its socket in `NAME/host.state/`).
fn host(dir: &Path, name: &str, config: &str) -> TestHost {
    let d = dir.join(name);
    std::fs::create_dir(&d).unwrap();
    TestHost::start(&d, config)
}

/// The events of `host` about `vm`, as (kind, message).
/// Waits for `vm` to end on `host` (moved there), and checks it ended with its guest's success
/// and the integrity workload found every byte it wrote, before and after the move, intact.
fn finishes_intact(host: &TestHost, vm: &str) {
    let done = host.wait_vm(vm, 180, |v| v.state == HostVmState::Exited);
    assert_eq!(
        done.exit,
        Some(memvisor_api::VmExit::GuestSuccess),
        "{done:?}"
    );
    let log = std::fs::read_to_string(&done.log).unwrap();
    ResultLine::find(&log, "integrity", "done").assert_intact();
}

fn events_of(host: &TestHost, vm: &str) -> Vec<(HostEventKind, String)> {
    let events: Vec<HostEvent> = ok(host.client().events(0.0));
    events
        .into_iter()
        .filter(|e| e.vm.as_deref() == Some(vm))
        .map(|e| (e.kind, e.message))
        .collect()
}

/// The integrity workload moves mid-run from host A, whose budget makes it page, to host B,
/// with pre-copy off (post-copy only): B admits it, A's VMM sends it, it finishes on B with 0
/// mismatches; A lists it `migrated` with its reservation back, B `running` then `exited` with
/// the guest's success; both hosts' events and metrics count the move.
#[test]
fn a_vm_moves_to_another_host_and_finds_every_byte_intact() {
    let spec = spec();
    let dir = tempfile::tempdir().unwrap();
    let disk = mkdisk_data(dir.path().join("mover.img"), "32M", &[]);
    let d = disk.display();
    let a = host(
        dir.path(),
        "a",
        &format!(
            r#"
[host]
memory = "224M"
swap = "1G"
tick = "200ms"
vm_overhead = "24M"

[[vm]]
name = "mover"
mem = "256M"
min = "32M"
workload = "integrity"
cmdline = "anon_mb=160 file_mb=8 rounds=3 secs=10"
disks = ["{d},id=data"]
balloon = true
mapper = true
"#
        ),
    );
    let b = host(
        dir.path(),
        "b",
        r#"
[host]
memory = "512M"
swap = "1G"
tick = "200ms"
vm_overhead = "24M"
"#,
    );
    let before = a.wait_vm("mover", 30, |v| v.state == HostVmState::Running);
    let log = std::fs::read_to_string(&before.log).unwrap_or_default();
    assert!(!log.contains("phase=done"), "{log}");
    common::poll(
        "mover filled its memory",
        Duration::from_secs(120),
        Duration::from_millis(200),
        || std::fs::read_to_string(&before.log).unwrap_or_default(),
        |log| log.contains("phase=fill"),
    );
    let reserved_before = a.info().memory_reserved_bytes;
    assert_eq!(reserved_before, (32 + 24) * MIB);
    let body = format!(r#"{{"to": "{}"}}"#, b.sock().display());
    let (status, v) =
        openapi::call_checked(&spec, a.sock(), "POST", "/vms/mover/migrate", Some(&body));
    assert_eq!(status, 200, "{v}");
    let moving: HostVm = typed(&v, "POST /vms/mover/migrate");
    assert_eq!(moving.state, HostVmState::Migrating);
    let gone = a.wait_vm("mover", 120, |v| v.state != HostVmState::Migrating);
    assert_eq!(gone.state, HostVmState::Migrated, "{gone:?}");
    let why = gone.why.unwrap();
    assert!(
        why.contains("moved to") && why.contains("pages copied"),
        "{why}"
    );
    let ha: HostInfo = a.info();
    assert_eq!(ha.memory_reserved_bytes, 0, "A's reservation is back");
    assert_eq!((ha.migrated_out, ha.migrations_failed), (1, 0));
    let there = b.vm("mover");
    assert!(
        matches!(
            there.state,
            HostVmState::Running | HostVmState::Incoming | HostVmState::Exited
        ),
        "{there:?}"
    );
    assert_eq!(b.info().memory_reserved_bytes, (32 + 24) * MIB);
    // It finishes there, every byte it wrote before and after the move intact.
    finishes_intact(&b, "mover");
    // Both journals and both hosts' metrics say so.
    let ea = events_of(&a, "mover");
    let kinds: Vec<HostEventKind> = ea.iter().map(|e| e.0).collect();
    assert!(
        kinds.ends_with(&[HostEventKind::Migrating, HostEventKind::MigratedOut]),
        "{ea:?}"
    );
    // Its VMM here has ended since, which is no end of its guest.
    let left = a.vm("mover");
    assert_eq!(
        (left.state, left.exit, left.pid),
        (HostVmState::Migrated, None, None)
    );
    let eb = events_of(&b, "mover");
    let kinds: Vec<HostEventKind> = eb.iter().map(|e| e.0).collect();
    for k in [
        HostEventKind::Incoming,
        HostEventKind::Admitted,
        HostEventKind::MigratedIn,
    ] {
        assert!(kinds.contains(&k), "{k:?} in {eb:?}");
    }
    assert_eq!(b.info().migrated_in, 1);
    let (_, text) = openapi::get_text_checked(&spec, a.sock(), "/metrics");
    for want in [
        "\nmemvisor_host_migrated_out_total 1\n",
        "\nmemvisor_host_vm_state{vm=\"mover\",state=\"migrated\"} 1\n",
    ] {
        assert!(text.contains(want), "{want:?} in {text}");
    }
    let (_, text) = openapi::get_text_checked(&spec, b.sock(), "/metrics");
    assert!(
        text.contains("\nmemvisor_host_migrated_in_total 1\n"),
        "{text}"
    );
}

/// A destination whose admission refuses the VM (its `min` and overhead do not fit) answers
/// why, and nothing changes on either host: the VM runs on at the source with the same VMM and
/// reservation, the destination has no VM and reserves nothing. Bad requests are refused too.
/// Then the destination's call alone, as an orchestrator makes it: admitted, its VMM waits
/// with an address and a token; called off (`DELETE`), it leaves nothing; and a whole move
/// made call by call, the source host given the destination VMM's address and token, after a
/// first try with a wrong token failed before the switch and left the VM running.
#[test]
fn a_destination_that_refuses_changes_nothing_on_either_host() {
    let spec = spec();
    let dir = tempfile::tempdir().unwrap();
    let kernel = spin_kernel(dir.path());
    let k = kernel.display();
    let a = host(
        dir.path(),
        "a",
        &format!(
            r#"
[host]
memory = "256M"
swap = "1G"
tick = "200ms"
vm_overhead = "24M"

[[vm]]
name = "big"
mem = "128M"
min = "96M"
kernel = "{k}"
"#
        ),
    );
    let b = host(
        dir.path(),
        "b",
        r#"
[host]
memory = "96M"
swap = "1G"
tick = "200ms"
vm_overhead = "24M"
"#,
    );
    let call = |sock: &Path, method: &str, path: &str, body: Option<&str>| {
        openapi::call_checked(&spec, sock, method, path, body)
    };
    let running = a.wait_vm("big", 30, |v| v.state == HostVmState::Running);
    let reserved = a.info().memory_reserved_bytes;
    let to = format!(r#"{{"to": "{}"}}"#, b.sock().display());
    let (status, v) = call(a.sock(), "POST", "/vms/big/migrate", Some(&to));
    assert_eq!(status, 400, "{v}");
    let why = v["error"].as_str().unwrap();
    assert!(
        why.contains("did not take vm 'big'") && why.contains("bytes short"),
        "{why}"
    );
    // Nothing changed: the same VMM runs the VM, with the same reservation; B holds nothing.
    std::thread::sleep(Duration::from_millis(600));
    let after = a.vm("big");
    assert_eq!(after.state, HostVmState::Running, "{after:?}");
    assert_eq!(after.pid, running.pid);
    assert_eq!(a.info().memory_reserved_bytes, reserved);
    assert_eq!(a.info().migrations_failed, 1);
    let hb = b.info();
    assert_eq!(hb.memory_reserved_bytes, 0);
    assert!(ok(b.client().vms()).is_empty());
    // Bad requests change nothing either.
    for (path, body, want) in [
        ("/vms/nobody/migrate", to.clone(), 404),
        ("/vms/big/migrate", r#"{"to": 3}"#.to_owned(), 400),
        ("/vms/big/migrate", "{}".to_owned(), 400),
        (
            "/vms/big/migrate",
            format!(
                r#"{{"to": "{}", "precopy_rounds": 17}}"#,
                b.sock().display()
            ),
            400,
        ),
        (
            "/vms/big/migrate",
            r#"{"addr": "x:1", "token": "t"}"#.to_owned(),
            400,
        ),
        (
            "/vms/big/migrate",
            r#"{"to": "/x", "color": 1}"#.to_owned(),
            400,
        ),
        (
            "/vms/big/migrate",
            r#"{"to": "/no/such/host.sock"}"#.to_owned(),
            400,
        ),
        (
            "/vms/big/migrate",
            format!(r#"{{"to": "{}"}}"#, a.sock().display()),
            400,
        ),
    ] {
        let (status, v) = call(a.sock(), "POST", path, Some(&body));
        assert_eq!(status, want, "{path} {body}: {v}");
    }
    assert_eq!(a.vm("big").pid, running.pid);

    // The destination's call alone: admitted, its VMM (jailed) waits for the source.
    let small = format!(r#"{{"vm": {{"name": "small", "mem": "64M", "kernel": "{k}"}}}}"#);
    let (status, v) = call(b.sock(), "POST", "/vms/incoming", Some(&small));
    assert_eq!(status, 200, "{v}");
    let taken: IncomingVm = typed(&v, "POST /vms/incoming");
    assert_eq!(taken.vm.state, HostVmState::Incoming);
    assert!(taken.addr.starts_with("127.0.0.1:"), "{}", taken.addr);
    assert_eq!(taken.token.len(), 32);
    assert_eq!(b.info().memory_reserved_bytes, 24 * MIB);
    let listed = b.vm("small");
    assert_eq!(listed.state, HostVmState::Incoming, "{listed:?}");
    // The token is not on the VMM's command line, which every user can read.
    let pid = listed.pid.unwrap();
    let cmdline = String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap())
        .replace('\0', " ");
    assert!(!cmdline.contains(&taken.token), "{cmdline}");
    // Started as the host starts every VMM: jailed, its seccomp filters on.
    for flag in ["--jail", "--seccomp=on", "--incoming 127.0.0.1:0"] {
        assert!(cmdline.contains(flag), "{flag} in {cmdline}");
    }
    let bad = r#"{"vm": {"name": "x", "mem": "64M"}, "listen": "nowhere"}"#;
    let (status, _) = call(b.sock(), "POST", "/vms/incoming", Some(bad));
    assert_eq!(status, 400);
    // Called off: its VMM stops, its reservation goes back, and the host forgets it.
    let (status, v) = call(b.sock(), "DELETE", "/vms/small", None);
    assert_eq!(status, 200, "{v}");
    common::poll(
        "the incoming VM forgotten",
        Duration::from_secs(20),
        Duration::from_millis(100),
        || ok(b.client().vms()),
        Vec::is_empty,
    );
    assert_eq!(b.info().memory_reserved_bytes, 0);

    // An orchestrator's move, call by call: the destination host takes the VM, then the
    // source host is given the address and token.
    let tiny = format!(r#"{{"name": "tiny", "mem": "64M", "kernel": "{k}"}}"#);
    let (status, v) = call(a.sock(), "POST", "/vms", Some(&tiny));
    assert_eq!(status, 200, "{v}");
    a.wait_vm("tiny", 30, |v| v.state == HostVmState::Running);
    let (status, v) = call(
        b.sock(),
        "POST",
        "/vms/incoming",
        Some(&format!(r#"{{"vm": {tiny}}}"#)),
    );
    assert_eq!(status, 200, "{v}");
    let taken: IncomingVm = typed(&v, "POST /vms/incoming");
    // A wrong token: the move fails before the switch, the VM runs on at the source, and the
    // destination's VMM, which refused the connection, waits on.
    let wrong = format!(r#"{{"addr": "{}", "token": "not-the-token"}}"#, taken.addr);
    let (status, v) = call(a.sock(), "POST", "/vms/tiny/migrate", Some(&wrong));
    assert_eq!(status, 200, "{v}");
    let back = a.wait_vm("tiny", 30, |v| v.state != HostVmState::Migrating);
    assert_eq!(back.state, HostVmState::Running, "{back:?}");
    let failed = events_of(&a, "tiny");
    assert!(
        failed
            .iter()
            .any(|(k, m)| *k == HostEventKind::MigrationFailed
                && m.contains("failed before the switch")
                && m.contains("DELETE /vms/NAME on the destination host")),
        "{failed:?}"
    );
    assert_eq!(b.vm("tiny").state, HostVmState::Incoming);
    let split = format!(
        r#"{{"addr": "{}", "token": "{}"}}"#,
        taken.addr, taken.token
    );
    let (status, v) = call(a.sock(), "POST", "/vms/tiny/migrate", Some(&split));
    assert_eq!(status, 200, "{v}");
    let moved = a.wait_vm("tiny", 60, |v| v.state != HostVmState::Migrating);
    assert_eq!(moved.state, HostVmState::Migrated, "{moved:?}");
    let there = b.wait_vm("tiny", 30, |v| v.state == HostVmState::Running);
    assert!(there.pid.is_some());
    assert_eq!(a.info().memory_reserved_bytes, reserved);
    assert_eq!((a.info().migrated_out, b.info().migrated_in), (1, 1));
    // The refusal, the destination that was not there, and the wrong token.
    assert_eq!(a.info().migrations_failed, 3);
}

/// A move that breaks off during post-copy, made call by call with the stream through a proxy
/// that cuts it 40 MiB in (after the switch, before the end): the source host keeps the VM
/// `migrating`, refuses to stop its VMM (which holds every page not acknowledged) and says how
/// to finish; the destination's VM waits paused; `migrate-recover` on the source's VMM finishes
/// the move, and the guest finds every byte intact on the destination.
#[test]
fn a_move_broken_in_post_copy_is_finished_by_migrate_recover() {
    let spec = spec();
    let dir = tempfile::tempdir().unwrap();
    let disk = mkdisk_data(dir.path().join("mover.img"), "32M", &[]);
    let d = disk.display();
    let vm = format!(
        r#"{{"name": "mover", "mem": "256M", "min": "32M", "workload": "integrity", "cmdline": "anon_mb=160 file_mb=8 rounds=3 secs=10", "disks": ["{d},id=data"], "balloon": true, "mapper": true}}"#
    );
    // Each host gets a uid range of its own from the harness (`host_command`).
    let config = "[host]\nmemory = \"320M\"\nswap = \"1G\"\ntick = \"200ms\"\n";
    let a = host(dir.path(), "a", config);
    let b = host(dir.path(), "b", config);
    let call = |sock: &Path, method: &str, path: &str, body: Option<&str>| {
        openapi::call_checked(&spec, sock, method, path, body)
    };
    let (status, v) = call(a.sock(), "POST", "/vms", Some(&vm));
    assert_eq!(status, 200, "{v}");
    let running = a.wait_vm("mover", 30, |v| v.state == HostVmState::Running);
    common::poll(
        "mover filled its memory",
        Duration::from_secs(120),
        Duration::from_millis(200),
        || std::fs::read_to_string(&running.log).unwrap_or_default(),
        |log| log.contains("phase=fill"),
    );
    let (status, v) = call(
        b.sock(),
        "POST",
        "/vms/incoming",
        Some(&format!(r#"{{"vm": {vm}}}"#)),
    );
    assert_eq!(status, 200, "{v}");
    let taken: IncomingVm = typed(&v, "POST /vms/incoming");
    let proxy = common::cutting_proxy(taken.addr.clone(), 40 << 20);
    let through = format!(r#"{{"addr": "{proxy}", "token": "{}"}}"#, taken.token);
    let (status, v) = call(a.sock(), "POST", "/vms/mover/migrate", Some(&through));
    assert_eq!(status, 200, "{v}");
    let broken = a.wait_vm("mover", 120, |v| {
        v.why.as_deref().is_some_and(|w| w.contains("broke off"))
    });
    assert_eq!(broken.state, HostVmState::Migrating, "{broken:?}");
    let why = broken.why.unwrap();
    assert!(why.contains("migrate-recover"), "{why}");
    assert_eq!(a.info().migrations_failed, 1);
    // Its VMM holds pages the destination needs: the host does not stop it.
    let (status, _) = call(a.sock(), "PUT", "/vms/mover/stop", None);
    assert_eq!(status, 409);
    // The destination's VM has switched over and waits paused; it is not called off.
    let paused = b.wait_vm("mover", 30, |v| v.state == HostVmState::Paused);
    assert!(paused.why.unwrap_or_default().contains("migration"));
    let (status, _) = call(b.sock(), "DELETE", "/vms/mover", None);
    assert_eq!(status, 409);
    // migrate-recover on the source's VMM, straight to the destination's VMM.
    let out = common::memvisor(&[
        "ctl",
        "--api-sock",
        &broken.api_sock,
        "migrate-recover",
        "--to",
        &taken.addr,
        "--token",
        &taken.token,
    ]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let ended = a.wait_vm("mover", 30, |v| v.state == HostVmState::Exited);
    assert!(ended.why.unwrap().contains("migrate-recover"));
    assert_eq!(a.info().memory_reserved_bytes, 0);
    finishes_intact(&b, "mover");
    assert_eq!(b.info().migrated_in, 1);
}
