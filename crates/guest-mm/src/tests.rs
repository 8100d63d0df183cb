//! Test fixtures shared by the modules' tests (vector-backed memory and disks, a mounted
//! [`Mm`] over them), the tests of [`Params`], and a model-based property test of the whole
//! core that checks every byte after random operations under pressure.

use std::collections::HashMap;
use std::vec;
use std::vec::Vec;

use proptest::prelude::*;

use super::format::Superblock;
use super::*;

/// RAM, data disk and swap disk in vectors; counts requests.
pub(crate) struct MemBackend {
    pub(crate) ram: Vec<[u8; PAGE_SIZE]>,
    pub(crate) data: Vec<[u8; PAGE_SIZE]>,
    pub(crate) swap: Vec<[u8; PAGE_SIZE]>,
    pub(crate) reads: u64,
    pub(crate) writes: u64,
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
pub(crate) fn setup(
    frames: usize,
    data_blocks: usize,
    swap_slots: u32,
) -> (Mm<'static>, MemBackend) {
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

pub(crate) fn word(page: &[u8; PAGE_SIZE], i: usize) -> u64 {
    u64::from_le_bytes(page[i * 8..i * 8 + 8].try_into().unwrap())
}

pub(crate) fn set_word(page: &mut [u8; PAGE_SIZE], i: usize, v: u64) {
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
