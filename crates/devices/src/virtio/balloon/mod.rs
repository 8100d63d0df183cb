//! virtio-balloon (virtio 1.2 §5.5): inflate, deflate, statistics, deflate-on-OOM and free page
//! reporting.
//!
//! Queue indices follow the features the driver accepted: inflate is 0, deflate 1, then the
//! statistics queue if VIRTIO_BALLOON_F_STATS_VQ was accepted, then the reporting queue if
//! VIRTIO_BALLOON_F_REPORTING was. Inflated and reported pages go to [`GuestRam::discard`] (the
//! pager releases them and forgets their content); every PFN the guest sends is checked against
//! guest RAM, and the bad ones are ignored, counted, and logged through [`crate::guest_log`]. The statistics buffer is held, as the
//! specification asks, until the VMM wants fresh numbers ([`BalloonControl::request_stats`]).
//!
//! What one request costs the device is bounded whatever its chain holds (an indirect table of
//! 65535 descriptors may name the same buffer in each): an inflate or deflate request is read
//! up to 64 KiB of PFN arrays in all, a free page report up to 256 ranges, and the rest is
//! ignored and logged.
//!
//! A deflate is either one the host asked for (the balloon held more than the target) or one the
//! guest did on its own to get memory it could not find otherwise (VIRTIO_BALLOON_F_DEFLATE_ON_OOM:
//! the deflate takes the balloon below the target). The device tells them apart by its own count of
//! the pages the guest holds (inflated minus deflated since the driver last reset the device),
//! not by `actual`, which a driver may write late (the guest kit writes it once per poll): the
//! part of a deflate that takes that count below the target is counted in
//! [`BalloonMetrics::oom_deflated_pages`], and a deflate with such a part in
//! [`BalloonMetrics::oom_deflates`]. A host manager reads them as demand: the guest needed that
//! memory. A guest that inflates the same page twice makes the count too high, and its own OOM
//! deflates then look asked for; nothing but the counters depends on it.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryRegion};

use super::{VirtioDevice, VIRTIO_F_VERSION_1};
use crate::ram::{Discard, GuestRam, GuestRange, PAGE_SIZE};

/// The guest's last statistics and when they came.
type GuestStats = (Instant, Vec<(u16, u64)>);
use crate::GuestMem;

pub const VIRTIO_ID_BALLOON: u32 = 5;
pub const F_STATS_VQ: u64 = 1 << 1;
pub const F_DEFLATE_ON_OOM: u64 = 1 << 2;
pub const F_REPORTING: u64 = 1 << 5;
const QUEUE_SIZE: u16 = 256;
/// Most bytes of PFN arrays read from one inflate or deflate request (16384 PFNs; Linux sends
/// at most 256 a request), and of statistics from one buffer. The bound is per request, not per
/// descriptor: one chain may name the same buffer in an indirect table of 65535 descriptors,
/// and a notification may pop 256 such chains.
const MAX_BUFFER: u32 = 64 << 10;
/// Most ranges read from one free page report (Linux reports at most 32 at a time, the guest
/// kit 16); each costs an `madvise`.
const MAX_REPORT_RANGES: usize = 256;

/// Counters of the balloon device.
#[derive(Debug, Default)]
pub struct BalloonMetrics {
    pub inflated_pages: AtomicU64,
    pub deflated_pages: AtomicU64,
    /// Of those, pages that took the balloon below the target (the guest's deflate-on-OOM).
    pub oom_deflated_pages: AtomicU64,
    /// Deflate requests with such pages.
    pub oom_deflates: AtomicU64,
    pub reported_pages: AtomicU64,
    /// PFNs or ranges outside guest RAM (ignored).
    pub invalid_pfns: AtomicU64,
    pub stats_updates: AtomicU64,
}

/// What the VMM and the device share: the target, the guest's answers and the counters.
#[derive(Debug, Default)]
pub struct BalloonState {
    pub target_pages: AtomicU32,
    pub actual_pages: AtomicU32,
    pub metrics: BalloonMetrics,
    stats: Mutex<Option<GuestStats>>,
    want_stats: std::sync::atomic::AtomicBool,
}

impl BalloonState {
    /// The last statistics the guest sent and how old they are.
    pub fn stats(&self) -> Option<(std::time::Duration, Vec<(u16, u64)>)> {
        let g = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        g.as_ref().map(|(t, v)| (t.elapsed(), v.clone()))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Inflate,
    Deflate,
    Stats,
    Reporting,
}

pub struct Balloon {
    ram: Arc<dyn GuestRam>,
    state: Arc<BalloonState>,
    acked: u64,
    /// The statistics buffer the device holds until it wants new numbers.
    held_stats: Option<u16>,
    /// Pages in the balloon by the device's count: inflated minus deflated since the last reset.
    held_pages: u64,
}

impl Balloon {
    pub fn new(ram: Arc<dyn GuestRam>) -> Self {
        Balloon {
            ram,
            state: Arc::default(),
            acked: 0,
            held_stats: None,
            held_pages: 0,
        }
    }

    pub fn state(&self) -> Arc<BalloonState> {
        self.state.clone()
    }

    fn role(&self, index: usize) -> Option<Role> {
        let mut roles = vec![Role::Inflate, Role::Deflate];
        if self.acked & F_STATS_VQ != 0 {
            roles.push(Role::Stats);
        }
        if self.acked & F_REPORTING != 0 {
            roles.push(Role::Reporting);
        }
        roles.get(index).copied()
    }

    /// Reads the PFN array of one descriptor, keeps those inside RAM, and merges them into ranges.
    /// The frames are sorted first, so the work per frame is a compare or two and RAM is checked
    /// once per run of consecutive frames (a driver's arrays are mostly such runs).
    fn pfn_ranges(&self, mem: &GuestMem, addr: GuestAddress, len: u32) -> Vec<GuestRange> {
        let len = len.min(MAX_BUFFER) as usize & !3;
        let mut raw = vec![0u8; len];
        if mem.read_slice(&mut raw, addr).is_err() {
            self.state
                .metrics
                .invalid_pfns
                .fetch_add(1, Ordering::Relaxed);
            crate::guest_error!(
                BadBalloonPage,
                "balloon: PFN array at {:#x} ({len} bytes) outside guest memory ignored",
                addr.0
            );
            return Vec::new();
        }
        let mut pfns: Vec<u64> = raw
            .chunks_exact(4)
            .map(|c| u64::from(u32::from_le_bytes(c.try_into().expect("4 bytes"))))
            .collect();
        pfns.sort_unstable();
        let mut out = Vec::new();
        let mut rest = &pfns[..];
        while let Some(&start) = rest.first() {
            // A run: frames `start..end`, each given once or more.
            let mut end = start + 1;
            let mut n = 1;
            while n < rest.len() && rest[n] <= end {
                end = rest[n] + 1;
                n += 1;
            }
            let (run, next) = rest.split_at(n);
            self.keep_in_ram(mem, run, end, &mut out);
            rest = next;
        }
        out
    }

    /// Adds the parts of the run of frames `run[0]..end` (sorted, consecutive, repeats allowed)
    /// that lie in a RAM region to `out`, and counts the frames given outside RAM.
    fn keep_in_ram(&self, mem: &GuestMem, run: &[u64], end: u64, out: &mut Vec<GuestRange>) {
        let start = run[0];
        let mut inside = 0;
        for region in mem.iter() {
            let first = region.start_addr().0.div_ceil(PAGE_SIZE as u64);
            let last = (region.start_addr().0 + region.len()) / PAGE_SIZE as u64;
            let (lo, hi) = (start.max(first), end.min(last));
            if lo < hi {
                out.push(GuestRange {
                    addr: lo * PAGE_SIZE as u64,
                    len: (hi - lo) * PAGE_SIZE as u64,
                });
                inside += run.partition_point(|&p| p < hi) - run.partition_point(|&p| p < lo);
            }
        }
        let outside = run.len() - inside;
        if outside > 0 {
            self.state
                .metrics
                .invalid_pfns
                .fetch_add(outside as u64, Ordering::Relaxed);
            crate::guest_error!(
                BadBalloonPage,
                "balloon: {outside} PFNs in {start:#x}..={:#x} outside guest RAM ignored",
                end - 1
            );
        }
    }

    /// Counts `pages` going back to the guest: the part that takes the balloon below the target
    /// is a deflate-on-OOM.
    fn count_deflate(&mut self, pages: u64) {
        let target = u64::from(self.state.target_pages.load(Ordering::SeqCst));
        // Pages never inflated (or inflated before a reset) do not leave the balloon.
        let leaving = pages.min(self.held_pages);
        let asked = leaving.min(self.held_pages.saturating_sub(target));
        let oom = leaving - asked;
        self.held_pages -= leaving;
        let m = &self.state.metrics;
        m.deflated_pages.fetch_add(pages, Ordering::Relaxed);
        if oom > 0 {
            m.oom_deflated_pages.fetch_add(oom, Ordering::Relaxed);
            m.oom_deflates.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn read_stats(&self, mem: &GuestMem, addr: GuestAddress, len: u32) {
        let len = len.min(MAX_BUFFER) as usize;
        let mut raw = vec![0u8; len];
        if mem.read_slice(&mut raw, addr).is_err() {
            return;
        }
        let stats: Vec<(u16, u64)> = raw
            .chunks_exact(10)
            .map(|c| {
                (
                    u16::from_le_bytes([c[0], c[1]]),
                    u64::from_le_bytes(c[2..10].try_into().expect("8 bytes")),
                )
            })
            .collect();
        *self.state.stats.lock().unwrap_or_else(|e| e.into_inner()) = Some((Instant::now(), stats));
        self.state
            .metrics
            .stats_updates
            .fetch_add(1, Ordering::Relaxed);
    }
}

impl VirtioDevice for Balloon {
    fn device_type(&self) -> u32 {
        VIRTIO_ID_BALLOON
    }

    fn queue_max_sizes(&self) -> &[u16] {
        &[QUEUE_SIZE; 4]
    }

    fn features(&self) -> u64 {
        VIRTIO_F_VERSION_1 | F_STATS_VQ | F_DEFLATE_ON_OOM | F_REPORTING
    }

    fn read_config(&self, offset: u64, data: &mut [u8]) {
        let mut config = [0u8; 8];
        config[..4].copy_from_slice(&self.state.target_pages.load(Ordering::SeqCst).to_le_bytes());
        config[4..].copy_from_slice(&self.state.actual_pages.load(Ordering::SeqCst).to_le_bytes());
        for (i, b) in data.iter_mut().enumerate() {
            *b = usize::try_from(offset)
                .ok()
                .and_then(|o| o.checked_add(i))
                .and_then(|o| config.get(o).copied())
                .unwrap_or(0);
        }
    }

    fn write_config(&mut self, offset: u64, data: &[u8]) {
        if let (4, Ok(b)) = (offset, <[u8; 4]>::try_from(data)) {
            self.state
                .actual_pages
                .store(u32::from_le_bytes(b), Ordering::SeqCst);
        }
    }

    fn activate(&mut self, acked_features: u64) {
        self.acked = acked_features;
    }

    fn reset(&mut self) {
        self.acked = 0;
        self.held_stats = None;
        // The driver starts again with all of its memory.
        self.held_pages = 0;
    }

    fn process_queue(&mut self, index: usize, queue: &mut Queue, mem: &GuestMem) -> bool {
        let Some(role) = self.role(index) else {
            return false;
        };
        let mut used = false;
        while let Some(chain) = queue.pop_descriptor_chain(mem) {
            let head = chain.head_index();
            let descs: Vec<_> = chain.collect();
            match role {
                Role::Inflate | Role::Deflate => {
                    let mut ranges = Vec::new();
                    let mut left = MAX_BUFFER;
                    let mut ignored = 0u64;
                    for d in descs.iter().filter(|d| !d.is_write_only()) {
                        let len = d.len().min(left);
                        ignored += u64::from(d.len() - len);
                        if len > 0 || d.len() == 0 {
                            ranges.extend(self.pfn_ranges(mem, d.addr(), len));
                            left -= len;
                        }
                    }
                    if ignored > 0 {
                        crate::guest_error!(
                            BadBalloonPage,
                            "balloon: {ignored} bytes of PFN arrays past the first \
                             {MAX_BUFFER} of a request ignored"
                        );
                    }
                    let pages: u64 = ranges.iter().map(|r| r.len / PAGE_SIZE as u64).sum();
                    if role == Role::Inflate {
                        if let Err(e) = self.ram.discard(&ranges, Discard::Balloon) {
                            crate::guest_error!(
                                BalloonReleaseError,
                                "balloon: releasing inflated pages failed: {e}"
                            );
                        }
                        self.held_pages = self.held_pages.saturating_add(pages);
                        self.state
                            .metrics
                            .inflated_pages
                            .fetch_add(pages, Ordering::Relaxed);
                    } else {
                        self.ram.deflate(&ranges);
                        self.count_deflate(pages);
                    }
                }
                Role::Reporting => {
                    let mut ranges = Vec::new();
                    if descs.len() > MAX_REPORT_RANGES {
                        crate::guest_error!(
                            BadBalloonPage,
                            "balloon: free page report of {} ranges: those past the first \
                             {MAX_REPORT_RANGES} ignored",
                            descs.len()
                        );
                    }
                    for d in descs.iter().take(MAX_REPORT_RANGES) {
                        let r = GuestRange {
                            addr: d.addr().0,
                            len: u64::from(d.len()),
                        };
                        let whole = r.addr % PAGE_SIZE as u64 == 0
                            && r.len % PAGE_SIZE as u64 == 0
                            && r.len > 0;
                        let inside = usize::try_from(r.len)
                            .is_ok_and(|l| GuestMemoryBackend::check_range(mem, d.addr(), l));
                        if whole && inside {
                            ranges.push(r);
                        } else {
                            self.state
                                .metrics
                                .invalid_pfns
                                .fetch_add(1, Ordering::Relaxed);
                            crate::guest_error!(
                                BadBalloonPage,
                                "balloon: reported range {:#x}+{:#x} is not whole pages of \
                                 guest RAM: ignored",
                                r.addr,
                                r.len
                            );
                        }
                    }
                    let pages: u64 = ranges.iter().map(|r| r.len / PAGE_SIZE as u64).sum();
                    if let Err(e) = self.ram.discard(&ranges, Discard::Reported) {
                        crate::guest_error!(
                            BalloonReleaseError,
                            "balloon: releasing reported pages failed: {e}"
                        );
                    }
                    self.state
                        .metrics
                        .reported_pages
                        .fetch_add(pages, Ordering::Relaxed);
                }
                Role::Stats => {
                    if let Some(d) = descs.iter().find(|d| !d.is_write_only()) {
                        self.read_stats(mem, d.addr(), d.len());
                    }
                    if let Some(old) = self.held_stats.replace(head) {
                        // A second buffer while one is held: give the old one back.
                        let _ = queue.add_used(mem, old, 0);
                        used = true;
                    }
                    if self.state.want_stats.swap(false, Ordering::SeqCst) {
                        if let Some(h) = self.held_stats.take() {
                            let _ = queue.add_used(mem, h, 0);
                            used = true;
                        }
                    }
                    continue;
                }
            }
            if let Err(e) = queue.add_used(mem, head, 0) {
                crate::guest_error!(UsedRingError, "balloon: cannot return a used buffer: {e}");
                break;
            }
            used = true;
        }
        used
    }

    fn save_state(&self) -> serde_json::Value {
        serde_json::json!({
            "acked": self.acked,
            "held_stats": self.held_stats,
            "held_pages": self.held_pages,
            "target_pages": self.state.target_pages.load(Ordering::SeqCst),
            "actual_pages": self.state.actual_pages.load(Ordering::SeqCst),
        })
    }

    fn load_state(&mut self, state: &serde_json::Value) -> Result<(), String> {
        let num = |k: &str| {
            state
                .get(k)
                .and_then(serde_json::Value::as_u64)
                .ok_or_else(|| format!("balloon state without {k}"))
        };
        let small =
            |k: &str| num(k).and_then(|v| u32::try_from(v).map_err(|e| format!("{k}: {e}")));
        self.acked = num("acked")?;
        self.held_pages = num("held_pages")?;
        self.held_stats = match state.get("held_stats") {
            Some(serde_json::Value::Null) | None => None,
            Some(v) => Some(
                v.as_u64()
                    .and_then(|h| u16::try_from(h).ok())
                    .ok_or("balloon state: held_stats is not a descriptor index")?,
            ),
        };
        self.state
            .target_pages
            .store(small("target_pages")?, Ordering::SeqCst);
        self.state
            .actual_pages
            .store(small("actual_pages")?, Ordering::SeqCst);
        Ok(())
    }

    fn on_request(&mut self, queues: &mut [Queue], mem: &GuestMem) -> bool {
        // The only request: return the held statistics buffer so the driver refills it.
        let stats_index = 2;
        if self.acked & F_STATS_VQ == 0 {
            return false;
        }
        match (self.held_stats.take(), queues.get_mut(stats_index)) {
            (Some(h), Some(q)) if q.ready() => q.add_used(mem, h, 0).is_ok(),
            (held, _) => {
                self.held_stats = held;
                self.state.want_stats.store(true, Ordering::SeqCst);
                false
            }
        }
    }
}

/// What the VMM uses to steer a balloon behind its transport.
pub struct BalloonControl {
    pub state: Arc<BalloonState>,
    pub transport: Arc<Mutex<super::mmio::MmioTransport>>,
}

impl BalloonControl {
    /// Sets the balloon's size in 4 KiB pages and tells the driver.
    pub fn set_target(&self, pages: u32) {
        self.state.target_pages.store(pages, Ordering::SeqCst);
        self.transport
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .config_changed();
    }

    /// Asks the driver for fresh statistics (they arrive asynchronously).
    pub fn request_stats(&self) {
        self.transport
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .device_request();
    }
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)] // test values are small by construction
mod tests {
    use super::*;
    use crate::ram::PlainRam;
    use proptest::prelude::*;
    use virtio_queue::desc::{split::Descriptor as SplitDescriptor, RawDescriptor};
    use virtio_queue::mock::MockSplitQueue;

    const DESC_F_NEXT: u16 = 1;
    const DESC_F_WRITE: u16 = 2;
    const DESC_F_INDIRECT: u16 = 4;
    const MEM: u64 = 4 << 20;

    fn setup(features: u64) -> (Arc<GuestMem>, Balloon) {
        let mem = Arc::new(GuestMem::from_ranges(&[(GuestAddress(0), MEM as usize)]).unwrap());
        let mut b = Balloon::new(Arc::new(PlainRam::new(mem.clone())));
        b.activate(features);
        (mem, b)
    }

    /// Offers one single-descriptor chain on a fresh queue and processes it as queue `index`.
    fn offer(
        b: &mut Balloon,
        mem: &GuestMem,
        index: usize,
        addr: u64,
        len: u32,
        flags: u16,
    ) -> (Queue, bool) {
        let vq = MockSplitQueue::new(mem, 16);
        vq.add_desc_chains(
            &[RawDescriptor::from(SplitDescriptor::new(
                addr, len, flags, 0,
            ))],
            0,
        )
        .unwrap();
        let mut q: Queue = vq.create_queue().unwrap();
        let used = b.process_queue(index, &mut q, mem);
        (q, used)
    }

    #[test]
    fn inflate_releases_valid_pages_and_counts_bad_pfns() {
        let (mem, mut b) = setup(VIRTIO_F_VERSION_1);
        let log = crate::guest_log::guest_log();
        let bad_before = log.count(crate::guest_log::GuestError::BadBalloonPage);
        mem.write_slice(&[9u8; 3 * 4096], GuestAddress(0x10_0000))
            .unwrap();
        let pfns: Vec<u8> = [0x100u32, 0x101, 0x102, 0xffff_ffff, 0x100_0000]
            .iter()
            .flat_map(|p| p.to_le_bytes())
            .collect();
        mem.write_slice(&pfns, GuestAddress(0x2000)).unwrap();
        let (_, used) = offer(&mut b, &mem, 0, 0x2000, pfns.len() as u32, 0);
        assert!(used);
        let mut back = vec![1u8; 3 * 4096];
        mem.read_slice(&mut back, GuestAddress(0x10_0000)).unwrap();
        assert!(back.iter().all(|&x| x == 0), "inflated pages were released");
        let m = &b.state().metrics;
        assert_eq!(m.inflated_pages.load(Ordering::Relaxed), 3);
        assert_eq!(m.invalid_pfns.load(Ordering::Relaxed), 2);
        // The process's guest log counted them too (other tests may add to it meanwhile).
        let bad = log.count(crate::guest_log::GuestError::BadBalloonPage) - bad_before;
        assert!(bad >= 2, "{bad}");
        let (_, used) = offer(&mut b, &mem, 1, 0x2000, 12, 0);
        assert!(used);
        assert_eq!(m.deflated_pages.load(Ordering::Relaxed), 3);
    }

    /// Sends `pfns` on queue `index` (0 inflate, 1 deflate) from a buffer at 0x2000.
    fn send_pfns(b: &mut Balloon, mem: &GuestMem, index: usize, pfns: &[u32]) {
        let raw: Vec<u8> = pfns.iter().flat_map(|p| p.to_le_bytes()).collect();
        mem.write_slice(&raw, GuestAddress(0x2000)).unwrap();
        assert!(offer(b, mem, index, 0x2000, raw.len() as u32, 0).1);
    }

    #[test]
    fn deflates_below_the_target_count_as_oom_deflates() {
        let (mem, mut b) = setup(VIRTIO_F_VERSION_1 | F_DEFLATE_ON_OOM);
        let st = b.state();
        let m = &st.metrics;
        let oom = || {
            (
                m.oom_deflated_pages.load(Ordering::Relaxed),
                m.oom_deflates.load(Ordering::Relaxed),
            )
        };
        st.target_pages.store(6, Ordering::SeqCst);
        send_pfns(&mut b, &mem, 0, &[0x100, 0x101, 0x102, 0x103, 0x104, 0x105]);
        // At the target, the guest takes one page back on its own.
        send_pfns(&mut b, &mem, 1, &[0x100]);
        assert_eq!(oom(), (1, 1));
        // The host asks for three back: held 5, target 2.
        st.target_pages.store(2, Ordering::SeqCst);
        send_pfns(&mut b, &mem, 1, &[0x101, 0x102]);
        assert_eq!(oom(), (1, 1), "asked for: not an OOM deflate");
        // One more asked for and one below the target in the same request.
        send_pfns(&mut b, &mem, 1, &[0x103, 0x104]);
        assert_eq!(oom(), (2, 2));
        // The last page, then one the guest never inflated: only the first counts.
        send_pfns(&mut b, &mem, 1, &[0x105, 0x106]);
        assert_eq!(oom(), (3, 3));
        assert_eq!(m.deflated_pages.load(Ordering::Relaxed), 7);
        // Pages inflated before a reset are forgotten with it.
        send_pfns(&mut b, &mem, 0, &[0x100, 0x101]);
        b.reset();
        b.activate(VIRTIO_F_VERSION_1 | F_DEFLATE_ON_OOM);
        send_pfns(&mut b, &mem, 1, &[0x100]);
        assert_eq!(oom(), (3, 3));
    }

    #[test]
    fn queue_roles_follow_accepted_features() {
        let (mem, mut b) = setup(VIRTIO_F_VERSION_1 | F_REPORTING);
        // Without the stats queue, queue 2 is the reporting queue.
        mem.write_slice(&[5u8; 8192], GuestAddress(0x20_0000))
            .unwrap();
        let (_, used) = offer(&mut b, &mem, 2, 0x20_0000, 8192, DESC_F_WRITE);
        assert!(used);
        assert_eq!(b.state().metrics.reported_pages.load(Ordering::Relaxed), 2);
        let mut back = [1u8; 8192];
        mem.read_slice(&mut back, GuestAddress(0x20_0000)).unwrap();
        assert!(back.iter().all(|&x| x == 0));
        // A misaligned or out-of-RAM report is ignored and counted.
        offer(&mut b, &mem, 2, 0x20_0100, 4096, DESC_F_WRITE);
        offer(&mut b, &mem, 2, MEM - 4096, 8192, DESC_F_WRITE);
        assert_eq!(b.state().metrics.invalid_pfns.load(Ordering::Relaxed), 2);
        assert!(!offer(&mut b, &mem, 3, 0x2000, 4, 0).1, "no fourth queue");
    }

    #[test]
    fn stats_buffer_is_held_until_requested() {
        let (mem, mut b) = setup(VIRTIO_F_VERSION_1 | F_STATS_VQ | F_REPORTING);
        let mut raw = Vec::new();
        for (tag, val) in [(4u16, 1000u64), (5, 2000)] {
            raw.extend_from_slice(&tag.to_le_bytes());
            raw.extend_from_slice(&val.to_le_bytes());
        }
        mem.write_slice(&raw, GuestAddress(0x3000)).unwrap();
        let (q, used) = offer(&mut b, &mem, 2, 0x3000, raw.len() as u32, 0);
        assert!(!used, "the stats buffer is held");
        assert_eq!(b.state().stats().unwrap().1, vec![(4, 1000), (5, 2000)]);
        let mut queues = vec![Queue::new(16).unwrap(), Queue::new(16).unwrap(), q];
        assert!(b.on_request(&mut queues, &mem), "a request returns it");
        assert!(!b.on_request(&mut queues, &mem), "nothing is held any more");
    }

    /// Offers one chain of `descs` (`(addr, len, flags)`, linked in order) as queue `index`.
    fn offer_chain(b: &mut Balloon, mem: &GuestMem, index: usize, descs: &[(u64, u32, u16)]) {
        let vq = MockSplitQueue::new(mem, 16);
        let raw: Vec<RawDescriptor> = descs
            .iter()
            .enumerate()
            .map(|(i, &(a, l, f))| {
                let next = if i + 1 < descs.len() { DESC_F_NEXT } else { 0 };
                RawDescriptor::from(SplitDescriptor::new(a, l, f | next, (i + 1) as u16))
            })
            .collect();
        vq.add_desc_chains(&raw, 0).unwrap();
        let mut q: Queue = vq.create_queue().unwrap();
        assert!(b.process_queue(index, &mut q, mem));
    }

    #[test]
    fn a_request_reads_at_most_64_kib_of_pfn_arrays() {
        // The bound used to be per descriptor: a chain naming one 64 KiB array in each of an
        // indirect table's 65535 descriptors made the device check a billion PFNs, and collect
        // gigabytes of ranges, for one request.
        let (mem, mut b) = setup(VIRTIO_F_VERSION_1);
        let invalid: Vec<u8> = [0xffu8; 64 << 10].to_vec();
        mem.write_slice(&invalid, GuestAddress(0x10_0000)).unwrap();
        mem.write_slice(&0x100u32.to_le_bytes(), GuestAddress(0x2000))
            .unwrap();
        let array = (0x10_0000, 64 << 10, 0);
        offer_chain(&mut b, &mem, 0, &[array, array, array, (0x2000, 4, 0)]);
        let m = &b.state().metrics;
        assert_eq!(m.invalid_pfns.load(Ordering::Relaxed), 16384);
        assert_eq!(
            m.inflated_pages.load(Ordering::Relaxed),
            0,
            "PFN past the bound"
        );
        // Within the bound, the arrays of several descriptors all count.
        offer_chain(&mut b, &mem, 0, &[(0x2000, 4, 0), (0x2000, 4, 0)]);
        assert_eq!(m.inflated_pages.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_report_reads_at_most_256_ranges() {
        // Without a bound, one notification of 256 chains of 65535 ranges each made 16 million
        // `madvise` calls.
        let (mem, mut b) = setup(VIRTIO_F_VERSION_1 | F_REPORTING);
        // An indirect table of 300 one-page ranges.
        for i in 0..300u16 {
            let (flags, next) = if i < 299 {
                (DESC_F_WRITE | DESC_F_NEXT, i + 1)
            } else {
                (DESC_F_WRITE, 0)
            };
            let addr = 0x10_0000 + u64::from(i) * 4096;
            let d = RawDescriptor::from(SplitDescriptor::new(addr, 4096, flags, next));
            mem.write_obj(d, GuestAddress(0x30_0000 + u64::from(i) * 16))
                .unwrap();
        }
        offer_chain(&mut b, &mem, 2, &[(0x30_0000, 300 * 16, DESC_F_INDIRECT)]);
        let m = &b.state().metrics;
        assert_eq!(m.reported_pages.load(Ordering::Relaxed), 256);
        assert_eq!(m.invalid_pfns.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn config_reports_target_and_takes_actual() {
        let (_, mut b) = setup(VIRTIO_F_VERSION_1);
        b.state().target_pages.store(1234, Ordering::SeqCst);
        let mut c = [0u8; 4];
        b.read_config(0, &mut c);
        assert_eq!(u32::from_le_bytes(c), 1234);
        b.write_config(4, &77u32.to_le_bytes());
        b.write_config(0, &1u32.to_le_bytes());
        assert_eq!(b.state().actual_pages.load(Ordering::SeqCst), 77);
        assert_eq!(b.state().target_pages.load(Ordering::SeqCst), 1234);
    }

    proptest! {
        /// A PFN array, with repeats and frames on both sides of the end of RAM, becomes ranges
        /// that cover exactly its distinct frames inside RAM, and every frame given outside RAM
        /// is counted.
        #[test]
        fn pfn_ranges_cover_exactly_the_frames_inside_ram(
            pfns in proptest::collection::vec(MEM / PAGE_SIZE as u64 - 40..MEM / PAGE_SIZE as u64 + 24, 0..64),
            low in proptest::collection::vec(0u64..16, 0..16),
        ) {
            let (mem, b) = setup(VIRTIO_F_VERSION_1);
            let given: Vec<u64> = pfns.iter().chain(&low).copied().collect();
            let raw: Vec<u8> = given.iter().flat_map(|&p| (p as u32).to_le_bytes()).collect();
            mem.write_slice(&raw, GuestAddress(0x2000)).unwrap();
            let ranges = b.pfn_ranges(&mem, GuestAddress(0x2000), raw.len() as u32);
            let mut back = Vec::new();
            for r in &ranges {
                prop_assert!(r.len > 0 && r.len % PAGE_SIZE as u64 == 0 && r.addr % PAGE_SIZE as u64 == 0);
                back.extend((r.addr / PAGE_SIZE as u64)..(r.addr + r.len) / PAGE_SIZE as u64);
            }
            let mut want: Vec<u64> = given.iter().copied().filter(|&p| p < MEM / PAGE_SIZE as u64).collect();
            want.sort_unstable();
            want.dedup();
            prop_assert_eq!(back, want);
            prop_assert!(ranges.windows(2).all(|w| w[0].addr + w[0].len < w[1].addr));
            let outside = given.iter().filter(|&&p| p >= MEM / PAGE_SIZE as u64).count() as u64;
            prop_assert_eq!(b.state().metrics.invalid_pfns.load(Ordering::Relaxed), outside);
        }
    }
}
