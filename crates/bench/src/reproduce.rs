//! `memvisor bench reproduce PAPER [--scale quick|full]`: runs every experiment of one paper's
//! set ([`PaperSet::experiments`], each with the flags `figures` gives it at that scale) into a
//! directory of its own under `--out`, then sets each value the paper publishes beside ours
//! (`published`, read from the experiments' reports) with a one-line verdict, in one
//! `report.md` and `claims.csv`.

use std::fmt::Write as _;
use std::path::Path;

use clap::Parser;

use crate::args::{BenchArgs, Outcome, Scale};
use crate::families::figures::{PaperSet, Reproduces, PAPERS};
use crate::harness::{out_dir, readings};
use crate::report::claims::{Judged, Paper};
use crate::report::figure::{color, Axis, Figure, Legend, Line, Panel};
use crate::report::numbers::sig;
use crate::report::table::{text, Table};

/// `memvisor bench`'s flags, parsed from one experiment's words.
#[derive(Parser)]
struct Words {
    #[command(flatten)]
    args: BenchArgs,
}

/// One experiment's run within the set: its command as a user would type it, and its end.
struct Ran {
    experiment: &'static Reproduces,
    command: String,
    /// `None` when nothing was run (`--judge`): its report is an earlier run's.
    outcome: Option<Outcome>,
}

fn scale_name(scale: Scale) -> &'static str {
    match scale {
        Scale::Quick => "quick",
        Scale::Full => "full",
    }
}

/// The flags `e` runs with at `scale`, beside `--scale` and `--out`.
pub fn flags(e: &Reproduces, scale: Scale) -> &'static str {
    match scale {
        Scale::Quick => e.quick,
        Scale::Full => e.full,
    }
}

/// The arguments of `e`'s run in the set: its own flags at `given.scale`, its output under
/// `out`, and `reproduce`'s own timeout and host swap settings.
fn args_of(e: &Reproduces, given: &BenchArgs, out: &Path) -> Result<BenchArgs, String> {
    let words = ["bench", e.name]
        .into_iter()
        .chain(flags(e, given.scale).split_whitespace());
    let mut args = Words::try_parse_from(words)
        .map_err(|err| format!("{}'s flags: {err}", e.name))?
        .args;
    args.scale = given.scale;
    args.out = Some(out.join(e.name));
    args.timeout = given.timeout;
    args.swap_file.clone_from(&given.swap_file);
    args.swap_size = given.swap_size;
    args.swappiness = given.swappiness;
    Ok(args)
}

/// The flags of one experiment that `reproduce` refuses: each experiment's are the set's.
fn experiment_flags(a: &BenchArgs) -> Option<&'static str> {
    let given = [
        ("--reps", a.reps.is_some()),
        ("--configs", !a.configs.is_empty()),
        ("--reference", a.reference.is_some()),
        ("--vms", !a.vms.is_empty()),
        ("--scenario", !a.scenario.is_empty()),
        ("--budget", !a.budget.is_empty()),
        ("--host-set", !a.host_set.is_empty()),
        ("--sizes", !a.sizes.is_empty()),
        ("--ws", !a.ws.is_empty()),
        ("--vcpus", !a.vcpus.is_empty()),
    ];
    given.into_iter().find(|g| g.1).map(|g| g.0)
}

fn keys() -> String {
    let keys: Vec<&str> = PAPERS.iter().map(|p| p.key).collect();
    keys.join(", ")
}

/// `memvisor bench reproduce PAPER`.
pub fn run(args: &BenchArgs) -> Outcome {
    let bad = |m: String| {
        eprintln!("memvisor bench reproduce: {m}");
        Outcome::BadInput
    };
    let Some(key) = &args.paper else {
        return bad(format!("which paper? give one of {}", keys()));
    };
    let Some(paper) = PaperSet::find(key) else {
        return bad(format!("unknown paper '{key}'; give one of {}", keys()));
    };
    if let Some(flag) = experiment_flags(args) {
        return bad(format!("{flag} is a flag of one experiment; reproduce runs each with the flags of its paper's set (docs/reproduction.md), or run the experiment itself"));
    }
    if args.timeout == 0 {
        return bad("--timeout 0: give seconds, at least 1".into());
    }
    let out = match out_dir(args.out.as_deref(), &format!("reproduce-{key}")) {
        Ok(o) => o,
        Err(m) => return bad(m),
    };
    let mut planned = Vec::new();
    for e in paper.experiments() {
        match args_of(e, args, &out) {
            Ok(a) => planned.push((e, a)),
            Err(m) => return bad(m),
        }
    }
    if args.judge
        && !paper
            .experiments()
            .any(|e| out.join(e.name).join("report.md").exists())
    {
        return bad(format!(
            "--judge: no report of {key}'s experiments under {}; give the --out of an earlier run of the set",
            out.display()
        ));
    }
    let started = std::time::SystemTime::now();
    let mut ran = Vec::new();
    let n = planned.len();
    for (i, (e, a)) in planned.into_iter().enumerate() {
        let own = flags(e, args.scale);
        let command = format!(
            "memvisor bench {} {own}{}--scale {} --out {}",
            e.name,
            if own.is_empty() { "" } else { " " },
            scale_name(args.scale),
            a.out
                .as_ref()
                .map_or_else(String::new, |o| o.display().to_string())
        );
        if args.judge {
            ran.push(Ran {
                experiment: e,
                command,
                outcome: None,
            });
            continue;
        }
        eprintln!("memvisor bench reproduce {key}: {}/{n}: {command}", i + 1);
        let outcome = crate::families::run(&a);
        ran.push(Ran {
            experiment: e,
            command,
            outcome: Some(outcome),
        });
        if outcome == Outcome::Interrupted {
            break;
        }
    }
    let judged = judged(paper, &out);
    // Judged again, beside the run's own report and figure, which keep its commit and date.
    let (report, claims, figure) = match args.judge {
        true => ("judged.md", "judged.csv", format!("judged-{key}")),
        false => ("report.md", "claims.csv", format!("reproduce-{key}")),
    };
    let svg = out.join(format!("{figure}.svg"));
    let drawn = plot(paper, &judged, &svg)
        .map_err(|e| {
            eprintln!(
                "memvisor bench reproduce: cannot draw {}: {e}",
                svg.display()
            )
        })
        .is_ok();
    let md = markdown(
        paper,
        args.scale,
        &out,
        &ran,
        &judged,
        drawn.then_some(figure.as_str()),
        started,
    );
    let csv = claims_csv(paper, &judged);
    let written =
        std::fs::write(out.join(report), &md).and_then(|()| std::fs::write(out.join(claims), csv));
    if let Err(e) = written {
        eprintln!("memvisor bench reproduce: {}: {e}", out.display());
        return Outcome::Failed;
    }
    println!("{md}");
    eprintln!(
        "memvisor bench reproduce {key}: done: {}",
        out.join(report).display()
    );
    if ran.iter().any(|r| r.outcome == Some(Outcome::Interrupted)) {
        Outcome::Interrupted
    } else if ran
        .iter()
        .all(|r| matches!(r.outcome, None | Some(Outcome::Done)))
    {
        Outcome::Done
    } else {
        Outcome::Failed
    }
}

/// Every claim of `paper`'s experiments, judged against the reports under `out`.
fn judged(paper: &PaperSet, out: &Path) -> Vec<(&'static Reproduces, usize, Judged)> {
    let report_of = |name: &str| std::fs::read_to_string(out.join(name).join("report.md")).ok();
    let mut all = Vec::new();
    for e in paper.experiments() {
        for (i, c) in e.claims.iter().enumerate() {
            all.push((e, i, c.judge(&report_of)));
        }
    }
    all
}

/// The figure: each published value's ours over the paper's, on a log scale, with the
/// paper's at 1 and the factor of 2 the verdicts call the same around it. Values of 0, and
/// those not measured, are left out.
fn plot(
    paper: &PaperSet,
    judged: &[(&'static Reproduces, usize, Judged)],
    path: &Path,
) -> Result<(), String> {
    let mut points = Vec::new();
    let mut names = Vec::new();
    for (k, (e, i, j)) in judged.iter().enumerate() {
        let c = &e.claims[*i];
        names.push(format!("{} ({})", c.figure, k + 1));
        let published = match c.paper {
            Paper::Value(v) | Paper::Above(v) | Paper::Below(v) => v,
        };
        if let Some(ours) = j.ours.filter(|v| *v > 0.0 && published > 0.0) {
            points.push(((k + 1) as f64, ours / published));
        }
    }
    let n = judged.len() as f64;
    let (lo, hi) = points.iter().fold((0.25f64, 4.0f64), |(lo, hi), p| {
        (lo.min(p.1 / 1.5), hi.max(p.1 * 1.5))
    });
    let mut panel = Panel::new(
        format!(
            "{}: each published value, ours over the paper's",
            paper.short
        ),
        "published value, in the order of the report's table",
        "ours / the paper's (log)",
        Axis::linear(0.5, n + 0.5),
        Axis::log(lo, hi),
    );
    panel.x_names = names;
    let across = |y: f64| vec![(0.5, y), (n + 0.5, y)];
    panel.lines = vec![
        Line::new("the paper's value, or its bound", color(0), 1, across(1.0)).dashed(),
        Line::new("within a factor of 2", color(0), 1, across(2.0)).dotted(),
        Line::new("", color(0), 1, across(0.5)).dotted(),
        Line::new("memvisor", color(1), 0, points).marked(),
    ];
    panel.legend = Legend::Margin(260);
    panel.y_decimals = Some(3);
    Figure::one((1000, 520), panel).write(path)
}

/// `claims.csv`: one row per published value.
fn claims_csv(paper: &PaperSet, judged: &[(&'static Reproduces, usize, Judged)]) -> String {
    let mut t = Table::new(
        "paper,figure,measures,paper_value,source,experiment,ours,same,verdict".split(','),
    );
    for (e, i, j) in judged {
        let c = &e.claims[*i];
        t.row(crate::cells![
            paper.short,
            c.figure,
            c.measures,
            c.paper.text(),
            c.source,
            e.name,
            j.ours.map_or_else(String::new, sig),
            u8::from(j.same),
            j.verdict.as_str()
        ]);
    }
    t.csv()
}

/// `secs` since 1970 as a UTC date and time to the minute (`2026-11-30 10:17 UTC`).
fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let (hour, minute) = (secs % 86_400 / 3_600, secs % 3_600 / 60);
    // The civil date of a day count (H. Hinnant's algorithm): eras of 400 years from 0000-03-01.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year}-{month:02}-{day:02} {hour:02}:{minute:02} UTC")
}

fn outcome_text(o: Option<Outcome>) -> &'static str {
    match o {
        None => "not run now: judged from its report",
        Some(Outcome::Done) => "done",
        Some(Outcome::Interrupted) => "interrupted",
        Some(Outcome::BadInput) => "refused its flags",
        Some(Outcome::Failed) => "failed",
    }
}

/// `report.md`.
fn markdown(
    paper: &PaperSet,
    scale: Scale,
    out: &Path,
    ran: &[Ran],
    judged: &[(&'static Reproduces, usize, Judged)],
    figure: Option<&str>,
    started: std::time::SystemTime,
) -> String {
    let mut s = format!("# memvisor bench reproduce {}\n\n", paper.key);
    let date = utc(started
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()));
    let when = if ran.iter().all(|r| r.outcome.is_none()) {
        format!("judged again at {date} by commit `{}` against the experiments' reports an earlier run of the set left here (its own `report.md` names the commit it ran on)", env!("MEMVISOR_BUILD_COMMIT"))
    } else {
        format!(
            "built from commit `{}`, started {date}",
            env!("MEMVISOR_BUILD_COMMIT")
        )
    };
    let _ = writeln!(
        s,
        "{}: every experiment of its set at `--scale {}`, {when}. Each value the paper's text publishes is set beside ours, read from the experiment's own report, with a verdict: for a ratio, the same shape (the same side of 1) and the same ratio (within a factor of 2); for a level, the same within that factor; for a bound the paper's words give, whether it holds.{}\n",
        paper.citation,
        scale_name(scale),
        match scale {
            Scale::Quick => " **At `quick` the experiments run small sizes and one repetition: a smoke run of the whole set, whose numbers are not the paper's scale.**",
            Scale::Full => "",
        }
    );
    let same = judged.iter().filter(|j| j.2.same).count();
    let measured = judged.iter().filter(|j| j.2.ours.is_some()).count();
    let _ = writeln!(
        s,
        "## The paper's values beside ours\n\n{} values published, {measured} measured here, {same} the same.\n",
        judged.len()
    );
    let mut t = Table::new(
        "figure | measures | the paper | where | ours | experiment | verdict".split(" | "),
    );
    for (e, i, j) in judged {
        let c = &e.claims[*i];
        t.row(crate::cells![
            c.figure,
            text(c.measures),
            c.paper.text(),
            c.source,
            j.ours.map_or_else(|| "-".into(), sig),
            e.name,
            text(&j.verdict)
        ]);
    }
    s.push_str(&t.markdown());
    if let Some(figure) = figure {
        let _ = writeln!(s, "\n![ours over the paper's]({figure}.png)");
    }
    s.push_str("\nThe figures and tables this set does not run, and why, are in `docs/reproduction.md`.\n\n## Runs\n\n");
    let mut t = Table::new("experiment | reproduces | command | outcome | report".split(" | "));
    for r in ran {
        let report = out.join(r.experiment.name).join("report.md");
        t.row(crate::cells![
            r.experiment.name,
            text(&r.experiment.label()),
            format!("`{}`", r.command),
            outcome_text(r.outcome),
            if report.exists() {
                format!("{}/report.md", r.experiment.name)
            } else {
                "-".into()
            }
        ]);
    }
    s.push_str(&t.markdown());
    let left: Vec<&str> = paper
        .experiments()
        .filter(|e| !ran.iter().any(|r| r.experiment.name == e.name))
        .map(|e| e.name)
        .collect();
    if !left.is_empty() {
        let _ = writeln!(
            s,
            "\nNot run (interrupted before them): {}.",
            left.join(", ")
        );
    }
    crate::report::environment(&mut s, &readings::environment(out, "qemu-system-x86_64"));
    s
}

/// The sets table of `docs/reproduction.md`: each paper, its experiments with their quick and
/// full flags, and how many values it publishes. A test checks the docs hold it.
#[cfg(test)]
fn sets_table() -> String {
    let mut t = String::from("| paper | experiment | `--scale quick` adds | `--scale full` adds | published values |\n|---|---|---|---|---|\n");
    for p in PAPERS {
        for e in p.experiments() {
            let flags = |f: &str| {
                if f.is_empty() {
                    "-".to_owned()
                } else {
                    format!("`{f}`")
                }
            };
            t.push_str(&format!(
                "| `{}` | `{}` | {} | {} | {} |\n",
                p.key,
                e.name,
                flags(e.quick),
                flags(e.full),
                e.claims.len()
            ));
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::families::figures::EXPERIMENTS;

    /// `docs/reproduction.md` shows each paper's set as the data has it.
    #[test]
    fn the_docs_sets_table_is_made_from_the_data() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/reproduction.md");
        let doc = std::fs::read_to_string(path).unwrap();
        let table = sets_table();
        assert!(
            doc.contains(&table),
            "docs/reproduction.md's sets table is not the one the data makes; it should read:\n{table}"
        );
    }

    /// Every experiment of a paper's set parses its flags at both scales, and every paper has
    /// experiments and published values.
    #[test]
    fn every_set_parses_at_both_scales() {
        let out = Path::new("o");
        for p in PAPERS {
            assert!(p.experiments().count() > 0, "{}", p.key);
            assert!(p.experiments().any(|e| !e.claims.is_empty()), "{}", p.key);
            for scale in [Scale::Quick, Scale::Full] {
                let given = Words::try_parse_from(["bench", "reproduce", p.key])
                    .unwrap()
                    .args;
                let given = BenchArgs { scale, ..given };
                for e in p.experiments() {
                    let a = args_of(e, &given, out).unwrap();
                    assert_eq!((a.experiment.as_str(), a.scale), (e.name, scale));
                    assert_eq!(a.out, Some(out.join(e.name)));
                }
            }
        }
        // Each experiment with a paper is in exactly one set; claims only where a paper is.
        for e in EXPERIMENTS {
            let sets = PAPERS
                .iter()
                .filter(|p| p.experiments().any(|x| x.name == e.name));
            assert_eq!(sets.count(), usize::from(!e.paper.is_empty()), "{}", e.name);
            assert!(e.paper.is_empty() <= e.claims.is_empty(), "{}", e.name);
        }
    }

    #[test]
    fn dates_are_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00 UTC");
        assert_eq!(utc(1_796_033_878), "2026-11-30 10:17 UTC");
    }

    #[test]
    fn experiment_flags_are_refused() {
        let given = Words::try_parse_from(["bench", "reproduce", "esx", "--reps", "2"])
            .unwrap()
            .args;
        assert_eq!(experiment_flags(&given), Some("--reps"));
        let given = Words::try_parse_from(["bench", "reproduce", "esx", "--timeout", "60"])
            .unwrap()
            .args;
        assert_eq!(experiment_flags(&given), None);
    }
}
