//! What can go wrong while preparing a PVH boot: [`BootError`], one enum for the ELF, the
//! memory layout and the boot data. A leaf that the other files of the crate import.

use thiserror::Error;

/// What can go wrong while preparing a PVH boot.
#[derive(Debug, Error)]
pub enum BootError {
    #[error("the kernel is not an ELF file (bad magic)")]
    NotElf,
    #[error("the kernel is a 32-bit ELF; memvisor boots 64-bit (ELFCLASS64) x86-64 ELF files")]
    NotElf64,
    #[error("the kernel ELF is for machine {0}, not x86-64 (62)")]
    WrongMachine(u16),
    #[error("the kernel ELF is truncated: {0} lies past the end of the file")]
    Truncated(&'static str),
    #[error(
        "the kernel ELF has no PVH entry note (XEN_ELFNOTE_PHYS32_ENTRY); memvisor boots PVH kernels only"
    )]
    NoPvhNote,
    #[error("the kernel ELF has no loadable segment")]
    NoLoadSegment,
    #[error(
        "kernel segment at {paddr:#x}..{end:#x} does not fit in guest RAM (RAM ends at {ram_end:#x}); give the VM more memory"
    )]
    SegmentOutsideRam { paddr: u64, end: u64, ram_end: u64 },
    #[error("kernel segment at {paddr:#x} overlaps the boot data below {limit:#x}")]
    SegmentOverlapsBootData { paddr: u64, limit: u64 },
    #[error("the PVH entry point {0:#x} is not inside a loaded segment")]
    EntryOutsideImage(u32),
    #[error("memory size {size} bytes is below the minimum of {min} bytes (16 MiB)")]
    MemoryTooSmall { size: u64, min: u64 },
    #[error("memory size {size} bytes is not a multiple of 4 KiB")]
    MemoryNotPageAligned { size: u64 },
    #[error("the command line is {len} bytes; at most {max} bytes fit")]
    CmdlineTooLong { len: usize, max: usize },
    #[error("the command line contains a NUL byte")]
    CmdlineHasNul,
    #[error("writing boot data into guest memory failed")]
    GuestMemory(#[source] vm_memory::GuestMemoryError),
}
