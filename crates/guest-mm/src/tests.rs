//! Host tests of the memory manager core against vector-backed memory and disks, including a
//! model-based property test that checks every byte after random operations under pressure.

extern crate std;

use std::collections::HashMap;
use std::vec;
use std::vec::Vec;

use proptest::prelude::*;

use super::format::{FileEntry, Superblock};
use super::*;

/// RAM, data disk and swap disk in vectors; counts requests.
struct MemBackend {
    ram: Vec<[u8; PAGE_SIZE]>,
    data: Vec<[u8; PAGE_SIZE]>,
    swap: Vec<[u8; PAGE_SIZE]>,
    reads: u64,
    writes: u64,
}

impl Backend for MemBackend {
    fn page(&mut self, frame: u32) -> &mut [u8; PAGE_SIZE] {
        &mut self.ram[frame as usize]
    }
    fn read(&mut self, dev: Dev, block: u64, frames: &[u32]) -> Result<(), IoError> {
        self.reads += 1;
        for (k, &f) in frames.iter().enumerate() {
            let disk = if dev == Dev::Data {
                &self.data
            } else {
                &self.swap
            };
            let b = *disk.get(block as usize + k).ok_or(IoError)?;
            self.ram[f as usize] = b;
        }
        Ok(())
    }
    fn write(&mut self, dev: Dev, block: u64, frames: &[u32]) -> Result<(), IoError> {
        self.writes += 1;
        for (k, &f) in frames.iter().enumerate() {
            let b = self.ram[f as usize];
            let disk = if dev == Dev::Data {
                &mut self.data
            } else {
                &mut self.swap
            };
            *disk.get_mut(block as usize + k).ok_or(IoError)? = b;
        }
        Ok(())
    }
}

/// Everything a test Mm borrows, leaked so the Mm can be `'static`.
fn setup(frames: usize, data_blocks: usize, swap_slots: u32) -> (Mm<'static>, MemBackend) {
    let fr = Vec::leak(vec![Frame::INIT; frames]);
    let cache = Vec::leak(vec![0u32; (2 * frames).next_power_of_two()]);
    let swap_map = Vec::leak(vec![0u64; (swap_slots as usize).div_ceil(64)]);
    let mut mm = Mm::new(
        fr,
        0x100,
        cache,
        swap_map,
        Params::for_frames(frames as u32),
    );
    mm.set_swap(swap_slots);
    let mut be = MemBackend {
        ram: vec![[0xaa; PAGE_SIZE]; frames],
        data: vec![[0; PAGE_SIZE]; data_blocks],
        swap: vec![[0; PAGE_SIZE]; swap_slots as usize + 1],
        reads: 0,
        writes: 0,
    };
    let sb = Superblock {
        total_blocks: data_blocks as u64,
        table_blocks: 2,
        nr_files: 0,
        next_free: 3,
        seed: 0,
    };
    sb.encode(&mut be.data[0]);
    mm.mount(&mut be).unwrap();
    (mm, be)
}

fn word(page: &[u8; PAGE_SIZE], i: usize) -> u64 {
    u64::from_le_bytes(page[i * 8..i * 8 + 8].try_into().unwrap())
}

fn set_word(page: &mut [u8; PAGE_SIZE], i: usize, v: u64) {
    page[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn params_scale_like_linux() {
    // 512 MiB: min_free_kbytes = sqrt(16 * 524288) = 2896 KiB = 724 pages.
    let p = Params::for_frames(131072);
    assert_eq!(p.min_free, 724);
    assert_eq!(p.low_free, 905);
    assert_eq!(p.high_free, 1086);
    assert_eq!(p.readahead_pages, 32);
}

#[test]
fn first_touch_is_zeroed_unless_disabled() {
    let (mut mm, mut be) = setup(64, 64, 64);
    let t = mm.task_create().unwrap();
    let f = mm.access(&mut be, t, 5, false, false).unwrap();
    assert!(be.ram[f as usize].iter().all(|&b| b == 0));
    assert_eq!(mm.stats().counters.pgfault, 1);
    mm.params.zero_on_alloc = false;
    let g = mm.access(&mut be, t, 6, false, false).unwrap();
    assert!(be.ram[g as usize].iter().all(|&b| b == 0xaa));
    // A second access is no fault.
    assert_eq!(mm.access(&mut be, t, 5, true, false).unwrap(), f);
    assert_eq!(mm.stats().counters.pgfault, 2);
    mm.task_exit(&mut be, t);
    assert_eq!(mm.free_pages(), 64);
    mm.verify().unwrap();
}

#[test]
fn anon_pages_swap_out_and_back_with_their_content() {
    let (mut mm, mut be) = setup(48, 16, 256);
    let t = mm.task_create().unwrap();
    for v in 0..100u64 {
        let f = mm.access(&mut be, t, v, true, false).unwrap();
        set_word(&mut be.ram[f as usize], 0, v * 7 + 1);
    }
    let s = mm.stats();
    assert!(s.counters.pswpout > 50, "{s:?}");
    assert!(
        be.writes * 4 < s.counters.pswpout,
        "swap-outs go in runs of consecutive slots: {} writes for {} pages",
        be.writes,
        s.counters.pswpout
    );
    for v in 0..100u64 {
        let f = mm.access(&mut be, t, v, false, false).unwrap();
        assert_eq!(word(&be.ram[f as usize], 0), v * 7 + 1);
    }
    let c = mm.stats().counters;
    assert!(c.pgmajfault + c.swap_ra_hits >= 90, "{c:?}");
    assert!(
        c.swap_ra_hits > 30,
        "sequential swap-ins hit the readahead: {c:?}"
    );
    mm.verify().unwrap();
    mm.task_exit(&mut be, t);
    assert_eq!(mm.stats().swap_used, 0);
}

#[test]
fn swap_readahead_reads_a_cluster_and_freed_slots_drop_their_copies() {
    let (mut mm, mut be) = setup(64, 16, 256);
    let t = mm.task_create().unwrap();
    for v in 0..80u64 {
        let f = mm.access(&mut be, t, v, true, false).unwrap();
        set_word(&mut be.ram[f as usize], 0, v + 100);
    }
    // Make room: readahead never reclaims.
    mm.reclaim(&mut be, 40).unwrap();
    let swapped: Vec<u64> = (0..80)
        .filter(|&v| mm.page_state(&mut be, t, v).1)
        .collect();
    assert!(swapped.len() >= 16, "{swapped:?}");
    let r0 = be.reads;
    let v0 = swapped[0];
    mm.access(&mut be, t, v0, false, false).unwrap();
    assert_eq!(be.reads - r0, 1, "the cluster comes in one request");
    let c = mm.stats().counters;
    assert!(c.swap_ra >= 7, "{c:?}");
    // A neighbour is now a swap-cache hit without I/O, with the right content.
    let v1 = swapped[1];
    let f = mm.access(&mut be, t, v1, false, false).unwrap();
    assert_eq!(be.reads - r0, 1);
    assert_eq!(word(&be.ram[f as usize], 0), v1 + 100);
    assert_eq!(mm.stats().counters.swap_ra_hits, 1);
    // Exiting frees the slots and with them the read-ahead copies.
    mm.task_exit(&mut be, t);
    assert_eq!(mm.stats().cached, 0);
    assert_eq!(mm.stats().swap_used, 0);
    mm.verify().unwrap();
}

#[test]
fn referenced_anon_pages_survive_reclaim_longer() {
    let (mut mm, mut be) = setup(64, 16, 256);
    // No swap readahead: it would fill the swap cache, which reclaim takes first.
    mm.params.page_cluster = 0;
    let t = mm.task_create().unwrap();
    for v in 0..40u64 {
        mm.access(&mut be, t, v, true, false).unwrap();
    }
    // A first pass clears the accessed bits: it activates what it scans, refills the inactive
    // list from the active tail and evicts the oldest pages (0..5), leaving 5..12 at the
    // inactive tail. Those are touched again and must be passed over for younger pages.
    mm.reclaim(&mut be, mm.free_pages() + 5).unwrap();
    for v in 0..5u64 {
        assert_eq!(mm.page_state(&mut be, t, v), (false, true));
    }
    for v in 5..12u64 {
        mm.access(&mut be, t, v, false, false).unwrap();
    }
    let before = mm.stats().counters.pswpout;
    mm.reclaim(&mut be, mm.free_pages() + 3).unwrap();
    assert!(mm.stats().counters.pswpout >= before + 3);
    for v in 5..12u64 {
        assert_eq!(
            mm.page_state(&mut be, t, v),
            (true, false),
            "hot page {v} evicted"
        );
    }
}

#[test]
fn readahead_reads_a_window_in_one_request_and_use_once_pages_go_first() {
    let (mut mm, mut be) = setup(256, 600, 0);
    let a = mm.file_create(&mut be, "a", 100 * 4096).unwrap();
    let base = mm.file(a).unwrap().extents[0].start as usize;
    for i in 0..100 {
        set_word(&mut be.data[base + i], 0, 1000 + i as u64);
    }
    let r0 = be.reads;
    for i in 0..100u64 {
        let f = mm.file_page(&mut be, a, i, Access::Read, false).unwrap();
        assert_eq!(word(&be.ram[f as usize], 0), 1000 + i);
    }
    assert_eq!(be.reads - r0, 4, "100 pages with 32-page readahead");
    assert_eq!(mm.stats().counters.readahead, 96);
    // Page 3 read a second time becomes active; a reclaim pass evicts inactive pages first.
    mm.file_page(&mut be, a, 3, Access::Read, false).unwrap();
    mm.file_page(&mut be, a, 3, Access::Read, false).unwrap();
    mm.reclaim(&mut be, mm.free_pages() + 50).unwrap();
    assert!(mm.cache_find(a, 3).is_some());
    mm.verify().unwrap();
}

#[test]
fn dirty_pages_are_written_on_sync_and_drop_caches_empties_the_cache() {
    let (mut mm, mut be) = setup(128, 600, 0);
    let a = mm.file_create(&mut be, "out", 10 * 4096).unwrap();
    for i in 0..10u64 {
        let f = mm
            .file_page(&mut be, a, i, Access::Overwrite, false)
            .unwrap();
        set_word(&mut be.ram[f as usize], 1, 77 + i);
    }
    assert_eq!(mm.stats().dirty, 10);
    let w0 = be.writes;
    mm.sync(&mut be).unwrap();
    assert_eq!(be.writes - w0, 1, "one contiguous run, one request");
    assert_eq!(mm.stats().dirty, 0);
    assert_eq!(mm.drop_caches(&mut be).unwrap(), 10);
    assert_eq!(mm.stats().cached, 0);
    let base = mm.file(a).unwrap().extents[0].start as usize;
    assert_eq!(word(&be.data[base + 4], 1), 81);
    // Re-mount sees the file.
    mm.sb = None;
    mm.mount(&mut be).unwrap();
    assert_eq!(mm.lookup("out"), Some(a));
    mm.verify().unwrap();
}

#[test]
fn pinned_pages_are_neither_written_back_nor_dropped_while_pinned() {
    let (mut mm, mut be) = setup(64, 600, 0);
    let a = mm.file_create(&mut be, "w", 4 * 4096).unwrap();
    // Another CPU is half-way through overwriting page 1.
    let f = mm
        .file_page(&mut be, a, 1, Access::Overwrite, true)
        .unwrap();
    set_word(&mut be.ram[f as usize], 0, 1);
    mm.sync(&mut be).unwrap();
    assert_eq!(mm.drop_caches(&mut be).unwrap(), 0);
    assert_eq!(mm.stats().dirty, 1, "still dirty: its writer is not done");
    set_word(&mut be.ram[f as usize], 1, 2);
    mm.unpin(f);
    mm.sync(&mut be).unwrap();
    let base = mm.file(a).unwrap().extents[0].start as usize;
    assert_eq!(
        (word(&be.data[base + 1], 0), word(&be.data[base + 1], 1)),
        (1, 2)
    );
    mm.verify().unwrap();
}

#[test]
fn swappiness_steers_reclaim() {
    for (swappiness, expect_anon_first) in [(0, false), (200, true)] {
        let (mut mm, mut be) = setup(200, 600, 400);
        mm.params.swappiness = swappiness;
        let t = mm.task_create().unwrap();
        let a = mm.file_create(&mut be, "f", 80 * 4096).unwrap();
        for i in 0..80 {
            mm.file_page(&mut be, a, i, Access::Read, false).unwrap();
            mm.access(&mut be, t, i, true, false).unwrap();
        }
        mm.reclaim(&mut be, mm.free_pages() + 40).unwrap();
        let c = mm.stats();
        if expect_anon_first {
            assert_eq!(c.cached, 80, "{c:?}");
            assert!(c.counters.pswpout >= 40);
        } else {
            assert_eq!(c.counters.pswpout, 0, "{c:?}");
            assert!(c.cached <= 40);
        }
    }
}

#[test]
fn free_page_reporting_takes_aligned_free_runs_once() {
    let (mut mm, mut be) = setup(64, 16, 0);
    // base pfn 0x100 is 8-aligned; order 3 = 8 frames.
    let f = mm.report_take(3, 64).unwrap();
    assert_eq!(mm.pfn(f) % 8, 0);
    assert_eq!(mm.free_pages(), 56);
    mm.report_done(f, 3, false);
    let mut seen = vec![f];
    while let Some(g) = mm.report_take(3, 64) {
        assert!(!seen.contains(&g));
        seen.push(g);
        mm.report_done(g, 3, false);
    }
    assert_eq!(seen.len(), 8, "every chunk reported once");
    // Allocating takes unreported (here: none left, so reported) pages, clearing the flag.
    let k = mm.alloc_kernel(&mut be).unwrap();
    mm.free_kernel(k);
    assert!(mm.report_take(3, 64).is_some());
    mm.verify().unwrap();
}

#[test]
fn a_reported_run_the_driver_reused_is_reported_again() {
    let (mut mm, _be) = setup(64, 16, 0);
    let f = mm.report_take(3, 64).unwrap();
    mm.report_done(f, 3, true);
    let mut again = false;
    while let Some(g) = mm.report_take(3, 64) {
        again |= g == f;
        mm.report_done(g, 3, false);
    }
    assert!(again, "a reused run is free and unreported");
    mm.verify().unwrap();
}

#[test]
fn balloon_takes_and_returns_pages_and_reclaims_for_them() {
    let (mut mm, mut be) = setup(128, 600, 0);
    let a = mm.file_create(&mut be, "f", 100 * 4096).unwrap();
    for i in 0..100 {
        mm.file_page(&mut be, a, i, Access::Read, false).unwrap();
    }
    let mut held = Vec::new();
    while let Ok(f) = mm.alloc_balloon(&mut be) {
        held.push(f);
    }
    assert!(held.len() > 90, "{}", held.len());
    assert!(mm.free_pages() >= mm.params.min_free);
    for f in held {
        mm.free_balloon(f);
    }
    mm.verify().unwrap();
}

#[test]
fn swap_slots_are_next_fit_and_never_double_allocated() {
    let (mut mm, _be) = setup(16, 16, 130);
    let a: Vec<u32> = (0..130).map(|_| mm.swap_alloc().unwrap()).collect();
    assert_eq!(a, (0..130).collect::<Vec<_>>());
    assert_eq!(mm.swap_alloc(), None);
    mm.swap_free(7);
    mm.swap_free(100);
    assert_eq!(mm.swap_alloc(), Some(7));
    assert_eq!(mm.swap_alloc(), Some(100));
}

#[test]
fn file_entry_extents_map_blocks() {
    let mut e = FileEntry::new("x", 0);
    e.extents[0] = format::Extent { start: 10, len: 2 };
    assert_eq!(e.map(1), Some((11, 1)));
}

#[derive(Clone, Debug)]
enum Op {
    Touch { task: u8, vpn: u16, write: bool },
    FileWrite { file: u8, page: u8, whole: bool },
    FileRead { file: u8, page: u8 },
    Exit { task: u8 },
    Sync,
    Drop,
    Reclaim(u8),
    Balloon(u8),
    Deflate(u8),
    Report,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..3, 0u16..120, any::<bool>()).prop_map(|(task, vpn, write)| Op::Touch { task, vpn, write }),
        3 => (0u8..3, 0u8..40, any::<bool>()).prop_map(|(file, page, whole)| Op::FileWrite { file, page, whole }),
        3 => (0u8..3, 0u8..40).prop_map(|(file, page)| Op::FileRead { file, page }),
        1 => (0u8..3).prop_map(|task| Op::Exit { task }),
        1 => Just(Op::Sync),
        1 => Just(Op::Drop),
        1 => (1u8..40).prop_map(Op::Reclaim),
        1 => (1u8..20).prop_map(Op::Balloon),
        1 => (1u8..20).prop_map(Op::Deflate),
        1 => Just(Op::Report),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Random anon and file operations on 96 frames (far less than the data touched): every
    /// word read back equals the model's, and the invariants hold after every step.
    #[test]
    fn contents_survive_random_operations_under_pressure(
        ops in proptest::collection::vec(op(), 1..300),
        swappiness in 0u32..=200,
        ra in 1u32..40,
        page_cluster in 0u32..4,
    ) {
        let (mut mm, mut be) = setup(96, 400, 600);
        mm.params.swappiness = swappiness;
        mm.params.readahead_pages = ra;
        mm.params.page_cluster = page_cluster;
        mm.params.dirty_limit = 20;
        mm.params.dirty_background = 10;
        let mut files = [0u32; 3];
        let mut fmodel: HashMap<(u32, u64), u64> = HashMap::new();
        for (k, f) in files.iter_mut().enumerate() {
            *f = mm.file_create(&mut be, &std::format!("f{k}"), 40 * 4096 - 100).unwrap();
            let base = mm.file(*f).unwrap().extents[0].start as usize;
            for p in 0..40u64 {
                let v = 0xf11e_0000 + u64::from(*f) * 1000 + p;
                set_word(&mut be.data[base + p as usize], 3, v);
                fmodel.insert((*f, p), v);
            }
        }
        let mut tasks: [Option<u32>; 3] = [None; 3];
        let mut amodel: HashMap<(usize, u64), u64> = HashMap::new();
        let mut balloon = Vec::new();
        let mut gen = 0u64;
        for op in ops {
            gen += 1;
            match op {
                Op::Touch { task, vpn, write } => {
                    let ti = usize::from(task);
                    let t = match tasks[ti] {
                        Some(t) => t,
                        None => {
                            let t = mm.task_create().unwrap();
                            tasks[ti] = Some(t);
                            t
                        }
                    };
                    let vpn = u64::from(vpn);
                    let f = match mm.access(&mut be, t, vpn, write, false) {
                        Ok(f) => f,
                        Err(MmError::OutOfMemory) => continue,
                        Err(e) => panic!("{e:?}"),
                    };
                    let want = amodel.get(&(ti, vpn)).copied().unwrap_or(0);
                    prop_assert_eq!(word(&be.ram[f as usize], (vpn % 512) as usize), want);
                    if write {
                        set_word(&mut be.ram[f as usize], (vpn % 512) as usize, gen);
                        amodel.insert((ti, vpn), gen);
                    }
                }
                Op::FileWrite { file, page, whole } => {
                    let fid = files[usize::from(file)];
                    let p = u64::from(page);
                    let acc = if whole { Access::Overwrite } else { Access::Write };
                    let f = match mm.file_page(&mut be, fid, p, acc, false) {
                        Ok(f) => f,
                        Err(MmError::OutOfMemory) => continue,
                        Err(e) => panic!("{e:?}"),
                    };
                    if !whole {
                        prop_assert_eq!(word(&be.ram[f as usize], 3), fmodel[&(fid, p)]);
                    }
                    set_word(&mut be.ram[f as usize], 3, gen);
                    fmodel.insert((fid, p), gen);
                }
                Op::FileRead { file, page } => {
                    let fid = files[usize::from(file)];
                    let p = u64::from(page);
                    match mm.file_page(&mut be, fid, p, Access::Read, false) {
                        Ok(f) => prop_assert_eq!(word(&be.ram[f as usize], 3), fmodel[&(fid, p)]),
                        Err(MmError::OutOfMemory) => {}
                        Err(e) => panic!("{e:?}"),
                    }
                }
                Op::Exit { task } => {
                    let ti = usize::from(task);
                    if let Some(t) = tasks[ti].take() {
                        mm.task_exit(&mut be, t);
                        amodel.retain(|k, _| k.0 != ti);
                    }
                }
                Op::Sync => mm.sync(&mut be).unwrap(),
                Op::Drop => { mm.drop_caches(&mut be).unwrap(); }
                Op::Reclaim(n) => { mm.reclaim(&mut be, mm.free_pages() + u32::from(n)).unwrap(); }
                Op::Balloon(n) => {
                    for _ in 0..n {
                        match mm.alloc_balloon(&mut be) {
                            Ok(f) => balloon.push(f),
                            Err(_) => break,
                        }
                    }
                }
                Op::Deflate(n) => {
                    for _ in 0..n {
                        if let Some(f) = balloon.pop() { mm.free_balloon(f); }
                    }
                }
                Op::Report => {
                    if let Some(f) = mm.report_take(2, 96) {
                        for g in f..f + 4 { be.ram[g as usize].fill(0x5a); }
                        mm.report_done(f, 2, false);
                    }
                }
            }
            prop_assert_eq!(mm.verify(), Ok(()));
        }
        // Final check of everything: anon through the access path, files after a sync on disk.
        for (&(ti, vpn), &v) in &amodel {
            let f = mm.access(&mut be, tasks[ti].unwrap(), vpn, false, false).unwrap();
            prop_assert_eq!(word(&be.ram[f as usize], (vpn % 512) as usize), v);
        }
        mm.sync(&mut be).unwrap();
        for (&(fid, p), &v) in &fmodel {
            let base = mm.file(fid).unwrap().extents[0].start as usize;
            prop_assert_eq!(word(&be.data[base + p as usize], 3), v);
        }
    }
}
