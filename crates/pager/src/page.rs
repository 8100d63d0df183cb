//! The pager's basic types: the page size, a guest page's index, a swap-file block, a disk-image
//! block, and the slot of a store a page's content is in. A leaf: it imports nothing of the
//! crate, and every other file may import it.

/// The size of a guest page and of every store's slot, defined once for the workspace.
pub use memvisor_devices::ram::PAGE_SIZE;

/// Index of a 4 KiB guest page, counted over all RAM regions.
pub type PageIdx = u32;
/// Index of a 4 KiB block of the swap store.
pub type Block = u32;

/// A 4 KiB block of a guest disk image: disk index (its virtio slot order) and block number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ImageBlock {
    pub disk: u8,
    pub block: u32,
}

/// Which store a slot is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreId {
    /// The pager's swap file.
    Swap,
    /// Guest disk image number `n` (its virtio slot order), read-only to the pager.
    Image(u8),
    /// The pages out for a working-set sample (`sample.rs`), in host memory.
    Sample,
}

/// A page-sized slot of a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Slot {
    pub store: StoreId,
    pub index: u32,
}

impl Slot {
    pub fn swap(block: Block) -> Slot {
        Slot {
            store: StoreId::Swap,
            index: block,
        }
    }

    pub fn image(ib: ImageBlock) -> Slot {
        Slot {
            store: StoreId::Image(ib.disk),
            index: ib.block,
        }
    }

    pub fn sample(n: u32) -> Slot {
        Slot {
            store: StoreId::Sample,
            index: n,
        }
    }
}
