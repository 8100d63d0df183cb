//! The outputs of `memvisor bench consolidate`: `results.csv` (one row per VM and run),
//! `runs.csv` (one row per run: its overlap, its VMMs' summed and largest PSS against the
//! budget, their CPU seconds by role), `pss.csv` (each VMM's PSS and their sum every tick),
//! `report.md` (each configuration's mean job time at each N and budget as a ratio to
//! `qemu-nolimit`, the overlap, the PSS, where the CPU went, what happened to each limited
//! QEMU VM), `consolidate-SCENARIO.svg` and
//! `pss-SCENARIO-nN-bBUDGET.svg`, and per run of `memvisor host` each VM's allocation over time
//! (`allocation.csv`, `allocation.svg`).

use crate::report::numbers::{fixed, mean, median, mib_text, MIB};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use memvisor_api::HostSample;
use plotters::style::RED;

use super::cpu::{cpu_cell, machine_cell, CPU_TABLE_INTRO, MACHINE_TABLE_INTRO};
use super::experiment::{bounded, memory_summary, Budget, ConsolidatePlan, MEM};
use super::run::{CgroupSeen, Record, RunTrace};
use super::scenario::{job, Scenario};
use crate::families::host::figure as host_figure;
use crate::report::figure::{color, xs, ys, Axis, Figure, Legend, Line, Panel};
use crate::report::table::Table;

/// `allocation.csv` (one row per VM per tick) and `allocation.svg`/`.png` (each VM's resident
/// memory and target over the run, and below them what each has swapped out) in a run's
/// directory.
pub fn write_allocation(dir: &Path, history: &[HostSample]) -> Result<(), String> {
    let mut t = Table::new("seconds,vm,state,resident_bytes,target_bytes,balloon_bytes,swapped_bytes,limit_bytes,free_bytes,free_state".split(','));
    let mut names: Vec<String> = Vec::new();
    for h in history {
        for v in &h.vms {
            t.row(vec![
                format!("{:.2}", h.seconds),
                v.name.clone(),
                format!("{:?}", v.state),
                v.resident_bytes.to_string(),
                v.target_bytes.to_string(),
                v.balloon_bytes.to_string(),
                v.swapped_bytes.to_string(),
                v.limit_bytes.to_string(),
                h.free_bytes.to_string(),
                format!("{:?}", h.free_state),
            ]);
            if !names.contains(&v.name) {
                names.push(v.name.clone());
            }
        }
    }
    std::fs::write(dir.join("allocation.csv"), t.csv()).map_err(|e| e.to_string())?;
    let end = history.last().map_or(1.0, |t| t.seconds).max(1.0);
    let over_time = |title: &str, top: f64, lines: Vec<Line>| Panel {
        lines,
        legend: Legend::UpperRight,
        ..Panel::new(
            title,
            "seconds",
            "MiB",
            Axis::linear(0.0, end),
            Axis::linear(0.0, top),
        )
    };
    let panel = over_time(
        "allocation over time: resident (solid) and target (dashed) per VM",
        (MEM as f64 / MIB) * 1.1,
        host_figure::allocations(history, &names, false),
    );
    // What each VM has out in its swap store meanwhile: a VM whose memory arrives late swaps
    // (HyperDealer2's Fig. 2).
    let swapped: Vec<Line> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let at = host_figure::series(history, n, |v| v.swapped_bytes);
            Line::new(n.clone(), color(i), 2, at)
        })
        .collect();
    let most = ys(&swapped).fold(1.0, f64::max) * 1.1;
    let out = over_time(
        "swapped out per VM over time (its pager's swap store)",
        most,
        swapped,
    );
    Figure::column((900, 900), vec![panel, out]).write(&dir.join("allocation.svg"))
}

/// One configuration, scenario and N over its repetitions: the median, least and most of each
/// repetition's mean job time (over the VMs that finished), and the VMs that did not finish.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cell {
    pub median: Option<f64>,
    pub min: f64,
    pub max: f64,
    pub reps: usize,
    pub failed: usize,
}

/// The mean job time of each repetition among `mine` (one run's records), over the VMs that
/// finished; a repetition where none did has none.
fn rep_means(mine: &[&Record]) -> Vec<f64> {
    let reps: BTreeSet<u32> = mine.iter().map(|r| r.rep).collect();
    let done = |rep| {
        mine.iter()
            .filter(move |r| r.rep == rep)
            .filter_map(|r| r.secs)
    };
    reps.into_iter()
        .filter_map(|rep| mean(&done(rep).collect::<Vec<f64>>()))
        .collect()
}

/// Where in a scenario a run was: its number of VMs, and its budget (`None` for a configuration
/// no budget holds).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct At {
    pub scenario: Scenario,
    pub n: u32,
    pub budget: Option<Budget>,
}

impl At {
    fn has(&self, scenario: Scenario, n: u32, budget: Option<Budget>) -> bool {
        (self.scenario, self.n, self.budget) == (scenario, n, budget)
    }
}

/// The [`Cell`] of `config` at `at`, `None` if it has not run.
pub fn cell(records: &[Record], config: &str, at: At) -> Option<Cell> {
    let mine: Vec<&Record> = records
        .iter()
        .filter(|r| r.config == config && at.has(r.scenario, r.n, r.budget))
        .collect();
    if mine.is_empty() {
        return None;
    }
    let means = rep_means(&mine);
    Some(Cell {
        min: means.iter().copied().fold(f64::INFINITY, f64::min),
        max: means.iter().copied().fold(0.0, f64::max),
        median: median(means),
        reps: mine.iter().map(|r| r.rep).collect::<BTreeSet<u32>>().len(),
        failed: mine.iter().filter(|r| !r.ok).count(),
    })
}

fn traces<'a>(
    runs: &'a [RunTrace],
    config: &'a str,
    at: At,
) -> impl Iterator<Item = &'a RunTrace> + 'a {
    let mine =
        move |r: &&RunTrace| r.config == config && at.has(r.scenario, r.n, r.budget.map(|b| b.0));
    runs.iter().filter(mine)
}

/// Where `config` ran in the row of `scenario` with `n` VMs and `budget`: at that budget, or
/// without one if no budget holds it.
fn at(shape: &ConsolidatePlan, config: &str, scenario: Scenario, n: u32, budget: Budget) -> At {
    let held = shape
        .configs
        .iter()
        .find(|c| c.name == config)
        .is_none_or(|c| bounded(c.launch));
    At {
        scenario,
        n,
        budget: held.then_some(budget),
    }
}

/// A budget as a row names it: `0.75 (1134 MiB)`, or the amount.
fn budget_label(shape: &ConsolidatePlan, scenario: Scenario, n: u32, b: Budget) -> String {
    match (b, shape.budget_bytes(scenario, n, b)) {
        (Budget::Fraction(_) | Budget::Less(_), Some(bytes)) => {
            format!("{} ({} MiB)", b.label(), bytes >> 20)
        }
        _ => b.label(),
    }
}

fn label(n: u32, cores: usize) -> String {
    format!("{n}{}", if n as usize <= cores { ", pinned" } else { "" })
}

/// Microseconds as milliseconds, one decimal.
fn ms(us: u64) -> String {
    format!("{:.1}", us as f64 / 1e3)
}

/// A Markdown table of `scenario` with a row per N and budget and a column per configuration,
/// `cell(at, the row's budget, config)` its cells.
fn by_row(
    shape: &ConsolidatePlan,
    scenario: Scenario,
    cell: impl Fn(At, Budget, &str) -> String,
) -> String {
    let configs = shape.configs.iter().map(|c| c.name.as_str());
    let mut t = Table::new(["VMs", "budget"].into_iter().chain(configs.clone()));
    for &n in &shape.ns {
        for &b in &shape.budgets {
            let row = [label(n, shape.cores), budget_label(shape, scenario, n, b)];
            let cells = configs
                .clone()
                .map(|c| cell(at(shape, c, scenario, n, b), b, c));
            t.row(row.into_iter().chain(cells).collect());
        }
    }
    t.markdown()
}

pub fn write_outputs(
    out: &Path,
    records: &[Record],
    runs: &[RunTrace],
    shape: &ConsolidatePlan,
) -> Result<(), String> {
    let w = |name: &str, text: &str| {
        std::fs::write(out.join(name), text).map_err(|e| format!("{name}: {e}"))
    };
    let mut csv = Table::new("config,scenario,vms,budget,pinned,rep,vm,workload,seconds,start_s,end_s,ok,cgroup_limit_mib,cgroup_max_usage_mib,failcnt,oom_kills,swap_peak_mib,longest_fault_ms,cpu_guest_s,cpu_vmm_s,note".split(','));
    let f2 = |v: Option<f64>| fixed(v, 2);
    for r in records {
        let c = r.cgroup;
        let cg = |f: fn(&CgroupSeen) -> String| c.as_ref().map_or(String::new(), f);
        csv.row(crate::cells![
            r.config,
            r.scenario.name(),
            r.n,
            r.budget.map_or(String::new(), Budget::label),
            u8::from(r.pinned),
            r.rep,
            r.vm,
            r.workload,
            f2(r.secs),
            f2(r.interval.map(|i| i.0)),
            f2(r.interval.map(|i| i.1)),
            u8::from(r.ok),
            cg(|c| mib_text(c.limit, 0)),
            cg(|c| mib_text(c.max_usage, 0)),
            cg(|c| c.failcnt.to_string()),
            cg(|c| c.oom_kills.to_string()),
            cg(|c| mib_text(c.swap_peak, 0)),
            r.longest_fault_us.map_or(String::new(), ms),
            f2(r.cpu.map(|c| c.guest)),
            f2(r.cpu.map(|c| c.vmm())),
            r.note.replace('"', "'"),
        ]);
    }
    w("results.csv", &csv.csv())?;
    let mut runs_csv = Table::new("config,scenario,vms,budget,budget_mib,pinned,rep,wall_s,overlap,pss_peak_mib,pss_peak_vmm_mib,pss_over_budget_s,pss_over_budget_samples,samples,cpu_guest_s,cpu_serving_s,cpu_background_s,cpu_host_s,machine_busy_s,steal_s".split(','));
    let mut pss_csv = Table::new("config,scenario,vms,budget,rep,seconds,vmm,pss_bytes".split(','));
    for r in runs {
        let limit = r.budget.map(|b| b.1);
        let s = memory_summary(&r.memory, limit);
        let budget = r.budget.map_or(String::new(), |b| b.0.label());
        runs_csv.row(crate::cells![
            r.config,
            r.scenario.name(),
            r.n,
            budget,
            limit.map_or(String::new(), |l| (l >> 20).to_string()),
            u8::from(r.pinned),
            r.rep,
            format!("{:.1}", r.wall_secs),
            fixed(r.overlap, 3),
            mib_text(s.peak, 0),
            mib_text(s.peak_each, 0),
            format!("{:.1}", s.over_secs),
            s.over_samples,
            r.memory.len(),
            format!("{:.2}", r.cpu.guest),
            format!("{:.2}", r.cpu.serving),
            format!("{:.2}", r.cpu.background),
            format!("{:.2}", r.host_cpu),
            fixed(r.machine.map(|m| m.busy), 2),
            fixed(r.machine.map(|m| m.steal), 2),
        ]);
        for m in &r.memory {
            let (c, sc, t) = (&r.config, r.scenario.name(), format!("{:.2}", m.t));
            pss_csv.row(crate::cells![c, sc, r.n, budget, r.rep, t, "sum", m.sum()]);
            for (k, b) in m.each.iter().enumerate() {
                pss_csv.row(crate::cells![c, sc, r.n, budget, r.rep, t, k + 1, b]);
            }
        }
    }
    w("runs.csv", &runs_csv.csv())?;
    w("pss.csv", &pss_csv.csv())?;
    w("report.md", &report(records, runs, shape))?;
    for &scenario in &shape.scenarios {
        let name = scenario.name();
        plot(
            &out.join(format!("consolidate-{name}.svg")),
            records,
            shape,
            scenario,
        )?;
        for &n in &shape.ns {
            for &b in &shape.budgets {
                let ran = |r: &RunTrace| r.scenario == scenario && r.n == n;
                if runs
                    .iter()
                    .any(|r| ran(r) && r.budget.is_some_and(|rb| rb.0 == b))
                {
                    let path = out.join(pss_plot_name(scenario, n, b) + ".svg");
                    plot_pss(&path, runs, shape, scenario, n, b)?;
                }
            }
        }
    }
    Ok(())
}

fn report(records: &[Record], runs: &[RunTrace], shape: &ConsolidatePlan) -> String {
    let (mem, interval, cores) = (MEM >> 20, shape.interval.as_millis(), shape.cores);
    let (fractions, amounts): (Vec<Budget>, Vec<Budget>) = shape
        .budgets
        .iter()
        .partition(|b| matches!(b, Budget::Fraction(_)));
    let list = |bs: &[Budget]| bs.iter().map(|b| b.label()).collect::<Vec<_>>().join(", ");
    let mut budgets = Vec::new();
    if !fractions.is_empty() {
        budgets.push(format!("{} times the scenario's joint working set (what the VMs and their VMMs hold at the peak on QEMU with no limit, measured before the runs)", list(&fractions)));
    }
    if !amounts.is_empty() {
        budgets.push(list(&amounts));
    }
    if amounts.iter().any(|b| matches!(b, Budget::Less(_))) {
        budgets.push("`ws-X` is the joint working set (measured as above) less X".into());
    }
    let budgets = budgets.join("; ");
    let mapreduce = job(Scenario::Mapreduce, 1).1;
    let (seqread, kv) = (job(Scenario::Mixed, 1).1, job(Scenario::Mixed, 3).1);
    let overhead = mib_text(shape.qemu_overhead, 0);
    let name = match shape.scenarios.as_slice() {
        [Scenario::Balance] => "balance",
        s if s.iter().all(|s| s.allocates()) => "allocate",
        _ => "consolidate",
    };
    let mut md = crate::families::figures::heading(name);
    let _ = write!(md, "N VMs of {mem} MiB, one vCPU each, started {interval} ms apart in budgets of {budgets}, on {cores} cores; runs of at most {cores} VMs pin each VMM's threads to a core of its own. Scenario `mapreduce`: every VM runs `{mapreduce}`. Scenario `mixed`: VM 1, 4, ... `seqread {seqread}`, VM 2, 5, ... `mapreduce`, VM 3, 6, ... `kv {kv}`. `qemu-static`: QEMU, a balloon at the VM's share (the budget / N less QEMU's measured overhead of {overhead} MiB, so that QEMU is charged its overhead in the budget as memvisor is; at most its RAM) set while it boots, deflate-on-OOM on, a memory cgroup v1 at the share plus QEMU's overhead plus the launcher's RSS and 16 MiB, host swap on. `qemu-nolimit`: QEMU with no balloon and no limit.\n\n");
    if shape.scenarios.contains(&Scenario::Balance) {
        let _ = write!(
            md,
            "Scenario `balance` (HyperDealer2 §6.5, Table 4 in Table 3's load scenario; `memvisor bench balance`): VM 1, 3, ... `gcchurn {}` (memory-intensive), VM 2, 4, ... `kv {}` (CPU-bound); `warm_mb` first fills each guest's page cache, half read and half written and left dirty, from a disk of its own, so the memory the memory-intensive VMs need is in the CPU-bound VMs' page cache. Ratios are to ballooning (`vswapper-balloon`), as the paper's Table 4 normalizes. `hd2-lru`, `hd2`, `hd2-whole`: HyperDealer2's balancing with the pager's clock victims, with its reference-pattern order, and with whole sequences.\n\n",
            job(Scenario::Balance, 1).1,
            job(Scenario::Balance, 2).1,
        );
    }
    if shape.scenarios.iter().any(|s| s.allocates()) {
        let _ = write!(
            md,
            "Scenarios `allocate-idle` and `allocate-busy` (HyperDealer2 §6.3, Fig. 13; `memvisor bench allocate`): VMs 2 to N, the victims, start first and read a file of their own disks once into their page caches, then idle (`seqread {}`) or overwrite another file (`seqread {}`); once all have, VM 1, the beneficiary, starts `alloc {}`: 32 MiB at a time filled with random words and kept, every word read back and checked at the end. Its job time is the allocations' and the read-back's (the gaps between allocations left out), and it is the only job a row's time counts: the victims are stopped once it is done. With a budget of the working set less X, at least X of what it allocates must come from the victims. `vswapper-balloon` is the paper's BLN (the host's balloons), `hd2-lru` its LRU, `hd2` its SEQ, `hd2-whole` its WHOLE_SEQ.\n\n",
            job(Scenario::AllocateIdle, 2).1,
            job(Scenario::AllocateBusy, 2).1,
            job(Scenario::AllocateIdle, 1).1,
        );
    }
    for &scenario in &shape.scenarios {
        let reference_name = scenario.reference();
        let _ = writeln!(md, "## scenario `{}`\n", scenario.name());
        let _ = writeln!(md, "Mean job time in seconds (the guests' own time for their job, mean over the N VMs that finished; median over repetitions, with min–max when there are several), and in brackets the ratio to `{reference_name}`; `n failed` counts VMs that did not finish.\n");
        md.push_str(&by_row(shape, scenario, |a, b, c| {
            let reference_at = at(shape, reference_name, scenario, a.n, b);
            let reference = cell(records, reference_name, reference_at).and_then(|c| c.median);
            let Some(cell) = cell(records, c, a) else {
                return "–".into();
            };
            let mut text = match cell.median {
                Some(m) => format!("{m:.1}"),
                None => "none finished".into(),
            };
            if let Some(m) = cell.median {
                if cell.reps > 1 {
                    let _ = write!(text, " [{:.1}–{:.1}]", cell.min, cell.max);
                }
                if let Some(r) = reference.filter(|_| c != reference_name) {
                    let _ = write!(text, " ({:.2}x)", m / r);
                }
            }
            if cell.failed > 0 {
                let _ = write!(text, ", {} failed", cell.failed);
            }
            text
        }));
        by_workload(&mut md, records, shape, scenario);
        let _ = writeln!(
            md,
            "\n![consolidate {0}](consolidate-{0}.png)",
            scenario.name()
        );
        // Where only some jobs are measured, the others are stopped: no overlap to give.
        if !scenario.allocates() {
            md.push_str("\nThe fraction of each run during which all N jobs ran at once (from the last job's start to the first one's end, over the first start to the last end; median over repetitions):\n\n");
            md.push_str(&by_row(shape, scenario, |a, _, c| {
                let o = traces(runs, c, a).filter_map(|r| r.overlap);
                median(o.collect()).map_or("–".into(), |o| format!("{:.0} %", o * 100.0))
            }));
        }
        md.push_str("\nThe memory of every VMM process (memvisor's VMMs under `memvisor host`; the QEMU processes), their PSS sampled every 200 ms, against the budget: the highest sum in MiB over the repetitions, the most any one VMM held in brackets, and **over** with the seconds the sum spent above the budget (for a configuration no budget holds, nothing is over):\n\n");
        md.push_str(&by_row(shape, scenario, |a, _, c| {
            let mine: Vec<_> = traces(runs, c, a)
                .map(|r| memory_summary(&r.memory, r.budget.map(|b| b.1)))
                .collect();
            let Some(peak) = mine.iter().map(|s| s.peak).max() else {
                return "–".into();
            };
            let each = mine.iter().map(|s| s.peak_each).max().unwrap_or(0);
            let text = format!("{} ({})", mib_text(peak, 0), mib_text(each, 0));
            let over: f64 = mine.iter().map(|s| s.over_secs).sum();
            match mine.iter().any(|s| s.over_samples > 0) {
                true => format!("{text} **over** {over:.1} s"),
                false => text,
            }
        }));
        for &n in &shape.ns {
            for &b in &shape.budgets {
                let ran = |r: &RunTrace| r.scenario == scenario && r.n == n;
                if runs
                    .iter()
                    .any(|r| ran(r) && r.budget.is_some_and(|rb| rb.0 == b))
                {
                    let _ = writeln!(
                        md,
                        "\n![summed PSS, {}, {n} VMs, budget {}]({}.png)",
                        scenario.name(),
                        b.label(),
                        pss_plot_name(scenario, n, b)
                    );
                }
            }
        }
        md.push_str("\nThe longest a single fault took to serve in any memvisor VM (its pager's `fault_latency.max_us`, over its last 16,384 faults), in ms, the most over the repetitions: a VM held up behind one fault shows here.\n\n");
        md.push_str(&by_row(shape, scenario, |a, _, c| {
            let mine = records
                .iter()
                .filter(|r| r.config == c && a.has(r.scenario, r.n, r.budget));
            mine.filter_map(|r| r.longest_fault_us)
                .max()
                .map_or("–".into(), ms)
        }));
        md.push_str(CPU_TABLE_INTRO);
        md.push_str(&by_row(shape, scenario, |a, b, c| {
            let reference =
                (c != reference_name).then(|| at(shape, reference_name, scenario, a.n, b));
            let reference = reference.into_iter();
            cpu_cell(
                traces(runs, c, a),
                reference.flat_map(|r| traces(runs, reference_name, r)),
            )
        }));
        md.push_str(MACHINE_TABLE_INTRO);
        md.push_str(&by_row(shape, scenario, |a, _, c| {
            machine_cell(traces(runs, c, a))
        }));
        md.push('\n');
    }
    let limited: Vec<&Record> = records.iter().filter(|r| r.cgroup.is_some()).collect();
    if !limited.is_empty() {
        md.push_str("## What happened to each `qemu-static` VM\n\nFrom its memory cgroup, last seen before QEMU ended (every 200 ms): the limit, its highest usage (`memory.max_usage_in_bytes`), `memory.failcnt` (times usage hit the limit), OOM kills (`oom_kill` of `memory.oom_control`) and the most of its memory in host swap at once (`swap` of `memory.stat`).\n\n");
        let mut t = Table::new("scenario | VMs | budget | rep | VM | workload | limit MiB | peak usage MiB | failcnt | OOM kills | swap peak MiB | finished".split(" | "));
        for r in limited {
            let c = r.cgroup.unwrap_or_default();
            t.row(vec![
                r.scenario.name().to_owned(),
                r.n.to_string(),
                r.budget.map_or(String::new(), Budget::label),
                r.rep.to_string(),
                r.vm.to_string(),
                r.workload.to_owned(),
                mib_text(c.limit, 0),
                mib_text(c.max_usage, 0),
                c.failcnt.to_string(),
                c.oom_kills.to_string(),
                mib_text(c.swap_peak, 0),
                if r.ok {
                    "yes".into()
                } else {
                    format!("no: {}", r.note)
                },
            ]);
        }
        let _ = writeln!(md, "{}", t.markdown());
    }
    if !shape.notes.is_empty() {
        md.push_str("## Set-up\n\n");
        for n in &shape.notes {
            let _ = writeln!(md, "- {n}");
        }
        md.push('\n');
    }
    md.push_str("memvisor's VMs run under `memvisor host` with its defaults (idle tax 0.75, a tick of 250 ms) and the bench's sampling period of 5 s. Every VM's console is under `logs/`; `results.csv` has each VM's job interval, `runs.csv` each run's overlap and PSS, `pss.csv` each VMM's PSS and their sum every 200 ms.\n");
    md
}

/// Per workload of `scenario`, for each N: the mean job time of that workload's VMs (median over
/// repetitions) and its ratio to the scenario's reference.
fn by_workload(md: &mut String, records: &[Record], shape: &ConsolidatePlan, scenario: Scenario) {
    let mut workloads: Vec<&str> = records
        .iter()
        .filter(|r| r.scenario == scenario && scenario.measured(r.vm))
        .map(|r| r.workload)
        .collect();
    workloads.sort_unstable();
    workloads.dedup();
    if workloads.len() < 2 {
        return;
    }
    let reference = scenario.reference();
    md.push_str(&format!("\nBy workload: the mean job time of its VMs in seconds (median over repetitions), and in brackets the ratio to `{reference}`:\n\n"));
    let configs = shape.configs.iter().map(|c| c.name.as_str());
    let head = ["VMs", "budget", "workload"].into_iter();
    let mut t = Table::new(head.chain(configs.clone()));
    for (&n, &b) in shape
        .ns
        .iter()
        .flat_map(|n| shape.budgets.iter().map(move |b| (n, b)))
    {
        for w in &workloads {
            let mine = |config: &str| -> Option<f64> {
                let a = at(shape, config, scenario, n, b);
                let run = |r: &&Record| r.config == config && a.has(r.scenario, r.n, r.budget);
                let mine: Vec<&Record> = records
                    .iter()
                    .filter(run)
                    .filter(|r| r.workload == *w)
                    .collect();
                median(rep_means(&mine))
            };
            let r = mine(reference);
            let cell = |c: &str| match (mine(c), r) {
                (Some(m), Some(r)) if c != reference => format!("{m:.1} ({:.2}x)", m / r),
                (Some(m), _) => format!("{m:.1}"),
                (None, _) => "–".into(),
            };
            let row = [
                label(n, shape.cores),
                budget_label(shape, scenario, n, b),
                (*w).to_owned(),
            ];
            t.row(row.into_iter().chain(configs.clone().map(cell)).collect());
        }
    }
    md.push_str(&t.markdown());
}

/// Each configuration's mean job time (median over repetitions): against the budget (in MiB)
/// when several are swept, one line per configuration and N, otherwise against N.
fn plot(
    path: &Path,
    records: &[Record],
    shape: &ConsolidatePlan,
    scenario: Scenario,
) -> Result<(), String> {
    let by_budget = shape.budgets.len() > 1;
    let series: Vec<(String, Vec<(u32, Budget)>)> = match by_budget {
        true => shape
            .ns
            .iter()
            .map(|&n| (n, shape.budgets.iter().map(move |&b| (n, b)).collect()))
            .map(|(n, at)| {
                (
                    if shape.ns.len() > 1 {
                        format!(", {n} VMs")
                    } else {
                        String::new()
                    },
                    at,
                )
            })
            .collect(),
        false => {
            let b = shape
                .budgets
                .first()
                .copied()
                .unwrap_or(Budget::Fraction(1.0));
            vec![(String::new(), shape.ns.iter().map(|&n| (n, b)).collect())]
        }
    };
    let x = |n: u32, b: Budget| match by_budget {
        true => shape
            .budget_bytes(scenario, n, b)
            .map(|bytes| bytes as f64 / MIB),
        false => Some(f64::from(n)),
    };
    let mut lines = Vec::new();
    for c in shape.configs.iter().map(|c| c.name.as_str()) {
        for (suffix, points) in &series {
            let pts = points.iter().filter_map(|&(n, b)| {
                let m = cell(records, c, at(shape, c, scenario, n, b))?.median?;
                Some((x(n, b)?, m))
            });
            let i = lines.len();
            lines.push(Line::new(format!("{c}{suffix}"), color(i), 2, pts.collect()).marked());
        }
    }
    let top = ys(&lines).fold(1.0f64, f64::max);
    let right = xs(&lines).fold(1.0f64, f64::max);
    let (what, unit) = match by_budget {
        true => ("the budget", "budget, MiB"),
        false => ("VMs", "VMs"),
    };
    let panel = Panel {
        lines,
        legend: Legend::UpperLeft,
        ..Panel::new(
            format!(
                "consolidate, {}: mean job time against {what}",
                scenario.name()
            ),
            unit,
            "seconds",
            Axis::linear(0.0, right * 1.1 + 1.0),
            Axis::linear(0.0, top * 1.15),
        )
    };
    Figure::one((800, 500), panel).write(path)
}

/// The file name (without its extension) of the PSS plot of `scenario` with `n` VMs and `budget`.
fn pss_plot_name(scenario: Scenario, n: u32, budget: Budget) -> String {
    let b = budget.label().replace(' ', "").to_lowercase();
    format!("pss-{}-n{n}-b{b}", scenario.name())
}

/// Each configuration's summed VMM PSS over its first repetition's run at `budget` (and the
/// configurations no budget holds), with the budget dashed.
fn plot_pss(
    path: &Path,
    runs: &[RunTrace],
    shape: &ConsolidatePlan,
    scenario: Scenario,
    n: u32,
    budget: Budget,
) -> Result<(), String> {
    let mut lines: Vec<Line> = shape
        .configs
        .iter()
        .filter_map(|c| {
            let c = c.name.as_str();
            let r = traces(runs, c, at(shape, c, scenario, n, budget)).next()?;
            Some((c, r))
        })
        .enumerate()
        .map(|(i, (c, r))| {
            let pts = r.memory.iter().map(|m| (m.t, m.sum() as f64 / MIB));
            Line::new(c, color(i), 2, pts.collect())
        })
        .collect();
    let end = xs(&lines).fold(1.0f64, f64::max);
    let limit = shape.budget_bytes(scenario, n, budget).unwrap_or(0) as f64 / MIB;
    let top = ys(&lines).fold(limit, f64::max) * 1.1;
    lines.insert(
        0,
        Line::new("", RED, 2, vec![(0.0, limit), (end, limit)]).dashed(),
    );
    let panel = Panel {
        lines,
        legend: Legend::LowerRight,
        ..Panel::new(
            format!(
                "summed VMM PSS, {}, {n} VMs, budget {} (dashed)",
                scenario.name(),
                budget_label(shape, scenario, n, budget)
            ),
            "seconds",
            "MiB",
            Axis::linear(0.0, end),
            Axis::linear(0.0, top),
        )
    };
    Figure::one((900, 450), panel).write(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::families::consolidate::experiment::{Config, Sample};
    use crate::families::consolidate::scenario::REFERENCE;
    use crate::harness::cpu::{CpuUse, MachineCpu};

    const B: Budget = Budget::Fraction(0.75);

    fn rec(config: &str, n: u32, rep: u32, secs: Option<f64>) -> Record {
        Record {
            config: config.into(),
            scenario: Scenario::Mapreduce,
            n,
            budget: (config != REFERENCE).then_some(B),
            pinned: false,
            rep,
            vm: 1,
            workload: "mapreduce",
            secs,
            interval: secs.map(|s| (0.0, s)),
            ok: secs.is_some(),
            note: String::new(),
            cgroup: None,
            longest_fault_us: None,
            cpu: None,
        }
    }

    /// A plan of the configurations `names` (in `CONFIGS`' order), one scenario and one N.
    fn plan(names: &[&str], sc: Scenario, n: u32, cores: usize, qemu: u64) -> ConsolidatePlan {
        ConsolidatePlan {
            configs: names.iter().map(|c| Config::parse(c).unwrap()).collect(),
            ns: vec![n],
            scenarios: vec![sc],
            reps: 1,
            cores,
            budgets: vec![B],
            interval: crate::families::consolidate::experiment::INTERVAL,
            working_sets: vec![(sc, n, 1000 << 20)],
            qemu_overhead: qemu,
            notes: Vec::new(),
        }
    }

    /// A run of `config` whose VMMs held `memory` (seconds, each VMM's PSS), at [`B`] of a
    /// 1000 MiB working set.
    fn trace(config: &str, n: u32, memory: &[(f64, &[u64])]) -> RunTrace {
        RunTrace {
            config: config.into(),
            scenario: Scenario::Mapreduce,
            n,
            budget: (config != REFERENCE).then_some((B, 750 << 20)),
            pinned: false,
            rep: 1,
            wall_secs: 3.0,
            overlap: Some(0.8),
            memory: memory
                .iter()
                .map(|&(t, each)| Sample {
                    t,
                    each: each.to_vec(),
                })
                .collect(),
            cpu: CpuUse::default(),
            host_cpu: 0.0,
            machine: None,
        }
    }

    #[test]
    fn a_cell_is_the_median_of_repetition_means() {
        let records = vec![
            rec("pager", 4, 1, Some(10.0)),
            rec("pager", 4, 1, Some(14.0)),
            rec("pager", 4, 2, Some(30.0)),
            rec("pager", 4, 3, Some(11.0)),
            rec("pager", 4, 3, None),
        ];
        let at = |scenario, budget| At {
            scenario,
            n: 4,
            budget,
        };
        let c = cell(&records, "pager", at(Scenario::Mapreduce, Some(B))).unwrap();
        assert_eq!(c.median, Some(12.0));
        assert_eq!((c.min, c.max, c.reps, c.failed), (11.0, 30.0, 3, 1));
        assert_eq!(cell(&records, "pager", at(Scenario::Mixed, Some(B))), None);
        assert_eq!(cell(&records, "pager", at(Scenario::Mapreduce, None)), None);
    }

    /// `balance`'s ratios are to ballooning, and each workload has its own row, the median of
    /// its VMs' per-repetition means.
    #[test]
    fn balance_has_rows_per_workload_against_ballooning() {
        let at = |config: &str, rep: u32, workload: &'static str, secs: f64| Record {
            scenario: Scenario::Balance,
            workload,
            ..rec(config, 2, rep, Some(secs))
        };
        let records = vec![
            at("vswapper-balloon", 1, "gcchurn", 40.0),
            at("vswapper-balloon", 1, "kv", 20.0),
            at("vswapper-balloon", 2, "gcchurn", 44.0),
            at("vswapper-balloon", 2, "kv", 20.0),
            at("hd2", 1, "gcchurn", 20.0),
            at("hd2", 1, "kv", 21.0),
            at("hd2", 2, "gcchurn", 22.0),
            at("hd2", 2, "kv", 21.0),
        ];
        let shape = plan(&["vswapper-balloon", "hd2"], Scenario::Balance, 2, 1, 0);
        let md = report(&records, &[], &shape);
        for want in [
            "ratio to `vswapper-balloon`",
            "| 2 | 0.75 (750 MiB) | 31.0 [30.0–32.0] | 21.0 [20.5–21.5] (0.68x) |",
            "| 2 | 0.75 (750 MiB) | gcchurn | 42.0 | 21.0 (0.50x) |",
            "| 2 | 0.75 (750 MiB) | kv | 20.0 | 21.0 (1.05x) |",
        ] {
            assert!(md.contains(want), "{want}: {md}");
        }
    }

    #[test]
    fn ratios_failures_memory_and_cgroups_reach_the_report() {
        let dir = tempfile::tempdir().unwrap();
        let mut records = vec![
            rec("qemu-nolimit", 4, 1, Some(10.0)),
            rec("qemu-nolimit", 4, 1, Some(12.0)),
            rec("pager", 4, 1, Some(22.0)),
            rec("pager", 4, 1, None),
            rec("qemu-static", 4, 1, None),
        ];
        records[4].cgroup = Some(CgroupSeen {
            limit: 300 << 20,
            max_usage: 299 << 20,
            failcnt: 7,
            oom_kills: 1,
            swap_peak: 20 << 20,
        });
        records[4].note = "exited with signal 9".into();
        records[2].longest_fault_us = Some(1_500);
        records[3].longest_fault_us = Some(10_001_663);
        let mib = |m: &[u64]| m.iter().map(|m| m << 20).collect::<Vec<u64>>();
        let (a, b, c, d) = (
            mib(&[300, 400]),
            mib(&[500, 400]),
            mib(&[370, 370]),
            mib(&[1300]),
        );
        let cpu = |guest, serving, background| CpuUse {
            guest,
            serving,
            background,
        };
        let runs = vec![
            RunTrace {
                cpu: cpu(10.0, 2.0, 1.0),
                host_cpu: 1.0,
                machine: Some(MachineCpu {
                    busy: 20.0,
                    steal: 0.5,
                }),
                ..trace("pager", 4, &[(0.0, &a), (0.2, &b), (0.4, &c)])
            },
            RunTrace {
                cpu: cpu(6.5, 0.5, 0.0),
                ..trace(REFERENCE, 4, &[(0.0, &d)])
            },
        ];
        records[0].cpu = Some(cpu(4.0, 1.25, 0.5));
        let configs = ["pager", "qemu-static", REFERENCE];
        let shape = plan(&configs, Scenario::Mapreduce, 4, 2, 30 << 20);
        write_outputs(dir.path(), &records, &runs, &shape).unwrap();
        let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
        for want in [
            "| 4 | 0.75 (750 MiB) | 22.0 (2.00x), 1 failed | none finished, 1 failed | 11.0 |",
            "| 4 | 0.75 (750 MiB) | 80 % | – | 80 % |",
            "| 4 | 0.75 (750 MiB) | 900 (500) **over** 0.2 s | – | 1300 (1300) |",
            "| mapreduce | 4 | 0.75 | 1 | 1 | mapreduce | 300 | 299 | 7 | 1 | 20 | no: exited with signal 9 |",
            "| 4 | 0.75 (750 MiB) | 10001.7 | – | – |",
            "| 4 | 0.75 (750 MiB) | 14.0 = 10.0 + 2.0 + 1.0 + 1.0 (2.00x) | – | 7.0 = 6.5 + 0.5 + 0.0 + 0.0 |",
            "| 4 | 0.75 (750 MiB) | 6.0; 0.5 (0.5) | – | – |",
        ] {
            assert!(md.contains(want), "{want}: {md}");
        }
        let csv = std::fs::read_to_string(dir.path().join("results.csv")).unwrap();
        assert_eq!(csv.lines().count(), 6);
        assert!(csv.contains(",1.5,,,\n"), "{csv}");
        assert!(csv.contains(",4.00,1.75,\n"), "{csv}");
        let runs_csv = std::fs::read_to_string(dir.path().join("runs.csv")).unwrap();
        assert!(
            runs_csv.contains(
                "pager,mapreduce,4,0.75,750,0,1,3.0,0.800,900,500,0.2,1,3,10.00,2.00,1.00,1.00,20.00,0.50\n"
            ),
            "{runs_csv}"
        );
        assert!(dir.path().join("consolidate-mapreduce.svg").exists());
        assert!(dir.path().join("pss-mapreduce-n4-b0.75.svg").exists());
        let pss = std::fs::read_to_string(dir.path().join("pss.csv")).unwrap();
        assert!(
            pss.contains("pager,mapreduce,4,0.75,1,0.20,sum,943718400\n"),
            "{pss}"
        );
        assert!(
            pss.contains("pager,mapreduce,4,0.75,1,0.20,1,524288000\n"),
            "{pss}"
        );
    }
}
