//! Tesseract's indirections end to end (`--tesseract`, docs/tesseract.md): the guest kit swaps
//! to its own swap disk while memvisor pages it, so the guest writes out pages memvisor holds in
//! its swap file. Every byte must survive: the integrity workload with the Swap Mapper and the
//! Preventer on too, and an image disentangled after the VM kept its indirections, which must
//! then boot without the swap file and read the same bytes.

use std::path::Path;

mod common;
use common::{memvisor, memvisor_line, mkdisk_data, mkdisk_swap, stdout, ResultLine};

/// A 64 MiB data disk (with `files`, if any) and a 128 MiB swap disk in `dir`: their paths.
fn mkdisks(dir: &Path, files: &str) -> (String, String) {
    let mut extra = vec!["--seed", "3"];
    if !files.is_empty() {
        extra.extend(["--files", files]);
    }
    let data = mkdisk_data(dir.join("data.img"), "64M", &extra);
    let swap = mkdisk_swap(dir.join("swap.img"), "128M");
    (data.display().to_string(), swap.display().to_string())
}

fn indirections(stats: &Path) -> serde_json::Value {
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(stats).unwrap()).unwrap();
    s["pager"]["indirections"].clone()
}

/// Runs the integrity workload (64M guest, 32M limit, the Swap Mapper and the Preventer on)
/// with `--tesseract` and `extra`; checks every byte, and that the guest swapped and its
/// swap-outs became indirections, all put back at the end. Returns the final stats.
fn integrity_with(extra: &[&str]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let (data, swap) = mkdisks(dir.path(), "");
    let stats = dir.path().join("stats.json");
    let data_disk = format!("{data},id=data");
    let swap_disk = format!("{swap},id=swap");
    let mut args = vec![
        "run",
        "--mem",
        "64M",
        "--mem-limit",
        "32M",
        "--tesseract",
        "--mapper",
        "--preventer",
        "--disk",
        &data_disk,
        "--disk",
        &swap_disk,
        "--workload",
        "integrity",
        "--cmdline",
        "anon_mb=96 file_mb=8 rounds=2 seed=9",
        "--stats-json",
        stats.to_str().unwrap(),
    ];
    args.extend(extra);
    let out = memvisor(&args);
    assert_eq!(out.status.code(), Some(1), "the guest succeeded");
    let done = ResultLine::find(&stdout(&out), "integrity", "done");
    assert_eq!(done.u64("mismatches"), 0);
    assert!(done.u64("pswpout") > 10_000, "the guest swapped");
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let ind = indirections(&stats);
    assert!(
        ind["elided_pages"].as_u64().unwrap() > 1000,
        "guest swap-outs of swapped pages became indirections: {ind}"
    );
    assert!(ind["split_reads"].as_u64().unwrap() > 0, "{ind}");
    // The disks count the same events per request (Tesseract Tables 1, 2 and 4): every elided
    // or double-paged page is a hole of some write, in one of the three classes, and the
    // device's split reads are among the pager's (which also counts the Mapper's refaults).
    let disks = s["disks"].as_object().unwrap();
    let sum = |k: &str| disks.values().map(|d| d[k].as_u64().unwrap()).sum::<u64>();
    let pager_counter = |k: &str| s["pager"][k].as_u64().unwrap();
    assert_eq!(
        sum("write_holes"),
        ind["elided_pages"].as_u64().unwrap() + pager_counter("double_paging_swap_ins"),
        "{disks:?}"
    );
    let classes =
        sum("writes_holes_1_20") + sum("writes_holes_21_50") + sum("writes_holes_over_50");
    assert!(classes > 0 && classes <= sum("writes"), "{disks:?}");
    assert!(classes <= sum("write_holes"), "{disks:?}");
    let split = sum("split_reads");
    assert!(
        split > 0 && split <= ind["split_reads"].as_u64().unwrap(),
        "{disks:?} {ind}"
    );
    assert!(sum("split_read_us") <= sum("read_us"), "{disks:?}");
    assert_eq!(ind["live"], 0, "all put back at the end: {ind}");
    for img in [&data, &swap] {
        assert!(
            !Path::new(&format!("{img}.indirections")).exists(),
            "no log left after a clean exit"
        );
    }
    s["pager"].clone()
}

#[test]
fn integrity_holds_with_indirections_the_mapper_and_the_preventer() {
    integrity_with(&[]);
}

#[test]
fn integrity_holds_with_swap_file_defragmentation_and_the_victim_cache() {
    let pager = integrity_with(&[
        "--tesseract-sync",
        "flush",
        "--tesseract-defrag",
        "store",
        "--victim-cache",
        "10",
    ]);
    let ind = &pager["indirections"];
    let n = |v: &serde_json::Value| v.as_u64().unwrap();
    assert!(n(&ind["regrouped"]) > 0, "{ind}");
    assert!(
        n(&ind["store_reads"]) < n(&ind["blocks_read"]),
        "split reads take runs of swap-file blocks in one read: {ind}"
    );
    assert!(
        n(&pager["victim_cache_hits"]) > 0,
        "the guest wrote cooling victims: {pager}"
    );
    assert!(
        n(&pager["victim_cache_caught"]) > 0,
        "the guest wrote cooling victims to its disk: {pager}"
    );
}

#[test]
fn kept_indirections_disentangle_into_images_that_stand_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (data, swap) = mkdisks(dir.path(), "crash:16M");
    let store = dir.path().join("store.swap");
    let stats = dir.path().join("stats.json");
    let disks = [
        "--disk".to_owned(),
        format!("{data},id=data"),
        "--disk".to_owned(),
        format!("{swap},id=swap"),
    ];
    let mut args: Vec<String> = [
        "run",
        "--mem",
        "48M",
        "--mem-limit",
        "24M",
        "--tesseract",
        "--keep-indirections",
        "--swap",
        store.to_str().unwrap(),
        "--workload",
        "crashwrite",
        "--cmdline",
        "mb=16 anon_mb=48 batch=128 secs=5 seed=4",
        "--stats-json",
        stats.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec();
    args.extend(disks.iter().cloned());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = memvisor(&refs);
    assert_eq!(out.status.code(), Some(1));
    let ind = indirections(&stats);
    let live = ind["live"].as_u64().unwrap();
    assert!(live > 0, "indirections were kept: {ind}");
    let text = stdout(&out);
    let ack = text.lines().rev().find(|l| l.starts_with("ACK ")).unwrap();
    let acked: Vec<&str> = ack.split_whitespace().skip(1).collect();

    // Without its swap file, a kept log cannot be put back: a clear error, and the log stays.
    let away = dir.path().join("elsewhere.swap");
    std::fs::rename(&store, &away).unwrap();
    let mut check: Vec<String> = ["run", "--mem", "48M", "--workload", "crashwrite"]
        .map(String::from)
        .to_vec();
    check.extend(disks.iter().cloned());
    check.extend([
        "--cmdline".to_owned(),
        format!("mb=16 seed=4 check=1 {}", acked.join(" ")),
    ]);
    let refs: Vec<&str> = check.iter().map(String::as_str).collect();
    let refused = memvisor(&refs);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(5), "{err}");
    assert!(
        err.contains("store.swap") && err.contains("cannot be read"),
        "{err}"
    );
    assert!(Path::new(&format!("{swap}.indirections")).exists());

    // With it, `memvisor disk disentangle` puts every block back.
    std::fs::rename(&away, &store).unwrap();
    let d = memvisor(&["disk", "disentangle", &data, &swap]);
    assert!(d.status.success());
    let said = stdout(&d);
    let put_back: u64 = said
        .lines()
        .map(|l| {
            l.split(": ")
                .nth(1)
                .and_then(|r| r.split(' ').next())
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum();
    assert_eq!(put_back, live, "{said}");
    let again = memvisor(&["disk", "disentangle", &data]);
    assert!(stdout(&again).contains("no indirections"));

    // The images stand alone: the swap file is gone and the guest reads every acknowledged page.
    std::fs::remove_file(&store).unwrap();
    let checked = memvisor(&refs);
    assert_eq!(checked.status.code(), Some(1));
    let line = ResultLine::find(&stdout(&checked), "crashwrite", "check");
    assert_eq!(line.u64("ok"), 1);
    assert_eq!(line.u64("lost"), 0);
}

#[test]
fn bad_tesseract_input_is_refused_clearly() {
    for (line, says) in [
        (
            "run --pager off --tesseract --workload boot",
            "--pager full",
        ),
        (
            "run --keep-indirections --workload boot",
            "go with --tesseract",
        ),
        (
            "run --tesseract --tesseract-max 1 --workload boot",
            "--tesseract-max",
        ),
        ("disk disentangle /nonexistent.img", "not a disk image"),
        (
            "run --tesseract --tesseract-defrag both --workload boot",
            "--tesseract-defrag",
        ),
        ("run --victim-cache 60 --workload boot", "--victim-cache"),
        (
            "run --pager off --victim-cache 10 --workload boot",
            "--pager full",
        ),
    ] {
        let out = memvisor_line(line);
        let err = common::stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{line}: {err}");
        assert!(err.contains(says), "{line}: {err}");
    }
}
