//! The plot of an experiment of phases: for each workload, the median time of
//! each phase per configuration (VSwapper Fig. 9a) above the bytes written to swap per phase as
//! 512-byte sectors (Fig. 9d). One line and marker per configuration; a configuration whose runs
//! all died before a phase has no point there.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::families::phases::configs::Config;
use crate::families::phases::experiment::Experiment;
use crate::families::phases::report::{phase_ms, swap_written, values, Record};
use crate::report::numbers::summary;

/// One colour per configuration for the longest list (the 13 of `seqread` and `alloc`), so no
/// two lines of the default plot share one.
const COLORS: [RGBColor; 14] = [
    RGBColor(0, 0, 0),
    RGBColor(230, 97, 1),
    RGBColor(253, 184, 99),
    RGBColor(94, 60, 153),
    RGBColor(178, 171, 210),
    RGBColor(27, 120, 55),
    RGBColor(33, 102, 172),
    RGBColor(202, 0, 32),
    RGBColor(1, 133, 113),
    RGBColor(140, 81, 10),
    RGBColor(197, 27, 125),
    RGBColor(128, 128, 128),
    RGBColor(102, 166, 30),
    RGBColor(0, 191, 196),
];

/// Room on the right of each panel for the legend.
const LEGEND_W: i32 = 260;

type Series = Vec<(String, RGBColor, Vec<(f64, f64)>)>;

fn series(
    exp: &Experiment,
    configs: &[&'static Config],
    records: &[Record],
    step: usize,
    f: &dyn Fn(&crate::families::phases::vm::result::Phase) -> f64,
) -> Series {
    configs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let pts = exp.steps[step]
                .phases
                .iter()
                .enumerate()
                .filter_map(|(x, ph)| {
                    let m = summary(&mut values(records, step, c.name, ph, f))?.0;
                    #[allow(clippy::cast_precision_loss)]
                    Some((x as f64 + 1.0, m))
                })
                .collect();
            let runs: Vec<&Record> = records
                .iter()
                .filter(|r| r.step == step && r.config.name == c.name)
                .collect();
            let ok = runs
                .iter()
                .filter(|r| r.result.status == crate::families::phases::vm::result::Status::Ok)
                .count();
            let name = if ok == runs.len() {
                c.name.to_owned()
            } else {
                format!("{} ({ok}/{} ok)", c.name, runs.len())
            };
            (name, COLORS[i % COLORS.len()], pts)
        })
        .collect()
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    y_label: &str,
    phases: &[String],
    data: &Series,
    log: bool,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let all = || data.iter().flat_map(|(_, _, p)| p.iter().map(|q| q.1));
    let ymax = all().fold(0.0f64, f64::max).max(1.0) * 1.1;
    let ymin = all().filter(|&v| v > 0.0).fold(ymax, f64::min) * 0.8;
    #[allow(clippy::cast_precision_loss)]
    let n = phases.len() as f64;
    let labels: Vec<String> = phases.to_vec();
    let x_fmt = |x: &f64| {
        let r = x.round();
        if (x - r).abs() < 1e-6 && r >= 1.0 {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            labels.get(r as usize - 1).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    let y_fmt = |y: &f64| {
        if *y >= 100.0 || ymax >= 100.0 {
            format!("{y:.0}")
        } else if *y >= 1.0 {
            format!("{y:.1}")
        } else {
            format!("{y:.2}")
        }
    };
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .margin_right(LEGEND_W)
        .x_label_area_size(40)
        .y_label_area_size(80);
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_labels(phases.len().min(16))
                .x_label_formatter(&x_fmt)
                .y_label_formatter(&y_fmt)
                .y_desc(y_label)
                .label_style(("sans-serif", 15))
                .draw()
                .map_err(e)?;
            for (_, color, pts) in data {
                let c = *color;
                chart
                    .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                    .map_err(e)?;
                chart
                    .draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))
                    .map_err(e)?;
            }
        }};
    }
    if log && ymin < ymax {
        draw!(builder
            .build_cartesian_2d(0.5f64..n + 0.5, (ymin..ymax).log_scale())
            .map_err(e)?);
    } else {
        draw!(builder
            .build_cartesian_2d(0.5f64..n + 0.5, 0.0f64..ymax)
            .map_err(e)?);
    }
    // The legend, right of the plot in the margin kept for it, so it never hides a point.
    let x0 = i32::try_from(area.dim_in_pixel().0).unwrap_or(0) - LEGEND_W + 16;
    for (i, (name, color, _)) in data.iter().enumerate() {
        let y = 50 + 24 * i32::try_from(i).unwrap_or(0);
        area.draw(&PathElement::new(
            vec![(x0, y), (x0 + 26, y)],
            color.stroke_width(3),
        ))
        .map_err(e)?;
        area.draw(&Circle::new((x0 + 13, y), 4, color.filled()))
            .map_err(e)?;
        area.draw(&Text::new(
            name.clone(),
            (x0 + 34, y - 8),
            ("sans-serif", 15).into_font(),
        ))
        .map_err(e)?;
    }
    Ok(())
}

/// Writes `<out>/<experiment>.svg` and `.png`.
pub fn write(
    path: &Path,
    exp: &Experiment,
    configs: &[&'static Config],
    records: &[Record],
) -> Result<(), String> {
    let h = u32::try_from(exp.steps.len()).unwrap_or(1) * 900;
    crate::report::figure::svg_and_png!(path, (1100, h), |root| draw(root, exp, configs, records))
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    exp: &Experiment,
    configs: &[&'static Config],
    records: &[Record],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let steps = exp.steps.len();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let rows = root.split_evenly((steps * 2, 1));
    for (si, step) in exp.steps.iter().enumerate() {
        let times = series(exp, configs, records, si, &|p| phase_ms(p) / 1e3);
        #[allow(clippy::cast_precision_loss)]
        let sectors = series(exp, configs, records, si, &|p| {
            swap_written(p) as f64 / 512.0
        });
        panel(
            &rows[2 * si],
            &format!(
                "{} ({}): median guest time per phase (log scale)",
                exp.name, step.workload
            ),
            "seconds",
            &step.phases,
            &times,
            true,
        )?;
        panel(
            &rows[2 * si + 1],
            &format!(
                "{} ({}): sectors written to swap per phase (host swap + hypervisor writes)",
                exp.name, step.workload
            ),
            "512-byte sectors",
            &step.phases,
            &sectors,
            false,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::Scale;
    use crate::families::phases::{find, NAMES};

    #[test]
    fn every_default_configuration_gets_its_own_colour() {
        for name in NAMES {
            let exp = find(name, Scale::Full).unwrap();
            assert!(exp.configs.len() <= COLORS.len(), "{name}");
        }
        for (i, a) in COLORS.iter().enumerate() {
            assert!(!COLORS[i + 1..].contains(a), "colour {i} is used twice");
        }
    }
}
