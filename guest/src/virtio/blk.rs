//! virtio-blk polling driver (device ID 2): initialisation, feature
//! negotiation, one request queue at depth 1, and IN/OUT/FLUSH/GET_ID requests.

use core::sync::atomic::{Ordering, fence};

use super::mmio::{MmioTransport, STATUS_DRIVER_OK};
use super::queue::{Segment, SplitQueue};
use super::{F_VERSION_1, STATUS_NEGOTIATED};
use crate::cpu::{pause, rdtsc};

pub const SECTOR_SIZE: u64 = 512;
/// Longest device ID virtio-blk GET_ID can return (the spec's VIRTIO_BLK_ID_BYTES).
pub const DISK_ID_MAX: usize = 20;
/// Bytes per page transferred by `read_pages`/`write_pages`.
const PAGE: usize = 4096;

const F_SIZE_MAX: u64 = 1 << 1;
const F_SEG_MAX: u64 = 1 << 2;
const F_RO: u64 = 1 << 5;
const F_BLK_SIZE: u64 = 1 << 6;
const F_FLUSH: u64 = 1 << 9;
const ACCEPTED_FEATURES: u64 = F_VERSION_1 | F_SIZE_MAX | F_SEG_MAX | F_RO | F_BLK_SIZE | F_FLUSH;

const CONFIG_CAPACITY: usize = 0;
const CONFIG_SIZE_MAX: usize = 8;
const CONFIG_SEG_MAX: usize = 12;
const CONFIG_BLK_SIZE: usize = 20;

const REQ_IN: u32 = 0;
const REQ_OUT: u32 = 1;
const REQ_FLUSH: u32 = 4;
const REQ_GET_ID: u32 = 8;

const STATUS_OK: u8 = 0;
const STATUS_IOERR: u8 = 1;
const STATUS_UNSUPP: u8 = 2;
/// Value placed in the status byte before submission, to catch a device that never writes it.
const STATUS_UNWRITTEN: u8 = 0xff;

const MAX_QUEUE_SIZE: u32 = 128;
/// Upper bound on one data descriptor when the device sets no SIZE_MAX.
const DEFAULT_SEGMENT_BYTES: u32 = 1 << 20;
/// Give up on a request after this long.
const REQUEST_TIMEOUT_MS: u64 = 30_000;
/// Maximum data descriptors we build per request.
const MAX_DATA_SEGMENTS: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlkError {
    /// The device completed the request with VIRTIO_BLK_S_IOERR.
    Io,
    /// VIRTIO_BLK_S_UNSUPP.
    Unsupported,
    /// Any other status value (including "never written").
    BadStatus(u8),
    ReadOnly,
    OutOfRange,
    Unaligned,
    Timeout,
    /// The used ring returned a descriptor we did not submit.
    BadCompletion,
}

/// Request header, device-readable.
#[repr(C)]
struct RequestHeader {
    kind: u32,
    reserved: u32,
    sector: u64,
}

/// Per-device DMA scratch page: header at 0, status at 16, ID buffer at 32.
const SCRATCH_HEADER: usize = 0;
const SCRATCH_STATUS: usize = 16;
const SCRATCH_ID: usize = 32;

#[derive(Clone, Copy, Default)]
pub struct BlkStats {
    pub requests: u64,
    pub notifies: u64,
    /// TSC cycles spent from handing requests to the device until they completed.
    pub wait_cycles: u64,
}

pub struct BlkDevice {
    pub slot: usize,
    transport: MmioTransport,
    queue: SplitQueue,
    scratch: usize,
    /// Negotiated feature bits.
    #[allow(dead_code)]
    pub features: u64,
    /// Capacity in 512-byte sectors.
    pub capacity: u64,
    /// Logical block size in bytes (512 unless BLK_SIZE is offered).
    pub block_size: u32,
    pub read_only: bool,
    pub has_flush: bool,
    max_segment_bytes: u32,
    max_data_segments: usize,
    id: [u8; DISK_ID_MAX],
    id_len: usize,
    pub id_ok: bool,
    pub stats: BlkStats,
    /// Acknowledge InterruptStatus after each request (off: costs 1-2 VM exits).
    pub ack_interrupts: bool,
}

impl BlkDevice {
    /// Brings a block device up to DRIVER_OK and fetches its ID.
    pub fn init(slot: usize, transport: MmioTransport) -> Result<Self, &'static str> {
        let features = super::negotiate(&transport, ACCEPTED_FEATURES)?;
        let status = STATUS_NEGOTIATED;
        let queue = super::setup_queue(&transport, 0, MAX_QUEUE_SIZE)?;
        let size = u32::from(queue.size());

        let capacity = transport.config_read64(CONFIG_CAPACITY);
        let block_size = if features & F_BLK_SIZE != 0 {
            transport.config_read32(CONFIG_BLK_SIZE)
        } else {
            512
        };
        let max_segment_bytes = if features & F_SIZE_MAX != 0 {
            transport
                .config_read32(CONFIG_SIZE_MAX)
                .clamp(4096, DEFAULT_SEGMENT_BYTES)
        } else {
            DEFAULT_SEGMENT_BYTES
        };
        let seg_max = if features & F_SEG_MAX != 0 {
            transport.config_read32(CONFIG_SEG_MAX)
        } else {
            1
        };
        // Two descriptors per chain are header and status.
        let max_data_segments = (seg_max.max(1) as usize)
            .min(size as usize - 2)
            .min(MAX_DATA_SEGMENTS);

        transport.set_status(status | STATUS_DRIVER_OK);

        let scratch =
            crate::early_alloc::alloc_pages(1).ok_or("out of memory for request scratch")?;
        let mut dev = BlkDevice {
            slot,
            transport,
            queue,
            scratch,
            features,
            capacity,
            block_size: if block_size.is_power_of_two() && block_size >= 512 {
                block_size
            } else {
                512
            },
            read_only: features & F_RO != 0,
            has_flush: features & F_FLUSH != 0,
            max_segment_bytes,
            max_data_segments,
            id: [0; DISK_ID_MAX],
            id_len: 0,
            id_ok: false,
            stats: BlkStats::default(),
            ack_interrupts: false,
        };
        dev.fetch_id();
        Ok(dev)
    }

    /// The serial string from GET_ID (empty if unsupported).
    pub fn id(&self) -> &[u8] {
        &self.id[..self.id_len]
    }

    pub fn id_str(&self) -> &str {
        core::str::from_utf8(self.id()).unwrap_or("?")
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.capacity * SECTOR_SIZE
    }

    /// Largest data length a single request may carry.
    pub fn max_request_bytes(&self) -> usize {
        let bytes = self.max_segment_bytes as usize * self.max_data_segments;
        bytes & !(self.block_size as usize - 1)
    }

    fn fetch_id(&mut self) {
        let buf = self.scratch + SCRATCH_ID;
        match self.request(REQ_GET_ID, 0, buf as u64, DISK_ID_MAX, true) {
            Ok(()) => {
                // SAFETY: the device wrote up to 20 bytes of ID into our scratch page.
                let raw = unsafe { core::slice::from_raw_parts(buf as *const u8, DISK_ID_MAX) };
                self.id_len = raw.iter().position(|&b| b == 0).unwrap_or(DISK_ID_MAX);
                self.id[..self.id_len].copy_from_slice(&raw[..self.id_len]);
                self.id_ok = true;
            }
            Err(e) => println!("virtio-blk: slot {}: GET_ID failed: {:?}", self.slot, e),
        }
    }

    fn check_range(&self, sector: u64, len: usize) -> Result<(), BlkError> {
        let bs = u64::from(self.block_size);
        if !(sector * SECTOR_SIZE).is_multiple_of(bs) || !(len as u64).is_multiple_of(bs) {
            return Err(BlkError::Unaligned);
        }
        let end = sector
            .checked_add(len as u64 / SECTOR_SIZE)
            .ok_or(BlkError::OutOfRange)?;
        if end > self.capacity {
            return Err(BlkError::OutOfRange);
        }
        Ok(())
    }

    /// Reads `buf.len()` bytes (a multiple of the block size) starting at `sector`.
    pub fn read(&mut self, sector: u64, buf: &mut [u8]) -> Result<(), BlkError> {
        self.check_range(sector, buf.len())?;
        self.transfer(REQ_IN, sector, buf.as_mut_ptr() as u64, buf.len(), true)
    }

    /// Writes `buf` (a multiple of the block size) starting at `sector`.
    pub fn write(&mut self, sector: u64, buf: &[u8]) -> Result<(), BlkError> {
        if self.read_only {
            return Err(BlkError::ReadOnly);
        }
        self.check_range(sector, buf.len())?;
        self.transfer(REQ_OUT, sector, buf.as_ptr() as u64, buf.len(), false)
    }

    /// Reads consecutive blocks into the 4 KiB pages at `pages` (guest-physical addresses),
    /// one data descriptor per page, as few requests as the device allows.
    pub fn read_pages(&mut self, sector: u64, pages: &[u64]) -> Result<(), BlkError> {
        self.check_range(sector, pages.len() * PAGE)?;
        self.page_requests(REQ_IN, sector, pages, true)
    }

    /// Writes the 4 KiB pages at `pages` to consecutive blocks starting at `sector`.
    pub fn write_pages(&mut self, sector: u64, pages: &[u64]) -> Result<(), BlkError> {
        if self.read_only {
            return Err(BlkError::ReadOnly);
        }
        self.check_range(sector, pages.len() * PAGE)?;
        self.page_requests(REQ_OUT, sector, pages, false)
    }

    fn page_requests(
        &mut self,
        kind: u32,
        sector: u64,
        pages: &[u64],
        device_writes: bool,
    ) -> Result<(), BlkError> {
        let per_request = self.max_data_segments.max(1);
        for (i, chunk) in pages.chunks(per_request).enumerate() {
            let s = sector + (i * per_request * PAGE) as u64 / SECTOR_SIZE;
            self.submit(
                kind,
                s,
                chunk.iter().map(|&a| (a, PAGE as u32)),
                device_writes,
            )?;
        }
        Ok(())
    }

    /// Flushes the device's write cache (no-op if FLUSH was not negotiated).
    pub fn flush(&mut self) -> Result<(), BlkError> {
        if !self.has_flush {
            return Ok(());
        }
        self.request(REQ_FLUSH, 0, 0, 0, false)
    }

    /// Splits a transfer into requests the device accepts.
    fn transfer(
        &mut self,
        kind: u32,
        sector: u64,
        addr: u64,
        len: usize,
        device_writes: bool,
    ) -> Result<(), BlkError> {
        let max = self.max_request_bytes();
        let mut done = 0;
        while done < len {
            let chunk = (len - done).min(max);
            let chunk_sector = sector + done as u64 / SECTOR_SIZE;
            self.request(kind, chunk_sector, addr + done as u64, chunk, device_writes)?;
            done += chunk;
        }
        Ok(())
    }

    /// Issues one request and polls for its completion.
    fn request(
        &mut self,
        kind: u32,
        sector: u64,
        data: u64,
        len: usize,
        device_writes: bool,
    ) -> Result<(), BlkError> {
        let max = self.max_segment_bytes as usize;
        let pieces = (0..len.div_ceil(max)).map(|k| {
            let off = k * max;
            (data + off as u64, (len - off).min(max) as u32)
        });
        self.submit(kind, sector, pieces, device_writes)
    }

    /// Issues one request whose data buffers are `data` (address, length) and polls for it.
    fn submit(
        &mut self,
        kind: u32,
        sector: u64,
        data: impl Iterator<Item = (u64, u32)>,
        device_writes: bool,
    ) -> Result<(), BlkError> {
        let header = (self.scratch + SCRATCH_HEADER) as *mut RequestHeader;
        let status = (self.scratch + SCRATCH_STATUS) as *mut u8;
        // SAFETY: the scratch page belongs to this device, and no request is in
        // flight (depth 1), so the device is not reading or writing it.
        unsafe {
            header.write_volatile(RequestHeader {
                kind,
                reserved: 0,
                sector,
            });
            status.write_volatile(STATUS_UNWRITTEN);
        }

        let mut segments = [Segment {
            addr: 0,
            len: 0,
            device_writes: false,
        }; MAX_DATA_SEGMENTS + 2];
        segments[0] = Segment {
            addr: header as u64,
            len: 16,
            device_writes: false,
        };
        let mut n = 1;
        for (addr, len) in data {
            assert!(
                n <= MAX_DATA_SEGMENTS,
                "too many data segments in one request"
            );
            segments[n] = Segment {
                addr,
                len,
                device_writes,
            };
            n += 1;
        }
        segments[n] = Segment {
            addr: status as u64,
            len: 1,
            device_writes: true,
        };
        n += 1;

        let submitted = rdtsc();
        let head = self.queue.submit(&segments[..n]);
        self.stats.requests += 1;
        if self.queue.needs_notify() {
            self.transport.notify(0);
            self.stats.notifies += 1;
        }

        let deadline = crate::time::deadline_after_ms(REQUEST_TIMEOUT_MS);
        let (id, _len) = loop {
            if let Some(done) = self.queue.poll_used() {
                break done;
            }
            if rdtsc() > deadline {
                return Err(BlkError::Timeout);
            }
            pause();
        };
        self.stats.wait_cycles += rdtsc().saturating_sub(submitted);
        if self.ack_interrupts {
            self.transport.ack_interrupts();
        }
        if id != u32::from(head) {
            return Err(BlkError::BadCompletion);
        }
        fence(Ordering::Acquire);
        // SAFETY: the device has returned the chain, so the status byte is ours again.
        match unsafe { status.read_volatile() } {
            STATUS_OK => Ok(()),
            STATUS_IOERR => Err(BlkError::Io),
            STATUS_UNSUPP => Err(BlkError::Unsupported),
            other => Err(BlkError::BadStatus(other)),
        }
    }
}
