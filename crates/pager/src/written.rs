//! The pages whose content changed other than by a vCPU's write, for a migration's pre-copy
//! rounds (docs/migration.md): KVM's dirty log sees what the vCPUs write, and this what the
//! devices write through the pager (`GuestRam::write`: disk reads, status bytes) and what the
//! pager forgets (a balloon inflate, a free page report: the page reads as zeros from then
//! on) or maps to the zero page (a deflate). Off, noting costs one atomic load.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::page::PageIdx;

#[derive(Default)]
pub(crate) struct Written {
    on: AtomicBool,
    pages: Mutex<Vec<(PageIdx, u32)>>,
}

impl Written {
    /// Starts noting (from nothing), or stops.
    pub fn track(&self, on: bool) {
        let mut pages = self.pages.lock().unwrap_or_else(|e| e.into_inner());
        pages.clear();
        self.on.store(on, Ordering::SeqCst);
    }

    /// Whether pages are being noted: a caller that must work out which pages changed asks
    /// first, so that nothing is worked out while no migration runs.
    pub fn tracking(&self) -> bool {
        self.on.load(Ordering::SeqCst)
    }

    /// Pages `first..first + n` changed.
    pub fn note(&self, first: PageIdx, n: u32) {
        if n > 0 && self.tracking() {
            let mut pages = self.pages.lock().unwrap_or_else(|e| e.into_inner());
            pages.push((first, n));
        }
    }

    /// The runs noted since the last take.
    pub fn take(&self) -> Vec<(PageIdx, u32)> {
        std::mem::take(&mut *self.pages.lock().unwrap_or_else(|e| e.into_inner()))
    }
}
