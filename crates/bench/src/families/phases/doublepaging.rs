//! `memvisor bench doublepaging`: Tesseract §6.1: a hog fills memory and goes cold while the old
//! space is swept hot, so the host swaps the hog out; then a generational collector's churn
//! (SPECjbb's part) pushes the guest to swap its coldest pages, the hog's, to its own swap disk:
//! each such write needs pages the host swapped (double paging). Pauses are the collections'.

use super::experiment::{Experiment, Measure, Step, Sweep};
use crate::args::Scale;

/// The paper's baseline: the pager without Tesseract, so a guest write of a swapped page swaps
/// it in (double paging). Tables 1's holes are counted on it.
pub const BASELINE: &str = "memvisor-pager";
/// Tesseract without defragmentation: Table 2's split reads are counted on it.
pub const TESSERACT: &str = "memvisor-tesseract";
/// The collector's phase whose time stands for SPECjbb's score.
pub const SCORE_PHASE: &str = "run";

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

/// `doublepaging`'s sizes in MiB at `scale`: guest RAM, limit, the collector's heap and young
/// generation, its generations, the hog and how long it cools (s). 12.5 % host overcommitment
/// (the paper's 5–20 %); the heap and the hog together are larger than the guest, so the guest
/// swaps part of the hog.
fn sizes(scale: Scale) -> (u64, u64, u64, u64, u64, u64, u64) {
    match scale {
        Scale::Quick => (128, 112, 88, 16, 20, 56, 2),
        Scale::Full => (256, 224, 176, 32, 100, 112, 5),
    }
}

/// The guest swap disk that holds the heap and a hog of `hog` MiB, with room to spare.
fn guest_swap_mb(heap: u64, hog: u64) -> u64 {
    heap + hog + 64
}

/// `memvisor bench doublepaging` at `scale`.
pub fn experiment(scale: Scale) -> Experiment {
    let (mem, limit, heap, young, gens, hog, hog_secs) = sizes(scale);
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
            guest_swap_mb: Some(guest_swap_mb(heap, hog)),
            disk: None,
        }],
        configs: CONFIGS,
        reference: "qemu-hostswap",
        measure: Measure::Phases,
    }
}

/// `overcommit`'s configurations: the pager without Tesseract and with it, with each
/// defragmentation (Tesseract's Figs. 14 and 16 compare them across overcommitment), and the host
/// kernel's swap under QEMU.
pub const OVERCOMMIT_CONFIGS: &[&str] = &[
    "qemu-hostswap",
    "memvisor-pager",
    "memvisor-tesseract",
    "memvisor-tesseract-defrag",
    "memvisor-tesseract-bsst",
];

/// `memvisor bench overcommit` at `scale`: `doublepaging`'s run with the host's overcommitment
/// swept (Tesseract §6.2.2: 0, 5, 10, 15 and 20 %), the share of guest RAM the host does not
/// give it. The sweep's result is the longest collector pause (Figs. 12 and 16); each level's own
/// report has the rest (the run's time, the double paging and the reads split, Tables 1 and 2).
pub fn overcommit(scale: Scale) -> Experiment {
    let at = experiment(scale);
    let mem = at.mem >> 20;
    let pcts: &[u64] = match scale {
        Scale::Full => &[0, 5, 10, 15, 20],
        Scale::Quick => &[0, 20],
    };
    let limits: Vec<u64> = pcts.iter().map(|p| mem * (100 - p) / 100).collect();
    Experiment {
        name: "overcommit",
        about: "Tesseract §6.2.2 / Figs. 12, 14 and 16, Tables 1 and 2 per level: doublepaging's run at host overcommitment 0, 5, 10, 15 and 20 %, without and with Tesseract and its defragmentations; the longest collector pause against the memory the host gives",
        limit: None,
        configs: OVERCOMMIT_CONFIGS,
        reference: "memvisor-pager",
        measure: Sweep::in_mib(&limits, "pause_max"),
        ..at
    }
}

/// `pressure`'s configurations: the paper's two series, without Tesseract and with it.
pub const PRESSURE_CONFIGS: &[&str] = &[BASELINE, TESSERACT];

/// `memvisor bench pressure` at `scale`: `doublepaging`'s run at 10 % host overcommitment with
/// the hog's size swept (Tesseract §6.2.1, Figs. 10 and 11: guest memory pressure). The smallest
/// hog leaves the collector's heap room in guest RAM; the largest makes the guest swap most of
/// itself. The result is the longest pause (Fig. 11), beside the collector's run time and its
/// pauses in all (Fig. 10's score and total pauses).
pub fn pressure(scale: Scale) -> Experiment {
    let at = experiment(scale);
    let mem = at.mem >> 20;
    let hogs: &[u64] = match scale {
        Scale::Full => &[16, 48, 80, 112, 144],
        Scale::Quick => &[8, 56],
    };
    let mut steps = at.steps.clone();
    let (_, _, heap, ..) = sizes(scale);
    let largest = hogs.iter().max().copied().unwrap_or(0);
    steps[0].guest_swap_mb = Some(guest_swap_mb(heap, largest));
    Experiment {
        name: "pressure",
        about: "Tesseract §6.2.1 / Figs. 10 and 11: doublepaging's run at 10 % host overcommitment with the hog in the guest swept from small to larger than the room beside the heap, without and with Tesseract; the longest collector pause, the collector's run time and its pauses in all against the hog's size",
        limit: Some((mem * 90 / 100) << 20),
        steps,
        configs: PRESSURE_CONFIGS,
        reference: BASELINE,
        measure: Sweep::of_arg("hog_mb", hogs, "pause_max", &["run", "pause_total"]),
        ..at
    }
}
