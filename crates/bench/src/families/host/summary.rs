//! The numbers a host experiment's goals are judged by, from what `run` measured: steady-state
//! allocations and their ratio, how long memory took to move, the busy VM's throughput before
//! and after the tax, and the one-line headline and summary rows of a run.

use memvisor_api::{FreeStateName, HostEventKind, HostSample, VmSample};

use super::experiment::{Goal, HostExperiment};
use super::run::{active_fraction, HostRun};
use crate::report::numbers::{mean, mib, or_dash};

pub fn vm<'a>(s: &'a HostSample, name: &str) -> Option<&'a VmSample> {
    s.vms.iter().find(|v| v.name == name)
}

impl HostRun {
    fn joined_at(&self, name: &str) -> Option<f64> {
        self.joined.iter().find(|(n, _)| n == name).map(|j| j.1)
    }

    pub fn end(&self) -> f64 {
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
pub fn steady(from: f64, to: f64, secs: f64) -> (f64, f64) {
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
pub fn tick_ratio(s: &HostSample, big: &str, small: &str) -> Option<f64> {
    let (b, m) = (vm(s, big)?, vm(s, small)?);
    let r = b.resident_bytes as f64 / m.resident_bytes.max(1) as f64;
    Some(r)
}

pub fn shares_summary(run: &HostRun, big: &str, small: &str, goal: f64) -> Option<SharesSummary> {
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
pub struct TaxPeriod {
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
    pub untaxed: TaxPeriod,
    pub taxed: TaxPeriod,
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

pub fn phase(run: &HostRun, w: (f64, f64), idle: &str, busy: &str) -> Option<TaxPeriod> {
    Some(TaxPeriod {
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

pub fn idletax_summary(run: &HostRun, idle: &str, busy: &str) -> Option<IdleTaxSummary> {
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

/// What `bench reallocation` measured.
#[derive(Clone, Debug, PartialEq)]
pub struct ReallocationSummary {
    /// Seconds spent in each free state (each tick stands for the time to the next), in
    /// [`FreeStateName::ALL`]'s order.
    pub states: Vec<(FreeStateName, f64)>,
    /// The highest sum over the VMs, at one tick, of their resident memory, their balloons and
    /// what their pagers swapped out (MiB).
    pub peak_resident_mib: f64,
    pub peak_balloon_mib: f64,
    pub peak_swapped_mib: f64,
    /// The returning VM's `min`, and its lowest allocation (resident) in the second half of its
    /// idle phase (MiB).
    pub min_mib: f64,
    pub idle_low_mib: f64,
    /// Its highest allocation once it works again, and the seconds from the end of its idle
    /// phase until it held 90 % of what it gained back.
    pub again_high_mib: f64,
    pub regain_s: Option<f64>,
    /// When each VM's balloon was first found to answer (`balloon_usable`), and how often it
    /// was found not to make progress afterwards (`balloon_unusable`), in the VMs' order.
    pub balloon_usable: Vec<(String, Option<f64>, usize)>,
}

pub fn reallocation_summary(
    e: &HostExperiment,
    run: &HostRun,
    returns: &str,
    idle: (f64, f64),
) -> Option<ReallocationSummary> {
    let mut states: Vec<(FreeStateName, f64)> =
        FreeStateName::ALL.iter().map(|&s| (s, 0.0)).collect();
    for w in run.samples.windows(2) {
        if let Some(slot) = states.iter_mut().find(|(s, _)| *s == w[0].free_state) {
            slot.1 += (w[1].seconds - w[0].seconds).max(0.0);
        }
    }
    let peak = |f: fn(&VmSample) -> u64| {
        let sums = run.samples.iter().map(|s| s.vms.iter().map(f).sum::<u64>());
        mib(sums.max().unwrap_or(0))
    };
    let spec = e.vms.iter().find(|v| v.spec.name == returns)?;
    let resident = |s: &HostSample| vm(s, returns).map(|v| mib(v.resident_bytes));
    let low_window = ((idle.0 + idle.1) / 2.0, idle.1);
    let idle_low_mib = run
        .in_window(low_window)
        .filter_map(resident)
        .reduce(f64::min)?;
    let after = run.samples.iter().filter(|s| s.seconds >= idle.1);
    let again_high_mib = after.clone().filter_map(resident).reduce(f64::max)?;
    let goal = idle_low_mib + 0.9 * (again_high_mib - idle_low_mib);
    let regain_s = after
        .clone()
        .find(|s| resident(s).is_some_and(|r| r >= goal))
        .map(|s| s.seconds - idle.1);
    let usable = |name: &str| {
        let of = |kind| {
            let mine = move |ev: &&memvisor_api::HostEvent| ev.kind == kind;
            run.events
                .iter()
                .filter(mine)
                .filter(|ev| ev.vm.as_deref() == Some(name))
        };
        let first = of(HostEventKind::BalloonUsable).next().map(|ev| ev.seconds);
        (
            name.to_owned(),
            first,
            of(HostEventKind::BalloonUnusable).count(),
        )
    };
    Some(ReallocationSummary {
        states,
        peak_resident_mib: peak(|v| v.resident_bytes),
        peak_balloon_mib: peak(|v| v.balloon_bytes),
        peak_swapped_mib: peak(|v| v.swapped_bytes),
        min_mib: mib(spec.spec.min),
        idle_low_mib,
        again_high_mib,
        regain_s,
        balloon_usable: e.vms.iter().map(|v| usable(&v.spec.name)).collect(),
    })
}

/// A free state as the reports and `results.csv` name it: `high`, `soft`, `hard`, `low`.
pub fn state_name(s: FreeStateName) -> String {
    format!("{s:?}").to_lowercase()
}

/// One line on how a run went, for the progress output.
pub fn headline(e: &HostExperiment, run: &HostRun) -> String {
    match e.goal {
        Goal::Shares { big, small, ratio } => match shares_summary(run, big, small, ratio) {
            None => "no steady state measured".into(),
            Some(s) => format!(
                "{big} {:.0} MiB, {small} {:.0} MiB: ratio {:.2} (goal {ratio:.0}, {}within 10 %), converged {} s after {big} joined",
                s.big_mib,
                s.small_mib,
                s.ratio,
                if s.within { "" } else { "not " },
                or_dash(s.converged_after, 1)
            ),
        },
        Goal::IdleTax { idle, busy, .. } => match idletax_summary(run, idle, busy) {
            None => "no steady state measured".into(),
            Some(s) => format!(
                "tax 0: {idle} {:.0} MiB, {busy} {:.0} MiB, {busy} {} ops/s; tax 0.75: {idle} {:.0} MiB, {busy} {:.0} MiB, {} ops/s; speedup {}, memory moved in {} s",
                s.untaxed.idle_mib,
                s.untaxed.busy_mib,
                or_dash(s.untaxed.busy_rate, 0),
                s.taxed.idle_mib,
                s.taxed.busy_mib,
                or_dash(s.taxed.busy_rate, 0),
                or_dash(s.speedup, 2),
                or_dash(s.realloc_s, 1)
            ),
        },
        Goal::Reallocation { returns, idle } => match reallocation_summary(e, run, returns, idle) {
            None => "no idle phase measured".into(),
            Some(s) => {
                let states: Vec<String> = s
                    .states
                    .iter()
                    .map(|(st, secs)| format!("{} {secs:.0} s", state_name(*st)))
                    .collect();
                format!(
                    "{}; {returns} idle at {:.0} MiB (min {:.0}), back to {:.0} MiB in {} s",
                    states.join(", "),
                    s.idle_low_mib,
                    s.min_mib,
                    s.again_high_mib,
                    or_dash(s.regain_s, 1)
                )
            }
        },
    }
}

/// The CSV header: every row has every column; `kind` says which are filled.
pub const CSV_HEADER: &str = "kind,experiment,rep,seconds,vm,state,idle_tax,free_bytes,free_state,target_bytes,resident_bytes,active_fraction,balloon_bytes,swapped_bytes,limit_bytes,rate,metric,value";

pub fn tax_at(run: &HostRun, t: f64) -> f64 {
    let since = run.taxes.iter().rev().find(|(at, _)| *at <= t);
    since.or(run.taxes.first()).map_or(0.0, |x| x.1)
}

pub fn summary_rows(e: &HostExperiment, run: &HostRun) -> Vec<(String, String)> {
    let f = |x: f64| format!("{x:.4}");
    let o = |x: Option<f64>| x.map_or(String::new(), f);
    let b = |x: bool| u8::from(x).to_string();
    let n = |x: usize| x.to_string();
    match e.goal {
        Goal::Shares { big, small, ratio } => shares_summary(run, big, small, ratio)
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
                    ("free_state_changes_steady".into(), n(s.state_changes)),
                    ("pauses_steady".into(), n(s.pauses)),
                    (format!("{big}_touches_per_s"), o(s.big_rate)),
                    (format!("{small}_touches_per_s"), o(s.small_rate)),
                ]
            })
            .unwrap_or_default(),
        Goal::IdleTax { idle, busy, .. } => idletax_summary(run, idle, busy)
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
                    ("pauses".into(), n(s.pauses)),
                ]);
                rows
            })
            .unwrap_or_default(),
        Goal::Reallocation { returns, idle } => reallocation_summary(e, run, returns, idle)
            .map(|s| {
                let mut rows: Vec<(String, String)> = s
                    .states
                    .iter()
                    .map(|(st, secs)| (format!("{}_s", state_name(*st)), f(*secs)))
                    .collect();
                rows.extend([
                    ("peak_resident_mib".into(), f(s.peak_resident_mib)),
                    ("peak_balloon_mib".into(), f(s.peak_balloon_mib)),
                    ("peak_swapped_mib".into(), f(s.peak_swapped_mib)),
                    (format!("{returns}_min_mib"), f(s.min_mib)),
                    (format!("{returns}_idle_low_mib"), f(s.idle_low_mib)),
                    (format!("{returns}_again_high_mib"), f(s.again_high_mib)),
                    (format!("{returns}_regain_90pct_s"), o(s.regain_s)),
                ]);
                for (name, at, lost) in &s.balloon_usable {
                    rows.push((format!("{name}_balloon_usable_s"), o(*at)));
                    rows.push((format!("{name}_balloon_unusable_times"), n(*lost)));
                }
                rows
            })
            .unwrap_or_default(),
    }
}
