//! The table of page states and its decisions: the one place a page changes state, keeping
//! the resident set, the swap blocks, the victims, the Swap Mapper's links and the census in
//! step.

use super::census::Census;
use super::clean_reuse::CleanReuse;
use super::in_flight::ReadsInFlight;
use super::mirrors::Mirrors;
use super::page_state::{is_resident, PageState};
use crate::blocks::BlockMap;
use crate::config::Mechanisms;
use crate::digest::Digest;
use crate::page::{Block, ImageBlock, PageIdx, Slot};
use crate::pattern::table::Patterns;
use crate::released::Released;
use crate::victim::{VictimPolicy, Victims};

/// What to do about a fault on a page that is not mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultAction {
    /// Someone installed it meanwhile: wake the waiter.
    Wake,
    /// Install a zero page.
    Zero,
    /// Read the page from the store slot `from` (with the run [`StateTable::load_run`] gives)
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
pub struct StateTable {
    pages: Vec<PageState>,
    /// The Swap Mapper's mirrors of disk image blocks, their links and digests, and the ghost
    /// cache of the blocks that left guest RAM (`mirrors.rs`).
    pub mirrors: Mirrors,
    pub blocks: BlockMap,
    pub victims: Victims,
    /// HyperDealer2's reference patterns of the mirrored pages (`pattern/`), kept with the
    /// Swap Mapper on (empty without).
    pub patterns: Patterns,
    pub mech: Mechanisms,
    /// Pages by state, kept as every change happens (see [`Census`]).
    census: Census,
    /// Runs being read from their store without the page lock ([`Self::begin_read`]).
    in_flight: ReadsInFlight,
    /// The pages instant release took, while they are out, their dwell times, and the
    /// reclamation cache (`released.rs`).
    pub released: Released,
    /// Whether swapped-in pages kept clean are worth keeping so (`reuse_clean`).
    pub clean_reuse: CleanReuse,
}

impl StateTable {
    pub fn new(
        pages: u32,
        swap_blocks: u32,
        mech: Mechanisms,
        policy: VictimPolicy,
        seed: u64,
    ) -> Self {
        StateTable {
            pages: vec![PageState::Zero; pages as usize],
            mirrors: Mirrors::new(pages),
            blocks: BlockMap::new(swap_blocks),
            victims: Victims::new(pages, policy, seed, mech.cluster),
            patterns: Patterns::new(if mech.mapper { pages } else { 0 }),
            mech,
            census: Census {
                zero: pages,
                ..Census::default()
            },
            in_flight: ReadsInFlight::default(),
            released: Released::new(0),
            clean_reuse: CleanReuse::default(),
        }
    }

    /// Starts noting which pages of `first..first + n` change state, while their slots are read
    /// without the page lock; [`Self::end_read`] with the id returned tells which did. A page
    /// that did not has the same slot, which nothing wrote meanwhile (a slot is written only
    /// when it is given to a page, and it stays that page's until the page changes state), so
    /// what was read is its content.
    pub fn begin_read(&mut self, first: PageIdx, n: u32) -> u64 {
        self.in_flight.begin(first, n)
    }

    /// Ends read `id`: for each page of its run, whether it changed state since
    /// [`Self::begin_read`].
    pub fn end_read(&mut self, id: u64) -> Vec<bool> {
        self.in_flight.end(id)
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

    /// Every page's state, in page order.
    pub fn states(&self) -> &[PageState] {
        &self.pages
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
        self.mirrors.moved(p, old, s);
        self.pages[p as usize] = s;
        self.census.moved(old, s);
        self.in_flight.changed(p);
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
                    self.blocks.drop_ref(block);
                }
                PageState::Resident {
                    clean: keep.then_some(block),
                }
            }
            PageState::OnDisk(ib) => {
                // Its block is in guest RAM again.
                self.mirrors.ghost.remove(&ib);
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
    /// it as one read (`pattern/`) of the blocks from its first to its last.
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
        self.mirrors.end_pending(p);
        if self.victims.warm(p) {
            self.victims.cache_hits += 1;
        }
        match self.state(p) {
            PageState::Mirrored(_) => {
                self.mirrors.written(p);
                self.set(p, PageState::Resident { clean: None });
                self.victims.touch(p);
                true
            }
            PageState::Resident { clean } => {
                if let Some(b) = clean {
                    self.blocks.drop_ref(b);
                    self.clean_reuse.count(true);
                }
                self.set(p, PageState::Resident { clean: None });
                self.victims.touch(p);
                true
            }
            _ => false,
        }
    }

    /// Whether `p` is a page kept clean, write-protected for that alone (resident with its
    /// block; not cooling, not a mirror), while the guest writes nearly every such page
    /// ([`CleanReuse::writing`]): worth opening with a neighbour the guest writes. Pages of the
    /// control clusters too: they were loaded before the count decided, and loads from now on
    /// keep the control clusters clean again.
    pub fn open_with_neighbour(&self, p: PageIdx) -> bool {
        matches!(self.state(p), PageState::Resident { clean: Some(_) })
            && !self.victims.is_cooling(p)
            && self.clean_reuse.writing()
    }

    /// Makes `p`, a page [`Self::open_with_neighbour`] allows, writable before the guest writes
    /// it: its block is given back (its content may change from now on). Not an outcome of
    /// keeping it clean: the guest did not write it.
    pub fn opened(&mut self, p: PageIdx) {
        if let PageState::Resident { clean: Some(b) } = self.state(p) {
            self.blocks.drop_ref(b);
            self.set(p, PageState::Resident { clean: None });
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
                self.blocks.drop_ref(b);
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
    /// a release answers before that bookkeeping. Until then the page counts as released for
    /// the reclamation cache and the dwell clock (`Released::is_out`): if it comes back first,
    /// its dwell is counted and its recording passed over; only its block's entry in the ghost
    /// cache is missed.
    pub fn release(&mut self, p: PageIdx, ib: ImageBlock, at: std::time::Instant) {
        self.set(p, PageState::OnDisk(ib));
        self.released.took(p, at);
    }

    /// Whether [`Self::release`] left pages to record.
    pub fn has_unrecorded(&self) -> bool {
        self.released.has_unrecorded()
    }

    /// Tells the ghost cache and the dwell clock of up to `n` of the pages [`Self::release`]
    /// took, oldest first, as [`Self::reclaimed`] does at once for the pages reclaim drops;
    /// returns how many were taken off the list. A page that is no longer `OnDisk` came back
    /// (or went elsewhere) before it was recorded and is passed over: its block is in guest RAM
    /// again.
    pub fn record_released(&mut self, n: usize) -> usize {
        let list = self.released.take_unrecorded(n);
        for &(p, at) in &list {
            if let PageState::OnDisk(ib) = self.state(p) {
                self.left_ram(ib);
                self.released.left(p, at);
            }
        }
        list.len()
    }

    /// The page holding image block `ib` left guest RAM (reclaim dropped it, the guest
    /// evicted it, a release took it): with the Swap Mapper, `ib` enters the ghost cache at
    /// its most recent end, unless another resident page still mirrors it.
    pub fn left_ram(&mut self, ib: ImageBlock) {
        if !self.mech.mapper {
            return;
        }
        let in_ram = self
            .mirrors
            .linked(ib)
            .iter()
            .any(|&q| self.pages[q as usize] == PageState::Mirrored(ib));
        if !in_ram {
            self.mirrors.ghost.insert(ib);
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
                self.mirrors.ghost.access(&ib);
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
            self.blocks.drop_ref(b);
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
                self.blocks.drop_ref(b)
            }
            _ => {}
        }
        self.set(p, to);
        // The guest freed the page: the block it held left its page cache.
        if let Some(ib) = self.mirrors.take_ended(p) {
            self.left_ram(ib);
        }
        is_resident(was)
    }

    /// Puts never-touched `p` on disk block `ib`, as a restored snapshot records it: linked to
    /// the block, as the Swap Mapper follows guest writes to it. Other states go by runs
    /// ([`Self::restore_run`]).
    pub fn restore_on_disk(&mut self, p: PageIdx, ib: ImageBlock) {
        debug_assert_eq!(self.state(p), PageState::Zero);
        self.set(p, PageState::OnDisk(ib));
    }

    /// Puts never-touched run `first..first + count` in the state a restored snapshot gives
    /// it, one that nothing beside the table and its counts follows: `Swapped(b)` (the pages
    /// on saved blocks `b..`), `Ballooned` or `Reported`. Most of a large guest's snapshot is
    /// such runs, and a migration's destination restores them with its vCPUs stopped: at
    /// memory speed, not through [`Self::set`]'s bookkeeping of each page.
    pub fn restore_run(&mut self, first: PageIdx, count: u32, s: PageState) {
        let run = &mut self.pages[first as usize..(first + count) as usize];
        debug_assert!(run.iter().all(|&s| s == PageState::Zero));
        match s {
            PageState::Swapped(b) => {
                self.blocks.take_saved_run(b, count);
                for (slot, b) in run.iter_mut().zip(b..) {
                    *slot = PageState::Swapped(b);
                }
            }
            PageState::Ballooned | PageState::Reported => run.fill(s),
            _ => unreachable!("restore_run of {s:?}"),
        }
        self.census.moved_n(PageState::Zero, s, count);
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
                    self.blocks.drop_ref(b);
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
                        let mates = self.mirrors.linked(ImageBlock {
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
    /// with [`VictimPolicy::Hd2`], sequential sequences most recent first, each from its first
    /// block, then loops least recent first, each from its end down to what its pass has
    /// brought in, then behind its reader, then what lies just ahead of the reader, then
    /// unclassified mirrored pages least recent first (`pattern/`); [`VictimPolicy::Hd2Whole`]
    /// takes each sequence it begins whole, up to [`crate::pattern::WHOLE_SEQ_MAX`] pages
    /// beyond `n`; with random, mirrored pages at random; with clock, mirrored pages least
    /// recently used first.
    /// With `cold_at`, only pages of sequences cold at that time and the probes of the others
    /// ([`Patterns::pick_cold`](crate::pattern::table::Patterns::pick_cold)): what a release
    /// takes when memory is not short, which only the `hd2` orders know (with another, or
    /// without the Swap Mapper, none). They stay resident until the caller records what it did
    /// with them.
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
        let (victims, mirrors) = (&self.victims, &self.mirrors);
        let protected = |p| victims.is_candidate(p) && mirrors.digest(p).is_none();
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
                || self.mirrors.digest(q).is_some();
            if writable && !self.mirrors.is_pending(q) {
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
    /// The window starts at `prefetch` pages and doubles, up to
    /// [`IMAGE_WINDOW_MAX`](super::mirrors::IMAGE_WINDOW_MAX), for every refault that continues
    /// the last one's stream, as Linux grows its readahead for a sequential reader. Returns
    /// `(first page, count)`.
    pub fn image_run(&mut self, p: PageIdx) -> (PageIdx, u32) {
        let PageState::OnDisk(ib) = self.state(p) else {
            return (p, 1);
        };
        let w = self.mirrors.image_window(ib, self.mech.prefetch);
        let (lo, n) = self.run_around(p, w, |q| {
            let expect = i64::from(ib.block) + i64::from(q) - i64::from(p);
            matches!(self.state(q), PageState::OnDisk(c) if c.disk == ib.disk && i64::from(c.block) == expect)
        });
        let next = ImageBlock {
            disk: ib.disk,
            block: ib.block.saturating_add(lo + n - p),
        };
        self.mirrors.image_stream_at(next, w);
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
            _ => self.mirrors.take_ended(p),
        };
        if let Some(b) = before {
            // It leaves before the read that replaced it is looked up; the page that held it
            // no longer counts as holding it.
            if let PageState::Mirrored(_) = self.state(p) {
                self.set(p, PageState::Resident { clean: None });
                self.mirrors.take_ended(p);
            }
            self.left_ram(b);
        }
        if self.mirrors.ghost.access(&ib).is_some() {
            self.mirrors.guest_rereads += 1;
        }
        if !is_resident(self.state(p)) {
            return;
        }
        if let PageState::Resident { clean: Some(b) } = self.state(p) {
            self.blocks.drop_ref(b);
        }
        // A page about to mirror what a device is writing out from it holds other content now.
        self.mirrors.end_pending(p);
        self.set(p, PageState::Mirrored(ib));
        self.mirrors.set_digest(p, digest);
        // A read landing in it is a use the pager sees, as a fault-in is (for clock).
        self.victims.touch(p);
    }

    /// A number that changes whenever a page comes to mirror a block, stops mirroring, or is
    /// left writable with a digest: what release readiness (`release.rs`) looks at to know
    /// whether there may be new candidates to check.
    pub fn mirror_generation(&self) -> u64 {
        self.mirrors.generation()
    }

    /// The digest mirrored page `p` must still have to mirror its block, if it was left
    /// writable when a guest disk read filled it (`None`: not such a page, so not writable
    /// behind the table's back).
    pub fn mirror_digest(&self, p: PageIdx) -> Option<Digest> {
        self.mirrors.digest(p)
    }

    /// Mirrored page `p`, left writable with a digest, was write-protected and found unchanged
    /// (and stays): it is a protected mirror now, as one refaulted from its block, with no
    /// digest to check.
    pub fn mirror_protected(&mut self, p: PageIdx) {
        if let PageState::Mirrored(_) = self.state(p) {
            self.mirrors.forget_digest(p);
        }
    }

    /// Release readiness protected and checked mirrored page `p` (after
    /// [`Self::mirror_protected`]): a guest write that ends its mirror counts in
    /// [`Self::take_ready_lost`].
    pub fn made_ready(&mut self, p: PageIdx) {
        if let PageState::Mirrored(_) = self.state(p) {
            self.mirrors.made_ready(p);
        }
    }

    /// Pages made ready that guest writes took back since the last call.
    pub fn take_ready_lost(&mut self) -> u64 {
        self.mirrors.take_ready_lost()
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
        for p in self.mirrors.linked(ib) {
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
            if self.mirrors.digest(p).is_some() {
                self.set(p, PageState::Resident { clean: None });
            }
            self.mirrors.begin_pending(p, ib);
        }
    }

    /// Whether `p` is recorded as being written to `ib` by a device.
    pub fn write_pending(&self, p: PageIdx, ib: ImageBlock) -> bool {
        self.mirrors.write_pending(p, ib)
    }

    /// The device's write of `ib` from `p` landed, `written` the digest of what it wrote and
    /// `now` that of what `p` holds now: if they are equal (the guest did not change `p` in
    /// between, or changed it back), `p` mirrors `ib` from now on (VSwapper: write, wait, then
    /// map), writable, as long as it keeps that digest ([`Self::mirror_digest`]). A write fault
    /// on a protected source in between ended it already.
    pub fn disk_write_done(&mut self, p: PageIdx, ib: ImageBlock, written: Digest, now: Digest) {
        if !self.mirrors.write_pending(p, ib) {
            return;
        }
        self.mirrors.end_pending(p);
        if written != now {
            return;
        }
        if let PageState::Resident { clean } = self.state(p) {
            if let Some(b) = clean {
                self.blocks.drop_ref(b);
            }
            self.set(p, PageState::Mirrored(ib));
            // Its block is in guest RAM again: out of the ghost cache.
            self.mirrors.ghost.remove(&ib);
            self.mirrors.set_digest(p, written);
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
    pub(super) fn census_by_scan(&self) -> Census {
        let mut c = Census::default();
        for &s in &self.pages {
            c.zero += 1;
            c.moved(PageState::Zero, s);
        }
        c
    }
}
