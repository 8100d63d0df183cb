//! The API socket against its published schema (`docs/openapi.json`): every documented path and
//! method is called on a running VM, valid and invalid, and every answer is checked against the
//! documented status codes and response schema, and read into `memvisor-api`'s types with nothing
//! left over. The types and the schema have the same fields, both ways.

use std::path::{Path, PathBuf};

use memvisor_api::{
    ActiveMemory, BalloonStats, BalloonUpdate, DiskInfo, DiskStats, ErrorBody, ExitStats,
    GuestErrors, GuestMemoryStats, LatencySummary, MemoryUpdate, PageCensus, PagerCounters,
    PagerMode, PagerStats, PoolStats, PoolUpdate, VmInfo, VmRequest, VmState, VmStats,
};
use serde_json::Value;

mod common;
use common::openapi::{self, typed};
use common::{disk_spec, spin_kernel, TestVm};

/// A 64 MiB VM spinning forever ([`spin_kernel`]) with a 1 MiB disk `data` and `extra`
/// arguments, once its API socket exists.
fn start(dir: &Path, extra: &[&str]) -> TestVm {
    let kernel = spin_kernel(dir);
    let disk = dir.join("d.img");
    std::fs::write(&disk, vec![0u8; 1 << 20]).unwrap();
    let disk = disk_spec(&disk, "data");
    let mut args = vec!["--mem", "64M", "--kernel", kernel.to_str().unwrap()];
    args.extend(["--disk", &disk]);
    args.extend_from_slice(extra);
    TestVm::start(&dir.join("api.sock"), &args)
}

fn spec() -> Value {
    openapi::load("openapi.json")
}

/// [`openapi::call_checked`], and the answer read into the API's types with nothing left over.
fn call_checked(
    spec: &Value,
    sock: &Path,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> (u16, Value) {
    let (status, v) = openapi::call_checked(spec, sock, method, path, body);
    let at = format!("{method} {path} {status}");
    let request = VmRequest::parse(method, path, body.unwrap_or("").as_bytes());
    match (status, request) {
        (200, Ok(VmRequest::Stats)) => drop(typed::<VmStats>(&v, &at)),
        (200, Ok(VmRequest::Release(_))) => drop(typed::<memvisor_api::ReleaseResult>(&v, &at)),
        (200, Ok(VmRequest::Snapshot(_))) => drop(typed::<memvisor_api::SnapshotResult>(&v, &at)),
        (200, Ok(VmRequest::Migrate(_))) => drop(typed::<memvisor_api::MigrateResult>(&v, &at)),
        (200, _) => drop(typed::<VmInfo>(&v, &at)),
        _ => drop(typed::<ErrorBody>(&v, &at)),
    }
    (status, v)
}

/// Every field of every API type is in `docs/openapi.json`, and every field there is in a type:
/// samples with every optional part present are serialized and compared with the schemas they
/// answer to, and the schema's component names are the types' names.
#[test]
fn api_types_and_the_published_schema_have_the_same_fields() {
    let spec = spec();
    let vm = VmInfo {
        state: VmState::Paused,
        paused_because: Some("swap write failed".into()),
        mem_bytes: 1 << 30,
        vcpus: 2,
        pager: PagerMode::Full,
        limit_bytes: Some(1 << 28),
        balloon_target_bytes: Some(1 << 20),
        disks: vec![DiskInfo {
            id: "data".into(),
            path: "/d.img".into(),
            read_only: true,
        }],
        migration: Some(memvisor_api::MigrateResult {
            precopy_round_pages: vec![1],
            ..memvisor_api::MigrateResult::default()
        }),
        snapshot_dir: Some("/srv/vm/snapshots".into()),
    };
    let guest = GuestMemoryStats {
        age_ms: 1,
        swap_in_bytes: Some(1),
        swap_out_bytes: Some(1),
        major_faults: Some(1),
        minor_faults: Some(1),
        free_memory_bytes: Some(1),
        total_memory_bytes: Some(1),
        available_memory_bytes: Some(1),
        disk_caches_bytes: Some(1),
        hugetlb_allocations: Some(1),
        hugetlb_failures: Some(1),
    };
    let stats = VmStats {
        pager: Some(PagerStats {
            limit_bytes: Some(1 << 28),
            attached: true,
            pages: PageCensus::default(),
            swap_blocks_in_use: 0,
            counters: PagerCounters::default(),
            fault_latency: LatencySummary::default(),
            swap_fault_latency: LatencySummary::default(),
            reclaim_latency: LatencySummary::default(),
            active: ActiveMemory::default(),
            pool: Some(PoolStats::default()),
            indirections: Some(memvisor_api::IndirectionStats::default()),
            patterns: Some(memvisor_api::PatternStats {
                ghost_hits: vec![1],
                dwell_ms_log2: vec![1],
                ..memvisor_api::PatternStats::default()
            }),
        }),
        sharing: Some(memvisor_api::SharingStats::default()),
        balloon: Some(BalloonStats {
            guest: Some(guest),
            ..BalloonStats::default()
        }),
        disks: [("data".to_owned(), DiskStats::default())].into(),
        exits: ExitStats::default(),
        guest_errors: GuestErrors::default(),
    };
    let samples = [
        ("VmInfo", serde_json::to_value(&vm).unwrap()),
        ("VmStats", serde_json::to_value(&stats).unwrap()),
        (
            "MemoryUpdate",
            serde_json::to_value(MemoryUpdate { limit: Some(1) }).unwrap(),
        ),
        (
            "PoolUpdate",
            serde_json::to_value(PoolUpdate { bytes: 1 }).unwrap(),
        ),
        (
            "ReleaseRequest",
            serde_json::to_value(memvisor_api::ReleaseRequest {
                pages: 1,
                cold_only: true,
            })
            .unwrap(),
        ),
        (
            "ReleaseResult",
            serde_json::to_value(memvisor_api::ReleaseResult {
                limit_bytes: Some(1),
                ..memvisor_api::ReleaseResult::default()
            })
            .unwrap(),
        ),
        (
            "BalloonUpdate",
            serde_json::to_value(BalloonUpdate { target: 1 }).unwrap(),
        ),
        (
            "SnapshotRequest",
            serde_json::to_value(memvisor_api::SnapshotRequest {
                dir: "d".into(),
                stop: true,
            })
            .unwrap(),
        ),
        (
            "SnapshotResult",
            serde_json::to_value(memvisor_api::SnapshotResult::default()).unwrap(),
        ),
        (
            "MigrateRequest",
            serde_json::to_value(memvisor_api::MigrateRequest {
                to: "127.0.0.1:1".into(),
                token: "t".into(),
                recover: true,
                precopy_rounds: 2,
            })
            .unwrap(),
        ),
        (
            "MigrateResult",
            serde_json::to_value(memvisor_api::MigrateResult {
                precopy_round_pages: vec![1],
                ..memvisor_api::MigrateResult::default()
            })
            .unwrap(),
        ),
        (
            "ErrorBody",
            serde_json::to_value(ErrorBody { error: "x".into() }).unwrap(),
        ),
    ];
    openapi::same_fields_as_schemas(&spec, &samples);
}

#[test]
fn server_matches_the_published_schema() {
    let spec = spec();
    let dir = tempfile::tempdir().unwrap();
    let vmm = start(dir.path(), &["--balloon", "--mem-limit", "48M"]);
    let sock = vmm.sock();
    let call = |method: &str, path: &str, body: Option<&str>| {
        call_checked(&spec, sock, method, path, body)
    };

    // Every documented operation answers as documented.
    let paths = spec["paths"].as_object().unwrap();
    assert_eq!(paths.len(), 11);
    let snap = dir.path().join("snap");
    let body = format!(r#"{{"dir": "{}"}}"#, snap.display());
    let (_, r) = call("PUT", "/vm/snapshot", Some(&body));
    let r: memvisor_api::SnapshotResult = typed(&r, "PUT /vm/snapshot");
    assert!(!r.stopped && snap.join("vm.state").exists());
    let (_, vm) = call("GET", "/vm", None);
    let vm: VmInfo = typed(&vm, "GET /vm");
    assert_eq!(vm.state, VmState::Running);
    assert_eq!(vm.paused_because, None);
    assert_eq!(vm.mem_bytes, 64 << 20);
    assert_eq!(vm.limit_bytes, Some(48 << 20));
    assert_eq!(vm.pager, PagerMode::Full);
    assert_eq!(vm.disks[0].id, "data");
    let (_, stats) = call("GET", &VmRequest::Stats.path(), None);
    let stats: VmStats = typed(&stats, "GET /stats");
    let pager = stats.pager.expect("a pager");
    assert!(pager.pages.resident_pages > 0);
    assert_eq!(pager.pages.total_pages(), (64 << 20) / 4096);
    assert_eq!(pager.limit_bytes, Some(48 << 20));
    assert!(stats.balloon.is_some());
    assert!(stats.disks.contains_key("data"));
    // The same numbers for Prometheus, as text.
    let (status, text) = openapi::get_text_checked(&spec, sock, "/metrics");
    assert_eq!(status, 200);
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(text.contains("# TYPE memvisor_vm_resident_bytes gauge\n"));
    let resident: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("memvisor_vm_resident_bytes "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no resident bytes in {text}"));
    assert!(resident > 0);
    assert!(
        text.contains("\nmemvisor_vm_limit_bytes 50331648\n"),
        "{text}"
    );
    assert!(text.contains("\nmemvisor_vm_disk_reads_total{disk=\"data\"} "));
    assert!(text.contains("\nmemvisor_vm_balloon_target_bytes 0\n"));
    assert_eq!(openapi::status_of(sock, "PUT", "/metrics"), 405);
    let (_, vm) = call("PUT", "/memory", Some(r#"{"limit": 33554432}"#));
    assert_eq!(vm["limit_bytes"], 32 << 20);
    let (_, vm) = call("PUT", "/memory", Some(r#"{"limit": null}"#));
    assert!(vm["limit_bytes"].is_null());
    // Without the Swap Mapper no page is known to mirror a block: nothing to release.
    let (status, r) = call("PUT", "/memory/release", Some(r#"{"pages": 100}"#));
    assert_eq!(status, 200);
    assert_eq!(
        (r["asked_pages"].as_u64(), r["released_pages"].as_u64()),
        (Some(100), Some(0))
    );
    assert!(r["limit_bytes"].is_null(), "{r}");
    let (_, vm) = call("PUT", "/balloon", Some(r#"{"target": 8388608}"#));
    assert_eq!(vm["balloon_target_bytes"], 8 << 20);
    // This VM has no pool to resize.
    let (status, v) = call("PUT", "/pool", Some(r#"{"bytes": 1048576}"#));
    assert_eq!(status, 400);
    assert!(v["error"].as_str().unwrap().contains("no pool"));
    // A running VM cannot be resumed.
    let (status, v) = call("PUT", "/vm/resume", None);
    assert_eq!(status, 400);
    assert!(v["error"].as_str().unwrap().contains("not paused"));
    // Paused on request: the reason says so, a second pause is refused, resume lets it run.
    let (_, vm) = call("PUT", "/vm/pause", None);
    assert_eq!(vm["state"], "paused");
    assert_eq!(vm["paused_because"], "requested");
    let (status, v) = call("PUT", "/vm/pause", None);
    assert_eq!(status, 400);
    assert!(v["error"].as_str().unwrap().contains("already paused"));
    let (_, vm) = call("PUT", "/vm/resume", None);
    assert_eq!(vm["state"], "running");
    assert!(vm["paused_because"].is_null());

    // Bad requests: 400 with an error, and nothing changes.
    for (path, body) in [
        ("/memory", "{"),
        ("/memory", r#"{"limit": 33554432, "extra": 1}"#),
        ("/memory", r#"{"limit": -5}"#),
        ("/memory", r#"{"limit": 1099511627776}"#),
        ("/memory", r#"{"limit": 4096}"#),
        ("/memory", r#"{"limit": "big"}"#),
        ("/memory", r#"{}"#),
        ("/balloon", r#"{"target": 1099511627776}"#),
        ("/balloon", r#"{"target": 1.5}"#),
        ("/balloon", "[]"),
        ("/memory/release", r#"{"pages": 0}"#),
        ("/memory/release", r#"{"pages": 16385}"#),
        ("/memory/release", r#"{"pages": -1}"#),
        ("/memory/release", r#"{}"#),
        ("/vm/migrate", r#"{"to": "127.0.0.1:1"}"#),
        // Nothing listens there: the VM runs on.
        ("/vm/migrate", r#"{"to": "127.0.0.1:1", "token": "t"}"#),
    ] {
        let (status, v) = call("PUT", path, Some(body));
        assert_eq!(status, 400, "PUT {path} {body}");
        assert!(!v["error"].as_str().unwrap().is_empty());
    }
    let (_, vm) = call("GET", "/vm", None);
    assert!(
        vm["limit_bytes"].is_null(),
        "rejected requests changed nothing"
    );
    assert_eq!(vm["balloon_target_bytes"], 8 << 20);

    // Undocumented paths and methods are refused, and the server survives garbage.
    assert_eq!(openapi::status_of(sock, "GET", "/nope"), 404);
    assert_eq!(openapi::status_of(sock, "DELETE", "/vm"), 405);
    {
        use std::io::Write;
        let mut s = std::os::unix::net::UnixStream::connect(sock).unwrap();
        s.write_all(b"\x00\x01garbage\r\n\r\n").unwrap();
    }
    call("GET", "/vm", None);
    // A client that connects and says nothing is dropped, and the next one is served.
    let _silent = std::os::unix::net::UnixStream::connect(sock).unwrap();
    call("GET", "/vm", None);
}

#[test]
fn without_a_pager_the_limit_cannot_be_changed() {
    let spec = spec();
    let dir = tempfile::tempdir().unwrap();
    let vmm = start(dir.path(), &["--pager", "off"]);
    let sock = vmm.sock();
    let call = |method: &str, path: &str, body: Option<&str>| {
        call_checked(&spec, sock, method, path, body)
    };
    let (_, vm) = call("GET", "/vm", None);
    assert_eq!(vm["pager"], "off");
    assert!(vm["balloon_target_bytes"].is_null());
    let (status, v) = call("PUT", "/memory", Some(r#"{"limit": 33554432}"#));
    assert_eq!(status, 400);
    assert!(v["error"].as_str().unwrap().contains("pager"));
    let (status, _) = call("PUT", "/balloon", Some(r#"{"target": 4096}"#));
    assert_eq!(status, 400);
    let (_, stats) = call("GET", &VmRequest::Stats.path(), None);
    let stats: VmStats = typed(&stats, "GET /stats");
    assert_eq!(stats.pager, None);
    assert_eq!(stats.balloon, None);
}

/// Told to stop, memvisor stops the VM and leaves nothing behind: no cgroup, no socket file.
#[test]
fn sigterm_stops_the_vm_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let vm = start(dir.path(), &["--pager", "off", "--mem-limit", "32M"]);
    let sock = vm.sock().to_owned();
    let pid = vm.pid();
    let cgroup = PathBuf::from(format!("/sys/fs/cgroup/memory/memvisor-{pid}"));
    assert!(
        cgroup.join("memory.limit_in_bytes").exists(),
        "the host-kernel limit is a cgroup"
    );
    vm.signal(libc::SIGTERM);
    assert_eq!(vm.finish().status.code(), Some(128 + libc::SIGTERM));
    assert!(!cgroup.exists(), "the cgroup was removed");
    assert!(!sock.exists(), "the socket file was removed");
}
