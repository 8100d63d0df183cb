//! The balloon driver's hooks into the allocator (Linux's `mm/balloon_compaction.c`): taking
//! frames on inflate (never below the min watermark), finding and returning them on deflate.

use crate::mm_types::Kind;
use crate::{Backend, Mm, MmError};

impl Mm<'_> {
    /// Takes a frame for the balloon (inflate), reclaiming if needed. Does not reclaim below
    /// the min watermark's worth of other memory: fails with `OutOfMemory` instead.
    pub fn alloc_balloon<B: Backend>(&mut self, be: &mut B) -> Result<u32, MmError> {
        if self.free_pages() <= self.params.min_free {
            self.reclaim(be, self.params.high_free)?;
            if self.free_pages() <= self.params.min_free {
                return Err(MmError::OutOfMemory);
            }
        }
        let f = self.get_free(be)?;
        self.frames[f as usize].kind = Kind::Balloon;
        self.balloon += 1;
        Ok(f)
    }

    /// The first frame of kind `kind` at or after `from`.
    pub fn find_kind(&self, kind: Kind, from: u32) -> Option<u32> {
        (from..self.total()).find(|&f| self.frames[f as usize].kind == kind)
    }

    /// Returns a balloon frame to the free list (deflate).
    pub fn free_balloon(&mut self, f: u32) {
        assert_eq!(self.frames[f as usize].kind, Kind::Balloon);
        self.balloon -= 1;
        self.put_free(f);
    }
}
