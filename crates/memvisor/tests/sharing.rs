//! Content-based page sharing through KSM (`--sharing`, docs/sharing.md), end to end, with the
//! host's KSM run fast for the test (its knobs are put back afterwards):
//! - VMs with identical memory are merged when they share, and a VM with `--sharing off`
//!   beside them is never merged with anything (its `/proc/PID/ksm_stat`);
//! - guests that write pages KSM merged, under a tight limit with the Swap Mapper on (pages the
//!   pager write-protects everywhere), lose nothing: every byte verified.
//!
//! They need root and a kernel with KSM; without either they say so and pass.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

mod common;
use common::{disk_spec, host_command, mkdisk_data, ResultLine, TestHost, TestVm};

const KSM: &str = "/sys/kernel/mm/ksm";

/// One test at a time drives the host's KSM.
static KSM_LOCK: Mutex<()> = Mutex::new(());

/// KSM's knobs as they were, put back on drop.
struct Knobs(Vec<(&'static str, String)>);

const KNOBS: [&str; 4] = ["use_zero_pages", "pages_to_scan", "sleep_millisecs", "run"];

impl Knobs {
    /// KSM's knobs set to `values` (in [`KNOBS`]' order); `None` without KSM or the right to
    /// drive it.
    fn set(values: [&str; 4]) -> Option<Knobs> {
        let mut saved = Vec::new();
        for n in KNOBS {
            saved.push((n, std::fs::read_to_string(format!("{KSM}/{n}")).ok()?));
        }
        let knobs = Knobs(saved);
        let set = |n: &str, v: &str| std::fs::write(format!("{KSM}/{n}"), v).is_ok();
        KNOBS
            .iter()
            .zip(values)
            .all(|(n, v)| set(n, v))
            .then_some(knobs)
    }

    /// KSM on, scanning fast, zero pages merged.
    fn fast() -> Option<Knobs> {
        Knobs::set(["1", "4000", "10", "1"])
    }
}

/// KSM's knobs now, in [`KNOBS`]' order.
fn knobs_now() -> Vec<String> {
    KNOBS
        .iter()
        .map(|n| {
            std::fs::read_to_string(format!("{KSM}/{n}"))
                .unwrap()
                .trim()
                .to_owned()
        })
        .collect()
}

impl Drop for Knobs {
    fn drop(&mut self) {
        for (n, v) in &self.0 {
            let _ = std::fs::write(format!("{KSM}/{n}"), v.trim());
        }
    }
}

/// Field `name` of `/proc/PID/ksm_stat`.
fn ksm_stat(pid: u32, name: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/ksm_stat"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0)
}

/// `memvisor run ARGS` with an API socket `NAME.sock` in `dir`, its console read.
fn start(dir: &Path, name: &str, args: &[&str]) -> TestVm {
    TestVm::start(&dir.join(format!("{name}.sock")), args)
}

/// Waits for the guest to end with success; its final RESULT line for `workload`, which must
/// say ok, with no mismatches or errors.
fn passed(vm: TestVm, workload: &str) -> ResultLine {
    let done = ResultLine::find(&vm.succeeded(), workload, "done");
    assert!(
        done.ok() && !done.line().contains(" mismatches=1") && !done.line().contains("errors=1"),
        "{done}"
    );
    done
}

/// Three VMs hold the same memory (memhog: every page numbered, swept slowly); two share, one
/// does not. KSM merges the two sharing VMs' pages, with each other and within each, while the
/// third's stay its own throughout: its `/proc/PID/ksm_stat` shows no merged and no zero page,
/// and its `GET /stats` has no sharing part.
#[test]
fn a_vm_with_sharing_off_is_never_merged_with_identical_vms() {
    let _one = KSM_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_knobs) = Knobs::fast() else {
        eprintln!("skipped: no KSM on this host, or not allowed to drive it");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let hog = "mb=48 secs=70 rate_mb_s=1";
    let args = |sharing: &'static str| {
        vec![
            "--mem",
            "128M",
            "--sharing",
            sharing,
            "--workload",
            "memhog",
            "--cmdline",
            hog,
        ]
    };
    let a = start(dir.path(), "a", &args("host"));
    let off = start(dir.path(), "off", &args("off"));
    let b = start(dir.path(), "b", &args("host"));
    // Until both sharing VMs have most of their held memory merged.
    let t0 = Instant::now();
    let mut seen = (0, 0);
    while seen.0 < 4096 || seen.1 < 4096 {
        assert!(
            t0.elapsed() < Duration::from_secs(65),
            "the sharing VMs were not merged: {seen:?}"
        );
        assert_eq!(ksm_stat(off.pid(), "ksm_merging_pages"), 0);
        assert_eq!(ksm_stat(off.pid(), "ksm_zero_pages"), 0);
        std::thread::sleep(Duration::from_millis(200));
        seen = (
            ksm_stat(a.pid(), "ksm_merging_pages"),
            ksm_stat(b.pid(), "ksm_merging_pages"),
        );
    }
    let sa = a.client().stats().expect("a answers");
    let sharing = sa.sharing.expect("a sharing VM reports what KSM merged");
    eprintln!("merged: a {} b {} ({sharing:?})", seen.0, seen.1);
    assert!(
        sharing.merging_pages > 0 && sharing.saved_pages > 0,
        "{sharing:?}"
    );
    let so = off.client().stats().expect("off answers");
    assert!(so.sharing.is_none(), "{:?}", so.sharing);
    assert_eq!(ksm_stat(off.pid(), "ksm_merging_pages"), 0);
    assert_eq!(ksm_stat(off.pid(), "ksm_zero_pages"), 0);
    assert!(
        std::fs::read_to_string(format!("/proc/{}/ksm_stat", off.pid()))
            .unwrap()
            .contains("ksm_mergeable: no"),
        "the VM with sharing off has mergeable memory"
    );
    for vm in [a, off, b] {
        passed(vm, "memhog");
    }
}

/// Two VMs verify every byte of identical memory (`integrity`, the same seed) that KSM merges
/// while they rewrite it, each under a 48 MiB limit with the Swap Mapper on, so the pager
/// write-protects clean, mirrored and in-flight pages all the time. A merge drops userfaultfd
/// write protection on this kernel (`crates/pager/tests/ksm.rs`), so the pager keeps the pages
/// it protects out of KSM; if it did not, a guest write to a merged page would go unseen and
/// reclaim would drop or write stale content: a mismatch.
#[test]
fn guests_writing_merged_pages_under_a_limit_with_the_mapper_lose_nothing() {
    let _one = KSM_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_knobs) = Knobs::fast() else {
        eprintln!("skipped: no KSM on this host, or not allowed to drive it");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut vms = Vec::new();
    for name in ["a", "b"] {
        let img = mkdisk_data(dir.path().join(format!("{name}.img")), "64M", &[]);
        let disk = disk_spec(&img, "data");
        vms.push(start(
            dir.path(),
            name,
            &[
                "--mem",
                "256M",
                "--mem-limit",
                "48M",
                "--mapper",
                "--sharing",
                "host",
                "--disk",
                &disk,
                "--workload",
                "integrity",
                "--cmdline",
                "anon_mb=40 file_mb=24 rounds=4 seed=7",
            ],
        ));
    }
    // Merges happen while they run (read from the kernel while both are alive).
    let mut most = 0;
    while vms.iter_mut().all(|v| v.running()) {
        let now: u64 = vms
            .iter()
            .map(|v| ksm_stat(v.pid(), "ksm_merging_pages"))
            .sum();
        most = most.max(now);
        std::thread::sleep(Duration::from_millis(100));
    }
    for vm in vms {
        let done = passed(vm, "integrity");
        assert_eq!(done.get("mismatches"), Some("0"), "{done}");
    }
    eprintln!("most pages merged at once: {most}");
    assert!(most > 0, "KSM merged nothing: the test tested nothing");
}

/// `memvisor host` drives KSM: with two VMs of identical memory sharing and a third not, it
/// takes the scanner over from the state it found (off, 123 pages every 17 ms, no zero pages),
/// runs it at a rate inside MOM's bounds, counts what each VM saves (the one with sharing off:
/// nothing) and counts it as free memory, and puts every knob back when it exits.
#[test]
fn the_host_drives_ksm_counts_what_sharing_saves_and_puts_ksm_back() {
    let _one = KSM_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_knobs) = Knobs::set(["0", "123", "17", "0"]) else {
        eprintln!("skipped: no KSM on this host, or not allowed to drive it");
        return;
    };
    let found = knobs_now();
    let dir = tempfile::tempdir().unwrap();
    let vm = |name: &str, sharing: &str| {
        format!(
            "[[vm]]\nname = \"{name}\"\nmem = \"128M\"\nworkload = \"memhog\"\n\
             cmdline = \"mb=64 secs=150 rate_mb_s=1\"\nsharing = \"{sharing}\"\n"
        )
    };
    let config = format!(
        "[host]\nmemory = \"1G\"\ntick = \"500ms\"\n\n{}{}{}",
        vm("a", "host"),
        vm("b", "host"),
        vm("c", "off")
    );
    let path = dir.path().join("host.toml");
    std::fs::write(&path, config).unwrap();
    let mut host = TestHost::spawn(&mut host_command(&path), dir.path());
    let client = host.client();
    let t0 = Instant::now();
    let (info, vms) = loop {
        assert!(t0.elapsed() < Duration::from_secs(120), "nothing was saved");
        std::thread::sleep(Duration::from_millis(250));
        let (Ok(info), Ok(vms)) = (client.info(), client.vms()) else {
            continue;
        };
        if vms.len() == 3
            && vms[..2]
                .iter()
                .all(|v| v.shared_saved_bytes > 16 << 20 && v.pid.is_some())
        {
            break (info, vms);
        }
    };
    let ksm = info.ksm.expect("the host shows KSM while VMs share");
    eprintln!("{ksm:?}");
    assert!(ksm.running);
    assert!((64..=1250).contains(&ksm.pages_to_scan), "{ksm:?}");
    assert!(ksm.sharing_pages > 0, "{ksm:?}");
    assert_eq!(vms[2].shared_saved_bytes, 0, "{:?}", vms[2]);
    // Free memory counts what sharing saves: more than the budget less every VM's whole
    // resident memory and overhead.
    let held: u64 = vms
        .iter()
        .map(|v| v.resident_bytes + info.vm_overhead_bytes)
        .sum();
    let saved: u64 = vms.iter().map(|v| v.shared_saved_bytes).sum();
    eprintln!(
        "free {} MiB, resident with overheads {} MiB, saved {} MiB",
        info.free_bytes >> 20,
        held >> 20,
        saved >> 20
    );
    assert!(
        info.free_bytes > info.budget_bytes.saturating_sub(held) + (16 << 20),
        "free {} budget {} held {held} saved {saved}",
        info.free_bytes,
        info.budget_bytes
    );
    // Stopped with SIGTERM, the host stops its VMs and puts KSM back.
    host.stop();
    assert_eq!(knobs_now(), found, "the host left KSM as it found it");
}
