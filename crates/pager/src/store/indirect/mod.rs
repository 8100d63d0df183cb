//! Tesseract's indirections (§3–§4.6): no double paging.
//!
//! When the guest writes a page to its own disk while the pager holds that page in the swap
//! file, reading it back only so the guest can write it out is double paging. With
//! indirections on (`--tesseract`), the device does not read such a page: the disk block
//! becomes a reference to the swap-file block that already holds the content, and the block's
//! reference count (`BlockMap`) keeps it alive as long as the page or any disk block uses it.
//!
//! - **The map** ([`Indirect`], one per writable disk): image block → swap-file block. A guest
//!   read of an indirected block is served from the swap file, a request that mixes image and
//!   indirected blocks is split into runs (split reads, §4.3.2). So is a refault of a page the
//!   Swap Mapper dropped while it mirrored an indirected block: the disk as the guest sees it is
//!   the image with the map laid over it.
//! - **Ends**: a guest write of a block ends its indirection once the write landed; a write
//!   covering part of an indirected block first copies the block back into the image (the rest
//!   of it lives only in the swap file). A swap-file block is free when the last page and the
//!   last disk block referring to it let go.
//! - **Only the swap file**: a block in the host-memory pool is not indirected (it would not
//!   survive a crash); the guest's write reads it from memory, which is not double paging's cost.
//! - **The log** (§4.4.1): every change to the map is appended to `IMAGE.indirections` and synced
//!   (with the swap file, if it was written since its last sync) before the guest's write is
//!   acknowledged. The log's header names the swap file. At start, a VM whose image has a log
//!   (memvisor was killed) copies every logged block from that swap file back into the image
//!   first ([`recover`]), which is also what `memvisor disk disentangle IMAGE` does (§4.4.2);
//!   a clean exit disentangles too, unless told to keep the indirections. The log is rewritten
//!   to just the live map when it grows past four times what the map needs.
//!   With [`LogSync::Flush`] an ended indirection's swap-file block is freed only once the
//!   log that ends it is synced, so no log can name a block that was used again.
//! - **Defragmentation** (§5, [`Defrag`]), on a background thread: guest-disk defragmentation
//!   copies indirected blocks back into the image (first those reads needed), and swap-file
//!   defragmentation moves each write's indirected blocks next to each other in the swap file.
//!   Split reads take each run of swap-file blocks that follow each other in one read.
//!
//! Differences from Tesseract: the indirections do not outlive the VM (the paper's BSST keeps
//! them across runs; here the next start puts them back into the image), and the guest's write
//! skips the indirected blocks instead of writing dummy pages to them.

// The indirections are one module to the rest of the crate, split in files that import each
// other only downwards. This file re-exports their public items, so that the crate's users
// keep one path (`memvisor_pager::indirect::...`), and nothing in the folder imports from it.
mod defrag;
mod error;
mod log;
mod map;
mod recovery;

pub use crate::config::{Defrag, LogSync};
pub use error::IndirectError;
pub use log::{log_path, Log, Replayed};
pub use map::{Indirect, IndirectCounters};
pub use recovery::{recover, Disentangled};

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::fs::OpenOptions;
    use std::os::unix::fs::FileExt;
    use std::path::Path;

    use super::log::{record, HEADER, RECORD};
    use super::*;
    use crate::page::{Block, PAGE_SIZE};

    fn state_of(image: &Path) -> (BTreeMap<u32, Block>, u64) {
        let r = Log::open(image).unwrap().unwrap();
        (r.map, r.records)
    }

    #[test]
    fn the_log_replays_its_records_and_stops_at_a_torn_one() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("d.img");
        let mut log = Log::create(&image, Path::new("store")).unwrap();
        assert!(
            log.store().is_absolute(),
            "the header names the store absolutely"
        );
        assert!(matches!(
            Log::create(&image, Path::new("s")),
            Err(IndirectError::Exists(_))
        ));
        log.append(&[(5, Some(50)), (6, Some(60)), (7, Some(70))], true)
            .unwrap();
        log.append(&[(6, None), (5, Some(51))], false).unwrap();
        let (map, n) = state_of(&image);
        assert_eq!(n, 5);
        assert_eq!(map, BTreeMap::from([(5, 51), (7, 70)]));
        // A crash in the middle of the next append: half a record, then garbage.
        let f = OpenOptions::new()
            .write(true)
            .open(log_path(&image))
            .unwrap();
        f.write_all_at(&record(9, 90)[..7], log.len()).unwrap();
        let (map, n) = state_of(&image);
        assert_eq!((map.len(), n), (2, 5), "the torn record is not applied");
        f.write_all_at(&[0xff; RECORD], log.len()).unwrap();
        assert_eq!(
            state_of(&image).1,
            5,
            "a record failing its check ends the log"
        );
    }

    #[test]
    fn compaction_keeps_the_map_and_a_bad_header_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("d.img");
        let log = Log::create(&image, Path::new("/s")).unwrap();
        let map = BTreeMap::from([(1, 10), (2, 20)]);
        let fresh = Log::write_fresh(&log.path, &log.store, &map).unwrap();
        assert_eq!(fresh.len(), (HEADER + 2 * RECORD) as u64);
        assert_eq!(state_of(&image).0, map);
        std::fs::write(log_path(&image), b"not a log").unwrap();
        assert!(matches!(
            Log::open(&image),
            Err(IndirectError::Corrupt { .. })
        ));
        let e = recover(&image).err().unwrap().to_string();
        assert!(e.contains("not an indirection log"), "{e}");
    }

    /// A jailed VMM empties the log it finished (it cannot delete it): an empty log is read as
    /// finished and deleted, with nothing to put back.
    #[test]
    fn an_emptied_log_is_a_finished_one() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("d.img");
        let log = Log::create(&image, Path::new("/s")).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&log.path)
            .unwrap()
            .set_len(0)
            .unwrap();
        assert!(Log::open(&image).unwrap().is_none());
        assert!(!log_path(&image).exists());
        assert!(recover(&image).unwrap().is_none());
    }

    #[test]
    fn a_log_naming_blocks_past_either_file_is_refused_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("d.img");
        let store = dir.path().join("s.swap");
        std::fs::write(&image, vec![7u8; 4 * PAGE_SIZE]).unwrap();
        std::fs::write(&store, vec![9u8; 2 * PAGE_SIZE]).unwrap();
        for (block, target) in [(4, 0), (0, 2), (u32::MAX - 1, 0)] {
            let mut log = Log::create(&image, &store).unwrap();
            log.append(&[(block, Some(target))], true).unwrap();
            let e = recover(&image).err().unwrap();
            assert!(e.to_string().contains("past the end"), "{e}");
            assert_eq!(
                std::fs::metadata(&image).unwrap().len(),
                4 * PAGE_SIZE as u64
            );
            std::fs::remove_file(log_path(&image)).unwrap();
        }
        let mut log = Log::create(&image, &store).unwrap();
        log.append(&[(3, Some(1))], true).unwrap();
        assert_eq!(recover(&image).unwrap().unwrap().blocks, 1);
        let data = std::fs::read(&image).unwrap();
        assert!(data[3 * PAGE_SIZE..].iter().all(|&x| x == 9));
        assert!(data[..3 * PAGE_SIZE].iter().all(|&x| x == 7));
    }

    /// A snapshot's flatten puts every block back and ends each indirection in the same log,
    /// through its descriptor: the log file is never replaced (a jailed VMM could not), it
    /// replays to no indirection, and the next indirection goes on into it.
    #[test]
    fn flatten_puts_blocks_back_and_ends_them_in_the_same_log() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("d.img");
        let store = dir.path().join("s.swap");
        std::fs::write(&image, vec![7u8; 4 * PAGE_SIZE]).unwrap();
        std::fs::write(&store, vec![9u8; 2 * PAGE_SIZE]).unwrap();
        let ind = Indirect::start(&image, &store, LogSync::Write, None).unwrap();
        let inode = std::fs::metadata(log_path(&image)).unwrap().ino();
        let indirect = |block: u32, target: Block| {
            let at = u64::from(block) * PAGE_SIZE as u64;
            ind.write_begins(at, PAGE_SIZE as u64).unwrap();
            ind.elide(block, target);
            let (freed, r) = ind.write_ends(block, block + 1, true, || Ok(()));
            r.unwrap();
            assert!(freed.is_empty());
        };
        indirect(3, 1);
        assert_eq!(state_of(&image).0, BTreeMap::from([(3, 1)]));
        assert_eq!(ind.flatten().unwrap(), vec![1]);
        let data = std::fs::read(&image).unwrap();
        assert!(
            data[3 * PAGE_SIZE..].iter().all(|&x| x == 9),
            "block 3 back"
        );
        assert!(data[..3 * PAGE_SIZE].iter().all(|&x| x == 7));
        assert_eq!(std::fs::metadata(log_path(&image)).unwrap().ino(), inode);
        assert!(state_of(&image).0.is_empty());
        indirect(2, 0);
        assert_eq!(state_of(&image).0, BTreeMap::from([(2, 0)]));
        assert_eq!(ind.usage().0, 1);
    }

    /// A log that cannot be replaced by path (a jailed VMM's: here its directory moved away)
    /// fails its compaction once, then grows to twice that length before it is tried again;
    /// nothing is lost meanwhile.
    #[test]
    fn a_failed_compaction_waits_for_the_log_to_double() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("vm");
        std::fs::create_dir(&sub).unwrap();
        let (image, store) = (sub.join("d.img"), sub.join("s.swap"));
        std::fs::write(&image, vec![7u8; 4 * PAGE_SIZE]).unwrap();
        std::fs::write(&store, vec![9u8; 2 * PAGE_SIZE]).unwrap();
        let ind = Indirect::start(&image, &store, LogSync::Flush, None).unwrap();
        std::fs::rename(&sub, dir.path().join("gone")).unwrap();
        let mut first_failure = None;
        for i in 0..6000u32 {
            ind.write_begins(0, PAGE_SIZE as u64).unwrap();
            ind.elide(0, i % 2);
            let (_, r) = ind.write_ends(0, 1, true, || Ok(()));
            r.unwrap();
            let s = ind.lock();
            if first_failure.is_none() && s.compact_after > 0 {
                first_failure = Some(s.log.as_ref().unwrap().len());
            }
        }
        let at = first_failure.expect("the log grew past compaction and could not be replaced");
        let s = ind.lock();
        assert_eq!(s.compact_after, 2 * at, "tried once, not at every write");
        assert_eq!(
            ind.counters
                .compactions
                .load(std::sync::atomic::Ordering::Relaxed),
            0
        );
        assert_eq!(s.map.len(), 1);
        drop(s);
        let log = log_path(&dir.path().join("gone").join("d.img"));
        let replayed = Log::open(&dir.path().join("gone").join("d.img"))
            .unwrap()
            .unwrap();
        assert!(log.exists());
        assert_eq!(replayed.map, BTreeMap::from([(0, 1)]));
    }

    #[test]
    fn recovery_without_the_store_says_what_is_missing_and_keeps_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("d.img");
        std::fs::write(&image, vec![0u8; 8192]).unwrap();
        let mut log = Log::create(&image, &dir.path().join("gone.swap")).unwrap();
        log.append(&[(1, Some(0))], true).unwrap();
        let e = recover(&image).err().unwrap();
        assert!(matches!(e, IndirectError::StoreMissing { .. }));
        assert!(e.to_string().contains("gone.swap"), "{e}");
        assert!(log_path(&image).exists(), "nothing is lost: the log stays");
    }
}
