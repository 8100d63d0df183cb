//! The seeds of the virtio targets, each run as the fuzzer runs it and checked to do what its
//! name says. `cargo +nightly test -- --ignored write_seeds` (in `fuzz/`) writes them to
//! `corpus/virtio_*/`.

use crate::guest::{rings, QUEUE_STRIDE};
use crate::virtio_balloon::Counts as BalloonCounts;
use crate::virtio_blk::Counts as BlkCounts;
use crate::virtio_mmio::{reg, Outcome};
use crate::{virtio_balloon, virtio_blk, virtio_mmio};

const NEXT: u16 = 1;
const WRITE: u16 = 2;
const INDIRECT: u16 = 4;

const T_IN: u32 = 0;
const T_OUT: u32 = 1;
const T_FLUSH: u32 = 4;
const T_GET_ID: u32 = 8;

/// Guest RAM from address 0, as long as its highest byte written.
#[derive(Default)]
struct Ram(Vec<u8>);

impl Ram {
    fn put(&mut self, addr: u64, bytes: &[u8]) {
        let at = usize::try_from(addr).unwrap();
        if self.0.len() < at + bytes.len() {
            self.0.resize(at + bytes.len(), 0);
        }
        self.0[at..at + bytes.len()].copy_from_slice(bytes);
    }

    /// Descriptor `i` of the table at `table`.
    fn desc(&mut self, table: u64, i: u16, (addr, len, flags): (u64, u32, u16), next: u16) {
        let mut d = Vec::with_capacity(16);
        d.extend_from_slice(&addr.to_le_bytes());
        d.extend_from_slice(&len.to_le_bytes());
        d.extend_from_slice(&flags.to_le_bytes());
        d.extend_from_slice(&next.to_le_bytes());
        self.put(table + 16 * u64::from(i), &d);
    }

    /// A chain of `descs` from descriptor `first` on (NEXT flags and links added).
    fn chain(&mut self, table: u64, first: u16, descs: &[(u64, u32, u16)]) {
        for (k, &(addr, len, flags)) in descs.iter().enumerate() {
            let i = first + k as u16;
            let more = k + 1 < descs.len();
            let flags = if more { flags | NEXT } else { flags };
            self.desc(table, i, (addr, len, flags), if more { i + 1 } else { 0 });
        }
    }

    /// Offers the chains at `heads` in the available ring at `avail` of a queue of `size`
    /// whose next index is `next`.
    fn offer(&mut self, avail: u64, size: u16, next: u16, heads: &[u16]) {
        for (k, &h) in heads.iter().enumerate() {
            let slot = next.wrapping_add(k as u16) % size;
            self.put(avail + 4 + 2 * u64::from(slot), &h.to_le_bytes());
        }
        let idx = next.wrapping_add(heads.len() as u16);
        self.put(avail + 2, &idx.to_le_bytes());
    }

    /// A virtio-blk request header at `addr`.
    fn header(&mut self, addr: u64, req_type: u32, sector: u64) {
        let mut h = Vec::with_capacity(16);
        h.extend_from_slice(&req_type.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&sector.to_le_bytes());
        self.put(addr, &h);
    }
}

// ---- virtio_blk ----

/// The blk seeds' queue: 4 descriptors from 0; request headers at 0x80, 0xa0, 0xc0, their
/// status bytes 16 bytes further; data in RAM past the input.
const BLK_SIZE: u16 = 4;

fn blk_input(cfg: u8, next: u16, ram: &Ram) -> Vec<u8> {
    let (desc, avail, used) = rings(0, BLK_SIZE);
    let mut v = vec![cfg | 2]; // 2^2 = BLK_SIZE descriptors
    v.extend_from_slice(&next.to_le_bytes());
    for a in [desc, avail, used] {
        v.extend_from_slice(&(a as u16).to_le_bytes());
    }
    v.extend_from_slice(&ram.0);
    v
}

/// One request (`descs` from descriptor 0) on a fresh queue.
fn blk_one(cfg: u8, req_type: u32, sector: u64, descs: &[(u64, u32, u16)]) -> Vec<u8> {
    let (desc, avail, _) = rings(0, BLK_SIZE);
    let mut ram = Ram::default();
    ram.header(0x80, req_type, sector);
    ram.chain(desc, 0, descs);
    ram.offer(avail, BLK_SIZE, 0, &[0]);
    blk_input(cfg, 0, &ram)
}

const HDR: (u64, u32, u16) = (0x80, 16, 0);
const STATUS: (u64, u32, u16) = (0x90, 1, WRITE);

fn blk() -> Vec<(&'static str, Vec<u8>, BlkCounts)> {
    let one = |reads, writes, flushes, get_ids, errors| BlkCounts {
        reads,
        writes,
        flushes,
        get_ids,
        errors,
        used: 1,
    };
    let mut seeds = vec![
        (
            "read",
            blk_one(0, T_IN, 8, &[HDR, (0x1000, 4096, WRITE), STATUS]),
            one(1, 0, 0, 0, 0),
        ),
        (
            // The data written is the start of RAM: the rings and the header.
            "write",
            blk_one(0, T_OUT, 16, &[HDR, (0, 512, 0), STATUS]),
            one(0, 1, 0, 0, 0),
        ),
        (
            "flush",
            blk_one(0, T_FLUSH, 0, &[HDR, STATUS]),
            one(0, 0, 1, 0, 0),
        ),
        (
            "get_id",
            blk_one(0, T_GET_ID, 0, &[HDR, (0xa0, 20, WRITE), STATUS]),
            one(0, 0, 0, 1, 0),
        ),
        (
            "unsupported",
            blk_one(0, 77, 0, &[HDR, STATUS]),
            one(0, 0, 0, 0, 1),
        ),
        (
            // Across the two adjacent regions, then above the hole at 4 GiB.
            "read_spanning_regions",
            blk_one(
                0,
                T_IN,
                0,
                &[
                    HDR,
                    (0xf000, 0x2000, WRITE),
                    (0x1_0000_0000, 0x1000, WRITE),
                    STATUS,
                ],
            ),
            one(1, 0, 0, 0, 0),
        ),
        (
            "read_outside_ram",
            blk_one(0, T_IN, 0, &[HDR, (0xffff_ffff_f000, 4096, WRITE), STATUS]),
            one(0, 0, 0, 0, 1),
        ),
        (
            "read_past_the_end",
            blk_one(
                0,
                T_IN,
                u64::MAX / 512,
                &[HDR, (0x1000, 4096, WRITE), STATUS],
            ),
            one(0, 0, 0, 0, 1),
        ),
        (
            "read_zero_length",
            blk_one(0, T_IN, 0, &[HDR, (0x1000, 0, WRITE), STATUS]),
            one(0, 0, 0, 0, 1),
        ),
        (
            "write_wrong_direction",
            blk_one(0, T_OUT, 0, &[HDR, (0x1000, 512, WRITE), STATUS]),
            one(0, 0, 0, 0, 1),
        ),
        (
            "write_read_only",
            blk_one(0x10, T_OUT, 0, &[HDR, (0, 512, 0), STATUS]),
            one(0, 0, 0, 0, 1),
        ),
    ];

    // Descriptors 0 and 1 point at each other: the chain ends where the queue size says.
    let (desc, avail, _) = rings(0, BLK_SIZE);
    let mut ram = Ram::default();
    ram.header(0x80, T_IN, 0);
    ram.desc(desc, 0, (0x80, 16, NEXT), 1);
    ram.desc(desc, 1, (0x90, 1, WRITE | NEXT), 0);
    ram.offer(avail, BLK_SIZE, 0, &[0]);
    seeds.push(("loop", blk_input(0, 0, &ram), one(0, 0, 0, 0, 1)));

    // One descriptor naming a table of three elsewhere.
    let mut ram = Ram::default();
    ram.header(0x80, T_IN, 1);
    ram.desc(desc, 0, (0xb0, 48, INDIRECT), 0);
    ram.chain(0xb0, 0, &[HDR, (0x1000, 512, WRITE), STATUS]);
    ram.offer(avail, BLK_SIZE, 0, &[0]);
    seeds.push(("indirect", blk_input(0, 0, &ram), one(1, 0, 0, 0, 0)));

    // A read and a flush (they share the status descriptor) whose ring indices wrap past 65535.
    let next = 0xfffe;
    let mut ram = Ram::default();
    ram.header(0x80, T_IN, 3);
    ram.header(0xa0, T_FLUSH, 0);
    ram.desc(desc, 0, (0x80, 16, NEXT), 1);
    ram.desc(desc, 1, (0x1000, 1024, WRITE | NEXT), 3);
    ram.desc(desc, 2, (0xa0, 16, NEXT), 3);
    ram.desc(desc, 3, STATUS, 0);
    ram.offer(avail, BLK_SIZE, next, &[0, 2]);
    seeds.push((
        "wrapping_indices",
        blk_input(0, next, &ram),
        BlkCounts {
            reads: 1,
            flushes: 1,
            used: 2,
            ..BlkCounts::default()
        },
    ));
    seeds
}

// ---- virtio_balloon ----

/// The balloon seeds' queues: 4 descriptors each, queue `i` from `i * 0x80`; buffers from 0x200.
const BALLOON_SIZE: u16 = 4;

fn balloon_rings(i: u16) -> (u64, u64, u64) {
    rings(u64::from(i) * 0x80, BALLOON_SIZE)
}

fn balloon_input(features: u8, target: u16, ops: &[u8], ram: &Ram) -> Vec<u8> {
    let mut v = vec![features];
    v.extend_from_slice(&target.to_le_bytes());
    for i in 0..4 {
        v.push(2); // 2^2 = BALLOON_SIZE descriptors
        let (d, a, u) = balloon_rings(i);
        for x in [d, a, u] {
            v.extend_from_slice(&(x as u16).to_le_bytes());
        }
    }
    let mut o = [7u8; 8];
    o[..ops.len()].copy_from_slice(ops);
    v.extend_from_slice(&o);
    v.extend_from_slice(&ram.0);
    v
}

/// Offers one chain of `descs` on balloon queue `i`.
fn balloon_chain(ram: &mut Ram, i: u16, descs: &[(u64, u32, u16)]) {
    let (d, a, _) = balloon_rings(i);
    ram.chain(d, 0, descs);
    ram.offer(a, BALLOON_SIZE, 0, &[0]);
}

fn pfns(list: &[u32]) -> Vec<u8> {
    list.iter().flat_map(|p| p.to_le_bytes()).collect()
}

fn balloon() -> Vec<(&'static str, Vec<u8>, BalloonCounts)> {
    let mut seeds = Vec::new();

    // Pages in both low regions and at 4 GiB, and one in the hole.
    let mut ram = Ram::default();
    ram.put(0x200, &pfns(&[0x10, 0x11, 0x10_0000, 0x20]));
    ram.put(0x210, &pfns(&[0x10, 0x11]));
    balloon_chain(&mut ram, 0, &[(0x200, 16, 0)]);
    balloon_chain(&mut ram, 1, &[(0x210, 8, 0)]);
    seeds.push((
        "inflate_deflate",
        balloon_input(0, 0, &[0, 1], &ram),
        BalloonCounts {
            inflated: 3,
            deflated: 2,
            invalid: 1,
            used: 2,
            ..BalloonCounts::default()
        },
    ));

    // At the target, the guest takes a page back on its own.
    let mut ram = Ram::default();
    ram.put(0x200, &pfns(&[0x10, 0x11]));
    balloon_chain(&mut ram, 0, &[(0x200, 8, 0)]);
    balloon_chain(&mut ram, 1, &[(0x200, 4, 0)]);
    seeds.push((
        "oom_deflate",
        balloon_input(2, 2, &[0, 1], &ram),
        BalloonCounts {
            inflated: 2,
            deflated: 1,
            oom_deflated: 1,
            used: 2,
            ..BalloonCounts::default()
        },
    ));

    // Queue 2 is the statistics queue: two buffers (the first comes back when the second
    // arrives), then the VMM asks for fresh numbers and gets the second back.
    let mut stats = Vec::new();
    for (tag, val) in [(4u16, 1000u64), (5, 2000)] {
        stats.extend_from_slice(&tag.to_le_bytes());
        stats.extend_from_slice(&val.to_le_bytes());
    }
    let mut ram = Ram::default();
    ram.put(0x200, &stats);
    let (d, a, _) = balloon_rings(2);
    ram.desc(d, 0, (0x200, 20, 0), 0);
    ram.desc(d, 1, (0x200, 10, 0), 0);
    ram.offer(a, BALLOON_SIZE, 0, &[0, 1]);
    seeds.push((
        "stats",
        balloon_input(1, 0, &[2, 4], &ram),
        BalloonCounts {
            stats_updates: 2,
            used: 2,
            ..BalloonCounts::default()
        },
    ));

    // Queue 2 is the reporting queue without STATS_VQ: two whole ranges and a misaligned one.
    let mut ram = Ram::default();
    balloon_chain(
        &mut ram,
        2,
        &[
            (0x1_0000, 0x2000, WRITE),
            (0x1_0000_0000, 0x1000, WRITE),
            (0x1_0100, 0x1000, WRITE),
        ],
    );
    seeds.push((
        "report",
        balloon_input(4, 0, &[2], &ram),
        BalloonCounts {
            reported: 3,
            invalid: 1,
            used: 1,
            ..BalloonCounts::default()
        },
    ));

    // All four queues, a driver reset, and everything again after it.
    let mut ram = Ram::default();
    ram.put(0x200, &pfns(&[0x12, 0x13]));
    ram.put(0x208, &stats);
    balloon_chain(&mut ram, 0, &[(0x200, 8, 0)]);
    balloon_chain(&mut ram, 1, &[(0x200, 8, 0)]);
    balloon_chain(&mut ram, 2, &[(0x208, 20, 0)]);
    balloon_chain(&mut ram, 3, &[(0x1_1000, 0x1000, WRITE)]);
    seeds.push((
        "all_queues_and_reset",
        balloon_input(5, 0, &[0, 2, 3, 5, 0, 1, 4, 6 | (3 << 3)], &ram),
        BalloonCounts {
            inflated: 4,
            deflated: 2,
            reported: 1,
            stats_updates: 1,
            used: 4,
            ..BalloonCounts::default()
        },
    ));

    // A PFN array outside RAM, a write-only one (not a PFN array), and a chain that loops (the
    // queue size ends it after four descriptors: the same page deflated four times).
    let mut ram = Ram::default();
    ram.put(0x200, &pfns(&[0x14]));
    balloon_chain(&mut ram, 0, &[(0xffff_ffff_0000, 64, 0), (0x200, 4, WRITE)]);
    let (d, a, _) = balloon_rings(1);
    ram.desc(d, 0, (0x200, 4, NEXT), 1);
    ram.desc(d, 1, (0x200, 4, NEXT), 0);
    ram.offer(a, BALLOON_SIZE, 0, &[0]);
    seeds.push((
        "hostile",
        balloon_input(0, 0, &[0, 1], &ram),
        BalloonCounts {
            deflated: 4,
            invalid: 1,
            used: 2,
            ..BalloonCounts::default()
        },
    ));
    seeds
}

// ---- virtio_mmio ----

/// Operations of a `virtio_mmio` input.
#[derive(Default)]
struct Ops(Vec<u8>);

impl Ops {
    fn write(mut self, offset: u16, value: &[u8]) -> Self {
        let arg = value.len().trailing_zeros() as u8;
        self.0.push(arg << 3);
        self.0.extend_from_slice(&offset.to_le_bytes());
        self.0.extend_from_slice(value);
        self
    }

    fn write32(self, offset: u64, value: u32) -> Self {
        self.write(offset as u16, &value.to_le_bytes())
    }

    fn read(mut self, offset: u64, width: usize) -> Self {
        self.0.push(1 | ((width.trailing_zeros() as u8) << 3));
        self.0.extend_from_slice(&(offset as u16).to_le_bytes());
        self
    }

    fn set_up(mut self, features: u16, size_log2: u8, stop_before_ok: bool) -> Self {
        self.0.push(2 | (u8::from(stop_before_ok) << 3));
        self.0.extend_from_slice(&features.to_le_bytes());
        self.0.push(size_log2);
        self
    }

    fn notify(mut self, queue: u8) -> Self {
        self.0.push(3 | (queue << 3));
        self
    }

    fn poke(mut self, addr: u16, bytes: &[u8]) -> Self {
        self.0.push(4);
        self.0.extend_from_slice(&addr.to_le_bytes());
        self.0.push(bytes.len() as u8);
        self.0.extend_from_slice(bytes);
        self
    }

    fn op(mut self, op: u8) -> Self {
        self.0.push(op);
        self
    }

    fn set_target(mut self, pages: u16) -> Self {
        self.0.push(6);
        self.0.extend_from_slice(&pages.to_le_bytes());
        self
    }
}

fn mmio_input(cfg: u8, ram: &Ram, ops: Ops) -> Vec<u8> {
    let mut v = vec![cfg];
    v.extend_from_slice(&(ram.0.len() as u16).to_le_bytes());
    v.extend_from_slice(&ram.0);
    v.extend_from_slice(&ops.0);
    v
}

const STATUS_OK: u32 = 1 | 2 | 4 | 8;

fn mmio() -> Vec<(&'static str, Vec<u8>, Outcome)> {
    let mut seeds = Vec::new();
    // The set-up's queue 0 with 4 descriptors: a read, and a flush offered later.
    let (desc, avail, _) = rings(0, 4);
    let mut ram = Ram::default();
    ram.header(0x80, T_IN, 8);
    ram.header(0xa0, T_FLUSH, 0);
    ram.chain(desc, 0, &[HDR, (0x1000, 4096, WRITE), STATUS]);
    ram.desc(desc, 3, (0xa0, 16, NEXT), 2);
    ram.offer(avail, 4, 0, &[0]);
    seeds.push((
        "blk_read",
        mmio_input(
            0,
            &ram,
            Ops::default()
                .set_up(0xffff, 2, false)
                .notify(0)
                .read(reg::INTERRUPT_STATUS, 4)
                .op(7)
                .read(reg::CONFIG, 8)
                .read(reg::CONFIG + 20, 4),
        ),
        Outcome {
            status: STATUS_OK,
            interrupts: 1,
            requests: 1,
        },
    ));
    // The driver offers the flush (it shares the status descriptor) after the read completed.
    seeds.push((
        "blk_refill",
        mmio_input(
            0,
            &ram,
            Ops::default()
                .set_up(0x0200, 2, false)
                .notify(0)
                .poke(avail as u16 + 4 + 2, &3u16.to_le_bytes())
                .poke(avail as u16 + 2, &2u16.to_le_bytes())
                .notify(0)
                .op(7),
        ),
        Outcome {
            status: STATUS_OK,
            interrupts: 2,
            requests: 2,
        },
    ));
    // A driver that breaks the protocol: odd widths, legacy features, queue registers out of
    // turn, DRIVER_OK without FEATURES_OK, a write across the end of the slot, then a reset.
    seeds.push((
        "blk_protocol_errors",
        mmio_input(
            2,
            &Ram::default(),
            Ops::default()
                .write32(reg::STATUS, 3)
                .write(reg::STATUS as u16, &[7])
                .write(reg::DEVICE_FEATURES_SEL as u16, &[1, 0])
                .read(reg::DEVICE_FEATURES, 4)
                .read(reg::DEVICE_FEATURES, 8)
                .write32(reg::DRIVER_FEATURES, 0x20)
                .write32(reg::STATUS, 3 | 8)
                .write32(reg::QUEUE_NUM, 3)
                .write32(reg::STATUS, 3 | 4)
                .notify(0)
                .write(0x1fe, &[1, 2, 3, 4])
                .write32(reg::CONFIG, 1)
                .read(reg::STATUS, 4)
                .write32(reg::STATUS, 0),
        ),
        Outcome::default(),
    ));
    // The empty slot after the device answers like an empty microvm slot and takes nothing.
    seeds.push((
        "empty_slot",
        mmio_input(
            0,
            &Ram::default(),
            Ops::default()
                .read(0x200, 4)
                .read(0x204, 4)
                .read(0x208, 4)
                .write32(0x270, 3)
                .read(0x270, 4)
                .read(0x300, 4),
        ),
        Outcome::default(),
    ));

    // The balloon with every feature: inflate on queue 0, a statistics buffer on queue 2, a
    // free page report on queue 3 (queue i at i * QUEUE_STRIDE, 2 descriptors).
    let mut ram = Ram::default();
    let q = |i: u64| rings(i * QUEUE_STRIDE, 2);
    ram.put(0x80, &pfns(&[0x10, 0x11]));
    ram.desc(q(0).0, 0, (0x80, 8, 0), 0);
    ram.offer(q(0).1, 2, 0, &[0]);
    let mut stats = Vec::new();
    stats.extend_from_slice(&4u16.to_le_bytes());
    stats.extend_from_slice(&1000u64.to_le_bytes());
    ram.put(0x280, &stats);
    ram.desc(q(2).0, 0, (0x280, 10, 0), 0);
    ram.offer(q(2).1, 2, 0, &[0]);
    ram.desc(q(3).0, 0, (0x1_2000, 0x2000, WRITE), 0);
    ram.offer(q(3).1, 2, 0, &[0]);
    seeds.push((
        "balloon",
        mmio_input(
            1,
            &ram,
            Ops::default()
                .set_up(0xffff, 1, false)
                .set_target(2)
                .read(reg::CONFIG, 4)
                .notify(0)
                .op(7)
                .notify(2)
                .op(5)
                .notify(3)
                .write32(reg::CONFIG + 4, 2)
                .op(7),
        ),
        Outcome {
            status: STATUS_OK,
            interrupts: 4,
            requests: 5,
        },
    ));
    seeds
}

#[test]
fn seeds_do_what_they_say() {
    for (name, input, want) in blk() {
        assert_eq!(virtio_blk::run(&input), want, "virtio_blk seed {name}");
    }
    for (name, input, want) in balloon() {
        assert_eq!(
            virtio_balloon::run(&input),
            want,
            "virtio_balloon seed {name}"
        );
    }
    for (name, input, want) in mmio() {
        assert_eq!(virtio_mmio::run(&input), want, "virtio_mmio seed {name}");
    }
}

#[test]
fn short_inputs_decode() {
    for n in 0..64 {
        let input = vec![0xffu8; n];
        virtio_blk::run(&input);
        virtio_balloon::run(&input);
        virtio_mmio::run(&input);
    }
}

#[test]
#[ignore = "writes the seed files"]
fn write_seeds() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let named = |v: Vec<(&'static str, Vec<u8>)>, target: &str| {
        let dir = root.join(target);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, input) in v {
            std::fs::write(dir.join(name), input).unwrap();
        }
    };
    named(
        blk().into_iter().map(|(n, i, _)| (n, i)).collect(),
        "virtio_blk",
    );
    named(
        balloon().into_iter().map(|(n, i, _)| (n, i)).collect(),
        "virtio_balloon",
    );
    named(
        mmio().into_iter().map(|(n, i, _)| (n, i)).collect(),
        "virtio_mmio",
    );
}
