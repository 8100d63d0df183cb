//! `memvisor host`: its API against `docs/host-openapi.json`, admission refusals (at start and
//! through the API), a VMM killed while the other VM runs to the end under memory pressure with
//! every byte verified, a VM whose balloon driver does not answer paged while another VM's
//! balloon is used, pool memory passing from one VM to the next with no data crossing, a
//! malformed config, and SIGTERM stopping every VM.

use std::path::Path;
use std::time::Duration;

use memvisor_api::{
    ActiveMemory, ErrorBody, FreeStateName, HostEvent, HostEventKind, HostInfo, HostMigrateRequest,
    HostRequest, HostSample, HostUpdate, HostVm, HostVmState, IncomingRequest, IncomingVm,
    PolicyUpdate, VmExit, VmSample, VmSpec, VmStats,
};
use serde_json::Value;

mod common;
use common::openapi::{self, typed};
use common::{memvisor, mkdisk_data, ok, poll, spin_kernel, ResultLine, TestHost, MIB};

/// `memvisor sim --replay TRACE`, which must succeed: what it says.
fn replay(trace: &Path) -> String {
    let out = memvisor(&["sim", "--replay", trace.to_str().unwrap()]);
    let said = common::stdout(&out);
    assert!(out.status.success(), "{said}");
    said
}

/// Makes a 32 MiB data disk for the integrity workload at each of `names` in `dir`.
fn data_disks(dir: &Path, names: &[&str]) {
    for d in names {
        mkdisk_data(dir.join(d), "32M", &[]);
    }
}

/// The final RESULT line of `workload` in the log of `vm`, which must say ok with no
/// mismatches; returns the log.
fn intact(vm: &HostVm, workload: &str) -> String {
    let log = std::fs::read_to_string(&vm.log).unwrap();
    ResultLine::find(&log, workload, "done").assert_intact();
    log
}

fn spec() -> Value {
    openapi::load("host-openapi.json")
}

/// [`openapi::call_checked`], with the answer read into the host API's types.
fn call_checked(
    spec: &Value,
    sock: &Path,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> (u16, Value) {
    let (status, v) = openapi::call_checked(spec, sock, method, path, body);
    let at = format!("{method} {path} {status}");
    let request = HostRequest::parse(method, path, body.unwrap_or("").as_bytes());
    match (status, request) {
        (200, Ok(HostRequest::Info | HostRequest::Update(_))) => drop(typed::<HostInfo>(&v, &at)),
        (200, Ok(HostRequest::Events { .. })) => drop(typed::<Vec<HostEvent>>(&v, &at)),
        (200, Ok(HostRequest::History { .. })) => drop(typed::<Vec<HostSample>>(&v, &at)),
        (200, Ok(HostRequest::Vms)) => drop(typed::<Vec<HostVm>>(&v, &at)),
        (200, Ok(HostRequest::Snapshot(..))) => {
            drop(typed::<memvisor_api::SnapshotResult>(&v, &at));
        }
        (200, Ok(HostRequest::Incoming(_))) => drop(typed::<IncomingVm>(&v, &at)),
        (200, _) => drop(typed::<HostVm>(&v, &at)),
        _ => drop(typed::<ErrorBody>(&v, &at)),
    }
    (status, v)
}

#[test]
fn host_types_and_the_published_schema_have_the_same_fields() {
    let spec = spec();
    let host = HostInfo {
        budget_bytes: 1,
        free_bytes: 1,
        free_state: FreeStateName::Soft,
        idle_tax: 0.75,
        vm_overhead_bytes: 1,
        pool_max_bytes: 1,
        pool_bytes: 1,
        memory_reserved_bytes: 1,
        swap_bytes: 1,
        swap_reserved_bytes: 1,
        ticks: 1,
        tick_seconds: 1.0,
        ksm: Some(memvisor_api::HostKsm::default()),
        balancing: memvisor_api::Balancing::Hd2,
        released_pages: 1,
        reallocations: 1,
        gap_closed_pages: 1,
        own_bytes: 1,
        committed_bytes: 1,
        migrated_in: 1,
        migrated_out: 1,
        migrations_failed: 1,
    };
    let vm = HostVm {
        name: "a".into(),
        state: HostVmState::Exited,
        why: Some("x".into()),
        pid: Some(1),
        exit_status: Some(1),
        exit: Some(memvisor_api::VmExit::GuestSuccess),
        mem_bytes: 1,
        min_bytes: 1,
        max_bytes: 1,
        shares: 1,
        target_bytes: 1,
        resident_bytes: 1,
        active_bytes: 1,
        active_fraction: 0.5,
        active: ActiveMemory::default(),
        balloon_bytes: Some(1),
        balloon_target_bytes: Some(1),
        balloon_usable: Some(true),
        balloon_step_bytes: Some(1),
        balloon_reread_cap_bytes: Some(1),
        swapped_bytes: 1,
        on_disk_bytes: 1,
        limit_bytes: 1,
        paused_by_host: true,
        pool_bytes: 1,
        pooled_bytes: 1,
        oom_deflated_pages: 1,
        shared_saved_bytes: 1,
        overhead_bytes: 1,
        api_sock: "/s".into(),
        snapshot_dir: None,
        log: "/l".into(),
    };
    let spec_sample = VmSpec {
        name: "a".into(),
        mem: 64 * MIB,
        min: 1,
        shares: 1,
        vcpus: 1,
        workload: Some("boot".into()),
        kernel: Some("/k".into()),
        cmdline: "x=1".into(),
        disks: vec!["/d.img,id=data".into()],
        balloon: true,
        mapper: true,
        preventer: true,
        tesseract: false,
        tesseract_max: None,
        tesseract_sync: None,
        tesseract_defrag: None,
        victim_cache: 0,
        release_cache: None,
        release_ready: None,
        victims: Some("clock".into()),
        pager: Some("baseline".into()),
        sharing: None,
    };
    let update = PolicyUpdate {
        min: Some(1),
        max: Some(1),
        shares: Some(1),
    };
    openapi::same_fields_as_schemas(
        &spec,
        &[
            ("HostInfo", serde_json::to_value(&host).unwrap()),
            ("HostVm", serde_json::to_value(&vm).unwrap()),
            ("VmSpec", serde_json::to_value(&spec_sample).unwrap()),
            (
                "IncomingRequest",
                serde_json::to_value(IncomingRequest {
                    vm: spec_sample.clone(),
                    listen: Some("127.0.0.1:0".into()),
                })
                .unwrap(),
            ),
            (
                "IncomingVm",
                serde_json::to_value(IncomingVm {
                    vm: vm.clone(),
                    addr: "127.0.0.1:4444".into(),
                    token: "t".into(),
                })
                .unwrap(),
            ),
            (
                "HostMigrateRequest",
                serde_json::to_value(HostMigrateRequest {
                    to: Some("/b/host.sock".into()),
                    addr: Some("10.0.0.2:4444".into()),
                    token: Some("t".into()),
                    listen: Some("127.0.0.1:0".into()),
                    precopy_rounds: 1,
                })
                .unwrap(),
            ),
            ("PolicyUpdate", serde_json::to_value(&update).unwrap()),
            (
                "HostUpdate",
                serde_json::to_value(HostUpdate {
                    idle_tax: Some(0.5),
                    balancing: Some(memvisor_api::Balancing::Hd2),
                })
                .unwrap(),
            ),
            (
                "ErrorBody",
                serde_json::to_value(ErrorBody { error: "x".into() }).unwrap(),
            ),
            (
                "SnapshotRequest",
                serde_json::to_value(memvisor_api::SnapshotRequest {
                    dir: "s1".into(),
                    stop: true,
                })
                .unwrap(),
            ),
            (
                "SnapshotResult",
                serde_json::to_value(memvisor_api::SnapshotResult::default()).unwrap(),
            ),
            (
                "HostEvent",
                serde_json::to_value(HostEvent {
                    seconds: 1.0,
                    kind: HostEventKind::Paused,
                    vm: Some("a".into()),
                    message: "x".into(),
                })
                .unwrap(),
            ),
            (
                "HostSample",
                serde_json::to_value(HostSample {
                    seconds: 1.0,
                    free_bytes: 1,
                    free_state: FreeStateName::Low,
                    vms: vec![VmSample {
                        name: "a".into(),
                        state: HostVmState::Running,
                        target_bytes: 1,
                        resident_bytes: 1,
                        active_bytes: 1,
                        balloon_bytes: 1,
                        swapped_bytes: 1,
                        on_disk_bytes: 1,
                        limit_bytes: 1,
                        pooled_bytes: 1,
                        shared_saved_bytes: 1,
                    }],
                })
                .unwrap(),
            ),
        ],
    );
}

/// Every documented operation, valid and invalid: admission refuses what does not fit (at
/// start and through the API) and says by how much, bad requests change nothing, and SIGTERM
/// stops every VM and leaves no socket behind.
#[test]
fn host_api_admission_and_sigterm() {
    let spec = spec();
    let dir = tempfile::tempdir().unwrap();
    let kernel = spin_kernel(dir.path());
    let k = kernel.display();
    // 256 MiB budget, 24 MiB overhead per VM: a (min 64M) reserves 88M, b would need 224M.
    let host = TestHost::start(
        dir.path(),
        &format!(
            r#"
[host]
memory = "256M"
swap = "1G"
tick = "200ms"
vm_overhead = "24M"

[[vm]]
name = "a"
mem = "128M"
min = "64M"
kernel = "{k}"
balloon = true

[[vm]]
name = "b"
mem = "256M"
min = "200M"
kernel = "{k}"
"#
        ),
    );
    let sock = host.sock();
    let call = |method: &str, path: &str, body: Option<&str>| {
        call_checked(&spec, sock, method, path, body)
    };
    let vms_path = HostRequest::Vms.path();
    let vm_path = |name: &str| HostRequest::Vm(name.into()).path();
    let stop_path = |name: &str| HostRequest::Stop(name.into()).path();
    assert_eq!(spec["paths"].as_object().unwrap().len(), 10);
    let a = host.wait_vm("a", 10, |v| v.state == HostVmState::Running);
    assert_eq!(
        (a.min_bytes, a.max_bytes, a.shares),
        (64 * MIB, 128 * MIB, 1000)
    );
    assert!(a.pid.is_some());
    let b = host.vm("b");
    assert_eq!(b.state, HostVmState::Refused);
    let why = b.why.unwrap();
    assert!(
        why.contains("unreserved memory") && why.contains(&format!("{} bytes short", 56 * MIB)),
        "{why}"
    );
    let (_, h) = call("GET", "/host", None);
    let h: HostInfo = typed(&h, "GET /host");
    assert_eq!(h.budget_bytes, 256 * MIB);
    assert_eq!(h.memory_reserved_bytes, 88 * MIB);
    assert_eq!(h.swap_reserved_bytes, 64 * MIB);
    let (_, vms) = call("GET", &vms_path, None);
    assert_eq!(vms.as_array().unwrap().len(), 2);
    call("GET", &vm_path("a"), None);
    // A snapshot by name through the host lands in the VM's snapshot directory; anything but
    // one name, a VM not running and an unknown one are refused.
    let snapshot_path = |name: &str| {
        let req = memvisor_api::SnapshotRequest {
            dir: String::new(),
            stop: false,
        };
        HostRequest::Snapshot(name.into(), req).path()
    };
    let (status, r) = call("PUT", &snapshot_path("a"), Some(r#"{"dir": "s1"}"#));
    assert_eq!(status, 200, "{r}");
    let snaps = host
        .vm("a")
        .snapshot_dir
        .expect("a jailed VM has a snapshot directory");
    assert_eq!(r["dir"], format!("{snaps}/s1"));
    for (vm, body, want) in [
        ("a", r#"{"dir": "../s2"}"#, 400),
        ("a", r#"{"dir": "s1"}"#, 400),
        ("b", r#"{"dir": "s2"}"#, 400),
        ("z", r#"{"dir": "s2"}"#, 404),
    ] {
        assert_eq!(
            call("PUT", &snapshot_path(vm), Some(body)).0,
            want,
            "{vm} {body}"
        );
    }
    // The host's numbers and each VM's, for Prometheus: a refused VM has its state and policy
    // but no VMM stats; a running one has both.
    let (status, text) = openapi::get_text_checked(&spec, sock, "/metrics");
    assert_eq!(status, 200);
    for want in [
        "\nmemvisor_host_budget_bytes 268435456\n",
        "\nmemvisor_host_memory_reserved_bytes 92274688\n",
        "\nmemvisor_host_free_state{state=\"high\"} ",
        "\nmemvisor_host_vm_state{vm=\"b\",state=\"refused\"} 1\n",
        "\nmemvisor_host_vm_min_bytes{vm=\"b\"} 209715200\n",
        "\nmemvisor_host_vm_state{vm=\"a\",state=\"running\"} 1\n",
        // a started at its whole memory on a host with room: plain memory until the host
        // first shrinks it.
        "\nmemvisor_vm_pager_attached{vm=\"a\"} 0\n",
        "\n# EOF\n",
    ] {
        assert!(text.contains(want), "{want:?} in {text}");
    }
    assert!(!text.contains("memvisor_vm_resident_bytes{vm=\"b\"}"));

    // Adding through the API: admission applies, and a refusal changes nothing.
    let add = |name: &str, mem: &str, min: &str| {
        format!(r#"{{"name": "{name}", "mem": "{mem}", "min": "{min}", "kernel": "{k}"}}"#)
    };
    let (status, v) = call("POST", &vms_path, Some(&add("c", "256M", "160M")));
    assert_eq!(status, 400);
    assert!(v["error"].as_str().unwrap().contains("bytes short"), "{v}");
    let (status, v) = call("POST", &vms_path, Some(&add("c", "64M", "32M")));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["state"], "starting");
    let (status, _) = call("POST", &vms_path, Some(&add("c", "64M", "0")));
    assert_eq!(status, 400, "a name in use");
    for bad in [
        "{",
        r#"{"name": "d"}"#,
        r#"{"name": "d", "mem": "64M", "colour": 1}"#,
        r#"{"name": "d", "mem": "64Q"}"#,
        r#"{"name": "d d", "mem": "64M"}"#,
        r#"{"name": "d", "mem": "64M", "min": "128M"}"#,
        r#"{"name": "d", "mem": "64M", "disks": ["x,bad"]}"#,
    ] {
        let (status, v) = call("POST", &vms_path, Some(bad));
        assert_eq!(status, 400, "{bad}: {v}");
    }
    let h: HostInfo = host.info();
    assert_eq!(
        h.memory_reserved_bytes,
        (88 + 56) * MIB,
        "refusals reserved nothing"
    );

    // Policy changes: min <= max <= mem, admission again; a refusal changes nothing.
    for bad in [
        r#"{"min": "100M", "max": "96M"}"#,
        r#"{"max": "1G"}"#,
        r#"{"min": "200M"}"#,
        r#"{"shares": 0}"#,
        r#"{"weight": 3}"#,
    ] {
        let (status, v) = call("PATCH", &vm_path("a"), Some(bad));
        assert_eq!(status, 400, "{bad}: {v}");
    }
    let a = host.vm("a");
    assert_eq!(
        (a.min_bytes, a.max_bytes, a.shares),
        (64 * MIB, 128 * MIB, 1000)
    );
    let (status, v) = call(
        "PATCH",
        &vm_path("a"),
        Some(r#"{"min": "32M", "max": "96M", "shares": 2000}"#),
    );
    assert_eq!(status, 200, "{v}");
    let a = host.vm("a");
    assert_eq!(
        (a.min_bytes, a.max_bytes, a.shares),
        (32 * MIB, 96 * MIB, 2000)
    );
    let h: HostInfo = host.info();
    assert_eq!(h.memory_reserved_bytes, (56 + 56) * MIB);
    // The target follows the new max within a few ticks.
    host.wait_vm("a", 5, |v| v.target_bytes == 96 * MIB);

    // The idle tax: in range it is taken (and planned with), out of range nothing changes.
    for bad in [
        r#"{"idle_tax": 1.0}"#,
        r#"{"idle_tax": -0.1}"#,
        r#"{"idle_tax": "high"}"#,
        r#"{"tax": 0.5}"#,
    ] {
        let (status, v) = call("PATCH", "/host", Some(bad));
        assert_eq!(status, 400, "{bad}: {v}");
    }
    assert_eq!(host.info().idle_tax, 0.75);
    let (status, v) = call("PATCH", "/host", Some(r#"{"idle_tax": 0}"#));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["idle_tax"], 0.0);
    let (status, v) = call("PATCH", "/host", Some("{}"));
    assert_eq!((status, &v["idle_tax"]), (200, &Value::from(0.0)));

    // Unknown VMs and paths, wrong methods.
    assert_eq!(call("GET", &vm_path("zz"), None).0, 404);
    assert_eq!(call("PUT", &stop_path("zz"), None).0, 404);
    assert_eq!(openapi::status_of(sock, "GET", "/nope"), 404);
    assert_eq!(openapi::status_of(sock, "DELETE", &vms_path), 405);
    assert_eq!(openapi::status_of(sock, "POST", "/metrics"), 405);

    // Stopping one VM: it exits, its reservation returns, it stays listed.
    host.wait_vm("c", 10, |v| v.state == HostVmState::Running);
    let (status, _) = call("PUT", &stop_path("c"), None);
    assert_eq!(status, 200);
    let c = host.wait_vm("c", 10, |v| v.state == HostVmState::Exited);
    assert!(c.why.unwrap().starts_with("stopped"));
    assert_eq!(c.exit_status, Some(128 + libc::SIGTERM));
    assert_eq!(call("PUT", &stop_path("c"), None).0, 400);
    let h: HostInfo = host.info();
    assert_eq!(h.memory_reserved_bytes, 56 * MIB);

    // Removing: not while a VM runs; an exited one is forgotten, and its name is free.
    let (status, v) = call("DELETE", &vm_path("a"), None);
    assert_eq!(status, 409, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("stop it first"),
        "{v}"
    );
    assert_eq!(host.vm("a").state, HostVmState::Running);
    let (status, v) = call("DELETE", &vm_path("c"), None);
    assert_eq!((status, &v["state"]), (200, &Value::from("exited")), "{v}");
    assert_eq!(call("GET", &vm_path("c"), None).0, 404);
    assert_eq!(call("DELETE", &vm_path("c"), None).0, 404);
    let names: Vec<String> = ok(host.client().vms())
        .into_iter()
        .map(|v| v.name)
        .collect();
    assert_eq!(names, ["a", "b"]);

    // Events and history: what happened, in order, and the ticks with each running VM.
    let (_, events) = call("GET", "/events", None);
    let kinds: Vec<(&str, &str)> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["kind"].as_str().unwrap(), e["vm"].as_str().unwrap_or("")))
        .collect();
    for want in [
        ("admitted", "a"),
        ("refused", "b"),
        ("refused", "c"),
        ("admitted", "c"),
        ("stopping", "c"),
        ("exited", "c"),
    ] {
        assert!(kinds.contains(&want), "{want:?} in {kinds:?}");
    }
    let (_, history) = call("GET", "/history", None);
    let history = history.as_array().unwrap();
    let first = history[0]["seconds"].as_f64().unwrap();
    // The host ticks on between the calls: a later call may hold ticks the first did not.
    let after = |since: f64, ticks: &serde_json::Value| {
        let mut ticks = ticks.as_array().unwrap().iter();
        ticks.all(|t| t["seconds"].as_f64().unwrap() > since)
    };
    let (_, later) = call("GET", &format!("/history?since={first}"), None);
    assert!(later.as_array().unwrap().len() >= history.len() - 1);
    assert!(after(first, &later), "{later}");
    assert!(history.iter().any(|t| t["vms"]
        .as_array()
        .unwrap()
        .iter()
        .any(|v| v["name"] == "c")));
    let last = history.last().unwrap()["seconds"].as_f64().unwrap();
    let (_, newer) = call("GET", &format!("/history?since={last}"), None);
    assert!(after(last, &newer), "{newer}");
    for bad in ["/events?since=soon", "/history?until=3"] {
        assert_eq!(call("GET", bad, None).0, 400, "{bad}");
    }

    // SIGTERM: every VM stops, the host exits 0 and removes its socket.
    let a_pid = host.vm("a").pid.unwrap();
    let sock = sock.to_owned();
    host.signal(libc::SIGTERM);
    let status = host.finish().status;
    assert_eq!(status.code(), Some(0));
    assert!(!sock.exists());
    assert!(
        !Path::new(&format!("/proc/{a_pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{a_pid}/stat"))
                .is_ok_and(|s| s.contains(") Z ")),
        "the VMM of a is gone"
    );
}

/// `keep`: ticks, events and VMs that ended are forgotten once older than it, so a host that
/// runs for ever holds a bounded amount; a VM that runs is never forgotten.
#[test]
fn the_host_forgets_what_is_older_than_keep() {
    let dir = tempfile::tempdir().unwrap();
    let kernel = spin_kernel(dir.path());
    let k = kernel.display();
    let host = TestHost::start(
        dir.path(),
        &format!(
            "[host]\nmemory = \"256M\"\nswap = \"1G\"\ntick = \"100ms\"\nkeep = \"2s\"\n\n\
             [[vm]]\nname = \"stays\"\nmem = \"64M\"\nkernel = \"{k}\"\n\n\
             [[vm]]\nname = \"goes\"\nmem = \"64M\"\nkernel = \"{k}\"\n"
        ),
    );
    host.wait_vm("goes", 10, |v| v.state == HostVmState::Running);
    ok(host.client().stop("goes"));
    let exited = host.wait_vm("goes", 10, |v| v.state == HostVmState::Exited);
    assert!(exited.why.unwrap().starts_with("stopped"));
    poll(
        "the exited VM is forgotten",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || ok(host.client().vms()),
        |vms| vms.len() == 1,
    );
    assert_eq!(host.vm("stays").state, HostVmState::Running);
    // Everything older than 2 s is gone: the ticks since then are all that is left.
    std::thread::sleep(Duration::from_secs(1));
    let h: HostInfo = host.info();
    let history: Vec<HostSample> = ok(host.client().history(0.0));
    let now = history.last().unwrap().seconds;
    assert!(now > 3.0, "{now}");
    assert!(
        history[0].seconds >= now - 2.0 - 0.2,
        "the oldest tick kept is {} s old",
        now - history[0].seconds
    );
    assert!(
        history.len() <= 25,
        "{} ticks kept for 2 s of 100 ms ticks",
        history.len()
    );
    assert!(h.ticks > history.len() as u64);
    let events: Vec<HostEvent> = ok(host.client().events(0.0));
    assert!(
        events.iter().all(|e| e.seconds >= now - 2.0 - 0.2),
        "{events:?}"
    );
    assert!(
        !events.iter().any(|e| e.kind == HostEventKind::Admitted),
        "the admissions at start are forgotten: {events:?}"
    );
}

/// Two VMs verify every byte of their memory while the host's budget makes both page; one VMM
/// is killed with SIGKILL half-way: the host reports it, returns its reservation, and the other
/// runs to the end with no mismatch.
#[test]
fn a_killed_vmm_is_reported_and_the_other_vm_finishes_intact() {
    let dir = tempfile::tempdir().unwrap();
    data_disks(dir.path(), &["a.img", "b.img"]);
    let vm_toml = |name: &str| {
        format!(
            r#"
[[vm]]
name = "{name}"
mem = "256M"
workload = "integrity"
cmdline = "anon_mb=96 file_mb=8 rounds=3 secs=8"
disks = ["{name}.img,id=data"]
balloon = true
"#
        )
    };
    // 240 MiB for two VMs touching over 100 MiB each, 24 MiB overhead each: both are held
    // below what they touch, so their pagers page.
    let host = TestHost::start(
        dir.path(),
        &format!(
            "[host]\nmemory = \"240M\"\nswap = \"2G\"\ntick = \"200ms\"\nsample_period = \"1s\"\nvm_overhead = \"24M\"\ntrace = \"trace.jsonl\"\n{}{}",
            vm_toml("a"),
            vm_toml("b")
        ),
    );
    let a = host.wait_vm("a", 10, |v| v.state == HostVmState::Running);
    host.wait_vm("b", 10, |v| v.state == HostVmState::Running);
    // Both under pressure: the host has set limits below what they touch.
    host.wait_vm("b", 20, |v| {
        v.limit_bytes < 128 * MIB && v.swapped_bytes > 0
    });
    let before: HostInfo = host.info();
    common::signal(a.pid.unwrap(), libc::SIGKILL);
    let a = host.wait_vm("a", 10, |v| v.state == HostVmState::Exited);
    assert_eq!(a.exit_status, Some(128 + libc::SIGKILL));
    assert!(a.why.as_deref().unwrap().contains("signal 9"), "{a:?}");
    assert_eq!(
        (a.exit, a.why.as_deref()),
        (Some(VmExit::Signal), Some("killed by signal 9"))
    );
    let after: HostInfo = host.info();
    assert_eq!(
        before.memory_reserved_bytes - after.memory_reserved_bytes,
        24 * MIB,
        "a's reservation (min 0 + overhead) is back"
    );
    assert_eq!(
        before.swap_reserved_bytes - after.swap_reserved_bytes,
        256 * MIB
    );
    let b = host.wait_vm("b", 120, |v| v.state == HostVmState::Exited);
    assert_eq!(b.exit_status, Some(1), "{b:?}");
    // What the exit means, in the VM's entry and in the host's events.
    assert_eq!(
        (b.exit, b.why.as_deref()),
        (
            Some(VmExit::GuestSuccess),
            Some("the guest reported success")
        )
    );
    let events: Vec<HostEvent> = ok(host.client().events(0.0));
    assert!(
        events.iter().any(|e| e.kind == HostEventKind::Exited
            && e.vm.as_deref() == Some("b")
            && e.message == "the guest reported success"),
        "{events:?}"
    );
    let log = intact(&b, "integrity");
    let rounds = ResultLine::all(&log)
        .iter()
        .filter(|r| r.workload() == "integrity" && r.str("phase").starts_with("round"))
        .count();
    assert!(rounds >= 3, "{log}");

    // The simulator's replay of the host's own trace: the same policy code reaches the same
    // decisions from the same observations, tick for tick, pressure, a death and all.
    let trace = dir.path().join("trace.jsonl");
    let said = replay(&trace);
    let ticks: u64 = said
        .split(" ticks replayed, 0 decisions differ")
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{said}"));
    assert!(ticks > 20, "{said}");
    let text = std::fs::read_to_string(&trace).unwrap();
    let held = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|t| {
            t["vms"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v["limit"].as_u64() < v["max"].as_u64())
        })
        .count();
    assert!(
        held > 10,
        "the trace holds ticks with VMs held below their memory"
    );
}

/// A guest that reads a file in a loop, left less page cache than the file by its balloon,
/// reads the whole file from its disk on every pass. The host sees it through the Swap
/// Mapper's re-reads and lowers that balloon's cap, paging the rest instead: the event, the
/// cap in `GET /vms`, a balloon held at or below it, and every word `looper` read checked.
#[test]
fn a_guest_that_re_reads_what_its_balloon_took_is_paged_instead() {
    let dir = tempfile::tempdir().unwrap();
    mkdisk_data(dir.path().join("looper.img"), "160M", &[]);
    // 150 MiB less the VMM's overhead and the 6 % reserve leaves its target well under the
    // 120 MiB file and the guest kit's own pages: ballooned to it, the guest's LRU gives up
    // each block of the file just before it reads it again.
    let host = TestHost::start(
        dir.path(),
        r#"[host]
memory = "150M"
swap = "2G"
tick = "250ms"
sample_period = "1s"

[[vm]]
name = "looper"
mem = "256M"
workload = "seqread"
cmdline = "file=seq file_mb=120 passes=40"
disks = ["looper.img,id=data"]
mapper = true
balloon = true
"#,
    );
    let capped = host.wait_vm("looper", 180, |v| {
        v.balloon_reread_cap_bytes
            .is_some_and(|c| v.balloon_bytes.is_some_and(|b| b <= c))
    });
    eprintln!("{capped:?}");
    let cap = capped.balloon_reread_cap_bytes.unwrap();
    assert!(cap < 166 * MIB, "below the host's cap of 65 %: {capped:?}");
    let events: Vec<HostEvent> = ok(host.client().events(0.0));
    let e = events
        .iter()
        .find(|e| e.kind == HostEventKind::BalloonRereadCap)
        .unwrap_or_else(|| panic!("{events:?}"));
    assert_eq!(e.vm.as_deref(), Some("looper"), "{e:?}");
    assert!(e.message.contains("reads again"), "{e:?}");
    let looper = host.wait_vm("looper", 600, |v| v.state == HostVmState::Exited);
    intact(&looper, "seqread");
    assert_eq!(looper.exit_status, Some(1), "{looper:?}");
}

/// ESX §3.2 and §6.3: the soft state balloons "and resorts to paging only in cases where
/// ballooning is not possible", and a driver may be "unavailable while a guest OS is booting".
/// Both VMs have a balloon device; `mute`'s guest leaves its driver unloaded (`balloon=0`), so
/// its balloon never answers: the host says so, pages it to its target instead, and never
/// counts its balloon as usable, while `kind`'s driver answers and its balloon is used. Both
/// workloads check every byte they wrote.
#[test]
fn a_balloon_whose_driver_does_not_answer_is_paged_while_another_balloons() {
    let dir = tempfile::tempdir().unwrap();
    data_disks(dir.path(), &["kind.img", "mute.img"]);
    let vm_toml = |name: &str, cmdline: &str| {
        format!(
            r#"
[[vm]]
name = "{name}"
mem = "256M"
workload = "integrity"
cmdline = "{cmdline}"
disks = ["{name}.img,id=data"]
balloon = true
"#
        )
    };
    // 240 MiB less two 24 MiB overheads and the 6 % reserve leaves 178 MiB for the VMs'
    // targets: `mute` touching 136 MiB beside `kind` touching 56 MiB and the kit's own pages
    // is more than that, so the host reclaims as long as they run.
    let host = TestHost::start(
        dir.path(),
        &format!(
            "[host]\nmemory = \"240M\"\nswap = \"2G\"\ntick = \"200ms\"\nsample_period = \"1s\"\nvm_overhead = \"24M\"\ntrace = \"trace.jsonl\"\n{}{}",
            vm_toml("kind", "anon_mb=48 file_mb=8 rounds=3 secs=20 seed=1"),
            vm_toml("mute", "anon_mb=128 file_mb=8 rounds=3 secs=20 seed=2 balloon=0"),
        ),
    );
    let mute = host.wait_vm("mute", 120, |v| {
        v.balloon_usable == Some(false) && v.swapped_bytes > 0
    });
    assert_eq!(mute.balloon_bytes, Some(0), "{mute:?}");
    assert!(mute.balloon_step_bytes.is_some(), "{mute:?}");
    let kind = host.wait_vm("kind", 120, |v| {
        v.balloon_usable == Some(true) && v.balloon_bytes > Some(0)
    });
    eprintln!("mute: {mute:?}\nkind: {kind:?}");
    let events: Vec<HostEvent> = poll(
        "mute's balloon announced unusable",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || ok(host.client().events(0.0)),
        |e| {
            e.iter().any(|e| {
                e.kind == HostEventKind::BalloonUnusable && e.vm.as_deref() == Some("mute")
            })
        },
    );
    let said = |kind: HostEventKind, vm: &str| {
        events
            .iter()
            .any(|e| e.kind == kind && e.vm.as_deref() == Some(vm))
    };
    assert!(said(HostEventKind::BalloonUsable, "kind"), "{events:?}");
    assert!(!said(HostEventKind::BalloonUsable, "mute"), "{events:?}");
    let e = events
        .iter()
        .find(|e| e.kind == HostEventKind::BalloonUnusable)
        .unwrap();
    assert!(e.message.contains("never answered"), "{e:?}");
    for name in ["kind", "mute"] {
        let v = host.wait_vm(name, 240, |v| v.state == HostVmState::Exited);
        intact(&v, "integrity");
    }
    let mute = host.vm("mute");
    assert_eq!(mute.balloon_bytes, Some(0), "{mute:?}");

    // The trace: ticks under pressure with `mute`'s balloon unusable and `mute` paged (its
    // limit below what it holds), `kind`'s usable, each with its step; and the policy replays
    // it exactly. Soft pages `mute` only by what free memory lacks to be back at 6 %, so the
    // host may spend most of the run in high with `mute` above its target (ESX reclaims
    // nothing there), and under load there are few such ticks.
    let trace = dir.path().join("trace.jsonl");
    let text = std::fs::read_to_string(&trace).unwrap();
    let ticks: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let both = ticks
        .iter()
        .filter(|t| t["plan"]["state"] != "high")
        .filter(|t| {
            let vms = t["vms"].as_array().unwrap();
            let at = |n: &str| vms.iter().position(|v| v["name"] == n);
            let (Some(k), Some(m)) = (at("kind"), at("mute")) else {
                return false;
            };
            let a = &t["plan"]["actions"][m];
            vms[k]["balloon_usable"] == true
                && vms[m]["balloon_usable"] == false
                && vms[m]["balloon_step"].is_u64()
                && a["limit"].as_u64() < vms[m]["resident"].as_u64()
        })
        .count();
    assert!(both > 0, "{both} ticks");
    let said = replay(&trace);
    assert!(
        said.contains(" ticks replayed, 0 decisions differ"),
        "{said}"
    );
}

/// The pool's memory goes from one VM to the next: `a` pages into its pool and exits, then `b`
/// is added and pages into the pool memory `a` gave back. `b` must read only its own data (the
/// integrity workload checks every byte it wrote), never `a`'s.
#[test]
fn a_vm_handed_pool_memory_another_vm_filled_reads_only_its_own_data() {
    let dir = tempfile::tempdir().unwrap();
    data_disks(dir.path(), &["a.img", "b.img"]);
    // One VM at a time in a 320 MiB budget with up to 96 MiB of pool: its target (320 − 24
    // overhead − 6 % reserve − 96) is under the 232 MiB it touches, and the pool is what it
    // does not hold, so its victims go to the pool.
    let cmdline = "anon_mb=224 file_mb=8 rounds=3 secs=6 seed=";
    let host = TestHost::start(
        dir.path(),
        &format!(
            "[host]\nmemory = \"320M\"\npool = \"96M\"\nswap = \"2G\"\ntick = \"200ms\"\n\n\
             [[vm]]\nname = \"a\"\nmem = \"320M\"\nworkload = \"integrity\"\n\
             cmdline = \"{cmdline}1\"\ndisks = [\"a.img,id=data\"]\n"
        ),
    );
    let intact = |name: &str| {
        let v = host.wait_vm(name, 180, |v| v.state == HostVmState::Exited);
        intact(&v, "integrity");
        // Its VMM's last counters: its pages went through its pool.
        let path = dir.path().join(format!("host.state/{name}/stats.json"));
        let stats: VmStats =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let pool = stats.pager.and_then(|p| p.pool).expect("a pool");
        assert!(
            pool.pooled_pages > 4096 && pool.hit_pages > 0,
            "{name}: {pool:?}"
        );
    };
    intact("a");
    let h: HostInfo = host.info();
    assert_eq!(h.pool_max_bytes, 96 * MIB);
    let disk = dir.path().join("b.img");
    let b = format!(
        r#"{{"name": "b", "mem": "320M", "workload": "integrity", "cmdline": "{cmdline}2", "disks": ["{},id=data"]}}"#,
        disk.display()
    );
    let b: VmSpec = serde_json::from_str(&b).unwrap();
    ok(host.client().add(&b));
    intact("b");
}

#[test]
fn a_malformed_config_names_the_file_the_line_and_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[host]\nmemory = \"1G\"\n\n[[vm]]\nname = \"a\"\nmem = \"256M\"\nshares = \"many\"\n",
    )
    .unwrap();
    let out = memvisor(&["host", "--config", path.to_str().unwrap()]);
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&path.display().to_string())
            && err.contains("line 7")
            && err.contains("shares"),
        "{err}"
    );
    let missing = dir.path().join("missing.toml");
    let out = memvisor(&["host", "--config", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(common::stderr(&out).contains("missing.toml"));
}

#[test]
fn a_config_is_checked_whole_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let kernel = spin_kernel(dir.path());
    std::fs::write(dir.path().join("here.img"), [0u8; 4096]).unwrap();
    let path = dir.path().join("host.toml");
    std::fs::write(
        &path,
        format!(
            r#"[host]
memory = "512M"
swap = "2G"

[[vm]]
name = "a"
mem = "64M"
kernel = "{}"
disks = ["here.img", "gone.img,id=data"]

[[vm]]
name = "a"
mem = "64M"

[[vm]]
name = "k"
mem = "64M"
kernel = "nowhere/guest.elf"

[[vm]]
name = "huge"
mem = "1G"
min = "600M"
"#,
            kernel.display()
        ),
    )
    .unwrap();
    let out = memvisor(&["host", "--config", path.to_str().unwrap()]);
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let file = path.display().to_string();
    let lines: Vec<&str> = err.lines().collect();
    for (i, (line, key, words)) in [
        (12, "name", "a second VM named 'a'"),
        (9, "disks", "gone.img does not exist"),
        (18, "kernel", "nowhere/guest.elf does not exist"),
        (23, "min", "vm 'huge' can never be admitted on this host"),
    ]
    .into_iter()
    .enumerate()
    {
        let want = format!("memvisor: {file}: line {line}: [[vm]] {key}: ");
        assert!(
            lines[i].starts_with(&want) && lines[i].contains(words),
            "line {i}: want {want}...{words}\n{err}"
        );
    }
    assert_eq!(lines[4..], ["memvisor: nothing was started"], "{err}");
    assert!(
        !dir.path().join("host.state").exists(),
        "no state directory, no socket, no VMM"
    );
}

/// Waits until `name`'s VMM has counted at least `pages` pages that mirror a disk block: those
/// mirroring now and those already released (on a loaded machine the other VM may grow, and
/// the host balance, before the guest has read all its file).
fn wait_mirrored(vm: &HostVm, pages: u64) {
    let vmm = memvisor_api::VmClient::new(&vm.api_sock);
    poll(
        format!("{}: page cache", vm.name),
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            let p = ok(vmm.stats()).pager;
            p.map_or(0, |p| p.pages.mirrored_pages + p.counters.released_pages)
        },
        |&n| n >= pages,
    );
}

/// HyperDealer2 balancing (`balancing = "hd2"`): `cache` reads a file into its page cache (the
/// Swap Mapper sees every page of it mirror a disk block) and goes idle, above the target its
/// few shares give it (the high state takes nothing from it); then `needy`, with eight times
/// the shares, is added and grows from 16 MiB to 200 MiB. The host takes `cache`'s clean pages at once (`PUT
/// /memory/release`) and hands them to `needy` in the same tick: a `reallocated` event and the
/// host's counters; `cache`, out of balancing for `gap_idle`, then has its capacity gap closed
/// (`gap_closed`); and the trace holds every tick's balancing, which the simulator's replay
/// reaches again decision for decision.
#[test]
fn hd2_balancing_moves_clean_pages_to_a_vm_that_needs_memory() {
    let dir = tempfile::tempdir().unwrap();
    mkdisk_data(dir.path().join("cache.img"), "128M", &[]);
    // 320 MiB less two 24 MiB overheads and the 6 % reserve leaves 253 MiB for the VMs:
    // `needy` touching 200 MiB beside `cache` holding its 64 MiB file does not fit.
    let host = TestHost::start(
        dir.path(),
        r#"[host]
memory = "320M"
swap = "2G"
tick = "250ms"
sample_period = "1s"
balancing = "hd2"
gap_idle = "2s"
trace = "trace.jsonl"

[[vm]]
name = "cache"
mem = "256M"
workload = "seqread"
cmdline = "file=seq file_mb=64 passes=1 hold_secs=90"
disks = ["cache.img,id=data"]
mapper = true
balloon = true
"#,
    );
    let cache = host.wait_vm("cache", 30, |v| v.state == HostVmState::Running);
    wait_mirrored(&cache, 12_000);
    // `needy` starts once `cache` holds its file: started with it, on a loaded host it grew
    // before `cache` had read the file, took free memory and left little to release.
    let needy = r#"{"name": "needy", "mem": "256M", "shares": 8000, "workload": "toucher",
        "cmdline": "schedule=16:4,200:60", "balloon": true}"#;
    ok(host.client().add(&serde_json::from_str(needy).unwrap()));
    // Reallocations (a few pages may already move while `needy` boots); then `cache`'s capacity
    // gap is closed: by the gap reducer once it has been out of balancing for `gap_idle`
    // (`gap_closed`), or by the plan's own balloon if the host's state fell meanwhile.
    let trace = dir.path().join("trace.jsonl");
    let cache_at = |t: &Value| {
        t["vms"]
            .as_array()
            .and_then(|v| v.iter().position(|v| v["name"] == "cache"))
    };
    let (_, events, ticks, _) = poll(
        "a reallocation of over 2048 pages and the gap closed after it",
        Duration::from_secs(90),
        Duration::from_millis(200),
        || {
            let events: Vec<HostEvent> = ok(host.client().events(0.0));
            let info: HostInfo = host.info();
            let last = events
                .iter()
                .filter(|e| e.kind == HostEventKind::Reallocated)
                .map(|e| e.seconds)
                .fold(f64::NAN, f64::max);
            let ticks: Vec<Value> = std::fs::read_to_string(&trace)
                .unwrap()
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .collect();
            // The gap `cache` carries into the latest tick, `gap_idle` and more after the last
            // reallocation.
            let settled = ticks.last().is_some_and(|t| {
                t["t"].as_f64() > Some(last + 2.5)
                    && cache_at(t)
                        .is_some_and(|i| t["vms"][i]["balance"]["gap"].as_u64() == Some(0))
            });
            (info, events, ticks, settled)
        },
        |(info, _, _, settled)| info.released_pages > 2048 && *settled,
    );
    let info: HostInfo = host.info();
    assert_eq!(info.balancing, memvisor_api::Balancing::Hd2);
    let e = events
        .iter()
        .find(|e| e.kind == HostEventKind::Reallocated)
        .unwrap();
    eprintln!("{e:?}\n{info:?}");
    assert_eq!(e.vm.as_deref(), Some("needy"), "{e:?}");
    assert!(e.message.contains("from cache ("), "{e:?}");
    assert!(
        info.released_pages > 256 && info.reallocations > 0,
        "{info:?}"
    );
    // Closed by the reducer, or taken back by the plan's balloon in a tick after a release.
    let reducer = events
        .iter()
        .any(|e| e.kind == HostEventKind::GapClosed && e.vm.as_deref() == Some("cache"));
    let balloon = ticks.iter().any(|t| {
        cache_at(t).is_some_and(|i| {
            t["plan"]["balance"]["vms"][i]["taken"].as_u64() > Some(0)
                || (t["vms"][i]["balance"]["gap"].as_u64() > Some(0)
                    && t["plan"]["balance"]["vms"][i]["gap"].as_u64() == Some(0)
                    && t["plan"]["balance"]["vms"][i]["closed"] == false)
        })
    });
    eprintln!("gap closed by the reducer: {reducer}, by the plan's balloon: {balloon}");
    assert!(reducer || balloon, "{events:?}");
    assert!(
        !events
            .iter()
            .any(|e| e.kind == HostEventKind::BalloonFallback),
        "{events:?}"
    );
    // The trace holds every tick's balancing, and the simulator's policy code replays it to the
    // same decisions.
    let released = ticks
        .iter()
        .filter(|t| {
            t["plan"]["balance"]["released"]
                .as_array()
                .is_some_and(|r| r.iter().any(|x| x.as_u64() > Some(0)))
        })
        .count();
    assert!(released > 0, "no tick of the trace released a page");
    let said = replay(&trace);
    assert!(
        said.contains(" ticks replayed, 0 decisions differ"),
        "{said}"
    );
}

/// HD2 balancing takes pages from a VM that is still using them: `cache` reads a 64 MiB file
/// over and over, checking every word, and `needy`, with eight times the shares, grows from 16
/// MiB to 200 MiB: what it needs is released from `cache`'s clean file pages under the running
/// workload. Every word `cache` reads back, from the image or from
/// the reclamation cache, must be right.
#[test]
fn hd2_releases_under_a_busy_victim_keep_every_byte() {
    let dir = tempfile::tempdir().unwrap();
    mkdisk_data(dir.path().join("cache.img"), "128M", &[]);
    let host = TestHost::start(
        dir.path(),
        r#"[host]
memory = "320M"
swap = "2G"
tick = "250ms"
sample_period = "1s"
balancing = "hd2"

[[vm]]
name = "cache"
mem = "256M"
workload = "seqread"
cmdline = "file=seq file_mb=64 passes=1000"
disks = ["cache.img,id=data"]
mapper = true
balloon = true

[[vm]]
name = "needy"
mem = "256M"
shares = 8000
workload = "toucher"
cmdline = "schedule=16:4,200:60"
balloon = true
"#,
    );
    // `cache` holds its file in its page cache, every page of it mirroring a disk block.
    let cache = host.wait_vm("cache", 30, |v| v.state == HostVmState::Running);
    wait_mirrored(&cache, 12_000);
    let cache = host.wait_vm("cache", 300, |v| v.state == HostVmState::Exited);
    intact(&cache, "seqread");
    assert_eq!(cache.exit_status, Some(1), "{cache:?}");
    let info: HostInfo = host.info();
    let events: Vec<HostEvent> = ok(host.client().events(0.0));
    let moved: Vec<&HostEvent> = events
        .iter()
        .filter(|e| e.kind == HostEventKind::Reallocated)
        .collect();
    eprintln!(
        "released {} pages in {} reallocations: {moved:?}",
        info.released_pages, info.reallocations
    );
    assert!(
        info.released_pages > 256 && !moved.is_empty(),
        "{info:?} {events:?}"
    );
}
