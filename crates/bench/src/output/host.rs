//! The outputs of a host experiment (`shares`, `idletax`) from what `run::hostexp` measured: the numbers the goals are
//! judged by (steady-state allocations and their ratio, how long memory took to move, the busy
//! VM's throughput before and after), `results.csv` (the time series and a summary),
//! `report.md` and the plot (allocations over time per VM, as ESX's Fig. 7, above each VM's
//! throughput).

use std::fmt::Write as _;
use std::path::Path;

use memvisor_api::{HostEventKind, HostSample, VmSample};
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::experiments::host::{HostExperiment, Kind};
use crate::report::csv;
use crate::report::numbers::{mean, mib};
use crate::run::hostexp::{active_fraction, Run};

fn vm<'a>(s: &'a HostSample, name: &str) -> Option<&'a VmSample> {
    s.vms.iter().find(|v| v.name == name)
}

impl Run {
    fn joined_at(&self, name: &str) -> Option<f64> {
        self.joined.iter().find(|(n, _)| n == name).map(|j| j.1)
    }

    fn end(&self) -> f64 {
        self.samples.last().map_or(0.0, |s| s.seconds)
    }

    fn in_window(&self, w: (f64, f64)) -> impl Iterator<Item = &HostSample> {
        self.samples
            .iter()
            .filter(move |s| s.seconds >= w.0 && s.seconds <= w.1)
    }

    /// Mean of `f` over the ticks of window `w` at which `name` was running.
    fn vm_mean(&self, w: (f64, f64), name: &str, f: impl Fn(&VmSample) -> f64) -> Option<f64> {
        let v: Vec<f64> = self
            .in_window(w)
            .filter_map(|s| vm(s, name))
            .map(f)
            .collect();
        mean(&v)
    }

    /// Mean throughput of `name` read in window `w`.
    fn rate_mean(&self, w: (f64, f64), name: &str) -> Option<f64> {
        let v: Vec<f64> = self
            .throughput
            .iter()
            .filter(|t| t.vm == name && t.seconds >= w.0 && t.seconds <= w.1)
            .map(|t| t.rate)
            .collect();
        mean(&v)
    }

    fn count_events(&self, w: (f64, f64), kind: HostEventKind) -> usize {
        self.events
            .iter()
            .filter(|e| e.kind == kind && e.seconds >= w.0 && e.seconds <= w.1)
            .count()
    }
}

/// The last part of a phase that counts as its steady state: its last `secs` seconds, at most
/// half of it.
fn steady(from: f64, to: f64, secs: f64) -> (f64, f64) {
    (to - secs.min((to - from) / 2.0).max(0.0), to)
}

/// What `bench shares` measured.
#[derive(Clone, Debug, PartialEq)]
pub struct SharesSummary {
    pub joined_at: f64,
    pub window: (f64, f64),
    pub big_mib: f64,
    pub small_mib: f64,
    /// Mean allocation of big over mean allocation of small, in the window.
    pub ratio: f64,
    /// The lowest and highest per-tick ratio in the window.
    pub ratio_range: (f64, f64),
    pub target_ratio: f64,
    pub big_active: f64,
    pub small_active: f64,
    /// Seconds from big's joining until the ratio stayed within 10 % of the shares' ratio.
    pub converged_after: Option<f64>,
    pub within: bool,
    pub state_changes: usize,
    pub pauses: usize,
    pub big_rate: Option<f64>,
    pub small_rate: Option<f64>,
}

/// The band around the goal a ratio has to stay in.
pub const BAND: f64 = 0.10;

/// The allocation ratio at a tick, when both VMs are there.
fn tick_ratio(s: &HostSample, big: &str, small: &str) -> Option<f64> {
    let (b, m) = (vm(s, big)?, vm(s, small)?);
    #[allow(clippy::cast_precision_loss)]
    let r = b.resident_bytes as f64 / m.resident_bytes.max(1) as f64;
    Some(r)
}

pub fn shares_summary(run: &Run, big: &str, small: &str, goal: f64) -> Option<SharesSummary> {
    let joined_at = run.joined_at(big)?;
    let end = run.end();
    let window = steady(joined_at, end, 60.0);
    let big_mib = run.vm_mean(window, big, |v| mib(v.resident_bytes))?;
    let small_mib = run.vm_mean(window, small, |v| mib(v.resident_bytes))?;
    let ratios: Vec<f64> = run
        .in_window(window)
        .filter_map(|s| tick_ratio(s, big, small))
        .collect();
    let ratio_range = (
        ratios.iter().copied().fold(f64::INFINITY, f64::min),
        ratios.iter().copied().fold(0.0, f64::max),
    );
    let target_ratio = run.vm_mean(window, big, |v| mib(v.target_bytes))?
        / run
            .vm_mean(window, small, |v| mib(v.target_bytes))?
            .max(1e-9);
    let ok = |r: f64| (r / goal - 1.0).abs() <= BAND;
    // The first tick after the last one outside the band, if the run ends inside it.
    let after: Vec<(f64, f64)> = run
        .samples
        .iter()
        .filter(|s| s.seconds >= joined_at)
        .filter_map(|s| Some((s.seconds, tick_ratio(s, big, small)?)))
        .collect();
    let converged_after = match after.iter().rposition(|&(_, r)| !ok(r)) {
        None => after.first().map(|&(t, _)| t - joined_at),
        Some(i) => after.get(i + 1).map(|&(t, _)| t - joined_at),
    };
    let ratio = big_mib / small_mib.max(1e-9);
    Some(SharesSummary {
        joined_at,
        window,
        big_mib,
        small_mib,
        ratio,
        ratio_range,
        target_ratio,
        big_active: run.vm_mean(window, big, active_fraction)?,
        small_active: run.vm_mean(window, small, active_fraction)?,
        converged_after,
        within: ok(ratio),
        state_changes: run.count_events(window, HostEventKind::FreeState),
        pauses: run.count_events(window, HostEventKind::Paused),
        big_rate: run.rate_mean(window, big),
        small_rate: run.rate_mean(window, small),
    })
}

/// One phase of `bench idletax` at its steady state.
#[derive(Clone, Debug, PartialEq)]
pub struct Phase {
    pub window: (f64, f64),
    pub idle_mib: f64,
    pub busy_mib: f64,
    pub idle_target_mib: f64,
    pub busy_target_mib: f64,
    pub idle_active: f64,
    pub busy_active: f64,
    /// The busy VM's mean throughput (operations per second).
    pub busy_rate: Option<f64>,
}

/// What `bench idletax` measured.
#[derive(Clone, Debug, PartialEq)]
pub struct IdleTaxSummary {
    pub switch: f64,
    pub untaxed: Phase,
    pub taxed: Phase,
    /// The busy VM's throughput at tax 0.75 over tax 0.
    pub speedup: Option<f64>,
    /// Seconds from the switch until the busy VM held 90 % of the memory it gained.
    pub realloc_s: Option<f64>,
    /// Seconds from the switch until the busy VM's throughput first reached 90 % of its taxed mean.
    pub rate_s: Option<f64>,
    /// At tax 0, the two allocations within 10 % of each other.
    pub equal_untaxed: bool,
    /// At tax 0.75, memory went from the idle VM to the busy one.
    pub moved: bool,
    pub pauses: usize,
}

fn phase(run: &Run, w: (f64, f64), idle: &str, busy: &str) -> Option<Phase> {
    Some(Phase {
        window: w,
        idle_mib: run.vm_mean(w, idle, |v| mib(v.resident_bytes))?,
        busy_mib: run.vm_mean(w, busy, |v| mib(v.resident_bytes))?,
        idle_target_mib: run.vm_mean(w, idle, |v| mib(v.target_bytes))?,
        busy_target_mib: run.vm_mean(w, busy, |v| mib(v.target_bytes))?,
        idle_active: run.vm_mean(w, idle, active_fraction)?,
        busy_active: run.vm_mean(w, busy, active_fraction)?,
        busy_rate: run.rate_mean(w, busy),
    })
}

pub fn idletax_summary(run: &Run, idle: &str, busy: &str) -> Option<IdleTaxSummary> {
    let joined = run.joined_at(busy)?;
    // When the tax actually changed (the harness's request), else when it was planned.
    let switch = run.taxes.get(1).map(|t| t.0)?;
    let end = run.end();
    let untaxed = phase(run, steady(joined, switch, 60.0), idle, busy)?;
    let taxed = phase(run, steady(switch, end, 60.0), idle, busy)?;
    let speedup = match (untaxed.busy_rate, taxed.busy_rate) {
        (Some(a), Some(b)) if a > 0.0 => Some(b / a),
        _ => None,
    };
    let gained = taxed.busy_mib - untaxed.busy_mib;
    let realloc_s = (gained > 0.0)
        .then(|| {
            run.samples
                .iter()
                .filter(|s| s.seconds >= switch)
                .find(|s| {
                    vm(s, busy)
                        .is_some_and(|v| mib(v.resident_bytes) >= untaxed.busy_mib + 0.9 * gained)
                })
                .map(|s| s.seconds - switch)
        })
        .flatten();
    let rate_s = taxed.busy_rate.and_then(|goal| {
        run.throughput
            .iter()
            .filter(|t| t.vm == busy && t.seconds >= switch)
            .find(|t| t.rate >= 0.9 * goal)
            .map(|t| t.seconds - switch)
    });
    let equal_untaxed = (untaxed.idle_mib - untaxed.busy_mib).abs()
        <= BAND * (untaxed.idle_mib + untaxed.busy_mib) / 2.0;
    let moved = taxed.busy_mib > untaxed.busy_mib && taxed.idle_mib < untaxed.idle_mib;
    Some(IdleTaxSummary {
        switch,
        speedup,
        realloc_s,
        rate_s,
        equal_untaxed,
        moved,
        pauses: run.count_events((joined, end), HostEventKind::Paused),
        untaxed,
        taxed,
    })
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.digits$}"))
}

/// One line on how a run went, for the progress output.
pub fn headline(e: &HostExperiment, run: &Run) -> String {
    match e.kind {
        Kind::Shares { big, small, ratio } => match shares_summary(run, big, small, ratio) {
            None => "no steady state measured".into(),
            Some(s) => format!(
                "{big} {:.0} MiB, {small} {:.0} MiB: ratio {:.2} (goal {ratio:.0}, {}within 10 %), converged {} s after {big} joined",
                s.big_mib,
                s.small_mib,
                s.ratio,
                if s.within { "" } else { "not " },
                opt(s.converged_after, 1)
            ),
        },
        Kind::IdleTax { idle, busy, .. } => match idletax_summary(run, idle, busy) {
            None => "no steady state measured".into(),
            Some(s) => format!(
                "tax 0: {idle} {:.0} MiB, {busy} {:.0} MiB, {busy} {} ops/s; tax 0.75: {idle} {:.0} MiB, {busy} {:.0} MiB, {} ops/s; speedup {}, memory moved in {} s",
                s.untaxed.idle_mib,
                s.untaxed.busy_mib,
                opt(s.untaxed.busy_rate, 0),
                s.taxed.idle_mib,
                s.taxed.busy_mib,
                opt(s.taxed.busy_rate, 0),
                opt(s.speedup, 2),
                opt(s.realloc_s, 1)
            ),
        },
    }
}

/// The CSV header: every row has every column; `kind` says which are filled.
pub const CSV_HEADER: &str = "kind,experiment,rep,seconds,vm,state,idle_tax,free_bytes,free_state,target_bytes,resident_bytes,active_fraction,balloon_bytes,swapped_bytes,limit_bytes,rate,metric,value";

fn tax_at(run: &Run, t: f64) -> f64 {
    run.taxes
        .iter()
        .rev()
        .find(|(at, _)| *at <= t)
        .or(run.taxes.first())
        .map_or(0.0, |x| x.1)
}

fn summary_rows(e: &HostExperiment, run: &Run) -> Vec<(String, String)> {
    let f = |x: f64| format!("{x:.4}");
    let o = |x: Option<f64>| x.map_or(String::new(), f);
    let b = |x: bool| u8::from(x).to_string();
    match e.kind {
        Kind::Shares { big, small, ratio } => shares_summary(run, big, small, ratio)
            .map(|s| {
                vec![
                    ("big_joined_s".into(), f(s.joined_at)),
                    ("steady_from_s".into(), f(s.window.0)),
                    ("steady_to_s".into(), f(s.window.1)),
                    (format!("{big}_mib"), f(s.big_mib)),
                    (format!("{small}_mib"), f(s.small_mib)),
                    ("ratio".into(), f(s.ratio)),
                    ("ratio_min".into(), f(s.ratio_range.0)),
                    ("ratio_max".into(), f(s.ratio_range.1)),
                    ("goal_ratio".into(), f(ratio)),
                    ("within_10pct".into(), b(s.within)),
                    ("target_ratio".into(), f(s.target_ratio)),
                    (format!("{big}_active"), f(s.big_active)),
                    (format!("{small}_active"), f(s.small_active)),
                    ("converged_after_s".into(), o(s.converged_after)),
                    (
                        "free_state_changes_steady".into(),
                        s.state_changes.to_string(),
                    ),
                    ("pauses_steady".into(), s.pauses.to_string()),
                    (format!("{big}_touches_per_s"), o(s.big_rate)),
                    (format!("{small}_touches_per_s"), o(s.small_rate)),
                ]
            })
            .unwrap_or_default(),
        Kind::IdleTax { idle, busy, .. } => idletax_summary(run, idle, busy)
            .map(|s| {
                let mut rows = vec![("switch_s".into(), f(s.switch))];
                for (name, p) in [("tax0", &s.untaxed), ("tax75", &s.taxed)] {
                    rows.extend([
                        (format!("{name}_steady_from_s"), f(p.window.0)),
                        (format!("{name}_steady_to_s"), f(p.window.1)),
                        (format!("{name}_{idle}_mib"), f(p.idle_mib)),
                        (format!("{name}_{busy}_mib"), f(p.busy_mib)),
                        (format!("{name}_{idle}_target_mib"), f(p.idle_target_mib)),
                        (format!("{name}_{busy}_target_mib"), f(p.busy_target_mib)),
                        (format!("{name}_{idle}_active"), f(p.idle_active)),
                        (format!("{name}_{busy}_active"), f(p.busy_active)),
                        (format!("{name}_{busy}_ops_per_s"), o(p.busy_rate)),
                    ]);
                }
                rows.extend([
                    ("speedup".into(), o(s.speedup)),
                    ("realloc_90pct_s".into(), o(s.realloc_s)),
                    ("throughput_90pct_s".into(), o(s.rate_s)),
                    ("equal_at_tax0".into(), b(s.equal_untaxed)),
                    ("moved_at_tax75".into(), b(s.moved)),
                    ("pauses".into(), s.pauses.to_string()),
                ]);
                rows
            })
            .unwrap_or_default(),
    }
}

/// `results.csv`: for every run, a `sample` row per VM and tick, a `throughput` row per reading,
/// an `event` row per host event, and the `summary` rows (metric, value).
pub fn csv(e: &HostExperiment, runs: &[Run]) -> String {
    let header: Vec<&str> = CSV_HEADER.split(',').collect();
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    // One line from named columns; the others are left empty.
    let mut row = |fields: &[(&str, String)]| {
        let mut cols = vec![String::new(); header.len()];
        for (name, value) in fields {
            let i = header.iter().position(|h| h == name);
            debug_assert!(i.is_some(), "no column {name} in the CSV header");
            if let Some(i) = i {
                cols[i] = csv::field(value);
            }
        }
        out.push_str(&cols.join(","));
        out.push('\n');
    };
    for (i, run) in runs.iter().enumerate() {
        let rep = (i + 1).to_string();
        let at = |kind: &str, seconds: f64| {
            [
                ("kind", kind.to_owned()),
                ("experiment", e.name.to_owned()),
                ("rep", rep.clone()),
                ("seconds", format!("{seconds:.3}")),
                ("idle_tax", tax_at(run, seconds).to_string()),
            ]
        };
        for s in &run.samples {
            for v in &s.vms {
                let mut f = at("sample", s.seconds).to_vec();
                f.extend([
                    ("vm", v.name.clone()),
                    ("state", format!("{:?}", v.state).to_lowercase()),
                    ("free_bytes", s.free_bytes.to_string()),
                    ("free_state", format!("{:?}", s.free_state).to_lowercase()),
                    ("target_bytes", v.target_bytes.to_string()),
                    ("resident_bytes", v.resident_bytes.to_string()),
                    ("active_fraction", format!("{:.4}", active_fraction(v))),
                    ("balloon_bytes", v.balloon_bytes.to_string()),
                    ("swapped_bytes", v.swapped_bytes.to_string()),
                    ("limit_bytes", v.limit_bytes.to_string()),
                ]);
                row(&f);
            }
        }
        for t in &run.throughput {
            let mut f = at("throughput", t.seconds).to_vec();
            f.extend([("vm", t.vm.clone()), ("rate", format!("{:.1}", t.rate))]);
            row(&f);
        }
        for ev in &run.events {
            let mut f = at("event", ev.seconds).to_vec();
            f.extend([
                ("vm", ev.vm.clone().unwrap_or_default()),
                ("metric", format!("{:?}", ev.kind).to_lowercase()),
                ("value", ev.message.clone()),
            ]);
            row(&f);
        }
        for (metric, value) in summary_rows(e, run) {
            row(&[
                ("kind", "summary".into()),
                ("experiment", e.name.into()),
                ("rep", rep.clone()),
                ("metric", metric),
                ("value", value),
            ]);
        }
    }
    out
}

fn yes(b: bool) -> &'static str {
    if b {
        "**yes**"
    } else {
        "**no**"
    }
}

/// `report.md`.
pub fn markdown(e: &HostExperiment, runs: &[Run], env: &[(String, String)]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# memvisor bench {}\n", e.name);
    let _ = writeln!(s, "{}.\n", e.about);
    let _ = writeln!(
        s,
        "There is no QEMU peer for this experiment: QEMU/KVM has no share-based allocator (nothing \
         divides a host's memory among VMs by shares or taxes idle memory), so the numbers are \
         memvisor's allocations against what the paper says they should be, not a ratio against \
         a peer.\n"
    );
    let _ = writeln!(s, "## Set-up\n");
    let _ = writeln!(
        s,
        "`memvisor host` with a budget of {} MiB, idle tax {} at start, {} sampled pages per period, \
         a sampling period of {:.1} s of guest time, a tick every {} ms; {} s in all.\n",
        e.memory >> 20,
        e.idle_tax,
        e.sample_pages,
        e.sample_period.as_secs_f64(),
        e.tick.as_millis(),
        e.duration
    );
    let _ = writeln!(s, "| VM | mem MiB | shares | joins at s | workload |");
    let _ = writeln!(s, "|---|---|---|---|---|");
    for v in &e.vms {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.0} | `{} {}` |",
            v.spec.name,
            v.spec.mem >> 20,
            v.spec.shares,
            v.at,
            v.spec.workload.as_deref().unwrap_or("-"),
            v.spec.cmdline
        );
    }
    for (at, tax) in &e.tax_changes {
        let _ = writeln!(
            s,
            "\nThe idle tax becomes {tax} at {at:.0} s (`PATCH /host`)."
        );
    }
    let _ = writeln!(s, "\nWhy:\n");
    for w in &e.why {
        let _ = writeln!(s, "- {w}");
    }
    s.push('\n');
    for (i, run) in runs.iter().enumerate() {
        let title = if runs.len() > 1 {
            format!(" (repetition {})", i + 1)
        } else {
            String::new()
        };
        let _ = writeln!(s, "## Results{title}\n");
        match e.kind {
            Kind::Shares { big, small, ratio } => shares_md(&mut s, run, big, small, ratio),
            Kind::IdleTax { idle, busy, .. } => idletax_md(&mut s, run, idle, busy),
        }
        let pauses: Vec<String> = run
            .events
            .iter()
            .filter(|ev| matches!(ev.kind, HostEventKind::Paused | HostEventKind::FreeState))
            .map(|ev| {
                format!(
                    "{:.1} s {}: {}",
                    ev.seconds,
                    ev.vm.as_deref().unwrap_or("host"),
                    ev.message
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "\nFree-state changes and pauses ({} in all):\n",
            pauses.len()
        );
        for p in pauses.iter().take(40) {
            let _ = writeln!(s, "- {p}");
        }
        if pauses.len() > 40 {
            let _ = writeln!(s, "- ... {} more in results.csv", pauses.len() - 40);
        }
        for n in &run.notes {
            let _ = writeln!(s, "\nNote: {n}");
        }
        s.push('\n');
    }
    crate::report::environment(&mut s, env);
    s
}

fn shares_md(s: &mut String, run: &Run, big: &str, small: &str, goal: f64) {
    let Some(x) = shares_summary(run, big, small, goal) else {
        let _ = writeln!(
            s,
            "No steady state was measured (a VM never ran beside the other)."
        );
        return;
    };
    let _ = writeln!(
        s,
        "Steady state: {:.0}–{:.0} s (the last minute of the run, at most its second half).\n",
        x.window.0, x.window.1
    );
    let _ = writeln!(
        s,
        "| VM | allocation MiB (resident, mean) | active (sampled, mean) | touches/s |"
    );
    let _ = writeln!(s, "|---|---|---|---|");
    let _ = writeln!(
        s,
        "| {big} | {:.1} | {:.3} | {} |",
        x.big_mib,
        x.big_active,
        opt(x.big_rate, 0)
    );
    let _ = writeln!(
        s,
        "| {small} | {:.1} | {:.3} | {} |",
        x.small_mib,
        x.small_active,
        opt(x.small_rate, 0)
    );
    let _ = writeln!(
        s,
        "\n- allocation ratio {big}/{small}: **{:.3}** (per tick {:.3}–{:.3}); the targets' ratio {:.3}; goal {goal:.0}",
        x.ratio, x.ratio_range.0, x.ratio_range.1, x.target_ratio
    );
    let _ = writeln!(s, "- within 10 % of {goal:.0}:1: {}", yes(x.within));
    let _ = writeln!(
        s,
        "- converged (ratio within 10 % from then on) {} s after `{big}` joined at {:.1} s",
        opt(x.converged_after, 1),
        x.joined_at
    );
    let _ = writeln!(
        s,
        "- in the steady state: {} free-state changes, {} pauses",
        x.state_changes, x.pauses
    );
}

fn idletax_md(s: &mut String, run: &Run, idle: &str, busy: &str) {
    let Some(x) = idletax_summary(run, idle, busy) else {
        let _ = writeln!(
            s,
            "No steady state was measured (the busy VM or the tax change is missing)."
        );
        return;
    };
    let _ = writeln!(
        s,
        "| idle tax | steady window s | {idle} MiB (target) | {busy} MiB (target) | {idle} active | {busy} active | {busy} ops/s |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|");
    for (tax, p) in [("0", &x.untaxed), ("0.75", &x.taxed)] {
        let _ = writeln!(
            s,
            "| {tax} | {:.0}–{:.0} | {:.1} ({:.1}) | {:.1} ({:.1}) | {:.3} | {:.3} | {} |",
            p.window.0,
            p.window.1,
            p.idle_mib,
            p.idle_target_mib,
            p.busy_mib,
            p.busy_target_mib,
            p.idle_active,
            p.busy_active,
            opt(p.busy_rate, 0)
        );
    }
    let _ = writeln!(
        s,
        "\n- at tax 0 both get the same allocation (within 10 %): {}",
        yes(x.equal_untaxed)
    );
    let _ = writeln!(
        s,
        "- at tax 0.75 memory moves from `{idle}` to `{busy}`: {} ({:+.1} MiB)",
        yes(x.moved),
        x.taxed.busy_mib - x.untaxed.busy_mib
    );
    let _ = writeln!(
        s,
        "- `{busy}`'s throughput at 0.75 over 0: **{}** (the paper: over 1.3)",
        opt(x.speedup, 2)
    );
    let _ = writeln!(
        s,
        "- reallocation: `{busy}` held 90 % of the memory it gained {} s after the tax changed at {:.1} s; its throughput first reached 90 % of its new mean after {} s",
        opt(x.realloc_s, 1),
        x.switch,
        opt(x.rate_s, 1)
    );
    let _ = writeln!(
        s,
        "- pauses by the host after `{busy}` joined: {}",
        x.pauses
    );
}

/// One colour per VM, as in the other plots.
const COLORS: [RGBColor; 4] = [
    RGBColor(33, 102, 172),
    RGBColor(202, 0, 32),
    RGBColor(27, 120, 55),
    RGBColor(0, 0, 0),
];

type Line = (String, RGBColor, Vec<(f64, f64)>);

/// Writes the plot: allocations over time (resident solid, target dashed, active dotted), with a
/// vertical line where a VM joins or the tax changes, above each VM's throughput.
pub fn plot(path: &Path, e: &HostExperiment, run: &Run) -> Result<(), String> {
    // The text is measured with a registered font; without one plotters fails the draw.
    crate::report::figure::font()?;
    let fig = figure(e, run);
    let root = SVGBackend::new(path, (1100, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(|err| err.to_string())?;
    let (top, bottom) = root.split_vertically(560);
    memory_panel(&top, e, &fig)?;
    memory_legend(&top, &fig)?;
    rates_panel(&bottom, e, &fig)?;
    root.present().map_err(|x| x.to_string())
}

/// What the figure of a host experiment draws.
struct Figure {
    names: Vec<String>,
    resident: Vec<Line>,
    target: Vec<Line>,
    active: Vec<Line>,
    /// The measured VMs' throughput.
    rates: Vec<Line>,
    t_max: f64,
    y_max: f64,
    /// Vertical marks: a VM joining, the idle tax changing.
    marks: Vec<(f64, String)>,
}

/// Where the legends start, in the figure's right margin.
const LEGEND_X: i32 = 1100 - 230 + 10;

/// The figure's lines and marks from a run.
fn figure(e: &HostExperiment, run: &Run) -> Figure {
    let names: Vec<String> = e.vms.iter().map(|v| v.spec.name.clone()).collect();
    let series = |f: &dyn Fn(&VmSample) -> f64, name: &str| -> Vec<(f64, f64)> {
        run.samples
            .iter()
            .filter_map(|s| vm(s, name).map(|v| (s.seconds, f(v))))
            .collect()
    };
    let mut resident: Vec<Line> = Vec::new();
    let mut target: Vec<Line> = Vec::new();
    let mut active: Vec<Line> = Vec::new();
    let mut rates: Vec<Line> = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        resident.push((
            format!("{n}: allocation"),
            c,
            series(&|v| mib(v.resident_bytes), n),
        ));
        target.push((
            format!("{n}: target"),
            c,
            series(&|v| mib(v.target_bytes), n),
        ));
        active.push((
            format!("{n}: active (estimate)"),
            c,
            series(&|v| mib(v.active_bytes), n),
        ));
        let r: Vec<(f64, f64)> = run
            .throughput
            .iter()
            .filter(|t| &t.vm == n)
            .map(|t| (t.seconds, t.rate))
            .collect();
        // The idle VM's touches are not what the experiment measures.
        let measured = match e.kind {
            Kind::Shares { .. } => true,
            Kind::IdleTax { busy, .. } => n == busy,
        };
        if measured && !r.is_empty() {
            rates.push((n.clone(), c, r));
        }
    }
    let t_max = run.end().max(e.duration).max(1.0);
    let y_max = e.vms.iter().map(|v| mib(v.spec.mem)).fold(1.0, f64::max) * 1.1;
    let mut marks: Vec<(f64, String)> = run
        .joined
        .iter()
        .filter(|(_, t)| *t > 0.0)
        .map(|(n, t)| (*t, format!("{n} joins")))
        .collect();
    marks.extend(
        run.taxes
            .iter()
            .skip(1)
            .map(|(t, x)| (*t, format!("tax {x}"))),
    );
    Figure {
        names,
        resident,
        target,
        active,
        rates,
        t_max,
        y_max,
        marks,
    }
}

/// The top panel: each VM's allocation, target and active memory over time.
fn memory_panel(
    top: &DrawingArea<SVGBackend<'_>, Shift>,
    e: &HostExperiment,
    fig: &Figure,
) -> Result<(), String> {
    let (t_max, y_max, marks) = (fig.t_max, fig.y_max, &fig.marks);
    let (target, active, resident) = (&fig.target, &fig.active, &fig.resident);
    let mut chart = ChartBuilder::on(top)
        .caption(
            format!("{}: memory per VM over time (MiB)", e.name),
            ("sans-serif", 22),
        )
        .margin(12)
        .margin_right(230)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..t_max, 0.0..y_max)
        .map_err(|x| x.to_string())?;
    chart
        .configure_mesh()
        .x_desc("seconds since the host started")
        .y_desc("MiB")
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(|x| x.to_string())?;
    for (t, _) in marks {
        chart
            .draw_series(LineSeries::new(
                vec![(*t, 0.0), (*t, y_max)],
                RGBColor(150, 150, 150).stroke_width(1),
            ))
            .map_err(|x| x.to_string())?;
    }
    for (_, c, pts) in target {
        chart
            .draw_series(DashedLineSeries::new(pts.clone(), 8, 6, c.stroke_width(1)))
            .map_err(|x| x.to_string())?;
    }
    for (_, c, pts) in active {
        let c = *c;
        chart
            .draw_series(DottedLineSeries::new(pts.clone(), 0, 6, move |p| {
                Circle::new(p, 1, c.filled())
            }))
            .map_err(|x| x.to_string())?;
    }
    for (_, c, pts) in resident {
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(|x| x.to_string())?;
    }
    Ok(())
}

/// The top panel's legend and the labels of its vertical marks, in the right margin.
fn memory_legend(top: &DrawingArea<SVGBackend<'_>, Shift>, fig: &Figure) -> Result<(), String> {
    let err = |x: DrawingAreaErrorKind<std::io::Error>| x.to_string();
    let x0 = LEGEND_X;
    let mut y = 50;
    for (i, n) in fig.names.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        for (style, what) in [(0, "allocation"), (1, "target"), (2, "active (estimate)")] {
            let path = vec![(x0, y), (x0 + 26, y)];
            match style {
                0 => top.draw(&PathElement::new(path, c.stroke_width(3))),
                1 => top.draw(&PathElement::new(path, c.stroke_width(1))),
                _ => top.draw(&Circle::new((x0 + 13, y), 2, c.filled())),
            }
            .map_err(err)?;
            top.draw(&Text::new(
                format!("{n}: {what}"),
                (x0 + 34, y - 8),
                ("sans-serif", 14).into_font(),
            ))
            .map_err(err)?;
            y += 22;
        }
        y += 6;
    }
    for (t, label) in &fig.marks {
        top.draw(&Text::new(
            format!("{t:.1} s: {label}"),
            (x0, y),
            ("sans-serif", 14).into_font(),
        ))
        .map_err(err)?;
        y += 20;
    }
    Ok(())
}

/// The bottom panel: the measured VMs' throughput over time (log scale when it spans orders of
/// magnitude), with its legend.
fn rates_panel(
    bottom: &DrawingArea<SVGBackend<'_>, Shift>,
    e: &HostExperiment,
    fig: &Figure,
) -> Result<(), String> {
    let (t_max, marks, rates) = (fig.t_max, &fig.marks, &fig.rates);
    let err = |x: DrawingAreaErrorKind<std::io::Error>| x.to_string();
    let x0 = LEGEND_X;
    let all_rates = || rates.iter().flat_map(|(_, _, p)| p.iter().map(|q| q.1));
    let r_max = all_rates().fold(1.0, f64::max) * 1.1;
    let r_min = all_rates().filter(|&r| r > 0.0).fold(r_max, f64::min) * 0.8;
    // Touch rates span orders of magnitude (a resident working set against one that faults).
    let log = r_max / r_min > 50.0;
    let what = match e.kind {
        Kind::Shares { .. } => "touches per second (each toucher step)",
        Kind::IdleTax { .. } => "operations per second (kv, every second)",
    };
    let fmt = |v: &f64| {
        if *v >= 1e6 {
            format!("{:.1}M", v / 1e6)
        } else if *v >= 1e3 {
            format!("{:.0}k", v / 1e3)
        } else {
            format!("{v:.0}")
        }
    };
    let mut builder = ChartBuilder::on(bottom);
    builder
        .caption(
            format!("{}: {what}{}", e.name, if log { ", log scale" } else { "" }),
            ("sans-serif", 20),
        )
        .margin(12)
        .margin_right(230)
        .x_label_area_size(40)
        .y_label_area_size(70);
    macro_rules! draw_rates {
        ($chart:expr, $low:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc("seconds since the host started")
                .y_label_formatter(&fmt)
                .label_style(("sans-serif", 15))
                .draw()
                .map_err(|x| x.to_string())?;
            for (t, _) in marks {
                chart
                    .draw_series(LineSeries::new(
                        vec![(*t, $low), (*t, r_max)],
                        RGBColor(150, 150, 150).stroke_width(1),
                    ))
                    .map_err(|x| x.to_string())?;
            }
            for (_, c, pts) in rates {
                let c = *c;
                chart
                    .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                    .map_err(|x| x.to_string())?;
                chart
                    .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
                    .map_err(|x| x.to_string())?;
            }
        }};
    }
    if log {
        draw_rates!(
            builder
                .build_cartesian_2d(0.0..t_max, (r_min..r_max).log_scale())
                .map_err(|x| x.to_string())?,
            r_min
        );
    } else {
        draw_rates!(
            builder
                .build_cartesian_2d(0.0..t_max, 0.0..r_max)
                .map_err(|x| x.to_string())?,
            0.0
        );
    }
    let mut y = 50;
    for (n, c, _) in rates {
        bottom
            .draw(&PathElement::new(
                vec![(x0, y), (x0 + 26, y)],
                c.stroke_width(3),
            ))
            .map_err(err)?;
        bottom
            .draw(&Text::new(
                n.clone(),
                (x0 + 34, y - 8),
                ("sans-serif", 14).into_font(),
            ))
            .map_err(err)?;
        y += 22;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::hostexp::Throughput;
    use memvisor_api::HostEvent;
    use memvisor_api::{FreeStateName, HostVmState};

    const M: u64 = 1 << 20;

    fn sample(t: f64, vms: &[(&str, u64, u64, f64)]) -> HostSample {
        HostSample {
            seconds: t,
            free_bytes: 10 * M,
            free_state: FreeStateName::High,
            vms: vms
                .iter()
                .map(|&(name, resident, target, active)| VmSample {
                    name: name.into(),
                    state: HostVmState::Running,
                    target_bytes: target * M,
                    resident_bytes: resident * M,
                    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                    active_bytes: ((resident * M) as f64 * active) as u64,
                    balloon_bytes: 0,
                    swapped_bytes: 0,
                    on_disk_bytes: 0,
                    limit_bytes: target * M,
                    pooled_bytes: 0,
                    shared_saved_bytes: 0,
                })
                .collect(),
        }
    }

    /// `small` alone, then `big` joins at 10 s and memory moves until 20 s; 2:1 from then on.
    fn shares_run() -> Run {
        let mut samples = Vec::new();
        for i in 0..=100 {
            let t = f64::from(i);
            let s = if t < 10.0 {
                sample(t, &[("small", 480, 512, 1.0)])
            } else if t < 20.0 {
                let x = (t - 10.0) / 10.0;
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let (b, m) = ((400.0 * x) as u64, (480.0 - 280.0 * x) as u64);
                sample(t, &[("small", m, 200, 1.0), ("big", b, 400, 1.0)])
            } else {
                let wobble = if i % 2 == 0 { 4 } else { 0 };
                sample(
                    t,
                    &[("small", 200 + wobble, 200, 0.99), ("big", 400, 400, 1.0)],
                )
            };
            samples.push(s);
        }
        Run {
            samples,
            events: vec![HostEvent {
                seconds: 11.0,
                kind: HostEventKind::Paused,
                vm: Some("small".into()),
                message: "paused".into(),
            }],
            throughput: vec![
                Throughput {
                    seconds: 90.0,
                    vm: "big".into(),
                    rate: 100.0,
                },
                Throughput {
                    seconds: 95.0,
                    vm: "big".into(),
                    rate: 300.0,
                },
            ],
            taxes: vec![(0.0, 0.75)],
            joined: vec![("small".into(), 0.0), ("big".into(), 10.0)],
            notes: Vec::new(),
        }
    }

    #[test]
    fn shares_steady_state_and_convergence() {
        let run = shares_run();
        let s = shares_summary(&run, "big", "small", 2.0).unwrap();
        assert_eq!(s.window, (55.0, 100.0), "the second half after joining");
        assert!((s.big_mib - 400.0).abs() < 1e-9);
        assert!((s.small_mib - 202.0).abs() < 0.1, "{s:?}");
        assert!(s.within);
        assert!((s.ratio_range.0 - 400.0 / 204.0).abs() < 1e-9);
        assert!((s.target_ratio - 2.0).abs() < 1e-9);
        // At 19 s the ratio is 360/228 = 1.58, from 20 s on 1.96 or 2: 10 s after joining.
        assert_eq!(s.converged_after, Some(10.0));
        assert_eq!(s.pauses, 0, "the pause was before the steady state");
        assert_eq!(s.big_rate, Some(200.0));
        assert_eq!(s.small_rate, None);
        // Never converged: the last tick is outside the band.
        let mut bad = run.clone();
        bad.samples.push(sample(
            101.0,
            &[("small", 300, 200, 1.0), ("big", 300, 400, 1.0)],
        ));
        assert_eq!(
            shares_summary(&bad, "big", "small", 2.0)
                .unwrap()
                .converged_after,
            None
        );
        // Big never joined: nothing to say.
        let mut alone = run;
        alone.joined.truncate(1);
        assert!(shares_summary(&alone, "big", "small", 2.0).is_none());
    }

    fn idletax_run() -> Run {
        let mut samples = Vec::new();
        let mut throughput = Vec::new();
        for i in 0..=300 {
            let t = f64::from(i);
            let (idle, busy) = if t < 150.0 {
                (180, 180)
            } else if t < 160.0 {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let moved = ((t - 150.0) * 7.6) as u64;
                (180 - moved, 180 + moved)
            } else {
                (104, 256)
            };
            if t < 20.0 {
                samples.push(sample(t, &[("idle", 200, 256, 0.01)]));
            } else {
                samples.push(sample(
                    t,
                    &[("idle", idle, idle, 0.01), ("busy", busy, busy, 1.0)],
                ));
                throughput.push(Throughput {
                    seconds: t,
                    vm: "busy".into(),
                    rate: if busy >= 256 { 800.0 } else { 100.0 },
                });
            }
        }
        Run {
            samples,
            events: Vec::new(),
            throughput,
            taxes: vec![(0.0, 0.0), (150.0, 0.75)],
            joined: vec![("idle".into(), 0.0), ("busy".into(), 20.0)],
            notes: Vec::new(),
        }
    }

    #[test]
    fn idletax_phases_speedup_and_reallocation_time() {
        let run = idletax_run();
        let s = idletax_summary(&run, "idle", "busy").unwrap();
        assert_eq!(s.untaxed.window, (90.0, 150.0));
        assert_eq!(s.taxed.window, (240.0, 300.0));
        assert!(s.equal_untaxed && s.moved);
        assert_eq!(s.untaxed.busy_rate, Some(100.0));
        assert_eq!(s.speedup, Some(8.0));
        // 90 % of the 76 MiB gained is 248.4 MiB: 248 at 159 s, 256 at 160 s.
        assert_eq!(s.realloc_s, Some(10.0));
        assert_eq!(s.rate_s, Some(10.0));
        // Without the tax change there is no second phase.
        let mut flat = run;
        flat.taxes.truncate(1);
        assert!(idletax_summary(&flat, "idle", "busy").is_none());
    }

    #[test]
    fn the_csv_has_every_column_in_every_row_and_the_report_and_plot_are_written() {
        for name in crate::experiments::host::NAMES {
            let e = crate::experiments::host::find(name, crate::experiments::Scale::Full).unwrap();
            let run = match e.kind {
                Kind::Shares { .. } => shares_run(),
                Kind::IdleTax { .. } => idletax_run(),
            };
            let text = csv(&e, std::slice::from_ref(&run));
            let cols = CSV_HEADER.split(',').count();
            let mut kinds = std::collections::BTreeSet::new();
            for line in text.lines().skip(1) {
                assert_eq!(line.split(',').count(), cols, "{line}");
                kinds.insert(line.split(',').next().unwrap().to_owned());
            }
            assert!(
                kinds.contains("sample") && kinds.contains("summary"),
                "{kinds:?}"
            );
            let md = markdown(
                &e,
                std::slice::from_ref(&run),
                &[("kernel".into(), "x".into())],
            );
            assert!(md.contains("no QEMU peer"), "{md}");
            assert!(md.contains("**yes**"), "{md}");
            let dir =
                std::env::temp_dir().join(format!("memvisor-plot-{}-{name}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let svg = dir.join("p.svg");
            plot(&svg, &e, &run).unwrap();
            let body = std::fs::read_to_string(&svg).unwrap();
            assert!(body.contains("<svg") && body.contains("allocation"));
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}
