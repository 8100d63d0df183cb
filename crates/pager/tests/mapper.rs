//! The Swap Mapper's write consistency with real userfaultfd, a real swap file and a real image
//! file (no KVM: this thread plays the guest, the `GuestRam` calls play virtio-blk).
//!
//! Pages are filled from disk blocks, dropped while they mirror them, and then the guest writes
//! other content to those same blocks from other pages: every dropped page must still read what
//! it read from the disk, every byte, and the blocks must hold what was written.

use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use memvisor_devices::ram::{DiskPage, GuestRam};
use memvisor_devices::GuestMem;
use memvisor_pager::{NoVcpus, Pager};
use vm_memory::{Bytes, GuestAddress};

mod common;

const MIB: u64 = 1 << 20;
const PAGE: usize = 4096;

fn word_page(tag: u64) -> Vec<u8> {
    (0..PAGE / 8)
        .flat_map(|i| (tag << 20 | i as u64).to_le_bytes())
        .collect()
}

#[test]
fn overwritten_blocks_never_change_pages_that_were_dropped_relying_on_them() {
    let dir = tempfile::tempdir().unwrap();
    // The disk: 256 blocks, block b holding word_page(b).
    let image_path = dir.path().join("disk.img");
    let image = common::image(&image_path, 256, word_page);
    let mem = Arc::new(GuestMem::from_ranges(&[(GuestAddress(0), 64 << 20)]).unwrap());
    let config = common::config(dir.path(), true);
    let vcpus = Arc::new(NoVcpus::default());
    let pager = Pager::start(mem.clone(), &config, vcpus.clone(), |why| {
        panic!("the pager failed: {why}")
    })
    .unwrap();
    pager
        .attach_disk(0, std::fs::File::open(&image_path).unwrap(), None)
        .unwrap();

    // "Device reads": blocks 0..128 into pages 0..128 (guest-physical 0..512 KiB).
    for b in 0..128u64 {
        let addr = GuestAddress(b * PAGE as u64);
        pager.write(addr, &word_page(b)).unwrap();
        pager.disk_read(0, &[DiskPage { block: b, addr }]);
    }
    let snap = pager.stats();
    assert_eq!(
        snap.pages.mirrored_pages, 128,
        "the pages mirror their blocks"
    );

    // Squeeze: the limit pushes them out, without a single swap write.
    pager.set_limit(Some(16 * MIB)).unwrap();
    for p in 0..4096u64 {
        // Touch other memory so reclaim has something to do beyond the mirrors.
        mem.write_obj(p, GuestAddress(MIB + p * PAGE as u64))
            .unwrap();
    }
    let t = Instant::now();
    while pager.stats().pages.on_disk_pages < 128 {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "mirrors were not dropped: {:?}",
            pager.stats()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let written_before = pager.stats().counters.reclaimed_mirrored;
    assert!(written_before >= 128);

    // "Device writes": new content to blocks 0..64 from pages at 8 MiB (as virtio-blk does it).
    for b in 0..64u64 {
        let src = GuestAddress(8 * MIB + b * PAGE as u64);
        let new = word_page(1000 + b);
        mem.write_slice(&new, src).unwrap();
        pager
            .disk_write_begin(0, b * PAGE as u64, PAGE as u64)
            .unwrap();
        let pages = [DiskPage {
            block: b,
            addr: src,
        }];
        pager.disk_write_sources(0, &pages);
        let mut out = vec![0u8; PAGE];
        pager.read(src, &mut out).unwrap();
        image.write_all_at(&out, b * PAGE as u64).unwrap();
        pager.disk_write_done(0, &pages, b * PAGE as u64, &out);
    }
    let refetches = pager.stats().counters.mapper_refetches;
    assert_eq!(
        refetches, 64,
        "each page relying on an overwritten block got its content back first"
    );

    // Every byte: the dropped pages still hold what they read; the disk holds what was written.
    for b in 0..128u64 {
        let mut got = vec![0u8; PAGE];
        mem.read_slice(&mut got, GuestAddress(b * PAGE as u64))
            .unwrap();
        assert!(
            got == word_page(b),
            "page {b} changed when its block was overwritten"
        );
        let mut disk = vec![0u8; PAGE];
        image.read_exact_at(&mut disk, b * PAGE as u64).unwrap();
        let want = if b < 64 {
            word_page(1000 + b)
        } else {
            word_page(b)
        };
        assert!(disk == want, "block {b}");
    }
    // The written sources mirror their blocks now: dropping them again costs no write.
    assert!(pager.stats().pages.mirrored_pages >= 64 || pager.stats().pages.on_disk_pages >= 64);
    assert_eq!(vcpus.paused(), None, "no page move failed");
}

/// `n` as an index.
fn ix(n: u64) -> usize {
    usize::try_from(n).unwrap()
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Pages a disk read fills are left writable, and checked against their block's digest only
/// when reclaim wants them. The guest here writes them between the read and the reclaim in
/// every way (one word, the whole page to zero, a word while the read was still landing), rewrites
/// blocks from pages it changed, and reads the same blocks into other pages, all under a limit
/// far below what it touches; every byte of every page and block is checked after each round.
fn mirrors_changed_between_read_and_reclaim_are_never_dropped(victim_cache: u8) {
    const BLOCKS: u64 = 2048;
    const PAGES: u64 = 6144; // 24 MiB of "page cache" under a 16 MiB limit
    let dir = tempfile::tempdir().unwrap();
    let image_path = dir.path().join("disk.img");
    let image = common::image(&image_path, BLOCKS, word_page);
    let mut disk: Vec<Vec<u8>> = (0..BLOCKS).map(word_page).collect();
    let mem = Arc::new(GuestMem::from_ranges(&[(GuestAddress(0), 64 << 20)]).unwrap());
    let mut config = common::config(dir.path(), true);
    config.victim_cache = victim_cache;
    let vcpus = Arc::new(NoVcpus::default());
    let pager = Pager::start(mem.clone(), &config, vcpus.clone(), |why| {
        panic!("the pager failed: {why}")
    })
    .unwrap();
    pager
        .attach_disk(0, std::fs::File::open(&image_path).unwrap(), None)
        .unwrap();
    pager.set_limit(Some(16 * MIB)).unwrap();
    let addr = |p: u64| GuestAddress(p * PAGE as u64);
    let mut expect: Vec<Vec<u8>> = vec![vec![0u8; PAGE]; ix(PAGES)];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ u64::from(victim_cache));
    let mut raced = 0;
    for round in 0..4u64 {
        // Device reads: each page filled from a block (blocks land in other pages each round).
        for p in 0..PAGES {
            let b = (p * 5 + round * 977) % BLOCKS;
            let data = disk[ix(b)].clone();
            pager.write(addr(p), &data).unwrap();
            let mut now = data.clone();
            let how = rng.next() % 16;
            if how == 0 {
                // The guest writes while the read is still landing: the page must not be taken
                // for its block.
                let w = rng.next() % (PAGE as u64 / 8);
                let v = rng.next() | 1;
                mem.write_obj(v, GuestAddress(addr(p).0 + w * 8)).unwrap();
                now[ix(w) * 8..ix(w) * 8 + 8].copy_from_slice(&v.to_le_bytes());
                raced += 1;
            }
            let pages = [DiskPage {
                block: b,
                addr: addr(p),
            }];
            if how == 1 && now == data {
                // Without the bytes read: the digest is of the page as it is.
                pager.disk_read(0, &pages);
            } else {
                pager.disk_read_data(0, &pages, b * PAGE as u64, &data);
            }
            expect[ix(p)] = now;
            // Guest writes after the read, before any reclaim could take the page.
            match rng.next() % 8 {
                0 | 1 => {
                    let w = rng.next() % (PAGE as u64 / 8);
                    let v = rng.next();
                    mem.write_obj(v, GuestAddress(addr(p).0 + w * 8)).unwrap();
                    expect[ix(p)][ix(w) * 8..ix(w) * 8 + 8].copy_from_slice(&v.to_le_bytes());
                }
                2 => {
                    mem.write_slice(&[0u8; PAGE], addr(p)).unwrap();
                    expect[ix(p)] = vec![0u8; PAGE];
                }
                _ => {}
            }
        }
        // The guest rewrites some blocks from pages it changed (as virtio-blk does it).
        for _ in 0..256 {
            let p = rng.next() % PAGES;
            let b = rng.next() % BLOCKS;
            let pages = [DiskPage {
                block: b,
                addr: addr(p),
            }];
            pager
                .disk_write_begin(0, b * PAGE as u64, PAGE as u64)
                .unwrap();
            pager.disk_write_sources(0, &pages);
            let mut out = vec![0u8; PAGE];
            pager.read(addr(p), &mut out).unwrap();
            image.write_all_at(&out, b * PAGE as u64).unwrap();
            pager.disk_write_done(0, &pages, b * PAGE as u64, &out);
            disk[ix(b)] = out;
        }
        // Every byte of every page, and of every block.
        for p in 0..PAGES {
            let mut got = vec![0u8; PAGE];
            mem.read_slice(&mut got, addr(p)).unwrap();
            assert!(
                got == expect[ix(p)],
                "round {round}: page {p} does not hold what was last written to it"
            );
        }
        for b in 0..BLOCKS {
            let mut got = vec![0u8; PAGE];
            image.read_exact_at(&mut got, b * PAGE as u64).unwrap();
            assert!(got == disk[ix(b)], "round {round}: block {b}");
        }
    }
    let c = pager.stats().counters;
    assert!(raced > 0);
    assert!(
        c.mirrors_checked > 0 && c.mirrors_changed > 0,
        "reclaim checked mirrors and found changed ones: {c:?}"
    );
    // Changed ones stay resident when reclaim finds them (in use), so unchanged ones go first.
    assert!(
        c.reclaimed_mirrored > 0 && c.faults_image > 0,
        "unchanged mirrors were dropped and refaulted: {c:?}"
    );
    assert_eq!(vcpus.paused(), None, "no page move failed");
}

#[test]
fn mirrors_changed_between_read_and_reclaim_are_never_dropped_as_mirrors() {
    mirrors_changed_between_read_and_reclaim_are_never_dropped(0);
}

#[test]
fn mirrors_changed_between_read_and_reclaim_are_never_dropped_with_a_victim_cache() {
    mirrors_changed_between_read_and_reclaim_are_never_dropped(10);
}
