//! Tesseract's indirections (§3–§4.6): no double paging.
//!
//! When the guest writes a page to its own disk while the pager holds that page in the swap
//! file, reading it back only so the guest can write it out is double paging. With
//! indirections on (`--tesseract`), the device does not read such a page: the disk block
//! becomes a reference to the swap-file block that already holds the content, and the block's
//! reference count (`BlockMap`) keeps it alive as long as the page or any disk block uses it.
//!
//! - **The map** ([`Indirect`], one per writable disk): image block → swap-file block. A guest
//!   read of an indirected block is served from the swap file, a request that mixes image and
//!   indirected blocks is split into runs (split reads, §4.3.2). So is a refault of a page the
//!   Swap Mapper dropped while it mirrored an indirected block: the disk as the guest sees it is
//!   the image with the map laid over it.
//! - **Ends**: a guest write of a block ends its indirection once the write landed; a write
//!   covering part of an indirected block first copies the block back into the image (the rest
//!   of it lives only in the swap file). A swap-file block is free when the last page and the
//!   last disk block referring to it let go.
//! - **Only the swap file**: a block in the host-memory pool is not indirected (it would not
//!   survive a crash); the guest's write reads it from memory, which is not double paging's cost.
//! - **The log** (§4.4.1): every change to the map is appended to `IMAGE.indirections` and synced
//!   (with the swap file, if it was written since its last sync) before the guest's write is
//!   acknowledged. The log's header names the swap file. At start, a VM whose image has a log
//!   (memvisor was killed) copies every logged block from that swap file back into the image
//!   first ([`recover`]), which is also what `memvisor disk disentangle IMAGE` does (§4.4.2);
//!   a clean exit disentangles too, unless told to keep the indirections. The log is rewritten
//!   to just the live map when it grows past four times what the map needs.
//!   With [`LogSync::Flush`] an ended indirection's swap-file block is released only once the
//!   log that ends it is synced, so no log can name a block that was used again.
//! - **Defragmentation** (§5, [`Defrag`]), on a background thread: guest-disk defragmentation
//!   copies indirected blocks back into the image (first those reads needed), and swap-file
//!   defragmentation moves each write's indirected blocks next to each other in the swap file.
//!   Split reads take each run of swap-file blocks that follow each other in one read.
//!
//! Differences from Tesseract: the indirections do not outlive the VM (the paper's BSST keeps
//! them across runs; here the next start puts them back into the image), and the guest's write
//! skips the indirected blocks instead of writing dummy pages to them.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard};

use thiserror::Error;

use crate::page::{Block, PAGE_SIZE};
use crate::stats::Counters;
use crate::store::swap::open_direct;
use memvisor_devices::iobuf::IoBuf;

/// The log of `image`: beside it, named after it.
pub fn log_path(image: &Path) -> PathBuf {
    let mut s = image.as_os_str().to_owned();
    s.push(".indirections");
    PathBuf::from(s)
}

const MAGIC: &[u8; 8] = b"MVINDIR1";
/// The header: magic, store path length (u32 LE), store path; padded to a block.
const HEADER: usize = PAGE_SIZE;
const RECORD: usize = 12;
/// A record whose target is this ends the block's indirection.
const UNMAP: u32 = u32::MAX;
/// The log is written with zeros this far ahead of its records, so a sync after an append
/// writes the records only, not a new file size (a zero record fails its check: the end).
const AHEAD: u64 = 1 << 20;
/// Most blocks guest reads queue for defragmentation to copy back first.
const URGENT_MAX: usize = 4096;
/// Most swap-file blocks of ended indirections held until the log that ends them is synced.
const UNSYNCED_ENDS_MAX: usize = 1024;
/// Most writes whose indirections wait for swap-file defragmentation to group them.
const GROUPS_MAX: usize = 4096;
/// Most blocks swap-file defragmentation moves at once (one swap-file write and sync).
const REGROUP_MAX: usize = 256;

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

#[derive(Debug, Error)]
pub enum IndirectError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not an indirection log: {why}")]
    Corrupt { path: PathBuf, why: String },
    #[error("{log} names the swap file {store}, which cannot be read ({source}); without it the blocks the log lists are lost: restore the file, then run `memvisor disk disentangle` again")]
    StoreMissing {
        log: PathBuf,
        store: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{0} already has an indirection log; run `memvisor disk disentangle` on the image first"
    )]
    Exists(PathBuf),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> IndirectError + '_ {
    move |source| IndirectError::Io {
        path: path.to_owned(),
        source,
    }
}

fn record(block: u32, target: u32) -> [u8; RECORD] {
    let mut r = [0u8; RECORD];
    r[0..4].copy_from_slice(&block.to_le_bytes());
    r[4..8].copy_from_slice(&target.to_le_bytes());
    let crc = crc32fast::hash(&r[0..8]);
    r[8..12].copy_from_slice(&crc.to_le_bytes());
    r
}

/// One disk's log file.
pub struct Log {
    file: File,
    path: PathBuf,
    /// Bytes of the header and the records.
    len: u64,
    /// Bytes of the file (zeros after the records).
    allocated: u64,
    store: PathBuf,
}

/// What a log held when it was read.
pub struct Replayed {
    pub log: Log,
    pub map: BTreeMap<u32, Block>,
    /// Records read (torn or unfinished ones at the end are not counted).
    pub records: u64,
}

impl Log {
    /// Starts the log of `image`, naming swap file `store`; refused if the image has one.
    pub fn create(image: &Path, store: &Path) -> Result<Log, IndirectError> {
        let path = log_path(image);
        if path.exists() {
            return Err(IndirectError::Exists(image.to_owned()));
        }
        let store = std::path::absolute(store).map_err(io_err(store))?;
        Self::write_fresh(&path, &store, &BTreeMap::new())
    }

    /// Writes a log holding `map` at `path` (through a temporary file renamed over it, so a
    /// crash leaves the old log or the new one).
    fn write_fresh(
        path: &Path,
        store: &Path,
        map: &BTreeMap<u32, Block>,
    ) -> Result<Log, IndirectError> {
        let tmp = path.with_extension("indirections-new");
        let mut data = Vec::with_capacity(HEADER + map.len() * RECORD);
        data.extend_from_slice(MAGIC);
        let name = store.as_os_str().as_bytes();
        let n = u32::try_from(name.len())
            .ok()
            .filter(|&n| 12 + n as usize <= HEADER)
            .ok_or_else(|| IndirectError::Corrupt {
                path: path.to_owned(),
                why: format!("swap file path {} is too long", store.display()),
            })?;
        data.extend_from_slice(&n.to_le_bytes());
        data.extend_from_slice(name);
        data.resize(HEADER, 0);
        for (&b, &t) in map {
            data.extend_from_slice(&record(b, t));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(io_err(&tmp))?;
        file.write_all_at(&data, 0).map_err(io_err(&tmp))?;
        file.sync_data().map_err(io_err(&tmp))?;
        std::fs::rename(&tmp, path).map_err(io_err(path))?;
        sync_dir(path);
        Ok(Log {
            file,
            path: path.to_owned(),
            len: data.len() as u64,
            allocated: data.len() as u64,
            store: store.to_owned(),
        })
    }

    /// Reads the log of `image`, if it has one.
    pub fn open(image: &Path) -> Result<Option<Replayed>, IndirectError> {
        let path = log_path(image);
        let mut file = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&path)(e)),
        };
        let mut data = Vec::new();
        file.read_to_end(&mut data).map_err(io_err(&path))?;
        let corrupt = |why: &str| IndirectError::Corrupt {
            path: path.clone(),
            why: why.into(),
        };
        if data.len() < HEADER || &data[0..8] != MAGIC {
            return Err(corrupt("no header"));
        }
        let n = u32::from_le_bytes(data[8..12].try_into().unwrap_or_default()) as usize;
        let name = data
            .get(12..12 + n)
            .filter(|_| 12 + n <= HEADER)
            .ok_or_else(|| corrupt("the swap file's name does not fit its header"))?;
        let store = PathBuf::from(std::ffi::OsStr::from_bytes(name));
        let mut map = BTreeMap::new();
        let mut records = 0u64;
        let mut len = HEADER as u64;
        for r in data[HEADER..].chunks_exact(RECORD) {
            let block = u32::from_le_bytes(r[0..4].try_into().unwrap_or_default());
            let target = u32::from_le_bytes(r[4..8].try_into().unwrap_or_default());
            if record(block, target)[8..12] != r[8..12] {
                // A record cut short by a crash: nothing after it was acknowledged.
                break;
            }
            if target == UNMAP {
                map.remove(&block);
            } else {
                map.insert(block, target);
            }
            records += 1;
            len += RECORD as u64;
        }
        let allocated = data.len() as u64;
        Ok(Some(Replayed {
            log: Log {
                file,
                path,
                len,
                allocated,
                store,
            },
            map,
            records,
        }))
    }

    /// Appends `(block, target)` changes (`None`: the indirection ends), synced if `sync`.
    /// Once `write` returns they survive the process being killed; once synced, the host
    /// losing power too.
    fn append(&mut self, changes: &[(u32, Option<Block>)], sync: bool) -> std::io::Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let mut data = Vec::with_capacity(changes.len() * RECORD);
        for &(b, t) in changes {
            data.extend_from_slice(&record(b, t.unwrap_or(UNMAP)));
        }
        let end = self.len + data.len() as u64;
        if end > self.allocated {
            let more = (end - self.allocated).max(AHEAD);
            let zeros = vec![0u8; usize::try_from(more).map_err(std::io::Error::other)?];
            self.file.write_all_at(&zeros, self.allocated)?;
            self.allocated += more;
        }
        self.file.write_all_at(&data, self.len)?;
        if sync {
            self.file.sync_data()?;
        }
        self.len = end;
        Ok(())
    }

    /// Bytes of the header and the records (the file is larger: zeros follow them).
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len <= HEADER as u64
    }

    /// The swap file the log's blocks are in.
    pub fn store(&self) -> &Path {
        &self.store
    }

    /// Deletes the log: the image holds everything.
    fn remove(self) -> std::io::Result<()> {
        std::fs::remove_file(&self.path)?;
        sync_dir(&self.path);
        Ok(())
    }
}

/// Makes a rename or unlink in `path`'s directory durable (best effort).
fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
}

/// What putting indirected blocks back into an image did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disentangled {
    /// Blocks copied from the swap file into the image.
    pub blocks: u64,
    /// The swap file they came from.
    pub store: PathBuf,
    /// Records the log held.
    pub records: u64,
}

/// Copies each `(image block, swap block)` from `store` into `image`, a block at a time through
/// an aligned buffer (either file may be `O_DIRECT`); returns the blocks copied.
fn copy_blocks(
    image: &File,
    store: &File,
    blocks: impl IntoIterator<Item = (u32, Block)>,
) -> std::io::Result<u64> {
    let mut buf = IoBuf::new(PAGE_SIZE);
    let mut n = 0;
    for (block, target) in blocks {
        let b = buf.get(PAGE_SIZE);
        store.read_exact_at(b, u64::from(target) * PAGE_SIZE as u64)?;
        image.write_all_at(b, u64::from(block) * PAGE_SIZE as u64)?;
        n += 1;
    }
    Ok(n)
}

/// Copies every block of `map` back into `image`, then syncs it.
fn copy_back(image: &File, store: &File, map: &BTreeMap<u32, Block>) -> std::io::Result<u64> {
    let n = copy_blocks(image, store, map.iter().map(|(&b, &t)| (b, t)))?;
    image.sync_data()?;
    Ok(n)
}

/// Puts every block `image`'s log lists back into the image and deletes the log, so the image
/// stands alone (Tesseract §4.4.2); `None` if it has no log. The swap file is left as it is.
pub fn recover(image: &Path) -> Result<Option<Disentangled>, IndirectError> {
    let Some(r) = Log::open(image)? else {
        return Ok(None);
    };
    let store = File::open(r.log.store()).map_err(|source| IndirectError::StoreMissing {
        log: r.log.path.clone(),
        store: r.log.store().to_owned(),
        source,
    })?;
    let img = OpenOptions::new()
        .write(true)
        .open(image)
        .map_err(io_err(image))?;
    // A log that names blocks past the end of either file is not one memvisor wrote: refuse it
    // before anything is copied (it would read nothing, or grow the image).
    let len = |f: &File, p: &Path| f.metadata().map(|m| m.len()).map_err(io_err(p));
    let (image_len, store_len) = (len(&img, image)?, len(&store, r.log.store())?);
    let end = |b: u32| (u64::from(b) + 1) * PAGE_SIZE as u64;
    if let Some((&b, &t)) = r
        .map
        .iter()
        .find(|&(&b, &t)| end(b) > image_len || end(t) > store_len)
    {
        return Err(IndirectError::Corrupt {
            path: r.log.path.clone(),
            why: format!(
                "it maps block {b} to swap block {t}, past the end of the image ({image_len} bytes) or of the swap file ({store_len} bytes)"
            ),
        });
    }
    let blocks = copy_back(&img, &store, &r.map).map_err(io_err(image))?;
    let store_path = r.log.store().to_owned();
    let path = r.log.path.clone();
    r.log.remove().map_err(io_err(&path))?;
    Ok(Some(Disentangled {
        blocks,
        store: store_path,
        records: r.records,
    }))
}

/// What the indirections of one disk did; every field only grows.
#[derive(Debug, Default)]
pub struct IndirectCounters {
    /// Pages of guest disk writes that became indirections instead of being read back from the
    /// swap file (double paging avoided).
    pub elided: AtomicU64,
    /// Indirections ended by a guest write of their block.
    pub ended: AtomicU64,
    /// Guest reads (and Swap Mapper refaults) split between the image and the swap file.
    pub split_reads: AtomicU64,
    /// Blocks those reads took from the swap file.
    pub blocks_read: AtomicU64,
    /// Blocks copied back into the image because a guest write covered only part of them.
    pub copied_back: AtomicU64,
    /// Blocks copied back into the image at a clean exit.
    pub disentangled: AtomicU64,
    /// Pages of guest disk writes that stayed plain writes because the most indirections
    /// (`IndirectConfig::max`) were live.
    pub refused: AtomicU64,
    /// Times the log was rewritten to just the live map.
    pub compactions: AtomicU64,
    /// Blocks guest-disk defragmentation copied back into the image.
    pub defragmented: AtomicU64,
    /// Indirected blocks guest reads needed, which defragmentation then copied back first.
    pub defrag_urgent: AtomicU64,
    /// Reads split reads issued to the swap file (one per run of indirected blocks whose
    /// swap-file blocks follow each other).
    pub store_reads: AtomicU64,
    /// Blocks swap-file defragmentation moved next to the other blocks of their guest write.
    pub regrouped: AtomicU64,
    /// Guest writes whose indirections swap-file defragmentation grouped.
    pub regrouped_writes: AtomicU64,
}

struct State {
    map: BTreeMap<u32, Block>,
    log: Option<Log>,
    /// Blocks of the write in progress that are to become indirections, and their targets
    /// (each holds a reference taken when it was elided).
    pending: Vec<(u32, Block)>,
    /// The blocks of the guest write in progress (`first..end`): defragmentation leaves them
    /// alone, since the write may already have put newer data in the image.
    writing: Option<(u32, u32)>,
    /// Indirected blocks guest reads needed, copied back first by defragmentation.
    urgent: std::collections::VecDeque<u32>,
    /// Where defragmentation's walk through the map goes on from.
    cursor: u32,
    /// The blocks defragmentation is copying without the lock: a guest write of one of them,
    /// and the end of the indirections, wait until the batch is done (`copied`).
    defragging: Vec<u32>,
    /// The image blocks of guest writes that made indirections in scattered swap-file blocks,
    /// oldest first: what swap-file defragmentation groups.
    groups: std::collections::VecDeque<Vec<u32>>,
    /// With [`LogSync::Flush`]: swap-file blocks of indirections that ended since the last
    /// flush. Their references are dropped once the log that ends them is synced, so a power
    /// loss never leaves a logged indirection to a block that was used again.
    unsynced_ends: Vec<Block>,
}

impl State {
    /// Whether image block `b` belongs to the guest write in progress.
    fn being_written(&self, b: u32) -> bool {
        self.writing.is_some_and(|(f, e)| (f..e).contains(&b))
    }
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

/// The indirections of one writable disk.
pub struct Indirect {
    image: PathBuf,
    sync: LogSync,
    /// The defragmentation that runs, if any.
    defrag: Option<Defrag>,
    /// The swap file, read directly (indirected blocks are never in the pool), and written by
    /// swap-file defragmentation only.
    store: File,
    /// The image, for copying blocks back.
    writer: File,
    state: Mutex<State>,
    /// Signalled when a defragmentation batch is done.
    copied: std::sync::Condvar,
    pub counters: IndirectCounters,
}

impl Indirect {
    /// Starts the indirections of `image` over the swap file at `store_path`.
    pub fn start(
        image: &Path,
        store_path: &Path,
        sync: LogSync,
        defrag: Option<Defrag>,
    ) -> Result<Self, IndirectError> {
        // Both with O_DIRECT where the file system allows, as the pager and the device use them:
        // the swap file has no page cache copy to go stale when a freed block is written again,
        // and blocks copied back do not sit dirty in the page cache, where the device's next
        // O_DIRECT read of them would have to write them out first.
        let store = open_direct(
            OpenOptions::new()
                .read(true)
                .write(defrag == Some(Defrag::Store)),
            store_path,
        )
        .map_err(io_err(store_path))?;
        let writer = open_direct(OpenOptions::new().write(true), image).map_err(io_err(image))?;
        let log = Log::create(image, store_path)?;
        Ok(Indirect {
            image: image.to_owned(),
            sync,
            defrag,
            store,
            writer,
            state: Mutex::new(State {
                map: BTreeMap::new(),
                log: Some(log),
                pending: Vec::new(),
                writing: None,
                urgent: std::collections::VecDeque::new(),
                cursor: 0,
                defragging: Vec::new(),
                groups: std::collections::VecDeque::new(),
                unsynced_ends: Vec::new(),
            }),
            copied: std::sync::Condvar::new(),
            counters: IndirectCounters::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lock, once no block of `first..end` is being defragmented.
    fn lock_without_defrag(&self, first: u32, end: u32) -> MutexGuard<'_, State> {
        let s = self.lock();
        self.copied
            .wait_while(s, |s| s.defragging.iter().any(|b| (first..end).contains(b)))
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Live indirections and the log's size in bytes.
    pub fn usage(&self) -> (u64, u64) {
        let s = self.lock();
        (s.map.len() as u64, s.log.as_ref().map_or(0, Log::len))
    }

    /// Records that `block` is to point at `target` once the write in progress lands (the
    /// caller took a reference on `target`).
    pub fn elide(&self, block: u32, target: Block) {
        self.lock().pending.push((block, target));
        Counters::add(&self.counters.elided, 1);
    }

    /// Reads `buf.len()` bytes at byte `offset` of the disk as the guest sees it from `image`
    /// (a read handle, `O_DIRECT` where possible: then `buf` and `offset` must be aligned):
    /// indirected blocks from the swap file, one read per run of them that lies in order in
    /// both files, and the rest from the image in runs. Returns false without reading if no
    /// block in the range is indirected.
    pub fn read(&self, image: &File, offset: u64, buf: &mut [u8]) -> std::io::Result<bool> {
        let first = u32::try_from(offset / PAGE_SIZE as u64).unwrap_or(u32::MAX);
        let end = u32::try_from((offset + buf.len() as u64).div_ceil(PAGE_SIZE as u64))
            .unwrap_or(u32::MAX);
        let s = self.lock();
        // Holes: runs of indirected blocks in order in both files (first image block, first
        // swap-file block, blocks).
        let mut holes: Vec<(u32, Block, u32)> = Vec::new();
        for (&b, &t) in s.map.range(first..end) {
            match holes.last_mut() {
                Some((hb, ht, n)) if *hb + *n == b && ht.checked_add(*n) == Some(t) => *n += 1,
                _ => holes.push((b, t, 1)),
            }
        }
        if holes.is_empty() {
            return Ok(false);
        }
        // The swap file first: one read for each run of holes whose blocks follow each other
        // there (whatever lies between them in the image), into `from_store` in hole order.
        let total: usize = holes.iter().map(|h| h.2 as usize).sum();
        let mut from_store = IoBuf::new(total * PAGE_SIZE);
        let data = from_store.get(total * PAGE_SIZE);
        let (mut reads, mut at, mut i) = (0u64, 0usize, 0usize);
        while i < holes.len() {
            let (mut j, mut n) = (i + 1, holes[i].2 as usize);
            while j < holes.len() && holes[j - 1].1.checked_add(holes[j - 1].2) == Some(holes[j].1)
            {
                n += holes[j].2 as usize;
                j += 1;
            }
            self.store.read_exact_at(
                &mut data[at * PAGE_SIZE..(at + n) * PAGE_SIZE],
                u64::from(holes[i].1) * PAGE_SIZE as u64,
            )?;
            reads += 1;
            at += n;
            i = j;
        }
        // Then the image between the holes, and the holes' bytes laid in.
        let aligned = offset % PAGE_SIZE as u64 == 0 && buf.len() % PAGE_SIZE == 0;
        let mut pos = offset;
        let end_byte = offset + buf.len() as u64;
        let mut tmp = IoBuf::new(PAGE_SIZE);
        let mut hole_data = 0usize;
        for hole in holes.iter().copied().map(Some).chain(std::iter::once(None)) {
            let run_end = hole.map_or(end_byte, |(b, _, _)| {
                (u64::from(b) * PAGE_SIZE as u64).max(pos)
            });
            if run_end > pos {
                let at = usize::try_from(pos - offset).unwrap_or(usize::MAX);
                let n = usize::try_from(run_end - pos).unwrap_or(usize::MAX);
                if aligned {
                    image.read_exact_at(&mut buf[at..at + n], pos)?;
                } else {
                    // An unaligned piece goes through whole blocks.
                    let mut p = pos;
                    while p < run_end {
                        let t = tmp.get(PAGE_SIZE);
                        image.read_exact_at(t, p / PAGE_SIZE as u64 * PAGE_SIZE as u64)?;
                        let from = usize::try_from(p % PAGE_SIZE as u64).unwrap_or(0);
                        let k = (PAGE_SIZE - from).min(usize::try_from(run_end - p).unwrap_or(0));
                        let at = usize::try_from(p - offset).unwrap_or(0);
                        buf[at..at + k].copy_from_slice(&t[from..from + k]);
                        p += k as u64;
                    }
                }
                pos = run_end;
            }
            let Some((b, _, n)) = hole else { break };
            let hole_start = u64::from(b) * PAGE_SIZE as u64;
            let hole_end = (hole_start + u64::from(n) * PAGE_SIZE as u64).min(end_byte);
            let from = hole_data * PAGE_SIZE + usize::try_from(pos - hole_start).unwrap_or(0);
            let k = usize::try_from(hole_end - pos).unwrap_or(0);
            let at = usize::try_from(pos - offset).unwrap_or(0);
            buf[at..at + k].copy_from_slice(&data[from..from + k]);
            hole_data += n as usize;
            pos = hole_end;
        }
        let blocks = holes.iter().flat_map(|&(b, _, n)| b..b + n);
        if self.defrag == Some(Defrag::Guest) {
            let mut s = s;
            for b in blocks.clone() {
                if s.urgent.len() < URGENT_MAX {
                    s.urgent.push_back(b);
                    Counters::add(&self.counters.defrag_urgent, 1);
                }
            }
        } else {
            drop(s);
        }
        Counters::add(&self.counters.split_reads, 1);
        Counters::add(&self.counters.blocks_read, blocks.count() as u64);
        Counters::add(&self.counters.store_reads, reads);
        Ok(true)
    }

    /// Before a guest write of `len` bytes at `offset`: its blocks are marked as being written,
    /// and an indirected block the write covers only in part is copied back into the image (its
    /// indirection ends when the write lands).
    pub fn write_begins(&self, offset: u64, len: u64) -> std::io::Result<()> {
        let b = PAGE_SIZE as u64;
        let block = |x: u64| u32::try_from(x).unwrap_or(u32::MAX);
        let (first, end) = (block(offset / b), block((offset + len).div_ceil(b)));
        let mut s = self.lock_without_defrag(first, end);
        s.writing = Some((first, end));
        let mut edges = Vec::new();
        if offset % b != 0 {
            edges.push(offset / b);
        }
        if (offset + len) % b != 0 {
            edges.push((offset + len) / b);
        }
        edges.dedup();
        let partial = edges
            .into_iter()
            .filter_map(|blk| u32::try_from(blk).ok())
            .filter_map(|blk| s.map.get(&blk).map(|&t| (blk, t)));
        let n = copy_blocks(&self.writer, &self.store, partial)?;
        Counters::add(&self.counters.copied_back, n);
        Ok(())
    }

    /// The guest's write of blocks `first..end` ended (`landed`: its data is in the image):
    /// logs and applies the new indirections and the ended ones, synced. Returns the swap-file
    /// blocks whose references the caller must drop: the ended indirections' targets, and on
    /// failure (or when the write did not land) the pending ones'.
    pub fn write_ends(
        &self,
        first: u32,
        end: u32,
        landed: bool,
        sync_store: impl FnOnce() -> std::io::Result<()>,
    ) -> (Vec<Block>, std::io::Result<()>) {
        let mut s = self.lock();
        s.writing = None;
        let pending = std::mem::take(&mut s.pending);
        if !landed {
            return (pending.iter().map(|&(_, t)| t).collect(), Ok(()));
        }
        // Every block of the range was written, directly or as a new indirection: the old
        // indirections there all end, and each drops its reference.
        let new: BTreeMap<u32, Block> = pending.iter().copied().collect();
        let mut changes: Vec<(u32, Option<Block>)> = Vec::new();
        let mut released = Vec::new();
        for (&b, &t) in s.map.range(first..end) {
            released.push(t);
            if !new.contains_key(&b) {
                changes.push((b, None));
            }
        }
        // A block elided twice in one request keeps the last; the first's reference goes.
        if new.len() < pending.len() {
            let mut kept: Vec<(u32, Block)> = new.iter().map(|(&b, &t)| (b, t)).collect();
            for &(b, t) in &pending {
                if let Some(i) = kept.iter().position(|&k| k == (b, t)) {
                    kept.swap_remove(i);
                } else {
                    released.push(t);
                }
            }
        }
        for (&b, &t) in &new {
            changes.push((b, Some(t)));
        }
        if changes.is_empty() {
            return (released, Ok(()));
        }
        // Every indirection released here ended with this write: those the write removed, those
        // a new one replaced, and the first of a block elided twice.
        let ended = released.len() as u64;
        let each = self.sync == LogSync::Write;
        let r = (|| {
            if each && !new.is_empty() {
                sync_store()?;
            }
            match s.log.as_mut() {
                Some(l) => l.append(&changes, each),
                None => Err(std::io::Error::other("the indirection log is closed")),
            }
        })();
        if let Err(e) = r {
            // Nothing changes: the guest gets an error, and the image blocks written stay
            // shadowed by their old indirections, as the log says.
            return (pending.iter().map(|&(_, t)| t).collect(), Err(e));
        }
        Counters::add(&self.counters.ended, ended);
        if !each {
            // Not yet synced: the ended indirections' blocks are released at the next flush,
            // or once this many wait (a guest that seldom flushes would hold them all).
            s.unsynced_ends.append(&mut released);
            if s.unsynced_ends.len() >= UNSYNCED_ENDS_MAX
                && s.log.as_ref().is_some_and(|l| l.file.sync_data().is_ok())
            {
                released = std::mem::take(&mut s.unsynced_ends);
            }
        }
        if self.defrag == Some(Defrag::Store) && !in_order(&new) && s.groups.len() < GROUPS_MAX {
            s.groups.push_back(new.keys().copied().collect());
        }
        for (b, t) in changes {
            match t {
                Some(t) => {
                    s.map.insert(b, t);
                }
                None => {
                    s.map.remove(&b);
                }
            }
        }
        let live = s.map.len();
        let State { map, log, .. } = &mut *s;
        if let Some(l) = log.as_mut() {
            if l.len() > (HEADER + 4 * (live + 1024) * RECORD) as u64 {
                match Log::write_fresh(&l.path, &l.store, map) {
                    Ok(fresh) => {
                        *l = fresh;
                        Counters::add(&self.counters.compactions, 1);
                    }
                    Err(e) => tracing::warn!("indirection log: compaction failed: {e}"),
                }
            }
        }
        (released, Ok(()))
    }

    /// The guest flushed the disk: with [`LogSync::Flush`], the swap file (`sync_store`) and
    /// then the log are synced. Returns the swap-file blocks of the indirections the synced log
    /// ended, whose references the caller drops.
    pub fn flush(
        &self,
        sync_store: impl FnOnce() -> std::io::Result<()>,
    ) -> std::io::Result<Vec<Block>> {
        if self.sync != LogSync::Flush {
            return Ok(Vec::new());
        }
        let mut s = self.lock();
        if s.map.is_empty() && s.log.as_ref().is_none_or(Log::is_empty) {
            return Ok(std::mem::take(&mut s.unsynced_ends));
        }
        sync_store()?;
        if let Some(l) = &s.log {
            l.file.sync_data()?;
        }
        Ok(std::mem::take(&mut s.unsynced_ends))
    }

    /// Guest-disk defragmentation (§5.2), one batch: copies up to `max` indirected blocks back
    /// into the image (first those guest reads needed, then the map in block order), skipping
    /// the blocks of a guest write in progress, and ends their indirections in the log, the
    /// image synced first and the log after, whatever `LogSync` says: the blocks are released
    /// once no log can name them. Returns the swap-file blocks whose references the caller
    /// drops; empty when there is nothing to do.
    pub fn defragment(&self, max: usize) -> std::io::Result<Vec<Block>> {
        let mut s = self.lock();
        if s.log.is_none() || s.map.is_empty() {
            return Ok(Vec::new());
        }
        let mut batch: Vec<(u32, Block)> = Vec::new();
        while batch.len() < max {
            let Some(b) = s.urgent.pop_front() else { break };
            if let Some(&t) = s.map.get(&b) {
                if !s.being_written(b) && !batch.iter().any(|x| x.0 == b) {
                    batch.push((b, t));
                }
            }
        }
        let from = s.cursor;
        let walk: Vec<(u32, Block)> = s
            .map
            .range(from..)
            .chain(s.map.range(..from))
            .map(|(&b, &t)| (b, t))
            .filter(|&(b, _)| !s.being_written(b) && !batch.iter().any(|x| x.0 == b))
            .take(max - batch.len())
            .collect();
        batch.extend(walk);
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        // The copies go without the lock, so guest reads (which read these blocks from the
        // swap file meanwhile) do not wait for them; guest writes of them do.
        s.defragging = batch.iter().map(|&(b, _)| b).collect();
        drop(s);
        let copied = copy_blocks(&self.writer, &self.store, batch.iter().copied())
            .and_then(|_| self.writer.sync_data());
        let mut s = self.lock();
        s.defragging.clear();
        self.copied.notify_all();
        copied?;
        // Nothing but this batch ends these indirections while they are copied.
        let batch: Vec<(u32, Block)> = batch
            .into_iter()
            .filter(|&(b, t)| s.map.get(&b) == Some(&t))
            .collect();
        let changes: Vec<(u32, Option<Block>)> = batch.iter().map(|&(b, _)| (b, None)).collect();
        match s.log.as_mut() {
            Some(l) => l.append(&changes, true)?,
            None => return Ok(Vec::new()),
        }
        for &(b, _) in &batch {
            s.map.remove(&b);
        }
        s.cursor = batch.last().map_or(0, |&(b, _)| b.saturating_add(1));
        Counters::add(&self.counters.defragmented, batch.len() as u64);
        Ok(batch.into_iter().map(|(_, t)| t).collect())
    }

    /// Swap-file defragmentation (§5.1), one guest write's worth: the indirections the oldest
    /// queued write made, if they are still live and scattered in the swap file, are copied to
    /// `alloc(n)`, a run of `n` free swap-file blocks the caller reserves (each with a reference
    /// for its indirection), in image-block order; the swap file is synced, then the log of the
    /// moves. Nothing waits for the copy; an indirection a guest write ended meanwhile stays
    /// ended, and its new block is given back. Returns the
    /// swap-file blocks whose references the caller drops (the old targets, and the new blocks
    /// not used, all of them on failure), and whether a group was moved (false: nothing to
    /// group, or no room for the run).
    pub fn regroup(
        &self,
        alloc: impl FnOnce(u32) -> Option<Block>,
    ) -> (Vec<Block>, std::io::Result<bool>) {
        let mut s = self.lock();
        // The queued writes' live, scattered indirections, write after write, each in image
        // order, up to REGROUP_MAX blocks: they go to one run, so each write's blocks follow
        // each other there.
        let (mut batch, mut taken) = (Vec::new(), std::collections::HashSet::new());
        let mut writes = 0u64;
        while batch.len() < REGROUP_MAX {
            let Some(blocks) = s.groups.pop_front() else {
                break;
            };
            let live: BTreeMap<u32, Block> = blocks
                .into_iter()
                .filter(|&b| !s.being_written(b) && !taken.contains(&b))
                .filter_map(|b| s.map.get(&b).map(|&t| (b, t)))
                .collect();
            if !in_order(&live) {
                taken.extend(live.keys().copied());
                batch.extend(live);
                writes += 1;
            }
        }
        if batch.is_empty() {
            return (Vec::new(), Ok(false));
        }
        let n = u32::try_from(batch.len()).unwrap_or(u32::MAX);
        // Nothing waits for the copy: it writes only the new run, which nothing else uses, and
        // the old blocks keep their references until the moves are logged.
        drop(s);
        let moved = alloc(n).map(|to| (to, self.move_blocks(&batch, to)));
        let mut s = self.lock();
        let Some((to, copied)) = moved else {
            // No room in the swap file (or under the maximum): these stay as they are.
            return (Vec::new(), Ok(false));
        };
        let fresh = (to..to + n).collect::<Vec<Block>>();
        if let Err(e) = copied {
            return (fresh, Err(e));
        }
        // A guest write (or the VM's end) may have ended some of these indirections meanwhile.
        let mut changes = Vec::new();
        let mut release = Vec::new();
        for (&(b, old), new) in batch.iter().zip(fresh) {
            if s.map.get(&b) == Some(&old) {
                changes.push((b, Some(new)));
                release.push(old);
            } else {
                release.push(new);
            }
        }
        let logged = match s.log.as_mut() {
            _ if changes.is_empty() => Ok(()),
            Some(l) => l.append(&changes, true),
            None => Err(std::io::Error::other("the indirection log is closed")),
        };
        if let Err(e) = logged {
            // The log may hold some of the moves: their old blocks stay referenced, and so do
            // the new ones (a crash then reads whichever the log names; both hold the data).
            let unused = batch
                .iter()
                .zip(to..to + n)
                .filter(|&(&(b, old), _)| s.map.get(&b) != Some(&old))
                .map(|(_, new)| new)
                .collect();
            return (unused, Err(e));
        }
        for &(b, t) in &changes {
            if let Some(t) = t {
                s.map.insert(b, t);
            }
        }
        Counters::add(&self.counters.regrouped, changes.len() as u64);
        Counters::add(&self.counters.regrouped_writes, writes);
        (release, Ok(true))
    }

    /// Copies the swap-file blocks of `batch` (in its order) to the run at `to`: one read per
    /// run of them that follow each other, one write, then a sync of the swap file.
    fn move_blocks(&self, batch: &[(u32, Block)], to: Block) -> std::io::Result<()> {
        let mut buf = IoBuf::new(batch.len() * PAGE_SIZE);
        let data = buf.get(batch.len() * PAGE_SIZE);
        let mut k = 0;
        while k < batch.len() {
            let mut n = 1;
            while k + n < batch.len() && batch[k + n - 1].1.checked_add(1) == Some(batch[k + n].1) {
                n += 1;
            }
            self.store.read_exact_at(
                &mut data[k * PAGE_SIZE..(k + n) * PAGE_SIZE],
                u64::from(batch[k].1) * PAGE_SIZE as u64,
            )?;
            k += n;
        }
        self.store
            .write_all_at(data, u64::from(to) * PAGE_SIZE as u64)?;
        self.store.sync_data()
    }

    /// Copies every indirected block back into the image and deletes the log (a clean exit);
    /// returns the swap-file blocks to release.
    pub fn disentangle(&self) -> Result<Vec<Block>, IndirectError> {
        let mut s = self.lock_without_defrag(0, u32::MAX);
        let n = copy_back(&self.writer, &self.store, &s.map).map_err(io_err(&self.image))?;
        Counters::add(&self.counters.disentangled, n);
        let mut targets: Vec<Block> = std::mem::take(&mut s.map).into_values().collect();
        targets.append(&mut s.unsynced_ends);
        if let Some(l) = s.log.take() {
            let path = l.path.clone();
            l.remove().map_err(io_err(&path))?;
        }
        Ok(targets)
    }

    /// Leaves the log, synced, for the next start (`--keep-indirections`).
    pub fn keep(&self) -> std::io::Result<u64> {
        let mut s = self.lock_without_defrag(0, u32::MAX);
        if let Some(l) = s.log.take() {
            l.file.sync_data()?;
        }
        Ok(s.map.len() as u64)
    }

    pub fn image(&self) -> &Path {
        &self.image
    }
}

/// Whether the swap-file blocks of `map` follow each other in image-block order (a split read
/// takes them in one read): grouping them would save nothing.
fn in_order(map: &BTreeMap<u32, Block>) -> bool {
    map.values()
        .zip(map.values().skip(1))
        .all(|(&t, &u)| t.checked_add(1) == Some(u))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_of(image: &Path) -> (BTreeMap<u32, Block>, u64) {
        let r = Log::open(image).unwrap().unwrap();
        (r.map, r.records)
    }

    #[test]
    fn the_log_replays_its_records_and_stops_at_a_torn_one() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("d.img");
        let mut log = Log::create(&image, Path::new("store")).unwrap();
        assert!(
            log.store().is_absolute(),
            "the header names the store absolutely"
        );
        assert!(matches!(
            Log::create(&image, Path::new("s")),
            Err(IndirectError::Exists(_))
        ));
        log.append(&[(5, Some(50)), (6, Some(60)), (7, Some(70))], true)
            .unwrap();
        log.append(&[(6, None), (5, Some(51))], false).unwrap();
        let (map, n) = state_of(&image);
        assert_eq!(n, 5);
        assert_eq!(map, BTreeMap::from([(5, 51), (7, 70)]));
        // A crash in the middle of the next append: half a record, then garbage.
        let f = OpenOptions::new()
            .write(true)
            .open(log_path(&image))
            .unwrap();
        f.write_all_at(&record(9, 90)[..7], log.len()).unwrap();
        let (map, n) = state_of(&image);
        assert_eq!((map.len(), n), (2, 5), "the torn record is not applied");
        f.write_all_at(&[0xff; RECORD], log.len()).unwrap();
        assert_eq!(
            state_of(&image).1,
            5,
            "a record failing its check ends the log"
        );
    }

    #[test]
    fn compaction_keeps_the_map_and_a_bad_header_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("d.img");
        let log = Log::create(&image, Path::new("/s")).unwrap();
        let map = BTreeMap::from([(1, 10), (2, 20)]);
        let fresh = Log::write_fresh(&log.path, &log.store, &map).unwrap();
        assert_eq!(fresh.len(), (HEADER + 2 * RECORD) as u64);
        assert_eq!(state_of(&image).0, map);
        std::fs::write(log_path(&image), b"not a log").unwrap();
        assert!(matches!(
            Log::open(&image),
            Err(IndirectError::Corrupt { .. })
        ));
        let e = recover(&image).err().unwrap().to_string();
        assert!(e.contains("not an indirection log"), "{e}");
    }

    #[test]
    fn a_log_naming_blocks_past_either_file_is_refused_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("d.img");
        let store = dir.path().join("s.swap");
        std::fs::write(&image, vec![7u8; 4 * PAGE_SIZE]).unwrap();
        std::fs::write(&store, vec![9u8; 2 * PAGE_SIZE]).unwrap();
        for (block, target) in [(4, 0), (0, 2), (u32::MAX - 1, 0)] {
            let mut log = Log::create(&image, &store).unwrap();
            log.append(&[(block, Some(target))], true).unwrap();
            let e = recover(&image).err().unwrap();
            assert!(e.to_string().contains("past the end"), "{e}");
            assert_eq!(
                std::fs::metadata(&image).unwrap().len(),
                4 * PAGE_SIZE as u64
            );
            std::fs::remove_file(log_path(&image)).unwrap();
        }
        let mut log = Log::create(&image, &store).unwrap();
        log.append(&[(3, Some(1))], true).unwrap();
        assert_eq!(recover(&image).unwrap().unwrap().blocks, 1);
        let data = std::fs::read(&image).unwrap();
        assert!(data[3 * PAGE_SIZE..].iter().all(|&x| x == 9));
        assert!(data[..3 * PAGE_SIZE].iter().all(|&x| x == 7));
    }

    #[test]
    fn recovery_without_the_store_says_what_is_missing_and_keeps_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("d.img");
        std::fs::write(&image, vec![0u8; 8192]).unwrap();
        let mut log = Log::create(&image, &dir.path().join("gone.swap")).unwrap();
        log.append(&[(1, Some(0))], true).unwrap();
        let e = recover(&image).err().unwrap();
        assert!(matches!(e, IndirectError::StoreMissing { .. }));
        assert!(e.to_string().contains("gone.swap"), "{e}");
        assert!(log_path(&image).exists(), "nothing is lost: the log stays");
    }
}
