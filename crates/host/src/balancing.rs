//! HyperDealer2's balancing on the host's side (`[host] balancing = "hd2"`, docs/hd2.md), around
//! the policy's balancer ([`memvisor_policy::balance`]): what the balancing remembers of each VM
//! from tick to tick, the releases a tick asks of the victims' VMMs, what their answers give,
//! the events of a reallocation and of a capacity gap closed, and the counters `GET /host`
//! shows.

use std::path::PathBuf;

use memvisor_api::{ClientError, HostEventKind, ReleaseRequest, ReleaseResult, VmStats};
use memvisor_policy::balance::{self, BalanceObservation, Decision, VmBalance};
use memvisor_policy::demand::{self, DemandInput, DemandParams};

use crate::journal::Journal;

/// What HyperDealer2's balancing remembers of one VM from tick to tick.
#[derive(Default)]
pub struct VmBalancing {
    /// Its capacity gap (HyperDealer2 §4.7): bytes released without its guest knowing, less
    /// what its balloon has taken since.
    gap: u64,
    /// Ticks it has been out of balancing, or idle.
    quiet: u32,
    /// Its VMM refused a release: from then on only its balloon and limit balance it.
    release_failed: bool,
    /// A release of its VMM failed without an answer (a timeout): warned once.
    release_warned: bool,
    /// Its ghost-cache histogram and the guest's swap counters at the last tick, for the
    /// demand estimator.
    ghost_seen: Option<demand::Observation>,
}

impl VmBalancing {
    /// The demand estimator's input for the VM: what its ghost cache and its guest's swapping
    /// did since the last tick, by its VMM's `stats` now (nothing without the Swap Mapper's
    /// statistics then and now); and whether it has those statistics now.
    pub fn demand_input(&mut self, stats: Option<&VmStats>) -> (DemandInput, bool) {
        let now = stats
            .and_then(|s| s.pager.as_ref())
            .and_then(|p| p.patterns.as_ref())
            .map(|pat| {
                let guest = stats
                    .and_then(|s| s.balloon.as_ref())
                    .and_then(|b| b.guest.as_ref());
                demand::Observation {
                    bucket_pages: pat.ghost_bucket_pages,
                    hits: pat.ghost_hits.clone(),
                    swap_in_bytes: guest.and_then(|g| g.swap_in_bytes),
                    swap_out_bytes: guest.and_then(|g| g.swap_out_bytes),
                }
            });
        let input = match (&self.ghost_seen, &now) {
            (Some(before), Some(after)) => DemandInput::between(before, after),
            _ => DemandInput::default(),
        };
        let has = now.is_some();
        self.ghost_seen = now;
        (input, has)
    }

    /// What the balancer knows of the VM besides its observation: `mapper` when it runs the
    /// Swap Mapper, `paused_by_host` while the host pauses it, `clean` bytes a release can take,
    /// `oom` bytes its balloon deflated on OOM since the last tick.
    pub fn observation(
        &self,
        mapper: bool,
        paused_by_host: bool,
        clean: u64,
        oom: u64,
    ) -> BalanceObservation {
        // A VM with the Swap Mapper may be on plain memory still: its first release takes its
        // RAM over, keeping the mirrors it recorded.
        BalanceObservation {
            releasable: mapper && !self.release_failed && !paused_by_host,
            clean,
            // Filled in by the caller from `estimate_demand`.
            demand: None,
            oom,
            gap: self.gap,
            quiet: self.quiet,
        }
    }
}

/// The demand estimator's figure for each VM (HyperDealer2 §4.6, `demand.rs`), in bytes, from
/// its input since the last tick ([`VmBalancing::demand_input`]); `None` for a VM without the
/// Swap Mapper's statistics.
pub fn estimate_demand(inputs: Vec<(DemandInput, bool)>) -> Vec<Option<u64>> {
    let (inputs, has): (Vec<DemandInput>, Vec<bool>) = inputs.into_iter().unzip();
    demand::estimate(&inputs, &DemandParams::default())
        .into_iter()
        .zip(has)
        .map(|(pages, has)| has.then_some(pages.saturating_mul(4096)))
        .collect()
}

/// A release the tick asks of a victim's VMM before its other orders.
pub struct ReleaseOrder {
    pub name: String,
    pub sock: PathBuf,
    /// What to ask: how many pages, and whether only what its guest has left cold (the high
    /// state: nothing is short).
    pub ask: ReleaseRequest,
}

/// The balancing's counters, for `GET /host`.
#[derive(Default)]
pub struct Balancer {
    /// Pages the VMMs released at the host's request.
    pub released_pages: u64,
    /// Ticks that handed released memory to a VM that needed it.
    pub reallocations: u64,
    /// Pages of capacity gap closed by a balloon.
    pub gap_closed_pages: u64,
}

impl Balancer {
    /// Takes in VM `name`'s answer to its release; returns it when the VMM released.
    pub fn answered(
        &mut self,
        vm: &mut VmBalancing,
        journal: &mut Journal,
        name: &str,
        r: Result<ReleaseResult, ClientError>,
    ) -> Option<ReleaseResult> {
        match r {
            Ok(r) => {
                self.released_pages += r.released_pages;
                Some(r)
            }
            Err(e) if !matches!(e, ClientError::Refused { .. }) => {
                // No answer (a timeout, a VMM going away): the pages may be released all the
                // same, but nothing is handed over on that account; tried again at the next
                // tick.
                if !vm.release_warned {
                    vm.release_warned = true;
                    tracing::warn!("vm {name}: a release got no answer: {e}");
                }
                None
            }
            Err(e) => {
                if !vm.release_failed {
                    vm.release_failed = true;
                    let msg = format!(
                        "cannot release pages ({e}): balanced by its balloon and limit only"
                    );
                    journal.event(HostEventKind::BalloonFallback, Some(name), msg);
                }
                None
            }
        }
    }

    /// Takes in VM `name`'s part of a settled tick: its capacity gap after it (`gap`), and what
    /// the balancer decided for it (`b`); records a capacity gap the reducer closed.
    pub fn settled(
        &mut self,
        vm: &mut VmBalancing,
        journal: &mut Journal,
        name: &str,
        gap: u64,
        b: &VmBalance,
    ) {
        vm.gap = gap;
        vm.quiet = b.quiet;
        if b.closed {
            let pages = b.inflate / balance::PAGE;
            self.gap_closed_pages += pages;
            let msg = if pages > 0 {
                format!(
                    "capacity gap closed: its balloon inflates by {} pages, so its guest knows what it has",
                    pages
                )
            } else {
                "capacity gap dropped: its balloon already asks for all it may hold".to_owned()
            };
            journal.event(HostEventKind::GapClosed, Some(name), msg);
        }
    }

    /// Records a tick that moved released memory: the counters, and one event per VM given
    /// some. `names` are the tick's VMs, `got` what each released and `gives` what each was
    /// given.
    pub fn reallocated(
        &mut self,
        journal: &mut Journal,
        names: &[String],
        d: &Decision,
        got: &[u64],
        gives: &[u64],
        micros: u64,
    ) {
        let given: u64 = gives.iter().sum();
        if given == 0 {
            return;
        }
        self.reallocations += 1;
        let victims: Vec<String> = names
            .iter()
            .zip(got)
            .filter(|(_, &g)| g > 0)
            .map(|(name, &g)| format!("{name} ({} pages)", g / balance::PAGE))
            .collect();
        let events: Vec<(&String, String)> = names
            .iter()
            .zip(gives)
            .zip(&d.vms)
            .filter(|((_, &g), _)| g > 0)
            .map(|((name, &g), b)| {
                (
                    name,
                    format!(
                        "reallocated {} pages from {} in {micros} us (its demand {} pages)",
                        g / balance::PAGE,
                        victims.join(", "),
                        b.demand / balance::PAGE
                    ),
                )
            })
            .collect();
        for (vm, msg) in events {
            journal.event(HostEventKind::Reallocated, Some(vm), msg);
        }
    }
}
