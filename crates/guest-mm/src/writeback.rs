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
        self.counters.io_requests += 1;
        be.write(Dev::Data, block, &batch[..n])?;
        for &g in &batch[..n] {
            self.frames[g as usize].flags &= !F_DIRTY;
        }
        self.dirty -= n as u32;
        self.counters.pgpgout += n as u64;
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
