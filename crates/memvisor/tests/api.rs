//! The API socket against its published schema (`docs/openapi.json`): every documented path and
//! method is called on a running VM, valid and invalid, and every answer is checked against the
//! documented status codes and response schema, and read into `memvisor-api`'s types with nothing
//! left over. The types and the schema have the same fields, both ways.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use memvisor_api::{
    ActiveMemory, BalloonStats, BalloonUpdate, DiskInfo, DiskStats, ErrorBody, ExitStats,
    GuestMemoryStats, LatencySummary, MemoryUpdate, PageCensus, PagerCounters, PagerMode,
    PagerStats, VmInfo, VmState, VmStats,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

const MEMVISOR: &str = env!("CARGO_BIN_EXE_memvisor");

/// A PVH kernel that spins forever (`jmp $`), so the VM stays up while the API is exercised.
fn spin_kernel(dir: &Path) -> PathBuf {
    let path = dir.join("spin.elf");
    std::fs::write(
        &path,
        memvisor_boot::test_utils::make_elf(0x10_0000, &[0xeb, 0xfe], Some(0x10_0000)),
    )
    .unwrap();
    path
}

struct Vm(Child);

impl Drop for Vm {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(dir: &Path, extra: &[&str]) -> (Vm, PathBuf) {
    let sock = dir.join("api.sock");
    let kernel = spin_kernel(dir);
    let disk = dir.join("d.img");
    std::fs::write(&disk, vec![0u8; 1 << 20]).unwrap();
    let child = Command::new(MEMVISOR)
        .args(["run", "--mem", "64M", "--kernel"])
        .arg(&kernel)
        .arg("--disk")
        .arg(format!("{},id=data", disk.display()))
        .arg("--api-sock")
        .arg(&sock)
        .args(extra)
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !sock.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the API socket never appeared"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    (Vm(child), sock)
}

fn spec() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn resolve<'a>(spec: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let name = r
                .strip_prefix("#/components/schemas/")
                .expect("local refs only");
            &spec["components"]["schemas"][name]
        }
        None => schema,
    }
}

fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "integer" => v.is_u64() || v.is_i64(),
        "number" => v.is_number(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        "null" => v.is_null(),
        other => panic!("schema type {other} not handled"),
    }
}

/// Checks `v` against the subset of JSON Schema the spec uses.
fn check(spec: &Value, schema: &Value, v: &Value, at: &str) -> Result<(), String> {
    let schema = resolve(spec, schema);
    if let Some(alts) = schema.get("oneOf").and_then(Value::as_array) {
        let ok = alts
            .iter()
            .filter(|s| check(spec, s, v, at).is_ok())
            .count();
        return if ok == 1 {
            Ok(())
        } else {
            Err(format!("{at}: {v} matches {ok} of the oneOf alternatives"))
        };
    }
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    if !types.is_empty() && !types.iter().any(|t| type_matches(t, v)) {
        return Err(format!("{at}: {v} is none of {types:?}"));
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_array) {
        if !e.contains(v) {
            return Err(format!("{at}: {v} not in {e:?}"));
        }
    }
    if let Some(obj) = v.as_object() {
        for r in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if !obj.contains_key(r.as_str().unwrap_or_default()) {
                return Err(format!("{at}: missing {r}"));
            }
        }
        let props = schema.get("properties").and_then(Value::as_object);
        for (k, val) in obj {
            match (
                props.and_then(|p| p.get(k)),
                schema.get("additionalProperties"),
            ) {
                (Some(s), _) => check(spec, s, val, &format!("{at}.{k}"))?,
                (None, Some(s)) if s.is_object() => check(spec, s, val, &format!("{at}.{k}"))?,
                (None, Some(Value::Bool(false))) => {
                    return Err(format!("{at}: unexpected property {k}"))
                }
                (None, _) => {}
            }
        }
    }
    if let (Some(items), Some(arr)) = (schema.get("items"), v.as_array()) {
        for (i, x) in arr.iter().enumerate() {
            check(spec, items, x, &format!("{at}[{i}]"))?;
        }
    }
    Ok(())
}

/// `v` read as a `T`, which must give back exactly `v`: no field the type lacks, none it adds.
fn typed<T: DeserializeOwned + Serialize>(v: &Value, at: &str) -> T {
    let t: T = serde_json::from_value(v.clone())
        .unwrap_or_else(|e| panic!("{at}: not a {}: {e}: {v}", std::any::type_name::<T>()));
    assert_eq!(
        &serde_json::to_value(&t).unwrap(),
        v,
        "{at}: the API type does not carry every field"
    );
    t
}

/// Calls the API and checks the answer against the spec and the API's types; returns status and
/// body.
fn call_checked(
    spec: &Value,
    sock: &Path,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> (u16, Value) {
    let (status, text) = memvisor_api::call(sock, method, path, body).unwrap();
    let v: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {text}"));
    let op = &spec["paths"][path][method.to_ascii_lowercase()];
    if let (200, Some(Ok(req))) = (status, body.map(serde_json::from_str::<Value>)) {
        let schema = &op["requestBody"]["content"]["application/json"]["schema"];
        if let Err(e) = check(spec, schema, &req, &format!("{method} {path} request")) {
            panic!("the server accepted a request the schema forbids: {e}");
        }
    }
    let resp = &op["responses"][status.to_string()];
    assert!(
        resp.is_object(),
        "{method} {path} answered {status}, which the spec does not document: {text}"
    );
    if let Err(e) = check(
        spec,
        &resp["content"]["application/json"]["schema"],
        &v,
        &format!("{method} {path} {status}"),
    ) {
        panic!("answer does not match the schema: {e}");
    }
    let at = format!("{method} {path} {status}");
    match (status, path) {
        (200, "/stats") => drop(typed::<VmStats>(&v, &at)),
        (200, _) => drop(typed::<VmInfo>(&v, &at)),
        _ => drop(typed::<ErrorBody>(&v, &at)),
    }
    (status, v)
}

/// Compares the fields of `v` (an API type serialized with every optional part present) with
/// `schema`, recursively: the same names both ways, all of them required. Records the component
/// schemas it went through in `seen`.
fn same_fields(spec: &Value, schema: &Value, v: &Value, at: &str, seen: &mut Vec<String>) {
    if let Some(name) = schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/components/schemas/"))
    {
        if !seen.iter().any(|s| s == name) {
            seen.push(name.to_owned());
        }
    }
    let schema = resolve(spec, schema);
    if let Some(alts) = schema.get("oneOf").and_then(Value::as_array) {
        let alt = alts
            .iter()
            .find(|a| a.get("type") != Some(&Value::from("null")))
            .unwrap_or_else(|| panic!("{at}: a oneOf without a non-null alternative"));
        return same_fields(spec, alt, v, at, seen);
    }
    if let Some(items) = v.as_array() {
        assert!(!items.is_empty(), "{at}: give the sample an element");
        for (i, x) in items.iter().enumerate() {
            same_fields(spec, &schema["items"], x, &format!("{at}[{i}]"), seen);
        }
        return;
    }
    let Some(obj) = v.as_object() else { return };
    match schema.get("properties").and_then(Value::as_object) {
        Some(props) => {
            let mut fields: Vec<&String> = obj.keys().collect();
            let mut documented: Vec<&String> = props.keys().collect();
            fields.sort();
            documented.sort();
            assert_eq!(
                fields, documented,
                "{at}: the type's fields (left) and the schema's (right)"
            );
            let mut required: Vec<&str> = schema["required"]
                .as_array()
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            required.sort_unstable();
            assert_eq!(
                required,
                documented.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
                "{at}: the server always sends every field, so the schema requires them all"
            );
            for (k, x) in obj {
                same_fields(spec, &props[k], x, &format!("{at}.{k}"), seen);
            }
        }
        None => {
            let each = &schema["additionalProperties"];
            assert!(
                each.is_object(),
                "{at}: an object with neither properties nor a map schema"
            );
            assert!(!obj.is_empty(), "{at}: give the sample an entry");
            for (k, x) in obj {
                same_fields(spec, each, x, &format!("{at}.{k}"), seen);
            }
        }
    }
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
        }),
        balloon: Some(BalloonStats {
            guest: Some(guest),
            ..BalloonStats::default()
        }),
        disks: [("data".to_owned(), DiskStats::default())].into(),
        exits: ExitStats::default(),
    };
    let schema = |name: &str| serde_json::json!({ "$ref": format!("#/components/schemas/{name}") });
    let mut seen = Vec::new();
    let samples = [
        ("VmInfo", serde_json::to_value(&vm).unwrap()),
        ("VmStats", serde_json::to_value(&stats).unwrap()),
        (
            "MemoryUpdate",
            serde_json::to_value(MemoryUpdate { limit: Some(1) }).unwrap(),
        ),
        (
            "BalloonUpdate",
            serde_json::to_value(BalloonUpdate { target: 1 }).unwrap(),
        ),
        (
            "ErrorBody",
            serde_json::to_value(ErrorBody { error: "x".into() }).unwrap(),
        ),
    ];
    for (name, v) in &samples {
        same_fields(&spec, &schema(name), v, name, &mut seen);
        if let Err(e) = check(&spec, &schema(name), v, name) {
            panic!("{e}");
        }
    }
    let mut components: Vec<&String> = spec["components"]["schemas"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    components.sort();
    seen.sort();
    assert_eq!(
        components,
        seen.iter().collect::<Vec<_>>(),
        "every schema is one of the API's types, by name"
    );
}

#[test]
fn server_matches_the_published_schema() {
    let spec = spec();
    let dir = tempfile::tempdir().unwrap();
    let (_vm, sock) = start(dir.path(), &["--balloon", "--mem-limit", "48M"]);

    // Every documented operation answers as documented.
    let paths = spec["paths"].as_object().unwrap();
    assert_eq!(paths.len(), 6);
    let (_, vm) = call_checked(&spec, &sock, "GET", "/vm", None);
    let vm: VmInfo = typed(&vm, "GET /vm");
    assert_eq!(vm.state, VmState::Running);
    assert_eq!(vm.paused_because, None);
    assert_eq!(vm.mem_bytes, 64 << 20);
    assert_eq!(vm.limit_bytes, Some(48 << 20));
    assert_eq!(vm.pager, PagerMode::Full);
    assert_eq!(vm.disks[0].id, "data");
    let (_, stats) = call_checked(&spec, &sock, "GET", "/stats", None);
    let stats: VmStats = typed(&stats, "GET /stats");
    let pager = stats.pager.expect("a pager");
    assert!(pager.pages.resident_pages > 0);
    assert_eq!(pager.pages.total_pages(), (64 << 20) / 4096);
    assert_eq!(pager.limit_bytes, Some(48 << 20));
    assert!(stats.balloon.is_some());
    assert!(stats.disks.contains_key("data"));
    let (_, vm) = call_checked(
        &spec,
        &sock,
        "PUT",
        "/memory",
        Some(r#"{"limit": 33554432}"#),
    );
    assert_eq!(vm["limit_bytes"], 32 << 20);
    let (_, vm) = call_checked(&spec, &sock, "PUT", "/memory", Some(r#"{"limit": null}"#));
    assert!(vm["limit_bytes"].is_null());
    let (_, vm) = call_checked(
        &spec,
        &sock,
        "PUT",
        "/balloon",
        Some(r#"{"target": 8388608}"#),
    );
    assert_eq!(vm["balloon_target_bytes"], 8 << 20);
    // A running VM cannot be resumed.
    let (status, v) = call_checked(&spec, &sock, "PUT", "/vm/resume", None);
    assert_eq!(status, 400);
    assert!(v["error"].as_str().unwrap().contains("not paused"));
    // Paused on request: the reason says so, a second pause is refused, resume lets it run.
    let (_, vm) = call_checked(&spec, &sock, "PUT", "/vm/pause", None);
    assert_eq!(vm["state"], "paused");
    assert_eq!(vm["paused_because"], "requested");
    let (status, v) = call_checked(&spec, &sock, "PUT", "/vm/pause", None);
    assert_eq!(status, 400);
    assert!(v["error"].as_str().unwrap().contains("already paused"));
    let (_, vm) = call_checked(&spec, &sock, "PUT", "/vm/resume", None);
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
    ] {
        let (status, v) = call_checked(&spec, &sock, "PUT", path, Some(body));
        assert_eq!(status, 400, "PUT {path} {body}");
        assert!(!v["error"].as_str().unwrap().is_empty());
    }
    let (_, vm) = call_checked(&spec, &sock, "GET", "/vm", None);
    assert!(
        vm["limit_bytes"].is_null(),
        "rejected requests changed nothing"
    );
    assert_eq!(vm["balloon_target_bytes"], 8 << 20);

    // Undocumented paths and methods are refused, and the server survives garbage.
    assert_eq!(
        memvisor_api::call(&sock, "GET", "/nope", None).unwrap().0,
        404
    );
    assert_eq!(
        memvisor_api::call(&sock, "DELETE", "/vm", None).unwrap().0,
        405
    );
    {
        use std::io::Write;
        let mut s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        s.write_all(b"\x00\x01garbage\r\n\r\n").unwrap();
    }
    call_checked(&spec, &sock, "GET", "/vm", None);
    // A client that connects and says nothing is dropped, and the next one is served.
    let _silent = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    call_checked(&spec, &sock, "GET", "/vm", None);
}

#[test]
fn without_a_pager_the_limit_cannot_be_changed() {
    let spec = spec();
    let dir = tempfile::tempdir().unwrap();
    let (_vm, sock) = start(dir.path(), &["--pager", "off"]);
    let (_, vm) = call_checked(&spec, &sock, "GET", "/vm", None);
    assert_eq!(vm["pager"], "off");
    assert!(vm["balloon_target_bytes"].is_null());
    let (status, v) = call_checked(
        &spec,
        &sock,
        "PUT",
        "/memory",
        Some(r#"{"limit": 33554432}"#),
    );
    assert_eq!(status, 400);
    assert!(v["error"].as_str().unwrap().contains("pager"));
    let (status, _) = call_checked(&spec, &sock, "PUT", "/balloon", Some(r#"{"target": 4096}"#));
    assert_eq!(status, 400);
    let (_, stats) = call_checked(&spec, &sock, "GET", "/stats", None);
    let stats: VmStats = typed(&stats, "GET /stats");
    assert_eq!(stats.pager, None);
    assert_eq!(stats.balloon, None);
}

/// Told to stop, memvisor stops the VM and leaves nothing behind: no cgroup, no socket file.
#[test]
fn sigterm_stops_the_vm_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let (mut vm, sock) = start(dir.path(), &["--pager", "off", "--mem-limit", "32M"]);
    let pid = vm.0.id();
    let cgroup = PathBuf::from(format!("/sys/fs/cgroup/memory/memvisor-{pid}"));
    assert!(
        cgroup.join("memory.limit_in_bytes").exists(),
        "the host-kernel limit is a cgroup"
    );
    // SAFETY: plain kill(2) of our own child.
    unsafe { libc::kill(i32::try_from(pid).unwrap(), libc::SIGTERM) };
    let status = vm.0.wait().unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    assert!(!cgroup.exists(), "the cgroup was removed");
    assert!(!sock.exists(), "the socket file was removed");
}
