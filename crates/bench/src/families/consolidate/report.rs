//! The outputs of `memvisor bench consolidate`: `results.csv` (one row per VM and run),
//! `runs.csv` (one row per run: its overlap and its VMMs' summed RSS against the budget),
//! `rss.csv` (that sum every tick), `report.md` (each configuration's mean job time against N as
//! a ratio to `qemu-nolimit`, the overlap, the RSS, what happened to each limited QEMU VM),
//! `consolidate-SCENARIO.svg` and `rss-SCENARIO-nN.svg`, and per run of `memvisor host` each
//! VM's allocation over time (`allocation.csv`, `allocation.svg`).

use crate::report::numbers::{fixed, mean, median, mib_text, MIB};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use memvisor_api::HostSample;
use plotters::style::RED;

use super::experiment::{
    job, qemu_share, rss_summary, ConsolidatePlan, Launch, Scenario, BUDGET, INTERVAL, MEM,
};
use super::run::{CgroupSeen, Record, RunTrace};
use crate::report::figure::{color, xs, ys, Axis, Figure, Legend, Line, Panel};
use crate::report::table::Table;

/// `allocation.csv` (one row per VM per tick) and `allocation.svg`/`.png` (each VM's resident
/// memory and target over the run) in a run's directory.
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
    let top = (MEM as f64 / MIB) * 1.1;
    let mut panel = Panel::new(
        "allocation over time: resident (solid) and target (dashed) per VM",
        "seconds",
        "MiB",
        Axis::linear(0.0, end),
        Axis::linear(0.0, top),
    );
    panel.legend = Legend::UpperRight;
    panel.lines = crate::families::host::figure::allocations(history, &names, false);
    Figure::one((900, 450), panel).write(&dir.join("allocation.svg"))
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

/// The [`Cell`] of `config` in `scenario` with `n` VMs, `None` if it has not run.
pub fn cell(records: &[Record], config: &str, scenario: Scenario, n: u32) -> Option<Cell> {
    let mine: Vec<&Record> = records
        .iter()
        .filter(|r| r.config == config && r.scenario == scenario && r.n == n)
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
    scenario: Scenario,
    n: u32,
) -> impl Iterator<Item = &'a RunTrace> + 'a {
    let mine = move |r: &&RunTrace| r.config == config && r.scenario == scenario && r.n == n;
    runs.iter().filter(mine)
}

fn label(n: u32, cores: usize) -> String {
    format!("{n}{}", if n as usize <= cores { ", pinned" } else { "" })
}

/// Microseconds as milliseconds, one decimal.
fn ms(us: u64) -> String {
    format!("{:.1}", us as f64 / 1e3)
}

/// A Markdown table with a row per N and a column per configuration, `cell(n, config)` its
/// cells.
fn by_n(shape: &ConsolidatePlan, cell: impl Fn(u32, &str) -> String) -> String {
    let configs = shape.configs.iter().map(|(c, _)| *c);
    let mut t = Table::new(std::iter::once("VMs").chain(configs.clone()));
    for &n in &shape.ns {
        let row = std::iter::once(label(n, shape.cores));
        t.row(row.chain(configs.clone().map(|c| cell(n, c))).collect());
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
    let mut csv = Table::new("config,scenario,vms,pinned,rep,vm,workload,seconds,start_s,end_s,ok,cgroup_limit_mib,cgroup_max_usage_mib,failcnt,oom_kills,swap_peak_mib,longest_fault_ms,note".split(','));
    let f2 = |v: Option<f64>| fixed(v, 2);
    for r in records {
        let c = r.cgroup;
        let cg = |f: fn(&CgroupSeen) -> String| c.as_ref().map_or(String::new(), f);
        csv.row(crate::cells![
            r.config,
            r.scenario.name(),
            r.n,
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
            r.note.replace('"', "'"),
        ]);
    }
    w("results.csv", &csv.csv())?;
    let mut runs_csv = Table::new("config,scenario,vms,pinned,rep,wall_s,overlap,rss_peak_mib,budget_mib,rss_over_budget_s,rss_over_budget_samples,samples".split(','));
    let mut rss_csv = Table::new("config,scenario,vms,rep,seconds,rss_bytes".split(','));
    for r in runs {
        let s = rss_summary(&r.rss, BUDGET);
        runs_csv.row(crate::cells![
            r.config,
            r.scenario.name(),
            r.n,
            u8::from(r.pinned),
            r.rep,
            format!("{:.1}", r.wall_secs),
            fixed(r.overlap, 3),
            mib_text(s.peak, 0),
            BUDGET >> 20,
            format!("{:.1}", s.over_secs),
            s.over_samples,
            r.rss.len(),
        ]);
        for &(t, b) in &r.rss {
            let (c, sc, t) = (&r.config, r.scenario.name(), format!("{t:.2}"));
            rss_csv.row(crate::cells![c, sc, r.n, r.rep, t, b]);
        }
    }
    w("runs.csv", &runs_csv.csv())?;
    w("rss.csv", &rss_csv.csv())?;
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
            if runs.iter().any(|r| r.scenario == scenario && r.n == n) {
                let path = out.join(format!("rss-{name}-n{n}.svg"));
                plot_rss(&path, runs, &shape.configs, scenario, n)?;
            }
        }
    }
    Ok(())
}

fn report(records: &[Record], runs: &[RunTrace], shape: &ConsolidatePlan) -> String {
    let (mem, interval, budget, cores) =
        (MEM >> 20, INTERVAL.as_millis(), BUDGET >> 20, shape.cores);
    let mapreduce = job(Scenario::Mapreduce, 1).1;
    let (seqread, kv) = (job(Scenario::Mixed, 1).1, job(Scenario::Mixed, 3).1);
    let overhead = mib_text(shape.qemu_overhead, 0);
    let share = qemu_share(BUDGET, 4, MEM, shape.qemu_overhead) >> 20;
    let mut md = format!("# consolidate (VSwapper §5.2, Fig. 14's workload; VMs start 0.5 s apart, the paper's 10 s)\n\nN VMs of {mem} MiB, one vCPU each, started {interval} ms apart in a {budget} MiB budget, on {cores} cores; runs of at most {cores} VMs pin each VMM's threads to a core of its own. Scenario `mapreduce`: every VM runs `{mapreduce}`. Scenario `mixed`: VM 1, 4, ... `seqread {seqread}`, VM 2, 5, ... `mapreduce`, VM 3, 6, ... `kv {kv}`. `qemu-static`: QEMU, a balloon at the VM's share (the budget / N less QEMU's measured overhead of {overhead} MiB, so that QEMU is charged its overhead in the budget as memvisor is; at most its RAM: {share} MiB at N = 4) set while it boots, deflate-on-OOM on, a memory cgroup v1 at the share plus QEMU's overhead plus the launcher's RSS and 16 MiB, host swap on. `qemu-nolimit`: QEMU with no balloon and no limit.\n\n");
    if shape.scenarios.contains(&Scenario::Balance) {
        let _ = write!(
            md,
            "Scenario `balance` (HyperDealer2 §6.5, Table 4 in Table 3's load scenario; `memvisor bench balance`): VM 1, 3, ... `gcchurn {}` (memory-intensive), VM 2, 4, ... `kv {}` (CPU-bound); `warm_mb` first fills each guest's page cache, half read and half written and left dirty, from a disk of its own, so the memory the memory-intensive VMs need is in the CPU-bound VMs' page cache. Ratios are to ballooning (`vswapper-balloon`), as the paper's Table 4 normalizes. `hd2-lru`, `hd2`, `hd2-whole`: HyperDealer2's balancing with the pager's clock victims, with its reference-pattern order, and with whole sequences.\n\n",
            job(Scenario::Balance, 1).1,
            job(Scenario::Balance, 2).1,
        );
    }
    for &scenario in &shape.scenarios {
        let reference_name = scenario.reference();
        let _ = writeln!(md, "## scenario `{}`\n", scenario.name());
        let _ = writeln!(md, "Mean job time in seconds (the guests' own time for their job, mean over the N VMs that finished; median over repetitions, with min–max when there are several), and in brackets the ratio to `{reference_name}`; `n failed` counts VMs that did not finish.\n");
        md.push_str(&by_n(shape, |n, c| {
            let reference = cell(records, reference_name, scenario, n).and_then(|c| c.median);
            let Some(cell) = cell(records, c, scenario, n) else {
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
            "\n![consolidate {0}](consolidate-{0}.png)\n\nThe fraction of each run during which all N jobs ran at once (from the last job's start to the first one's end, over the first start to the last end; median over repetitions):\n",
            scenario.name()
        );
        md.push_str(&by_n(shape, |n, c| {
            let o = traces(runs, c, scenario, n).filter_map(|r| r.overlap);
            median(o.collect()).map_or("–".into(), |o| format!("{:.0} %", o * 100.0))
        }));
        let _ = writeln!(
            md,
            "\nThe summed RSS of every VMM process (memvisor's VMMs under `memvisor host`; the QEMU processes), sampled every 200 ms, against the {} MiB budget: the highest sum in MiB over the repetitions, and **over** with the seconds it spent above the budget:\n",
            BUDGET >> 20
        );
        md.push_str(&by_n(shape, |n, c| {
            let mine: Vec<_> = traces(runs, c, scenario, n)
                .map(|r| rss_summary(&r.rss, BUDGET))
                .collect();
            let Some(peak) = mine.iter().map(|s| s.peak).max() else {
                return "–".into();
            };
            let over: f64 = mine.iter().map(|s| s.over_secs).sum();
            if mine.iter().any(|s| s.over_samples > 0) {
                format!("{} **over** {over:.1} s", mib_text(peak, 0))
            } else {
                mib_text(peak, 0)
            }
        }));
        for &n in &shape.ns {
            if runs.iter().any(|r| r.scenario == scenario && r.n == n) {
                let _ = writeln!(
                    md,
                    "\n![summed RSS, {0}, {n} VMs](rss-{0}-n{n}.png)",
                    scenario.name()
                );
            }
        }
        md.push_str("\nThe longest a single fault took to serve in any memvisor VM (its pager's `fault_latency.max_us`, over its last 16,384 faults), in ms, the most over the repetitions: a VM held up behind one fault shows here.\n\n");
        md.push_str(&by_n(shape, |n, c| {
            let mine = records
                .iter()
                .filter(|r| r.config == c && r.scenario == scenario && r.n == n);
            mine.filter_map(|r| r.longest_fault_us)
                .max()
                .map_or("–".into(), ms)
        }));
        md.push('\n');
    }
    let limited: Vec<&Record> = records.iter().filter(|r| r.cgroup.is_some()).collect();
    if !limited.is_empty() {
        md.push_str("## What happened to each `qemu-static` VM\n\nFrom its memory cgroup, last seen before QEMU ended (every 200 ms): the limit, its highest usage (`memory.max_usage_in_bytes`), `memory.failcnt` (times usage hit the limit), OOM kills (`oom_kill` of `memory.oom_control`) and the most of its memory in host swap at once (`swap` of `memory.stat`).\n\n");
        let mut t = Table::new("scenario | VMs | rep | VM | workload | limit MiB | peak usage MiB | failcnt | OOM kills | swap peak MiB | finished".split(" | "));
        for r in limited {
            let c = r.cgroup.unwrap_or_default();
            t.row(vec![
                r.scenario.name().to_owned(),
                r.n.to_string(),
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
    md.push_str("memvisor's VMs run under `memvisor host` with its defaults (idle tax 0.75, a tick of 250 ms) and the bench's sampling period of 5 s. Every VM's console is under `logs/`; `results.csv` has each VM's job interval, `runs.csv` each run's overlap and RSS, `rss.csv` the sums.\n");
    md
}

/// Per workload of `scenario`, for each N: the mean job time of that workload's VMs (median over
/// repetitions) and its ratio to the scenario's reference.
fn by_workload(md: &mut String, records: &[Record], shape: &ConsolidatePlan, scenario: Scenario) {
    let mut workloads: Vec<&str> = records
        .iter()
        .filter(|r| r.scenario == scenario)
        .map(|r| r.workload)
        .collect();
    workloads.sort_unstable();
    workloads.dedup();
    if workloads.len() < 2 {
        return;
    }
    let reference = scenario.reference();
    md.push_str(&format!("\nBy workload: the mean job time of its VMs in seconds (median over repetitions), and in brackets the ratio to `{reference}`:\n\n"));
    let configs = shape.configs.iter().map(|(c, _)| *c);
    let mut t = Table::new(["VMs", "workload"].into_iter().chain(configs.clone()));
    for &n in &shape.ns {
        for w in &workloads {
            let mine = |config: &str| -> Option<f64> {
                let run = |r: &&Record| r.config == config && r.scenario == scenario && r.n == n;
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
            let row = [label(n, shape.cores), (*w).to_owned()].into_iter();
            t.row(row.chain(configs.clone().map(cell)).collect());
        }
    }
    md.push_str(&t.markdown());
}

fn plot(
    path: &Path,
    records: &[Record],
    shape: &ConsolidatePlan,
    scenario: Scenario,
) -> Result<(), String> {
    let lines: Vec<Line> = shape
        .configs
        .iter()
        .enumerate()
        .map(|(i, (c, _))| {
            let at = shape.ns.iter();
            let pts = at.filter_map(|&n| {
                cell(records, c, scenario, n)?
                    .median
                    .map(|m| (f64::from(n), m))
            });
            Line::new(*c, color(i), 2, pts.collect()).marked()
        })
        .collect();
    let top = ys(&lines).fold(1.0f64, f64::max);
    let right = shape.ns.iter().copied().max().unwrap_or(1);
    let panel = Panel {
        lines,
        legend: Legend::UpperLeft,
        ..Panel::new(
            format!(
                "consolidate, {}: mean job time against VMs",
                scenario.name()
            ),
            "VMs",
            "seconds",
            Axis::linear(0.0, f64::from(right + 1)),
            Axis::linear(0.0, top * 1.15),
        )
    };
    Figure::one((800, 500), panel).write(path)
}

/// Each configuration's summed VMM RSS over its first repetition's run, with the budget.
fn plot_rss(
    path: &Path,
    runs: &[RunTrace],
    configs: &[(&'static str, Launch)],
    scenario: Scenario,
    n: u32,
) -> Result<(), String> {
    let mut lines: Vec<Line> = configs
        .iter()
        .filter_map(|(c, _)| traces(runs, c, scenario, n).next().map(|r| (c, r)))
        .enumerate()
        .map(|(i, (c, r))| {
            let pts = r.rss.iter().map(|&(t, b)| (t, b as f64 / MIB));
            Line::new(*c, color(i), 2, pts.collect())
        })
        .collect();
    let end = xs(&lines).fold(1.0f64, f64::max);
    let budget = BUDGET as f64 / MIB;
    let top = ys(&lines).fold(budget, f64::max) * 1.1;
    lines.insert(
        0,
        Line::new("", RED, 2, vec![(0.0, budget), (end, budget)]).dashed(),
    );
    let panel = Panel {
        lines,
        legend: Legend::LowerRight,
        ..Panel::new(
            format!(
                "summed VMM RSS, {}, {n} VMs (budget dashed)",
                scenario.name()
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
    use crate::families::consolidate::experiment::{CONFIGS, REFERENCE};

    fn rec(config: &str, n: u32, rep: u32, secs: Option<f64>) -> Record {
        Record {
            config: config.into(),
            scenario: Scenario::Mapreduce,
            n,
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
        }
    }

    /// A plan of the configurations `names` (in `CONFIGS`' order), one scenario and one N.
    fn plan(names: &[&str], sc: Scenario, n: u32, cores: usize, qemu: u64) -> ConsolidatePlan {
        ConsolidatePlan {
            configs: CONFIGS
                .iter()
                .filter(|(c, _)| names.contains(c))
                .copied()
                .collect(),
            ns: vec![n],
            scenarios: vec![sc],
            reps: 1,
            cores,
            qemu_overhead: qemu,
            notes: Vec::new(),
        }
    }

    fn trace(config: &str, n: u32, rss: Vec<(f64, u64)>) -> RunTrace {
        RunTrace {
            config: config.into(),
            scenario: Scenario::Mapreduce,
            n,
            pinned: false,
            rep: 1,
            wall_secs: 3.0,
            overlap: Some(0.8),
            rss,
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
        let c = cell(&records, "pager", Scenario::Mapreduce, 4).unwrap();
        assert_eq!(c.median, Some(12.0));
        assert_eq!((c.min, c.max, c.reps, c.failed), (11.0, 30.0, 3, 1));
        assert_eq!(cell(&records, "pager", Scenario::Mixed, 4), None);
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
            "| 2 | 31.0 [30.0–32.0] | 21.0 [20.5–21.5] (0.68x) |",
            "| 2 | gcchurn | 42.0 | 21.0 (0.50x) |",
            "| 2 | kv | 20.0 | 21.0 (1.05x) |",
        ] {
            assert!(md.contains(want), "{want}: {md}");
        }
    }

    #[test]
    fn ratios_failures_rss_and_cgroups_reach_the_report() {
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
        let runs = vec![
            trace(
                "pager",
                4,
                vec![(0.0, 900 << 20), (0.2, 1100 << 20), (0.4, 1000 << 20)],
            ),
            trace("qemu-nolimit", 4, vec![(0.0, 1300 << 20)]),
        ];
        let configs = ["pager", "qemu-static", REFERENCE];
        let shape = plan(&configs, Scenario::Mapreduce, 4, 2, 30 << 20);
        write_outputs(dir.path(), &records, &runs, &shape).unwrap();
        let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
        for want in [
            "| 4 | 22.0 (2.00x), 1 failed | none finished, 1 failed | 11.0 |",
            "| 4 | 80 % | – | 80 % |",
            "| 4 | 1100 **over** 0.2 s | – | 1300 **over** 0.0 s |",
            "| mapreduce | 4 | 1 | 1 | mapreduce | 300 | 299 | 7 | 1 | 20 | no: exited with signal 9 |",
            "| 4 | 10001.7 | – | – |",
        ] {
            assert!(md.contains(want), "{want}: {md}");
        }
        let csv = std::fs::read_to_string(dir.path().join("results.csv")).unwrap();
        assert_eq!(csv.lines().count(), 6);
        assert!(csv.contains(",1.5,\n"), "{csv}");
        let runs_csv = std::fs::read_to_string(dir.path().join("runs.csv")).unwrap();
        assert!(
            runs_csv.contains("pager,mapreduce,4,0,1,3.0,0.800,1100,1024,0.2,1,3"),
            "{runs_csv}"
        );
        assert!(dir.path().join("consolidate-mapreduce.svg").exists());
        assert!(dir.path().join("rss-mapreduce-n4.svg").exists());
    }
}
