//! Recovery (Tesseract §4.4.2): putting every block an image's log lists back into the image,
//! at start after a crash and for `memvisor disk disentangle`.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use memvisor_devices::iobuf::IoBuf;

use super::error::{io_err, IndirectError};
use super::log::Log;
use crate::page::{Block, PAGE_SIZE};

/// What putting indirected blocks back into an image did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disentangled {
    /// Blocks copied from the swap file into the image.
    pub blocks: u64,
    /// The swap file they came from.
    pub store: PathBuf,
    /// Records the log held.
    pub records: u64,
}

/// Copies each `(image block, swap block)` from `store` into `image`, a block at a time through
/// an aligned buffer (either file may be `O_DIRECT`); returns the blocks copied.
pub(super) fn copy_blocks(
    image: &File,
    store: &File,
    blocks: impl IntoIterator<Item = (u32, Block)>,
) -> std::io::Result<u64> {
    let mut buf = IoBuf::new(PAGE_SIZE);
    let mut n = 0;
    for (block, target) in blocks {
        let b = buf.get(PAGE_SIZE);
        store.read_exact_at(b, u64::from(target) * PAGE_SIZE as u64)?;
        image.write_all_at(b, u64::from(block) * PAGE_SIZE as u64)?;
        n += 1;
    }
    Ok(n)
}

/// Copies every block of `map` back into `image`, then syncs it.
pub(super) fn copy_back(
    image: &File,
    store: &File,
    map: &BTreeMap<u32, Block>,
) -> std::io::Result<u64> {
    let n = copy_blocks(image, store, map.iter().map(|(&b, &t)| (b, t)))?;
    image.sync_data()?;
    Ok(n)
}

/// Puts every block `image`'s log lists back into the image and deletes the log, so the image
/// stands alone (Tesseract §4.4.2); `None` if it has no log. The swap file is left as it is.
pub fn recover(image: &Path) -> Result<Option<Disentangled>, IndirectError> {
    let Some(r) = Log::open(image)? else {
        return Ok(None);
    };
    let store = File::open(r.log.store()).map_err(|source| IndirectError::StoreMissing {
        log: r.log.path.clone(),
        store: r.log.store().to_owned(),
        source,
    })?;
    let img = OpenOptions::new()
        .write(true)
        .open(image)
        .map_err(io_err(image))?;
    // A log that names blocks past the end of either file is not one memvisor wrote: refuse it
    // before anything is copied (it would read nothing, or grow the image).
    let len = |f: &File, p: &Path| f.metadata().map(|m| m.len()).map_err(io_err(p));
    let (image_len, store_len) = (len(&img, image)?, len(&store, r.log.store())?);
    let end = |b: u32| (u64::from(b) + 1) * PAGE_SIZE as u64;
    if let Some((&b, &t)) = r
        .map
        .iter()
        .find(|&(&b, &t)| end(b) > image_len || end(t) > store_len)
    {
        return Err(IndirectError::Corrupt {
            path: r.log.path.clone(),
            why: format!(
                "it maps block {b} to swap block {t}, past the end of the image ({image_len} bytes) or of the swap file ({store_len} bytes)"
            ),
        });
    }
    let blocks = copy_back(&img, &store, &r.map).map_err(io_err(image))?;
    let store_path = r.log.store().to_owned();
    let path = r.log.path.clone();
    r.log.remove().map_err(io_err(&path))?;
    Ok(Some(Disentangled {
        blocks,
        store: store_path,
        records: r.records,
    }))
}
