//! The host's live page in a real browser: headless Chromium loads it from a running two-VM
//! host, the charts have points for both VMs, a VM stopped through the API shows as exited, and
//! a screenshot is kept (`target/tmp/host-web.png`).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::{host_command, ok, poll, spin_kernel, Proc};

/// Starts `memvisor host --config CONFIG` with its stderr piped; returns it with the address
/// of its live page, which it prints there.
fn start_host(config: &Path) -> (Proc, String) {
    let host = Proc::spawn(host_command(config).stderr(Stdio::piped()));
    let line = host.stderr_line(Duration::from_secs(60), |l| l.contains("live page on "));
    let url = line
        .split("live page on ")
        .nth(1)
        .unwrap()
        .trim()
        .to_owned();
    (host, url)
}

/// What Chromium renders of `url` after `ms` of virtual time (the page polls every second).
fn dom(url: &str, ms: u32) -> String {
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            &format!("--virtual-time-budget={ms}"),
            "--dump-dom",
            url,
        ])
        .output()
        .expect("chromium runs (scripts/setup-host.sh installs it)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of attribute `attr` on the element with id `id` in `dom`.
fn attr<'a>(dom: &'a str, id: &str, attr: &str) -> Option<&'a str> {
    let at = dom.find(&format!("id=\"{id}\""))?;
    let tag_start = dom[..at].rfind('<')?;
    let tag = &dom[tag_start..tag_start + dom[tag_start..].find('>')?];
    let key = format!("{attr}=\"");
    let v = &tag[tag.find(&key)? + key.len()..];
    Some(&v[..v.find('"')?])
}

#[test]
fn the_live_page_shows_both_vms_and_a_stopped_one() {
    let dir = tempfile::tempdir().unwrap();
    let kernel = spin_kernel(dir.path());
    let config = dir.path().join("host.toml");
    let vm = |name: &str| {
        format!(
            "[[vm]]\nname = \"{name}\"\nmem = \"64M\"\nkernel = \"{}\"\nballoon = true\n",
            kernel.display()
        )
    };
    std::fs::write(
        &config,
        format!(
            "[host]\nmemory = \"512M\"\nswap = \"1G\"\ntick = \"200ms\"\nweb_addr = \"127.0.0.1:0\"\n{}{}",
            vm("a"),
            vm("b")
        ),
    )
    .unwrap();
    let (host, url) = start_host(&config);
    let client = memvisor_api::HostClient::new(dir.path().join("host.state/host.sock"));
    // A few ticks of history first.
    poll(
        "history",
        Duration::from_secs(20),
        Duration::from_millis(100),
        || ok(client.history(0.0)),
        |h| h.len() >= 5,
    );
    let page = dom(&url, 3000);
    for id in ["host", "split", "vm-a", "vm-b"] {
        let points: u32 = attr(&page, id, "data-points")
            .unwrap_or_else(|| panic!("no #{id} in the page: {page}"))
            .parse()
            .unwrap();
        assert!(points > 0, "#{id} has no points");
    }
    assert_eq!(attr(&page, "vm-a", "data-state"), Some("running"));

    ok(client.stop("a"));
    poll(
        "a exited",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || ok(client.vm("a")),
        |v| v.state == memvisor_api::HostVmState::Exited,
    );
    let page = dom(&url, 3000);
    assert_eq!(attr(&page, "vm-a", "data-state"), Some("exited"));
    assert_eq!(attr(&page, "vm-b", "data-state"), Some("running"));
    assert!(page.contains("asked to stop"), "the event is listed");
    assert!(
        page.contains("stopped by signal 15"),
        "what the exit means, in words"
    );

    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("host-web.png");
    let st = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1400,1000",
            "--virtual-time-budget=3000",
        ])
        .arg(format!("--screenshot={}", shot.display()))
        .arg(&url)
        .output()
        .unwrap();
    assert!(st.status.success());
    assert!(std::fs::metadata(&shot).unwrap().len() > 10_000);
    eprintln!("screenshot: {}", shot.display());
    drop(host);
}

#[test]
fn the_page_only_reads() {
    // The web port refuses every method but GET, and paths outside the page and the API.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("host.toml");
    std::fs::write(
        &config,
        "[host]\nmemory = \"256M\"\nswap = \"1G\"\nweb_addr = \"127.0.0.1:0\"\n",
    )
    .unwrap();
    let (_host, url) = start_host(&config);
    let addr = url
        .strip_prefix("http://")
        .unwrap()
        .trim_end_matches('/')
        .to_owned();
    let ask = |req: &str| {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    assert!(ask("GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
    assert!(ask("GET /uplot.js HTTP/1.1\r\n\r\n").contains("uPlot"));
    assert!(ask("GET /api/host HTTP/1.1\r\n\r\n").contains("budget_bytes"));
    assert!(
        ask("POST /api/vms HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}").starts_with("HTTP/1.1 405")
    );
    assert!(ask("GET /api/vms/x/stop HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
    assert!(ask("GET /etc/passwd HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
    assert!(ask("garbage\r\n\r\n").starts_with("HTTP/1.1 400"));
}
