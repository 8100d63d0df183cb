//! Readahead (Linux's `mm/readahead.c`): a page-cache miss reads the page and the window after
//! it in one request.

use crate::mm_types::{F_REFERENCED, NIL};
use crate::{Backend, Dev, Mm, MmError, MAX_BATCH};

impl Mm<'_> {
    /// Reads page `index` and the readahead window after it; returns the frame of `index`.
    pub(crate) fn read_pages<B: Backend>(
        &mut self,
        be: &mut B,
        file: u32,
        index: u64,
        pages: u64,
    ) -> Result<u32, MmError> {
        let (block, contig) = self.files[file as usize]
            .map(index)
            .ok_or(MmError::NotFound)?;
        let window = u64::from(self.params.readahead_pages.max(1))
            .min(pages - index)
            .min(contig)
            .min(MAX_BATCH as u64) as usize;
        let mut batch = [NIL; MAX_BATCH];
        let mut n = 0;
        while n < window {
            let i = (index + n as u64) as u32;
            if n > 0 && self.cache_find(file, i).is_some() {
                break;
            }
            match self.get_free(be) {
                Ok(f) => {
                    batch[n] = f;
                    n += 1;
                }
                Err(e) if n == 0 => return Err(e),
                Err(_) => break,
            }
        }
        self.counters.io_requests += 1;
        if let Err(e) = be.read(Dev::Data, block, &batch[..n]) {
            for &f in &batch[..n] {
                self.put_free(f);
            }
            return Err(e.into());
        }
        self.counters.pgpgin += n as u64;
        self.counters.readahead += n as u64 - 1;
        // Insert in reverse so the requested page ends up nearest the list head.
        for k in (0..n).rev() {
            self.add_to_cache(batch[k], file, (index + k as u64) as u32);
        }
        self.frames[batch[0] as usize].flags |= F_REFERENCED;
        Ok(batch[0])
    }
}
