//! The outputs of `memvisor bench recovery` (MemFlex §4.1, Fig. 5(c)) and of its other mixes
//! (`recovery-insert`, `-update`, `-scan`): the `kv` workload's throughput second by second
//! while a memory hog in the same VM pushes it past its limit and after the harness gives the
//! memory back, as `results.csv` (one row per run and second, with that second's 99th
//! percentile latency of the mix's operations as the guest timed it), `report.md` (throughput
//! before the hog, the dip, the recovery time) and the figure (throughput, and the latency as
//! MemFlex Fig. 6 draws it).
//!
//! Clocks: the guest prints `kv: t=Ns ops_s=N` at the end of each second of its run phase,
//! which starts right after its `RESULT ... phase=load` line. The harness starts its own clock
//! when that line arrives and gives the memory back at the experiment's release time on it, so
//! the release falls at the same second of the guest's clock (give or take the console's
//! latency, milliseconds). The hog's start is the guest's own `kv: hog_start t_ms=..` line.

use crate::report::numbers::{self, or_dash, MIB};
use std::fmt::Write as _;
use std::path::Path;

use super::trace::{measure, median_recovery, parse_console, Measures, Recovery, Trace, RECOVERED};
use super::{mix_of, Mix, MIXES};
use crate::families::phases::configs::{Config, GuestSwap, Hv};
use crate::families::phases::experiment::{Experiment, GiveBack};
use crate::families::phases::report::{Meta, Record};
use crate::families::phases::vm::control::log_prefix;
use crate::families::phases::vm::result::RunStatus;
use crate::report::figure::{color, xs, ys, Axis, Figure, Legend, Line, Panel};
use crate::report::numbers::median;
use crate::report::table::{self, Table};
use memvisor_api::{PagerStats, VmStats};

/// One run with what its console said.
pub struct Run<'a> {
    pub rec: &'a Record,
    pub trace: Trace,
}

impl Run<'_> {
    /// When the hog started: its line, or the experiment's `hog_at` without one.
    pub fn hog_s(&self, given_back: &GiveBack) -> f64 {
        let at = given_back.hog_at.as_secs_f64();
        self.trace.hog_start_ms.map_or(at, |ms| ms as f64 / 1e3)
    }

    /// Whether the run completed.
    pub fn ok(&self) -> bool {
        self.rec.result.status == RunStatus::Ok
    }

    pub fn given_back_s(&self) -> Option<f64> {
        self.rec.result.given_back.as_ref()?.on_clock_s()
    }

    pub fn measures(&self, given_back: &GiveBack) -> Measures {
        measure(&self.trace, self.hog_s(given_back), self.given_back_s())
    }

    /// memvisor's `GET /stats` answers on the run phase's clock (seconds).
    pub fn stats_on_clock(&self) -> Vec<(f64, &VmStats)> {
        let r = &self.rec.result;
        let Some(clock) = r.given_back.as_ref().map(|g| g.clock_ms) else {
            return Vec::new();
        };
        r.stats
            .iter()
            .map(|(at, s)| ((at - clock) / 1e3, s))
            .collect()
    }
}

/// The mix `exp` runs.
fn mix(exp: &Experiment) -> &'static Mix {
    mix_of(exp.name).unwrap_or(&MIXES[0])
}

/// Reads every run's console.
pub fn load<'a>(out: &Path, exp: &Experiment, records: &'a [Record]) -> Vec<Run<'a>> {
    let op = mix(exp).op;
    let console = |rec: &Record| {
        let prefix = log_prefix(out, rec.config.name, exp.steps[rec.step].workload, rec.rep);
        let path = prefix.with_extension("console");
        std::fs::read_to_string(path).unwrap_or_default()
    };
    let run = |rec| Run {
        rec,
        trace: parse_console(&console(rec), op),
    };
    records.iter().map(run).collect()
}

/// The CSV header.
pub const CSV_HEADER: &str = "experiment,config,rep,status,t_s,ops_s,period,before_hog_ops_s,hog_start_s,release_s,resident_bytes,swapped_bytes,pool_used_bytes,pool_spilled_pages,pool_overflowed_pages,proactive_pool_pages,proactive_disk_pages,faults_swap,p99_us,reason";

/// The last answer asked for at or before `t` seconds.
fn stats_at<'a>(st: &[(f64, &'a VmStats)], t: f64) -> Option<&'a VmStats> {
    st.iter().rev().find(|(at, _)| *at <= t).map(|x| x.1)
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or(String::new(), |v| v.to_string())
}

/// `results.csv`: a row per second of every run (a run with no seconds gets one row with its
/// status and reason).
pub fn csv(exp: &Experiment, given_back: &GiveBack, runs: &[Run<'_>]) -> String {
    let mut t = Table::new(CSV_HEADER.split(','));
    for run in runs {
        let r = &run.rec.result;
        let (m, hog) = (run.measures(given_back), run.hog_s(given_back));
        let rel = opt(run.given_back_s().map(|x| format!("{x:.3}")));
        let st = run.stats_on_clock();
        let (config, rep) = (run.rec.config.name, run.rec.rep);
        let head = crate::cells![exp.name, config, rep, r.status.as_str()];
        let row = |rest: Vec<String>| [head.clone(), rest, vec![r.reason.clone()]].concat();
        if run.trace.seconds.is_empty() {
            let none = |n| vec![String::new(); n];
            t.row(row([none(5), vec![rel.clone()], none(9)].concat()));
            continue;
        }
        for &(n, ops) in &run.trace.seconds {
            let secs = f64::from(n);
            let period = if secs <= hog {
                "before"
            } else if run.given_back_s().is_none_or(|x| secs - 1.0 < x) {
                "hog"
            } else {
                "released"
            };
            let s = stats_at(&st, secs).and_then(|s| s.pager.as_ref());
            let pool = s.and_then(|p| p.pool);
            t.row(row(crate::cells![
                n,
                ops,
                period,
                opt(m.before.map(|b| format!("{b:.0}"))),
                format!("{hog:.3}"),
                rel,
                opt(s.map(|p| p.pages.resident_pages << 12)),
                opt(s.map(|p| p.pages.swapped_pages << 12)),
                opt(pool.map(|p| p.used_bytes)),
                opt(pool.map(|p| p.spilled_pages)),
                opt(pool.map(|p| p.overflowed_pages)),
                opt(pool.map(|p| p.proactive_pool_pages)),
                opt(pool.map(|p| p.proactive_disk_pages)),
                opt(s.map(|p| p.counters.faults_swap)),
                opt(run.trace.p99_us.iter().find(|x| x.0 == n).map(|x| x.1)),
            ]));
        }
    }
    t.csv()
}

/// Which of the paper's cases a configuration stands for, with what the paper says of its
/// recovery: in numbers under Read (Fig. 5(c)), in words under the other workloads.
fn paper_case(c: &Config, read: bool) -> String {
    let memflex = c.mechanisms.contains(&"proactive");
    let ramdisk = c.guest_swap == GuestSwap::InMemory;
    let case = match (c.hv, c.balloon) {
        _ if memflex => "MemFlex",
        _ if ramdisk => "Ramdisk",
        (Hv::Memvisor, _) if c.mechanisms.contains(&"--pool") => {
            return "(no case: MemFlex without proactive swap-in)".into();
        }
        (Hv::Memvisor, false) => "HDD (the pager's swap file)",
        (_, true) => "HDD (balloon, guest swap disk)",
        (Hv::Qemu, false) => "HDD (host swap)",
    };
    let said = match (memflex, ramdisk, read) {
        (true, _, true) => "about 5 s",
        (true, _, false) => "significantly faster",
        (false, true, true) => "more than 80 s",
        (false, false, true) => "longer than a ramdisk's 80 s",
        (false, _, false) => "very slowly",
    };
    format!("{case}: {said}")
}

/// A configuration's runs with their measures.
type Group<'a> = (&'static Config, Vec<(&'a Run<'a>, Measures)>);

/// Per configuration: the runs' measures.
fn by_config<'a>(
    configs: &[&'static Config],
    given_back: &GiveBack,
    runs: &'a [Run<'a>],
) -> Vec<Group<'a>> {
    let measured = |c: &Config| {
        let mine = runs.iter().filter(|r| r.rec.config.name == c.name);
        mine.map(|r| (r, r.measures(given_back))).collect()
    };
    configs.iter().map(|c| (*c, measured(c))).collect()
}

/// The measures of the runs of `ms` that completed.
fn completed<'m>(ms: &'m [(&Run<'_>, Measures)]) -> impl Iterator<Item = &'m Measures> {
    ms.iter().filter(|(r, _)| r.ok()).map(|(_, m)| m)
}

/// The median recovery of a configuration's runs that completed and were released.
fn config_recovery(ms: &[(&Run<'_>, Measures)]) -> Option<Recovery> {
    median_recovery(&completed(ms).filter_map(|m| m.recovery).collect::<Vec<_>>())
}

/// Whether the project's goal holds: with the pool and proactive swap-in, recovery at least
/// 10 times shorter than fault-driven swap-in from the swap file, and shorter than every QEMU
/// configuration. `None` when a configuration it needs was not run or has no recovery.
pub fn goal(
    proactive: Option<Recovery>,
    pager: Option<Recovery>,
    qemu: &[(&str, Option<Recovery>)],
) -> Option<(bool, String)> {
    let (p, d) = (proactive?, pager?);
    let Recovery::After(pt) = p else {
        let why = format!(
            "memvisor-pool-proactive did not recover within the run ({})",
            p.show()
        );
        return Some((false, why));
    };
    let pt = pt.max(1e-3);
    let ratio = d.bound() / pt;
    let mut all = ratio >= 10.0;
    let at_least = if matches!(d, Recovery::Not(_)) {
        "at least "
    } else {
        ""
    };
    let tenfold = if all { " (≥ 10×)" } else { " (< 10×)" };
    let mut why = vec![format!(
        "memvisor-pager / memvisor-pool-proactive = {at_least}{ratio:.1}×{tenfold}"
    )];
    for (name, q) in qemu {
        // A QEMU run that did not recover took longer than it watched.
        let shorter = q.is_some_and(|q| pt < q.bound());
        all &= shorter;
        why.push(match q {
            Some(q) => format!(
                "{name} {} s: {}",
                q.show(),
                if shorter { "shorter" } else { "not shorter" }
            ),
            None => format!("{name}: no recovery measured"),
        });
    }
    Some((all, why.join("; ")))
}

/// `report.md`.
pub fn markdown(meta: &Meta<'_>, given_back: &GiveBack, runs: &[Run<'_>]) -> String {
    let exp = meta.experiment;
    let mut s = String::new();
    s.push_str(&crate::families::figures::heading(exp.name));
    let _ = writeln!(s, "{}.\n", exp.about);
    let step = &exp.steps[0];
    let (mem, limit, reps) = (exp.mem >> 20, exp.limit.unwrap_or(exp.mem) >> 20, meta.reps);
    let (workload, cmdline, what) = (step.workload, &step.cmdline, mix(exp).what);
    let swap = step.guest_swap_mb.unwrap_or(0);
    let after = given_back.after_phase;
    let (hog, at) = (given_back.hog_at.as_secs(), given_back.at.as_secs());
    let _ = writeln!(s, "Guest RAM {mem} MiB, limit {limit} MiB from the start; `{workload} {cmdline}` ({what}). The run phase's clock starts at the guest's `phase={after}` line; the hog starts at {hog} s on it, the harness gives the memory back at {at} s (memvisor: `PUT /memory` to the guest's size; QEMU: the cgroup's limit raised by guest RAM minus the limit, and the balloon deflated). The guest has a {swap} MiB swap disk (`id=swap`), which only a guest whose balloon is inflated uses. {reps} repetition(s), interleaved. The machine is shared with other builds (2 cores): single seconds are noisy.\n");
    let groups = by_config(meta.configs, given_back, runs);
    recovery_table(&mut s, meta, &groups);
    latency_table(&mut s, mix(exp).op, &groups);
    goal_section(&mut s, &groups);
    pager_section(&mut s, runs);
    runs_table(&mut s, runs);
    s.push('\n');
    crate::families::phases::report::write_setup(&mut s, meta, &[]);
    s
}
/// The recovery table: per configuration, the throughput before the hog, the dip, the time to
/// recover and to settle, against the reference and the paper.
fn recovery_table(s: &mut String, meta: &Meta<'_>, groups: &[Group<'_>]) {
    let _ = writeln!(
        s,
        "## Recovery\n\nBefore the hog: mean ops/s of the seconds before it started. Dip: the lowest second and the mean from the hog's start to the release. Recovery: from the release to the end of the first second at ≥ {:.0} % of the throughput before the hog (per run; one-second resolution; \"> N\": not within the N seconds the run went on). Settled: the same against the mean of the run's last 10 s, the level it settles at with the hog still running. Median over the runs that completed.\n",
        RECOVERED * 100.0
    );
    let read = mix(meta.experiment).op == "read";
    let figure = if read { "Fig. 5(c)" } else { "Fig. 5" };
    let head = format!("configuration | runs ok | before the hog ops/s | dip: lowest second | dip: mean | at the release | recovery s (each run) | recovery s (median) | ×{} | settled s (median) | paper ({figure})", meta.reference);
    let mut t = Table::new(head.split(" | "));
    let reference = groups
        .iter()
        .find(|(c, _)| c.name == meta.reference)
        .and_then(|(_, ms)| config_recovery(ms));
    let med = |ms, f: &dyn Fn(&Measures) -> Option<f64>| {
        or_dash(median(completed(ms).filter_map(f).collect()), 0)
    };
    let show = |r: Option<Recovery>| r.map_or_else(|| "-".into(), Recovery::show);
    for (c, ms) in groups {
        let each: Vec<String> = ms
            .iter()
            .map(|(r, m)| match r.ok() {
                true => show(m.recovery),
                false => format!("{} ({})", show(m.recovery), r.rec.result.status.as_str()),
            })
            .collect();
        let rec = config_recovery(ms);
        let ratio = match (rec, reference) {
            (Some(Recovery::After(a)), Some(Recovery::After(b))) if a > 0.0 => {
                format!("{:.1}", b / a)
            }
            (Some(Recovery::After(a)), Some(Recovery::Not(b))) if a > 0.0 => {
                format!("> {:.1}", b / a)
            }
            _ => "-".into(),
        };
        t.row(vec![
            c.name.to_owned(),
            format!("{}/{}", completed(ms).count(), ms.len()),
            med(ms, &|m| m.before),
            med(ms, &|m| m.dip_min.map(|x| x as f64)),
            med(ms, &|m| m.dip_mean),
            med(ms, &|m| m.at_release.map(|x| x as f64)),
            if each.is_empty() {
                "-".into()
            } else {
                each.join(", ")
            },
            show(rec),
            ratio,
            show(median_recovery(
                &ms.iter().filter_map(|(_, m)| m.settled).collect::<Vec<_>>(),
            )),
            paper_case(c, read),
        ]);
    }
    s.push_str(&t.markdown());
    s.push_str(if read {
        "\nThe paper (Fig. 5(c), Redis under YCSB Read, a memory-intensive program starting in the same VM at 10 s): throughput drops from 17,813 to 7,049 ops/s; back to full throughput in about 5 s with MemFlex, more than 80 s with a ramdisk, longer than ramdisk with an HDD.\n\n"
    } else {
        "\nThe paper (Fig. 5, Redis under YCSB Insert, Update and Scan, a memory-intensive program starting in the same VM at 10 s): every workload's throughput drops at about the 10th second; with an HDD or a ramdisk it recovers very slowly, with MemFlex significantly faster (its numbers are only in the figure). Fig. 6: the latency rises at the same time and recovers in a few seconds with MemFlex.\n\n"
    });
}

/// The latency of the mix's operations through the run (MemFlex Fig. 6): each second's p99
/// before the hog, its worst second under the hog, the first whole second after the release
/// and the last 10 seconds, medians over the runs that completed.
fn latency_table(s: &mut String, op: &str, groups: &[Group<'_>]) {
    let _ = writeln!(
        s,
        "## Latency (Fig. 6)\n\nThe 99th percentile latency of the {op}s that finished in each second, as the guest timed them (µs): the median of the seconds before the hog, the worst second from the hog's start to the release, the first whole second after the release, and the median of the last 10 seconds. Median over the runs that completed.\n"
    );
    let mut t = Table::new(
        "configuration | before the hog | worst second under the hog | first second after the release | last 10 s"
            .split(" | "),
    );
    for (c, ms) in groups {
        let med = |f: fn(&Measures) -> Option<f64>| {
            or_dash(median(completed(ms).filter_map(f).collect()), 1)
        };
        t.row(vec![
            c.name.to_owned(),
            med(|m| m.p99_before),
            med(|m| m.p99_worst),
            med(|m| m.p99_after),
            med(|m| m.p99_last10),
        ]);
    }
    s.push_str(&t.markdown());
    s.push('\n');
}

/// Whether the goal was met: the pool with proactive swap-in recovers at least 10× sooner than
/// fault-driven swap-in from the file, and sooner than every QEMU configuration.
fn goal_section(s: &mut String, groups: &[Group<'_>]) {
    let of = |(c, ms): &Group| (c.name, config_recovery(ms));
    let all: Vec<(&str, Option<Recovery>)> = groups.iter().map(of).collect();
    let find = |n: &str| all.iter().find(|c| c.0 == n).and_then(|c| c.1);
    let qemu: Vec<_> = groups
        .iter()
        .filter(|(c, _)| c.hv == Hv::Qemu)
        .map(of)
        .collect();
    s.push_str("## Goal\n\n");
    match goal(find("memvisor-pool-proactive"), find("memvisor-pager"), &qemu) {
        Some((met, why)) => s.push_str(&format!(
            "Recovery with the pool and proactive swap-in at least 10× shorter than with fault-driven swap-in from the swap file, and shorter than every QEMU configuration: **{}** ({why}).\n\n",
            if met { "met" } else { "not met" }
        )),
        None => s.push_str("Not judged: it needs memvisor-pool-proactive and memvisor-pager with a recovery time each.\n\n"),
    }
}

/// Every run: the hog, the given_back, what was done and why a run ended badly.
fn runs_table(s: &mut String, runs: &[Run<'_>]) {
    let _ = writeln!(s, "## Runs\n");
    let mut t = Table::new("configuration | rep | status | hog started s | hog's allocation ms | memory given back at s | requests took ms | what was done | reason".split(" | "));
    for run in runs {
        let r = &run.rec.result;
        let rel = r.given_back.as_ref();
        t.row(vec![
            run.rec.config.name.to_owned(),
            run.rec.rep.to_string(),
            r.status.as_str().to_owned(),
            or_dash(run.trace.hog_start_ms.map(|m| m as f64 / 1e3), 1),
            opt(run.trace.hog_alloc_ms),
            or_dash(rel.and_then(|x| x.on_clock_s()), 2),
            or_dash(rel.map(|x| x.took_ms), 0),
            match rel.map(|x| &x.what) {
                None => "-".into(),
                Some(Ok(w)) => w.replace('|', "/"),
                Some(Err(e)) => format!("failed: {e}").replace('|', "/"),
            },
            table::text(&r.reason),
        ]);
    }
    s.push_str(&t.markdown());
}

/// What memvisor's pager and pool did around the given_back, from its `GET /stats` answers: where
/// the swapped pages were when the memory came back and how fast they came back.
fn pager_section(s: &mut String, runs: &[Run<'_>]) {
    let rows: Vec<&Run<'_>> = runs
        .iter()
        .filter(|r| r.rec.config.hv == Hv::Memvisor && !r.rec.result.stats.is_empty())
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "## memvisor's pager around the release\n\nFrom `GET /stats` once a second. \"At the release\": the last answer before it. Swapped: guest pages only in the swap store (pool or file); to disk: pages spilled from the pool or written past it. Swap-in after the given_back: swap faults and pages brought back proactively (from the pool / the file) until the end of the run; \"swapped < 1 %\": when the swapped pages first fell below 1 % of what they were at the release.\n"
    );
    let mut t = Table::new("configuration | rep | resident MiB at the release | swapped MiB at the release | in the pool MiB | to disk MiB (spilled + past the pool) | swap faults after | proactive pool / file pages after | swapped < 1 % after s | swapped MiB at the end".split(" | "));
    for run in rows {
        let st = run.stats_on_clock();
        let Some(rel) = run.given_back_s() else {
            continue;
        };
        let before = st.iter().rev().find(|(t, _)| *t <= rel).map(|x| x.1);
        let last = st.last().map(|x| x.1);
        let p = |x: Option<&VmStats>| x.and_then(|s| s.pager.clone());
        let (b, l) = (p(before), p(last));
        let mb = |pages: u64| format!("{:.0}", (pages << 12) as f64 / MIB);
        let swapped0 = b.as_ref().map_or(0, |x| x.pages.swapped_pages);
        let below = |x: &VmStats| {
            x.pager
                .as_ref()
                .is_some_and(|p| p.pages.swapped_pages * 100 < swapped0.max(1))
        };
        let back = st
            .iter()
            .find(|(t, x)| *t > rel && below(x))
            .map(|(t, _)| t - rel);
        let (bp, lp) = (
            b.as_ref().and_then(|p| p.pool),
            l.as_ref().and_then(|p| p.pool),
        );
        let after = |x: u64, y: u64| y.saturating_sub(x).to_string();
        let pages = |x: &Option<PagerStats>, f: fn(&PagerStats) -> u64| {
            x.as_ref().map_or_else(|| "-".into(), |x| mb(f(x)))
        };
        t.row(vec![
            run.rec.config.name.to_owned(),
            run.rec.rep.to_string(),
            pages(&b, |x| x.pages.resident_pages),
            pages(&b, |x| x.pages.swapped_pages),
            or_dash(bp.map(|x| x.used_bytes as f64 / MIB), 0),
            bp.map_or_else(
                || "all".into(),
                |x| mb(x.spilled_pages + x.overflowed_pages),
            ),
            match (&b, &l) {
                (Some(x), Some(y)) => after(x.counters.faults_swap, y.counters.faults_swap),
                _ => "-".into(),
            },
            match (bp, lp) {
                (Some(x), Some(y)) => format!(
                    "{} / {}",
                    after(x.proactive_pool_pages, y.proactive_pool_pages),
                    after(x.proactive_disk_pages, y.proactive_disk_pages)
                ),
                _ => "-".into(),
            },
            back.map_or_else(|| "never".into(), |t| format!("{t:.1}")),
            pages(&l, |x| x.pages.swapped_pages),
        ]);
    }
    let _ = writeln!(s, "{}", t.markdown());
}

/// The figure (`<experiment>.svg` and `.png`): ops/s over the run phase's clock, one line per
/// run (the first repetition thick), the hog's start and the release marked; the same on a log
/// scale below; and below that each second's p99 latency of the mix's operations (MemFlex
/// Fig. 6), on a log scale.
pub fn plot(
    path: &Path,
    exp: &Experiment,
    given_back: &GiveBack,
    configs: &[&'static Config],
    runs: &[Run<'_>],
) -> Result<(), String> {
    if runs.iter().all(|r| r.trace.seconds.is_empty()) {
        return Err("no run printed its throughput".into());
    }
    let line = |run: &Run<'_>, pts: Vec<(f64, f64)>| {
        let (c, rep, status) = (run.rec.config.name, run.rec.rep, run.rec.result.status);
        let ci = configs.iter().position(|x| x.name == c).unwrap_or(0);
        let status = if run.ok() {
            String::new()
        } else {
            format!(", {}", status.as_str())
        };
        let (name, width) = (
            format!("{c} rep {rep}{status}"),
            if rep == 1 { 2 } else { 1 },
        );
        Line::new(name, color(ci), width, pts)
    };
    // Each second's value at the second's middle.
    let mid = |n: u32, v: f64| (f64::from(n) - 0.5, v);
    let lines: Vec<Line> = runs
        .iter()
        .map(|r| {
            line(
                r,
                r.trace
                    .seconds
                    .iter()
                    .map(|&(n, ops)| mid(n, ops as f64))
                    .collect(),
            )
        })
        .collect();
    let latency: Vec<Line> = runs
        .iter()
        .map(|r| {
            line(
                r,
                r.trace.p99_us.iter().map(|&(n, us)| mid(n, us)).collect(),
            )
        })
        .collect();
    let mean_or = |v: Vec<f64>, dflt: f64| numbers::mean(&v).unwrap_or(dflt);
    let hog = runs
        .iter()
        .filter_map(|r| r.trace.hog_start_ms)
        .map(|m| m as f64 / 1e3);
    let hog = mean_or(hog.collect(), given_back.hog_at.as_secs_f64());
    let rel = mean_or(
        runs.iter().filter_map(Run::given_back_s).collect(),
        given_back.at.as_secs_f64(),
    );
    let xmax = xs(&lines).map(|x| x + 0.5).fold(rel + 1.0, f64::max);
    let ymax = ys(&lines).fold(1.0f64, f64::max) * 1.1;
    // On the log scale the axis starts at half the lowest second with something done, and a
    // second with nothing done is drawn there.
    let floor = ys(&lines).filter(|&y| y > 0.0).fold(ymax, f64::min) / 2.0;
    let title = format!(
        "{}: kv throughput per second (guest {} MiB, limit {} MiB)",
        exp.name,
        exp.mem >> 20,
        exp.limit.unwrap_or(exp.mem) >> 20
    );
    let x = Axis::linear(0.0, xmax);
    let panel = |title: String, lines: &[Line], y_desc: &str, y: Axis| Panel {
        lines: lines.to_vec(),
        marks: vec![
            (hog, "hog starts".into()),
            (rel, "memory given back".into()),
        ],
        legend: Legend::Margin(300),
        y_decimals: Some(0),
        ..Panel::new(title, "seconds of the run phase", y_desc, x, y)
    };
    let linear = panel(title.clone(), &lines, "ops/s", Axis::linear(0.0, ymax));
    let log = panel(
        format!("{title}, log scale"),
        &lines,
        "ops/s",
        Axis::log(floor, ymax),
    );
    let mut panels = vec![linear, log];
    let lat_max = ys(&latency).fold(0.0f64, f64::max);
    if lat_max > 0.0 {
        let lat_min = ys(&latency).filter(|&y| y > 0.0).fold(lat_max, f64::min);
        let op = mix(exp).op;
        let title = format!(
            "{}: p99 latency of the {op}s finished in each second (log scale)",
            exp.name
        );
        let y = Axis::log(lat_min / 1.5, lat_max * 1.5);
        panels.push(Panel {
            y_decimals: Some(1),
            ..panel(title, &latency, "µs", y)
        });
    }
    let height = 550 * u32::try_from(panels.len()).unwrap_or(2);
    Figure::column((1300, height), panels).write(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::families::phases::recovery::trace::Recovery;

    #[test]
    fn the_goal_needs_ten_times_and_every_qemu() {
        use Recovery::{After, Not};
        let (met, why) = goal(
            Some(After(1.5)),
            Some(After(20.0)),
            &[
                ("qemu-hostswap", Some(Not(40.0))),
                ("qemu-balloon", Some(After(9.0))),
            ],
        )
        .unwrap();
        assert!(met, "{why}");
        assert!(why.contains("13.3×"), "{why}");
        // Nine times is not ten.
        assert!(!goal(Some(After(2.0)), Some(After(18.0)), &[]).unwrap().0);
        // A pager that never recovered: the ratio is a lower bound, and enough.
        let (met, why) = goal(Some(After(3.0)), Some(Not(40.0)), &[]).unwrap();
        assert!(met && why.contains("at least 13.3×"), "{why}");
        // A QEMU configuration as fast, or not measured, fails it.
        let met = |q| {
            goal(Some(After(1.0)), Some(Not(40.0)), &[("q", q)])
                .unwrap()
                .0
        };
        assert!(!met(Some(After(1.0))));
        assert!(!met(None));
        assert!(!goal(Some(Not(40.0)), Some(Not(40.0)), &[]).unwrap().0);
        assert_eq!(goal(None, Some(After(1.0)), &[]), None);
    }
}
