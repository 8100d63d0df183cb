//! Instant release end to end (`PUT /memory/release`, HyperDealer2 §4.3, docs/hd2.md): guest kit
//! VMs with the Swap Mapper whose page cache holds files of known content have their clean
//! pages released through the API, over and over, while they read and check every word of
//! those files, and while they rewrite them; a paused VM releases too; bad requests change
//! nothing. The release times of 100, 1,000 and 10,000 pages from a paused VM are printed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use memvisor_api::{ClientError, ReleaseRequest, ReleaseResult, VmState, VmStats};

mod common;
use common::{disk_spec, memvisor, mkdisk_data, run_command, ResultLine, TestVm};

/// A data disk of `mb` MiB (files are made by the workload).
fn mkdisk(dir: &Path, mb: u64) -> PathBuf {
    mkdisk_data(dir.join("data.img"), &format!("{mb}M"), &[])
}

/// Starts `memvisor run --mem 256M` with the data disk `img`, an API socket in `dir`, its
/// final counters to `dir/stats.json`, `workload` with `cmdline`, and `args` besides; returns
/// it once its socket exists.
fn start(dir: &Path, img: &Path, args: &[&str], workload: &str, cmdline: &str) -> TestVm {
    let sock = dir.join("api.sock");
    let (disk, stats) = (disk_spec(img, "data"), dir.join("stats.json"));
    let mut run = vec!["--mem", "256M", "--disk", &disk];
    run.extend(["--stats-json", stats.to_str().unwrap()]);
    run.extend_from_slice(args);
    run.extend(["--workload", workload, "--cmdline", cmdline]);
    let mut cmd = run_command(&sock, &run);
    cmd.env("MEMVISOR_LOG", "warn,memvisor_pager::release=debug");
    TestVm::spawn(&mut cmd, &sock)
}

/// Waits for the VM to end; checks its workload's final RESULT line says ok with no
/// mismatches; returns that line and the VM's final counters.
fn passed(vm: TestVm, dir: &Path, workload: &str) -> (ResultLine, VmStats) {
    let done = vm.intact(workload);
    let text = std::fs::read_to_string(dir.join("stats.json")).unwrap();
    (done, serde_json::from_str(&text).unwrap())
}

fn mirrored(vm: &TestVm) -> u64 {
    vm.stats().pager.expect("the pager").pages.mirrored_pages
}

/// Waits (60 s at most) until at least `n` pages mirror disk blocks; false if the VM ended.
fn wait_mirrored(vm: &mut TestVm, n: u64) -> bool {
    let t0 = Instant::now();
    while vm.running() {
        if mirrored(vm) >= n {
            return true;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "only {} pages mirror the disk",
            mirrored(vm)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// The status and error sentence of a refused request.
fn refused(r: Result<ReleaseResult, ClientError>) -> (u16, String) {
    match r {
        Err(ClientError::Refused { status, body, .. }) => (status, body),
        other => panic!("not refused: {other:?}"),
    }
}

/// Releases `pages` at a time until the VM ends, `pause` between releases, the limit lifted
/// after each; returns the releases made, the pages they released and those they found
/// changed.
fn release_until_the_end(vm: &mut TestVm, pages: u64, pause: Duration) -> (u64, u64, u64) {
    let c = vm.client();
    let (mut n, mut released, mut changed) = (0, 0, 0);
    while vm.running() {
        match c.release(pages) {
            Ok(r) => {
                assert_eq!(r.asked_pages, pages);
                // Changed pages are not released; a release that found some checks others in
                // their place, so only the released ones are bounded by what was asked.
                assert!(r.released_pages <= pages, "{r:?}");
                n += 1;
                released += r.released_pages;
                changed += r.changed_pages;
            }
            // The VM ended between the check and the request: its socket goes first, so a
            // refusal to connect means it is on its way out.
            Err(e) if e.is_unreachable() && vm.ends_within(Duration::from_secs(10)) => {
                eprintln!("the VM ended: {e}");
                break;
            }
            Err(e) => panic!("{e}"),
        }
        if vm.running() {
            // Room for the next one, and nothing for reclaim to do: the pages that leave are
            // the releases'.
            let _ = c.set_limit(None);
        }
        std::thread::sleep(pause);
    }
    (n, released, changed)
}

/// A guest reading a 48 MiB file again and again, checking every word, while its page cache is
/// released under it hundreds of times; bad requests are refused first and change nothing; a
/// release while the VM is paused takes pages too.
#[test]
fn a_guest_reading_its_files_while_they_are_released_reads_every_word_right() {
    let dir = tempfile::tempdir().unwrap();
    let img = mkdisk(dir.path(), 64);
    let mut vm = start(
        dir.path(),
        &img,
        &["--mapper"],
        "seqread",
        "file_mb=48 passes=8",
    );
    let c = vm.client();
    // Bad input: 400, one sentence, nothing changed.
    let before = c.info().unwrap();
    assert_eq!(before.limit_bytes, None);
    let (status, body) = refused(c.release(0));
    assert_eq!(status, 400);
    assert!(body.contains("a release of 0 pages"), "{body}");
    let (status, body) = refused(c.release(65537));
    assert_eq!(status, 400);
    assert!(
        body.contains("a release of 65537 pages is more than the VM's 65536 pages"),
        "{body}"
    );
    assert_eq!(
        c.info().unwrap().limit_bytes,
        None,
        "the limit did not move"
    );
    let s = vm.stats();
    let p = s.pager.as_ref().unwrap();
    assert_eq!((p.counters.releases, p.counters.released_pages), (0, 0));

    // A paused VM releases: no vCPU is needed.
    assert!(wait_mirrored(&mut vm, 4096), "the VM ended early");
    c.pause().unwrap();
    let r = c.release(2000).unwrap();
    eprintln!("paused: {r:?}");
    assert_eq!(c.info().unwrap().state, VmState::Paused);
    assert!(r.released_pages > 1000, "{r:?}");
    assert_eq!(
        r.limit_bytes,
        c.info().unwrap().limit_bytes,
        "the answer says the new limit"
    );
    assert!(r.limit_bytes.is_some(), "a VM without a limit gets one");
    c.set_limit(None).unwrap();
    c.resume().unwrap();

    let (n, released, changed) = release_until_the_end(&mut vm, 1000, Duration::from_millis(10));
    eprintln!("{n} releases while it read: {released} pages released, {changed} changed");
    let (done, s) = passed(vm, dir.path(), "seqread");
    eprintln!("{done}");
    let p = s.pager.unwrap();
    let k = &p.counters;
    eprintln!(
        "releases {}, released {}, refaults {}, cache hits {}, image faults {}, dwell {:?}",
        k.releases,
        k.released_pages,
        k.released_refaults,
        k.reclamation_cache_hits,
        k.faults_image,
        p.patterns.as_ref().map(|x| &x.dwell_ms_log2)
    );
    assert!(n >= 20, "only {n} releases before the guest finished");
    // The last release may come after the final counters were taken.
    assert!(
        k.releases == n + 1 || k.releases == n,
        "{} of {n}",
        k.releases
    );
    assert!(k.released_pages <= released + r.released_pages);
    assert!(
        released > 5000,
        "only {released} pages released while it read"
    );
    assert!(k.released_refaults > 1000, "the guest read them back");
    assert!(k.faults_image > 0 && k.reclamation_cache_hits > 0);
    let dwell = &p.patterns.unwrap().dwell_ms_log2;
    assert_eq!(dwell.iter().sum::<u64>(), k.released_refaults);
}

/// A guest that rewrites a third of its file pages each round, syncs and drops its caches every
/// other round, while its pages are released under it: a page it wrote since it read it is
/// never dropped for its block (the digest catches it), a block rewritten after its page was
/// released gives that page back its old content first, and every word the guest checks is
/// right.
#[test]
fn a_guest_rewriting_its_files_while_they_are_released_never_reads_stale_data() {
    let dir = tempfile::tempdir().unwrap();
    let img = mkdisk(dir.path(), 64);
    let mut vm = start(
        dir.path(),
        &img,
        &["--mapper"],
        "integrity",
        "anon_mb=16 file_mb=40 rounds=8",
    );
    let (n, released, changed) = release_until_the_end(&mut vm, 1000, Duration::from_millis(10));
    eprintln!("{n} releases: {released} pages released, {changed} found changed");
    let (done, s) = passed(vm, dir.path(), "integrity");
    eprintln!("{done}");
    let k = s.pager.unwrap().counters;
    eprintln!(
        "released {}, changed {}, refaults {}, refetches {}, cache hits {}",
        k.released_pages,
        k.release_changed,
        k.released_refaults,
        k.mapper_refetches,
        k.reclamation_cache_hits
    );
    assert!(n >= 20, "only {n} releases before the guest finished");
    assert!(released > 5000, "only {released} pages released");
    assert!(k.released_pages <= released);
}

/// Cold-only releases (`cold_only`, as the host asks while memory is plentiful) until the VM
/// ends or `enough` pages were released, `pause` between them, the limit lifted after each;
/// returns the pages released.
fn release_cold(vm: &mut TestVm, pause: Duration, enough: u64) -> u64 {
    let c = vm.client();
    let mut released = 0;
    while vm.running() && released < enough {
        let asked = ReleaseRequest {
            pages: 4000,
            cold_only: true,
        };
        match c.release_with(asked) {
            Ok(r) => released += r.released_pages,
            Err(e) if e.is_unreachable() && vm.ends_within(Duration::from_secs(10)) => break,
            Err(e) => panic!("{e}"),
        }
        if vm.running() {
            let _ = c.set_limit(None);
        }
        std::thread::sleep(pause);
    }
    released
}

/// Starts a `seqread` VM with `cmdline` (`--mapper --victims hd2`), waits until `mirrored`
/// pages hold its file (its first pass from disk is done), then for longer than the probe's
/// wait, so its stream is no longer being read and a cold-only release probes it first.
fn read_and_left(dir: &Path, cmdline: &str, mirrored: u64) -> TestVm {
    let img = mkdisk(dir, 64);
    let mut vm = start(
        dir,
        &img,
        &["--mapper", "--victims", "hd2"],
        "seqread",
        cmdline,
    );
    assert!(wait_mirrored(&mut vm, mirrored), "the VM ended early");
    std::thread::sleep(Duration::from_millis(600));
    vm
}

/// A file the guest reads again and again from its own page cache is a loop the host cannot
/// see (its cache hits never reach the disk): once the file is cached, cold-only releases take
/// only their probe of it, the probe comes back at the next pass and makes it a loop, and
/// nothing more is taken; every word the guest checks is right.
#[test]
fn a_cold_only_release_takes_only_probes_of_a_file_the_guest_keeps_reading() {
    let dir = tempfile::tempdir().unwrap();
    // From now on it reads the file from its own cache.
    let mut vm = read_and_left(dir.path(), "file_mb=16 passes=150", 4000);
    let released = release_cold(&mut vm, Duration::from_millis(50), u64::MAX);
    let (done, s) = passed(vm, dir.path(), "seqread");
    eprintln!("{done}");
    let k = s.pager.unwrap().counters;
    eprintln!(
        "released {released}: probed {}, sequences {}, loops {}, refaults {}",
        k.sequences_probed, k.sequences_detected, k.loops_detected, k.released_refaults
    );
    assert!(k.sequences_probed > 0, "the stream was probed");
    assert!(k.loops_detected > 0, "its probes came back: a loop");
    assert!(
        k.released_pages <= k.sequences_probed * 16,
        "{} released: more than the probes",
        k.released_pages
    );
    assert!(
        k.released_pages < 4096 / 4,
        "{} of the file's 4096 pages released",
        k.released_pages
    );
}

/// A file read once and then left alone is cold: after its probe's wait, cold-only releases take
/// it, down to the 16 MiB a release leaves resident.
#[test]
fn a_cold_only_release_takes_a_file_read_once_and_left() {
    let dir = tempfile::tempdir().unwrap();
    let mut vm = read_and_left(
        dir.path(),
        "file_mb=32 passes=1 then=idle then_secs=6",
        8000,
    );
    let t0 = Instant::now();
    let released = release_cold(&mut vm, Duration::from_millis(100), 4000);
    eprintln!("{released} pages in {:?}", t0.elapsed());
    let (done, s) = passed(vm, dir.path(), "seqread");
    eprintln!("{done}");
    let k = s.pager.unwrap().counters;
    assert!(k.sequences_probed > 0);
    assert!(released >= 4000, "only {released} of 8192 pages released");
    assert_eq!(k.loops_detected, 0, "{k:?}");
}

/// A VM without memvisor's pager has nothing to release: 400.
#[test]
fn a_vm_without_the_pager_refuses_a_release() {
    let dir = tempfile::tempdir().unwrap();
    let img = mkdisk(dir.path(), 64);
    let vm = start(
        dir.path(),
        &img,
        &["--pager", "off", "--release-cache", "0"],
        "seqread",
        "file_mb=8 passes=1000",
    );
    let (status, body) = refused(vm.client().release(100));
    assert_eq!(status, 400);
    assert!(body.contains("--pager off"), "{body}");
}

/// A reclamation cache that is not whole pages, or larger than the VM, is refused at start.
#[test]
fn a_bad_release_cache_or_readiness_is_refused_in_one_line() {
    for (args, why) in [
        (
            ["--mapper", "--release-cache", "5000"],
            "--release-cache 5000 is not a whole number of 4 KiB pages",
        ),
        (
            ["--mapper", "--release-cache", "1G"],
            "is more than the VM's",
        ),
        (
            ["--mapper", "--release-ready", "1G"],
            "--release-ready 1073741824 is more than the VM's",
        ),
        (
            ["--balloon", "--release-ready", "40M"],
            "--release-ready keeps pages that mirror disk blocks ready: it needs the Swap Mapper",
        ),
    ] {
        let out = memvisor(
            &[
                &["run", "--mem", "256M"],
                &args[..],
                &["--workload", "boot"],
            ]
            .concat(),
        );
        let err = common::stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(why), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}

/// The release time of 100, 1,000 and 10,000 pages from a paused (idle) guest whose page cache
/// holds a 64 MiB file, three rounds: the first of pages a guest disk read filled (each checked
/// by its digest), the later ones of pages that came back from the image (write-protected since,
/// so not checked). Printed, with the reclamation cache on; the guest then reads the file once
/// more and checks every word.
#[test]
fn release_times_of_100_1000_and_10000_pages_from_an_idle_guest() {
    let dir = tempfile::tempdir().unwrap();
    let img = mkdisk(dir.path(), 128);
    let mut vm = start(
        dir.path(),
        &img,
        &["--mapper"],
        "seqread",
        "file_mb=64 passes=8",
    );
    let c = vm.client();
    let mut rounds = 0;
    for round in 1..=3 {
        if !wait_mirrored(&mut vm, 12_000) {
            break;
        }
        c.pause().unwrap();
        for n in [100, 1000, 10_000] {
            c.set_limit(None).unwrap();
            let r = c.release(n).unwrap();
            println!(
                "RELEASE round={round} pages={n} released={} changed={} micros={} us_per_page={:.2}",
                r.released_pages,
                r.changed_pages,
                r.micros,
                r.micros as f64 / r.released_pages.max(1) as f64
            );
            // All of them, unless the limit reached its 16 MiB minimum first.
            assert!(
                r.released_pages + r.changed_pages == n || r.limit_bytes == Some(16 << 20),
                "{r:?}"
            );
            assert!(r.released_pages > 0, "{r:?}");
        }
        c.set_limit(None).unwrap();
        c.resume().unwrap();
        rounds += 1;
        // Let the guest read the file back in before the next round.
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        rounds >= 1,
        "the guest ended before its page cache was warm"
    );
    let (_, s) = passed(vm, dir.path(), "seqread");
    let k = s.pager.unwrap().counters;
    assert_eq!(k.releases, 3 * rounds);
    assert!(k.released_refaults > 0);
    eprintln!(
        "{rounds} rounds: {} us over {} pages",
        k.release_us, k.released_pages
    );
}
