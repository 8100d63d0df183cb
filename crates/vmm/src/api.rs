//! The VM's API socket: HTTP/JSON on a Unix socket, one request per connection.
//!
//! | request | does |
//! |---|---|
//! | `GET /vm` | configuration and state (`running`, or `paused` with the reason) |
//! | `GET /stats` | every counter: pager, balloon (with the guest's statistics), disks, exits |
//! | `PUT /memory {"limit": bytes\|null}` | changes the resident limit; shrinking reclaims down to it |
//! | `PUT /balloon {"target": bytes}` | sets the balloon size |
//! | `PUT /vm/resume` | resumes a VM the pager paused (swap or image I/O failed); 400 if it runs |
//!
//! Bad requests (malformed HTTP or JSON, unknown fields, values out of range) get 400 with
//! `{"error": "..."}` and change nothing. The schema is `docs/openapi.json`.

use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use memvisor_api::{read_request, write_response, BalloonUpdate, ErrorBody, MemoryUpdate};
use memvisor_devices::virtio::balloon::{BalloonControl, STAT_NAMES};
use memvisor_devices::virtio::block::BlockMetrics;
use serde_json::{json, Map, Value};

use crate::{DiskConfig, ExitCounters, Lifecycle, VmState};

/// What the API can see and steer.
pub(crate) struct Control {
    pub mem_size: u64,
    pub vcpus: u8,
    pub pager_mode: &'static str,
    pub disks: Vec<(DiskConfig, Arc<BlockMetrics>)>,
    pub lifecycle: Arc<Lifecycle>,
    pub balloon: Option<BalloonControl>,
    pub exits: Arc<ExitCounters>,
}

/// How long the server waits for a request once a client has connected.
const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Binds the socket at `path` and serves it on its own thread. A stale socket file (nobody
/// listening) is replaced; a live one is an error.
pub(crate) fn serve(path: &Path, control: Arc<Control>) -> std::io::Result<()> {
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(std::io::Error::other(format!(
                "{} is served by another process",
                path.display()
            )));
        }
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)?;
    std::thread::Builder::new()
        .name("api".into())
        .spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(mut s) => {
                        // A client that connects and sends nothing must not hold the API.
                        if let Err(e) = s.set_read_timeout(Some(READ_TIMEOUT)) {
                            tracing::warn!("api: cannot set a read timeout: {e}");
                        }
                        let (status, body) = match read_request(&mut s) {
                            Ok(req) => handle(&control, &req.method, &req.path, &req.body),
                            Err(e) => error(400, &e.to_string()),
                        };
                        if let Err(e) = write_response(&mut s, status, &body) {
                            tracing::debug!("api: cannot answer: {e}");
                        }
                    }
                    Err(e) => tracing::warn!("api: accept failed: {e}"),
                }
            }
        })?;
    Ok(())
}

/// Removes the socket file when the VM ends.
pub(crate) struct SocketFile(pub PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn error(status: u16, msg: &str) -> (u16, String) {
    (
        status,
        serde_json::to_string(&ErrorBody {
            error: msg.to_owned(),
        })
        .unwrap_or_default(),
    )
}

fn ok(v: &Value) -> (u16, String) {
    (200, v.to_string())
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, (u16, String)> {
    serde_json::from_slice(body).map_err(|e| error(400, &format!("bad JSON body: {e}")))
}

fn handle(c: &Control, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    match (method, path) {
        ("GET", "/vm") => ok(&vm_info(c)),
        ("GET", "/stats") => ok(&stats(c)),
        ("PUT", "/memory") => match parse::<MemoryUpdate>(body) {
            Err(e) => e,
            Ok(u) => match &c.lifecycle.pager {
                None => error(400, "this VM runs without memvisor's pager (--pager off): its limit belongs to the host cgroup"),
                Some(p) => match p.set_limit(u.limit) {
                    Ok(()) => ok(&vm_info(c)),
                    Err(e) => error(400, &e.to_string()),
                },
            },
        },
        ("PUT", "/balloon") => match parse::<BalloonUpdate>(body) {
            Err(e) => e,
            Ok(u) => match &c.balloon {
                None => error(400, "this VM has no balloon device (start it with --balloon)"),
                Some(_) if u.target > c.mem_size => {
                    error(400, &format!("a balloon of {} bytes is larger than the VM's {} bytes", u.target, c.mem_size))
                }
                Some(b) => {
                    b.set_target(u32::try_from(u.target / 4096).unwrap_or(u32::MAX));
                    ok(&vm_info(c))
                }
            },
        },
        ("PUT", "/vm/resume") => match c.lifecycle.resume() {
            true => ok(&vm_info(c)),
            false => error(400, "the VM is not paused"),
        },
        (_, "/vm" | "/stats") => error(405, "use GET"),
        (_, "/memory" | "/balloon" | "/vm/resume") => error(405, "use PUT"),
        _ => error(404, &format!("no such path {path}")),
    }
}

fn vm_info(c: &Control) -> Value {
    let limit = c.lifecycle.pager.as_ref().and_then(|p| p.limit_bytes());
    let balloon_target = c
        .balloon
        .as_ref()
        .map(|b| u64::from(b.state.target_pages.load(Ordering::SeqCst)) * 4096);
    let (state, paused) = match c.lifecycle.state() {
        VmState::Created => ("created", None),
        VmState::Running => ("running", None),
        VmState::Paused { why, .. } => ("paused", Some(why.to_string())),
    };
    json!({
        "state": state,
        "paused_because": paused,
        "mem_bytes": c.mem_size,
        "vcpus": c.vcpus,
        "pager": c.pager_mode,
        "limit_bytes": limit,
        "balloon_target_bytes": balloon_target,
        "disks": c.disks.iter().map(|(d, _)| json!({
            "id": d.id, "path": d.path.display().to_string(), "read_only": d.read_only
        })).collect::<Vec<_>>(),
    })
}

fn stats(c: &Control) -> Value {
    // The balloon is read before the pager: the driver writes `actual_pages` only after the
    // device released those pages, so every page counted there is already in the pager's census
    // below (read the other way round, a request landing in between made them disagree).
    let balloon = c.balloon.as_ref().map(|b| {
        b.request_stats();
        let st = &b.state;
        let m = &st.metrics;
        let guest = st.stats().map(|(age, v)| {
            let mut g = Map::new();
            for (tag, val) in v {
                let name = STAT_NAMES
                    .iter()
                    .find(|(t, _)| *t == tag)
                    .map_or_else(|| format!("tag_{tag}"), |(_, n)| (*n).to_owned());
                g.insert(name, json!(val));
            }
            g.insert(
                "age_ms".into(),
                json!(u64::try_from(age.as_millis()).unwrap_or(u64::MAX)),
            );
            Value::Object(g)
        });
        json!({
            "target_pages": st.target_pages.load(Ordering::SeqCst),
            "actual_pages": st.actual_pages.load(Ordering::SeqCst),
            "inflated_pages": m.inflated_pages.load(Ordering::Relaxed),
            "deflated_pages": m.deflated_pages.load(Ordering::Relaxed),
            "reported_pages": m.reported_pages.load(Ordering::Relaxed),
            "invalid_pfns": m.invalid_pfns.load(Ordering::Relaxed),
            "stats_updates": m.stats_updates.load(Ordering::Relaxed),
            "guest": guest,
        })
    });
    let pager = c.lifecycle.pager.as_ref().map(|p| {
        let s = p.snapshot();
        let mut m = Map::new();
        m.insert("limit_bytes".into(), json!(s.limit_bytes));
        m.insert("resident_pages".into(), json!(s.resident_pages));
        m.insert("zero_pages".into(), json!(s.zero_pages));
        m.insert("swapped_pages".into(), json!(s.swapped_pages));
        m.insert("ballooned_pages".into(), json!(s.ballooned_pages));
        m.insert("reported_pages".into(), json!(s.reported_pages));
        m.insert("on_disk_pages".into(), json!(s.on_disk_pages));
        m.insert("mirrored_pages".into(), json!(s.mirrored_pages));
        m.insert("swap_blocks_in_use".into(), json!(s.swap_blocks_in_use));
        for (k, v) in s.counters {
            m.insert(k.into(), json!(v));
        }
        let lat =
            |(n, p50, p99): (usize, u32, u32)| json!({"samples": n, "p50_us": p50, "p99_us": p99});
        m.insert("fault_latency".into(), lat(s.fault_latency_us));
        m.insert("swap_fault_latency".into(), lat(s.swap_fault_latency_us));
        m.insert("reclaim_latency".into(), lat(s.reclaim_latency_us));
        Value::Object(m)
    });
    let disks: Map<String, Value> = c
        .disks
        .iter()
        .map(|(d, m)| {
            (
                d.id.clone(),
                json!({
                    "reads": m.reads.load(Ordering::Relaxed),
                    "writes": m.writes.load(Ordering::Relaxed),
                    "flushes": m.flushes.load(Ordering::Relaxed),
                    "bytes_read": m.bytes_read.load(Ordering::Relaxed),
                    "bytes_written": m.bytes_written.load(Ordering::Relaxed),
                    "errors": m.errors.load(Ordering::Relaxed),
                }),
            )
        })
        .collect();
    json!({
        "pager": pager,
        "balloon": balloon,
        "disks": disks,
        "exits": {
            "io": c.exits.io.load(Ordering::Relaxed),
            "mmio": c.exits.mmio.load(Ordering::Relaxed),
            "other": c.exits.other.load(Ordering::Relaxed),
        },
    })
}
