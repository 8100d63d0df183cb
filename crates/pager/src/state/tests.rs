//! The table's model test: a simulated guest RAM, swap store and disk image on which the
//! table's decisions are carried out as the pager carries them out with system calls, checked
//! against what the guest last wrote; and the table's scenarios on the same simulation.

use super::mirrors::IMAGE_WINDOW_MAX;
use super::page_state::PageState;
use super::table::{Disposition, FaultAction, StateTable};
use crate::config::Mechanisms;
use crate::page::{Block, ImageBlock, PageIdx};
use crate::victim::VictimPolicy;
use proptest::prelude::*;
use std::collections::HashMap;

/// A simulated guest RAM and swap store on which the test carries out the table's decisions
/// the way the pager does with syscalls.
struct Sim {
    t: StateTable,
    /// Mapped pages: content and write protection.
    ram: HashMap<PageIdx, (u64, bool)>,
    swap: HashMap<Block, u64>,
    /// The disk image, by block.
    disk: HashMap<u32, u64>,
    /// The sample store: slot `n` holds the `n`-th sampled page's content.
    samples: Vec<u64>,
    reads: u32,
    writes: u32,
}

impl Sim {
    fn new(pages: u32, mech: Mechanisms) -> Self {
        Self::with_policy(pages, mech, VictimPolicy::Random)
    }

    fn with_policy(pages: u32, mech: Mechanisms, policy: VictimPolicy) -> Self {
        Sim {
            t: StateTable::new(pages, pages, mech, policy, 7),
            ram: HashMap::new(),
            swap: HashMap::new(),
            disk: HashMap::new(),
            samples: Vec::new(),
            reads: 0,
            writes: 0,
        }
    }

    /// A missing fault, resolved like the pager thread does (with prefetch).
    fn fault_in(&mut self, p: PageIdx, write: bool) {
        let action = self.t.fault(p, write);
        match action {
            FaultAction::Wake => {}
            FaultAction::Zero => {
                self.ram.insert(p, (0, false));
                self.t.installed(p, action);
            }
            FaultAction::Load { keep, .. } => {
                let (lo, n) = self.t.load_run(p);
                self.reads += 1;
                // The run comes in as the faulting page does (as the pager does it).
                for q in lo..lo + n {
                    let v = match self.t.state(q) {
                        PageState::OnDisk(ib) => self.disk.get(&ib.block).copied().unwrap_or(0),
                        PageState::Swapped(b) => self.swap[&b],
                        PageState::Sampled(n) => self.samples[n as usize],
                        s => panic!("a run holds pages swapped or on disk, not {s:?}"),
                    };
                    self.ram.insert(q, (v, keep));
                }
                self.t.image_refault(lo, n);
                self.t.install_run(lo, n, keep);
            }
        }
    }

    fn read(&mut self, p: PageIdx) -> u64 {
        if !self.ram.contains_key(&p) {
            self.fault_in(p, false);
        }
        self.ram[&p].0
    }

    fn write(&mut self, p: PageIdx, v: u64) {
        if !self.ram.contains_key(&p) {
            self.fault_in(p, true);
        }
        if self.ram[&p].1 {
            let cooling = self.t.victims.is_cooling(p);
            assert!(self.t.write_fault(p));
            self.ram.get_mut(&p).unwrap().1 = false;
            if cooling {
                for q in self.t.warm_cluster(p, |_| false) {
                    self.ram.get_mut(&q).unwrap().1 = false;
                }
            }
        }
        self.ram.get_mut(&p).unwrap().0 = v;
    }

    fn reclaim(&mut self, n: u32) {
        let (cooled, victims) = self.t.reclaim_victims(n, PAGES);
        for p in cooled {
            self.ram.get_mut(&p).unwrap().1 = true; // write-protected while they cool
        }
        let mut to_write = Vec::new();
        for &p in &victims {
            self.ram.get_mut(&p).unwrap().1 = true; // write-protect first
                                                    // Then a mirror left writable is checked against its digest.
            if let Some(d) = self.t.mirror_digest(p) {
                if d != u128::from(self.ram[&p].0) {
                    self.t.mirror_changed(p);
                }
            }
            let d = self.t.disposition(p, self.ram[&p].0 == 0);
            if d == Disposition::Write {
                to_write.push(p);
            } else {
                self.ram.remove(&p);
                self.t.reclaimed(p, d, None);
            }
        }
        let blocks = self.t.blocks.alloc(u32::try_from(to_write.len()).unwrap());
        assert_eq!(blocks.len(), to_write.len(), "the store holds every page");
        for (p, b) in to_write.into_iter().zip(blocks) {
            self.writes += 1;
            self.swap.insert(b, self.ram.remove(&p).unwrap().0);
            self.t.reclaimed(p, Disposition::Write, Some(b));
        }
    }

    fn device_write(&mut self, p: PageIdx, v: u64) {
        if self.t.device_can_install(p) {
            self.ram.insert(p, (v, false));
            self.t.device_installed(p);
        } else {
            self.write(p, v);
        }
    }

    /// A device reads disk block `b` into page `p`, as virtio-blk and the pager do it: the
    /// page stays writable, and its digest is the block's content (here the value itself, a
    /// digest without collisions).
    fn disk_read(&mut self, p: PageIdx, b: u32) {
        let v = self.disk.get(&b).copied().unwrap_or(0);
        self.device_write(p, v);
        if !self.t.device_can_install(p) {
            self.t
                .read_from_disk(p, ImageBlock { disk: 0, block: b }, u128::from(v));
        }
        self.t.disk_read_seen(0, &[(p, b)]);
    }

    /// One guest disk read of blocks `b..b + n` into pages `p..p + n`.
    fn disk_read_run(&mut self, p: PageIdx, b: u32, n: u32) {
        for i in 0..n {
            let v = self.disk.get(&(b + i)).copied().unwrap_or(0);
            self.device_write(p + i, v);
            self.t.read_from_disk(
                p + i,
                ImageBlock {
                    disk: 0,
                    block: b + i,
                },
                u128::from(v),
            );
        }
        let read: Vec<(PageIdx, u32)> = (0..n).map(|i| (p + i, b + i)).collect();
        self.t.disk_read_seen(0, &read);
    }

    /// A device writes page `p` to disk block `b`, as virtio-blk and the pager do it; with
    /// `race`, the guest writes that value to `p` after the device copied it out and before
    /// the write landed.
    fn disk_write(&mut self, p: PageIdx, b: u32, race: Option<u64>) {
        let ib = ImageBlock { disk: 0, block: b };
        for q in self.t.disk_write_begins(ib) {
            let v = self.disk.get(&b).copied().unwrap_or(0);
            self.ram.insert(q, (v, false));
            self.t.refetched(q);
        }
        if !self.t.device_can_install(p) {
            self.t.disk_write_source(p, ib);
        }
        let v = self.read(p);
        self.disk.insert(b, v);
        if let Some(x) = race {
            self.write(p, x);
        }
        let now = self.ram.get(&p).map_or(0, |&(v, _)| v);
        self.t
            .disk_write_done(p, ib, u128::from(v), u128::from(now));
    }

    /// Takes resident `p` out for a working-set sample, as the pager does: its content goes to
    /// a slot of the sample store and the page leaves RAM.
    fn sample(&mut self, p: PageIdx) {
        if !self.ram.contains_key(&p) {
            return;
        }
        let slot = u32::try_from(self.samples.len()).unwrap();
        self.ram.get_mut(&p).unwrap().1 = true; // write-protect first
        assert!(self.t.sample(p, slot));
        self.samples.push(self.ram.remove(&p).unwrap().0);
    }

    fn discard(&mut self, p: PageIdx, to: PageState) {
        if self.t.discard(p, to) {
            self.ram.remove(&p);
        }
    }

    /// Every block in use is referenced by exactly the pages that name it.
    fn check_blocks(&self) {
        let mut refs: HashMap<Block, u16> = HashMap::new();
        for p in 0..self.t.len() {
            match self.t.state(p) {
                PageState::Swapped(b) | PageState::Resident { clean: Some(b) } => {
                    *refs.entry(b).or_default() += 1
                }
                _ => {}
            }
        }
        assert_eq!(u32::try_from(refs.len()).unwrap(), self.t.blocks.in_use());
        for (b, n) in refs {
            assert_eq!(self.t.blocks.refs(b), n);
        }
        // A mirror is its block: protected since it came to be, or writable with the
        // block's digest, which reclaim checks.
        for p in 0..self.t.len() {
            if let PageState::Mirrored(ib) = self.t.state(p) {
                let block = self.disk.get(&ib.block).copied().unwrap_or(0);
                match self.t.mirror_digest(p) {
                    Some(d) => assert_eq!(d, u128::from(block), "page {p}'s digest"),
                    None => assert_eq!(self.ram[&p], (block, true), "page {p}"),
                }
            }
        }
        // The ghost cache holds only blocks out of guest RAM.
        for p in 0..self.t.len() {
            if let PageState::Mirrored(ib) = self.t.state(p) {
                assert!(!self.t.mirrors.ghost.contains(&ib), "page {p} holds {ib:?}");
            }
        }
        assert!(self.t.mirrors.ghost.len() <= self.t.mirrors.ghost.capacity());
        assert_eq!(self.t.resident() as usize, self.ram.len());
        // The reference patterns hold exactly the mirrored pages, each once.
        if self.t.mech.mapper {
            for p in 0..self.t.len() {
                let placed =
                    self.t.patterns.sequence_of(p).is_some() || self.t.patterns.is_unclassified(p);
                let mirrored = matches!(self.t.state(p), PageState::Mirrored(_));
                assert_eq!(placed, mirrored, "page {p}");
            }
            let c = self.t.patterns.counts();
            assert_eq!(
                c.sequential_pages + c.loop_pages + c.unclassified_pages,
                u64::from(self.t.census().mirrored)
            );
        }
        assert_eq!(self.t.census(), self.t.census_by_scan());
        assert_eq!(self.t.census().resident, self.t.resident());
    }
}

#[derive(Clone, Debug)]
enum Op {
    Read(u32),
    Write(u32, u64),
    DeviceWrite(u32, u64),
    Reclaim(u32),
    Balloon(u32),
    Deflate(u32),
    Report(u32),
    Sample(u32),
    DiskRead(u32, u32),
    /// One read of `n` blocks from block `b` into pages from `p`.
    DiskReadRun(u32, u32, u32),
    DiskWrite(u32, u32),
    /// A disk write of page `p` to block `b` while the guest writes `v` to `p`.
    DiskWriteRaced(u32, u32, u64),
}

const PAGES: u32 = 48;
const BLOCKS: u32 = 24;

fn op() -> impl Strategy<Value = Op> {
    let p = 0..PAGES;
    let v = prop_oneof![Just(0u64), 1u64..5];
    prop_oneof![
        4 => p.clone().prop_map(Op::Read),
        4 => (p.clone(), v.clone()).prop_map(|(p, v)| Op::Write(p, v)),
        1 => (p.clone(), v).prop_map(|(p, v)| Op::DeviceWrite(p, v)),
        2 => (1u32..20).prop_map(Op::Reclaim),
        1 => p.clone().prop_map(Op::Balloon),
        1 => p.clone().prop_map(Op::Deflate),
        1 => p.clone().prop_map(Op::Report),
        1 => p.clone().prop_map(Op::Sample),
        2 => (p.clone(), 0..BLOCKS).prop_map(|(p, b)| Op::DiskRead(p, b)),
        2 => (0..PAGES - 4, 0..BLOCKS - 4, 1u32..5)
            .prop_map(|(p, b, n)| Op::DiskReadRun(p, b, n)),
        2 => (p.clone(), 0..BLOCKS).prop_map(|(p, b)| Op::DiskWrite(p, b)),
        1 => (p, 0..BLOCKS, 1u64..5).prop_map(|(p, b, v)| Op::DiskWriteRaced(p, b, v)),
    ]
}

fn run(ops: &[Op], mech: Mechanisms) -> Sim {
    run_cached(ops, mech, 0)
}

/// [`run`] with a victim cache of `percent` of the pages.
fn run_cached(ops: &[Op], mech: Mechanisms, percent: u8) -> Sim {
    run_with(ops, mech, percent, VictimPolicy::Random)
}

/// [`run_cached`] with victim policy `policy`.
fn run_with(ops: &[Op], mech: Mechanisms, percent: u8, policy: VictimPolicy) -> Sim {
    let mut sim = Sim::with_policy(PAGES, mech, policy);
    sim.t.victims.cache_percent = percent;
    // The reference: what the guest last wrote to each page (0 after the balloon or a report).
    let mut model = vec![0u64; PAGES as usize];
    let mut disk_model = vec![0u64; BLOCKS as usize];
    for op in ops {
        match *op {
            Op::Read(p) => assert_eq!(sim.read(p), model[p as usize], "page {p} after {ops:?}"),
            Op::Write(p, v) => {
                sim.write(p, v);
                model[p as usize] = v;
            }
            Op::DeviceWrite(p, v) => {
                sim.device_write(p, v);
                model[p as usize] = v;
            }
            Op::Reclaim(n) => sim.reclaim(n),
            Op::Balloon(p) => {
                sim.discard(p, PageState::Ballooned);
                model[p as usize] = 0;
            }
            Op::Deflate(p) => {
                sim.t.deflate(p);
            }
            Op::Report(p) => {
                sim.discard(p, PageState::Reported);
                model[p as usize] = 0;
            }
            Op::Sample(p) => sim.sample(p),
            Op::DiskRead(p, b) => {
                sim.disk_read(p, b);
                model[p as usize] = disk_model[b as usize];
            }
            Op::DiskReadRun(p, b, n) => {
                sim.disk_read_run(p, b, n);
                for i in 0..n {
                    model[(p + i) as usize] = disk_model[(b + i) as usize];
                }
            }
            Op::DiskWrite(p, b) => {
                sim.disk_write(p, b, None);
                disk_model[b as usize] = model[p as usize];
            }
            Op::DiskWriteRaced(p, b, v) => {
                sim.disk_write(p, b, Some(v));
                disk_model[b as usize] = model[p as usize];
                model[p as usize] = v;
            }
        }
        sim.check_blocks();
    }
    for p in 0..PAGES {
        assert_eq!(sim.read(p), model[p as usize], "final read of page {p}");
    }
    sim
}

proptest! {
    #[test]
    fn every_read_sees_the_last_write(ops in proptest::collection::vec(op(), 1..200)) {
        run(&ops, Mechanisms::DEFAULT);
        run(&ops, Mechanisms::BASELINE);
        run(&ops, Mechanisms { mapper: true, ..Mechanisms::DEFAULT });
        run_cached(&ops, Mechanisms { mapper: true, ..Mechanisms::DEFAULT }, 10);
        run_cached(&ops, Mechanisms::DEFAULT, 3);
        let mapper = Mechanisms { mapper: true, ..Mechanisms::DEFAULT };
        run_with(&ops, mapper, 0, VictimPolicy::Hd2);
        run_with(&ops, mapper, 10, VictimPolicy::Hd2Whole);
    }
}

const MAPPER: Mechanisms = Mechanisms {
    mapper: true,
    ..Mechanisms::DEFAULT
};

#[test]
fn mirrored_pages_leave_without_a_write_and_come_back_from_the_image() {
    let mut sim = Sim::new(8, MAPPER);
    for b in 0..4 {
        sim.disk.insert(b, 100 + u64::from(b));
        sim.disk_read(b, b);
    }
    assert!(matches!(sim.t.state(0), PageState::Mirrored(_)));
    sim.reclaim(4);
    assert_eq!(sim.writes, 0, "no silent swap writes");
    assert_eq!(
        sim.t.state(2),
        PageState::OnDisk(ImageBlock { disk: 0, block: 2 })
    );
    sim.reads = 0;
    assert_eq!(sim.read(1), 101);
    assert_eq!(sim.reads, 1);
    assert_eq!(
        (0..4).map(|p| sim.read(p)).collect::<Vec<_>>(),
        vec![100, 101, 102, 103]
    );
    assert_eq!(sim.reads, 1, "the image run came in with one read");
    // A write ends the mirroring: the page is anonymous again.
    sim.write(3, 7);
    assert_eq!(sim.t.state(3), PageState::Resident { clean: None });
}

/// Hits by distance, up to the last non-zero bucket.
fn ghost_hits(t: &StateTable) -> Vec<u64> {
    let h = t.mirrors.ghost.hits();
    let end = h.iter().rposition(|&x| x > 0).map_or(0, |i| i + 1);
    h[..end].to_vec()
}

#[test]
fn pages_reclaim_drops_enter_the_ghost_cache_and_refaults_hit_at_their_distance() {
    let mut sim = Sim::new(16, MAPPER);
    assert_eq!(sim.t.mirrors.ghost.bucket_pages(), 1);
    // Blocks far apart: each refault brings its page alone.
    for p in 0..8 {
        sim.disk.insert(10 * p, 100 + u64::from(p));
        sim.disk_read(p, 10 * p);
    }
    assert_eq!(
        sim.t.mirrors.ghost.misses(),
        8,
        "every guest disk read is a lookup"
    );
    assert!(sim.t.mirrors.ghost.is_empty());
    sim.reclaim(16);
    assert_eq!(
        sim.t.mirrors.ghost.len(),
        8,
        "the dropped mirrors, pages 0..8 in order"
    );
    assert_eq!(sim.read(5), 105);
    assert_eq!(sim.read(0), 100);
    // Page 5's block had 6 and 7 above it; page 0's then 1..=4, 6 and 7.
    assert_eq!(ghost_hits(&sim.t), [0, 0, 1, 0, 0, 0, 1]);
    assert_eq!(sim.t.mirrors.ghost.len(), 6);
    // Dropped again, block 50 goes back in at the top.
    sim.reclaim(16);
    assert_eq!(sim.t.mirrors.ghost.len(), 8);
    assert_eq!(sim.read(7), 107);
    assert_eq!(
        ghost_hits(&sim.t),
        [0, 0, 2, 0, 0, 0, 1],
        "7 was under 0 and 5"
    );
    assert_eq!(sim.t.mirrors.ghost.misses(), 8);
    assert_eq!(
        sim.t.mirrors.guest_rereads, 0,
        "refaults are the pager's, not the guest's"
    );
}

#[test]
fn released_pages_reach_the_ghost_cache_and_the_dwell_clock_when_recorded() {
    let mut sim = Sim::new(16, MAPPER);
    for p in 0..4 {
        sim.disk.insert(10 * p, 100 + u64::from(p));
        sim.disk_read(p, 10 * p);
    }
    let at = std::time::Instant::now();
    for p in 0..4 {
        let PageState::Mirrored(ib) = sim.t.state(p) else {
            panic!("page {p} mirrors its block")
        };
        sim.t.release(p, ib, at);
        sim.ram.remove(&p);
        assert_eq!(sim.t.state(p), PageState::OnDisk(ib), "out at once");
    }
    assert!(sim.t.has_unrecorded());
    assert!(sim.t.mirrors.ghost.is_empty(), "not told yet");
    assert!(
        sim.t.released.is_out(0),
        "out for the reclamation cache and the dwell clock at once"
    );
    // Page 1 comes back before the recording (a waiter woken inside the page lock ran
    // first): its dwell counts, and its recording is passed over, its block being in guest RAM
    // again.
    assert_eq!(sim.read(1), 101);
    assert_eq!(sim.t.released.take_refaults(), 1);
    assert!(!sim.t.released.is_out(1));
    assert_eq!(
        sim.t.record_released(2),
        2,
        "a chunk at a time: pages 0 and 2"
    );
    assert_eq!(sim.t.mirrors.ghost.len(), 2);
    assert!(sim.t.has_unrecorded());
    assert_eq!(sim.t.record_released(10), 1, "page 3");
    assert!(!sim.t.has_unrecorded());
    assert_eq!(sim.t.mirrors.ghost.len(), 3);
    assert!(sim.t.released.is_out(0) && sim.t.released.is_out(3));
    assert!(!sim.t.released.is_out(1));
    assert_eq!(sim.t.record_released(10), 0, "nothing twice");
    // The others refault from their blocks, as hits at their distance.
    assert_eq!(sim.read(0), 100);
    assert_eq!(ghost_hits(&sim.t), [0, 0, 1]);
}

#[test]
fn a_guest_disk_read_into_a_page_that_held_another_block_evicts_that_block() {
    let mut sim = Sim::new(16, MAPPER);
    for b in [10, 20, 30, 40, 50] {
        sim.disk.insert(b, u64::from(b));
    }
    sim.disk_read(0, 10);
    sim.disk_read(1, 20);
    sim.disk_read(2, 30);
    // The guest evicts block 10 and reads 40 into its page (the table still says mirrored).
    sim.disk_read(0, 40);
    // A device overwriting a page ends its mirroring first, as the pager does for a
    // write-protected one; the block it held is remembered until the read is recorded.
    assert!(sim.t.write_fault(1));
    sim.disk_read(1, 50);
    assert_eq!(sim.t.mirrors.ghost.len(), 2, "blocks 10 and 20");
    assert_eq!(sim.t.mirrors.ghost.misses(), 5);
    // Page 2's block 30 leaves for 10, which had 20 and 30 above it.
    sim.disk_read(2, 10);
    // Page 0's block 40 leaves for 30, which had 40 above it.
    sim.disk_read(0, 30);
    assert_eq!(ghost_hits(&sim.t), [0, 1, 1]);
    assert_eq!(
        sim.t.mirrors.guest_rereads, 2,
        "the guest read 10 and 30 again"
    );
    assert_eq!(sim.t.mirrors.ghost.len(), 2, "blocks 20 and 40");
    assert_eq!(sim.t.mirrors.ghost.misses(), 5);
    // A block another page still mirrors does not leave RAM with this one.
    sim.disk_read(3, 50);
    sim.disk_read(3, 10);
    assert!(!sim
        .t
        .mirrors
        .ghost
        .contains(&ImageBlock { disk: 0, block: 50 }));
    assert_eq!(sim.read(3), 10);
}

#[test]
fn a_mirror_written_without_a_fault_is_written_out_at_reclaim_and_an_unchanged_one_is_not() {
    let mut sim = Sim::new(8, MAPPER);
    for b in 0..4 {
        sim.disk.insert(b, 100 + u64::from(b));
        sim.disk_read(b, b);
    }
    assert!(
        (0..4).all(|p| !sim.ram[&p].1),
        "a disk read leaves its pages writable"
    );
    // The guest writes two of them: no fault, the table still says they mirror.
    sim.write(1, 7);
    sim.write(3, 0);
    assert!(matches!(sim.t.state(1), PageState::Mirrored(_)));
    sim.reclaim(8);
    assert_eq!(
        sim.writes, 1,
        "the changed page was written, the zeroed one dropped"
    );
    assert!(matches!(sim.t.state(1), PageState::Swapped(_)));
    assert_eq!(sim.t.state(3), PageState::Zero);
    assert!(matches!(sim.t.state(0), PageState::OnDisk(_)));
    assert!(matches!(sim.t.state(2), PageState::OnDisk(_)));
    assert_eq!(
        (0..4).map(|p| sim.read(p)).collect::<Vec<_>>(),
        vec![100, 7, 102, 0]
    );
}

#[test]
fn a_sequential_image_stream_gets_a_growing_window_and_a_random_refault_does_not() {
    let n = 1024;
    let mut sim = Sim::new(n, MAPPER);
    for b in 0..n {
        sim.disk.insert(b, u64::from(b));
        sim.disk_read(b, b);
    }
    sim.reclaim(n);
    // A reader going through the stream: each refault brings a longer run, up to the cap.
    let mut starts = Vec::new();
    sim.reads = 0;
    for q in 0..n {
        let before = sim.reads;
        assert_eq!(sim.read(q), u64::from(q));
        if sim.reads > before {
            starts.push(q);
        }
    }
    starts.push(n);
    // Every block the refaults read had left guest RAM: each one a ghost hit.
    assert_eq!(sim.t.mirrors.ghost.hits().iter().sum::<u64>(), u64::from(n));
    assert!(sim.t.mirrors.ghost.is_empty());
    let runs: Vec<u32> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    let w = Mechanisms::DEFAULT.prefetch;
    assert_eq!(&runs[..4], &[w, 2 * w, 4 * w, 8 * w]);
    assert!(runs.iter().all(|&c| c <= IMAGE_WINDOW_MAX));
    assert!(runs.contains(&IMAGE_WINDOW_MAX));
    // A refault far from the stream starts again at the base window.
    sim.reclaim(n);
    assert_eq!(sim.t.image_run(600).1, w);
}

#[test]
fn overwriting_a_block_first_brings_back_the_pages_that_rely_on_it() {
    let mut sim = Sim::new(8, MAPPER);
    sim.disk.insert(5, 55);
    sim.disk_read(0, 5);
    sim.reclaim(8);
    assert_eq!(
        sim.t.state(0),
        PageState::OnDisk(ImageBlock { disk: 0, block: 5 })
    );
    // The guest writes page 1's content to block 5: page 0 must keep the old content.
    sim.write(1, 99);
    sim.disk_write(1, 5, None);
    assert_eq!(sim.disk[&5], 99);
    assert_eq!(sim.read(0), 55, "page 0 still holds what it read");
    // Page 1 mirrors block 5 now (written, then mapped).
    assert_eq!(
        sim.t.state(1),
        PageState::Mirrored(ImageBlock { disk: 0, block: 5 })
    );
    sim.reclaim(8);
    assert_eq!(sim.read(1), 99);
}

#[test]
fn clean_pages_are_evicted_again_without_a_write() {
    let mut sim = Sim::new(4, Mechanisms::DEFAULT);
    sim.write(0, 9);
    sim.reclaim(4);
    assert_eq!(sim.writes, 1);
    assert_eq!(sim.read(0), 9);
    sim.reclaim(4);
    assert_eq!(sim.writes, 1, "the clean copy's block was reused");
    let mut base = Sim::new(4, Mechanisms::BASELINE);
    base.write(0, 9);
    base.reclaim(4);
    base.read(0);
    base.reclaim(4);
    assert_eq!(base.writes, 2);
}

#[test]
fn zero_pages_are_dropped_and_prefetch_follows_block_runs() {
    let mut sim = Sim::new(64, Mechanisms::DEFAULT);
    for p in 0..32 {
        sim.write(p, u64::from(p) + 1);
    }
    sim.write(40, 0);
    sim.reclaim(64);
    assert_eq!(sim.writes, 32, "the zero page was not written");
    assert_eq!(sim.t.state(40), PageState::Zero);
    sim.reads = 0;
    for p in 0..32 {
        assert_eq!(sim.read(p), u64::from(p) + 1);
    }
    assert!(
        sim.reads <= 4,
        "32 sequential pages came in {} reads",
        sim.reads
    );
}

#[test]
fn hd2_victims_take_sequential_runs_first_then_loops_then_the_rest() {
    let mut sim = Sim::with_policy(64, MAPPER, VictimPolicy::Hd2);
    for b in 0..32 {
        sim.disk.insert(b, 100 + u64::from(b));
    }
    sim.write(60, 7);
    // Blocks 0..8, read front to back into pages 0..8, then read again: a loop.
    sim.disk_read_run(0, 0, 4);
    sim.disk_read_run(4, 4, 4);
    // Blocks 16..24 read front to back into pages 16..24: sequential.
    sim.disk_read_run(16, 16, 4);
    sim.disk_read_run(20, 20, 4);
    sim.disk_read_run(0, 0, 8);
    // Block 30 alone into page 40: unclassified.
    sim.disk_read_run(40, 30, 1);
    let c = sim.t.patterns.counts();
    assert_eq!(
        (c.sequential, c.loops, c.unclassified_pages),
        (1, 1, 1),
        "{c:?}"
    );
    // The loop, read again from its start and not refaulted, from its end.
    let want: Vec<PageIdx> = (16..24).chain((0..8).rev()).chain([40]).collect();
    assert_eq!(sim.t.pick_clean(64, None), want);
    assert_eq!(sim.t.pick_clean(3, None), vec![16, 17, 18]);
    // The anonymous page only once every mirrored one is taken.
    assert!(!sim.t.pick_victims(17).contains(&60));
    assert!(sim.t.pick_victims(18).contains(&60));
    // Reclaim drops the sequential run first, without a write.
    sim.reclaim(8);
    assert!((16..24).all(|p| matches!(sim.t.state(p), PageState::OnDisk(_))));
    assert!((0..8).all(|p| matches!(sim.t.state(p), PageState::Mirrored(_))));
    assert_eq!(sim.writes, 0);
    // The guest uses them again: they refault from the image, and the sequence is a loop.
    assert_eq!(sim.read(17), 117);
    let s = sim
        .t
        .patterns
        .sequence_of(17)
        .expect("back in its sequence");
    assert_eq!(
        (s.kind, s.start, s.end),
        (crate::pattern::sequence::SequenceKind::Loop, 16, 24)
    );
    assert_eq!(sim.t.patterns.counts().sequential, 0);
    assert_eq!(sim.t.patterns.take_detected(), (2, 2));
}

#[test]
fn protected_candidates_are_picked_in_the_victim_order_without_the_writable_ones() {
    let mut sim = Sim::with_policy(64, MAPPER, VictimPolicy::Hd2);
    for b in 0..32 {
        sim.disk.insert(b, 100 + u64::from(b));
    }
    // An older sequential stream into pages 0..8, a newer one into 16..24: the newer is
    // taken first. Disk reads leave them writable, with digests.
    sim.disk_read_run(0, 0, 4);
    sim.disk_read_run(4, 4, 4);
    sim.disk_read_run(16, 16, 4);
    sim.disk_read_run(20, 20, 4);
    assert_eq!(sim.t.pick_protected(64), Vec::<PageIdx>::new());
    // Some checked and protected (as readiness leaves them), in both streams.
    for p in [2, 3, 5, 17, 22] {
        sim.ram.get_mut(&p).unwrap().1 = true;
        sim.t.mirror_protected(p);
    }
    assert_eq!(sim.t.pick_protected(64), vec![17, 22, 2, 3, 5]);
    assert_eq!(sim.t.pick_protected(3), vec![17, 22, 2]);
    // One the guest writes is no candidate at all.
    sim.write(22, 9);
    assert_eq!(sim.t.pick_protected(64), vec![17, 2, 3, 5]);
    // The order of every candidate is unchanged.
    let want: Vec<PageIdx> = [16..22, 23..24, 0..8].into_iter().flatten().collect();
    assert_eq!(sim.t.pick_clean(64, None), want);
    // Other victim orders have no protected-first pick.
    let mut clock = Sim::with_policy(16, MAPPER, VictimPolicy::Clock);
    clock.disk_read_run(0, 0, 4);
    clock.t.mirror_protected(1);
    assert_eq!(clock.t.pick_protected(16), Vec::<PageIdx>::new());
}

#[test]
fn random_and_clock_give_mirrored_pages_as_clean_picks() {
    let mut sim = Sim::new(16, MAPPER);
    sim.write(9, 1);
    sim.disk_read_run(0, 0, 4);
    let mut v = sim.t.pick_clean(16, None);
    v.sort_unstable();
    assert_eq!(v, vec![0, 1, 2, 3]);
    assert_eq!(sim.t.pick_clean(2, None).len(), 2);
}

/// A guest that writes every page it swaps in gets them writable, but in the control
/// clusters; once it only reads them, and reclaim drops them unwritten, they come in clean
/// again. Every byte reads back as written throughout.
#[test]
fn loads_from_swap_come_in_writable_while_the_guest_writes_what_it_swaps_in() {
    const N: u32 = 512;
    let mut sim = Sim::new(N, Mechanisms::DEFAULT);
    let kept = |sim: &Sim, p| matches!(sim.t.fault(p, false), FaultAction::Load { keep: true, .. });
    for p in 0..N {
        sim.write(p, u64::from(p) + 1);
    }
    for round in 1..=3u64 {
        sim.reclaim(N);
        assert!(kept(&sim, 0) && kept(&sim, 128), "control clusters keep");
        for p in 0..N {
            assert_eq!(sim.read(p), u64::from(p) + round);
            sim.write(p, u64::from(p) + round + 1);
        }
    }
    sim.reclaim(N);
    let writable = (0..N).filter(|&p| !kept(&sim, p)).count();
    assert_eq!(
        writable,
        7 * 512 / 8,
        "all but the control clusters: {:?}",
        sim.t.clean_reuse
    );
    for _ in 0..6 {
        for p in 0..N {
            assert_eq!(sim.read(p), u64::from(p) + 4);
        }
        sim.reclaim(N);
    }
    assert!((0..N).all(|p| kept(&sim, p)), "{:?}", sim.t.clean_reuse);
    let writes = sim.writes;
    for p in 0..N {
        assert_eq!(sim.read(p), u64::from(p) + 4);
    }
    sim.reclaim(N);
    assert_eq!(
        sim.writes, writes,
        "pages kept clean go out without a write"
    );
}

#[test]
fn a_read_in_flight_notes_which_pages_of_its_run_change_state() {
    let mut t = StateTable::new(8, 8, Mechanisms::DEFAULT, VictimPolicy::Random, 7);
    let run = t.begin_read(2, 3);
    let other = t.begin_read(0, 1);
    t.installed(3, FaultAction::Zero);
    t.installed(6, FaultAction::Zero);
    assert_eq!(t.end_read(run), [false, true, false]);
    assert_eq!(t.end_read(other), [false]);
    assert!(t.end_read(run).is_empty(), "a read ends once");
    t.installed(2, FaultAction::Zero);
}
