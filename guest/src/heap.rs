//! The global allocator: a heap over one region taken from the early allocator, for the few
//! workloads that use a library which allocates (`compress`: miniz_oxide's DEFLATE). The
//! bookkeeping is `memvisor_guest_mm::heap::Ranges` (first fit, merged on free) behind a spin
//! lock. Until a workload calls [`init`] the heap is empty and every allocation fails, so no
//! other workload takes memory the memory manager does not see.

use core::alloc::{GlobalAlloc, Layout};

use memvisor_guest_mm::heap::Ranges;

use crate::sync::SpinLock;

struct Heap(SpinLock<Ranges>);

#[global_allocator]
static HEAP: Heap = Heap(SpinLock::new(Ranges::new()));

// SAFETY: the ranges handed out lie in the region `init` took from the early allocator (RAM,
// identity-mapped writable, used by nothing else), never overlap while allocated (the table
// only hands out free ranges and catches double frees), and are aligned as asked.
unsafe impl GlobalAlloc for Heap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match self.0.lock().alloc(layout.size(), layout.align()) {
            Some(addr) => addr as *mut u8,
            None => core::ptr::null_mut(),
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.0.lock().free(ptr as usize, layout.size());
    }
}

/// Sets `bytes` (rounded up to pages) aside for the heap, from the early allocator: before the
/// memory manager takes the rest of RAM. Once only.
pub fn init(bytes: usize) -> Result<(), &'static str> {
    let pages = bytes.div_ceil(crate::early_alloc::PAGE_SIZE);
    let start = crate::early_alloc::alloc_pages(pages).ok_or("out of memory for the heap")?;
    let mut h = HEAP.0.lock();
    if h.free_bytes() + h.used() > 0 {
        return Err("heap set up twice");
    }
    h.add(start, pages * crate::early_alloc::PAGE_SIZE);
    Ok(())
}

/// (bytes handed out now, the most at once, free bytes).
pub fn usage() -> (usize, usize, usize) {
    let h = HEAP.0.lock();
    (h.used(), h.peak(), h.free_bytes())
}
