//! The page cache (Linux's `mm/filemap.c`): pages kept by (file, page index) in the index of
//! `cache_index.rs`, the lookup that reads a page on a miss, `mark_page_accessed`, and dropping
//! pages.

use crate::mm_types::{
    Access, PageKind, F_DIRTY, F_REFERENCED, L_FILE_ACTIVE, L_FILE_INACTIVE, NIL,
};
use crate::{Backend, Mm, MmError};

impl Mm<'_> {
    /// The slot in the page-cache index and the frame of page `index` of `file`, if cached.
    pub(crate) fn cache_find(&self, file: u32, index: u32) -> Option<(usize, u32)> {
        self.cache.find(self.frames, file, index)
    }

    fn cache_insert(&mut self, f: u32) {
        self.cache.insert(self.frames, f);
    }

    /// Removes slot `s` of the page-cache index.
    pub(crate) fn cache_remove_slot(&mut self, s: usize) {
        self.cache.remove_slot(self.frames, s);
    }

    /// Linux's `mark_page_accessed`: an inactive page referenced twice becomes active.
    fn mark_accessed(&mut self, f: u32) {
        let fr = self.frames[f as usize];
        if fr.list == L_FILE_INACTIVE && fr.flags & F_REFERENCED != 0 {
            self.unlink(f);
            self.frames[f as usize].flags &= !F_REFERENCED;
            self.push_front(L_FILE_ACTIVE, f);
            self.events.pgactivate += 1;
        } else {
            self.frames[f as usize].flags |= F_REFERENCED;
        }
    }

    /// Returns the frame holding page `index` of file `file`, reading it (and up to
    /// `readahead_pages - 1` following pages, in one request) on a miss.
    pub fn file_page<B: Backend>(
        &mut self,
        be: &mut B,
        file: u32,
        index: u64,
        access: Access,
        pin: bool,
    ) -> Result<u32, MmError> {
        let pages = self.file_pages(file);
        if index >= pages {
            return Err(MmError::NotFound);
        }
        let idx = index as u32;
        let f = match self.cache_find(file, idx) {
            Some((_, f)) => {
                self.events.cache_hits += 1;
                self.mark_accessed(f);
                f
            }
            None => {
                self.events.cache_misses += 1;
                if access == Access::Overwrite {
                    let f = self.get_free(be)?;
                    self.add_to_cache(f, file, idx);
                    self.frames[f as usize].flags |= F_REFERENCED;
                    f
                } else {
                    self.read_pages(be, file, index, pages)?
                }
            }
        };
        if pin {
            self.pin(f);
        }
        if access != Access::Read && self.frames[f as usize].flags & F_DIRTY == 0 {
            self.frames[f as usize].flags |= F_DIRTY;
            self.dirty += 1;
            if self.dirty > self.params.dirty_limit {
                // balance_dirty_pages: the writer writes back down to the background level.
                self.pin(f);
                let r = self.writeback(be, self.params.dirty_background);
                self.unpin(f);
                r?;
            }
        }
        Ok(f)
    }

    pub(crate) fn add_to_cache(&mut self, f: u32, file: u32, idx: u32) {
        let fr = &mut self.frames[f as usize];
        fr.kind = PageKind::File;
        fr.owner = file;
        fr.index = idx;
        self.cache_insert(f);
        self.cached += 1;
        self.push_front(L_FILE_INACTIVE, f);
    }

    /// `sync; echo 1 > /proc/sys/vm/drop_caches`: writes dirty pages, then frees every
    /// unpinned page-cache page. Returns the pages dropped.
    pub fn drop_caches<B: Backend>(&mut self, be: &mut B) -> Result<u32, MmError> {
        self.sync(be)?;
        let mut dropped = 0;
        for list in [L_FILE_INACTIVE, L_FILE_ACTIVE] {
            let mut f = self.lists[usize::from(list)].tail;
            while f != NIL {
                let prev = self.frames[f as usize].prev;
                if self.frames[f as usize].pins == 0 {
                    self.evict_file(f);
                    dropped += 1;
                }
                f = prev;
            }
        }
        self.events.dropped += u64::from(dropped);
        Ok(dropped)
    }

    pub(crate) fn evict_file(&mut self, f: u32) {
        let fr = self.frames[f as usize];
        debug_assert!(fr.flags & F_DIRTY == 0);
        let (s, _) = self
            .cache_find(fr.owner, fr.index)
            .expect("page-cache page missing from the hash table");
        self.cache_remove_slot(s);
        self.unlink(f);
        self.cached -= 1;
        self.put_free(f);
    }
}
