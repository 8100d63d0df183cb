//! Early boot memory: a bump allocator over the largest RAM region above the
//! kernel image (and below 4 GiB). It never frees. A later `mm` module (page
//! allocator, page cache, swap) is meant to take over the rest of RAM from
//! `remaining()` and the memory map in `BootInfo`. The `mm` module takes the
//! rest of the arena with `take_rest` once the drivers are set up.

use crate::bootinfo::BootInfo;
use crate::sync::SpinLock;

pub const PAGE_SIZE: usize = 4096;
const FOUR_GIB: u64 = 1 << 32;

struct Bump {
    next: usize,
    end: usize,
}

static BUMP: SpinLock<Bump> = SpinLock::new(Bump { next: 0, end: 0 });

const fn align_up(x: usize, align: usize) -> usize {
    (x + align - 1) & !(align - 1)
}

/// Picks the arena. Returns `[start, end)` or an error if no RAM follows the image.
pub fn init(boot: &BootInfo) -> Result<(usize, usize), &'static str> {
    let (_, kernel_end) = crate::boot::kernel_range();
    let kernel_end = kernel_end as u64;
    let best = boot
        .regions()
        .iter()
        .filter(|r| r.is_ram())
        .map(|r| (r.base.max(kernel_end), r.end().min(FOUR_GIB)))
        .filter(|(s, e)| s < e)
        .max_by_key(|(s, e)| e - s);
    let (start, end) = match best {
        Some(range) => range,
        None if boot.regions().is_empty() => {
            // No memory map (start_info version 0): assume 16 MiB after the image.
            println!("warning: no memory map; assuming 16 MiB of RAM after the kernel");
            (kernel_end, kernel_end + (16 << 20))
        }
        None => return Err("no RAM above the kernel image below 4 GiB"),
    };
    let mut bump = BUMP.lock();
    bump.next = align_up(start as usize, PAGE_SIZE);
    bump.end = (end as usize) & !(PAGE_SIZE - 1);
    Ok((bump.next, bump.end))
}

/// Allocates `size` bytes aligned to `align` (a power of two), zeroed.
pub fn alloc_zeroed(size: usize, align: usize) -> Option<usize> {
    let addr = {
        let mut bump = BUMP.lock();
        let addr = align_up(bump.next, align.max(8));
        let new_next = addr.checked_add(size)?;
        if new_next > bump.end {
            return None;
        }
        bump.next = new_next;
        addr
    };
    // SAFETY: [addr, addr + size) is RAM handed out exactly once by this allocator
    // and identity-mapped writable.
    unsafe { core::ptr::write_bytes(addr as *mut u8, 0, size) };
    Some(addr)
}

/// Allocates `count` zeroed 4 KiB pages.
pub fn alloc_pages(count: usize) -> Option<usize> {
    alloc_zeroed(count * PAGE_SIZE, PAGE_SIZE)
}

/// Hands out everything not allocated yet, without touching it: `[start, end)`,
/// page-aligned. Later allocations fail.
pub fn take_rest() -> (usize, usize) {
    let mut bump = BUMP.lock();
    let start = align_up(bump.next, PAGE_SIZE);
    let end = bump.end.max(start);
    bump.next = end;
    (start, end)
}
