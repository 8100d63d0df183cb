//! The figure of a host experiment: allocations over time per VM (resident solid, target
//! dashed, active dotted, as ESX's Fig. 7) above each VM's throughput.

use std::path::Path;

use super::experiment::{Goal, HostExperiment};
use super::run::HostRun;
use super::summary::{state_name, vm};
use crate::report::figure::{color, ys, Axis, Figure, Legend, Line, Panel};
use crate::report::numbers::mib;
use memvisor_api::{FreeStateName, HostSample, VmSample};

/// Each VM of `names` over the host's ticks, in MiB, a colour each: its allocation (resident,
/// solid) and target (dashed); with `detail` also its active estimate (dotted), and every line
/// in the legend (otherwise only the allocation, by the VM's name).
pub fn allocations(history: &[HostSample], names: &[String], detail: bool) -> Vec<Line> {
    let mut lines = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let series = |f: fn(&VmSample) -> u64| series(history, n, f);
        let label = |what: &str| match (detail, what) {
            (true, _) => format!("{n}: {what}"),
            (false, "allocation") => n.clone(),
            (false, _) => String::new(),
        };
        let c = color(i);
        let resident = series(|v| v.resident_bytes);
        lines.push(Line::new(label("allocation"), c, 2, resident));
        lines.push(Line::new(label("target"), c, 1, series(|v| v.target_bytes)).dashed());
        if detail {
            let active = series(|v| v.active_bytes);
            lines.push(Line::new(label("active (estimate)"), c, 2, active).dotted());
        }
    }
    lines
}

/// VM `name`'s `f` over the host's ticks: (seconds, MiB), the ticks it was in.
pub fn series(history: &[HostSample], name: &str, f: fn(&VmSample) -> u64) -> Vec<(f64, f64)> {
    let at = history.iter();
    at.filter_map(|s| vm(s, name).map(|v| (s.seconds, mib(f(v)))))
        .collect()
}

/// Writes the plot (SVG): allocations over time (resident solid, target dashed, active
/// dotted), with a vertical line where a VM joins or the tax changes, above each VM's
/// throughput.
pub fn plot(path: &Path, e: &HostExperiment, run: &HostRun) -> Result<(), String> {
    let joins = run.joined.iter().filter(|(_, t)| *t > 0.0);
    let mut marks: Vec<(f64, String)> = joins.map(|(n, t)| (*t, format!("{n} joins"))).collect();
    let taxes = run.taxes.iter().skip(1);
    marks.extend(taxes.map(|(t, x)| (*t, format!("tax {x}"))));
    let x = Axis::linear(0.0, run.end().max(e.duration).max(1.0));
    let y_max = e.vms.iter().map(|v| mib(v.spec.mem)).fold(1.0, f64::max) * 1.1;
    let mut memory = Panel::new(
        format!("{}: memory per VM over time (MiB)", e.name),
        "seconds since the host started",
        "MiB",
        x,
        Axis::linear(0.0, y_max),
    );
    let names: Vec<String> = e.vms.iter().map(|v| v.spec.name.clone()).collect();
    memory.lines = allocations(&run.samples, &names, true);
    let mut rates = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let c = color(i);
        let r = run.throughput.iter().filter(|t| &t.vm == n);
        let r: Vec<(f64, f64)> = r.map(|t| (t.seconds, t.rate)).collect();
        // The idle VM's touches are not what the experiment measures.
        let measured = match e.goal {
            Goal::Shares { .. } => true,
            Goal::IdleTax { busy, .. } => n == busy,
            Goal::Reallocation { returns, .. } => n == returns,
        };
        if measured && !r.is_empty() {
            rates.push(Line::new(n.clone(), c, 2, r).marked());
        }
    }
    let r_max = ys(&rates).fold(1.0, f64::max) * 1.1;
    let r_min = ys(&rates).filter(|&r| r > 0.0).fold(r_max, f64::min) * 0.8;
    // Touch rates span orders of magnitude (a resident working set against one that faults).
    let log = r_max / r_min > 50.0;
    let what = match e.goal {
        Goal::Shares { .. } => "touches per second (each toucher step)",
        Goal::IdleTax { .. } => "operations per second (kv, every second)",
        Goal::Reallocation { .. } => "touches per second (each toucher step)",
    };
    let rates = Panel {
        lines: rates,
        marks: marks.clone(),
        legend: Legend::Margin(230),
        y_decimals: Some(0),
        ..Panel::new(
            format!("{}: {what}{}", e.name, if log { ", log scale" } else { "" }),
            "seconds since the host started",
            "",
            x,
            if log {
                Axis::log(r_min, r_max)
            } else {
                Axis::linear(0.0, r_max)
            },
        )
    };
    memory.marks = marks;
    memory.legend = Legend::Margin(230);
    let mut panels = vec![memory, rates];
    if let Goal::Reallocation { .. } = e.goal {
        panels.insert(0, states(run, x));
    }
    let height = 500 * u32::try_from(panels.len()).unwrap_or(2);
    Figure::column((1100, height), panels).write_svg(path)
}

/// Fig. 8(a): the host's free-memory state over time, a step from one sample to the next
/// (`low` at the bottom, `high` at the top). A state that flaps tick by tick would bury the
/// allocations under one vertical mark per change.
fn states(run: &HostRun, x: Axis) -> Panel {
    let ranks = FreeStateName::ALL;
    let level = |s: &HostSample| {
        let below = ranks.iter().position(|&r| r == s.free_state).unwrap_or(0);
        (ranks.len() - 1 - below) as f64
    };
    let mut steps: Vec<(f64, f64)> = Vec::with_capacity(2 * run.samples.len());
    for s in &run.samples {
        if let Some(&(_, was)) = steps.last() {
            steps.push((s.seconds, was));
        }
        steps.push((s.seconds, level(s)));
    }
    let key: Vec<String> = ranks
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &r)| format!("{i} {}", state_name(r)))
        .collect();
    Panel {
        lines: vec![Line::new("free-memory state", color(0), 2, steps)],
        legend: Legend::Margin(230),
        y_decimals: Some(0),
        ..Panel::new(
            format!(
                "the host's free-memory state over time ({})",
                key.join(", ")
            ),
            "seconds since the host started",
            "state",
            x,
            Axis::linear(-0.2, 3.2),
        )
    }
}
