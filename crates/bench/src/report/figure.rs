//! What every figure shares: the font, drawing one figure to SVG and PNG
//! ([`svg_and_png`]), and the legend's style.

use std::sync::OnceLock;

use plotters::prelude::*;

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
        $crate::report::figure::font()?;
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
