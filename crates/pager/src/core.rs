//! The pager's core: what every mechanism works on. [`PagerCore`] holds guest memory, the RAM
//! map, the userfaultfd, the state table (under the page lock, with what goes with it in
//! [`Pages`]), the stores, the counters, the limit and vCPU control; the errors and the
//! [`VcpuControl`] trait are defined here too, since every mechanism reports through them.
//!
//! Every mechanism is an owner of its own: the fault path (`FaultHandler`, in `fault.rs`),
//! reclaim (`Reclaimer`, in `reclaim.rs`), the takeover (`Takeover`, in `takeover.rs`),
//! working-set sampling (`Sampler`, in `sample.rs`), proactive swap-in (`SwapIn`, in
//! `swapin.rs`) and the Preventer (`Preventer`, in `preventer.rs`) each hold their state and
//! are handed the core they work on, and the owners they call: the fault path is handed the
//! Preventer and the `Reclaimer` (whose `want_reclaim`, `hold_to_cap` and `lock_settled` it
//! uses), device accesses (`PagedRam`,
//! in `guest_ram.rs`) and the Preventer's writes the `Reclaimer`; the pages the Preventer gives
//! up on it returns, and the fault path swaps them in, so the files still draw a ladder
//! (`takeover.rs`, `swapin.rs` < `reclaim.rs` < `guest_ram.rs` < `preventer.rs` < `fault.rs`).
//! The [`Pager`](crate::Pager) handle holds them and the core, and starts their threads. What
//! must change under the page lock stays in [`Pages`], whoever changes it (takeover's
//! `attached` and `huge`, reclaim's `in_flight` and `resident_after_chunk`). Left as `impl`
//! blocks of the core, holding no state of their own: the pool's flusher (`swapin.rs`), the
//! defragmenter (`pager.rs`), the Preventer's reading of guest memory (`preventer.rs`) and the
//! stats (`api_stats.rs`). No file imports from above it, and every lock order is the one
//! described in `pager.rs`.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use memvisor_devices::iobuf::IoBuf;
use memvisor_devices::GuestMem;
use thiserror::Error;

use crate::config::{IndirectConfig, Mechanisms};
use crate::digest::{BlockDigests, Digest, DigestKey};
use crate::page::{Block, PageIdx, PAGE_SIZE};
use crate::state::table::StateTable;
use crate::stats::{EventCounters, Latency};
use crate::store::pool::PoolError;
use crate::store::stores::Stores;
use crate::store::swap::SwapError;
use crate::sys::ram_map::RamMap;
use crate::sys::uffd::Userfault;

pub use memvisor_api::spec::MIN_LIMIT;

#[derive(Debug, Error)]
pub enum PagerError {
    #[error("userfaultfd is unavailable")]
    Uffd(#[source] userfaultfd::Error),
    #[error("cannot register guest RAM with userfaultfd")]
    Register(#[source] userfaultfd::Error),
    #[error("cannot map or register the reclamation cache's {bytes} bytes")]
    ReleaseCache {
        bytes: u64,
        #[source]
        error: std::io::Error,
    },
    #[error("cannot take guest RAM over")]
    Attach(#[source] std::io::Error),
    #[error(transparent)]
    Swap(#[from] SwapError),
    #[error("a limit of {limit} bytes is above the VM's {size} bytes of RAM")]
    LimitAboveSize { limit: u64, size: u64 },
    #[error("a limit of {limit} bytes is below the {MIN_LIMIT}-byte minimum (the guest's own code, stacks and queues must stay resident)")]
    LimitTooSmall { limit: u64 },
    #[error("cannot draw a key for page digests from the host's random source")]
    DigestKey(#[source] std::io::Error),
    #[error("this VM has no pool (start it with --pool SIZE)")]
    NoPool,
    #[error("a release of 0 pages: give 1 to the VM's page count")]
    ReleaseNothing,
    #[error("a release of {asked} pages is more than the VM's {size} pages")]
    ReleaseTooMany { asked: u64, size: u32 },
    #[error("the pager thread has stopped, so nothing can be released")]
    Stopped,
    #[error(transparent)]
    Pool(#[from] PoolError),
    #[error("cannot start the pager thread")]
    Thread(#[source] std::io::Error),
    #[error(transparent)]
    Indirect(#[from] crate::store::indirect::IndirectError),
    #[error("cannot restore guest RAM: {0}")]
    Restore(String),
    #[error("cannot write guest RAM to the snapshot")]
    Save(#[source] std::io::Error),
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
    /// [`Pager::vcpu_interrupted`](crate::Pager::vcpu_interrupted).
    fn kick(&self, tid: i32) -> std::io::Result<()>;
    /// Stops every vCPU until the VMM resumes the VM (then it calls [`Pager::retry`](crate::Pager::retry)).
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

/// The state table and what goes with it, under the page lock.
pub(crate) struct Pages {
    pub table: StateTable,
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
    /// The last zero run installed, its first page and the page after it, and its window: a
    /// guest filling memory in order (or from the top down) takes its next zero fault just
    /// after it (or just before it) (`fault.rs`).
    pub zero_stream: (PageIdx, PageIdx, u32),
    /// Pages a balloon deflate mapped to the shared zero page, oldest first, some since written
    /// by the guest or gone: resident to the table though they hold no memory until written, so
    /// reclaim drops the ones still unwritten before it takes any other victim (`reclaim.rs`).
    pub deflated: Vec<PageIdx>,
    /// Indirections live or pending, over all disks (each holds a swap-block reference).
    pub indirections: u32,
    /// Share before swap: the digest of each page reclaim wrote, and its block, so a later
    /// victim with the same content refers to that block instead (`reclaim.rs`). Entries are
    /// checked in full against the pool when used; stale ones are dropped then, or pruned.
    pub written: HashMap<Digest, Block>,
}

pub(crate) struct PagerCore {
    pub mem: Arc<GuestMem>,
    pub map: RamMap,
    pub uffd: Userfault,
    pub stores: Stores,
    pub pages: Mutex<Pages>,
    /// Resident-page limit (the high watermark); `u32::MAX`: none.
    pub limit: AtomicU32,
    pub vcpus: Arc<dyn VcpuControl>,
    pub batch: u32,
    pub counters: EventCounters,
    pub fault_latency: Latency,
    pub swap_fault_latency: Latency,
    pub reclaim_latency: Latency,
    /// `--tesseract`, and the swap file's path (which the indirection logs name).
    pub indirections: Option<IndirectConfig>,
    pub swap_path: PathBuf,
    /// The swap file was made for this VM: deleted when the pager ends (with indirections it
    /// is not unlinked at once, since a crash must leave it for recovery).
    pub temporary_swap: bool,
    /// The mechanisms (also in the state table; here to be read without the page lock).
    pub mech: Mechanisms,
    /// The key of the Swap Mapper's page digests, drawn when the pager starts.
    pub digest: DigestKey,
    /// The digests of blocks guest reads brought in lately (with the Swap Mapper), taken by
    /// the disks' threads outside the page lock.
    pub block_digests: Mutex<BlockDigests>,
    /// The reclamation cache's slots, which released pages move into (`release.rs`); `None`
    /// without a cache or the Swap Mapper.
    pub release_slots: Option<crate::sys::slots::Slots>,
    /// Pages devices wrote or the pager forgot, noted during a migration's pre-copy.
    pub written: crate::written::Written,
}

pub(crate) fn limit_pages(limit: Option<u64>, size: u64) -> Result<u32, PagerError> {
    match limit {
        None => Ok(u32::MAX),
        Some(l) if l > size => Err(PagerError::LimitAboveSize { limit: l, size }),
        Some(l) if l < MIN_LIMIT => Err(PagerError::LimitTooSmall { limit: l }),
        Some(l) => Ok(u32::try_from(l / PAGE_SIZE as u64).unwrap_or(u32::MAX)),
    }
}

/// The inverse of [`limit_pages`].
pub(crate) fn limit_to_bytes(pages: u32) -> Option<u64> {
    (pages != u32::MAX).then(|| u64::from(pages) * PAGE_SIZE as u64)
}

/// Released pages recorded by one holder of the page lock on its way in
/// ([`record_released`]): about 0.1–0.3 ms of work here. A thread woken when a release lets the
/// lock go may run on the releasing thread's core before the release has answered; it records
/// this much, not the whole release (10,000 pages took it 2–12 ms).
pub(crate) const RECORD_CHUNK: usize = 256;

/// Records up to [`RECORD_CHUNK`] of the pages releases took and left to record
/// (`StateTable::record_released`): the ghost cache and the dwell clock learn that they left.
/// Run by every holder of the page lock on its way in, [`PagerCore::lock`] or a waiter woken
/// inside it; [`PagerCore::record_all_released`] records the rest once a release has answered.
pub(crate) fn record_released(pages: &mut Pages) {
    if pages.table.has_unrecorded() {
        pages.table.record_released(RECORD_CHUNK);
    }
}

/// The calling thread's id.
pub(crate) fn current_tid() -> i32 {
    // SAFETY: gettid(2) has no arguments and cannot fail.
    unsafe { libc::gettid() }
}

impl PagerCore {
    /// The page lock. Part of what releases left to record is recorded first
    /// ([`record_released`]).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Pages> {
        let mut pages = self.pages.lock().unwrap_or_else(|e| e.into_inner());
        record_released(&mut pages);
        pages
    }

    /// Records everything releases left to record, [`RECORD_CHUNK`] pages to a hold of the page
    /// lock (so a fault waits at most that long): run by the thread that released, once it has
    /// answered, and before the statistics are read.
    pub(crate) fn record_all_released(&self) {
        let t0 = std::time::Instant::now();
        let mut n = 0;
        loop {
            let mut pages = self.pages.lock().unwrap_or_else(|e| e.into_inner());
            if !pages.table.has_unrecorded() {
                break;
            }
            n += pages.table.record_released(RECORD_CHUNK);
        }
        if n > 0 {
            tracing::debug!(
                "pager: recorded {n} released pages in {} us",
                t0.elapsed().as_micros()
            );
        }
    }

    pub(crate) fn limit(&self) -> u32 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Asks the VMM to pause the VM because `why` (counted once per pause).
    pub(crate) fn pause(&self, why: PagerFailure) {
        if !self.vcpus.pager_paused() {
            tracing::error!("pager: pausing the VM: {why}");
            EventCounters::add(&self.counters.pauses, 1);
        }
        self.vcpus.pause(why);
    }

    /// Takes a run of `n` free swap-file blocks for indirections, if the most indirections
    /// allow it and the swap file has such a run.
    pub(crate) fn reserve_indirections(&self, n: u32) -> Option<crate::page::Block> {
        let max = self.indirections?.max;
        let mut pages = self.lock();
        if pages.indirections.saturating_add(n) > max {
            return None;
        }
        let first = pages.table.blocks.alloc_run(n)?;
        pages.indirections += n;
        Some(first)
    }

    /// Frees indirections that ended (or never began): drops their swap-block references.
    pub(crate) fn free_indirections(&self, blocks: Vec<crate::page::Block>) {
        if blocks.is_empty() {
            return;
        }
        let mut pages = self.lock();
        for b in blocks {
            pages.table.blocks.drop_ref(b);
            pages.indirections -= 1;
        }
    }
}
