//! VSwapper's False Reads Preventer (§4.2), uncooperative path: a guest write to a page whose
//! content is only in the swap store or the disk image need not read that content back when the
//! writing instruction overwrites the whole page.
//!
//! Protocol:
//! 1. The pager thread gets a write fault, from a vCPU thread, on a swapped or on-disk page. Instead
//!    of reading the page, it records the page as pending for that thread and sends the thread
//!    `SIGUSR1`: `KVM_RUN` returns `EINTR` with RIP still at the faulting instruction.
//! 2. The vCPU thread calls [`Pager::vcpu_interrupted`](crate::Pager::vcpu_interrupted) with
//!    its registers. The pager walks the guest page tables to read the instruction at RIP and
//!    decodes it ([`plan`]). A `REP STOS` or `REP MOVS` (forward, 64-bit addressing) whose
//!    destination covers the whole faulting page lets the pager install that page — and the
//!    other whole pages the instruction will write, up to [`MAX_PAGES`] — with the content the
//!    instruction is about to store, with no read.
//! 3. Anything else falls back to the ordinary swap-in. Either way the page is in place before
//!    the vCPU re-enters the guest, which then runs the instruction again over present pages.
//! 4. If the vCPU does not answer within [`TIMEOUT_MS`], the pager thread swaps the page in itself.
//!
//! A prevention is only worth it when it costs less than the read it saves. On a host where
//! stopping a vCPU is slow (about 137 µs on kvm_pvm: the signal, the exit from `KVM_RUN`, the
//! register reads, the page walk) and a read brings a run of up to 16 pages from a fast disk, it
//! does not. So the Preventer measures both as the pager goes, in time per page brought in: a
//! prevention from the stop to the install (an attempt that falls back or times out brings none),
//! a read from the swap file or an image from its start to the install of its run (a fallback's
//! read too), apart for the two kinds of store ([`Costs`]). While reads of the faulting page's
//! kind cost less, a write fault goes to the read (`preventer_passed`), and one in
//! [`RETRY_EVERY`] is tried anyway, so the Preventer's own cost stays measured as the guest and
//! the disk change.
//!
//! What differs from the paper: VSwapper emulates any run of stores into a buffer for up to 1 ms
//! and 32 pages. Emulating arbitrary stores from user space would mean re-implementing the
//! instruction set; memvisor handles the string instructions that zero and copy whole pages (how
//! guests clear freshly allocated pages: Linux's `clear_page_erms` is `rep stosb`) and falls back
//! for the rest.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use iced_x86::{Decoder, DecoderOptions, Mnemonic, OpKind};
use memvisor_devices::ram::GuestRam;
use vm_memory::{Bytes, GuestAddress};

use crate::config::Preventing;
use crate::core::{current_tid, PagerCore};
use crate::guest_ram::PagedRam;
use crate::page::{PageIdx, PAGE_SIZE};
use crate::reclaim::Reclaimer;
use crate::state::page_state::PageState;
use crate::stats::EventCounters;

/// Most pages one decision installs.
pub const MAX_PAGES: u64 = 32;
/// How long the pager waits for an interrupted vCPU before swapping the page in itself.
pub const TIMEOUT_MS: u64 = 10;
/// While reads cost less per page, one write fault in this many is still given to the Preventer.
pub const RETRY_EVERY: u32 = 64;
/// The measurements a cost estimate remembers: each new one weighs `1 / COST_MEMORY`.
const COST_MEMORY: f64 = 32.0;

const RFLAGS_DF: u64 = 1 << 10;

/// The vCPU registers the Preventer reads.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuState {
    pub rip: u64,
    pub rax: u64,
    pub rcx: u64,
    pub rsi: u64,
    pub rdi: u64,
    pub rflags: u64,
    pub cr3: u64,
    /// 64-bit code (EFER.LMA and CS.L).
    pub long_mode: bool,
}

/// What to put in the destination's whole pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// `rep stos`: the element (`size` bytes of `value`) repeated.
    Pattern { value: u64, size: u8 },
    /// `rep movs`: bytes copied from this guest-virtual source address onwards.
    Copy { src: u64 },
}

/// The whole destination pages an instruction will write, and with what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Guest-virtual address of the first whole page written.
    pub first_page: u64,
    /// Whole pages written, at most [`MAX_PAGES`].
    pub pages: u64,
    /// Guest-virtual address where the string starts (to offset a copy's source).
    pub dest_start: u64,
    pub fill: Fill,
}

/// Decodes the instruction in `code` (read at RIP) and says which whole pages it will write.
pub fn plan(cpu: &CpuState, code: &[u8]) -> Option<Plan> {
    if !cpu.long_mode || cpu.rflags & RFLAGS_DF != 0 {
        return None;
    }
    let mut d = Decoder::with_ip(64, code, cpu.rip, DecoderOptions::NONE);
    let insn = d.decode();
    if insn.is_invalid() || !insn.has_rep_prefix() || insn.op0_kind() != OpKind::MemoryESRDI {
        return None;
    }
    let (size, fill) = match insn.mnemonic() {
        Mnemonic::Stosb => (
            1,
            Fill::Pattern {
                value: cpu.rax & 0xff,
                size: 1,
            },
        ),
        Mnemonic::Stosw => (
            2,
            Fill::Pattern {
                value: cpu.rax & 0xffff,
                size: 2,
            },
        ),
        Mnemonic::Stosd => (
            4,
            Fill::Pattern {
                value: cpu.rax & 0xffff_ffff,
                size: 4,
            },
        ),
        Mnemonic::Stosq => (
            8,
            Fill::Pattern {
                value: cpu.rax,
                size: 8,
            },
        ),
        m @ (Mnemonic::Movsb | Mnemonic::Movsw | Mnemonic::Movsd | Mnemonic::Movsq) => {
            if insn.op1_kind() != OpKind::MemorySegRSI {
                return None;
            }
            let size = match m {
                Mnemonic::Movsb => 1,
                Mnemonic::Movsw => 2,
                Mnemonic::Movsd => 4,
                _ => 8,
            };
            (size, Fill::Copy { src: cpu.rsi })
        }
        _ => return None,
    };
    let len = cpu.rcx.checked_mul(size)?;
    let end = cpu.rdi.checked_add(len)?;
    let first_page = cpu.rdi.checked_add(PAGE_SIZE as u64 - 1)? & !(PAGE_SIZE as u64 - 1);
    let last_page = end & !(PAGE_SIZE as u64 - 1);
    if last_page <= first_page {
        return None;
    }
    if let Fill::Copy { src } = fill {
        // Overlapping copies read what they write: leave them to the hardware.
        let src_end = src.checked_add(len)?;
        if src < end && cpu.rdi < src_end {
            return None;
        }
    }
    let pages = ((last_page - first_page) / PAGE_SIZE as u64).min(MAX_PAGES);
    Some(Plan {
        first_page,
        pages,
        dest_start: cpu.rdi,
        fill,
    })
}

/// Translates guest-virtual `va` with the 4-level page tables at `cr3`; `read` reads a
/// guest-physical 8-byte entry. `None` for a non-present mapping.
pub fn translate(cr3: u64, va: u64, read: impl Fn(u64) -> Option<u64>) -> Option<u64> {
    const PRESENT: u64 = 1;
    const HUGE: u64 = 1 << 7;
    const ADDR: u64 = 0x000f_ffff_ffff_f000;
    let mut table = cr3 & ADDR;
    for (level, shift) in [(4, 39u32), (3, 30), (2, 21), (1, 12)] {
        let entry = read(table + ((va >> shift) & 0x1ff) * 8)?;
        if entry & PRESENT == 0 {
            return None;
        }
        if level == 1 || (entry & HUGE != 0 && level <= 3) {
            let page_mask = (1u64 << shift) - 1;
            return Some((entry & ADDR & !page_mask) | (va & page_mask));
        }
        table = entry & ADDR;
    }
    None
}

/// The time one way of bringing pages in has taken per page: decayed sums of the time and of
/// the pages, so an attempt that brought none raises the cost without a division by zero.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cost {
    micros: f64,
    pages: f64,
}

impl Cost {
    /// Adds one measurement: `took` for `pages` pages.
    pub fn add(&mut self, took: Duration, pages: u64) {
        let keep = 1.0 - 1.0 / COST_MEMORY;
        // Pages of one measurement: at most a run or `MAX_PAGES`, exact in an f64.
        #[allow(clippy::cast_precision_loss)]
        let n = pages as f64;
        self.micros = self.micros * keep + took.as_secs_f64() * 1e6;
        self.pages = self.pages * keep + n;
    }

    /// Microseconds per page brought in; `None` before any measurement, infinite when time was
    /// spent and no page came of it.
    #[must_use]
    pub fn per_page(&self) -> Option<f64> {
        if self.micros == 0.0 && self.pages == 0.0 {
            None
        } else if self.pages <= f64::EPSILON {
            Some(f64::INFINITY)
        } else {
            Some(self.micros / self.pages)
        }
    }
}

/// Where the page a read would bring comes from: the two cost differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadFrom {
    Swap,
    Image,
}

impl ReadFrom {
    /// Where a page in `state` is read from; `None` when it is not in a store.
    #[must_use]
    pub fn of(state: PageState) -> Option<ReadFrom> {
        match state {
            PageState::Swapped(_) => Some(ReadFrom::Swap),
            PageState::OnDisk(_) => Some(ReadFrom::Image),
            _ => None,
        }
    }
}

/// What the Preventer has measured, and how many write faults it passed over since it last
/// tried.
#[derive(Clone, Copy, Debug, Default)]
pub struct Costs {
    pub prevent: Cost,
    pub swap: Cost,
    pub image: Cost,
    passed: u32,
}

impl Costs {
    /// Whether a write fault on a page read from `from` goes to the Preventer: unless both are
    /// measured and the read costs less per page, and then one in [`RETRY_EVERY`].
    pub fn try_prevent(&mut self, from: ReadFrom) -> bool {
        let read = match from {
            ReadFrom::Swap => self.swap,
            ReadFrom::Image => self.image,
        };
        match (self.prevent.per_page(), read.per_page()) {
            (Some(prevent), Some(read)) if prevent > read => {
                self.passed += 1;
                if self.passed >= RETRY_EVERY {
                    self.passed = 0;
                    return true;
                }
                false
            }
            _ => true,
        }
    }
}

// The Preventer's driving: stopping a vCPU on its write fault and deciding once it answers.

/// The Preventer's state: the vCPU threads it stopped, the page each faulted on, and since
/// when; and what preventions and reads have cost. Each lock is taken after the page lock,
/// never before it, and neither is held while taking the other.
#[derive(Default)]
pub(crate) struct Preventer {
    stopped: Mutex<HashMap<i32, (PageIdx, Instant)>>,
    costs: Mutex<Costs>,
}

impl Preventer {
    fn stopped(&self) -> MutexGuard<'_, HashMap<i32, (PageIdx, Instant)>> {
        self.stopped.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn costs(&self) -> MutexGuard<'_, Costs> {
        self.costs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A read from a store installed `pages` pages in `took`.
    pub(crate) fn read_took(&self, from: ReadFrom, took: Duration, pages: u64) {
        let mut c = self.costs();
        match from {
            ReadFrom::Swap => c.swap.add(took, pages),
            ReadFrom::Image => c.image.add(took, pages),
        }
    }

    /// Whether a stopped vCPU has yet to answer.
    pub(crate) fn waiting(&self) -> bool {
        !self.stopped().is_empty()
    }

    /// Stops vCPU thread `tid`, whose write to page `p` (to be read from `from` otherwise)
    /// faulted, so it can be asked what it is writing. Returns false if `mode` is
    /// [`Preventing::Measured`] and a read costs less here ([`Costs::try_prevent`]), or if the
    /// vCPU cannot be stopped (already stopped, or the kick failed): the caller then reads the
    /// page in.
    pub(crate) fn stop(
        &self,
        core: &PagerCore,
        tid: i32,
        p: PageIdx,
        from: ReadFrom,
        mode: Preventing,
    ) -> bool {
        if mode == Preventing::Measured && !self.costs().try_prevent(from) {
            EventCounters::add(&core.counters.preventer_passed, 1);
            return false;
        }
        let mut stopped = self.stopped();
        if stopped.contains_key(&tid) || core.vcpus.kick(tid).is_err() {
            return false;
        }
        stopped.insert(tid, (p, Instant::now()));
        EventCounters::add(&core.counters.preventer_attempts, 1);
        true
    }

    /// Gives up on the stopped vCPUs that did not answer in time: returns the pages they
    /// faulted on, which the pager thread then swaps in ([`FaultHandler::swap_in_expired`]).
    ///
    /// [`FaultHandler::swap_in_expired`]: crate::fault::FaultHandler::swap_in_expired
    pub(crate) fn expire(&self, core: &PagerCore) -> Vec<PageIdx> {
        let late: Vec<(i32, PageIdx)> = {
            let mut stopped = self.stopped();
            let late: Vec<(i32, PageIdx)> = stopped
                .iter()
                .filter(|(_, (_, t))| t.elapsed().as_millis() >= u128::from(TIMEOUT_MS))
                .map(|(&tid, &(p, _))| (tid, p))
                .collect();
            for (tid, _) in &late {
                stopped.remove(tid);
            }
            late
        };
        if !late.is_empty() {
            let mut costs = self.costs();
            for _ in &late {
                costs.prevent.add(Duration::from_millis(TIMEOUT_MS), 0);
            }
        }
        EventCounters::add(&core.counters.preventer_timeouts, late.len() as u64);
        late.into_iter().map(|(_, p)| p).collect()
    }

    /// A vCPU thread's `KVM_RUN` was interrupted (see [`crate::Pager::vcpu_interrupted`]).
    /// Returns the page to swap in if this vCPU was stopped and its page could not be filled
    /// from the instruction ([`FaultHandler::preventer_fallback`] does that).
    ///
    /// [`FaultHandler::preventer_fallback`]: crate::fault::FaultHandler::preventer_fallback
    pub(crate) fn vcpu_interrupted(
        &self,
        core: &PagerCore,
        reclaim: &Reclaimer,
        registers: impl FnOnce() -> Option<CpuState>,
    ) -> Option<PageIdx> {
        let s = core;
        let (p, since) = self.stopped().remove(&current_tid())?;
        let installed = registers()
            .and_then(|cpu| core.prevent(reclaim, &cpu, p))
            .unwrap_or(0);
        self.costs().prevent.add(since.elapsed(), installed);
        if installed > 0 {
            EventCounters::add(&s.counters.preventer_completed, 1);
            EventCounters::add(&s.counters.false_reads_avoided, installed);
            return None;
        }
        EventCounters::add(&s.counters.preventer_fallbacks, 1);
        Some(p)
    }
}

impl PagerCore {
    /// Reads guest-virtual memory through the vCPU's page tables.
    fn read_virt(&self, cr3: u64, va: u64, buf: &mut [u8]) -> Option<()> {
        let mem = &self.mem;
        let mut done = 0usize;
        while done < buf.len() {
            let at = va.checked_add(done as u64)?;
            let pa = translate(cr3, at, |a| mem.read_obj::<u64>(GuestAddress(a)).ok())?;
            let n = usize::try_from(PAGE_SIZE as u64 - at % PAGE_SIZE as u64)
                .ok()?
                .min(buf.len() - done);
            mem.read_slice(&mut buf[done..done + n], GuestAddress(pa))
                .ok()?;
            done += n;
        }
        Some(())
    }

    /// Installs the whole pages the instruction at RIP is about to overwrite, if the faulting
    /// page `p` is one of them. Returns how many pages were written without a read.
    fn prevent(&self, reclaim: &Reclaimer, cpu: &CpuState, p: PageIdx) -> Option<u64> {
        let s = self;
        let mut code = [0u8; 15];
        self.read_virt(cpu.cr3, cpu.rip, &mut code)?;
        let plan = plan(cpu, &code)?;
        let mem = &s.mem;
        let pte = |a: u64| mem.read_obj::<u64>(GuestAddress(a)).ok();
        let targets: Vec<(u64, u64)> = (0..plan.pages)
            .filter_map(|i| {
                let va = plan.first_page + i * PAGE_SIZE as u64;
                translate(cpu.cr3, va, pte).map(|pa| (va, pa))
            })
            .collect();
        if !targets
            .iter()
            .any(|&(_, pa)| s.map.page_of_gpa(pa) == Some(p))
        {
            return None;
        }
        let mut page = vec![0u8; 4096];
        let mut count = 0;
        for (va, pa) in targets {
            match plan.fill {
                Fill::Pattern { value, size } => {
                    let bytes = value.to_le_bytes();
                    for (i, b) in page.iter_mut().enumerate() {
                        *b = bytes[i % usize::from(size)];
                    }
                }
                Fill::Copy { src } => {
                    self.read_virt(cpu.cr3, src + (va - plan.dest_start), &mut page)?;
                }
            }
            // A whole non-resident page goes in with one copy and no read; a resident one gets
            // the same bytes the instruction is about to store.
            let device = PagedRam {
                core: self,
                reclaim,
            };
            device.write(GuestAddress(pa), &page).ok()?;
            count += 1;
        }
        Some(count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(rdi: u64, rcx: u64) -> CpuState {
        CpuState {
            rip: 0x1000,
            rax: 0,
            rcx,
            rsi: 0x80_0000,
            rdi,
            rflags: 2,
            cr3: 0,
            long_mode: true,
        }
    }

    #[test]
    fn rep_stos_over_whole_pages() {
        // f3 aa: rep stosb
        let p = plan(&cpu(0x5000, 8192), &[0xf3, 0xaa]).unwrap();
        assert_eq!(
            p,
            Plan {
                first_page: 0x5000,
                pages: 2,
                dest_start: 0x5000,
                fill: Fill::Pattern { value: 0, size: 1 }
            }
        );
        // f3 48 ab: rep stosq, starting mid-page: only the whole pages count
        let p = plan(&cpu(0x5008, 1024), &[0xf3, 0x48, 0xab]).unwrap();
        assert_eq!((p.first_page, p.pages), (0x6000, 1));
    }

    #[test]
    fn partial_pages_backwards_and_non_string_instructions_are_refused() {
        assert!(
            plan(&cpu(0x5000, 100), &[0xf3, 0xaa]).is_none(),
            "less than a page"
        );
        let mut c = cpu(0x5000, 8192);
        c.rflags |= RFLAGS_DF;
        assert!(plan(&c, &[0xf3, 0xaa]).is_none(), "backwards");
        assert!(plan(&cpu(0x5000, 8192), &[0xaa]).is_none(), "no rep");
        assert!(
            plan(&cpu(0x5000, 8192), &[0x48, 0x89, 0x07]).is_none(),
            "mov [rdi], rax"
        );
        assert!(
            plan(&cpu(0x5000, 8192), &[0x67, 0xf3, 0xaa]).is_none(),
            "32-bit addressing"
        );
        c = cpu(0x5000, 8192);
        c.long_mode = false;
        assert!(plan(&c, &[0xf3, 0xaa]).is_none());
        assert!(
            plan(&cpu(u64::MAX - 10, 8192), &[0xf3, 0xaa]).is_none(),
            "wraps"
        );
    }

    #[test]
    fn rep_movs_copies_unless_overlapping() {
        // f3 48 a5: rep movsq
        let p = plan(&cpu(0x10_0000, 1024), &[0xf3, 0x48, 0xa5]).unwrap();
        assert_eq!(p.fill, Fill::Copy { src: 0x80_0000 });
        assert_eq!(p.pages, 2);
        let mut c = cpu(0x80_1000, 1024);
        c.rsi = 0x80_0000;
        assert!(plan(&c, &[0xf3, 0x48, 0xa5]).is_none());
    }

    #[test]
    fn walks_four_levels_and_huge_pages() {
        use std::collections::HashMap;
        let mut mem = HashMap::new();
        // va 0x40_2000 -> 4 KiB page at 0x9000; va 0x4000_0000 (1 GiB) -> 2 MiB page at 0x60_0000
        mem.insert(0x1000u64, 0x2000 | 1); // PML4[0]
        mem.insert(0x2008, 0x4000 | 1); // PDPT[1] -> PD for 1 GiB..2 GiB
        mem.insert(0x2000, 0x3000 | 1); // PDPT[0]
        mem.insert(0x3000 + 2 * 8, 0x5000 | 1); // PD[2] -> PT
        mem.insert(0x5000 + 2 * 8, 0x9000 | 1); // PT[2]
        mem.insert(0x4000, 0x60_0000 | 1 | (1 << 7)); // PD[0] of the second GiB: 2 MiB page
        let read = |a: u64| mem.get(&a).copied();
        assert_eq!(translate(0x1000, 0x40_2123, read), Some(0x9123));
        assert_eq!(translate(0x1000, 0x4000_1234, read), Some(0x60_1234));
        assert_eq!(translate(0x1000, 0x40_3000, read), None);
    }

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn a_prevention_is_tried_until_reads_are_measured_cheaper() {
        let mut c = Costs::default();
        // Nothing measured: the Preventer tries.
        assert!(c.try_prevent(ReadFrom::Swap));
        c.prevent.add(140 * US, 1);
        assert!(c.try_prevent(ReadFrom::Swap), "reads not measured yet");
        // A 16-page read in 200 µs: 12.5 µs a page, against 140.
        c.swap.add(200 * US, 16);
        let tried = (0..RETRY_EVERY * 3)
            .filter(|_| c.try_prevent(ReadFrom::Swap))
            .count();
        assert_eq!(tried, 3, "one in {RETRY_EVERY} is still tried");
        // The image's reads are measured apart: none yet, so the Preventer goes on there.
        assert!(c.try_prevent(ReadFrom::Image));
        c.image.add(900 * US, 1);
        assert!(c.try_prevent(ReadFrom::Image), "image reads cost more");
    }

    #[test]
    fn a_cost_follows_what_the_host_does_now() {
        let mut c = Costs::default();
        c.prevent.add(140 * US, 1);
        c.swap.add(200 * US, 16);
        assert!(c.prevent.per_page() > c.swap.per_page());
        // The disk slows down: single-page reads of 2 ms each.
        for _ in 0..8 {
            c.swap.add(2000 * US, 1);
        }
        assert!(c.prevent.per_page() < c.swap.per_page());
        assert!(c.try_prevent(ReadFrom::Swap));
        // Attempts that bring no page (fallbacks, timeouts) make preventing dear.
        for _ in 0..64 {
            c.prevent.add(140 * US, 0);
        }
        assert!(c.prevent.per_page().unwrap() > 1000.0, "{:?}", c.prevent);
        assert_eq!(Cost::default().per_page(), None);
        let mut none = Cost::default();
        none.add(10 * US, 0);
        assert_eq!(none.per_page(), Some(f64::INFINITY));
    }
}
