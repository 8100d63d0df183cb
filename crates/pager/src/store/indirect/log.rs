//! The indirection log (Tesseract §4.4.1): `IMAGE.indirections`, a header naming the swap file
//! and one record per change to the map, appended and synced before the guest's write is
//! acknowledged, replayed at start, and rewritten to the live map when it grows too long.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::error::{io_err, IndirectError};
use crate::page::{Block, PAGE_SIZE};

/// The log of `image`: beside it, named after it.
pub fn log_path(image: &Path) -> PathBuf {
    let mut s = image.as_os_str().to_owned();
    s.push(".indirections");
    PathBuf::from(s)
}

pub(super) const MAGIC: &[u8; 8] = b"MVINDIR1";
/// The header: magic, store path length (u32 LE), store path; padded to a block.
pub(super) const HEADER: usize = PAGE_SIZE;
pub(super) const RECORD: usize = 12;
/// A record whose target is this ends the block's indirection.
pub(super) const UNMAP: u32 = u32::MAX;
/// The log is written with zeros this far ahead of its records, so a sync after an append
/// writes the records only, not a new file size (a zero record fails its check: the end).
pub(super) const AHEAD: u64 = 1 << 20;
pub(super) fn record(block: u32, target: u32) -> [u8; RECORD] {
    let mut r = [0u8; RECORD];
    r[0..4].copy_from_slice(&block.to_le_bytes());
    r[4..8].copy_from_slice(&target.to_le_bytes());
    let crc = crc32fast::hash(&r[0..8]);
    r[8..12].copy_from_slice(&crc.to_le_bytes());
    r
}

/// One disk's log file.
pub struct Log {
    pub(super) file: File,
    pub(super) path: PathBuf,
    /// Bytes of the header and the records.
    pub(super) len: u64,
    /// Bytes of the file (zeros after the records).
    pub(super) allocated: u64,
    pub(super) store: PathBuf,
}

/// What a log held when it was read.
pub struct Replayed {
    pub log: Log,
    pub map: BTreeMap<u32, Block>,
    /// Records read (torn or unfinished ones at the end are not counted).
    pub records: u64,
}

impl Log {
    /// Starts the log of `image`, naming swap file `store`; refused if the image has one.
    pub fn create(image: &Path, store: &Path) -> Result<Log, IndirectError> {
        let path = log_path(image);
        if path.exists() {
            return Err(IndirectError::Exists(image.to_owned()));
        }
        let store = std::path::absolute(store).map_err(io_err(store))?;
        Self::write_fresh(&path, &store, &BTreeMap::new())
    }

    /// Writes a log holding `map` at `path` (through a temporary file renamed over it, so a
    /// crash leaves the old log or the new one).
    pub(super) fn write_fresh(
        path: &Path,
        store: &Path,
        map: &BTreeMap<u32, Block>,
    ) -> Result<Log, IndirectError> {
        let tmp = path.with_extension("indirections-new");
        let mut data = Vec::with_capacity(HEADER + map.len() * RECORD);
        data.extend_from_slice(MAGIC);
        let name = store.as_os_str().as_bytes();
        let n = u32::try_from(name.len())
            .ok()
            .filter(|&n| 12 + n as usize <= HEADER)
            .ok_or_else(|| IndirectError::Corrupt {
                path: path.to_owned(),
                why: format!("swap file path {} is too long", store.display()),
            })?;
        data.extend_from_slice(&n.to_le_bytes());
        data.extend_from_slice(name);
        data.resize(HEADER, 0);
        for (&b, &t) in map {
            data.extend_from_slice(&record(b, t));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(io_err(&tmp))?;
        file.write_all_at(&data, 0).map_err(io_err(&tmp))?;
        file.sync_data().map_err(io_err(&tmp))?;
        std::fs::rename(&tmp, path).map_err(io_err(path))?;
        sync_dir(path);
        Ok(Log {
            file,
            path: path.to_owned(),
            len: data.len() as u64,
            allocated: data.len() as u64,
            store: store.to_owned(),
        })
    }

    /// Reads the log of `image`, if it has one.
    pub fn open(image: &Path) -> Result<Option<Replayed>, IndirectError> {
        let path = log_path(image);
        let mut file = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&path)(e)),
        };
        let mut data = Vec::new();
        file.read_to_end(&mut data).map_err(io_err(&path))?;
        if data.is_empty() {
            // Emptied by a jailed VMM that put every block back ([`Log::remove`]).
            std::fs::remove_file(&path).map_err(io_err(&path))?;
            return Ok(None);
        }
        let corrupt = |why: &str| IndirectError::Corrupt {
            path: path.clone(),
            why: why.into(),
        };
        if data.len() < HEADER || &data[0..8] != MAGIC {
            return Err(corrupt("no header"));
        }
        let n = u32::from_le_bytes(data[8..12].try_into().unwrap_or_default()) as usize;
        let name = data
            .get(12..12 + n)
            .filter(|_| 12 + n <= HEADER)
            .ok_or_else(|| corrupt("the swap file's name does not fit its header"))?;
        let store = PathBuf::from(std::ffi::OsStr::from_bytes(name));
        let mut map = BTreeMap::new();
        let mut records = 0u64;
        let mut len = HEADER as u64;
        for r in data[HEADER..].chunks_exact(RECORD) {
            let block = u32::from_le_bytes(r[0..4].try_into().unwrap_or_default());
            let target = u32::from_le_bytes(r[4..8].try_into().unwrap_or_default());
            if record(block, target)[8..12] != r[8..12] {
                // A record cut short by a crash: nothing after it was acknowledged.
                break;
            }
            if target == UNMAP {
                map.remove(&block);
            } else {
                map.insert(block, target);
            }
            records += 1;
            len += RECORD as u64;
        }
        let allocated = data.len() as u64;
        Ok(Some(Replayed {
            log: Log {
                file,
                path,
                len,
                allocated,
                store,
            },
            map,
            records,
        }))
    }

    /// Appends `(block, target)` changes (`None`: the indirection ends), synced if `sync`.
    /// Once `write` returns they survive the process being killed; once synced, the host
    /// losing power too.
    pub(super) fn append(
        &mut self,
        changes: &[(u32, Option<Block>)],
        sync: bool,
    ) -> std::io::Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let mut data = Vec::with_capacity(changes.len() * RECORD);
        for &(b, t) in changes {
            data.extend_from_slice(&record(b, t.unwrap_or(UNMAP)));
        }
        let end = self.len + data.len() as u64;
        if end > self.allocated {
            let more = (end - self.allocated).max(AHEAD);
            let zeros = vec![0u8; usize::try_from(more).map_err(std::io::Error::other)?];
            self.file.write_all_at(&zeros, self.allocated)?;
            self.allocated += more;
        }
        self.file.write_all_at(&data, self.len)?;
        if sync {
            self.file.sync_data()?;
        }
        self.len = end;
        Ok(())
    }

    /// Bytes of the header and the records (the file is larger: zeros follow them).
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len <= HEADER as u64
    }

    /// The swap file the log's blocks are in.
    pub fn store(&self) -> &Path {
        &self.store
    }

    /// Deletes the log: the image holds everything.
    pub(super) fn remove(self) -> std::io::Result<()> {
        match std::fs::remove_file(&self.path) {
            Ok(()) => {
                sync_dir(&self.path);
                Ok(())
            }
            // A jailed VMM does not see the image's directory: it empties the log through its
            // descriptor, and an empty log is a finished one ([`Log::open`] deletes it).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.file.set_len(0)?;
                self.file.sync_all()
            }
            Err(e) => Err(e),
        }
    }
}

/// Makes a rename or unlink in `path`'s directory durable (best effort).
pub(super) fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
}
