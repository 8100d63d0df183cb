//! What the pager's integration tests share (each test crate uses part of it).
#![allow(dead_code)]

pub mod flaky_disk;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use memvisor_pager::{Mechanisms, PagerConfig, VictimPolicy};

/// A pager with a temporary swap file in `swap_dir`, no limit yet, random victims, no sampling
/// and no pool; the Swap Mapper on if `mapper`.
pub fn config(swap_dir: &Path, mapper: bool) -> PagerConfig {
    PagerConfig {
        mech: Mechanisms {
            mapper,
            ..Mechanisms::DEFAULT
        },
        policy: VictimPolicy::Random,
        victim_cache: 0,
        limit: None,
        swap_path: swap_dir.join("swap"),
        temporary_swap: true,
        batch: 256,
        sample_pages: 0,
        sample_period: Duration::from_secs(30),
        pool: None,
        proactive: false,
        indirections: None,
        sharing: false,
        release_cache: memvisor_pager::DEFAULT_RELEASE_CACHE,
        release_ready: 0,
        serving_nice: 0,
        restore: None,
    }
}

/// Page `p`'s known content: `tag`, the page's number and the word's index in every word.
pub fn known_page(p: u64, tag: u64) -> Vec<u8> {
    (0..4096u64 / 8)
        .flat_map(|i| (p << 20 | i | tag).to_le_bytes())
        .collect()
}

/// Polls `done` every 10 ms until it holds; fails the test, naming `what`, after `limit`.
pub fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let t = std::time::Instant::now();
    while !done() {
        assert!(t.elapsed() < limit, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Creates the disk image at `path` with `blocks` blocks of 4 KiB, block `b` holding `page(b)`;
/// returns it open for reading and writing.
pub fn image(path: &Path, blocks: u64, page: impl Fn(u64) -> Vec<u8>) -> File {
    let image = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .unwrap();
    for b in 0..blocks {
        image.write_all_at(&page(b), b * 4096).unwrap();
    }
    image
}

/// Whether the page at `addr` of this process is in RAM (`/proc/self/pagemap`'s present bit).
pub fn present(addr: *const u8) -> bool {
    use std::os::unix::fs::FileExt;
    let pagemap = std::fs::File::open("/proc/self/pagemap").unwrap();
    let mut entry = [0u8; 8];
    pagemap
        .read_exact_at(&mut entry, addr as u64 / 4096 * 8)
        .unwrap();
    u64::from_le_bytes(entry) >> 63 == 1
}
