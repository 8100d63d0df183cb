//! Every figure of the bench: a [`Figure`] is a grid of [`Panel`]s, each a chart of [`Line`]s
//! over linear or log axes, with labelled vertical marks and a legend, drawn once for SVG and
//! PNG with the one font and legend style.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

/// The colours of every figure's lines, in order (ColorBrewer's dark qualitative colours,
/// then lighter ones): fourteen, so the longest list of configurations (the 13 of `seqread`
/// and `alloc`) has no two lines alike.
const COLORS: [RGBColor; 14] = [
    RGBColor(0, 0, 0),
    RGBColor(202, 0, 32),
    RGBColor(33, 102, 172),
    RGBColor(27, 120, 55),
    RGBColor(230, 97, 1),
    RGBColor(94, 60, 153),
    RGBColor(140, 81, 10),
    RGBColor(128, 128, 128),
    RGBColor(197, 27, 125),
    RGBColor(1, 133, 113),
    RGBColor(102, 166, 30),
    RGBColor(0, 191, 196),
    RGBColor(253, 184, 99),
    RGBColor(178, 171, 210),
];

/// The colour of a figure's `i`-th line (from 0), distinct for the first [`COLORS`].
pub fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

/// A figure: `panels` laid out `grid.0` rows by `grid.1` columns on `size` pixels.
pub struct Figure {
    pub size: (u32, u32),
    pub grid: (usize, usize),
    pub panels: Vec<Panel>,
}

/// One axis: its range, on a log scale or not.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Axis {
    pub from: f64,
    pub to: f64,
    pub log: bool,
}

impl Axis {
    pub fn linear(from: f64, to: f64) -> Axis {
        Axis {
            from,
            to,
            log: false,
        }
    }

    pub fn log(from: f64, to: f64) -> Axis {
        Axis {
            from,
            to,
            log: true,
        }
    }
}

/// Where a panel's legend goes.
#[derive(Clone, Copy)]
pub enum Legend {
    /// In a margin this wide, right of the chart, so it never hides a point.
    Margin(i32),
    /// Inside the chart, boxed, in a corner.
    UpperLeft,
    UpperRight,
    LowerRight,
    None,
}

impl Legend {
    fn inside(self) -> Option<SeriesLabelPosition> {
        match self {
            Legend::UpperLeft => Some(SeriesLabelPosition::UpperLeft),
            Legend::UpperRight => Some(SeriesLabelPosition::UpperRight),
            Legend::LowerRight => Some(SeriesLabelPosition::LowerRight),
            Legend::Margin(_) | Legend::None => None,
        }
    }
}

/// One chart.
pub struct Panel {
    pub title: String,
    pub x_desc: String,
    pub y_desc: String,
    pub x: Axis,
    pub y: Axis,
    pub lines: Vec<Line>,
    /// Dashed vertical lines at x, with their labels.
    pub marks: Vec<(f64, String)>,
    pub legend: Legend,
    /// Names of the whole x values 1, 2, …, for a categorical axis; empty for a numeric one.
    pub x_names: Vec<String>,
    /// Decimals of the y labels; `None`: plotters' own.
    pub y_decimals: Option<usize>,
    /// A line of text in the chart, e.g. why it has no lines.
    pub note: Option<String>,
}

impl Panel {
    /// A panel with a title, axis descriptions and ranges, and nothing drawn yet.
    pub fn new(title: impl Into<String>, x_desc: &str, y_desc: &str, x: Axis, y: Axis) -> Panel {
        Panel {
            title: title.into(),
            x_desc: x_desc.into(),
            y_desc: y_desc.into(),
            x,
            y,
            lines: Vec::new(),
            marks: Vec::new(),
            legend: Legend::None,
            x_names: Vec::new(),
            y_decimals: None,
            note: None,
        }
    }
}

/// One line of a panel (or, with `width` 0, only its markers).
#[derive(Clone)]
pub struct Line {
    /// Its legend entry; empty for none.
    pub name: String,
    pub color: RGBColor,
    pub alpha: f64,
    pub width: u32,
    /// Dash and gap lengths of a dashed or dotted line; `None`: solid.
    pub dash: Option<(u32, u32)>,
    /// A filled circle at each point.
    pub dots: bool,
    pub points: Vec<(f64, f64)>,
    /// Single measurements drawn as crosses beside the line.
    pub crosses: Vec<(f64, f64)>,
}

impl Line {
    /// A solid line without markers.
    pub fn new(
        name: impl Into<String>,
        color: RGBColor,
        width: u32,
        points: Vec<(f64, f64)>,
    ) -> Line {
        Line {
            name: name.into(),
            color,
            alpha: 1.0,
            width,
            dash: None,
            dots: false,
            points,
            crosses: Vec::new(),
        }
    }

    pub fn dashed(self) -> Line {
        Line {
            dash: Some((6, 4)),
            ..self
        }
    }

    pub fn dotted(self) -> Line {
        Line {
            dash: Some((1, 5)),
            ..self
        }
    }

    /// With a filled circle at each point.
    pub fn marked(self) -> Line {
        Line { dots: true, ..self }
    }

    fn style(&self) -> ShapeStyle {
        self.color.mix(self.alpha).stroke_width(self.width.max(1))
    }
}

/// The x values of every point of `lines`.
pub fn xs(lines: &[Line]) -> impl Iterator<Item = f64> + '_ {
    lines.iter().flat_map(|l| l.points.iter().map(|p| p.0))
}

/// The y values of every point of `lines`.
pub fn ys(lines: &[Line]) -> impl Iterator<Item = f64> + '_ {
    lines.iter().flat_map(|l| l.points.iter().map(|p| p.1))
}

impl Figure {
    /// A figure of `panels` one above the other on `size` pixels.
    pub fn column(size: (u32, u32), panels: Vec<Panel>) -> Figure {
        let grid = (panels.len(), 1);
        Figure { size, grid, panels }
    }

    /// A figure of one panel on `size` pixels.
    pub fn one(size: (u32, u32), panel: Panel) -> Figure {
        Figure {
            size,
            grid: (1, 1),
            panels: vec![panel],
        }
    }

    /// Draws the figure to `path` (SVG) and to the same name with `.png`.
    pub fn write(&self, path: &Path) -> Result<(), String> {
        self.write_svg(path)?;
        let png = path.with_extension("png");
        let root = BitMapBackend::new(&png, self.size).into_drawing_area();
        self.draw(&root)?;
        root.present().map_err(|e| e.to_string())
    }

    /// Draws the figure to `path` as SVG only.
    pub fn write_svg(&self, path: &Path) -> Result<(), String> {
        font()?;
        let root = SVGBackend::new(path, self.size).into_drawing_area();
        self.draw(&root)?;
        root.present().map_err(|e| e.to_string())
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let areas = root.split_evenly(self.grid);
        for (panel, area) in self.panels.iter().zip(&areas) {
            panel.draw(area)?;
        }
        Ok(())
    }
}

impl Panel {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<(), String>
    where
        DB::ErrorType: 'static,
    {
        let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
        let mut builder = ChartBuilder::on(area);
        builder
            .caption(&self.title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(80);
        builder.margin_right(match self.legend {
            Legend::Margin(w) => w,
            _ => 30,
        });
        let (x, y) = (self.x, self.y);
        let x_fmt = |v: &f64| {
            let r = v.round();
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let name = ((v - r).abs() < 1e-6 && r >= 1.0).then(|| self.x_names.get(r as usize - 1));
            name.flatten().cloned().unwrap_or_default()
        };
        let y_fmt = |v: &f64| match self.y_decimals {
            Some(d) => format!("{v:.d$}"),
            None if *v >= 100.0 || y.to >= 100.0 => format!("{v:.0}"),
            None if *v >= 1.0 => format!("{v:.1}"),
            None => format!("{v:.2}"),
        };
        macro_rules! chart {
            ($chart:expr) => {{
                let mut chart = $chart.map_err(e)?;
                let mut mesh = chart.configure_mesh();
                mesh.x_desc(&self.x_desc)
                    .y_desc(&self.y_desc)
                    .y_label_formatter(&y_fmt)
                    .label_style(("sans-serif", 15));
                if !self.x_names.is_empty() {
                    mesh.x_labels(self.x_names.len().min(16))
                        .x_label_formatter(&x_fmt);
                }
                mesh.draw().map_err(e)?;
                for (at, label) in &self.marks {
                    let mark = vec![(*at, y.from), (*at, y.to)];
                    let mark = DashedLineSeries::new(mark, 6, 4, BLACK.stroke_width(1));
                    chart.draw_series(mark).map_err(e)?;
                    let text_y = if y.log { y.from * 1.5 } else { y.to / 1.04 };
                    let at = (*at + (x.to - x.from) / 200.0, text_y);
                    let text = Text::new(label.clone(), at, ("sans-serif", 14).into_font());
                    chart.draw_series(std::iter::once(text)).map_err(e)?;
                }
                for l in &self.lines {
                    let (style, inside) = (l.style(), self.legend.inside().is_some());
                    let clamp =
                        |&(px, py): &(f64, f64)| (px, if y.log { py.max(y.from) } else { py });
                    let pts: Vec<(f64, f64)> = l.points.iter().map(clamp).collect();
                    if l.width > 0 {
                        let drawn = if let Some((size, gap)) = l.dash {
                            chart.draw_series(DashedLineSeries::new(pts.clone(), size, gap, style))
                        } else {
                            chart.draw_series(LineSeries::new(pts.clone(), style))
                        }
                        .map_err(e)?;
                        if inside && !l.name.is_empty() {
                            drawn.label(l.name.clone()).legend(move |(lx, ly)| {
                                PathElement::new(vec![(lx, ly), (lx + 24, ly)], style)
                            });
                        }
                    }
                    if l.dots {
                        let c = l.color;
                        chart
                            .draw_series(pts.iter().map(|&q| Circle::new(q, 4, c.filled())))
                            .map_err(e)?;
                    }
                    let cross = |&q: &(f64, f64)| Cross::new(q, 4, l.color.stroke_width(1));
                    chart.draw_series(l.crosses.iter().map(cross)).map_err(e)?;
                }
                if let Some(note) = &self.note {
                    let at_y = if y.log {
                        y.from * 2.0
                    } else {
                        (y.from + y.to) / 2.0
                    };
                    let at = (x.from + (x.to - x.from) / 10.0, at_y);
                    let text = Text::new(note.clone(), at, ("sans-serif", 18).into_font());
                    chart.draw_series(std::iter::once(text)).map_err(e)?;
                }
                if let Some(position) = self.legend.inside() {
                    if self.lines.iter().any(|l| !l.name.is_empty() && l.width > 0) {
                        legend(&mut chart, position)?;
                    }
                }
            }};
        }
        let (xr, yr) = (x.from..x.to, y.from..y.to);
        match (x.log, y.log) {
            (false, false) => chart!(builder.build_cartesian_2d(xr, yr)),
            (false, true) => chart!(builder.build_cartesian_2d(xr, yr.log_scale())),
            (true, false) => chart!(builder.build_cartesian_2d(xr.log_scale(), yr)),
            (true, true) => chart!(builder.build_cartesian_2d(xr.log_scale(), yr.log_scale())),
        }
        if let Legend::Margin(w) = self.legend {
            let x0 = i32::try_from(area.dim_in_pixel().0).unwrap_or(0) - w + 16;
            let named = self.lines.iter().filter(|l| !l.name.is_empty());
            for (i, l) in named.enumerate() {
                let ly = 50 + 22 * i32::try_from(i).unwrap_or(0);
                let mut style = l.style();
                style.stroke_width = l.width.max(2);
                let seg = vec![(x0, ly), (x0 + 30, ly)];
                if let Some((size, gap)) = l.dash {
                    area.draw(&DashedPathElement::new(seg, size, gap, style))
                        .map_err(e)?;
                } else {
                    area.draw(&PathElement::new(seg, style)).map_err(e)?;
                }
                if l.dots {
                    area.draw(&Circle::new((x0 + 15, ly), 4, l.color.filled()))
                        .map_err(e)?;
                }
                let font = ("sans-serif", 14).into_font();
                area.draw(&Text::new(l.name.clone(), (x0 + 38, ly - 8), font))
                    .map_err(e)?;
            }
        }
        Ok(())
    }
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
fn font() -> Result<(), String> {
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

/// Draws the legend of `chart`'s labelled series at `position`, in the one style of every
/// figure.
fn legend<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_figure_is_drawn_to_svg_and_png_with_its_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.svg");
        let line = |name: &str, c, pts: Vec<(f64, f64)>| Line::new(name, c, 2, pts);
        let mut top = Panel::new(
            "linear",
            "seconds",
            "MiB",
            Axis::linear(0.0, 10.0),
            Axis::linear(0.0, 5.0),
        );
        top.lines = vec![
            line("solid", RED, vec![(0.0, 1.0), (5.0, 4.0), (10.0, 2.0)]).marked(),
            line("dashed", BLUE, vec![(0.0, 2.0), (10.0, 3.0)]).dashed(),
        ];
        top.marks = vec![(4.0, "a mark".into())];
        top.legend = Legend::Margin(200);
        let mut bottom = Panel::new(
            "log",
            "phase",
            "ms",
            Axis::linear(0.5, 2.5),
            Axis::log(1.0, 1000.0),
        );
        bottom.lines = vec![line("phases", BLACK, vec![(1.0, 10.0), (2.0, 0.0)])];
        bottom.x_names = vec!["boot".into(), "run".into()];
        bottom.legend = Legend::UpperLeft;
        bottom.note = Some("a note".into());
        let fig = Figure {
            size: (800, 800),
            grid: (2, 1),
            panels: vec![top, bottom],
        };
        fig.write(&path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        for want in [
            "linear", "solid", "dashed", "a mark", "phases", "boot", "a note",
        ] {
            assert!(svg.contains(want), "{want}");
        }
        assert!(path.with_extension("png").exists());
    }
}
