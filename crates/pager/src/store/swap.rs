//! The swap file: a [`PageStore`] of 4 KiB blocks. Block allocation and reference counts live
//! in `BlockMap` (`blocks.rs`); this is the file and its I/O.
//!
//! The file is preallocated (`fallocate`) to hold every guest page, so a full disk is found
//! when the VM starts, never in the middle of a reclaim. It is opened `O_DIRECT` where the file
//! system allows, so swapped pages really leave host memory instead of sitting in the page cache.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use thiserror::Error;

use crate::page::{Block, PAGE_SIZE};
use crate::store::{PageStore, StoreCounters};

#[derive(Debug, Error)]
pub enum SwapError {
    #[error("cannot create swap file {path}")]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot reserve {bytes} bytes for swap file {path} (is the disk full?)")]
    Reserve {
        path: PathBuf,
        bytes: u64,
        #[source]
        source: std::io::Error,
    },
    #[error("the swap file has room for {blocks} blocks, guest RAM has {pages} pages")]
    TooSmall { blocks: u32, pages: u32 },
}

pub struct SwapFile {
    file: File,
    counters: StoreCounters,
    /// Write calls so far, and (under its lock) how many of them the last sync covered.
    writes: AtomicU64,
    synced: Mutex<u64>,
}

/// Opens `path` with `options` and `O_DIRECT`, so its pages do not stay in the host's page cache,
/// or without it where the file system refuses it (`EINVAL`, e.g. tmpfs), saying so once per
/// file. Every I/O on the file must then be whole aligned blocks from aligned buffers.
pub(crate) fn open_direct(options: &OpenOptions, path: &Path) -> std::io::Result<File> {
    let mut direct = options.clone();
    match direct.custom_flags(libc::O_DIRECT).open(path) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            tracing::warn!(
                "{}: O_DIRECT unavailable; host page cache in use",
                path.display()
            );
            options.open(path)
        }
        r => r,
    }
}

impl SwapFile {
    /// Creates (or truncates) the swap file at `path` with room for `blocks` blocks. A
    /// `temporary` file is unlinked at once: it lives as long as the descriptor, so no exit,
    /// however abrupt, leaves it behind.
    pub fn create(path: &Path, blocks: u32, temporary: bool) -> Result<Self, SwapError> {
        let mut options = OpenOptions::new();
        options.read(true).write(true).create(true).truncate(true);
        let file = open_direct(&options, path).map_err(|source| SwapError::Create {
            path: path.into(),
            source,
        })?;
        let bytes = u64::from(blocks) * PAGE_SIZE as u64;
        let len = libc::off_t::try_from(bytes).unwrap_or(libc::off_t::MAX);
        // SAFETY: plain syscall on a descriptor we own.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) };
        if rc != 0 {
            let source = std::io::Error::last_os_error();
            let _ = std::fs::remove_file(path);
            return Err(SwapError::Reserve {
                path: path.into(),
                bytes,
                source,
            });
        }
        if temporary {
            std::fs::remove_file(path).map_err(|source| SwapError::Create {
                path: path.into(),
                source,
            })?;
        }
        Ok(SwapFile {
            file,
            counters: StoreCounters::default(),
            writes: AtomicU64::new(0),
            synced: Mutex::new(0),
        })
    }

    /// Makes every write so far durable (`fdatasync`), unless the last sync already did.
    pub fn sync_if_written(&self) -> std::io::Result<()> {
        let mut synced = self.synced.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.writes.load(Ordering::SeqCst);
        if now != *synced {
            self.file.sync_data()?;
            *synced = now;
        }
        Ok(())
    }
}

impl PageStore for SwapFile {
    fn describe(&self) -> String {
        "the swap file".into()
    }

    /// Reads whole blocks starting at `first` into `buf` (aligned).
    fn read(&self, first: Block, buf: &mut [u8]) -> std::io::Result<()> {
        self.file
            .read_exact_at(buf, u64::from(first) * PAGE_SIZE as u64)
    }

    /// Writes `data` (whole blocks, from an aligned buffer) starting at block `first`.
    fn write(&self, first: Block, data: &[u8]) -> std::io::Result<()> {
        self.file
            .write_all_at(data, u64::from(first) * PAGE_SIZE as u64)?;
        self.writes.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn counters(&self) -> &StoreCounters {
        &self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memvisor_devices::iobuf::IoBuf;

    #[test]
    fn blocks_round_trip_and_temporary_files_leave_no_trace() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("swap");
        let s = SwapFile::create(&path, 16, true).unwrap();
        assert_eq!(s.file.metadata().unwrap().len(), 16 * 4096);
        let mut b = IoBuf::new(8192);
        b.get(8192)
            .iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = u8::try_from(i % 251).unwrap());
        s.write(3, b.get(8192)).unwrap();
        let mut r = IoBuf::new(8192);
        s.read(3, r.get(8192)).unwrap();
        assert_eq!(r.get(8192), b.get(8192));
        assert!(!path.exists(), "a temporary swap file is unlinked at once");
        drop(s);
        let kept = SwapFile::create(&path, 1, false).unwrap();
        drop(kept);
        assert!(path.exists(), "a named swap file stays");
    }

    #[test]
    fn a_missing_directory_is_a_clear_error() {
        let e = SwapFile::create(Path::new("/nonexistent/dir/swap"), 1, true)
            .err()
            .unwrap();
        assert!(e.to_string().contains("/nonexistent/dir/swap"));
    }
}
