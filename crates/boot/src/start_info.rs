//! Placing the kernel, the command line, the memory map and `hvm_start_info` in guest memory.
//!
//! Guest-physical layout of the boot data (all below the kernel, which PVH kernels load at 1 MiB):
//!
//! | address | what |
//! |---|---|
//! | [`GDT_ADDR`] | a flat GDT matching the entry segment registers |
//! | [`START_INFO_ADDR`] | `struct hvm_start_info` (version 1) |
//! | [`MEMMAP_ADDR`] | `struct hvm_memmap_table_entry[]` |
//! | [`CMDLINE_ADDR`] | the NUL-terminated command line, at most [`CMDLINE_MAX`] bytes with its NUL |

use vm_memory::{Bytes, GuestAddress, GuestMemory};

use crate::elf::PvhImage;
use crate::error::BootError;
use crate::layout::RamLayout;

pub const GDT_ADDR: u64 = 0x500;
pub const START_INFO_ADDR: u64 = 0x6000;
pub const MEMMAP_ADDR: u64 = 0x6040;
pub const CMDLINE_ADDR: u64 = 0x7000;
pub const CMDLINE_MAX: usize = 2048;
/// Kernel segments must start at or above this address, clear of the boot data.
const BOOT_DATA_END: u64 = CMDLINE_ADDR + CMDLINE_MAX as u64;

const HVM_START_MAGIC: u32 = 0x336e_c578;
const HVM_MEMMAP_TYPE_RAM: u32 = 1;

/// Flat 4 GiB segments for the 32-bit entry: null, null, code (selector 0x10), data (0x18).
pub const BOOT_GDT: [u64; 4] = [0, 0, 0x00cf_9b00_0000_ffff, 0x00cf_9300_0000_ffff];
pub const CODE_SELECTOR: u16 = 0x10;
pub const DATA_SELECTOR: u16 = 0x18;

/// What the vCPU needs to start the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BootData {
    /// 32-bit entry point (`eip`).
    pub entry: u32,
    /// Guest-physical address of `hvm_start_info` (`ebx`).
    pub start_info: u64,
}

fn start_info_bytes(cmdline_len: usize, memmap_entries: u32) -> [u8; 56] {
    let mut b = [0u8; 56];
    b[0..4].copy_from_slice(&HVM_START_MAGIC.to_le_bytes());
    b[4..8].copy_from_slice(&1u32.to_le_bytes()); // version 1: has the memory map
                                                  // flags, nr_modules, modlist_paddr stay 0.
    let cmdline = if cmdline_len > 0 { CMDLINE_ADDR } else { 0 };
    b[24..32].copy_from_slice(&cmdline.to_le_bytes());
    // rsdp_paddr stays 0: no ACPI tables.
    b[40..48].copy_from_slice(&MEMMAP_ADDR.to_le_bytes());
    b[48..52].copy_from_slice(&memmap_entries.to_le_bytes());
    b
}

/// Loads `image` (parsed from `elf`) and the boot data into `mem`, which must cover `layout`.
pub fn write_boot_data<M: GuestMemory>(
    mem: &M,
    layout: &RamLayout,
    image: &PvhImage,
    elf: &[u8],
    cmdline: &str,
) -> Result<BootData, BootError> {
    if cmdline.len() >= CMDLINE_MAX {
        return Err(BootError::CmdlineTooLong {
            len: cmdline.len(),
            max: CMDLINE_MAX - 1,
        });
    }
    if cmdline.contains('\0') {
        return Err(BootError::CmdlineHasNul);
    }
    for s in &image.segments {
        if s.paddr < BOOT_DATA_END {
            return Err(BootError::SegmentOverlapsBootData {
                paddr: s.paddr,
                limit: BOOT_DATA_END,
            });
        }
        if !layout.contains(s.paddr, s.memsz) {
            return Err(BootError::SegmentOutsideRam {
                paddr: s.paddr,
                end: s.end(),
                ram_end: layout.end(),
            });
        }
    }
    let w = |addr: u64, bytes: &[u8]| {
        mem.write_slice(bytes, GuestAddress(addr))
            .map_err(BootError::GuestMemory)
    };
    for s in &image.segments {
        // Offsets and sizes were bounds-checked by `PvhImage::parse`.
        let start =
            usize::try_from(s.file_offset).map_err(|_| BootError::Truncated("a segment"))?;
        let len = usize::try_from(s.filesz).map_err(|_| BootError::Truncated("a segment"))?;
        w(s.paddr, &elf[start..start + len])?;
        // Anonymous guest RAM is zero already; the BSS needs no write.
    }
    let gdt: Vec<u8> = BOOT_GDT.iter().flat_map(|d| d.to_le_bytes()).collect();
    w(GDT_ADDR, &gdt)?;
    let usable = layout.usable_ranges();
    let mut memmap = Vec::with_capacity(usable.len() * 24);
    for r in &usable {
        memmap.extend_from_slice(&r.guest_addr.to_le_bytes());
        memmap.extend_from_slice(&r.size.to_le_bytes());
        memmap.extend_from_slice(&HVM_MEMMAP_TYPE_RAM.to_le_bytes());
        memmap.extend_from_slice(&0u32.to_le_bytes());
    }
    w(MEMMAP_ADDR, &memmap)?;
    let mut cl = cmdline.as_bytes().to_vec();
    cl.push(0);
    w(CMDLINE_ADDR, &cl)?;
    let entries = u32::try_from(usable.len()).expect("a handful of ranges");
    w(START_INFO_ADDR, &start_info_bytes(cmdline.len(), entries))?;
    Ok(BootData {
        entry: image.entry,
        start_info: START_INFO_ADDR,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elf::test_utils::make_elf;
    use vm_memory::GuestMemoryMmap;

    fn mem(size: u64) -> (GuestMemoryMmap, RamLayout) {
        let layout = RamLayout::new(size).unwrap();
        let ranges: Vec<(GuestAddress, usize)> = layout
            .regions()
            .iter()
            .map(|r| (GuestAddress(r.guest_addr), usize::try_from(r.size).unwrap()))
            .collect();
        (GuestMemoryMmap::from_ranges(&ranges).unwrap(), layout)
    }

    fn read_u64(m: &GuestMemoryMmap, a: u64) -> u64 {
        m.read_obj::<u64>(GuestAddress(a)).unwrap()
    }

    #[test]
    fn writes_kernel_start_info_memmap_and_cmdline() {
        let (m, layout) = mem(64 << 20);
        let code: Vec<u8> = (0..200u8).collect();
        let elf = make_elf(0x10_0000, &code, Some(0x10_0004));
        let img = PvhImage::parse(&elf).unwrap();
        let boot = write_boot_data(&m, &layout, &img, &elf, "workload=selftest cpus=2").unwrap();
        assert_eq!(
            boot,
            BootData {
                entry: 0x10_0004,
                start_info: START_INFO_ADDR
            }
        );

        let mut got = vec![0u8; code.len()];
        m.read_slice(&mut got, GuestAddress(0x10_0000)).unwrap();
        assert_eq!(got, code);

        assert_eq!(
            m.read_obj::<u32>(GuestAddress(START_INFO_ADDR)).unwrap(),
            HVM_START_MAGIC
        );
        assert_eq!(
            m.read_obj::<u32>(GuestAddress(START_INFO_ADDR + 4))
                .unwrap(),
            1
        );
        assert_eq!(read_u64(&m, START_INFO_ADDR + 24), CMDLINE_ADDR);
        assert_eq!(read_u64(&m, START_INFO_ADDR + 40), MEMMAP_ADDR);
        assert_eq!(
            m.read_obj::<u32>(GuestAddress(START_INFO_ADDR + 48))
                .unwrap(),
            2
        );
        assert_eq!(read_u64(&m, MEMMAP_ADDR), 0);
        assert_eq!(read_u64(&m, MEMMAP_ADDR + 8), 0xa_0000);
        assert_eq!(read_u64(&m, MEMMAP_ADDR + 24), 0x10_0000);
        assert_eq!(read_u64(&m, MEMMAP_ADDR + 32), (64 << 20) - 0x10_0000);

        let mut cl = [0u8; 25];
        m.read_slice(&mut cl, GuestAddress(CMDLINE_ADDR)).unwrap();
        assert_eq!(&cl, b"workload=selftest cpus=2\0");
        assert_eq!(read_u64(&m, GDT_ADDR + 16), BOOT_GDT[2]);
    }

    #[test]
    fn rejects_kernel_beyond_ram() {
        let (m, layout) = mem(16 << 20);
        let elf = make_elf(0x100_0000, &[0x90; 16], Some(0x100_0000));
        let img = PvhImage::parse(&elf).unwrap();
        assert!(matches!(
            write_boot_data(&m, &layout, &img, &elf, ""),
            Err(BootError::SegmentOutsideRam { .. })
        ));
    }

    #[test]
    fn rejects_kernel_over_boot_data_and_long_cmdline() {
        let (m, layout) = mem(16 << 20);
        let elf = make_elf(0x6000, &[0x90; 16], Some(0x6000));
        let img = PvhImage::parse(&elf).unwrap();
        assert!(matches!(
            write_boot_data(&m, &layout, &img, &elf, ""),
            Err(BootError::SegmentOverlapsBootData { .. })
        ));
        let elf = make_elf(0x10_0000, &[0x90; 16], Some(0x10_0000));
        let img = PvhImage::parse(&elf).unwrap();
        let long = "x".repeat(CMDLINE_MAX);
        assert!(matches!(
            write_boot_data(&m, &layout, &img, &elf, &long),
            Err(BootError::CmdlineTooLong { .. })
        ));
    }
}
