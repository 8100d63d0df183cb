//! The outputs of `memvisor bench swapin`: `results.csv` (one row per run), `report.md` (the
//! time to bring memory back per size and mode, beside MemFlex's figures) and `swapin.svg`.

use crate::report::numbers::{fixed, median, or_dash, spread_in, MIB};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use super::experiment::SwapinPlan;
use super::experiment::{Mode, HEADROOM, LIMIT, POLL};
use super::run::SwapinRun;
use crate::report::figure::{color, Axis, Figure, Legend, Line, Panel};
use crate::report::table::Table;

/// The CSV header.
pub const CSV_HEADER: &str = "experiment,mode,size_bytes,rep,status,out_s,swapped_before_pages,back_s,back_pages,mib_s,ns_per_page,host_s,first_touch_ms,touch_after_ms,proactive_pages,faults_swap,swap_bytes_read,pool_hit_pages,polls,pager_timing,reason";

/// `results.csv`: one row per run.
pub fn csv(points: &[SwapinRun]) -> String {
    let mut t = Table::new(CSV_HEADER.split(','));
    for p in points {
        t.row(crate::cells![
            "swapin",
            p.mode,
            p.size,
            p.rep,
            if p.ok() { "ok" } else { "failed" },
            format!("{:.3}", p.out_s),
            p.swapped_before,
            format!("{:.4}", p.back_s),
            p.back_pages,
            fixed(p.mib_s(), 1),
            fixed(p.ns_per_page(), 0),
            fixed(p.host_s, 4),
            fixed(p.first_touch_ms, 0),
            fixed(p.touch_after_ms, 0),
            p.proactive_pages,
            p.faults_swap,
            p.swap_bytes_read,
            p.pool_hits,
            p.polls,
            p.pager_timing,
            p.error,
        ]);
    }
    t.csv()
}

/// The measured points of one size and mode.
fn cell<'a>(points: &'a [SwapinRun], size: u64, mode: &str) -> Vec<&'a SwapinRun> {
    points
        .iter()
        .filter(|p| p.size == size && p.mode == mode)
        .collect()
}

/// `report.md`.
pub fn markdown(setup: &SwapinPlan, points: &[SwapinRun], env: &[(String, String)]) -> String {
    let mut s = crate::families::figures::heading("swapin");
    let _ = writeln!(
        s,
        "MemFlex §4 (Table 1's totals, Fig. 7a): the time to bring back memory the pager swapped out. A guest of the size + {} MiB touches the size (`toucher`), is paused, gets a {} MiB limit, and once everything is out the limit is removed: proactive modes are timed on the host from that request until `GET /stats` (asked every {} ms) shows no page swapped; fault modes by the guest's own first sweep of the size after it resumes. {} repetition(s), modes interleaved.\n",
        HEADROOM >> 20,
        LIMIT >> 20,
        POLL.as_millis(),
        setup.reps
    );
    time_back(&mut s, setup, points);
    against_memflex(&mut s, setup, points);
    disk_share(&mut s, setup, points);
    let why = |p: &SwapinRun| format!("{} {} MiB rep {}: {}", p.mode, p.size >> 20, p.rep, p.error);
    crate::report::incomplete(&mut s, points.iter().filter(|p| !p.ok()).map(why));
    per_run(&mut s, points);
    pager_time(&mut s, points);
    modes(&mut s, setup);
    crate::report::environment(&mut s, env);
    s
}
/// The time to bring the memory back per size and mode.
fn time_back(s: &mut String, setup: &SwapinPlan, points: &[SwapinRun]) {
    s.push_str("## Time to bring the memory back\n\nMedian (min–max) over the runs that completed; MiB/s counts the pages that came back (proactive: every swapped page, a few MiB of the guest kit's own besides the size).\n\n\"Pager's own\": proactive modes, the time the pager's log gives for the swap-in (from the limit's removal reaching it to its last install); the harness's time adds the wait for the `GET /stats` answer that shows it done. \"Guest's next sweep\": the guest's first sweep of the size once it runs again (in the fault modes, that is the measurement).\n\n");
    let mut t = Table::new("size | mode | runs ok | seconds | MiB/s | pager's own s | pager's own MiB/s | ns per page | out (s) | guest's next sweep (ms)".split(" | "));
    for &size in &setup.sizes {
        for m in &setup.modes {
            let c = cell(points, size, m.name);
            let ok: Vec<&&SwapinRun> = c.iter().filter(|p| p.ok()).collect();
            let col = |f: &dyn Fn(&SwapinRun) -> Option<f64>, digits| {
                spread_in(ok.iter().filter_map(|p| f(p)).collect(), digits, "")
            };
            t.row(vec![
                format!("{} MiB", size >> 20),
                m.name.to_owned(),
                format!("{}/{}", ok.len(), c.len()),
                col(&|p| Some(p.back_s), 3),
                col(&SwapinRun::mib_s, 0),
                col(&SwapinRun::pager_s, 3),
                col(&SwapinRun::pager_mib_s, 0),
                col(&SwapinRun::ns_per_page, 0),
                col(&|p| Some(p.out_s), 2),
                col(&|p| p.touch_after_ms, 0),
            ]);
        }
    }
    s.push_str(&t.markdown());
}

/// The times beside MemFlex's figures.
fn against_memflex(s: &mut String, setup: &SwapinPlan, points: &[SwapinRun]) {
    s.push_str("\n## Against MemFlex\n\nMemFlex (Fig. 7a, Table 1; a 6 GB Redis VM, 2 GB swapped, HDD swap): proactive swap-in from its shared-memory pool brought back 1 GB in 1.8 s and 8 GB in 6.5 s, 2 GB in 3.46 s (6,045 ns per page); without the optimisation, 286,984.8 ns per page (PTE update 277,498 ns of it, 416 ns with the optimisation), and from the HDD 401,021.8 ns per page (212.96 s for 2 GB).\n\n");
    let paper = |size: u64, m: &Mode| -> &'static str {
        match (size, m.pool_pct, m.proactive) {
            (0x4000_0000, 100, true) => "1.8 s (w/ opt, Fig. 7a)",
            (0x8000_0000, 100, true) => "3.46 s, 6,045 ns/page (w/ opt, Table 1)",
            (0x8000_0000, 100, false) => "150.19 s, 286,984.8 ns/page (w/o opt, Table 1)",
            (0x8000_0000, 0, false) => "212.96 s, 401,021.8 ns/page (HDD, Table 1)",
            (_, 0, true) => "30 % under the HDD's (all on disk, Fig. 7b)",
            (_, 1..=99, true) => "less as the disk's share falls (Fig. 7b)",
            _ => "–",
        }
    };
    let mut t = Table::new("size | mode | seconds here | ns per page here | MemFlex".split(" | "));
    for &size in &setup.sizes {
        for m in &setup.modes {
            let ok: Vec<&SwapinRun> = cell(points, size, m.name)
                .into_iter()
                .filter(|p| p.ok())
                .collect();
            t.row(vec![
                format!("{} MiB", size >> 20),
                m.name.to_owned(),
                spread_in(ok.iter().map(|p| p.back_s).collect(), 3, ""),
                spread_in(ok.iter().filter_map(|p| p.ns_per_page()).collect(), 0, ""),
                paper(size, m).to_owned(),
            ]);
        }
    }
    s.push_str(&t.markdown());
}

/// MemFlex Fig. 7b: the proactive swap-in's time against the share of the swapped memory on
/// disk, beside fault-driven swap-in from the file (the paper's HDD), per size.
fn disk_share(s: &mut String, setup: &SwapinPlan, points: &[SwapinRun]) {
    let mut shares: Vec<&Mode> = setup
        .modes
        .iter()
        .copied()
        .filter(|m| m.proactive)
        .collect();
    if shares.len() < 2 {
        return;
    }
    shares.sort_by_key(|m| std::cmp::Reverse(m.pool_pct));
    s.push_str("\n## The pool and the disk mixed (Fig. 7b)\n\nProactive swap-in's time (s, median) by the share of the swapped memory in the swap file (the rest in the pool; the pool is sized for the share, and the share measured is the swap store's reads the pool did not serve), and fault-driven swap-in from the file (the paper's HDD swap-in). The paper: with everything on disk, still 30 % under the HDD's time; less as the disk's share falls.\n\n");
    let mut head = vec!["size".to_owned()];
    head.extend(
        shares
            .iter()
            .map(|m| format!("{} % on disk", 100 - m.pool_pct.min(100))),
    );
    head.push("disk-faults (HDD)".into());
    head.push("all on disk / HDD".into());
    let mut t = Table::new(head);
    // The median of `f` over the completed runs of one size and mode.
    let med_of = |size: u64, name: &str, f: &dyn Fn(&SwapinRun) -> Option<f64>| {
        let ok = cell(points, size, name).into_iter().filter(|p| p.ok());
        median(ok.filter_map(f).collect())
    };
    let med = |size: u64, name: &str| med_of(size, name, &|p| Some(p.back_s));
    // The share that was on disk: the swap store's reads less the pool's hits.
    let on_disk = |size: u64, name: &str| {
        med_of(size, name, &|p| {
            let read = p.swap_bytes_read >> 12;
            (read > 0).then(|| 100.0 * read.saturating_sub(p.pool_hits) as f64 / read as f64)
        })
    };
    for &size in &setup.sizes {
        let mut row = vec![format!("{} MiB: % on disk as measured", size >> 20)];
        row.extend(shares.iter().map(|m| or_dash(on_disk(size, m.name), 0)));
        row.extend(["".into(), "".into()]);
        t.row(row);
        let mut row = vec![format!("{} MiB: seconds", size >> 20)];
        row.extend(shares.iter().map(|m| or_dash(med(size, m.name), 3)));
        let hdd = med(size, "disk-faults");
        row.push(or_dash(hdd, 3));
        let all_disk = shares
            .last()
            .filter(|m| m.pool_pct == 0)
            .and_then(|m| med(size, m.name));
        row.push(match (all_disk, hdd) {
            (Some(a), Some(h)) if h > 0.0 => format!("{:.2}", a / h),
            _ => "–".into(),
        });
        t.row(row);
    }
    s.push_str(&t.markdown());
}

/// Every completed run's numbers.
fn per_run(s: &mut String, points: &[SwapinRun]) {
    let _ = writeln!(s, "\n## Per run\n");
    let mut t = Table::new("mode | size | rep | back (s) | MiB/s | host (s) | proactive pages | swap faults | read from the swap store (MiB) | of it from the pool (MiB) | polls".split(" | "));
    for p in points.iter().filter(|p| p.ok()) {
        t.row(vec![
            p.mode.to_owned(),
            format!("{} MiB", p.size >> 20),
            p.rep.to_string(),
            format!("{:.3}", p.back_s),
            fixed(p.mib_s(), 0),
            fixed(p.host_s, 3),
            p.proactive_pages.to_string(),
            p.faults_swap.to_string(),
            (p.swap_bytes_read >> 20).to_string(),
            (p.pool_hits >> 8).to_string(),
            p.polls.to_string(),
        ]);
    }
    s.push_str(&t.markdown());
}

/// Where the pager's proactive swap-ins spent their time, from each run's log.
fn pager_time(s: &mut String, points: &[SwapinRun]) {
    let timed: Vec<&SwapinRun> = points
        .iter()
        .filter(|p| !p.pager_timing.is_empty())
        .collect();
    if !timed.is_empty() {
        s.push_str("\n## Where the pager's proactive swap-ins spent their time\n\nFrom each run's log (`pager: proactive swap-in: ...`): the table scan and the checks are under the page lock, the ordering and the file's reads off it (the reads on a read-ahead thread, overlapping the installs), the `UFFDIO_COPY`s under it (256 pages per hold at most).\n\n");
        for p in timed {
            let (mode, mib, rep) = (p.mode, p.size >> 20, p.rep);
            let _ = writeln!(s, "- {mode} {mib} MiB rep {rep}: {}", p.pager_timing);
        }
    }
}

/// The modes run, and how every run is started.
fn modes(s: &mut String, setup: &SwapinPlan) {
    let _ = writeln!(s, "\n## Modes\n");
    for m in &setup.modes {
        let _ = writeln!(s, "- `{}`: {}", m.name, m.about);
    }
    let _ = writeln!(
        s,
        "- every run: `memvisor run --mem SIZE+{}M --sample-pages 0 --workload toucher --cmdline schedule=…`, the pager's swap file in the output directory's `work/` (on its disk)",
        HEADROOM >> 20
    );
}

/// `swapin.svg` and `.png` (MemFlex Fig. 7a): seconds to bring memory back against its size,
/// one line per mode (the median of the runs), every run as a small mark; log scale.
pub fn plot(path: &Path, modes: &[&'static Mode], points: &[SwapinRun]) -> Result<(), String> {
    if !points.iter().any(SwapinRun::ok) {
        return Err("no run completed".into());
    }
    let ok: Vec<&SwapinRun> = points.iter().filter(|p| p.ok()).collect();
    let gib = |p: &SwapinRun| p.size as f64 / 1024.0 / MIB;
    let xmax = ok.iter().map(|p| gib(p)).fold(0.0f64, f64::max) * 1.1;
    let ymax = ok.iter().map(|p| p.back_s).fold(0.0f64, f64::max) * 2.0;
    let ymin = ok.iter().map(|p| p.back_s).filter(|&v| v > 0.0);
    let ymin = ymin.fold(ymax, f64::min) / 2.0;
    let mut panel = Panel::new(
        "swapin: time to bring swapped memory back (MemFlex Fig. 7a; the mixed modes Fig. 7b)",
        "GiB brought back",
        "seconds (log scale)",
        Axis::linear(0.0, xmax),
        Axis::log(ymin.max(1e-3), ymax.max(1e-2)),
    );
    panel.legend = Legend::LowerRight;
    for (i, m) in modes.iter().enumerate() {
        let mine: Vec<&SwapinRun> = ok.iter().copied().filter(|p| p.mode == m.name).collect();
        let sizes: BTreeSet<u64> = mine.iter().map(|p| p.size).collect();
        let at = |size: u64| {
            mine.iter()
                .filter(move |p| p.size == size)
                .map(|p| p.back_s)
        };
        let line = sizes
            .into_iter()
            .filter_map(|sz| Some((sz as f64 / 1024.0 / MIB, median(at(sz).collect())?)));
        let mut l = Line::new(m.name, color(i), 3, line.collect()).marked();
        l.crosses = mine.iter().map(|p| (gib(p), p.back_s)).collect();
        panel.lines.push(l);
    }
    Figure::one((900, 620), panel).write(path)
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::families::swapin::experiment::mode;
    use crate::families::swapin::run::pager_seconds;

    fn pt(mode: &'static str, size: u64, back_s: f64, pages: u64) -> SwapinRun {
        SwapinRun {
            mode,
            size,
            rep: 1,
            back_s,
            back_pages: pages,
            ..SwapinRun::default()
        }
    }

    #[test]
    fn rates_medians_and_the_report() {
        // 1 GiB in 0.5 s: 2048 MiB/s, 1907 ns per page.
        let p = pt("pool-proactive", 1 << 30, 0.5, 262_144);
        assert!((p.mib_s().unwrap() - 2048.0).abs() < 1e-9);
        assert!((p.ns_per_page().unwrap() - 1907.3486).abs() < 1e-3);
        let failed = SwapinRun {
            error: "timed out".into(),
            ..p.clone()
        };
        assert_eq!(failed.mib_s(), None);

        let timed = SwapinRun {
            pager_timing: "262144 pages in 400.0 ms (2560 MiB/s): table scan 1.0 ms".into(),
            ..p.clone()
        };
        assert_eq!(timed.pager_s(), Some(0.4));
        assert!((timed.pager_mib_s().unwrap() - 2560.0).abs() < 1e-9);
        assert_eq!(pager_seconds("garbage"), None);
        assert_eq!(p.pager_s(), None);
        let points = vec![
            timed,
            pt("pool-proactive", 1 << 30, 0.7, 262_144),
            failed,
            pt("disk-faults", 1 << 30, 4.0, 262_144),
        ];
        let setup = SwapinPlan {
            sizes: vec![1 << 30],
            modes: vec![
                mode("pool-proactive").unwrap(),
                mode("disk-faults").unwrap(),
            ],
            reps: 3,
        };
        let md = markdown(&setup, &points, &[]);
        assert!(md.contains("| 1024 MiB | pool-proactive | 2/3 | 0.600 (0.500–0.700) | 1755 (1463–2048) | 0.400 | 2560 |"), "{md}");
        assert!(
            md.contains("| 1024 MiB | disk-faults | 1/1 | 4.000 | 256 | – | – |"),
            "{md}"
        );
        assert!(md.contains("1.8 s (w/ opt, Fig. 7a)"));
        assert!(md.contains("- pool-proactive 1024 MiB rep 1: timed out"));
        let csv = csv(&points);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 5);
        let cols = CSV_HEADER.split(',').count();
        assert!(lines.iter().all(|l| l.split(',').count() == cols), "{csv}");
        assert!(lines[1].starts_with("swapin,pool-proactive,1073741824,1,ok,"));
        assert!(lines[3].contains(",failed,") && lines[3].ends_with(",timed out"));
    }
}
