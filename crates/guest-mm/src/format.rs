//! The guest kit's on-disk formats, shared by the guest and by `memvisor mkdisk`.
//!
//! **Data disk** (4 KiB blocks): block 0 is the superblock, blocks `1..=table_blocks` hold the
//! file table (32 entries of 128 bytes per block), file data follows. Each file is a name, a byte
//! size and up to [`MAX_EXTENTS`] extents (start block, length in blocks). Space is handed out
//! from `next_free` upward and never reused (files are created, not deleted).
//!
//! **Swap disk**: block 0 is a header (magic, number of slots); slot `s` is block `1 + s`.
//!
//! All integers are little-endian.

/// Block size of both disks (and the guest's page size).
pub const BLOCK_SIZE: usize = 4096;
/// Superblock magic, "MVFS0001".
pub const FS_MAGIC: u64 = u64::from_le_bytes(*b"MVFS0001");
/// Swap header magic, "MVSWAP01".
pub const SWAP_MAGIC: u64 = u64::from_le_bytes(*b"MVSWAP01");
/// Bytes per file-table entry.
pub const ENTRY_SIZE: usize = 128;
/// File-table entries per block.
pub const ENTRIES_PER_BLOCK: usize = BLOCK_SIZE / ENTRY_SIZE;
/// Longest file name.
pub const NAME_MAX: usize = 48;
/// Extents per file.
pub const MAX_EXTENTS: usize = 4;

/// The superblock (block 0 of a data disk).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// Disk size in blocks.
    pub total_blocks: u64,
    /// Blocks of file table after the superblock.
    pub table_blocks: u32,
    /// Files in use in the table.
    pub nr_files: u32,
    /// First block not given to any file.
    pub next_free: u64,
    /// Seed of the deterministic content written by mkdisk.
    pub seed: u64,
}

/// Why a block does not hold what we expect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormatError {
    /// Wrong magic: not formatted by `memvisor mkdisk`.
    BadMagic,
    /// Fields contradict each other or the disk size.
    Corrupt,
}

fn get_u64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

fn get_u32(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

impl Superblock {
    /// Maximum number of files the table holds.
    pub fn max_files(&self) -> usize {
        self.table_blocks as usize * ENTRIES_PER_BLOCK
    }

    /// First data block.
    pub fn data_start(&self) -> u64 {
        1 + u64::from(self.table_blocks)
    }

    /// Encodes into a block (the rest of `block` is zeroed).
    pub fn encode(&self, block: &mut [u8]) {
        block[..BLOCK_SIZE].fill(0);
        put_u64(block, 0, FS_MAGIC);
        put_u32(block, 8, 1); // version
        put_u32(block, 12, BLOCK_SIZE as u32);
        put_u64(block, 16, self.total_blocks);
        put_u32(block, 24, self.table_blocks);
        put_u32(block, 28, self.nr_files);
        put_u64(block, 32, self.next_free);
        put_u64(block, 40, self.seed);
    }

    /// Decodes and checks a superblock.
    pub fn decode(block: &[u8]) -> Result<Self, FormatError> {
        if block.len() < 48 || get_u64(block, 0) != FS_MAGIC {
            return Err(FormatError::BadMagic);
        }
        let sb = Superblock {
            total_blocks: get_u64(block, 16),
            table_blocks: get_u32(block, 24),
            nr_files: get_u32(block, 28),
            next_free: get_u64(block, 32),
            seed: get_u64(block, 40),
        };
        let ok = get_u32(block, 8) == 1
            && get_u32(block, 12) as usize == BLOCK_SIZE
            && sb.table_blocks > 0
            && sb.nr_files as usize <= sb.max_files()
            && sb.next_free >= sb.data_start()
            && sb.next_free <= sb.total_blocks;
        if ok {
            Ok(sb)
        } else {
            Err(FormatError::Corrupt)
        }
    }
}

/// A run of contiguous blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Extent {
    /// First block.
    pub start: u64,
    /// Length in blocks.
    pub len: u64,
}

/// One file-table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileEntry {
    name: [u8; NAME_MAX],
    name_len: u8,
    /// Size in bytes.
    pub size: u64,
    /// Extents in file order; unused ones have `len == 0`.
    pub extents: [Extent; MAX_EXTENTS],
}

impl FileEntry {
    /// An entry with a name (truncated to [`NAME_MAX`]) and no blocks.
    pub fn new(name: &str, size: u64) -> Self {
        let mut e = FileEntry {
            name: [0; NAME_MAX],
            name_len: 0,
            size,
            extents: [Extent::default(); MAX_EXTENTS],
        };
        let n = name.len().min(NAME_MAX);
        e.name[..n].copy_from_slice(&name.as_bytes()[..n]);
        e.name_len = n as u8;
        e
    }

    /// The file's name.
    pub fn name(&self) -> &str {
        core::str::from_utf8(&self.name[..usize::from(self.name_len)]).unwrap_or("?")
    }

    /// Blocks the extents cover.
    pub fn blocks(&self) -> u64 {
        self.extents.iter().map(|e| e.len).sum()
    }

    /// Disk block holding file block `index`, and how many blocks follow it contiguously
    /// within the same extent (including itself).
    pub fn map(&self, index: u64) -> Option<(u64, u64)> {
        let mut base = 0;
        for e in &self.extents {
            if index < base + e.len {
                let off = index - base;
                return Some((e.start + off, e.len - off));
            }
            base += e.len;
        }
        None
    }

    /// Encodes into a 128-byte slot.
    pub fn encode(&self, slot: &mut [u8]) {
        slot[..ENTRY_SIZE].fill(0);
        slot[..NAME_MAX].copy_from_slice(&self.name);
        slot[NAME_MAX] = self.name_len;
        put_u64(slot, 56, self.size);
        for (i, e) in self.extents.iter().enumerate() {
            put_u64(slot, 64 + 16 * i, e.start);
            put_u64(slot, 72 + 16 * i, e.len);
        }
    }

    /// Decodes a slot; checks the extents against the superblock.
    pub fn decode(slot: &[u8], sb: &Superblock) -> Result<Self, FormatError> {
        let mut name = [0u8; NAME_MAX];
        name.copy_from_slice(&slot[..NAME_MAX]);
        let name_len = slot[NAME_MAX];
        let mut e = FileEntry {
            name,
            name_len,
            size: get_u64(slot, 56),
            extents: [Extent::default(); MAX_EXTENTS],
        };
        for i in 0..MAX_EXTENTS {
            e.extents[i] = Extent {
                start: get_u64(slot, 64 + 16 * i),
                len: get_u64(slot, 72 + 16 * i),
            };
            let x = e.extents[i];
            let end = x.start.checked_add(x.len).ok_or(FormatError::Corrupt)?;
            if x.len > 0 && (x.start < sb.data_start() || end > sb.next_free) {
                return Err(FormatError::Corrupt);
            }
        }
        if usize::from(name_len) > NAME_MAX
            || core::str::from_utf8(&name[..usize::from(name_len)]).is_err()
            || e.size > e.blocks() * BLOCK_SIZE as u64
        {
            return Err(FormatError::Corrupt);
        }
        Ok(e)
    }
}

/// Encodes a swap header for `slots` slots.
pub fn encode_swap_header(block: &mut [u8], slots: u64) {
    block[..BLOCK_SIZE].fill(0);
    put_u64(block, 0, SWAP_MAGIC);
    put_u64(block, 8, slots);
}

/// Decodes a swap header: the number of slots.
pub fn decode_swap_header(block: &[u8]) -> Result<u64, FormatError> {
    if get_u64(block, 0) != SWAP_MAGIC {
        return Err(FormatError::BadMagic);
    }
    Ok(get_u64(block, 8))
}

/// SplitMix64 finaliser.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The deterministic content mkdisk writes: the little-endian u64 at byte `offset` (a multiple
/// of 8) of file number `file` (its index in the table).
pub fn file_word(seed: u64, file: u32, offset: u64) -> u64 {
    splitmix64(seed ^ (u64::from(file) << 48) ^ offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn superblock_and_entry_round_trip() {
        let sb = Superblock {
            total_blocks: 1000,
            table_blocks: 2,
            nr_files: 1,
            next_free: 100,
            seed: 7,
        };
        let mut b = [0u8; BLOCK_SIZE];
        sb.encode(&mut b);
        assert_eq!(Superblock::decode(&b), Ok(sb));
        let mut e = FileEntry::new("seq", 5000);
        e.extents[0] = Extent { start: 3, len: 1 };
        e.extents[1] = Extent { start: 10, len: 1 };
        let mut slot = [0u8; ENTRY_SIZE];
        e.encode(&mut slot);
        let d = FileEntry::decode(&slot, &sb).unwrap();
        assert_eq!(d, e);
        assert_eq!(d.name(), "seq");
        assert_eq!(d.map(0), Some((3, 1)));
        assert_eq!(d.map(1), Some((10, 1)));
        assert_eq!(d.map(2), None);
    }

    #[test]
    fn corrupt_entries_are_rejected() {
        let sb = Superblock {
            total_blocks: 1000,
            table_blocks: 1,
            nr_files: 1,
            next_free: 50,
            seed: 0,
        };
        let mut e = FileEntry::new("x", 4096);
        e.extents[0] = Extent { start: 49, len: 2 };
        let mut slot = [0u8; ENTRY_SIZE];
        e.encode(&mut slot);
        assert_eq!(FileEntry::decode(&slot, &sb), Err(FormatError::Corrupt));
        let mut b = [0u8; BLOCK_SIZE];
        assert_eq!(Superblock::decode(&b), Err(FormatError::BadMagic));
        encode_swap_header(&mut b, 9);
        assert_eq!(decode_swap_header(&b), Ok(9));
    }

    #[test]
    fn file_entry_extents_map_blocks() {
        let mut e = FileEntry::new("x", 0);
        e.extents[0] = Extent { start: 10, len: 2 };
        assert_eq!(e.map(1), Some((11, 1)));
    }
}
