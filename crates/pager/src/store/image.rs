//! A guest disk image as a [`PageStore`]: pages dropped while they mirrored one of its blocks
//! (VSwapper's Swap Mapper) are read back from it. The pager never writes an image; the guest's
//! own writes go through the block device. With Tesseract's indirections (`store/indirect/`), the
//! image is read with its indirected blocks laid over it from the swap file.

use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::page::PAGE_SIZE;
use crate::store::indirect::Indirect;
use crate::store::{PageStore, StoreCounters};

pub struct ImageFile {
    /// The disk's number (its virtio slot order).
    disk: u8,
    file: File,
    counters: StoreCounters,
    /// The disk's indirections, with `--tesseract` on a writable disk.
    pub indirect: Option<Indirect>,
}

impl ImageFile {
    /// A read handle on the image (opened `O_DIRECT` by the device where the file system
    /// allows, so buffers must be aligned).
    pub fn new(disk: u8, file: File, indirect: Option<Indirect>) -> Self {
        ImageFile {
            disk,
            file,
            counters: StoreCounters::default(),
            indirect,
        }
    }

    /// Reads `buf.len()` bytes at byte `offset` as the guest sees the disk, if some of its
    /// blocks there are indirected; `false`: none is, and nothing was read.
    pub fn read_split(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<bool> {
        match &self.indirect {
            Some(i) => i.read(&self.file, offset, buf),
            None => Ok(false),
        }
    }
}

impl PageStore for ImageFile {
    fn describe(&self) -> String {
        format!("disk image {}", self.disk)
    }

    fn read(&self, block: u32, buf: &mut [u8]) -> std::io::Result<()> {
        let offset = u64::from(block) * PAGE_SIZE as u64;
        if self.read_split(offset, buf)? {
            return Ok(());
        }
        self.file.read_exact_at(buf, offset)
    }

    fn write(&self, _: u32, _: &[u8]) -> std::io::Result<()> {
        Err(std::io::Error::other(
            "the pager does not write guest disk images",
        ))
    }

    fn counters(&self) -> &StoreCounters {
        &self.counters
    }
}
