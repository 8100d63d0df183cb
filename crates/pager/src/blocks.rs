//! The swap file's block allocator: which blocks are free, and how many references (a page, a
//! disk block's indirection) each used block has. Pure: the state table owns one.

use crate::page::Block;

/// Free-block bitmap and reference counts of the swap store.
#[derive(Debug)]
pub struct BlockMap {
    refs: Vec<u16>,
    used: u32,
    /// Blocks from here on are the pages of a restored snapshot's memory file
    /// (`store/saved.rs`): counted like the swap file's, never handed out.
    saved_base: u32,
    /// Where the next cluster search starts, so writes advance through the file.
    cursor: u32,
}

impl BlockMap {
    pub fn new(blocks: u32) -> Self {
        BlockMap {
            refs: vec![0; blocks as usize],
            used: 0,
            saved_base: blocks,
            cursor: 0,
        }
    }

    /// A map of `blocks` swap-file blocks followed by `saved` blocks of a snapshot's memory
    /// file, which are only ever taken with [`Self::take_saved_run`], one per restored page.
    pub fn with_saved(blocks: u32, saved: u32) -> Self {
        let mut m = BlockMap::new(blocks.saturating_add(saved));
        m.saved_base = blocks;
        m
    }

    /// The first block of the snapshot's memory file (the capacity when there is none).
    pub fn saved_base(&self) -> Block {
        self.saved_base
    }

    /// Whether `b` is a page of the snapshot's memory file, which nothing may write.
    pub fn is_saved(&self, b: Block) -> bool {
        b >= self.saved_base
    }

    /// Takes the references of the `count` restored pages whose contents are saved blocks
    /// `b..`, one each.
    pub fn take_saved_run(&mut self, b: Block, count: u32) {
        debug_assert!(self.is_saved(b));
        let run = &mut self.refs[b as usize..(b + count) as usize];
        debug_assert!(run.iter().all(|&r| r == 0));
        run.fill(1);
        self.used += count;
    }

    pub fn in_use(&self) -> u32 {
        self.used
    }

    pub fn capacity(&self) -> u32 {
        u32::try_from(self.refs.len()).unwrap_or(u32::MAX)
    }

    /// Allocates up to `n` blocks as few contiguous runs as it can; returns them in order.
    pub fn alloc(&mut self, n: u32) -> Vec<Block> {
        let cap = self.saved_base;
        let mut out = Vec::with_capacity(n as usize);
        let mut scanned = 0;
        while out.len() < n as usize && scanned < cap {
            let b = self.cursor;
            self.cursor = if b + 1 == cap { 0 } else { b + 1 };
            scanned += 1;
            if self.refs[b as usize] == 0 {
                self.refs[b as usize] = 1;
                self.used += 1;
                out.push(b);
            }
        }
        out
    }

    /// Allocates `n` consecutive blocks, the first free run found from the cursor on (wrapping
    /// once); returns the first, or `None` if no run that long is free.
    pub fn alloc_run(&mut self, n: u32) -> Option<Block> {
        let cap = self.saved_base;
        if n == 0 || n > cap {
            return None;
        }
        let (mut start, mut len) = (self.cursor, 0u32);
        let mut b = self.cursor;
        for _ in 0..cap + n {
            if b == cap {
                // A run does not wrap around the end of the file.
                b = 0;
                len = 0;
            }
            if self.refs[b as usize] == 0 {
                if len == 0 {
                    start = b;
                }
                len += 1;
                if len == n {
                    for r in &mut self.refs[start as usize..(start + n) as usize] {
                        *r = 1;
                    }
                    self.used += n;
                    self.cursor = if start + n == cap { 0 } else { start + n };
                    return Some(start);
                }
            } else {
                len = 0;
            }
            b += 1;
        }
        None
    }

    /// Takes one more reference to block `b`, which is in use (a disk block now refers to it);
    /// false if it has as many as it can count.
    pub fn add_ref(&mut self, b: Block) -> bool {
        let r = &mut self.refs[b as usize];
        if *r == 0 || *r == u16::MAX {
            return false;
        }
        *r += 1;
        true
    }

    /// Drops one reference to `b`; the block is free when none is left.
    pub fn drop_ref(&mut self, b: Block) {
        let r = &mut self.refs[b as usize];
        assert!(*r > 0, "swap block {b} released more often than referenced");
        *r -= 1;
        if *r == 0 {
            self.used -= 1;
        }
    }

    pub fn refs(&self, b: Block) -> u16 {
        self.refs[b as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_free_blocks_is_found_without_wrapping_past_the_end() {
        let mut m = BlockMap::new(10);
        assert_eq!(m.alloc(3), vec![0, 1, 2]);
        m.drop_ref(1);
        // Block 1 alone is too short for 2; 3..5 is the first run from the cursor.
        assert_eq!(m.alloc_run(2), Some(3));
        assert_eq!(m.alloc_run(5), Some(5), "5..10 ends at the file's end");
        assert_eq!(m.alloc_run(2), None, "only block 1 is free");
        assert_eq!(m.alloc_run(1), Some(1));
        assert_eq!(m.in_use(), 10);
        assert_eq!(m.alloc_run(0), None);
        assert_eq!(m.alloc_run(11), None);
    }

    #[test]
    fn saved_blocks_are_never_handed_out() {
        let mut m = BlockMap::with_saved(4, 4);
        m.take_saved_run(5, 1);
        assert!(m.is_saved(5) && !m.is_saved(3));
        assert_eq!(m.alloc(8), vec![0, 1, 2, 3], "only the swap file's blocks");
        m.drop_ref(5);
        assert_eq!(m.alloc_run(1), None, "a freed saved block stays out");
        assert_eq!(m.in_use(), 4);
    }
}
