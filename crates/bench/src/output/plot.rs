//! The plot of an experiment, as SVG and PNG through `plotters` ([`svg_and_png`]): for each workload, the median time of
//! each phase per configuration (VSwapper Fig. 9a) above the bytes written to swap per phase as
//! 512-byte sectors (Fig. 9d). One line and marker per configuration; a configuration whose runs
//! all died before a phase has no point there.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::configs::Config;
use crate::experiments::Experiment;
use crate::output::numbers::summary;
use crate::output::report::{phase_ms, swap_written, values, Record};

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
    f: &dyn Fn(&crate::harness::vm::Phase) -> f64,
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
                .filter(|r| r.result.status == crate::harness::vm::Status::Ok)
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

/// Fonts the PNG renderer can use, in order of preference (Debian's `fonts-dejavu-core`,
/// which `scripts/setup-host.sh` installs, first).
const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

/// Registers a font for the plots' text (once): plotters measures text with it for both
/// backends, and draws it into PNGs. An error names the package to install.
pub fn font() -> Result<(), String> {
    static READY: OnceLock<Result<(), String>> = OnceLock::new();
    READY
        .get_or_init(|| {
        for path in FONTS {
            if let Ok(bytes) = std::fs::read(path) {
                // Registered fonts live as long as the process.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                // One face for every family and style the figures name.
                let all = ["sans-serif", "serif", "monospace"].iter().all(|family| {
                    [FontStyle::Normal, FontStyle::Bold, FontStyle::Italic, FontStyle::Oblique]
                        .into_iter()
                        .all(|style| {
                            plotters::style::register_font(family, style, bytes).is_ok()
                        })
                });
                if all {
                    return Ok(());
                }
            }
        }
        Err(format!(
            "no font for the plots' text in {}: install fonts-dejavu-core (scripts/setup-host.sh does)",
            FONTS.join(", ")
        ))
    })
    .clone()
}

/// Draws a figure to `path` (SVG) and to the same name with `.png`:
/// `draw` is called with each backend's root area (a closure written once, instantiated for
/// both backends).
macro_rules! svg_and_png {
    ($path:expr, $size:expr, $draw:expr) => {{
        let path: &std::path::Path = $path;
        let size: (u32, u32) = $size;
        $crate::output::plot::font()?;
        {
            let root = plotters::prelude::SVGBackend::new(path, size).into_drawing_area();
            $draw(&root)?;
            root.present().map_err(|e| e.to_string())?;
        }
        {
            let png = path.with_extension("png");
            let root = plotters::prelude::BitMapBackend::new(&png, size).into_drawing_area();
            $draw(&root)?;
            root.present().map_err(|e| e.to_string())?;
        }
        Ok::<(), String>(())
    }};
}
pub(crate) use svg_and_png;

/// Draws the legend of `chart`'s labelled series at `position`, in the one style of every
/// figure.
pub fn legend<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .position(position)
        .margin(8)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.9))
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|e| e.to_string())
}

/// Writes `<out>/<experiment>.svg` and `.png`.
pub fn write(
    path: &Path,
    exp: &Experiment,
    configs: &[&'static Config],
    records: &[Record],
) -> Result<(), String> {
    let h = u32::try_from(exp.steps.len()).unwrap_or(1) * 900;
    svg_and_png!(path, (1100, h), |root| draw(root, exp, configs, records))
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
    use crate::experiments::{find, Scale, NAMES};

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
