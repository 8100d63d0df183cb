//! The host's metrics as an operator sees them: a real Prometheus server (Debian's `prometheus`,
//! installed by `scripts/setup-host.sh`) scrapes a two-VM host on its `metrics_addr` every
//! second until its query API shows both VMs' memory and fault counters moving; then
//! `memvisor top --once` prints a row for each VM. Nothing here measures time: every wait is a
//! poll with a generous deadline, so a busy machine is only slower.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::{host_command, memvisor, Proc};

/// A loopback port nobody listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` over HTTP/1.0 on `addr`: the status and body, or `None` while nothing answers.
fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}

/// `s` percent-encoded for a URL's query.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The `vm` labels of the series Prometheus returns for the instant query `q`.
fn vms_in(prom: SocketAddr, q: &str) -> Vec<String> {
    let Some((200, body)) = http_get(prom, &format!("/api/v1/query?query={}", encode(q))) else {
        return Vec::new();
    };
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let mut vms: Vec<String> = v["data"]["result"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["metric"]["vm"].as_str().map(str::to_owned))
        .collect();
    vms.sort();
    vms.dedup();
    vms
}

fn prometheus_bin() -> PathBuf {
    ["/usr/bin/prometheus", "/usr/local/bin/prometheus"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("no prometheus binary: scripts/setup-host.sh installs Debian's `prometheus`")
}

fn wait_for(what: &str, secs: u64, mut done: impl FnMut() -> bool, log: &Path) {
    let t = Instant::now();
    while !done() {
        if t.elapsed() > Duration::from_secs(secs) {
            let tail = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = tail.lines().rev().take(30).collect();
            panic!(
                "{what}: not after {secs} s; the end of {}:\n{}",
                log.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn prometheus_scrapes_the_host_and_top_shows_its_vms() {
    let dir = tempfile::tempdir().unwrap();
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let web: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();

    // Prometheus first, ready before the host starts, so it sees the VMs grow.
    let prom_config = dir.path().join("prometheus.yml");
    std::fs::write(
        &prom_config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: memvisor\n    static_configs:\n      - targets: ['{metrics}']\n"
        ),
    )
    .unwrap();
    let prom_log = dir.path().join("prometheus.log");
    let prom_out = std::fs::File::create(&prom_log).unwrap();
    let _prom = Proc::spawn(
        Command::new(prometheus_bin())
            .arg(format!("--config.file={}", prom_config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={web}"))
            .stdin(Stdio::null())
            .stdout(prom_out.try_clone().unwrap())
            .stderr(prom_out),
    );
    wait_for(
        "prometheus ready",
        120,
        || http_get(web, "/-/ready").is_some_and(|(s, _)| s == 200),
        &prom_log,
    );

    // Two VMs whose working sets grow step by step (then hold), sampled every second.
    let vm = |name: &str| {
        format!(
            "[[vm]]\nname = \"{name}\"\nmem = \"128M\"\nworkload = \"toucher\"\n\
             cmdline = \"schedule=4:2,8:2,12:2,16:2,20:2,24:2,28:2,32:2,36:2,40:2,44:2,48:600\"\n"
        )
    };
    let host_config = dir.path().join("host.toml");
    std::fs::write(
        &host_config,
        format!(
            "[host]\nmemory = \"512M\"\nswap = \"1G\"\ntick = \"500ms\"\nsample_period = \"1s\"\n\
             metrics_addr = \"{metrics}\"\n\n{}\n{}",
            vm("a"),
            vm("b")
        ),
    )
    .unwrap();
    let host_log = dir.path().join("host.log");
    let mut host = Proc::spawn(
        host_command(&host_config)
            .stdin(Stdio::null())
            .stderr(std::fs::File::create(&host_log).unwrap()),
    );
    let sock = dir.path().join("host.state/host.sock");

    // Both VMs' resident memory rose and a counter of each grew (port I/O exits: the guest's
    // console lines; the VMs run on plain memory, so no fault reaches the pager), in
    // Prometheus's data.
    let both = vec!["a".to_owned(), "b".to_owned()];
    let resident_moved = "max_over_time(memvisor_vm_resident_bytes[5m]) \
                          - min_over_time(memvisor_vm_resident_bytes[5m]) > 0";
    let exits_grew = "increase(memvisor_vm_exits_total{kind=\"io\"}[5m]) > 0";
    let mut seen = (Vec::new(), Vec::new());
    let t = Instant::now();
    while (seen.0 != both || seen.1 != both) && t.elapsed() < Duration::from_secs(180) {
        std::thread::sleep(Duration::from_secs(1));
        seen = (vms_in(web, resident_moved), vms_in(web, exits_grew));
    }
    if seen.0 != both || seen.1 != both {
        let targets = http_get(web, "/api/v1/targets").map(|(_, b)| b);
        let host_log = std::fs::read_to_string(&host_log).unwrap_or_default();
        panic!(
            "after 180 s Prometheus shows resident memory moving for {:?} and port I/O exits growing for {:?}\n\
             targets: {targets:?}\nhost log:\n{host_log}",
            seen.0, seen.1
        );
    }
    // The host's own gauges, and each VM's state, are there too.
    assert_eq!(
        vms_in(web, "memvisor_host_vm_state{state=\"running\"} == 1"),
        both
    );
    let (_, budget) = http_get(
        web,
        &format!(
            "/api/v1/query?query={}",
            encode("memvisor_host_budget_bytes")
        ),
    )
    .unwrap();
    let budget: Value = serde_json::from_str(&budget).unwrap();
    assert_eq!(
        budget["data"]["result"][0]["value"][1],
        (512u64 << 20).to_string(),
        "{budget}"
    );

    // `memvisor top --once`: the header and one row per VM, each with every column.
    let out = memvisor(&["top", "--once", "--host-sock", sock.to_str().unwrap()]);
    let text = common::stdout(&out);
    assert!(out.status.success(), "{text}{}", common::stderr(&out));
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("memvisor host  budget 512.0 MiB  free ")
            && lines[0].contains(" state "),
        "{text}"
    );
    assert!(lines[1].contains("VMs 2 running of 2"), "{text}");
    let cols = |l: &str| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(
        cols(lines[3]),
        [
            "VM", "STATE", "RESIDENT", "TARGET", "ACTIVE", "BALLOON", "SWAPPED", "SHARED",
            "FAULTS/S"
        ],
        "{text}"
    );
    for (line, name) in lines[4..].iter().zip(["a", "b"]) {
        let c = cols(line);
        // A size is a number and a unit: name, state, resident, target, active, `-` (no
        // balloon), swapped, shared (saved by page sharing), the fault rate.
        assert_eq!(c.len(), 14, "{text}");
        assert_eq!((c[0].as_str(), c[1].as_str()), (name, "running"), "{text}");
        assert!(c[2].parse::<f64>().unwrap() > 0.0, "{text}");
        assert!(c[3] == "MiB" || c[3] == "KiB", "{text}");
        assert_eq!(c[8], "-", "no balloon: {text}");
        assert_eq!(
            (c[11].as_str(), c[12].as_str()),
            ("0", "B"),
            "nothing shared: {text}"
        );
        assert!(c[13].parse::<f64>().is_ok(), "a fault rate: {text}");
    }
    assert_eq!(lines.len(), 6, "{text}");

    // The host stops its VMs and exits 0; Prometheus is stopped when `_prom` drops.
    assert_eq!(host.stop(), Some(0));
    assert!(!sock.exists());
}

/// `top --once` against nothing: one clear line and exit status 2, no panic.
#[test]
fn top_without_a_host_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let none = dir.path().join("none.sock");
    let out = memvisor(&["top", "--once", "--host-sock", none.to_str().unwrap()]);
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no memvisor host is listening at") && err.contains("none.sock"),
        "{err}"
    );
}
