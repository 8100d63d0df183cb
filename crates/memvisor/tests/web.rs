//! The host's live page in a real browser: headless Chromium loads it from a running two-VM
//! host, the charts have points for both VMs, a VM stopped through the API shows as exited, and
//! a screenshot is kept (`target/tmp/host-web.png`).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MEMVISOR: &str = env!("CARGO_BIN_EXE_memvisor");

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
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
    let kernel = dir.path().join("spin.elf");
    std::fs::write(
        &kernel,
        memvisor_boot::test_utils::make_elf(0x10_0000, &[0xeb, 0xfe], Some(0x10_0000)),
    )
    .unwrap();
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
    let mut child = Command::new(MEMVISOR)
        .args(["host", "--config"])
        .arg(&config)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let host = Kill(child);
    let mut lines = BufReader::new(stderr).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("the host prints where its page is")
            .unwrap();
        eprintln!("{line}");
        if let Some(u) = line.split("live page on ").nth(1) {
            break u.trim().to_owned();
        }
    };
    std::thread::spawn(move || lines.for_each(|l| eprintln!("{}", l.unwrap_or_default())));
    let sock = dir.path().join("host.state/host.sock");
    // A few ticks of history first.
    let t = Instant::now();
    loop {
        let history = memvisor_api::HostRequest::History { since: 0.0 };
        let h = memvisor_api::HostClient::new(&sock)
            .send(&history)
            .unwrap()
            .body;
        let n = serde_json::from_str::<Vec<serde_json::Value>>(&h)
            .unwrap()
            .len();
        if n >= 5 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "no history: {h}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let page = dom(&url, 3000);
    for id in ["host", "split", "vm-a", "vm-b"] {
        let points: u32 = attr(&page, id, "data-points")
            .unwrap_or_else(|| panic!("no #{id} in the page: {page}"))
            .parse()
            .unwrap();
        assert!(points > 0, "#{id} has no points");
    }
    assert_eq!(attr(&page, "vm-a", "data-state"), Some("running"));

    let client = memvisor_api::HostClient::new(&sock);
    if let Err(e) = client.stop("a") {
        panic!("{e}");
    }
    let t = Instant::now();
    loop {
        let v = client
            .send(&memvisor_api::HostRequest::Vm("a".into()))
            .unwrap()
            .body;
        if v.contains("\"state\":\"exited\"") {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{v}");
        std::thread::sleep(Duration::from_millis(100));
    }
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
    let mut child = Command::new(MEMVISOR)
        .args(["host", "--config"])
        .arg(&config)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let _host = Kill(child);
    let addr = BufReader::new(stderr)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| {
            l.split("live page on http://")
                .nth(1)
                .map(|a| a.trim_end_matches('/').to_owned())
        })
        .unwrap();
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
