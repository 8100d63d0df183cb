//! What the budget leaves for the VMs: the high state's reserve, what targets divide, the pools'
//! size, and the pager limit a new VM starts with.

use crate::allocation::{targets, VmDemand};
use crate::tick::{HostParams, VmObservation};

/// What targets divide: the budget minus the VMMs' overheads and the high state's reserve.
pub(crate) fn usable(host: &HostParams, vms: &[VmObservation]) -> u64 {
    let overheads: u64 = vms.iter().map(|v| v.overhead).fold(0, u64::saturating_add);
    host.budget
        .saturating_sub(overheads)
        .saturating_sub(reserve(host))
        .saturating_sub(host.pool)
}

/// The high state's reserve: the part of the budget targets leave free.
pub(crate) fn reserve(host: &HostParams) -> u64 {
    fraction_of(host.budget, host.thresholds.high)
}

/// The pools' size together: what the VMs do not hold (the budget minus their resident pages
/// and overheads, less the high state's reserve), at most `pool`. What the pools hold now is
/// not subtracted, so a pool does not shrink itself by filling: `pool_size − pooled` is free
/// memory minus the reserve, positive (room to grow) in the high state, negative (pooled pages
/// to spill) once free memory is under the reserve.
pub fn pool_size(host: &HostParams, vms: &[VmObservation]) -> u64 {
    let held: u64 = vms
        .iter()
        .map(|v| v.resident.saturating_add(v.overhead))
        .fold(0, u64::saturating_add);
    host.budget
        .saturating_sub(held)
        .saturating_sub(reserve(host))
        .min(host.pool)
}

/// The pager limit for a VM about to start beside `vms`: its target as if it were fully active
/// (it has not been sampled yet), at most its `max`. Limits are not raised past targets and
/// shrink only under pressure, so a VM started with no limit on a host short of memory would
/// take more than its share before the next tick, and the host would go past its budget until
/// reclaim caught up.
pub fn start_limit(host: &HostParams, vms: &[VmObservation], new: &VmObservation) -> u64 {
    let mut all: Vec<VmObservation> = vms.to_vec();
    all.push(VmObservation {
        active: 1.0,
        ..*new
    });
    let demands: Vec<VmDemand> = all
        .iter()
        .map(|v| VmDemand {
            min: v.min,
            max: v.max,
            shares: v.shares,
            active: if v.oom_demand > 0 { 1.0 } else { v.active },
        })
        .collect();
    targets(usable(host, &all), &demands, host.idle_tax)
        .last()
        .copied()
        .unwrap_or(new.max)
        .min(new.max)
}

/// `fraction` of `budget` in bytes.
pub(crate) fn fraction_of(budget: u64, fraction: f64) -> u64 {
    // A fraction of the budget, so in 0..=budget (`as` saturates a NaN or negative to 0).
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let b = (budget as f64 * fraction.clamp(0.0, 1.0)) as u64;
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tick::fixtures::{host, vm, MIB};

    #[test]
    fn a_vm_starts_limited_to_its_share_when_memory_is_short() {
        let budget = 700 * MIB;
        // Alone, it gets everything it can use.
        let new = VmObservation {
            shares: 2000,
            resident: 0,
            ..vm(512 * MIB, 0, 0.0)
        };
        assert_eq!(start_limit(&host(budget), &[], &new), 512 * MIB);
        // Beside a busy VM with half its shares: two thirds of what is left for the VMs.
        let busy = vm(512 * MIB, 480 * MIB, 1.0);
        let l = start_limit(&host(budget), &[busy], &new);
        let usable = budget - 32 * MIB - budget * 6 / 100;
        assert!(l.abs_diff(usable * 2 / 3) <= budget / 1024 + 1, "{l}");
        // Beside an idle VM, with the tax, it gets all it can use.
        let idle = vm(512 * MIB, 480 * MIB, 0.0);
        assert_eq!(start_limit(&host(budget), &[idle], &new), 512 * MIB);
    }
}
