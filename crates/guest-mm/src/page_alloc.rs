//! The page allocator (Linux's `mm/page_alloc.c`): one free list, direct reclaim below the low
//! watermark, and frames for the kit's own use.

use crate::mm_types::{PageKind, L_FREE, L_NONE, NIL};
use crate::{Backend, Mm, MmError};

impl Mm<'_> {
    /// Free frames.
    pub fn free_pages(&self) -> u32 {
        self.lists[usize::from(L_FREE)].len
    }

    /// Takes a free frame, reclaiming first when free memory is below the low watermark.
    pub(crate) fn get_free<B: Backend>(&mut self, be: &mut B) -> Result<u32, MmError> {
        if self.free_pages() < self.params.low_free {
            self.reclaim(be, self.params.high_free)?;
        }
        let f = self.lists[usize::from(L_FREE)].head;
        if f == NIL {
            self.events.oom += 1;
            return Err(MmError::OutOfMemory);
        }
        self.unlink(f);
        let fr = &mut self.frames[f as usize];
        fr.flags = 0;
        fr.pins = 0;
        Ok(f)
    }

    pub(crate) fn put_free(&mut self, f: u32) {
        let fr = &mut self.frames[f as usize];
        debug_assert!(fr.pins == 0 && fr.list == L_NONE);
        fr.kind = PageKind::Free;
        fr.flags = 0;
        self.push_front(L_FREE, f);
    }

    /// Allocates a frame for the kit's own use (contents undefined).
    pub fn alloc_kernel<B: Backend>(&mut self, be: &mut B) -> Result<u32, MmError> {
        let f = self.get_free(be)?;
        self.frames[f as usize].kind = PageKind::Kernel;
        self.kernel += 1;
        Ok(f)
    }

    /// Frees a frame from [`Mm::alloc_kernel`].
    pub fn free_kernel(&mut self, f: u32) {
        assert_eq!(self.frames[f as usize].kind, PageKind::Kernel);
        self.kernel -= 1;
        self.put_free(f);
    }
}
