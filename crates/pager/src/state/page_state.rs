//! Where one guest page's content is: the states of the table (`table.rs`).

use crate::page::{Block, ImageBlock};

/// Where one guest page's content is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageState {
    /// Never touched, or dropped because it was all zero: a fault installs a zero page.
    Zero,
    /// Mapped in guest RAM. `clean` names a swap block holding exactly this content; the page is
    /// then write-protected, so the first write faults and ends the association.
    Resident { clean: Option<Block> },
    /// Only in the swap store.
    Swapped(Block),
    /// Mapped in guest RAM and identical to this disk image block (VSwapper's Swap Mapper):
    /// either write-protected since it came to hold the block (a refault from the image, a disk
    /// write from it), or, filled by a guest disk read, left writable with the digest of the
    /// block's content recorded (the table's `mirror_digest`), which reclaim checks the
    /// write-protected page against before it drops it.
    Mirrored(ImageBlock),
    /// Dropped while it mirrored this image block: it refaults from the image.
    OnDisk(ImageBlock),
    /// Taken by the balloon: released to the host, content forgotten.
    Ballooned,
    /// Reported free by the guest: released to the host, content forgotten.
    Reported,
    /// Taken out of guest RAM for a working-set sample (ESX §5.3): its content is in slot `n` of
    /// the sample store, and its next access faults it back in and counts as a touch.
    Sampled(u32),
}

pub(crate) fn is_resident(s: PageState) -> bool {
    matches!(s, PageState::Resident { .. } | PageState::Mirrored(_))
}
