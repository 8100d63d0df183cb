//! The outputs of `memvisor bench confinement`: `results.csv` (one row per measure of a run),
//! `report.md` (per filtered configuration and measure: both sides' medians with min–max, the
//! ratio of each repetition's pair, and the unfiltered side's own spread; then what the filters
//! add to each call of an exit and of a fault, and their share of its round trip) and
//! `confinement.svg` (those ratios, repetition by repetition).

use std::fmt::Write as _;
use std::path::Path;

use super::experiment::{Config, ConfinementPlan, Path as CallPath, CALLS, CONFIGS, MEASURES};
use super::run::ConfRun;
use crate::report::figure::{color, Axis, Figure, Legend, Line, Panel};
use crate::report::numbers::{spread, spread_text};
use crate::report::table::Table;

/// The CSV header.
pub const CSV_HEADER: &str = "experiment,config,rep,status,seccomp,measure,value,unit,reason";

fn config(name: &str) -> &'static Config {
    CONFIGS
        .iter()
        .find(|c| c.name == name)
        .expect("runs are of known configurations")
}

/// `results.csv`: one row per measure of a run (one row without a measure for a failed run).
pub fn csv(runs: &[ConfRun]) -> String {
    let mut t = Table::new(CSV_HEADER.split(','));
    for r in runs {
        let c = config(r.config);
        let row = |measure: &str, value: String, unit: &str| {
            crate::cells![
                "confinement",
                r.config,
                r.rep,
                r.status.name(),
                if c.seccomp { "on" } else { "off" },
                measure,
                value,
                unit,
                r.error,
            ]
        };
        if r.values.is_empty() && r.calls.is_empty() {
            t.row(row("", String::new(), ""));
        }
        for (name, v) in &r.values {
            let unit = MEASURES.iter().find(|m| m.1 == *name).map_or("", |m| m.2);
            t.row(row(name, format!("{v}"), unit));
        }
        for c in &r.calls {
            let name = c.call.syscall.name();
            t.row(row(
                &format!("{name} unfiltered"),
                format!("{:.1}", c.unfiltered_ns),
                "ns",
            ));
            t.row(row(
                &format!("{name} filtered"),
                format!("{:.1}", c.filtered_ns),
                "ns",
            ));
        }
    }
    t.csv()
}

/// Per repetition, the ratio of measure `m` of `confined` over its twin's in the same
/// repetition: `(rep, ratio)` for the repetitions where both completed.
pub fn ratios(runs: &[ConfRun], confined: &Config, m: &str) -> Vec<(u32, f64)> {
    let Some(twin) = confined.against else {
        return Vec::new();
    };
    let of = |name: &str, rep: u32| {
        runs.iter()
            .find(|r| r.ok() && r.config == name && r.rep == rep)
            .and_then(|r| r.get(m))
    };
    let mut reps: Vec<u32> = runs.iter().map(|r| r.rep).collect();
    reps.dedup();
    reps.into_iter()
        .filter_map(|rep| match (of(confined.name, rep), of(twin, rep)) {
            (Some(a), Some(b)) if b > 0.0 => Some((rep, a / b)),
            _ => None,
        })
        .collect()
}

/// The values of measure `m` in the completed runs of `config`.
fn values(runs: &[ConfRun], config: &str, m: &str) -> Vec<f64> {
    runs.iter()
        .filter(|r| r.ok() && r.config == config)
        .filter_map(|r| r.get(m))
        .collect()
}

/// `(max - min) / min` of `v`, the spread of a configuration against itself.
fn own_spread(v: &[f64]) -> Option<f64> {
    let (_, lo, hi) = spread(v.to_vec())?;
    (lo > 0.0).then(|| (hi - lo) / lo)
}

/// What the ratios say, against 1 % and against the unconfined side's own spread.
fn verdict(r: &[f64], own: Option<f64>) -> String {
    let Some((med, lo, hi)) = spread(r.to_vec()) else {
        return "–".into();
    };
    let pct = (med - 1.0) * 100.0;
    if lo >= 0.99 && hi <= 1.01 {
        return format!("within 1 % ({pct:+.1} %)");
    }
    match own {
        Some(s) if (med - 1.0).abs() <= s => format!(
            "{pct:+.1} %: within the noise ({:.1} % spread), which is larger than 1 %",
            s * 100.0
        ),
        _ if lo > 1.0 => format!("slower by {pct:.1} %, beyond the noise"),
        _ if hi < 1.0 => format!("faster by {:.1} %, beyond the noise", -pct),
        _ => format!("{pct:+.1} %: the ratios straddle 1"),
    }
}

/// `report.md`; `load` the host's load average when the runs began and ended.
pub fn markdown(
    plan: &ConfinementPlan,
    runs: &[ConfRun],
    load: (String, String),
    env: &[(String, String)],
) -> String {
    let mut s = crate::families::figures::heading("confinement");
    let _ = writeln!(
        s,
        "What the seccomp filters cost where they fall: on the round trip of a guest exit (a port write the vCPU thread returns from `KVM_RUN` for) and of a pager fault (a first touch the pager's fault thread serves through the userfaultfd), against `--seccomp off`; and on each call of those two paths, timed without and with its thread's filters. Guest RAM {} MiB, the pager's limit equal to it. {} repetition(s), the configurations interleaved. Each ratio is a repetition's filtered value over its twin's in the same repetition; below 1 the filtered run was faster. The noise is the unfiltered side's own spread across repetitions, (max − min) / min. The jail's cost is `bench overhead`'s (`memvisor-jailed` against `memvisor-unconfined`).\n",
        plan.sizes.mem >> 20,
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
    let _ = writeln!(s, "\n## Ratios\n");
    let mut t = Table::new(
        "filtered | against | measure | filtered, median (min–max) | unfiltered, median (min–max) | ratio, median (min–max) | noise | verdict"
            .split(" | "),
    );
    for c in plan.configs.iter().filter(|c| c.against.is_some()) {
        let twin = c.against.unwrap_or_default();
        if !plan.configs.iter().any(|o| o.name == twin) {
            continue;
        }
        for m in MEASURES.iter().filter(|m| m.0 == c.workload) {
            let unit = m.2;
            let num = |v: f64| match unit {
                "ms" => format!("{v:.1} {unit}"),
                _ => format!("{v:.0} {unit}"),
            };
            let base = values(runs, twin, m.1);
            let own = own_spread(&base);
            let r: Vec<f64> = ratios(runs, c, m.1).into_iter().map(|x| x.1).collect();
            t.row(vec![
                c.name.to_owned(),
                twin.to_owned(),
                m.1.to_owned(),
                spread_text(values(runs, c.name, m.1), &num),
                spread_text(base, &num),
                spread_text(r.clone(), &|v| format!("{v:.3}")),
                own.map_or("–".into(), |x| format!("{:.1} %", x * 100.0)),
                verdict(&r, own),
            ]);
        }
    }
    s.push_str(&t.markdown());
    calls(&mut s, runs);
    let failed = runs.iter().filter(|r| !r.ok());
    let why = |r: &ConfRun| format!("{} rep {}: {}", r.config, r.rep, r.error);
    crate::report::incomplete(&mut s, failed.map(why));
    crate::report::environment(&mut s, env);
    s
}

/// What the filters add to each call of an exit and of a fault (`filter-calls`: each call's
/// fastest batch, median and min–max over repetitions), and the sum over a path's calls against
/// its round trip without filters (`exits-seccomp-off`'s median p50).
fn calls(s: &mut String, runs: &[ConfRun]) {
    let done: Vec<&ConfRun> = runs
        .iter()
        .filter(|r| r.ok() && !r.calls.is_empty())
        .collect();
    if done.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n## Each call, without and with its thread's filters\n\nEach call made on `/dev/null` (answered at once) in batches; a call's time is its fastest batch's mean. The cost is the filtered time less the unfiltered, in the same repetition.\n"
    );
    let of = |i: usize, f: &dyn Fn(&super::filters::CallTimes) -> f64| -> Vec<f64> {
        done.iter().filter_map(|r| r.calls.get(i)).map(f).collect()
    };
    let ns = |v: f64| format!("{v:.0} ns");
    let mut t = Table::new(
        "call | on the path of | thread | unfiltered | filtered | the filters' cost".split(" | "),
    );
    for (i, c) in CALLS.iter().enumerate() {
        t.row(vec![
            format!("`{}`", c.syscall.name()),
            match c.path {
                CallPath::Exit => "an exit".into(),
                CallPath::Fault => "a fault".into(),
            },
            c.thread.name().to_owned(),
            spread_text(of(i, &|x| x.unfiltered_ns), &ns),
            spread_text(of(i, &|x| x.filtered_ns), &ns),
            spread_text(of(i, &|x| x.cost_ns()), &ns),
        ]);
    }
    s.push_str(&t.markdown());
    let mut t = Table::new(
        "per | calls | the filters' cost, median (min–max) | round trip unfiltered, median | share"
            .split(" | "),
    );
    for (path, name, measure) in [
        (CallPath::Exit, "exit", "exit p50"),
        (CallPath::Fault, "fault", "fault p50"),
    ] {
        // Per repetition, the sum of the path's calls' costs.
        let sums: Vec<f64> = done
            .iter()
            .map(|r| {
                r.calls
                    .iter()
                    .filter(|c| c.call.path == path)
                    .map(|c| c.cost_ns())
                    .sum()
            })
            .collect();
        let n = CALLS.iter().filter(|c| c.path == path).count();
        let trip = spread(values(runs, "exits-seccomp-off", measure)).map(|x| x.0);
        let cost = spread(sums.clone()).map(|x| x.0);
        t.row(vec![
            name.to_owned(),
            n.to_string(),
            spread_text(sums, &ns),
            trip.map_or("–".into(), ns),
            match (cost, trip) {
                (Some(c), Some(t)) if t > 0.0 => format!("{:.2} %", c / t * 100.0),
                _ => "–".into(),
            },
        ]);
    }
    let _ = writeln!(s, "\nPer event (the calls counted with `strace -f`: one `KVM_RUN` per exit; one `poll`, one `read` and one `UFFDIO_COPY` per fault):\n");
    s.push_str(&t.markdown());
}

/// `confinement.svg` and `.png`: each confined configuration's ratio per measure, repetition by
/// repetition, around 1, on a log scale.
pub fn plot(path: &Path, plan: &ConfinementPlan, runs: &[ConfRun]) -> Result<(), String> {
    let mut lines = Vec::new();
    let (mut lo, mut hi) = (0.98f64, 1.02f64);
    for c in plan.configs.iter().filter(|c| c.against.is_some()) {
        for m in MEASURES.iter().filter(|m| m.0 == c.workload) {
            let pts: Vec<(f64, f64)> = ratios(runs, c, m.1)
                .into_iter()
                .map(|(rep, x)| (f64::from(rep), x))
                .collect();
            for p in &pts {
                lo = lo.min(p.1);
                hi = hi.max(p.1);
            }
            let name = format!("{}: {}", c.name, m.1);
            lines.push(Line::new(name, color(lines.len()), 2, pts).marked());
        }
    }
    // On a log axis, so that an outlier (a p99 the host's scheduling made) leaves the ratios
    // near 1 readable.
    let mut panel = Panel::new(
        "confinement: confined over unconfined, per repetition",
        "repetition",
        "ratio (1: no cost), log scale",
        Axis::linear(0.5, f64::from(plan.reps) + 0.5),
        Axis::log(lo * 0.95, hi * 1.05),
    );
    panel.x_names = (1..=plan.reps).map(|r| r.to_string()).collect();
    panel.lines = lines;
    panel.legend = Legend::Margin(260);
    panel.y_decimals = Some(3);
    Figure::one((1100, 500), panel).write(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::MeasureStatus;

    fn run(config: &'static str, rep: u32, v: f64) -> ConfRun {
        ConfRun {
            config,
            rep,
            status: MeasureStatus::Ok,
            error: String::new(),
            values: vec![("exit p50", v)],
            calls: Vec::new(),
        }
    }

    #[test]
    fn ratios_pair_runs_of_one_repetition() {
        let runs = vec![
            run("exits-seccomp-on", 1, 102.0),
            run("exits-seccomp-off", 1, 100.0),
            run("exits-seccomp-off", 2, 50.0),
            run("exits-seccomp-on", 2, 49.0),
            ConfRun {
                status: MeasureStatus::Failed,
                ..run("exits-seccomp-on", 3, 1.0)
            },
            run("exits-seccomp-off", 3, 1.0),
        ];
        let on = config("exits-seccomp-on");
        assert_eq!(
            ratios(&runs, on, "exit p50"),
            vec![(1, 1.02), (2, 0.98)],
            "a failed run pairs with nothing"
        );
        assert!(ratios(&runs, config("exits-seccomp-off"), "exit p50").is_empty());
        let csv = csv(&runs);
        assert_eq!(csv.lines().count(), 1 + runs.len());
        assert!(csv.contains("exits-seccomp-on,1,ok,on,exit p50,102,ns,"));
    }

    #[test]
    fn verdicts_weigh_the_noise() {
        assert!(verdict(&[1.002, 0.995, 1.009], Some(0.2)).starts_with("within 1 %"));
        assert!(verdict(&[1.03, 1.02, 1.04], Some(0.1)).contains("within the noise"));
        assert!(verdict(&[1.03, 1.02, 1.04], Some(0.001)).starts_with("slower by 3.0 %"));
        assert!(verdict(&[0.9, 0.95, 0.97], Some(0.01)).starts_with("faster"));
        assert_eq!(verdict(&[], None), "–");
    }
}
