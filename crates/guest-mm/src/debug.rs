//! Consistency checks of the memory manager's state (Linux's `mm/debug.c` and
//! `CONFIG_DEBUG_VM`): list links, kinds against lists, the page-cache index and the counts.

use crate::mm_types::{
    PageKind, F_DIRTY, L_ANON_ACTIVE, L_ANON_INACTIVE, L_FILE_ACTIVE, L_FILE_INACTIVE, L_FREE,
    L_NONE, NIL,
};
use crate::Mm;

impl Mm<'_> {
    /// Checks the internal invariants (list links and lengths, kinds vs. lists, page-cache
    /// index, counts). Costs a pass over all frames.
    pub fn verify(&self) -> Result<(), &'static str> {
        for (l, list) in self.lists.iter().enumerate() {
            let mut count = 0u32;
            let mut f = list.head;
            let mut prev = NIL;
            while f != NIL {
                let fr = &self.frames[f as usize];
                if usize::from(fr.list) != l || fr.prev != prev {
                    return Err("broken list link");
                }
                count += 1;
                if count > self.total() {
                    return Err("list cycle");
                }
                prev = f;
                f = fr.next;
            }
            if list.tail != prev || list.len != count {
                return Err("list tail or length wrong");
            }
        }
        let mut by_kind = [0u32; 7];
        for (i, fr) in self.frames.iter().enumerate() {
            let want = match fr.kind {
                PageKind::Free => fr.list == L_FREE,
                PageKind::Anon => fr.list == L_ANON_ACTIVE || fr.list == L_ANON_INACTIVE,
                PageKind::File => fr.list == L_FILE_ACTIVE || fr.list == L_FILE_INACTIVE,
                _ => fr.list == L_NONE,
            };
            if !want {
                return Err("frame kind and list disagree");
            }
            if fr.kind == PageKind::File
                && self.cache_find(fr.owner, fr.index).map(|(_, f)| f) != Some(i as u32)
            {
                return Err("page-cache page not found by its key");
            }
            by_kind[fr.kind as usize] += 1;
        }
        let dirty = self
            .frames
            .iter()
            .filter(|f| f.kind == PageKind::File && f.flags & F_DIRTY != 0)
            .count() as u32;
        if by_kind[PageKind::Anon as usize] != self.anon
            || by_kind[PageKind::File as usize] != self.cached
            || self.cache.len() != self.cached
            || by_kind[PageKind::PageTable as usize] != self.page_tables
            || by_kind[PageKind::Balloon as usize] != self.balloon
            || dirty != self.dirty
        {
            return Err("page counts wrong");
        }
        if self.swap.count_used() != self.swap.used() {
            return Err("swap slot count wrong");
        }
        Ok(())
    }
}
