//! Split virtqueue in guest RAM (descriptor table, available ring, used ring),
//! driven by polling. Requests are submitted at queue depth 1: every chain
//! starts at descriptor 0, so no free list is needed.

use core::sync::atomic::{Ordering, fence};

use crate::early_alloc::{PAGE_SIZE, alloc_pages};

const DESC_F_NEXT: u16 = 1;
const DESC_F_WRITE: u16 = 2;
/// Available-ring flag: the driver does not want interrupts (it polls).
const AVAIL_F_NO_INTERRUPT: u16 = 1;
/// Used-ring flag: the device does not need notifications right now.
const USED_F_NO_NOTIFY: u16 = 1;

/// One buffer of a request chain.
#[derive(Clone, Copy)]
pub struct Segment {
    pub addr: u64,
    pub len: u32,
    /// True if the device writes this buffer (device-writable).
    pub device_writes: bool,
}

#[repr(C)]
struct Descriptor {
    addr: u64,
    len: u32,
    flags: u16,
    next: u16,
}

pub struct SplitQueue {
    size: u16,
    desc: *mut Descriptor,
    /// Available ring: flags u16, idx u16, ring[size] u16.
    avail: *mut u16,
    /// Used ring: flags u16, idx u16, ring[size] {id u32, len u32}.
    used: *mut u16,
    next_avail: u16,
    last_used: u16,
}

fn pages_for(bytes: usize) -> usize {
    bytes.div_ceil(PAGE_SIZE)
}

impl SplitQueue {
    /// Allocates a zeroed queue of `size` entries: descriptor table and
    /// available ring share the first pages, the used ring starts on its own page.
    pub fn new(size: u16) -> Option<Self> {
        let n = usize::from(size);
        let desc_bytes = 16 * n;
        let avail_bytes = 6 + 2 * n;
        let used_bytes = 6 + 8 * n;
        let driver_pages = pages_for(desc_bytes + avail_bytes);
        let base = alloc_pages(driver_pages + pages_for(used_bytes))?;
        Some(Self {
            size,
            desc: base as *mut Descriptor,
            avail: (base + desc_bytes) as *mut u16,
            used: (base + driver_pages * PAGE_SIZE) as *mut u16,
            next_avail: 0,
            last_used: 0,
        })
    }

    /// Number of entries.
    pub fn size(&self) -> u16 {
        self.size
    }

    /// Guest-physical addresses of (descriptor table, available ring, used ring).
    pub fn addresses(&self) -> (u64, u64, u64) {
        (self.desc as u64, self.avail as u64, self.used as u64)
    }

    /// Tells the device not to interrupt us (before the queue is enabled).
    pub fn disable_interrupts(&mut self) {
        // SAFETY: avail points at this queue's ring, owned by the driver.
        unsafe { self.avail.write_volatile(AVAIL_F_NO_INTERRUPT) };
    }

    /// Publishes a descriptor chain built from `segments` (at most `size`).
    /// Returns the head descriptor index.
    pub fn submit(&mut self, segments: &[Segment]) -> u16 {
        assert!(!segments.is_empty() && segments.len() <= usize::from(self.size));
        for (i, seg) in segments.iter().enumerate() {
            let mut flags = if seg.device_writes { DESC_F_WRITE } else { 0 };
            if i + 1 < segments.len() {
                flags |= DESC_F_NEXT;
            }
            let d = Descriptor {
                addr: seg.addr,
                len: seg.len,
                flags,
                next: (i + 1) as u16,
            };
            // SAFETY: i < size, so the slot is inside the descriptor table; with
            // queue depth 1 the device owns no descriptor now.
            unsafe { self.desc.add(i).write_volatile(d) };
        }
        let head = 0u16;
        let slot = usize::from(self.next_avail % self.size);
        // SAFETY: ring[slot] is inside the available ring (slot < size).
        unsafe { self.avail.add(2 + slot).write_volatile(head) };
        // The ring entry and descriptors must be visible before the new index.
        fence(Ordering::Release);
        self.next_avail = self.next_avail.wrapping_add(1);
        // SAFETY: avail[1] is the available index, written only by the driver.
        unsafe { self.avail.add(1).write_volatile(self.next_avail) };
        head
    }

    /// Whether the device wants a notification for what was just published.
    pub fn needs_notify(&self) -> bool {
        // The index store must be globally visible before we read the flag.
        fence(Ordering::SeqCst);
        // SAFETY: used[0] is the used-ring flags word, written by the device.
        unsafe { self.used.read_volatile() & USED_F_NO_NOTIFY == 0 }
    }

    /// Returns the next used element (id, written length), if any.
    pub fn poll_used(&mut self) -> Option<(u32, u32)> {
        // SAFETY: used[1] is the used index, written by the device.
        let idx = unsafe { self.used.add(1).read_volatile() };
        if idx == self.last_used {
            return None;
        }
        fence(Ordering::Acquire);
        let slot = usize::from(self.last_used % self.size);
        // SAFETY: element `slot` (< size) lies at byte 4 + 8 * slot of the used ring.
        let (id, len) = unsafe {
            let elem = (self.used as *const u32).add(1 + 2 * slot);
            (elem.read_volatile(), elem.add(1).read_volatile())
        };
        self.last_used = self.last_used.wrapping_add(1);
        Some((id, len))
    }
}
