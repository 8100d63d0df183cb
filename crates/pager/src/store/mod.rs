//! Where a page that is not in guest RAM can be read back from: the [`PageStore`] trait, one
//! implementation per place (the swap file in `swap.rs`, with the host-memory pool of `pool/`
//! in front of it, the guest's disk images in `image.rs`, the working-set sample in
//! `sample.rs`, a restored snapshot's memory file in `saved.rs`), and `Stores` (`stores.rs`), which finds the store a
//! [`Slot`](crate::page::Slot) names. Tesseract's indirections (`indirect/`: disk blocks that
//! refer to swap-file blocks) live here too, since disk images read through them.
//!
//! The fault path asks the state table for the slot of a faulting page and the run of
//! neighbours whose slots follow it, then reads the run from the store with one call. It never
//! asks which mechanism put the page there: a new tier (a host-memory pool, a block store) is a
//! new `PageStore` and a new [`StoreId`](crate::page::StoreId), not a new branch in the fault
//! path.

pub mod image;
pub mod indirect;
pub mod pool;
pub mod sample;
pub mod saved;
pub(crate) mod stores;
pub mod swap;

pub use crate::stats::StoreCounters;

/// A place pages can be read back from. Buffers are whole pages, page-aligned (stores may use
/// `O_DIRECT`); `index` is the slot of the buffer's first page, and the rest follow it.
pub trait PageStore: Send + Sync {
    /// What the store is, for messages: "the swap file", "disk image 0".
    fn describe(&self) -> String;
    /// Reads `buf.len() / 4096` consecutive slots from `index` on.
    fn read(&self, index: u32, buf: &mut [u8]) -> std::io::Result<()>;
    /// Writes `data` to consecutive slots from `index` on. A store the pager only reads from
    /// refuses.
    fn write(&self, index: u32, data: &[u8]) -> std::io::Result<()>;
    fn counters(&self) -> &StoreCounters;
}

/// `e`, saying which store failed to `what`.
fn failed(store: &dyn PageStore, what: &str, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{what} {} failed: {e}", store.describe()))
}

/// Counts `len` bytes read from `store` by other means than [`read`] (proactive swap-in's
/// copies straight out of the pool).
pub(crate) fn count_read(store: &dyn PageStore, len: usize) {
    let c = store.counters();
    StoreCounters::count(&c.reads, &c.bytes_read, len);
}

/// Reads through `store` and counts the call.
pub(crate) fn read(store: &dyn PageStore, index: u32, buf: &mut [u8]) -> std::io::Result<()> {
    store
        .read(index, buf)
        .map_err(|e| failed(store, "reading", e))?;
    let c = store.counters();
    StoreCounters::count(&c.reads, &c.bytes_read, buf.len());
    Ok(())
}

/// Writes through `store` and counts the call.
pub(crate) fn write(store: &dyn PageStore, index: u32, data: &[u8]) -> std::io::Result<()> {
    store
        .write(index, data)
        .map_err(|e| failed(store, "writing to", e))?;
    let c = store.counters();
    StoreCounters::count(&c.writes, &c.bytes_written, data.len());
    Ok(())
}

/// Most disk images a pager reads from (one per virtio-mmio slot).
pub const MAX_IMAGES: usize = 8;
