//! The plot of an experiment of phases: for each workload, the median time of
//! each phase per configuration (VSwapper Fig. 9a), the bytes written to swap per phase as
//! 512-byte sectors (Fig. 9d), and the host's faults that read a page in per phase in the
//! hypervisor's context (Fig. 9b) and in the guest's (Fig. 9c). One line and marker per
//! configuration; a configuration whose runs all died before a phase has no point there.

use std::path::Path;

use crate::families::phases::configs::Config;
use crate::families::phases::experiment::Experiment;
use crate::families::phases::report::{measured, phase_ms, swap_written, Record};
use crate::families::phases::vm::result::{Phase, RunStatus};
use crate::report::figure::{color, ys, Axis, Figure, Legend, Line, Panel};
use crate::report::numbers::summary;

/// The median of `f` over each phase of `step` (`None`: not measured in that phase), one line
/// per configuration; a configuration whose runs did not all end well says how many did.
fn lines(
    exp: &Experiment,
    configs: &[&'static Config],
    records: &[Record],
    step: usize,
    f: &dyn Fn(&Phase) -> Option<f64>,
) -> Vec<Line> {
    configs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let phases = exp.steps[step].phases.iter().enumerate();
            let pts = phases.filter_map(|(x, ph)| {
                let m = summary(&mut measured(records, step, c.name, ph, f))?.0;
                Some((x as f64 + 1.0, m))
            });
            let runs = records
                .iter()
                .filter(|r| r.step == step && r.config.name == c.name);
            let (ok, all) = runs.fold((0, 0), |(ok, all), r| {
                (ok + usize::from(r.result.status == RunStatus::Ok), all + 1)
            });
            let name = if ok == all {
                c.name.to_owned()
            } else {
                format!("{} ({ok}/{all} ok)", c.name)
            };
            Line::new(name, color(i), 2, pts.collect()).marked()
        })
        .collect()
}

/// Writes `<out>/<experiment>.svg` and `.png`.
pub fn write(
    path: &Path,
    exp: &Experiment,
    configs: &[&'static Config],
    records: &[Record],
) -> Result<(), String> {
    let mut panels = Vec::new();
    for (si, step) in exp.steps.iter().enumerate() {
        let times = lines(exp, configs, records, si, &|p| Some(phase_ms(p) / 1e3));
        let sectors = lines(exp, configs, records, si, &|p| {
            Some(swap_written(p) as f64 / 512.0)
        });
        let (name, workload, phases) = (exp.name, step.workload, &step.phases);
        let title = format!("{name} ({workload}): median guest time per phase (log scale)");
        panels.push(panel(title, "seconds", phases, times, true));
        let title = format!("{name} ({workload}): sectors written to swap per phase (host swap + hypervisor writes)");
        panels.push(panel(title, "512-byte sectors", phases, sectors, false));
        let host = lines(exp, configs, records, si, &|p| {
            p.faults.map(|f| f.vmm as f64)
        });
        let title = format!("{name} ({workload}): host faults that read a page, in the hypervisor's context, per phase");
        panels.push(panel(title, "faults", phases, host, false));
        let guest = lines(exp, configs, records, si, &|p| {
            p.faults.map(|f| f.guest as f64)
        });
        let title = format!(
            "{name} ({workload}): host faults that read a page, in the guest's context, per phase"
        );
        panels.push(panel(title, "faults", phases, guest, false));
    }
    let height = u32::try_from(exp.steps.len()).unwrap_or(1) * 1600;
    Figure::column((1100, height), panels).write(path)
}

/// A panel of the phases of a step, on a log scale or from zero.
fn panel(title: String, y_desc: &str, phases: &[String], lines: Vec<Line>, log: bool) -> Panel {
    let ymax = ys(&lines).fold(0.0f64, f64::max).max(1.0) * 1.1;
    let ymin = ys(&lines).filter(|&v| v > 0.0).fold(ymax, f64::min) * 0.8;
    let x = Axis::linear(0.5, phases.len() as f64 + 0.5);
    let y = if log && ymin < ymax {
        Axis::log(ymin, ymax)
    } else {
        Axis::linear(0.0, ymax)
    };
    Panel {
        lines,
        legend: Legend::Margin(260),
        x_names: phases.to_vec(),
        ..Panel::new(title, "", y_desc, x, y)
    }
}

#[cfg(test)]
mod tests {
    use crate::families::figures::{of, Family};
    use crate::families::phases::catalog::find;
    use crate::report::figure::color;

    #[test]
    fn every_default_configuration_gets_its_own_colour() {
        for name in of(Family::Phases) {
            let n = find(name, crate::args::Scale::Full).unwrap().configs.len();
            let colors: Vec<_> = (0..n).map(color).collect();
            for (i, a) in colors.iter().enumerate() {
                assert!(!colors[i + 1..].contains(a), "{name}: colour {i} twice");
            }
        }
    }
}
