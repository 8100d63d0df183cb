//! What every family's report shares: tables in Markdown and CSV with `results.csv`'s quoting
//! (`table`), the numbers (`numbers`), the figures (`figure`), the environment section, the
//! runs that did not complete and writing the three outputs.

pub mod claims;
pub mod figure;
pub mod numbers;
pub mod table;

/// Appends the report's `## Environment` section: one line per fact of the run's host.
pub fn environment(s: &mut String, env: &[(String, String)]) {
    s.push_str("\n## Environment\n\n");
    for (k, v) in env {
        s.push_str(&format!("- {k}: {v}\n"));
    }
}

/// Appends the report's `## Runs that did not complete` section, one line per run of `failed`
/// (what it was and why), when there is any.
pub fn incomplete(s: &mut String, failed: impl IntoIterator<Item = String>) {
    let mut failed = failed.into_iter().peekable();
    if failed.peek().is_some() {
        s.push_str("\n## Runs that did not complete\n\n");
        for f in failed {
            s.push_str(&format!("- {f}\n"));
        }
    }
}

/// Writes `results.csv` (`csv`), the figure `NAME.svg` (and `.png`) drawn by `plot`, and
/// `report.md` (`md`, with the figure linked when it was drawn) into `out`, and prints the
/// report. A figure that cannot be drawn is reported and left out; the rest is still written.
pub fn write_report(
    out: &std::path::Path,
    name: &str,
    csv: String,
    plot: impl FnOnce(&std::path::Path) -> Result<(), String>,
    mut md: String,
) -> Result<(), String> {
    let csv_path = out.join("results.csv");
    std::fs::write(&csv_path, csv).map_err(|e| format!("{}: {e}", csv_path.display()))?;
    let svg = out.join(format!("{name}.svg"));
    match plot(&svg) {
        Ok(()) => md.push_str(&format!("\n![{name}]({name}.png)\n")),
        Err(e) => eprintln!("memvisor bench: cannot draw {}: {e}", svg.display()),
    }
    let md_path = out.join("report.md");
    std::fs::write(&md_path, &md).map_err(|e| format!("{}: {e}", md_path.display()))?;
    println!("{md}");
    Ok(())
}
