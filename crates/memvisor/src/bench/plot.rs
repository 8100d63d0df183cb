//! The plot of an experiment, as SVG through `plotters`: for each workload, the median time of
//! each phase per configuration (VSwapper Fig. 9a) above the bytes written to swap per phase as
//! 512-byte sectors (Fig. 9d). One line and marker per configuration; a configuration whose runs
//! all died before a phase has no point there.

use std::path::Path;

use plotters::prelude::*;

use super::configs::Config;
use super::experiments::Experiment;
use super::report::{phase_ms, stats, swap_written, values, Record};

const COLORS: [RGBColor; 8] = [
    RGBColor(0, 0, 0),
    RGBColor(230, 97, 1),
    RGBColor(253, 184, 99),
    RGBColor(94, 60, 153),
    RGBColor(178, 171, 210),
    RGBColor(27, 120, 55),
    RGBColor(33, 102, 172),
    RGBColor(202, 0, 32),
];

type Series = Vec<(String, RGBColor, Vec<(f64, f64)>)>;

fn series(
    exp: &Experiment,
    configs: &[&'static Config],
    records: &[Record],
    step: usize,
    f: &dyn Fn(&super::runner::Phase) -> f64,
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
                    let m = stats(&mut values(records, step, c.name, ph, f))?.0;
                    #[allow(clippy::cast_precision_loss)]
                    Some((x as f64 + 1.0, m))
                })
                .collect();
            (c.name.to_owned(), COLORS[i % COLORS.len()], pts)
        })
        .collect()
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    y_label: &str,
    phases: &[String],
    data: &Series,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let ymax = data
        .iter()
        .flat_map(|(_, _, p)| p.iter().map(|q| q.1))
        .fold(0.0f64, f64::max)
        .max(1.0)
        * 1.1;
    #[allow(clippy::cast_precision_loss)]
    let n = phases.len() as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(0.5f64..n + 0.5, 0.0f64..ymax)
        .map_err(|e| e.to_string())?;
    let labels: Vec<String> = phases.to_vec();
    chart
        .configure_mesh()
        .x_labels(phases.len().min(16))
        .x_label_formatter(&|x| {
            let r = x.round();
            if (x - r).abs() < 1e-6 && r >= 1.0 {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                labels.get(r as usize - 1).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc(y_label)
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(|e| e.to_string())?;
    for (name, color, pts) in data {
        let c = *color;
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(3))
            });
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// Writes `<out>/<experiment>.svg`.
pub fn write(
    path: &Path,
    exp: &Experiment,
    configs: &[&'static Config],
    records: &[Record],
) -> Result<(), String> {
    let steps = exp.steps.len();
    let h = u32::try_from(steps).unwrap_or(1) * 900;
    let root = SVGBackend::new(path, (1100, h)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let rows = root.split_evenly((steps * 2, 1));
    for (si, step) in exp.steps.iter().enumerate() {
        let times = series(exp, configs, records, si, &|p| phase_ms(p) / 1e3);
        #[allow(clippy::cast_precision_loss)]
        let sectors = series(exp, configs, records, si, &|p| swap_written(p) as f64 / 512.0);
        panel(
            &rows[2 * si],
            &format!(
                "{} ({}): median time per phase",
                exp.name, step.workload
            ),
            "seconds",
            &step.phases,
            &times,
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
        )?;
    }
    root.present().map_err(|e| e.to_string())
}
