//! How an experiment of phases runs: the host taken, what every run shares set up (data disks,
//! host swap, QEMU's overhead), every configuration and step run repetition by repetition in
//! the harness's order (`vm`), then `results.csv`, `report.md` and the figure for what the
//! experiment measures.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::configs::{Config, GuestSwap, Hv};
use super::experiment::{DataDisk, Experiment, Measure, Step};
use super::vm::control::{log_prefix, RunSpec};
use super::vm::result::RunResult;
use super::{figure, recovery, report, tracked, vm, workingset};
use crate::args::BenchArgs;
use crate::harness::setup::{self, host_swap, qemu_overhead};
use crate::harness::{order, teardown, Bench};
use crate::report::write_report;

/// The tmpfs a guest swap disk in host memory is made on ([`GuestSwap::InMemory`]).
const RAMDISK: &str = "/dev/shm";

/// What the flags ask of an experiment of phases, checked.
pub struct PhasesPlan {
    pub exp: Experiment,
    pub reps: u32,
    pub configs: Vec<&'static Config>,
    pub reference: &'static str,
}

fn mkdisk(exe: &Path, path: &Path, disk: &DataDisk) -> Result<(), String> {
    setup::mkdisk(exe, path, disk.size_mb, Some(&disk.files))
}

/// A benchmark of phases, a time series or a release: set up, every run, the outputs; returns
/// the runs (none when interrupted before the first).
pub fn run(
    args: &BenchArgs,
    bench: &Bench,
    plan: &PhasesPlan,
) -> Result<Vec<report::Record>, String> {
    // Held until the bench ends: a second bench must not clean up this one's swap file.
    let _only_bench = setup::take_host(&args.swap_file)?;
    let Some(prepared) = prepare(args, bench, plan)? else {
        return Ok(Vec::new());
    };
    let runner = Runner {
        args,
        bench,
        plan,
        prepared,
    };
    let started = Instant::now();
    let records = runner.run_all()?;
    runner.write_outputs(&records, started)?;
    Ok(records)
}

/// What every run of a benchmark shares, set up once before the first.
struct Prepared {
    /// How the runs were set up, one line each, for the report.
    notes: Vec<String>,
    /// Per step: the read-only data image every run shares, or none (no disk, or a fresh one
    /// per run because the guest writes to it).
    shared_disks: Vec<Option<PathBuf>>,
    /// QEMU's RSS outside guest RAM, measured when a QEMU configuration has a limit.
    qemu_overhead: Option<u64>,
}

/// Sets up what the runs share: the work directory, shared data disks, the host swap file and
/// `vm.swappiness`, QEMU's overhead; `None` when interrupted meanwhile.
fn prepare(args: &BenchArgs, bench: &Bench, plan: &PhasesPlan) -> Result<Option<Prepared>, String> {
    let (exp, exe) = (&plan.exp, &bench.exe);
    let mut notes = Vec::new();
    let shared_disks = shared_disks(exe, &bench.work, exp)?;
    if plan.configs.iter().any(|c| c.needs_host_swap()) {
        notes.extend(host_swap(args)?);
    }
    let qemu_limited = plan
        .configs
        .iter()
        .any(|c| c.hv == Hv::Qemu && c.needs_host_swap());
    let qemu_overhead = if qemu_limited {
        let (o, note) = qemu_overhead(exe, exp.mem)?;
        notes.push(note);
        Some(o)
    } else {
        None
    };
    if teardown::interrupted() {
        return Ok(None);
    }
    notes.extend(config_notes(plan));
    Ok(Some(Prepared {
        notes,
        shared_disks,
        qemu_overhead,
    }))
}

/// Disks: one read-only image shared by all runs, or a fresh one per run when written to.
fn shared_disks(exe: &Path, work: &Path, exp: &Experiment) -> Result<Vec<Option<PathBuf>>, String> {
    let shared = |(i, step): (usize, &Step)| match &step.disk {
        Some(d) if !d.writable => {
            let p = work.join(format!("data-{i}.img"));
            eprintln!("memvisor bench: making {} ({})", p.display(), d.files);
            mkdisk(exe, &p, d)?;
            teardown::track_file(p.clone());
            Ok(Some(p))
        }
        _ => Ok(None),
    };
    exp.steps.iter().enumerate().map(shared).collect()
}

/// The report's notes on how balloons, free page reporting and sampling were set up.
fn config_notes(plan: &PhasesPlan) -> Vec<String> {
    let mut notes = Vec::new();
    if plan.configs.iter().any(|c| c.balloon) {
        notes.push("balloon configurations: the balloon target (guest RAM minus the limit) is set as soon as the VM's socket answers, i.e. while the guest boots; the guest kit's driver inflates on its next tick (every 5 ms of page activity)".into());
    }
    if plan
        .configs
        .iter()
        .any(|c| c.balloon_device() && !c.balloon)
    {
        notes.push("free page reporting configurations: the balloon device is present and never inflated; the guest kit's driver reports up to 16 free 2 MiB runs every 100 ms (its defaults report=1 report_order=9), and the pager drops them without writing them".into());
    }
    if let Measure::Series(s) = &plan.exp.measure {
        notes.push(format!(
            "working-set sampling: `memvisor run {}`; the harness polls `GET /stats` on the VM's API socket every {} s",
            s.run_flags().join(" "),
            s.every.as_secs_f64()
        ));
    }
    notes
}

/// A benchmark once set up.
struct Runner<'a> {
    args: &'a BenchArgs,
    bench: &'a Bench,
    plan: &'a PhasesPlan,
    prepared: Prepared,
}

impl Runner<'_> {
    /// Every configuration and step, repetition by repetition, each repetition running every
    /// configuration once (in the order of `order::of_rep`: every configuration runs in every
    /// position and after every other), until all ran or the bench is interrupted.
    fn run_all(&self) -> Result<Vec<report::Record>, String> {
        let (exp, plan) = (&self.plan.exp, self.plan);
        let steps = |_| exp.steps.iter().enumerate().collect::<Vec<_>>();
        let what =
            |(_, step): &(usize, &Step), c: &&Config| format!("{} {}", c.name, step.workload);
        order::interleave(exp.name, plan.reps, steps, &plan.configs, what, |t| {
            let ((si, _), c, rep) = (*t.cell, *t.config, t.rep);
            let result = self.run_one(rep, si, c, &t.label)?;
            let took = result.elapsed_ms / 1e3;
            let why = if result.reason.is_empty() {
                String::new()
            } else {
                format!(": {}", result.reason)
            };
            t.say(&format!("{} in {took:.1} s{why}", result.status.as_str()));
            Ok(vec![report::Record {
                step: si,
                config: c,
                rep,
                result,
            }])
        })
    }

    /// Step `si` of repetition `rep` on configuration `c`, with its own disks made before and
    /// removed after.
    fn run_one(
        &self,
        rep: u32,
        si: usize,
        c: &'static Config,
        label: &str,
    ) -> Result<RunResult, String> {
        let (exp, setup, args) = (&self.plan.exp, &self.prepared, self.args);
        let step = &exp.steps[si];
        let (exe, work) = (&self.bench.exe, &self.bench.work);
        let disk = match (&step.disk, &setup.shared_disks[si]) {
            (Some(_), Some(p)) => Some((p.clone(), false)),
            (Some(d), None) => {
                let p = work.join(format!("data-{si}-{}.img", c.name));
                teardown::track_file(p.clone());
                mkdisk(exe, &p, d)?;
                Some((p, true))
            }
            _ => None,
        };
        // A fresh guest swap disk per run (sparse: only its header is written), in host memory
        // for a configuration that swaps to a ramdisk.
        let guest_swap = match step.guest_swap_mb {
            Some(mb) => {
                let name = format!("guest-swap-{}.img", c.name);
                let p = match c.guest_swap {
                    GuestSwap::OnDisk => work.join(name),
                    GuestSwap::InMemory => Path::new(RAMDISK)
                        .join(format!("memvisor-bench-{}-{name}", std::process::id())),
                };
                teardown::track_file(p.clone());
                setup::mkdisk(exe, &p, mb, None)?;
                Some(p)
            }
            None => None,
        };
        let spec = RunSpec {
            exe,
            config: c,
            step,
            mem: c.guest_ram(exp.mem, exp.limit),
            limit: exp.limit,
            disk: disk.clone(),
            work,
            log_prefix: log_prefix(&self.bench.out, c.name, step.workload, rep),
            qemu_overhead: setup.qemu_overhead,
            host_swap_file: &args.swap_file,
            timeout: self.bench.timeout,
            measure: &exp.measure,
            guest_swap: guest_swap.clone(),
            label: label.to_owned(),
        };
        let result = vm::run(&spec)?;
        if let Some(p) = guest_swap {
            // A run killed with indirections on leaves the image's log too.
            let _ = std::fs::remove_file(memvisor_pager::indirect::log_path(&p));
            let _ = std::fs::remove_file(p);
        }
        if let Some((p, true)) = disk {
            let _ = std::fs::remove_file(p);
        }
        Ok(result)
    }

    /// Writes `results.csv`, `report.md` and the figure (SVG and PNG) for the experiment's kind,
    /// and prints the report.
    fn write_outputs(&self, records: &[report::Record], started: Instant) -> Result<(), String> {
        let (exp, plan, reps) = (&self.plan.exp, self.plan, self.plan.reps);
        let (env, notes) = (self.bench.env.clone(), self.prepared.notes.clone());
        let meta = report::Meta {
            experiment: exp,
            reps,
            reference: plan.reference,
            configs: &plan.configs,
            notes,
            env,
        };
        let (out, name) = (&self.bench.out, exp.name);
        match &exp.measure {
            Measure::Series(s) => write_report(
                out,
                name,
                workingset::report::csv(name, s, records),
                |svg| workingset::report::plot(svg, name, s, records),
                workingset::report::markdown(&meta, s, records),
            ),
            Measure::GiveBack(r) => {
                let runs = recovery::report::load(out, exp, records);
                write_report(
                    out,
                    name,
                    recovery::report::csv(exp, r, &runs),
                    |svg| recovery::report::plot(svg, exp, r, &plan.configs, &runs),
                    recovery::report::markdown(&meta, r, &runs),
                )
            }
            Measure::Tracked(_) => write_report(
                out,
                name,
                tracked::report::csv(name, records),
                |svg| tracked::report::plot(svg, exp, records),
                report::markdown_with(&meta, records, &|s, si| {
                    tracked::report::section(s, &plan.configs, records, si);
                }),
            ),
            Measure::Phases | Measure::Sweep(_) => write_report(
                out,
                name,
                report::csv(exp, records),
                |svg| figure::write(svg, exp, &plan.configs, records),
                report::markdown(&meta, records),
            ),
        }?;
        eprintln!(
            "memvisor bench: wrote {}, {} and {} in {:.0} s",
            out.join("results.csv").display(),
            out.join("report.md").display(),
            out.join(format!("{name}.svg")).display(),
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }
}
