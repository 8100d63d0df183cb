//! The balloon driver's hooks into the allocator (Linux's `mm/balloon_compaction.c`): taking
//! frames on inflate (never below the min watermark), finding and returning them on deflate.

use crate::mm_types::PageKind;
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
        self.frames[f as usize].kind = PageKind::Balloon;
        self.balloon += 1;
        Ok(f)
    }

    /// The first frame of kind `kind` at or after `from`.
    pub fn find_kind(&self, kind: PageKind, from: u32) -> Option<u32> {
        (from..self.total()).find(|&f| self.frames[f as usize].kind == kind)
    }

    /// Returns a balloon frame to the free list (deflate).
    pub fn free_balloon(&mut self, f: u32) {
        assert_eq!(self.frames[f as usize].kind, PageKind::Balloon);
        self.balloon -= 1;
        self.put_free(f);
    }
}

#[cfg(test)]
mod tests {
    use crate::mm_types::Access;
    use crate::tests::setup;
    use std::vec::Vec;

    #[test]
    fn balloon_takes_and_returns_pages_and_reclaims_for_them() {
        let (mut mm, mut be) = setup(128, 600, 0);
        let a = mm.file_create(&mut be, "f", 100 * 4096).unwrap();
        for i in 0..100 {
            mm.file_page(&mut be, a, i, Access::Read, false).unwrap();
        }
        let mut held = Vec::new();
        while let Ok(f) = mm.alloc_balloon(&mut be) {
            held.push(f);
        }
        assert!(held.len() > 90, "{}", held.len());
        assert!(mm.free_pages() >= mm.params.min_free);
        for f in held {
            mm.free_balloon(f);
        }
        mm.verify().unwrap();
    }
}
