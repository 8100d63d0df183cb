//! Calibration: a real host's recorded run (`[host] trace`) beside the simulator's run of the
//! same VMs (a scenario with one group per VM, named as the host's VMs), per VM its allocation
//! over time and its completion, with the error (docs/sim.md, "Calibration").

use std::fmt::Write as _;
use std::io::BufRead;
use std::path::Path;

use crate::report::svg_lines;
use crate::scenario::Scenario;
use crate::sim::Sim;
use memvisor_policy::trace::TraceTick;

const MIB: f64 = 1048576.0;

/// One VM's series: per tick (t, resident, target) while it ran.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    pub points: Vec<(f64, f64, f64)>,
    /// When it stopped: the first tick it was no longer seen (None if it ran to the end).
    pub stopped: Option<f64>,
}

/// Reads a real host's trace: each VM's series by name, and the trace's last time.
pub fn read_trace(r: impl BufRead) -> Result<(Vec<(String, Series)>, f64), String> {
    let mut out: Vec<(String, Series)> = Vec::new();
    let mut last_t = 0.0;
    for (n, line) in r.lines().enumerate() {
        let line = line.map_err(|e| format!("line {}: {e}", n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let tick: TraceTick =
            serde_json::from_str(&line).map_err(|e| format!("line {}: {e}", n + 1))?;
        if tick.vms.len() != tick.plan.actions.len() {
            return Err(format!(
                "line {}: {} VMs but {} actions",
                n + 1,
                tick.vms.len(),
                tick.plan.actions.len()
            ));
        }
        for (v, a) in tick.vms.iter().zip(&tick.plan.actions) {
            let i = match out.iter().position(|(name, _)| *name == v.name) {
                Some(i) => i,
                None => {
                    out.push((v.name.clone(), Series::default()));
                    out.len() - 1
                }
            };
            out[i]
                .1
                .points
                .push((tick.t, v.obs.resident as f64, a.target as f64));
        }
        // A VM seen before and not in this tick has stopped.
        for (name, s) in &mut out {
            if s.stopped.is_none() && !tick.vms.iter().any(|v| v.name == *name) {
                s.stopped = Some(tick.t);
            }
        }
        last_t = tick.t;
    }
    if out.is_empty() {
        return Err("no VMs in the trace".into());
    }
    Ok((out, last_t))
}

/// Runs the scenario, recording each VM's series; VM `g-0` of a group of one is named `g`.
pub fn simulate(sc: Scenario) -> std::io::Result<(Vec<(String, Series)>, Sim)> {
    let mut sim = Sim::new(sc);
    let dt = sim.scenario.host.tick.0;
    let names: Vec<String> = sim
        .names
        .iter()
        .map(|n| n.strip_suffix("-0").unwrap_or(n).to_owned())
        .collect();
    let mut out: Vec<(String, Series)> = names
        .iter()
        .map(|n| (n.clone(), Series::default()))
        .collect();
    for k in 0..sim.scenario.ticks() {
        sim.step(None)?;
        let t = (k + 1) as f64 * dt;
        for (v, (_, s)) in sim.vms.iter().zip(&mut out) {
            if v.exited() {
                if s.stopped.is_none() {
                    s.stopped = v.stopped_at;
                }
            } else {
                s.points.push((t, v.resident, v.target as f64));
            }
        }
    }
    Ok((out, sim))
}

/// The value of a series at time `t`: the last point at or before it (0 before the first).
fn at(s: &Series, t: f64) -> Option<(f64, f64)> {
    let i = s.points.partition_point(|p| p.0 <= t + 1e-9);
    if i == 0 {
        return None;
    }
    let p = s.points[i - 1];
    Some((p.1, p.2))
}

/// One VM's comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct VmError {
    pub name: String,
    pub mem: f64,
    /// RMS of simulated minus real resident memory over the real run's ticks, bytes.
    pub rms: f64,
    /// The same for targets.
    pub rms_target: f64,
    /// Mean real resident memory over those ticks.
    pub mean_real: f64,
    pub real_stop: Option<f64>,
    pub sim_stop: Option<f64>,
}

/// Sets each real VM beside the simulated one of its name.
pub fn compare(
    real: &[(String, Series)],
    sim: &[(String, Series)],
    mems: &[(String, u64)],
) -> Result<Vec<VmError>, String> {
    let mut out = Vec::new();
    for (name, r) in real {
        let Some((_, s)) = sim.iter().find(|(n, _)| n == name) else {
            return Err(format!(
                "the trace's VM {name} is not in the scenario (a [[group]] named {name}, count 1)"
            ));
        };
        let mem = mems
            .iter()
            .find(|(n, _)| n == name)
            .map_or(1.0, |m| m.1 as f64);
        let (mut se, mut st, mut sum, mut n) = (0.0, 0.0, 0.0, 0.0);
        for &(t, res, target) in &r.points {
            // A simulated VM that stopped holds nothing.
            let (sres, starget) = if s.stopped.is_some_and(|x| x <= t) {
                (0.0, 0.0)
            } else {
                at(s, t).unwrap_or((0.0, target))
            };
            se += (sres - res).powi(2);
            st += (starget - target).powi(2);
            sum += res;
            n += 1.0;
        }
        let n = f64::max(n, 1.0);
        out.push(VmError {
            name: name.clone(),
            mem,
            rms: (se / n).sqrt(),
            rms_target: (st / n).sqrt(),
            mean_real: sum / n,
            real_stop: r.stopped,
            sim_stop: s.stopped,
        });
    }
    Ok(out)
}

/// The report's markdown table.
pub fn markdown(errors: &[VmError], trace: &str, scenario: &str) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# Calibration: {trace} beside {scenario}\n");
    let _ = writeln!(
        o,
        "Per VM, over the real run's ticks while the VM ran: the RMS of simulated minus real resident memory (and of the policy's targets), as a share of the VM's RAM and of its mean real resident memory; when each stopped, real and simulated.\n"
    );
    let _ = writeln!(o, "| VM | RAM MiB | mean real resident MiB | RMS resident MiB | of RAM | of mean resident | RMS target MiB | stopped real s | stopped sim s | error |\n|---|---|---|---|---|---|---|---|---|---|");
    let opt = |x: Option<f64>| x.map_or("-".to_owned(), |v| format!("{v:.1}"));
    for e in errors {
        let err = match (e.real_stop, e.sim_stop) {
            (Some(r), Some(s)) if r > 0.0 => format!("{:+.0} %", (s - r) / r * 100.0),
            _ => "-".into(),
        };
        let _ = writeln!(
            o,
            "| {} | {:.0} | {:.0} | {:.1} | {:.1} % | {:.1} % | {:.1} | {} | {} | {err} |",
            e.name,
            e.mem / MIB,
            e.mean_real / MIB,
            e.rms / MIB,
            e.rms / e.mem * 100.0,
            e.rms / e.mean_real.max(1.0) * 100.0,
            e.rms_target / MIB,
            opt(e.real_stop),
            opt(e.sim_stop),
        );
    }
    o
}

/// `memvisor sim --calibrate TRACE SCENARIO`: writes calibration.md, calibration.csv and
/// calibration.svg into `dir`; returns the markdown.
pub fn run(trace: &Path, sc: Scenario, scenario: &str, dir: &Path) -> Result<String, String> {
    let f = std::fs::File::open(trace).map_err(|e| format!("{}: {e}", trace.display()))?;
    let (real, _) =
        read_trace(std::io::BufReader::new(f)).map_err(|e| format!("{}: {e}", trace.display()))?;
    let mems: Vec<(String, u64)> = sc
        .groups
        .iter()
        .map(|g| (g.name.clone(), g.mem.0))
        .collect();
    let (sim, _) = simulate(sc).map_err(|e| e.to_string())?;
    let errors = compare(&real, &sim, &mems).map_err(|e| format!("{scenario}: {e}"))?;
    let md = markdown(&errors, &trace.display().to_string(), scenario);
    let io = |e: std::io::Error| format!("{}: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(io)?;
    std::fs::write(dir.join("calibration.md"), &md).map_err(io)?;
    let mut csv = String::from("run,vm,t,resident,target\n");
    for (run, set) in [("real", &real), ("sim", &sim)] {
        for (name, s) in set {
            for &(t, r, tg) in &s.points {
                let _ = writeln!(csv, "{run},{name},{t:.3},{r:.0},{tg:.0}");
            }
        }
    }
    std::fs::write(dir.join("calibration.csv"), csv).map_err(io)?;
    let mut series = Vec::new();
    for (name, r) in &real {
        series.push((
            format!("{name} real"),
            r.points.iter().map(|p| (p.0, p.1 / MIB)).collect(),
        ));
        if let Some((_, s)) = sim.iter().find(|(n, _)| n == name) {
            series.push((
                format!("{name} sim"),
                s.points.iter().map(|p| (p.0, p.1 / MIB)).collect(),
            ));
        }
    }
    std::fs::write(
        dir.join("calibration.svg"),
        svg_lines(
            "resident memory per VM: real (recorded) and simulated",
            "MiB",
            &series,
        ),
    )
    .map_err(io)?;
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::Sim;

    const SCENARIO: &str = r#"
seed = 4
duration = "30s"
[host]
budget = "700M"
tick = "500ms"
sample_period = "5s"
[[group]]
name = "a"
mem = "384M"
work = "8s"
exit = true
workload = { kind = "loop", size = "300M", rate = "100M", fill = "50M" }
[[group]]
name = "b"
mem = "384M"
workload = { kind = "hot", hot = "250M", cold = "0", rate = "50M" }
"#;

    /// A trace the simulator writes of a scenario, set beside the same scenario, has no error:
    /// the same allocation at every tick and the same stop.
    #[test]
    fn a_run_beside_its_own_trace_has_no_error() {
        use std::sync::{Arc, Mutex};
        struct Shared(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Shared {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sc = Scenario::parse("c.toml", SCENARIO).unwrap();
        let buf = Arc::new(Mutex::new(Vec::new()));
        let mut s = Sim::new(sc.clone());
        s.trace = Some(Box::new(Shared(buf.clone())));
        s.run(None).unwrap();
        let text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
        // The trace names VMs as the simulator does (a-0); a real host names them a.
        let text = text.replace("\"a-0\"", "\"a\"").replace("\"b-0\"", "\"b\"");
        let (real, _) = read_trace(text.as_bytes()).unwrap();
        assert_eq!(real.len(), 2);
        assert!(real[0].1.stopped.is_some(), "a stops and leaves the trace");
        let (sim, _) = simulate(sc).unwrap();
        let mems = [("a".to_owned(), 384u64 << 20), ("b".to_owned(), 384 << 20)];
        let errs = compare(&real, &sim, &mems).unwrap();
        // A trace line holds the observation before the tick; the simulated series the state
        // after it: one tick apart, so compare against the series shifted by a tick.
        for e in &errs {
            assert!(e.rms / e.mem < 0.25, "{e:?}");
            let (r, s) = (e.real_stop.unwrap_or(0.0), e.sim_stop.unwrap_or(0.0));
            assert!((r - s).abs() <= 0.5 + 1e-9, "{e:?}");
        }
        // A VM that differs is seen: b with half its working set in the scenario.
        let other = Scenario::parse("c.toml", &SCENARIO.replace("250M", "60M")).unwrap();
        let (sim2, _) = simulate(other).unwrap();
        let errs2 = compare(&real, &sim2, &mems).unwrap();
        assert!(errs2[1].rms > errs[1].rms * 2.0 + 1.0, "{errs:?} {errs2:?}");
        assert!(markdown(&errs, "t", "c").contains("| a | 384 |"));
    }

    #[test]
    fn bad_traces_and_unknown_vms_are_refused_with_the_line_or_the_name() {
        let e = read_trace("{}\n".as_bytes()).unwrap_err();
        assert!(e.starts_with("line 1:"), "{e}");
        assert_eq!(
            read_trace("".as_bytes()).unwrap_err(),
            "no VMs in the trace"
        );
        let real = vec![("zzz".to_owned(), Series::default())];
        let e = compare(&real, &[], &[]).unwrap_err();
        assert!(e.contains("zzz"), "{e}");
    }
}
