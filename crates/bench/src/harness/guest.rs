//! What a VMM tells the harness: the guest's `RESULT` lines and `key=value` words on its
//! console, and the stats
//! `memvisor run --stats-json` writes when its VM ends.

use std::path::Path;

use memvisor_api::VmStats;

/// `(phase, ms, ok)` of a guest `RESULT` line.
pub fn parse_result(line: &str) -> Option<(String, Option<f64>, Option<String>)> {
    let rest = line.trim().strip_prefix("RESULT ")?;
    let ok = word(rest, "ok").map(str::to_owned);
    Some((word(rest, "phase")?.to_owned(), value(rest, "ms"), ok))
}

/// The value of `key=` among the words of a console line.
pub fn word<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// The value of `key=` among the words of a console line, parsed.
pub fn value<T: std::str::FromStr>(line: &str, key: &str) -> Option<T> {
    word(line, key)?.parse().ok()
}

/// The stats `memvisor run --stats-json PATH` wrote when its VM ended.
pub fn read_final_stats(path: &Path) -> Option<VmStats> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text)
        .map_err(|e| tracing::warn!("{} is not memvisor's stats: {e}", path.display()))
        .ok()
}
