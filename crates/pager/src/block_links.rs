//! [`BlockLinks`]: for each image block, the guest pages that mirror it or were dropped relying
//! on it — the Swap Mapper's reverse map, which a guest disk read changes for every page it
//! fills.
//!
//! A read fills consecutive blocks, so the links are kept in chunks of consecutive blocks: one
//! `u32` per block, the page, in a chunk found by one hash lookup per chunk, and a read's links
//! land next to each other in memory. (As one hash map keyed by block, each link was a probe at
//! a random place in a table as large as the page cache, a cache and TLB miss, and the probes
//! were a fifth of the disk thread's bookkeeping in `bench seqread` with the Mapper.) A block
//! linked to more than one page (the same block read into two pages) keeps the others in a
//! small map beside. A chunk is freed when its last link goes, so the memory follows the
//! blocks in guest RAM: at most 4 KiB per chunk of 1,024 blocks, a thousandth of what they
//! hold, whatever block numbers a guest reads.

use smallvec::SmallVec;

use crate::keyed_hash::KeyedMap;
use crate::page::{ImageBlock, PageIdx};

/// Blocks per chunk.
const CHUNK: u32 = 1024;
/// A block no page is linked to.
const NONE: PageIdx = PageIdx::MAX;

#[derive(Debug)]
struct Chunk {
    pages: Box<[PageIdx; CHUNK as usize]>,
    /// Blocks of the chunk with a page.
    linked: u32,
}

/// The pages linked to each image block.
#[derive(Debug, Default)]
pub struct BlockLinks {
    /// By (disk, block / [`CHUNK`]): each block's first page.
    chunks: KeyedMap<(u8, u32), Chunk>,
    /// The pages after the first, for the few blocks that have more than one.
    more: KeyedMap<ImageBlock, SmallVec<[PageIdx; 2]>>,
}

fn place(ib: ImageBlock) -> ((u8, u32), usize) {
    ((ib.disk, ib.block / CHUNK), (ib.block % CHUNK) as usize)
}

impl BlockLinks {
    /// Links page `p` to `ib` (a page is linked to a block at most once; the caller keeps that).
    pub fn link(&mut self, ib: ImageBlock, p: PageIdx) {
        let (key, i) = place(ib);
        let chunk = self.chunks.entry(key).or_insert_with(|| Chunk {
            pages: Box::new([NONE; CHUNK as usize]),
            linked: 0,
        });
        if chunk.pages[i] == NONE {
            chunk.pages[i] = p;
            chunk.linked += 1;
        } else {
            self.more.entry(ib).or_default().push(p);
        }
    }

    /// Unlinks page `p` from `ib`, if linked.
    pub fn unlink(&mut self, ib: ImageBlock, p: PageIdx) {
        let (key, i) = place(ib);
        let Some(chunk) = self.chunks.get_mut(&key) else {
            return;
        };
        if chunk.pages[i] == p {
            // Another page linked to the block takes the first place.
            match self.more.get_mut(&ib) {
                Some(v) => {
                    chunk.pages[i] = v.remove(0);
                    if v.is_empty() {
                        self.more.remove(&ib);
                    }
                }
                None => {
                    chunk.pages[i] = NONE;
                    chunk.linked -= 1;
                    if chunk.linked == 0 {
                        self.chunks.remove(&key);
                    }
                }
            }
        } else if chunk.pages[i] != NONE {
            if let Some(v) = self.more.get_mut(&ib) {
                v.retain(|q| *q != p);
                if v.is_empty() {
                    self.more.remove(&ib);
                }
            }
        }
    }

    /// The pages linked to `ib`.
    pub fn pages(&self, ib: ImageBlock) -> SmallVec<[PageIdx; 2]> {
        let (key, i) = place(ib);
        let mut v = SmallVec::new();
        if let Some(&p) = self.chunks.get(&key).map(|c| &c.pages[i]) {
            if p != NONE {
                v.push(p);
                if let Some(more) = self.more.get(&ib) {
                    v.extend_from_slice(more);
                }
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn ib(disk: u8, block: u32) -> ImageBlock {
        ImageBlock { disk, block }
    }

    #[test]
    #[allow(clippy::cast_possible_truncation)] // small values of a random walk
    fn follows_a_map_of_sets_and_frees_what_it_no_longer_needs() {
        let mut links = BlockLinks::default();
        let mut model: HashMap<ImageBlock, Vec<PageIdx>> = HashMap::new();
        // A deterministic walk of links and unlinks over few blocks (so blocks with several
        // pages are common), on two disks, across chunk boundaries.
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let b = ib((x % 2) as u8, (x >> 8) as u32 % 8 + CHUNK - 4);
            let p = (x >> 20) as u32 % 6;
            let linked = model.get(&b).is_some_and(|v| v.contains(&p));
            if linked {
                links.unlink(b, p);
                let v = model.get_mut(&b).unwrap();
                v.retain(|q| *q != p);
                if v.is_empty() {
                    model.remove(&b);
                }
            } else {
                links.link(b, p);
                model.entry(b).or_default().push(p);
            }
            let mut got: Vec<PageIdx> = links.pages(b).into_vec();
            let mut want = model.get(&b).cloned().unwrap_or_default();
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(got, want, "block {b:?}");
        }
        for (b, v) in model.clone() {
            for p in v {
                links.unlink(b, p);
            }
        }
        assert!(links.chunks.is_empty());
        assert!(links.more.is_empty());
        // Unlinking what is not linked changes nothing.
        links.unlink(ib(0, 5), 1);
        links.link(ib(0, 5), 2);
        links.unlink(ib(0, 5), 1);
        assert_eq!(links.pages(ib(0, 5)).into_vec(), vec![2]);
    }

    #[test]
    fn the_largest_block_numbers_are_kept_apart() {
        let mut links = BlockLinks::default();
        links.link(ib(3, u32::MAX), 7);
        links.link(ib(3, u32::MAX - CHUNK), 8);
        assert_eq!(links.pages(ib(3, u32::MAX)).into_vec(), vec![7]);
        assert_eq!(links.pages(ib(3, u32::MAX - CHUNK)).into_vec(), vec![8]);
        assert!(links.pages(ib(2, u32::MAX)).is_empty());
        assert_eq!(links.chunks.len(), 2);
    }
}
