//! The outputs of `memvisor bench reclaimdelay`: `results.csv` (one row per amount taken),
//! `report.md` (HyperDealer2's Table 2 beside this run, the ratios against QEMU's balloon, the
//! several victims of Fig. 11 and the several vCPUs of Fig. 12) and `reclaimdelay.svg`.

use std::fmt::Write as _;
use std::path::Path;

use super::experiment::ReclaimPlan;
use super::experiment::{paper_ms, Method, State, BETWEEN, POLL, SETTLE};
use super::run::Reclaim;
use crate::harness::MeasureStatus;
use crate::report::figure::{color, Axis, Figure, Legend, Line, Panel};
use crate::report::numbers::{sig, spread, spread_text};
use crate::report::table::Table;

/// The CSV header.
pub const CSV_HEADER: &str = "experiment,method,state,victims,vcpus,pages,rep,status,ms,vmm_us,obtained_pages,changed_pages,polls,reason";

/// `results.csv`: one row per amount taken from a group of victims.
pub fn csv(points: &[Reclaim]) -> String {
    let mut t = Table::new(CSV_HEADER.split(','));
    for p in points {
        let measured = |v: String| if p.ok() { v } else { String::new() };
        t.row(crate::cells![
            "reclaimdelay",
            p.method,
            p.state,
            p.victims,
            p.vcpus,
            p.pages,
            p.rep,
            p.status.name(),
            measured(format!("{:.3}", p.ms)),
            p.vmm_us.map_or(String::new(), |u| u.to_string()),
            measured(p.obtained.to_string()),
            p.changed,
            p.polls,
            p.error,
        ]);
    }
    t.csv()
}

/// One victim of one vCPU: Table 2's group.
const ONE: (u32, u32) = (1, 1);

/// The points of `m` in `st` from `group` (victims, vCPUs each) for `pages`.
fn cell<'a>(
    points: &'a [Reclaim],
    m: &str,
    st: &str,
    group: (u32, u32),
    pages: u64,
) -> Vec<&'a Reclaim> {
    let of = |p: &&Reclaim| (p.victims, p.vcpus) == group;
    let this = |p: &&Reclaim| p.method == m && p.state == st && p.pages == pages;
    points.iter().filter(of).filter(this).collect()
}

/// Median (min–max) of the completed runs' milliseconds; "n/a" when the VMM had no release.
fn ms_cell(c: &[&Reclaim]) -> String {
    let ok: Vec<f64> = c.iter().filter(|p| p.ok()).map(|p| p.ms).collect();
    if ok.is_empty() && c.iter().any(|p| p.status == MeasureStatus::NotAvailable) {
        return "n/a".into();
    }
    spread_text(ok, &|v| sig(v))
}

fn median_ms(c: &[&Reclaim]) -> Option<f64> {
    spread(c.iter().filter(|p| p.ok()).map(|p| p.ms).collect()).map(|s| s.0)
}

/// `report.md`.
pub fn markdown(setup: &ReclaimPlan, points: &[Reclaim], env: &[(String, String)]) -> String {
    let mut s = crate::families::figures::heading("reclaimdelay");
    let z = &setup.sizes;
    let pages: Vec<String> = z.pages.iter().map(u64::to_string).collect();
    let (mem, read_mb, settle, reps) = (z.mem >> 20, z.read_mb, SETTLE.as_secs_f64(), setup.reps);
    let (pages, between, poll) = (pages.join(", "), BETWEEN.as_millis(), POLL.as_millis());
    let _ = writeln!(s, "HyperDealer2 §6.2 (Table 2, Figs. 11–12): the time the host takes to obtain pages from victim VMs, by the balloon and by instant release. Each victim: {mem} MiB of guest RAM, one pass over a {read_mb} MiB file (its page cache fills guest RAM with clean pages), then its state until stopped; {settle} s after the last victim's pass, the harness takes {pages} pages in turn ({between} ms apart), split over the victims; balloons polled every {poll} ms. {reps} repetition(s), the methods' order changed each time.\n");
    if points
        .iter()
        .any(|p| p.status == MeasureStatus::NotAvailable)
    {
        s.push_str("**Instant release is not available in this build** (the VMM answered `PUT /memory/release` with 501): the hd2 rows are \"n/a\", not failures.\n\n");
    }
    table2(&mut s, setup, points);
    ratios(&mut s, setup, points);
    victims(&mut s, setup, points);
    vcpus(&mut s, setup, points);
    release_detail(&mut s, points);
    let why = |p: &Reclaim| {
        let (m, st, n, c, pages, rep) = (p.method, p.state, p.victims, p.vcpus, p.pages, p.rep);
        format!(
            "{m} {st} {n} victim(s) of {c} vCPU(s) {pages} pages rep {rep}: {}",
            p.error
        )
    };
    let failed = points.iter().filter(|p| p.status == MeasureStatus::Failed);
    crate::report::incomplete(&mut s, failed.map(why));
    let _ = writeln!(s, "\n## Methods and states\n");
    for m in &setup.methods {
        let _ = writeln!(s, "- `{}`: {}", m.name, m.about);
    }
    for st in &setup.states {
        let _ = writeln!(
            s,
            "- `{}`: {} (`seqread then={}`)",
            st.name, st.about, st.then
        );
    }
    let _ = writeln!(
        s,
        "- every victim: `--cmdline \"{}\"` on a data disk of its own with `{}`",
        z.cmdline(setup.states[0]),
        z.files()
    );
    crate::report::environment(&mut s, env);
    s
}

/// One victim: milliseconds per amount, beside the paper's Table 2.
fn table2(s: &mut String, setup: &ReclaimPlan, points: &[Reclaim]) {
    s.push_str("## One victim, beside HyperDealer2's Table 2\n\nMilliseconds from the request to having every page: median (min–max) of the completed runs; the paper's figure after the slash (Table 2 gives HD2 one row for every state, and the balloon rows for an idle victim and for one whose pages are all dirty).\n\n");
    let pages = setup.sizes.pages.iter().map(|p| format!("{p} pages (ms)"));
    let head = ["method".into(), "state".into()].into_iter().chain(pages);
    let mut t = Table::new(head.chain(["runs ok".to_owned()]));
    for m in &setup.methods {
        for st in &setup.states {
            let mut row = vec![m.name.to_owned(), st.name.to_owned()];
            let (mut ok, mut all) = (0, 0);
            for &pages in &setup.sizes.pages {
                let c = cell(points, m.name, st.name, ONE, pages);
                ok += c.iter().filter(|p| p.ok()).count();
                all += c.len();
                let paper = paper_ms(m, st, pages).map_or("–".into(), |v| format!("{v}"));
                row.push(format!("{} / {paper}", ms_cell(&c)));
            }
            row.push(format!("{ok}/{all}"));
            t.row(row);
        }
    }
    s.push_str(&t.markdown());
}

/// The ratios of the medians in this run: against QEMU's balloon, and HD2 against memvisor's
/// balloon.
fn ratios(s: &mut String, setup: &ReclaimPlan, points: &[Reclaim]) {
    // Every memvisor method against QEMU's balloon, and HD2 against memvisor's balloon.
    let methods = || setup.methods.iter().copied();
    let against = |of: &str, pick: fn(&Method) -> bool| {
        let to = methods().find(|m| m.name == of);
        to.into_iter()
            .flat_map(move |to| methods().filter(move |m| pick(m)).map(move |m| (m, to)))
    };
    let pairs: Vec<(&Method, &Method)> = against("qemu-balloon", |m| !m.qemu)
        .chain(against("balloon", |m| m.release))
        .collect();
    if pairs.is_empty() {
        return;
    }
    s.push_str("\n## Ratios in this run (one victim)\n\nThe ratio of the medians above: below 1, the first method obtained the pages sooner. The machine is shared, so only large ratios say anything.\n\n");
    let pages = setup.sizes.pages.iter().map(|p| format!("{p} pages"));
    let mut t = Table::new(["ratio".into(), "state".into()].into_iter().chain(pages));
    for (a, b) in pairs {
        for st in &setup.states {
            let mut row = vec![format!("{} / {}", a.name, b.name), st.name.to_owned()];
            for &pages in &setup.sizes.pages {
                let x = median_ms(&cell(points, a.name, st.name, ONE, pages));
                let y = median_ms(&cell(points, b.name, st.name, ONE, pages));
                row.push(match (x, y) {
                    (Some(x), Some(y)) if y > 0.0 => format!("{:.3}", x / y),
                    _ => "–".into(),
                });
            }
            t.row(row);
        }
    }
    s.push_str(&t.markdown());
}

/// Several victims (Fig. 11): the same total from 1..N victims of one vCPU.
fn victims(s: &mut String, setup: &ReclaimPlan, points: &[Reclaim]) {
    let groups: Vec<(u32, u32)> = setup.sizes.victims.iter().map(|&n| (n, 1)).collect();
    let heads = groups
        .iter()
        .map(|g| format!("{} victim(s)", g.0))
        .collect();
    let about = "The same total taken from every victim at once (balloons in parallel, releases one after another), each victim with one vCPU: milliseconds, median (min–max). The paper's Fig. 11 takes 1,024 pages from 1 to 32 victims with 1 to 4 vCPUs each, on 24 cores.";
    sweep(
        s,
        "Several victims (Fig. 11)",
        about,
        (&groups, heads),
        setup,
        points,
    );
}

/// One victim of several vCPUs (Fig. 12).
fn vcpus(s: &mut String, setup: &ReclaimPlan, points: &[Reclaim]) {
    let groups: Vec<(u32, u32)> = setup.sizes.vcpus.iter().map(|&c| (1, c)).collect();
    let heads = groups.iter().map(|g| format!("{} vCPU(s)", g.1)).collect();
    let cores = crate::harness::readings::cpus();
    let about = format!("The same amounts taken from one victim with more vCPUs: in `busy-cpu` every vCPU computes, in `busy-dirty` one writes while the others compute (the paper's Fig. 12 (c)–(h): as many CPU-bound tasks as vCPUs, one doing I/O); in `idle` they are parked. Milliseconds, median (min–max). This machine has {cores} CPUs, so the busy vCPUs outnumber them from {} vCPUs on (the paper's 24 cores: from 25).", cores + 1);
    sweep(
        s,
        "One victim of several vCPUs (Fig. 12)",
        &about,
        (&groups, heads),
        setup,
        points,
    );
}

/// A table of milliseconds: a row per method, state and amount, a column per group.
fn sweep(
    s: &mut String,
    title: &str,
    about: &str,
    (groups, heads): (&[(u32, u32)], Vec<String>),
    setup: &ReclaimPlan,
    points: &[Reclaim],
) {
    if groups.len() < 2 {
        return;
    }
    let _ = write!(s, "\n## {title}\n\n{about}\n\n");
    let head = ["method".into(), "state".into(), "pages".into()];
    let mut t = Table::new(head.into_iter().chain(heads));
    for m in &setup.methods {
        for st in &setup.states {
            for &pages in &setup.sizes.pages {
                let mut row = vec![m.name.to_owned(), st.name.to_owned(), pages.to_string()];
                for &g in groups {
                    row.push(ms_cell(&cell(points, m.name, st.name, g, pages)));
                }
                t.row(row);
            }
        }
    }
    s.push_str(&t.markdown());
}

/// What the releases did: the VMM's own time, the pages obtained and kept.
fn release_detail(s: &mut String, points: &[Reclaim]) {
    let rel: Vec<&Reclaim> = points.iter().filter(|p| p.vmm_us.is_some()).collect();
    if rel.is_empty() {
        return;
    }
    s.push_str("\n## The releases\n\nPer run: the harness's wall time of the calls, the VMMs' own `micros` (summed over the victims), pages asked, released and found changed by the guest (so kept).\n\n");
    let mut t = Table::new(
        "state | victims | vCPUs | pages | rep | wall ms | VMM µs | released | changed"
            .split(" | "),
    );
    for p in rel {
        t.row(vec![
            p.state.to_owned(),
            p.victims.to_string(),
            p.vcpus.to_string(),
            p.pages.to_string(),
            p.rep.to_string(),
            format!("{:.3}", p.ms),
            p.vmm_us.unwrap_or(0).to_string(),
            p.obtained.to_string(),
            p.changed.to_string(),
        ]);
    }
    s.push_str(&t.markdown());
}

/// The line of `method` in `state` against `x`, medians of the completed runs; each point is
/// (x, group, pages).
type Xs = [(f64, (u32, u32), u64)];

fn line(points: &[Reclaim], m: &Method, st: &State, xs: &Xs) -> Vec<(f64, f64)> {
    xs.iter()
        .filter_map(|&(x, g, pages)| {
            median_ms(&cell(points, m.name, st.name, g, pages)).map(|y| (x, y.max(1e-3)))
        })
        .collect()
}

/// `reclaimdelay.svg` and `.png`: left, one victim, milliseconds against pages (Table 2);
/// middle, the largest amount against the number of victims (Fig. 11); right, against the
/// vCPUs of one victim (Fig. 12). One colour per method, one width per state; log scales.
pub fn plot(path: &Path, setup: &ReclaimPlan, points: &[Reclaim]) -> Result<(), String> {
    if !points.iter().any(Reclaim::ok) {
        return Err("no run completed".into());
    }
    let ok: Vec<f64> = points
        .iter()
        .filter(|p| p.ok())
        .map(|p| p.ms.max(1e-3))
        .collect();
    let ymax = ok.iter().copied().fold(0.0f64, f64::max) * 2.0;
    let ymin = ok.iter().copied().fold(ymax, f64::min) / 2.0;
    let y = Axis::log(ymin.max(1e-3), ymax.max(1e-2));
    let z = &setup.sizes;
    let (pages, victims, vcpus) = (&z.pages, &z.victims, &z.vcpus);
    let largest = pages.iter().copied().max().unwrap_or(1);
    let by_pages: Vec<_> = pages.iter().map(|&p| (p as f64, ONE, p)).collect();
    let by_victims: Vec<_> = victims
        .iter()
        .map(|&n| (f64::from(n), (n, 1), largest))
        .collect();
    let by_vcpus: Vec<_> = vcpus
        .iter()
        .map(|&c| (f64::from(c), (1, c), largest))
        .collect();
    let (pmin, pmax) = (
        pages.iter().copied().min().unwrap_or(1) as f64,
        largest as f64,
    );
    let most = |v: &[u32]| f64::from(v.iter().copied().max().unwrap_or(1));
    let specs = [
        (
            "one victim: ms to obtain N pages (HD2 Table 2)",
            "pages",
            Axis::log(pmin / 2.0, pmax * 2.0),
            &by_pages,
        ),
        (
            "the largest amount from several victims (Fig. 11)",
            "victims",
            Axis::linear(0.5, most(victims) + 0.5),
            &by_victims,
        ),
        (
            "the largest amount from one victim of several vCPUs (Fig. 12)",
            "vCPUs of the victim",
            Axis::linear(0.5, most(vcpus) + 0.5),
            &by_vcpus,
        ),
    ];
    let mut panels = Vec::new();
    for (title, xdesc, x, xs) in specs {
        let mut panel = Panel::new(title, xdesc, "milliseconds (log scale)", x, y);
        panel.legend = Legend::UpperLeft;
        for (mi, m) in setup.methods.iter().enumerate() {
            for (si, st) in setup.states.iter().enumerate() {
                let pts = line(points, m, st, xs);
                if pts.is_empty() {
                    continue;
                }
                let (width, alpha) = match si {
                    0 => (3, 1.0),
                    1 => (2, 0.7),
                    _ => (1, 0.45),
                };
                let name = format!("{} {}", m.name, st.name);
                let l = Line::new(name, color(mi + 1), width, pts).marked();
                panel.lines.push(Line { alpha, ..l });
            }
        }
        panels.push(panel);
    }
    Figure {
        size: (2000, 620),
        grid: (1, 3),
        panels,
    }
    .write(path)
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::args::Scale;
    use crate::families::reclaimdelay::experiment::{method, state, Sizes};

    fn pt(m: &'static str, st: &'static str, n: u32, pages: u64, ms: f64) -> Reclaim {
        Reclaim {
            method: m,
            state: st,
            victims: n,
            vcpus: 1,
            pages,
            rep: 1,
            ms,
            obtained: pages,
            ..Reclaim::default()
        }
    }

    #[test]
    fn table_ratios_and_csv() {
        let setup = ReclaimPlan {
            methods: vec![
                method("hd2").unwrap(),
                method("balloon").unwrap(),
                method("qemu-balloon").unwrap(),
            ],
            states: vec![state("idle").unwrap()],
            sizes: Sizes::of(Scale::Quick),
            reps: 2,
        };
        let na = Reclaim {
            status: MeasureStatus::NotAvailable,
            error: "the VMM has no instant release (501)".into(),
            ..pt("hd2", "idle", 1, 100, 0.0)
        };
        let points = vec![
            na.clone(),
            Reclaim { pages: 1_000, ..na },
            pt("balloon", "idle", 1, 100, 20.0),
            pt("balloon", "idle", 1, 100, 40.0),
            pt("qemu-balloon", "idle", 1, 100, 10.0),
            Reclaim {
                status: MeasureStatus::Failed,
                error: "timed out".into(),
                ..pt("qemu-balloon", "idle", 1, 1_000, 0.0)
            },
            pt("balloon", "idle", 2, 100, 8.0),
            Reclaim {
                vcpus: 4,
                ..pt("balloon", "idle", 1, 100, 9.0)
            },
        ];
        let md = markdown(&setup, &points, &[]);
        for want in [
            "not available in this build",
            "| hd2 | idle | n/a / 0.1 | n/a / 0.7 | 0/2 |",
            "| balloon | idle | 30.0 (20.0–40.0) / 9.4 | – / 12.6 | 2/2 |",
            "| balloon / qemu-balloon | idle | 3.000 | – |",
            "| hd2 / balloon | idle | – | – |",
            "| balloon | idle | 100 | 30.0 (20.0–40.0) | 8.00 |",
            "- qemu-balloon idle 1 victim(s) of 1 vCPU(s) 1000 pages rep 1: timed out",
            "| balloon | idle | 100 | 30.0 (20.0–40.0) | 9.00 |",
        ] {
            assert!(md.contains(want), "{want}: {md}");
        }
        let csv = csv(&points);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), points.len() + 1);
        assert!(
            lines[1].starts_with("reclaimdelay,hd2,idle,1,1,100,1,not-available,,,"),
            "{csv}"
        );
        assert!(
            lines[3].starts_with("reclaimdelay,balloon,idle,1,1,100,1,ok,20.000,,100,"),
            "{csv}"
        );
    }
}
