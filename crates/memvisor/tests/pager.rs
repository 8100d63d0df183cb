//! The pager end to end: a 512 MiB guest whose working set is larger than its limit verifies every
//! byte of its memory while the limit moves through the API; host RSS of guest RAM, read from
//! `/proc/PID/smaps`, stays within the limit.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use flaky_disk::FlakyDisk;
use memvisor_api::{VmInfo, VmState, VmStats};

#[path = "../../pager/tests/common/flaky_disk.rs"]
mod flaky_disk;

mod common;
use common::{disk_spec, memvisor, mkdisk_data, ok, ResultLine, TestVm, MIB};

/// What RSS may exceed the limit by: installs go up to a chunk (256 pages, 1 MiB) past it before
/// they wait for reclaim, and the chunk being written (up to a chunk and a cluster) stays mapped
/// until it is recorded: about 2.1 MiB, twice that for the samples' timing.
const SLACK: u64 = 4 * MIB;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A 64 MiB data disk `data.img` in `dir`.
fn mkdisk(dir: &Path) -> PathBuf {
    mkdisk_data(dir.join("data.img"), "64M", &[])
}

/// Resident bytes of the guest RAM mapping of `pid` (the anonymous mapping of exactly `size` bytes).
///
/// Not the mapping's own `Rss:` in `smaps`: the kernel counts that by walking the page tables,
/// which under load takes 3–20 ms while the pager installs and drops pages at 100 MB/s or more,
/// so one walk can count a page dropped behind it and one installed ahead of it. The process's
/// `RssAnon` is a counter read at once; from it go the anonymous pages of every other mapping.
/// Those change little while they are walked, not nothing: what they gain between the walk and
/// the read of `RssAnon` counts as guest RAM here.
fn guest_rss(pid: u32, size: u64) -> Option<u64> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |v: &str| v.trim().trim_end_matches(" kB").parse::<u64>().ok();
    let rss_anon = status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(kib)?;
    let (mut others, mut in_guest, mut found) = (0, false, false);
    for line in smaps.lines() {
        if let Some(v) = line.strip_prefix("Size:") {
            in_guest = kib(v) == Some(size / 1024) && !found;
            found |= in_guest;
        } else if let (false, Some(v)) = (in_guest, line.strip_prefix("Anonymous:")) {
            others += kib(v)?;
        }
    }
    found.then(|| rss_anon.saturating_sub(others) * 1024)
}

/// Field `field` (in bytes) of `/proc/PID/smaps` for the guest RAM mapping of `size` bytes.
fn guest_smaps(pid: u32, size: u64, field: &str) -> Option<u64> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
    let mut in_guest = false;
    for line in smaps.lines() {
        if let Some(kb) = line.strip_prefix("Size:") {
            in_guest = kb.trim().trim_end_matches(" kB").parse::<u64>().ok() == Some(size / 1024);
        } else if let (true, Some(kb)) = (in_guest, line.strip_prefix(field)) {
            return kb
                .trim()
                .trim_end_matches(" kB")
                .parse::<u64>()
                .ok()
                .map(|k| k * 1024);
        }
    }
    None
}

/// The pager's part of `s`, which must be there.
fn pager(s: &VmStats) -> &memvisor_api::PagerStats {
    s.pager.as_ref().expect("the VM runs memvisor's pager")
}

/// The balloon's part of `s`, which must be there.
fn balloon(s: &VmStats) -> &memvisor_api::BalloonStats {
    s.balloon.as_ref().expect("the VM has a balloon")
}

#[test]
fn integrity_under_a_moving_limit_with_rss_inside_it() {
    let dir = tempfile::tempdir().unwrap();
    let disk = disk_spec(&mkdisk(dir.path()), "data");
    let t0 = Instant::now();
    let mut vm = start_serving(
        dir.path(),
        &["--mem-limit", "100M", "--disk", &disk],
        "integrity",
        "anon_mb=160 file_mb=8 rounds=3 secs=6",
    );
    // Limit schedule: 100 MiB, then 64 MiB (the pager must shrink to it), then 128 MiB.
    let schedule = [
        (Duration::from_secs(2), 64 * MIB),
        (Duration::from_secs(4), 128 * MIB),
    ];
    let mut limit = 100 * MIB;
    let mut next = 0;
    let (mut worst_over, mut worst_at, mut last_over) = (i64::MIN, Duration::ZERO, None);
    let mut samples = 0;
    let mut shrunk_to = None;
    let pid = vm.pid();
    while vm.running() {
        if next < schedule.len() && t0.elapsed() >= schedule[next].0 {
            let (_, l) = schedule[next];
            ok(vm.client().set_limit(Some(l)));
            if l < limit {
                // The pager reclaims down in chunks, serving the guest's faults in between, to a
                // watermark below the limit: wait until RSS is inside the new limit (within 10 s),
                // then hold it to that limit.
                let t = Instant::now();
                loop {
                    let rss = guest_rss(pid, 512 * MIB).unwrap_or(u64::MAX);
                    if rss <= l {
                        shrunk_to = Some(rss);
                        break;
                    }
                    assert!(
                        t.elapsed() < Duration::from_secs(10),
                        "RSS still {rss} bytes 10 s after the limit went down to {l}"
                    );
                    std::thread::sleep(Duration::from_millis(10));
                }
                eprintln!("shrunk to {l} bytes in {:?}", t.elapsed());
            }
            limit = l;
            last_over = None;
            next += 1;
        }
        if let Some(rss) = guest_rss(pid, 512 * MIB) {
            // One reading can be high by what other mappings gained while `guest_rss` read: an
            // excess counts once two readings in a row show it, for as much as the lower one.
            let over = i64::try_from(rss).unwrap() - i64::try_from(limit).unwrap();
            if let Some(last) = last_over {
                if over.min(last) > worst_over {
                    worst_over = over.min(last);
                    worst_at = t0.elapsed();
                }
            }
            last_over = Some(over);
            samples += 1;
        } else {
            last_over = None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    vm.intact("integrity");
    assert!(
        next == schedule.len(),
        "the run ended before the limit schedule did"
    );
    assert!(samples > 20, "only {samples} RSS samples");
    eprintln!("{samples} RSS samples; worst excess over the limit {worst_over} bytes at {worst_at:?}; after the shrink {shrunk_to:?}");
    assert!(
        worst_over <= i64::try_from(SLACK).unwrap(),
        "RSS exceeded the limit by {worst_over} bytes"
    );
    shrunk_to.expect("RSS sampled after the shrink");
}

/// A VM started without a limit runs on plain memory with transparent huge pages, as under
/// QEMU; the first limit takes its RAM over at run time: RSS falls inside the new limit (huge
/// pages split, so the release is real) and the guest verifies every byte of its memory.
#[test]
fn a_limit_set_at_run_time_takes_over_ram_backed_by_huge_pages() {
    let dir = tempfile::tempdir().unwrap();
    let disk = disk_spec(&mkdisk(dir.path()), "data");
    let vm = start_serving(
        dir.path(),
        &["--disk", &disk],
        "integrity",
        "anon_mb=200 file_mb=8 rounds=3 secs=8",
    );
    let pid = vm.pid();
    let t0 = Instant::now();
    while guest_rss(pid, 512 * MIB).unwrap_or(0) < 150 * MIB {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the guest never touched its memory"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = vm.stats();
    assert!(!pager(&before).attached, "no limit, no takeover");
    assert_eq!(pager(&before).counters.attaches, 0);
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if !thp.contains("[never]") {
        let huge = guest_smaps(pid, 512 * MIB, "AnonHugePages:").unwrap();
        assert!(
            huge >= 64 * MIB,
            "only {huge} bytes of huge pages before the limit"
        );
    }
    ok(vm.client().set_limit(Some(64 * MIB)));
    let t1 = Instant::now();
    loop {
        let rss = guest_rss(pid, 512 * MIB).unwrap();
        if rss <= 64 * MIB + SLACK {
            break;
        }
        assert!(
            t1.elapsed() < Duration::from_secs(10),
            "RSS still {rss} bytes after the limit of 64 MiB"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let after = vm.stats();
    assert!(pager(&after).attached);
    assert_eq!(pager(&after).counters.attaches, 1);
    assert_eq!(guest_smaps(pid, 512 * MIB, "AnonHugePages:"), Some(0));
    vm.intact("integrity");
}

/// The Swap Mapper runs on plain memory until the first limit: a VM with `--mapper` and no
/// limit is not under the pager, yet records the pages its disk reads fill as mirrors; the
/// first limit takes RAM over keeping them, reclaim drops them without a write, and the guest
/// verifies every byte while it keeps rewriting its files.
#[test]
fn the_swap_mapper_waits_for_the_first_limit_and_keeps_its_mirrors() {
    let dir = tempfile::tempdir().unwrap();
    let disk = disk_spec(&mkdisk(dir.path()), "data");
    let vm = start_serving(
        dir.path(),
        &["--mapper", "--disk", &disk],
        "integrity",
        "anon_mb=150 file_mb=40 rounds=3 secs=8",
    );
    let before = vm.stats_until("mirrors of the guest's disk reads", secs(30), |s| {
        pager(s).pages.mirrored_pages > 2000
    });
    assert!(!pager(&before).attached, "no limit, no takeover");
    assert_eq!(pager(&before).counters.attaches, 0);
    ok(vm.client().set_limit(Some(64 * MIB)));
    let after = vm.stats_until(
        "reclaim dropping mirrors after the takeover",
        secs(20),
        |s| pager(s).counters.reclaimed_mirrored > 1000,
    );
    assert!(pager(&after).attached);
    assert_eq!(pager(&after).counters.attaches, 1);
    eprintln!(
        "mirrors before the takeover {}; dropped {}, changed {}",
        pager(&before).pages.mirrored_pages,
        pager(&after).counters.reclaimed_mirrored,
        pager(&after).counters.mirrors_changed
    );
    vm.intact("integrity");
}

/// Starts `memvisor run --mem 512M FLAGS --workload WORKLOAD --cmdline CMDLINE` with an API
/// socket in `dir` and the guest's console read; returns it once the socket exists.
fn start_serving(dir: &Path, flags: &[&str], workload: &str, cmdline: &str) -> TestVm {
    let run = [
        "--mem",
        "512M",
        "--workload",
        workload,
        "--cmdline",
        cmdline,
    ];
    TestVm::start(&dir.join("api.sock"), &[&run[..], flags].concat())
}

/// Runs the toucher (its `schedule` given) under a 480 MiB limit, sampling 1000 pages every
/// `period` seconds of guest time, calls `each` with the pager's working-set figures every
/// 100 ms while it runs, and checks that it ended well: exit status 1 and every touch checked
/// right (`errors=0`).
fn toucher(period: &str, schedule: &str, mut each: impl FnMut(&memvisor_api::ActiveMemory)) {
    let dir = tempfile::tempdir().unwrap();
    let cmdline = format!("schedule={schedule}");
    let flags = ["--mem-limit", "480M", "--sample-pages", "1000"];
    let flags = [&flags[..], &["--sample-period", period]].concat();
    let mut vm = start_serving(dir.path(), &flags, "toucher", &cmdline);
    while vm.running() {
        let Some(s) = vm.stats_if_running() else {
            break;
        };
        each(&pager(&s).active);
        std::thread::sleep(Duration::from_millis(100));
    }
    let done = ResultLine::find(&vm.succeeded(), "toucher", "done");
    assert_eq!(done.get("errors"), Some("0"), "{done}");
}

/// Working-set sampling (ESX §5.3) follows what the guest touches: while it sweeps 200 MiB,
/// most sampled pages are touched; once it sweeps 16 MiB, few are, and the estimate comes down
/// more slowly than the samples do. The pages taken out and put back lose nothing: the
/// toucher's every touch is checked (`errors=0`).
#[test]
fn working_set_sampling_follows_the_touched_memory() {
    let mut busy = 0.0f64;
    let mut last = None;
    toucher(
        "0.3",
        // The schedule runs on wall-clock time and sampling periods on guest time: a second
        // phase of 12 s leaves room for 10 periods of 0.3 s when the cores are shared.
        "200:5,16:12",
        |a| {
            if a.last_sampled_pages > 0 {
                let f = a.last_touched_pages as f64 / a.last_sampled_pages as f64;
                busy = busy.max(f);
                last = Some((f, *a));
            }
        },
    );
    let (f, a) = last.expect("sampling periods completed");
    eprintln!("busiest period {busy:.2} touched; last period {f:.2}; {a:?}");
    assert!(
        busy > 0.6,
        "sweeping 200 MiB touched only {busy:.2} of the sample"
    );
    assert!(f < 0.4, "sweeping 16 MiB touched {f:.2} of the sample");
    assert!(a.periods >= 10, "{a:?}");
    assert!(a.estimate > f, "the estimate comes down slowly: {a:?}");
}

/// The first sampling period is short: with a 30 s period, a VM sweeping 200 MiB under the
/// pager has its first estimate within its 8 s run (at most 1 s of guest time after the
/// takeover), and that estimate says it is busy. The toucher checks every touch (`errors=0`).
#[test]
fn the_first_estimate_comes_before_a_long_period_ends() {
    let mut first = None;
    toucher("30", "200:8", |a| {
        if a.periods > 0 && first.is_none() {
            first = Some(*a);
        }
    });
    let a = first.expect("a period measured before the 30 s period could end");
    assert_eq!(a.periods, 1, "{a:?}");
    let f = a.last_touched_pages as f64 / a.last_sampled_pages.max(1) as f64;
    assert!(
        f > 0.6,
        "sweeping 200 MiB touched only {f:.2} of the sample: {a:?}"
    );
    assert!(a.estimate > 0.6, "{a:?}");
}

/// Sampling takes pages out and puts them back while the pager pages under a limit: the
/// integrity workload verifies every byte.
#[test]
fn integrity_holds_while_the_working_set_is_sampled_under_a_limit() {
    let s = integrity_checked(
        &["--sample-pages", "2000", "--sample-period", "0.1"],
        "anon_mb=96 file_mb=8 rounds=3",
    );
    assert!(s.counters.faults_swap > 0, "the limit made the pager swap");
    assert!(s.active.periods >= 3, "{:?}", s.active);
    assert!(s.active.last_sampled_pages > 0, "{:?}", s.active);
}

/// A swap file that cannot be reserved (a full file system) is a clear error before the guest
/// runs, never a failed write in the middle of a reclaim.
#[test]
fn a_swap_file_on_a_full_disk_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("tiny");
    std::fs::create_dir(&mnt).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1M", "tmpfs"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(
        st.success(),
        "mounting a 1 MiB tmpfs (the test runs as root)"
    );
    let swap = mnt.join("swap");
    let out = memvisor(&[
        "run",
        "--mem",
        "64M",
        "--mem-limit",
        "32M",
        "--workload",
        "boot",
        "--swap",
        swap.to_str().unwrap(),
    ]);
    let _ = Command::new("umount").arg(&mnt).status();
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("is the disk full?") && err.contains("swap"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "the guest did not start");
}

/// Starts a 512 MiB VM with a balloon that touches 300 MiB, frees it, and then holds (serving
/// the balloon); returns once the guest says it holds.
fn touched_then_idle(dir: &Path, report: bool) -> TestVm {
    let cmdline = format!("mb=300 rounds=1 hold_secs=20 report={}", u8::from(report));
    let vm = TestVm::start(
        &dir.join("b.sock"),
        &[
            "--mem",
            "512M",
            "--balloon",
            "--workload",
            "alloc",
            "--cmdline",
            &cmdline,
        ],
    );
    vm.stdout_line(Duration::from_secs(60), |line| {
        assert!(!line.contains("ok=0"), "{line}");
        line.starts_with("hold:")
    });
    vm
}

/// Polls the VM's stats until `done` holds (15 s at most).
fn wait_for(vm: &TestVm, what: &str, done: impl Fn(&VmStats) -> bool) -> VmStats {
    vm.stats_until(what, secs(15), done)
}

#[test]
fn balloon_inflation_and_free_page_reports_lower_host_rss() {
    let dir = tempfile::tempdir().unwrap();
    // Inflation: RSS falls by at least 90 % of the balloon.
    let vm = touched_then_idle(dir.path(), false);
    let pid = vm.pid();
    let before = guest_rss(pid, 512 * MIB).unwrap();
    assert!(
        before > 280 * MIB,
        "the guest's freed pages are still resident ({before})"
    );
    let target = 256 * MIB;
    ok(vm.client().set_balloon(target));
    let s = wait_for(&vm, "the balloon", |s| {
        balloon(s).actual_pages == target / 4096
    });
    let after = guest_rss(pid, 512 * MIB).unwrap();
    eprintln!(
        "balloon of {target}: RSS {before} -> {after}; {:?}",
        balloon(&s)
    );
    assert!(
        before - after >= target / 10 * 9,
        "RSS fell by {} for a balloon of {target}",
        before - after
    );
    assert_eq!(pager(&s).pages.ballooned_pages, target / 4096);
    // Deflate: the pages are the guest's again.
    ok(vm.client().set_balloon(0));
    let s = wait_for(&vm, "the deflation", |s| balloon(s).actual_pages == 0);
    assert_eq!(balloon(&s).deflated_pages, target / 4096);
    drop(vm);

    // Free page reporting: the freed 300 MiB go back to the host with no balloon target at all
    // (the guest reports 2 MiB runs, 16 of them every 100 ms).
    let vm = touched_then_idle(dir.path(), true);
    let t = Instant::now();
    let mut rss = u64::MAX;
    while t.elapsed() < Duration::from_secs(15) {
        rss = guest_rss(vm.pid(), 512 * MIB).unwrap();
        if rss < 64 * MIB {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let s = vm.stats();
    eprintln!("after free page reporting: RSS {rss}; {:?}", pager(&s));
    assert!(
        rss < 64 * MIB,
        "RSS {rss} after the guest reported its free pages"
    );
    assert!(pager(&s).counters.reported * 4096 >= 256 * MIB);
    assert_eq!(pager(&s).pages.ballooned_pages, 0);
}

/// Runs `memvisor run FLAGS --workload WORKLOAD --cmdline CMDLINE --stats-json`; checks the
/// guest succeeded and its final RESULT line says ok with no mismatches. Returns the pager's
/// counters at the end.
fn run_checked(flags: &[&str], workload: &str, cmdline: &str) -> memvisor_api::PagerStats {
    let dir = tempfile::tempdir().unwrap();
    let stats_path = dir.path().join("stats.json");
    let out = Command::new(common::MEMVISOR)
        .arg("run")
        .args(flags)
        .args(["--workload", workload, "--cmdline", cmdline])
        .arg("--stats-json")
        .arg(&stats_path)
        .env("MEMVISOR_LOG", "info")
        .output()
        .unwrap();
    let (stdout, stderr) = (common::stdout(&out), common::stderr(&out));
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    ResultLine::find(&stdout, workload, "done").assert_intact();
    assert!(
        stderr.contains("end of run:") && stderr.contains("  swap written "),
        "the summary table: {stderr}"
    );
    let text = std::fs::read_to_string(&stats_path).unwrap();
    assert_eq!(text.lines().count(), 1, "one line of JSON: {text}");
    let s: VmStats = serde_json::from_str(&text).unwrap();
    s.pager.expect("the pager's stats")
}

/// [`run_checked`] of the `integrity` workload (`cmdline`) in a 256 MiB VM limited to 48 MiB with
/// a fresh data disk, plus `flags`.
fn integrity_checked(flags: &[&str], cmdline: &str) -> memvisor_api::PagerStats {
    let dir = tempfile::tempdir().unwrap();
    let disk = disk_spec(&mkdisk(dir.path()), "data");
    let args = ["--mem", "256M", "--mem-limit", "48M", "--disk", &disk];
    run_checked(&[&args[..], flags].concat(), "integrity", cmdline)
}

/// Two vCPUs fault, write and verify their own working sets at once while the pager evicts under
/// them (clock victims): every byte checked, both vCPUs done.
#[test]
fn integrity_on_two_vcpus_under_a_limit_with_clock_victims() {
    let c = integrity_checked(
        &["--vcpus", "2", "--victims", "clock"],
        "anon_mb=40 file_mb=4 rounds=2",
    )
    .counters;
    assert!(c.reclaimed_written > 0, "nothing was swapped");
    assert!(c.faults_swap > 0, "nothing came back from swap");
}

/// Free page reporting while the guest works: the driver does not wait for the device, so the
/// device releases reported runs (16 KiB each, a report on every tick) while the vCPU writes
/// and verifies its working set around them, and the guest takes the runs back as soon as a
/// poll finds them returned. Under a limit (the pager evicting, faults on reported pages served
/// as zero pages) and without one (plain memory, released with `MADV_DONTNEED`): every byte the
/// guest wrote is checked.
#[test]
fn integrity_holds_while_free_page_reports_complete_behind_the_guest() {
    // A 128 MiB guest whose page cache is dropped every other round: the file's pages are
    // freed, reported and allocated again while reports are in flight.
    let cmdline = "anon_mb=64 file_mb=24 rounds=4 secs=6 report_order=2 report_ms=0";
    let dir = tempfile::tempdir().unwrap();
    let disk = disk_spec(&mkdisk(dir.path()), "data");
    let run = |limit: Option<&str>| {
        let mut args = vec!["--mem", "128M", "--balloon", "--disk", &disk];
        if let Some(l) = limit {
            args.extend_from_slice(&["--mem-limit", l]);
        }
        run_checked(&args, "integrity", cmdline).counters
    };
    let c = run(Some("48M"));
    eprintln!(
        "under a limit: reported {}, faults on released pages {}, reported pages taken back {}, swapped {}",
        c.reported, c.faults_released, c.false_reads_avoided, c.reclaimed_written
    );
    assert!(c.reported > 5_000, "the guest reported its free pages");
    assert!(c.reclaimed_written > 0, "while the pager evicted");
    // Plain memory: the reports are released from huge pages.
    let c = run(None);
    eprintln!("no limit: reported {}", c.reported);
    assert!(c.reported > 5_000, "the guest reported its free pages");
}

/// The Swap Mapper (with the Preventer on every write): a guest whose page cache mirrors its
/// disk, under a limit, verifies every byte while its file pages leave without swap writes and
/// refault from the image, and while it keeps rewriting its files.
#[test]
fn swap_mapper_drops_mirrored_pages_and_refaults_them_from_the_image() {
    let c = integrity_checked(
        &["--mapper", "--preventer=always"],
        "anon_mb=48 file_mb=40 rounds=3",
    )
    .counters;
    eprintln!(
        "mirrored dropped {}, image faults {}, written {}",
        c.reclaimed_mirrored, c.faults_image, c.reclaimed_written
    );
    assert!(
        c.reclaimed_mirrored > 1000,
        "file pages left without a write"
    );
    assert!(c.faults_image > 0, "and came back from the image");
}

/// Runs `seqread passes=3` over a 96 MiB file in a VM of `mem` limited to `limit`, with the
/// Swap Mapper; returns its page-cache statistics and pager counters.
fn ghost_run(mem: &str, limit: &str) -> (memvisor_api::PatternStats, memvisor_api::PagerCounters) {
    let dir = tempfile::tempdir().unwrap();
    let img = mkdisk_data(
        dir.path().join("data.img"),
        "128M",
        &["--files", "seq:96M", "--seed", "3"],
    );
    let disk = disk_spec(&img, "data");
    let p = run_checked(
        &[
            "--mem",
            mem,
            "--mem-limit",
            limit,
            "--mapper",
            "--disk",
            &disk,
        ],
        "seqread",
        "passes=3",
    );
    let g = p
        .patterns
        .expect("page-cache statistics with the Swap Mapper");
    eprintln!(
        "{mem} limited to {limit}: ghost {} entries, {} pages a bucket, hits {:?} ({}), misses {}; mirrored dropped {}, image faults {}",
        g.ghost_entries,
        g.ghost_bucket_pages,
        g.ghost_hits,
        g.ghost_hits.iter().sum::<u64>(),
        g.ghost_misses,
        p.counters.reclaimed_mirrored,
        p.counters.faults_image
    );
    assert_eq!(g.ghost_hits.len(), 32);
    assert!(g.ghost_entries <= 32 * g.ghost_bucket_pages);
    // Pass 1 reads every block once (24,576 of them) with an empty ghost cache.
    assert!(g.ghost_misses >= 24_576, "{}", g.ghost_misses);
    (g, p.counters)
}

/// What the demand estimator asks for a VM with ghost hits `g` against an idle one.
fn demand_against_idle(g: &memvisor_api::PatternStats) -> Vec<u64> {
    let observed = memvisor_policy::DemandInput {
        bucket_pages: g.ghost_bucket_pages,
        hits: g.ghost_hits.clone(),
        swap_pages: None,
    };
    let idle = memvisor_policy::DemandInput {
        bucket_pages: g.ghost_bucket_pages,
        hits: vec![0; g.ghost_hits.len()],
        swap_pages: None,
    };
    let wanted = memvisor_policy::estimate(&[observed, idle], &Default::default());
    eprintln!("demand: {wanted:?} pages");
    wanted
}

/// The ghost cache (HyperDealer2 §5.3), with the pages leaving through the host: a guest reads
/// a 96 MiB file three times in a 128 MiB VM limited to 48 MiB. The file fits the guest's page
/// cache, so reclaim drops its pages, and passes 2 and 3 refault them from the image: each
/// block found in the ghost cache about as deep as the part of the file that did not fit, and
/// the demand estimator asks for about that many pages against an idle VM.
#[test]
fn the_ghost_cache_finds_refaults_of_file_pages_reclaim_dropped() {
    let (g, c) = ghost_run("128M", "48M");
    assert_eq!(g.ghost_bucket_pages, (128 * MIB / 4096).div_ceil(32));
    let hits: u64 = g.ghost_hits.iter().sum();
    assert!(c.faults_image > 0);
    // Passes 2 and 3 reread what left: most of the file, twice.
    assert!(hits > 20_000, "{hits} rereads found in the ghost cache");
    // Each reread block had about the rest of the file above it (24,576 pages less the
    // ~12,000 of the limit): most hits are past 8,192 pages.
    let deep: u64 = g.ghost_hits[8..].iter().sum();
    assert!(deep * 2 > hits, "{:?}", g.ghost_hits);
    let wanted = demand_against_idle(&g);
    assert!(
        wanted[0] >= 8 * g.ghost_bucket_pages && wanted[1] == 0,
        "{wanted:?}"
    );
}

/// The ghost cache with the pages leaving through the guest: the same reads in a 64 MiB VM
/// limited to 48 MiB, whose page cache cannot hold the file. The guest evicts its pages and
/// reads other blocks into them, which the pager sees; its rereads are guest disk reads found
/// in the ghost cache.
#[test]
fn the_ghost_cache_finds_rereads_of_file_pages_the_guest_evicted() {
    let (g, _) = ghost_run("64M", "48M");
    let hits: u64 = g.ghost_hits.iter().sum();
    // Passes 2 and 3 read all 49,152 blocks again (all were found when this was written).
    assert!(hits > 40_000, "{hits} rereads found in the ghost cache");
    let wanted = demand_against_idle(&g);
    assert!(wanted[0] > 0 && wanted[1] == 0, "{wanted:?}");
}

/// `alloc` of 120 MiB twice in a 256 MiB VM limited to 48 MiB, with `args` besides: round 2
/// zeroes fresh pages whose old content is in the swap store, and checks every word of them.
fn alloc_over_swapped_pages(args: &[&str]) -> memvisor_api::PagerCounters {
    let all = [&["--mem", "256M", "--mem-limit", "48M"], args].concat();
    run_checked(&all, "alloc", "mb=120 rounds=2").counters
}

/// The False Reads Preventer, stopping the vCPU on every write (`--preventer=always`, as
/// VSwapper does): a guest that zeroes fresh pages (`rep stosb`) whose old content is in the
/// swap store gets them without a single read of that content, and every word of every fresh
/// page reads zero.
#[test]
fn preventer_installs_pages_the_guest_overwrites_without_reading_them() {
    let c = alloc_over_swapped_pages(&["--preventer=always", "--prefetch", "0"]);
    let (completed, attempts, read) = (
        c.preventer_completed,
        c.preventer_attempts,
        c.swap_bytes_read,
    );
    eprintln!("preventer: {attempts} attempts, {completed} completed; swap bytes read {read}");
    // Round 2 zeroes 120 MiB whose old content was swapped out in round 1.
    assert!(
        completed > 20_000,
        "{completed} pages went in without a read"
    );
    assert!(read < 8 << 20, "only {read} bytes of swap were read");
}

/// The Preventer as it runs by default (`--preventer`): it stops a vCPU only while a prevention
/// has cost less per page than a read, so each write fault on a swapped page is either tried or
/// passed to the read (which of the two is this host's timing, not asserted), and every word of
/// every fresh page reads zero either way.
#[test]
fn measured_preventer_tries_or_passes_every_write_and_loses_nothing() {
    let c = alloc_over_swapped_pages(&["--preventer"]);
    eprintln!(
        "preventer: {} attempts, {} completed, {} passed to a read",
        c.preventer_attempts, c.preventer_completed, c.preventer_passed
    );
    // Before a prevention is measured, the first write is tried.
    assert!(c.preventer_attempts > 0);
    // Round 2 overwrites 30,720 swapped pages: with 16-page reads, at least 1,920 faults.
    assert!(
        c.preventer_attempts + c.preventer_passed > 1000,
        "{} + {}",
        c.preventer_attempts,
        c.preventer_passed
    );
}

/// Starts `integrity` with `cmdline` on a 256 MiB VM with data disk `img` and an API socket at
/// `sock`, and `args` besides.
fn start_integrity(img: &Path, sock: &Path, args: &[&str], cmdline: &str) -> TestVm {
    let disk = disk_spec(img, "data");
    let run = [&["--mem", "256M", "--disk", &disk], args].concat();
    let workload = ["--workload", "integrity", "--cmdline", cmdline];
    TestVm::start(sock, &[&run[..], &workload].concat())
}

/// Waits (`within`) for the VM to pause on `what`; returns why it says it paused.
fn paused_on(vm: &mut TestVm, what: &str, within: Duration) -> String {
    let t = Instant::now();
    loop {
        let v: VmInfo = ok(vm.client().info());
        if v.state == VmState::Paused {
            let why = v.paused_because.expect("a reason");
            eprintln!("paused: {why}");
            return why;
        }
        assert!(vm.running(), "the VM ended instead of pausing on {what}");
        assert!(t.elapsed() < within, "the VM kept running on {what}: {v:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `memvisor ctl resume`; returns what it printed.
fn ctl_resume(sock: &Path) -> VmInfo {
    let out = memvisor(&["ctl", "--api-sock", sock.to_str().unwrap(), "resume"]);
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A swap file whose disk starts failing mid-run: the VM is paused (never given a page the pager
/// could not write or read), `GET /vm` says why, and once the disk works again `memvisor ctl
/// resume` lets the guest finish with every byte of its memory intact.
#[test]
fn swap_io_failure_pauses_the_vm_and_resume_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let disk = FlakyDisk::new(dir.path(), 320);
    let img = mkdisk(dir.path());
    let sock = dir.path().join("api.sock");
    let swap = disk.mnt.join("swap");
    let mut vm = start_integrity(
        &img,
        &sock,
        &["--mem-limit", "48M", "--swap", swap.to_str().unwrap()],
        "anon_mb=96 file_mb=4 rounds=3",
    );
    wait_for(&vm, "swapping", |s| {
        pager(s).counters.swap_bytes_written > 16 * MIB
    });
    disk.set_working(false);
    let why = paused_on(&mut vm, "a failing swap disk", Duration::from_secs(20));
    // The failed write is reported as the kernel gave it (EIO, or ENOMEM when ext4 cannot
    // convert the preallocated extent it wrote into).
    assert!(why.contains("swap"), "{why}");
    // Parked: no vCPU exits while paused (the guest prints and does disk I/O all the time).
    let before = vm.stats();
    std::thread::sleep(Duration::from_millis(500));
    assert!(vm.running(), "the VM ended instead of pausing");
    let s = vm.stats();
    assert_eq!(before.exits, s.exits, "the guest ran while paused");
    assert!(pager(&s).counters.pauses >= 1);

    disk.set_working(true);
    assert_eq!(ctl_resume(&sock).state, VmState::Running);
    vm.intact("integrity");
}

/// Free page reporting raced on purpose, with the pager, the pool and proactive swap-in moving
/// the same pages: the guest driver writes every page of every reported chunk the moment the
/// device hands it back and reads it back (`report_race=used`), chunks are reported again and
/// again, and the limit moves so pages are swapped out and brought back meanwhile. memvisor
/// releases a range before it says it is done, so not one word may be lost; and the rest of
/// memory, checked by the integrity workload, must not change.
#[test]
fn pages_reused_the_moment_a_report_completes_keep_their_data() {
    let (line, s) = report_race("used", true);
    let checked = line.u64("balloon_race_checked");
    eprintln!(
        "raced {checked} pages; host: {} reported, {} faulted back as zero, {} proactive swap-ins",
        s.counters.reported, s.counters.faults_released, s.counters.proactive_swap_ins
    );
    assert_eq!(line.u64("balloon_race_lost"), 0, "{line}");
    assert!(checked > 10_000, "{line}");
    // The stats are the last ones read while it ran, a little before the guest's count.
    assert!(s.counters.reported > checked / 2);
    assert!(
        s.counters.faults_released > 0,
        "reported pages came back without a read"
    );
}

/// A guest that breaks the protocol and writes to pages while the device holds them
/// (`report_race=inflight`): the virtio spec lets the device discard them, so some of those
/// writes are lost (as under QEMU), but memvisor runs on and nothing outside the reported
/// ranges changes.
#[test]
fn a_guest_writing_to_pages_it_has_reported_only_loses_those_writes() {
    let (line, _) = report_race("inflight", false);
    let written = line.u64("balloon_inflight_written");
    let lost = line.u64("balloon_inflight_lost");
    eprintln!("{lost} of {written} in-flight writes lost");
    assert!(written > 1000, "{line}");
}

/// Runs `integrity` for 12 s with free page reporting raced as `race` says (with the limit
/// moving, and a pool, when `paged`); returns the final RESULT line and the pager's last stats.
fn report_race(race: &str, paged: bool) -> (ResultLine, memvisor_api::PagerStats) {
    let dir = tempfile::tempdir().unwrap();
    let img = mkdisk(dir.path());
    let sock = dir.path().join("api.sock");
    let cmdline = format!(
        "anon_mb=64 file_mb=8 rounds=2 secs=12 report_order=2 report_ms=0 report_race={race}"
    );
    let mut args = vec!["--balloon"];
    if paged {
        args.extend([
            "--mem-limit",
            "96M",
            "--pool",
            "32M",
            "--swap-in",
            "proactive",
        ]);
    }
    let mut vm = start_integrity(&img, &sock, &args, &cmdline);
    let mut last = None;
    let t = Instant::now();
    let mut high = false;
    while vm.running() {
        if paged && t.elapsed() > Duration::from_secs(2) {
            // Up and down every 2 s: swapped pages come back proactively while reports race.
            let up = (t.elapsed().as_secs() / 2) % 2 == 1;
            if up != high {
                let limit = if up { 240 * MIB } else { 96 * MIB };
                // The VM may end between the check above and this call.
                let _ = vm.client().set_limit(Some(limit));
                high = up;
            }
        }
        if let Some(s) = vm.stats_if_running() {
            last = s.pager;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let line = vm.intact("integrity");
    (line, last.expect("stats while it ran"))
}

/// A tmpfs mounted at `dir`/full, `mib` MiB large; unmounted when dropped.
struct SmallFs(PathBuf);

impl SmallFs {
    fn new(dir: &Path, mib: u64) -> SmallFs {
        let at = dir.join("full");
        std::fs::create_dir(&at).unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(&at)
            .status()
            .unwrap();
        assert!(st.success());
        SmallFs(at)
    }

    fn grow(&self, mib: u64) {
        let st = Command::new("mount")
            .args(["-o", &format!("remount,size={mib}m")])
            .arg(&self.0)
            .status()
            .unwrap();
        assert!(st.success());
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A data disk whose file system fills up while the guest writes to it: the VM pauses with the
/// disk's name and the reason (the guest never sees an error), and once the operator makes room
/// and resumes, the write is tried again and the guest finishes with every byte intact.
#[test]
fn a_full_disk_pauses_the_vm_until_there_is_room() {
    let dir = tempfile::tempdir().unwrap();
    let fs = SmallFs::new(dir.path(), 6);
    // Sparse: 64 MiB of image on 6 MiB of file system.
    let img = mkdisk(&fs.0);
    let sock = dir.path().join("api.sock");
    let mut vm = start_integrity(&img, &sock, &[], "anon_mb=8 file_mb=24 rounds=3");
    let why = paused_on(&mut vm, "its full disk", Duration::from_secs(60));
    assert!(
        why.contains("disk data") && why.contains("No space left on device"),
        "{why}"
    );
    std::thread::sleep(Duration::from_millis(500));
    let s = vm.stats();
    assert!(s.disks["data"].full_pauses >= 1);
    assert_eq!(s.disks["data"].errors, 0, "the guest saw no error");
    let v: VmInfo = ok(vm.client().info());
    assert_eq!(v.state, VmState::Paused, "still paused: nobody made room");

    fs.grow(128);
    assert_eq!(ctl_resume(&sock).state, VmState::Running);
    vm.intact("integrity");
}

/// Deflate-on-OOM: with the balloon holding 200 of 256 MiB, a guest task that needs 120 MiB
/// (and has no swap) takes pages back from the balloon instead of failing; the device sees
/// them deflated although nobody lowered the target, and every fresh page still reads zero.
#[test]
fn a_guest_out_of_memory_deflates_the_balloon_and_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("oom.sock");
    let args = ["--mem", "256M", "--balloon", "--workload", "alloc"];
    let mut vm = TestVm::start(
        &sock,
        &[&args[..], &["--cmdline", "mb=120 rounds=3"]].concat(),
    );
    let target = 200 * MIB;
    ok(vm.client().set_balloon(target));
    let mut deflated = 0;
    while vm.running() {
        if let Some(s) = vm.stats_if_running() {
            assert_eq!(balloon(&s).target_pages, target / 4096);
            deflated = deflated.max(balloon(&s).deflated_pages);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    ResultLine::find(&common::stdout(&vm.finish()), "alloc", "done").assert_intact();
    assert!(deflated > 0, "the guest never deflated on OOM");
}

/// The host-memory pool (MemFlex) under a moving limit: victims go to the pool, its least recent
/// pages spill to the swap file, faults read from both, and raising the limit brings swapped
/// pages back without faults (pooled ones first). The guest verifies every byte throughout.
#[test]
fn integrity_holds_while_pages_move_between_memory_pool_and_disk() {
    let s = pool_integrity("none", 0);
    assert_eq!(s.compressed_pages, 0);
    assert_eq!(s.raw_pages, s.pooled_pages);
}

/// The same with the pool compressing with LZ4, on data half of which compresses: pages are
/// kept compressed and whole, and read back exactly through faults, spills and proactive
/// swap-in.
#[test]
fn integrity_holds_with_an_lz4_compressed_pool() {
    let s = pool_integrity("lz4", 50);
    assert!(s.compressed_pages > 0 && s.raw_pages > 0, "{s:?}");
}

/// And with zstd.
#[test]
fn integrity_holds_with_a_zstd_compressed_pool() {
    let s = pool_integrity("zstd", 50);
    assert!(s.compressed_pages > 0 && s.raw_pages > 0, "{s:?}");
}

/// Share before swap: half of the guest's pages hold one of a few contents (per generation),
/// so reclaim finds most victims' content already in a pooled block and refers to it instead
/// of writing it again; the rounds then rewrite those pages, so shared blocks are faulted back
/// by one page and rewritten while other pages still refer to them. Every byte is checked, with
/// the pool kept whole and compressed.
#[test]
fn share_before_swap_refers_to_pooled_copies_and_loses_nothing() {
    for compress in ["none", "lz4"] {
        let c = integrity_checked(
            &["--pool", "64M", "--pool-compress", compress],
            "anon_mb=120 file_mb=8 rounds=3 duplicate=50",
        )
        .counters;
        eprintln!(
            "{compress}: shared {}, written {}",
            c.reclaimed_shared, c.reclaimed_written
        );
        assert!(
            c.reclaimed_shared > 2000,
            "{compress}: only {} victims shared a pooled copy",
            c.reclaimed_shared
        );
    }
}

/// Runs `integrity` (`compressible` % of its pages compressible) with a 32 MiB pool kept as
/// `compress` says, while the limit goes 100 → 400 → 64 MiB and the pool shrinks to 8 MiB;
/// returns the pool's counters at the end.
fn pool_integrity(compress: &str, compressible: u32) -> memvisor_api::PoolStats {
    let dir = tempfile::tempdir().unwrap();
    let disk = disk_spec(&mkdisk(dir.path()), "data");
    let cmdline = format!("anon_mb=160 file_mb=8 rounds=3 secs=8 compressible={compressible}");
    let vm = start_serving(
        dir.path(),
        &[
            "--mem-limit",
            "100M",
            "--pool",
            "32M",
            "--pool-compress",
            compress,
            "--pool-chunk",
            "256K",
            "--disk",
            &disk,
        ],
        "integrity",
        &cmdline,
    );
    // Wait until the pool has spilled, then give memory back (proactive swap-in), then take
    // it again, and shrink the pool itself.
    let s = wait_for(&vm, "the pool to spill", |s| {
        pager(s)
            .pool
            .is_some_and(|p| p.spilled_pages > 0 && p.hit_pages > 0)
    });
    let p = pager(&s).pool.unwrap();
    assert!(p.used_bytes <= 32 * MIB, "{p:?}");
    assert_eq!(p.compression.as_str(), compress);
    assert_eq!(p.chunk_bytes, 256 << 10);
    assert!(p.mapped_bytes == p.chunks * p.chunk_bytes && p.mapped_bytes >= p.used_bytes);
    if compressible > 0 {
        assert!(p.compression_ratio > 1.0, "{p:?}");
    }
    ok(vm.client().set_limit(Some(400 * MIB)));
    // Proactive swap-in from both tiers, until (almost) nothing is left swapped.
    wait_for(&vm, "proactive swap-in", |s| {
        pager(s).pages.swapped_pages < 1024
            && pager(s)
                .pool
                .is_some_and(|p| p.proactive_pool_pages > 0 && p.proactive_disk_pages > 0)
    });
    // Pages brought back give up their blocks, so the flusher's next purge empties the pool.
    wait_for(&vm, "the pool to give its memory back", |s| {
        pager(s).pool.is_some_and(|p| p.used_bytes <= 4 * MIB)
    });
    ok(vm.client().set_limit(Some(64 * MIB)));
    ok(vm.client().set_pool(8 * MIB));
    let s = wait_for(&vm, "the pool to shrink", |s| {
        pager(s).pool.is_some_and(|p| p.used_bytes <= 8 * MIB)
    });
    vm.intact("integrity");
    let p = pager(&s).pool.unwrap();
    assert_eq!(p.compressed_pages + p.raw_pages, p.pooled_pages, "{p:?}");
    assert!(p.spill_us > 0, "{p:?}");
    p
}

/// Proactive swap-in without a pool: raising the limit brings pages back from the swap file
/// (read ahead off the page lock while the guest runs and faults), and the guest verifies every
/// byte throughout.
#[test]
fn integrity_holds_while_pages_come_back_proactively_from_the_swap_file() {
    let dir = tempfile::tempdir().unwrap();
    let disk = disk_spec(&mkdisk(dir.path()), "data");
    let vm = start_serving(
        dir.path(),
        &[
            "--mem-limit",
            "64M",
            "--swap-in",
            "proactive",
            "--disk",
            &disk,
        ],
        "integrity",
        "anon_mb=160 file_mb=8 rounds=3 secs=8",
    );
    wait_for(&vm, "pages to be swapped out", |s| {
        pager(s).pages.swapped_pages > 16 * 1024
    });
    ok(vm.client().set_limit(Some(400 * MIB)));
    let s = wait_for(&vm, "proactive swap-in", |s| {
        pager(s).counters.proactive_swap_ins > 0 && pager(s).pages.swapped_pages < 1024
    });
    assert!(pager(&s).pool.is_none());
    ok(vm.client().set_limit(Some(64 * MIB)));
    wait_for(&vm, "pages to be swapped out again", |s| {
        pager(s).pages.swapped_pages > 16 * 1024
    });
    ok(vm.client().set_limit(None));
    vm.intact("integrity");
}

#[test]
fn a_pool_the_host_cannot_give_is_refused() {
    let out = memvisor(&["run", "--mem", "64M", "--pool", "64T"]);
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--pool") && err.contains("available"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn a_bad_pool_chunk_is_refused_in_one_line() {
    for (chunk, words) in [
        ("6000", "6000 is not a whole number of 4 KiB pages"),
        ("0", "0 is not a size for a pool chunk"),
        ("64M", "larger than the 33554432-byte pool"),
        ("2Q", "not a size"),
    ] {
        let out = memvisor(&[
            "run",
            "--mem",
            "64M",
            "--pool",
            "32M",
            "--pool-chunk",
            chunk,
        ]);
        let err = common::stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{chunk}: {err}");
        assert!(err.contains(words), "{chunk}: {err}");
        if chunk != "2Q" {
            assert!(err.contains("--pool-chunk"), "{err}");
            assert_eq!(err.lines().count(), 1, "{err}");
        }
    }
}

/// HyperDealer2's reference patterns (`--victims hd2`, with the Swap Mapper): a guest reading a
/// file front to back, twice, under a limit smaller than the file. Its reads form sequential
/// sequences, the host gives their pages up first, and the second pass (served from the
/// guest's page cache, so from pages the host dropped) refaults them from the image: the
/// sequences become loops. The guest checks every byte it read.
#[test]
fn hd2_victims_follow_the_sequences_of_a_sequential_reader() {
    let dir = tempfile::tempdir().unwrap();
    let img = mkdisk_data(
        dir.path().join("seq.img"),
        "160M",
        &["--files", "seq:96M", "--seed", "7"],
    );
    let disk = disk_spec(&img, "data");
    let s = run_checked(
        &[
            "--mem",
            "256M",
            "--mem-limit",
            "48M",
            "--disk",
            &disk,
            "--mapper",
            "--victims",
            "hd2",
        ],
        "seqread",
        "file=seq passes=2",
    );
    let c = &s.counters;
    let p = s.patterns.as_ref().expect("patterns with the Swap Mapper");
    eprintln!(
        "sequences {}, loops {}, now {p:?}; mirrored dropped {}, image faults {}, written {}",
        c.sequences_detected,
        c.loops_detected,
        c.reclaimed_mirrored,
        c.faults_image,
        c.reclaimed_written
    );
    assert!(c.sequences_detected > 0, "the reads formed sequences");
    assert!(p.sequential + p.loops > 0, "and the table holds them");
    assert!(
        c.reclaimed_mirrored > 10_000,
        "file pages left without a write"
    );
    assert!(c.faults_image > 0, "and came back from the image");
    assert!(c.loops_detected > 0, "the second pass made loops");
}

/// The HD2 victim order moves pages: every byte of the integrity workload's anonymous and file
/// pages holds under it, with whole sequences taken at once.
#[test]
fn integrity_holds_under_hd2_whole_victims() {
    let c = integrity_checked(
        &["--mapper", "--victims", "hd2-whole"],
        "anon_mb=48 file_mb=40 rounds=3",
    )
    .counters;
    eprintln!(
        "sequences {}, loops {}, mirrored dropped {}, written {}",
        c.sequences_detected, c.loops_detected, c.reclaimed_mirrored, c.reclaimed_written
    );
    assert!(
        c.reclaimed_mirrored > 1000,
        "file pages left without a write"
    );
    assert!(c.reclaimed_written > 0, "and anonymous ones were written");
}

#[test]
fn hd2_victims_without_the_swap_mapper_are_refused_in_one_line() {
    for v in ["hd2", "hd2-whole"] {
        let out = memvisor(&["run", "--mem", "64M", "--victims", v]);
        let err = common::stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("--victims hd2") && err.contains("--mapper"),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

/// The papers' new workloads under a limit with the Swap Mapper: `compress` (VSwapper Figs. 5
/// and 11) on two vCPUs writes 24 MiB of text, compresses it through the page cache and checks
/// every block read back from the disk, and `kv` (MemFlex Figs. 5–6) times every operation
/// under each of its mixes MemFlex runs, while the host holds each VM to a limit well below what
/// the guest touches. All must report 0 mismatches, the host must have taken pages back from
/// under them, and kv's latency lines must account for every operation in order of their
/// quantiles.
#[test]
fn compress_alloc_and_kv_latency_hold_under_a_limit_with_the_swap_mapper() {
    let dir = tempfile::tempdir().unwrap();
    let disk = disk_spec(&mkdisk(dir.path()), "data");
    let flags = [
        "--mem",
        "64M",
        "--mem-limit",
        "24M",
        "--mapper",
        "--vcpus",
        "2",
        "--disk",
        &disk,
    ];
    let p = run_checked(&flags, "compress", "file_mb=24 block_kb=900");
    let c = &p.counters;
    eprintln!(
        "compress: faults swap {} image {}, mirrored dropped {}",
        c.faults_swap, c.faults_image, c.reclaimed_mirrored
    );
    assert!(c.faults_swap + c.faults_image > 0, "{c:?}");

    // HyperDealer2 §6.3's beneficiary: 12 MiB more on each vCPU a round, kept and filled with
    // random words, read back and checked after the last round, twice what the limit holds.
    let p = run_checked(&flags, "alloc", "mb=12 rounds=2 keep=1");
    let c = &p.counters;
    eprintln!("alloc keep: faults swap {}", c.faults_swap);
    assert!(c.faults_swap > 0 && c.stored_faults_guest > 0, "{c:?}");

    // Every mix MemFlex §4.1 runs (Read is `c`, as `a` with reads; Insert, Update, Scan), each
    // counting its operations by type and checking every record it reads (inserted ones all
    // read back at the end).
    let mixes = [
        (
            "a",
            "records=20000 ops=20000",
            &["read", "update"][..],
            &["reads", "updates"][..],
        ),
        (
            "insert",
            "records=8000 ops=12000",
            &["insert"],
            &["inserts"],
        ),
        (
            "update",
            "records=20000 ops=20000",
            &["update"],
            &["updates"],
        ),
        ("scan", "records=20000 ops=2000", &["scan"], &["scans"]),
    ];
    for (mix, args, types, counts) in mixes {
        let stats_path = dir.path().join(format!("kv-{mix}-stats.json"));
        let out = Command::new(common::MEMVISOR)
            .arg("run")
            .args(flags)
            .args([
                "--workload",
                "kv",
                "--cmdline",
                &format!("{args} mix={mix}"),
            ])
            .arg("--stats-json")
            .arg(&stats_path)
            .output()
            .unwrap();
        let stdout = common::stdout(&out);
        assert_eq!(out.status.code(), Some(1), "{stdout}");
        ResultLine::find(&stdout, "kv", "done").assert_intact();
        let s: VmStats =
            serde_json::from_str(&std::fs::read_to_string(&stats_path).unwrap()).unwrap();
        let c = s.pager.expect("the pager's stats").counters;
        eprintln!(
            "kv {mix}: faults swap {} image {}",
            c.faults_swap, c.faults_image
        );
        assert!(c.faults_swap + c.faults_image > 0, "{mix}: {c:?}");
        // The store's table is anonymous memory only its vCPU touches: the faults on its
        // swapped pages are the guest's own.
        assert!(c.stored_faults_guest > 0, "{mix}: {c:?}");
        let run = ResultLine::find(&stdout, "kv", "run");
        assert_eq!(run.u64("missing"), 0, "{run}");
        let lat: Vec<ResultLine> = ResultLine::all(&stdout)
            .into_iter()
            .filter(|l| l.get("workload") == Some("kv") && l.get("phase") == Some("latency"))
            .collect();
        let ops: Vec<&str> = lat.iter().map(|l| l.get("op").unwrap()).collect();
        assert_eq!(ops, types, "mix {mix}: its operation types");
        for (l, count) in lat.iter().zip(counts) {
            assert_eq!(l.u64("n"), run.u64(count), "{mix}: {l}");
            let q: Vec<f64> = ["p50_us", "p95_us", "p99_us", "p999_us", "max_us"]
                .iter()
                .map(|k| l.get(k).unwrap().parse().unwrap())
                .collect();
            assert!(q[0] > 0.0 && q.windows(2).all(|w| w[0] <= w[1]), "{l}");
        }
    }
}
