//! The guest-physical RAM layout: where RAM lies and which ranges the memory map reports.
//!
//! Like QEMU microvm and Firecracker, RAM starts at 0 and runs up to the 32-bit MMIO hole; what
//! does not fit below [`LOW_RAM_END`] continues at [`HIGH_RAM_START`] (4 GiB).

use crate::error::BootError;

/// RAM below this address is usable; the 32-bit device window (virtio-mmio, IOAPIC, LAPIC) lies above.
pub const LOW_RAM_END: u64 = 0xc000_0000;
/// Where RAM continues when the VM has more than [`LOW_RAM_END`] bytes.
pub const HIGH_RAM_START: u64 = 0x1_0000_0000;
/// The legacy VGA/BIOS hole: RAM backs it, but the memory map does not report it as usable.
pub const FIRST_HOLE_START: u64 = 0xa_0000;
const FIRST_HOLE_END: u64 = 0x10_0000;
/// The smallest VM memvisor starts.
pub const MIN_MEM_SIZE: u64 = 16 << 20;
const PAGE_SIZE: u64 = 4096;

/// One contiguous range of guest RAM, backed by one host mapping and one KVM memory slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RamRegion {
    pub guest_addr: u64,
    pub size: u64,
}

impl RamRegion {
    pub fn end(&self) -> u64 {
        self.guest_addr + self.size
    }
}

/// Where a VM's RAM lies in guest-physical address space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RamLayout {
    regions: Vec<RamRegion>,
}

impl RamLayout {
    /// Lays out `mem_size` bytes of RAM.
    pub fn new(mem_size: u64) -> Result<Self, BootError> {
        if mem_size < MIN_MEM_SIZE {
            return Err(BootError::MemoryTooSmall {
                size: mem_size,
                min: MIN_MEM_SIZE,
            });
        }
        if mem_size % PAGE_SIZE != 0 {
            return Err(BootError::MemoryNotPageAligned { size: mem_size });
        }
        let low = mem_size.min(LOW_RAM_END);
        let mut regions = vec![RamRegion {
            guest_addr: 0,
            size: low,
        }];
        if mem_size > low {
            regions.push(RamRegion {
                guest_addr: HIGH_RAM_START,
                size: mem_size - low,
            });
        }
        Ok(RamLayout { regions })
    }

    /// The RAM regions, in ascending address order.
    pub fn regions(&self) -> &[RamRegion] {
        &self.regions
    }

    /// Total bytes of RAM.
    pub fn size(&self) -> u64 {
        self.regions.iter().map(|r| r.size).sum()
    }

    /// One past the highest RAM address.
    pub fn end(&self) -> u64 {
        self.regions.last().map_or(0, RamRegion::end)
    }

    /// Whether `[addr, addr + len)` lies entirely inside one RAM region.
    pub fn contains(&self, addr: u64, len: u64) -> bool {
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        self.regions
            .iter()
            .any(|r| addr >= r.guest_addr && end <= r.end())
    }

    /// The usable-RAM ranges the guest is told about (the memory map), without the legacy hole.
    pub fn usable_ranges(&self) -> Vec<RamRegion> {
        let mut out = Vec::with_capacity(self.regions.len() + 1);
        for r in &self.regions {
            if r.guest_addr == 0 {
                out.push(RamRegion {
                    guest_addr: 0,
                    size: FIRST_HOLE_START,
                });
                out.push(RamRegion {
                    guest_addr: FIRST_HOLE_END,
                    size: r.size - FIRST_HOLE_END,
                });
            } else {
                out.push(*r);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_vm_is_one_region() {
        let l = RamLayout::new(512 << 20).unwrap();
        assert_eq!(
            l.regions(),
            &[RamRegion {
                guest_addr: 0,
                size: 512 << 20
            }]
        );
        assert_eq!(l.size(), 512 << 20);
        let usable = l.usable_ranges();
        assert_eq!(usable.len(), 2);
        assert_eq!(
            usable[0],
            RamRegion {
                guest_addr: 0,
                size: 0xa_0000
            }
        );
        assert_eq!(usable[1].guest_addr, 0x10_0000);
        assert_eq!(usable[1].end(), 512 << 20);
    }

    #[test]
    fn large_vm_splits_around_the_hole() {
        let l = RamLayout::new(4 << 30).unwrap();
        assert_eq!(l.regions().len(), 2);
        assert_eq!(l.regions()[0].end(), LOW_RAM_END);
        assert_eq!(l.regions()[1].guest_addr, HIGH_RAM_START);
        assert_eq!(l.size(), 4 << 30);
        assert!(!l.contains(LOW_RAM_END - 4096, 8192));
        assert!(l.contains(HIGH_RAM_START, 4096));
    }

    #[test]
    fn rejects_bad_sizes() {
        assert!(matches!(
            RamLayout::new(1 << 20),
            Err(BootError::MemoryTooSmall { .. })
        ));
        assert!(matches!(
            RamLayout::new((64 << 20) + 1),
            Err(BootError::MemoryNotPageAligned { .. })
        ));
    }

    #[test]
    fn contains_does_not_overflow() {
        let l = RamLayout::new(64 << 20).unwrap();
        assert!(!l.contains(u64::MAX - 10, 100));
        assert!(l.contains(0, 64 << 20));
        assert!(!l.contains(0, (64 << 20) + 1));
    }
}
