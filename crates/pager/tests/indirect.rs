//! Tesseract's indirections with real userfaultfd, a real swap file and a real image file (no
//! KVM: this thread plays the guest, the `GuestRam` calls play virtio-blk in the order it makes
//! them).
//!
//! Guest pages with known content are swapped out by the pager, then "written to the disk" by
//! the guest: none may be read back (double paging), the disk must read what was written,
//! overwrites, partial writes, a crash (the log replayed into the image by `recover`) and a
//! clean end (disentangling) must all leave every byte as the guest wrote it, and every swap
//! block an indirection held must be free again.

use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use memvisor_devices::ram::{DiskPage, GuestRam};
use memvisor_devices::GuestMem;
use memvisor_pager::indirect::{log_path, recover, Defrag};
use memvisor_pager::{IndirectConfig, NoVcpus, Pager};
use vm_memory::{Bytes, GuestAddress};

mod common;

const MIB: u64 = 1 << 20;
const PAGE: usize = 4096;
/// Pages the "guest" writes to its disk: 8 MiB.
const N: u64 = 2048;

fn word_page(tag: u64) -> Vec<u8> {
    (0..PAGE / 8)
        .flat_map(|i| (tag << 20 | i as u64).to_le_bytes())
        .collect()
}

/// A guest write of `pages` (guest address, block) the way virtio-blk makes it: the elided
/// blocks are neither read from guest memory nor written to the image.
fn device_write(pager: &Pager, image: &std::fs::File, pages: &[(GuestAddress, u64)]) -> usize {
    let first = pages[0].1;
    let len = pages.len() as u64 * PAGE as u64;
    pager.disk_write_begin(0, first * PAGE as u64, len).unwrap();
    let dp: Vec<DiskPage> = pages
        .iter()
        .map(|&(addr, block)| DiskPage { block, addr })
        .collect();
    let elided = pager.disk_write_elide(0, &dp);
    let rest: Vec<DiskPage> = dp
        .iter()
        .copied()
        .filter(|d| elided.binary_search(&d.block).is_err())
        .collect();
    pager.disk_write_sources(0, &rest);
    for d in &rest {
        let mut out = vec![0u8; PAGE];
        pager.read(d.addr, &mut out).unwrap();
        image.write_all_at(&out, d.block * PAGE as u64).unwrap();
        pager.disk_write_done(0, std::slice::from_ref(d), d.block * PAGE as u64, &out);
    }
    pager
        .disk_write_end(0, first * PAGE as u64, len, true)
        .unwrap();
    elided.len()
}

/// The disk as the guest reads it: `n` blocks from `first`.
fn device_read(pager: &Pager, image: &std::fs::File, first: u64, n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n * PAGE];
    if !pager
        .disk_read_split(0, first * PAGE as u64, &mut buf)
        .unwrap()
    {
        image.read_exact_at(&mut buf, first * PAGE as u64).unwrap();
    }
    buf
}

struct Setup {
    _dir: tempfile::TempDir,
    image_path: std::path::PathBuf,
    image: std::fs::File,
    mem: Arc<GuestMem>,
    pager: Pager,
    swap_path: std::path::PathBuf,
}

/// A pager with indirections over a 4096-block image (block b holds word_page(b)), and guest
/// pages 0..N holding word_page(10_000 + p), swapped out.
fn setup() -> Setup {
    setup_with(None)
}

fn setup_with(defrag: Option<Defrag>) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let image_path = dir.path().join("disk.img");
    let image = common::image(&image_path, 4096, word_page);
    let mem = Arc::new(GuestMem::from_ranges(&[(GuestAddress(0), 64 << 20)]).unwrap());
    let mut config = common::config(dir.path(), false);
    config.indirections = Some(IndirectConfig {
        max: 16384,
        keep: false,
        sync: memvisor_pager::indirect::LogSync::Write,
        defrag,
    });
    let swap_path = config.swap_path.clone();
    let vcpus = Arc::new(NoVcpus::default());
    let pager = Pager::start(mem.clone(), &config, vcpus, |why| {
        panic!("the pager failed: {why}")
    })
    .unwrap();
    pager
        .attach_disk(
            0,
            std::fs::File::open(&image_path).unwrap(),
            Some(&image_path),
        )
        .unwrap();
    assert!(
        log_path(&image_path).exists(),
        "the log starts with the disk"
    );
    pager.set_limit(Some(16 * MIB)).unwrap();
    for p in 0..N {
        mem.write_slice(&word_page(10_000 + p), GuestAddress(p * PAGE as u64))
            .unwrap();
    }
    // Touch other memory so the guest's pages go out.
    for p in 0..4096u64 {
        mem.write_obj(p, GuestAddress(16 * MIB + p * PAGE as u64))
            .unwrap();
    }
    let t = Instant::now();
    while pager.stats().pages.swapped_pages < N * 3 / 4 {
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", pager.stats());
        std::thread::sleep(Duration::from_millis(10));
    }
    Setup {
        _dir: dir,
        image_path,
        image,
        mem,
        pager,
        swap_path,
    }
}

/// Writes guest pages 0..N to blocks 1000.. in requests of 32 pages; returns the pages elided.
fn write_all(s: &Setup) -> usize {
    let mut elided = 0;
    for chunk in 0..N / 32 {
        let pages: Vec<(GuestAddress, u64)> = (chunk * 32..chunk * 32 + 32)
            .map(|p| (GuestAddress(p * PAGE as u64), 1000 + p))
            .collect();
        elided += device_write(&s.pager, &s.image, &pages);
    }
    elided
}

fn check_disk(s: &Setup, want: impl Fn(u64) -> Vec<u8>) {
    for first in (0..4096u64).step_by(64) {
        let got = device_read(&s.pager, &s.image, first, 64);
        for b in first..first + 64 {
            let at = usize::try_from(b - first).unwrap() * PAGE;
            assert!(got[at..at + PAGE] == want(b), "disk block {b} reads wrong");
        }
    }
}

fn after_writes(b: u64) -> Vec<u8> {
    if (1000..1000 + N).contains(&b) {
        word_page(10_000 + b - 1000)
    } else {
        word_page(b)
    }
}

#[test]
fn swapped_pages_written_to_disk_become_indirections_and_read_back_exactly() {
    let s = setup();
    let before = s.pager.stats();
    let elided = write_all(&s);
    let after = s.pager.stats();
    let ind = after.indirections.unwrap();
    assert_eq!(elided as u64, ind.elided_pages);
    // Random victims: about half of the guest's pages were out when it wrote them.
    assert!(elided as u64 >= N / 4, "{elided} of {N} pages elided");
    assert_eq!(ind.live, elided as u64);
    assert_eq!(
        after.counters.faults_swap, before.counters.faults_swap,
        "no swapped page was read back for the write"
    );
    // Every block of the disk reads as written, through split reads.
    check_disk(&s, after_writes);
    assert!(s.pager.stats().indirections.unwrap().split_reads > 0);
    // The guest's pages are still what they were.
    for p in 0..N {
        let mut got = vec![0u8; PAGE];
        s.mem
            .read_slice(&mut got, GuestAddress(p * PAGE as u64))
            .unwrap();
        assert!(got == word_page(10_000 + p), "guest page {p} changed");
    }

    // Overwrites end indirections: the first half of the blocks get new content from pages
    // at 32 MiB (resident, written plainly).
    overwrite_first_half(&s);
    // A partial write (one 512-byte sector) into an indirected block of the second half.
    let partial_block = (1000 + N / 2..1000 + N)
        .find(|&b| {
            s.pager
                .disk_read_split(0, b * PAGE as u64, &mut [0u8; PAGE])
                .unwrap()
        })
        .expect("an indirected block in the second half");
    let sector = vec![0xabu8; 512];
    let off = partial_block * PAGE as u64 + 1024;
    s.pager.disk_write_begin(0, off, 512).unwrap();
    s.image.write_all_at(&sector, off).unwrap();
    s.pager.disk_write_end(0, off, 512, true).unwrap();
    let want = |b: u64| {
        let mut v = after_overwrite(b);
        if b == partial_block {
            v[1024..1536].copy_from_slice(&sector);
        }
        v
    };
    check_disk(&s, want);
    let ind = s.pager.stats().indirections.unwrap();
    assert_eq!(ind.copied_back, 1, "{ind:?}");
    assert_eq!(ind.ended + ind.live, ind.elided_pages, "{ind:?}");
    assert!(ind.ended > 0 && ind.live > 0, "{ind:?}");

    end_cleanly(&s, ind.live, want);
}

/// A clean end with `live` indirections: everything back in the image (which then reads as
/// `want`), the log gone, and every swap block free once the guest's pages are rewritten.
fn end_cleanly(s: &Setup, live: u64, want: impl Fn(u64) -> Vec<u8>) {
    let (copied, kept) = s.pager.end_indirections().unwrap();
    assert_eq!(kept, 0);
    assert_eq!(copied, live);
    assert!(!log_path(&s.image_path).exists(), "the log is gone");
    assert!(
        !s.swap_path.exists(),
        "a temporary swap file is deleted at the end"
    );
    assert_eq!(s.pager.stats().indirections.unwrap().live, 0);
    // With no limit and every guest page rewritten with its own content, no page needs a swap
    // block: any block still in use would be one an indirection leaked.
    s.pager.set_limit(None).unwrap();
    let mut page = vec![0u8; PAGE];
    for p in 0..(64 * MIB / PAGE as u64) {
        let addr = GuestAddress(p * PAGE as u64);
        s.mem.read_slice(&mut page, addr).unwrap();
        s.mem.write_slice(&page, addr).unwrap();
        if p < N {
            assert!(page == word_page(10_000 + p), "guest page {p} changed");
        }
    }
    assert_eq!(
        s.pager.stats().swap_blocks_in_use,
        0,
        "every block an indirection held is free again"
    );
    let mut disk = vec![0u8; PAGE];
    for b in 0..4096u64 {
        s.image.read_exact_at(&mut disk, b * PAGE as u64).unwrap();
        assert!(disk == want(b), "image block {b} after disentangling");
    }
}

#[test]
fn a_crash_leaves_the_log_and_recovery_puts_every_acknowledged_block_back() {
    let s = setup();
    let elided = write_all(&s);
    assert!(elided > 0);
    // The image alone does not hold what the guest wrote: the log does.
    let mut disk = vec![0u8; PAGE];
    let differs = (1000..1000 + N)
        .filter(|&b| {
            s.image.read_exact_at(&mut disk, b * PAGE as u64).unwrap();
            disk != after_writes(b)
        })
        .count();
    assert_eq!(differs, elided);
    // "Crash": the pager is never ended; the next start replays the log into the image.
    let r = recover(&s.image_path).unwrap().expect("a log to recover");
    assert_eq!(r.blocks, elided as u64);
    assert_eq!(r.store, std::path::absolute(&s.swap_path).unwrap());
    assert!(!log_path(&s.image_path).exists());
    for b in 0..4096u64 {
        s.image.read_exact_at(&mut disk, b * PAGE as u64).unwrap();
        assert!(disk == after_writes(b), "image block {b} after recovery");
    }
    assert!(
        recover(&s.image_path).unwrap().is_none(),
        "nothing left to recover"
    );
}

#[test]
fn defragmentation_copies_indirected_blocks_back_while_the_guest_overwrites_some() {
    let s = setup_with(Some(Defrag::Guest));
    let elided = write_all(&s);
    assert!(elided > 0);
    // The guest overwrites the first half while the defragmenter runs: whichever of the two
    // gets to a block first, the newer data must win.
    overwrite_first_half(&s);
    let t = Instant::now();
    while s.pager.stats().indirections.unwrap().live > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{:?}",
            s.pager.stats().indirections
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let ind = s.pager.stats().indirections.unwrap();
    assert!(ind.defragmented > 0, "{ind:?}");
    assert_eq!(ind.defragmented + ind.ended, ind.elided_pages, "{ind:?}");
    // The image alone holds every block now, and the log says nothing is indirected.
    let mut disk = vec![0u8; PAGE];
    for b in 0..4096u64 {
        s.image.read_exact_at(&mut disk, b * PAGE as u64).unwrap();
        assert!(
            disk == after_overwrite(b),
            "image block {b} after defragmentation"
        );
    }
    let before = s.pager.stats().indirections.unwrap().split_reads;
    check_disk(&s, after_overwrite);
    assert_eq!(
        s.pager.stats().indirections.unwrap().split_reads,
        before,
        "no read is split any more"
    );
    let r = recover(&s.image_path).unwrap().expect("the log");
    assert_eq!(r.blocks, 0, "the log's map is empty");
}

#[test]
fn swap_file_defragmentation_puts_each_writes_blocks_together_while_the_guest_overwrites_some() {
    let s = setup_with(Some(Defrag::Store));
    let elided = write_all(&s);
    assert!(elided > 0);
    let ind = s.pager.stats().indirections.unwrap();
    assert!(
        ind.store_reads <= ind.blocks_read,
        "a split read takes one swap read per hole at most: {ind:?}"
    );
    overwrite_first_half(&s);
    // Each write of the second half (32 blocks) ends up read from the swap file in one read.
    let store_reads = || s.pager.stats().indirections.unwrap().store_reads;
    let t = Instant::now();
    for first in (1000 + N / 2..1000 + N).step_by(32) {
        loop {
            let before = store_reads();
            let got = device_read(&s.pager, &s.image, first, 32);
            for b in first..first + 32 {
                let at = usize::try_from(b - first).unwrap() * PAGE;
                assert!(got[at..at + PAGE] == after_overwrite(b), "disk block {b}");
            }
            if store_reads() - before <= 1 {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "blocks {first}+32 still scattered: {:?}",
                s.pager.stats().indirections
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let ind = s.pager.stats().indirections.unwrap();
    assert!(ind.regrouped > 0 && ind.regrouped_writes > 0, "{ind:?}");
    check_disk(&s, after_overwrite);
    // A crash now: the log names the moved blocks, and recovery of a copy puts them back.
    let copy = s._dir.path().join("copy.img");
    std::fs::copy(&s.image_path, &copy).unwrap();
    std::fs::copy(log_path(&s.image_path), log_path(&copy)).unwrap();
    let r = recover(&copy).unwrap().expect("a log to recover");
    assert_eq!(r.blocks, ind.live);
    let copy = std::fs::File::open(&copy).unwrap();
    let mut disk = vec![0u8; PAGE];
    for b in 0..4096u64 {
        copy.read_exact_at(&mut disk, b * PAGE as u64).unwrap();
        assert!(disk == after_overwrite(b), "recovered block {b}");
    }
    // The old blocks of moved indirections were released, the new ones are at the end.
    end_cleanly(&s, ind.live, after_overwrite);
}

/// Blocks 1000..1000 + N/2 get new content from resident pages at 32 MiB.
fn overwrite_first_half(s: &Setup) {
    for chunk in 0..N / 64 {
        let pages: Vec<(GuestAddress, u64)> = (chunk * 32..chunk * 32 + 32)
            .map(|i| {
                let addr = GuestAddress(32 * MIB + i * PAGE as u64);
                s.mem.write_slice(&word_page(50_000 + i), addr).unwrap();
                (addr, 1000 + i)
            })
            .collect();
        device_write(&s.pager, &s.image, &pages);
    }
}

fn after_overwrite(b: u64) -> Vec<u8> {
    if (1000..1000 + N / 2).contains(&b) {
        word_page(50_000 + b - 1000)
    } else {
        after_writes(b)
    }
}
