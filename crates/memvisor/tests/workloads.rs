//! End-to-end tests of the guest kit's memory workloads: disks built with `memvisor mkdisk`, each
//! workload run with tiny sizes on memvisor (and on QEMU where it matters), the RESULT lines
//! checked; `integrity` must find 0 mismatches while the guest swaps and evicts, and while QEMU's
//! balloon is inflated and deflated under it.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{
    disk_spec, log, memvisor, memvisor_line, mkdisk_data, mkdisk_swap, Proc, ResultLine, TestVm,
    MEMVISOR,
};

/// A data disk with `files` (NAME:SIZE,...) and a swap disk, in a temporary directory.
struct Disks {
    dir: tempfile::TempDir,
}

impl Disks {
    fn new(files: &str, seed: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data.img");
        mkdisk_data(data, "96M", &["--files", files, "--seed", seed]);
        mkdisk_swap(dir.path().join("swap.img"), "96M");
        Disks { dir }
    }

    fn args(&self) -> Vec<String> {
        let p = |n: &str| self.dir.path().join(n);
        vec![
            "--disk".into(),
            disk_spec(&p("data.img"), "data"),
            "--disk".into(),
            disk_spec(&p("swap.img"), "swap"),
        ]
    }
}

/// Runs a workload; returns the output after checking the exit status (1 = guest success).
fn run(
    hypervisor: &str,
    mem: &str,
    vcpus: &str,
    disks: &Disks,
    workload: &str,
    cmdline: &str,
) -> Output {
    let mut args: Vec<String> = [
        "run",
        "--hypervisor",
        hypervisor,
        "--mem",
        mem,
        "--vcpus",
        vcpus,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(disks.args());
    args.extend([
        "--workload".into(),
        workload.into(),
        "--cmdline".into(),
        cmdline.into(),
    ]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = memvisor(&refs);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{workload} on {hypervisor} did not succeed"
    );
    out
}

/// The first RESULT line of `workload` with `phase=PHASE`.
fn result(out: &Output, workload: &str, phase: &str) -> ResultLine {
    ResultLine::find(&common::stdout(out), workload, phase)
}

/// The final RESULT line of `workload`, which must say `ok=1`.
fn done_ok(out: &Output, workload: &str) -> ResultLine {
    let line = result(out, workload, "done");
    assert_eq!(line.u64("ok"), 1, "{line}");
    line
}

#[test]
fn mkdisk_bad_input_gets_one_line_and_status_2() {
    let dir = tempfile::tempdir().unwrap();
    let existing = dir.path().join("exists.img");
    std::fs::write(&existing, b"x").unwrap();
    let new = dir.path().join("new.img");
    let (e, n) = (existing.to_str().unwrap(), new.to_str().unwrap());
    for (line, needle) in [
        (format!("data --out {n} --size 12X"), "12X"),
        (format!("data --out {n} --size 1000"), "4 KiB"),
        (
            format!("data --out {n} --size 1M --files big:2M"),
            "disk is",
        ),
        (format!("data --out {n} --size 1M --files seq"), "NAME:SIZE"),
        (
            format!("data --out {n} --size 1M --files a:1K,a:1K"),
            "twice",
        ),
        (format!("data --out {e} --size 1M"), "--force"),
        (format!("swap --out {e} --size 1M"), "--force"),
        (format!("swap --out {n} --size 4K"), "no slot"),
    ] {
        let out = memvisor_line(&format!("mkdisk {line}"));
        assert_eq!(out.status.code(), Some(2), "{line}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{line}: {err}");
        assert!(err.contains(needle), "{line}: {err}");
        assert!(!new.exists(), "{line} wrote a file");
    }
    assert_eq!(std::fs::read(&existing).unwrap(), b"x");
    // --force overwrites.
    let out = memvisor(&["mkdisk", "swap", "--out", e, "--size", "1M", "--force"]);
    assert!(out.status.success());
}

#[test]
fn integrity_holds_while_the_guest_swaps_and_evicts_on_memvisor() {
    let disks = Disks::new("", "3");
    let out = run(
        "memvisor",
        "32M",
        "1",
        &disks,
        "integrity",
        "anon_mb=32 file_mb=8 rounds=2 seed=9",
    );
    let line = done_ok(&out, "integrity");
    assert_eq!(line.u64("mismatches"), 0);
    assert!(
        line.u64("pswpout") > 1000,
        "the guest must really swap: {line}"
    );
    assert!(line.u64("pswpin") > 1000, "{line}");
    assert!(
        line.u64("pgsteal_file") > 1000,
        "the page cache must really evict: {line}"
    );
    assert!(
        line.u64("pgpgout") > 0 && line.u64("readahead") > 0,
        "{line}"
    );
}

#[test]
fn integrity_runs_one_task_per_vcpu() {
    let disks = Disks::new("", "3");
    let out = run(
        "memvisor",
        "32M",
        "2",
        &disks,
        "integrity",
        "anon_mb=16 file_mb=4 rounds=1",
    );
    let line = done_ok(&out, "integrity");
    assert_eq!(line.u64("cpus"), 2);
    assert!(line.u64("pswpout") > 0, "{line}");
    for cpu in ["0", "1"] {
        let l = ResultLine::all(&common::stdout(&out))
            .into_iter()
            .find(|l| l.get("phase") == Some("cpu") && l.get("cpu") == Some(cpu))
            .unwrap_or_else(|| panic!("no per-cpu line for cpu {cpu}"));
        assert_eq!(l.u64("mismatches"), 0, "{l}");
        assert_eq!(l.u64("ok"), 1, "{l}");
    }
}

/// A minimal QMP client: one command per line, replies read until `return` or `error`.
struct Qmp {
    w: UnixStream,
    r: BufReader<UnixStream>,
}

impl Qmp {
    fn connect(path: &Path) -> Qmp {
        let deadline = Instant::now() + Duration::from_secs(10);
        let s = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(e) => panic!("QMP socket {}: {e}", path.display()),
            }
        };
        let mut q = Qmp {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        };
        let mut greeting = String::new();
        q.r.read_line(&mut greeting).unwrap();
        assert!(greeting.contains("QMP"), "{greeting}");
        q.cmd(r#"{"execute":"qmp_capabilities"}"#);
        q
    }

    fn cmd(&mut self, json: &str) -> String {
        writeln!(self.w, "{json}").unwrap();
        loop {
            let mut line = String::new();
            assert!(self.r.read_line(&mut line).unwrap() > 0, "QMP closed");
            if line.contains("\"return\"") {
                return line;
            }
            assert!(!line.contains("\"error\""), "{json}: {line}");
        }
    }

    /// Sets the balloon target and waits until the guest reaches it (`actual`).
    fn balloon(&mut self, bytes: u64) {
        self.cmd(&format!(
            r#"{{"execute":"balloon","arguments":{{"value":{bytes}}}}}"#
        ));
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let r = self.cmd(r#"{"execute":"query-balloon"}"#);
            if r.contains(&format!("\"actual\": {bytes}")) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "balloon did not reach {bytes}: {r}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn integrity_holds_on_qemu_while_the_balloon_inflates_and_deflates() {
    let disks = Disks::new("", "3");
    let sock = disks.dir.path().join("qmp.sock");
    let child = spawn(
        &[
            &["run", "--hypervisor", "qemu", "--balloon", "--mem", "64M"][..],
            &["--qmp-sock", sock.to_str().unwrap()],
            &disks.args().iter().map(String::as_str).collect::<Vec<_>>()[..],
            &["--workload", "integrity"],
            &["--cmdline", "anon_mb=24 file_mb=12 rounds=2 secs=8"],
        ]
        .concat(),
        &sock,
    );
    let mut qmp = Qmp::connect(&sock);
    // Squeeze the guest to 24 MiB: with 36 MiB of working set it has to swap.
    qmp.balloon(24 << 20);
    qmp.cmd(
        r#"{"execute":"qom-set","arguments":{"path":"/machine/peripheral-anon/device[1]","property":"guest-stats-polling-interval","value":1}}"#,
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    let stats = loop {
        let r = qmp.cmd(
            r#"{"execute":"qom-get","arguments":{"path":"/machine/peripheral-anon/device[1]","property":"guest-stats"}}"#,
        );
        if !r.contains("\"stat-total-memory\": 0") && r.contains("stat-total-memory") {
            break r;
        }
        assert!(Instant::now() < deadline, "no guest stats: {r}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        stats.contains("stat-free-memory") && stats.contains("stat-disk-caches"),
        "{stats}"
    );
    std::thread::sleep(Duration::from_millis(1500));
    qmp.balloon(64 << 20);
    let out = child.finish();
    log(&["(qemu integrity with balloon)"], &out);
    assert_eq!(out.status.code(), Some(1));
    let line = done_ok(&out, "integrity");
    assert_eq!(line.u64("mismatches"), 0, "{line}");
    assert!(line.u64("balloon_inflated") >= 10000, "{line}");
    assert!(line.u64("balloon_deflated") >= 10000, "{line}");
    assert!(line.u64("balloon_stats_sent") > 0, "{line}");
    assert!(line.u64("balloon_reported_chunks") > 0, "{line}");
    assert!(
        line.u64("pswpout") > 0,
        "squeezed by the balloon, the guest swaps: {line}"
    );
}

/// `memvisor ctl --api-sock SOCK ARGS...`, its stdout.
fn ctl(sock: &Path, args: &[&str]) -> String {
    let out = memvisor(&[&["ctl", "--api-sock", sock.to_str().unwrap()], args].concat());
    assert!(out.status.success(), "ctl {args:?}: {out:?}");
    common::stdout(&out)
}

/// Waits until memvisor's balloon device reports `pages` pages held by the guest.
fn wait_balloon(sock: &Path, pages: u64) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let stats = ctl(sock, &["stats"]);
        let s: memvisor_api::VmStats = serde_json::from_str(&stats).unwrap();
        if s.balloon.as_ref().map(|b| b.actual_pages) == Some(pages) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "balloon never held {pages} pages: {stats}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn integrity_holds_on_memvisor_while_its_balloon_inflates_and_deflates() {
    let disks = Disks::new("", "3");
    let sock = disks.dir.path().join("api.sock");
    let disks = disks.args();
    let vm = TestVm::start(
        &sock,
        &[
            &["--balloon", "--mem", "64M"],
            &disks.iter().map(String::as_str).collect::<Vec<_>>()[..],
            &["--workload", "integrity"],
            &["--cmdline", "anon_mb=24 file_mb=12 rounds=2 secs=6"],
        ]
        .concat(),
    );
    // 40 MiB into the balloon leaves 24 MiB for 36 MiB of working set.
    ctl(&sock, &["balloon", "40M"]);
    wait_balloon(&sock, 10240);
    std::thread::sleep(Duration::from_millis(1000));
    ctl(&sock, &["balloon", "0"]);
    wait_balloon(&sock, 0);
    let out = vm.finish();
    log(&["(memvisor integrity with balloon)"], &out);
    assert_eq!(out.status.code(), Some(1));
    let line = done_ok(&out, "integrity");
    assert_eq!(line.u64("mismatches"), 0, "{line}");
    assert!(line.u64("balloon_inflated") >= 10240, "{line}");
    assert!(line.u64("balloon_deflated") >= 10240, "{line}");
    assert!(
        line.u64("pswpout") > 0,
        "squeezed by the balloon, the guest swaps: {line}"
    );
}

/// `alloc` rounds of `OOM_MB` MiB in a 64 MiB guest whose balloon target leaves it 8 MiB.
const OOM_MB: u64 = 32;
const OOM_CMDLINE: &str = "mb=32 rounds=40 balloon_holdoff_ms=60000";

/// Spawns `memvisor ARGS` with its stdout and stderr read; waits until `sock` exists.
fn spawn(args: &[&str], sock: &Path) -> Proc {
    let mut cmd = Command::new(MEMVISOR);
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = Proc::spawn(&mut cmd);
    child.wait_for_file(sock);
    child
}

/// Spawns `memvisor run --balloon` with the `alloc` workload of [`OOM_CMDLINE`] and `extra`
/// arguments; waits until `sock` exists.
fn spawn_alloc_past_the_balloon(extra: &[&str], sock: &Path) -> Proc {
    let args = ["run", "--balloon", "--mem", "64M", "--workload", "alloc"];
    spawn(
        &[&args[..], &["--cmdline", OOM_CMDLINE], extra].concat(),
        sock,
    )
}

/// Checks the `alloc` run squeezed by the balloon: it completed with 0 mismatches, it deflated
/// on OOM, and it did so only while the first rounds grew (the hold-off covers the whole run):
/// at most one deflate-on-OOM (1 MiB) per MiB a round allocates, where re-inflating after each
/// one made it a few dozen per round. Returns the `done` line.
fn check_alloc_past_the_balloon(out: &Output) -> ResultLine {
    assert_eq!(out.status.code(), Some(1), "alloc did not succeed");
    let line = done_ok(out, "alloc");
    assert_eq!(line.u64("mismatches"), 0, "{line}");
    let events = line.u64("balloon_oom_deflates");
    assert!(events >= 1, "the balloon left too little: {line}");
    assert!(
        events <= OOM_MB + 1,
        "{events} deflates-on-OOM for rounds of {OOM_MB} MiB: the driver re-inflated: {line}"
    );
    assert_eq!(
        line.u64("balloon_oom_deflated"),
        line.u64("balloon_deflated"),
        "{line}"
    );
    assert_eq!(line.u64("balloon_holdoff_ms"), 60000, "{line}");
    line
}

#[test]
fn alloc_past_the_balloon_target_deflates_on_oom_once_on_memvisor() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("api.sock");
    let stats = dir.path().join("stats.json");
    let extra = [
        "--api-sock",
        sock.to_str().unwrap(),
        "--stats-json",
        stats.to_str().unwrap(),
    ];
    let child = spawn_alloc_past_the_balloon(&extra, &sock);
    ctl(&sock, &["balloon", "56M"]);
    let out = child.finish();
    log(&["(memvisor alloc past the balloon)"], &out);
    let line = check_alloc_past_the_balloon(&out);
    // The device saw the same deflates as deflates-on-OOM: each took the balloon below its
    // target.
    let s: memvisor_api::VmStats =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let b = s.balloon.expect("balloon stats");
    assert_eq!(b.target_pages, 14336, "{b:?}");
    assert_eq!(b.oom_deflates, line.u64("balloon_oom_deflates"), "{b:?}");
    assert_eq!(
        b.oom_deflated_pages,
        line.u64("balloon_oom_deflated"),
        "{b:?}"
    );
    assert_eq!(b.deflated_pages, b.oom_deflated_pages, "{b:?}");
}

#[test]
fn alloc_past_the_balloon_target_deflates_on_oom_once_on_qemu() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("qmp.sock");
    let extra = ["--hypervisor", "qemu", "--qmp-sock", sock.to_str().unwrap()];
    let child = spawn_alloc_past_the_balloon(&extra, &sock);
    let mut qmp = Qmp::connect(&sock);
    qmp.cmd(&format!(
        r#"{{"execute":"balloon","arguments":{{"value":{}}}}}"#,
        8u64 << 20
    ));
    let out = child.finish();
    log(&["(qemu alloc past the balloon)"], &out);
    check_alloc_past_the_balloon(&out);
}

fn seqread(hypervisor: &str) {
    let disks = Disks::new("seq:8M", "7");
    let out = run(hypervisor, "64M", "1", &disks, "seqread", "passes=2");
    done_ok(&out, "seqread");
    let p1 = result(&out, "seqread", "pass1");
    // 8 MiB in 128 KiB readahead windows.
    assert_eq!(p1.u64("misses"), 64, "{p1}");
    assert_eq!(p1.u64("pgpgin"), 2048, "{p1}");
    let p2 = result(&out, "seqread", "pass2");
    assert_eq!(p2.u64("misses"), 0, "the file stays cached: {p2}");
    assert_eq!(result(&out, "seqread", "done").u64("mismatches"), 0);
    // A smaller readahead window means more, smaller reads.
    let out = run(
        hypervisor,
        "64M",
        "1",
        &disks,
        "seqread",
        "passes=1 readahead_kb=16",
    );
    assert_eq!(result(&out, "seqread", "pass1").u64("misses"), 512);
}

#[test]
fn seqread_on_memvisor() {
    seqread("memvisor");
}

#[test]
fn seqread_on_qemu() {
    seqread("qemu");
}

/// `seqread then=STATE`: after its pass the guest stays idle, computes, or overwrites a file
/// bigger than its memory (so it writes dirty pages back to make room), and the file reads back
/// from the disk as last written, byte for byte. With two vCPUs, the second computes beside the
/// first in the busy states and stays parked in the idle one.
#[test]
fn seqread_then_stays_in_a_state() {
    let disks = Disks::new("seq:8M,dirty:40M", "11");
    let each = ["idle", "spin", "write"].into_iter();
    for (then, vcpus) in each.flat_map(|t| [(t, "1"), (t, "2")]) {
        let out = run(
            "memvisor",
            "32M",
            vcpus,
            &disks,
            "seqread",
            &format!("passes=1 then={then} then_secs=2 write_mb=40"),
        );
        done_ok(&out, "seqread");
        let l = result(&out, "seqread", "then");
        assert_eq!(l.get("state"), Some(then), "{l}");
        assert_eq!(l.u64("ok"), 1, "{l}");
        assert!(l.u64("ms") >= 2000, "{l}");
        assert!(l.u64("steps") > 0, "{l}");
        let beside = u64::from(vcpus == "2" && then != "idle");
        assert_eq!(l.u64("spinners"), beside, "{l}");
        assert_eq!(l.u64("spinner_steps") > 0, beside == 1, "{l}");
        if then == "write" {
            // Written back (to make room in a 32 MiB guest, and at the final sync), and
            // every page read back as its last round wrote it.
            assert!(l.u64("written_pages") > 0, "{l}");
            assert!(l.u64("pgpgout") > 0, "{l}");
            assert_eq!(l.u64("mismatches"), 0, "{l}");
        } else {
            assert_eq!(l.u64("written_pages"), 0, "{l}");
        }
    }
    let out = memvisor(&[
        "run",
        "--mem",
        "32M",
        "--disk",
        &disks.args()[1],
        "--workload",
        "seqread",
        "--cmdline",
        "passes=1 then=sleep",
    ]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stdout)
        .contains("bad argument then=sleep: expected idle, spin or write"));
}

fn alloc(hypervisor: &str) {
    let disks = Disks::new("", "1");
    let out = run(hypervisor, "64M", "1", &disks, "alloc", "mb=16 rounds=2");
    done_ok(&out, "alloc");
    for round in ["round1", "round2"] {
        let l = result(&out, "alloc", round);
        assert_eq!(l.u64("pgfault"), 4096, "{l}");
        assert_eq!(l.u64("zeroed"), 4096, "{l}");
    }
    let out = run(
        hypervisor,
        "64M",
        "1",
        &disks,
        "alloc",
        "mb=16 rounds=1 zero=0",
    );
    assert_eq!(result(&out, "alloc", "round1").u64("zeroed"), 0);
}

#[test]
fn alloc_on_memvisor() {
    alloc("memvisor");
    // One task per vCPU, one line per vCPU and round.
    let disks = Disks::new("", "1");
    let out = run("memvisor", "64M", "2", &disks, "alloc", "mb=8 rounds=1");
    assert_eq!(done_ok(&out, "alloc").u64("cpus"), 2);
    let stdout = String::from_utf8_lossy(&out.stdout);
    for cpu in ["cpu=0", "cpu=1"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.contains("phase=round1") && l.split_whitespace().any(|w| w == cpu)),
            "no round1 line for {cpu}"
        );
    }
    assert_eq!(done_ok(&out, "alloc").u64("pgfault"), 2 * 2048);
}

#[test]
fn alloc_on_qemu() {
    alloc("qemu");
}

fn memhog_and_toucher(hv: &str) {
    let disks = Disks::new("", "1");
    let out = run(hv, "64M", "1", &disks, "memhog", "mb=8 secs=1");
    let l = done_ok(&out, "memhog");
    assert!(l.u64("touches") > 2048, "{l}");
    let out = run(hv, "64M", "1", &disks, "toucher", "schedule=8:1,2:1");
    done_ok(&out, "toucher");
    assert_eq!(result(&out, "toucher", "step1").u64("ws_mb"), 8);
    assert_eq!(result(&out, "toucher", "step2").u64("pgfault"), 0);
    // lat=1: each step and the whole run report their slow touches, in order of size.
    let out = run(hv, "64M", "1", &disks, "toucher", "schedule=8:1,2:1 lat=1");
    let done = done_ok(&out, "toucher");
    let mut slow = 0;
    for l in [
        result(&out, "toucher", "step1"),
        result(&out, "toucher", "step2"),
        done.clone(),
    ] {
        assert_eq!(l.u64("slow_over_us"), 2, "{l}");
        let (p50, p99, max) = (
            l.u64("slow_p50_us"),
            l.u64("slow_p99_us"),
            l.u64("slow_max_us"),
        );
        assert!(p50 <= p99 && p99 <= max, "{l}");
        slow += l.u64("slow");
    }
    // The run's count is the steps' sum.
    assert_eq!(slow, 2 * done.u64("slow"), "{done}");
}

#[test]
fn memhog_and_toucher_complete() {
    memhog_and_toucher("memvisor");
}

#[test]
fn memhog_and_toucher_complete_on_qemu() {
    memhog_and_toucher("qemu");
}

/// `exits`: every write and every touch timed, the spreads in order, every touched word read
/// back; the scratch-register writes are harmless on both hypervisors.
fn exits(hv: &str) {
    let disks = Disks::new("", "1");
    let cmdline = "batches=20 batch=50 fault_mb=8 fault_stride=16";
    let out = run(hv, "64M", "1", &disks, "exits", cmdline);
    let done = done_ok(&out, "exits");
    assert_eq!(done.u64("errors"), 0, "{done}");
    let e = result(&out, "exits", "exits");
    assert_eq!((e.u64("exits"), e.u64("batch")), (1000, 50), "{e}");
    let (min, p50, p99) = (
        e.u64("exit_ns_min"),
        e.u64("exit_ns_p50"),
        e.u64("exit_ns_p99"),
    );
    assert!(0 < min && min <= p50 && p50 <= p99, "{e}");
    let f = result(&out, "exits", "faults");
    assert_eq!(
        (f.u64("faults"), f.u64("stride")),
        (8 * 256 / 16, 16),
        "{f}"
    );
    let (min, p50, p99) = (
        f.u64("fault_ns_min"),
        f.u64("fault_ns_p50"),
        f.u64("fault_ns_p99"),
    );
    assert!(min <= p50 && p50 <= p99 && p99 > 0, "{f}");
}

#[test]
fn exits_times_exits_and_faults() {
    exits("memvisor");
}

#[test]
fn exits_times_exits_and_faults_on_qemu() {
    exits("qemu");
}

fn gcchurn_and_kv(hv: &str) {
    let disks = Disks::new("", "1");
    let out = run(
        hv,
        "48M",
        "1",
        &disks,
        "gcchurn",
        "heap_mb=16 gen_mb=4 gens=8 live_pct=20",
    );
    let l = done_ok(&out, "gcchurn");
    let kv = |args: &str| run(hv, "48M", "1", &disks, "kv", args);
    assert_eq!(l.u64("gens"), 8);
    assert_eq!(l.u64("errors"), 0);
    for mix in ["a", "e"] {
        let out = kv(&format!("records=4000 ops=4000 mix={mix}"));
        done_ok(&out, "kv");
        let l = result(&out, "kv", "run");
        assert_eq!(l.u64("ops"), 4000, "{l}");
        assert_eq!(l.u64("errors"), 0, "{l}");
        // A latency line per operation type of the mix (a: read, update; e: insert, scan),
        // together counting every operation.
        let lat: Vec<ResultLine> = ResultLine::all(&common::stdout(&out))
            .into_iter()
            .filter(|l| l.get("workload") == Some("kv") && l.get("phase") == Some("latency"))
            .collect();
        let ops: Vec<&str> = lat.iter().map(|l| l.get("op").unwrap()).collect();
        let want = if mix == "a" {
            ["read", "update"]
        } else {
            ["insert", "scan"]
        };
        assert_eq!(ops, want, "mix {mix}");
        assert_eq!(lat.iter().map(|l| l.u64("n")).sum::<u64>(), 4000);
    }
    // Inserts made up to their bound end the run there, every one read back; paced at 500
    // operations a second, two seconds hold about 1000.
    let out = kv("records=2000 secs=30 mix=insert inserts=3000");
    done_ok(&out, "kv");
    let stdout = common::stdout(&out);
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("kv: inserts_exhausted ")),
        "{stdout}"
    );
    let l = result(&out, "kv", "run");
    assert_eq!((l.u64("inserts"), l.u64("missing")), (3000, 0), "{l}");
    let out = kv("records=2000 secs=2 mix=update target_ops_s=500");
    done_ok(&out, "kv");
    let l = result(&out, "kv", "run");
    assert!((900..=1001).contains(&l.u64("updates")), "{l}");
    assert_eq!(l.u64("ops"), l.u64("updates"), "{l}");
    // A hog beside the store: its start is marked, every second has its line, and the hog's
    // writes check out.
    let out = kv("records=4000 secs=3 mix=c hog_mb=8 hog_at=1 hog_rate_mb_s=16");
    done_ok(&out, "kv");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let start = stdout
        .lines()
        .find(|l| l.starts_with("kv: hog_start "))
        .map(ResultLine::words)
        .expect("a hog_start line");
    assert!(start.u64("t_ms") >= 1000, "{start}");
    assert_eq!(start.u64("mb"), 8, "{start}");
    assert!(stdout.lines().any(|l| l.starts_with("kv: hog_allocated ")));
    for t in ["kv: t=1s ops_s=", "kv: t=2s ops_s="] {
        assert!(stdout.lines().any(|l| l.starts_with(t)), "{t}");
    }
    let l = result(&out, "kv", "run");
    assert_eq!(l.u64("hog_mb"), 8, "{l}");
    assert!(l.u64("hog_touches") > 0, "{l}");
    assert_eq!(l.u64("hog_errors"), 0, "{l}");
    assert_eq!(l.u64("errors"), 0, "{l}");
}

#[test]
fn gcchurn_and_kv_complete() {
    gcchurn_and_kv("memvisor");
}

#[test]
fn gcchurn_and_kv_complete_on_qemu() {
    gcchurn_and_kv("qemu");
}

fn compile_and_mapreduce(hv: &str) {
    let disks = Disks::new("src:4M", "5");
    let out = run(
        hv,
        "48M",
        "1",
        &disks,
        "compile",
        "jobs=30 src_mb=4 mem_kb=256",
    );
    let l = done_ok(&out, "compile");
    assert_eq!(l.u64("mismatches"), 0);
    let out = run(
        hv,
        "48M",
        "1",
        &disks,
        "mapreduce",
        "input_mb=2 vocab=2000 mappers=2",
    );
    done_ok(&out, "mapreduce");
    let l = result(&out, "mapreduce", "reduce");
    assert_eq!(l.u64("total"), 2 * 1024 * 1024 / 8, "{l}");
}

#[test]
fn compile_and_mapreduce_complete() {
    compile_and_mapreduce("memvisor");
}

#[test]
fn compile_and_mapreduce_complete_on_qemu() {
    compile_and_mapreduce("qemu");
}

/// The parallel compressor on two vCPUs: every block compressed, written, read back from the
/// disk and decompressed to the text it was made from, with a ratio text gets; run twice on one
/// disk, the second run reuses the input and output files.
fn compress(hv: &str) {
    let disks = Disks::new("", "9");
    for _ in 0..2 {
        let out = run(
            hv,
            "48M",
            "2",
            &disks,
            "compress",
            "file_mb=4 block_kb=256 level=6",
        );
        let done = done_ok(&out, "compress");
        assert_eq!(done.u64("mismatches"), 0, "{done}");
        assert_eq!(done.u64("input_mismatches"), 0, "{done}");
        assert!(done.u64("heap_peak_kb") <= done.u64("heap_kb"), "{done}");
        let c = result(&out, "compress", "compress");
        assert_eq!(c.u64("blocks"), 16, "{c}");
        assert_eq!(c.u64("in_bytes"), 4 << 20, "{c}");
        let ratio: f64 = c.get("ratio").unwrap().parse().unwrap();
        assert!((1.8..4.0).contains(&ratio), "{c}");
        let check = result(&out, "compress", "check");
        assert_eq!(check.u64("blocks"), 16, "{check}");
        assert_eq!(check.u64("bytes"), 4 << 20, "{check}");
    }
}

#[test]
fn compress_checks_its_output_on_memvisor() {
    compress("memvisor");
}

#[test]
fn compress_checks_its_output_on_qemu() {
    compress("qemu");
}

#[test]
fn bad_workload_arguments_fail_with_a_message() {
    let disks = Disks::new("", "1");
    for (workload, cmdline, needle) in [
        ("alloc", "mb=abc", "bad argument mb=abc"),
        ("memhog", "mb=4096", "from 1 to 2048"),
        ("toucher", "schedule=8", "bad argument schedule=8"),
        ("toucher", "lat=2", "bad argument lat=2"),
        ("toucher", "lat=1 lat_us=0", "bad argument lat_us=0"),
        ("kv", "mix=z", "bad argument mix=z"),
        ("integrity", "swappiness=300", "swappiness"),
        ("compress", "block_kb=900x", "bad argument block_kb=900x"),
        ("compress", "block_kb=902", "expected a multiple of 4"),
        ("compress", "level=0", "bad argument level=0"),
        ("compress", "file=x out=x", "name the same file"),
        ("exits", "fault_stride=0", "bad argument fault_stride=0"),
        ("exits", "fault_mb=64", "only"),
    ] {
        let mut args = vec![
            "run",
            "--mem",
            "48M",
            "--workload",
            workload,
            "--cmdline",
            cmdline,
        ];
        let d = disks.args();
        args.extend(d.iter().map(String::as_str));
        let out = memvisor(&args);
        assert_eq!(out.status.code(), Some(3), "{workload} {cmdline}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains(needle), "{workload} {cmdline}: {stdout}");
    }
}
