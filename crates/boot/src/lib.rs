//! Boot protocol for x86-64 PVH guests: ELF loading, the guest-physical memory layout and `hvm_start_info`.
//!
//! Everything here is pure data handling so it is unit-tested without KVM. The VMM calls
//! [`PvhImage::parse`] on the guest ELF, [`RamLayout::new`] for the memory size, then
//! [`write_boot_data`] to place the kernel, the command line and the start-info block in guest
//! memory. The vCPU is then started at [`PvhImage::entry`] in 32-bit protected mode with `ebx`
//! pointing at [`START_INFO_ADDR`].
//!
//! | file | owns |
//! |---|---|
//! | `error.rs` | what can go wrong: [`BootError`] (a leaf) |
//! | `elf.rs` | ELF64 parsing and the `XEN_ELFNOTE_PHYS32_ENTRY` note: [`PvhImage`] |
//! | `layout.rs` | the guest-physical RAM layout and the memory map it reports: [`RamLayout`] |
//! | `start_info.rs` | writing the kernel, the GDT, `hvm_start_info`, the memory map and the command line into guest memory |

mod elf;
mod error;
mod layout;
mod start_info;

#[cfg(any(test, feature = "test-utils"))]
pub use elf::test_utils;
pub use elf::{LoadSegment, PvhImage};
pub use error::BootError;
pub use layout::{
    RamLayout, RamRegion, FIRST_HOLE_START, HIGH_RAM_START, LOW_RAM_END, MIN_MEM_SIZE,
};
pub use start_info::{
    write_boot_data, BootData, BOOT_GDT, CMDLINE_ADDR, CMDLINE_MAX, CODE_SELECTOR, DATA_SELECTOR,
    GDT_ADDR, MEMMAP_ADDR, START_INFO_ADDR,
};
