//! Tests of `config.rs`: a full config, defaults, each key's checks, and errors that name the
//! file, the line and the key. (Here rather than in `config.rs`, which would pass 900 lines.)

use super::*;

fn parse(text: &str) -> Result<HostConfig, String> {
    HostConfig::parse(Path::new("/etc/memvisor/host.toml"), text)
}

#[test]
fn a_full_config() {
    let c = parse(
        r#"
[host]
memory = "2G"
idle_tax = 0.5
balloon_max = 0.5
balloon_inflate = "target"
sample_period = "5s"
tick = "500ms"
keep = "10m"
state_dir = "run"
swap = "4G"

[[vm]]
name = "a"
mem = "512M"
min = "128M"
shares = 2000
workload = "mapreduce"
disks = ["data.img,id=data", "/abs/swap.img,ro"]
balloon = true

[[vm]]
name = "b"
mem = 268435456
"#,
    )
    .unwrap();
    assert_eq!(c.memory, 2 << 30);
    assert_eq!(c.idle_tax, 0.5);
    assert_eq!(c.balloon_max, 0.5);
    assert_eq!(parse("").unwrap().balloon_max, 0.65, "ESX's");
    assert_eq!(c.balloon_inflate, BalloonInflate::Target);
    assert_eq!(parse("").unwrap().balloon_inflate, BalloonInflate::Deficit);
    assert_eq!(c.sample_period, Duration::from_secs(5));
    assert_eq!(c.tick, Duration::from_millis(500));
    assert_eq!(c.keep, Duration::from_secs(600));
    assert_eq!(c.state_dir, Path::new("/etc/memvisor/run"));
    assert_eq!(c.api_sock, Path::new("/etc/memvisor/run/host.sock"));
    assert_eq!(c.swap, Some(4 << 30));
    assert_eq!(c.vms.len(), 2);
    assert_eq!(
        c.vms[0].disks,
        vec!["/etc/memvisor/data.img,id=data", "/abs/swap.img,ro"]
    );
    assert_eq!(
        (c.vms[1].mem, c.vms[1].shares, c.vms[1].min),
        (256 << 20, 1000, 0)
    );
}

#[test]
fn balancing_is_the_balloon_unless_hd2_is_asked_for() {
    let c = parse("[host]\nmemory = \"4G\"\n").unwrap();
    assert_eq!(
        (c.balancing, c.gap_idle),
        (Balancing::Balloon, Duration::from_secs(10))
    );
    let c = parse("[host]\nmemory = \"4G\"\nbalancing = \"hd2\"\ngap_idle = \"3s\"\n").unwrap();
    assert_eq!(
        (c.balancing, c.gap_idle),
        (Balancing::Hd2, Duration::from_secs(3))
    );
}

#[test]
fn pool_compression_and_chunk_size() {
    let c = parse(
        "[host]\nmemory = \"4G\"\npool = \"256M\"\npool_compress = \"lz4\"\npool_chunk = \"64K\"\n",
    )
    .unwrap();
    assert_eq!(
        (c.pool_compress, c.pool_chunk),
        (PoolCompress::Lz4, 64 << 10)
    );
    let c = parse("[host]\nmemory = \"4G\"\npool = \"256M\"\n").unwrap();
    assert_eq!(
        (c.pool_compress, c.pool_chunk),
        (PoolCompress::None, 2 << 20)
    );
    for (text, words) in [
        (
            "pool = \"1M\"\npool_chunk = \"2M\"",
            "larger than the 1048576-byte pool",
        ),
        (
            "pool_chunk = \"6000\"",
            "6000 is not a whole number of 4 KiB pages",
        ),
        ("pool_chunk = 0", "0 is not a size"),
        ("pool_compress = \"lzma\"", "lzma"),
    ] {
        let e = parse(&format!("[host]\nmemory = \"4G\"\n{text}\n")).unwrap_err();
        assert!(e.starts_with("/etc/memvisor/host.toml: "), "{e}");
        assert!(e.contains(words), "{text}: {e}");
    }
}

#[test]
fn metrics_addr_is_loopback_unless_an_address_is_spelled_out() {
    let ok = |s: &str| parse_listen_addr("metrics_addr", s).unwrap().to_string();
    assert_eq!(ok("9464"), "127.0.0.1:9464");
    assert_eq!(ok(":9464"), "127.0.0.1:9464");
    assert_eq!(ok("localhost:9464"), "127.0.0.1:9464");
    assert_eq!(ok("127.0.0.1:9464"), "127.0.0.1:9464");
    assert_eq!(ok("0.0.0.0:9464"), "0.0.0.0:9464");
    assert_eq!(ok("[::1]:9464"), "[::1]:9464");
    assert_eq!(ok("10.1.2.3:80"), "10.1.2.3:80");
    for (bad, words) in [
        ("", "empty"),
        ("prometheus.lan:9464", "host name"),
        ("127.0.0.1", "address and port"),
        ("127.0.0.1:70000", "not a port"),
        (":x", "not a port"),
        ("::1:9464", "brackets"),
        ("99999", "not a port"),
    ] {
        let e = parse_listen_addr("metrics_addr", bad).unwrap_err();
        assert!(e.contains(words), "{bad}: {e}");
    }
    let c = parse("[host]\nmetrics_addr = \":9100\"\n").unwrap();
    assert_eq!(c.metrics_addr, Some("127.0.0.1:9100".parse().unwrap()));
    assert_eq!(parse("").unwrap().metrics_addr, None);
}

#[test]
fn errors_name_the_file_the_line_and_the_key() {
    for (text, line, words) in [
        ("[host]\nmemory = \"12Q\"\n", 2, "not a size"),
        ("[host]\nidle_tax = 1.5\n", 2, "idle_tax"),
        ("[host]\nballoon_max = 0\n", 2, "balloon_max 0"),
        ("[host]\nballoon_max = 1.2\n", 2, "balloon_max 1.2"),
        ("[host]\nballoon_inflate = \"all\"\n", 2, "expected `deficit` or `target`"),
        ("[host]\ntick = \"1ms\"\n", 2, "tick"),
        ("[host]\nkeep = \"30d\"\n", 2, "keep"),
        ("[host]\nkeep = \"500ms\"\n", 2, "keep"),
        ("[host]\ncolour = 1\n", 2, "colour"),
        ("[[vm]]\nname = \"a\"\nmem = \"512M\"\nlimit = 3\n", 4, "limit"),
        ("[[vm]]\nname = \"a\"\n", 1, "mem"),
        (
            "[host]\nmemory=\"1G\"\n\n[[vm]]\nname = \"a\"\nmem = \"512M\"\nmin = \"1G\"\n",
            7,
            "min",
        ),
        (
            "[host]\nmemory=\"1G\"\n[[vm]]\nname=\"a\"\nmem=\"64M\"\n[[vm]]\nname=\"a\"\nmem=\"64M\"\n",
            7,
            "second VM",
        ),
        ("[host\n", 1, "TOML"),
        ("[host]\nweb_addr = \"everywhere\"\n", 2, "web_addr"),
        ("[host]\nmetrics_addr = \"metrics.example:9464\"\n", 2, "host name"),
        ("[host]\nmetrics_addr = \"127.0.0.1:http\"\n", 2, "not a port"),
        ("[host]\nmetrics_addr = 9464\n", 2, "metrics_addr"),
        ("[host]\nmemory = \"1G\"\nbalancing = \"fast\"\n", 3, "balancing 'fast'"),
        ("[host]\ngap_idle = \"5h\"\n", 2, "gap_idle"),
    ] {
        let e = parse(text).unwrap_err();
        assert!(e.starts_with("/etc/memvisor/host.toml: "), "{e}");
        assert!(e.contains(&format!("line {line}")), "{text:?}: {e}");
        assert!(e.contains(words), "{text:?}: {e}");
    }
}

#[test]
fn load_lists_every_problem_with_its_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("here.img"), [0u8; 4096]).unwrap();
    let config = dir.path().join("host.toml");
    std::fs::write(
        &config,
        r#"[host]
memory = "1G"
swap = "10G"

[[vm]]
name = "a"
mem = "256M"
disks = ["here.img,id=data", "gone.img,id=swap"]

[[vm]]
name = "a"
mem = "64M"

[[vm]]
name = "k"
mem = "64M"
kernel = "no-such-kernel.elf"

[[vm]]
name = "big"
mem = "2G"
min = "1010M"
"#,
    )
    .unwrap();
    let e = HostConfig::load(&config).unwrap_err();
    let lines: Vec<&str> = e.lines().collect();
    let file = config.display().to_string();
    assert_eq!(lines.len(), 4, "{e}");
    assert!(
        lines[0].starts_with(&format!(
            "{file}: line 11: [[vm]] name: a second VM named 'a'"
        )),
        "{e}"
    );
    assert!(
        lines[1].starts_with(&format!("{file}: line 8: [[vm]] disks: vm 'a': disk ")),
        "{e}"
    );
    assert!(lines[1].contains("gone.img does not exist"), "{e}");
    assert!(
        lines[2].starts_with(&format!("{file}: line 17: [[vm]] kernel: vm 'k': kernel ")),
        "{e}"
    );
    assert!(
        lines[3].starts_with(&format!(
            "{file}: line 22: [[vm]] min: vm 'big' can never be admitted"
        )),
        "{e}"
    );
    assert!(lines[3].contains("bytes short"), "{e}");
    // Nothing was made: not even the state directory.
    assert!(!dir.path().join("host.state").exists());
}

#[test]
fn a_pool_the_budget_or_the_host_cannot_give_is_refused_in_one_line() {
    for (text, words) in [
        (
            "[host]\nmemory = \"1G\"\npool = \"1G\"\n",
            "leaves nothing of the memory budget",
        ),
        (
            "[host]\nmemory = \"200T\"\npool = \"100T\"\n",
            "bytes of memory this host has available",
        ),
    ] {
        let e = parse(text).unwrap_err();
        assert!(
            e.starts_with("/etc/memvisor/host.toml: [host] pool "),
            "{e}"
        );
        assert!(e.contains(words) && !e.contains('\n'), "{text:?}: {e}");
    }
}
