//! The data disk's file system (Linux's `fs/`): mounting it and the file table, looking files
//! up, and creating them; the on-disk layout itself is [`format`](crate::format).

use crate::format::{Extent, FileEntry, Superblock, BLOCK_SIZE, ENTRIES_PER_BLOCK, ENTRY_SIZE};
use crate::{Backend, Dev, Mm, MmError, MAX_FILES, PAGE_SIZE};

impl Mm<'_> {
    /// Reads the superblock and file table of the data disk.
    pub fn mount<B: Backend>(&mut self, be: &mut B) -> Result<(), MmError> {
        let scratch = self.alloc_kernel(be)?;
        let r = self.mount_with(be, scratch);
        self.free_kernel(scratch);
        r
    }

    fn mount_with<B: Backend>(&mut self, be: &mut B, scratch: u32) -> Result<(), MmError> {
        self.events.io_requests += 1;
        be.read(Dev::Data, 0, &[scratch])?;
        let sb = Superblock::decode(be.page(scratch)).map_err(|_| MmError::BadFs)?;
        let n = (sb.nr_files as usize).min(MAX_FILES);
        for b in 0..n.div_ceil(ENTRIES_PER_BLOCK) {
            self.events.io_requests += 1;
            be.read(Dev::Data, 1 + b as u64, &[scratch])?;
            for e in 0..ENTRIES_PER_BLOCK {
                let i = b * ENTRIES_PER_BLOCK + e;
                if i >= n {
                    break;
                }
                let slot = &be.page(scratch)[e * ENTRY_SIZE..(e + 1) * ENTRY_SIZE];
                self.files[i] = FileEntry::decode(slot, &sb).map_err(|_| MmError::BadFs)?;
            }
        }
        self.sb = Some(Superblock {
            nr_files: n as u32,
            ..sb
        });
        Ok(())
    }

    /// The file system's superblock, once mounted.
    pub fn superblock(&self) -> Option<&Superblock> {
        self.sb.as_ref()
    }

    /// Number of files.
    pub fn nr_files(&self) -> u32 {
        self.sb.map_or(0, |s| s.nr_files)
    }

    /// A file's table entry.
    pub fn file(&self, id: u32) -> Option<&FileEntry> {
        (id < self.nr_files()).then(|| &self.files[id as usize])
    }

    /// Finds a file by name.
    pub fn lookup(&self, name: &str) -> Option<u32> {
        (0..self.nr_files()).find(|&i| self.files[i as usize].name() == name)
    }

    /// Pages of a file.
    pub fn file_pages(&self, id: u32) -> u64 {
        self.file(id)
            .map_or(0, |f| f.size.div_ceil(PAGE_SIZE as u64))
    }

    /// Creates a file of `size` bytes in one extent (contents undefined until written) and
    /// writes the superblock and the table block to disk.
    pub fn file_create<B: Backend>(
        &mut self,
        be: &mut B,
        name: &str,
        size: u64,
    ) -> Result<u32, MmError> {
        let mut sb = self.sb.ok_or(MmError::BadFs)?;
        let id = sb.nr_files as usize;
        if id >= MAX_FILES.min(sb.max_files()) {
            return Err(MmError::NoSpace);
        }
        let blocks = size.div_ceil(BLOCK_SIZE as u64);
        let end = sb.next_free.checked_add(blocks).ok_or(MmError::NoSpace)?;
        if end > sb.total_blocks {
            return Err(MmError::NoSpace);
        }
        let mut e = FileEntry::new(name, size);
        e.extents[0] = Extent {
            start: sb.next_free,
            len: blocks,
        };
        sb.next_free = end;
        sb.nr_files += 1;
        self.files[id] = e;
        self.sb = Some(sb);
        let scratch = self.alloc_kernel(be)?;
        let r = self.write_meta(be, scratch, id);
        self.free_kernel(scratch);
        r.map(|()| id as u32)
    }

    fn write_meta<B: Backend>(
        &mut self,
        be: &mut B,
        scratch: u32,
        id: usize,
    ) -> Result<(), MmError> {
        let sb = self.sb.ok_or(MmError::BadFs)?;
        let b = id / ENTRIES_PER_BLOCK;
        let page = be.page(scratch);
        page.fill(0);
        for e in 0..ENTRIES_PER_BLOCK {
            let i = b * ENTRIES_PER_BLOCK + e;
            if i < sb.nr_files as usize {
                self.files[i].encode(&mut page[e * ENTRY_SIZE..(e + 1) * ENTRY_SIZE]);
            }
        }
        self.events.io_requests += 2;
        be.write(Dev::Data, 1 + b as u64, &[scratch])?;
        sb.encode(be.page(scratch));
        be.write(Dev::Data, 0, &[scratch])?;
        Ok(())
    }
}
