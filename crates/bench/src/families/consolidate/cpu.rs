//! Where a consolidation run's CPU went, as the report's tables show it: the VMM processes'
//! threads by role, and the machine beside them (its other work and the time stolen from it).

use std::fmt::Write as _;

use super::run::RunTrace;
use crate::report::numbers::median;

/// What the CPU table shows.
pub const CPU_TABLE_INTRO: &str = "\nWhere the CPU went: the CPU seconds of a run, every VMM process together (read from each thread's `schedstat` every 200 ms), median over repetitions, as *total = guest + serving + background + host*: the vCPU threads (with the faults, exits and polling their guests wait through on the CPU), the threads a guest waits on (memvisor's `pager`, `blk-*` and `balloon`; QEMU's main loop and I/O workers), the VMMs' other threads (reclaim, release readiness, prefetch, the API), and `memvisor host` itself; in brackets the total against the reference configuration's. With fewer cores than vCPUs, every second beside the guests is a second some guest does not run.\n\n";

/// The CPU cell of `mine` (one configuration's runs at a place), against `reference`'s.
pub fn cpu_cell<'a>(
    mine: impl Iterator<Item = &'a RunTrace>,
    reference: impl Iterator<Item = &'a RunTrace>,
) -> String {
    let mine: Vec<&RunTrace> = mine.collect();
    let part = |f: fn(&RunTrace) -> f64| median(mine.iter().map(|r| f(r)).collect());
    let total = |r: &RunTrace| r.cpu.total() + r.host_cpu;
    let Some(all) = part(total) else {
        return "–".into();
    };
    let [guest, serving, background, host] = [
        |r: &RunTrace| r.cpu.guest,
        |r: &RunTrace| r.cpu.serving,
        |r: &RunTrace| r.cpu.background,
        |r: &RunTrace| r.host_cpu,
    ]
    .map(|f| part(f).unwrap_or(0.0));
    let mut text = format!("{all:.1} = {guest:.1} + {serving:.1} + {background:.1} + {host:.1}");
    if let Some(r) = median(reference.map(total).collect()).filter(|&r| r > 0.0) {
        let _ = write!(text, " ({:.2}x)", all / r);
    }
    text
}

/// What the machine table shows.
pub const MACHINE_TABLE_INTRO: &str = "\nThe machine beside them, from `/proc/stat`, as *other; steal* in seconds, median over repetitions: the time its CPUs were busy beyond every VMM process and `memvisor host` (the kernel's own threads, such as kswapd reclaiming for QEMU's cgroups, the bench, anything else that ran), and the time the hypervisor under this machine ran something else while this machine had work, with the most of any repetition in brackets. Steal is noise no configuration causes: a cell whose steal stands out is slower for it.\n\n";

/// The machine cell of `mine` (one configuration's runs at a place).
pub fn machine_cell<'a>(mine: impl Iterator<Item = &'a RunTrace>) -> String {
    let seen: Vec<(f64, f64)> = mine
        .filter_map(|r| {
            let m = r.machine?;
            Some(((m.busy - r.cpu.total() - r.host_cpu).max(0.0), m.steal))
        })
        .collect();
    let Some(other) = median(seen.iter().map(|s| s.0).collect()) else {
        return "–".into();
    };
    let steal = median(seen.iter().map(|s| s.1).collect()).unwrap_or(0.0);
    let most = seen.iter().map(|s| s.1).fold(0.0, f64::max);
    format!("{other:.1}; {steal:.1} ({most:.1})")
}
