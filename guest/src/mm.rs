//! The guest's memory manager: the `memvisor-guest-mm` core over real RAM and
//! virtio-blk, behind one spinlock.
//!
//! `init` probes the disks (data disk `data_disk=`, default the one with serial
//! `data`; swap disk `swap_disk=`, default `swap`) and the balloon, then gives
//! every page the early allocator has not handed out to the core: its metadata
//! (20 bytes per page plus the page-cache hash table) comes first, the rest are
//! page frames. Frames are never touched until allocated, so a page the guest
//! never uses is never written (what a hypervisor sees of a fresh Linux guest).
//!
//! Workloads reach memory through `anon` and `file_page`, which pin the page
//! (reclaim skips it) until the returned `Page` is dropped. Every call may run
//! the periodic `tick` (at most every `TICK_MS`), which lets the balloon driver
//! follow its target, answer stats requests and report free pages.

use core::arch::asm;
use core::sync::atomic::{AtomicU64, Ordering};

use memvisor_guest_mm::format::{BLOCK_SIZE, decode_swap_header};
use memvisor_guest_mm::{
    Access, Backend, Dev, Frame, IoError, MAX_BATCH, Mm, MmError, PAGE_SIZE, Params, Stats,
};

use crate::cmdline::Config;
use crate::sync::SpinLock;
use crate::virtio::balloon::{Balloon, BalloonStats, ReportRace};
use crate::virtio::blk::{BlkDevice, SECTOR_SIZE};
use crate::virtio::{self, DEVICE_ID_BALLOON, DEVICE_ID_BLOCK};

/// Command-line keys the memory manager reads (any workload accepts them).
pub const KEYS: &[&str] = &[
    "zero",
    "readahead_kb",
    "swappiness",
    "page_cluster",
    "data_disk",
    "swap_disk",
    "balloon",
    "report_order",
    "report",
    "report_ms",
    "report_race",
    "balloon_holdoff_ms",
    "balloon_poll_ms",
    "stats",
    "hold_secs",
    "warm_mb",
];

/// Minimum time between two ticks.
const TICK_MS: u64 = 5;

/// Real RAM and the two disks.
pub struct GuestBackend {
    base: usize,
    pub data: Option<BlkDevice>,
    pub swap: Option<BlkDevice>,
}

impl GuestBackend {
    fn addr(&self, frame: u32) -> usize {
        self.base + frame as usize * PAGE_SIZE
    }

    fn io(&mut self, dev: Dev, write: bool, block: u64, frames: &[u32]) -> Result<(), IoError> {
        let mut addrs = [0u64; MAX_BATCH];
        for (a, &f) in addrs.iter_mut().zip(frames) {
            *a = self.addr(f) as u64;
        }
        let n = frames.len().min(MAX_BATCH);
        let disk = match dev {
            Dev::Data => self.data.as_mut(),
            Dev::Swap => self.swap.as_mut(),
        }
        .ok_or(IoError)?;
        let sector = block * (BLOCK_SIZE as u64 / SECTOR_SIZE);
        let r = if write {
            disk.write_pages(sector, &addrs[..n])
        } else {
            disk.read_pages(sector, &addrs[..n])
        };
        r.map_err(|e| {
            println!("mm: {dev:?} disk block {block} x{n}: {e:?}");
            IoError
        })
    }
}

impl Backend for GuestBackend {
    fn page(&mut self, frame: u32) -> &mut [u8; PAGE_SIZE] {
        // SAFETY: frames index the RAM range handed to the memory manager at init
        // (identity-mapped, owned by it), and the core asks for one page at a time.
        unsafe { &mut *(self.addr(frame) as *mut [u8; PAGE_SIZE]) }
    }

    fn zero(&mut self, frame: u32) {
        // SAFETY: as in `page`; `rep stosb` writes exactly PAGE_SIZE bytes there (DF is clear),
        // as Linux's clear_page_erms does.
        unsafe {
            asm!("rep stosb", inout("rcx") PAGE_SIZE => _, inout("rdi") self.addr(frame) => _,
                 in("al") 0u8, options(nostack, preserves_flags));
        }
    }

    fn read(&mut self, dev: Dev, block: u64, frames: &[u32]) -> Result<(), IoError> {
        self.io(dev, false, block, frames)
    }

    fn write(&mut self, dev: Dev, block: u64, frames: &[u32]) -> Result<(), IoError> {
        self.io(dev, true, block, frames)
    }
}

/// Everything behind the lock.
pub struct Kernel {
    pub mm: Mm<'static>,
    pub be: GuestBackend,
    pub balloon: Option<Balloon>,
}

// SAFETY: the raw pointers inside (virtqueue rings, device scratch pages) point at memory
// owned by the kernel state itself, which is only ever used under the lock.
unsafe impl Send for Kernel {}

static KERNEL: SpinLock<Option<Kernel>> = SpinLock::new(None);
static NEXT_TICK: AtomicU64 = AtomicU64::new(0);

/// Whether `init` ran (the workloads that use memory management call it).
pub fn ready() -> bool {
    KERNEL.lock().is_some()
}

/// Runs `f` on the memory manager.
pub fn with<R>(f: impl FnOnce(&mut Kernel) -> R) -> R {
    let mut g = KERNEL.lock();
    f(g.as_mut().expect("mm::init not called"))
}

fn disk_matches(dev: &BlkDevice, want: &str) -> bool {
    dev.id() == want.as_bytes()
}

/// Probes devices and starts the memory manager. Returns a one-line error for the console.
pub fn init(cfg: &Config) -> Result<(), &'static str> {
    let num = |k, d, lo, hi| cfg.num(k, d, lo, hi);
    let zero = num("zero", 1, 0, 1).map_err(|_| "bad argument zero= (0 or 1)")?;
    let ra_kb = num("readahead_kb", 128, 4, 256)
        .map_err(|_| "bad argument readahead_kb= (4 to 256, KiB)")?;
    let swappiness =
        num("swappiness", 60, 0, 200).map_err(|_| "bad argument swappiness= (0 to 200)")?;
    let page_cluster =
        num("page_cluster", 3, 0, 6).map_err(|_| "bad argument page_cluster= (0 to 6)")?;
    let use_balloon = num("balloon", 1, 0, 1).map_err(|_| "bad argument balloon= (0 or 1)")?;
    let report_order =
        num("report_order", 9, 0, 10).map_err(|_| "bad argument report_order= (0 to 10)")?;
    let report = num("report", 1, 0, 1).map_err(|_| "bad argument report= (0 or 1)")?;
    let report_ms = num("report_ms", crate::virtio::balloon::REPORT_MS, 0, 60_000)
        .map_err(|_| "bad argument report_ms= (0 to 60000, ms)")?;
    let race = match cfg.arg("report_race").unwrap_or("off") {
        "off" => ReportRace::Off,
        "used" => ReportRace::AtUsed,
        "inflight" => ReportRace::InFlight,
        _ => return Err("bad argument report_race= (off, used or inflight)"),
    };
    let holdoff_ms = num("balloon_holdoff_ms", 1000, 0, 600_000)
        .map_err(|_| "bad argument balloon_holdoff_ms= (0 to 600000, ms)")?;
    let poll_ms = num(
        "balloon_poll_ms",
        crate::virtio::balloon::CONFIG_POLL_MS,
        0,
        60_000,
    )
    .map_err(|_| "bad argument balloon_poll_ms= (0 to 60000, ms)")?;
    let data_id = cfg
        .arg("data_disk")
        .or(cfg.disk().and_then(|d| core::str::from_utf8(d).ok()));
    let data_id = data_id.unwrap_or("data");
    let swap_id = cfg.arg("swap_disk").unwrap_or("swap");

    let mut data = None;
    let mut swap = None;
    let mut balloon = None;
    virtio::probe(|found| match found.device_id {
        DEVICE_ID_BLOCK => match BlkDevice::init(found.slot, found.transport) {
            Ok(dev) if disk_matches(&dev, data_id) && data.is_none() => data = Some(dev),
            Ok(dev) if disk_matches(&dev, swap_id) && swap.is_none() => swap = Some(dev),
            Ok(dev) => println!("mm: ignoring disk \"{}\"", dev.id_str()),
            Err(e) => println!("virtio-blk: slot {}: {e}", found.slot),
        },
        DEVICE_ID_BALLOON if use_balloon == 1 => {
            match Balloon::init(
                found.transport,
                (report == 1).then_some(report_order as u32),
                (report_ms, race),
                (holdoff_ms, poll_ms),
            ) {
                Ok(b) => balloon = Some(b),
                Err(e) => println!("virtio-balloon: slot {}: {e}", found.slot),
            }
        }
        _ => {}
    });

    let mut slots = 0u64;
    if let Some(dev) = swap.as_mut() {
        let page = crate::early_alloc::alloc_pages(1).ok_or("out of memory")?;
        dev.read_pages(0, &[page as u64])
            .map_err(|_| "cannot read the swap disk header")?;
        // SAFETY: `page` is a fresh early-allocator page the device just filled.
        let header = unsafe { &*(page as *const [u8; BLOCK_SIZE]) };
        slots = decode_swap_header(header)
            .map_err(|_| "the swap disk has no swap header (make it with memvisor mkdisk swap)")?;
        slots = slots.min(dev.capacity_bytes() / BLOCK_SIZE as u64 - 1);
        slots = slots.min(u64::from(u32::MAX - 1));
    }
    let swap_words = (slots as usize).div_ceil(64);
    let swap_map_addr = crate::early_alloc::alloc_zeroed(swap_words.max(1) * 8, 8)
        .ok_or("out of memory for the swap map")?;

    let (start, end) = crate::early_alloc::take_rest();
    let pages0 = (end - start) / PAGE_SIZE;
    let cache_len = (2 * pages0).next_power_of_two();
    let meta = pages0 * size_of::<Frame>() + cache_len * 4;
    let frames_start = (start + meta).next_multiple_of(PAGE_SIZE);
    if frames_start + 64 * PAGE_SIZE > end {
        return Err("not enough RAM for the memory manager");
    }
    let n = (end - frames_start) / PAGE_SIZE;
    let frames_ptr = start as *mut Frame;
    let cache_ptr = (start + pages0 * size_of::<Frame>()).next_multiple_of(4) as *mut u32;
    // SAFETY: [start, frames_start) is RAM nobody else owns (taken from the early allocator);
    // the frame array (n <= pages0 entries) and the hash table (cache_len entries) fit
    // before frames_start and do not overlap; every Frame is written before it is read
    // (Mm::new initialises all of them) and u32 has no invalid values.
    let (frames, cache, swap_map) = unsafe {
        for i in 0..n {
            frames_ptr.add(i).write(Frame::INIT);
        }
        (
            core::slice::from_raw_parts_mut(frames_ptr, n),
            core::slice::from_raw_parts_mut(cache_ptr, cache_len),
            core::slice::from_raw_parts_mut(swap_map_addr as *mut u64, swap_words),
        )
    };
    let mut params = Params::for_frames(n as u32);
    params.zero_on_alloc = zero == 1;
    params.readahead_pages = (ra_kb / 4) as u32;
    params.swappiness = swappiness as u32;
    params.page_cluster = page_cluster as u32;
    let mut mm = Mm::new(
        frames,
        (frames_start / PAGE_SIZE) as u64,
        cache,
        swap_map,
        params,
    );
    mm.set_swap(slots as u32);
    let mut be = GuestBackend {
        base: frames_start,
        data,
        swap,
    };
    let mut fs = "none";
    if be.data.is_some() {
        match mm.mount(&mut be) {
            Ok(()) => fs = "mounted",
            Err(MmError::BadFs) => fs = "unformatted",
            Err(_) => return Err("cannot read the data disk"),
        }
    }
    println!(
        "mm: {} MiB in {} pages at {:#x}, watermarks min/low/high {}/{}/{} pages, zero_on_alloc={} \
         readahead={} KiB swappiness={} swap={} MiB data disk: {} balloon: {}",
        (n * PAGE_SIZE) >> 20,
        n,
        frames_start,
        params.min_free,
        params.low_free,
        params.high_free,
        zero,
        ra_kb,
        swappiness,
        (slots * BLOCK_SIZE as u64) >> 20,
        fs,
        if balloon.is_some() { "yes" } else { "no" }
    );
    *KERNEL.lock() = Some(Kernel { mm, be, balloon });
    Ok(())
}

/// Runs the periodic work (balloon) if `TICK_MS` have passed since the last tick.
pub fn tick() {
    let now = crate::cpu::rdtsc();
    let next = NEXT_TICK.load(Ordering::Relaxed);
    if now < next {
        return;
    }
    if NEXT_TICK
        .compare_exchange(
            next,
            crate::time::deadline_after_ms(TICK_MS),
            Ordering::Relaxed,
            Ordering::Relaxed,
        )
        .is_err()
    {
        return;
    }
    with(|k| {
        if let Some(b) = k.balloon.as_mut() {
            b.poll(&mut k.mm, &mut k.be);
        }
    });
}

/// Retries `f` after deflating the balloon when it runs out of memory (deflate-on-OOM).
fn retry_oom<R>(
    k: &mut Kernel,
    mut f: impl FnMut(&mut Kernel) -> Result<R, MmError>,
) -> Result<R, MmError> {
    loop {
        match f(k) {
            Err(MmError::OutOfMemory) => {
                let freed = match k.balloon.as_mut() {
                    Some(b) => b.deflate_on_oom(&mut k.mm, &mut k.be),
                    None => 0,
                };
                if freed == 0 {
                    return Err(MmError::OutOfMemory);
                }
            }
            r => return r,
        }
    }
}

/// A pinned page; unpinned when dropped.
pub struct Page {
    frame: u32,
    addr: usize,
}

impl Page {
    /// The page as 512 words.
    pub fn words(&mut self) -> &mut [u64; 512] {
        // SAFETY: the frame is pinned (reclaim leaves it alone) and belongs to the task or
        // file page the caller asked for; the caller's task is its only user.
        unsafe { &mut *(self.addr as *mut [u64; 512]) }
    }

    /// The page as 4096 bytes.
    pub fn bytes(&mut self) -> &mut [u8; PAGE_SIZE] {
        // SAFETY: as for `words`.
        unsafe { &mut *(self.addr as *mut [u8; PAGE_SIZE]) }
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        with(|k| k.mm.unpin(self.frame));
    }
}

fn page(k: &Kernel, frame: u32) -> Page {
    Page {
        frame,
        addr: k.be.base + frame as usize * PAGE_SIZE,
    }
}

/// Virtual page `vpn` of task `task`, faulted in; sets the accessed (and with `write` the
/// dirty) bit of its software PTE.
pub fn anon(task: u32, vpn: u64, write: bool) -> Result<Page, MmError> {
    tick();
    with(|k| {
        let f = retry_oom(k, |k| k.mm.access(&mut k.be, task, vpn, write, true))?;
        Ok(page(k, f))
    })
}

/// Page `index` of file `file` through the page cache.
pub fn file_page(file: u32, index: u64, access: Access) -> Result<Page, MmError> {
    tick();
    with(|k| {
        let f = retry_oom(k, |k| k.mm.file_page(&mut k.be, file, index, access, true))?;
        Ok(page(k, f))
    })
}

pub fn task_create() -> Result<u32, MmError> {
    with(|k| k.mm.task_create())
}

pub fn task_exit(task: u32) {
    with(|k| k.mm.task_exit(&mut k.be, task));
}

pub fn stats() -> Stats {
    with(|k| k.mm.stats())
}

pub fn sync() -> Result<(), MmError> {
    with(|k| k.mm.sync(&mut k.be))
}

pub fn drop_caches() -> Result<u32, MmError> {
    with(|k| k.mm.drop_caches(&mut k.be))
}

pub fn lookup(name: &str) -> Option<u32> {
    with(|k| k.mm.lookup(name))
}

pub fn file_pages(file: u32) -> u64 {
    with(|k| k.mm.file_pages(file))
}

/// Creates a file (the data disk must be formatted).
pub fn file_create(name: &str, size: u64) -> Result<u32, MmError> {
    with(|k| k.mm.file_create(&mut k.be, name, size))
}

/// Seed of the data disk's deterministic content (0 if not mounted).
pub fn fs_seed() -> u64 {
    with(|k| k.mm.superblock().map_or(0, |s| s.seed))
}

/// The balloon driver's counters (zeros without a balloon).
pub fn balloon_stats() -> BalloonStats {
    with(|k| k.balloon.as_ref().map(|b| b.stats)).unwrap_or_default()
}

/// Prints the balloon driver's counters as `balloon_...=value` words (for RESULT lines).
pub struct BalloonWords(pub BalloonStats);

impl core::fmt::Display for BalloonWords {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let b = &self.0;
        write!(
            f,
            "balloon_inflated={} balloon_deflated={} balloon_oom_deflated={} \
             balloon_oom_deflates={} balloon_holdoff_ms={} balloon_stats_sent={} \
             balloon_reported_chunks={} balloon_race_checked={} balloon_race_lost={} \
             balloon_inflight_written={} balloon_inflight_lost={}",
            b.inflated,
            b.deflated,
            b.oom_deflated,
            b.oom_deflates,
            b.holdoff_ms,
            b.stats_sent,
            b.reported_chunks,
            b.race_checked,
            b.race_lost,
            b.inflight_written,
            b.inflight_lost
        )
    }
}

/// The counters as `key=value` words (for RESULT lines), with how long the disks' requests
/// took as the guest waited for them (`io_wait_us`, both disks), taken at the same time.
pub struct StatsWords {
    pub stats: Stats,
    pub io_wait_us: u64,
    /// The balloon driver's: how long the vCPU waited for the device, and the configuration
    /// reads (each one MMIO exit).
    pub balloon_wait_us: u64,
    pub balloon_config_reads: u64,
}

/// The counters now, for a RESULT line.
pub fn stats_words() -> StatsWords {
    with(|k| {
        let cycles: u64 = [&k.be.data, &k.be.swap]
            .into_iter()
            .flatten()
            .map(|d| d.stats.wait_cycles)
            .sum();
        let b = k.balloon.as_ref().map(|b| b.stats).unwrap_or_default();
        StatsWords {
            stats: k.mm.stats(),
            io_wait_us: crate::time::cycles_to_us(cycles).unwrap_or(0),
            balloon_wait_us: crate::time::cycles_to_us(b.wait_cycles).unwrap_or(0),
            balloon_config_reads: b.config_reads,
        }
    })
}

impl core::fmt::Display for StatsWords {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let s = &self.stats;
        let c = &s.events;
        write!(
            f,
            "free_kb={} cached_kb={} dirty_kb={} anon_kb={} swap_used_kb={} pswpin={} pswpout={} \
             pgmajfault={} pgfault={} pgscan={} pgsteal={} pgsteal_file={} pgsteal_anon={} \
             pgpgin={} pgpgout={} readahead={} swap_ra={} swap_ra_hits={} balloon_kb={} zeroed={} \
             io_requests={} io_wait_us={} balloon_wait_us={} balloon_config_reads={}",
            s.free * 4,
            s.cached * 4,
            s.dirty * 4,
            s.anon * 4,
            s.swap_used * 4,
            c.pswpin,
            c.pswpout,
            c.pgmajfault,
            c.pgfault,
            c.pgscan,
            c.pgsteal,
            c.pgsteal_file,
            c.pgsteal_anon,
            c.pgpgin,
            c.pgpgout,
            c.readahead,
            c.swap_ra,
            c.swap_ra_hits,
            s.balloon * 4,
            c.zeroed,
            c.io_requests,
            self.io_wait_us,
            self.balloon_wait_us,
            self.balloon_config_reads
        )
    }
}
