//! The pager of one VM: its construction, its threads, and the handle the VMM and devices hold.
//!
//! Guest RAM is registered with userfaultfd (`uffd.rs`) when a limit first asks for it
//! (`takeover.rs`). Two threads work on it:
//! - `pager` reads fault events and resolves them (`fault.rs`), and runs working-set sampling
//!   (`sample.rs`);
//! - `reclaim` takes pages out while resident pages exceed the limit (`reclaim.rs`), in chunks,
//!   writing each chunk without the page lock, so faults go on being served meanwhile; with a
//!   pool and room under the limit, it brings swapped pages back proactively (`swapin.rs`);
//! - `pool-flush`, with a pool, spills its least recent pages to the swap file (`pool.rs`);
//! - `defrag`, with Tesseract's guest-disk defragmentation, copies indirected blocks back into
//!   the images (`indirect.rs`).
//!
//! Devices reach guest memory through the [`GuestRam`] facade (`facade.rs`), which installs
//! whole pages without reading them; vCPU threads come in only for the Preventer
//! (`preventer.rs`).
//!
//! Locks, each held briefly and never across disk writes or a whole shrink:
//! - `pages`: the page table, the prefetch marks, the I/O buffer and the chunk in flight. Held
//!   for one fault, one device access, or one step of a reclaim chunk; `settled` (with it) says
//!   when a chunk has been recorded, for device accesses, which wait for that.
//! - `stopped`: the vCPUs the Preventer stopped (taken after `pages`, never before it).
//! - `sampling`: the working-set sample (taken before `pages`, never after it).
//! - `events`: the fault event buffer, used by the pager thread alone.
//! - the pool's own lock (`pool.rs`), taken after `pages`, never before it.
//! - each disk's indirection lock (`indirect.rs`), taken after `pages`, never before it (the
//!   device and the defragmenter drop it before they take `pages` to release blocks).
//!
//! The limit is an atomic; the counters are atomics and the page census is kept as running
//! counts, so the API reads them without a scan. Pausing and parking vCPUs belong to the VMM,
//! reached through [`VcpuControl`].

use std::collections::{HashMap, HashSet};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use memvisor_devices::ram::PAGE_SIZE;
use memvisor_devices::GuestMem;
use thiserror::Error;
use userfaultfd::EventBuffer;

use crate::image::ImageFile;
use crate::pool::{Pool, PoolError, SwapStore};
use crate::ram_map::RamMap;
use crate::sample::{SampleStore, Sampling};
use crate::state::{Mechanisms, PageIdx, PageTable};
use crate::stats::{Counters, Latency};
use crate::store::Stores;
use crate::swap::{SwapError, SwapFile, BLOCK};
use crate::takeover::PageMap;
use crate::uffd::{Fault, Userfault};
use crate::victim::VictimPolicy;
use memvisor_devices::iobuf::IoBuf;

pub use memvisor_api::spec::MIN_LIMIT;
pub(crate) const PAGE: usize = 4096;
/// Never-touched pages installed with a faulting one (128 KiB).
pub(crate) const ZERO_WINDOW: u32 = 32;

#[derive(Clone, Debug)]
pub struct PagerConfig {
    pub mech: Mechanisms,
    pub policy: VictimPolicy,
    /// The victim cache (Tesseract §4.3, `victim.rs`), in percent of the limit (0 to 50):
    /// chosen victims cool down that many at a time before reclaim writes the oldest (0: none).
    pub victim_cache: u8,
    /// Most bytes of guest RAM resident at once; `None`: no limit.
    pub limit: Option<u64>,
    pub swap_path: PathBuf,
    /// The swap file was made for this VM: unlink it at once (it lives as long as the pager).
    pub temporary_swap: bool,
    /// Pages reclaimed per chunk: the most any fault waits for reclaim.
    pub batch: u32,
    /// Resident pages taken out each sampling period to measure the working set (0: none).
    pub sample_pages: u32,
    /// How long a sampling period lasts.
    pub sample_period: std::time::Duration,
    /// A host-memory pool in front of the swap file (`pool.rs`); `None`: victims go to the file.
    pub pool: Option<PoolConfig>,
    /// When the VM may hold more pages (its limit rose), bring its swapped pages back in
    /// batches without waiting for faults: pooled ones first and most recent first, then those
    /// in the swap file in block order (`swapin.rs`).
    pub proactive: bool,
    /// Tesseract's indirections on writable disks (`indirect.rs`); `None`: off.
    pub indirections: Option<IndirectConfig>,
}

/// Tesseract's indirections (`indirect.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndirectConfig {
    /// Most indirections live at once, over all disks; the swap file has this many blocks
    /// beyond one per guest page, so reclaim always finds room.
    pub max: u32,
    /// At exit, leave the indirections, their logs and the swap file for the next start (or
    /// `memvisor disk disentangle`) instead of copying the blocks back into the images.
    pub keep: bool,
    /// When the logs are synced.
    pub sync: crate::indirect::LogSync,
    /// Tesseract's defragmentation (§5), run by a `defrag` thread in the background: indirected
    /// blocks copied back into the images (`Guest`), or grouped in the swap file by the write
    /// that made them (`Store`).
    pub defrag: Option<crate::indirect::Defrag>,
}

/// The host-memory tier (MemFlex §3.2–§3.4).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PoolConfig {
    /// Most bytes of pool memory; changed at run time with [`Pager::set_pool`].
    pub bytes: u64,
    /// Fraction of the pool above which its least recent pages spill to the swap file.
    pub spill_at: f64,
    /// How pages are kept in the pool: whole, or compressed (zswap-like).
    pub compress: memvisor_api::PoolCompress,
    /// Bytes of one chunk of pool memory (a multiple of 4 KiB).
    pub chunk_bytes: u64,
}

#[derive(Debug, Error)]
pub enum PagerError {
    #[error("userfaultfd is unavailable")]
    Uffd(#[source] userfaultfd::Error),
    #[error("cannot register guest RAM with userfaultfd")]
    Register(#[source] userfaultfd::Error),
    #[error("cannot take guest RAM over")]
    Attach(#[source] std::io::Error),
    #[error(transparent)]
    Swap(#[from] SwapError),
    #[error("a limit of {limit} bytes is above the VM's {size} bytes of RAM")]
    LimitAboveSize { limit: u64, size: u64 },
    #[error("a limit of {limit} bytes is below the {MIN_LIMIT}-byte minimum (the guest's own code, stacks and queues must stay resident)")]
    LimitTooSmall { limit: u64 },
    #[error("this VM has no pool (start it with --pool SIZE)")]
    NoPool,
    #[error(transparent)]
    Pool(#[from] PoolError),
    #[error("cannot start the pager thread")]
    Thread(#[source] std::io::Error),
    #[error(transparent)]
    Indirect(#[from] crate::indirect::IndirectError),
}

/// Why the pager asked for the VM to be paused: a page could not be moved, so the guest must
/// not run on (nothing was dropped without its content safe, so nothing is lost).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum PagerFailure {
    #[error("a fault on guest page {page} could not be resolved: {error}")]
    Fault { page: PageIdx, error: String },
    #[error("reclaim stopped: {error}")]
    Reclaim { error: String },
}

/// What the pager needs from the VMM's vCPUs: the Preventer stops single vCPUs, and a failed
/// page move pauses them all.
pub trait VcpuControl: Send + Sync {
    /// Whether `tid` is a vCPU thread of this VM.
    fn is_vcpu(&self, tid: i32) -> bool;
    /// Makes vCPU thread `tid` leave `KVM_RUN` with `EINTR` (or not enter it); it then calls
    /// [`Pager::vcpu_interrupted`].
    fn kick(&self, tid: i32) -> std::io::Result<()>;
    /// Stops every vCPU until the VMM resumes the VM (then it calls [`Pager::retry`]).
    fn pause(&self, why: PagerFailure);
    /// Whether the VM is paused because of a pager failure: reclaim waits for the resume
    /// (which retries). A pause for another reason does not stop reclaim.
    fn pager_paused(&self) -> bool;
    /// How long the busiest vCPU has run in guest mode since it started (`None`: not known).
    /// Working-set sampling counts its periods in it.
    fn guest_time(&self) -> Option<std::time::Duration> {
        None
    }
}

/// A [`VcpuControl`] for a pager that serves no vCPUs (tests, tools that drive guest memory
/// themselves): a pause is recorded until [`NoVcpus::resume`], and nobody is kicked.
#[derive(Debug, Default)]
pub struct NoVcpus {
    paused: Mutex<Option<PagerFailure>>,
}

impl NoVcpus {
    /// Why the pager paused, if it did.
    pub fn paused(&self) -> Option<PagerFailure> {
        self.paused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn resume(&self) -> Option<PagerFailure> {
        self.paused.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

impl VcpuControl for NoVcpus {
    fn is_vcpu(&self, _: i32) -> bool {
        false
    }

    fn kick(&self, _: i32) -> std::io::Result<()> {
        Err(std::io::Error::other("there are no vCPUs"))
    }

    fn pause(&self, why: PagerFailure) {
        self.paused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(why);
    }

    fn pager_paused(&self) -> bool {
        self.paused().is_some()
    }
}

/// The page table and what goes with it, under the page lock.
pub(crate) struct Pages {
    pub table: PageTable,
    /// The buffer of the store reads made under the page lock: a fault served again, a second
    /// fault while `fault_io` is taken, the Swap Mapper's refetches.
    pub io: IoBuf,
    /// Pages installed by prefetch and not yet written.
    pub prefetched: Vec<bool>,
    /// Guest RAM is registered with userfaultfd (see `takeover.rs`); until then the guest and
    /// devices use plain memory and no page is tracked but the balloon's.
    pub attached: bool,
    /// Host addresses of the huge pages not split yet (see `takeover.rs`).
    pub huge: HashSet<u64>,
    /// The victims of the reclaim chunk being written, sorted: mapped, write-protected and
    /// decided, so nothing else may change them until the chunk is recorded (`reclaim.rs`).
    pub in_flight: Vec<PageIdx>,
    /// Resident pages when the last reclaim chunk was recorded (0 before the first, so the
    /// first installs past the limit wait for the first chunk).
    pub resident_after_chunk: u32,
    /// Indirections live or pending, over all disks (each holds a swap-block reference).
    pub indirections: u32,
}

pub(crate) struct Shared {
    pub mem: Arc<GuestMem>,
    pub map: RamMap,
    pub uffd: Userfault,
    /// How RAM is taken over at run time; `None`: this kernel cannot scan its page map, so RAM
    /// is registered from the start.
    pub pagemap: Option<PageMap>,
    pub stores: Stores,
    pub pages: Mutex<Pages>,
    /// The buffer a fault's store read goes into without the page lock (`fault.rs`); taken
    /// only with `try_lock`, so a second fault meanwhile reads under the page lock instead.
    pub fault_io: Mutex<IoBuf>,
    /// Signalled (with `pages`) when a reclaim chunk has been recorded or reclaim gave up.
    pub settled: Condvar,
    /// Set to wake the reclaim thread, with `reclaim_wake`.
    pub reclaim_wanted: Mutex<bool>,
    pub reclaim_wake: Condvar,
    /// vCPU threads stopped by the Preventer: the page each faulted on, and since when.
    pub stopped: Mutex<HashMap<i32, (PageIdx, Instant)>>,
    /// Fault events read by the pager thread.
    events: Mutex<EventBuffer>,
    /// Faults that could not be resolved: their threads (a vCPU, or a device thread in the
    /// middle of a request) wait in the kernel until the page is installed, so a resume serves
    /// them again ([`Pager::retry`]).
    pub unresolved: Mutex<Vec<Fault>>,
    /// Resident-page limit (the high watermark); `u32::MAX`: none.
    pub limit: AtomicU32,
    pub vcpus: Arc<dyn VcpuControl>,
    pub batch: u32,
    pub sample_pages: u32,
    pub sample_period: std::time::Duration,
    /// Proactive swap-in when the limit leaves room (`PagerConfig::proactive`).
    pub proactive: bool,
    /// Set when the limit rises: the reclaim thread then swaps in proactively (`swapin.rs`).
    pub swap_in_wanted: AtomicBool,
    /// Working-set sampling (`sample.rs`), taken before `pages`, never after it.
    pub sampling: Mutex<Sampling>,
    /// A zeroed source for installing fresh writable pages.
    pub zeros: Vec<u8>,
    pub counters: Counters,
    pub fault_latency: Latency,
    pub swap_fault_latency: Latency,
    pub reclaim_latency: Latency,
    /// `--tesseract`, and the swap file's path (which the indirection logs name).
    pub indirections: Option<IndirectConfig>,
    pub swap_path: PathBuf,
    /// The swap file was made for this VM: deleted when the pager ends (with indirections it
    /// is not unlinked at once, since a crash must leave it for recovery).
    pub temporary_swap: bool,
}

/// The pager of one VM. Cloning shares it.
#[derive(Clone)]
pub struct Pager {
    pub(crate) shared: Arc<Shared>,
}

fn limit_pages(limit: Option<u64>, size: u64) -> Result<u32, PagerError> {
    match limit {
        None => Ok(u32::MAX),
        Some(l) if l > size => Err(PagerError::LimitAboveSize { limit: l, size }),
        Some(l) if l < MIN_LIMIT => Err(PagerError::LimitTooSmall { limit: l }),
        Some(l) => Ok(u32::try_from(l / PAGE_SIZE).unwrap_or(u32::MAX)),
    }
}

/// The inverse of [`limit_pages`].
pub(crate) fn limit_to_bytes(pages: u32) -> Option<u64> {
    (pages != u32::MAX).then(|| u64::from(pages) * PAGE_SIZE)
}

/// The calling thread's id.
pub(crate) fn current_tid() -> i32 {
    // SAFETY: gettid(2) has no arguments and cannot fail.
    unsafe { libc::gettid() }
}

impl Pager {
    /// Puts `mem` under a new pager and starts its thread. Must run before anything touches
    /// guest RAM.
    ///
    /// If the pager thread ever stops (it cannot read faults, or it panicked), no guest page can
    /// be resolved any more: `on_failure` is called with the reason, and the VM must end.
    pub fn start(
        mem: Arc<GuestMem>,
        config: &PagerConfig,
        vcpus: Arc<dyn VcpuControl>,
        on_failure: impl FnOnce(String) + Send + 'static,
    ) -> Result<Pager, PagerError> {
        let uffd = Userfault::new().map_err(PagerError::Uffd)?;
        let map = RamMap::new(&mem);
        let pages = map.pages();
        let limit = limit_pages(config.limit, u64::from(pages) * PAGE_SIZE)?;
        let extra = config.indirections.map_or(0, |c| c.max);
        let swap_blocks = pages.saturating_add(extra);
        let swap = SwapFile::create(
            &config.swap_path,
            swap_blocks,
            config.temporary_swap && config.indirections.is_none(),
        )?;
        let batch = config.batch.max(1);
        let mech = config.mech;
        let mut table = PageTable::new(pages, swap_blocks, mech, config.policy, 0x6d76_6d76);
        table.victims.cache_percent = config.victim_cache.min(50);
        // A refault reads up to `prefetch` pages from swap, or up to `IMAGE_WINDOW_MAX` from an
        // image (reclaim writes from its own buffer).
        let io_len = mech.prefetch.max(crate::state::IMAGE_WINDOW_MAX).max(1) as usize * BLOCK;
        let state = Pages {
            table,
            // Huge pages only for the hot paths' buffers (`fault_io`, reclaim's): this one
            // serves the retries and the Swap Mapper's refetches.
            io: IoBuf::new(io_len),
            prefetched: vec![false; pages as usize],
            attached: false,
            huge: HashSet::new(),
            in_flight: Vec::new(),
            resident_after_chunk: 0,
            indirections: 0,
        };
        let guest_time = vcpus.guest_time();
        let shared = Arc::new(Shared {
            mem,
            map,
            uffd,
            pagemap: PageMap::open(),
            stores: Stores::new(
                SwapStore {
                    file: swap,
                    pool: config
                        .pool
                        .map(|p| Pool::new(p.bytes, p.spill_at, p.compress, p.chunk_bytes))
                        .transpose()?,
                },
                SampleStore::new(config.sample_pages),
            ),
            pages: Mutex::new(state),
            fault_io: Mutex::new(IoBuf::huge(io_len)),
            settled: Condvar::new(),
            reclaim_wanted: Mutex::new(false),
            reclaim_wake: Condvar::new(),
            stopped: Mutex::new(HashMap::new()),
            events: Mutex::new(EventBuffer::new(64)),
            unresolved: Mutex::new(Vec::new()),
            limit: AtomicU32::new(limit),
            vcpus,
            batch,
            sample_pages: config.sample_pages,
            sample_period: config.sample_period,
            proactive: config.proactive,
            swap_in_wanted: AtomicBool::new(false),
            sampling: Mutex::new(Sampling::new(config.sample_period, guest_time)),
            zeros: vec![0u8; ZERO_WINDOW as usize * PAGE],
            counters: Counters::default(),
            fault_latency: Latency::default(),
            swap_fault_latency: Latency::default(),
            reclaim_latency: Latency::default(),
            indirections: config.indirections,
            swap_path: config.swap_path.clone(),
            temporary_swap: config.temporary_swap,
        });
        // The Swap Mapper and the Preventer learn from every disk read and fault, so asking
        // for them takes RAM over from the start, as a limit does.
        if config.limit.is_some() || mech.mapper || mech.preventer || shared.pagemap.is_none() {
            shared.attach(&mut shared.lock())?;
        }
        let r = shared.clone();
        std::thread::Builder::new()
            .name("reclaim".into())
            .spawn(move || {
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| r.reclaim_thread()))
                    .is_err()
                {
                    // Nothing more is reclaimed: hold the VM rather than run past its limit.
                    r.pause(PagerFailure::Reclaim {
                        error: "the reclaim thread panicked".into(),
                    });
                    r.settled.notify_all();
                }
            })
            .map_err(PagerError::Thread)?;
        if shared.stores.swap.pool.is_some() {
            let f = shared.clone();
            std::thread::Builder::new()
                .name("pool-flush".into())
                .spawn(move || {
                    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f.flush_thread()))
                        .is_err()
                    {
                        f.pause(PagerFailure::Reclaim {
                            error: "the pool's flusher panicked".into(),
                        });
                    }
                })
                .map_err(PagerError::Thread)?;
        }
        if config.indirections.is_some_and(|c| c.defrag.is_some()) {
            let d = shared.clone();
            std::thread::Builder::new()
                .name("defrag".into())
                .spawn(move || d.defrag_thread())
                .map_err(PagerError::Thread)?;
        }
        let s = shared.clone();
        std::thread::Builder::new()
            .name("pager".into())
            .spawn(move || {
                let why = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.run())) {
                    Ok(why) => why,
                    Err(p) => {
                        let msg = p.downcast_ref::<&str>().map(|m| (*m).to_owned());
                        let msg = msg.or_else(|| p.downcast_ref::<String>().cloned());
                        format!("the pager thread panicked: {}", msg.unwrap_or_default())
                    }
                };
                on_failure(why);
            })
            .map_err(PagerError::Thread)?;
        Ok(Pager { shared })
    }

    /// Gives the pager read access to guest disk `disk` (its index), for refaults of pages
    /// dropped while mirroring it; with indirections, a `writable` disk (its image's path)
    /// gets them, and its log is started.
    pub fn attach_disk(
        &self,
        disk: u8,
        image: std::fs::File,
        writable: Option<&std::path::Path>,
    ) -> Result<(), PagerError> {
        let s = &self.shared;
        let indirect = match (s.indirections, writable) {
            (Some(cfg), Some(path)) => Some(crate::indirect::Indirect::start(
                path,
                &s.swap_path,
                cfg.sync,
                cfg.defrag,
            )?),
            _ => None,
        };
        if !s
            .stores
            .attach_image(disk, ImageFile::new(disk, image, indirect))
        {
            tracing::warn!("pager: disk {disk} cannot be attached (taken, or past the last slot)");
        }
        Ok(())
    }

    /// At the VM's end: copies every indirected block back into its image and deletes the
    /// logs (or, with `keep`, leaves them for the next start), then deletes a swap file made
    /// for this VM that nothing needs any more. Returns the blocks copied back and kept.
    pub fn end_indirections(&self) -> Result<(u64, u64), PagerError> {
        let s = &self.shared;
        let Some(cfg) = s.indirections else {
            return Ok((0, 0));
        };
        let (mut copied, mut kept) = (0u64, 0u64);
        for image in s.stores.images() {
            let Some(ind) = &image.indirect else { continue };
            if cfg.keep {
                kept += ind
                    .keep()
                    .map_err(|source| crate::indirect::IndirectError::Io {
                        path: ind.image().to_owned(),
                        source,
                    })?;
                continue;
            }
            let released = ind.disentangle()?;
            copied += released.len() as u64;
            s.release_indirections(released);
        }
        if s.temporary_swap && kept == 0 {
            if let Err(e) = std::fs::remove_file(&s.swap_path) {
                tracing::warn!("pager: cannot delete {}: {e}", s.swap_path.display());
            }
        }
        Ok((copied, kept))
    }

    /// Changes the limit at run time: shrinking reclaims down to it (on the reclaim thread,
    /// while faults are served), growing lets pages back as they fault, or at once with
    /// proactive swap-in (`swapin.rs`). The first limit
    /// of a VM started without one takes guest RAM over (`takeover.rs`).
    pub fn set_limit(&self, limit: Option<u64>) -> Result<(), PagerError> {
        let s = &self.shared;
        let pages = limit_pages(limit, u64::from(s.map.pages()) * PAGE_SIZE)?;
        if limit.is_some() {
            s.attach(&mut s.lock())?;
        }
        if s.limit.swap(pages, Ordering::SeqCst) < pages {
            s.swap_in_wanted.store(true, Ordering::SeqCst);
        }
        s.want_reclaim();
        Ok(())
    }

    /// Resizes the pool (`PUT /pool`); a smaller pool spills down to its new size.
    pub fn set_pool(&self, bytes: u64) -> Result<(), PagerError> {
        match &self.shared.stores.swap.pool {
            None => Err(PagerError::NoPool),
            Some(p) => {
                p.set_capacity(bytes);
                self.shared.want_reclaim();
                Ok(())
            }
        }
    }

    /// The resident limit in bytes, if there is one.
    pub fn limit_bytes(&self) -> Option<u64> {
        limit_to_bytes(self.shared.limit.load(Ordering::SeqCst))
    }

    /// After the VMM resumed a paused VM: the faults that could not be resolved are served
    /// again, which wakes the threads waiting on them, and reclaim is tried again (either pauses
    /// the VM again if its I/O still fails).
    pub fn retry(&self) {
        let faults = std::mem::take(
            &mut *self
                .shared
                .unresolved
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for f in faults {
            self.shared.serve_fault(f);
        }
        self.shared.want_reclaim();
        self.shared.settled.notify_all();
    }
}

impl Shared {
    /// Tesseract's defragmentation: batches of indirected blocks copied back into the images
    /// (guest-disk), or one guest write's indirections at a time grouped in the swap file
    /// (swap-file), with a pause between batches so the guest's own I/O goes first; a failed
    /// copy is logged and tried again later (the indirection stays, so nothing is lost).
    fn defrag_thread(&self) {
        const BATCH: usize = 32;
        let Some(Some(mode)) = self.indirections.map(|c| c.defrag) else {
            return;
        };
        loop {
            let mut done = 0;
            for image in self.stores.images() {
                let Some(ind) = &image.indirect else { continue };
                let (released, r) = match mode {
                    crate::indirect::Defrag::Guest => match ind.defragment(BATCH) {
                        Ok(released) => (released, Ok(())),
                        Err(e) => (Vec::new(), Err(e)),
                    },
                    crate::indirect::Defrag::Store => {
                        let (released, r) = ind.regroup(|n| self.reserve_indirections(n));
                        (released, r.map(|moved| done += usize::from(moved)))
                    }
                };
                done += released.len();
                self.release_indirections(released);
                if let Err(e) = r {
                    tracing::warn!("pager: defragmenting {} failed: {e}", ind.image().display())
                }
            }
            let pause = if done == 0 { 50 } else { 2 };
            std::thread::sleep(std::time::Duration::from_millis(pause));
        }
    }

    /// Takes a run of `n` free swap-file blocks for indirections, if the most indirections
    /// allow it and the swap file has such a run.
    fn reserve_indirections(&self, n: u32) -> Option<crate::state::Block> {
        let max = self.indirections?.max;
        let mut pages = self.lock();
        if pages.indirections.saturating_add(n) > max {
            return None;
        }
        let first = pages.table.blocks.alloc_run(n)?;
        pages.indirections += n;
        Some(first)
    }

    /// Drops the swap-block references of indirections that ended (or never began).
    pub(crate) fn release_indirections(&self, blocks: Vec<crate::state::Block>) {
        if blocks.is_empty() {
            return;
        }
        let mut pages = self.lock();
        for b in blocks {
            pages.table.blocks.release(b);
            pages.indirections -= 1;
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Pages> {
        self.pages.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn stopped(&self) -> MutexGuard<'_, HashMap<i32, (PageIdx, Instant)>> {
        self.stopped.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn limit(&self) -> u32 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Asks the VMM to pause the VM because `why` (counted once per pause).
    pub(crate) fn pause(&self, why: PagerFailure) {
        if !self.vcpus.pager_paused() {
            tracing::error!("pager: pausing the VM: {why}");
            Counters::add(&self.counters.pauses, 1);
        }
        self.vcpus.pause(why);
    }

    /// Serves the fault events that are pending, without waiting for more. Returns why the
    /// pager cannot go on, if it cannot.
    pub(crate) fn serve_pending_faults(&self) -> Result<(), String> {
        let faults = {
            let mut buf = self.events.lock().unwrap_or_else(|e| e.into_inner());
            self.uffd
                .read_faults(&mut buf)
                .map_err(|e| format!("reading fault events failed: {e}"))?
        };
        for f in faults {
            self.serve_fault(f);
        }
        Ok(())
    }

    /// Serves faults until it cannot; returns why.
    fn run(&self) -> String {
        loop {
            let mut fd = libc::pollfd {
                fd: self.uffd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // While a vCPU is stopped for the Preventer, wake up to take over if it does not
            // answer; otherwise when the sampling period ends.
            let timeout = if self.stopped().is_empty() {
                self.sample_tick().map_or(-1, |d| {
                    i32::try_from(d.as_millis().saturating_add(1)).unwrap_or(i32::MAX)
                })
            } else {
                1
            };
            // SAFETY: `fd` is a valid pollfd for the duration of the call.
            let rc = unsafe { libc::poll(&mut fd, 1, timeout) };
            if rc < 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return format!("poll on the userfaultfd failed: {e}");
            }
            if let Err(why) = self.serve_pending_faults() {
                return why;
            }
            self.expire_stopped();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_checked() {
        assert!(matches!(
            limit_pages(Some(1 << 30), 512 << 20),
            Err(PagerError::LimitAboveSize { .. })
        ));
        assert!(matches!(
            limit_pages(Some(1 << 20), 512 << 20),
            Err(PagerError::LimitTooSmall { .. })
        ));
        assert_eq!(limit_pages(Some(100 << 20), 512 << 20).unwrap(), 25600);
        assert_eq!(limit_pages(None, 512 << 20).unwrap(), u32::MAX);
        assert_eq!(limit_to_bytes(25600), Some(100 << 20));
        assert_eq!(limit_to_bytes(u32::MAX), None);
    }
}
