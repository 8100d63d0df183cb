//! Tasks' address spaces and demand paging (Linux's `mm/memory.c`): software page tables,
//! the access path with its minor and major faults, task exit, and page pins.

use crate::mm_types::{
    PageKind, Task, L_ANON_INACTIVE, NIL, PTE_ACCESSED, PTE_DIRTY, PTE_PRESENT, PTE_SWAPPED,
    SWAP_OWNER,
};
use crate::{Backend, Mm, MmError, MAX_TASKS, ROOT_ENTRIES, TASK_PAGES};

impl Mm<'_> {
    /// Creates a task with an empty address space.
    pub fn task_create(&mut self) -> Result<u32, MmError> {
        let t = self
            .tasks
            .iter()
            .position(|t| !t.used)
            .ok_or(MmError::NoSpace)?;
        self.tasks[t] = Task {
            used: true,
            root: NIL,
        };
        Ok(t as u32)
    }

    pub(crate) fn pte_ptr<B: Backend>(be: &mut B, pt: u32, i: usize) -> u64 {
        let p = be.page(pt);
        let mut w = [0u8; 8];
        w.copy_from_slice(&p[i * 8..i * 8 + 8]);
        u64::from_le_bytes(w)
    }

    pub(crate) fn set_pte<B: Backend>(be: &mut B, pt: u32, i: usize, v: u64) {
        be.page(pt)[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }

    pub(crate) fn root_entry<B: Backend>(&self, be: &mut B, t: usize, r: usize) -> u32 {
        let root = self.tasks[t].root;
        if root == NIL {
            return NIL;
        }
        let p = be.page(root);
        let mut w = [0u8; 4];
        w.copy_from_slice(&p[r * 4..r * 4 + 4]);
        u32::from_le_bytes(w)
    }

    fn new_table<B: Backend>(&mut self, be: &mut B, fill: u8) -> Result<u32, MmError> {
        let f = self.get_free(be)?;
        be.page(f).fill(fill);
        self.frames[f as usize].kind = PageKind::PageTable;
        self.page_tables += 1;
        Ok(f)
    }

    /// Ends a task: frees its pages, swap slots and page tables.
    pub fn task_exit<B: Backend>(&mut self, be: &mut B, t: u32) {
        let t = t as usize;
        assert!(self.tasks[t].used, "task {t} does not exist");
        let root = self.tasks[t].root;
        for r in 0..ROOT_ENTRIES {
            let pt = self.root_entry(be, t, r);
            if pt == NIL {
                continue;
            }
            for i in 0..512 {
                let pte = Self::pte_ptr(be, pt, i);
                if pte & PTE_PRESENT != 0 {
                    let f = (pte >> 12) as u32;
                    assert_eq!(self.frames[f as usize].pins, 0, "exit with a pinned page");
                    self.unlink(f);
                    self.anon -= 1;
                    self.put_free(f);
                } else if pte & PTE_SWAPPED != 0 {
                    self.swap_free((pte >> 12) as u32);
                }
            }
            self.page_tables -= 1;
            self.put_free(pt);
        }
        if root != NIL {
            self.page_tables -= 1;
            self.put_free(root);
        }
        self.tasks[t] = Task {
            used: false,
            root: NIL,
        };
    }

    /// The access path: returns the frame backing virtual page `vpn` of task `t`, faulting it
    /// in (zero-filled on first touch, read from swap after a swap-out) and setting the
    /// accessed bit, and the dirty bit when `write`. With `pin`, the frame cannot be reclaimed
    /// until [`Mm::unpin`].
    pub fn access<B: Backend>(
        &mut self,
        be: &mut B,
        t: u32,
        vpn: u64,
        write: bool,
        pin: bool,
    ) -> Result<u32, MmError> {
        let ti = t as usize;
        if ti >= MAX_TASKS || !self.tasks[ti].used {
            return Err(MmError::NotFound);
        }
        if vpn >= TASK_PAGES {
            return Err(MmError::BadAddress);
        }
        let (r, i) = ((vpn / 512) as usize, (vpn % 512) as usize);
        if self.tasks[ti].root == NIL {
            self.tasks[ti].root = self.new_table(be, 0xff)?;
        }
        let mut pt = self.root_entry(be, ti, r);
        if pt == NIL {
            pt = self.new_table(be, 0)?;
            let root = self.tasks[ti].root;
            be.page(root)[r * 4..r * 4 + 4].copy_from_slice(&pt.to_le_bytes());
        }
        let pte = Self::pte_ptr(be, pt, i);
        let wbit = if write { PTE_DIRTY } else { 0 };
        if pte & PTE_PRESENT != 0 {
            Self::set_pte(be, pt, i, pte | PTE_ACCESSED | wbit);
            let f = (pte >> 12) as u32;
            if pin {
                self.pin(f);
            }
            return Ok(f);
        }
        // Reclaim never changes a non-present entry, so `pte` stays current across allocations.
        let f;
        let mut new = PTE_PRESENT | PTE_ACCESSED | wbit;
        if pte & PTE_SWAPPED != 0 {
            let slot = (pte >> 12) as u32;
            if let Some((s, g)) = self.cache_find(SWAP_OWNER, slot) {
                // Brought in by swap readahead: take it out of the swap cache (a minor fault).
                self.cache_remove_slot(s);
                self.unlink(g);
                self.cached -= 1;
                self.events.swap_ra_hits += 1;
                self.events.pgfault += 1;
                f = g;
            } else {
                f = self.swap_in(be, slot)?;
                self.events.pgmajfault += 1;
            }
            self.swap_free(slot);
            // The swap copy is gone, so the page must be written again if evicted.
            new |= PTE_DIRTY;
        } else {
            f = self.get_free(be)?;
            if self.params.zero_on_alloc {
                be.zero(f);
                self.events.zeroed += 1;
            }
            self.events.pgfault += 1;
        }
        new |= u64::from(f) << 12;
        Self::set_pte(be, pt, i, new);
        let fr = &mut self.frames[f as usize];
        fr.kind = PageKind::Anon;
        fr.flags = 0;
        fr.owner = t;
        fr.index = vpn as u32; // vpn < TASK_PAGES < 2^32
        self.anon += 1;
        self.push_front(L_ANON_INACTIVE, f);
        if pin {
            self.pin(f);
        }
        Ok(f)
    }

    /// Whether virtual page `vpn` of task `t` is resident, swapped or untouched:
    /// `(present, swapped)`.
    pub fn page_state<B: Backend>(&self, be: &mut B, t: u32, vpn: u64) -> (bool, bool) {
        let pt = self.root_entry(be, t as usize, (vpn / 512) as usize);
        if pt == NIL {
            return (false, false);
        }
        let pte = Self::pte_ptr(be, pt, (vpn % 512) as usize);
        (pte & PTE_PRESENT != 0, pte & PTE_SWAPPED != 0)
    }

    pub(crate) fn pin(&mut self, f: u32) {
        let fr = &mut self.frames[f as usize];
        fr.pins = fr.pins.checked_add(1).expect("too many pins on one page");
    }

    /// Releases a pin from [`Mm::access`] or [`Mm::file_page`].
    pub fn unpin(&mut self, f: u32) {
        let fr = &mut self.frames[f as usize];
        fr.pins = fr.pins.checked_sub(1).expect("unpin of an unpinned page");
    }

    pub(crate) fn anon_pte<B: Backend>(&self, be: &mut B, f: u32) -> (u32, usize, u64) {
        let fr = self.frames[f as usize];
        let pt = self.root_entry(be, fr.owner as usize, fr.index as usize / 512);
        let i = fr.index as usize % 512;
        (pt, i, Self::pte_ptr(be, pt, i))
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::setup;

    #[test]
    fn first_touch_is_zeroed_unless_disabled() {
        let (mut mm, mut be) = setup(64, 64, 64);
        let t = mm.task_create().unwrap();
        let f = mm.access(&mut be, t, 5, false, false).unwrap();
        assert!(be.ram[f as usize].iter().all(|&b| b == 0));
        assert_eq!(mm.stats().events.pgfault, 1);
        mm.params.zero_on_alloc = false;
        let g = mm.access(&mut be, t, 6, false, false).unwrap();
        assert!(be.ram[g as usize].iter().all(|&b| b == 0xaa));
        // A second access is no fault.
        assert_eq!(mm.access(&mut be, t, 5, true, false).unwrap(), f);
        assert_eq!(mm.stats().events.pgfault, 2);
        mm.task_exit(&mut be, t);
        assert_eq!(mm.free_pages(), 64);
        mm.verify().unwrap();
    }
}
