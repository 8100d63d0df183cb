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
//! What differs from the paper: VSwapper emulates any run of stores into a buffer for up to 1 ms
//! and 32 pages. Emulating arbitrary stores from user space would mean re-implementing the
//! instruction set; memvisor handles the string instructions that zero and copy whole pages (how
//! guests clear freshly allocated pages: Linux's `clear_page_erms` is `rep stosb`) and falls back
//! for the rest.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use iced_x86::{Decoder, DecoderOptions, Mnemonic, OpKind};
use memvisor_devices::ram::GuestRam;
use vm_memory::{Bytes, GuestAddress};

use crate::core::{current_tid, PagerCore};
use crate::guest_ram::DeviceAccess;
use crate::page::{PageIdx, PAGE_SIZE};
use crate::reclaim::Reclaimer;
use crate::stats::Counters;

/// Most pages one decision installs.
pub const MAX_PAGES: u64 = 32;
/// How long the pager waits for an interrupted vCPU before swapping the page in itself.
pub const TIMEOUT_MS: u64 = 10;

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

// The Preventer's driving: stopping a vCPU on its write fault and deciding once it answers.

/// The Preventer's state: the vCPU threads it stopped, the page each faulted on, and since
/// when. Taken after the page lock, never before it.
#[derive(Default)]
pub(crate) struct Preventer {
    stopped: Mutex<HashMap<i32, (PageIdx, Instant)>>,
}

impl Preventer {
    fn stopped(&self) -> MutexGuard<'_, HashMap<i32, (PageIdx, Instant)>> {
        self.stopped.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a stopped vCPU has yet to answer.
    pub(crate) fn waiting(&self) -> bool {
        !self.stopped().is_empty()
    }

    /// Stops vCPU thread `tid`, whose write to page `p` faulted, so it can be asked what it is
    /// writing. Returns false if it cannot be stopped (already stopped, or the kick failed):
    /// the caller then swaps the page in.
    pub(crate) fn stop(&self, core: &PagerCore, tid: i32, p: PageIdx) -> bool {
        let mut stopped = self.stopped();
        if stopped.contains_key(&tid) || core.vcpus.kick(tid).is_err() {
            return false;
        }
        stopped.insert(tid, (p, Instant::now()));
        Counters::add(&core.counters.preventer_attempts, 1);
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
        Counters::add(&core.counters.preventer_timeouts, late.len() as u64);
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
        let (p, _) = self.stopped().remove(&current_tid())?;
        let installed = registers()
            .and_then(|cpu| core.prevent(reclaim, &cpu, p))
            .unwrap_or(0);
        if installed > 0 {
            Counters::add(&s.counters.preventer_completed, 1);
            Counters::add(&s.counters.false_reads_avoided, installed);
            return None;
        }
        Counters::add(&s.counters.preventer_fallbacks, 1);
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
            let device = DeviceAccess {
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
}
