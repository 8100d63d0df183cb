//! Moving pages between the pool and the rest without a fault asking for it: the pool's flusher
//! (MemFlex §3.3, hybrid swap-out) and proactive swap-in (§3.4).
//!
//! - **Flusher** (thread `pool-flush`): while the pool is above its spill mark, its least recent
//!   blocks go to the swap file in sorted runs ([`crate::store::pool::Pool::spill`]); on every wake-up
//!   (at least once a second) it first drops blocks the state table has freed.
//! - **Proactive swap-in** (on the reclaim thread): when the limit rises (or goes), swapped pages
//!   come back without waiting for their faults: pooled pages first, most recently pooled first
//!   (MemFlex's order: the last swapped out is the likeliest to be used), then pages in the
//!   swap file in block order (long sequential reads).
//!
//! How a proactive swap-in goes:
//! 1. Under the page lock, one pass over the state table maps each swapped block to its page.
//!    Off the lock, the pool's blocks are listed in its own recency order and the rest in
//!    block order (a walk of that map: nothing is sorted).
//! 2. The lists go in steps of [`STEP`] pages. Each step takes the lock briefly to keep the
//!    pages still swapped and as many as there is room for under the limit (less one reclaim
//!    chunk, so reclaim is not woken); it stops when the room is used up or the limit moves
//!    again.
//! 3. A step of the file's pages is read off the page lock, one read per run of consecutive
//!    blocks, by a read-ahead thread while this one installs the step before (the file's
//!    reads and the installs overlap).
//! 4. The pages are installed [`HOLD`] at a time per hold of the page lock, so the pager
//!    thread serves faults in between: one `UFFDIO_COPY` per run of pages whose blocks also
//!    follow each other, from the step's buffer, or for pooled pages straight from the pool's
//!    memory (under the pool's lock, so no copy into a buffer first).
//!
//! Pages come back writable and give up their blocks (unlike a read fault's, which stay clean
//! and write-protected to keep theirs): a page brought back without being asked for is
//! about to be used, and kept clean each first write to it would cost a write-protect fault (a
//! 1 GiB sweep of writes right after a proactive swap-in took 13 s that way, against 0.5–1.4 s
//! on fresh memory, `memvisor bench swapin`); and a pooled block nothing refers to leaves the
//! pool at the flusher's next purge, so the pool's memory is given back, as MemFlex frees its
//! shared memory once the pages are in. Evicting such a page again costs a write.
//!
//! Each proactive swap-in logs where its time went (`pager: proactive swap-in: ...` at info:
//! the table scan, the ordering, the checks, the file's reads, the `UFFDIO_COPY`s and the
//! waits for the page lock).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::core::{PagerCore, PagerFailure, Pages};
use crate::page::{Block, PageIdx, PAGE_SIZE};
use crate::state::page_state::PageState;
use crate::stats::EventCounters;
use crate::store;
use crate::store::pool::{Pool, PoolCounters, FLUSH_BATCH};
use crate::sys::uffd::CopyError;
use memvisor_devices::iobuf::IoBuf;

/// Pages read per step of proactive swap-in (4 MiB), without the page lock.
const STEP: usize = 1024;
/// Most pages installed per hold of the page lock, so faults are served in between.
const HOLD: usize = 256;
/// No page (in the block-to-page map of a swap-in).
const NONE: PageIdx = PageIdx::MAX;

impl PagerCore {
    /// The pool's flusher thread.
    pub(crate) fn flush_thread(&self) {
        let Some(pool) = &self.stores.swap.pool else {
            return;
        };
        let mut buf = IoBuf::huge(FLUSH_BATCH * PAGE_SIZE);
        loop {
            pool.wait_for_work();
            // Freed blocks are dropped once per wake-up (a scan of the whole pool), then the
            // pool spills round by round down to its mark.
            pool.purge(|blocks: &[Block]| {
                let pages = self.lock();
                blocks
                    .iter()
                    .map(|&b| pages.table.blocks.refs(b) > 0)
                    .collect()
            });
            loop {
                match pool.spill(&self.stores.swap.file, &mut buf) {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => {
                        // Nothing is lost (the blocks stay in the pool), but the pool cannot
                        // make room: once it is full, reclaim writes to the file, which fails
                        // the same way and pauses the VM. Tried again every second.
                        tracing::error!("pager: the pool cannot spill: {e}");
                        break;
                    }
                }
            }
        }
    }
}

/// Proactive swap-in (see the module doc): whether it is on, and whether the limit rose since it
/// last ran; it works on the core it is handed, from the reclaim thread.
pub(crate) struct SwapIn {
    /// `PagerConfig::proactive`.
    enabled: bool,
    /// Set when the limit rises: the reclaim thread then swaps in proactively.
    wanted: AtomicBool,
}

impl SwapIn {
    pub fn new(enabled: bool) -> Self {
        SwapIn {
            enabled,
            wanted: AtomicBool::new(false),
        }
    }

    /// The limit rose: swap in at the reclaim thread's next round (if proactive swap-in is on).
    pub(crate) fn want(&self) {
        self.wanted.store(true, Ordering::SeqCst);
    }

    /// Pages that may come in without taking the VM over its limit less one reclaim chunk.
    fn room(core: &PagerCore, pages: &Pages) -> u32 {
        core.limit()
            .saturating_sub(core.batch)
            .saturating_sub(pages.table.resident())
    }

    /// Proactive swap-in, when asked for (the limit rose): see the module doc.
    pub(crate) fn run(&self, core: &PagerCore) {
        if !self.enabled || !self.wanted.swap(false, Ordering::SeqCst) {
            return;
        }
        let pool = core.stores.swap.pool.as_ref();
        let mut t = Timing::default();
        let started = Instant::now();
        // Which page each swapped block holds, from one pass over the table under the lock;
        // the other pages of a block several pages share (share before swap, `reclaim.rs`)
        // apart.
        let (page_of, sharers): (Vec<PageIdx>, Vec<(Block, PageIdx)>) = {
            let pages = core.lock();
            if !pages.attached || pages.table.census().swapped == 0 || Self::room(core, &pages) == 0
            {
                return;
            }
            let mut page_of = vec![NONE; pages.table.blocks.capacity() as usize];
            let mut sharers = Vec::new();
            for p in 0..pages.table.len() {
                if let PageState::Swapped(b) = pages.table.state(p) {
                    match page_of.get_mut(b as usize) {
                        Some(x) if *x == NONE => *x = p,
                        Some(_) => sharers.push((b, p)),
                        None => {}
                    }
                }
            }
            (page_of, sharers)
        };
        t.scan = started.elapsed();
        // Pooled blocks most recent first (the pool's own order), then the file's in block
        // order: no sort.
        let mut in_pool = vec![false; page_of.len()];
        let pooled: Vec<(Block, PageIdx)> = pool
            .map(Pool::blocks_by_recency)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|b| {
                let p = *page_of.get(b as usize)?;
                in_pool[b as usize] = true;
                (p != NONE).then_some((b, p))
            })
            .collect();
        let mut on_disk: Vec<(Block, PageIdx)> = (0..)
            .zip(page_of.iter().zip(&in_pool))
            .filter(|&(_, (&p, &pooled))| p != NONE && !pooled)
            .map(|(b, (&p, _))| (b, p))
            .collect();
        let mut pooled = pooled;
        for (b, p) in sharers {
            if in_pool.get(b as usize).copied().unwrap_or(false) {
                pooled.push((b, p));
            } else {
                on_disk.push((b, p));
            }
        }
        drop((page_of, in_pool));
        t.order = started.elapsed() - t.scan;
        let c = pool.map(|p| &p.counters);
        let done = self
            .swap_in_list(
                core,
                &pooled,
                true,
                c.map(|c| &c.proactive_from_pool),
                &mut t,
            )
            .and_then(|go_on| match go_on {
                true => self.swap_in_list(
                    core,
                    &on_disk,
                    false,
                    c.map(|c| &c.proactive_from_disk),
                    &mut t,
                ),
                false => Ok(false),
            });
        if let Err((p, e)) = done {
            core.pause(PagerFailure::Fault {
                page: p,
                error: e.to_string(),
            });
            return;
        }
        t.log(started.elapsed());
    }

    /// Brings back the pages of `list` step by step ([`STEP`] pages each). Pooled pages are
    /// copied from the pool's memory as they are installed; the file's are read ahead: a
    /// second thread reads the next step (off the page lock) while this one installs the last.
    /// Returns whether to go on (false: no room left, or the limit moved again).
    fn swap_in_list(
        &self,
        core: &PagerCore,
        list: &[(Block, PageIdx)],
        pooled: bool,
        counter: Option<&AtomicU64>,
        t: &mut Timing,
    ) -> Result<bool, (PageIdx, std::io::Error)> {
        let mut steps = list.chunks(STEP);
        let mut buf = IoBuf::huge(STEP * PAGE_SIZE);
        if pooled {
            loop {
                match self.swap_in_next(core, &mut steps, t) {
                    Next::Step(todo) => {
                        if !self.swap_in_install(core, &todo, true, &mut buf, counter, t)? {
                            return Ok(false);
                        }
                    }
                    Next::End => return Ok(true),
                    Next::Stop => return Ok(false),
                }
            }
        }
        let mut todo = match self.swap_in_next(core, &mut steps, t) {
            Next::Step(todo) => todo,
            Next::End => return Ok(true),
            Next::Stop => return Ok(false),
        };
        t.read += self.swap_in_read(core, &todo, &mut buf)?;
        // The read-ahead's buffer, while the reader does not have it.
        let mut ahead = Some(IoBuf::huge(STEP * PAGE_SIZE));
        std::thread::scope(|scope| loop {
            let next = self.swap_in_next(core, &mut steps, t);
            let end = matches!(next, Next::End);
            // The buffer goes to the reader and comes back with what it read.
            let reader = match next {
                Next::Step(next) => {
                    let mut into = ahead.take().expect("the reader gave its buffer back");
                    Some(scope.spawn(move || {
                        let took = self.swap_in_read(core, &next, &mut into);
                        (next, into, took)
                    }))
                }
                Next::End | Next::Stop => None,
            };
            let go_on = self.swap_in_install(core, &todo, false, &mut buf, counter, t);
            let read = reader.map(|r| r.join().expect("the read-ahead thread does not panic"));
            if !go_on? {
                return Ok(false);
            }
            let Some((next_todo, into, took)) = read else {
                return Ok(end);
            };
            t.read += took?;
            todo = next_todo;
            ahead = Some(std::mem::replace(&mut buf, into));
        })
    }

    /// The next step of `steps` with pages to bring back.
    fn swap_in_next(
        &self,
        core: &PagerCore,
        steps: &mut std::slice::Chunks<'_, (Block, PageIdx)>,
        t: &mut Timing,
    ) -> Next {
        for step in steps.by_ref() {
            match self.swap_in_check(core, step, t) {
                None => return Next::Stop,
                Some(todo) if todo.is_empty() => {}
                Some(todo) => return Next::Step(todo),
            }
        }
        Next::End
    }

    /// The pages of `step` still swapped, as many as there is room for, in block order
    /// (checked under the lock); `None`: no room, or the limit moved again.
    fn swap_in_check(
        &self,
        core: &PagerCore,
        step: &[(Block, PageIdx)],
        t: &mut Timing,
    ) -> Option<Vec<(Block, PageIdx)>> {
        let at = Instant::now();
        let mut todo: Vec<(Block, PageIdx)> = {
            let pages = core.lock();
            t.lock_wait += at.elapsed();
            let room = Self::room(core, &pages) as usize;
            if room == 0 || self.wanted.load(Ordering::SeqCst) {
                // Full, or the limit moved again: start over from the new one.
                return None;
            }
            step.iter()
                .copied()
                .filter(|&(b, p)| pages.table.state(p) == PageState::Swapped(b))
                .take(room)
                .collect()
        };
        todo.sort_unstable();
        t.check += at.elapsed();
        Some(todo)
    }

    /// Reads the blocks of `todo` (in block order) into `buf`, one store read per run of
    /// consecutive blocks, without the page lock; returns how long it took.
    ///
    /// Reading off the lock is safe because proactive swap-in runs on the reclaim thread: no
    /// reclaim chunk writes a block meanwhile, so a page still `Swapped(b)` when the lock is
    /// taken again has the content read from `b` (a fault or a device write in between moves
    /// it out of `Swapped`, and only reclaim moves it back). The pool's flusher may spill a
    /// block meanwhile; the swap store reads the pool before the file, and a spilled block is
    /// in the file before it leaves the pool.
    fn swap_in_read(
        &self,
        core: &PagerCore,
        todo: &[(Block, PageIdx)],
        buf: &mut IoBuf,
    ) -> Result<Duration, (PageIdx, std::io::Error)> {
        let at = Instant::now();
        let data = buf.get(todo.len() * PAGE_SIZE);
        let mut i = 0;
        while i < todo.len() {
            let mut j = i + 1;
            while j < todo.len() && todo[j].0 == todo[j - 1].0 + 1 {
                j += 1;
            }
            store::read(
                &core.stores.swap,
                todo[i].0,
                &mut data[i * PAGE_SIZE..j * PAGE_SIZE],
            )
            .map_err(|e| (todo[i].1, e))?;
            i = j;
        }
        Ok(at.elapsed())
    }

    /// Installs the pages of `todo` still swapped, [`HOLD`] per hold of the page lock, one
    /// `UFFDIO_COPY` per run of pages whose blocks also follow each other: from `buf` (where
    /// [`Self::swap_in_read`] put them), or for `pooled` pages from the pool's memory. Returns
    /// whether to go on.
    fn swap_in_install(
        &self,
        core: &PagerCore,
        todo: &[(Block, PageIdx)],
        pooled: bool,
        buf: &mut IoBuf,
        counter: Option<&AtomicU64>,
        t: &mut Timing,
    ) -> Result<bool, (PageIdx, std::io::Error)> {
        let pool = core.stores.swap.pool.as_ref().filter(|_| pooled);
        let data = buf.get(todo.len() * PAGE_SIZE);
        // Writable, their blocks given up: see the module doc.
        let installed = |pages: &mut Pages, p: PageIdx, n: u32| {
            pages.table.install_run(p, n, false);
            if let Some(c) = counter {
                PoolCounters::add(c, n);
            }
            EventCounters::add(&core.counters.proactive_swap_ins, u64::from(n));
        };
        let mut i = 0;
        while i < todo.len() {
            let at = Instant::now();
            let mut pages = core.lock();
            t.lock_wait += at.elapsed();
            if self.wanted.load(Ordering::SeqCst) {
                return Ok(false);
            }
            let mut room = Self::room(core, &pages) as usize;
            let end = (i + HOLD).min(todo.len());
            while i < end && room > 0 {
                let (b, p) = todo[i];
                if pages.table.state(p) != PageState::Swapped(b) {
                    i += 1;
                    continue;
                }
                let mut n: u32 = 1;
                while i + (n as usize) < end
                    && (n as usize) < room
                    && todo[i + n as usize] == (b + n, p + n)
                    && core.map.same_region(p, p + n)
                    && pages.table.state(p + n) == PageState::Swapped(b + n)
                {
                    n += 1;
                }
                let len = n as usize * PAGE_SIZE;
                let at = Instant::now();
                let copied = match pool {
                    Some(pool) => pool.copy_run(b, n, |src, off, k| {
                        t.copies += 1;
                        // SAFETY: `src` is `k` pages of pool memory, kept mapped by the
                        // pool's lock, held for the call.
                        unsafe {
                            core.uffd.copy(
                                src,
                                core.map.host(p + off),
                                k as usize * PAGE_SIZE,
                                false,
                            )
                        }
                        .map_err(|e| CopyError {
                            pages: off + e.pages,
                            error: e.error,
                        })
                    }),
                    None => Ok(false),
                };
                // A copy that failed partway put its first pages in: they are recorded.
                let copied = match copied {
                    Ok(c) => c,
                    Err(e) => {
                        installed(&mut pages, p, e.pages.min(n));
                        return Err((p, e.into()));
                    }
                };
                if copied {
                    store::count_read(&core.stores.swap, len);
                } else {
                    let src = &mut data[i * PAGE_SIZE..i * PAGE_SIZE + len];
                    if pooled {
                        // Kept compressed, or spilled to the file since the list was made:
                        // read (and decompress) it now.
                        store::read(&core.stores.swap, b, src).map_err(|e| (p, e))?;
                    }
                    // SAFETY: `src` is `n` pages of this call's buffer, alive for the call.
                    let copy =
                        unsafe { core.uffd.copy(src.as_ptr(), core.map.host(p), len, false) };
                    if let Err(e) = copy {
                        installed(&mut pages, p, e.pages.min(n));
                        return Err((p, e.into()));
                    }
                    t.copies += 1;
                }
                t.copy += at.elapsed();
                t.pages += u64::from(n);
                installed(&mut pages, p, n);
                room -= n as usize;
                i += n as usize;
            }
            t.holds += 1;
            if room == 0 {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// What comes next in a list of pages to swap in.
enum Next {
    /// A step's pages still swapped, in block order.
    Step(Vec<(Block, PageIdx)>),
    /// The list is done.
    End,
    /// No room left, or the limit moved again.
    Stop,
}

/// Where one proactive swap-in spent its time, logged when it ends (`tracing` at info).
#[derive(Debug, Default)]
struct Timing {
    /// The pass over the state table, under the lock.
    scan: Duration,
    /// Splitting the pages by tier and ordering them, off the lock.
    order: Duration,
    /// Steps' checks that their pages are still swapped, under the lock.
    check: Duration,
    /// Store reads of the file's pages, off the lock (on the read-ahead thread, overlapping
    /// the installs).
    read: Duration,
    /// `UFFDIO_COPY` calls, under the lock, how many and the pages they installed.
    copy: Duration,
    copies: u64,
    pages: u64,
    /// Waiting for the page lock (faults and `GET /stats` held it), and holds taken to install.
    lock_wait: Duration,
    holds: u64,
}

impl Timing {
    fn log(&self, total: Duration) {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        #[allow(clippy::cast_precision_loss)]
        let mib_s =
            (self.pages << 12) as f64 / f64::from(1u32 << 20) / total.as_secs_f64().max(1e-9);
        tracing::info!(
            "pager: proactive swap-in: {} pages in {:.1} ms ({mib_s:.0} MiB/s): table scan {:.1} ms, ordering {:.1} ms, checks {:.1} ms, file reads {:.1} ms, {} UFFDIO_COPY {:.1} ms, lock waits {:.1} ms over {} holds",
            self.pages,
            ms(total),
            ms(self.scan),
            ms(self.order),
            ms(self.check),
            ms(self.read),
            self.copies,
            ms(self.copy),
            ms(self.lock_wait),
            self.holds,
        );
    }
}
