//! What KSM merged of this VMM's memory (`--sharing host`, docs/sharing.md): the kernel's
//! per-process counts from `/proc/self/ksm_stat`, and the host pages that saves.

use memvisor_api::SharingStats;

/// This process's KSM counts; `None` when the kernel gives none (no KSM, or a kernel before
/// Linux 6.1's `ksm_stat`). `attached`: the pager has taken RAM over, so its census counts
/// pages KSM replaced with the zero page as resident (before, the VMM's page map scan already
/// leaves zero-page mappings out, and they must not be subtracted twice).
pub(crate) fn stats(attached: bool) -> Option<SharingStats> {
    let text = std::fs::read_to_string("/proc/self/ksm_stat").ok()?;
    let field = |name: &str| -> Option<i64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
    };
    let count = |name: &str| field(name).and_then(|v| u64::try_from(v).ok()).unwrap_or(0);
    let merging = count("ksm_merging_pages");
    let zero = count("ksm_zero_pages");
    // Host-wide, a merged page kept once for `r` mappers saves `r - 1` pages: over all of them
    // the saved fraction of mappers is pages_sharing / (pages_sharing + pages_shared).
    let shared = ksm_knob("pages_shared").unwrap_or(0);
    let sharing = ksm_knob("pages_sharing").unwrap_or(0);
    let saved_merged = if shared + sharing == 0 {
        0
    } else {
        u64::try_from(u128::from(merging) * u128::from(sharing) / u128::from(shared + sharing))
            .unwrap_or(merging)
    };
    Some(SharingStats {
        merging_pages: merging,
        zero_pages: zero,
        saved_pages: saved_merged + if attached { zero } else { 0 },
        profit_bytes: field("ksm_process_profit").unwrap_or(0),
    })
}

/// A number from `/sys/kernel/mm/ksm/`.
fn ksm_knob(name: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/sys/kernel/mm/ksm/{name}"))
        .ok()?
        .trim()
        .parse()
        .ok()
}
