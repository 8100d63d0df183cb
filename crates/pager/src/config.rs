//! The pager's configuration: which mechanisms run ([`Mechanisms`]), the pager's own settings
//! ([`PagerConfig`]), the host-memory pool's ([`PoolConfig`]) and Tesseract's indirections'
//! ([`IndirectConfig`], [`LogSync`], [`Defrag`]).

use std::path::PathBuf;

use crate::victim::VictimPolicy;

/// Which mechanisms the pager uses (`--pager baseline` turns them all off).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mechanisms {
    /// Drop all-zero victims instead of writing them.
    pub zero_detection: bool,
    /// Keep a swapped-in page's block while the page stays clean, so evicting it again costs no write.
    pub reuse_clean: bool,
    /// Pages around a swap fault to bring in with it (0: none).
    pub prefetch: u32,
    /// Victims are evicted in aligned clusters of this many pages (1: single pages).
    pub cluster: u32,
    /// The Swap Mapper: pages read from a disk image mirror it, are dropped without a write and
    /// refault from the image.
    pub mapper: bool,
    /// The False Reads Preventer: when a vCPU write to a swapped page is looked at before the
    /// page is read.
    pub preventer: Preventing,
}

/// When the False Reads Preventer stops a vCPU that wrote to a page whose content is in a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preventing {
    Off,
    /// While a prevention costs less per page than a read, as measured (`preventer.rs`).
    Measured,
    /// On every such write, as VSwapper does.
    Always,
}

impl Mechanisms {
    pub const BASELINE: Mechanisms = Mechanisms {
        zero_detection: false,
        reuse_clean: false,
        prefetch: 0,
        cluster: 1,
        mapper: false,
        preventer: Preventing::Off,
    };
    pub const DEFAULT: Mechanisms = Mechanisms {
        zero_detection: true,
        reuse_clean: true,
        prefetch: 16,
        cluster: 16,
        mapper: false,
        preventer: Preventing::Off,
    };
}

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
    /// A host-memory pool in front of the swap file (`store/pool/`); `None`: victims go to the file.
    pub pool: Option<PoolConfig>,
    /// When the VM may hold more pages (its limit rose), bring its swapped pages back in
    /// batches without waiting for faults: pooled ones first and most recent first, then those
    /// in the swap file in block order (`swapin.rs`).
    pub proactive: bool,
    /// Tesseract's indirections on writable disks (`store/indirect/`); `None`: off.
    pub indirections: Option<IndirectConfig>,
    /// Guest RAM is mergeable by KSM (`--sharing host`): the pager keeps the pages it protects
    /// out of KSM, whose merges drop userfaultfd write protection (`sys/uffd.rs`).
    pub sharing: bool,
    /// Bytes of the reclamation cache (HyperDealer2 §4.2, `released.rs`): the contents of the
    /// pages instant release took most recently, kept in host memory so their refaults are
    /// copies (0: none). Rounded down to whole pages.
    pub release_cache: u64,
    /// Bytes of the first release candidates kept write-protected and checked by a
    /// `release-ready` thread, so a release only drops them (`release.rs`; 0: none; needs the
    /// Swap Mapper). Rounded down to whole pages.
    pub release_ready: u64,
    /// The nice value of the pager's fault thread, which faulting vCPUs wait on (0: the VMM's
    /// own; `memvisor_devices::priority`).
    pub serving_nice: i32,
    /// A snapshot to start from (`store/saved.rs`): guest RAM starts out in its memory file
    /// and comes in as the guest touches it, the pages it had in RAM first.
    pub restore: Option<crate::saved_pages::RestoreFrom>,
}

/// The reclamation cache's size when none is given (4 MiB: 1,024 pages).
pub use memvisor_api::spec::DEFAULT_RELEASE_CACHE;

/// Tesseract's indirections (`store/indirect/`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndirectConfig {
    /// Most indirections live at once, over all disks; the swap file has this many blocks
    /// beyond one per guest page, so reclaim always finds room.
    pub max: u32,
    /// At exit, leave the indirections, their logs and the swap file for the next start (or
    /// `memvisor disk disentangle`) instead of copying the blocks back into the images.
    pub keep: bool,
    /// When the logs are synced.
    pub sync: LogSync,
    /// Tesseract's defragmentation (§5), run by a `defrag` thread in the background: indirected
    /// blocks copied back into the images (`Guest`), or grouped in the swap file by the write
    /// that made them (`Store`).
    pub defrag: Option<Defrag>,
}

/// The host-memory tier (MemFlex §3.2–§3.4).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PoolConfig {
    /// Most bytes of pool memory; changed at run time with [`Pager::set_pool`](crate::Pager::set_pool).
    pub bytes: u64,
    /// Fraction of the pool above which its least recent pages spill to the swap file.
    pub spill_at: f64,
    /// How pages are kept in the pool: whole, or compressed (zswap-like).
    pub compress: memvisor_api::PoolCompress,
    /// Bytes of one chunk of pool memory (a multiple of 4 KiB).
    pub chunk_bytes: u64,
}

/// When an indirection log (and the swap file it refers to) is synced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogSync {
    /// Before each guest write that changes the map is acknowledged.
    Write,
    /// When the guest flushes the disk (as its own data in the image is, under virtio-blk's
    /// volatile write cache); each write's records are still written to the log before it is
    /// acknowledged, so killing memvisor loses none.
    Flush,
}

/// Which of Tesseract's defragmentations (§5) runs in the background.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Defrag {
    /// Guest-disk defragmentation (§5.2): indirected blocks are copied back into the image,
    /// first those guest reads needed; reads stop being split.
    Guest,
    /// Swap-file (BSST) defragmentation (§5.1): the blocks one guest write made indirections
    /// of are copied next to each other in the swap file, so a later read of them is split into
    /// one swap-file read instead of one per block.
    Store,
}
