//! Share-based allocation with the idle memory tax (ESX §5.1–§5.2).
//!
//! Every VM starts at its `max`; while the sum is above the budget, min-funding revocation takes
//! a quantum of pages from the VM with the lowest adjusted shares-per-page ratio
//!
//! ```text
//! rho = S / (P * (f + k * (1 - f))),   k = 1 / (1 - tax)
//! ```
//!
//! (S shares, P pages allocated, f the active fraction), never below its `min`. With `tax = 0`
//! this is pure share-based allocation; as `tax` approaches 1, idle pages cost so much that an
//! idle VM's memory goes first.
//!
//! Differences from ESX: revocation proceeds in quanta of 1/1024 of the budget (at least one
//! page) rather than page by page, which bounds the work to about a thousand steps per VM
//! whatever the sizes; the active fraction of a VM is taken as a fraction of its current
//! allocation, as ESX's sampling measures it.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// What allocation knows about one VM.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VmDemand {
    /// Guaranteed pages.
    pub min: u64,
    /// Configured pages (the guest's RAM).
    pub max: u64,
    /// Memory shares.
    pub shares: u64,
    /// Fraction of its pages in active use (the estimate of `active.rs`), 0 to 1.
    pub active: f64,
}

/// The idle page cost `k = 1 / (1 - tax)` for a tax rate in `0..1` (clamped).
pub fn idle_cost(tax: f64) -> f64 {
    let tax = if tax.is_nan() {
        0.0
    } else {
        tax.clamp(0.0, 0.99)
    };
    1.0 / (1.0 - tax)
}

/// Adjusted shares per page of a VM holding `pages` with `active` of them in use.
pub fn shares_per_page(shares: u64, pages: u64, active: f64, k: f64) -> f64 {
    if pages == 0 {
        return f64::INFINITY;
    }
    let f = if active.is_nan() {
        0.0
    } else {
        active.clamp(0.0, 1.0)
    };
    shares as f64 / (pages as f64 * (f + k * (1.0 - f)))
}

/// Target pages for each VM in a budget of `budget` pages with idle tax `tax`. Each target is
/// between the VM's `min` and `max` (a `min` above `max` counts as `max`); their sum is at most
/// the budget unless the `min`s alone exceed it, in which case every VM gets its `min`.
///
/// Each step revokes from the VM with the lowest (shares per page, index) that still has pages
/// above its `min`. Only the victim's ratio changes in a step, so the VMs wait in a min-heap on
/// that key: O((n + steps) log n) for n VMs, where scanning every VM each step was
/// O(n · steps), and the steps grow with n once VMs are smaller than a quantum.
pub fn targets(budget: u64, vms: &[VmDemand], tax: f64) -> Vec<u64> {
    let k = idle_cost(tax);
    let mut alloc: Vec<u64> = vms.iter().map(|v| v.max).collect();
    // In u128 so that no sum of `max`es overflows.
    let mut total: u128 = alloc.iter().map(|&p| u128::from(p)).sum();
    let budget_wide = u128::from(budget);
    if total <= budget_wide {
        return alloc;
    }
    // A step takes a 1024th of the budget, or of what must go when that is more: a budget
    // that overheads leave at 0 took one unit a step, billions of steps for a few GiB.
    let excess = u64::try_from(total - budget_wide).unwrap_or(u64::MAX);
    let quantum = (budget.max(excess) / 1024).max(1);
    let price = |i: usize, pages: u64| {
        let v = &vms[i];
        Victim {
            rho: shares_per_page(v.shares, pages, v.active, k),
            index: i,
        }
    };
    let mut heap: BinaryHeap<Reverse<Victim>> = vms
        .iter()
        .enumerate()
        .filter(|(_, v)| v.max > floor(v))
        .map(|(i, v)| Reverse(price(i, v.max)))
        .collect();
    while total > budget_wide {
        // The VM paying the lowest price that still has pages above its min.
        let Some(Reverse(Victim { index: i, .. })) = heap.pop() else {
            break;
        };
        let excess = u64::try_from(total - budget_wide).unwrap_or(u64::MAX);
        let take = quantum.min(alloc[i] - floor(&vms[i])).min(excess);
        alloc[i] -= take;
        total -= u128::from(take);
        if alloc[i] > floor(&vms[i]) {
            heap.push(Reverse(price(i, alloc[i])));
        }
    }
    alloc
}

/// A VM's floor: its `min`, or its `max` when the `min` is above it.
fn floor(v: &VmDemand) -> u64 {
    v.min.min(v.max)
}

/// A VM in the revocation heap, ordered by its price and then its index (the lower index is
/// revoked first on a tie).
#[derive(Clone, Copy, Debug)]
struct Victim {
    rho: f64,
    index: usize,
}

impl PartialEq for Victim {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Victim {}

impl PartialOrd for Victim {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Victim {
    fn cmp(&self, other: &Self) -> Ordering {
        self.rho
            .total_cmp(&other.rho)
            .then(self.index.cmp(&other.index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The algorithm as first written: every step scans every VM for the lowest price. The
    /// heap in [`targets`] must decide exactly as this does.
    fn targets_by_scan(budget: u64, vms: &[VmDemand], tax: f64) -> Vec<u64> {
        let k = idle_cost(tax);
        let mut alloc: Vec<u64> = vms.iter().map(|v| v.max).collect();
        let mut total: u64 = alloc.iter().sum();
        let quantum = (budget.max(total.saturating_sub(budget)) / 1024).max(1);
        while total > budget {
            let victim = vms
                .iter()
                .zip(&alloc)
                .enumerate()
                .filter(|(_, (v, &p))| p > floor(v))
                .min_by(|(i, (a, &pa)), (j, (b, &pb))| {
                    let ra = shares_per_page(a.shares, pa, a.active, k);
                    let rb = shares_per_page(b.shares, pb, b.active, k);
                    ra.total_cmp(&rb).then(i.cmp(j))
                })
                .map(|(i, _)| i);
            let Some(i) = victim else {
                break;
            };
            let take = quantum.min(alloc[i] - floor(&vms[i])).min(total - budget);
            alloc[i] -= take;
            total -= take;
        }
        alloc
    }

    fn vm(min: u64, max: u64, shares: u64, active: f64) -> VmDemand {
        VmDemand {
            min,
            max,
            shares,
            active,
        }
    }

    #[test]
    fn enough_memory_gives_everyone_their_max() {
        let t = targets(1000, &[vm(0, 400, 1000, 1.0), vm(0, 500, 1000, 0.0)], 0.75);
        assert_eq!(t, vec![400, 500]);
    }

    #[test]
    fn shares_two_to_one_split_the_budget_two_to_one_when_both_are_busy() {
        let t = targets(
            3000,
            &[vm(0, 4000, 2000, 1.0), vm(0, 4000, 1000, 1.0)],
            0.75,
        );
        assert_eq!(t.iter().sum::<u64>(), 3000);
        let ratio = t[0] as f64 / t[1] as f64;
        assert!((ratio - 2.0).abs() < 0.01, "{t:?}");
    }

    /// ESX Fig. 7: two VMs with equal shares, one idle; at tax 0 they get the same allocation,
    /// at 75 % the idle one's memory goes to the busy one.
    #[test]
    fn the_idle_tax_moves_memory_from_an_idle_vm_to_a_busy_one() {
        let busy = vm(0, 65536, 1000, 1.0);
        let idle = vm(0, 65536, 1000, 0.05);
        let untaxed = targets(91648, &[idle, busy], 0.0);
        assert!(
            untaxed[0].abs_diff(untaxed[1]) <= 91648 / 1024,
            "{untaxed:?}"
        );
        let taxed = targets(91648, &[idle, busy], 0.75);
        assert!(taxed[0] < untaxed[0] && taxed[1] > untaxed[1], "{taxed:?}");
        assert_eq!(taxed[1], 65536, "the busy VM gets all it asks for");
    }

    #[test]
    fn mins_are_kept_even_when_they_do_not_fit() {
        let t = targets(100, &[vm(80, 200, 1, 0.0), vm(60, 200, 1000, 1.0)], 0.75);
        assert_eq!(t, vec![80, 60]);
    }

    proptest! {
        #[test]
        fn targets_respect_min_max_and_the_budget(
            budget in 0u64..1_000_000,
            vms in proptest::collection::vec(
                (0u64..200_000, 0u64..300_000, 1u64..10_000, 0.0f64..=1.0), 0..12),
            tax in 0.0f64..1.0,
        ) {
            let vms: Vec<VmDemand> = vms.into_iter().map(|(a, b, s, f)| vm(a, b, s, f)).collect();
            let t = targets(budget, &vms, tax);
            prop_assert_eq!(t.len(), vms.len());
            for (v, &p) in vms.iter().zip(&t) {
                prop_assert!(p <= v.max);
                prop_assert!(p >= v.min.min(v.max));
            }
            let mins: u64 = vms.iter().map(|v| v.min.min(v.max)).sum();
            let sum: u64 = t.iter().sum();
            prop_assert!(sum <= budget.max(mins));
            let maxes: u64 = vms.iter().map(|v| v.max).sum();
            // Nothing is revoked that the budget did not need.
            prop_assert_eq!(sum, maxes.min(budget.max(mins)));
            // Deterministic.
            prop_assert_eq!(&t, &targets(budget, &vms, tax));
        }

        /// The heap decides exactly as the scan, step for step: equal prices (the same shares,
        /// sizes and activity drawn from a few values) break by index in both, and many VMs are
        /// smaller than a quantum.
        #[test]
        fn the_heap_decides_as_the_scan(
            budget in 0u64..2_000_000,
            vms in proptest::collection::vec(
                (0u64..4, 0u64..6, 0u64..4, 0usize..5), 0..60),
            tax in prop_oneof![Just(0.0), Just(0.75), 0.0f64..1.0],
            scale in prop_oneof![Just(1u64), Just(1000), Just(100_000)],
        ) {
            const ACTIVE: [f64; 5] = [0.0, 0.05, 0.5, 0.999, 1.0];
            let vms: Vec<VmDemand> = vms
                .into_iter()
                .map(|(min, max, shares, f)| {
                    vm(min * scale / 2, max * scale, shares * 500, ACTIVE[f])
                })
                .collect();
            prop_assert_eq!(targets(budget, &vms, tax), targets_by_scan(budget, &vms, tax));
        }

        #[test]
        fn the_heap_decides_as_the_scan_on_any_values(
            budget in 0u64..1_000_000,
            vms in proptest::collection::vec(
                (0u64..200_000, 0u64..300_000, 0u64..10_000, -0.5f64..=1.5), 0..40),
            tax in -0.5f64..1.5,
        ) {
            let vms: Vec<VmDemand> = vms.into_iter().map(|(a, b, s, f)| vm(a, b, s, f)).collect();
            prop_assert_eq!(targets(budget, &vms, tax), targets_by_scan(budget, &vms, tax));
        }

        #[test]
        fn more_shares_never_mean_less_memory(
            budget in 1000u64..100_000,
            shares in 1u64..5_000,
            more in 1u64..5_000,
        ) {
            let a = vm(0, 100_000, shares, 1.0);
            let b = vm(0, 100_000, shares + more, 1.0);
            let t = targets(budget, &[a, b], 0.75);
            prop_assert!(t[1] + (budget / 1024).max(1) >= t[0], "{:?}", t);
        }
    }

    #[test]
    fn a_budget_of_nothing_is_shared_out_in_few_steps() {
        // Overheads can leave a host no budget for its VMs: every VM comes down to its min, in
        // at most about 1024 steps, not one unit a step.
        let vms = [
            VmDemand {
                min: 0,
                max: 4 << 30,
                shares: 1000,
                active: 0.5,
            },
            VmDemand {
                min: 1 << 20,
                max: 2 << 30,
                shares: 2000,
                active: 1.0,
            },
        ];
        assert_eq!(targets(0, &vms, 0.75), vec![0, 1 << 20]);
        assert_eq!(targets(1 << 20, &vms, 0.75).iter().sum::<u64>(), 1 << 20);
    }
}
