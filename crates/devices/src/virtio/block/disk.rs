//! The image file behind a virtio-blk device, and where a transfer's bytes meet it: the
//! [`Disk`] (an `O_DIRECT` descriptor where the file system allows it, a buffered one for the
//! rest), why a device cannot be made ([`BlockError`]), and the arithmetic that finds a
//! transfer's whole pages and cuts blocks out of it. A leaf: `mod.rs` uses it, not the reverse.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use thiserror::Error;
use vm_memory::GuestAddress;

use crate::ram::{DiskPage, PAGE_SIZE};

/// Logical block size advertised to the guest: one page, so a disk block maps onto a guest page.
pub const BLOCK_SIZE: u64 = PAGE_SIZE as u64;

/// Why a block device cannot be made.
#[derive(Debug, Error)]
pub enum BlockError {
    #[error("cannot open disk image {path}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("disk image {path} is {size} bytes; it must hold at least one 4 KiB block")]
    TooSmall { path: PathBuf, size: u64 },
    #[error("disk id {0:?} is longer than 20 bytes")]
    IdTooLong(String),
}

/// Whether `e` says the file system has no room (or the quota none left).
pub(super) fn is_full(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

/// The image file: an `O_DIRECT` descriptor where possible, and a buffered one for the rest.
pub(super) struct Disk {
    pub(super) buffered: File,
    pub(super) direct: Option<File>,
    pub(super) capacity: u64,
}

/// A disk image opened for a [`super::Block`], before the device is made.
pub struct DiskImage {
    pub(super) disk: Disk,
    pub(super) read_only: bool,
}

impl DiskImage {
    /// Opens the image at `path`, writable unless `read_only`.
    pub fn open(path: &Path, read_only: bool) -> Result<Self, BlockError> {
        Ok(DiskImage {
            disk: Disk::open(path, read_only)?,
            read_only,
        })
    }
}

impl Disk {
    pub(super) fn open(path: &Path, read_only: bool) -> Result<Self, BlockError> {
        let err = |source| BlockError::Open {
            path: path.to_owned(),
            source,
        };
        let mut opts = OpenOptions::new();
        opts.read(true).write(!read_only);
        let buffered = opts.open(path).map_err(err)?;
        let size = buffered.metadata().map_err(err)?.len();
        let capacity = size - size % BLOCK_SIZE;
        if capacity == 0 {
            return Err(BlockError::TooSmall {
                path: path.to_owned(),
                size,
            });
        }
        if capacity != size {
            tracing::warn!(
                "disk {}: ignoring the last {} bytes (not a whole 4 KiB block)",
                path.display(),
                size - capacity
            );
        }
        let direct = match opts.custom_flags(libc::O_DIRECT).open(path) {
            Ok(f) => Some(f),
            Err(e) => {
                tracing::warn!(
                    "disk {}: O_DIRECT unavailable ({e}); using the host page cache",
                    path.display()
                );
                None
            }
        };
        Ok(Disk {
            buffered,
            direct,
            capacity,
        })
    }

    pub(super) fn file_for(&self, offset: u64, len: usize) -> &File {
        match &self.direct {
            Some(f) if offset % BLOCK_SIZE == 0 && len as u64 % BLOCK_SIZE == 0 => f,
            _ => &self.buffered,
        }
    }
}

/// The whole, aligned pages among `pieces` (guest address, disk offset, length).
pub(super) fn whole_pages(pieces: &[(u64, u64, usize)]) -> Vec<DiskPage> {
    let mut out = Vec::new();
    for &(addr, disk_off, len) in pieces {
        if addr % PAGE_SIZE as u64 != 0 || disk_off % BLOCK_SIZE != 0 {
            continue;
        }
        for j in 0..len as u64 / PAGE_SIZE as u64 {
            out.push(DiskPage {
                block: disk_off / BLOCK_SIZE + j,
                addr: GuestAddress(addr + j * PAGE_SIZE as u64),
            });
        }
    }
    out
}

/// `pieces` less the bytes of the blocks in `blocks` (sorted).
pub(super) fn without_blocks(
    pieces: &[(u64, u64, usize)],
    blocks: &[u64],
) -> Vec<(u64, u64, usize)> {
    let mut out = Vec::new();
    for &(addr, disk_off, len) in pieces {
        for (from, to) in runs_without(disk_off, len, blocks) {
            out.push((
                addr + (from - disk_off),
                from,
                usize::try_from(to - from).unwrap_or(0),
            ));
        }
    }
    out
}

/// The byte ranges of `len` bytes at disk offset `start` outside the blocks in `blocks` (sorted).
pub(super) fn runs_without(start: u64, len: usize, blocks: &[u64]) -> Vec<(u64, u64)> {
    let end = start + len as u64;
    let mut out = Vec::new();
    let mut pos = start;
    let first = blocks.partition_point(|&b| (b + 1) * BLOCK_SIZE <= start);
    for &b in &blocks[first..] {
        let (bs, be) = (b * BLOCK_SIZE, (b + 1) * BLOCK_SIZE);
        if bs >= end {
            break;
        }
        if bs > pos {
            out.push((pos, bs));
        }
        pos = pos.max(be);
    }
    if pos < end {
        out.push((pos, end));
    }
    out
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)] // test values are small by construction
mod tests {
    use super::*;

    #[test]
    fn elided_blocks_are_cut_out_of_pieces_and_writes() {
        const B: u64 = BLOCK_SIZE;
        // 4 blocks from block 10, two of them elided.
        assert_eq!(
            runs_without(10 * B, 4 * B as usize, &[3, 11, 13, 20]),
            vec![(10 * B, 11 * B), (12 * B, 13 * B)]
        );
        assert_eq!(
            runs_without(10 * B, 2 * B as usize, &[]),
            vec![(10 * B, 12 * B)]
        );
        assert_eq!(runs_without(10 * B, 2 * B as usize, &[10, 11]), vec![]);
        // A piece at guest address 0x10000 covering disk blocks 10..14.
        assert_eq!(
            without_blocks(&[(0x10000, 10 * B, 4 * B as usize)], &[11]),
            vec![
                (0x10000, 10 * B, B as usize),
                (0x10000 + 2 * B, 12 * B, 2 * B as usize)
            ]
        );
    }
}
