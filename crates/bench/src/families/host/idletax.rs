//! `memvisor bench idletax`: ESX §5.2, Fig. 7: equal shares, one VM idle after touching its memory
//! at boot, one busy; the tax at 0, then 0.75.

use std::time::Duration;

use super::experiment::{budget_for, Goal, HostExperiment, PlannedVm};
use crate::args::Scale;
use crate::harness::setup::host_vm as vm;

/// `memvisor bench idletax` at `scale`.
pub fn experiment(scale: Scale) -> HostExperiment {
    let tiny = scale == Scale::Quick;
    let (mem, idle_mb, records, usable, join, switch, duration) = if tiny {
        (128, 96, 60_000u64, 140, 10u32, 40u32, 70u32)
    } else {
        (256, 200, 120_000, 300, 20, 170, 320)
    };
    let idle = vm(
        "idle",
        mem,
        1000,
        "toucher",
        format!("schedule={idle_mb}:5,1:86400"),
    );
    let busy = vm(
        "busy",
        mem,
        1000,
        "kv",
        format!("records={records} mix=b secs={duration}"),
    );
    HostExperiment {
        name: "idletax",
        about: "ESX §5.2 / Fig. 7: two VMs with equal shares, one idle after touching its memory at boot, one running a memory-hungry workload; with the idle tax at 0 both get the same allocation, at 0.75 the idle VM's memory moves to the busy one, which speeds up",
        memory: budget_for(usable, 2),
        idle_tax: 0.0,
        sample_pages: 100,
        sample_period: Duration::from_secs(2),
        tick: Duration::from_millis(500),
        vms: vec![
            PlannedVm {
                spec: idle,
                at: 0.0,
            },
            PlannedVm {
                spec: busy,
                at: f64::from(join),
            },
        ],
        tax_changes: vec![(f64::from(switch), 0.75)],
        duration: f64::from(duration),
        goal: Goal::IdleTax {
            idle: "idle",
            busy: "busy",
            switch: f64::from(switch),
        },
        why: vec![
            format!("two {mem} MiB guests with equal shares, {usable} MiB left for them after overheads and the 6 % reserve (the paper: two 256 MB VMs, about 360 MB for VMs): the busy VM's working set has to be larger than its untaxed half and fit in what the tax gives it"),
            format!("`idle` touches {idle_mb} MiB in its first 5 s (as the paper's Windows VM zeroed its memory at boot) and then only 1 MiB (`toucher schedule={idle_mb}:5,1:86400`)"),
            format!("`busy` joins at {join} s and runs `kv records={records} mix=b` (YCSB B, scrambled zipfian keys, 95 % reads): its table touches about {} MiB, of which it keeps using about 185–205 MiB (the scrambled keys never pick about a third of the records), more than half of the memory left; its throughput (printed every second) falls steeply when the host keeps less of that resident", (records * 2 * 1024 * 87 / 100) >> 20),
            format!("the tax is 0 until {switch} s and 0.75 after (`PATCH /host`), in the same run, as in the paper"),
            "no balloon: the idle guest's touched pages belong to its toucher task and the guest kit has no swap disk here, so the balloon could not take them; the pager's limit reclaims them (random victims)".into(),
            "sampling: 100 pages per period as in ESX, a period of 2 s of guest time (ESX: 30 s) so the idle VM's estimate falls within the run; ticks every 500 ms".into(),
        ],
    }
}
