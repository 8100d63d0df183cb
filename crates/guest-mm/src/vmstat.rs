//! Statistics (Linux's `mm/vmstat.c`): [`Mm::stats`], the VM event counters and the current
//! page counts, in the types of `vm_event.rs`.

use crate::mm_types::{L_ANON_ACTIVE, L_ANON_INACTIVE, L_FILE_ACTIVE, L_FILE_INACTIVE};
use crate::vm_event::Stats;
use crate::Mm;

impl Mm<'_> {
    /// The event counters and the page counts.
    pub fn stats(&self) -> Stats {
        let len = |l: u8| self.lists[usize::from(l)].len;
        Stats {
            events: self.events,
            total: self.total(),
            free: self.free_pages(),
            cached: self.cached,
            dirty: self.dirty,
            anon: self.anon,
            page_tables: self.page_tables,
            balloon: self.balloon,
            kernel: self.kernel,
            swap_used: self.swap.used(),
            swap_total: self.swap.slots(),
            active: len(L_ANON_ACTIVE) + len(L_FILE_ACTIVE),
            inactive: len(L_ANON_INACTIVE) + len(L_FILE_INACTIVE),
        }
    }
}
