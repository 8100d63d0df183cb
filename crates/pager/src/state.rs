//! The page table of states: where each 4 KiB guest page's content is, and the decisions that
//! move it. Pure: no syscalls. The pager thread asks this table what to do and carries it out;
//! the model test in this file carries the same decisions out on a simulated memory.

use crate::block_links::BlockLinks;
use crate::blocks::BlockMap;
use crate::config::Mechanisms;
use crate::digest::Digest;
use crate::keyed_hash::{KeyedMap, KeyedState};
use crate::page::{Block, ImageBlock, PageIdx, Slot};
use crate::page_map::PageMap;
use crate::pattern::Patterns;
use crate::released::Released;
use crate::victim::{VictimPolicy, Victims};
use memvisor_policy::ghost::{Ghost, GHOST_BUCKETS};

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
    /// block's content recorded ([`PageTable::mirror_digest`]), which reclaim checks the
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

/// What to do about a fault on a page that is not mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultAction {
    /// Someone installed it meanwhile: wake the waiter.
    Wake,
    /// Install a zero page.
    Zero,
    /// Read the page from the store slot `from` (with the run [`PageTable::load_run`] gives)
    /// and install it; if `keep`, write-protected and still backed by that slot (a clean swap
    /// block kept for reuse, or an image block it mirrors).
    Load { from: Slot, keep: bool },
}

/// What reclaim does with one victim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// All zero: drop it, it refaults as a zero page.
    DropZero,
    /// Clean and its block still holds it: drop it, no write.
    DropClean(Block),
    /// Write it to a new block, then drop it.
    Write,
    /// It mirrors an image block: drop it, it refaults from the image (no write).
    DropMirrored(ImageBlock),
    /// Its content is already in this swap block (share before swap: reclaim compared them
    /// and took a reference): drop it, no write.
    DropShared(Block),
}

/// The state of every guest page, the resident set and the swap blocks.
#[derive(Debug)]
pub struct PageTable {
    pages: Vec<PageState>,
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
    /// mirroring, or gets a digest ([`Self::mirror_generation`]).
    mirror_generation: u64,
    pub blocks: BlockMap,
    pub victims: Victims,
    /// HyperDealer2's reference patterns of the mirrored pages (`pattern.rs`), kept with the
    /// Swap Mapper on (empty without).
    pub patterns: Patterns,
    pub mech: Mechanisms,
    /// The refault stream from the image: the block a refault continuing it would fault on, and
    /// the window the last refault used.
    image_stream: Option<(ImageBlock, u32)>,
    /// Pages by state, kept as every change happens (see [`Census`]).
    census: Census,
    /// Runs being read from their store without the page lock ([`Self::watch`]).
    watched: Vec<Watch>,
    next_watch: u64,
    /// The ghost cache (HyperDealer2 §5.3) of image blocks whose pages left guest RAM, with the
    /// Swap Mapper: see [`Self::left_ram`] for what enters, [`Self::read_from_disk`] and
    /// [`Self::image_refault`] for the lookups. A block leaves it when a page comes to mirror it
    /// again, in each of the three ways that happens: a guest disk read (whose own lookup takes
    /// it out), a refault from the image (`loaded`) and a landed disk write
    /// ([`Self::disk_write_done`]).
    pub ghost: Ghost<ImageBlock, KeyedState>,
    /// The image block each page mirrored last, kept from the moment the association ended
    /// (a write, a device overwriting it, a refault as a write) until the page mirrors again:
    /// a guest disk read into the page then tells the guest evicted that block.
    ended: PageMap<ImageBlock>,
    /// The pages instant release took, while they are out, their dwell times, and the
    /// reclamation cache (`released.rs`).
    pub released: Released,
    /// Pages a release took, and when, whose leaving the ghost cache and the dwell clock have
    /// not been told yet ([`Self::release`]).
    unrecorded: Vec<(PageIdx, std::time::Instant)>,
    /// Whether swapped-in pages kept clean are worth keeping so (`reuse_clean`).
    pub clean_reuse: CleanReuse,
}

/// What became of the swapped-in pages kept clean, write-protected with their blocks
/// (`reuse_clean`): a guest write costs a write fault and frees the block; reclaim dropping
/// one unwritten saves a write. When the guest writes nearly every page it swaps in (a
/// collector's heap), keeping them costs a fault each and saves nothing, so loads from swap
/// bring pages in writable, but in one cluster of every [`Self::SAMPLE`], which keeps them
/// clean to go on telling which way it goes. The counts halve every [`Self::WINDOW`] outcomes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CleanReuse {
    /// Kept pages the guest wrote.
    pub written: u32,
    /// Kept pages reclaim dropped unwritten.
    pub dropped: u32,
}

impl CleanReuse {
    const WINDOW: u32 = 4096;
    const SAMPLE: u32 = 8;
    /// Pages of a cluster that decides together (the pager's default cluster).
    const CLUSTER: u32 = 16;

    fn count(&mut self, written: bool) {
        if written {
            self.written += 1;
        } else {
            self.dropped += 1;
        }
        if self.written + self.dropped >= Self::WINDOW {
            self.written /= 2;
            self.dropped /= 2;
        }
    }

    /// Whether a load of `p` from swap for a read keeps it clean: unless more than 7 in 8 of
    /// the recent outcomes (at least 128 of them) were writes, and always in the sampled
    /// clusters.
    pub fn keep(&self, p: PageIdx) -> bool {
        self.written + self.dropped < Self::SAMPLE * Self::CLUSTER
            || self.written <= 7 * self.dropped
            || (p / Self::CLUSTER) % Self::SAMPLE == 0
    }
}

/// A run of pages whose slots are being read without the page lock, and which of them changed
/// state meanwhile.
#[derive(Debug)]
struct Watch {
    id: u64,
    first: PageIdx,
    changed: Vec<bool>,
}

/// How many guest pages are in each state, kept as running counts so reading them costs
/// nothing however large the VM is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Census {
    pub zero: u32,
    /// Resident pages, mirrored ones included.
    pub resident: u32,
    pub swapped: u32,
    pub ballooned: u32,
    pub reported: u32,
    /// Dropped while mirroring a disk block; they refault from the image.
    pub on_disk: u32,
    /// Resident and mirroring a disk block (also counted in `resident`).
    pub mirrored: u32,
    /// Out for a working-set sample.
    pub sampled: u32,
}

impl Census {
    /// The counters that hold a page in state `s`.
    fn slots(&mut self, s: PageState) -> [Option<&mut u32>; 2] {
        match s {
            PageState::Zero => [Some(&mut self.zero), None],
            PageState::Resident { .. } => [Some(&mut self.resident), None],
            PageState::Mirrored(_) => [Some(&mut self.resident), Some(&mut self.mirrored)],
            PageState::Swapped(_) => [Some(&mut self.swapped), None],
            PageState::Ballooned => [Some(&mut self.ballooned), None],
            PageState::Reported => [Some(&mut self.reported), None],
            PageState::OnDisk(_) => [Some(&mut self.on_disk), None],
            PageState::Sampled(_) => [Some(&mut self.sampled), None],
        }
    }

    fn moved(&mut self, from: PageState, to: PageState) {
        for c in self.slots(from).into_iter().flatten() {
            *c -= 1;
        }
        for c in self.slots(to).into_iter().flatten() {
            *c += 1;
        }
    }
}

/// The longest run an image refault brings in (1 MiB).
pub const IMAGE_WINDOW_MAX: u32 = 256;

impl PageTable {
    pub fn new(
        pages: u32,
        swap_blocks: u32,
        mech: Mechanisms,
        policy: VictimPolicy,
        seed: u64,
    ) -> Self {
        PageTable {
            pages: vec![PageState::Zero; pages as usize],
            ready: vec![false; pages as usize],
            ready_lost: 0,
            by_block: BlockLinks::default(),
            pending: KeyedMap::default(),
            digests: PageMap::new(pages),
            mirror_generation: 0,
            blocks: BlockMap::new(swap_blocks),
            victims: Victims::new(pages, policy, seed, mech.cluster),
            patterns: Patterns::new(if mech.mapper { pages } else { 0 }),
            mech,
            image_stream: None,
            census: Census {
                zero: pages,
                ..Census::default()
            },
            watched: Vec::new(),
            next_watch: 0,
            // As many entries as the VM has pages: the guest's page cache cannot grow past its
            // RAM, so no extra demand is larger.
            ghost: Ghost::new(pages.max(1) as usize, GHOST_BUCKETS)
                .unwrap_or_else(|_| unreachable!("a capacity of one page and buckets")),
            ended: PageMap::new(pages),
            released: Released::new(0),
            unrecorded: Vec::new(),
            clean_reuse: CleanReuse::default(),
        }
    }

    /// Starts noting which pages of `first..first + n` change state, while their slots are read
    /// without the page lock; [`Self::unwatch`] with the id returned tells which did. A page
    /// that did not has the same slot, which nothing wrote meanwhile (a slot is written only
    /// when it is given to a page, and it stays that page's until the page changes state), so
    /// what was read is its content.
    pub fn watch(&mut self, first: PageIdx, n: u32) -> u64 {
        let id = self.next_watch;
        self.next_watch += 1;
        self.watched.push(Watch {
            id,
            first,
            changed: vec![false; n as usize],
        });
        id
    }

    /// Ends watch `id`: for each page of its run, whether it changed state since
    /// [`Self::watch`].
    pub fn unwatch(&mut self, id: u64) -> Vec<bool> {
        match self.watched.iter().position(|w| w.id == id) {
            Some(i) => self.watched.swap_remove(i).changed,
            None => Vec::new(),
        }
    }

    pub fn len(&self) -> u32 {
        u32::try_from(self.pages.len()).unwrap_or(u32::MAX)
    }

    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    pub fn state(&self, p: PageIdx) -> PageState {
        self.pages[p as usize]
    }

    pub fn resident(&self) -> u32 {
        self.victims.len()
    }

    /// The one place a page changes state: keeps the resident set, the named (mirroring) set
    /// and the image-block links in step.
    fn set(&mut self, p: PageIdx, s: PageState) {
        let old = self.pages[p as usize];
        if let PageState::OnDisk(_) = old {
            // A released page is out as `OnDisk` until it changes state.
            self.released.state_changed(p, is_resident(s));
        }
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
        self.pages[p as usize] = s;
        self.ready[p as usize] = false;
        self.census.moved(old, s);
        if matches!(old, PageState::Mirrored(_)) || matches!(s, PageState::Mirrored(_)) {
            self.mirror_generation += 1;
        }
        // A digest is set after the state, by the one caller that records one.
        self.digests.remove(p);
        for w in &mut self.watched {
            if let Some(c) = p
                .checked_sub(w.first)
                .and_then(|i| w.changed.get_mut(i as usize))
            {
                *c = true;
            }
        }
        if !is_resident(s) {
            // Its protection is gone with it: a refault may come back writable.
            self.pending.remove(&p);
        }
        match (is_resident(old), is_resident(s)) {
            (false, true) => self.victims.insert(p),
            (true, false) => self.victims.remove(p),
            _ => {}
        }
        self.victims
            .set_named(p, matches!(s, PageState::Mirrored(_)));
        if self.mech.mapper {
            if matches!(s, PageState::Mirrored(_)) {
                self.patterns.mirrored(p);
            } else if matches!(old, PageState::Mirrored(_)) {
                self.patterns.left(p);
            }
        }
    }

    /// A fault on page `p` (a write if `write`): what to install. The caller installs it, then
    /// calls [`Self::installed`].
    pub fn fault(&self, p: PageIdx, write: bool) -> FaultAction {
        match self.state(p) {
            PageState::Resident { .. } | PageState::Mirrored(_) => FaultAction::Wake,
            PageState::Zero | PageState::Ballooned | PageState::Reported => FaultAction::Zero,
            PageState::OnDisk(ib) => FaultAction::Load {
                from: Slot::image(ib),
                keep: !write,
            },
            PageState::Swapped(block) => FaultAction::Load {
                from: Slot::swap(block),
                keep: self.mech.reuse_clean && !write && self.clean_reuse.keep(p),
            },
            PageState::Sampled(n) => FaultAction::Load {
                from: Slot::sample(n),
                keep: false,
            },
        }
    }

    /// Records that `p` was installed after `action`.
    pub fn installed(&mut self, p: PageIdx, action: FaultAction) {
        match action {
            FaultAction::Wake => {}
            FaultAction::Zero => self.set(p, PageState::Resident { clean: None }),
            FaultAction::Load { keep, .. } => self.loaded(p, keep),
        }
        self.victims.touch(p);
    }

    /// Records that swapped or on-disk `p` came in from its slot, kept clean and protected if
    /// `keep`.
    fn loaded(&mut self, p: PageIdx, keep: bool) {
        let s = match self.state(p) {
            PageState::Swapped(block) => {
                if !keep {
                    self.blocks.release(block);
                }
                PageState::Resident {
                    clean: keep.then_some(block),
                }
            }
            PageState::OnDisk(ib) => {
                // Its block is in guest RAM again.
                self.ghost.remove(&ib);
                if keep {
                    PageState::Mirrored(ib)
                } else {
                    PageState::Resident { clean: None }
                }
            }
            PageState::Sampled(_) => PageState::Resident { clean: None },
            s => unreachable!("only pages swapped, on disk or sampled are loaded, not {s:?}"),
        };
        self.set(p, s);
    }

    /// Records that the run `lo..lo + n` of swapped or on-disk pages came in, kept clean and
    /// protected if `keep`.
    pub fn install_run(&mut self, lo: PageIdx, n: u32, keep: bool) {
        let mut refault: Vec<(PageIdx, ImageBlock)> = Vec::new();
        for q in lo..lo + n {
            if let (PageState::OnDisk(ib), true) = (self.state(q), keep && self.mech.mapper) {
                refault.push((q, ib));
            }
            self.loaded(q, keep);
            self.victims.touch(q);
        }
        // A run from the image is of one disk's consecutive blocks.
        if let (Some(&(_, first)), Some(&(_, last))) = (refault.first(), refault.last()) {
            let pages: Vec<(PageIdx, u32)> = refault.iter().map(|&(q, ib)| (q, ib.block)).collect();
            let (start, end) = (first.block.min(last.block), first.block.max(last.block) + 1);
            self.patterns.refault(first.disk, start, end, &pages);
        }
    }

    /// One guest disk read of `disk` landed, its whole pages `read` (each with its block) filled
    /// and recorded ([`Self::read_from_disk`]): with the Swap Mapper, the reference patterns see
    /// it as one read (`pattern.rs`) of the blocks from its first to its last.
    pub fn disk_read_seen(&mut self, disk: u8, read: &[(PageIdx, u32)]) {
        if !self.mech.mapper {
            return;
        }
        let (Some(start), Some(last)) = (
            read.iter().map(|&(_, b)| b).min(),
            read.iter().map(|&(_, b)| b).max(),
        ) else {
            return;
        };
        let mut pages: Vec<(PageIdx, u32)> = read
            .iter()
            .copied()
            .filter(|&(p, block)| self.state(p) == PageState::Mirrored(ImageBlock { disk, block }))
            .collect();
        pages.sort_unstable_by_key(|&(_, b)| b);
        self.patterns.read(
            disk,
            start,
            last.saturating_add(1),
            &pages,
            std::time::Instant::now(),
        );
    }

    /// The run of pages that comes in with a load of `p` from its slot: `(first page, count)`,
    /// their slots consecutive in the same store (see [`Self::swap_run`] and [`Self::image_run`]).
    pub fn load_run(&mut self, p: PageIdx) -> (PageIdx, u32) {
        match self.state(p) {
            PageState::Swapped(_) => self.swap_run(p),
            PageState::OnDisk(_) => self.image_run(p),
            _ => (p, 1),
        }
    }

    /// Pages next to `p` that can come in with its swap-in: a run of swapped pages whose blocks
    /// continue `p`'s block run, so one read fetches them all. Returns `(first page, count)`.
    pub fn swap_run(&self, p: PageIdx) -> (PageIdx, u32) {
        let PageState::Swapped(b) = self.state(p) else {
            return (p, 1);
        };
        self.run_around(p, self.mech.prefetch, |q| {
            let expect = i64::from(b) + i64::from(q) - i64::from(p);
            matches!(self.state(q), PageState::Swapped(c) if i64::from(c) == expect)
        })
    }

    /// The run of pages around `p` for which `fits` holds, at most `w` long (at most half
    /// of it before `p`), with `p` itself always in it. Returns `(first page, count)`.
    fn run_around(&self, p: PageIdx, w: u32, fits: impl Fn(PageIdx) -> bool) -> (PageIdx, u32) {
        let mut lo = p;
        while lo > 0 && p - (lo - 1) <= w / 2 && fits(lo - 1) {
            lo -= 1;
        }
        let mut hi = p + 1;
        while hi < self.len() && hi - lo < w.max(1) && fits(hi) {
            hi += 1;
        }
        (lo, hi - lo)
    }

    /// A write fault on a write-protected page. Returns whether the page is mapped (then the
    /// caller removes the protection; otherwise it only wakes the writer, who faults again).
    pub fn write_fault(&mut self, p: PageIdx) -> bool {
        // A page about to mirror what a device is writing out has just changed: it will not.
        self.pending.remove(&p);
        if self.victims.warm(p) {
            self.victims.cache_hits += 1;
        }
        match self.state(p) {
            PageState::Mirrored(_) => {
                if self.ready[p as usize] {
                    self.ready_lost += 1;
                }
                self.set(p, PageState::Resident { clean: None });
                self.victims.touch(p);
                true
            }
            PageState::Resident { clean } => {
                if let Some(b) = clean {
                    self.blocks.release(b);
                    self.clean_reuse.count(true);
                }
                self.set(p, PageState::Resident { clean: None });
                self.victims.touch(p);
                true
            }
            _ => false,
        }
    }

    /// What reclaim does with resident victim `p`, whose content is all zero if `is_zero`.
    pub fn disposition(&self, p: PageIdx, is_zero: bool) -> Disposition {
        match self.state(p) {
            PageState::Mirrored(ib) => Disposition::DropMirrored(ib),
            PageState::Resident { clean: Some(b) } if self.mech.reuse_clean => {
                Disposition::DropClean(b)
            }
            _ if is_zero && self.mech.zero_detection => Disposition::DropZero,
            _ => Disposition::Write,
        }
    }

    /// Records that reclaim dropped `p` as `d` (`written` is the new block for [`Disposition::Write`]).
    pub fn reclaimed(&mut self, p: PageIdx, d: Disposition, written: Option<Block>) {
        if let PageState::Resident { clean: Some(b) } = self.state(p) {
            if d == Disposition::DropClean(b) {
                self.clean_reuse.count(false);
            } else {
                self.blocks.release(b);
            }
        }
        let s = match (d, written) {
            (Disposition::DropZero, _) => PageState::Zero,
            (Disposition::DropClean(b) | Disposition::DropShared(b), _) => PageState::Swapped(b),
            (Disposition::DropMirrored(ib), _) => PageState::OnDisk(ib),
            (Disposition::Write, Some(b)) => PageState::Swapped(b),
            (Disposition::Write, None) => unreachable!("a written page has a block"),
        };
        self.set(p, s);
        if let Disposition::DropMirrored(ib) = d {
            self.left_ram(ib);
        }
    }

    /// Records that a release dropped `p`, which mirrored `ib`, at `at`: it is `OnDisk` now.
    /// Telling the ghost cache and the dwell clock waits for [`Self::record_released`], so that
    /// a release answers before that bookkeeping; the page lock runs it before anyone else
    /// reads the table (`PagerCore::lock`), so no one sees the difference.
    pub fn release(&mut self, p: PageIdx, ib: ImageBlock, at: std::time::Instant) {
        self.set(p, PageState::OnDisk(ib));
        self.unrecorded.push((p, at));
    }

    /// Whether [`Self::release`] left pages to record.
    pub fn has_unrecorded(&self) -> bool {
        !self.unrecorded.is_empty()
    }

    /// Tells the ghost cache and the dwell clock of the pages [`Self::release`] took, as
    /// [`Self::reclaimed`] does at once for the pages reclaim drops; returns how many. A page
    /// that is no longer `OnDisk` came back before it was recorded (a waiter that was woken
    /// inside the page lock ran first) and is passed over: its block is in guest RAM again.
    pub fn record_released(&mut self) -> usize {
        let mut list = std::mem::take(&mut self.unrecorded);
        for &(p, at) in &list {
            if let PageState::OnDisk(ib) = self.state(p) {
                self.left_ram(ib);
                self.released.left(p, at);
            }
        }
        let n = list.len();
        list.clear();
        self.unrecorded = list;
        n
    }

    /// The page holding image block `ib` left guest RAM (reclaim dropped it, the guest
    /// evicted it, a release took it): with the Swap Mapper, `ib` enters the ghost cache at
    /// its most recent end, unless another resident page still mirrors it.
    pub fn left_ram(&mut self, ib: ImageBlock) {
        if !self.mech.mapper {
            return;
        }
        let in_ram = self
            .by_block
            .pages(ib)
            .iter()
            .any(|&q| self.pages[q as usize] == PageState::Mirrored(ib));
        if !in_ram {
            self.ghost.insert(ib);
        }
    }

    /// A fault is about to bring in the run `lo..lo + n` from its store: each page of it dropped
    /// while mirroring an image block is a block read from the image because guest RAM lacked
    /// it, a lookup in the ghost cache as for a guest disk read. (A sequential reader touches
    /// the whole run; a random one may not, and the run is then counted a little ahead.)
    pub fn image_refault(&mut self, lo: PageIdx, n: u32) {
        if !self.mech.mapper {
            return;
        }
        for q in lo..lo.saturating_add(n).min(self.len()) {
            if let PageState::OnDisk(ib) = self.state(q) {
                self.ghost.access(&ib);
            }
        }
    }

    /// Whether a device may install `p` whole without reading it (it is not mapped).
    pub fn device_can_install(&self, p: PageIdx) -> bool {
        !is_resident(self.state(p))
    }

    /// Records that a device wrote the whole of non-resident `p` into place.
    pub fn device_installed(&mut self, p: PageIdx) {
        if let PageState::Swapped(b) = self.state(p) {
            self.blocks.release(b);
        }
        self.set(p, PageState::Resident { clean: None });
        self.victims.touch(p);
    }

    /// Forgets `p`'s content (balloon inflate or free page report). Returns whether it was mapped
    /// (the caller releases the memory). A report of a page the guest never touched changes
    /// nothing: it holds no memory and no content, and as `Zero` its next fault is served with
    /// its never-touched neighbours in one window.
    pub fn discard(&mut self, p: PageIdx, to: PageState) -> bool {
        debug_assert!(matches!(to, PageState::Ballooned | PageState::Reported));
        let was = self.state(p);
        if was == PageState::Zero && to == PageState::Reported {
            return false;
        }
        match was {
            PageState::Swapped(b) | PageState::Resident { clean: Some(b) } => {
                self.blocks.release(b)
            }
            _ => {}
        }
        self.set(p, to);
        // The guest freed the page: the block it held left its page cache.
        if let Some(ib) = self.ended.remove(p) {
            self.left_ram(ib);
        }
        is_resident(was)
    }

    /// Records that `p` is mapped, content unknown (found present when guest RAM was taken over).
    pub fn seed_resident(&mut self, p: PageIdx) {
        if !is_resident(self.state(p)) {
            self.set(p, PageState::Resident { clean: None });
        }
    }

    /// Takes resident `p` out for a working-set sample, its content in sample slot `n` (the
    /// caller has write-protected and copied it, and releases it after). A clean page gives up
    /// its swap block and a mirrored one its image block: after the sample it is dirty.
    /// Returns false (and changes nothing) if `p` is not resident.
    pub fn sample(&mut self, p: PageIdx, n: u32) -> bool {
        match self.state(p) {
            PageState::Resident { clean } => {
                if let Some(b) = clean {
                    self.blocks.release(b);
                }
            }
            PageState::Mirrored(_) => {}
            _ => return false,
        }
        self.set(p, PageState::Sampled(n));
        true
    }

    /// Balloon deflate: `p` is the guest's again, as a zero page. Returns whether it was in the
    /// balloon.
    pub fn deflate(&mut self, p: PageIdx) -> bool {
        let was = self.state(p) == PageState::Ballooned;
        if was {
            self.set(p, PageState::Zero);
        }
        was
    }

    /// Chooses up to about `n` victims (see [`Victims::pick`]). A page that mirrors an image
    /// block brings the resident pages mirroring the rest of its aligned cluster of blocks, so a
    /// later refault reads them back in one I/O however the guest scattered them in memory.
    /// With [`VictimPolicy::Hd2`] and [`VictimPolicy::Hd2Whole`] the mirrored pages come in
    /// the reference patterns' order ([`Self::pick_clean`]) instead, without clusters, and the
    /// rest by clock.
    pub fn pick_victims(&mut self, n: u32) -> Vec<PageIdx> {
        if self.victims.policy().is_hd2() {
            let mut v = self.pick_clean(n, None);
            let rest = n.saturating_sub(u32::try_from(v.len()).unwrap_or(u32::MAX));
            if rest > 0 {
                let more = self.victims.pick_excluding(rest, &v);
                v.extend(more);
            }
            v.sort_unstable();
            v.dedup();
            return v;
        }
        let mut v = self.victims.pick(n);
        if self.mech.mapper {
            let c = self.mech.cluster.max(1).next_power_of_two();
            let mut extra: Vec<PageIdx> = Vec::new();
            for &p in &v {
                if let PageState::Mirrored(ib) = self.state(p) {
                    let base = ib.block & !(c - 1);
                    for block in base..base.saturating_add(c) {
                        let mates = self.by_block.pages(ImageBlock {
                            disk: ib.disk,
                            block,
                        });
                        extra.extend(
                            mates
                                .into_iter()
                                .filter(|&q| matches!(self.state(q), PageState::Mirrored(_))),
                        );
                    }
                }
            }
            v.extend(extra);
            v.sort_unstable();
            v.dedup();
        }
        v
    }

    /// Up to about `n` resident pages that mirror disk blocks (dropping them costs no write),
    /// none of them cooling in the victim cache, in the VM's victim order, first choice first:
    /// with [`VictimPolicy::Hd2`], sequential sequences most recent first, then loops least
    /// recent first, each from its first block, then unclassified mirrored pages least recent
    /// first (`pattern.rs`); [`VictimPolicy::Hd2Whole`] takes each sequence it begins whole, up
    /// to [`crate::pattern::WHOLE_SEQ_MAX`] pages beyond `n`; with random, mirrored pages at
    /// random; with clock, mirrored pages least recently used first. With `cold_at`, only pages
    /// of sequences cold at that time and the probes of the others
    /// ([`Patterns::pick_cold`](crate::pattern::Patterns::pick_cold)): what a release takes when
    /// memory is not short, which only the `hd2` orders know (with another, or without the
    /// Swap Mapper, none). They stay resident until the caller records what it did with them.
    pub fn pick_clean(&mut self, n: u32, cold_at: Option<std::time::Instant>) -> Vec<PageIdx> {
        let Some(whole) = self.hd2_order() else {
            return match cold_at {
                Some(_) => Vec::new(),
                None => self.victims.pick_named(n),
            };
        };
        let victims = &self.victims;
        let eligible = |p| victims.is_candidate(p);
        match cold_at {
            Some(now) => self.patterns.pick_cold(n as usize, whole, now, eligible),
            None => self.patterns.pick(n as usize, whole, eligible),
        }
    }

    /// Up to about `n` of [`Self::pick_clean`]'s candidates (no `cold_at`) that are protected
    /// mirrors already: refaulted from their blocks, or checked by their digests since their
    /// reads (release readiness), so a release takes them without a check. In the same order;
    /// with an order other than the `hd2` ones, or without the Swap Mapper, none.
    pub fn pick_protected(&self, n: u32) -> Vec<PageIdx> {
        let Some(whole) = self.hd2_order() else {
            return Vec::new();
        };
        let (victims, digests) = (&self.victims, &self.digests);
        let protected = |p| victims.is_candidate(p) && !digests.contains_key(p);
        self.patterns.pick(n as usize, whole, protected)
    }

    /// With an `hd2` victim order and the Swap Mapper, whether the order takes whole
    /// sequences ([`VictimPolicy::Hd2Whole`]); otherwise `None`: the reference patterns do not
    /// choose.
    fn hd2_order(&self) -> Option<bool> {
        let policy = self.victims.policy();
        (policy.is_hd2() && self.mech.mapper).then_some(policy == VictimPolicy::Hd2Whole)
    }

    /// The victims of one reclaim chunk of `n` pages under a limit of `limit` pages: returns the
    /// pages that just began to cool down in the victim cache (the caller write-protects them),
    /// and the chunk's victims (the oldest cooling pages, or without a cache those
    /// [`Self::pick_victims`] chose). A victim that stays resident after all goes back with
    /// [`Self::kept`].
    pub fn reclaim_victims(&mut self, n: u32, limit: u32) -> (Vec<PageIdx>, Vec<PageIdx>) {
        if self.victims.cache_percent == 0 {
            return (Vec::new(), self.pick_victims(n));
        }
        let cache = u64::from(limit) * u64::from(self.victims.cache_percent) / 100;
        let cache = u32::try_from(cache).unwrap_or(u32::MAX);
        let fresh = (cache.saturating_add(n)).saturating_sub(self.victims.cooling());
        let cooled = self.pick_victims(fresh);
        self.victims.cool(&cooled);
        (cooled, self.victims.take_cooled(n))
    }

    /// After a write took cooling page `p` back: the other cooling pages of its aligned
    /// cluster (chosen with it, and likely as hot) come back too, except those `in_flight`.
    /// Returns the ones protected only for the cache (dirty, or mirrors checked by their
    /// digest), which the caller unprotects with `p`, so the guest's next writes to them do not
    /// fault.
    pub fn warm_cluster(
        &mut self,
        p: PageIdx,
        in_flight: impl Fn(PageIdx) -> bool,
    ) -> Vec<PageIdx> {
        let c = self.mech.cluster.max(1).next_power_of_two();
        let base = p & !(c - 1);
        let mut dirty = Vec::new();
        for q in base..base.saturating_add(c).min(self.len()) {
            if q == p || !self.victims.is_cooling(q) || in_flight(q) {
                continue;
            }
            self.kept(q);
            self.victims.cache_hits += 1;
            // A page a device is writing out keeps its protection: a write must still end that.
            // A mirror checked by its digest was writable before it cooled, and is again.
            let writable = self.state(q) == (PageState::Resident { clean: None })
                || self.digests.contains_key(q);
            if writable && !self.pending.contains_key(&q) {
                dirty.push(q);
            }
        }
        dirty
    }

    /// A victim reclaim could not take stays resident, and may be chosen again.
    pub fn kept(&mut self, p: PageIdx) {
        if self.victims.warm(p) {
            let named = matches!(self.state(p), PageState::Mirrored(_));
            self.victims.set_named(p, named);
        }
    }

    /// Pages next to `p` that come in with its refault from the image: a run of pages dropped
    /// while mirroring consecutive blocks of the same disk (VSwapper: no decayed sequentiality).
    /// The window starts at `prefetch` pages and doubles, up to [`IMAGE_WINDOW_MAX`], for every
    /// refault that continues the last one's stream, as Linux grows its readahead for a
    /// sequential reader. Returns `(first page, count)`.
    pub fn image_run(&mut self, p: PageIdx) -> (PageIdx, u32) {
        let PageState::OnDisk(ib) = self.state(p) else {
            return (p, 1);
        };
        let base = self.mech.prefetch;
        // Pages of the stream that were still resident are skipped by the reader without a
        // fault, so a refault up to one window past where the last run ended continues it.
        let w = match self.image_stream {
            Some((next, w))
                if base > 0
                    && next.disk == ib.disk
                    && ib.block >= next.block
                    && ib.block - next.block <= w =>
            {
                w.saturating_mul(2).min(IMAGE_WINDOW_MAX.max(base))
            }
            _ => base,
        };
        let (lo, n) = self.run_around(p, w, |q| {
            let expect = i64::from(ib.block) + i64::from(q) - i64::from(p);
            matches!(self.state(q), PageState::OnDisk(c) if c.disk == ib.disk && i64::from(c.block) == expect)
        });
        let next = ImageBlock {
            disk: ib.disk,
            block: ib.block.saturating_add(lo + n - p),
        };
        self.image_stream = Some((next, w));
        (lo, n)
    }

    /// A device read `ib`, whose content has digest `digest`, into the whole of resident page
    /// `p`: with the mapper, `p` now mirrors `ib` as long as its content keeps that digest. The
    /// page is not write-protected for it: reclaim protects it and compares digests before it
    /// relies on the mirror ([`Self::mirror_digest`], [`Self::mirror_changed`]).
    ///
    /// For the ghost cache: the block `p` held before (mirrored, or dropped while mirroring)
    /// left the guest's page cache, since the guest reused its page for `ib`; and the read of
    /// `ib` missed the guest's page cache, a lookup.
    pub fn read_from_disk(&mut self, p: PageIdx, ib: ImageBlock, digest: Digest) {
        if !self.mech.mapper {
            return;
        }
        let before = match self.state(p) {
            PageState::Mirrored(b) | PageState::OnDisk(b) => Some(b),
            _ => self.ended.remove(p),
        };
        if let Some(b) = before {
            // It leaves before the read that replaced it is looked up; the page that held it
            // no longer counts as holding it.
            if let PageState::Mirrored(_) = self.state(p) {
                self.set(p, PageState::Resident { clean: None });
                self.ended.remove(p);
            }
            self.left_ram(b);
        }
        self.ghost.access(&ib);
        if !is_resident(self.state(p)) {
            return;
        }
        if let PageState::Resident { clean: Some(b) } = self.state(p) {
            self.blocks.release(b);
        }
        // A page about to mirror what a device is writing out from it holds other content now.
        self.pending.remove(&p);
        self.set(p, PageState::Mirrored(ib));
        self.digests.insert(p, digest);
        self.mirror_generation += 1;
        // A read landing in it is a use the pager sees, as a fault-in is (for clock).
        self.victims.touch(p);
    }

    /// A number that changes whenever a page comes to mirror a block, stops mirroring, or is
    /// left writable with a digest: what release readiness (`release.rs`) looks at to know
    /// whether there may be new candidates to check.
    pub fn mirror_generation(&self) -> u64 {
        self.mirror_generation
    }

    /// The digest mirrored page `p` must still have to mirror its block, if it was left
    /// writable when a guest disk read filled it (`None`: not such a page, so not writable
    /// behind the table's back).
    pub fn mirror_digest(&self, p: PageIdx) -> Option<Digest> {
        self.digests.get(p)
    }

    /// Mirrored page `p`, left writable with a digest, was write-protected and found unchanged
    /// (and stays): it is a protected mirror now, as one refaulted from its block, with no
    /// digest to check.
    pub fn mirror_protected(&mut self, p: PageIdx) {
        if let PageState::Mirrored(_) = self.state(p) {
            self.digests.remove(p);
        }
    }

    /// Release readiness protected and checked mirrored page `p` (after
    /// [`Self::mirror_protected`]): a guest write that ends its mirror counts in
    /// [`Self::take_ready_lost`].
    pub fn made_ready(&mut self, p: PageIdx) {
        if let PageState::Mirrored(_) = self.state(p) {
            self.ready[p as usize] = true;
        }
    }

    /// Pages made ready that guest writes took back since the last call.
    pub fn take_ready_lost(&mut self) -> u64 {
        std::mem::take(&mut self.ready_lost)
    }

    /// A check found mirrored page `p` changed since the read that filled it: the guest wrote
    /// it without a fault. It is an ordinary dirty page, and used, as its write fault would have
    /// told; the caller makes it writable again.
    pub fn mirror_changed(&mut self, p: PageIdx) {
        if let PageState::Mirrored(_) = self.state(p) {
            self.set(p, PageState::Resident { clean: None });
            self.victims.touch(p);
        }
    }

    /// Before a device overwrites `ib`: pages that mirror it stop mirroring (their content
    /// stays), and pages dropped relying on it are returned: the caller must bring each one's
    /// content back from the image (and call [`Self::refetched`]) before the write.
    pub fn disk_write_begins(&mut self, ib: ImageBlock) -> Vec<PageIdx> {
        let mut refetch = Vec::new();
        for p in self.by_block.pages(ib) {
            match self.state(p) {
                PageState::Mirrored(_) => self.set(p, PageState::Resident { clean: None }),
                PageState::OnDisk(_) => refetch.push(p),
                _ => {}
            }
        }
        refetch
    }

    /// Records that page `p`, dropped while mirroring, got its content back from the image.
    pub fn refetched(&mut self, p: PageIdx) {
        self.set(p, PageState::Resident { clean: None });
        self.victims.touch(p);
    }

    /// Resident page `p` is being written to `ib` by a device. A mirror that was writable until
    /// now may hold anything: it is dirty, and mirrors `ib` once the write lands if it still
    /// holds what was written ([`Self::disk_write_done`]).
    pub fn disk_write_source(&mut self, p: PageIdx, ib: ImageBlock) {
        if self.mech.mapper && is_resident(self.state(p)) {
            if self.digests.contains_key(p) {
                self.set(p, PageState::Resident { clean: None });
            }
            self.pending.insert(p, ib);
        }
    }

    /// Whether `p` is recorded as being written to `ib` by a device.
    pub fn write_pending(&self, p: PageIdx, ib: ImageBlock) -> bool {
        self.pending.get(&p) == Some(&ib)
    }

    /// The device's write of `ib` from `p` landed, `written` the digest of what it wrote and
    /// `now` that of what `p` holds now: if they are equal (the guest did not change `p` in
    /// between, or changed it back), `p` mirrors `ib` from now on (VSwapper: write, wait, then
    /// map), writable, as long as it keeps that digest ([`Self::mirror_digest`]). A write fault
    /// on a protected source in between ended it already.
    pub fn disk_write_done(&mut self, p: PageIdx, ib: ImageBlock, written: Digest, now: Digest) {
        if self.pending.get(&p) != Some(&ib) {
            return;
        }
        self.pending.remove(&p);
        if written != now {
            return;
        }
        if let PageState::Resident { clean } = self.state(p) {
            if let Some(b) = clean {
                self.blocks.release(b);
            }
            self.set(p, PageState::Mirrored(ib));
            // Its block is in guest RAM again: out of the ghost cache.
            self.ghost.remove(&ib);
            self.digests.insert(p, written);
            self.mirror_generation += 1;
            if self.victims.is_cooling(p) {
                self.victims.cache_caught += 1;
            }
        }
    }

    /// Pages by state.
    pub fn census(&self) -> Census {
        self.census
    }

    /// Counts pages by state with a scan of every page: what [`Self::census`] must equal.
    #[cfg(test)]
    fn census_by_scan(&self) -> Census {
        let mut c = Census::default();
        for &s in &self.pages {
            c.zero += 1;
            c.moved(PageState::Zero, s);
        }
        c
    }
}

pub(crate) fn is_resident(s: PageState) -> bool {
    matches!(s, PageState::Resident { .. } | PageState::Mirrored(_))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// A simulated guest RAM and swap store on which the test carries out the table's decisions
    /// the way the pager does with syscalls.
    struct Sim {
        t: PageTable,
        /// Mapped pages: content and write protection.
        ram: HashMap<PageIdx, (u64, bool)>,
        swap: HashMap<Block, u64>,
        /// The disk image, by block.
        disk: HashMap<u32, u64>,
        /// The sample store: slot `n` holds the `n`-th sampled page's content.
        samples: Vec<u64>,
        reads: u32,
        writes: u32,
    }

    impl Sim {
        fn new(pages: u32, mech: Mechanisms) -> Self {
            Self::with_policy(pages, mech, VictimPolicy::Random)
        }

        fn with_policy(pages: u32, mech: Mechanisms, policy: VictimPolicy) -> Self {
            Sim {
                t: PageTable::new(pages, pages, mech, policy, 7),
                ram: HashMap::new(),
                swap: HashMap::new(),
                disk: HashMap::new(),
                samples: Vec::new(),
                reads: 0,
                writes: 0,
            }
        }

        /// A missing fault, resolved like the pager thread does (with prefetch).
        fn fault_in(&mut self, p: PageIdx, write: bool) {
            let action = self.t.fault(p, write);
            match action {
                FaultAction::Wake => {}
                FaultAction::Zero => {
                    self.ram.insert(p, (0, false));
                    self.t.installed(p, action);
                }
                FaultAction::Load { keep, .. } => {
                    let (lo, n) = self.t.load_run(p);
                    self.reads += 1;
                    // The run comes in as the faulting page does (as the pager does it).
                    for q in lo..lo + n {
                        let v = match self.t.state(q) {
                            PageState::OnDisk(ib) => self.disk.get(&ib.block).copied().unwrap_or(0),
                            PageState::Swapped(b) => self.swap[&b],
                            PageState::Sampled(n) => self.samples[n as usize],
                            s => panic!("a run holds pages swapped or on disk, not {s:?}"),
                        };
                        self.ram.insert(q, (v, keep));
                    }
                    self.t.image_refault(lo, n);
                    self.t.install_run(lo, n, keep);
                }
            }
        }

        fn read(&mut self, p: PageIdx) -> u64 {
            if !self.ram.contains_key(&p) {
                self.fault_in(p, false);
            }
            self.ram[&p].0
        }

        fn write(&mut self, p: PageIdx, v: u64) {
            if !self.ram.contains_key(&p) {
                self.fault_in(p, true);
            }
            if self.ram[&p].1 {
                let cooling = self.t.victims.is_cooling(p);
                assert!(self.t.write_fault(p));
                self.ram.get_mut(&p).unwrap().1 = false;
                if cooling {
                    for q in self.t.warm_cluster(p, |_| false) {
                        self.ram.get_mut(&q).unwrap().1 = false;
                    }
                }
            }
            self.ram.get_mut(&p).unwrap().0 = v;
        }

        fn reclaim(&mut self, n: u32) {
            let (cooled, victims) = self.t.reclaim_victims(n, PAGES);
            for p in cooled {
                self.ram.get_mut(&p).unwrap().1 = true; // write-protected while they cool
            }
            let mut to_write = Vec::new();
            for &p in &victims {
                self.ram.get_mut(&p).unwrap().1 = true; // write-protect first
                                                        // Then a mirror left writable is checked against its digest.
                if let Some(d) = self.t.mirror_digest(p) {
                    if d != u128::from(self.ram[&p].0) {
                        self.t.mirror_changed(p);
                    }
                }
                let d = self.t.disposition(p, self.ram[&p].0 == 0);
                if d == Disposition::Write {
                    to_write.push(p);
                } else {
                    self.ram.remove(&p);
                    self.t.reclaimed(p, d, None);
                }
            }
            let blocks = self.t.blocks.alloc(u32::try_from(to_write.len()).unwrap());
            assert_eq!(blocks.len(), to_write.len(), "the store holds every page");
            for (p, b) in to_write.into_iter().zip(blocks) {
                self.writes += 1;
                self.swap.insert(b, self.ram.remove(&p).unwrap().0);
                self.t.reclaimed(p, Disposition::Write, Some(b));
            }
        }

        fn device_write(&mut self, p: PageIdx, v: u64) {
            if self.t.device_can_install(p) {
                self.ram.insert(p, (v, false));
                self.t.device_installed(p);
            } else {
                self.write(p, v);
            }
        }

        /// A device reads disk block `b` into page `p`, as virtio-blk and the pager do it: the
        /// page stays writable, and its digest is the block's content (here the value itself, a
        /// digest without collisions).
        fn disk_read(&mut self, p: PageIdx, b: u32) {
            let v = self.disk.get(&b).copied().unwrap_or(0);
            self.device_write(p, v);
            if !self.t.device_can_install(p) {
                self.t
                    .read_from_disk(p, ImageBlock { disk: 0, block: b }, u128::from(v));
            }
            self.t.disk_read_seen(0, &[(p, b)]);
        }

        /// One guest disk read of blocks `b..b + n` into pages `p..p + n`.
        fn disk_read_run(&mut self, p: PageIdx, b: u32, n: u32) {
            for i in 0..n {
                let v = self.disk.get(&(b + i)).copied().unwrap_or(0);
                self.device_write(p + i, v);
                self.t.read_from_disk(
                    p + i,
                    ImageBlock {
                        disk: 0,
                        block: b + i,
                    },
                    u128::from(v),
                );
            }
            let read: Vec<(PageIdx, u32)> = (0..n).map(|i| (p + i, b + i)).collect();
            self.t.disk_read_seen(0, &read);
        }

        /// A device writes page `p` to disk block `b`, as virtio-blk and the pager do it; with
        /// `race`, the guest writes that value to `p` after the device copied it out and before
        /// the write landed.
        fn disk_write(&mut self, p: PageIdx, b: u32, race: Option<u64>) {
            let ib = ImageBlock { disk: 0, block: b };
            for q in self.t.disk_write_begins(ib) {
                let v = self.disk.get(&b).copied().unwrap_or(0);
                self.ram.insert(q, (v, false));
                self.t.refetched(q);
            }
            if !self.t.device_can_install(p) {
                self.t.disk_write_source(p, ib);
            }
            let v = self.read(p);
            self.disk.insert(b, v);
            if let Some(x) = race {
                self.write(p, x);
            }
            let now = self.ram.get(&p).map_or(0, |&(v, _)| v);
            self.t
                .disk_write_done(p, ib, u128::from(v), u128::from(now));
        }

        /// Takes resident `p` out for a working-set sample, as the pager does: its content goes to
        /// a slot of the sample store and the page leaves RAM.
        fn sample(&mut self, p: PageIdx) {
            if !self.ram.contains_key(&p) {
                return;
            }
            let slot = u32::try_from(self.samples.len()).unwrap();
            self.ram.get_mut(&p).unwrap().1 = true; // write-protect first
            assert!(self.t.sample(p, slot));
            self.samples.push(self.ram.remove(&p).unwrap().0);
        }

        fn discard(&mut self, p: PageIdx, to: PageState) {
            if self.t.discard(p, to) {
                self.ram.remove(&p);
            }
        }

        /// Every block in use is referenced by exactly the pages that name it.
        fn check_blocks(&self) {
            let mut refs: HashMap<Block, u16> = HashMap::new();
            for p in 0..self.t.len() {
                match self.t.state(p) {
                    PageState::Swapped(b) | PageState::Resident { clean: Some(b) } => {
                        *refs.entry(b).or_default() += 1
                    }
                    _ => {}
                }
            }
            assert_eq!(u32::try_from(refs.len()).unwrap(), self.t.blocks.in_use());
            for (b, n) in refs {
                assert_eq!(self.t.blocks.refs(b), n);
            }
            // A mirror is its block: protected since it came to be, or writable with the
            // block's digest, which reclaim checks.
            for p in 0..self.t.len() {
                if let PageState::Mirrored(ib) = self.t.state(p) {
                    let block = self.disk.get(&ib.block).copied().unwrap_or(0);
                    match self.t.mirror_digest(p) {
                        Some(d) => assert_eq!(d, u128::from(block), "page {p}'s digest"),
                        None => assert_eq!(self.ram[&p], (block, true), "page {p}"),
                    }
                }
            }
            // The ghost cache holds only blocks out of guest RAM.
            for p in 0..self.t.len() {
                if let PageState::Mirrored(ib) = self.t.state(p) {
                    assert!(!self.t.ghost.contains(&ib), "page {p} holds {ib:?}");
                }
            }
            assert!(self.t.ghost.len() <= self.t.ghost.capacity());
            assert_eq!(self.t.resident() as usize, self.ram.len());
            // The reference patterns hold exactly the mirrored pages, each once.
            if self.t.mech.mapper {
                for p in 0..self.t.len() {
                    let placed = self.t.patterns.sequence_of(p).is_some()
                        || self.t.patterns.is_unclassified(p);
                    let mirrored = matches!(self.t.state(p), PageState::Mirrored(_));
                    assert_eq!(placed, mirrored, "page {p}");
                }
                let c = self.t.patterns.counts();
                assert_eq!(
                    c.sequential_pages + c.loop_pages + c.unclassified_pages,
                    u64::from(self.t.census().mirrored)
                );
            }
            assert_eq!(self.t.census(), self.t.census_by_scan());
            assert_eq!(self.t.census().resident, self.t.resident());
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Read(u32),
        Write(u32, u64),
        DeviceWrite(u32, u64),
        Reclaim(u32),
        Balloon(u32),
        Deflate(u32),
        Report(u32),
        Sample(u32),
        DiskRead(u32, u32),
        /// One read of `n` blocks from block `b` into pages from `p`.
        DiskReadRun(u32, u32, u32),
        DiskWrite(u32, u32),
        /// A disk write of page `p` to block `b` while the guest writes `v` to `p`.
        DiskWriteRaced(u32, u32, u64),
    }

    const PAGES: u32 = 48;
    const BLOCKS: u32 = 24;

    fn op() -> impl Strategy<Value = Op> {
        let p = 0..PAGES;
        let v = prop_oneof![Just(0u64), 1u64..5];
        prop_oneof![
            4 => p.clone().prop_map(Op::Read),
            4 => (p.clone(), v.clone()).prop_map(|(p, v)| Op::Write(p, v)),
            1 => (p.clone(), v).prop_map(|(p, v)| Op::DeviceWrite(p, v)),
            2 => (1u32..20).prop_map(Op::Reclaim),
            1 => p.clone().prop_map(Op::Balloon),
            1 => p.clone().prop_map(Op::Deflate),
            1 => p.clone().prop_map(Op::Report),
            1 => p.clone().prop_map(Op::Sample),
            2 => (p.clone(), 0..BLOCKS).prop_map(|(p, b)| Op::DiskRead(p, b)),
            2 => (0..PAGES - 4, 0..BLOCKS - 4, 1u32..5)
                .prop_map(|(p, b, n)| Op::DiskReadRun(p, b, n)),
            2 => (p.clone(), 0..BLOCKS).prop_map(|(p, b)| Op::DiskWrite(p, b)),
            1 => (p, 0..BLOCKS, 1u64..5).prop_map(|(p, b, v)| Op::DiskWriteRaced(p, b, v)),
        ]
    }

    fn run(ops: &[Op], mech: Mechanisms) -> Sim {
        run_cached(ops, mech, 0)
    }

    /// [`run`] with a victim cache of `percent` of the pages.
    fn run_cached(ops: &[Op], mech: Mechanisms, percent: u8) -> Sim {
        run_with(ops, mech, percent, VictimPolicy::Random)
    }

    /// [`run_cached`] with victim policy `policy`.
    fn run_with(ops: &[Op], mech: Mechanisms, percent: u8, policy: VictimPolicy) -> Sim {
        let mut sim = Sim::with_policy(PAGES, mech, policy);
        sim.t.victims.cache_percent = percent;
        // The reference: what the guest last wrote to each page (0 after the balloon or a report).
        let mut model = vec![0u64; PAGES as usize];
        let mut disk_model = vec![0u64; BLOCKS as usize];
        for op in ops {
            match *op {
                Op::Read(p) => assert_eq!(sim.read(p), model[p as usize], "page {p} after {ops:?}"),
                Op::Write(p, v) => {
                    sim.write(p, v);
                    model[p as usize] = v;
                }
                Op::DeviceWrite(p, v) => {
                    sim.device_write(p, v);
                    model[p as usize] = v;
                }
                Op::Reclaim(n) => sim.reclaim(n),
                Op::Balloon(p) => {
                    sim.discard(p, PageState::Ballooned);
                    model[p as usize] = 0;
                }
                Op::Deflate(p) => {
                    sim.t.deflate(p);
                }
                Op::Report(p) => {
                    sim.discard(p, PageState::Reported);
                    model[p as usize] = 0;
                }
                Op::Sample(p) => sim.sample(p),
                Op::DiskRead(p, b) => {
                    sim.disk_read(p, b);
                    model[p as usize] = disk_model[b as usize];
                }
                Op::DiskReadRun(p, b, n) => {
                    sim.disk_read_run(p, b, n);
                    for i in 0..n {
                        model[(p + i) as usize] = disk_model[(b + i) as usize];
                    }
                }
                Op::DiskWrite(p, b) => {
                    sim.disk_write(p, b, None);
                    disk_model[b as usize] = model[p as usize];
                }
                Op::DiskWriteRaced(p, b, v) => {
                    sim.disk_write(p, b, Some(v));
                    disk_model[b as usize] = model[p as usize];
                    model[p as usize] = v;
                }
            }
            sim.check_blocks();
        }
        for p in 0..PAGES {
            assert_eq!(sim.read(p), model[p as usize], "final read of page {p}");
        }
        sim
    }

    proptest! {
        #[test]
        fn every_read_sees_the_last_write(ops in proptest::collection::vec(op(), 1..200)) {
            run(&ops, Mechanisms::DEFAULT);
            run(&ops, Mechanisms::BASELINE);
            run(&ops, Mechanisms { mapper: true, ..Mechanisms::DEFAULT });
            run_cached(&ops, Mechanisms { mapper: true, ..Mechanisms::DEFAULT }, 10);
            run_cached(&ops, Mechanisms::DEFAULT, 3);
            let mapper = Mechanisms { mapper: true, ..Mechanisms::DEFAULT };
            run_with(&ops, mapper, 0, VictimPolicy::Hd2);
            run_with(&ops, mapper, 10, VictimPolicy::Hd2Whole);
        }
    }

    const MAPPER: Mechanisms = Mechanisms {
        mapper: true,
        ..Mechanisms::DEFAULT
    };

    #[test]
    fn mirrored_pages_leave_without_a_write_and_come_back_from_the_image() {
        let mut sim = Sim::new(8, MAPPER);
        for b in 0..4 {
            sim.disk.insert(b, 100 + u64::from(b));
            sim.disk_read(b, b);
        }
        assert!(matches!(sim.t.state(0), PageState::Mirrored(_)));
        sim.reclaim(4);
        assert_eq!(sim.writes, 0, "no silent swap writes");
        assert_eq!(
            sim.t.state(2),
            PageState::OnDisk(ImageBlock { disk: 0, block: 2 })
        );
        sim.reads = 0;
        assert_eq!(sim.read(1), 101);
        assert_eq!(sim.reads, 1);
        assert_eq!(
            (0..4).map(|p| sim.read(p)).collect::<Vec<_>>(),
            vec![100, 101, 102, 103]
        );
        assert_eq!(sim.reads, 1, "the image run came in with one read");
        // A write ends the mirroring: the page is anonymous again.
        sim.write(3, 7);
        assert_eq!(sim.t.state(3), PageState::Resident { clean: None });
    }

    /// Hits by distance, up to the last non-zero bucket.
    fn ghost_hits(t: &PageTable) -> Vec<u64> {
        let h = t.ghost.hits();
        let end = h.iter().rposition(|&x| x > 0).map_or(0, |i| i + 1);
        h[..end].to_vec()
    }

    #[test]
    fn pages_reclaim_drops_enter_the_ghost_cache_and_refaults_hit_at_their_distance() {
        let mut sim = Sim::new(16, MAPPER);
        assert_eq!(sim.t.ghost.bucket_pages(), 1);
        // Blocks far apart: each refault brings its page alone.
        for p in 0..8 {
            sim.disk.insert(10 * p, 100 + u64::from(p));
            sim.disk_read(p, 10 * p);
        }
        assert_eq!(sim.t.ghost.misses(), 8, "every guest disk read is a lookup");
        assert!(sim.t.ghost.is_empty());
        sim.reclaim(16);
        assert_eq!(
            sim.t.ghost.len(),
            8,
            "the dropped mirrors, pages 0..8 in order"
        );
        assert_eq!(sim.read(5), 105);
        assert_eq!(sim.read(0), 100);
        // Page 5's block had 6 and 7 above it; page 0's then 1..=4, 6 and 7.
        assert_eq!(ghost_hits(&sim.t), [0, 0, 1, 0, 0, 0, 1]);
        assert_eq!(sim.t.ghost.len(), 6);
        // Dropped again, block 50 goes back in at the top.
        sim.reclaim(16);
        assert_eq!(sim.t.ghost.len(), 8);
        assert_eq!(sim.read(7), 107);
        assert_eq!(
            ghost_hits(&sim.t),
            [0, 0, 2, 0, 0, 0, 1],
            "7 was under 0 and 5"
        );
        assert_eq!(sim.t.ghost.misses(), 8);
    }

    #[test]
    fn released_pages_reach_the_ghost_cache_and_the_dwell_clock_when_recorded() {
        let mut sim = Sim::new(16, MAPPER);
        for p in 0..4 {
            sim.disk.insert(10 * p, 100 + u64::from(p));
            sim.disk_read(p, 10 * p);
        }
        let at = std::time::Instant::now();
        for p in 0..4 {
            let PageState::Mirrored(ib) = sim.t.state(p) else {
                panic!("page {p} mirrors its block")
            };
            sim.t.release(p, ib, at);
            sim.ram.remove(&p);
            assert_eq!(sim.t.state(p), PageState::OnDisk(ib), "out at once");
        }
        assert!(sim.t.has_unrecorded());
        assert!(sim.t.ghost.is_empty(), "not told yet");
        assert!(!sim.t.released.is_out(0));
        // Page 1 comes back before the recording (a waiter woken inside the page lock ran
        // first): it is passed over, its block being in guest RAM again.
        assert_eq!(sim.read(1), 101);
        assert_eq!(sim.t.record_released(), 4);
        assert!(!sim.t.has_unrecorded());
        assert_eq!(sim.t.ghost.len(), 3);
        assert!(sim.t.released.is_out(0) && sim.t.released.is_out(3));
        assert!(!sim.t.released.is_out(1));
        assert_eq!(sim.t.record_released(), 0, "nothing twice");
        // The others refault from their blocks, as hits at their distance.
        assert_eq!(sim.read(0), 100);
        assert_eq!(ghost_hits(&sim.t), [0, 0, 1]);
    }

    #[test]
    fn a_guest_disk_read_into_a_page_that_held_another_block_evicts_that_block() {
        let mut sim = Sim::new(16, MAPPER);
        for b in [10, 20, 30, 40, 50] {
            sim.disk.insert(b, u64::from(b));
        }
        sim.disk_read(0, 10);
        sim.disk_read(1, 20);
        sim.disk_read(2, 30);
        // The guest evicts block 10 and reads 40 into its page (the table still says mirrored).
        sim.disk_read(0, 40);
        // A device overwriting a page ends its mirroring first, as the pager does for a
        // write-protected one; the block it held is remembered until the read is recorded.
        assert!(sim.t.write_fault(1));
        sim.disk_read(1, 50);
        assert_eq!(sim.t.ghost.len(), 2, "blocks 10 and 20");
        assert_eq!(sim.t.ghost.misses(), 5);
        // Page 2's block 30 leaves for 10, which had 20 and 30 above it.
        sim.disk_read(2, 10);
        // Page 0's block 40 leaves for 30, which had 40 above it.
        sim.disk_read(0, 30);
        assert_eq!(ghost_hits(&sim.t), [0, 1, 1]);
        assert_eq!(sim.t.ghost.len(), 2, "blocks 20 and 40");
        assert_eq!(sim.t.ghost.misses(), 5);
        // A block another page still mirrors does not leave RAM with this one.
        sim.disk_read(3, 50);
        sim.disk_read(3, 10);
        assert!(!sim.t.ghost.contains(&ImageBlock { disk: 0, block: 50 }));
        assert_eq!(sim.read(3), 10);
    }

    #[test]
    fn a_mirror_written_without_a_fault_is_written_out_at_reclaim_and_an_unchanged_one_is_not() {
        let mut sim = Sim::new(8, MAPPER);
        for b in 0..4 {
            sim.disk.insert(b, 100 + u64::from(b));
            sim.disk_read(b, b);
        }
        assert!(
            (0..4).all(|p| !sim.ram[&p].1),
            "a disk read leaves its pages writable"
        );
        // The guest writes two of them: no fault, the table still says they mirror.
        sim.write(1, 7);
        sim.write(3, 0);
        assert!(matches!(sim.t.state(1), PageState::Mirrored(_)));
        sim.reclaim(8);
        assert_eq!(
            sim.writes, 1,
            "the changed page was written, the zeroed one dropped"
        );
        assert!(matches!(sim.t.state(1), PageState::Swapped(_)));
        assert_eq!(sim.t.state(3), PageState::Zero);
        assert!(matches!(sim.t.state(0), PageState::OnDisk(_)));
        assert!(matches!(sim.t.state(2), PageState::OnDisk(_)));
        assert_eq!(
            (0..4).map(|p| sim.read(p)).collect::<Vec<_>>(),
            vec![100, 7, 102, 0]
        );
    }

    #[test]
    fn a_sequential_image_stream_gets_a_growing_window_and_a_random_refault_does_not() {
        let n = 1024;
        let mut sim = Sim::new(n, MAPPER);
        for b in 0..n {
            sim.disk.insert(b, u64::from(b));
            sim.disk_read(b, b);
        }
        sim.reclaim(n);
        // A reader going through the stream: each refault brings a longer run, up to the cap.
        let mut starts = Vec::new();
        sim.reads = 0;
        for q in 0..n {
            let before = sim.reads;
            assert_eq!(sim.read(q), u64::from(q));
            if sim.reads > before {
                starts.push(q);
            }
        }
        starts.push(n);
        // Every block the refaults read had left guest RAM: each one a ghost hit.
        assert_eq!(sim.t.ghost.hits().iter().sum::<u64>(), u64::from(n));
        assert!(sim.t.ghost.is_empty());
        let runs: Vec<u32> = starts.windows(2).map(|w| w[1] - w[0]).collect();
        let w = Mechanisms::DEFAULT.prefetch;
        assert_eq!(&runs[..4], &[w, 2 * w, 4 * w, 8 * w]);
        assert!(runs.iter().all(|&c| c <= IMAGE_WINDOW_MAX));
        assert!(runs.contains(&IMAGE_WINDOW_MAX));
        // A refault far from the stream starts again at the base window.
        sim.reclaim(n);
        assert_eq!(sim.t.image_run(600).1, w);
    }

    #[test]
    fn overwriting_a_block_first_brings_back_the_pages_that_rely_on_it() {
        let mut sim = Sim::new(8, MAPPER);
        sim.disk.insert(5, 55);
        sim.disk_read(0, 5);
        sim.reclaim(8);
        assert_eq!(
            sim.t.state(0),
            PageState::OnDisk(ImageBlock { disk: 0, block: 5 })
        );
        // The guest writes page 1's content to block 5: page 0 must keep the old content.
        sim.write(1, 99);
        sim.disk_write(1, 5, None);
        assert_eq!(sim.disk[&5], 99);
        assert_eq!(sim.read(0), 55, "page 0 still holds what it read");
        // Page 1 mirrors block 5 now (written, then mapped).
        assert_eq!(
            sim.t.state(1),
            PageState::Mirrored(ImageBlock { disk: 0, block: 5 })
        );
        sim.reclaim(8);
        assert_eq!(sim.read(1), 99);
    }

    #[test]
    fn clean_pages_are_evicted_again_without_a_write() {
        let mut sim = Sim::new(4, Mechanisms::DEFAULT);
        sim.write(0, 9);
        sim.reclaim(4);
        assert_eq!(sim.writes, 1);
        assert_eq!(sim.read(0), 9);
        sim.reclaim(4);
        assert_eq!(sim.writes, 1, "the clean copy's block was reused");
        let mut base = Sim::new(4, Mechanisms::BASELINE);
        base.write(0, 9);
        base.reclaim(4);
        base.read(0);
        base.reclaim(4);
        assert_eq!(base.writes, 2);
    }

    #[test]
    fn zero_pages_are_dropped_and_prefetch_follows_block_runs() {
        let mut sim = Sim::new(64, Mechanisms::DEFAULT);
        for p in 0..32 {
            sim.write(p, u64::from(p) + 1);
        }
        sim.write(40, 0);
        sim.reclaim(64);
        assert_eq!(sim.writes, 32, "the zero page was not written");
        assert_eq!(sim.t.state(40), PageState::Zero);
        sim.reads = 0;
        for p in 0..32 {
            assert_eq!(sim.read(p), u64::from(p) + 1);
        }
        assert!(
            sim.reads <= 4,
            "32 sequential pages came in {} reads",
            sim.reads
        );
    }

    #[test]
    fn hd2_victims_take_sequential_runs_first_then_loops_then_the_rest() {
        let mut sim = Sim::with_policy(64, MAPPER, VictimPolicy::Hd2);
        for b in 0..32 {
            sim.disk.insert(b, 100 + u64::from(b));
        }
        sim.write(60, 7);
        // Blocks 0..8, read front to back into pages 0..8, then read again: a loop.
        sim.disk_read_run(0, 0, 4);
        sim.disk_read_run(4, 4, 4);
        // Blocks 16..24 read front to back into pages 16..24: sequential.
        sim.disk_read_run(16, 16, 4);
        sim.disk_read_run(20, 20, 4);
        sim.disk_read_run(0, 0, 8);
        // Block 30 alone into page 40: unclassified.
        sim.disk_read_run(40, 30, 1);
        let c = sim.t.patterns.counts();
        assert_eq!(
            (c.sequential, c.loops, c.unclassified_pages),
            (1, 1, 1),
            "{c:?}"
        );
        let want: Vec<PageIdx> = [16..24, 0..8, 40..41].into_iter().flatten().collect();
        assert_eq!(sim.t.pick_clean(64, None), want);
        assert_eq!(sim.t.pick_clean(3, None), vec![16, 17, 18]);
        // The anonymous page only once every mirrored one is taken.
        assert!(!sim.t.pick_victims(17).contains(&60));
        assert!(sim.t.pick_victims(18).contains(&60));
        // Reclaim drops the sequential run first, without a write.
        sim.reclaim(8);
        assert!((16..24).all(|p| matches!(sim.t.state(p), PageState::OnDisk(_))));
        assert!((0..8).all(|p| matches!(sim.t.state(p), PageState::Mirrored(_))));
        assert_eq!(sim.writes, 0);
        // The guest uses them again: they refault from the image, and the sequence is a loop.
        assert_eq!(sim.read(17), 117);
        let s = sim
            .t
            .patterns
            .sequence_of(17)
            .expect("back in its sequence");
        assert_eq!(
            (s.kind, s.start, s.end),
            (crate::pattern::Kind::Loop, 16, 24)
        );
        assert_eq!(sim.t.patterns.counts().sequential, 0);
        assert_eq!(sim.t.patterns.take_detected(), (2, 2));
    }

    #[test]
    fn protected_candidates_are_picked_in_the_victim_order_without_the_writable_ones() {
        let mut sim = Sim::with_policy(64, MAPPER, VictimPolicy::Hd2);
        for b in 0..32 {
            sim.disk.insert(b, 100 + u64::from(b));
        }
        // An older sequential stream into pages 0..8, a newer one into 16..24: the newer is
        // taken first. Disk reads leave them writable, with digests.
        sim.disk_read_run(0, 0, 4);
        sim.disk_read_run(4, 4, 4);
        sim.disk_read_run(16, 16, 4);
        sim.disk_read_run(20, 20, 4);
        assert_eq!(sim.t.pick_protected(64), Vec::<PageIdx>::new());
        // Some checked and protected (as readiness leaves them), in both streams.
        for p in [2, 3, 5, 17, 22] {
            sim.ram.get_mut(&p).unwrap().1 = true;
            sim.t.mirror_protected(p);
        }
        assert_eq!(sim.t.pick_protected(64), vec![17, 22, 2, 3, 5]);
        assert_eq!(sim.t.pick_protected(3), vec![17, 22, 2]);
        // One the guest writes is no candidate at all.
        sim.write(22, 9);
        assert_eq!(sim.t.pick_protected(64), vec![17, 2, 3, 5]);
        // The order of every candidate is unchanged.
        let want: Vec<PageIdx> = [16..22, 23..24, 0..8].into_iter().flatten().collect();
        assert_eq!(sim.t.pick_clean(64, None), want);
        // Other victim orders have no protected-first pick.
        let mut clock = Sim::with_policy(16, MAPPER, VictimPolicy::Clock);
        clock.disk_read_run(0, 0, 4);
        clock.t.mirror_protected(1);
        assert_eq!(clock.t.pick_protected(16), Vec::<PageIdx>::new());
    }

    #[test]
    fn random_and_clock_give_mirrored_pages_as_clean_picks() {
        let mut sim = Sim::new(16, MAPPER);
        sim.write(9, 1);
        sim.disk_read_run(0, 0, 4);
        let mut v = sim.t.pick_clean(16, None);
        v.sort_unstable();
        assert_eq!(v, vec![0, 1, 2, 3]);
        assert_eq!(sim.t.pick_clean(2, None).len(), 2);
    }

    /// A guest that writes every page it swaps in gets them writable, but in the sampled
    /// clusters; once it only reads them, and reclaim drops them unwritten, they come in clean
    /// again. Every byte reads back as written throughout.
    #[test]
    fn loads_from_swap_come_in_writable_while_the_guest_writes_what_it_swaps_in() {
        const N: u32 = 512;
        let mut sim = Sim::new(N, Mechanisms::DEFAULT);
        let kept =
            |sim: &Sim, p| matches!(sim.t.fault(p, false), FaultAction::Load { keep: true, .. });
        for p in 0..N {
            sim.write(p, u64::from(p) + 1);
        }
        for round in 1..=3u64 {
            sim.reclaim(N);
            assert!(kept(&sim, 0) && kept(&sim, 128), "sampled clusters keep");
            for p in 0..N {
                assert_eq!(sim.read(p), u64::from(p) + round);
                sim.write(p, u64::from(p) + round + 1);
            }
        }
        sim.reclaim(N);
        let writable = (0..N).filter(|&p| !kept(&sim, p)).count();
        assert_eq!(
            writable,
            7 * 512 / 8,
            "all but the sampled clusters: {:?}",
            sim.t.clean_reuse
        );
        for _ in 0..6 {
            for p in 0..N {
                assert_eq!(sim.read(p), u64::from(p) + 4);
            }
            sim.reclaim(N);
        }
        assert!((0..N).all(|p| kept(&sim, p)), "{:?}", sim.t.clean_reuse);
        let writes = sim.writes;
        for p in 0..N {
            assert_eq!(sim.read(p), u64::from(p) + 4);
        }
        sim.reclaim(N);
        assert_eq!(
            sim.writes, writes,
            "pages kept clean go out without a write"
        );
    }

    #[test]
    fn a_watch_notes_which_pages_of_its_run_change_state() {
        let mut t = PageTable::new(8, 8, Mechanisms::DEFAULT, VictimPolicy::Random, 7);
        let run = t.watch(2, 3);
        let other = t.watch(0, 1);
        t.installed(3, FaultAction::Zero);
        t.installed(6, FaultAction::Zero);
        assert_eq!(t.unwatch(run), [false, true, false]);
        assert_eq!(t.unwatch(other), [false]);
        assert!(t.unwatch(run).is_empty(), "a watch ends once");
        t.installed(2, FaultAction::Zero);
    }
}
