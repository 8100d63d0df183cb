//! virtio-balloon polling driver (device ID 5), modelled on Linux's
//! `virtio_balloon.c`:
//!
//! - queues in the order the features make them exist: inflate 0, deflate 1,
//!   stats 2 (with VIRTIO_BALLOON_F_STATS_VQ), then free page reporting (with
//!   VIRTIO_BALLOON_F_REPORTING); each is used at depth 1;
//! - `poll` (from the mm tick, at most every few ms) compares `num_pages` with
//!   the pages held and inflates (pages taken from the allocator, which
//!   reclaims if needed) or deflates (pages returned after the device is
//!   told), up to 4096 pages per poll in arrays of 256 4 KiB PFNs, then writes
//!   `actual`. Reading `num_pages` is an MMIO exit, so while the balloon holds
//!   its target it is read every `balloon_poll_ms=` (default `CONFIG_POLL_MS`; Linux reads it only when
//!   the device signals a configuration change), and on every poll while the
//!   balloon moves;
//! - the stats buffer stays with the device; when the device returns it, it is
//!   refilled (swap in/out, major/minor faults, free, total, available, caches)
//!   and posted again;
//! - with VIRTIO_BALLOON_F_DEFLATE_ON_OOM, an allocation that fails after
//!   reclaim deflates 256 pages (1 MiB) and retries, like Linux's OOM notifier;
//!   then `poll` does not inflate for a while (`Holdoff` in
//!   `memvisor_guest_mm::holdoff`: `balloon_holdoff_ms`, default 1 s, restarted
//!   by each deflate-on-OOM, doubled up to 60 s while they keep coming right
//!   after inflation resumes, back to the base once inflation ran that long
//!   without one). Without it the driver would inflate straight back towards
//!   the target, the next allocation would fail again, and the guest would
//!   spend its time moving the same pages in and out of the balloon. Linux's
//!   driver moves towards the target only after the device signals a
//!   configuration change, and its OOM notifier does not wake it; a polling
//!   driver sees the target on every poll and needs the hold-off. Deflating
//!   towards a lower target never waits;
//! - free page reporting: every `REPORT_MS`, up to 16 naturally aligned free
//!   chunks of `1 << order` pages that were not reported since they were last
//!   allocated are taken off the free list, reported (device-writable buffers,
//!   as Linux does) and put back at the tail of the free list once the device
//!   returns them. The vCPU does not wait for the device: the workload goes
//!   on, and a later poll puts the chunks back (as Linux's reporting worker
//!   sleeps while the device works and its tasks run). An allocation that
//!   finds no memory first waits for a report in flight, whose chunks are
//!   free memory;
//! - `report_race=` makes the driver race the device on purpose, to test the
//!   hypervisor: `used` writes a pattern to every page of every chunk the
//!   moment the device hands it back and reads it back (`balloon_race_lost`
//!   counts words that did not keep what was written: a device that releases
//!   pages after it says it is done loses them); `inflight` breaks the
//!   protocol and writes the first page of each chunk while the device still
//!   holds it (`balloon_inflight_lost` counts those pages that did not keep the
//!   write: the virtio spec lets the device discard them). Either way the
//!   chunks go back unreported, so they are reported, and raced, again.

use memvisor_guest_mm::holdoff::Holdoff;
use memvisor_guest_mm::{Backend, Mm, PAGE_SIZE};

use super::STATUS_NEGOTIATED;
use super::mmio::{MmioTransport, STATUS_DRIVER_OK};
use super::queue::{Segment, SplitQueue};
use crate::cpu::{pause, rdtsc};
use crate::workloads::pattern::word_at;

const F_STATS_VQ: u64 = 1 << 1;
const F_DEFLATE_ON_OOM: u64 = 1 << 2;
const F_REPORTING: u64 = 1 << 5;

const CONFIG_NUM_PAGES: usize = 0;
const CONFIG_ACTUAL: usize = 4;

const Q_INFLATE: u32 = 0;
const Q_DEFLATE: u32 = 1;

/// PFNs per inflate/deflate request (Linux's VIRTIO_BALLOON_ARRAY_PFNS_MAX).
const PFNS_PER_REQUEST: usize = 256;
/// Pages moved per poll at most.
const PAGES_PER_POLL: u32 = 4096;
/// Pages given back per deflate-on-OOM event (Linux: 256).
const OOM_PAGES: u32 = 256;
/// Longest inflation hold-off after deflates-on-OOM, however often they come (unless the base
/// is longer).
const HOLDOFF_MAX_MS: u64 = 60_000;
/// Time between free page reporting passes, unless `report_ms=` says otherwise.
pub const REPORT_MS: u64 = 100;
/// Chunks per report request.
const REPORT_CHUNKS: usize = 16;
/// Time between two reads of the target while the balloon holds it, unless `balloon_poll_ms=`
/// says otherwise.
pub const CONFIG_POLL_MS: u64 = 50;
const TIMEOUT_MS: u64 = 5_000;

const S_SWAP_IN: u16 = 0;
const S_SWAP_OUT: u16 = 1;
const S_MAJFLT: u16 = 2;
const S_MINFLT: u16 = 3;
const S_MEMFREE: u16 = 4;
const S_MEMTOT: u16 = 5;
const S_AVAIL: u16 = 6;
const S_CACHES: u16 = 7;
const NR_STATS: usize = 8;
/// `struct virtio_balloon_stat` is packed: u16 tag, u64 value.
const STAT_SIZE: usize = 10;

#[derive(Clone, Copy, Default)]
pub struct BalloonStats {
    pub inflated: u64,
    pub deflated: u64,
    /// Pages given back by deflate-on-OOM.
    pub oom_deflated: u64,
    /// Deflate-on-OOM events (each up to `OOM_PAGES` pages).
    pub oom_deflates: u64,
    /// Length of the last inflation hold-off, in milliseconds.
    pub holdoff_ms: u64,
    pub stats_sent: u64,
    pub reported_chunks: u64,
    /// TSC cycles the vCPU spent waiting for the device to complete a request.
    pub wait_cycles: u64,
    /// Reads of the target (`num_pages`), each an MMIO exit.
    pub config_reads: u64,
    pub polls: u64,
    /// `report_race=used`: pages written and read back the moment they came back.
    pub race_checked: u64,
    /// Words of those pages that did not read what was written (must be 0).
    pub race_lost: u64,
    /// `report_race=inflight`: pages written while the device held them.
    pub inflight_written: u64,
    /// Of those, the ones that did not keep the write (allowed: the guest broke the protocol).
    pub inflight_lost: u64,
}

/// How the driver races free page reporting on purpose (`report_race=`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ReportRace {
    Off,
    /// Reuse every reported page the moment the device returns it.
    AtUsed,
    /// Write to reported pages while the device holds them (a protocol violation).
    InFlight,
}

pub struct Balloon {
    transport: MmioTransport,
    inflate: SplitQueue,
    deflate: SplitQueue,
    stats_q: Option<(u32, SplitQueue)>,
    report_q: Option<(u32, SplitQueue)>,
    report_order: u32,
    report_ms: u64,
    /// Time between two reads of the target while the balloon holds it.
    poll_ms: u64,
    race: ReportRace,
    deflate_on_oom: bool,
    /// When inflation may resume after a deflate-on-OOM.
    holdoff: Holdoff,
    /// Page holding the PFN array (first half) and the stats buffer (at 2048).
    buf: usize,
    held: u32,
    next_report: u64,
    /// The target when last read, and when to read it again while the balloon holds it.
    target: u32,
    next_config: u64,
    /// The chunks of a report the device has not returned yet (outside `report_race=`).
    in_flight: Option<([u32; REPORT_CHUNKS], usize)>,
    pub stats: BalloonStats,
}

/// Entries per balloon queue at most.
const QUEUE_CAP: u32 = 64;

fn new_queue(transport: &MmioTransport, idx: u32) -> Result<SplitQueue, &'static str> {
    super::setup_queue(transport, idx, QUEUE_CAP)
}

impl Balloon {
    /// `report_order`: the order of the free runs to report, or `None` to not report free pages,
    /// every `report_ms`, racing the device as `race` says; `holdoff_ms`: how long inflation
    /// waits after a first deflate-on-OOM (0: not at all); `poll_ms`: how often the target is
    /// read while the balloon holds it.
    pub fn init(
        transport: MmioTransport,
        report_order: Option<u32>,
        (report_ms, race): (u64, ReportRace),
        (holdoff_ms, poll_ms): (u64, u64),
    ) -> Result<Self, &'static str> {
        let reporting = if report_order.is_some() {
            F_REPORTING
        } else {
            0
        };
        let features = super::negotiate(&transport, F_STATS_VQ | F_DEFLATE_ON_OOM | reporting)?;
        let report_order = report_order.unwrap_or(0);
        let status = STATUS_NEGOTIATED;
        let inflate = new_queue(&transport, Q_INFLATE)?;
        let deflate = new_queue(&transport, Q_DEFLATE)?;
        let mut next = 2;
        let mut stats_q = None;
        if features & F_STATS_VQ != 0 {
            stats_q = Some((next, new_queue(&transport, next)?));
            next += 1;
        }
        let report_q = if features & F_REPORTING != 0 {
            Some((next, new_queue(&transport, next)?))
        } else {
            None
        };
        let buf = crate::early_alloc::alloc_pages(1).ok_or("out of memory")?;
        transport.set_status(status | STATUS_DRIVER_OK);
        let mut b = Balloon {
            transport,
            inflate,
            deflate,
            stats_q,
            report_q,
            report_order,
            report_ms,
            poll_ms,
            race,
            deflate_on_oom: features & F_DEFLATE_ON_OOM != 0,
            holdoff: Holdoff::new(holdoff_ms, HOLDOFF_MAX_MS),
            buf,
            held: 0,
            next_report: 0,
            target: 0,
            next_config: 0,
            in_flight: None,
            stats: BalloonStats::default(),
        };
        // The first stats buffer goes to the device at once (zeros until it asks again).
        if let Some((idx, q)) = b.stats_q.as_mut() {
            q.submit(&[Segment {
                addr: (buf + 2048) as u64,
                len: (NR_STATS * STAT_SIZE) as u32,
                device_writes: false,
            }]);
            b.transport.notify(*idx);
        }
        println!(
            "virtio-balloon: stats={} deflate_on_oom={} reporting={} (order {}) holdoff={} ms",
            u8::from(b.stats_q.is_some()),
            u8::from(b.deflate_on_oom),
            u8::from(b.report_q.is_some()),
            report_order,
            holdoff_ms
        );
        Ok(b)
    }

    /// Waits for the device to return the request in flight on `q`; counts the time in `stats`.
    fn wait(q: &mut SplitQueue, stats: &mut BalloonStats) -> bool {
        let start = rdtsc();
        let deadline = crate::time::deadline_after_ms(TIMEOUT_MS);
        let mut done = true;
        while q.poll_used().is_none() {
            if rdtsc() > deadline {
                println!("virtio-balloon: device did not complete a request");
                done = false;
                break;
            }
            pause();
        }
        stats.wait_cycles += rdtsc().saturating_sub(start);
        done
    }

    fn send_pfns(&mut self, inflate: bool, n: usize) -> bool {
        let seg = [Segment {
            addr: self.buf as u64,
            len: (n * 4) as u32,
            device_writes: false,
        }];
        let (q, idx) = if inflate {
            (&mut self.inflate, Q_INFLATE)
        } else {
            (&mut self.deflate, Q_DEFLATE)
        };
        q.submit(&seg);
        self.transport.notify(idx);
        Self::wait(q, &mut self.stats)
    }

    fn pfns(&mut self) -> &mut [u32; PFNS_PER_REQUEST] {
        // SAFETY: `buf` is this driver's page; the first 1 KiB is the PFN array, not in
        // flight (requests are waited for).
        unsafe { &mut *(self.buf as *mut [u32; PFNS_PER_REQUEST]) }
    }

    /// Follows the target (inflating only outside a hold-off), refills stats, reports free pages.
    pub fn poll(&mut self, mm: &mut Mm<'static>, be: &mut impl Backend) {
        self.stats.polls += 1;
        self.refill_stats(mm);
        let now = rdtsc();
        if self.held != self.target || now >= self.next_config {
            self.target = self.transport.config_read32(CONFIG_NUM_PAGES);
            self.stats.config_reads += 1;
            self.next_config = crate::time::deadline_after_ms(self.poll_ms);
        }
        let target = self.target;
        let mut moved = 0;
        let held_before = self.held;
        let inflate = self.holdoff.allows_inflate(crate::time::now_ms());
        while inflate && self.held < target && moved < PAGES_PER_POLL {
            let mut n = 0;
            while n < PFNS_PER_REQUEST && self.held + (n as u32) < target {
                match mm.alloc_balloon(be) {
                    Ok(f) => {
                        let pfn = mm.pfn(f) as u32;
                        self.pfns()[n] = pfn;
                        n += 1;
                    }
                    Err(_) => break,
                }
            }
            if n == 0 {
                break;
            }
            if !self.send_pfns(true, n) {
                // The device did not take them: give them back.
                for i in 0..n {
                    let f = mm.frame_of_pfn(u64::from(self.pfns()[i])).expect("our pfn");
                    mm.free_balloon(f);
                }
                break;
            }
            self.held += n as u32;
            self.stats.inflated += n as u64;
            moved += n as u32;
        }
        while self.held > target && moved < PAGES_PER_POLL {
            let n = self.deflate(mm, (self.held - target).min(PFNS_PER_REQUEST as u32));
            if n == 0 {
                break;
            }
            moved += n;
        }
        if self.held != held_before {
            self.transport.config_write32(CONFIG_ACTUAL, self.held);
        }
        if self.report_q.is_some() {
            self.complete_report(mm, false);
            if self.in_flight.is_none() && rdtsc() >= self.next_report {
                self.report(mm, be);
                self.next_report = crate::time::deadline_after_ms(self.report_ms);
            }
        }
    }

    /// Puts the chunks of the report in flight back on the free list if the device returned
    /// them (with `wait`, after waiting for it). Returns the pages put back.
    fn complete_report(&mut self, mm: &mut Mm<'static>, wait: bool) -> u32 {
        let Some((chunks, n)) = self.in_flight else {
            return 0;
        };
        let Some((_, q)) = self.report_q.as_mut() else {
            return 0;
        };
        let returned = if wait {
            Self::wait(q, &mut self.stats)
        } else {
            q.poll_used().is_some()
        };
        if !returned {
            return 0;
        }
        self.in_flight = None;
        let order = self.report_order;
        for &f in &chunks[..n] {
            mm.report_done(f, order, false);
        }
        self.stats.reported_chunks += n as u64;
        (n as u32) << order
    }

    /// Tells the device, then frees up to `count` balloon pages. Returns the pages freed.
    fn deflate(&mut self, mm: &mut Mm<'static>, count: u32) -> u32 {
        let mut n = 0;
        let mut from = 0;
        while n < count as usize {
            let Some(f) = mm.find_kind(memvisor_guest_mm::PageKind::Balloon, from) else {
                break;
            };
            let pfn = mm.pfn(f) as u32;
            self.pfns()[n] = pfn;
            n += 1;
            from = f + 1;
        }
        if n == 0 || !self.send_pfns(false, n) {
            return 0;
        }
        for i in 0..n {
            let f = mm.frame_of_pfn(u64::from(self.pfns()[i])).expect("our pfn");
            mm.free_balloon(f);
        }
        self.held -= n as u32;
        self.stats.deflated += n as u64;
        n as u32
    }

    /// Deflate-on-OOM: gives back `OOM_PAGES` pages if the device allows it, and holds
    /// inflation off.
    pub fn deflate_on_oom(&mut self, mm: &mut Mm<'static>, _be: &mut impl Backend) -> u32 {
        // A report in flight holds free memory: have it back before taking the balloon's.
        let back = self.complete_report(mm, true);
        if back > 0 {
            return back;
        }
        if !self.deflate_on_oom || self.held == 0 {
            return 0;
        }
        let n = self.deflate(mm, OOM_PAGES);
        if n > 0 {
            self.stats.oom_deflated += u64::from(n);
            self.stats.oom_deflates += 1;
            self.stats.holdoff_ms = self.holdoff.on_oom(crate::time::now_ms());
            self.transport.config_write32(CONFIG_ACTUAL, self.held);
        }
        n
    }

    fn refill_stats(&mut self, mm: &Mm<'static>) {
        let Some((idx, q)) = self.stats_q.as_mut() else {
            return;
        };
        if q.poll_used().is_none() {
            return;
        }
        let s = mm.stats();
        let page = PAGE_SIZE as u64;
        let values: [(u16, u64); NR_STATS] = [
            (S_SWAP_IN, s.events.pswpin * page),
            (S_SWAP_OUT, s.events.pswpout * page),
            (S_MAJFLT, s.events.pgmajfault),
            (S_MINFLT, s.events.pgfault),
            (S_MEMFREE, u64::from(s.free) * page),
            (S_MEMTOT, u64::from(s.total) * page),
            (S_AVAIL, u64::from(s.free + s.cached - s.dirty) * page),
            (S_CACHES, u64::from(s.cached) * page),
        ];
        let base = self.buf + 2048;
        for (i, (tag, v)) in values.iter().enumerate() {
            let p = (base + i * STAT_SIZE) as *mut u8;
            // SAFETY: the stats buffer (80 bytes at buf + 2048) is ours again: the device
            // returned it through the used ring.
            unsafe {
                (p as *mut [u8; 2]).write_unaligned(tag.to_le_bytes());
                (p.add(2) as *mut [u8; 8]).write_unaligned(v.to_le_bytes());
            }
        }
        q.submit(&[Segment {
            addr: base as u64,
            len: (NR_STATS * STAT_SIZE) as u32,
            device_writes: false,
        }]);
        self.transport.notify(*idx);
        self.stats.stats_sent += 1;
    }

    fn report(&mut self, mm: &mut Mm<'static>, be: &mut impl Backend) {
        let order = self.report_order;
        let mut chunks = [0u32; REPORT_CHUNKS];
        let mut n = 0;
        while n < REPORT_CHUNKS {
            match mm.report_take(order, 16384) {
                Some(f) => {
                    chunks[n] = f;
                    n += 1;
                }
                None => break,
            }
        }
        if n == 0 {
            return;
        }
        let mut segs = [Segment {
            addr: 0,
            len: 0,
            device_writes: true,
        }; REPORT_CHUNKS];
        for i in 0..n {
            segs[i] = Segment {
                addr: mm.pfn(chunks[i]) * PAGE_SIZE as u64,
                len: (PAGE_SIZE << order) as u32,
                device_writes: true,
            };
        }
        let (idx, q) = self.report_q.as_mut().expect("reporting negotiated");
        q.submit(&segs[..n]);
        self.transport.notify(*idx);
        if self.race == ReportRace::Off {
            // The device works while the workload goes on; a later poll takes the chunks back.
            self.in_flight = Some((chunks, n));
            return;
        }
        let seq = self.stats.reported_chunks;
        if self.race == ReportRace::InFlight {
            for &f in &chunks[..n] {
                fill(be, f, seq);
            }
            self.stats.inflight_written += n as u64;
        }
        let (_, q) = self.report_q.as_mut().expect("reporting negotiated");
        let returned = Self::wait(q, &mut self.stats);
        match self.race {
            // A run the device did not return is not raced: it may still be in its hands.
            _ if !returned => {}
            ReportRace::Off => {}
            ReportRace::InFlight => {
                for &f in &chunks[..n] {
                    if differs(be, f, seq) > 0 {
                        self.stats.inflight_lost += 1;
                    }
                }
            }
            ReportRace::AtUsed => {
                let pages = 1u32 << order;
                for &f in &chunks[..n] {
                    for g in f..f + pages {
                        fill(be, g, seq);
                    }
                }
                for &f in &chunks[..n] {
                    for g in f..f + pages {
                        self.stats.race_lost += differs(be, g, seq);
                    }
                }
                self.stats.race_checked += u64::from(pages) * n as u64;
            }
        }
        for &f in &chunks[..n] {
            mm.report_done(f, order, self.race != ReportRace::Off);
        }
        self.stats.reported_chunks += n as u64;
    }
}

/// What `report_race=` writes to word `i` of frame `f` in pass `seq`: the disk test pattern,
/// seeded by the pass, at the frame's byte offset.
fn race_word(f: u32, seq: u64, i: usize) -> u64 {
    word_at(seq, u64::from(f) * PAGE_SIZE as u64 + 8 * i as u64)
}

fn fill(be: &mut impl Backend, f: u32, seq: u64) {
    let page = be.page(f);
    for (i, w) in page.chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(&race_word(f, seq, i).to_le_bytes());
    }
}

/// Words of frame `f` that do not hold what [`fill`] wrote in pass `seq`.
fn differs(be: &mut impl Backend, f: u32, seq: u64) -> u64 {
    let page = be.page(f);
    page.chunks_exact(8)
        .enumerate()
        .filter(|&(i, w)| w != race_word(f, seq, i).to_le_bytes())
        .count() as u64
}
