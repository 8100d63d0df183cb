//! The outputs of `memvisor bench sharing` and `zeroboot`: `results.csv` (one row per run),
//! `series.csv` (every reading of the page maps), `report.md` and `<experiment>.svg` (memory
//! reclaimed over time for the most VMs, one line per mode).

use crate::harness::Bench;
use std::fmt::Write as _;
use std::path::Path;

use super::experiment::{half_time, steady};
use super::experiment::{Mode, SharingPlan, SCAN_PAGES, SCAN_SLEEP_MS};
use super::run::SharingRun;
use crate::report::figure::{color, Axis, Figure, Legend, Line, Panel};
use crate::report::numbers::{self, mean};
use crate::report::table::Table;

/// A run's figures at steady state.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    /// Pages, means over the steady window.
    pub present: f64,
    pub shared: f64,
    pub reclaimed: f64,
    /// When reclaimed first reached half its steady value (s).
    pub half_s: Option<f64>,
    /// ksmd's CPU over the run, as a fraction of one CPU.
    pub ksmd: f64,
    /// The VMs' throughput summed (ops/s; each VM's mean over its last seconds).
    pub ops_s: f64,
    /// Most pages merged with the zero page at once.
    pub zero_max: u64,
}

/// The steady state of `p`: the samples in the `window` seconds before the first VM ended (or
/// before the last sample).
pub fn summary(p: &SharingRun, window: std::time::Duration) -> Summary {
    let last_t = p.samples.last().map(|s| s.t_s);
    let end = p.first_exit_s.or(last_t).unwrap_or(0.0);
    let upto: Vec<_> = p.samples.iter().filter(|s| s.t_s < end).collect();
    let from = end - window.as_secs_f64();
    let series = |f: &dyn Fn(&super::run::MapReading) -> u64| -> Vec<(f64, f64)> {
        upto.iter().map(|s| (s.t_s, f(s) as f64)).collect()
    };
    let reclaimed = series(&|s| s.census.reclaimed);
    let r = steady(&reclaimed, from).unwrap_or(0.0);
    let secs = usize::try_from(window.as_secs().max(1)).unwrap_or(1);
    Summary {
        present: steady(&series(&|s| s.census.present), from).unwrap_or(0.0),
        shared: steady(&series(&|s| s.census.shared), from).unwrap_or(0.0),
        reclaimed: r,
        half_s: half_time(&reclaimed, r),
        ksmd: p
            .samples
            .last()
            .filter(|s| s.t_s > 0.0)
            .map_or(0.0, |s| s.ksmd_ms as f64 / 1e3 / s.t_s),
        // Each VM's mean over its last seconds.
        ops_s: p
            .ops
            .iter()
            .filter_map(|v| {
                mean(
                    &v[v.len().saturating_sub(secs)..]
                        .iter()
                        .map(|&o| o as f64)
                        .collect::<Vec<_>>(),
                )
            })
            .sum(),
        zero_max: p.samples.iter().map(|s| s.zero).max().unwrap_or(0),
    }
}

/// The CSV header.
pub const CSV_HEADER: &str = "experiment,mode,vms,rep,probe,status,seconds,present_pages,shared_pages,reclaimed_pages,half_s,ksmd_cpu,ops_s,guests_ok,zeroed_pages,ksm_zero_max,reclaimed_zero,reclaimed_written,swap_out,swap_out_zero,probe_common_ns,probe_private_ns,probe_common_slow,probe_private_slow,probe_pages,error";

/// `results.csv`: one row per run.
pub fn csv(setup: &SharingPlan, points: &[SharingRun]) -> String {
    let mut t = Table::new(CSV_HEADER.split(','));
    for p in points {
        let m = summary(p, setup.sizes.steady);
        let pr =
            |f: fn(&super::run::ProbeRound) -> u64| -> u64 { p.probe_rounds.iter().map(f).sum() };
        let n = p.probe_rounds.len().max(1) as u64;
        t.row(crate::cells![
            setup.experiment,
            p.mode,
            p.vms,
            p.rep,
            u8::from(p.probe),
            if p.ok() { "ok" } else { "failed" },
            format!("{:.1}", p.seconds),
            format!("{:.0}", m.present),
            format!("{:.0}", m.shared),
            format!("{:.0}", m.reclaimed),
            numbers::fixed(m.half_s, 1),
            format!("{:.4}", m.ksmd),
            format!("{:.0}", m.ops_s),
            p.guests_ok,
            p.zeroed,
            m.zero_max,
            p.reclaimed_zero,
            p.reclaimed_written,
            p.swap_out,
            p.swap_out_zero,
            pr(|r| r.common_ns) / n,
            pr(|r| r.private_ns) / n,
            pr(|r| r.common_slow),
            pr(|r| r.private_slow),
            pr(|r| r.pages),
            p.error,
        ]);
    }
    t.csv()
}

/// `series.csv`: every reading of the page maps.
pub fn series_csv(points: &[SharingRun]) -> String {
    let head =
        "mode,vms,rep,probe,t_s,present_pages,shared_pages,reclaimed_pages,zero_pages,ksmd_ms";
    let mut t = Table::new(head.split(','));
    for p in points {
        for x in &p.samples {
            t.row(crate::cells![
                p.mode,
                p.vms,
                p.rep,
                u8::from(p.probe),
                format!("{:.1}", x.t_s),
                x.census.present,
                x.census.shared,
                x.census.reclaimed,
                x.zero,
                x.ksmd_ms,
            ]);
        }
    }
    t.csv()
}

/// Pages of 4 KiB, in MiB.
fn pages_mib(pages: f64) -> String {
    format!("{:.0}", pages * 4096.0 / numbers::MIB)
}

fn sharing_tables(s: &mut String, setup: &SharingPlan, points: &[SharingRun]) {
    let w = setup.sizes.steady;
    let runs: Vec<&SharingRun> = points.iter().filter(|p| !p.probe).collect();
    let _ = writeln!(
        s,
        "## Memory shared and reclaimed at steady state\n\nMedians over the repetitions (min–max when more than one). *Shared*: guest pages mapping a KSM page or the zero page; *reclaimed*: what that frees (shared less the distinct KSM pages, each kept once); both as a share of the VMs' guest memory present, the mean over the last {} s before the first VM ended. *Throughput*: the stores' ops/s summed over the VMs (each VM's mean over the same seconds), and against `memvisor-off` with the same VMs in the same repetition.\n",
        setup.sizes.steady.as_secs()
    );
    let mut t = Table::new("VMs | mode | runs ok | guest memory present (MiB) | shared | reclaimed | reclaimed at half its steady value | ksmd CPU | throughput (ops/s) | throughput vs sharing off | reclaimed vs QEMU".split(" | "));
    for &n in &setup.sizes.vms {
        for mode in &setup.modes {
            let all: Vec<&&SharingRun> = runs
                .iter()
                .filter(|p| p.vms == n && p.mode == mode.name)
                .collect();
            let ok: Vec<&&SharingRun> = all.iter().copied().filter(|p| p.ok()).collect();
            let sm: Vec<Summary> = ok.iter().map(|p| summary(p, w)).collect();
            let col = |f: &dyn Fn(&Summary) -> f64| sm.iter().map(f).collect::<Vec<f64>>();
            // Ratios within one repetition.
            let against = |other: &str, f: &dyn Fn(&Summary) -> f64| {
                let twin = |p: &SharingRun| {
                    runs.iter()
                        .find(|q| q.ok() && q.vms == n && q.rep == p.rep && q.mode == other)
                        .copied()
                };
                let ratio = |p: &&&SharingRun| {
                    let (a, b) = (f(&summary(p, w)), f(&summary(twin(p)?, w)));
                    (b > 0.0).then(|| a / b)
                };
                numbers::spread_in(ok.iter().filter_map(ratio).collect(), 2, "")
            };
            // A share of the guest memory present, in per cent.
            let share = |f: &dyn Fn(&Summary) -> f64| {
                let of = |m: &Summary| {
                    if m.present > 0.0 {
                        100.0 * f(m) / m.present
                    } else {
                        0.0
                    }
                };
                numbers::spread_in(sm.iter().map(of).collect(), 0, " %")
            };
            t.row(vec![
                n.to_string(),
                mode.name.to_owned(),
                format!("{}/{}", ok.len(), all.len()),
                numbers::spread_text(col(&|m| m.present), &pages_mib),
                share(&|m| m.shared),
                share(&|m| m.reclaimed),
                numbers::spread_in(sm.iter().filter_map(|m| m.half_s).collect(), 0, " s"),
                numbers::spread_in(col(&|m| 100.0 * m.ksmd), 1, " %"),
                numbers::spread_in(col(&|m| m.ops_s), 0, ""),
                if mode.name == "memvisor-off" {
                    "–".into()
                } else {
                    against("memvisor-off", &|m| m.ops_s)
                },
                if mode.qemu {
                    "–".into()
                } else {
                    against("qemu-merge", &|m| m.reclaimed)
                },
            ]);
        }
    }
    s.push_str(&t.markdown());
    let probes: Vec<&SharingRun> = points.iter().filter(|p| p.probe).collect();
    if probes.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n## Timing probe\n\nTwo VMs per mode run `probe {}`: each holds pages whose content is the same in both VMs (*common*) and pages only it holds (*private*), waits, then times the first write to each. A write to a page the host shares traps to the host for a copy; *went to the host* counts first writes slower than 2 µs. Summed over both VMs and all rounds.\n",
        setup.sizes.probe.as_deref().unwrap_or("")
    );
    let mut t = Table::new("mode | runs ok | pages timed (each kind) | first write to a common page: mean ns | to a private page | common writes that went to the host | private writes that did".split(" | "));
    for mode in &setup.modes {
        let all: Vec<&&SharingRun> = probes.iter().filter(|p| p.mode == mode.name).collect();
        let rounds: Vec<_> = all
            .iter()
            .filter(|p| p.ok())
            .flat_map(|p| p.probe_rounds.iter())
            .collect();
        let pages: u64 = rounds.iter().map(|r| r.pages).sum();
        let mean = |f: fn(&super::run::ProbeRound) -> u64| -> String {
            if pages == 0 {
                return "–".into();
            }
            // Each round's mean weighed by its pages.
            let total: u64 = rounds.iter().map(|r| f(r) * r.pages).sum();
            format!("{}", total / pages)
        };
        t.row(vec![
            mode.name.to_owned(),
            format!("{}/{}", all.iter().filter(|p| p.ok()).count(), all.len()),
            pages.to_string(),
            mean(|r| r.common_ns),
            mean(|r| r.private_ns),
            rounds
                .iter()
                .map(|r| r.common_slow)
                .sum::<u64>()
                .to_string(),
            rounds
                .iter()
                .map(|r| r.private_slow)
                .sum::<u64>()
                .to_string(),
        ]);
    }
    s.push_str(&t.markdown());
}

fn zeroboot_table(s: &mut String, setup: &SharingPlan, points: &[SharingRun]) {
    let w = setup.sizes.steady;
    s.push_str("## Zero pages and what was written\n\nPer run (medians over the repetitions, min–max when more than one), pages of 4 KiB summed over the VMs. *Zeroed*: pages the guests zeroed at boot. *Merged with the zero page*: KSM's, the most at once. *Dropped as zero*: victims memvisor's pager found all-zero and dropped with no write. *Kept by host swap without a write*: the kernel's `swpout_zero` (zero pages the swap map marks instead of writing). *Written*: pages written to any store: memvisor's swap store (`reclaimed_written`) and host swap (`pswpout`, host-wide over the run). *Zero pages never written*: at least zeroed less written, as a share of zeroed (a bound that needs no knowledge of what was written). A run in which the OOM killer ended some VMs counts what the others did.\n\n");
    let mut t = Table::new("mode | runs ok | VMs OOM-killed | zeroed | merged with the zero page | dropped as zero | kept by host swap without a write | written | zero pages never written (at least)".split(" | "));
    for mode in &setup.modes {
        let all: Vec<&SharingRun> = points.iter().filter(|p| p.mode == mode.name).collect();
        let ok = all.iter().filter(|p| p.ok()).count();
        // Runs in which some VMs were killed still say what happened to the zero pages of the
        // others (the kills have their own column).
        let measured: Vec<&&SharingRun> = all.iter().filter(|p| p.zeroed > 0).collect();
        let col = |f: &dyn Fn(&SharingRun) -> u64| -> String {
            numbers::spread_in(measured.iter().map(|p| f(p) as f64).collect(), 0, "")
        };
        let written = |p: &SharingRun| p.reclaimed_written + p.swap_out;
        let never =
            |p: &&&SharingRun| 100.0 * p.zeroed.saturating_sub(written(p)) as f64 / p.zeroed as f64;
        t.row(vec![
            mode.name.to_owned(),
            format!("{ok}/{}", all.len()),
            all.iter().map(|p| p.oom_kills).sum::<u32>().to_string(),
            col(&|p| p.zeroed),
            col(&|p| summary(p, w).zero_max),
            col(&|p| p.reclaimed_zero),
            col(&|p| p.swap_out_zero),
            col(&written),
            numbers::spread_in(measured.iter().map(never).collect(), 1, " %"),
        ]);
    }
    s.push_str(&t.markdown());
}

/// `report.md`.
pub fn markdown(setup: &SharingPlan, points: &[SharingRun], env: &[(String, String)]) -> String {
    let z = &setup.sizes;
    let mut s = crate::families::figures::heading(setup.experiment);
    let limit = z.limit.map_or(String::new(), |l| {
        format!(
            ", each under a {} MiB limit (memvisor's pager; QEMU: its memory cgroup limited to that plus its own memory, measured in this run: {}, with host swap)",
            l >> 20,
            setup.qemu_overhead.map_or("not measured".into(), |o| format!("{} MiB", numbers::mib_text(o, 1)))
        )
    });
    let what = if setup.experiment == "zeroboot" {
        "ESX §6.3: VMs that zero their memory at boot on an overcommitted host. Zero pages kept once (or dropped) cost nothing; written to a store they cost a write and later a read."
    } else {
        "ESX §4.3, Fig. 4: identical VMs share their identical pages through the host kernel's KSM on both hypervisors; how much memory that frees, how fast, what it costs in throughput and scanner CPU, and what a guest can learn from it."
    };
    let (mem, workload, cmdline, every) = (z.mem >> 20, z.workload, &z.cmdline, z.every.as_secs());
    let (pages, sleep, reps) = (SCAN_PAGES, SCAN_SLEEP_MS, setup.reps);
    let _ = writeln!(s, "{what} VMs of {mem} MiB running `{workload} {cmdline}`{limit}, all started at once; KSM scanning {pages} pages every {sleep} ms for every mode (zero pages merged with the zero page), everything merged before a run unmerged first. Memory is read from the VMs' own page maps (`/proc/PID/pagemap`, `/proc/kpageflags`, `/proc/PID/ksm_stat`) every {every} s, so no other process on the host enters. {reps} repetition(s), modes in an order that changes per repetition.\n");
    if setup.experiment == "zeroboot" {
        zeroboot_table(&mut s, setup, points);
    } else {
        sharing_tables(&mut s, setup, points);
    }
    let why = |p: &SharingRun| {
        let probe = if p.probe { " (probe)" } else { "" };
        format!("{} x{}{probe} rep {}: {}", p.mode, p.vms, p.rep, p.error)
    };
    crate::report::incomplete(&mut s, points.iter().filter(|p| !p.ok()).map(why));
    crate::report::environment(&mut s, env);
    s
}

/// The figure: memory reclaimed (and shared, dashed) over time with the most VMs, first
/// repetition, one colour per mode.
pub fn plot(path: &Path, setup: &SharingPlan, points: &[SharingRun]) -> Result<(), String> {
    let n = setup.sizes.vms.iter().copied().max().unwrap_or(1);
    let first = |m: &Mode| {
        points
            .iter()
            .find(|p| !p.probe && p.vms == n && p.mode == m.name && !p.samples.is_empty())
    };
    let runs: Vec<&SharingRun> = setup.modes.iter().filter_map(first).collect();
    let to_mib = |pages: u64| pages as f64 * 4096.0 / numbers::MIB;
    let samples = || runs.iter().flat_map(|p| p.samples.iter());
    let tmax = samples().map(|s| s.t_s).fold(1.0, f64::max);
    let ymax = samples()
        .map(|s| to_mib(s.census.present))
        .fold(1.0, f64::max);
    let mut panel = Panel::new(
        format!(
            "{}: {n} VMs, guest memory shared (dashed) and reclaimed (solid)",
            setup.experiment
        ),
        "seconds since the VMs started",
        "MiB",
        Axis::linear(0.0, tmax),
        Axis::linear(0.0, ymax * 1.05),
    );
    panel.legend = Legend::UpperLeft;
    for (i, p) in runs.iter().enumerate() {
        let color = color(i);
        let curve = |f: &dyn Fn(&super::run::MapReading) -> u64| -> Vec<(f64, f64)> {
            p.samples.iter().map(|s| (s.t_s, to_mib(f(s)))).collect()
        };
        let reclaimed = Line::new(p.mode.clone(), color, 3, curve(&|s| s.census.reclaimed));
        let shared = Line::new("", color, 1, curve(&|s| s.census.shared)).dashed();
        panel.lines.extend([reclaimed, shared]);
    }
    Figure::one((1000, 560), panel).write(path)
}

/// Writes `results.csv`, `series.csv`, the figure and `report.md` into `bench.out`, and prints
/// the report.
pub fn write(bench: &Bench, setup: &SharingPlan, points: &[SharingRun]) -> Result<(), String> {
    let series = bench.out.join("series.csv");
    std::fs::write(&series, series_csv(points))
        .map_err(|e| format!("{}: {e}", series.display()))?;
    crate::report::write_report(
        &bench.out,
        setup.experiment,
        csv(setup, points),
        |svg| plot(svg, setup, points),
        markdown(setup, points, &bench.env),
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::args::Scale;
    use crate::families::sharing::experiment::{modes, Census, Sizes};
    use crate::families::sharing::run::{MapReading, ProbeRound};

    fn point(mode: &str, rep: u32, reclaimed: u64, ops: u64) -> SharingRun {
        SharingRun {
            mode: mode.into(),
            vms: 2,
            rep,
            samples: (0u32..10)
                .map(|i| MapReading {
                    t_s: f64::from(i),
                    census: Census {
                        present: 1000,
                        shared: 2 * reclaimed * u64::from(i) / 9,
                        reclaimed: reclaimed * u64::from(i) / 9,
                    },
                    zero: 3,
                    ksmd_ms: 100 * u64::from(i),
                })
                .collect(),
            ops: vec![vec![ops; 10], vec![ops; 10]],
            guests_ok: 2,
            first_exit_s: Some(9.5),
            ..SharingRun::default()
        }
    }

    #[test]
    fn steady_state_ratios_and_report() {
        let setup = SharingPlan {
            experiment: "sharing",
            modes: modes("sharing").to_vec(),
            sizes: Sizes {
                vms: vec![2],
                steady: Duration::from_secs(3),
                ..Sizes::of("sharing", Scale::Quick)
            },
            reps: 1,
            qemu_overhead: None,
        };
        let m = summary(&point("x", 1, 450, 100), Duration::from_secs(3));
        // Samples at 7, 8 and 9 s: 350, 400 and 450 reclaimed.
        assert!((m.reclaimed - 400.0).abs() < 1e-9, "{m:?}");
        assert_eq!(m.half_s, Some(4.0));
        assert!((m.ops_s - 200.0).abs() < 1e-9 && (m.ksmd - 0.1).abs() < 1e-9);
        let mut probe = point("memvisor-host", 1, 0, 0);
        probe.probe = true;
        probe.probe_rounds = vec![ProbeRound {
            pages: 10,
            common_ns: 30_000,
            private_ns: 100,
            common_slow: 10,
            private_slow: 0,
        }];
        let mut failed = point("qemu-merge", 1, 0, 0);
        failed.error = "timed out".into();
        let pts = vec![
            point("memvisor-off", 1, 0, 100),
            point("memvisor-host", 1, 450, 99),
            failed,
            probe,
        ];
        let md = markdown(&setup, &pts, &[]);
        assert!(md.contains("| 2 | memvisor-host | 1/1 |"), "{md}");
        assert!(md.contains("| 0.99 |"), "{md}");
        assert!(
            md.contains("| memvisor-host | 1/1 | 10 | 30000 | 100 | 10 | 0 |"),
            "{md}"
        );
        assert!(md.contains("qemu-merge x2 rep 1: timed out"), "{md}");
        let c = csv(&setup, &pts);
        assert_eq!(c.lines().count(), 5);
        let cols = CSV_HEADER.split(',').count();
        assert!(c.lines().all(|l| l.split(',').count() == cols), "{c}");
        assert_eq!(series_csv(&pts).lines().count(), 1 + 40);
    }
}
