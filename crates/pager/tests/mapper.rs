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
    let snap = pager.snapshot();
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
    while pager.snapshot().pages.on_disk_pages < 128 {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "mirrors were not dropped: {:?}",
            pager.snapshot()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let written_before = pager.snapshot().counters.reclaimed_mirrored;
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
        pager.disk_write_done(0, &pages);
    }
    let refetches = pager.snapshot().counters.mapper_refetches;
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
    assert!(
        pager.snapshot().pages.mirrored_pages >= 64 || pager.snapshot().pages.on_disk_pages >= 64
    );
    assert_eq!(vcpus.paused(), None, "no page move failed");
}
