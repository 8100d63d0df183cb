//! The outputs of a host experiment (`shares`, `idletax`) from what `run` measured:
//! `results.csv` (the time series and a summary), `report.md` (with the numbers of `summary`)
//! and the plot (`figure`).

use std::fmt::Write as _;

use memvisor_api::{FreeStateName, HostEvent, HostEventKind};

use super::experiment::{Goal, HostExperiment};
use super::run::{active_fraction, HostRun};
use super::summary::*;
use crate::families::published;
use crate::report::numbers::or_dash;
use crate::report::table::{self, Table};

/// `results.csv`: for every run, a `sample` row per VM and tick, a `throughput` row per reading,
/// an `event` row per host event, and the `summary` rows (metric, value).
pub fn csv(e: &HostExperiment, runs: &[HostRun]) -> String {
    let header: Vec<&str> = CSV_HEADER.split(',').collect();
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    // One line from named columns; the others are left empty.
    let mut row = |fields: &[(&str, String)]| {
        let mut cols = vec![String::new(); header.len()];
        for (name, value) in fields {
            let i = header.iter().position(|h| h == name);
            debug_assert!(i.is_some(), "no column {name} in the CSV header");
            if let Some(i) = i {
                cols[i] = table::field(value);
            }
        }
        out.push_str(&cols.join(","));
        out.push('\n');
    };
    for (i, run) in runs.iter().enumerate() {
        let rep = (i + 1).to_string();
        let at = |kind: &str, seconds: f64| {
            [
                ("kind", kind.to_owned()),
                ("experiment", e.name.to_owned()),
                ("rep", rep.clone()),
                ("seconds", format!("{seconds:.3}")),
                ("idle_tax", tax_at(run, seconds).to_string()),
            ]
        };
        for s in &run.samples {
            for v in &s.vms {
                let mut f = at("sample", s.seconds).to_vec();
                f.extend([
                    ("vm", v.name.clone()),
                    ("state", format!("{:?}", v.state).to_lowercase()),
                    ("free_bytes", s.free_bytes.to_string()),
                    ("free_state", state_name(s.free_state)),
                    ("target_bytes", v.target_bytes.to_string()),
                    ("resident_bytes", v.resident_bytes.to_string()),
                    ("active_fraction", format!("{:.4}", active_fraction(v))),
                    ("balloon_bytes", v.balloon_bytes.to_string()),
                    ("swapped_bytes", v.swapped_bytes.to_string()),
                    ("limit_bytes", v.limit_bytes.to_string()),
                ]);
                row(&f);
            }
        }
        for t in &run.throughput {
            let mut f = at("throughput", t.seconds).to_vec();
            f.extend([("vm", t.vm.clone()), ("rate", format!("{:.1}", t.rate))]);
            row(&f);
        }
        for ev in &run.events {
            let mut f = at("event", ev.seconds).to_vec();
            f.extend([
                ("vm", ev.vm.clone().unwrap_or_default()),
                ("metric", format!("{:?}", ev.kind).to_lowercase()),
                ("value", ev.message.clone()),
            ]);
            row(&f);
        }
        for (metric, value) in summary_rows(e, run) {
            row(&[
                ("kind", "summary".into()),
                ("experiment", e.name.into()),
                ("rep", rep.clone()),
                ("metric", metric),
                ("value", value),
            ]);
        }
    }
    out
}

fn yes(b: bool) -> &'static str {
    if b {
        "**yes**"
    } else {
        "**no**"
    }
}

/// `report.md`.
pub fn markdown(e: &HostExperiment, runs: &[HostRun], env: &[(String, String)]) -> String {
    let mut s = String::new();
    s.push_str(&crate::families::figures::heading(e.name));
    let _ = writeln!(s, "{}.\n", e.about);
    let _ = writeln!(
        s,
        "There is no QEMU peer for this experiment: QEMU/KVM has no share-based allocator (nothing divides a host's memory among VMs by shares or taxes idle memory), so the numbers are memvisor's allocations against what the paper says they should be, not a ratio against a peer.\n"
    );
    let (budget, tax, pages, duration) = (e.memory >> 20, e.idle_tax, e.sample_pages, e.duration);
    let (period, tick) = (e.sample_period.as_secs_f64(), e.tick.as_millis());
    let _ = writeln!(s, "## Set-up\n\n`memvisor host` with a budget of {budget} MiB, idle tax {tax} at start, {pages} sampled pages per period, a sampling period of {period:.1} s of guest time, a tick every {tick} ms; {duration} s in all.\n");
    let mut t = Table::new("VM | mem MiB | shares | joins at s | workload".split(" | "));
    for v in &e.vms {
        let workload = v.spec.workload.as_deref().unwrap_or("-");
        t.row(vec![
            v.spec.name.clone(),
            (v.spec.mem >> 20).to_string(),
            v.spec.shares.to_string(),
            format!("{:.0}", v.at),
            format!("`{workload} {}`", v.spec.cmdline),
        ]);
    }
    s.push_str(&t.markdown());
    for (at, tax) in &e.tax_changes {
        let _ = writeln!(
            s,
            "\nThe idle tax becomes {tax} at {at:.0} s (`PATCH /host`)."
        );
    }
    let _ = writeln!(s, "\nWhy:\n");
    for w in &e.why {
        let _ = writeln!(s, "- {w}");
    }
    s.push('\n');
    for (i, run) in runs.iter().enumerate() {
        let title = if runs.len() > 1 {
            format!(" (repetition {})", i + 1)
        } else {
            String::new()
        };
        let _ = writeln!(s, "## Results{title}\n");
        match e.goal {
            Goal::Shares { big, small, ratio } => shares_md(&mut s, run, big, small, ratio),
            Goal::IdleTax { idle, busy, .. } => idletax_md(&mut s, run, idle, busy),
            Goal::Reallocation { returns, idle } => reallocation_md(&mut s, e, run, returns, idle),
        }
        let shown =
            |ev: &&HostEvent| matches!(ev.kind, HostEventKind::Paused | HostEventKind::FreeState);
        let line = |ev: &HostEvent| {
            let (at, vm, what) = (ev.seconds, ev.vm.as_deref().unwrap_or("host"), &ev.message);
            format!("{at:.1} s {vm}: {what}")
        };
        let pauses: Vec<String> = run.events.iter().filter(shown).map(line).collect();
        let _ = writeln!(
            s,
            "\nFree-state changes and pauses ({} in all):\n",
            pauses.len()
        );
        for p in pauses.iter().take(40) {
            let _ = writeln!(s, "- {p}");
        }
        if pauses.len() > 40 {
            let _ = writeln!(s, "- ... {} more in results.csv", pauses.len() - 40);
        }
        for n in &run.notes {
            let _ = writeln!(s, "\nNote: {n}");
        }
        s.push('\n');
    }
    crate::report::environment(&mut s, env);
    s
}

fn shares_md(s: &mut String, run: &HostRun, big: &str, small: &str, goal: f64) {
    let Some(x) = shares_summary(run, big, small, goal) else {
        s.push_str("No steady state was measured (a VM never ran beside the other).\n");
        return;
    };
    let _ = writeln!(
        s,
        "Steady state: {:.0}–{:.0} s (the last minute of the run, at most its second half).\n",
        x.window.0, x.window.1
    );
    let mut t = Table::new(
        "VM | allocation MiB (resident, mean) | active (sampled, mean) | touches/s".split(" | "),
    );
    for (vm, mib, active, rate) in [
        (big, x.big_mib, x.big_active, x.big_rate),
        (small, x.small_mib, x.small_active, x.small_rate),
    ] {
        t.row(vec![
            vm.to_owned(),
            format!("{mib:.1}"),
            format!("{active:.3}"),
            or_dash(rate, 0),
        ]);
    }
    s.push_str(&t.markdown());
    let _ = writeln!(
        s,
        "\n- allocation ratio {big}/{small}: **{:.3}** (per tick {:.3}–{:.3}); the targets' ratio {:.3}; goal {goal:.0}",
        x.ratio, x.ratio_range.0, x.ratio_range.1, x.target_ratio
    );
    let _ = writeln!(s, "- within 10 % of {goal:.0}:1: {}", yes(x.within));
    let (after, at) = (or_dash(x.converged_after, 1), x.joined_at);
    let _ = writeln!(
        s,
        "- converged (ratio within 10 % from then on) {after} s after `{big}` joined at {at:.1} s"
    );
    let (changes, pauses) = (x.state_changes, x.pauses);
    let _ = writeln!(
        s,
        "- in the steady state: {changes} free-state changes, {pauses} pauses"
    );
}

fn idletax_md(s: &mut String, run: &HostRun, idle: &str, busy: &str) {
    let Some(x) = idletax_summary(run, idle, busy) else {
        s.push_str("No steady state was measured (the busy VM or the tax change is missing).\n");
        return;
    };
    let head = format!("idle tax | steady window s | {idle} MiB (target) | {busy} MiB (target) | {idle} active | {busy} active | {busy} ops/s");
    let mut t = Table::new(head.split(" | "));
    for (tax, p) in [("0", &x.untaxed), ("0.75", &x.taxed)] {
        t.row(vec![
            tax.to_owned(),
            format!("{:.0}–{:.0}", p.window.0, p.window.1),
            format!("{:.1} ({:.1})", p.idle_mib, p.idle_target_mib),
            format!("{:.1} ({:.1})", p.busy_mib, p.busy_target_mib),
            format!("{:.3}", p.idle_active),
            format!("{:.3}", p.busy_active),
            or_dash(p.busy_rate, 0),
        ]);
    }
    s.push_str(&t.markdown());
    let (equal, moved, speedup) = (yes(x.equal_untaxed), yes(x.moved), or_dash(x.speedup, 2));
    let gained = x.taxed.busy_mib - x.untaxed.busy_mib;
    let _ = writeln!(
        s,
        "\n- at tax 0 both get the same allocation (within 10 %): {equal}"
    );
    let _ = writeln!(
        s,
        "- at tax 0.75 memory moves from `{idle}` to `{busy}`: {moved} ({gained:+.1} MiB)"
    );
    let _ = writeln!(
        s,
        "- `{busy}`'s throughput at 0.75 over 0: **{speedup}** (the paper: over 1.3)"
    );
    let _ = writeln!(
        s,
        "- reallocation: `{busy}` held 90 % of the memory it gained {} s after the tax changed at {:.1} s; its throughput first reached 90 % of its new mean after {} s",
        or_dash(x.realloc_s, 1),
        x.switch,
        or_dash(x.rate_s, 1)
    );
    let _ = writeln!(
        s,
        "- pauses by the host after `{busy}` joined: {}",
        x.pauses
    );
}

fn reallocation_md(
    s: &mut String,
    e: &HostExperiment,
    run: &HostRun,
    returns: &str,
    idle: (f64, f64),
) {
    let Some(x) = reallocation_summary(e, run, returns, idle) else {
        s.push_str("No idle phase was measured (the returning VM is missing from the history).\n");
        return;
    };
    let total: f64 = x.states.iter().map(|st| st.1).sum::<f64>().max(1e-9);
    let mut t = Table::new("free state | seconds | share of the run".split(" | "));
    for (st, secs) in &x.states {
        t.row(vec![
            state_name(*st),
            format!("{secs:.1}"),
            format!("{:.0} %", 100.0 * secs / total),
        ]);
    }
    s.push_str("Fig. 8(a), the time in each free-memory state:\n\n");
    s.push_str(&t.markdown());
    let high_soft = x
        .states
        .iter()
        .filter(|st| matches!(st.0, FreeStateName::High | FreeStateName::Soft));
    let share = high_soft.map(|st| st.1).sum::<f64>() / total;
    let _ = writeln!(
        s,
        "\n- in `high` or `soft` {:.0} % of the run (the paper: nearly all of it)",
        100.0 * share
    );
    let _ = writeln!(
        s,
        "- Fig. 8(b), summed over the VMs at their highest: resident {:.0} MiB, in balloons {:.0} MiB, swapped by their pagers {:.0} MiB (the budget: {} MiB)",
        x.peak_resident_mib, x.peak_balloon_mib, x.peak_swapped_mib, e.memory >> 20
    );
    let floor = x.idle_low_mib >= x.min_mib * 0.98;
    let _ = writeln!(
        s,
        "- Fig. 8(d): `{returns}` idle from {:.0} to {:.0} s fell to {:.1} MiB at its lowest in the second half (its min {:.0} MiB); held at or above its min: {}",
        idle.0, idle.1, x.idle_low_mib, x.min_mib, yes(floor)
    );
    let _ = writeln!(
        s,
        "- working again, `{returns}` reached {:.1} MiB; 90 % of what it gained back {} s after its idle phase ended",
        x.again_high_mib,
        or_dash(x.regain_s, 1)
    );
    let usable: Vec<String> = x
        .balloon_usable
        .iter()
        .map(|(n, at, lost)| {
            let at = at.map_or("never".into(), |t| format!("at {t:.1} s"));
            format!("`{n}` {at}, then not usable {lost} times")
        })
        .collect();
    let _ = writeln!(
        s,
        "- balloons found usable (the driver answered within its deadline; a balloon that makes no progress toward its target for 2 s is not, and the host pages the VM instead): {}",
        usable.join("; ")
    );
    // The values the paper's text gives, in a table of their own for `reproduce`'s claims.
    let mut t = Table::new(["measure", "ours", "the paper (§6.3)"]);
    t.row(vec![
        published::REALLOCATION_HIGH_SOFT.into(),
        format!("{:.0}", 100.0 * share),
        "nearly all".into(),
    ]);
    t.row(vec![
        published::REALLOCATION_IDLE_LOW.into(),
        format!("{:.2}", x.idle_low_mib / x.min_mib.max(1e-9)),
        "1 (SQL Server drops to its min of 160 MB)".into(),
    ]);
    s.push_str("\n### Against the paper\n\n");
    s.push_str(&t.markdown());
}

#[cfg(test)]
mod tests {
    use super::super::figure::plot;
    use super::super::run::Throughput;
    use super::*;
    use memvisor_api::HostEvent;
    use memvisor_api::{FreeStateName, HostVmState};
    use memvisor_api::{HostSample, VmSample};

    const M: u64 = 1 << 20;

    fn sample(t: f64, vms: &[(&str, u64, u64, f64)]) -> HostSample {
        HostSample {
            seconds: t,
            free_bytes: 10 * M,
            free_state: FreeStateName::High,
            vms: vms
                .iter()
                .map(|&(name, resident, target, active)| VmSample {
                    name: name.into(),
                    state: HostVmState::Running,
                    target_bytes: target * M,
                    resident_bytes: resident * M,
                    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                    active_bytes: ((resident * M) as f64 * active) as u64,
                    balloon_bytes: 0,
                    swapped_bytes: 0,
                    on_disk_bytes: 0,
                    limit_bytes: target * M,
                    pooled_bytes: 0,
                    shared_saved_bytes: 0,
                })
                .collect(),
        }
    }

    /// `small` alone, then `big` joins at 10 s and memory moves until 20 s; 2:1 from then on.
    fn shares_run() -> HostRun {
        let mut samples = Vec::new();
        for i in 0..=100 {
            let t = f64::from(i);
            let s = if t < 10.0 {
                sample(t, &[("small", 480, 512, 1.0)])
            } else if t < 20.0 {
                let x = (t - 10.0) / 10.0;
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let (b, m) = ((400.0 * x) as u64, (480.0 - 280.0 * x) as u64);
                sample(t, &[("small", m, 200, 1.0), ("big", b, 400, 1.0)])
            } else {
                let wobble = if i % 2 == 0 { 4 } else { 0 };
                sample(
                    t,
                    &[("small", 200 + wobble, 200, 0.99), ("big", 400, 400, 1.0)],
                )
            };
            samples.push(s);
        }
        HostRun {
            samples,
            events: vec![HostEvent {
                seconds: 11.0,
                kind: HostEventKind::Paused,
                vm: Some("small".into()),
                message: "paused".into(),
            }],
            throughput: [(90.0, 100.0), (95.0, 300.0)]
                .map(|(seconds, rate)| Throughput {
                    seconds,
                    vm: "big".into(),
                    rate,
                })
                .to_vec(),
            taxes: vec![(0.0, 0.75)],
            joined: vec![("small".into(), 0.0), ("big".into(), 10.0)],
            ..HostRun::default()
        }
    }

    #[test]
    fn shares_steady_state_and_convergence() {
        let run = shares_run();
        let s = shares_summary(&run, "big", "small", 2.0).unwrap();
        assert_eq!(s.window, (55.0, 100.0), "the second half after joining");
        assert!((s.big_mib - 400.0).abs() < 1e-9);
        assert!((s.small_mib - 202.0).abs() < 0.1, "{s:?}");
        assert!(s.within);
        assert!((s.ratio_range.0 - 400.0 / 204.0).abs() < 1e-9);
        assert!((s.target_ratio - 2.0).abs() < 1e-9);
        // At 19 s the ratio is 360/228 = 1.58, from 20 s on 1.96 or 2: 10 s after joining.
        assert_eq!(s.converged_after, Some(10.0));
        assert_eq!(s.pauses, 0, "the pause was before the steady state");
        assert_eq!(s.big_rate, Some(200.0));
        assert_eq!(s.small_rate, None);
        // Never converged: the last tick is outside the band.
        let mut bad = run.clone();
        bad.samples.push(sample(
            101.0,
            &[("small", 300, 200, 1.0), ("big", 300, 400, 1.0)],
        ));
        let bad = shares_summary(&bad, "big", "small", 2.0).unwrap();
        assert_eq!(bad.converged_after, None);
        // Big never joined: nothing to say.
        let mut alone = run;
        alone.joined.truncate(1);
        assert!(shares_summary(&alone, "big", "small", 2.0).is_none());
    }

    fn idletax_run() -> HostRun {
        let mut samples = Vec::new();
        let mut throughput = Vec::new();
        for i in 0..=300 {
            let t = f64::from(i);
            let (idle, busy) = if t < 150.0 {
                (180, 180)
            } else if t < 160.0 {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let moved = ((t - 150.0) * 7.6) as u64;
                (180 - moved, 180 + moved)
            } else {
                (104, 256)
            };
            if t < 20.0 {
                samples.push(sample(t, &[("idle", 200, 256, 0.01)]));
            } else {
                samples.push(sample(
                    t,
                    &[("idle", idle, idle, 0.01), ("busy", busy, busy, 1.0)],
                ));
                throughput.push(Throughput {
                    seconds: t,
                    vm: "busy".into(),
                    rate: if busy >= 256 { 800.0 } else { 100.0 },
                });
            }
        }
        HostRun {
            samples,
            throughput,
            taxes: vec![(0.0, 0.0), (150.0, 0.75)],
            joined: vec![("idle".into(), 0.0), ("busy".into(), 20.0)],
            ..HostRun::default()
        }
    }

    /// Every VM of `e` at half its memory; `sql` idle at its min from 40 to 120 s, back at 80 %
    /// by 130 s; `soft` from 20 to 30 s; every balloon usable at 1 s.
    fn reallocation_run(e: &HostExperiment) -> HostRun {
        let mut samples = Vec::new();
        for i in 0..=200 {
            let t = f64::from(i);
            let vms: Vec<(&str, u64, u64, f64)> = e
                .vms
                .iter()
                .map(|v| {
                    let half = v.spec.mem / M / 2;
                    let r = match v.spec.name.as_str() {
                        "sql" if (40.0..120.0).contains(&t) => half,
                        "sql" if t >= 130.0 => half * 8 / 5,
                        _ => half + 10,
                    };
                    (v.spec.name.as_str(), r, r, 1.0)
                })
                .collect();
            let mut s = sample(t, &vms);
            if (20.0..30.0).contains(&t) {
                s.free_state = FreeStateName::Soft;
            }
            samples.push(s);
        }
        let usable = |v: &super::super::experiment::PlannedVm| HostEvent {
            seconds: 1.0,
            kind: HostEventKind::BalloonUsable,
            vm: Some(v.spec.name.clone()),
            message: "balloon usable".into(),
        };
        HostRun {
            samples,
            events: e.vms.iter().map(usable).collect(),
            taxes: vec![(0.0, 0.75)],
            joined: e.vms.iter().map(|v| (v.spec.name.clone(), 0.0)).collect(),
            ..HostRun::default()
        }
    }

    #[test]
    fn reallocation_states_the_idle_vm_at_its_min_and_its_return() {
        let e =
            crate::families::host::catalog::find("reallocation", crate::args::Scale::Full).unwrap();
        let run = reallocation_run(&e);
        let Goal::Reallocation { returns, idle } = e.goal else {
            panic!("{:?}", e.goal);
        };
        let s = reallocation_summary(&e, &run, returns, idle).unwrap();
        let secs: Vec<f64> = s.states.iter().map(|st| st.1).collect();
        assert_eq!(secs, [190.0, 10.0, 0.0, 0.0]);
        assert_eq!((s.min_mib, s.idle_low_mib), (160.0, 160.0));
        assert_eq!(s.again_high_mib, 256.0);
        // 90 % of the 96 MiB gained back: at 130 s, 10 s after the idle phase ended at 120 s.
        assert_eq!(s.regain_s, Some(10.0));
        assert!(s
            .balloon_usable
            .iter()
            .all(|u| u.1 == Some(1.0) && u.2 == 0));
        assert_eq!(s.balloon_usable.len(), 5);
    }

    #[test]
    fn idletax_phases_speedup_and_reallocation_time() {
        let run = idletax_run();
        let s = idletax_summary(&run, "idle", "busy").unwrap();
        assert_eq!(s.untaxed.window, (90.0, 150.0));
        assert_eq!(s.taxed.window, (240.0, 300.0));
        assert!(s.equal_untaxed && s.moved);
        assert_eq!(s.untaxed.busy_rate, Some(100.0));
        assert_eq!(s.speedup, Some(8.0));
        // 90 % of the 76 MiB gained is 248.4 MiB: 248 at 159 s, 256 at 160 s.
        assert_eq!(s.realloc_s, Some(10.0));
        assert_eq!(s.rate_s, Some(10.0));
        // Without the tax change there is no second phase.
        let mut flat = run;
        flat.taxes.truncate(1);
        assert!(idletax_summary(&flat, "idle", "busy").is_none());
    }

    #[test]
    fn the_csv_has_every_column_in_every_row_and_the_report_and_plot_are_written() {
        for name in crate::families::figures::of(crate::families::figures::Family::Host) {
            let e = crate::families::host::catalog::find(name, crate::args::Scale::Full).unwrap();
            let run = match e.goal {
                Goal::Shares { .. } => shares_run(),
                Goal::IdleTax { .. } => idletax_run(),
                Goal::Reallocation { .. } => reallocation_run(&e),
            };
            let text = csv(&e, std::slice::from_ref(&run));
            let cols = CSV_HEADER.split(',').count();
            let mut kinds = std::collections::BTreeSet::new();
            for line in text.lines().skip(1) {
                assert_eq!(line.split(',').count(), cols, "{line}");
                kinds.insert(line.split(',').next().unwrap().to_owned());
            }
            let both = kinds.contains("sample") && kinds.contains("summary");
            assert!(both, "{kinds:?}");
            let md = markdown(
                &e,
                std::slice::from_ref(&run),
                &[("kernel".into(), "x".into())],
            );
            for want in ["no QEMU peer", "**yes**"] {
                assert!(md.contains(want), "{want}: {md}");
            }
            let dir =
                std::env::temp_dir().join(format!("memvisor-plot-{}-{name}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let svg = dir.join("p.svg");
            plot(&svg, &e, &run).unwrap();
            let body = std::fs::read_to_string(&svg).unwrap();
            assert!(body.contains("<svg") && body.contains("allocation"));
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}
