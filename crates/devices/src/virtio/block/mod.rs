//! virtio-blk: a raw disk image file as a guest block device (virtio 1.2 §5.2).
//!
//! The device advertises a 4 KiB logical block size so guest I/O is page aligned. Requests are
//! served synchronously, by `pread`/`pwrite` through a bounce buffer on a huge page
//! (`iobuf.rs`), on the device's own thread when the queue's notifications come through an
//! ioeventfd (`notify.rs`), else on the vCPU thread that wrote QueueNotify. The image is opened
//! with `O_DIRECT` when the file system allows it (the equivalent of QEMU's `cache=none`), so
//! the host page cache does not hold a second copy of guest disk data; block-misaligned
//! requests use a buffered descriptor of the same file.

mod disk;
mod request;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use virtio_queue::{Queue, QueueT};
use vm_memory::GuestAddress;

use disk::{is_full, runs_without, whole_pages, without_blocks, Disk};
pub use disk::{BlockError, DiskImage, BLOCK_SIZE};
pub use request::{Desc, Request, RequestError, RequestKind};
use request::{ID_BYTES, SECTOR_SIZE, VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_OK, VIRTIO_BLK_S_UNSUPP};

use super::{VirtioDevice, VIRTIO_F_VERSION_1};
use crate::iobuf::IoBuf;
use crate::ram::GuestRam;
use crate::{GuestMem, PauseVm};

pub const VIRTIO_ID_BLOCK: u32 = 2;
const VIRTIO_BLK_F_SIZE_MAX: u64 = 1 << 1;
const VIRTIO_BLK_F_SEG_MAX: u64 = 1 << 2;
const VIRTIO_BLK_F_RO: u64 = 1 << 5;
const VIRTIO_BLK_F_BLK_SIZE: u64 = 1 << 6;
const VIRTIO_BLK_F_FLUSH: u64 = 1 << 9;

const QUEUE_SIZE: u16 = 256;
/// Largest single data segment the guest is told it may use.
const SEGMENT_MAX: u32 = 1 << 20;
/// Bounce buffer size: larger descriptors are served in pieces.
const BOUNCE_SIZE: usize = 256 << 10;

/// Counters of one block device.
#[derive(Debug, Default)]
pub struct BlockMetrics {
    pub reads: AtomicU64,
    pub writes: AtomicU64,
    pub flushes: AtomicU64,
    pub get_ids: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    /// Requests answered with IOERR or UNSUPP, or dropped.
    pub errors: AtomicU64,
    /// Times a write or flush found the image's file system full and paused the VM.
    pub full_pauses: AtomicU64,
    /// Time write requests spent before their data went to the image: gathering the guest's
    /// pages (swapping in those out of guest RAM: double paging), in µs; and the longest.
    pub write_prepare_us: AtomicU64,
    pub write_prepare_max_us: AtomicU64,
    /// Time write requests spent after their data reached the image (logging indirections).
    pub write_end_us: AtomicU64,
    /// Time read requests took, in µs (with `bytes_read`, the read throughput).
    pub read_us: AtomicU64,
    /// Write requests with holes: pages the host held outside guest RAM, each swapped back in
    /// for the write (double paging) or left out of it as an indirection (Tesseract), counted
    /// by how many a request had (Tesseract Table 1's classes).
    pub writes_holes_1_20: AtomicU64,
    pub writes_holes_21_50: AtomicU64,
    pub writes_holes_over_50: AtomicU64,
    /// The holes of all write requests, in pages.
    pub write_holes: AtomicU64,
    /// Read requests some of whose blocks came from the pager's swap file (split reads), and
    /// the time they took in µs (part of `read_us`).
    pub split_reads: AtomicU64,
    pub split_read_us: AtomicU64,
}

impl BlockMetrics {
    /// Counts a write request that had `holes` pages outside guest RAM.
    fn write_holes(&self, holes: u64) {
        let class = match holes {
            0 => return,
            1..=20 => &self.writes_holes_1_20,
            21..=50 => &self.writes_holes_21_50,
            _ => &self.writes_holes_over_50,
        };
        class.fetch_add(1, Ordering::Relaxed);
        self.write_holes.fetch_add(holes, Ordering::Relaxed);
    }
}

/// What moving a request's data met: the time spent writing the image, the holes of a write
/// (pages outside guest RAM), and whether a read was split.
#[derive(Default)]
struct Moved {
    io_time: Duration,
    holes: u64,
    split: bool,
}

/// A virtio-blk device backed by a raw image file.
pub struct Block {
    disk: Disk,
    read_only: bool,
    id: [u8; ID_BYTES],
    features: u64,
    /// On a huge page: one segment per request, as QEMU's writes from guest RAM (`iobuf.rs`).
    bounce: IoBuf,
    /// Where request data goes to and comes from.
    ram: Arc<dyn GuestRam>,
    /// This disk's index among the VM's disks (how guest RAM names it).
    index: u8,
    metrics: Arc<BlockMetrics>,
    /// Pauses the VM when the image's file system is full (`None`: the guest gets IOERR).
    pause: Option<Arc<dyn PauseVm>>,
}

impl Block {
    /// Opens the image at `path` as the VM's disk number `index`. `id` is what GET_ID answers
    /// (the disk's serial).
    pub fn new(
        path: &Path,
        read_only: bool,
        id: &str,
        ram: Arc<dyn GuestRam>,
        index: u8,
    ) -> Result<Self, BlockError> {
        Self::with_image(DiskImage::open(path, read_only)?, id, ram, index)
    }

    /// The device on an image opened before ([`DiskImage::open`]): a VMM that gives up its
    /// access to the file system (a jail) opens its images first.
    pub fn with_image(
        image: DiskImage,
        id: &str,
        ram: Arc<dyn GuestRam>,
        index: u8,
    ) -> Result<Self, BlockError> {
        if id.len() > ID_BYTES {
            return Err(BlockError::IdTooLong(id.to_owned()));
        }
        let DiskImage { disk, read_only } = image;
        let mut id_bytes = [0u8; ID_BYTES];
        id_bytes[..id.len()].copy_from_slice(id.as_bytes());
        let mut features = VIRTIO_F_VERSION_1
            | VIRTIO_BLK_F_SIZE_MAX
            | VIRTIO_BLK_F_SEG_MAX
            | VIRTIO_BLK_F_BLK_SIZE
            | VIRTIO_BLK_F_FLUSH;
        if read_only {
            features |= VIRTIO_BLK_F_RO;
        }
        Ok(Block {
            disk,
            read_only,
            id: id_bytes,
            features,
            bounce: IoBuf::huge(BOUNCE_SIZE),
            ram,
            index,
            metrics: Arc::default(),
            pause: None,
        })
    }

    /// A write or flush that finds the image's file system full (`ENOSPC`, `EDQUOT`) pauses the
    /// VM through `pause` and is tried again on resume, instead of failing in the guest: the
    /// operator frees space and resumes, and the guest never sees the error.
    #[must_use]
    pub fn pause_when_full(mut self, pause: Arc<dyn PauseVm>) -> Self {
        self.pause = Some(pause);
        self
    }

    /// Runs `op` (a write or a flush) until it succeeds, fails for another reason than a full
    /// file system, or the VM ends while paused for one.
    fn until_not_full(
        &mut self,
        mut op: impl FnMut(&mut Self) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        loop {
            let e = match op(self) {
                Err(e) if is_full(&e) => e,
                r => return r,
            };
            let Some(pause) = self.pause.clone() else {
                return Err(e);
            };
            self.metrics.full_pauses.fetch_add(1, Ordering::Relaxed);
            let id = String::from_utf8_lossy(&self.id);
            let why = format!(
                "disk {}: {e}: free space on its file system, then resume",
                id.trim_end_matches('\0')
            );
            if !pause.pause_until_resumed(why) {
                return Err(e);
            }
        }
    }

    pub fn metrics(&self) -> Arc<BlockMetrics> {
        self.metrics.clone()
    }

    /// Capacity in bytes (whole 4 KiB blocks).
    pub fn capacity(&self) -> u64 {
        self.disk.capacity
    }

    /// Makes every acknowledged write durable.
    pub fn sync(&self) -> std::io::Result<()> {
        if self.read_only {
            return Ok(());
        }
        self.disk.buffered.sync_data()
    }

    /// A handle for reading the image the way the device does (`O_DIRECT` where possible).
    pub fn image_reader(&self) -> std::io::Result<File> {
        self.disk
            .direct
            .as_ref()
            .unwrap_or(&self.disk.buffered)
            .try_clone()
    }

    /// A second handle on a writable image, for flushing it after the device is handed to a bus.
    pub fn sync_handle(&self) -> std::io::Result<Option<File>> {
        if self.read_only {
            return Ok(None);
        }
        self.disk.buffered.try_clone().map(Some)
    }

    fn config(&self) -> [u8; 24] {
        let mut c = [0u8; 24];
        c[0..8].copy_from_slice(&(self.disk.capacity / SECTOR_SIZE).to_le_bytes());
        c[8..12].copy_from_slice(&SEGMENT_MAX.to_le_bytes());
        c[12..16].copy_from_slice(&u32::from(QUEUE_SIZE - 2).to_le_bytes());
        c[20..24].copy_from_slice(&4096u32.to_le_bytes());
        c
    }

    /// Moves the data of a read or write between the image and guest memory; a write is
    /// bracketed by the guest RAM's `disk_write_begin` and `disk_write_end`.
    fn transfer(&mut self, req: &Request, sector: u64, write: bool) -> std::io::Result<()> {
        let offset = sector * SECTOR_SIZE;
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        if !write {
            let t0 = Instant::now();
            let moved = self.move_data(req, offset, false);
            let took = us(t0.elapsed());
            let m = &self.metrics;
            m.read_us.fetch_add(took, Ordering::Relaxed);
            if moved.as_ref().is_ok_and(|x| x.split) {
                m.split_reads.fetch_add(1, Ordering::Relaxed);
                m.split_read_us.fetch_add(took, Ordering::Relaxed);
            }
            return moved.map(drop);
        }
        let t0 = Instant::now();
        let moved = self
            .ram
            .disk_write_begin(self.index, offset, req.data_len)
            .and_then(|()| self.move_data(req, offset, true));
        let t1 = Instant::now();
        let ended = self
            .ram
            .disk_write_end(self.index, offset, req.data_len, moved.is_ok());
        let m = &self.metrics;
        let io = moved.as_ref().map_or(Duration::ZERO, |x| x.io_time);
        if let Ok(x) = &moved {
            m.write_holes(x.holes);
        }
        let prepare = us((t1 - t0).saturating_sub(io));
        m.write_prepare_us.fetch_add(prepare, Ordering::Relaxed);
        m.write_prepare_max_us.fetch_max(prepare, Ordering::Relaxed);
        m.write_end_us
            .fetch_add(us(t1.elapsed()), Ordering::Relaxed);
        moved.and(ended).map(drop)
    }

    /// Moves a request's data; returns what it met ([`Moved`]).
    fn move_data(&mut self, req: &Request, mut offset: u64, write: bool) -> std::io::Result<Moved> {
        let mut moved = Moved::default();
        // The request's bytes are one contiguous range of the disk however the guest scattered
        // them in memory: move them with one file I/O per bounce-buffer-full, and scatter or
        // gather between the bounce buffer and the descriptors' buffers. Whole, aligned pages
        // are reported to guest RAM, which may remember them as mirrors of their blocks, or
        // (writes) keep some out of the transfer as references to where it holds them.
        let short = || std::io::Error::other("descriptors shorter than the request");
        let mut left = usize::try_from(req.data_len).map_err(std::io::Error::other)?;
        let mut segments = req.data.iter().map(|&(a, l)| (a.0, l as usize));
        let mut current = (0u64, 0usize);
        while left > 0 {
            let n = left.min(BOUNCE_SIZE);
            // This chunk's pieces: (guest address, disk offset, length).
            let mut pieces = Vec::new();
            let mut pos = 0;
            while pos < n {
                if current.1 == 0 {
                    current = segments.next().ok_or_else(short)?;
                    continue;
                }
                let k = current.1.min(n - pos);
                pieces.push((current.0, offset + pos as u64, k));
                pos += k;
                current = (current.0 + k as u64, current.1 - k);
            }
            let mut pages = whole_pages(&pieces);
            let elided = if write {
                self.ram.disk_write_elide(self.index, &pages)
            } else {
                Vec::new()
            };
            if !elided.is_empty() {
                pages.retain(|p| elided.binary_search(&p.block).is_err());
                pieces = without_blocks(&pieces, &elided);
            }
            let file = self.disk.file_for(offset, n);
            let buf = self.bounce.get(n);
            if write {
                let out = self.ram.disk_write_sources(self.index, &pages);
                moved.holes += (elided.len() + out) as u64;
            } else if self.ram.disk_read_split(self.index, offset, buf)? {
                moved.split = true;
            } else {
                file.read_exact_at(buf, offset)?;
            }
            for &(addr, disk_off, k) in &pieces {
                let at = usize::try_from(disk_off - offset).map_err(std::io::Error::other)?;
                let piece = &mut buf[at..at + k];
                if write {
                    self.ram
                        .read(GuestAddress(addr), piece)
                        .map_err(std::io::Error::other)?;
                } else {
                    self.ram
                        .write(GuestAddress(addr), piece)
                        .map_err(std::io::Error::other)?;
                }
            }
            if write {
                let t = Instant::now();
                if elided.is_empty() {
                    file.write_all_at(buf, offset)?;
                } else {
                    for (from, to) in runs_without(offset, n, &elided) {
                        let at = usize::try_from(from - offset).map_err(std::io::Error::other)?;
                        let len = usize::try_from(to - from).map_err(std::io::Error::other)?;
                        self.disk
                            .file_for(from, len)
                            .write_all_at(&buf[at..at + len], from)?;
                    }
                }
                moved.io_time += t.elapsed();
                self.ram.disk_write_done(self.index, &pages, offset, buf);
            } else {
                self.ram.disk_read_data(self.index, &pages, offset, buf);
            }
            offset += n as u64;
            left -= n;
        }
        Ok(moved)
    }

    /// Carries out a validated request; returns the status byte and the bytes written to the guest.
    fn execute(&mut self, req: &Request) -> (u8, u32) {
        let m = self.metrics.clone();
        // A host fault, but the guest can retry a failing request in a loop: rate-limited.
        let io = |r: std::io::Result<()>| {
            r.map_err(|e| crate::guest_error!(DiskIoError, "virtio-blk I/O failed: {e}"))
                .is_ok()
        };
        match req.kind {
            RequestKind::Read { sector } => {
                if io(self.transfer(req, sector, false)) {
                    m.reads.fetch_add(1, Ordering::Relaxed);
                    m.bytes_read.fetch_add(req.data_len, Ordering::Relaxed);
                    // data_len <= 4 GiB by the chain limit; saturate anyway.
                    return (
                        VIRTIO_BLK_S_OK,
                        u32::try_from(req.data_len).unwrap_or(u32::MAX),
                    );
                }
            }
            RequestKind::Write { sector } if self.read_only => {
                crate::guest_error!(
                    BadBlockRequest,
                    "virtio-blk: write to read-only disk at sector {sector} refused"
                );
            }
            RequestKind::Write { sector } => {
                if io(self.until_not_full(|b| b.transfer(req, sector, true))) {
                    m.writes.fetch_add(1, Ordering::Relaxed);
                    m.bytes_written.fetch_add(req.data_len, Ordering::Relaxed);
                    return (VIRTIO_BLK_S_OK, 0);
                }
            }
            RequestKind::Flush => {
                if io(self.until_not_full(|b| b.sync().and_then(|()| b.ram.disk_flush(b.index)))) {
                    m.flushes.fetch_add(1, Ordering::Relaxed);
                    return (VIRTIO_BLK_S_OK, 0);
                }
            }
            RequestKind::GetId => {
                let mut left = &self.id[..];
                for &(addr, len) in &req.data {
                    let n = left.len().min(len as usize);
                    if self.ram.write(addr, &left[..n]).is_err() {
                        return (VIRTIO_BLK_S_IOERR, 0);
                    }
                    left = &left[n..];
                }
                m.get_ids.fetch_add(1, Ordering::Relaxed);
                return (VIRTIO_BLK_S_OK, ID_BYTES.try_into().unwrap_or(0));
            }
            RequestKind::Unsupported(t) => {
                crate::guest_error!(BadBlockRequest, "virtio-blk: unsupported request type {t}");
                m.errors.fetch_add(1, Ordering::Relaxed);
                return (VIRTIO_BLK_S_UNSUPP, 0);
            }
        }
        m.errors.fetch_add(1, Ordering::Relaxed);
        (VIRTIO_BLK_S_IOERR, 0)
    }
}

impl VirtioDevice for Block {
    fn device_type(&self) -> u32 {
        VIRTIO_ID_BLOCK
    }

    fn queue_max_sizes(&self) -> &[u16] {
        &[QUEUE_SIZE]
    }

    fn features(&self) -> u64 {
        self.features
    }

    fn read_config(&self, offset: u64, data: &mut [u8]) {
        let config = self.config();
        for (i, b) in data.iter_mut().enumerate() {
            *b = usize::try_from(offset)
                .ok()
                .and_then(|o| o.checked_add(i))
                .and_then(|o| config.get(o).copied())
                .unwrap_or(0);
        }
    }

    fn process_queue(&mut self, _index: usize, queue: &mut Queue, mem: &GuestMem) -> bool {
        let mut used_any = false;
        while let Some(chain) = queue.pop_descriptor_chain(mem) {
            let head = chain.head_index();
            let descs: Vec<Desc> = chain
                .map(|d| Desc {
                    addr: d.addr().0,
                    len: d.len(),
                    write_only: d.is_write_only(),
                })
                .collect();
            let used_len = match request::parse(&descs, mem, self.disk.capacity) {
                Ok(req) => {
                    let (status, written) = self.execute(&req);
                    // Through the pager, which notes what devices write (a migration's
                    // pre-copy).
                    match self.ram.write(req.status, &[status]) {
                        Ok(()) => written.saturating_add(1),
                        Err(_) => 0,
                    }
                }
                Err(e) => {
                    crate::guest_error!(
                        BadBlockRequest,
                        "virtio-blk: rejected request: {}",
                        e.reason()
                    );
                    self.metrics.errors.fetch_add(1, Ordering::Relaxed);
                    match e {
                        RequestError::Invalid { status, .. }
                            if self.ram.write(status, &[VIRTIO_BLK_S_IOERR]).is_ok() =>
                        {
                            1
                        }
                        _ => 0,
                    }
                }
            };
            if let Err(e) = queue.add_used(mem, head, used_len) {
                crate::guest_error!(
                    UsedRingError,
                    "virtio-blk: cannot return a used buffer: {e}"
                );
                break;
            }
            used_any = true;
        }
        used_any
    }
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)] // test values are small by construction
mod tests {
    use super::*;
    use std::io::Write;
    use virtio_queue::desc::{split::Descriptor as SplitDescriptor, RawDescriptor};
    use virtio_queue::mock::MockSplitQueue;
    use vm_memory::Bytes;
    use vm_memory::GuestAddress;

    const DESC_F_NEXT: u16 = 1;
    const DESC_F_WRITE: u16 = 2;

    fn image(blocks: usize) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        for b in 0..blocks {
            f.write_all(&vec![b as u8; BLOCK_SIZE as usize]).unwrap();
        }
        f
    }

    /// Submits one chain built from `(addr, len, flags)` and returns the status byte.
    fn submit(dev: &mut Block, mem: &GuestMem, descs: &[(u64, u32, u16)], status_at: u64) -> u8 {
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
        mem.write_obj(0xffu8, GuestAddress(status_at)).unwrap();
        assert!(dev.process_queue(0, &mut q, mem));
        mem.read_obj(GuestAddress(status_at)).unwrap()
    }

    fn header(mem: &GuestMem, t: u32, sector: u64) {
        mem.write_obj(t, GuestAddress(0x10000)).unwrap();
        mem.write_obj(0u32, GuestAddress(0x10004)).unwrap();
        mem.write_obj(sector, GuestAddress(0x10008)).unwrap();
    }

    fn ram_for(mem: &GuestMem) -> Arc<dyn GuestRam> {
        Arc::new(crate::ram::PlainRam::new(Arc::new(mem.clone())))
    }

    fn mem() -> GuestMem {
        GuestMem::from_ranges(&[(GuestAddress(0), 4 << 20)]).unwrap()
    }

    #[test]
    fn reads_writes_and_ids_reach_the_file() {
        let img = image(4);
        let mem = mem();
        let mut dev = Block::new(img.path(), false, "data", ram_for(&mem), 0).unwrap();
        assert_eq!(dev.capacity(), 4 * BLOCK_SIZE);

        header(&mem, request::VIRTIO_BLK_T_IN, 8);
        let st = submit(
            &mut dev,
            &mem,
            &[
                (0x10000, 16, 0),
                (0x20000, 4096, DESC_F_WRITE),
                (0x30000, 1, DESC_F_WRITE),
            ],
            0x30000,
        );
        assert_eq!(st, VIRTIO_BLK_S_OK);
        let mut buf = vec![0u8; 4096];
        mem.read_slice(&mut buf, GuestAddress(0x20000)).unwrap();
        assert!(buf.iter().all(|&b| b == 1), "sector 8 is block 1");

        mem.write_slice(&[0xab; 8192], GuestAddress(0x40000))
            .unwrap();
        header(&mem, request::VIRTIO_BLK_T_OUT, 16);
        let st = submit(
            &mut dev,
            &mem,
            &[
                (0x10000, 16, 0),
                (0x40000, 8192, 0),
                (0x30000, 1, DESC_F_WRITE),
            ],
            0x30000,
        );
        assert_eq!(st, VIRTIO_BLK_S_OK);
        header(&mem, request::VIRTIO_BLK_T_FLUSH, 0);
        assert_eq!(
            submit(
                &mut dev,
                &mem,
                &[(0x10000, 16, 0), (0x30000, 1, DESC_F_WRITE)],
                0x30000
            ),
            VIRTIO_BLK_S_OK
        );
        let on_disk = std::fs::read(img.path()).unwrap();
        assert!(on_disk[8192..16384].iter().all(|&b| b == 0xab));
        assert!(on_disk[..4096].iter().all(|&b| b == 0));

        header(&mem, request::VIRTIO_BLK_T_GET_ID, 0);
        let st = submit(
            &mut dev,
            &mem,
            &[
                (0x10000, 16, 0),
                (0x50000, 20, DESC_F_WRITE),
                (0x30000, 1, DESC_F_WRITE),
            ],
            0x30000,
        );
        assert_eq!(st, VIRTIO_BLK_S_OK);
        let mut id = [0u8; 20];
        mem.read_slice(&mut id, GuestAddress(0x50000)).unwrap();
        assert_eq!(&id[..5], b"data\0");

        let m = dev.metrics();
        assert_eq!(m.reads.load(Ordering::Relaxed), 1);
        assert_eq!(m.bytes_written.load(Ordering::Relaxed), 8192);
    }

    #[test]
    fn scattered_buffers_map_to_one_contiguous_disk_range() {
        let img = image(4);
        let mem = mem();
        let mut dev = Block::new(img.path(), false, "data", ram_for(&mem), 0).unwrap();
        // Write 12 KiB gathered from three odd-sized, out-of-order buffers.
        let parts: [(u64, u32, u8); 3] =
            [(0x50000, 512, 1), (0x40000, 3584, 2), (0x60000, 8192, 3)];
        for &(a, l, v) in &parts {
            mem.write_slice(&vec![v; l as usize], GuestAddress(a))
                .unwrap();
        }
        header(&mem, request::VIRTIO_BLK_T_OUT, 8);
        let mut chain = vec![(0x10000, 16, 0)];
        chain.extend(parts.iter().map(|&(a, l, _)| (a, l, 0)));
        chain.push((0x30000, 1, DESC_F_WRITE));
        assert_eq!(submit(&mut dev, &mem, &chain, 0x30000), VIRTIO_BLK_S_OK);
        let disk = std::fs::read(img.path()).unwrap();
        assert!(disk[4096..4608].iter().all(|&b| b == 1));
        assert!(disk[4608..8192].iter().all(|&b| b == 2));
        assert!(disk[8192..16384].iter().all(|&b| b == 3));
        // Read it back scattered differently.
        header(&mem, request::VIRTIO_BLK_T_IN, 8);
        let reads = [(0x70000u64, 1000u32), (0x80000, 9000), (0x90000, 2288)];
        let mut chain = vec![(0x10000, 16, 0)];
        chain.extend(reads.iter().map(|&(a, l)| (a, l, DESC_F_WRITE)));
        chain.push((0x30000, 1, DESC_F_WRITE));
        assert_eq!(submit(&mut dev, &mem, &chain, 0x30000), VIRTIO_BLK_S_OK);
        let mut back = Vec::new();
        for &(a, l) in &reads {
            let mut b = vec![0u8; l as usize];
            mem.read_slice(&mut b, GuestAddress(a)).unwrap();
            back.extend(b);
        }
        assert_eq!(back, disk[4096..16384]);
    }

    #[test]
    fn read_only_disk_refuses_writes() {
        let img = image(2);
        let mem = mem();
        let mut dev = Block::new(img.path(), true, "ro", ram_for(&mem), 0).unwrap();
        assert_ne!(dev.features() & VIRTIO_BLK_F_RO, 0);
        header(&mem, request::VIRTIO_BLK_T_OUT, 0);
        let st = submit(
            &mut dev,
            &mem,
            &[
                (0x10000, 16, 0),
                (0x40000, 4096, 0),
                (0x30000, 1, DESC_F_WRITE),
            ],
            0x30000,
        );
        assert_eq!(st, VIRTIO_BLK_S_IOERR);
        assert!(std::fs::read(img.path()).unwrap()[..4096]
            .iter()
            .all(|&b| b == 0));
    }

    proptest::proptest! {
        /// Whatever descriptor table the guest writes (loops through `next`, indices past the
        /// queue, indirect flags, huge lengths, addresses outside RAM, wrong directions), the
        /// device answers without panicking, and reads never touch the image.
        #[test]
        fn hostile_descriptor_tables_never_panic_or_write_the_image(
            descs in proptest::collection::vec(
                (
                    proptest::prop_oneof![
                        proptest::strategy::Just(0x10000u64),
                        0u64..(4 << 20),
                        proptest::num::u64::ANY,
                    ],
                    proptest::prop_oneof![
                        proptest::strategy::Just(16u32),
                        0u32..8192,
                        proptest::num::u32::ANY,
                    ],
                    0u16..8,
                    0u16..24,
                ),
                1..16,
            )
        ) {
            let img = image(2);
            let before = std::fs::read(img.path()).unwrap();
            // The queue's own tables sit above the 4 MiB the descriptors may point into, which
            // start out zero (a header there is a read, type 0).
            let mem = GuestMem::from_ranges(&[(GuestAddress(0), 8 << 20)]).unwrap();
            let mut dev = Block::new(img.path(), false, "x", ram_for(&mem), 0).unwrap();
            let vq = MockSplitQueue::create(&mem, GuestAddress(6 << 20), 16);
            let raw: Vec<RawDescriptor> = descs
                .iter()
                .map(|&(a, l, f, n)| RawDescriptor::from(SplitDescriptor::new(a, l, f, n)))
                .collect();
            if vq.add_desc_chains(&raw, 0).is_ok() {
                let mut q: Queue = vq.create_queue().unwrap();
                dev.process_queue(0, &mut q, &mem);
            }
            // A status byte the device wrote may become a later chain's header (type 1 is a
            // write): only a run that carried out no write must leave the image as it was.
            if dev.metrics().writes.load(Ordering::Relaxed) == 0 {
                proptest::prop_assert_eq!(std::fs::read(img.path()).unwrap(), before);
            }
        }
    }

    #[test]
    fn hostile_requests_get_ioerr_and_leave_the_file_alone() {
        let img = image(2);
        let before = std::fs::read(img.path()).unwrap();
        let log = crate::guest_log::guest_log();
        let bad_before = log.count(crate::guest_log::GuestError::BadBlockRequest);
        let mem = mem();
        let mut dev = Block::new(img.path(), false, "x", ram_for(&mem), 0).unwrap();
        header(&mem, request::VIRTIO_BLK_T_OUT, 15); // one sector before the end, 4 KiB long
        let st = submit(
            &mut dev,
            &mem,
            &[
                (0x10000, 16, 0),
                (0x40000, 4096, 0),
                (0x30000, 1, DESC_F_WRITE),
            ],
            0x30000,
        );
        assert_eq!(st, VIRTIO_BLK_S_IOERR);
        header(&mem, request::VIRTIO_BLK_T_OUT, 0);
        let st = submit(
            &mut dev,
            &mem,
            &[
                (0x10000, 16, 0),
                (0xffff_f000, 4096, 0),
                (0x30000, 1, DESC_F_WRITE),
            ],
            0x30000,
        );
        assert_eq!(st, VIRTIO_BLK_S_IOERR);
        header(&mem, 77, 0);
        assert_eq!(
            submit(
                &mut dev,
                &mem,
                &[(0x10000, 16, 0), (0x30000, 1, DESC_F_WRITE)],
                0x30000
            ),
            VIRTIO_BLK_S_UNSUPP
        );
        assert_eq!(std::fs::read(img.path()).unwrap(), before);
        assert_eq!(dev.metrics().errors.load(Ordering::Relaxed), 3);
        // The process's guest log counted them too (other tests may add to it meanwhile).
        let bad = log.count(crate::guest_log::GuestError::BadBlockRequest) - bad_before;
        assert!(bad >= 3, "{bad}");
    }

    #[test]
    fn config_space_reports_capacity_and_block_size() {
        let img = image(3);
        let dev = Block::new(img.path(), false, "x", ram_for(&mem()), 0).unwrap();
        let mut cap = [0u8; 8];
        dev.read_config(0, &mut cap);
        assert_eq!(u64::from_le_bytes(cap), 3 * 4096 / 512);
        let mut bs = [0u8; 4];
        dev.read_config(20, &mut bs);
        assert_eq!(u32::from_le_bytes(bs), 4096);
        dev.read_config(u64::MAX, &mut bs);
        assert_eq!(bs, [0; 4]);
    }

    #[test]
    fn bad_images_are_clear_errors() {
        let empty = tempfile::NamedTempFile::new().unwrap();
        assert!(matches!(
            Block::new(empty.path(), false, "x", ram_for(&mem()), 0),
            Err(BlockError::TooSmall { .. })
        ));
        assert!(matches!(
            Block::new(
                Path::new("/nonexistent/disk.img"),
                false,
                "x",
                ram_for(&mem()),
                0
            ),
            Err(BlockError::Open { .. })
        ));
        let img = image(1);
        assert!(matches!(
            Block::new(
                img.path(),
                false,
                "a-very-long-disk-identifier",
                ram_for(&mem()),
                0
            ),
            Err(BlockError::IdTooLong(_))
        ));
    }
}
