//! Pre-copy rounds before a migration's switch (`precopy_rounds`, docs/migration.md): while
//! the vCPUs run here, the first round sends every page with content, each next one the pages
//! written since the round before; at the switch only the pages written since the last round
//! are left for post-copy, and the destination is told which of the pages it holds are stale.
//!
//! What was written is the union of three records ([`DirtyLog`]): KVM's dirty log of each
//! memory slot (`KVM_MEM_LOG_DIRTY_PAGES`, `KVM_GET_DIRTY_LOG`: every write of a vCPU, and of
//! KVM itself, to guest RAM), the pager's note of what devices wrote through it and what it
//! forgot or mapped to the zero page (`Pager::track_writes`), and, at the switch, the pages of
//! every virtqueue's used ring (the one place devices write without the pager).

use std::io::Write;

use kvm_bindings::{kvm_userspace_memory_region, KVM_MEM_LOG_DIRTY_PAGES};
use kvm_ioctls::VmFd;
use memvisor_devices::virtio::mmio::TransportSnapshot;
use memvisor_devices::GuestMem;
use memvisor_pager::Pager;
use vm_memory::{GuestMemoryBackend, GuestMemoryRegion};

use memvisor_api::PrecopyEnd;

use super::wire::{self, Msg};

/// Pages per message of a round.
const RUN: u32 = 64;

/// A round that sends at most this many pages (1 MiB) is the last: another would find next to
/// nothing, and post-copy sends the rest at once.
const CONVERGED: u64 = 256;

/// Why the rounds stop before the round that would send `now` pages, after one that sent
/// `before`: the guest wrote at least nine tenths of what that round sent, so a round would
/// send about as much again and leave as much behind.
fn not_shrinking(now: u64, before: u64) -> bool {
    now * 10 >= before * 9
}
const PAGE: usize = 4096;

/// One KVM memory slot of guest RAM (`memory.rs` registers one per mapping, in order).
struct Slot {
    region: kvm_userspace_memory_region,
    /// The pager's number of its first page.
    first: u32,
}

/// What wrote guest RAM since the last [`DirtyLog::take`]: KVM's dirty log and the pager's
/// note. Stopped (the slots' flag cleared, the pager's note off) when dropped.
pub(crate) struct DirtyLog<'a> {
    vm: &'a VmFd,
    pager: &'a Pager,
    slots: Vec<Slot>,
}

impl<'a> DirtyLog<'a> {
    pub(crate) fn start(vm: &'a VmFd, mem: &GuestMem, pager: &'a Pager) -> Result<Self, String> {
        let mut log = DirtyLog {
            vm,
            pager,
            slots: Vec::new(),
        };
        let mut first = 0u32;
        for (slot, r) in mem.iter().enumerate() {
            let region = kvm_userspace_memory_region {
                slot: u32::try_from(slot).map_err(|e| e.to_string())?,
                flags: KVM_MEM_LOG_DIRTY_PAGES,
                guest_phys_addr: r.start_addr().0,
                memory_size: r.len(),
                userspace_addr: r.as_ptr() as u64,
            };
            // SAFETY: the slot as `memory.rs` registered it (the same live mapping, owned by
            // `mem`, which outlives the VM), only its flags changed.
            unsafe { vm.set_user_memory_region(region) }
                .map_err(|e| format!("KVM cannot log the writes to guest RAM ({e})"))?;
            log.slots.push(Slot { region, first });
            first += u32::try_from(r.len() / PAGE as u64).map_err(|e| e.to_string())?;
        }
        pager.track_writes(true);
        Ok(log)
    }

    /// The pages written since the last take (or the start), sorted; the records start over.
    pub(crate) fn take(&self) -> Result<Vec<u32>, String> {
        self.take_counted().map(|(pages, _)| pages)
    }

    /// [`Self::take`], and how many pages of it KVM's dirty log gave (before the pager's note
    /// was added).
    fn take_counted(&self) -> Result<(Vec<u32>, usize), String> {
        let mut pages = Vec::new();
        for s in &self.slots {
            let size = usize::try_from(s.region.memory_size).map_err(|e| e.to_string())?;
            let bits = self
                .vm
                .get_dirty_log(s.region.slot, size)
                .map_err(|e| format!("KVM_GET_DIRTY_LOG failed ({e})"))?;
            for (i, &word) in bits.iter().enumerate() {
                let mut w = word;
                while w != 0 {
                    let bit = w.trailing_zeros();
                    w &= w - 1;
                    pages.push(s.first + u32::try_from(i * 64).unwrap_or(u32::MAX) + bit);
                }
            }
        }
        let from_kvm = pages.len();
        for (first, n) in self.pager.take_writes() {
            pages.extend(first..first.saturating_add(n));
        }
        pages.sort_unstable();
        pages.dedup();
        Ok((pages, from_kvm))
    }

    /// The pager's number of the page at guest-physical `gpa`.
    fn page_of_gpa(&self, gpa: u64) -> Option<u32> {
        self.slots.iter().find_map(|s| {
            let i = gpa.checked_sub(s.region.guest_phys_addr)?;
            (i < s.region.memory_size)
                .then(|| s.first + u32::try_from(i / PAGE as u64).unwrap_or(0))
        })
    }

    /// The pages of every queue's used ring (its flags, index, elements and avail event):
    /// devices write them through guest memory directly, not through the pager.
    pub(crate) fn used_rings(&self, transports: &[TransportSnapshot]) -> Vec<u32> {
        let mut pages = Vec::new();
        for q in transports.iter().flat_map(|t| &t.queues) {
            if !q.ready {
                continue;
            }
            let len = 6 + 8 * u64::from(q.size);
            let (Some(a), Some(b)) = (
                self.page_of_gpa(q.used_ring),
                self.page_of_gpa(q.used_ring + len - 1),
            ) else {
                continue;
            };
            pages.extend(a..=b);
        }
        pages
    }
}

impl Drop for DirtyLog<'_> {
    fn drop(&mut self) {
        self.pager.track_writes(false);
        for s in &self.slots {
            let region = kvm_userspace_memory_region {
                flags: 0,
                ..s.region
            };
            // SAFETY: as in `start`: the same slot and mapping, its flags as `memory.rs` set them.
            if let Err(e) = unsafe { self.vm.set_user_memory_region(region) } {
                tracing::warn!(
                    "migration: KVM still logs writes to slot {} ({e})",
                    s.region.slot
                );
            }
        }
    }
}

/// What the rounds sent, for the switch and the post-copy that follows.
#[derive(Default)]
pub(crate) struct PreCopy {
    /// Pages the destination holds as sent, not written here since.
    pub clean: Vec<bool>,
    /// Pages sent in some round.
    pub sent: Vec<bool>,
    /// Pages sent in each round.
    pub rounds: Vec<u64>,
    /// Pages sent again (written after a round had sent them).
    pub resent: u64,
    pub bytes: u64,
    /// Why the rounds ended.
    pub end: Option<PrecopyEnd>,
}

impl PreCopy {
    /// Runs up to `n` rounds with the vCPUs running, sending on `w`; `log` has started. The
    /// rounds end sooner when a round sent at most [`CONVERGED`] pages, or when the pages
    /// written since the last round are not fewer by a tenth ([`not_shrinking`]): those are
    /// left for post-copy, which sends each once.
    pub(crate) fn run(
        n: u32,
        log: &DirtyLog<'_>,
        pager: &Pager,
        w: &mut impl Write,
    ) -> Result<Self, String> {
        let content = pager.pages_with_content();
        let pages = content.len();
        let mut pre = PreCopy {
            clean: vec![false; pages],
            sent: vec![false; pages],
            ..PreCopy::default()
        };
        let mut buf = vec![0u8; RUN as usize * PAGE];
        for round in 0..n {
            let t0 = std::time::Instant::now();
            let (written, from_kvm) = log.take_counted()?;
            let written_count = written.len();
            for &p in &written {
                if let Some(c) = pre.clean.get_mut(p as usize) {
                    *c = false;
                }
            }
            let list: Vec<u32> = match round {
                0 => (0..u32::try_from(pages).unwrap_or(u32::MAX))
                    .filter(|&p| content[p as usize])
                    .collect(),
                _ => {
                    // Written pages with content now (one written then given to the balloon is
                    // recorded at the switch).
                    let now = pager.pages_with_content();
                    written
                        .into_iter()
                        .filter(|&p| now.get(p as usize) == Some(&true))
                        .collect()
                }
            };
            if round > 0 {
                let before = pre.rounds.last().copied().unwrap_or(0);
                if not_shrinking(list.len() as u64, before) {
                    tracing::info!(
                        "migration: pre-copy ends after round {round}: {} pages written since it sent {before}; post-copy sends them",
                        list.len()
                    );
                    pre.end = Some(PrecopyEnd::NotShrinking);
                    break;
                }
            }
            for (first, count) in runs(&list, RUN) {
                let len = count as usize * PAGE;
                pager
                    .read_in_place(first, &mut buf[..len])
                    .map_err(|e| format!("reading guest pages {first}..+{count} failed ({e})"))?;
                let data = buf[..len].to_vec();
                pre.bytes += wire::send(w, &Msg::Pages { first, data })
                    .map_err(|e| format!("the connection broke ({e})"))?;
                for p in first..first + count {
                    pre.resent += u64::from(pre.sent[p as usize]);
                    pre.sent[p as usize] = true;
                    pre.clean[p as usize] = true;
                }
            }
            tracing::info!(
                "migration: pre-copy round {} sent {} pages in {} ms ({} written before it, {from_kvm} of them by the vCPUs per KVM's dirty log)",
                round + 1,
                list.len(),
                t0.elapsed().as_millis(),
                written_count,
            );
            pre.rounds.push(list.len() as u64);
            if round + 1 < n && list.len() as u64 <= CONVERGED {
                tracing::info!(
                    "migration: pre-copy ends after round {}: it sent {} pages",
                    round + 1,
                    list.len()
                );
                pre.end = Some(PrecopyEnd::Converged);
                break;
            }
        }
        pre.end = pre.end.or(Some(PrecopyEnd::Asked));
        Ok(pre)
    }

    /// At the switch, the VM paused and its devices held: the pages written since the last
    /// round are no longer clean, and the destination is told which pages it holds are stale.
    pub(crate) fn switch(
        &mut self,
        written: &[u32],
        w: &mut impl Write,
    ) -> Result<(), std::io::Error> {
        for &p in written {
            if let Some(c) = self.clean.get_mut(p as usize) {
                *c = false;
            }
        }
        let stale: Vec<u32> = (0..self.sent.len())
            .filter(|&p| self.sent[p] && !self.clean[p])
            .map(|p| u32::try_from(p).unwrap_or(u32::MAX))
            .collect();
        for (first, count) in runs(&stale, u32::MAX) {
            self.bytes += wire::send(w, &Msg::Stale { first, count })?;
        }
        Ok(())
    }
}

/// Runs of consecutive pages among sorted `pages`, each at most `max` long.
fn runs(pages: &[u32], max: u32) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    for &p in pages {
        match out.last_mut() {
            Some((f, c)) if *f + *c == p && *c < max => *c += 1,
            _ => out.push((p, 1)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{not_shrinking, runs};

    #[test]
    fn runs_break_at_gaps_and_at_their_length() {
        assert_eq!(
            runs(&[1, 2, 3, 5, 6, 9], 2),
            vec![(1, 2), (3, 1), (5, 2), (9, 1)]
        );
        assert_eq!(runs(&[], 4), vec![]);
    }

    #[test]
    fn rounds_stop_when_the_guest_writes_most_of_what_a_round_sent() {
        assert!(!not_shrinking(8_000, 33_000));
        assert!(!not_shrinking(899, 1_000));
        assert!(not_shrinking(900, 1_000));
        assert!(not_shrinking(1_200, 1_000));
        assert!(not_shrinking(0, 0));
    }
}
