//! Extends the boot identity map (0..4 GiB, built at link time in `boot.rs`)
//! to RAM above 4 GiB, with 2 MiB user-accessible pages.
//!
//! Runs in ring 3: the page tables are ordinary identity-mapped memory. Only
//! not-present PDPT entries are filled, which needs no TLB invalidation.

use crate::boot::boot_pdpt;
use crate::bootinfo::BootInfo;

const GIB: u64 = 1 << 30;
const PAGE_2M: u64 = 1 << 21;
/// P | RW | US for a table pointer.
const TABLE_FLAGS: u64 = 0x7;
/// P | RW | US | PS for a 2 MiB page.
const LARGE_PAGE_FLAGS: u64 = 0x87;
/// One PDPT covers 512 GiB.
const MAX_MAPPED: u64 = 512 * GIB;

/// Maps all RAM above 4 GiB. Returns the number of bytes newly mapped.
pub fn map_high_ram(boot: &BootInfo) -> Result<u64, &'static str> {
    let top = boot
        .regions()
        .iter()
        .filter(|r| r.is_ram())
        .map(|r| r.end())
        .max()
        .unwrap_or(0);
    if top > MAX_MAPPED {
        println!("warning: RAM above 512 GiB is not mapped");
    }
    let top = top.min(MAX_MAPPED);
    let pdpt = &raw mut boot_pdpt as *mut u64;
    let mut mapped = 0;
    let mut gib = 4;
    while gib * GIB < top {
        let base = gib * GIB;
        let has_ram = boot
            .regions()
            .iter()
            .any(|r| r.is_ram() && r.base < base + GIB && r.end() > base);
        if has_ram {
            let pd = crate::early_alloc::alloc_pages(1).ok_or("out of memory for page tables")?
                as *mut u64;
            for i in 0..512u64 {
                // SAFETY: `pd` is a fresh zeroed page from the early allocator.
                unsafe {
                    pd.add(i as usize)
                        .write((base + i * PAGE_2M) | LARGE_PAGE_FLAGS)
                };
            }
            // SAFETY: PDPT entry `gib` (< 512) is not present yet, so installing it
            // needs no invalidation; the PDPT is identity-mapped writable.
            unsafe {
                pdpt.add(gib as usize)
                    .write_volatile(pd as u64 | TABLE_FLAGS)
            };
            mapped += GIB;
        }
        gib += 1;
    }
    Ok(mapped)
}
