//! An experiment of phases swept over the limit or a workload argument ([`Sweep`]): the whole
//! experiment (every configuration, repetition by repetition) at each point in turn, into a
//! directory of its own (`limit-NNNm/`, `hog_mb-NN/`) with its own report, then the sweep's
//! `results.csv`, `report.md` and figure: the time of the sweep's phases against the axis, and
//! each configuration against the reference.

use std::fmt::Write as _;
use std::path::Path;

use super::configs::Config;
use super::experiment::{Along, Sweep};
use super::report::{phase_ms, values, Point, Record};
use super::run::{self, PhasesPlan};
use crate::args::BenchArgs;
use crate::harness::readings::DiskOps;
use crate::harness::{teardown, Bench};
use crate::report::figure::{color, ys, Axis, Figure, Legend, Line, Panel};
use crate::report::numbers::{sig, spread, spread_text};
use crate::report::table::Table;

/// Runs `plan` at every point of `sweep`, then writes the sweep's outputs.
pub fn run(
    args: &BenchArgs,
    bench: &Bench,
    plan: &PhasesPlan,
    sweep: &Sweep,
) -> Result<(), String> {
    let mut points = Vec::new();
    for &at in &sweep.points {
        if teardown::interrupted() {
            break;
        }
        let out = bench.out.join(sweep.dir(at));
        let logs = out.join("logs");
        std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
        eprintln!(
            "memvisor bench {}: {} {}",
            plan.exp.name,
            sweep.label(),
            sweep.x(at)
        );
        let here_plan = PhasesPlan {
            exp: sweep.at(&plan.exp, at),
            reps: plan.reps,
            configs: plan.configs.clone(),
            reference: plan.reference,
        };
        let here = Bench {
            exe: bench.exe.clone(),
            out,
            work: bench.work.clone(),
            timeout: bench.timeout,
            env: bench.env.clone(),
        };
        let records = run::run(args, &here, &here_plan)?;
        points.push(Point { at, records });
    }
    let name = plan.exp.name;
    crate::report::write_report(
        &bench.out,
        name,
        csv(name, sweep, &points),
        |svg| plot(svg, plan, sweep, &points),
        markdown(plan, sweep, &points, &bench.env),
    )
}

/// The sweep phase's times of `config` at one limit, from its completed phases.
fn times(p: &Point, config: &str, phase: &str) -> Vec<f64> {
    values(&p.records, 0, config, phase, phase_ms)
}

fn median(p: &Point, config: &str, phase: &str) -> Option<f64> {
    spread(times(p, config, phase)).map(|s| s.0)
}

/// The host disk's requests in `phase` of `config`'s runs at one point, and the writes among
/// them: the medians of the runs that finished the phase (VSwapper Fig. 11a–b).
fn disk_ops_median(p: &Point, config: &str, phase: &str) -> Option<(f64, f64)> {
    let ops: Vec<DiskOps> = p
        .records
        .iter()
        .filter(|r| r.config.name == config)
        .filter_map(|r| r.result.phases.iter().find(|x| x.name == phase)?.disk_ops)
        .collect();
    let median = crate::report::numbers::median;
    let total = median(ops.iter().map(|o| o.total() as f64).collect())?;
    let writes = median(ops.iter().map(|o| o.writes as f64).collect())?;
    Some((total, writes))
}

/// The writes to reclaimed pages the False Reads Preventer completed with no read (VSwapper's
/// false reads, removed) in one run, from memvisor's `GET /stats` at its end.
fn removed(r: &Record) -> Option<u64> {
    let stats = r.result.final_stats.as_ref()?.pager.as_ref()?;
    Some(stats.counters.preventer_completed)
}

/// The median over `config`'s runs at one limit of [`removed`].
fn removed_median(p: &Point, config: &str) -> Option<f64> {
    let runs = p.records.iter().filter(|r| r.config.name == config);
    crate::report::numbers::median(runs.filter_map(removed).map(|n| n as f64).collect())
}

/// `results.csv`: one row per run.
pub fn csv(name: &str, sweep: &Sweep, points: &[Point]) -> String {
    let phases: Vec<String> = sweep.phases().map(|p| format!("{p}_ms")).collect();
    let head = format!(
        "experiment,{},config,rep,status,{},false_reads_removed,disk_reads,disk_writes,reason",
        sweep.column(),
        phases.join(",")
    );
    let mut t = Table::new(head.split(','));
    for p in points {
        for r in &p.records {
            let ms = sweep.phases().map(|phase| {
                let x = r.result.phases.iter().find(|x| x.name == phase);
                x.map_or(String::new(), |x| format!("{:.3}", phase_ms(x)))
            });
            let mut row = crate::cells![
                name,
                sweep.x(p.at),
                r.config.name,
                r.rep,
                r.result.status.as_str(),
            ];
            row.extend(ms);
            let ops = r.result.phases.iter().find(|x| x.name == sweep.phase);
            let ops = ops.and_then(|x| x.disk_ops);
            let count = |n: Option<u64>| n.map_or(String::new(), |n| n.to_string());
            row.extend(crate::cells![
                count(removed(r)),
                count(ops.map(|o| o.reads)),
                count(ops.map(|o| o.writes)),
                r.result.reason,
            ]);
            t.row(row);
        }
    }
    t.csv()
}

/// `report.md`.
pub fn markdown(
    plan: &PhasesPlan,
    sweep: &Sweep,
    points: &[Point],
    env: &[(String, String)],
) -> String {
    let (exp, phase, reference) = (&plan.exp, sweep.phase, plan.reference);
    let mut s = crate::families::figures::heading(exp.name);
    let xs: Vec<String> = sweep
        .points
        .iter()
        .map(|&at| sweep.x(at).to_string())
        .collect();
    let step = &exp.steps[0];
    let (varied, axis) = match sweep.along {
        Along::Limit => (
            format!("the host gives it {} MiB in turn", xs.join(", ")),
            "limit",
        ),
        Along::Arg(key) => {
            let limit = exp
                .limit
                .map_or("all its memory".into(), |l| format!("{} MiB", l >> 20));
            (
                format!(
                    "the host gives it {limit}, and `{key}` is {} MiB in turn",
                    xs.join(", ")
                ),
                key,
            )
        }
    };
    let _ = writeln!(
        s,
        "{}. A guest of {} MiB runs `{} {}`; {varied}, every configuration at each point, {} repetition(s) interleaved. The result is the guest's own time for its `{phase}` phase; each point's runs have their own report (`{}/report.md` and the others), with the host's swap and disk traffic per phase.\n",
        exp.about,
        exp.mem >> 20,
        step.workload,
        step.cmdline,
        plan.reps,
        sweep.dir(sweep.points[0]),
    );
    let configs = &plan.configs;
    let label = sweep.label();
    for (i, phase) in sweep.phases().enumerate() {
        let heading = if i == 0 {
            format!("Time against the {axis}")
        } else {
            format!("`{phase}` against the {axis}")
        };
        let _ = writeln!(s, "## {heading}\n\nThe `{phase}` phase in ms, median (min–max) of the runs that finished it:\n");
        let head = [label.clone()].into_iter();
        let mut t = Table::new(head.chain(configs.iter().map(|c| c.name.to_owned())));
        for p in points {
            let mut row = vec![sweep.x(p.at).to_string()];
            row.extend(
                configs
                    .iter()
                    .map(|c| spread_text(times(p, c.name, phase), &sig)),
            );
            t.row(row);
        }
        s.push_str(&t.markdown());
        s.push('\n');
    }
    let others: Vec<&&Config> = configs.iter().filter(|c| c.name != reference).collect();
    let _ = writeln!(s, "## Against {reference}\n\nThe ratio of the `{phase}` medians above (above 1: slower than `{reference}`); the last row is the largest over the sweep.\n");
    let head = [label.clone()].into_iter();
    let mut t = Table::new(head.chain(others.iter().map(|c| c.name.to_owned())));
    let ratio = |p: &Point, c: &str| match (median(p, c, phase), median(p, reference, phase)) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    let text = |r: Option<f64>| r.map_or("–".into(), |r| format!("{r:.2}"));
    for p in points {
        let mut row = vec![sweep.x(p.at).to_string()];
        row.extend(others.iter().map(|c| text(ratio(p, c.name))));
        t.row(row);
    }
    let mut largest = vec!["largest".to_owned()];
    for c in &others {
        let most = points
            .iter()
            .filter_map(|p| ratio(p, c.name))
            .reduce(f64::max);
        largest.push(text(most));
    }
    t.row(largest);
    s.push_str(&t.markdown());
    false_reads(&mut s, plan, sweep, points);
    if sweep.disk_ops {
        disk_ops(&mut s, plan, sweep, points);
    }
    if step.guest_swap_mb.is_some() {
        super::holes::tables(&mut s, plan, sweep, points);
    }
    let failed = points.iter().flat_map(|p| {
        p.records
            .iter()
            .filter(|r| !r.result.phases.iter().any(|x| x.name == phase))
            .map(move |r| {
                let (x, c, rep) = (sweep.x(p.at), r.config.name, r.rep);
                let at = match sweep.along {
                    Along::Limit => format!("{x} MiB"),
                    Along::Arg(key) => format!("{key}={x}"),
                };
                format!(
                    "{c} at {at}, rep {rep}: {} ({})",
                    r.result.status.as_str(),
                    r.result.reason
                )
            })
    });
    crate::report::incomplete(&mut s, failed);
    crate::report::environment(&mut s, env);
    s
}

/// The false reads the Preventer removed at each limit (VSwapper Fig. 12b), for the
/// configurations it runs in; nothing when it runs in none.
fn false_reads(s: &mut String, plan: &PhasesPlan, sweep: &Sweep, points: &[Point]) {
    let preventing: Vec<&str> = plan
        .configs
        .iter()
        .filter(|c| c.prevents())
        .map(|c| c.name)
        .collect();
    if preventing.is_empty() {
        return;
    }
    let _ = writeln!(s, "\n## False reads removed\n\nWrites to a page the host had reclaimed that the False Reads Preventer completed with no read, so the page's old content was never read back (VSwapper's false reads, removed): the median of the runs' counts (`preventions` at the end of the run); the last row is the largest over the sweep.\n");
    let head = [sweep.label()].into_iter();
    let mut t = Table::new(head.chain(preventing.iter().map(|c| (*c).to_owned())));
    let text = |n: Option<f64>| n.map_or("–".into(), |n| format!("{n:.0}"));
    for p in points {
        let mut row = vec![sweep.x(p.at).to_string()];
        row.extend(preventing.iter().map(|c| text(removed_median(p, c))));
        t.row(row);
    }
    let mut largest = vec!["largest".to_owned()];
    for c in &preventing {
        let most = points.iter().filter_map(|p| removed_median(p, c));
        largest.push(text(most.reduce(f64::max)));
    }
    t.row(largest);
    s.push_str(&t.markdown());
}

/// The host disk's requests in the sweep's phase at each point, and the writes among them
/// (VSwapper Fig. 11a–b): a table each.
fn disk_ops(s: &mut String, plan: &PhasesPlan, sweep: &Sweep, points: &[Point]) {
    let phase = sweep.phase;
    let _ = writeln!(s, "\n## Disk operations\n\nRequests the host's disk completed during the `{phase}` phase, reads and writes: the median of the runs that finished the phase. They are read from the disk's counters in sysfs, so QEMU's are counted as memvisor's; every image and swap file is opened `O_DIRECT`, so a request counts when it is made.\n");
    disk_table(s, plan, sweep, points, |(all, _)| all);
    let _ = writeln!(
        s,
        "\n## Disk writes\n\nThe writes among them, the median likewise.\n"
    );
    disk_table(s, plan, sweep, points, |(_, writes)| writes);
}

/// A table of `pick` of [`disk_ops_median`] per point and configuration.
fn disk_table(
    s: &mut String,
    plan: &PhasesPlan,
    sweep: &Sweep,
    points: &[Point],
    pick: fn((f64, f64)) -> f64,
) {
    let head = [sweep.label()].into_iter();
    let mut t = Table::new(head.chain(plan.configs.iter().map(|c| c.name.to_owned())));
    for p in points {
        let mut row = vec![sweep.x(p.at).to_string()];
        row.extend(plan.configs.iter().map(|c| {
            disk_ops_median(p, c.name, sweep.phase)
                .map_or("–".into(), |o| format!("{:.0}", pick(o)))
        }));
        t.row(row);
    }
    s.push_str(&t.markdown());
}

/// `EXPERIMENT.svg` and `.png`: each phase's median time against the sweep's axis, a panel per
/// phase and a line per configuration.
pub fn plot(path: &Path, plan: &PhasesPlan, sweep: &Sweep, points: &[Point]) -> Result<(), String> {
    let most = sweep
        .points
        .iter()
        .map(|&at| sweep.x(at))
        .max()
        .unwrap_or(0);
    let x = Axis::linear(0.0, most as f64 * 1.05);
    let x_title = match sweep.along {
        Along::Limit => "limit (MiB)".to_owned(),
        Along::Arg(key) => format!("{key} (MiB)"),
    };
    let mut panels = Vec::new();
    for phase in sweep.phases() {
        let lines: Vec<(&str, Vec<(f64, f64)>)> = plan
            .configs
            .iter()
            .map(|c| {
                let pts = points.iter().filter_map(|p| {
                    median(p, c.name, phase).map(|ms| (sweep.x(p.at) as f64, ms / 1e3))
                });
                (c.name, pts.collect())
            })
            .collect();
        let times = lines.iter().flat_map(|l| l.1.iter().map(|p| p.1));
        let top = times.fold(0.0f64, f64::max);
        if top <= 0.0 {
            return Err(format!("no run finished its {phase} phase"));
        }
        let title = match sweep.along {
            Along::Limit => format!(
                "{}: {phase} against the memory the guest has",
                plan.exp.name
            ),
            Along::Arg(key) => format!("{}: {phase} against {key}", plan.exp.name),
        };
        let mut panel = Panel::new(
            title,
            &x_title,
            "seconds (median)",
            x,
            Axis::linear(0.0, top * 1.1),
        );
        panel.legend = Legend::UpperRight;
        for (i, (name, pts)) in lines.into_iter().enumerate() {
            if !pts.is_empty() {
                panel.lines.push(Line::new(name, color(i), 2, pts).marked());
            }
        }
        panels.push(panel);
    }
    // Below it, for the configurations that run the Preventer, the false reads it removed at
    // each limit (VSwapper's Fig. 12b).
    let removed: Vec<Line> = plan
        .configs
        .iter()
        .enumerate()
        .filter(|(_, c)| c.prevents())
        .map(|(i, c)| {
            let at = |p: &Point| Some((sweep.x(p.at) as f64, removed_median(p, c.name)?));
            Line::new(c.name, color(i), 2, points.iter().filter_map(at).collect()).marked()
        })
        .filter(|l| !l.points.is_empty())
        .collect();
    if !removed.is_empty() {
        panels.push(count_panel(
            format!("{}: false reads removed by the Preventer", plan.exp.name),
            &x_title,
            "writes completed with no read (median)",
            x,
            removed,
        ));
    }
    if sweep.disk_ops {
        let series = [("disk operations", 0), ("disk writes", 1)];
        for (what, which) in series {
            let lines: Vec<Line> = plan
                .configs
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let at = |p: &Point| {
                        let (all, writes) = disk_ops_median(p, c.name, sweep.phase)?;
                        Some((sweep.x(p.at) as f64, [all, writes][which]))
                    };
                    Line::new(c.name, color(i), 2, points.iter().filter_map(at).collect()).marked()
                })
                .filter(|l| !l.points.is_empty())
                .collect();
            if !lines.is_empty() {
                panels.push(count_panel(
                    format!("{}: {what} during {}", plan.exp.name, sweep.phase),
                    &x_title,
                    "requests (median)",
                    x,
                    lines,
                ));
            }
        }
    }
    let rows = panels.len();
    Figure::column((1000, 620 * u32::try_from(rows).unwrap_or(1)), panels).write(path)
}

/// A panel of counts (whole numbers from 0 up) against the swept axis.
fn count_panel(title: String, x_title: &str, y_title: &str, x: Axis, lines: Vec<Line>) -> Panel {
    let most = ys(&lines).fold(1.0f64, f64::max) * 1.1;
    let mut panel = Panel::new(title, x_title, y_title, x, Axis::linear(0.0, most));
    panel.legend = Legend::UpperRight;
    panel.y_decimals = Some(0);
    panel.lines = lines;
    panel
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::Scale;
    use crate::families::phases::configs::find;
    use crate::families::phases::experiment::Measure;
    use crate::families::phases::vm::result::{Phase, RunResult, RunStatus};

    fn run(config: &str, rep: u32, ms: Option<f64>) -> Record {
        let phases = ms.map_or_else(Vec::new, |ms| {
            vec![Phase {
                name: "compress".into(),
                guest_ms: Some(ms),
                disk_ops: Some(DiskOps {
                    reads: 100 + u64::from(rep),
                    writes: 20,
                }),
                ..Phase::default()
            }]
        });
        let status = if ms.is_some() {
            RunStatus::Ok
        } else {
            RunStatus::Killed
        };
        Record {
            step: 0,
            config: find(config).unwrap(),
            rep,
            result: RunResult {
                status,
                phases,
                reason: "memory cgroup OOM kill".into(),
                ..RunResult::default()
            },
        }
    }

    /// A run of `memvisor-vswapper-always` whose Preventer completed `n` writes.
    fn preventing(n: u64) -> Record {
        let mut r = run("memvisor-vswapper-always", 1, Some(2000.0));
        let mut stats = memvisor_api::VmStats::default();
        let mut pager = memvisor_api::PagerStats::default();
        pager.counters.preventer_completed = n;
        stats.pager = Some(pager);
        r.result.final_stats = Some(stats);
        r
    }

    /// The sweep's report: the median time of its phase per limit and configuration, the ratios
    /// to the reference with the largest over the limits, the runs that never reached the
    /// phase; one CSV row per run.
    #[test]
    fn times_ratios_and_the_largest() {
        let exp = crate::families::phases::catalog::find("compress", Scale::Quick).unwrap();
        let Measure::Sweep(sweep) = exp.measure.clone() else {
            panic!("compress sweeps the limit")
        };
        let configs = vec![
            find("memvisor-balloon").unwrap(),
            find("memvisor-baseline").unwrap(),
            find("memvisor-vswapper-always").unwrap(),
        ];
        let plan = PhasesPlan {
            exp,
            reps: 2,
            configs,
            reference: "memvisor-balloon",
        };
        let points = vec![
            Point {
                at: 48 << 20,
                records: vec![
                    run("memvisor-balloon", 1, Some(1000.0)),
                    run("memvisor-balloon", 2, Some(1200.0)),
                    run("memvisor-baseline", 1, Some(1500.0)),
                    run("memvisor-baseline", 2, None),
                    preventing(300),
                ],
            },
            Point {
                at: 128 << 20,
                records: vec![
                    run("memvisor-balloon", 1, Some(1000.0)),
                    run("memvisor-baseline", 1, Some(1100.0)),
                    preventing(100),
                ],
            },
        ];
        let md = markdown(&plan, &sweep, &points, &[]);
        for want in [
            "| 48 | 1100 (1000–1200) | 1500 | 2000 |",
            "| 128 | 1000 | 1100 | 2000 |",
            "| 48 | 1.36 | 1.82 |",
            "| 128 | 1.10 | 2.00 |",
            "| largest | 1.36 | 2.00 |",
            "## False reads removed",
            "| limit MiB | memvisor-vswapper-always |",
            "| 48 | 300 |",
            "| 128 | 100 |",
            "| largest | 300 |",
            "- memvisor-baseline at 48 MiB, rep 2: killed (memory cgroup OOM kill)",
            "`limit-48m/report.md`",
            "## Disk operations",
            "| 48 | 122 | 121 | 121 |",
            "| 128 | 121 | 121 | 121 |",
            "## Disk writes",
            "| 48 | 20 | 20 | 20 |",
        ] {
            assert!(md.contains(want), "{want}: {md}");
        }
        let csv = csv("compress", &sweep, &points);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(
            lines[0],
            "experiment,limit_mib,config,rep,status,compress_ms,false_reads_removed,disk_reads,disk_writes,reason"
        );
        assert_eq!(lines.len(), 9);
        assert!(
            lines[4].starts_with("compress,48,memvisor-baseline,2,killed,,,"),
            "{csv}"
        );
        assert_eq!(
            lines[5],
            "compress,48,memvisor-vswapper-always,1,ok,2000.000,300,101,20,memory cgroup OOM kill"
        );
    }
}
