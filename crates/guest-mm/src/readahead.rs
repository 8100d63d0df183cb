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
        self.events.io_requests += 1;
        if let Err(e) = be.read(Dev::Data, block, &batch[..n]) {
            for &f in &batch[..n] {
                self.put_free(f);
            }
            return Err(e.into());
        }
        self.events.pgpgin += n as u64;
        self.events.readahead += n as u64 - 1;
        // Insert in reverse so the requested page ends up nearest the list head.
        for k in (0..n).rev() {
            self.add_to_cache(batch[k], file, (index + k as u64) as u32);
        }
        self.frames[batch[0] as usize].flags |= F_REFERENCED;
        Ok(batch[0])
    }
}

#[cfg(test)]
mod tests {
    use crate::mm_types::Access;
    use crate::tests::{set_word, setup, word};

    #[test]
    fn readahead_reads_a_window_in_one_request_and_use_once_pages_go_first() {
        let (mut mm, mut be) = setup(256, 600, 0);
        let a = mm.file_create(&mut be, "a", 100 * 4096).unwrap();
        let base = mm.file(a).unwrap().extents[0].start as usize;
        for i in 0..100 {
            set_word(&mut be.data[base + i], 0, 1000 + i as u64);
        }
        let r0 = be.reads;
        for i in 0..100u64 {
            let f = mm.file_page(&mut be, a, i, Access::Read, false).unwrap();
            assert_eq!(word(&be.ram[f as usize], 0), 1000 + i);
        }
        assert_eq!(be.reads - r0, 4, "100 pages with 32-page readahead");
        assert_eq!(mm.stats().events.readahead, 96);
        // Page 3 read a second time becomes active; a reclaim pass evicts inactive pages first.
        mm.file_page(&mut be, a, 3, Access::Read, false).unwrap();
        mm.file_page(&mut be, a, 3, Access::Read, false).unwrap();
        mm.reclaim(&mut be, mm.free_pages() + 50).unwrap();
        assert!(mm.cache_find(a, 3).is_some());
        mm.verify().unwrap();
    }
}
