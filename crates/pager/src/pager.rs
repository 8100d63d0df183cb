//! The pager of one VM: its construction, its threads, and the handle the VMM and devices hold.
//! What the threads work on, [`PagerCore`], is in `core.rs`; each mechanism is an owner the
//! handle holds next to it (`core.rs` lists them) and hands the owners it calls.
//!
//! Guest RAM is registered with userfaultfd (`sys/uffd.rs`) when a limit first asks for it
//! (`takeover.rs`). Two threads work on it:
//! - `pager` reads fault events and resolves them (`fault.rs`), runs working-set sampling
//!   (`sample.rs`), and serves instant releases (below);
//! - `reclaim` takes pages out while resident pages exceed the limit (`reclaim.rs`), in chunks,
//!   writing each chunk without the page lock, so faults go on being served meanwhile; with a
//!   pool and room under the limit, it brings swapped pages back proactively (`swapin.rs`);
//! - `pool-flush`, with a pool, spills its least recent pages to the swap file
//!   (`store/pool/spill.rs`);
//! - `defrag`, with Tesseract's guest-disk defragmentation, copies indirected blocks back into
//!   the images (`store/indirect/defrag.rs`).
//!
//! An instant release (`release.rs`, `PUT /memory/release`) is asked by the API's thread and
//! served by `pager` between fault events, at the nice value of the threads a guest waits on,
//! in one hold of the page lock.
//!
//! Devices reach guest memory through the pager's [`GuestRam`] implementation (`guest_ram.rs`'s
//! `PagedRam`),
//! which installs whole pages without reading them; vCPU threads come in only for the
//! Preventer (`preventer.rs`).
//!
//! Locks, each held briefly and never across disk writes or a whole shrink:
//! - `pages`: the state table, the prefetch marks, the I/O buffer and the chunk in flight. Held
//!   for one fault, one device access, or one step of a reclaim chunk; the `Reclaimer`'s
//!   `settled` (with it) says when a chunk has been recorded, for device accesses, which wait for
//!   that.
//! - the Preventer's `stopped`: the vCPUs it stopped (taken after `pages`, never before it).
//! - `sampling`: the working-set sample (taken before `pages`, never after it).
//! - the `FaultHandler`'s `events`: the fault event buffer, used by the pager thread alone.
//! - the pool's own lock (`store/pool/`), taken after `pages`, never before it.
//! - each disk's indirection lock (`store/indirect/map.rs`), taken after `pages`, never before
//!   it (the device and the defragmenter drop it before they take `pages` to free blocks).
//!
//! The limit is an atomic; the counters are atomics and the page census is kept as running
//! counts, so the API reads them without a scan. Pausing and parking vCPUs belong to the VMM,
//! reached through [`VcpuControl`].

use std::collections::HashSet;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use memvisor_devices::ram::{Discard, DiskPage, GuestRam, GuestRange};
use memvisor_devices::GuestMem;
use vm_memory::{GuestAddress, GuestMemoryError};

use crate::api_stats::PagerStats;
use crate::config::PagerConfig;
use crate::core::{
    limit_pages, limit_to_bytes, PagerCore, PagerError, PagerFailure, Pages, VcpuControl,
};
use crate::digest::{BlockDigests, DigestKey};
use crate::fault::FaultHandler;
use crate::guest_ram::PagedRam;
use crate::page::PAGE_SIZE;
use crate::preventer::{CpuState, Preventer};
use crate::reclaim::Reclaimer;
use crate::release::Releases;
use crate::sample::Sampler;
use crate::saved_pages::{RestoreFrom, SavedPages};
use crate::state::table::StateTable;
use crate::stats::{EventCounters, Latency};
use crate::store::image::ImageFile;
use crate::store::pool::{Pool, SwapStore};
use crate::store::sample::SampleStore;
use crate::store::stores::Stores;
use crate::store::swap::SwapFile;
use crate::swapin::SwapIn;
use crate::sys::ram_map::RamMap;
use crate::sys::uffd::Userfault;
use crate::takeover::Takeover;
use memvisor_devices::iobuf::IoBuf;

/// The pager of one VM. Cloning shares it.
#[derive(Clone)]
pub struct Pager {
    pub(crate) core: Arc<PagerCore>,
    /// Working-set sampling, run by the pager thread.
    sampler: Arc<Sampler>,
    /// Proactive swap-in, run by the reclaim thread.
    swap_in: Arc<SwapIn>,
    /// The False Reads Preventer, which the pager thread's fault path and vCPU threads reach.
    preventer: Arc<Preventer>,
    /// Taking RAM over, at the start or when a limit first arrives.
    takeover: Arc<Takeover>,
    /// Reclaim, run by the reclaim thread; installing threads wake it and wait for its chunks.
    reclaimer: Arc<Reclaimer>,
    /// The fault path, run by the pager thread; a resume serves its unresolved faults again.
    faults: Arc<FaultHandler>,
    /// Instant releases, asked by the API and served by the pager thread.
    releases: Arc<Releases>,
    /// Whether the guest has started to run ([`Pager::guest_runs`]): a restored VM's
    /// `prefetch` thread waits for it.
    guest_runs: Arc<(Mutex<bool>, std::sync::Condvar)>,
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
        let ram_bytes = u64::from(RamMap::new(&mem).pages()) * PAGE_SIZE as u64;
        let files = PagerFiles::open(config, ram_bytes)?;
        Self::start_with(mem, config, files, vcpus, on_failure)
    }

    /// [`Pager::start`] with its files opened before ([`PagerFiles::open`]).
    pub fn start_with(
        mem: Arc<GuestMem>,
        config: &PagerConfig,
        files: PagerFiles,
        vcpus: Arc<dyn VcpuControl>,
        on_failure: impl FnOnce(String) + Send + 'static,
    ) -> Result<Pager, PagerError> {
        let PagerFiles {
            uffd,
            swap,
            swap_blocks,
        } = files;
        let map = RamMap::new(&mem);
        let pages = map.pages();
        let limit = limit_pages(config.limit, u64::from(pages) * PAGE_SIZE as u64)?;
        if swap_blocks < pages {
            return Err(PagerError::Swap(crate::store::swap::SwapError::TooSmall {
                blocks: swap_blocks,
                pages,
            }));
        }
        let batch = config.batch.max(1);
        let mech = config.mech;
        let mut table = StateTable::new(pages, swap_blocks, mech, config.policy, 0x6d76_6d76);
        table.victims.cache_percent = config.victim_cache.min(50);
        let release_slots = release_slots(&uffd, config)?;
        table.released =
            crate::released::Released::new(release_slots.as_ref().map_or(0, |s| s.slots()));
        // A refault reads up to `prefetch` pages from swap, or up to `IMAGE_WINDOW_MAX` from an
        // image (reclaim writes from its own buffer).
        let io_len = mech
            .prefetch
            .max(crate::state::mirrors::IMAGE_WINDOW_MAX)
            .max(1) as usize
            * PAGE_SIZE;
        let state = Pages {
            table,
            // Huge pages only for the hot paths' buffers (the fault path's, reclaim's): this one
            // serves the retries and the Swap Mapper's refetches.
            io: IoBuf::new(io_len),
            prefetched: vec![false; pages as usize],
            attached: false,
            huge: HashSet::new(),
            in_flight: Vec::new(),
            resident_after_chunk: 0,
            zero_stream: (0, 0, 0),
            deflated: Vec::new(),
            indirections: 0,
            written: std::collections::HashMap::new(),
        };
        let sampler = Arc::new(Sampler::new(
            config.sample_pages,
            config.sample_period,
            vcpus.guest_time(),
        ));
        let swap_in = Arc::new(SwapIn::new(config.proactive));
        let preventer = Arc::new(Preventer::default());
        let takeover = Arc::new(Takeover::new());
        let reclaimer = Arc::new(Reclaimer::new());
        let faults = Arc::new(FaultHandler::new(io_len));
        let core = Arc::new(PagerCore {
            mem,
            map,
            uffd,
            stores: Stores::new(
                SwapStore {
                    file: swap,
                    pool: config
                        .pool
                        .map(|p| Pool::new(p.bytes, p.spill_at, p.compress, p.chunk_bytes))
                        .transpose()?,
                    saved: std::sync::OnceLock::new(),
                },
                SampleStore::new(config.sample_pages),
            ),
            pages: Mutex::new(state),
            limit: AtomicU32::new(limit),
            vcpus,
            batch,
            counters: EventCounters::default(),
            fault_latency: Latency::default(),
            swap_fault_latency: Latency::default(),
            reclaim_latency: Latency::default(),
            indirections: config.indirections,
            swap_path: config.swap_path.clone(),
            temporary_swap: config.temporary_swap,
            mech,
            digest: DigestKey::random().map_err(PagerError::DigestKey)?,
            // Half a slot per guest page (32 bytes each, touched as used): a file read again and
            // again finds its digests while it is up to half the guest's RAM.
            release_slots,
            written: crate::written::Written::default(),
            block_digests: Mutex::new(BlockDigests::new(if mech.mapper {
                pages as usize / 2
            } else {
                1
            })),
        });
        // Neither the Swap Mapper nor the Preventer needs RAM taken over before the first limit
        // or release: the Mapper learns from disk reads, which it sees on plain memory too (its
        // mirrors are checked by digest when reclaim picks them), and the Preventer acts on
        // writes to swapped and dropped pages, of which there are none before.
        if config.limit.is_some() || !takeover.at_run_time() {
            takeover.attach(&core, &mut core.lock())?;
        }
        let r = core.clone();
        let swapping = swap_in.clone();
        let reclaiming = reclaimer.clone();
        std::thread::Builder::new()
            .name("reclaim".into())
            .spawn(move || {
                memvisor_devices::priority::background();
                memvisor_seccomp::confine(memvisor_seccomp::Thread::Reclaim);
                let run = || reclaiming.run(&r, &swapping);
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).is_err() {
                    // Nothing more is reclaimed: hold the VM rather than run past its limit.
                    r.pause(PagerFailure::Reclaim {
                        error: "the reclaim thread panicked".into(),
                    });
                    reclaiming.notify_settled();
                }
            })
            .map_err(PagerError::Thread)?;
        if core.stores.swap.pool.is_some() {
            let f = core.clone();
            std::thread::Builder::new()
                .name("pool-flush".into())
                .spawn(move || {
                    memvisor_devices::priority::background();
                    memvisor_seccomp::confine(memvisor_seccomp::Thread::PoolFlush);
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
        let ready = u32::try_from(config.release_ready / PAGE_SIZE as u64).unwrap_or(u32::MAX);
        if ready > 0 && mech.mapper {
            let c = core.clone();
            std::thread::Builder::new()
                .name("release-ready".into())
                .spawn(move || {
                    memvisor_devices::priority::background();
                    memvisor_seccomp::confine(memvisor_seccomp::Thread::ReleaseReady);
                    c.ready_thread(ready);
                })
                .map_err(PagerError::Thread)?;
        }
        if config.indirections.is_some_and(|c| c.defrag.is_some()) {
            let d = core.clone();
            std::thread::Builder::new()
                .name("defrag".into())
                .spawn(move || {
                    memvisor_devices::priority::background();
                    memvisor_seccomp::confine(memvisor_seccomp::Thread::Defrag);
                    d.defrag_thread();
                })
                .map_err(PagerError::Thread)?;
        }
        let s = core.clone();
        let sampling = sampler.clone();
        let preventing = preventer.clone();
        let reclaiming = reclaimer.clone();
        let faulting = faults.clone();
        let releases = Arc::new(Releases::new().map_err(PagerError::Thread)?);
        let releasing = releases.clone();
        let taking = takeover.clone();
        let nice = config.serving_nice;
        std::thread::Builder::new()
            .name("pager".into())
            .spawn(move || {
                memvisor_devices::priority::serve_at(nice);
                memvisor_seccomp::confine(memvisor_seccomp::Thread::Pager);
                let owners = Owners {
                    faults: &faulting,
                    sampler: &sampling,
                    preventer: &preventing,
                    reclaim: &reclaiming,
                    takeover: &taking,
                    releases: &releasing,
                };
                let run = || pager_thread(&s, &owners);
                let why = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
                    Ok(why) => why,
                    Err(p) => {
                        let msg = p.downcast_ref::<&str>().map(|m| (*m).to_owned());
                        let msg = msg.or_else(|| p.downcast_ref::<String>().cloned());
                        format!("the pager thread panicked: {}", msg.unwrap_or_default())
                    }
                };
                releasing.stopped();
                on_failure(why);
            })
            .map_err(PagerError::Thread)?;
        let pager = Pager {
            core,
            sampler,
            swap_in,
            preventer,
            takeover,
            reclaimer,
            faults,
            releases,
            guest_runs: Arc::default(),
        };
        if let Some(r) = &config.restore {
            pager.restore(r)?;
        }
        Ok(pager)
    }

    /// Makes guest RAM the saved memory `r`: each page what the snapshot or the migration
    /// recorded, its content read from `r.memory` when the guest first touches it, and the
    /// pages the guest had in RAM brought in ahead by the `prefetch` thread once it runs
    /// ([`Pager::guest_runs`]). Once, before the
    /// guest runs or anything writes guest RAM: [`Pager::start_with`] calls it for
    /// `config.restore`; a migration's destination calls it once the state has come, the pager
    /// started before while the source still ran the VM (its tables take milliseconds per GiB).
    pub fn restore(&self, r: &RestoreFrom) -> Result<(), PagerError> {
        let core = &self.core;
        {
            let mut pages = core.lock();
            let table = &mut pages.table;
            let swap_blocks = table.blocks.saved_base();
            table.blocks = crate::blocks::BlockMap::with_saved(swap_blocks, table.len());
            crate::persist::restore_states(table, &r.pages).map_err(PagerError::Restore)?;
            if core
                .stores
                .swap
                .saved
                .set((swap_blocks, r.memory.clone()))
                .is_err()
            {
                return Err(PagerError::Restore("guest RAM was restored already".into()));
            }
            // A restored VM's RAM is in the snapshot until the guest touches it: faults bring
            // it.
            self.takeover.attach(core, &mut pages)?;
        }
        let c = core.clone();
        let runs = r.pages.prefetch.clone();
        let runs_now = self.guest_runs.clone();
        std::thread::Builder::new()
            .name("prefetch".into())
            .spawn(move || {
                memvisor_devices::priority::background();
                memvisor_seccomp::confine(memvisor_seccomp::Thread::Prefetch);
                // Not before the guest runs: its faults would take the CPU from building the
                // VM (at 1 and 2 GiB with 80 % in RAM, the first instruction came 8-10 ms after
                // an empty start's; with no prefetch, as soon as one's).
                let (runs_yet, cv) = &*runs_now;
                let mut yet = runs_yet.lock().unwrap_or_else(|e| e.into_inner());
                while !*yet {
                    yet = cv.wait(yet).unwrap_or_else(|e| e.into_inner());
                }
                drop(yet);
                c.prefetch_saved(&runs);
            })
            .map_err(PagerError::Thread)?;
        Ok(())
    }

    /// Called as the guest first runs (vCPU 0's first `KVM_RUN`): a restored VM's `prefetch`
    /// thread starts bringing in the pages the guest had in RAM.
    pub fn guest_runs(&self) {
        let (runs, cv) = &*self.guest_runs;
        *runs.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
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
        let s = &self.core;
        let indirect = match writable {
            Some(path) => open_indirect(s.indirections.as_ref(), &s.swap_path, path)?,
            None => None,
        };
        self.attach_disk_with(disk, image, indirect)
    }

    /// [`Pager::attach_disk`] with the disk's indirections started before ([`open_indirect`]).
    pub fn attach_disk_with(
        &self,
        disk: u8,
        image: std::fs::File,
        indirect: Option<crate::store::indirect::Indirect>,
    ) -> Result<(), PagerError> {
        let s = &self.core;
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
        let s = &self.core;
        let Some(cfg) = s.indirections else {
            return Ok((0, 0));
        };
        let (mut copied, mut kept) = (0u64, 0u64);
        for image in s.stores.images() {
            let Some(ind) = &image.indirect else { continue };
            if cfg.keep {
                kept += ind
                    .keep()
                    .map_err(|source| crate::store::indirect::IndirectError::Io {
                        path: ind.image().to_owned(),
                        source,
                    })?;
                continue;
            }
            let freed = ind.disentangle()?;
            copied += freed.len() as u64;
            s.free_indirections(freed);
        }
        if s.temporary_swap && kept == 0 {
            // Not found: a jailed VMM does not see it; whoever started it deletes it.
            let gone = std::fs::remove_file(&s.swap_path).or_else(|e| {
                (e.kind() == std::io::ErrorKind::NotFound)
                    .then_some(())
                    .ok_or(e)
            });
            if let Err(e) = gone {
                tracing::warn!("pager: cannot delete {}: {e}", s.swap_path.display());
            }
        }
        Ok((copied, kept))
    }

    /// Writes guest memory to `out` for a snapshot, from where each page is (`persist.rs`),
    /// after copying Tesseract's indirected blocks back into the disk images, so the images
    /// the snapshot refers to stand alone. The VM must be paused and its devices quiet.
    pub fn save(&self, out: &std::fs::File) -> Result<SavedPages, PagerError> {
        self.flatten()?;
        self.core.save(out).map_err(PagerError::Save)
    }

    /// Copies Tesseract's indirected blocks back into the disk images, so that the images a
    /// snapshot or a migration refers to stand alone.
    fn flatten(&self) -> Result<(), PagerError> {
        let s = &self.core;
        for image in s.stores.images() {
            if let Some(ind) = &image.indirect {
                let freed = ind.flatten()?;
                s.free_indirections(freed);
            }
        }
        Ok(())
    }

    /// For a migration's source, just before the pause: writable mirrors are protected and
    /// checked now (`release.rs`), not by [`Pager::migration_pages`] in the pause.
    pub fn protect_mirrors(&self) -> u64 {
        crate::release::protect_mirrors(&self.core)
    }

    /// For a migration's source, with the VM paused and its devices quiet: the disk images
    /// made to stand alone (as for [`Pager::save`]), then what each page is, no content read
    /// (`persist.rs`).
    pub fn migration_pages(&self) -> Result<SavedPages, PagerError> {
        self.flatten()?;
        Ok(self.core.migration_pages())
    }

    /// Reads guest pages from `first` on into `buf` from where each is, bringing none in
    /// (`persist.rs`): what a migration's source sends.
    pub fn read_in_place(&self, first: u32, buf: &mut [u8]) -> std::io::Result<()> {
        self.core.read_in_place(first, buf)
    }

    /// For a migration's source: gives back what holds pages `first..first + count` here,
    /// which the destination has acknowledged (`persist.rs`); returns the pages given back.
    pub fn free_sent(&self, first: u32, count: u32) -> std::io::Result<u64> {
        let pages = self.reclaimer.lock_settled(&self.core);
        self.core.free_sent(pages, first, count)
    }

    /// For a migration's pre-copy: starts noting (from nothing) the pages devices write and
    /// those whose content the pager forgets or maps to the zero page (`written.rs`), or stops.
    pub fn track_writes(&self, on: bool) {
        self.core.written.track(on);
    }

    /// The runs of pages noted since the last call (`track_writes`).
    pub fn take_writes(&self) -> Vec<(u32, u32)> {
        self.core.written.take()
    }

    /// For a migration's pre-copy, the VM running: the pages with content here (resident,
    /// swapped or sampled; every page before the takeover), what a first round sends. Pages
    /// that mirror disk blocks are left out: the switch most likely records them.
    pub fn pages_with_content(&self) -> Vec<bool> {
        self.core.pages_with_content()
    }

    /// Changes the limit at run time: shrinking reclaims down to it (on the reclaim thread,
    /// while faults are served), growing lets pages back as they fault, or at once with
    /// proactive swap-in (`swapin.rs`). The first limit
    /// of a VM started without one takes guest RAM over (`takeover.rs`).
    pub fn set_limit(&self, limit: Option<u64>) -> Result<(), PagerError> {
        let s = &self.core;
        let pages = limit_pages(limit, u64::from(s.map.pages()) * PAGE_SIZE as u64)?;
        if limit.is_some() {
            self.takeover.attach(s, &mut s.lock())?;
        }
        if s.limit.swap(pages, Ordering::SeqCst) < pages {
            self.swap_in.want();
        }
        self.reclaimer.want_reclaim();
        Ok(())
    }

    /// Resizes the pool (`PUT /pool`); a smaller pool spills down to its new size.
    pub fn set_pool(&self, bytes: u64) -> Result<(), PagerError> {
        match &self.core.stores.swap.pool {
            None => Err(PagerError::NoPool),
            Some(p) => {
                p.set_capacity(bytes);
                self.reclaimer.want_reclaim();
                Ok(())
            }
        }
    }

    /// Instant release (HyperDealer2 §4.3, `release.rs`): takes up to `pages` pages that mirror
    /// disk blocks out of guest RAM now, without the guest's vCPUs and without waiting for the
    /// reclaim thread (the pager thread does it between fault events, and the caller waits), and lowers the limit by the number released (a
    /// VM without a limit gets one at its resident pages after the release; never below
    /// [`MIN_LIMIT`](crate::MIN_LIMIT): then fewer are released). A paused VM releases too.
    /// `pages` must be 1 to the VM's page count. A pager that has not taken guest RAM over, or
    /// runs without the Swap Mapper, releases nothing (and says so: 0 released). With
    /// `cold_only`, only pages of cold sequential sequences and the probes of the others
    /// ([`crate::pattern::table::Patterns::pick_cold`], through `StateTable::pick_clean`).
    pub fn release_clean(
        &self,
        pages: u64,
        cold_only: bool,
    ) -> Result<crate::release::ReleaseOutcome, PagerError> {
        let t0 = std::time::Instant::now();
        crate::release::check_amount(&self.core, pages)?;
        // The first release, like the first limit, takes guest RAM over (`takeover.rs`) here:
        // the pager thread, which releases, may not register memory.
        if self.core.mech.mapper {
            let mut locked = self.core.lock();
            self.takeover.attach(&self.core, &mut locked)?;
        }
        self.releases.ask(pages, cold_only, t0)
    }

    /// What to run once a release has answered (the control API runs it after writing the
    /// answer): the released pages' leaving is told to the ghost cache and the dwell clock, a
    /// few hundred pages to a hold of the page lock. Holders of the page lock record some
    /// on their way in meanwhile, and the statistics record the rest before they are read.
    pub fn after_release(&self) -> impl Fn() + Send + Sync + 'static {
        let core = self.core.clone();
        move || core.record_all_released()
    }

    /// The resident limit in bytes, if there is one.
    /// From now on instant release copies pages into the reclamation cache instead of moving
    /// them, as on a kernel without `UFFDIO_MOVE` (for tests of that path).
    #[doc(hidden)]
    pub fn without_page_moves(&self) {
        self.core.uffd.without_moves();
    }

    pub fn limit_bytes(&self) -> Option<u64> {
        limit_to_bytes(self.core.limit.load(Ordering::SeqCst))
    }

    /// After the VMM resumed a paused VM: the faults that could not be resolved are served
    /// again, which wakes the threads waiting on them, and reclaim is tried again (either pauses
    /// the VM again if its I/O still fails).
    pub fn retry(&self) {
        self.faults
            .retry(&self.core, &self.preventer, &self.reclaimer);
        self.reclaimer.want_reclaim();
        self.reclaimer.notify_settled();
    }

    /// Called by a vCPU thread whose `KVM_RUN` was interrupted (`EINTR`). If the Preventer stopped
    /// it on a write fault, the faulting page is put in place before this returns: filled from
    /// the instruction being executed when it overwrites the whole page, swapped in otherwise.
    /// `registers` reads the vCPU's registers; it is called only if the pager stopped this vCPU.
    pub fn vcpu_interrupted(&self, registers: impl FnOnce() -> Option<CpuState>) {
        let fallback = self
            .preventer
            .vcpu_interrupted(&self.core, &self.reclaimer, registers);
        if let Some(p) = fallback {
            self.faults
                .preventer_fallback(&self.core, &self.reclaimer, &self.preventer, p);
        }
    }

    /// The pager's counters, page census, latencies and working-set estimate (`api_stats.rs`).
    pub fn stats(&self) -> PagerStats {
        self.core.api_stats(&self.sampler, &self.takeover)
    }
}

impl Pager {
    /// What device accesses work through: the core and reclaim.
    fn devices(&self) -> PagedRam<'_> {
        PagedRam {
            core: &self.core,
            reclaim: &self.reclaimer,
        }
    }
}

/// Devices reach guest RAM through the handle; the work is `PagedRam`'s (`guest_ram.rs`),
/// on the core, with reclaim.
impl GuestRam for Pager {
    fn mem(&self) -> &GuestMem {
        &self.core.mem
    }

    fn write(&self, addr: GuestAddress, data: &[u8]) -> Result<(), GuestMemoryError> {
        self.devices().write(addr, data)
    }

    fn disk_read(&self, disk: u8, pages: &[DiskPage]) {
        self.devices().disk_read(disk, pages);
    }

    fn disk_read_data(&self, disk: u8, pages: &[DiskPage], offset: u64, data: &[u8]) {
        self.devices().disk_read_data(disk, pages, offset, data);
    }

    fn disk_write_begin(&self, disk: u8, offset: u64, len: u64) -> std::io::Result<()> {
        self.devices().disk_write_begin(disk, offset, len)
    }

    fn disk_write_elide(&self, disk: u8, pages: &[DiskPage]) -> Vec<u64> {
        self.devices().disk_write_elide(disk, pages)
    }

    fn disk_write_end(&self, disk: u8, offset: u64, len: u64, landed: bool) -> std::io::Result<()> {
        self.devices().disk_write_end(disk, offset, len, landed)
    }

    fn disk_flush(&self, disk: u8) -> std::io::Result<()> {
        self.devices().disk_flush(disk)
    }

    fn disk_read_split(&self, disk: u8, offset: u64, buf: &mut [u8]) -> std::io::Result<bool> {
        self.devices().disk_read_split(disk, offset, buf)
    }

    fn disk_write_sources(&self, disk: u8, pages: &[DiskPage]) -> usize {
        self.devices().disk_write_sources(disk, pages)
    }

    fn disk_write_done(&self, disk: u8, pages: &[DiskPage], offset: u64, data: &[u8]) {
        self.devices().disk_write_done(disk, pages, offset, data);
    }

    fn discard(&self, ranges: &[GuestRange], why: Discard) -> std::io::Result<u64> {
        self.devices().discard(ranges, why)
    }

    fn deflate(&self, ranges: &[GuestRange]) {
        self.devices().deflate(ranges);
    }
}

impl PagerCore {
    /// Release readiness (`release.rs`, [`crate::release::make_ready`]): every
    /// [`READY_PERIOD`](crate::release::READY_PERIOD) or longer ([`crate::release::ReadyPace`]),
    /// or within one period of a release, the first `ready` candidates checked ahead of a
    /// release. A panic ends only this thread (releases then check for themselves).
    fn ready_thread(&self, ready: u32) {
        let mut generation = u64::MAX;
        let mut releases = 0;
        let mut pace = crate::release::ReadyPace::new();
        let mut wait = crate::release::READY_PERIOD;
        loop {
            // A release ends the wait early: the host is taking memory from this VM.
            let mut slept = std::time::Duration::ZERO;
            while slept < wait && crate::stats::get(&self.counters.releases) == releases {
                std::thread::sleep(crate::release::READY_PERIOD);
                slept += crate::release::READY_PERIOD;
            }
            let run = || crate::release::make_ready(self, ready, &mut generation, &mut releases);
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
                Ok(pass) => wait = pace.next(pass),
                Err(_) => {
                    tracing::error!(
                        "pager: the release-ready thread panicked; releases check for themselves"
                    );
                    return;
                }
            }
        }
    }

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
                let (freed, r) = match mode {
                    crate::store::indirect::Defrag::Guest => match ind.defragment(BATCH) {
                        Ok(freed) => (freed, Ok(())),
                        Err(e) => (Vec::new(), Err(e)),
                    },
                    crate::store::indirect::Defrag::Store => {
                        let (freed, r) = ind.regroup(|n| self.reserve_indirections(n));
                        (freed, r.map(|moved| done += usize::from(moved)))
                    }
                };
                done += freed.len();
                self.free_indirections(freed);
                if let Err(e) = r {
                    tracing::warn!("pager: defragmenting {} failed: {e}", ind.image().display())
                }
            }
            let pause = if done == 0 { 50 } else { 2 };
            std::thread::sleep(std::time::Duration::from_millis(pause));
        }
    }
}

/// The reclamation cache's slots (HyperDealer2 §4.2, `released.rs`), registered with the
/// pager's userfaultfd so released pages can move into them; none without the Swap Mapper
/// (nothing is released) or with a cache of 0.
fn release_slots(
    uffd: &Userfault,
    config: &PagerConfig,
) -> Result<Option<crate::sys::slots::Slots>, PagerError> {
    let n = u32::try_from(config.release_cache / PAGE_SIZE as u64).unwrap_or(u32::MAX);
    if n == 0 || !config.mech.mapper {
        return Ok(None);
    }
    let bytes = u64::from(n) * PAGE_SIZE as u64;
    let slots = crate::sys::slots::Slots::new(n)
        .map_err(|error| PagerError::ReleaseCache { bytes, error })?;
    uffd.register_missing(slots.addr(0), slots.len())
        .map_err(|e| PagerError::ReleaseCache {
            bytes,
            error: std::io::Error::other(e),
        })?;
    Ok(Some(slots))
}

/// What a pager opens by path or with privileges: its userfaultfd and its swap file. A VMM that
/// gives up both (a jail) opens them first, then starts the pager with [`Pager::start_with`].
pub struct PagerFiles {
    uffd: Userfault,
    swap: SwapFile,
    swap_blocks: u32,
}

impl PagerFiles {
    /// Makes the userfaultfd and creates the swap file for `ram_bytes` of guest RAM (and the
    /// indirections' room).
    pub fn open(config: &PagerConfig, ram_bytes: u64) -> Result<Self, PagerError> {
        let uffd = Userfault::new(config.sharing).map_err(PagerError::Uffd)?;
        let pages = u32::try_from(ram_bytes / PAGE_SIZE as u64).unwrap_or(u32::MAX);
        let extra = config.indirections.map_or(0, |c| c.max);
        let swap_blocks = pages.saturating_add(extra);
        let swap = SwapFile::create(
            &config.swap_path,
            swap_blocks,
            config.temporary_swap && config.indirections.is_none(),
        )?;
        Ok(PagerFiles {
            uffd,
            swap,
            swap_blocks,
        })
    }
}

/// Starts the indirections of the writable image at `image` (its log, its handles on the image
/// and on the swap file at `swap`), if `config` asks for indirections; the swap file exists
/// ([`PagerFiles::open`]).
pub fn open_indirect(
    config: Option<&crate::config::IndirectConfig>,
    swap: &std::path::Path,
    image: &std::path::Path,
) -> Result<Option<crate::store::indirect::Indirect>, PagerError> {
    let Some(cfg) = config else {
        return Ok(None);
    };
    Ok(Some(crate::store::indirect::Indirect::start(
        image, swap, cfg.sync, cfg.defrag,
    )?))
}

/// Serves faults and runs working-set sampling until it cannot; returns why.
/// What the pager thread works with besides the core.
struct Owners<'a> {
    faults: &'a FaultHandler,
    sampler: &'a Sampler,
    preventer: &'a Preventer,
    reclaim: &'a Reclaimer,
    takeover: &'a Takeover,
    releases: &'a Releases,
}

fn pager_thread(core: &PagerCore, o: &Owners) -> String {
    let (faults, sampler, preventer, reclaim) = (o.faults, o.sampler, o.preventer, o.reclaim);
    loop {
        let mut fds = [core.uffd.as_raw_fd(), o.releases.fd()].map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        // While a vCPU is stopped for the Preventer, wake up to take over if it does not
        // answer; otherwise when the sampling period ends.
        let timeout = if !preventer.waiting() {
            sampler.tick(core).map_or(-1, |d| {
                i32::try_from(d.as_millis().saturating_add(1)).unwrap_or(i32::MAX)
            })
        } else {
            1
        };
        // SAFETY: `fds` is a valid array of pollfds for the duration of the call.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return format!("poll on the userfaultfd failed: {e}");
        }
        if fds[1].revents != 0 {
            o.releases.serve(core, o.takeover);
        }
        if let Err(why) = faults.serve_pending(core, preventer, reclaim) {
            return why;
        }
        faults.swap_in_expired(core, preventer.expire(core));
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
