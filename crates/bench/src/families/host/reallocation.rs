//! `memvisor bench reallocation`: ESX §6.3, Fig. 8: five VMs with different loads boot at once
//! in a budget that holds their working sets only while they do not all peak together, each with
//! `min` half its `max` and shares in proportion to `max`, as the paper's five Windows VMs; the
//! host's free-memory states, every VM's allocation, and one VM that works, idles at its `min`,
//! then works again.

use std::time::Duration;

use super::experiment::{Goal, HostExperiment, PlannedVm};
use crate::args::Scale;
use crate::harness::setup::host_vm;

/// `memvisor bench reallocation` at `scale`.
pub fn experiment(scale: Scale) -> HostExperiment {
    let tiny = scale == Scale::Quick;
    // (small VM, large VM) in MiB, the run's length, the budget, and the idle VM's schedule:
    // working, idle, working again, in seconds. Each budget must admit all five VMs' mins and
    // overheads (admission control refuses a VM otherwise): 368 + 5 x 24 MiB at the quick scale.
    let (small, large, duration, budget, (busy, idle, again)) = if tiny {
        (128u64, 160u64, 60u32, 560u64, (15u32, 25u32, 25u32))
    } else {
        (256, 320, 200, 960, (40, 80, 85))
    };
    let frac = |mem: u64, pct: u64| mem * pct / 100;
    // min = max / 2 and shares in proportion to max, as the paper sets them.
    let vm = |name: &str, mem: u64, workload: &str, cmdline: String| {
        let mut spec = host_vm(name, mem, mem * 10, workload, cmdline);
        spec.min = (mem << 20) / 2;
        spec.balloon = true;
        PlannedVm { spec, at: 0.0 }
    };
    let long = duration + 60;
    // The Exchange server: a key-value store on about three quarters of its memory.
    let records = frac(small, 75) * 512;
    // MetaFrame's server grows in five steps from 30 to 90 % of its memory, the last halfway
    // through `sql`'s idle phase, and stays there: memory is short while `sql` idles, as the
    // paper's was while SQL Server idled (its allocation fell to its min because others wanted
    // it; in `high`, ESX reclaims nothing, however idle a VM is).
    let step = (busy + idle / 2) / 4;
    let growing: Vec<String> = [(30, step), (45, step), (60, step), (75, step), (90, long)]
        .iter()
        .map(|&(p, secs)| format!("{}:{secs}", frac(large, p)))
        .collect();
    let sql = format!(
        "schedule={}:{busy},4:{idle},{}:{again},4:60",
        frac(large, 75),
        frac(large, 85)
    );
    HostExperiment {
        name: "reallocation",
        about: "ESX §6.3 / Fig. 8: five VMs with different loads boot at once, min = max / 2 and shares in proportion to max; the host's free-memory states over time, every VM's allocation, and one VM (`sql`) that works, idles down to its min, then works again",
        memory: budget << 20,
        idle_tax: 0.75,
        sample_pages: 100,
        sample_period: Duration::from_secs(5),
        tick: Duration::from_millis(500),
        vms: vec![
            vm("exchange", small, "kv", format!("records={records} mix=a secs={long}")),
            vm("exchange-client", small, "toucher", format!("schedule={}:{long}", frac(small, 25))),
            vm("metaframe", large, "toucher", format!("schedule={}", growing.join(","))),
            vm("metaframe-client", large, "toucher", format!("schedule={}:{long}", frac(large, 30))),
            vm("sql", large, "toucher", sql),
        ],
        tax_changes: Vec::new(),
        duration: f64::from(duration),
        goal: Goal::Reallocation {
            returns: "sql",
            idle: (f64::from(busy), f64::from(busy + idle)),
        },
        why: vec![
            format!("five guests of {small}, {small}, {large}, {large} and {large} MiB ({} MiB in all), as the paper's two 256 MB Exchange VMs and three 320 MB VMs (MetaFrame's server and client, SQL Server), with min = max / 2 and shares in proportion to max", 2 * small + 3 * large),
            format!("a budget of {budget} MiB for guests and VMMs (the paper: 1 GB for VMs and 160 MB of overhead); the working sets fit it until `metaframe` grows past it while `sql` idles, so the idle VM's memory is wanted, as the paper's SQL Server's was"),
            "the guest kit's workloads stand for the paper's Windows ones: `exchange` a key-value store (YCSB A) on three quarters of its memory, the clients a small working set each (`toucher`), `metaframe` a working set that grows in five steps from 30 to 90 % of its memory, the last halfway through `sql`'s idle phase, `sql` a working set of 75 % that goes idle (4 MiB) and then comes back at 85 % (a long-running query)".into(),
            "every VM has a balloon; the guest kit's driver answers from boot, where the paper's Windows drivers started late in the boot, so the boot is not paged here (`bench zeroboot` runs the paper's boot: zero pages never written)".into(),
            "sampling: 100 pages per period as in ESX, a period of 5 s (ESX: 30 s) so the idle VM's estimate falls within its idle phase; idle tax 0.75 (ESX's default); ticks every 500 ms".into(),
        ],
    }
}
