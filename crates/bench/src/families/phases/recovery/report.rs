//! The outputs of `memvisor bench recovery` (MemFlex §4.1, Fig. 5): the `kv` workload's
//! throughput second by second while a memory hog in the same VM pushes it past its limit and
//! after the harness gives the memory back, as `results.csv` (one row per run and second),
//! `report.md` (throughput before the hog, the dip, the recovery time) and `recovery.svg`/`.png`.
//!
//! Clocks: the guest prints `kv: t=Ns ops_s=N` at the end of each second of its run phase,
//! which starts right after its `RESULT ... phase=load` line. The harness starts its own clock
//! when that line arrives and gives the memory back at the experiment's release time on it, so
//! the release falls at the same second of the guest's clock (give or take the console's
//! latency, milliseconds). The hog's start is the guest's own `kv: hog_start t_ms=..` line.
//!
//! Measures, per run:
//! - **before the hog**: the mean of the seconds that ended before the hog started;
//! - **the dip**: the lowest second, and the mean of the seconds, from the hog's start to the
//!   release;
//! - **recovery time**: from the release to the end of the first second (one that ends after
//!   the release) at [`RECOVERED`] of the throughput before the hog. The guest's seconds are
//!   the resolution: a run whose throughput is back at once shows the part of the second that
//!   followed the release (up to 1 s).

use crate::report::numbers::{self, MIB};
use std::fmt::Write as _;
use std::path::Path;

use memvisor_api::VmStats;
use plotters::prelude::*;

use crate::families::phases::configs::{Config, Hv};
use crate::families::phases::experiment::{Experiment, Release};
use crate::families::phases::report::{Meta, Record};
use crate::families::phases::vm::result::Status;
use crate::report::csv;
use crate::report::numbers::summary;

/// The fraction of the throughput before the hog that counts as recovered.
pub const RECOVERED: f64 = 0.9;

/// What the guest's console says about the run phase.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Trace {
    /// `(N, ops)`: the operations finished in second N of the run phase (from N-1 to N s).
    pub seconds: Vec<(u32, u64)>,
    /// When the hog started (ms on the run phase's clock).
    pub hog_start_ms: Option<u64>,
    /// How long its allocation took (the store waits meanwhile).
    pub hog_alloc_ms: Option<u64>,
}

/// The value of `key=` among the words of `line`.
fn word<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// Reads `kv`'s per-second lines and its hog lines from a console; other lines, and lines
/// that do not parse, are skipped.
pub fn parse_console(text: &str) -> Trace {
    let mut t = Trace::default();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("kv: ") else {
            continue;
        };
        if rest.starts_with("hog_start ") {
            t.hog_start_ms = word(rest, "t_ms").and_then(|v| v.parse().ok());
        } else if rest.starts_with("hog_allocated ") {
            t.hog_alloc_ms = word(rest, "ms").and_then(|v| v.parse().ok());
        } else if let (Some(n), Some(ops)) = (
            word(rest, "t").and_then(|v| v.strip_suffix('s')?.parse().ok()),
            word(rest, "ops_s").and_then(|v| v.parse().ok()),
        ) {
            t.seconds.push((n, ops));
        }
    }
    t
}

/// How long a run took to recover after the release.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Recovery {
    /// Back at [`RECOVERED`] after this many seconds.
    After(f64),
    /// Not within the run, which went on for this many seconds after the release.
    Not(f64),
}

impl Recovery {
    /// The time, or what it is at least.
    pub fn bound(self) -> f64 {
        match self {
            Recovery::After(s) | Recovery::Not(s) => s,
        }
    }

    pub fn show(self) -> String {
        match self {
            Recovery::After(s) => format!("{s:.1}"),
            Recovery::Not(s) => format!("> {s:.0}"),
        }
    }
}

/// One run's numbers.
#[derive(Clone, Debug, PartialEq)]
pub struct Measures {
    /// Mean ops/s of the seconds that ended before the hog started.
    pub before: Option<f64>,
    /// The lowest second from the hog's start to the release.
    pub dip_min: Option<u64>,
    /// The mean of those seconds.
    pub dip_mean: Option<f64>,
    /// Ops/s in the second the release fell in.
    pub at_release: Option<u64>,
    /// `None`: no release, or nothing to compare with.
    pub recovery: Option<Recovery>,
    /// Mean ops/s of the last 10 seconds of the run.
    pub last10: Option<f64>,
    /// From the release to the first second at [`RECOVERED`] of `last10`: back at the level the
    /// run settles at, the hog still running (the level before the hog, without it, can be
    /// higher than any second after).
    pub settled: Option<Recovery>,
}

/// The mean of whole numbers (`None` when there are none).
#[allow(clippy::cast_precision_loss)]
fn mean_of(v: impl Iterator<Item = u64>) -> Option<f64> {
    numbers::mean(&v.map(|x| x as f64).collect::<Vec<_>>())
}

/// The measures of `trace`, the hog starting at `hog_s` and the release at `release_s`
/// (seconds on the run phase's clock).
pub fn measure(trace: &Trace, hog_s: f64, release_s: Option<f64>) -> Measures {
    let secs = &trace.seconds;
    let end = |n: u32| f64::from(n);
    let before = mean_of(secs.iter().filter(|&&(n, _)| end(n) <= hog_s).map(|x| x.1));
    let until = release_s.unwrap_or(f64::INFINITY);
    let dip = || {
        secs.iter()
            .filter(move |&&(n, _)| end(n) > hog_s && end(n) - 1.0 < until)
            .map(|x| x.1)
    };
    let at_release = release_s.and_then(|r| {
        secs.iter()
            .find(|&&(n, _)| end(n) - 1.0 <= r && r < end(n))
            .map(|x| x.1)
    });
    // From the release to the first second at RECOVERED of `level`.
    let back_to = |level: Option<f64>| match (release_s, level) {
        (Some(r), Some(b)) if b > 0.0 => {
            #[allow(clippy::cast_precision_loss)]
            let hit = secs
                .iter()
                .find(|&&(n, ops)| end(n) > r && ops as f64 >= RECOVERED * b);
            Some(match hit {
                Some(&(n, _)) => Recovery::After(end(n) - r),
                None => Recovery::Not(secs.last().map_or(0.0, |&(n, _)| (end(n) - r).max(0.0))),
            })
        }
        _ => None,
    };
    let skip = secs.len().saturating_sub(10);
    let last10 = mean_of(secs[skip..].iter().map(|x| x.1));
    Measures {
        before,
        dip_min: dip().min(),
        dip_mean: mean_of(dip()),
        at_release,
        recovery: back_to(before),
        last10,
        settled: back_to(last10),
    }
}

/// The median of recovery times: a run that did not recover counts as the time it watched,
/// and makes the median a lower bound when it falls on one.
pub fn median_recovery(v: &[Recovery]) -> Option<Recovery> {
    let mut v = v.to_vec();
    if v.is_empty() {
        return None;
    }
    // Not recovered sorts after every recovered time (it is longer than what it watched, and
    // the runs watch the same length).
    v.sort_by(|a, b| {
        let key = |r: &Recovery| (matches!(r, Recovery::Not(_)), r.bound());
        let (ka, kb) = (key(a), key(b));
        ka.0.cmp(&kb.0).then(ka.1.total_cmp(&kb.1))
    });
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        match (v[n / 2 - 1], v[n / 2]) {
            (Recovery::After(a), Recovery::After(b)) => Recovery::After((a + b) / 2.0),
            (a, b) => Recovery::Not((a.bound() + b.bound()) / 2.0),
        }
    })
}

/// One run with what its console said.
pub struct Run<'a> {
    pub rec: &'a Record,
    pub trace: Trace,
}

impl Run<'_> {
    /// When the hog started: its line, or the experiment's `hog_at` without one.
    #[allow(clippy::cast_precision_loss)]
    pub fn hog_s(&self, release: &Release) -> f64 {
        self.trace
            .hog_start_ms
            .map_or(release.hog_at.as_secs_f64(), |ms| ms as f64 / 1e3)
    }

    pub fn release_s(&self) -> Option<f64> {
        self.rec.result.release.as_ref()?.on_clock_s()
    }

    pub fn measures(&self, release: &Release) -> Measures {
        measure(&self.trace, self.hog_s(release), self.release_s())
    }

    /// memvisor's `GET /stats` answers on the run phase's clock (seconds).
    pub fn stats_on_clock(&self) -> Vec<(f64, &VmStats)> {
        let Some(r) = &self.rec.result.release else {
            return Vec::new();
        };
        self.rec
            .result
            .stats
            .iter()
            .map(|(at, s)| ((at - r.clock_ms) / 1e3, s))
            .collect()
    }
}

/// The console log of a run, where `bench` keeps it.
pub fn console_path(out: &Path, config: &str, workload: &str, rep: u32) -> std::path::PathBuf {
    out.join("logs")
        .join(format!("{config}-{workload}-rep{rep}.console"))
}

/// Reads every run's console.
pub fn load<'a>(out: &Path, exp: &Experiment, records: &'a [Record]) -> Vec<Run<'a>> {
    records
        .iter()
        .map(|rec| {
            let w = exp.steps[rec.step].workload;
            let text = std::fs::read_to_string(console_path(out, rec.config.name, w, rec.rep))
                .unwrap_or_default();
            Run {
                rec,
                trace: parse_console(&text),
            }
        })
        .collect()
}

/// The CSV header.
pub const CSV_HEADER: &str = "experiment,config,rep,status,t_s,ops_s,period,before_hog_ops_s,hog_start_s,release_s,resident_bytes,swapped_bytes,pool_used_bytes,pool_spilled_pages,pool_overflowed_pages,proactive_pool_pages,proactive_disk_pages,faults_swap,reason";

/// The last answer asked for at or before `t` seconds.
fn stats_at<'a>(st: &[(f64, &'a VmStats)], t: f64) -> Option<&'a VmStats> {
    st.iter().rev().find(|(at, _)| *at <= t).map(|x| x.1)
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or(String::new(), |v| v.to_string())
}

/// `results.csv`: a row per second of every run (a run with no seconds gets one row with its
/// status and reason).
pub fn csv(exp: &Experiment, release: &Release, runs: &[Run<'_>]) -> String {
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    for run in runs {
        let r = &run.rec.result;
        let m = run.measures(release);
        let hog = run.hog_s(release);
        let rel = run.release_s();
        let st = run.stats_on_clock();
        let head = format!(
            "{},{},{},{}",
            exp.name,
            run.rec.config.name,
            run.rec.rep,
            r.status.as_str()
        );
        let reason = csv::field(&r.reason);
        if run.trace.seconds.is_empty() {
            let _ = writeln!(
                out,
                "{head},,,,,,{},,,,,,,,,{reason}",
                opt(rel.map(|x| format!("{x:.3}")))
            );
            continue;
        }
        for &(n, ops) in &run.trace.seconds {
            let t = f64::from(n);
            let period = if t <= hog {
                "before"
            } else if rel.is_none_or(|x| t - 1.0 < x) {
                "hog"
            } else {
                "released"
            };
            let s = stats_at(&st, t).and_then(|s| s.pager.as_ref());
            let pool = s.and_then(|p| p.pool);
            let _ = writeln!(
                out,
                "{head},{n},{ops},{period},{},{hog:.3},{},{},{},{},{},{},{},{},{},{reason}",
                opt(m.before.map(|b| format!("{b:.0}"))),
                opt(rel.map(|x| format!("{x:.3}"))),
                opt(s.map(|p| p.pages.resident_pages << 12)),
                opt(s.map(|p| p.pages.swapped_pages << 12)),
                opt(pool.map(|p| p.used_bytes)),
                opt(pool.map(|p| p.spilled_pages)),
                opt(pool.map(|p| p.overflowed_pages)),
                opt(pool.map(|p| p.proactive_pool_pages)),
                opt(pool.map(|p| p.proactive_disk_pages)),
                opt(s.map(|p| p.counters.faults_swap)),
            );
        }
    }
    out
}

/// What the paper reports for Fig. 5(c) (YCSB Read on Redis).
pub const PAPER: &[(&str, &str)] = &[
    (
        "MemFlex (shared-memory swap, proactive swap-in)",
        "about 5 s",
    ),
    ("ramdisk swap (guest swap to host memory)", "more than 80 s"),
    ("HDD swap (guest swap to disk)", "longer than ramdisk"),
];

/// Which of the paper's cases a configuration stands for.
fn paper_case(c: &Config) -> &'static str {
    match (c.hv, c.balloon, c.mechanisms) {
        (Hv::Memvisor, _, m) if m.contains(&"proactive") => "MemFlex: about 5 s",
        (Hv::Memvisor, _, m) if m.contains(&"--pool") => {
            "(no case: MemFlex without proactive swap-in)"
        }
        (Hv::Memvisor, _, _) => "HDD: longer than 80 s",
        (Hv::Qemu, true, _) => "HDD (balloon, guest swap disk): longer than 80 s",
        (Hv::Qemu, false, _) => "HDD (host swap): longer than 80 s",
    }
}

fn ops(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.0}"))
}

/// The configurations' runs with their measures, in the order of the configurations.
type Groups<'a> = [(&'static Config, Vec<(&'a Run<'a>, Measures)>)];

/// Per configuration: the runs' measures.
fn by_config<'a>(
    configs: &[&'static Config],
    release: &Release,
    runs: &'a [Run<'a>],
) -> Vec<(&'static Config, Vec<(&'a Run<'a>, Measures)>)> {
    configs
        .iter()
        .map(|c| {
            (
                *c,
                runs.iter()
                    .filter(|r| r.rec.config.name == c.name)
                    .map(|r| (r, r.measures(release)))
                    .collect(),
            )
        })
        .collect()
}

/// The median recovery of a configuration's runs that completed and were released.
fn config_recovery(ms: &[(&Run<'_>, Measures)]) -> Option<Recovery> {
    let v: Vec<Recovery> = ms
        .iter()
        .filter(|(r, _)| r.rec.result.status == Status::Ok)
        .filter_map(|(_, m)| m.recovery)
        .collect();
    median_recovery(&v)
}

/// Whether the project's goal holds: with the pool and proactive swap-in, recovery at least
/// 10 times shorter than fault-driven swap-in from the swap file, and shorter than every QEMU
/// configuration. `None` when a configuration it needs was not run or has no recovery.
pub fn goal(
    proactive: Option<Recovery>,
    pager: Option<Recovery>,
    qemu: &[(&str, Option<Recovery>)],
) -> Option<(bool, String)> {
    let p = proactive?;
    let d = pager?;
    let Recovery::After(pt) = p else {
        return Some((
            false,
            format!(
                "memvisor-pool-proactive did not recover within the run ({})",
                p.show()
            ),
        ));
    };
    let pt = pt.max(1e-3);
    let ratio = d.bound() / pt;
    let tenfold = ratio >= 10.0;
    let mut why = vec![format!(
        "memvisor-pager / memvisor-pool-proactive = {}{ratio:.1}×{}",
        if matches!(d, Recovery::Not(_)) {
            "at least "
        } else {
            ""
        },
        if tenfold { " (≥ 10×)" } else { " (< 10×)" }
    )];
    let mut all = tenfold;
    for (name, q) in qemu {
        match q {
            Some(q) => {
                // A QEMU run that did not recover took longer than it watched.
                let shorter = pt < q.bound();
                all &= shorter;
                why.push(format!(
                    "{name} {} s: {}",
                    q.show(),
                    if shorter { "shorter" } else { "not shorter" }
                ));
            }
            None => {
                all = false;
                why.push(format!("{name}: no recovery measured"));
            }
        }
    }
    Some((all, why.join("; ")))
}

/// `report.md`.
pub fn markdown(meta: &Meta<'_>, release: &Release, runs: &[Run<'_>]) -> String {
    let exp = meta.experiment;
    let mut s = String::new();
    let _ = writeln!(s, "# memvisor bench {}\n", exp.name);
    let _ = writeln!(s, "{}.\n", exp.about);
    let step = &exp.steps[0];
    let _ = writeln!(
        s,
        "Guest RAM {} MiB, limit {} MiB from the start; `{} {}` (YCSB Read: 100 % reads of zipfian keys). \
         The run phase's clock starts at the guest's `phase={}` line; the hog starts at {} s on it, the harness gives the memory back at {} s \
         (memvisor: `PUT /memory` to the guest's size; QEMU: the cgroup's limit raised by guest RAM minus the limit, and the balloon deflated). \
         The guest has a {} MiB swap disk (`id=swap`), which only a guest whose balloon is inflated uses. {} repetition(s), interleaved. \
         The machine is shared with other builds (2 cores): single seconds are noisy.\n",
        exp.mem >> 20,
        exp.limit.unwrap_or(exp.mem) >> 20,
        step.workload,
        step.cmdline,
        release.after_phase,
        release.hog_at.as_secs(),
        release.at.as_secs(),
        step.guest_swap_mb.unwrap_or(0),
        meta.reps
    );
    let groups = by_config(meta.configs, release, runs);
    recovery_table(&mut s, meta, &groups);
    goal_section(&mut s, &groups);
    pager_section(&mut s, release, runs);
    runs_table(&mut s, runs);
    s.push('\n');
    crate::families::phases::report::write_setup(&mut s, meta, &[]);
    s
}
/// The recovery table: per configuration, the throughput before the hog, the dip, the time to
/// recover and to settle, against the reference and the paper.
fn recovery_table(s: &mut String, meta: &Meta<'_>, groups: &Groups<'_>) {
    let _ = writeln!(s, "## Recovery\n");
    let _ = writeln!(
        s,
        "Before the hog: mean ops/s of the seconds before it started. Dip: the lowest second and the mean from the hog's start to the release. \
         Recovery: from the release to the end of the first second at ≥ {:.0} % of the throughput before the hog (per run; one-second resolution; \
         \"> N\": not within the N seconds the run went on). Settled: the same against the mean of the run's last 10 s, the level it settles at \
         with the hog still running. Median over the runs that completed.\n",
        RECOVERED * 100.0
    );
    let _ = writeln!(
        s,
        "| configuration | runs ok | before the hog ops/s | dip: lowest second | dip: mean | at the release | recovery s (each run) | recovery s (median) | ×{} | settled s (median) | paper (Fig. 5(c)) |",
        meta.reference
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|");
    let reference = groups
        .iter()
        .find(|(c, _)| c.name == meta.reference)
        .and_then(|(_, ms)| config_recovery(ms));
    let med = |ms: &[(&Run<'_>, Measures)], f: &dyn Fn(&Measures) -> Option<f64>| {
        let mut v: Vec<f64> = ms
            .iter()
            .filter(|(r, _)| r.rec.result.status == Status::Ok)
            .filter_map(|(_, m)| f(m))
            .collect();
        summary(&mut v).map(|x| x.0)
    };
    for (c, ms) in groups {
        let ok = ms
            .iter()
            .filter(|(r, _)| r.rec.result.status == Status::Ok)
            .count();
        let each: Vec<String> = ms
            .iter()
            .map(|(r, m)| {
                let v = m.recovery.map_or_else(|| "-".into(), Recovery::show);
                if r.rec.result.status == Status::Ok {
                    v
                } else {
                    format!("{v} ({})", r.rec.result.status.as_str())
                }
            })
            .collect();
        let rec = config_recovery(ms);
        #[allow(clippy::cast_precision_loss)]
        let ratio = match (rec, reference) {
            (Some(Recovery::After(a)), Some(Recovery::After(b))) if a > 0.0 => {
                format!("{:.1}", b / a)
            }
            (Some(Recovery::After(a)), Some(Recovery::Not(b))) if a > 0.0 => {
                format!("> {:.1}", b / a)
            }
            _ => "-".into(),
        };
        #[allow(clippy::cast_precision_loss)]
        let _ = writeln!(
            s,
            "| {} | {ok}/{} | {} | {} | {} | {} | {} | {} | {ratio} | {} | {} |",
            c.name,
            ms.len(),
            ops(med(ms, &|m| m.before)),
            ops(med(ms, &|m| m.dip_min.map(|x| x as f64))),
            ops(med(ms, &|m| m.dip_mean)),
            ops(med(ms, &|m| m.at_release.map(|x| x as f64))),
            if each.is_empty() {
                "-".into()
            } else {
                each.join(", ")
            },
            rec.map_or_else(|| "-".into(), Recovery::show),
            median_recovery(&ms.iter().filter_map(|(_, m)| m.settled).collect::<Vec<_>>())
                .map_or_else(|| "-".into(), Recovery::show),
            paper_case(c),
        );
    }
    let _ = writeln!(
        s,
        "\nThe paper (Fig. 5(c), Redis under YCSB Read, a memory-intensive program starting in the same VM at 10 s): throughput drops from 17,813 to 7,049 ops/s; back to full throughput in {} with MemFlex, {} with a ramdisk, {} with an HDD.\n",
        PAPER[0].1, PAPER[1].1, PAPER[2].1
    );
}

/// Whether the goal was met: the pool with proactive swap-in recovers at least 10× sooner than
/// fault-driven swap-in from the file, and sooner than every QEMU configuration.
fn goal_section(s: &mut String, groups: &Groups<'_>) {
    let find = |n: &str| {
        groups
            .iter()
            .find(|(c, _)| c.name == n)
            .and_then(|(_, ms)| config_recovery(ms))
    };
    let qemu: Vec<(&str, Option<Recovery>)> = groups
        .iter()
        .filter(|(c, _)| c.hv == Hv::Qemu)
        .map(|(c, ms)| (c.name, config_recovery(ms)))
        .collect();
    let _ = writeln!(s, "## Goal\n");
    match goal(
        find("memvisor-pool-proactive"),
        find("memvisor-pager"),
        &qemu,
    ) {
        Some((met, why)) => {
            let _ = writeln!(
                s,
                "Recovery with the pool and proactive swap-in at least 10× shorter than with fault-driven swap-in from the swap file, and shorter than every QEMU configuration: **{}** ({why}).\n",
                if met { "met" } else { "not met" }
            );
        }
        None => {
            let _ = writeln!(
                s,
                "Not judged: it needs memvisor-pool-proactive and memvisor-pager with a recovery time each.\n"
            );
        }
    }
}

/// Every run: the hog, the release, what was done and why a run ended badly.
fn runs_table(s: &mut String, runs: &[Run<'_>]) {
    let _ = writeln!(s, "## Runs\n");
    let _ = writeln!(
        s,
        "| configuration | rep | status | hog started s | hog's allocation ms | memory given back at s | requests took ms | what was done | reason |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    for run in runs {
        let r = &run.rec.result;
        let rel = r.release.as_ref();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            run.rec.config.name,
            run.rec.rep,
            r.status.as_str(),
            run.trace
                .hog_start_ms
                .map_or_else(|| "-".into(), |m| format!("{:.1}", m as f64 / 1e3)),
            opt(run.trace.hog_alloc_ms),
            rel.and_then(|x| x.on_clock_s())
                .map_or_else(|| "-".into(), |x| format!("{x:.2}")),
            rel.map_or_else(|| "-".into(), |x| format!("{:.0}", x.took_ms)),
            rel.map_or_else(
                || "-".into(),
                |x| match &x.what {
                    Ok(w) => w.clone(),
                    Err(e) => format!("failed: {e}"),
                }
            )
            .replace('|', "/"),
            if r.reason.is_empty() {
                "-".to_owned()
            } else {
                r.reason.replace('|', "/")
            }
        );
    }
}

/// What memvisor's pager and pool did around the release, from its `GET /stats` answers: where
/// the swapped pages were when the memory came back and how fast they came back.
fn pager_section(s: &mut String, _release: &Release, runs: &[Run<'_>]) {
    let rows: Vec<&Run<'_>> = runs
        .iter()
        .filter(|r| r.rec.config.hv == Hv::Memvisor && !r.rec.result.stats.is_empty())
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(s, "## memvisor's pager around the release\n");
    let _ = writeln!(
        s,
        "From `GET /stats` once a second. \"At the release\": the last answer before it. Swapped: guest pages only in the swap store (pool or file); \
         to disk: pages spilled from the pool or written past it. Swap-in after the release: swap faults and pages brought back proactively (from the pool / the file) \
         until the end of the run; \"swapped < 1 %\": when the swapped pages first fell below 1 % of what they were at the release.\n"
    );
    let _ = writeln!(
        s,
        "| configuration | rep | resident MiB at the release | swapped MiB at the release | in the pool MiB | to disk MiB (spilled + past the pool) | swap faults after | proactive pool / file pages after | swapped < 1 % after s | swapped MiB at the end |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|");
    for run in rows {
        let st = run.stats_on_clock();
        let Some(rel) = run.release_s() else {
            continue;
        };
        let before = st.iter().rev().find(|(t, _)| *t <= rel).map(|x| x.1);
        let last = st.last().map(|x| x.1);
        let p = |x: Option<&VmStats>| x.and_then(|s| s.pager.clone());
        let (b, l) = (p(before), p(last));
        #[allow(clippy::cast_precision_loss)]
        let mb = |pages: u64| format!("{:.0}", (pages << 12) as f64 / MIB);
        let swapped0 = b.as_ref().map_or(0, |x| x.pages.swapped_pages);
        let back = st
            .iter()
            .find(|(t, x)| {
                *t > rel
                    && x.pager
                        .as_ref()
                        .is_some_and(|p| p.pages.swapped_pages * 100 < swapped0.max(1))
            })
            .map(|(t, _)| t - rel);
        let pool = |x: &Option<memvisor_api::PagerStats>| x.as_ref().and_then(|p| p.pool);
        let (bp, lp) = (pool(&b), pool(&l));
        let diff = |f: &dyn Fn(&memvisor_api::PagerStats) -> u64| match (&b, &l) {
            (Some(x), Some(y)) => f(y).saturating_sub(f(x)).to_string(),
            _ => "-".into(),
        };
        #[allow(clippy::cast_precision_loss)]
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            run.rec.config.name,
            run.rec.rep,
            b.as_ref()
                .map_or_else(|| "-".into(), |x| mb(x.pages.resident_pages)),
            b.as_ref()
                .map_or_else(|| "-".into(), |x| mb(x.pages.swapped_pages)),
            bp.map_or_else(
                || "-".into(),
                |x| format!("{:.0}", x.used_bytes as f64 / MIB)
            ),
            bp.map_or_else(
                || "all".into(),
                |x| mb(x.spilled_pages + x.overflowed_pages)
            ),
            diff(&|p| p.counters.faults_swap),
            match (bp, lp) {
                (Some(x), Some(y)) => format!(
                    "{} / {}",
                    y.proactive_pool_pages
                        .saturating_sub(x.proactive_pool_pages),
                    y.proactive_disk_pages
                        .saturating_sub(x.proactive_disk_pages)
                ),
                _ => "-".into(),
            },
            back.map_or_else(|| "never".into(), |t| format!("{t:.1}")),
            l.as_ref()
                .map_or_else(|| "-".into(), |x| mb(x.pages.swapped_pages)),
        );
    }
    let _ = writeln!(s);
}

/// Colours of the configurations.
const COLORS: [RGBColor; 8] = [
    RGBColor(0, 0, 0),
    RGBColor(230, 97, 1),
    RGBColor(202, 0, 32),
    RGBColor(33, 102, 172),
    RGBColor(27, 120, 55),
    RGBColor(94, 60, 153),
    RGBColor(140, 81, 10),
    RGBColor(128, 128, 128),
];

const LEGEND_W: i32 = 300;

/// `recovery.svg` and `.png`: ops/s over the run phase's clock, one line per run (the first
/// repetition thick), the hog's start and the release marked; the same on a log scale below.
pub fn plot(
    path: &Path,
    exp: &Experiment,
    release: &Release,
    configs: &[&'static Config],
    runs: &[Run<'_>],
) -> Result<(), String> {
    if runs.iter().all(|r| r.trace.seconds.is_empty()) {
        return Err("no run printed its throughput".into());
    }
    crate::report::figure::svg_and_png!(path, (1300, 1100), |root| {
        draw(root, exp, release, configs, runs)
    })
}

struct Line {
    name: String,
    color: RGBColor,
    width: u32,
    pts: Vec<(f64, f64)>,
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    exp: &Experiment,
    release: &Release,
    configs: &[&'static Config],
    runs: &[Run<'_>],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut lines = Vec::new();
    for run in runs {
        let ci = configs
            .iter()
            .position(|c| c.name == run.rec.config.name)
            .unwrap_or(0);
        let status = if run.rec.result.status == Status::Ok {
            String::new()
        } else {
            format!(", {}", run.rec.result.status.as_str())
        };
        #[allow(clippy::cast_precision_loss)]
        lines.push(Line {
            name: format!("{} rep {}{status}", run.rec.config.name, run.rec.rep),
            color: COLORS[ci % COLORS.len()],
            width: if run.rec.rep == 1 { 2 } else { 1 },
            // Each second's throughput at the second's middle.
            pts: run
                .trace
                .seconds
                .iter()
                .map(|&(n, ops)| (f64::from(n) - 0.5, ops as f64))
                .collect(),
        });
    }
    let mean_of = |v: Vec<f64>, dflt: f64| {
        if v.is_empty() {
            dflt
        } else {
            #[allow(clippy::cast_precision_loss)]
            let n = v.len() as f64;
            v.iter().sum::<f64>() / n
        }
    };
    let hog = mean_of(
        runs.iter()
            .filter_map(|r| r.trace.hog_start_ms)
            .map(|m| {
                #[allow(clippy::cast_precision_loss)]
                let s = m as f64 / 1e3;
                s
            })
            .collect(),
        release.hog_at.as_secs_f64(),
    );
    let rel = mean_of(
        runs.iter().filter_map(Run::release_s).collect(),
        release.at.as_secs_f64(),
    );
    let rows = root.split_evenly((2, 1));
    let title = format!(
        "{}: kv throughput per second (guest {} MiB, limit {} MiB)",
        exp.name,
        exp.mem >> 20,
        exp.limit.unwrap_or(exp.mem) >> 20
    );
    panel(&rows[0], &title, &lines, hog, rel, false)?;
    panel(
        &rows[1],
        &format!("{title}, log scale"),
        &lines,
        hog,
        rel,
        true,
    )
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    lines: &[Line],
    hog: f64,
    rel: f64,
    log: bool,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let xmax = lines
        .iter()
        .flat_map(|l| l.pts.iter().map(|p| p.0 + 0.5))
        .fold(rel + 1.0, f64::max);
    let ymax = lines
        .iter()
        .flat_map(|l| l.pts.iter().map(|p| p.1))
        .fold(1.0f64, f64::max)
        * 1.1;
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .margin_right(LEGEND_W)
        .x_label_area_size(40)
        .y_label_area_size(90);
    // On the log scale the axis starts at half the lowest second with something done, and a
    // second with nothing done is drawn there.
    let floor: f64 = if log {
        lines
            .iter()
            .flat_map(|l| l.pts.iter().map(|p| p.1))
            .filter(|&y| y > 0.0)
            .fold(ymax, f64::min)
            / 2.0
    } else {
        0.0
    };
    let marks = [(hog, "hog starts"), (rel, "memory given back")];
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc("seconds of the run phase")
                .y_desc("ops/s")
                .y_label_formatter(&|y: &f64| format!("{y:.0}"))
                .label_style(("sans-serif", 15))
                .draw()
                .map_err(e)?;
            for (x, label) in marks {
                chart
                    .draw_series(DashedLineSeries::new(
                        vec![(x, floor), (x, ymax)],
                        6,
                        4,
                        BLACK.stroke_width(1),
                    ))
                    .map_err(e)?;
                chart
                    .draw_series(std::iter::once(Text::new(
                        label.to_owned(),
                        (x + 0.3, if log { floor * 1.5 } else { ymax / 1.04 }),
                        ("sans-serif", 14).into_font(),
                    )))
                    .map_err(e)?;
            }
            for l in lines {
                chart
                    .draw_series(LineSeries::new(
                        l.pts.iter().map(|&(x, y)| (x, y.max(floor))),
                        l.color.stroke_width(l.width),
                    ))
                    .map_err(e)?;
            }
        }};
    }
    if log {
        draw!(builder
            .build_cartesian_2d(0.0..xmax, (floor..ymax).log_scale())
            .map_err(e)?);
    } else {
        draw!(builder
            .build_cartesian_2d(0.0..xmax, 0.0..ymax)
            .map_err(e)?);
    }
    let x0 = i32::try_from(area.dim_in_pixel().0).unwrap_or(0) - LEGEND_W + 16;
    for (i, l) in lines.iter().enumerate() {
        let y = 50 + 22 * i32::try_from(i).unwrap_or(0);
        area.draw(&PathElement::new(
            vec![(x0, y), (x0 + 30, y)],
            l.color.stroke_width(l.width.max(2)),
        ))
        .map_err(e)?;
        area.draw(&Text::new(
            l.name.clone(),
            (x0 + 38, y - 8),
            ("sans-serif", 14).into_font(),
        ))
        .map_err(e)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONSOLE: &str = "memvisor guest kit: booting\n\
        RESULT workload=kv phase=load records=10 ms=1.0 ops_s=1 table_mb=1\n\
        kv: t=1s ops_s=1000\n\
        kv: t=2s ops_s=1100\n\
        kv: hog_start t_ms=2000 mb=40 rate_mb_s=40\n\
        kv: hog_allocated t_ms=2400 ms=400\n\
        kv: t=3s ops_s=100\n\
        kv: t=4s ops_s=50\n\
        kv: t=5s ops_s=600\n\
        kv: t=6s ops_s=960\n\
        kv: t=7s ops_s=1050\n\
        kv: t=xs ops_s=5\n\
        kv: t=8s ops_s=\n\
        RESULT workload=kv phase=run ok=1\n";

    #[test]
    fn the_console_gives_seconds_and_the_hog() {
        let t = parse_console(CONSOLE);
        assert_eq!(
            t.seconds,
            vec![
                (1, 1000),
                (2, 1100),
                (3, 100),
                (4, 50),
                (5, 600),
                (6, 960),
                (7, 1050)
            ]
        );
        assert_eq!((t.hog_start_ms, t.hog_alloc_ms), (Some(2000), Some(400)));
        assert_eq!(parse_console(""), Trace::default());
        assert_eq!(parse_console("kv: hog_start t_ms=abc").hog_start_ms, None);
    }

    #[test]
    fn recovery_is_the_first_second_back_at_ninety_percent() {
        let t = parse_console(CONSOLE);
        // Released 4.2 s in: before = 1050, 90 % = 945; second 6 (5–6 s) has 960.
        let m = measure(&t, 2.0, Some(4.2));
        assert_eq!(m.before, Some(1050.0));
        assert_eq!(m.dip_min, Some(50));
        // Seconds 3, 4 and 5 overlap the hog's time (2 s to 4.2 s).
        assert_eq!(m.dip_mean, Some(250.0));
        assert_eq!(m.at_release, Some(600));
        let Some(Recovery::After(r)) = m.recovery else {
            panic!("{m:?}")
        };
        assert!((r - 1.8).abs() < 1e-9, "{r}");
        // The last 10 seconds (all 7 here) average 694.3: 90 % of it first in second 6 too.
        assert_eq!(m.settled, m.recovery);
        // Without a release there is no recovery; the dip runs to the end.
        let m = measure(&t, 2.0, None);
        assert_eq!(
            (m.recovery, m.at_release, m.dip_min),
            (None, None, Some(50))
        );
        // Never back: the time watched after the release is a lower bound.
        let slow = Trace {
            seconds: vec![(1, 100), (2, 100), (3, 10), (4, 20), (5, 80)],
            ..Trace::default()
        };
        let m = measure(&slow, 2.0, Some(3.5));
        assert_eq!(m.recovery, Some(Recovery::Not(1.5)));
        // Back at the level it settles at (62 on average, 90 %: 55.8) in second 5, though.
        assert_eq!(m.settled, Some(Recovery::After(1.5)));
        // Back in the second the release fell in: what is left of that second.
        let fast = Trace {
            seconds: vec![(1, 100), (2, 100), (3, 10), (4, 95)],
            ..Trace::default()
        };
        let m = measure(&fast, 2.0, Some(3.25));
        assert_eq!(m.recovery, Some(Recovery::After(0.75)));
        // No second before the hog: nothing to compare with.
        assert_eq!(measure(&fast, 0.0, Some(3.0)).recovery, None);
        assert_eq!(measure(&Trace::default(), 2.0, Some(3.0)).last10, None);
    }

    #[test]
    fn medians_of_recoveries_keep_their_bounds() {
        use Recovery::{After, Not};
        assert_eq!(median_recovery(&[]), None);
        assert_eq!(
            median_recovery(&[After(3.0), Not(40.0), After(1.0)]),
            Some(After(3.0))
        );
        assert_eq!(median_recovery(&[After(2.0), After(4.0)]), Some(After(3.0)));
        assert_eq!(median_recovery(&[After(2.0), Not(40.0)]), Some(Not(21.0)));
        assert_eq!(
            median_recovery(&[Not(38.0), Not(40.0), After(5.0)]),
            Some(Not(38.0))
        );
        assert_eq!(Not(40.4).show(), "> 40");
        assert_eq!(After(2.25).show(), "2.2");
    }

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
        assert!(
            !goal(
                Some(After(1.0)),
                Some(Not(40.0)),
                &[("q", Some(After(1.0)))]
            )
            .unwrap()
            .0
        );
        assert!(
            !goal(Some(After(1.0)), Some(Not(40.0)), &[("q", None)])
                .unwrap()
                .0
        );
        assert!(!goal(Some(Not(40.0)), Some(Not(40.0)), &[]).unwrap().0);
        assert_eq!(goal(None, Some(After(1.0)), &[]), None);
    }
}
