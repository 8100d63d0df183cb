//! The outputs of `memvisor bench consolidate`: `results.csv` (one row per VM and run),
//! `report.md` (mean completion time against N per configuration, with ratios to the paper's
//! reference), `consolidate.svg`, and per run of `memvisor host` each VM's allocation over time
//! (`allocation.csv`, `allocation.svg`).

use std::fmt::Write as _;
use std::path::Path;

use memvisor_api::HostSample;
use plotters::prelude::*;

use crate::experiments::consolidate::{Kind, BUDGET, CMDLINE, INTERVAL, MEM, REFERENCE};
use crate::output::csv;
use crate::run::consolidate::Record;

/// `allocation.csv` (one row per VM per tick) and `allocation.svg`/`.png` (each VM's resident
/// memory and target over the run) in a run's directory.
pub fn write_allocation(dir: &Path, history: &[HostSample]) -> Result<(), String> {
    let mut csv = String::from("seconds,vm,state,resident_bytes,target_bytes,balloon_bytes,swapped_bytes,limit_bytes,free_bytes,free_state\n");
    let mut names: Vec<String> = Vec::new();
    for t in history {
        for v in &t.vms {
            let _ = writeln!(
                csv,
                "{:.2},{},{:?},{},{},{},{},{},{},{:?}",
                t.seconds,
                v.name,
                v.state,
                v.resident_bytes,
                v.target_bytes,
                v.balloon_bytes,
                v.swapped_bytes,
                v.limit_bytes,
                t.free_bytes,
                t.free_state
            );
            if !names.contains(&v.name) {
                names.push(v.name.clone());
            }
        }
    }
    std::fs::write(dir.join("allocation.csv"), csv).map_err(|e| e.to_string())?;
    let end = history.last().map_or(1.0, |t| t.seconds).max(1.0);
    crate::output::plot::svg_and_png!(&dir.join("allocation.svg"), (900, 450), |root| {
        draw_allocation(root, history, &names, end)
    })
}

fn draw_allocation<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    history: &[HostSample],
    names: &[String],
    end: f64,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    const MIB: f64 = 1048576.0;
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    #[allow(clippy::cast_precision_loss)]
    let top = (MEM as f64 / MIB) * 1.1;
    let mut chart = ChartBuilder::on(root)
        .caption(
            "allocation over time: resident (solid) and target (dashed) per VM",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(0f64..end, 0f64..top)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("MiB")
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, name) in names.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        #[allow(clippy::cast_precision_loss)]
        let series = |f: &dyn Fn(&memvisor_api::VmSample) -> u64| -> Vec<(f64, f64)> {
            history
                .iter()
                .filter_map(|t| {
                    t.vms
                        .iter()
                        .find(|v| &v.name == name)
                        .map(|v| (t.seconds, f(v) as f64 / MIB))
                })
                .collect()
        };
        chart
            .draw_series(LineSeries::new(
                series(&|v| v.resident_bytes),
                color.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(DashedLineSeries::new(
                series(&|v| v.target_bytes),
                6,
                4,
                color.into(),
            ))
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}

/// Mean completion seconds of `config` with `n` VMs, over the VMs that finished, and how many
/// did not.
fn mean(records: &[Record], config: &str, n: u32) -> Option<(f64, usize)> {
    let mine: Vec<&Record> = records
        .iter()
        .filter(|r| r.config == config && r.n == n)
        .collect();
    let done: Vec<f64> = mine.iter().filter_map(|r| r.secs).collect();
    if done.is_empty() {
        return None;
    }
    #[allow(clippy::cast_precision_loss)]
    let m = done.iter().sum::<f64>() / done.len() as f64;
    Some((m, mine.len() - done.len()))
}

pub fn write_outputs(
    out: &Path,
    records: &[Record],
    configs: &[(&'static str, Kind)],
    ns: &[u32],
) -> Result<(), String> {
    let mut csv = String::from("config,vms,rep,vm,seconds,ok,note\n");
    for r in records {
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{},{}",
            r.config,
            r.n,
            r.rep,
            r.vm,
            r.secs.map_or(String::new(), |s| format!("{s:.2}")),
            u8::from(r.ok),
            csv::quoted(&r.note.replace('"', "'"))
        );
    }
    let w = |name: &str, text: &str| {
        std::fs::write(out.join(name), text).map_err(|e| format!("{name}: {e}"))
    };
    w("results.csv", &csv)?;
    let mut md = format!(
        "# consolidate (VSwapper §5.2, Fig. 14)\n\nN VMs of {} MiB each run `mapreduce {CMDLINE}`, started {} s apart, in a {} MiB budget. Mean completion time in seconds (the guest's own time for the whole job) over the VMs that finished; in brackets the ratio to `{REFERENCE}` (the paper: balloon only, baseline and VSwapper are 0.96–1.84x, 0.96–1.79x and 0.97–1.11x the combination); `n failed` counts VMs that did not finish.\n\n| VMs |",
        MEM >> 20,
        INTERVAL.as_secs(),
        BUDGET >> 20
    );
    for (c, _) in configs {
        let _ = write!(md, " {c} |");
    }
    md.push_str("\n|---|");
    for _ in configs {
        md.push_str("---|");
    }
    md.push('\n');
    for &n in ns {
        let _ = write!(md, "| {n} |");
        let reference = mean(records, REFERENCE, n).map(|m| m.0);
        for (c, _) in configs {
            match mean(records, c, n) {
                None => md.push_str(" – |"),
                Some((m, failed)) => {
                    let _ = write!(md, " {m:.1}");
                    if let Some(r) = reference.filter(|_| *c != REFERENCE) {
                        let _ = write!(md, " ({:.2}x)", m / r);
                    }
                    if failed > 0 {
                        let _ = write!(md, ", {failed} failed");
                    }
                    md.push_str(" |");
                }
            }
        }
        md.push('\n');
    }
    md.push_str("\n![consolidate](consolidate.png)\n\nQEMU's guests get a static balloon at their share of the budget (less 24 MiB) when N VMs of their size do not fit; memvisor's are run by `memvisor host` with its defaults (idle tax 0.75, 5 s sampling). Logs of every VM are under `logs/`.\n");
    w("report.md", &md)?;
    plot(&out.join("consolidate.svg"), records, configs, ns)
}

fn plot(
    path: &Path,
    records: &[Record],
    configs: &[(&'static str, Kind)],
    ns: &[u32],
) -> Result<(), String> {
    let top = configs
        .iter()
        .flat_map(|(c, _)| ns.iter().filter_map(|&n| mean(records, c, n).map(|m| m.0)))
        .fold(1.0f64, f64::max);
    let right = ns.iter().copied().max().unwrap_or(1);
    crate::output::plot::svg_and_png!(path, (800, 500), |root| draw(
        root, records, configs, ns, top, right
    ))
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    records: &[Record],
    configs: &[(&'static str, Kind)],
    ns: &[u32],
    top: f64,
    right: u32,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(root)
        .caption(
            "consolidate: mean completion time against VMs",
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0u32..right + 1, 0f64..top * 1.15)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("VMs")
        .y_desc("seconds")
        .draw()
        .map_err(|e| e.to_string())?;
    let colors = [
        RGBColor(230, 97, 1),
        RGBColor(94, 60, 153),
        RGBColor(27, 120, 55),
        RGBColor(0, 0, 0),
        RGBColor(33, 102, 172),
    ];
    for (i, (c, _)) in configs.iter().enumerate() {
        let color = colors[i % colors.len()];
        let pts: Vec<(u32, f64)> = ns
            .iter()
            .filter_map(|&n| mean(records, c, n).map(|m| (n, m.0)))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(*c)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::consolidate::CONFIGS;

    fn rec(config: &str, n: u32, secs: Option<f64>) -> Record {
        Record {
            config: config.into(),
            n,
            rep: 1,
            vm: 1,
            secs,
            ok: secs.is_some(),
            note: String::new(),
        }
    }

    #[test]
    fn means_ratios_and_failures_reach_the_report() {
        let dir = tempfile::tempdir().unwrap();
        let records = vec![
            rec("vswapper-balloon", 2, Some(10.0)),
            rec("vswapper-balloon", 2, Some(12.0)),
            rec("pager", 2, Some(22.0)),
            rec("pager", 2, None),
        ];
        let configs: Vec<_> = CONFIGS
            .iter()
            .filter(|(c, _)| *c == "pager" || *c == REFERENCE)
            .copied()
            .collect();
        write_outputs(dir.path(), &records, &configs, &[2]).unwrap();
        let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
        assert!(md.contains("| 2 | 22.0 (2.00x), 1 failed | 11.0 |"), "{md}");
        let csv = std::fs::read_to_string(dir.path().join("results.csv")).unwrap();
        assert_eq!(csv.lines().count(), 5);
        assert!(dir.path().join("consolidate.svg").exists());
    }
}
