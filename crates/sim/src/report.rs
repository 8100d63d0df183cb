//! What a run writes: `vms.csv` (per tick, per VM), `host.csv` (per tick), `summary.md` and
//! SVG plots drawn here (a few polylines; no plotting dependency).

use std::fmt::Write as _;
use std::path::Path;

use crate::scenario::{Balancing, PolicyKind};
use crate::sim::Sim;
use crate::stats::{jain, quantile};

/// The summary's numbers, for studies that compare runs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    pub vms: usize,
    pub refused: usize,
    pub mean_slowdown: f64,
    pub p99_slowdown: f64,
    /// Jain's index of mean allocation per share over the VMs.
    pub fairness: f64,
    pub pauses: u64,
    pub completed: usize,
    pub move_mean_s: f64,
    pub move_p99_s: f64,
    pub ticks_over_budget: u64,
}

/// Sums a run up.
pub fn summary(sim: &Sim) -> Summary {
    let per_share: Vec<f64> = sim
        .vms
        .iter()
        .zip(&sim.summaries)
        .map(|(v, st)| st.mean_resident() / v.cfg.shares as f64)
        .collect();
    let mut moves = sim.moves.clone();
    Summary {
        vms: sim.vms.len(),
        refused: sim.refused.len(),
        mean_slowdown: sim.slowdowns.mean(),
        p99_slowdown: sim.slowdowns.quantile(0.99),
        fairness: jain(&per_share),
        pauses: sim.summaries.iter().map(|s| u64::from(s.pauses)).sum(),
        completed: sim.vms.iter().filter(|v| v.done()).count(),
        move_mean_s: if moves.is_empty() {
            0.0
        } else {
            moves.iter().map(|&x| f64::from(x)).sum::<f64>() / moves.len() as f64
        },
        move_p99_s: quantile(&mut moves, 0.99),
        ticks_over_budget: sim.host.iter().filter(|h| h.over > 0).count() as u64,
    }
}

const MIB: f64 = 1048576.0;

/// The markdown summary.
pub fn markdown(sim: &Sim, title: &str) -> String {
    let s = &sim.scenario;
    let sum = summary(sim);
    let mut o = String::new();
    let policy = match s.host.policy {
        PolicyKind::Esx if s.host.balancing == Balancing::Hd2 => format!(
            "memvisor's policy (ESX) with HyperDealer2's balancing, idle tax {}",
            s.host.idle_tax
        ),
        PolicyKind::Esx => format!("memvisor's policy (ESX), idle tax {}", s.host.idle_tax),
        PolicyKind::Static => "static balloons (the simulator's baseline: fixed shares)".into(),
        PolicyKind::Threshold => "MOM-like threshold balloons (the simulator's baseline)".into(),
    };
    let maxes: u64 = sim.vms.iter().map(|v| v.cfg.max).sum();
    let _ = writeln!(o, "# {title}\n");
    let _ = writeln!(
        o,
        "{} VMs ({} refused by admission), budget {} MiB, guest memory {} MiB (overcommit {:.2}x), {}; {} s in ticks of {} s, seed {}.\n",
        sum.vms,
        sum.refused,
        s.host.budget.0 >> 20,
        maxes >> 20,
        maxes as f64 / s.host.budget.0 as f64,
        policy,
        s.duration.0,
        s.host.tick.0,
        s.seed
    );
    let _ = writeln!(o, "| measure | value |\n|---|---|");
    let _ = writeln!(
        o,
        "| mean slowdown (per working tick) | {:.3} |",
        sum.mean_slowdown
    );
    let _ = writeln!(o, "| p99 slowdown | {:.3} |", sum.p99_slowdown);
    let _ = writeln!(
        o,
        "| fairness (Jain's index of allocation per share) | {:.3} |",
        sum.fairness
    );
    let _ = writeln!(o, "| pauses | {} |", sum.pauses);
    let _ = writeln!(o, "| VMs that completed their work | {} |", sum.completed);
    let _ = writeln!(
        o,
        "| memory moving to a lower target: mean / p99 | {:.1} s / {:.1} s ({} moves) |",
        sum.move_mean_s,
        sum.move_p99_s,
        sim.moves.len()
    );
    let _ = writeln!(
        o,
        "| ticks with the host over its budget | {} |",
        sum.ticks_over_budget
    );
    if s.host.balancing == Balancing::Hd2 {
        let _ = writeln!(
            o,
            "| released by HyperDealer2's balancer (clean page cache) | {} MiB in {} ticks |",
            sim.released >> 20,
            sim.reallocations
        );
    }
    let _ = writeln!(o, "\n## Per group\n");
    let _ = writeln!(
        o,
        "| group | VMs | mem MiB | shares | balloon | slowdown mean | slowdown max | completion mean s | mean resident MiB | per 1000 shares | pauses |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for (gi, g) in s.groups.iter().enumerate() {
        let members: Vec<usize> = (0..sim.vms.len())
            .filter(|&i| sim.vms[i].cfg.group == gi)
            .collect();
        if members.is_empty() {
            continue;
        }
        let n = members.len() as f64;
        let slows: Vec<f64> = members
            .iter()
            .map(|&i| sim.summaries[i].slowdown())
            .collect();
        let done: Vec<f64> = members
            .iter()
            .filter_map(|&i| sim.vms[i].completed_at)
            .collect();
        let res: f64 = members
            .iter()
            .map(|&i| sim.summaries[i].mean_resident())
            .sum::<f64>()
            / n;
        let pauses: u64 = members
            .iter()
            .map(|&i| u64::from(sim.summaries[i].pauses))
            .sum();
        let completion = if done.is_empty() {
            "-".to_owned()
        } else {
            format!(
                "{:.0} ({} of {})",
                done.iter().sum::<f64>() / done.len() as f64,
                done.len(),
                members.len()
            )
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {:.3} | {:.3} | {} | {:.0} | {:.0} | {} |",
            g.name,
            members.len(),
            g.mem.0 >> 20,
            g.shares,
            g.balloon,
            slows.iter().sum::<f64>() / n,
            slows.iter().copied().fold(0.0, f64::max),
            completion,
            res / MIB,
            res / MIB / g.shares as f64 * 1000.0,
            pauses
        );
    }
    if !sim.refused.is_empty() {
        let _ = writeln!(o, "\n## Refused\n");
        for (n, why) in sim.refused.iter().take(20) {
            let _ = writeln!(o, "- {n}: {why}");
        }
    }
    let _ = writeln!(
        o,
        "\nSlowdown: wall seconds per second of work (1 = as fast as with all its memory); a VM's is over the time it was not done, pauses included. Plots: host.svg, groups.svg, slowdown.svg."
    );
    o
}

/// `host.csv`: one row per tick.
pub fn host_csv(sim: &Sim) -> String {
    let mut o =
        String::from("t,state,free,resident,pooled,swapped,balloons,paused,mean_slowdown,over\n");
    for h in &sim.host {
        let _ = writeln!(
            o,
            "{:.3},{},{},{},{},{},{},{},{:.4},{}",
            h.t,
            h.state,
            h.free,
            h.resident,
            h.pooled,
            h.swapped,
            h.balloons,
            h.paused,
            h.mean_slowdown,
            h.over
        );
    }
    o
}

/// A line chart: one polyline per series.
pub fn svg_lines(title: &str, y_label: &str, series: &[(String, Vec<(f64, f64)>)]) -> String {
    const COLORS: [&str; 8] = [
        "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    ];
    let (w, h, l, r, t, b) = (900.0, 420.0, 70.0, 200.0, 40.0, 40.0);
    let pts = series.iter().flat_map(|(_, p)| p.iter());
    let (mut x1, mut y1) = (1e-9f64, 1e-9f64);
    for &(x, y) in pts {
        if x.is_finite() {
            x1 = x1.max(x);
        }
        if y.is_finite() {
            y1 = y1.max(y);
        }
    }
    y1 *= 1.05;
    let sx = |x: f64| l + (x / x1) * (w - l - r);
    let sy = |y: f64| h - b - (y.min(y1) / y1) * (h - t - b);
    let mut o = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{l}\" y=\"20\" font-size=\"15\">{}</text>\n",
        esc(title)
    );
    let _ = writeln!(o, "<line x1=\"{l}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/><line x1=\"{l}\" y1=\"{t}\" x2=\"{l}\" y2=\"{}\" stroke=\"black\"/>", h - b, w - r, h - b, h - b);
    for k in 0..=4 {
        let f = f64::from(k) / 4.0;
        let _ = writeln!(
            o,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{:.0}</text>",
            sx(f * x1),
            h - b + 16.0,
            f * x1
        );
        let _ = writeln!(o, "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.3}</text><line x1=\"{l}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#ddd\"/>", l - 4.0, sy(f * y1) + 4.0, f * y1, sy(f * y1), w - r, sy(f * y1));
    }
    let _ = writeln!(
        o,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">seconds</text>",
        (l + w - r) / 2.0,
        h - 6.0
    );
    let _ = writeln!(
        o,
        "<text x=\"14\" y=\"{}\" transform=\"rotate(-90 14 {})\" text-anchor=\"middle\">{}</text>",
        h / 2.0,
        h / 2.0,
        esc(y_label)
    );
    for (i, (name, p)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let mut d = String::new();
        // At most ~2000 points a line: enough for a 900-pixel plot.
        let step = (p.len() / 2000).max(1);
        for &(x, y) in p.iter().step_by(step) {
            if x.is_finite() && y.is_finite() {
                let _ = write!(d, "{:.1},{:.1} ", sx(x), sy(y));
            }
        }
        let _ = writeln!(
            o,
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"1.5\" points=\"{d}\"/>"
        );
        let ly = t + 16.0 * i as f64;
        let _ = writeln!(o, "<line x1=\"{}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{c}\" stroke-width=\"3\"/><text x=\"{}\" y=\"{}\">{}</text>", w - r + 10.0, w - r + 30.0, w - r + 36.0, ly + 4.0, esc(name));
    }
    o.push_str("</svg>\n");
    o
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Writes `host.csv`, `summary.md` and the plots into `dir` (the per-VM CSV is written as the
/// run goes).
pub fn write_all(sim: &Sim, dir: &Path, title: &str) -> std::io::Result<()> {
    std::fs::write(dir.join("host.csv"), host_csv(sim))?;
    std::fs::write(dir.join("summary.md"), markdown(sim, title))?;
    let gib = 1073741824.0;
    let col = |f: &dyn Fn(&crate::sim::HostTick) -> f64| -> Vec<(f64, f64)> {
        sim.host.iter().map(|h| (h.t, f(h))).collect()
    };
    let host = [
        (
            "guest pages resident".to_owned(),
            col(&|h| h.resident as f64 / gib),
        ),
        ("pooled".to_owned(), col(&|h| h.pooled as f64 / gib)),
        ("swapped".to_owned(), col(&|h| h.swapped as f64 / gib)),
        ("in balloons".to_owned(), col(&|h| h.balloons as f64 / gib)),
        ("free".to_owned(), col(&|h| h.free as f64 / gib)),
        (
            "budget".to_owned(),
            col(&|_| sim.scenario.host.budget.0 as f64 / gib),
        ),
    ];
    std::fs::write(
        dir.join("host.svg"),
        svg_lines(&format!("{title}: host memory"), "GiB", &host),
    )?;
    let dt = sim.scenario.host.tick.0;
    let per_group = |k: usize, what: &str| -> Vec<(String, Vec<(f64, f64)>)> {
        sim.scenario
            .groups
            .iter()
            .enumerate()
            .map(|(gi, g)| {
                let p = sim
                    .groups
                    .iter()
                    .enumerate()
                    .map(|(i, row)| ((i + 1) as f64 * dt, f64::from(row[gi][k])))
                    .collect();
                (format!("{} {what}", g.name), p)
            })
            .collect()
    };
    let mut alloc = per_group(0, "resident");
    alloc.extend(per_group(1, "target"));
    std::fs::write(
        dir.join("groups.svg"),
        svg_lines(&format!("{title}: mean per VM by group"), "MiB", &alloc),
    )?;
    std::fs::write(
        dir.join("slowdown.svg"),
        svg_lines(
            &format!("{title}: mean slowdown by group"),
            "slowdown",
            &per_group(2, ""),
        ),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;
    use crate::sim::tests::{sim, SCENARIO};

    fn run_to_bytes() -> Vec<u8> {
        let mut s = sim();
        let mut out = Vec::new();
        s.run(Some(&mut out)).unwrap();
        out.extend(markdown(&s, "t").into_bytes());
        out.extend(host_csv(&s).into_bytes());
        out
    }

    #[test]
    fn a_seed_and_a_scenario_determine_the_run_byte_for_byte() {
        let a = run_to_bytes();
        assert!(a.len() > 10_000);
        assert_eq!(a, run_to_bytes());
        let mut other = Sim::new(
            Scenario::parse("t.toml", &SCENARIO.replace("seed = 9", "seed = 10")).unwrap(),
        );
        let mut b = Vec::new();
        other.run(Some(&mut b)).unwrap();
        assert_ne!(a[..b.len().min(a.len())], b[..b.len().min(a.len())]);
    }

    #[test]
    fn memory_moves_to_the_busy_vms_and_the_host_keeps_near_its_budget() {
        let mut s = sim();
        s.run(None).unwrap();
        let sum = summary(&s);
        assert!(sum.mean_slowdown >= 1.0);
        // Idle VMs end up with less than the busy ones at the working-set peak.
        let at = |t: usize, i: usize| s.groups[t][i][0];
        assert!(at(300, 1) < at(300, 0), "{:?}", s.groups[300]);
    }
}
