//! PVH `hvm_start_info` parsing: validates what the loader passed in EBX and
//! copies out the command line and the memory map, so nothing refers to the
//! loader's memory afterwards (the early allocator may reuse it).

use core::ptr::read_unaligned;

const START_INFO_MAGIC: u32 = 0x336e_c578;
/// Memory-map entry type for usable RAM.
pub const E820_RAM: u32 = 1;
pub const MAX_REGIONS: usize = 64;
pub const CMDLINE_MAX: usize = 2048;

/// `struct hvm_start_info` (version 1 layout; version 0 ends after `rsdp_paddr`).
#[repr(C)]
#[derive(Clone, Copy)]
struct HvmStartInfo {
    magic: u32,
    version: u32,
    flags: u32,
    nr_modules: u32,
    modlist_paddr: u64,
    cmdline_paddr: u64,
    rsdp_paddr: u64,
    memmap_paddr: u64,
    memmap_entries: u32,
    reserved: u32,
}

/// `struct hvm_memmap_table_entry`.
#[repr(C)]
#[derive(Clone, Copy)]
struct HvmMemmapEntry {
    addr: u64,
    size: u64,
    kind: u32,
    reserved: u32,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct MemRegion {
    pub base: u64,
    pub size: u64,
    pub kind: u32,
}

impl MemRegion {
    pub fn end(&self) -> u64 {
        self.base.saturating_add(self.size)
    }
    pub fn is_ram(&self) -> bool {
        self.kind == E820_RAM
    }
}

/// Boot information copied out of the loader's structures.
#[allow(dead_code)] // start_info/modules/RSDP are kept for later users (mm, ACPI)
pub struct BootInfo {
    pub start_info_paddr: u64,
    pub version: u32,
    pub nr_modules: u32,
    pub rsdp_paddr: u64,
    cmdline: [u8; CMDLINE_MAX],
    cmdline_len: usize,
    pub cmdline_truncated: bool,
    regions: [MemRegion; MAX_REGIONS],
    nr_regions: usize,
    pub regions_truncated: bool,
}

impl BootInfo {
    pub fn cmdline(&self) -> &str {
        core::str::from_utf8(&self.cmdline[..self.cmdline_len]).unwrap_or("")
    }

    /// The memory map (empty if the loader passed a version-0 start_info).
    pub fn regions(&self) -> &[MemRegion] {
        &self.regions[..self.nr_regions]
    }

    pub fn total_ram(&self) -> u64 {
        self.regions()
            .iter()
            .filter(|r| r.is_ram())
            .map(|r| r.size)
            .sum()
    }
}

/// Parses the start_info at physical address `paddr` (identity-mapped).
pub fn parse(paddr: u64) -> Result<BootInfo, &'static str> {
    if paddr == 0 {
        return Err("start_info pointer (EBX) is 0");
    }
    // SAFETY: the PVH contract says EBX points at a start_info in RAM, which is
    // identity-mapped; unaligned reads make no alignment assumption. We read
    // the version-0 part first and the version-1 tail only if version >= 1.
    let magic = unsafe { read_unaligned(paddr as *const u32) };
    if magic != START_INFO_MAGIC {
        return Err("start_info magic is not 0x336ec578");
    }
    // SAFETY: as above; the header is at least 48 bytes in every version.
    let mut si = unsafe { read_unaligned(paddr as *const HvmStartInfo) };
    if si.version < 1 {
        si.memmap_paddr = 0;
        si.memmap_entries = 0;
    }

    let mut info = BootInfo {
        start_info_paddr: paddr,
        version: si.version,
        nr_modules: si.nr_modules,
        rsdp_paddr: si.rsdp_paddr,
        cmdline: [0; CMDLINE_MAX],
        cmdline_len: 0,
        cmdline_truncated: false,
        regions: [MemRegion::default(); MAX_REGIONS],
        nr_regions: 0,
        regions_truncated: false,
    };

    if si.cmdline_paddr != 0 {
        let src = si.cmdline_paddr as *const u8;
        let mut len = 0;
        loop {
            // SAFETY: the command line is a NUL-terminated string in RAM; we stop
            // at the NUL or at our buffer size, whichever comes first.
            let byte = unsafe { src.add(len).read_volatile() };
            if byte == 0 {
                break;
            }
            if len == CMDLINE_MAX {
                info.cmdline_truncated = true;
                break;
            }
            info.cmdline[len] = byte;
            len += 1;
        }
        info.cmdline_len = len;
    }

    let entries = si.memmap_entries as usize;
    if si.memmap_paddr != 0 {
        info.regions_truncated = entries > MAX_REGIONS;
        for i in 0..entries.min(MAX_REGIONS) {
            // SAFETY: the loader describes `memmap_entries` entries at `memmap_paddr`.
            let e = unsafe { read_unaligned((si.memmap_paddr as *const HvmMemmapEntry).add(i)) };
            info.regions[i] = MemRegion {
                base: e.addr,
                size: e.size,
                kind: e.kind,
            };
        }
        info.nr_regions = entries.min(MAX_REGIONS);
    }
    Ok(info)
}
