//! Tesseract's Tables 1 and 2 across a sweep of `doublepaging`'s run, with the paper's rows
//! beside ours: at each point, the guest's swap-disk writes by their holes, without Tesseract
//! (each hole a page swapped in only to be written out: double paging), and its reads split by
//! Tesseract's indirections, with the collector's run time standing for SPECjbb's score.

use std::fmt::Write as _;

use super::doublepaging::{BASELINE, SCORE_PHASE, TESSERACT};
use super::experiment::{Along, Sweep};
use super::report::{median_text, phase_ms, values, Point, SwapDisk};
use super::run::PhasesPlan;
use crate::families::phases::vm::result::RunStatus;
use crate::report::table::Table;

/// Tesseract Table 1 (§6.3): per host overcommitment (%), the guest's write I/Os issued, with
/// holes, with 1–20, 21–50 and more than 50, and the double-paging candidates (pages).
const PAPER_TABLE_1: &[[u64; 7]] = &[
    [0, 1_030, 0, 0, 0, 0, 0],
    [5, 981, 537, 343, 106, 88, 11_254],
    [10, 1_042, 661, 358, 132, 171, 19_381],
    [15, 1_292, 766, 377, 237, 152, 22_584],
    [20, 1_366, 981, 524, 177, 280, 32_547],
];

/// Tesseract Table 2 (§6.4), without defragmentation: per host overcommitment (%), the guest's
/// read I/Os issued, with holes, the holes (extra reads of the swap store), all reads issued
/// and SPECjbb's score.
const PAPER_TABLE_2: &[[u64; 6]] = &[
    [0, 5_152, 0, 0, 5_152, 7_010],
    [5, 5_230, 708, 1_675, 6_197, 6_801],
    [10, 5_206, 2_161, 5_820, 8_865, 6_271],
    [15, 4_517, 2_084, 6_990, 9_423, 6_048],
    [20, 5_698, 2_739, 11_854, 14_813, 2_841],
];

/// The final stats of `config`'s completed runs at `p`.
fn runs<'a>(p: &'a Point, config: &str) -> Vec<SwapDisk<'a>> {
    let ok = p.records.iter().filter(|r| r.config.name == config);
    let ok = ok.filter(|r| r.result.status == RunStatus::Ok);
    ok.filter_map(|r| SwapDisk::of(r.result.final_stats.as_ref()?))
        .collect()
}

/// Appends Tables 1 and 2 for the points of `sweep`, each for the configuration the paper's is
/// (the baseline's writes, Tesseract's reads) when the plan runs it.
pub fn tables(s: &mut String, plan: &PhasesPlan, sweep: &Sweep, points: &[Point]) {
    let point = |p: &Point| {
        let mut row = vec![sweep.x(p.at).to_string()];
        if sweep.along == Along::Limit {
            let mem = plan.exp.mem;
            row.push(format!(
                "{:.1}",
                100.0 * mem.saturating_sub(p.at) as f64 / mem as f64
            ));
        }
        row
    };
    let mut head = vec![sweep.label()];
    if sweep.along == Along::Limit {
        head.push("host overcommitment %".into());
    }
    let has = |c: &str| plan.configs.iter().any(|x| x.name == c);
    if has(BASELINE) {
        let _ = writeln!(s, "\n## Holes in the guest's swap-disk writes (Tesseract Table 1)\n\nWithout Tesseract (`{BASELINE}`): the guest's writes to its swap disk, those with holes (pages the host had swapped out, each swapped in only to be written: double paging), by how many, and all the holes (the paper's double-paging candidates); medians of the completed runs.\n");
        let cols = [
            "swap-disk writes",
            "with holes",
            "1–20 holes",
            "21–50 holes",
            "over 50 holes",
            "holes (pages)",
        ];
        let mut t = Table::new(head.iter().cloned().chain(cols.map(str::to_owned)));
        for p in points {
            let finals = runs(p, BASELINE);
            let med = |f: &dyn Fn(&SwapDisk) -> u64| {
                median_text(finals.iter().map(|x| f(x) as f64).collect(), 0)
            };
            let mut row = point(p);
            row.extend([
                med(&|x| x.disk.writes),
                med(&|x| {
                    x.disk.writes_holes_1_20
                        + x.disk.writes_holes_21_50
                        + x.disk.writes_holes_over_50
                }),
                med(&|x| x.disk.writes_holes_1_20),
                med(&|x| x.disk.writes_holes_21_50),
                med(&|x| x.disk.writes_holes_over_50),
                med(&|x| x.disk.write_holes),
            ]);
            t.row(row);
        }
        s.push_str(&t.markdown());
        let note = "SPECjbb in a 700 MB guest with a 60 MB memhog";
        paper_table(s, note, &cols, PAPER_TABLE_1.iter().map(|r| &r[..]));
    }
    if has(TESSERACT) {
        let _ = writeln!(s, "\n## Holes in the guest's swap-disk reads (Tesseract Table 2)\n\nWith Tesseract and no defragmentation (`{TESSERACT}`): the guest's reads of its swap disk, those with holes (split between the image and the swap file), the holes (reads of the swap file, one per run of its blocks), all reads issued, and the collector's `{SCORE_PHASE}` phase in ms, which stands for SPECjbb's score (lower is better where the score is higher); medians of the completed runs.\n");
        let cols = [
            "swap-disk reads",
            "with holes",
            "holes (reads of the swap file)",
            "all reads issued",
        ];
        let score = format!("`{SCORE_PHASE}` ms");
        let mut t = Table::new(
            head.iter()
                .cloned()
                .chain(cols.map(str::to_owned))
                .chain([score]),
        );
        for p in points {
            let finals = runs(p, TESSERACT);
            let store = |x: &SwapDisk| x.ind(|i| i.store_reads).unwrap_or(0.0);
            let mut row = point(p);
            let med = |f: &dyn Fn(&SwapDisk) -> f64| median_text(finals.iter().map(f).collect(), 0);
            row.extend([
                med(&|x| x.disk.reads as f64),
                med(&|x| x.disk.split_reads as f64),
                med(&store),
                med(&|x| x.disk.reads as f64 + store(x)),
                median_text(values(&p.records, 0, TESSERACT, SCORE_PHASE, phase_ms), 0),
            ]);
            t.row(row);
        }
        s.push_str(&t.markdown());
        let note = "the score is SPECjbb's, higher is better";
        let cols: Vec<&str> = cols.into_iter().chain(["score"]).collect();
        paper_table(s, note, &cols, PAPER_TABLE_2.iter().map(|r| &r[..]));
    }
}

/// The paper's rows of one table, under ours: by host overcommitment (%), then `cols`.
fn paper_table<'a>(
    s: &mut String,
    note: &str,
    cols: &[&str],
    rows: impl Iterator<Item = &'a [u64]>,
) {
    let _ = writeln!(s, "\nThe paper's ({note}):\n");
    let head = ["host overcommitment %"]
        .into_iter()
        .chain(cols.iter().copied());
    let mut t = Table::new(head.map(str::to_owned));
    for r in rows {
        t.row(r.iter().map(u64::to_string).collect());
    }
    s.push_str(&t.markdown());
}
