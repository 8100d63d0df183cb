//! A guest disk image as a [`PageStore`]: pages dropped while they mirrored one of its blocks
//! (VSwapper's Swap Mapper) are read back from it. The pager never writes an image; the guest's
//! own writes go through the block device.

use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::store::{PageStore, StoreCounters};
use crate::swap::BLOCK;

pub struct ImageFile {
    /// The disk's number (its virtio slot order).
    disk: u8,
    file: File,
    counters: StoreCounters,
}

impl ImageFile {
    /// A read handle on the image (opened `O_DIRECT` by the device where the file system
    /// allows, so buffers must be aligned).
    pub fn new(disk: u8, file: File) -> Self {
        ImageFile {
            disk,
            file,
            counters: StoreCounters::default(),
        }
    }
}

impl PageStore for ImageFile {
    fn describe(&self) -> String {
        format!("disk image {}", self.disk)
    }

    fn read(&self, block: u32, buf: &mut [u8]) -> std::io::Result<()> {
        self.file
            .read_exact_at(buf, u64::from(block) * BLOCK as u64)
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
