//! The pager thread and the operations that move guest pages, carried out with userfaultfd.
//!
//! Guest RAM is registered with userfaultfd in MISSING and WRITE_PROTECT modes, reporting faults
//! from kernel mode too (KVM's faults, and `pread` into guest memory, are kernel-mode faults).
//! Protocol:
//!
//! 1. **Fault** on a page that is not mapped: the pager thread reads the event and asks the
//!    [`PageTable`] what to install — a zero page (with the following never-touched pages, in one
//!    `UFFDIO_ZEROPAGE`), or the page's swap block (with its neighbours whose blocks continue the
//!    run, in one read and one `UFFDIO_COPY`). Pages loaded clean are installed write-protected
//!    and keep their block.
//! 2. **Write fault** on a write-protected page: the page is dirty from now on; its block is
//!    released and the protection removed, which wakes the writer.
//! 3. **Reclaim**, whenever resident pages exceed the limit (the high watermark), down to the low
//!    watermark, in batches: victims are write-protected first, then each is dropped as zero,
//!    dropped because its block still holds it, or written to new blocks (runs of consecutive
//!    blocks in one write), and only then released with `MADV_DONTNEED`. A write that arrives
//!    in between waits on the protection, finds the page gone, and faults it back in: no write is
//!    lost between checking and dropping.
//! 4. **Devices** write whole non-resident pages into place with `UFFDIO_COPY` (no read of the old
//!    content); everything else they access faults like the guest does.
//!
//! One mutex guards the table; only the pager thread reads fault events. It never `madvise`s a
//! range while a fault on it could be waiting for itself: EVENT_REMOVE is not requested.

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use memvisor_devices::ram::{dontneed, Discard, DiskPage, GuestRam, GuestRange, PAGE_SIZE};
use memvisor_devices::GuestMem;
use thiserror::Error;
use userfaultfd::{Event, EventBuffer, FaultKind, ReadWrite, RegisterMode, Uffd, UffdBuilder};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryError, GuestMemoryRegion};
use vmm_sys_util::eventfd::EventFd;

use crate::preventer::{self, CpuState};
use crate::state::{
    is_resident, Disposition, FaultAction, ImageBlock, Mechanisms, PageIdx, PageState, PageTable,
};
use crate::stats::{Counters, Latency};
use crate::swap::{AlignedBuf, SwapError, SwapStore, BLOCK};
use crate::victim::VictimPolicy;

/// The smallest limit the pager accepts: below it the guest's own code, stacks and queues would
/// be paged out and in continuously.
pub const MIN_LIMIT: u64 = 16 << 20;
const PAGE: usize = 4096;
/// Never-touched pages installed with a faulting one (128 KiB).
const ZERO_WINDOW: u32 = 32;

#[derive(Clone, Debug)]
pub struct PagerConfig {
    pub mech: Mechanisms,
    pub policy: VictimPolicy,
    /// Most bytes of guest RAM resident at once; `None`: no limit.
    pub limit: Option<u64>,
    pub swap_path: PathBuf,
    /// The swap file was made for this VM: unlink it at once (it lives as long as the pager).
    pub temporary_swap: bool,
    /// Pages reclaimed per batch.
    pub batch: u32,
}

#[derive(Debug, Error)]
pub enum PagerError {
    #[error("userfaultfd is unavailable")]
    Uffd(#[source] userfaultfd::Error),
    #[error("cannot register guest RAM with userfaultfd")]
    Register(#[source] userfaultfd::Error),
    #[error(transparent)]
    Swap(#[from] SwapError),
    #[error("a limit of {limit} bytes is above the VM's {size} bytes of RAM")]
    LimitAboveSize { limit: u64, size: u64 },
    #[error("a limit of {limit} bytes is below the {MIN_LIMIT}-byte minimum (the guest's own code, stacks and queues must stay resident)")]
    LimitTooSmall { limit: u64 },
    #[error("cannot start the pager thread")]
    Thread(#[source] std::io::Error),
    #[error("cannot create an event fd")]
    EventFd(#[source] std::io::Error),
}

/// One mapping of guest RAM.
struct Region {
    gpa: u64,
    host: u64,
    first: PageIdx,
    pages: u32,
}

struct Inner {
    table: PageTable,
    /// Thread ids of the vCPU threads (for the Preventer).
    vcpus: Vec<i32>,
    /// vCPU threads stopped by the Preventer: the page each faulted on, and since when.
    stopped: std::collections::HashMap<i32, (PageIdx, Instant)>,
    /// Guest disk images by index, for refaults of mirrored pages (`O_DIRECT` where possible).
    images: Vec<Option<std::fs::File>>,
    swap: SwapStore,
    /// Resident-page limit (the high watermark); `u32::MAX`: none.
    limit: u32,
    io: AlignedBuf,
    /// Pages installed by prefetch and not yet written.
    prefetched: Vec<bool>,
    /// Why the VM is paused: swap or image I/O failed, so a page could not be written out or
    /// brought in. Until [`Pager::resume`], nothing is reclaimed and vCPUs stay parked.
    paused: Option<String>,
    /// vCPU threads parked while paused.
    parked: std::collections::HashSet<i32>,
}

/// A snapshot of the pager: the control API's [`PagerStats`](memvisor_api::PagerStats), built
/// by [`Pager::snapshot`].
pub type PagerSnapshot = memvisor_api::PagerStats;

struct Shared {
    mem: Arc<GuestMem>,
    /// A zeroed source for installing fresh writable pages.
    zeros: Vec<u8>,
    uffd: Uffd,
    regions: Vec<Region>,
    inner: Mutex<Inner>,
    poke: EventFd,
    batch: u32,
    counters: Counters,
    fault_latency: Latency,
    swap_fault_latency: Latency,
    reclaim_latency: Latency,
}

/// The pager of one VM. Cloning shares it.
#[derive(Clone)]
pub struct Pager {
    shared: Arc<Shared>,
}

fn limit_pages(limit: Option<u64>, size: u64) -> Result<u32, PagerError> {
    match limit {
        None => Ok(u32::MAX),
        Some(l) if l > size => Err(PagerError::LimitAboveSize { limit: l, size }),
        Some(l) if l < MIN_LIMIT => Err(PagerError::LimitTooSmall { limit: l }),
        Some(l) => Ok(u32::try_from(l / PAGE_SIZE).unwrap_or(u32::MAX)),
    }
}

/// Where a faulting page's content is, for [`Shared::bring_run`].
enum RunSource {
    Swap(crate::state::Block),
    Image(ImageBlock),
}

/// The inverse of [`limit_pages`].
fn limit_to_bytes(pages: u32) -> Option<u64> {
    (pages != u32::MAX).then(|| u64::from(pages) * PAGE_SIZE)
}

/// The calling thread's id.
fn current_tid() -> i32 {
    // SAFETY: gettid(2) has no arguments and cannot fail.
    unsafe { libc::gettid() }
}

/// Sends the vCPU kick signal to thread `tid` of this process: a vCPU thread in `KVM_RUN` (or in
/// a fault of one) comes out with `EINTR`.
fn kick(tid: i32) -> std::io::Result<()> {
    // SAFETY: tgkill(2) of a thread of this process; a stale id fails with ESRCH.
    let rc = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, libc::SIGUSR1) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Consecutive runs in a sorted list of pages: (first, count).
fn runs(pages: &[PageIdx]) -> Vec<(PageIdx, u32)> {
    let mut out: Vec<(PageIdx, u32)> = Vec::new();
    for &p in pages {
        match out.last_mut() {
            Some((first, n)) if *first + *n == p => *n += 1,
            _ => out.push((p, 1)),
        }
    }
    out
}

fn uffd_copy(
    uffd: &Uffd,
    src: *const u8,
    dst: u64,
    len: usize,
    write_protect: bool,
) -> std::io::Result<()> {
    let mut done = 0usize;
    while done < len {
        let mut c = userfaultfd_sys::uffdio_copy {
            dst: dst + done as u64,
            src: src as u64 + done as u64,
            len: (len - done) as u64,
            mode: if write_protect {
                userfaultfd_sys::UFFDIO_COPY_MODE_WP
            } else {
                0
            },
            copy: 0,
        };
        // SAFETY: UFFDIO_COPY reads `len` bytes at `src` (a live host buffer the caller owns) and
        // fills the registered range at `dst`; `c` is a valid uffdio_copy for the call.
        let rc = unsafe {
            libc::ioctl(
                uffd.as_raw_fd(),
                userfaultfd_sys::UFFDIO_COPY.into(),
                &mut c,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) if c.copy > 0 => done += usize::try_from(c.copy).unwrap_or(0),
            Some(libc::EINTR) => {}
            _ => return Err(e),
        }
    }
    Ok(())
}

impl Pager {
    /// Puts `mem` under a new pager and starts its thread. Must run before anything touches guest RAM.
    ///
    /// If the pager thread ever stops (it cannot read faults, or it panicked), no guest page can
    /// be resolved any more: `on_failure` is called with the reason, and the VM must end.
    pub fn start(
        mem: Arc<GuestMem>,
        config: &PagerConfig,
        on_failure: impl FnOnce(String) + Send + 'static,
    ) -> Result<Pager, PagerError> {
        let uffd = UffdBuilder::new()
            .close_on_exec(true)
            .non_blocking(true)
            .user_mode_only(false)
            .require_features(userfaultfd::FeatureFlags::THREAD_ID)
            .create()
            .map_err(PagerError::Uffd)?;
        let mut regions = Vec::new();
        let mut first = 0u32;
        for r in mem.iter() {
            let host = r.as_ptr() as u64;
            let len = usize::try_from(r.len()).unwrap_or(usize::MAX);
            uffd.register_with_mode(
                r.as_ptr().cast(),
                len,
                RegisterMode::MISSING | RegisterMode::WRITE_PROTECT,
            )
            .map_err(PagerError::Register)?;
            let pages = u32::try_from(r.len() / PAGE_SIZE).unwrap_or(u32::MAX);
            regions.push(Region {
                gpa: r.start_addr().0,
                host,
                first,
                pages,
            });
            first += pages;
        }
        let size = u64::from(first) * PAGE_SIZE;
        let limit = limit_pages(config.limit, size)?;
        let swap = SwapStore::create(&config.swap_path, first, config.temporary_swap)?;
        let batch = config.batch.max(1);
        let inner = Inner {
            vcpus: Vec::new(),
            stopped: std::collections::HashMap::new(),
            images: Vec::new(),
            table: PageTable::new(first, first, config.mech, config.policy, 0x6d76_6d76),
            swap,
            limit,
            // Written victims are a batch plus one cluster less a page at most (the mirrored
            // pages a batch brings along are never written); a refault reads `prefetch` pages
            // from swap, or up to `IMAGE_WINDOW_MAX` from an image.
            io: AlignedBuf::new(
                (batch
                    .max(config.mech.prefetch)
                    .max(crate::state::IMAGE_WINDOW_MAX)
                    + config.mech.cluster.max(1)) as usize
                    * BLOCK,
            ),
            prefetched: vec![false; first as usize],
            paused: None,
            parked: std::collections::HashSet::new(),
        };
        let shared = Arc::new(Shared {
            mem,
            zeros: vec![0u8; ZERO_WINDOW as usize * PAGE],
            uffd,
            regions,
            inner: Mutex::new(inner),
            poke: EventFd::new(libc::EFD_NONBLOCK).map_err(PagerError::EventFd)?,
            batch,
            counters: Counters::default(),
            fault_latency: Latency::default(),
            swap_fault_latency: Latency::default(),
            reclaim_latency: Latency::default(),
        });
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
    /// dropped while mirroring it.
    pub fn attach_disk(&self, disk: u8, image: std::fs::File) {
        let mut inner = self.shared.lock();
        let i = usize::from(disk);
        if inner.images.len() <= i {
            inner.images.resize_with(i + 1, || None);
        }
        inner.images[i] = Some(image);
    }

    /// Registers the calling thread as a vCPU thread (the Preventer stops only vCPUs).
    pub fn register_vcpu(&self) {
        let tid = current_tid();
        self.shared.lock().vcpus.push(tid);
    }

    /// Called by a vCPU thread whose `KVM_RUN` was interrupted (`EINTR`). If the Preventer stopped
    /// it on a write fault, the faulting page is put in place before this returns: filled from
    /// the instruction being executed when it overwrites the whole page, swapped in otherwise.
    /// `registers` reads the vCPU's registers; it is called only if the pager stopped this vCPU.
    pub fn vcpu_interrupted(&self, registers: impl FnOnce() -> Option<CpuState>) {
        let s = &self.shared;
        let tid = current_tid();
        let Some((p, _)) = s.lock().stopped.remove(&tid) else {
            return;
        };
        let installed = registers()
            .and_then(|cpu| self.prevent(&cpu, p))
            .unwrap_or(0);
        if installed > 0 {
            Counters::add(&s.counters.preventer_completed, 1);
            Counters::add(&s.counters.false_reads_avoided, installed);
            return;
        }
        Counters::add(&s.counters.preventer_fallbacks, 1);
        let mut inner = s.lock();
        if let Err(e) = s.missing_fault(&mut inner, p, true) {
            s.pause(
                &mut inner,
                format!("guest page {p} could not be swapped in: {e}"),
            );
        }
        s.reclaim_to_limit(&mut inner);
    }

    /// Reads guest-virtual memory through the vCPU's page tables.
    fn read_virt(&self, cr3: u64, va: u64, buf: &mut [u8]) -> Option<()> {
        let mem = &self.shared.mem;
        let mut done = 0usize;
        while done < buf.len() {
            let at = va.checked_add(done as u64)?;
            let pa = preventer::translate(cr3, at, |a| mem.read_obj::<u64>(GuestAddress(a)).ok())?;
            let n = (PAGE - usize::try_from(at % PAGE_SIZE).ok()?).min(buf.len() - done);
            mem.read_slice(&mut buf[done..done + n], GuestAddress(pa))
                .ok()?;
            done += n;
        }
        Some(())
    }

    /// Installs the whole pages the instruction at RIP is about to overwrite, if the faulting
    /// page `p` is one of them. Returns how many pages were written without a read.
    fn prevent(&self, cpu: &CpuState, p: PageIdx) -> Option<u64> {
        let s = &self.shared;
        let mut code = [0u8; 15];
        self.read_virt(cpu.cr3, cpu.rip, &mut code)?;
        let plan = preventer::plan(cpu, &code)?;
        let mem = &s.mem;
        let pte = |a: u64| mem.read_obj::<u64>(GuestAddress(a)).ok();
        let targets: Vec<(u64, u64)> = (0..plan.pages)
            .filter_map(|i| {
                let va = plan.first_page + i * PAGE_SIZE;
                preventer::translate(cpu.cr3, va, pte).map(|pa| (va, pa))
            })
            .collect();
        let covers_p = targets.iter().any(|&(_, pa)| s.page_of_gpa(pa) == Some(p));
        if !covers_p {
            return None;
        }
        let mut page = vec![0u8; PAGE];
        let mut count = 0;
        for (va, pa) in targets {
            match plan.fill {
                preventer::Fill::Pattern { value, size } => {
                    let bytes = value.to_le_bytes();
                    for (i, b) in page.iter_mut().enumerate() {
                        *b = bytes[i % usize::from(size)];
                    }
                }
                preventer::Fill::Copy { src } => {
                    self.read_virt(cpu.cr3, src + (va - plan.dest_start), &mut page)?;
                }
            }
            // A whole non-resident page goes in with one copy and no read; a resident one gets
            // the same bytes the instruction is about to store.
            self.write(GuestAddress(pa), &page).ok()?;
            count += 1;
        }
        Some(count)
    }

    /// Changes the limit at run time: shrinking reclaims down to it (on the pager thread),
    /// growing lets pages back as they fault.
    pub fn set_limit(&self, limit: Option<u64>) -> Result<(), PagerError> {
        let s = &self.shared;
        let mut inner = s.lock();
        inner.limit = limit_pages(limit, u64::from(inner.table.len()) * PAGE_SIZE)?;
        drop(inner);
        // Wake the pager thread to reclaim down to the new limit.
        if let Err(e) = s.poke.write(1) {
            tracing::warn!("pager: cannot wake the pager thread: {e}");
        }
        Ok(())
    }

    /// Why the VM is paused, if it is (see [`Pager::resume`]).
    pub fn paused(&self) -> Option<String> {
        self.shared.lock().paused.clone()
    }

    /// Ends a pause: reclaim and faults are tried again (and pause again if the I/O still fails).
    /// Returns whether the VM was paused.
    pub fn resume(&self) -> bool {
        let s = &self.shared;
        let was = s.lock().paused.take();
        if let Some(why) = &was {
            tracing::info!("pager: resuming the VM (paused because {why})");
            if let Err(e) = s.poke.write(1) {
                tracing::warn!("pager: cannot wake the pager thread: {e}");
            }
        }
        was.is_some()
    }

    /// Called by a vCPU thread out of `KVM_RUN`: while the VM is paused, parks the thread until
    /// it is resumed or `ended` says the VM is over.
    pub fn park_while_paused(&self, ended: &std::sync::atomic::AtomicBool) {
        let s = &self.shared;
        let tid = current_tid();
        let mut parked = false;
        while !ended.load(std::sync::atomic::Ordering::SeqCst) {
            let mut inner = s.lock();
            if inner.paused.is_none() {
                break;
            }
            if !parked {
                inner.parked.insert(tid);
                parked = true;
            }
            drop(inner);
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if parked {
            s.lock().parked.remove(&tid);
        }
    }

    /// The resident limit in bytes, if there is one.
    pub fn limit_bytes(&self) -> Option<u64> {
        limit_to_bytes(self.shared.lock().limit)
    }

    pub fn snapshot(&self) -> PagerSnapshot {
        let s = &self.shared;
        let inner = s.lock();
        let [zero, resident, swapped, ballooned, reported, on_disk, mirrored] =
            inner.table.census();
        let limit_bytes = limit_to_bytes(inner.limit);
        let in_use = inner.table.blocks.in_use();
        drop(inner);
        PagerSnapshot {
            limit_bytes,
            pages: memvisor_api::PageCensus {
                resident_pages: resident.into(),
                zero_pages: zero.into(),
                swapped_pages: swapped.into(),
                ballooned_pages: ballooned.into(),
                reported_pages: reported.into(),
                on_disk_pages: on_disk.into(),
                mirrored_pages: mirrored.into(),
            },
            swap_blocks_in_use: in_use.into(),
            counters: s.counters.load(),
            fault_latency: s.fault_latency.summary(),
            swap_fault_latency: s.swap_fault_latency.summary(),
            reclaim_latency: s.reclaim_latency.summary(),
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn host(&self, p: PageIdx) -> u64 {
        let r = self
            .regions
            .iter()
            .rfind(|r| r.first <= p)
            .expect("page 0 is in the first region");
        r.host + u64::from(p - r.first) * PAGE_SIZE
    }

    fn page_of_host(&self, addr: u64) -> Option<PageIdx> {
        self.regions.iter().find_map(|r| {
            let off = addr.checked_sub(r.host)?;
            let i = off / PAGE_SIZE;
            (i < u64::from(r.pages)).then(|| r.first + u32::try_from(i).unwrap_or(0))
        })
    }

    fn page_of_gpa(&self, gpa: u64) -> Option<PageIdx> {
        self.regions.iter().find_map(|r| {
            let off = gpa.checked_sub(r.gpa)?;
            let i = off / PAGE_SIZE;
            (i < u64::from(r.pages)).then(|| r.first + u32::try_from(i).unwrap_or(0))
        })
    }

    /// The guest pages and image blocks of a disk request's whole pages.
    fn disk_pages(&self, disk: u8, pages: &[DiskPage]) -> Vec<(PageIdx, ImageBlock)> {
        pages
            .iter()
            .filter_map(|dp| {
                let p = self.page_of_gpa(dp.addr.0)?;
                let block = u32::try_from(dp.block).ok()?;
                Some((p, ImageBlock { disk, block }))
            })
            .collect()
    }

    /// Write-protects the resident pages among a disk request's `pages`, one ioctl per run of
    /// neighbours; returns those now protected, with their image blocks.
    fn protect_resident(
        &self,
        inner: &Inner,
        disk: u8,
        pages: &[DiskPage],
    ) -> Vec<(PageIdx, ImageBlock)> {
        let mut resident = self.disk_pages(disk, pages);
        resident.retain(|&(p, _)| !inner.table.device_can_install(p));
        resident.sort_unstable_by_key(|&(p, _)| p);
        let order: Vec<PageIdx> = resident.iter().map(|&(p, _)| p).collect();
        let mut failed = Vec::new();
        for (first, n) in runs(&order) {
            for (f, c) in self.split_by_region(first, n) {
                if let Err(e) = self
                    .uffd
                    .write_protect(self.host(f) as *mut _, c as usize * PAGE)
                {
                    tracing::warn!("pager: cannot protect pages {f}+{c}: {e}");
                    failed.push((f, c));
                }
            }
        }
        resident.retain(|&(p, _)| !failed.iter().any(|&(f, c)| p >= f && p < f + c));
        resident
    }

    /// Splits the run `first..first + n` where it crosses from one mapping into the next.
    fn split_by_region(&self, first: PageIdx, n: u32) -> Vec<(PageIdx, u32)> {
        (first..first + n).fold(Vec::new(), |mut acc: Vec<(PageIdx, u32)>, q| {
            match acc.last_mut() {
                Some((f, c)) if self.same_region(*f, q) => *c += 1,
                _ => acc.push((q, 1)),
            }
            acc
        })
    }

    /// Whether `p` and `q` are in the same mapping (so one syscall may cover both).
    fn same_region(&self, p: PageIdx, q: PageIdx) -> bool {
        self.regions
            .iter()
            .any(|r| p >= r.first && q >= r.first && p < r.first + r.pages && q < r.first + r.pages)
    }

    fn page_is_zero(&self, p: PageIdx) -> bool {
        let host = self.host(p) as *const u64;
        // SAFETY: `p` is resident (the caller checked the table) and write-protected, so the page
        // is mapped and nobody changes it while we read; it lies in a live guest RAM mapping.
        let words = unsafe { std::slice::from_raw_parts(host, PAGE / 8) };
        words.iter().all(|&w| w == 0)
    }

    /// Serves faults until it cannot; returns why.
    fn run(&self) -> String {
        let mut buf = EventBuffer::new(64);
        loop {
            let mut fds = [
                libc::pollfd {
                    fd: self.uffd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.poke.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // While a vCPU is stopped for the Preventer, wake up to take over if it does not answer.
            // While paused, kick the vCPUs that have not parked yet (a kick can land while a
            // vCPU is outside `KVM_RUN`).
            let timeout = {
                let inner = self.lock();
                let unparked = inner.paused.is_some() && inner.parked.len() < inner.vcpus.len();
                if unparked {
                    self.kick_unparked(&inner);
                }
                if !inner.stopped.is_empty() {
                    1
                } else if unparked {
                    10
                } else {
                    -1
                }
            };
            // SAFETY: `fds` is a valid array of two pollfds for the duration of the call.
            let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) };
            if rc < 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return format!(
                    "poll on the userfaultfd failed: {}",
                    std::io::Error::last_os_error()
                );
            }
            if fds[1].revents != 0 {
                let _ = self.poke.read();
            }
            let events: Vec<(FaultKind, ReadWrite, u64, i32)> =
                match self.uffd.read_events(&mut buf) {
                    Ok(it) => it
                        .filter_map(|e| match e {
                            Ok(Event::Pagefault {
                                kind,
                                rw,
                                addr,
                                thread_id,
                            }) => Some((kind, rw, addr as u64, thread_id.as_raw())),
                            Ok(other) => {
                                tracing::debug!("pager: ignoring event {other:?}");
                                None
                            }
                            Err(e) => {
                                tracing::warn!("pager: bad event: {e}");
                                None
                            }
                        })
                        .collect(),
                    Err(e) => return format!("reading fault events failed: {e}"),
                };
            let mut inner = self.lock();
            for (kind, rw, addr, tid) in events {
                let t0 = Instant::now();
                let Some(p) = self.page_of_host(addr) else {
                    tracing::warn!("pager: fault at {addr:#x} outside guest RAM");
                    continue;
                };
                let from_swap = kind != FaultKind::WriteProtected
                    && matches!(inner.table.state(p), PageState::Swapped(_));
                let r = match kind {
                    FaultKind::WriteProtected => self.write_fault(&mut inner, p),
                    _ => self.fault(&mut inner, p, rw == ReadWrite::Write, tid),
                };
                if let Err(e) = r {
                    self.pause(
                        &mut inner,
                        format!("a fault on guest page {p} could not be resolved: {e}"),
                    );
                }
                let took = t0.elapsed();
                self.fault_latency.record(took);
                if from_swap {
                    self.swap_fault_latency.record(took);
                }
                // Keep the limit after every install, not after every batch of events.
                self.reclaim_to_limit(&mut inner);
            }
            self.expire_stopped(&mut inner);
            self.reclaim_to_limit(&mut inner);
        }
    }

    fn wake(&self, p: PageIdx) -> std::io::Result<()> {
        self.uffd
            .wake(self.host(p) as *mut _, PAGE)
            .map_err(std::io::Error::other)
    }

    /// A missing fault from thread `tid`: a vCPU's write to a swapped or on-disk page goes to the
    /// Preventer (the vCPU is stopped and asked what it is writing); everything else is resolved.
    fn fault(&self, inner: &mut Inner, p: PageIdx, write: bool, tid: i32) -> std::io::Result<()> {
        let preventable = write
            && inner.table.mech.preventer
            && matches!(
                inner.table.state(p),
                PageState::Swapped(_) | PageState::OnDisk(_)
            )
            && inner.vcpus.contains(&tid)
            && !inner.stopped.contains_key(&tid);
        if !preventable {
            return self.missing_fault(inner, p, write);
        }
        if kick(tid).is_err() {
            return self.missing_fault(inner, p, write);
        }
        inner.stopped.insert(tid, (p, Instant::now()));
        Counters::add(&self.counters.preventer_attempts, 1);
        Ok(())
    }

    /// Swaps in the pages of stopped vCPUs that did not answer in time.
    fn expire_stopped(&self, inner: &mut Inner) {
        let late: Vec<i32> = inner
            .stopped
            .iter()
            .filter(|(_, (_, t))| {
                t.elapsed().as_millis() >= u128::from(crate::preventer::TIMEOUT_MS)
            })
            .map(|(&tid, _)| tid)
            .collect();
        for tid in late {
            if let Some((p, _)) = inner.stopped.remove(&tid) {
                Counters::add(&self.counters.preventer_timeouts, 1);
                if let Err(e) = self.missing_fault(inner, p, true) {
                    tracing::error!("pager: resolving page {p} for a silent vCPU failed: {e}");
                }
            }
        }
    }

    fn missing_fault(&self, inner: &mut Inner, p: PageIdx, write: bool) -> std::io::Result<()> {
        let action = inner.table.fault(p, write);
        match action {
            FaultAction::Wake => self.wake(p),
            FaultAction::Zero => {
                match inner.table.state(p) {
                    PageState::Ballooned => Counters::add(&self.counters.faults_released, 1),
                    PageState::Reported => {
                        // The guest said the page was free: its old content is not read back.
                        Counters::add(&self.counters.faults_released, 1);
                        Counters::add(&self.counters.false_reads_avoided, 1);
                    }
                    _ => {}
                }
                let mut n = 1;
                while n < ZERO_WINDOW
                    && p + n < inner.table.len()
                    && self.same_region(p, p + n)
                    && inner.table.state(p + n) == PageState::Zero
                {
                    n += 1;
                }
                if write {
                    // A write would at once copy a shared zero page in the kernel (a second
                    // fault per page): install real zeroed pages, writable, in one copy.
                    uffd_copy(
                        &self.uffd,
                        self.zeros.as_ptr(),
                        self.host(p),
                        n as usize * PAGE,
                        false,
                    )?;
                } else {
                    // SAFETY: the range is `n` pages of registered guest RAM that the table says are not mapped.
                    unsafe {
                        self.uffd
                            .zeropage(self.host(p) as *mut _, n as usize * PAGE, true)
                    }
                    .map_err(std::io::Error::other)?;
                }
                for q in p..p + n {
                    inner.table.installed(q, FaultAction::Zero);
                }
                Counters::add(&self.counters.faults_zero, 1);
                Ok(())
            }
            FaultAction::ImageIn { from, keep } => {
                let run = inner.table.image_run(p);
                self.bring_run(inner, p, run, keep, RunSource::Image(from))
            }
            FaultAction::SwapIn { block, keep_block } => {
                let run = inner.table.swap_run(p);
                self.bring_run(inner, p, run, keep_block, RunSource::Swap(block))
            }
        }
    }

    /// Brings in `run` (first page, count) around faulting page `p` with one read from where
    /// `p`'s content is and one `UFFDIO_COPY`. The run comes in as the faulting page does: after
    /// a read, clean and write-protected with its blocks kept; after a write, writable (a written
    /// page's neighbours are usually written next, and each protected one would cost a write
    /// fault).
    fn bring_run(
        &self,
        inner: &mut Inner,
        p: PageIdx,
        (lo, n): (PageIdx, u32),
        keep: bool,
        source: RunSource,
    ) -> std::io::Result<()> {
        let (lo, n) = if self.same_region(lo, lo + n - 1) {
            (lo, n)
        } else {
            (p, 1)
        };
        let len = n as usize * PAGE;
        let Inner {
            swap,
            images,
            io,
            table,
            prefetched,
            ..
        } = inner;
        let buf = io.get(len);
        let c = &self.counters;
        match source {
            RunSource::Swap(block) => {
                swap.read(block - (p - lo), buf)?;
                Counters::add(&c.swap_bytes_read, len as u64);
                Counters::add(&c.faults_swap, 1);
            }
            RunSource::Image(ib) => {
                let image = images
                    .get(usize::from(ib.disk))
                    .and_then(Option::as_ref)
                    .ok_or_else(|| {
                        std::io::Error::other("a mirrored page's disk is not attached")
                    })?;
                let first = ib.block - (p - lo);
                std::os::unix::fs::FileExt::read_exact_at(
                    image,
                    buf,
                    u64::from(first) * PAGE_SIZE,
                )?;
                Counters::add(&c.image_bytes_read, len as u64);
                Counters::add(&c.faults_image, 1);
            }
        }
        uffd_copy(&self.uffd, buf.as_ptr(), self.host(lo), len, keep)?;
        table.install_run(lo, n, keep);
        for q in lo..lo + n {
            // Prefetch hits are seen only as writes to protected pages.
            prefetched[q as usize] = q != p && keep;
        }
        Counters::add(&c.prefetched, u64::from(n - 1));
        Ok(())
    }

    fn write_fault(&self, inner: &mut Inner, p: PageIdx) -> std::io::Result<()> {
        if !inner.table.write_fault(p) {
            return self.wake(p);
        }
        Counters::add(&self.counters.write_faults, 1);
        if std::mem::take(&mut inner.prefetched[p as usize]) {
            Counters::add(&self.counters.prefetch_hits, 1);
        }
        self.uffd
            .remove_write_protection(self.host(p) as *mut _, PAGE, true)
            .map_err(std::io::Error::other)
    }

    /// Pauses the VM because a page could not be moved (`why`): nothing is dropped without its
    /// content written, so the guest sees no corrupted memory; its vCPUs are kicked out of
    /// `KVM_RUN` (again on every poll until each has parked) and wait for [`Pager::resume`].
    fn pause(&self, inner: &mut Inner, why: String) {
        if inner.paused.is_none() {
            tracing::error!("pager: pausing the VM: {why}");
            Counters::add(&self.counters.pauses, 1);
            inner.paused = Some(why);
        }
        self.kick_unparked(inner);
    }

    fn kick_unparked(&self, inner: &Inner) {
        for &tid in inner.vcpus.iter().filter(|t| !inner.parked.contains(t)) {
            match kick(tid) {
                // ESRCH: that vCPU has ended and needs no kick.
                Err(e) if e.raw_os_error() != Some(libc::ESRCH) => {
                    tracing::warn!("pager: cannot kick vCPU thread {tid}: {e}");
                }
                _ => {}
            }
        }
    }

    fn reclaim_to_limit(&self, inner: &mut Inner) {
        if inner.table.resident() <= inner.limit || inner.paused.is_some() {
            return;
        }
        let slack = self.batch.max(inner.limit / 64);
        let low = inner.limit.saturating_sub(slack);
        while inner.table.resident() > low {
            let n = (inner.table.resident() - low).min(self.batch);
            match self.reclaim_batch(inner, n) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    self.pause(inner, format!("reclaim stopped: {e}"));
                    break;
                }
            }
        }
    }

    fn reclaim_batch(&self, inner: &mut Inner, n: u32) -> std::io::Result<u32> {
        let t0 = Instant::now();
        let victims = inner.table.pick_victims(n);
        if victims.is_empty() {
            return Ok(0);
        }
        let victim_runs: Vec<(PageIdx, u32)> = runs(&victims)
            .into_iter()
            .flat_map(|(first, n)| self.split_by_region(first, n))
            .collect();
        for &(first, n) in &victim_runs {
            self.uffd
                .write_protect(self.host(first) as *mut _, n as usize * PAGE)
                .map_err(std::io::Error::other)?;
        }
        let mut to_write = Vec::new();
        let mut decided = Vec::with_capacity(victims.len());
        for &p in &victims {
            let dirty = matches!(inner.table.state(p), PageState::Resident { clean: None });
            let is_zero = inner.table.mech.zero_detection && dirty && self.page_is_zero(p);
            let d = inner.table.disposition(p, is_zero);
            if d == Disposition::Write {
                to_write.push(p);
            }
            decided.push((p, d));
        }
        let want = u32::try_from(to_write.len()).unwrap_or(u32::MAX);
        let blocks = inner.table.blocks.alloc(want);
        if blocks.len() < to_write.len() {
            blocks
                .into_iter()
                .for_each(|b| inner.table.blocks.release(b));
            return Err(std::io::Error::other("the swap store is full"));
        }
        // Write runs of consecutive blocks with one write each.
        let mut i = 0;
        while i < blocks.len() {
            let mut j = i + 1;
            while j < blocks.len() && blocks[j] == blocks[j - 1] + 1 {
                j += 1;
            }
            let Inner { io, swap, .. } = &mut *inner;
            let buf = io.get((j - i) * PAGE);
            for (k, &p) in to_write[i..j].iter().enumerate() {
                let src = self.host(p) as *const u8;
                // SAFETY: `p` is resident and write-protected: mapped, and unchanged while we copy.
                let page = unsafe { std::slice::from_raw_parts(src, PAGE) };
                buf[k * PAGE..(k + 1) * PAGE].copy_from_slice(page);
            }
            if let Err(e) = swap.write(blocks[i], buf) {
                blocks.iter().for_each(|&b| inner.table.blocks.release(b));
                return Err(std::io::Error::other(format!(
                    "writing to the swap file failed: {e}"
                )));
            }
            Counters::add(&self.counters.swap_bytes_written, ((j - i) * PAGE) as u64);
            i = j;
        }
        // A run that cannot be released stays resident (still protected, its table entry
        // unchanged) and its new blocks go back; the error is returned once the rest is recorded.
        let mut kept: Vec<(PageIdx, u32)> = Vec::new();
        let mut release_error = None;
        for &(first, n) in &victim_runs {
            let range = GuestRange {
                addr: self.gpa(first),
                len: u64::from(n) * PAGE_SIZE,
            };
            if let Err(e) = dontneed(&self.mem, range) {
                kept.push((first, n));
                release_error = Some(std::io::Error::other(format!(
                    "releasing guest pages failed: {e}"
                )));
            }
        }
        let mut written = blocks.into_iter();
        for (p, d) in decided {
            let block = if d == Disposition::Write {
                written.next()
            } else {
                None
            };
            if kept.iter().any(|&(first, n)| p >= first && p < first + n) {
                if let Some(b) = block {
                    inner.table.blocks.release(b);
                }
                continue;
            }
            inner.prefetched[p as usize] = false;
            inner.table.reclaimed(p, d, block);
            let c = match d {
                Disposition::DropZero => &self.counters.reclaimed_zero,
                Disposition::DropClean(_) => &self.counters.reclaimed_clean,
                Disposition::Write => &self.counters.reclaimed_written,
                Disposition::DropMirrored(_) => &self.counters.reclaimed_mirrored,
            };
            Counters::add(c, 1);
        }
        Counters::add(&self.counters.reclaim_batches, 1);
        self.reclaim_latency.record(t0.elapsed());
        if let Some(e) = release_error {
            return Err(e);
        }
        Ok(u32::try_from(victims.len()).unwrap_or(0))
    }

    fn gpa(&self, p: PageIdx) -> u64 {
        let r = self
            .regions
            .iter()
            .rfind(|r| r.first <= p)
            .expect("page 0 is in the first region");
        r.gpa + u64::from(p - r.first) * PAGE_SIZE
    }
}

impl GuestRam for Pager {
    fn mem(&self) -> &GuestMem {
        &self.shared.mem
    }

    fn write(&self, addr: GuestAddress, data: &[u8]) -> Result<(), GuestMemoryError> {
        let s = &self.shared;
        let mut off = 0usize;
        while off < data.len() {
            let gpa = addr.0 + off as u64;
            let in_page = PAGE - usize::try_from(gpa % PAGE_SIZE).unwrap_or(0);
            let n = in_page.min(data.len() - off);
            if let (true, Some(p)) = (gpa % PAGE_SIZE == 0 && n == PAGE, s.page_of_gpa(gpa)) {
                let mut inner = s.lock();
                // The run of whole, non-resident pages from here goes in with one copy.
                let whole_pages = u32::try_from((data.len() - off) / PAGE).unwrap_or(u32::MAX);
                let mut run = 0;
                while run < whole_pages
                    && p + run < inner.table.len()
                    && s.same_region(p, p + run)
                    && inner.table.device_can_install(p + run)
                {
                    run += 1;
                }
                if run > 0 {
                    let len = run as usize * PAGE;
                    match uffd_copy(&s.uffd, data[off..].as_ptr(), s.host(p), len, false) {
                        Ok(()) => {
                            for q in p..p + run {
                                if matches!(
                                    inner.table.state(q),
                                    PageState::Swapped(_) | PageState::OnDisk(_)
                                ) {
                                    Counters::add(&s.counters.stale_reads_avoided, 1);
                                }
                                inner.table.device_installed(q);
                                inner.prefetched[q as usize] = false;
                            }
                            Counters::add(&s.counters.device_installs, u64::from(run));
                            // The device's thread pays for the room it took.
                            s.reclaim_to_limit(&mut inner);
                            off += len;
                            continue;
                        }
                        Err(e) => {
                            // Page by page below: a missing page faults in as for the guest.
                            tracing::warn!("pager: device install of pages {p}+{run} failed: {e}");
                            run = 0;
                        }
                    }
                }
                // Protected pages the device overwrites whole: end their protection here, one
                // ioctl per run, instead of through write faults this thread would wait on.
                while run < whole_pages
                    && p + run < inner.table.len()
                    && s.same_region(p, p + run)
                    && matches!(
                        inner.table.state(p + run),
                        PageState::Mirrored(_) | PageState::Resident { clean: Some(_) }
                    )
                {
                    inner.table.write_fault(p + run);
                    inner.prefetched[(p + run) as usize] = false;
                    run += 1;
                }
                if run > 0 {
                    let len = run as usize * PAGE;
                    if let Err(e) = s
                        .uffd
                        .remove_write_protection(s.host(p) as *mut _, len, true)
                    {
                        tracing::debug!(
                            "pager: unprotecting pages {p}+{run} for a device failed: {e}"
                        );
                    }
                    drop(inner);
                    s.mem
                        .write_slice(&data[off..off + len], GuestAddress(gpa))?;
                    off += len;
                    continue;
                }
            }
            s.mem.write_slice(&data[off..off + n], GuestAddress(gpa))?;
            off += n;
        }
        Ok(())
    }

    fn disk_read(&self, disk: u8, pages: &[DiskPage]) {
        let s = &self.shared;
        let mut inner = s.lock();
        if !inner.table.mech.mapper {
            return;
        }
        // Protected first, so the first guest write ends the mirroring.
        for (p, ib) in s.protect_resident(&inner, disk, pages) {
            inner.table.read_from_disk(p, ib);
        }
    }

    fn disk_write_begin(&self, disk: u8, first: u64, count: u64) -> std::io::Result<()> {
        let s = &self.shared;
        let mut inner = s.lock();
        if !inner.table.mech.mapper {
            return Ok(());
        }
        for block in first..first.saturating_add(count) {
            let Ok(block) = u32::try_from(block) else {
                break;
            };
            let ib = ImageBlock { disk, block };
            for p in inner.table.disk_write_begins(ib) {
                // `p` was dropped relying on this block's old content: bring it back first.
                let Inner { images, io, .. } = &mut *inner;
                let image = images
                    .get(usize::from(disk))
                    .and_then(Option::as_ref)
                    .ok_or_else(|| {
                        std::io::Error::other("a mirrored page's disk is not attached")
                    })?;
                let buf = io.get(PAGE);
                std::os::unix::fs::FileExt::read_exact_at(
                    image,
                    buf,
                    u64::from(block) * PAGE_SIZE,
                )?;
                uffd_copy(&s.uffd, buf.as_ptr(), s.host(p), PAGE, false)?;
                Counters::add(&s.counters.image_bytes_read, PAGE_SIZE);
                Counters::add(&s.counters.mapper_refetches, 1);
                inner.table.refetched(p);
            }
        }
        s.reclaim_to_limit(&mut inner);
        Ok(())
    }

    fn disk_write_sources(&self, disk: u8, pages: &[DiskPage]) {
        let s = &self.shared;
        let mut inner = s.lock();
        if !inner.table.mech.mapper {
            return;
        }
        for (p, ib) in s.protect_resident(&inner, disk, pages) {
            inner.table.disk_write_source(p, ib);
        }
    }

    fn disk_write_done(&self, disk: u8, pages: &[DiskPage]) {
        let s = &self.shared;
        let mut inner = s.lock();
        for (p, ib) in s.disk_pages(disk, pages) {
            inner.table.disk_write_done(p, ib);
        }
    }

    fn discard(&self, ranges: &[GuestRange], why: Discard) -> std::io::Result<u64> {
        let s = &self.shared;
        let to = match why {
            Discard::Balloon => PageState::Ballooned,
            Discard::Reported => PageState::Reported,
        };
        let mut inner = s.lock();
        let mut pages = 0u64;
        for r in ranges {
            let (Some(first), true) = (s.page_of_gpa(r.addr), r.len > 0) else {
                continue;
            };
            let n = u32::try_from(r.len / PAGE_SIZE).unwrap_or(0);
            // Released first; the table changes only for what was released, so a failure
            // leaves pages resident and recorded as such.
            let mut mapped = Vec::new();
            for p in first..first + n {
                if is_resident(inner.table.state(p)) {
                    mapped.push(p);
                } else {
                    inner.table.discard(p, to);
                }
            }
            for (f, c) in runs(&mapped) {
                dontneed(
                    &s.mem,
                    GuestRange {
                        addr: s.gpa(f),
                        len: u64::from(c) * PAGE_SIZE,
                    },
                )?;
                for p in f..f + c {
                    inner.table.discard(p, to);
                    inner.prefetched[p as usize] = false;
                }
            }
            pages += u64::from(n);
        }
        let c = if why == Discard::Balloon {
            &s.counters.ballooned
        } else {
            &s.counters.reported
        };
        Counters::add(c, pages);
        Ok(pages)
    }

    fn deflate(&self, ranges: &[GuestRange]) {
        let s = &self.shared;
        let mut inner = s.lock();
        for r in ranges {
            if let Some(first) = s.page_of_gpa(r.addr) {
                for p in first..first + u32::try_from(r.len / PAGE_SIZE).unwrap_or(0) {
                    inner.table.deflate(p);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_merge_neighbours() {
        assert_eq!(runs(&[1, 2, 3, 7, 9, 10]), vec![(1, 3), (7, 1), (9, 2)]);
        assert!(runs(&[]).is_empty());
    }

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
    }
}
