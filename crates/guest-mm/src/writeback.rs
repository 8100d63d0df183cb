//! Writeback of dirty page-cache pages (Linux's `mm/page-writeback.c`): runs of consecutive
//! dirty pages in one request, oldest first, down to a target; `sync`.

use crate::mm_types::{F_DIRTY, L_FILE_ACTIVE, L_FILE_INACTIVE, NIL};
use crate::{Backend, Dev, Mm, MmError, MAX_BATCH};

impl Mm<'_> {
    /// Writes back the dirty run of pages starting at frame `f` (unpinned; up to [`MAX_BATCH`]
    /// unpinned pages of the same file, consecutive on disk) in one request.
    pub(crate) fn write_run<B: Backend>(&mut self, be: &mut B, f: u32) -> Result<u32, MmError> {
        let fr = self.frames[f as usize];
        let file = fr.owner;
        let (block, contig) = self.files[file as usize]
            .map(u64::from(fr.index))
            .ok_or(MmError::NotFound)?;
        let mut batch = [NIL; MAX_BATCH];
        batch[0] = f;
        let mut n = 1;
        while n < MAX_BATCH && (n as u64) < contig {
            match self.cache_find(file, fr.index + n as u32) {
                Some((_, g))
                    if self.frames[g as usize].flags & F_DIRTY != 0
                        && self.frames[g as usize].pins == 0 =>
                {
                    batch[n] = g;
                    n += 1;
                }
                _ => break,
            }
        }
        self.events.io_requests += 1;
        be.write(Dev::Data, block, &batch[..n])?;
        for &g in &batch[..n] {
            self.frames[g as usize].flags &= !F_DIRTY;
        }
        self.dirty -= n as u32;
        self.events.pgpgout += n as u64;
        Ok(n as u32)
    }

    /// Writes back dirty page-cache pages, oldest (inactive tail) first, until at most `target` are dirty.
    pub fn writeback<B: Backend>(&mut self, be: &mut B, target: u32) -> Result<(), MmError> {
        for list in [L_FILE_INACTIVE, L_FILE_ACTIVE] {
            let mut f = self.lists[usize::from(list)].tail;
            while f != NIL && self.dirty > target {
                let prev = self.frames[f as usize].prev;
                // A pinned page may be half-way through a change: its writer marks it dirty
                // when it pins it, so it is written on a later pass (Linux: the page lock).
                let fr = self.frames[f as usize];
                if fr.flags & F_DIRTY != 0 && fr.pins == 0 {
                    self.write_run(be, f)?;
                }
                f = prev;
            }
        }
        Ok(())
    }

    /// Writes every dirty page-cache page that is not pinned (`sync`; pinned pages are being
    /// changed and stay dirty).
    pub fn sync<B: Backend>(&mut self, be: &mut B) -> Result<(), MmError> {
        self.writeback(be, 0)
    }
}

#[cfg(test)]
mod tests {
    use crate::mm_types::Access;
    use crate::tests::{set_word, setup, word};

    #[test]
    fn dirty_pages_are_written_on_sync_and_drop_caches_empties_the_cache() {
        let (mut mm, mut be) = setup(128, 600, 0);
        let a = mm.file_create(&mut be, "out", 10 * 4096).unwrap();
        for i in 0..10u64 {
            let f = mm
                .file_page(&mut be, a, i, Access::Overwrite, false)
                .unwrap();
            set_word(&mut be.ram[f as usize], 1, 77 + i);
        }
        assert_eq!(mm.stats().dirty, 10);
        let w0 = be.writes;
        mm.sync(&mut be).unwrap();
        assert_eq!(be.writes - w0, 1, "one contiguous run, one request");
        assert_eq!(mm.stats().dirty, 0);
        assert_eq!(mm.drop_caches(&mut be).unwrap(), 10);
        assert_eq!(mm.stats().cached, 0);
        let base = mm.file(a).unwrap().extents[0].start as usize;
        assert_eq!(word(&be.data[base + 4], 1), 81);
        // Re-mount sees the file.
        mm.sb = None;
        mm.mount(&mut be).unwrap();
        assert_eq!(mm.lookup("out"), Some(a));
        mm.verify().unwrap();
    }

    #[test]
    fn pinned_pages_are_neither_written_back_nor_dropped_while_pinned() {
        let (mut mm, mut be) = setup(64, 600, 0);
        let a = mm.file_create(&mut be, "w", 4 * 4096).unwrap();
        // Another CPU is half-way through overwriting page 1.
        let f = mm
            .file_page(&mut be, a, 1, Access::Overwrite, true)
            .unwrap();
        set_word(&mut be.ram[f as usize], 0, 1);
        mm.sync(&mut be).unwrap();
        assert_eq!(mm.drop_caches(&mut be).unwrap(), 0);
        assert_eq!(mm.stats().dirty, 1, "still dirty: its writer is not done");
        set_word(&mut be.ram[f as usize], 1, 2);
        mm.unpin(f);
        mm.sync(&mut be).unwrap();
        let base = mm.file(a).unwrap().extents[0].start as usize;
        assert_eq!(
            (word(&be.data[base + 1], 0), word(&be.data[base + 1], 1)),
            (1, 2)
        );
        mm.verify().unwrap();
    }
}
