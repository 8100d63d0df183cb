//! What a VMM tells the harness: the guest's `RESULT` lines on its console, and the stats
//! `memvisor run --stats-json` writes when its VM ends.

use std::path::Path;

use memvisor_api::VmStats;

/// `(phase, ms)` of a guest `RESULT` line.
pub fn parse_result(line: &str) -> Option<(String, Option<f64>, Option<String>)> {
    let rest = line.trim().strip_prefix("RESULT ")?;
    let (mut phase, mut ms, mut ok) = (None, None, None);
    for w in rest.split_whitespace() {
        match w.split_once('=') {
            Some(("phase", p)) => phase = Some(p.to_owned()),
            Some(("ms", m)) => ms = m.parse().ok(),
            Some(("ok", o)) => ok = Some(o.to_owned()),
            _ => {}
        }
    }
    Some((phase?, ms, ok))
}

/// The stats `memvisor run --stats-json PATH` wrote when its VM ended.
pub fn read_final_stats(path: &Path) -> Option<VmStats> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text)
        .map_err(|e| tracing::warn!("{} is not memvisor's stats: {e}", path.display()))
        .ok()
}
