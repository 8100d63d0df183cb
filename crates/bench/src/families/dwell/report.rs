//! The outputs of `memvisor bench dwell`: `results.csv` (one row per run), `report.md` (the
//! distribution of dwell times and its median per victim policy) and `dwell.svg`.

use std::fmt::Write as _;
use std::path::Path;

use super::experiment::{median_ms, DwellPlan, Sizes};
use super::run::DwellRun;
use crate::harness::MeasureStatus;
use crate::report::figure::{color, Axis, Figure, Legend, Line, Panel};
use crate::report::table::Table;

/// The CSV header.
pub const CSV_HEADER: &str = "experiment,policy,rep,status,pass_ms,release_calls,release_available,released_pages,released_refaults,came_back,median_dwell_ms,dwell_ms_log2,reason";

fn joined<T: ToString>(v: &[T]) -> String {
    v.iter().map(T::to_string).collect::<Vec<_>>().join(";")
}

/// The guest's passes, ms, `;`-separated.
fn pass_ms(p: &DwellRun) -> String {
    let ms: Vec<String> = p.pass_ms.iter().map(|m| format!("{m:.0}")).collect();
    ms.join(";")
}

/// `results.csv`: one row per run.
pub fn csv(points: &[DwellRun]) -> String {
    let mut t = Table::new(CSV_HEADER.split(','));
    for p in points {
        t.row(crate::cells![
            "dwell",
            p.policy,
            p.rep,
            p.status.name(),
            pass_ms(p),
            p.calls,
            u8::from(!p.no_release),
            p.released_pages,
            p.refaults,
            p.hist.iter().sum::<u64>(),
            crate::report::numbers::fixed(median_ms(&p.hist), 1),
            joined(&p.hist),
            p.error,
        ]);
    }
    t.csv()
}

/// The histograms of a policy's completed runs, added up.
fn merged(points: &[DwellRun], policy: &str) -> Vec<u64> {
    let mut h: Vec<u64> = Vec::new();
    for p in points.iter().filter(|p| p.ok() && p.policy == policy) {
        if h.len() < p.hist.len() {
            h.resize(p.hist.len(), 0);
        }
        for (a, b) in h.iter_mut().zip(&p.hist) {
            *a += b;
        }
    }
    h
}

/// The last bucket any of `hs` has a page in.
fn last_bucket<'a>(hs: impl Iterator<Item = &'a Vec<u64>>) -> Option<usize> {
    hs.filter_map(|h| h.iter().rposition(|&c| c > 0)).max()
}

fn bucket(i: usize) -> String {
    let ms = |j: usize| -> String {
        let v = 1u64 << j.min(62);
        if v >= 1000 {
            format!("{:.1} s", v as f64 / 1e3)
        } else {
            format!("{v} ms")
        }
    };
    if i == 0 {
        "< 2 ms".into()
    } else {
        format!("{}–{}", ms(i), ms(i + 1))
    }
}

/// `report.md`.
pub fn markdown(setup: &DwellPlan, points: &[DwellRun], env: &[(String, String)]) -> String {
    let z = &setup.sizes;
    let mut s = crate::families::figures::heading("dwell");
    let Sizes {
        files,
        file_mb,
        release_pages,
        ..
    } = z;
    let (mem, limit, reps) = (z.mem >> 20, z.limit >> 20, setup.reps);
    let (start, every) = (z.start_after.as_millis(), z.every.as_millis());
    let _ = writeln!(s, "HyperDealer2 §6.4 (Fig. 14): how long pages the host released stay out before the guest needs them again, per victim policy. One VM of {mem} MiB (limit {limit} MiB: only releases take pages out) with the Swap Mapper reads {files} files of {file_mb} MiB once, one after another (`seqread`, each file a sequential stream, together more than its memory, so its page cache turns over); from {start} ms after it began reading, the harness releases {release_pages} pages every {every} ms (`PUT /memory/release`) and puts the limit back. A released page comes back when the guest reads it or reuses its frame for another block. The dwell times are the pager's (`patterns.dwell_ms_log2`: released pages that came back, in power-of-two buckets of ms); pages still out when the guest finished are counted apart. {reps} repetition(s).\n");
    if points.iter().any(|p| p.no_release) {
        s.push_str("**Instant release is not available in this build** (the VMM answered 501): no page was released, so there are no dwell times.\n\n");
    } else if points.iter().any(|p| p.ok() && p.hist.is_empty()) {
        s.push_str("**This build does not report dwell times** (`patterns.dwell_ms_log2` empty or absent).\n\n");
    }
    let _ = writeln!(s, "## Per policy\n");
    let mut t = Table::new("policy | runs ok | released pages | came back | still out at the end | median dwell of those back (bucket middle) | guest's read, ms (first run)".split(" | "));
    for policy in &setup.policies {
        let all: Vec<&DwellRun> = points.iter().filter(|p| &p.policy == policy).collect();
        let ok: Vec<&&DwellRun> = all.iter().filter(|p| p.ok()).collect();
        let na = all.iter().any(|p| p.status == MeasureStatus::NotAvailable);
        let na = if na { " (not available)" } else { "" };
        let h = merged(points, policy);
        let released: u64 = ok.iter().map(|p| p.released_pages).sum();
        let back: u64 = h.iter().sum();
        let passes = ok.first().map(|p| pass_ms(p)).unwrap_or_default();
        t.row(vec![
            policy.clone(),
            format!("{}/{}{na}", ok.len(), all.len()),
            released.to_string(),
            back.to_string(),
            released.saturating_sub(back).to_string(),
            median_ms(&h).map_or("–".into(), |m| format!("{m:.0} ms")),
            passes.replace(';', ", "),
        ]);
    }
    s.push_str(&t.markdown());
    // Up to the longest dwell any policy saw (the pager's histogram has room for hours).
    let hs: Vec<Vec<u64>> = setup.policies.iter().map(|p| merged(points, p)).collect();
    let longest = last_bucket(hs.iter()).map_or(0, |i| i + 1);
    if longest > 0 {
        s.push_str(
            "\n## Distribution\n\nShare of the released pages that came back, by dwell time.\n\n",
        );
        let mut t =
            Table::new(std::iter::once("dwell").chain(setup.policies.iter().map(String::as_str)));
        for i in 0..longest {
            let share = |h: &Vec<u64>| match h.iter().sum::<u64>() {
                0 => "–".into(),
                total => format!(
                    "{:.1} %",
                    h.get(i).map_or(0.0, |&c| c as f64 * 100.0 / total as f64)
                ),
            };
            t.row(
                std::iter::once(bucket(i))
                    .chain(hs.iter().map(share))
                    .collect(),
            );
        }
        s.push_str(&t.markdown());
    }
    let why = |p: &DwellRun| {
        let (policy, rep, status, error) = (&p.policy, p.rep, p.status.name(), &p.error);
        format!("{policy} rep {rep}: {status}: {error}")
    };
    crate::report::incomplete(&mut s, points.iter().filter(|p| !p.ok()).map(why));
    crate::report::environment(&mut s, env);
    s
}

/// `dwell.svg` and `.png` (Fig. 14): the share of released pages per dwell bucket, one line
/// per policy. Without any dwell time, a figure that says so.
pub fn plot(path: &Path, setup: &DwellPlan, points: &[DwellRun]) -> Result<(), String> {
    let hs: Vec<(usize, Vec<u64>)> = setup
        .policies
        .iter()
        .enumerate()
        .map(|(i, p)| (i, merged(points, p)))
        .filter(|(_, h)| h.iter().sum::<u64>() > 0)
        .collect();
    let n = last_bucket(hs.iter().map(|x| &x.1)).map_or(2, |i| i + 2);
    let mut panel = Panel::new(
        "dwell: released pages by time out before coming back (HD2 Fig. 14)",
        "dwell time, log2 of ms (bucket i: 2^i to 2^(i+1) ms)",
        "% of the pages that came back",
        Axis::linear(0.0, n as f64),
        Axis::linear(0.0, 100.0),
    );
    panel.legend = Legend::UpperRight;
    if hs.is_empty() {
        panel.note =
            Some("no dwell times: the VMM released nothing or does not report them".into());
    }
    for (i, h) in &hs {
        let total: u64 = h.iter().sum();
        let share = |(b, &c): (usize, &u64)| (b as f64 + 0.5, c as f64 * 100.0 / total as f64);
        let pts = h.iter().take(n).enumerate().map(share).collect();
        panel
            .lines
            .push(Line::new(setup.policies[*i].clone(), color(i + 1), 3, pts).marked());
    }
    Figure::one((900, 560), panel).write(path)
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::args::Scale;
    use crate::families::dwell::experiment::Sizes;

    #[test]
    fn medians_distribution_and_csv() {
        let setup = DwellPlan {
            policies: vec!["clock".into(), "hd2".into()],
            sizes: Sizes::of(Scale::Quick),
            reps: 2,
        };
        let pt = |policy: &str, rep, hist: Vec<u64>| DwellRun {
            policy: policy.into(),
            rep,
            pass_ms: vec![900.0, 400.0],
            calls: 10,
            released_pages: 2560,
            refaults: hist.iter().sum(),
            hist,
            ..DwellRun::default()
        };
        let points = vec![
            pt("clock", 1, vec![2, 2, 0, 0]),
            pt("clock", 2, vec![0, 0, 0, 4, 0, 0]),
            DwellRun {
                status: MeasureStatus::NotAvailable,
                error: "memvisor run refused --victims hd2".into(),
                ..pt("hd2", 1, vec![])
            },
        ];
        let md = markdown(&setup, &points, &[]);
        // 8 pages: 2 below 2 ms, 2 in 2–4 ms, 4 in 8–16 ms; the 4th and 5th are in 2–4 ms.
        for want in [
            "| clock | 2/2 | 5120 | 8 | 5112 | 3 ms | 900, 400 |",
            "| hd2 | 0/1 (not available) | 0 | 0 | 0 | – |",
            "| 8 ms–16 ms | 50.0 % | – |",
        ] {
            assert!(md.contains(want), "{want}: {md}");
        }
        assert!(
            !md.contains("| 16 ms–32 ms |"),
            "empty buckets at the end left out: {md}"
        );
        let csv = csv(&points);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(
            lines[1].starts_with("dwell,clock,1,ok,900;400,10,1,2560,4,4,1.0,2;2;0;0,"),
            "{csv}"
        );
        assert!(lines[3].starts_with("dwell,hd2,1,not-available,"), "{csv}");
    }
}
