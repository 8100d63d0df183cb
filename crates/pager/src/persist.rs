//! Guest memory in a snapshot: what each page was ([`SavedPages`]), written from where each
//! page is without bringing it in (`PagerCore::save`), and the state table a restored pager
//! starts from (`PagerCore::restore_states`).
//!
//! A page's content is copied into the memory file only when nothing else holds it: a
//! resident page is copied from guest RAM, a swapped one read from the pool or the swap file,
//! a sampled one from the sample store; an all-zero page, a page the balloon holds or the
//! guest reported free, and a page identical to a block of a guest disk (the Swap Mapper's
//! `Mirrored` and `OnDisk`) are recorded, not copied. The memory file holds page `p` at byte
//! `p * 4096`, with holes where nothing was copied.
//!
//! A restored pager numbers the memory file's pages after the swap file's blocks
//! (`store/saved.rs`): each copied page starts `Swapped` to its own saved block, each disk
//! page `OnDisk` to its block, and nothing is read until the guest touches it.

use std::fs::File;
use std::os::unix::fs::FileExt;

use memvisor_devices::iobuf::IoBuf;

use crate::core::{PagerCore, Pages};
use crate::page::{ImageBlock, PageIdx, PAGE_SIZE};
use crate::saved_pages::{SavedKind, SavedPages};
use crate::state::page_state::PageState;
use crate::store::{self, PageStore};

/// Most pages read from a store or written to the memory file in one call.
const BATCH: u32 = 64;

/// Copied pages waiting to be written to the memory file, consecutive from `first`.
struct Out<'a> {
    file: &'a File,
    first: PageIdx,
    buf: Vec<u8>,
}

impl Out<'_> {
    fn add(&mut self, p: PageIdx, page: &[u8]) -> std::io::Result<()> {
        let n = u32::try_from(self.buf.len() / PAGE_SIZE).unwrap_or(u32::MAX);
        if self.first + n != p || n >= BATCH * 4 {
            self.flush()?;
            self.first = p;
        }
        self.buf.extend_from_slice(page);
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if !self.buf.is_empty() {
            self.file
                .write_all_at(&self.buf, u64::from(self.first) * PAGE_SIZE as u64)?;
            self.buf.clear();
        }
        Ok(())
    }
}

fn is_zero(page: &[u8]) -> bool {
    page.iter().all(|&b| b == 0)
}

impl PagerCore {
    /// Writes every guest page to `out` from where it is, or records where it is, under one
    /// hold of the page lock: the VM must be paused and its devices quiet, so that nothing
    /// waits on a fault meanwhile. No page is brought into guest RAM.
    pub(crate) fn save(&self, out: &File) -> std::io::Result<SavedPages> {
        let pages = self.lock();
        let table = &pages.table;
        let n = table.len();
        out.set_len(u64::from(n) * PAGE_SIZE as u64)?;
        let mut saved = SavedPages::default();
        let mut w = Out {
            file: out,
            first: 0,
            buf: Vec::new(),
        };
        let mut io = IoBuf::new(BATCH as usize * PAGE_SIZE);
        let mut in_ram = Vec::new();
        let mut p = 0;
        while p < n {
            let state = table.state(p);
            // Before the takeover, guest RAM is plain memory the table does not follow: every
            // page but the balloon's is read where it is (an untouched one reads as zeros).
            let plain =
                !pages.attached && !matches!(state, PageState::Ballooned | PageState::Reported);
            let kind = match state {
                _ if plain => None,
                PageState::Zero => Some(SavedKind::Zero),
                PageState::Ballooned => Some(SavedKind::Ballooned),
                PageState::Reported => Some(SavedKind::Reported),
                PageState::OnDisk(ImageBlock { disk, block }) => {
                    Some(SavedKind::Disk { disk, block })
                }
                PageState::Mirrored(ib) => {
                    in_ram.push(p);
                    // A mirror left writable is identical only while its digest matches.
                    let same = table
                        .mirror_digest(p)
                        .is_none_or(|want| self.digest.page(self.resident(p)) == want);
                    same.then_some(SavedKind::Disk {
                        disk: ib.disk,
                        block: ib.block,
                    })
                }
                _ => None,
            };
            if let Some(kind) = kind {
                saved.push(p, kind);
                p += 1;
                continue;
            }
            // The content is copied: one page from guest RAM, or a run from a store.
            let (count, from): (u32, Option<(&dyn PageStore, u32)>) = match state {
                PageState::Swapped(b) => {
                    let mut k = 1;
                    while k < BATCH && p + k < n && table.state(p + k) == PageState::Swapped(b + k)
                    {
                        k += 1;
                    }
                    (k, Some((&self.stores.swap, b)))
                }
                PageState::Sampled(slot) => (1, Some((&self.stores.sample, slot))),
                _ => (1, None),
            };
            let buf = io.get(count as usize * PAGE_SIZE);
            match from {
                Some((source, index)) => store::read(source, index, buf)?,
                None => {
                    if pages.attached {
                        in_ram.push(p);
                    }
                    buf.copy_from_slice(self.resident(p));
                }
            }
            for (i, page) in (0..count).zip(buf.chunks_exact(PAGE_SIZE)) {
                if is_zero(page) {
                    saved.push(p + i, SavedKind::Zero);
                } else {
                    if !pages.attached {
                        in_ram.push(p + i);
                    }
                    saved.push(p + i, SavedKind::Copied);
                    w.add(p + i, page)?;
                }
            }
            p += count;
        }
        w.flush()?;
        out.sync_all()?;
        saved.pages = n;
        saved.prefetch = self.map.region_runs(&in_ram);
        Ok(saved)
    }

    /// In a restored VM, on its own thread: touches the pages the guest had in RAM when the
    /// snapshot was taken, in page order, while they are still in the snapshot's memory file
    /// and the limit leaves room, so the fault path brings each in (with the run that comes
    /// with it, clean) before the guest asks for it.
    pub(crate) fn prefetch_saved(&self, runs: &[(PageIdx, u32)]) {
        let t0 = std::time::Instant::now();
        let mut touched = 0u64;
        'runs: for &(first, n) in runs {
            for p in first..first + n {
                {
                    let pages = self.lock();
                    if pages.table.resident() >= self.limit().saturating_sub(self.batch) {
                        break 'runs;
                    }
                    let PageState::Swapped(b) = pages.table.state(p) else {
                        continue;
                    };
                    if !pages.table.blocks.is_saved(b) {
                        continue;
                    }
                }
                // SAFETY: `p` is a page of guest RAM, mapped as long as the core lives; a read
                // of it faults it in through userfaultfd like any access of the guest's.
                unsafe { std::ptr::read_volatile(self.map.host(p) as *const u8) };
                touched += 1;
            }
        }
        tracing::info!(
            "restore: {touched} faults brought the snapshot's working set in, in {} ms",
            t0.elapsed().as_millis()
        );
    }

    /// Resident page `p`'s bytes, read in place.
    fn resident(&self, p: PageIdx) -> &[u8] {
        // SAFETY: `p` is resident to the table (or RAM is not taken over, so every page is
        // plain memory), so reading it faults nothing in through userfaultfd; the mapping lives
        // as long as the core. The caller holds the page lock with the VM paused, so nothing
        // changes the page while it is read.
        unsafe { std::slice::from_raw_parts(self.map.host(p) as *const u8, PAGE_SIZE) }
    }
}

/// Puts every page of a fresh state table (`blocks` made with `BlockMap::with_saved`) in the
/// state `saved` gives it. Pages recorded on a disk need the Swap Mapper, which follows guest
/// writes to those blocks.
pub(crate) fn restore_states(
    table: &mut crate::state::table::StateTable,
    saved: &SavedPages,
) -> Result<(), String> {
    saved.check()?;
    if saved.pages != table.len() {
        return Err(format!(
            "the snapshot holds {} pages of guest RAM, this VM has {}",
            saved.pages,
            table.len()
        ));
    }
    let base = table.blocks.saved_base();
    for r in &saved.runs {
        let first = r.first;
        match r.kind {
            SavedKind::Zero => {}
            SavedKind::Copied => {
                table.restore_run(first, r.count, PageState::Swapped(base + first))
            }
            SavedKind::Ballooned => table.restore_run(first, r.count, PageState::Ballooned),
            SavedKind::Reported => table.restore_run(first, r.count, PageState::Reported),
            SavedKind::Disk { .. } if !table.mech.mapper => {
                return Err(
                    "the snapshot refers to guest disk blocks: restore it with --mapper".into(),
                )
            }
            SavedKind::Disk { disk, block } => {
                for i in 0..r.count {
                    let block = block.checked_add(i).ok_or("a disk block overflows")?;
                    table.restore_on_disk(first + i, ImageBlock { disk, block });
                }
            }
        }
    }
    Ok(())
}

impl PagerCore {
    /// What each guest page is, for a migration's state (`SavedPages`, as a snapshot records
    /// it) without reading any content: a page with content is `Copied` (the destination asks
    /// for it, or is sent it), the rest as [`PagerCore::save`] records them. The VM must be
    /// paused and its devices quiet.
    pub(crate) fn migration_pages(&self) -> SavedPages {
        let pages = self.lock();
        let table = &pages.table;
        let states = table.states();
        let mut saved = SavedPages::default();
        let mut in_ram: Vec<(PageIdx, u32)> = Vec::new();
        // Run by run of one state (this is in a migration's downtime): only a mirror needs a
        // look of its own.
        let mut first: PageIdx = 0;
        while first < table.len() {
            let state = states[first as usize];
            let variant = std::mem::discriminant(&state);
            let count = match state {
                PageState::Mirrored(_) | PageState::OnDisk(_) => 1,
                _ => {
                    let rest = &states[first as usize + 1..];
                    let n = rest
                        .iter()
                        .position(|s| std::mem::discriminant(s) != variant)
                        .unwrap_or(rest.len());
                    1 + u32::try_from(n).unwrap_or(0)
                }
            };
            let plain =
                !pages.attached && !matches!(state, PageState::Ballooned | PageState::Reported);
            let kind = match state {
                _ if plain => SavedKind::Copied,
                PageState::Zero => SavedKind::Zero,
                PageState::Ballooned => SavedKind::Ballooned,
                PageState::Reported => SavedKind::Reported,
                PageState::OnDisk(ImageBlock { disk, block }) => SavedKind::Disk { disk, block },
                PageState::Mirrored(ib) => {
                    let same = table
                        .mirror_digest(first)
                        .is_none_or(|want| self.digest.page(self.resident(first)) == want);
                    match same {
                        true => SavedKind::Disk {
                            disk: ib.disk,
                            block: ib.block,
                        },
                        false => SavedKind::Copied,
                    }
                }
                _ => SavedKind::Copied,
            };
            if pages.attached && crate::state::page_state::is_resident(state) {
                match in_ram.last_mut() {
                    Some((f, n)) if *f + *n == first => *n += count,
                    _ => in_ram.push((first, count)),
                }
            }
            saved.push_run(first, count, kind);
            first += count;
        }
        saved.pages = table.len();
        saved.prefetch = self.map.split_runs(&in_ram);
        saved
    }

    /// Reads guest pages `first..` into `buf` (whole pages) from where each is, under one hold
    /// of the page lock and without bringing any in, as [`PagerCore::save`] does: RAM, the
    /// pool or swap file, the sample store, a disk image; a page with no content reads as
    /// zeros. For a migration's source, with the VM paused.
    pub(crate) fn read_in_place(&self, first: PageIdx, buf: &mut [u8]) -> std::io::Result<()> {
        let pages = self.lock();
        let table = &pages.table;
        let n = u32::try_from(buf.len() / PAGE_SIZE).unwrap_or(u32::MAX);
        if first.checked_add(n).is_none_or(|end| end > table.len()) {
            return Err(std::io::Error::other(format!(
                "pages {first}..+{n} are outside guest RAM"
            )));
        }
        let mut io = IoBuf::new(PAGE_SIZE);
        for (p, page) in (first..).zip(buf.chunks_exact_mut(PAGE_SIZE)) {
            let state = table.state(p);
            let from: Option<(&dyn PageStore, u32)> = match state {
                _ if !pages.attached => None,
                PageState::Swapped(b) => Some((&self.stores.swap, b)),
                PageState::Sampled(slot) => Some((&self.stores.sample, slot)),
                PageState::OnDisk(ib) => Some((
                    self.stores.get(crate::page::StoreId::Image(ib.disk))?,
                    ib.block,
                )),
                PageState::Zero | PageState::Ballooned | PageState::Reported => {
                    page.fill(0);
                    continue;
                }
                PageState::Resident { .. } | PageState::Mirrored(_) => None,
            };
            match from {
                Some((source, index)) => {
                    // Stores may read with `O_DIRECT`: through an aligned buffer.
                    let b = io.get(PAGE_SIZE);
                    store::read(source, index, b)?;
                    page.copy_from_slice(b);
                }
                None => page.copy_from_slice(self.resident(p)),
            }
        }
        Ok(())
    }
}

impl PagerCore {
    /// What [`crate::Pager::pages_with_content`] says, under one hold of the page lock.
    pub(crate) fn pages_with_content(&self) -> Vec<bool> {
        let pages = self.lock();
        (0..pages.table.len())
            .map(|p| {
                !pages.attached
                    || matches!(
                        pages.table.state(p),
                        PageState::Resident { .. } | PageState::Swapped(_) | PageState::Sampled(_)
                    )
            })
            .collect()
    }

    /// For a migration's source once the destination has acknowledged pages `first..first +
    /// count`: what holds their content here is given back (resident pages dropped with
    /// `MADV_DONTNEED`, swap blocks freed, which the flusher then drops from the pool) and each
    /// is `Reported` (content forgotten; the VM never runs here again). Pages without content
    /// here are left as they are. Returns the pages given back. `pages` is the page lock with
    /// no reclaim chunk in flight.
    pub(crate) fn free_sent(
        &self,
        mut pages: std::sync::MutexGuard<'_, Pages>,
        first: PageIdx,
        count: u32,
    ) -> std::io::Result<u64> {
        if first
            .checked_add(count)
            .is_none_or(|end| end > pages.table.len())
        {
            return Err(std::io::Error::other(format!(
                "pages {first}..+{count} are outside guest RAM"
            )));
        }
        let mut mapped = Vec::new();
        let mut freed = 0u64;
        for p in first..first + count {
            let state = pages.table.state(p);
            // Before the takeover every page is plain memory the table does not follow.
            if !pages.attached || crate::state::page_state::is_resident(state) {
                mapped.push(p);
            } else if matches!(state, PageState::Swapped(_) | PageState::Sampled(_)) {
                pages.table.discard(p, PageState::Reported);
                freed += 1;
            }
        }
        for (f, c) in self.map.region_runs(&mapped) {
            crate::takeover::split_huge(self, &mut pages, f, c);
            memvisor_devices::ram::dontneed(
                &self.mem,
                memvisor_devices::ram::GuestRange {
                    addr: self.map.gpa(f),
                    len: u64::from(c) * PAGE_SIZE as u64,
                },
            )?;
            for p in f..f + c {
                pages.table.discard(p, PageState::Reported);
                pages.prefetched[p as usize] = false;
            }
            freed += u64::from(c);
        }
        Ok(freed)
    }
}
