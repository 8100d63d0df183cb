//! `memvisor bench doublepaging`: Tesseract §6.1: a hog fills memory and goes cold while the old
//! space is swept hot, so the host swaps the hog out; then a generational collector's churn
//! (SPECjbb's part) pushes the guest to swap its coldest pages, the hog's, to its own swap disk:
//! each such write needs pages the host swapped (double paging). Pauses are the collections'.

use super::experiment::{Experiment, Measure, Step};
use crate::args::Scale;

/// `doublepaging`'s configurations: the host kernel's swap under QEMU, the pager without and
/// with Tesseract's indirections.
pub const CONFIGS: &[&str] = &[
    "qemu-hostswap",
    "memvisor-pager",
    "memvisor-tesseract",
    "memvisor-tesseract-flush",
    "memvisor-tesseract-defrag",
    "memvisor-tesseract-bsst",
    "memvisor-tesseract-victim",
];

/// `memvisor bench doublepaging` at `scale`.
pub fn experiment(scale: Scale) -> Experiment {
    let tiny = scale == Scale::Quick;
    // 12.5 % host overcommitment (the paper's 5–20 %); the heap and the hog together
    // are larger than the guest, so the guest swaps part of the hog.
    let (mem, limit, heap, young, gens, hog, hog_secs) = if tiny {
        (128, 112, 88, 16, 20, 56, 2)
    } else {
        (256, 224, 176, 32, 100, 112, 5)
    };
    Experiment {
        name: "doublepaging",
        about: "Tesseract §6.1's set-up at one point (12.5 % host overcommitment, one hog size): Table 1's double-paging count and Table 4's write rows; a guest swapping to its own disk the pages its host has already swapped (double paging)",
        mem: mem << 20,
        limit: Some(limit << 20),
        steps: vec![Step {
            workload: "gcchurn",
            cmdline: format!(
                "heap_mb={heap} gen_mb={young} gens={gens} live_pct=10 hog_mb={hog} hog_secs={hog_secs}"
            ),
            phases: vec![
                "hog".into(),
                "run".into(),
                "pause_max".into(),
                "pause_total".into(),
            ],
            guest_swap_mb: Some(heap + hog + 64),
            disk: None,
        }],
        configs: CONFIGS,
        reference: "qemu-hostswap",
        measure: Measure::Phases,
    }
}
