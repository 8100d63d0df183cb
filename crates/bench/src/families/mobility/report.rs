//! The outputs of `memvisor bench mobility`: `results.csv` (one row per measure of a run),
//! `report.md` (restore against start, migrations against each other and against the VM that
//! never stopped, memvisor beside QEMU, each median (min–max) over the repetitions) and
//! `mobility.svg` (the time to the first instruction against guest size).

use std::fmt::Write as _;
use std::path::Path;

use super::experiment::{config, Cell, MobilityPlan, WORK_MB};
use super::run::MobRun;
use crate::report::figure::{color, Axis, Figure, Legend, Line, Panel};
use crate::report::numbers::{median, spread_text};
use crate::report::table::Table;

/// The CSV header.
pub const CSV_HEADER: &str =
    "experiment,config,size_bytes,ws_pct,ws_mb,rep,status,measure,value,unit,reason";

/// Every measure a run may have, with its unit.
pub const MEASURES: [(&str, &str); 13] = [
    ("first instruction", "ms"),
    ("work", "ms"),
    ("round 2", "ms"),
    ("save", "ms"),
    ("saved MiB", "MiB"),
    ("touched MiB", "MiB"),
    ("downtime", "ms"),
    ("downtime unknown", ""),
    ("stopped", "ms"),
    ("total", "ms"),
    ("sent MiB", "MiB"),
    ("requested pages", "pages"),
    ("resent pages", "pages"),
];

/// `results.csv`: one row per measure of a run (one row without a measure for a failed run).
pub fn csv(runs: &[MobRun]) -> String {
    let mut t = Table::new(CSV_HEADER.split(','));
    for r in runs {
        let row = |measure: &str, value: String, unit: &str| {
            crate::cells![
                "mobility",
                r.config,
                r.cell.size,
                r.cell.ws_pct,
                r.cell.ws_mb(),
                r.rep,
                r.status.name(),
                measure,
                value,
                unit,
                r.error,
            ]
        };
        if r.values.is_empty() {
            t.row(row("", String::new(), ""));
        }
        for (name, v) in &r.values {
            let unit = MEASURES.iter().find(|m| m.0 == *name).map_or("", |m| m.1);
            t.row(row(name, format!("{v:.3}"), unit));
        }
    }
    t.csv()
}

/// The values of measure `m` in the completed runs of `config` at `cell`.
fn values(runs: &[MobRun], config: &str, cell: Cell, m: &str) -> Vec<f64> {
    runs.iter()
        .filter(|r| r.ok() && r.config == config && r.cell == cell)
        .filter_map(|r| r.get(m))
        .collect()
}

/// Per repetition at `cell`, measure `m` of `a` over measure `n` of `b` in the same
/// repetition, where both completed.
pub fn paired(runs: &[MobRun], cell: Cell, a: (&str, &str), b: (&str, &str)) -> Vec<f64> {
    let of = |c: &str, m: &str, rep: u32| {
        runs.iter()
            .find(|r| r.ok() && r.config == c && r.cell == cell && r.rep == rep)
            .and_then(|r| r.get(m))
    };
    let mut reps: Vec<u32> = runs.iter().map(|r| r.rep).collect();
    reps.sort_unstable();
    reps.dedup();
    reps.into_iter()
        .filter_map(|rep| match (of(a.0, a.1, rep), of(b.0, b.1, rep)) {
            (Some(x), Some(y)) if y > 0.0 => Some(x / y),
            _ => None,
        })
        .collect()
}

fn ms_text(v: Vec<f64>) -> String {
    spread_text(v, &|x| {
        if x < 100.0 {
            format!("{x:.1}")
        } else {
            format!("{x:.0}")
        }
    })
}

fn ratio_text(v: Vec<f64>) -> String {
    spread_text(v, &|x| format!("{x:.2}"))
}

fn has(plan: &MobilityPlan, name: &str) -> bool {
    plan.configs.iter().any(|c| c.name == name)
}

/// The restore table: the time to the first instruction against an empty start, and the
/// work after against the VM that never stopped.
fn restores(s: &mut String, plan: &MobilityPlan, runs: &[MobRun]) {
    s.push_str("\n## Restore\n\nTime to the first instruction: from starting the process to vCPU 0's first `KVM_RUN` (memvisor's log line, on `CLOCK_MONOTONIC` read by the harness just before it started the process); for QEMU from starting it to the answer to `cont` after `-incoming exec:cat FILE` read the file. The goal: at most max(10 ms, 1.2 × an empty start of that size). Work: host time from the restored VM's start to the guest's `done`, against the never-stopped VM's from its first round's line to `done` (the same rounds). Save: memvisor's `paused_ms` of the snapshot; QEMU's `total-time` of the migration to the file (its VM stopped first). Snapshot: the memory file's bytes on disk (holes take none) / QEMU's file.\n\n");
    let mut t = Table::new(
        "guest | working set | empty start (ms) | restore to first instruction (ms) | goal (ms) | met | QEMU load to running (ms) | restored work / never stopped | QEMU's | save (ms) | QEMU save (ms) | snapshot MiB | QEMU's MiB"
            .split(" | "),
    );
    for &cell in &plan.cells {
        let start = values(runs, "memvisor-start", cell, "first instruction");
        let restore = values(runs, "memvisor-restore", cell, "first instruction");
        let goal = median(start.clone()).map(|m| (1.2 * m).max(10.0));
        let met = match (goal, restore.iter().copied().reduce(f64::max)) {
            (Some(g), Some(worst)) if worst <= g => "yes".to_owned(),
            (Some(g), Some(_)) => {
                let over = restore.iter().filter(|&&v| v > g).count();
                format!("no ({over} of {} over)", restore.len())
            }
            _ => "–".to_owned(),
        };
        t.row(vec![
            format!("{} MiB", cell.size >> 20),
            format!("{} % ({} MiB)", cell.ws_pct, cell.ws_mb()),
            ms_text(start),
            ms_text(restore),
            goal.map_or("–".into(), |g| format!("{g:.1}")),
            met,
            ms_text(values(runs, "qemu-restore", cell, "first instruction")),
            ratio_text(paired(
                runs,
                cell,
                ("memvisor-restore", "work"),
                ("memvisor-start", "work"),
            )),
            ratio_text(paired(
                runs,
                cell,
                ("qemu-restore", "work"),
                ("qemu-start", "work"),
            )),
            ms_text(values(runs, "memvisor-restore", cell, "save")),
            ms_text(values(runs, "qemu-restore", cell, "save")),
            ms_text(values(runs, "memvisor-restore", cell, "saved MiB")),
            ms_text(values(runs, "qemu-restore", cell, "saved MiB")),
        ]);
    }
    s.push_str(&t.markdown());
}

/// The migrations' table.
fn migrations(s: &mut String, plan: &MobilityPlan, runs: &[MobRun]) {
    s.push_str("\n## Migration on localhost\n\nDowntime: memvisor's `downtime_ms` (the vCPUs stopped, from the pause on the source to the go-ahead; whole ms), QEMU's `downtime` (left out when QEMU 7.2's post-copy reports one longer than the whole migration, which it sometimes does; the column says in how many runs). To the guest running: memvisor's vCPUs stopped from the pause on the source to the destination's first `KVM_RUN` (both VMMs' log lines, on this host's clock): the downtime and the destination's wake-up, which on this 2-CPU host waits for a CPU while the pages start to flow. Total: `total_ms` (from the pause to the last acknowledgement; pre-copy rounds come before the pause, so for `memvisor-precopy` the rounds are not in it) / QEMU's `total-time` (from the `migrate` command). Sent: bytes written to the connection / QEMU's `ram.transferred` (RAM only). Touched: memvisor's pages with content at the switch (`copied_pages`, the guest's working set, its kernel's and the kit's pages); sent / touched against the goal of 1.05 (QEMU's bytes over memvisor's count at the same cell). Work: the first round's line on the source to `done` on the destination, over the never-stopped VM's (the same VMM): the guest's slowdown while its pages follow, and after. (The guest's own time of the round it was in when it moved, `round 2` in results.csv, is on a clock that goes on while the VM is stopped: it includes the downtime as the guest sees it.)\n\n");
    let mut t = Table::new(
        "guest | working set | configuration | downtime (ms) | to the guest running (ms) | total (ms) | sent MiB | touched MiB | sent / touched | work / never stopped | pages asked for"
            .split(" | "),
    );
    for &cell in &plan.cells {
        let touched = median(
            ["memvisor-postcopy", "memvisor-precopy"]
                .iter()
                .flat_map(|c| values(runs, c, cell, "touched MiB"))
                .collect(),
        );
        for c in plan
            .configs
            .iter()
            .filter(|c| matches!(c.action, super::experiment::Action::Migrate { .. }))
        {
            let base = if c.qemu {
                "qemu-start"
            } else {
                "memvisor-start"
            };
            let own: Vec<(f64, f64)> = runs
                .iter()
                .filter(|r| r.ok() && r.config == c.name && r.cell == cell)
                .filter_map(|r| {
                    let t = r.get("touched MiB").or(touched)?;
                    Some((r.get("sent MiB")?, t))
                })
                .collect();
            t.row(vec![
                format!("{} MiB", cell.size >> 20),
                format!("{} %", cell.ws_pct),
                c.name.to_owned(),
                {
                    let unknown = values(runs, c.name, cell, "downtime unknown").len();
                    let d = ms_text(values(runs, c.name, cell, "downtime"));
                    if unknown > 0 {
                        format!("{d} ({unknown} unknown)")
                    } else {
                        d
                    }
                },
                ms_text(values(runs, c.name, cell, "stopped")),
                ms_text(values(runs, c.name, cell, "total")),
                ms_text(values(runs, c.name, cell, "sent MiB")),
                ms_text(values(runs, c.name, cell, "touched MiB")),
                ratio_text(own.iter().map(|(s, t)| s / t).collect()),
                ratio_text(paired(runs, cell, (c.name, "work"), (base, "work"))),
                ms_text(values(runs, c.name, cell, "requested pages")),
            ]);
        }
    }
    s.push_str(&t.markdown());
}

/// `report.md`; `load` the host's load average when the runs began and ended.
pub fn markdown(
    plan: &MobilityPlan,
    runs: &[MobRun],
    load: (String, String),
    env: &[(String, String)],
) -> String {
    let mut s = crate::families::figures::heading("mobility");
    let _ = writeln!(
        s,
        "What moving a VM costs: restoring it from a snapshot (`memvisor run --restore`, memory served lazily by the pager) and migrating it live on localhost (post-copy, with and without pre-copy rounds), beside QEMU microvm doing the same with the same guest. The guest kit's `alloc` touches its working set in rounds (each a fresh task allocating and zeroing it, every fresh page checked to read zero); the VM moves when the first round ends, and the rest, as many rounds as touch {} GiB, is its work. {} repetition(s), the configurations interleaved within each guest size and working set; each value is the median (min–max) of the repetitions that completed.\n",
        WORK_MB >> 10,
        plan.reps
    );
    let _ = writeln!(
        s,
        "Host load average (1, 5, 15 min): {} when the runs began, {} when they ended.\n",
        load.0, load.1
    );
    let _ = writeln!(s, "## Configurations\n");
    for c in &plan.configs {
        let _ = writeln!(s, "- `{}`: {}", c.name, c.about);
    }
    if has(plan, "memvisor-restore") || has(plan, "qemu-restore") {
        restores(&mut s, plan, runs);
    }
    if plan
        .configs
        .iter()
        .any(|c| matches!(c.action, super::experiment::Action::Migrate { .. }))
    {
        migrations(&mut s, plan, runs);
    }
    let failed = runs.iter().filter(|r| !r.ok());
    let why = |r: &MobRun| format!("{} {} rep {}: {}", r.config, r.cell.name(), r.rep, r.error);
    crate::report::incomplete(&mut s, failed.map(why));
    crate::report::environment(&mut s, env);
    s
}

/// `mobility.svg` and `.png`: the time to the first instruction against guest size, the
/// median of each configuration and working set, on a log scale.
pub fn plot(path: &Path, plan: &MobilityPlan, runs: &[MobRun]) -> Result<(), String> {
    let mut lines = Vec::new();
    let (mut lo, mut hi) = (f64::MAX, 0.0f64);
    let mut ws: Vec<u32> = plan.cells.iter().map(|c| c.ws_pct).collect();
    ws.sort_unstable();
    ws.dedup();
    for name in ["memvisor-start", "memvisor-restore", "qemu-restore"] {
        if !has(plan, name) {
            continue;
        }
        for &w in &ws {
            let pts: Vec<(f64, f64)> = plan
                .cells
                .iter()
                .filter(|c| c.ws_pct == w)
                .filter_map(|&c| {
                    let m = median(values(runs, name, c, "first instruction"))?;
                    Some(((c.size >> 20) as f64, m))
                })
                .collect();
            for p in &pts {
                lo = lo.min(p.1);
                hi = hi.max(p.1);
            }
            if !pts.is_empty() {
                let label = format!("{name}, ws {w} %");
                let mut l = Line::new(label, color(lines.len()), 2, pts).marked();
                if config(name).action == super::experiment::Action::Start {
                    l = l.dashed();
                }
                lines.push(l);
            }
        }
    }
    if lines.is_empty() {
        return Err("no run measured a first instruction".into());
    }
    let xmax = plan
        .cells
        .iter()
        .map(|c| (c.size >> 20) as f64)
        .fold(0.0, f64::max);
    let mut panel = Panel::new(
        "mobility: start and restore, process start to the guest's first instruction",
        "guest MiB",
        "ms (log scale)",
        Axis::linear(0.0, xmax * 1.1),
        Axis::log(lo * 0.8, hi * 1.25),
    );
    panel.lines = lines;
    panel.legend = Legend::Margin(260);
    Figure::one((1100, 560), panel).write(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::families::mobility::experiment::CONFIGS;
    use crate::harness::MeasureStatus;

    fn run(name: &'static str, rep: u32, m: &'static str, v: f64) -> MobRun {
        let cell = Cell {
            size: 256 << 20,
            ws_pct: 10,
        };
        MobRun {
            values: vec![(m, v)],
            ..MobRun::new(config(name), cell, rep)
        }
    }

    #[test]
    fn the_report_pairs_repetitions_and_judges_the_goal() {
        let cell = Cell {
            size: 256 << 20,
            ws_pct: 10,
        };
        let runs = vec![
            run("memvisor-start", 1, "first instruction", 20.0),
            run("memvisor-restore", 1, "first instruction", 22.0),
            run("memvisor-start", 2, "first instruction", 30.0),
            run("memvisor-restore", 2, "first instruction", 40.0),
            MobRun {
                status: MeasureStatus::Failed,
                error: "timed out".into(),
                ..run("memvisor-restore", 3, "first instruction", 1.0)
            },
        ];
        let r = paired(
            &runs,
            cell,
            ("memvisor-restore", "first instruction"),
            ("memvisor-start", "first instruction"),
        );
        assert_eq!(r, vec![1.1, 40.0 / 30.0]);
        let plan = MobilityPlan {
            configs: CONFIGS.iter().collect(),
            cells: vec![cell],
            reps: 3,
        };
        let md = markdown(&plan, &runs, ("1".into(), "2".into()), &[]);
        // Goal: 1.2 x the empty start's median 25 ms = 30 ms; one restore took 40.
        assert!(
            md.contains("| 256 MiB | 10 % (25 MiB) | 25.0 (20.0–30.0) | 31.0 (22.0–40.0) | 30.0 | no (1 of 2 over) |"),
            "{md}"
        );
        assert!(md.contains("memvisor-restore 256 MiB, ws 10 % rep 3: timed out"));
        let csv = csv(&runs);
        assert_eq!(csv.lines().count(), 1 + runs.len());
        assert!(csv
            .contains("mobility,memvisor-start,268435456,10,25,1,ok,first instruction,20.000,ms,"));
    }
}
