//! The outputs of a benchmark: `results.csv` (one row per run and phase, every expected phase
//! present even when the run died before it), `report.md` (medians, min and max, ratios against
//! the reference configuration, runs that did not complete and why, set-up and environment).

use crate::report::numbers::{fixed, median, mib_text, or_dash, summary};
use std::fmt::Write as _;

use memvisor_api::{DiskStats, IndirectionStats, PagerCounters, PatternStats, VmStats};

use crate::families::phases::configs::{Adds, Config, Hv};
use crate::families::phases::experiment::{Experiment, Step};
use crate::families::phases::vm::result::{fault_latency, Phase, RunResult, RunStatus};
use crate::report::table::Table;

/// One run of one configuration.
pub struct Record {
    pub step: usize,
    pub config: &'static Config,
    pub rep: u32,
    pub result: RunResult,
}

/// The runs at one point of a sweep ([`super::sweep`]).
pub struct Point {
    /// The point on the sweep's axis ([`Sweep::points`](super::experiment::Sweep::points)).
    pub at: u64,
    pub records: Vec<Record>,
}

/// What the report says besides the numbers.
pub struct Meta<'a> {
    pub experiment: &'a Experiment,
    pub reps: u32,
    pub reference: &'static str,
    pub configs: &'a [&'static Config],
    /// Set-up and tunings, one line each.
    pub notes: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// The CSV header.
pub const CSV_HEADER: &str = "experiment,workload,config,rep,phase,status,exit,phase_done,ms,guest_ms,host_ms,host_swap_in_bytes,host_swap_out_bytes,hv_read_bytes,hv_write_bytes,peak_rss_bytes,host_swap_peak_bytes,pager_swap_read_bytes,pager_swap_written_bytes,pager_faults_swap,faults_guest,faults_vmm,cg_failcnt,cg_oom_kills,reason";

/// The phases every run of `step` has rows for: `boot` (host: start to the first console line),
/// the guest's phases, `wall` (host: the whole run).
pub fn expected_phases(step: &Step) -> Vec<String> {
    let mut v = vec!["boot".to_owned()];
    v.extend(step.phases.iter().cloned());
    v.push("wall".into());
    v
}

/// The time a phase is compared by: the guest's own for guest phases, the host's for `boot`
/// and `wall`.
pub fn phase_ms(p: &Phase) -> f64 {
    p.guest_ms.unwrap_or(p.host_ms)
}

/// Bytes a phase wrote to swap as the host sees it: host swap-outs plus the hypervisor process's
/// own writes (memvisor's pager swap file; the data disks are read-only or untouched).
pub fn swap_written(p: &Phase) -> u64 {
    p.swap_out + p.io.write_bytes
}

/// `results.csv`.
pub fn csv(exp: &Experiment, records: &[Record]) -> String {
    let mut t = Table::new(CSV_HEADER.split(','));
    for r in records {
        let step = &exp.steps[r.step];
        let res = &r.result;
        let (failcnt, ooms) = res.cgroup.map_or((String::new(), String::new()), |c| {
            (c.failcnt.to_string(), c.oom_kills.to_string())
        });
        for name in expected_phases(step) {
            let p = res.phases.iter().find(|p| p.name == name);
            let mut cols: Vec<String> = vec![
                exp.name.into(),
                step.workload.into(),
                r.config.name.into(),
                r.rep.to_string(),
                name.clone(),
                res.status.as_str().into(),
                res.exit.clone(),
                u8::from(p.is_some()).to_string(),
            ];
            match p {
                Some(p) => cols.extend([
                    format!("{:.3}", phase_ms(p)),
                    fixed(p.guest_ms, 3),
                    format!("{:.3}", p.host_ms),
                    p.swap_in.to_string(),
                    p.swap_out.to_string(),
                    p.io.read_bytes.to_string(),
                    p.io.write_bytes.to_string(),
                ]),
                None => cols.extend(std::iter::repeat_n(String::new(), 7)),
            }
            cols.push(res.peak_rss.to_string());
            cols.push(res.host_swap_peak.to_string());
            match p.and_then(|p| p.pager) {
                Some(pc) => cols.extend([
                    pc.swap_bytes_read.to_string(),
                    pc.swap_bytes_written.to_string(),
                    pc.faults_swap.to_string(),
                ]),
                None => cols.extend(std::iter::repeat_n(String::new(), 3)),
            }
            match p.and_then(|p| p.faults) {
                Some(f) => cols.extend([f.guest.to_string(), f.vmm.to_string()]),
                None => cols.extend(std::iter::repeat_n(String::new(), 2)),
            }
            cols.extend([failcnt.clone(), ooms.clone(), res.reason.clone()]);
            t.row(cols);
        }
    }
    t.csv()
}
/// Values of completed phases `phase` of `config` in `step`.
pub fn values(
    records: &[Record],
    step: usize,
    config: &str,
    phase: &str,
    f: impl Fn(&Phase) -> f64,
) -> Vec<f64> {
    measured(records, step, config, phase, |p| Some(f(p)))
}

/// [`values`] of a measure a completed phase may lack (`None`: not read in that phase).
pub fn measured(
    records: &[Record],
    step: usize,
    config: &str,
    phase: &str,
    f: impl Fn(&Phase) -> Option<f64>,
) -> Vec<f64> {
    records
        .iter()
        .filter(|r| r.step == step && r.config.name == config)
        .filter_map(|r| r.result.phases.iter().find(|p| p.name == phase))
        .filter_map(f)
        .collect()
}

/// Median of a phase's time for a configuration.
pub fn median_ms(records: &[Record], step: usize, config: &str, phase: &str) -> Option<f64> {
    summary(&mut values(records, step, config, phase, phase_ms)).map(|s| s.0)
}

fn ratio(v: Option<f64>, r: Option<f64>) -> String {
    match (v, r) {
        (Some(v), Some(r)) if r > 0.0 => format!("{:.2}", v / r),
        _ => "-".into(),
    }
}

/// The baselines the papers report ratios against (VSwapper: host swap, the balloon and an
/// uncooperative hypervisor swapper), shown beside the main reference when they ran.
const PEERS: &[&str] = &[
    "qemu-hostswap",
    "qemu-balloon",
    "memvisor-baseline",
    "memvisor-balloon",
];

/// `report.md`.
pub fn markdown(meta: &Meta<'_>, records: &[Record]) -> String {
    markdown_with(meta, records, &|_, _| {})
}

/// [`markdown`] with `more(report, step)` writing an experiment's own sections at the end of
/// each step's.
pub fn markdown_with(
    meta: &Meta<'_>,
    records: &[Record],
    more: &dyn Fn(&mut String, usize),
) -> String {
    let exp = meta.experiment;
    let reference = meta.reference;
    let mut s = String::new();
    s.push_str(&crate::families::figures::heading(exp.name));
    let _ = writeln!(s, "{}.\n", exp.about);
    let _ = writeln!(
        s,
        "Guest RAM {} MiB{}; {} repetition(s), interleaved across configurations. Reference: **{reference}**. A ratio is the configuration's median over the reference's median for the same phase (above 1: slower). Medians are over the runs that completed that phase; `ok` counts runs that completed.\n",
        exp.mem >> 20,
        exp.limit
            .map_or(String::new(), |l| format!(", limit {} MiB for the limited configurations", l >> 20)),
        meta.reps
    );
    for (si, step) in exp.steps.iter().enumerate() {
        let title = if exp.steps.len() > 1 {
            format!(" — {}", step.workload)
        } else {
            String::new()
        };
        whole_run(&mut s, meta, records, si, &title);
        against_peers(&mut s, meta, records, si, &title);
        phase_times(&mut s, meta, records, si, &title);
        against_twins(&mut s, meta, records, si, &title);
        balloon_counters(&mut s, meta, records, si, &title);
        swap_per_phase(&mut s, meta, records, si, &title);
        faults_per_phase(&mut s, meta, records, si, &title);
        host_measurements(&mut s, meta, records, si, &title);
        reference_patterns(&mut s, meta, records, si, &title);
        more(&mut s, si);
        if step.guest_swap_mb.is_some() {
            double_paging(&mut s, meta, records, si, &title);
        }
        s.push('\n');
    }
    incomplete_runs(&mut s, meta, records);
    let balloon = |r: &Record| {
        Some(format!(
            "{} rep {}: {}",
            r.config.name,
            r.rep,
            r.result.balloon.as_ref()?
        ))
    };
    let balloons: Vec<String> = records.iter().filter_map(balloon).collect();
    write_setup(&mut s, meta, &balloons);
    s
}
/// The runs of `config` in step `si`.
fn runs_of<'a>(
    records: &'a [Record],
    si: usize,
    config: &'a str,
) -> impl Iterator<Item = &'a Record> + 'a {
    records
        .iter()
        .filter(move |r| r.step == si && r.config.name == config)
}

/// The median of `v` with `decimals` decimals, `-` when `v` is empty.
pub(super) fn median_text(v: Vec<f64>, decimals: usize) -> String {
    or_dash(median(v), decimals)
}

/// A Markdown table of columns `head` (split at ` | `) with one row per configuration of
/// `configs`: its name, then its `cells`.
fn per_config(head: &str, configs: &[&Config], cells: impl Fn(&Config) -> Vec<String>) -> String {
    let mut t = Table::new(head.split(" | "));
    for c in configs {
        let mut row = vec![c.name.to_owned()];
        row.extend(cells(c));
        t.row(row);
    }
    t.markdown()
}

/// The whole run per configuration: how many completed or were killed, the wall time and boot
/// time against the reference.
fn whole_run(s: &mut String, meta: &Meta<'_>, records: &[Record], si: usize, title: &str) {
    let reference = meta.reference;
    let step = &meta.experiment.steps[si];
    let (workload, cmdline) = (step.workload, &step.cmdline);
    let _ = writeln!(s, "## Whole run{title} (`{workload}` `{cmdline}`)\n");
    let ref_wall = median_ms(records, si, reference, "wall");
    let ref_boot = median_ms(records, si, reference, "boot");
    let head = format!("configuration | ok | killed | wall s median | min–max | vs {reference} | boot ms | vs {reference}");
    s.push_str(&per_config(&head, meta.configs, |c| {
        let runs: Vec<&Record> = runs_of(records, si, c.name).collect();
        let count = |st: RunStatus| runs.iter().filter(|r| r.result.status == st).count();
        let wall = summary(&mut values(records, si, c.name, "wall", phase_ms));
        let boot = median_ms(records, si, c.name, "boot");
        vec![
            format!("{}/{}", count(RunStatus::Ok), runs.len()),
            count(RunStatus::Killed).to_string(),
            or_dash(wall.map(|w| w.0 / 1e3), 2),
            wall.map_or("-".into(), |w| format!("{:.2}–{:.2}", w.1 / 1e3, w.2 / 1e3)),
            ratio(wall.map(|w| w.0), ref_wall),
            or_dash(boot, 0),
            ratio(boot, ref_boot),
        ]
    }));
}

/// The wall-time ratio against each of the papers' baselines that ran (`-` where the peer
/// completed no run).
fn against_peers(s: &mut String, meta: &Meta<'_>, records: &[Record], si: usize, title: &str) {
    let ran = |p: &&str| *p != meta.reference && meta.configs.iter().any(|c| c.name == *p);
    let peers: Vec<&str> = PEERS.iter().copied().filter(ran).collect();
    if peers.is_empty() {
        return;
    }
    s.push_str(&format!("\n### Whole run{title} against the papers' baselines: wall-time ratio (above 1: slower)\n\n"));
    let head = format!("configuration | vs {}", peers.join(" | vs "));
    s.push_str(&per_config(&head, meta.configs, |c| {
        let wall = median_ms(records, si, c.name, "wall");
        let of = |p: &&str| ratio(wall, median_ms(records, si, p, "wall"));
        peers.iter().map(of).collect()
    }));
}

/// The guest's time per phase: median, min–max and the ratio against the reference.
fn phase_times(s: &mut String, meta: &Meta<'_>, records: &[Record], si: usize, title: &str) {
    let reference = meta.reference;
    let step = &meta.experiment.steps[si];
    s.push_str(&format!(
        "\n### Guest time per phase{title}: median ms (min–max) and ratio vs {reference}\n\n"
    ));
    let head = format!("configuration | {}", step.phases.join(" | "));
    s.push_str(&per_config(&head, meta.configs, |c| {
        let of = |ph: &String| {
            let st = summary(&mut values(records, si, c.name, ph, phase_ms));
            let r = ratio(st.map(|x| x.0), median_ms(records, si, reference, ph));
            st.map_or("-".into(), |(m, lo, hi, _)| {
                format!("{m:.0} ({lo:.0}–{hi:.0}) ×{r}")
            })
        };
        step.phases.iter().map(of).collect()
    }));
}

/// Each configuration that only adds something to another against that twin
/// ([`Config::twin`]: a balloon device, or the jail and the filters), per phase: the ratio of
/// the medians, and the median and min–max of the repetitions' own ratios (repetition k of one
/// against repetition k of the other: the runs are interleaved, so a pair shares the machine's
/// state more than two medians do). One table per kind of twin.
fn against_twins(s: &mut String, meta: &Meta<'_>, records: &[Record], si: usize, title: &str) {
    for adds in [Adds::BalloonDevice, Adds::Confinement] {
        against_twin(s, meta, records, si, title, adds);
    }
}

fn against_twin(
    s: &mut String,
    meta: &Meta<'_>,
    records: &[Record],
    si: usize,
    title: &str,
    adds: Adds,
) {
    let ran = |t: &Config| meta.configs.iter().any(|o| o.name == t.name);
    let twin = |c: &&Config| {
        let (t, a) = c.twin()?;
        (a == adds && ran(t)).then_some((c.name, t.name))
    };
    let pairs: Vec<(&str, &str)> = meta.configs.iter().filter_map(twin).collect();
    if pairs.is_empty() {
        return;
    }
    let step = &meta.experiment.steps[si];
    let what = match adds {
        Adds::BalloonDevice => "The balloon device",
        Adds::Confinement => "Confinement, the jail and the filters",
    };
    s.push_str(&format!("\n### {what}{title}: with it over the same VM without it (above 1: slower); the ratio of the medians, then the median and min–max of the repetitions' pairs. Guest time per phase, and the CPU time of the whole run (every thread of the hypervisor, user and system: the work, without the waits for a CPU of a loaded host)\n\n"));
    let head = format!(
        "with | without | {} | CPU, whole run",
        step.phases.join(" | ")
    );
    let mut t = Table::new(head.split(" | "));
    let cell = |med: String, mut per_rep: Vec<f64>| {
        let pairs = summary(&mut per_rep).map_or("-".into(), |(m, lo, hi, n)| {
            format!("(pairs {m:.2}, {lo:.2}–{hi:.2}, n={n})")
        });
        format!("{med} {pairs}")
    };
    for (with, without) in pairs {
        let mut row = vec![with.to_owned(), without.to_owned()];
        for ph in &step.phases {
            let time = |r: &RunResult| r.phases.iter().find(|p| p.name == *ph).map(phase_ms);
            let medians = ratio(
                median_ms(records, si, with, ph),
                median_ms(records, si, without, ph),
            );
            row.push(cell(medians, pair_ratios(records, si, with, without, time)));
        }
        let ok_cpu = |r: &RunResult| r.cpu_ms.filter(|_| r.status == RunStatus::Ok);
        let cpu = |c: &str| {
            median(
                runs_of(records, si, c)
                    .filter_map(|r| ok_cpu(&r.result))
                    .collect(),
            )
        };
        row.push(cell(
            ratio(cpu(with), cpu(without)),
            pair_ratios(records, si, with, without, ok_cpu),
        ));
        t.row(row);
    }
    s.push_str(&t.markdown());
}

/// The ratio of `f` of `a`'s run to `f` of `b`'s in each repetition where both have it.
fn pair_ratios(
    records: &[Record],
    si: usize,
    a: &str,
    b: &str,
    f: impl Fn(&RunResult) -> Option<f64>,
) -> Vec<f64> {
    let value = |config: &str, rep: u32| {
        runs_of(records, si, config)
            .find(|r| r.rep == rep)
            .and_then(|r| f(&r.result))
    };
    runs_of(records, si, a)
        .filter_map(|r| match (value(a, r.rep), value(b, r.rep)) {
            (Some(x), Some(y)) if y > 0.0 => Some(x / y),
            _ => None,
        })
        .collect()
}

/// What a balloon device's configuration did, from memvisor's counters at the end of each run
/// (medians): pages reported, zero-page faults and faults on released pages with the reported
/// pages they took back, and the vCPUs' MMIO and port exits (QEMU's are inside KVM: `-`).
fn balloon_counters(s: &mut String, meta: &Meta<'_>, records: &[Record], si: usize, title: &str) {
    // memvisor's configurations with a balloon device, and those one is compared with.
    let twin = |c: &Config| {
        meta.configs
            .iter()
            .any(|o| o.without_balloon().is_some_and(|t| t.name == c.name))
    };
    let shown = |c: &&&Config| c.hv == Hv::Memvisor && (c.balloon_device() || twin(c));
    let shown: Vec<&Config> = meta.configs.iter().filter(shown).copied().collect();
    if shown.is_empty() {
        return;
    }
    s.push_str(&format!("\n### Balloon counters{title}: medians over the runs (memvisor's `GET /stats` at the end)\n\n"));
    s.push_str(&per_config("configuration | reported pages | zero faults | faults on released pages | reported pages taken back | MMIO exits | port exits", &shown, |c| {
        let med = |f: &dyn Fn(&VmStats) -> Option<u64>| {
            let at_end = |r: &Record| r.result.final_stats.as_ref().and_then(f);
            median_text(runs_of(records, si, c.name).filter_map(at_end).map(|x| x as f64).collect(), 0)
        };
        vec![
            med(&|v| v.balloon.as_ref().map(|b| b.reported_pages)),
            med(&|v| v.pager.as_ref().map(|p| p.counters.faults_zero)),
            med(&|v| v.pager.as_ref().map(|p| p.counters.faults_released)),
            med(&|v| v.pager.as_ref().map(|p| p.counters.false_reads_avoided)),
            med(&|v| Some(v.exits.mmio)),
            med(&|v| Some(v.exits.io)),
        ]
    }));
}

/// The guest's page cache by reference pattern when the run ended (HyperDealer2 Fig. 10), for
/// the configurations whose pager tracked it (the Swap Mapper on); nothing for the others. The
/// end of the run, not of each phase: the next phase starts as soon as the guest prints one's
/// result, before the harness could ask.
fn reference_patterns(s: &mut String, meta: &Meta<'_>, records: &[Record], si: usize, title: &str) {
    fn patterns(r: &Record) -> Option<&PatternStats> {
        let pager = r.result.final_stats.as_ref()?.pager.as_ref()?;
        pager.patterns.as_ref()
    }
    let tracked = |c: &&&Config| runs_of(records, si, c.name).any(|r| patterns(r).is_some());
    let shown: Vec<&Config> = meta.configs.iter().filter(tracked).copied().collect();
    if shown.is_empty() {
        return;
    }
    s.push_str(&format!("\n### Reference patterns{title}: the guest's page cache the pager tracked when the run ended, by the sequences its disk reads formed (median)\n\n"));
    s.push_str(&per_config("configuration | sequential MiB | loop MiB | unclassified MiB | in sequences or loops | sequences | loops", &shown, |c| {
        let med = |f: fn(&PatternStats) -> u64| {
            let v = runs_of(records, si, c.name).filter_map(|r| patterns(r).map(|p| f(p) as f64));
            median(v.collect())
        };
        let (seq, lp, other) = (
            med(|p| p.sequential_pages),
            med(|p| p.loop_pages),
            med(|p| p.unclassified_pages),
        );
        let mib = |pages: Option<f64>| pages.map_or("-".into(), |n| mib_text(n * 4096.0, 1));
        let share = match (seq, lp, other) {
            (Some(a), Some(b), Some(o)) if a + b + o > 0.0 => {
                format!("{:.0} %", 100.0 * (a + b) / (a + b + o))
            }
            _ => "-".into(),
        };
        vec![
            mib(seq),
            mib(lp),
            mib(other),
            share,
            or_dash(med(|p| p.sequential), 0),
            or_dash(med(|p| p.loops), 0),
        ]
    }));
}

/// What was written to swap per phase: host swap-outs and the hypervisor process's writes.
fn swap_per_phase(s: &mut String, meta: &Meta<'_>, records: &[Record], si: usize, title: &str) {
    let step = &meta.experiment.steps[si];
    s.push_str(&format!("\n### Written to swap per phase{title}: MiB, median (host swap-outs + the hypervisor process's writes)\n\n"));
    let head = format!("configuration | {}", step.phases.join(" | "));
    s.push_str(&per_config(&head, meta.configs, |c| {
        let of = |ph: &String| {
            let v = values(records, si, c.name, ph, |p| swap_written(p) as f64);
            median(v).map_or("-".into(), |m| mib_text(m, 1))
        };
        step.phases.iter().map(of).collect()
    }));
}

/// The host's faults that read a page in, per phase, in the hypervisor's context (VSwapper
/// Fig. 9b) and in the guest's (Fig. 9c).
fn faults_per_phase(s: &mut String, meta: &Meta<'_>, records: &[Record], si: usize, title: &str) {
    let step = &meta.experiment.steps[si];
    type Of = fn(&Phase) -> Option<f64>;
    let contexts: [(&str, Of); 2] = [
        (
            "the hypervisor's context: a VMM thread, a device's I/O above all",
            |p| p.faults.map(|f| f.vmm as f64),
        ),
        ("the guest's context: a vCPU thread", |p| {
            p.faults.map(|f| f.guest as f64)
        }),
    ];
    for (context, of) in contexts {
        s.push_str(&format!("\n### Host faults that read a page in, per phase{title}, in {context}: median (the hypervisor process's major faults, and memvisor's pager's faults on swapped or on-disk pages)\n\n"));
        let head = format!("configuration | {}", step.phases.join(" | "));
        s.push_str(&per_config(&head, meta.configs, |c| {
            let cell = |ph: &String| median_text(measured(records, si, c.name, ph, of), 0);
            step.phases.iter().map(cell).collect()
        }));
    }
}

/// The host's measurements over the whole run, medians of the completed runs.
fn host_measurements(s: &mut String, meta: &Meta<'_>, records: &[Record], si: usize, title: &str) {
    s.push_str(&format!(
        "\n### Host measurements, whole run{title} (median of completed runs, MiB)\n\n"
    ));
    s.push_str(&per_config("configuration | host swap in | host swap out | hypervisor read | hypervisor written | peak RSS | host swap file peak | pager swap read | pager swap written | pager swap faults | pager fault p50/p99 µs", meta.configs, |c| {
        let mib = |v: Vec<f64>| median(v).map_or("-".into(), |m| mib_text(m, 1));
        let wall = |f: &dyn Fn(&Phase) -> f64| mib(values(records, si, c.name, "wall", f));
        let ok = || runs_of(records, si, c.name).filter(|r| r.result.status == RunStatus::Ok);
        let run = |f: &dyn Fn(&RunResult) -> f64| mib(ok().map(|r| f(&r.result)).collect());
        let pager = |f: &dyn Fn(&PagerCounters) -> u64| -> Vec<f64> {
            runs_of(records, si, c.name)
                .filter_map(|r| r.result.phases.iter().find(|p| p.name == "wall"))
                .filter_map(|p| p.pager.map(|pc| f(&pc) as f64))
                .collect()
        };
        let lat: Vec<(u64, u64)> = runs_of(records, si, c.name)
            .filter_map(|r| r.result.final_stats.as_ref().and_then(fault_latency))
            .collect();
        let p = |f: fn(&(u64, u64)) -> u64| median(lat.iter().map(|l| f(l) as f64).collect());
        vec![
            wall(&|p| p.swap_in as f64),
            wall(&|p| p.swap_out as f64),
            wall(&|p| p.io.read_bytes as f64),
            wall(&|p| p.io.write_bytes as f64),
            run(&|r| r.peak_rss as f64),
            run(&|r| r.host_swap_peak as f64),
            mib(pager(&|p| p.swap_bytes_read)),
            mib(pager(&|p| p.swap_bytes_written)),
            median_text(pager(&|p| p.faults_swap), 0),
            match (p(|l| l.0), p(|l| l.1)) {
                (Some(a), Some(b)) => format!("{a:.0}/{b:.0}"),
                _ => "-".into(),
            },
        ]
    }));
}

/// The runs that did not complete, with why.
fn incomplete_runs(s: &mut String, meta: &Meta<'_>, records: &[Record]) {
    let exp = meta.experiment;
    let _ = writeln!(s, "## Runs that did not complete\n");
    let head = "configuration | workload | rep | status | exit | last phase completed | reason";
    let mut t = Table::new(head.split(" | "));
    for r in records.iter().filter(|r| r.result.status != RunStatus::Ok) {
        let last = r.result.phases.last().map_or("-", |p| p.name.as_str());
        t.row(vec![
            r.config.name.to_owned(),
            exp.steps[r.step].workload.to_owned(),
            r.rep.to_string(),
            r.result.status.as_str().to_owned(),
            r.result.exit.clone(),
            last.to_owned(),
            r.result.reason.replace('|', "/"),
        ]);
    }
    if t.rows.is_empty() {
        let _ = writeln!(s, "None.\n");
    } else {
        let _ = writeln!(s, "{}", t.markdown());
    }
}

/// A report's last sections: every configuration, the set-up notes and `extra` lines, then the
/// environment.
pub fn write_setup(s: &mut String, meta: &Meta, extra: &[String]) {
    let _ = writeln!(s, "## Configurations, set-up and tunings\n");
    for c in meta.configs {
        let _ = writeln!(s, "- `{}`: {}", c.name, c.about);
    }
    for n in meta.notes.iter().chain(extra) {
        let _ = writeln!(s, "- {n}");
    }
    crate::report::environment(s, &meta.env);
}

/// The guest's swap disk (`id=swap`) and double paging, from memvisor's final stats, in the shapes
/// of Tesseract's tables: its writes and their holes (Table 1), its reads split between the image
/// and the swap file (Tables 2 and 3), the time each kind of request took (Table 4), and what
/// defragmentation and the victim cache did.
fn double_paging(s: &mut String, meta: &Meta<'_>, records: &[Record], si: usize, title: &str) {
    let tables: [(&str, &str, SwapDiskCells); 3] = [
        (
            "The guest's swap-disk writes and their holes",
            "configuration | swap-disk writes | with holes | 1–20 holes | 21–50 holes | over 50 holes | holes (pages) | double-paging swap-ins (pages) | writes of swapped pages turned into indirections (pages) | write prepare µs, mean per write | longest | write completion µs, mean",
            |x| {
                let per_write = |us: u64| us as f64 / x.disk.writes.max(1) as f64;
                let d = x.disk;
                let holed = d.writes_holes_1_20 + d.writes_holes_21_50 + d.writes_holes_over_50;
                vec![
                    Some(d.writes as f64),
                    Some(holed as f64),
                    Some(d.writes_holes_1_20 as f64),
                    Some(d.writes_holes_21_50 as f64),
                    Some(d.writes_holes_over_50 as f64),
                    Some(d.write_holes as f64),
                    x.counter(|c| c.double_paging_swap_ins),
                    x.ind(|i| i.elided_pages),
                    Some(per_write(d.write_prepare_us)),
                    Some(d.write_prepare_max_us as f64),
                    Some(per_write(d.write_end_us)),
                ]
            },
        ),
        (
            "The guest's swap-disk reads split between the image and the swap file",
            "configuration | swap-disk reads | with holes (split) | reads of the swap file | all reads issued | blocks read from the swap file | read µs, mean without holes | read µs, mean with holes | swap-disk reads MB/s",
            |x| {
                let d = x.disk;
                let store = x.ind(|i| i.store_reads);
                let plain = d.reads.saturating_sub(d.split_reads);
                let mean = |us: u64, n: u64| (n > 0).then(|| us as f64 / n as f64);
                vec![
                    Some(d.reads as f64),
                    Some(d.split_reads as f64),
                    store,
                    store.map(|n| n + d.reads as f64),
                    x.ind(|i| i.blocks_read),
                    mean(d.read_us.saturating_sub(d.split_read_us), plain),
                    mean(d.split_read_us, d.split_reads),
                    Some(d.bytes_read as f64 / d.read_us.max(1) as f64),
                ]
            },
        ),
        (
            "Defragmentation and the victim cache",
            "configuration | blocks copied back to the image | blocks regrouped in the swap file | pages the pager wrote to its swap file | victim-cache hits | victim-cache catches",
            |x| {
                vec![
                    x.ind(|i| i.defragmented),
                    x.ind(|i| i.regrouped),
                    x.counter(|c| c.reclaimed_written),
                    x.counter(|c| c.victim_cache_hits),
                    x.counter(|c| c.victim_cache_caught),
                ]
            },
        ),
    ];
    for (heading, head, cells) in tables {
        let _ = writeln!(
            s,
            "\n### {heading}{title} (memvisor's counters at the end; median of completed runs)\n"
        );
        let columns = head.split(" | ").count() - 1;
        s.push_str(&per_config(head, meta.configs, |c| {
            let finals: Vec<SwapDisk> = runs_of(records, si, c.name)
                .filter(|r| r.result.status == RunStatus::Ok)
                .filter_map(|r| SwapDisk::of(r.result.final_stats.as_ref()?))
                .collect();
            let rows: Vec<Vec<Option<f64>>> = finals.iter().map(cells).collect();
            (0..columns)
                .map(|k| {
                    let digits = usize::from(head.ends_with("MB/s") && k + 1 == columns);
                    median_text(rows.iter().filter_map(|row| row[k]).collect(), digits)
                })
                .collect()
        }));
    }
    let _ = writeln!(
        s,
        "\nTesseract's Table 4 (SPECjbb, 10 % host overcommitment, a 60 MB memhog, 7200 rpm disks), baseline and without defragmentation: write prepare 24,262 and 220 µs, write completion 0 and 49 µs, read prepare 0 and 37 µs, read completion 0 and 232 µs (here a read's preparing and completing are one span, so a read with holes is set against one without). QEMU's counterpart of these counters is inside the host kernel, so its rows stay empty."
    );
}

/// One run's final stats where [`double_paging`] reads them: the guest's swap disk and the pager.
pub(super) struct SwapDisk<'a> {
    pub(super) disk: &'a DiskStats,
    stats: &'a VmStats,
}

/// A row of one of [`double_paging`]'s tables from one run (`None`: not counted there).
type SwapDiskCells = fn(&SwapDisk<'_>) -> Vec<Option<f64>>;

impl<'a> SwapDisk<'a> {
    pub(super) fn of(stats: &'a VmStats) -> Option<Self> {
        Some(SwapDisk {
            disk: stats.disks.get("swap")?,
            stats,
        })
    }

    pub(super) fn counter(&self, f: fn(&PagerCounters) -> u64) -> Option<f64> {
        self.stats.pager.as_ref().map(|p| f(&p.counters) as f64)
    }

    /// An indirection counter; 0 with a pager and no indirections.
    pub(super) fn ind(&self, f: fn(&IndirectionStats) -> u64) -> Option<f64> {
        let p = self.stats.pager.as_ref()?;
        Some(p.indirections.as_ref().map_or(0.0, |i| f(i) as f64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::table;

    #[test]
    fn medians_and_csv_quoting() {
        assert_eq!(summary(&mut [3.0, 1.0, 2.0]), Some((2.0, 1.0, 3.0, 3)));
        assert_eq!(summary(&mut [4.0, 1.0]), Some((2.5, 1.0, 4.0, 2)));
        assert_eq!(summary(&mut []), None);
        assert_eq!(table::field("a,b \"c\""), "\"a,b \"\"c\"\"\"");
        assert_eq!(ratio(Some(3.0), Some(2.0)), "1.50");
        assert_eq!(ratio(None, Some(2.0)), "-");
    }

    fn run(config: &str, rep: u32, guest_ms: f64, cpu_ms: f64) -> Record {
        Record {
            step: 0,
            config: crate::families::phases::configs::find(config).unwrap(),
            rep,
            result: RunResult {
                exit: "1".into(),
                phases: vec![Phase {
                    name: "build".into(),
                    guest_ms: Some(guest_ms),
                    ..Phase::default()
                }],
                cpu_ms: Some(cpu_ms),
                ..RunResult::default()
            },
        }
    }

    /// A balloon row is the configuration with the device against the same VM without it,
    /// repetition by repetition.
    #[test]
    fn balloon_rows_pair_each_repetition_with_the_same_vm_without_the_device() {
        let records = vec![
            run("memvisor", 1, 100.0, 1000.0),
            run("memvisor-nolimit-fpr", 1, 110.0, 1010.0),
            run("memvisor", 2, 200.0, 1000.0),
            run("memvisor-nolimit-fpr", 2, 200.0, 1030.0),
            // No pair: repetition 3 of the one without the device did not run.
            run("memvisor-nolimit-fpr", 3, 900.0, 5000.0),
        ];
        let time = |r: &RunResult| r.phases[0].guest_ms;
        let mut v = pair_ratios(&records, 0, "memvisor-nolimit-fpr", "memvisor", time);
        assert_eq!(summary(&mut v), Some((1.05, 1.0, 1.1, 2)));
        assert!(pair_ratios(&records, 0, "memvisor-nolimit-fpr", "qemu", time).is_empty());
        let exp =
            crate::families::phases::catalog::find("overhead", crate::args::Scale::Quick).unwrap();
        let configs: Vec<&'static Config> = ["memvisor", "memvisor-nolimit-fpr"]
            .iter()
            .map(|n| crate::families::phases::configs::find(n).unwrap())
            .collect();
        let meta = Meta {
            experiment: &exp,
            reps: 3,
            reference: "memvisor",
            configs: &configs,
            notes: Vec::new(),
            env: Vec::new(),
        };
        let mut s = String::new();
        against_twins(&mut s, &meta, &records, 0, "");
        let row = s
            .lines()
            .find(|l| l.starts_with("| memvisor-nolimit-fpr | memvisor |"))
            .expect("a row");
        // build: medians 200 and 150; CPU: medians 1030 and 1000, pairs 1.01 and 1.03.
        for want in [
            " 1.33 (pairs 1.05, 1.00–1.10, n=2) |",
            " 1.03 (pairs 1.02, 1.01–1.03, n=2) |",
        ] {
            assert!(row.contains(want), "{want}: {row}");
        }
    }
}
