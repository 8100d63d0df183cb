//! The figure of a host experiment: allocations over time per VM (resident solid, target
//! dashed, active dotted, as ESX's Fig. 7) above each VM's throughput.

use std::path::Path;

use memvisor_api::VmSample;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::experiment::{Goal, HostExperiment};
use super::run::HostRun;
use super::summary::vm;
use crate::report::numbers::mib;

const COLORS: [RGBColor; 4] = [
    RGBColor(33, 102, 172),
    RGBColor(202, 0, 32),
    RGBColor(27, 120, 55),
    RGBColor(0, 0, 0),
];

pub type Line = (String, RGBColor, Vec<(f64, f64)>);

/// Writes the plot: allocations over time (resident solid, target dashed, active dotted), with a
/// vertical line where a VM joins or the tax changes, above each VM's throughput.
pub fn plot(path: &Path, e: &HostExperiment, run: &HostRun) -> Result<(), String> {
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
pub struct Figure {
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
pub const LEGEND_X: i32 = 1100 - 230 + 10;

/// The figure's lines and marks from a run.
pub fn figure(e: &HostExperiment, run: &HostRun) -> Figure {
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
        let measured = match e.goal {
            Goal::Shares { .. } => true,
            Goal::IdleTax { busy, .. } => n == busy,
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
pub fn memory_panel(
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
pub fn memory_legend(top: &DrawingArea<SVGBackend<'_>, Shift>, fig: &Figure) -> Result<(), String> {
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
pub fn rates_panel(
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
    let what = match e.goal {
        Goal::Shares { .. } => "touches per second (each toucher step)",
        Goal::IdleTax { .. } => "operations per second (kv, every second)",
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
