//! The Swap Mapper's mirrors (VSwapper): which pages mirror or relied on which disk image
//! blocks, the digests of the mirrors left writable, the disk writes that will make mirrors,
//! release readiness's marks, the refault stream from the image, and HyperDealer2's ghost cache
//! of the blocks whose pages left guest RAM. The table (`table.rs`) tells it every change of a
//! page's state and asks it; nothing else changes it.

use smallvec::SmallVec;

use super::page_state::{is_resident, PageState};
use crate::block_links::BlockLinks;
use crate::digest::Digest;
use crate::keyed_hash::{KeyedMap, KeyedState};
use crate::page::{ImageBlock, PageIdx};
use crate::page_map::PageMap;
use memvisor_policy::ghost::{Ghost, GHOST_BUCKETS};

/// The longest run an image refault brings in (1 MiB).
pub const IMAGE_WINDOW_MAX: u32 = 256;

/// What the Swap Mapper keeps beside the pages' states.
#[derive(Debug)]
pub struct Mirrors {
    /// Per page: a mirror release readiness protected and checked (`release.rs`), until it
    /// stops mirroring.
    ready: Vec<bool>,
    /// Pages made ready that the guest then wrote, so they stopped mirroring
    /// ([`Self::take_ready_lost`]).
    ready_lost: u64,
    /// For each image block, the pages that mirror it or were dropped relying on it.
    by_block: BlockLinks,
    /// Pages a device is writing to disk, left writable, that will mirror the blocks once the
    /// write lands if they still hold what was written.
    pending: KeyedMap<PageIdx, ImageBlock>,
    /// Mirrored pages a guest disk read filled or a guest disk write was made from, left
    /// writable: the digest of the block's content. Such a page mirrors its block only if its
    /// content still has this digest.
    digests: PageMap<Digest>,
    /// Changes of the mirrors: one more for each page that comes to mirror a block, stops
    /// mirroring, or gets a digest ([`Self::generation`]).
    generation: u64,
    /// The refault stream from the image: the block a refault continuing it would fault on, and
    /// the window the last refault used.
    image_stream: Option<(ImageBlock, u32)>,
    /// The ghost cache (HyperDealer2 §5.3) of image blocks whose pages left guest RAM: the
    /// table's `left_ram` says what enters, its `read_from_disk` and `image_refault` look
    /// blocks up. A block leaves it when a page comes to mirror it again, in each of the three
    /// ways that happens: a guest disk read (whose own lookup takes it out), a refault from the
    /// image (the table's `loaded`) and a landed disk write (`disk_write_done`).
    pub ghost: Ghost<ImageBlock, KeyedState>,
    /// Guest disk reads of a block the ghost cache held: blocks the guest's page cache had
    /// given up (to its balloon, or evicting it for another block) and read again. Refaults
    /// from the image of pages the pager dropped are not among them.
    pub guest_rereads: u64,
    /// The image block each page mirrored last, kept from the moment the association ended
    /// (a write, a device overwriting it, a refault as a write) until the page mirrors again:
    /// a guest disk read into the page then tells the guest evicted that block.
    ended: PageMap<ImageBlock>,
}

impl Mirrors {
    pub fn new(pages: u32) -> Self {
        Mirrors {
            ready: vec![false; pages as usize],
            ready_lost: 0,
            by_block: BlockLinks::default(),
            pending: KeyedMap::default(),
            digests: PageMap::new(pages),
            generation: 0,
            image_stream: None,
            // As many entries as the VM has pages: the guest's page cache cannot grow past its
            // RAM, so no extra demand is larger.
            ghost: Ghost::new(pages.max(1) as usize, GHOST_BUCKETS)
                .unwrap_or_else(|_| unreachable!("a capacity of one page and buckets")),
            guest_rereads: 0,
            ended: PageMap::new(pages),
        }
    }

    /// Page `p` changes state from `old` to `s`: its link to the block it mirrors or relies
    /// on, the block it mirrored last, its readiness, its digest and a pending disk write.
    pub fn moved(&mut self, p: PageIdx, old: PageState, s: PageState) {
        let block = |s: PageState| match s {
            PageState::Mirrored(ib) | PageState::OnDisk(ib) => Some(ib),
            _ => None,
        };
        // A page that goes on relying on the same block (a mirror dropped, say) keeps its link.
        if block(old) != block(s) {
            if let Some(ib) = block(old) {
                self.by_block.unlink(ib, p);
            }
            if let Some(ib) = block(s) {
                self.by_block.link(ib, p);
            }
        }
        if block(s).is_some() {
            self.ended.remove(p);
        } else if let Some(ib) = block(old) {
            self.ended.insert(p, ib);
        }
        self.ready[p as usize] = false;
        if matches!(old, PageState::Mirrored(_)) || matches!(s, PageState::Mirrored(_)) {
            self.generation += 1;
        }
        // A digest is set after the state, by the one caller that records one.
        self.digests.remove(p);
        if !is_resident(s) {
            // Its protection is gone with it: a refault may come back writable.
            self.pending.remove(&p);
        }
    }

    /// The pages that mirror `ib` or were dropped relying on it.
    pub fn linked(&self, ib: ImageBlock) -> SmallVec<[PageIdx; 2]> {
        self.by_block.pages(ib)
    }

    /// Takes the block `p` mirrored last, if its association ended and it mirrors nothing now.
    pub fn take_ended(&mut self, p: PageIdx) -> Option<ImageBlock> {
        self.ended.remove(p)
    }

    /// Records that a device is writing `p` out to `ib`.
    pub fn begin_pending(&mut self, p: PageIdx, ib: ImageBlock) {
        self.pending.insert(p, ib);
    }

    /// `p` will not mirror what a device is writing out from it (the write landed, or `p`
    /// changed).
    pub fn end_pending(&mut self, p: PageIdx) {
        self.pending.remove(&p);
    }

    /// Whether a device is writing `p` out.
    pub fn is_pending(&self, p: PageIdx) -> bool {
        self.pending.contains_key(&p)
    }

    /// Whether a device is writing `p` out to `ib`.
    pub fn write_pending(&self, p: PageIdx, ib: ImageBlock) -> bool {
        self.pending.get(&p) == Some(&ib)
    }

    /// The guest wrote mirrored `p`: had readiness made it ready, that readiness is lost.
    pub fn written(&mut self, p: PageIdx) {
        if self.ready[p as usize] {
            self.ready_lost += 1;
        }
    }

    /// Release readiness protected and checked mirrored `p`.
    pub fn made_ready(&mut self, p: PageIdx) {
        self.ready[p as usize] = true;
    }

    /// Pages made ready that guest writes took back since the last call.
    pub fn take_ready_lost(&mut self) -> u64 {
        std::mem::take(&mut self.ready_lost)
    }

    /// The digest mirrored `p`, left writable, must still have to mirror its block.
    pub fn digest(&self, p: PageIdx) -> Option<Digest> {
        self.digests.get(p)
    }

    /// `p` came to mirror its block writable, as long as its content has `digest`.
    pub fn set_digest(&mut self, p: PageIdx, digest: Digest) {
        self.digests.insert(p, digest);
        self.generation += 1;
    }

    /// `p` is a protected mirror now: no digest to check.
    pub fn forget_digest(&mut self, p: PageIdx) {
        self.digests.remove(p);
    }

    /// A number that changes whenever a page comes to mirror a block, stops mirroring, or is
    /// left writable with a digest.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The window of a refault of `ib` from the image, `base` pages for one that starts a
    /// stream. Pages of the stream that were still resident are skipped by the reader without
    /// a fault, so a refault up to one window past where the last run ended continues it, and
    /// doubles the window, up to [`IMAGE_WINDOW_MAX`].
    pub fn image_window(&self, ib: ImageBlock, base: u32) -> u32 {
        match self.image_stream {
            Some((next, w))
                if base > 0
                    && next.disk == ib.disk
                    && ib.block >= next.block
                    && ib.block - next.block <= w =>
            {
                w.saturating_mul(2).min(IMAGE_WINDOW_MAX.max(base))
            }
            _ => base,
        }
    }

    /// A refault from the image used window `w`: the next one continues the stream if it
    /// faults at `next`.
    pub fn image_stream_at(&mut self, next: ImageBlock, w: u32) {
        self.image_stream = Some((next, w));
    }
}
