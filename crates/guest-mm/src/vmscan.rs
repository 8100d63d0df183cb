//! Reclaim (Linux's `mm/vmscan.c`): scanning the inactive lists from their tails, split between
//! anon and file by swappiness, refilling them from the active lists, and second chances for
//! referenced anonymous pages.

use crate::mm_types::{
    F_DIRTY, F_REFERENCED, L_ANON_ACTIVE, L_ANON_INACTIVE, L_FILE_ACTIVE, L_FILE_INACTIVE, NIL,
    PTE_ACCESSED,
};
use crate::{Backend, Mm, MmError, MAX_BATCH};

impl Mm<'_> {
    /// Frees pages until `target` are free or nothing more can be freed: scans the inactive
    /// lists from their tails in batches of 32 split between anon and file by swappiness
    /// (anon share = swappiness / 200 while swap slots are free), refilling an inactive list
    /// from its active list when it is smaller. Returns the pages freed.
    pub fn reclaim<B: Backend>(&mut self, be: &mut B, target: u32) -> Result<u32, MmError> {
        const BATCH: u32 = 32;
        let mut freed = 0;
        let lru = self.anon + self.cached;
        let mut budget = 4 * u64::from(lru) + u64::from(BATCH);
        while self.free_pages() < target && budget > 0 {
            let anon_ok = self.swap.used() < self.swap.slots() && self.anon > 0;
            let file_ok = self.cached > 0;
            let (na, nf) = match (anon_ok, file_ok) {
                (false, false) => break,
                (true, false) => (BATCH, 0),
                (false, true) => (0, BATCH),
                (true, true) => {
                    let a = BATCH * self.params.swappiness.min(200) / 200;
                    (a, BATCH - a)
                }
            };
            freed += self.shrink(be, L_FILE_INACTIVE, L_FILE_ACTIVE, nf)?;
            freed += self.shrink(be, L_ANON_INACTIVE, L_ANON_ACTIVE, na)?;
            budget = budget.saturating_sub(u64::from(BATCH));
        }
        Ok(freed)
    }

    fn shrink<B: Backend>(
        &mut self,
        be: &mut B,
        inactive: u8,
        active: u8,
        n: u32,
    ) -> Result<u32, MmError> {
        if n == 0 {
            return Ok(0);
        }
        // Refill the inactive list (Linux's inactive_is_low with ratio 1, below 1 GiB).
        let mut k = 0;
        while k < n && self.lists[usize::from(inactive)].len < self.lists[usize::from(active)].len {
            let f = self.lists[usize::from(active)].tail;
            self.unlink(f);
            if inactive == L_ANON_INACTIVE {
                let (pt, i, pte) = self.anon_pte(be, f);
                Self::set_pte(be, pt, i, pte & !PTE_ACCESSED);
            } else {
                self.frames[f as usize].flags &= !F_REFERENCED;
            }
            self.push_front(inactive, f);
            self.events.pgdeactivate += 1;
            k += 1;
        }
        let mut freed = 0;
        // Anonymous victims are collected and written to swap in runs of consecutive slots.
        let mut victims = [NIL; MAX_BATCH];
        let mut slots = [0u32; MAX_BATCH];
        let mut nv = 0;
        for _ in 0..n {
            let f = self.lists[usize::from(inactive)].tail;
            if f == NIL {
                break;
            }
            self.events.pgscan += 1;
            if self.frames[f as usize].pins > 0 {
                self.unlink(f);
                self.push_front(inactive, f);
                continue;
            }
            if inactive == L_ANON_INACTIVE {
                if let Some(slot) = self.anon_victim(be, f) {
                    // Off the LRU while its write is pending.
                    self.unlink(f);
                    victims[nv] = f;
                    slots[nv] = slot;
                    nv += 1;
                    if nv == MAX_BATCH {
                        freed += self.swap_out(be, &victims[..nv], &slots[..nv])?;
                        nv = 0;
                    }
                }
            } else {
                if self.frames[f as usize].flags & F_DIRTY != 0 {
                    self.write_run(be, f)?;
                }
                self.evict_file(f);
                freed += 1;
                self.events.pgsteal += 1;
                self.events.pgsteal_file += 1;
            }
        }
        if nv > 0 {
            freed += self.swap_out(be, &victims[..nv], &slots[..nv])?;
        }
        Ok(freed)
    }

    /// Decides about an inactive anonymous page: referenced pages get a second chance on the
    /// active list; otherwise a swap slot is allocated for it.
    fn anon_victim<B: Backend>(&mut self, be: &mut B, f: u32) -> Option<u32> {
        let (pt, i, pte) = self.anon_pte(be, f);
        debug_assert_eq!(pte >> 12, u64::from(f));
        if pte & PTE_ACCESSED != 0 {
            Self::set_pte(be, pt, i, pte & !PTE_ACCESSED);
            self.unlink(f);
            self.push_front(L_ANON_ACTIVE, f);
            self.events.pgactivate += 1;
            return None;
        }
        let slot = self.swap_alloc();
        if slot.is_none() {
            self.unlink(f);
            self.push_front(L_ANON_ACTIVE, f);
        }
        slot
    }
}

#[cfg(test)]
mod tests {
    use crate::mm_types::Access;
    use crate::tests::setup;

    #[test]
    fn referenced_anon_pages_survive_reclaim_longer() {
        let (mut mm, mut be) = setup(64, 16, 256);
        // No swap readahead: it would fill the swap cache, which reclaim takes first.
        mm.params.page_cluster = 0;
        let t = mm.task_create().unwrap();
        for v in 0..40u64 {
            mm.access(&mut be, t, v, true, false).unwrap();
        }
        // A first pass clears the accessed bits: it activates what it scans, refills the inactive
        // list from the active tail and evicts the oldest pages (0..5), leaving 5..12 at the
        // inactive tail. Those are touched again and must be passed over for younger pages.
        mm.reclaim(&mut be, mm.free_pages() + 5).unwrap();
        for v in 0..5u64 {
            assert_eq!(mm.page_state(&mut be, t, v), (false, true));
        }
        for v in 5..12u64 {
            mm.access(&mut be, t, v, false, false).unwrap();
        }
        let before = mm.stats().events.pswpout;
        mm.reclaim(&mut be, mm.free_pages() + 3).unwrap();
        assert!(mm.stats().events.pswpout >= before + 3);
        for v in 5..12u64 {
            assert_eq!(
                mm.page_state(&mut be, t, v),
                (true, false),
                "hot page {v} evicted"
            );
        }
    }

    #[test]
    fn swappiness_steers_reclaim() {
        for (swappiness, expect_anon_first) in [(0, false), (200, true)] {
            let (mut mm, mut be) = setup(200, 600, 400);
            mm.params.swappiness = swappiness;
            let t = mm.task_create().unwrap();
            let a = mm.file_create(&mut be, "f", 80 * 4096).unwrap();
            for i in 0..80 {
                mm.file_page(&mut be, a, i, Access::Read, false).unwrap();
                mm.access(&mut be, t, i, true, false).unwrap();
            }
            mm.reclaim(&mut be, mm.free_pages() + 40).unwrap();
            let c = mm.stats();
            if expect_anon_first {
                assert_eq!(c.cached, 80, "{c:?}");
                assert!(c.events.pswpout >= 40);
            } else {
                assert_eq!(c.events.pswpout, 0, "{c:?}");
                assert!(c.cached <= 40);
            }
        }
    }
}
