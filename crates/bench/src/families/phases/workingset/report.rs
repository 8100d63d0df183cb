//! The outputs of `memvisor bench workingset` (ESX §5.3, Fig. 6): the VM's working-set estimate
//! over time against the working set the `toucher` workload's schedule says it touches, as
//! `results.csv` (one row per `GET /stats` answer), `report.md` (how fast the estimate follows
//! each step) and `workingset.svg`.
//!
//! The pager samples resident pages, so the estimate and the averages it is made of are
//! fractions of the memory the sample is drawn from: resident pages plus the ones out for the
//! period's sample. Each answer is turned into bytes with that answer's own census.
//!
//! The schedule is put on the run's clock by the guest's step lines: step `i` ends when its
//! `RESULT ... phase=stepI` line reaches the harness, and step 1 began its `ms=` before that.

use crate::report::numbers::{mib_text, or_dash, MIB};
use std::fmt::Write as _;
use std::path::Path;

use memvisor_api::ActiveMemory;
use plotters::style::{RGBColor, BLACK};

use crate::families::phases::experiment::Series;
use crate::families::phases::report::{Meta, Record};
use crate::families::phases::vm::result::{RunResult, RunStatus, StatsPoint};
use crate::report::figure::{color, xs, ys, Axis, Figure, Legend, Line, Panel};
use crate::report::table::{self, Table};

/// How far a step's estimate has to go, from the old size to the new one, to count as there.
pub const REACHED: f64 = 0.9;

/// One step of the schedule on a run's clock (ms since the run started).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepSpan {
    pub start_ms: f64,
    pub end_ms: f64,
    /// What the schedule says the toucher touches.
    pub bytes: u64,
}

/// Where each step of `schedule` began and ended in `run`: measured for the steps whose line
/// arrived, the schedule's length for the others (a run that died before them has no samples
/// there anyway). Without a step 1 line the schedule is taken to start at the first console
/// line.
pub fn timeline(schedule: &[(u64, u64)], run: &RunResult) -> Vec<StepSpan> {
    let phase = |i: usize| {
        let name = format!("step{}", i + 1);
        run.phases.iter().find(|p| p.name == name)
    };
    let boot = run
        .phases
        .iter()
        .find(|p| p.name == "boot")
        .map_or(0.0, |p| p.at_ms);
    let mut start = phase(0).map_or(boot, |p| p.at_ms - p.guest_ms.unwrap_or(0.0));
    let mut spans = Vec::with_capacity(schedule.len());
    for (i, &(mb, secs)) in schedule.iter().enumerate() {
        let end = phase(i).map_or(start + secs as f64 * 1e3, |p| p.at_ms.max(start));
        spans.push(StepSpan {
            start_ms: start,
            end_ms: end,
            bytes: mb << 20,
        });
        start = end;
    }
    spans
}

/// One `GET /stats` answer placed on the schedule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScheduledSample {
    /// Seconds since the schedule started (negative while the guest boots).
    pub t_s: f64,
    /// The schedule's step under way (0-based); `None` before the first and after the last.
    pub step: Option<usize>,
    /// What the schedule says is touched: that step's size, 0 outside the schedule.
    pub touched: u64,
    pub sample: StatsPoint,
}

impl ScheduledSample {
    pub fn estimate(&self) -> f64 {
        self.sample.bytes(self.sample.active.estimate)
    }
}

/// `run`'s samples on `spans`.
pub fn points(spans: &[StepSpan], run: &RunResult) -> Vec<ScheduledSample> {
    let t0 = spans.first().map_or(0.0, |s| s.start_ms);
    run.series
        .iter()
        .map(|s| {
            let step = spans
                .iter()
                .position(|sp| (sp.start_ms..sp.end_ms).contains(&s.at_ms));
            ScheduledSample {
                t_s: (s.at_ms - t0) / 1e3,
                step,
                touched: step.map_or(0, |i| spans[i].bytes),
                sample: *s,
            }
        })
        .collect()
}

/// Which of its parts the estimate (their largest) is: `slow`, `fast`, or `current` (the fast
/// average with the period under way counted in) when that is above the fast one.
pub fn carried_by(a: &ActiveMemory) -> &'static str {
    if a.slow >= a.fast && a.slow >= a.current {
        "slow"
    } else if a.current > a.fast {
        "current"
    } else {
        "fast"
    }
}

/// How the estimate followed one step of the schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct Response {
    /// 1-based, as the guest's phases.
    pub step: usize,
    pub from: u64,
    pub to: u64,
    pub lasted_s: f64,
    /// Seconds from the step's start to the first answer with the estimate 90 % of the way
    /// from `from` to `to`; `None`: not within the step.
    pub reached_s: Option<f64>,
    /// Which average the estimate was when it got there.
    pub carried_by: Option<&'static str>,
    /// The estimate as a fraction and the memory sampled from: at the last answer before the
    /// step, and when the estimate got there. A step onto memory the guest never touched is
    /// followed by the memory sampled from growing; one onto resident memory by the fraction.
    pub before: Option<(f64, u64)>,
    pub then: Option<(f64, u64)>,
    /// The estimate (bytes) and the memory sampled from (bytes) at the step's last answer.
    pub at_end: Option<(f64, u64)>,
}

/// The responses to every step after the first (the first has no size to come from).
pub fn responses(spans: &[StepSpan], points: &[ScheduledSample]) -> Vec<Response> {
    let mut out = Vec::new();
    for i in 1..spans.len() {
        let (from, to) = (spans[i - 1].bytes, spans[i].bytes);
        let (f, t) = (from as f64, to as f64);
        let mark = f + REACHED * (t - f);
        let inside: Vec<&ScheduledSample> = points.iter().filter(|p| p.step == Some(i)).collect();
        let parts = |p: &ScheduledSample| (p.sample.active.estimate, p.sample.base_bytes());
        let before = points.iter().rfind(|p| p.step == Some(i - 1)).map(parts);
        let up = to >= from;
        let hit = inside.iter().find(|p| {
            if up {
                p.estimate() >= mark
            } else {
                p.estimate() <= mark
            }
        });
        out.push(Response {
            step: i + 1,
            from,
            to,
            lasted_s: (spans[i].end_ms - spans[i].start_ms) / 1e3,
            reached_s: hit.map(|p| p.t_s - (spans[i].start_ms - spans[0].start_ms) / 1e3),
            carried_by: hit.map(|p| carried_by(&p.sample.active)),
            before,
            then: hit.map(|p| parts(p)),
            at_end: inside.last().map(|p| (p.estimate(), p.sample.base_bytes())),
        });
    }
    out
}

/// The CSV header.
pub const CSV_HEADER: &str = "experiment,config,rep,status,t_s,step,touched_bytes,sampled_from_bytes,estimate_bytes,slow_bytes,fast_bytes,current_bytes,estimate,slow,fast,current,periods,last_touched_pages,last_sampled_pages";

/// `results.csv`: one row per answer of every run.
pub fn csv(name: &str, series: &Series, records: &[Record]) -> String {
    let mut t = Table::new(CSV_HEADER.split(','));
    for r in records {
        let spans = timeline(&series.schedule, &r.result);
        for p in points(&spans, &r.result) {
            let (s, a) = (&p.sample, &p.sample.active);
            let (f0, f6) = (|v: f64| format!("{v:.0}"), |v: f64| format!("{v:.6}"));
            t.row(crate::cells![
                name,
                r.config.name,
                r.rep,
                r.result.status.as_str(),
                format!("{:.3}", p.t_s),
                p.step.map_or(String::new(), |i| (i + 1).to_string()),
                p.touched,
                s.base_bytes(),
                f0(s.bytes(a.estimate)),
                f0(s.bytes(a.slow)),
                f0(s.bytes(a.fast)),
                f0(s.bytes(a.current)),
                f6(a.estimate),
                f6(a.slow),
                f6(a.fast),
                f6(a.current),
                a.periods,
                a.last_touched_pages,
                a.last_sampled_pages,
            ]);
        }
    }
    t.csv()
}

/// `report.md`.
pub fn markdown(meta: &Meta<'_>, series: &Series, records: &[Record]) -> String {
    let exp = meta.experiment;
    let period = series.sample_period.as_secs_f64();
    let mut s = String::new();
    s.push_str(&crate::families::figures::heading(exp.name));
    let _ = writeln!(s, "{}.\n", exp.about);
    let sched: Vec<String> = series
        .schedule
        .iter()
        .map(|(m, t)| format!("{m} MiB for {t} s"))
        .collect();
    let (mem, limit, reps) = (exp.mem >> 20, exp.limit.unwrap_or(exp.mem) >> 20, meta.reps);
    let workload = exp.steps.first().map_or("toucher", |st| st.workload);
    let (sched, pages) = (sched.join(", then "), series.sample_pages);
    let every = series.every.as_secs_f64();
    let _ = writeln!(s, "Guest RAM {mem} MiB under memvisor's pager with a limit of {limit} MiB: the pager holds guest RAM (sampling needs it to) and never reclaims, so only the sampling moves pages. The `{workload}` workload touches {sched}. The pager samples {pages} resident pages every {period} s (`--sample-pages {pages} --sample-period {period}`; ESX: 100 pages every 30 s), and the harness asks for `GET /stats` every {every} s. {reps} run(s).\n");
    let _ = writeln!(
        s,
        "The estimate is a fraction of the pages sampled, which are drawn from the resident ones; in bytes it is that fraction of the memory sampled from (resident pages plus those out for the period's sample) at the moment of each answer. The averages are kept in sampling periods, so times are also given in periods ({period} s each; ESX's period is 30 s).\n"
    );
    let _ = writeln!(
        s,
        "There is no QEMU peer in this experiment: QEMU/KVM has no working-set estimator to measure against. The reference is the paper's Fig. 6 and its claim that the estimate follows a growing working set quickly and a shrinking one slowly.\n"
    );
    let (ups, downs) = step_responses(&mut s, series, records);
    against_esx(&mut s, series, &ups, &downs);
    runs_table(&mut s, records);
    s.push('\n');
    crate::families::phases::report::write_setup(&mut s, meta, &[]);
    s
}
/// How the estimate followed each step of each run; returns when each step up and each step
/// down was reached (`None`: not within the step).
fn step_responses(
    s: &mut String,
    series: &Series,
    records: &[Record],
) -> (Vec<Option<f64>>, Vec<Option<f64>>) {
    let period = series.sample_period.as_secs_f64();
    let _ = writeln!(
        s,
        "## How the estimate followed each step\n\n\"Reached\": the first answer with the estimate {:.0} % of the way from the old size to the new one, from the step's start; \"carried by\": which average the estimate (their largest) was then.\n",
        REACHED * 100.0
    );
    let mut t = Table::new("configuration | rep | step | touched MiB | lasted s | reached after s | periods | carried by | estimate (fraction): before → then | sampled from MiB: before → then | estimate at the step's end MiB".split(" | "));
    let mut ups = Vec::new();
    let mut downs = Vec::new();
    for r in records {
        let spans = timeline(&series.schedule, &r.result);
        let pts = points(&spans, &r.result);
        for x in responses(&spans, &pts) {
            if x.to > x.from {
                ups.push(x.reached_s);
            } else if x.to < x.from {
                downs.push(x.reached_s);
            }
            let fraction = |x: Option<(f64, u64)>| or_dash(x.map(|x| x.0), 2);
            let from = |x: Option<(f64, u64)>| or_dash(x.map(|x| (x.1 >> 20) as f64), 0);
            t.row(vec![
                r.config.name.to_owned(),
                r.rep.to_string(),
                x.step.to_string(),
                format!("{} → {}", x.from >> 20, x.to >> 20),
                format!("{:.0}", x.lasted_s),
                x.reached_s
                    .map_or_else(|| "not within the step".into(), |t| format!("{t:.1}")),
                or_dash(x.reached_s.map(|t| t / period), 1),
                x.carried_by.unwrap_or("-").to_owned(),
                format!("{} → {}", fraction(x.before), fraction(x.then)),
                format!("{} → {}", from(x.before), from(x.then)),
                x.at_end.map_or_else(|| "-".into(), |(e, _)| mib_text(e, 0)),
            ]);
        }
    }
    s.push_str(&t.markdown());
    (ups, downs)
}

/// The steps' times against what ESX's Fig. 6 shows.
fn against_esx(s: &mut String, series: &Series, ups: &[Option<f64>], downs: &[Option<f64>]) {
    let period = series.sample_period.as_secs_f64();
    let each = |t: &Option<f64>| t.map_or_else(|| "never".into(), |t| format!("{t:.1} s"));
    let show = |v: &[Option<f64>]| match v.iter().map(each).collect::<Vec<_>>() {
        got if got.is_empty() => "none".to_owned(),
        got => got.join(", "),
    };
    let _ = writeln!(
        s,
        "\n## Against ESX Fig. 6\n\nESX's estimate \"responds quickly as more memory is touched, tracking the fast moving average, and more slowly as less memory is touched, tracking the slow moving average\". Here, with gains 0.5 (fast) and 0.1 (slow): steps up reached {:.0} % after {}; steps down after {}. The slow average alone needs ln 0.1 / ln 0.9 ≈ 22 periods ({:.0} s here, 11 minutes at ESX's 30 s) to come 90 % of the way down from a level it had settled at; the fast one, 3.3 periods up, fewer with the period under way counted in.\n",
        REACHED * 100.0,
        show(ups),
        show(downs),
        22.0 * period
    );
}

/// Every run: its status, how many answers and sampling periods, why it ended badly.
fn runs_table(s: &mut String, records: &[Record]) {
    let _ = writeln!(s, "## Runs\n");
    let mut t = Table::new(
        "configuration | rep | status | answers | sampling periods | reason".split(" | "),
    );
    for r in records {
        let res = &r.result;
        t.row(vec![
            r.config.name.to_owned(),
            r.rep.to_string(),
            res.status.as_str().to_owned(),
            res.series.len().to_string(),
            res.series
                .last()
                .map_or(0, |x| x.active.periods)
                .to_string(),
            table::text(&res.reason),
        ]);
    }
    s.push_str(&t.markdown());
}

/// The schedule as a staircase, in seconds since it started and MiB.
fn staircase(spans: &[StepSpan]) -> Vec<(f64, f64)> {
    let t0 = spans.first().map_or(0.0, |s| s.start_ms);
    let at = |ms: f64| (ms - t0) / 1e3;
    let step = |s: &StepSpan| [s.start_ms, s.end_ms].map(|ms| (at(ms), s.bytes as f64 / MIB));
    spans.iter().flat_map(step).collect()
}

/// `workingset.svg`: the first run's touched size, estimate and averages (ESX Fig. 6); below
/// it, when there are more runs, every run's estimate.
pub fn plot(path: &Path, name: &str, series: &Series, records: &[Record]) -> Result<(), String> {
    let Some(first) = records.first() else {
        return Err("no run to plot".into());
    };
    let spans = timeline(&series.schedule, &first.result);
    let pts = points(&spans, &first.result);
    let curve = |f: &dyn Fn(&ScheduledSample) -> f64| -> Vec<(f64, f64)> {
        pts.iter().map(|p| (p.t_s, f(p) / MIB)).collect()
    };
    let touched = Line::new("touched (schedule)", BLACK, 3, staircase(&spans));
    let part = |name, c, width, f: fn(&ActiveMemory) -> f64| {
        let pts = curve(&|p| p.sample.bytes(f(&p.sample.active)));
        Line::new(name, color(c), width, pts)
    };
    let sampled_from = curve(&|p| p.sample.base_bytes() as f64);
    let lines = vec![
        Line::new(
            "memory sampled from",
            RGBColor(170, 170, 170),
            1,
            sampled_from,
        ),
        touched.clone(),
        part("estimate (the largest)", 1, 3, |a| a.estimate),
        part("slow average (gain 0.1)", 2, 2, |a| a.slow).dashed(),
        part("fast average (gain 0.5)", 3, 2, |a| a.fast).dashed(),
        part("fast, period under way", 4, 1, |a| a.current),
    ];
    let status = match first.result.status {
        RunStatus::Ok => String::new(),
        st => format!(", {}", st.as_str()),
    };
    let mut panels = vec![panel(
        format!(
            "{name}: working set and its estimate, {} rep {}{status} ({} pages every {} s)",
            first.config.name,
            first.rep,
            series.sample_pages,
            series.sample_period.as_secs_f64()
        ),
        lines,
    )];
    if records.len() > 1 {
        let mut all = vec![touched];
        for (i, r) in records.iter().enumerate() {
            let spans = timeline(&series.schedule, &r.result);
            let pts = points(&spans, &r.result);
            let estimates = pts.iter().map(|p| (p.t_s, p.estimate() / MIB)).collect();
            let name = format!("{} rep {}", r.config.name, r.rep);
            all.push(Line::new(name, color(i + 1), 2, estimates));
        }
        panels.push(panel(format!("{name}: every run's estimate"), all));
    }
    let height = 560 * u32::try_from(panels.len()).unwrap_or(1);
    Figure::column((1200, height), panels).write(path)
}

/// A panel of the figure: MiB over the seconds since the schedule started.
fn panel(title: String, lines: Vec<Line>) -> Panel {
    let x = Axis::linear(
        xs(&lines).fold(0.0f64, f64::min),
        xs(&lines).fold(1.0f64, f64::max),
    );
    let y = Axis::linear(0.0, ys(&lines).fold(1.0f64, f64::max) * 1.08);
    Panel {
        lines,
        legend: Legend::Margin(300),
        ..Panel::new(title, "seconds since the schedule started", "MiB", x, y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::families::phases::vm::result::Phase;

    fn phase(name: &str, at_ms: f64, guest_ms: Option<f64>) -> Phase {
        Phase {
            name: name.into(),
            at_ms,
            guest_ms,
            ..Phase::default()
        }
    }

    fn run(phases: Vec<Phase>, series: Vec<StatsPoint>) -> RunResult {
        RunResult {
            exit: "1".into(),
            phases,
            series,
            ..RunResult::default()
        }
    }

    /// A sample at `at_ms` with 100 MiB sampled from and the given fractions.
    fn sample(at_ms: f64, slow: f64, fast: f64, current: f64) -> StatsPoint {
        StatsPoint {
            at_ms,
            active: ActiveMemory {
                estimate: slow.max(fast).max(current),
                slow,
                fast,
                current,
                ..ActiveMemory::default()
            },
            resident_pages: 25_000,
            sampled_pages: 600,
        }
    }

    #[test]
    fn the_schedule_is_placed_by_the_guest_lines() {
        let r = run(
            vec![
                phase("boot", 500.0, None),
                phase("step1", 3_100.0, Some(2_000.0)),
                phase("step2", 6_200.0, Some(3_000.0)),
            ],
            vec![],
        );
        // Step 3's line never came: it gets the schedule's length.
        let spans = timeline(&[(10, 2), (50, 3), (20, 4)], &r);
        let got: Vec<(f64, f64, u64)> = spans
            .iter()
            .map(|s| (s.start_ms, s.end_ms, s.bytes))
            .collect();
        let want = [
            (1_100.0, 3_100.0, 10 << 20),
            (3_100.0, 6_200.0, 50 << 20),
            (6_200.0, 10_200.0, 20 << 20),
        ];
        assert_eq!(got, want);
        // No step line at all: the schedule starts at the first console line.
        let r = run(vec![phase("boot", 500.0, None)], vec![]);
        assert_eq!(timeline(&[(10, 2)], &r)[0].start_ms, 500.0);
        assert!(timeline(&[], &r).is_empty());
    }

    #[test]
    fn responses_measure_the_way_up_and_down() {
        // 0–2 s at 10 MiB, 2–5 s at 90 MiB, 5–10 s at 10 MiB; 100 MiB sampled from.
        let phases = vec![
            phase("step1", 2_000.0, Some(2_000.0)),
            phase("step2", 5_000.0, Some(3_000.0)),
            phase("step3", 10_000.0, Some(5_000.0)),
        ];
        let series = vec![
            sample(-500.0, 1.0, 1.0, 1.0),
            sample(1_000.0, 0.2, 0.1, 0.1),
            sample(2_500.0, 0.2, 0.1, 0.5),
            // 90 % of the way up from 10 to 90 MiB is 82 MiB.
            sample(3_500.0, 0.3, 0.5, 0.85),
            sample(4_500.0, 0.4, 0.9, 0.9),
            sample(6_000.0, 0.35, 0.5, 0.5),
            // 90 % of the way down is 18 MiB.
            sample(8_000.0, 0.25, 0.1, 0.1),
            sample(9_500.0, 0.17, 0.1, 0.1),
            sample(11_000.0, 0.1, 0.1, 0.1),
        ];
        let r = run(phases, series);
        let spans = timeline(&[(10, 2), (90, 3), (10, 5)], &r);
        let pts = points(&spans, &r);
        assert_eq!(pts[0].step, None);
        assert_eq!(pts[0].touched, 0);
        assert!((pts[0].t_s + 0.5).abs() < 1e-9);
        assert_eq!(pts[3].step, Some(1));
        assert_eq!(pts[8].step, None, "after the schedule");
        let base = 25_600.0 * 4096.0;
        assert!((pts[3].estimate() - 0.85 * base).abs() < 1.0);
        let rs = responses(&spans, &pts);
        assert_eq!(rs.len(), 2);
        assert_eq!((rs[0].step, rs[0].from, rs[0].to), (2, 10 << 20, 90 << 20));
        assert!((rs[0].reached_s.unwrap() - 1.5).abs() < 1e-9, "{rs:?}");
        assert_eq!(rs[0].carried_by, Some("current"));
        assert!((rs[0].lasted_s - 3.0).abs() < 1e-9);
        assert!((rs[1].reached_s.unwrap() - 4.5).abs() < 1e-9, "{rs:?}");
        assert_eq!(rs[1].carried_by, Some("slow"));
        let (end, b) = rs[1].at_end.unwrap();
        assert!((end - 0.17 * base).abs() < 1.0);
        assert_eq!(rs[0].before, Some((0.2, 25_600 * 4096)));
        assert_eq!(rs[0].then, Some((0.85, 25_600 * 4096)));
        assert_eq!(rs[1].before, Some((0.9, 25_600 * 4096)));
        assert_eq!(b, 25_600 * 4096);
        // An estimate that never gets there within its step.
        let stuck = run(
            vec![
                phase("step1", 2_000.0, Some(2_000.0)),
                phase("step2", 5_000.0, Some(3_000.0)),
            ],
            vec![sample(3_000.0, 1.0, 1.0, 1.0)],
        );
        let spans = timeline(&[(90, 2), (10, 3)], &stuck);
        let rs = responses(&spans, &points(&spans, &stuck));
        assert_eq!(rs[0].reached_s, None);
        assert_eq!(rs[0].carried_by, None);
        assert_eq!(rs[0].then, None);
        assert_eq!(rs[0].before, None, "no answer in step 1");
    }

    #[test]
    fn the_estimate_is_carried_by_its_largest_part() {
        let a = |slow, fast, current| ActiveMemory {
            slow,
            fast,
            current,
            ..ActiveMemory::default()
        };
        assert_eq!(carried_by(&a(0.8, 0.3, 0.3)), "slow");
        assert_eq!(carried_by(&a(0.2, 0.6, 0.6)), "fast");
        assert_eq!(carried_by(&a(0.2, 0.3, 0.6)), "current");
        assert_eq!(carried_by(&a(1.0, 1.0, 1.0)), "slow", "at the start");
    }
}
