//! Progress bars for long commands (`memvisor bench`, `memvisor mkdisk` of large disks), drawn
//! on stderr only when a person watches: stdout and stderr both terminals. Otherwise the bar is
//! hidden and the commands print their usual lines, so logs and pipes stay clean.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Whether a person watches the command.
pub fn watched() -> bool {
    std::io::stdout().is_terminal() && std::io::stderr().is_terminal()
}

/// A bar of `len` steps counting `unit`, or a hidden one.
pub fn bar(len: u64, unit: &str) -> ProgressBar {
    if !watched() {
        return ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden());
    }
    let style = ProgressStyle::with_template(&format!(
        "{{msg}} [{{bar:30}}] {{pos}}/{{len}} {unit} {{elapsed}}, about {{eta}} left"
    ))
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    ProgressBar::new(len).with_style(style)
}

/// Prints `line` above the bar when it is drawn, on stderr otherwise.
pub fn say(bar: &ProgressBar, line: &str) {
    if bar.is_hidden() {
        eprintln!("{line}");
    } else {
        bar.println(line);
    }
}
