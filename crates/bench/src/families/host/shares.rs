//! `memvisor bench shares`: ESX §5.1: two VMs that both want more than they can get, shares 2:1.
//! The smaller one starts alone and takes all it wants; the one with twice the shares joins later,
//! and memory must move to it.

use std::time::Duration;

use super::experiment::{budget_for, Goal, HostExperiment, PlannedVm};
use crate::args::Scale;
use crate::harness::setup::host_vm as vm;

/// `memvisor bench shares` at `scale`.
pub fn experiment(scale: Scale) -> HostExperiment {
    let tiny = scale == Scale::Quick;
    let (mem, ws, usable, join, duration, period) = if tiny {
        (128, 120, 150, 10u32, 60u32, 2)
    } else {
        (512, 480, 600, 30, 240, 5)
    };
    // One long toucher run in steps, so each step's RESULT line gives a touch rate.
    let steps = |secs: u32| {
        let n = (duration / secs + 2).min(32);
        let s: Vec<String> = (0..n).map(|_| format!("{ws}:{secs}")).collect();
        format!("schedule={}", s.join(","))
    };
    HostExperiment {
        name: "shares",
        about: "ESX §5.1: two VMs that both touch more memory than the host can give them, with shares 2:1, should get allocations in the ratio 2:1",
        memory: budget_for(usable, 2),
        idle_tax: 0.75,
        sample_pages: 100,
        sample_period: Duration::from_secs(period),
        tick: Duration::from_millis(500),
        vms: vec![
            PlannedVm {
                spec: vm("small", mem, 1000, "toucher", steps(10)),
                at: 0.0,
            },
            PlannedVm {
                spec: vm("big", mem, 2000, "toucher", steps(10)),
                at: f64::from(join),
            },
        ],
        tax_changes: Vec::new(),
        duration: f64::from(duration),
        goal: Goal::Shares {
            big: "big",
            small: "small",
            ratio: 2.0,
        },
        why: vec![
            format!("two {mem} MiB guests each sweep a {ws} MiB working set for the whole run (`toucher`), so both always want more than they get: {usable} MiB are left for the two after overheads and the 6 % reserve, 2/3 of it is {} MiB and 1/3 is {} MiB", usable * 2 / 3, usable / 3),
            format!("`small` (1000 shares) starts alone and takes all it wants; `big` (2000 shares) joins {join} s later, so the run shows memory moving to a VM with more shares, and the time it takes"),
            "the idle tax stays at ESX's default 0.75: both VMs are fully active, so it does not change their targets, as long as the sampled estimates stay near 1".into(),
            "no balloon: the guest kit has no swap disk here, so a balloon could only take its free pages, and the toucher keeps none free; the pager's limit enforces every target (what ESX does when ballooning is not possible)".into(),
            format!("sampling: 100 pages per period as in ESX, a period of {period} s of guest time (ESX: 30 s): long enough that a VM sweeping {ws} MiB while it waits for its faults touches all of it within a period several times (measured alone: one sweep in about 1.2 s of guest time, 11 s of wall-clock time, with 200 MiB resident), so its estimate stays near 1; with the idle tax at 0.75 an estimate of 0.96 costs a VM 12 % of its allocation, and 2 s periods let it dip that far; ticks every 500 ms"),
        ],
    }
}
