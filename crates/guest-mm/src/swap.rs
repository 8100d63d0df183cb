//! Swap (Linux's `mm/swap_state.c` and `mm/page_io.c`): swap-in with cluster readahead into the
//! swap cache, and swap-out of reclaim's victims in runs of consecutive slots, on the slots of
//! `swapfile.rs`.

use crate::mm_types::{L_ANON_ACTIVE, NIL, PTE_SWAPPED, SWAP_OWNER};
use crate::{Backend, Dev, Mm, MmError};

impl Mm<'_> {
    /// Uses a swap disk of `slots` slots (`swap_map` must hold at least `slots` bits).
    /// Only valid while no slot is in use.
    pub fn set_swap(&mut self, slots: u32) {
        self.swap.set(slots);
    }

    /// Allocates a swap slot, next-fit from the last one (so successive swap-outs land in
    /// consecutive slots, like Linux's cluster allocator).
    pub fn swap_alloc(&mut self) -> Option<u32> {
        self.swap.alloc()
    }

    /// Frees a swap slot.
    pub fn swap_free(&mut self, s: u32) {
        self.swap.free(s);
        // A copy read ahead into the swap cache is stale from now on.
        if let Some((_, f)) = self.cache_find(SWAP_OWNER, s) {
            self.evict_file(f);
        }
    }

    /// Reads swap slot `slot` into a new frame, with the other in-use slots of its aligned
    /// cluster of `1 << page_cluster` slots (Linux's swap readahead), in one request per run
    /// of consecutive slots. The neighbours go into the swap cache (clean, inactive), where the
    /// fault that wants them finds them.
    pub(crate) fn swap_in<B: Backend>(&mut self, be: &mut B, slot: u32) -> Result<u32, MmError> {
        let window = 1u32 << self.params.page_cluster.min(6);
        let start = slot & !(window - 1);
        let mut frames = [NIL; 64];
        frames[(slot - start) as usize] = self.get_free(be)?;
        for s in start..(start + window).min(self.swap.slots()) {
            let k = (s - start) as usize;
            let in_use = self.swap.in_use(s);
            if s == slot || !in_use || self.cache_find(SWAP_OWNER, s).is_some() {
                continue;
            }
            if self.free_pages() <= self.params.low_free {
                break; // readahead must not cause reclaim
            }
            match self.get_free(be) {
                Ok(f) => frames[k] = f,
                Err(_) => break,
            }
        }
        let n = window as usize;
        let mut k = 0;
        while k < n {
            if frames[k] == NIL {
                k += 1;
                continue;
            }
            let mut run = 1;
            while k + run < n && frames[k + run] != NIL {
                run += 1;
            }
            self.events.io_requests += 1;
            if let Err(e) = be.read(
                Dev::Swap,
                1 + u64::from(start) + k as u64,
                &frames[k..k + run],
            ) {
                for &f in frames[..n].iter().filter(|&&f| f != NIL) {
                    self.put_free(f);
                }
                return Err(e.into());
            }
            k += run;
        }
        for (k, &f) in frames[..n].iter().enumerate() {
            if f == NIL {
                continue;
            }
            self.events.pswpin += 1;
            let s = start + k as u32;
            if s != slot {
                self.events.swap_ra += 1;
                self.add_to_cache(f, SWAP_OWNER, s);
            }
        }
        Ok(frames[(slot - start) as usize])
    }

    /// Writes the victims to their slots (one request per run of consecutive slots), points
    /// their PTEs at the slots and frees the frames.
    pub(crate) fn swap_out<B: Backend>(
        &mut self,
        be: &mut B,
        victims: &[u32],
        slots: &[u32],
    ) -> Result<u32, MmError> {
        let mut k = 0;
        while k < victims.len() {
            let mut run = 1;
            while k + run < victims.len() && slots[k + run] == slots[k] + run as u32 {
                run += 1;
            }
            self.events.io_requests += 1;
            if let Err(e) = be.write(Dev::Swap, 1 + u64::from(slots[k]), &victims[k..k + run]) {
                // Nothing from here on was swapped: put the pages back, free their slots.
                for j in k..victims.len() {
                    self.swap_free(slots[j]);
                    self.push_front(L_ANON_ACTIVE, victims[j]);
                }
                return Err(e.into());
            }
            k += run;
        }
        for (&f, &slot) in victims.iter().zip(slots) {
            let (pt, i, _) = self.anon_pte(be, f);
            Self::set_pte(be, pt, i, (u64::from(slot) << 12) | PTE_SWAPPED);
            self.anon -= 1;
            self.put_free(f);
        }
        let n = victims.len() as u64;
        self.events.pswpout += n;
        self.events.pgsteal += n;
        self.events.pgsteal_anon += n;
        Ok(victims.len() as u32)
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::{set_word, setup, word};
    use std::vec::Vec;

    #[test]
    fn anon_pages_swap_out_and_back_with_their_content() {
        let (mut mm, mut be) = setup(48, 16, 256);
        let t = mm.task_create().unwrap();
        for v in 0..100u64 {
            let f = mm.access(&mut be, t, v, true, false).unwrap();
            set_word(&mut be.ram[f as usize], 0, v * 7 + 1);
        }
        let s = mm.stats();
        assert!(s.events.pswpout > 50, "{s:?}");
        assert!(
            be.writes * 4 < s.events.pswpout,
            "swap-outs go in runs of consecutive slots: {} writes for {} pages",
            be.writes,
            s.events.pswpout
        );
        for v in 0..100u64 {
            let f = mm.access(&mut be, t, v, false, false).unwrap();
            assert_eq!(word(&be.ram[f as usize], 0), v * 7 + 1);
        }
        let c = mm.stats().events;
        assert!(c.pgmajfault + c.swap_ra_hits >= 90, "{c:?}");
        assert!(
            c.swap_ra_hits > 30,
            "sequential swap-ins hit the readahead: {c:?}"
        );
        mm.verify().unwrap();
        mm.task_exit(&mut be, t);
        assert_eq!(mm.stats().swap_used, 0);
    }

    #[test]
    fn swap_readahead_reads_a_cluster_and_freed_slots_drop_their_copies() {
        let (mut mm, mut be) = setup(64, 16, 256);
        let t = mm.task_create().unwrap();
        for v in 0..80u64 {
            let f = mm.access(&mut be, t, v, true, false).unwrap();
            set_word(&mut be.ram[f as usize], 0, v + 100);
        }
        // Make room: readahead never reclaims.
        mm.reclaim(&mut be, 40).unwrap();
        let swapped: Vec<u64> = (0..80)
            .filter(|&v| mm.page_state(&mut be, t, v).1)
            .collect();
        assert!(swapped.len() >= 16, "{swapped:?}");
        let r0 = be.reads;
        let v0 = swapped[0];
        mm.access(&mut be, t, v0, false, false).unwrap();
        assert_eq!(be.reads - r0, 1, "the cluster comes in one request");
        let c = mm.stats().events;
        assert!(c.swap_ra >= 7, "{c:?}");
        // A neighbour is now a swap-cache hit without I/O, with the right content.
        let v1 = swapped[1];
        let f = mm.access(&mut be, t, v1, false, false).unwrap();
        assert_eq!(be.reads - r0, 1);
        assert_eq!(word(&be.ram[f as usize], 0), v1 + 100);
        assert_eq!(mm.stats().events.swap_ra_hits, 1);
        // Exiting frees the slots and with them the read-ahead copies.
        mm.task_exit(&mut be, t);
        assert_eq!(mm.stats().cached, 0);
        assert_eq!(mm.stats().swap_used, 0);
        mm.verify().unwrap();
    }

    #[test]
    fn swap_slots_are_next_fit_and_never_double_allocated() {
        let (mut mm, _be) = setup(16, 16, 130);
        let a: Vec<u32> = (0..130).map(|_| mm.swap_alloc().unwrap()).collect();
        assert_eq!(a, (0..130).collect::<Vec<_>>());
        assert_eq!(mm.swap_alloc(), None);
        mm.swap_free(7);
        mm.swap_free(100);
        assert_eq!(mm.swap_alloc(), Some(7));
        assert_eq!(mm.swap_alloc(), Some(100));
    }
}
