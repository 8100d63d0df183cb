//! `memvisor bench seqread|alloc|overhead|workingset|recovery|doublepaging`: every configuration
//! run repetition by repetition on the same guest kit ELF, disks and memory sizes, then
//! `results.csv`, `report.md` and the figure.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::args::{BenchArgs, Outcome};
use crate::configs::{self, Config};
use crate::experiments;
use crate::harness::setup::{self, host_swap, qemu_overhead};
use crate::harness::{order, readings, teardown, vm};
use crate::output::{plot, recovery, report, workingset};

/// `memvisor bench EXPERIMENT` for the experiments of `experiments::find`.
pub fn run(args: &BenchArgs) -> Outcome {
    let plan = match plan(args) {
        Ok(p) => p,
        Err(BadInput(m)) => {
            eprintln!("memvisor bench: {m}");
            return Outcome::BadInput;
        }
    };
    teardown::catch_signals();
    let guard = teardown::Guard;
    let outcome = bench(args, &plan);
    drop(guard);
    let _ = std::fs::remove_dir(plan.out.join("work"));
    match outcome {
        Ok(()) if teardown::interrupted() => {
            eprintln!("memvisor bench: interrupted; partial results written, host cleaned up");
            Outcome::Interrupted
        }
        Ok(()) => Outcome::Done,
        Err(e) => {
            eprintln!("memvisor bench: {e}");
            Outcome::Failed
        }
    }
}

/// A check of the flags that failed: one line, exit status 2.
struct BadInput(String);

struct Plan {
    exp: experiments::Experiment,
    reps: u32,
    configs: Vec<&'static Config>,
    reference: &'static str,
    out: PathBuf,
}

/// The experiment, repetitions, configurations, reference and output directory the flags ask
/// for, checked in that order.
fn plan(a: &BenchArgs) -> Result<Plan, BadInput> {
    let exp = experiments::find(&a.experiment, a.scale).ok_or_else(|| {
        BadInput(format!(
            "unknown experiment '{}'; memvisor bench runs: {}, {}, consolidate, balance, swapin, reclaimdelay, dwell, sharing, zeroboot",
            a.experiment,
            experiments::NAMES.join(", "),
            crate::families::host::NAMES.join(", ")
        ))
    })?;
    let reps = a.reps.unwrap_or_else(|| exp.default_reps());
    if reps == 0 {
        return Err(BadInput("--reps 0: give at least one repetition".into()));
    }
    let configs = configs_of(a, &exp)?;
    check_kind(a, &exp, &configs)?;
    let reference = reference_of(a, &exp, &configs)?;
    let out = crate::harness::out_dir(a, exp.name).map_err(BadInput)?;
    if a.timeout == 0 {
        return Err(BadInput("--timeout 0: give seconds, at least 1".into()));
    }
    Ok(Plan {
        exp,
        reps,
        configs,
        reference,
        out,
    })
}

/// The configurations of `--configs`, or the experiment's; each once, in the order given.
fn configs_of(
    a: &BenchArgs,
    exp: &experiments::Experiment,
) -> Result<Vec<&'static Config>, BadInput> {
    let names: Vec<String> = if a.configs.is_empty() {
        exp.configs.iter().map(|s| (*s).to_owned()).collect()
    } else {
        a.configs.clone()
    };
    let mut configs = Vec::new();
    for n in &names {
        let c = configs::find(n.trim()).ok_or_else(|| {
            BadInput(format!(
                "unknown configuration '{n}'; known: {}",
                configs::CONFIGS
                    .iter()
                    .map(|c| c.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        if !configs.iter().any(|x: &&Config| x.name == c.name) {
            configs.push(c);
        }
    }
    Ok(configs)
}

/// What the kind of experiment asks of the configurations and flags.
fn check_kind(
    a: &BenchArgs,
    exp: &experiments::Experiment,
    configs: &[&'static Config],
) -> Result<(), BadInput> {
    if let experiments::Kind::Series(_) = exp.kind {
        // The working-set estimate is the pager's: only configurations where it holds guest RAM
        // have one, and nothing is compared, so there is no reference.
        if let Some(c) = configs.iter().find(|c| !c.pager_holds_ram()) {
            return Err(BadInput(format!(
                "{} measures memvisor's working-set estimate, which only its pager makes; '{}' has none (QEMU has no estimator); give configurations where memvisor's pager holds guest RAM: {}",
                exp.name,
                c.name,
                configs::CONFIGS
                    .iter()
                    .filter(|c| c.pager_holds_ram())
                    .map(|c| c.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        if let Some(r) = &a.reference {
            return Err(BadInput(format!(
                "--reference {r}: {} compares no configurations (no ratios); leave it out",
                exp.name
            )));
        }
    }
    if let experiments::Kind::Release(_) = exp.kind {
        // Memory is given back by raising a limit: a configuration without one has nothing
        // to give back.
        if let Some(c) = configs.iter().find(|c| c.limit == configs::Limit::None) {
            return Err(BadInput(format!(
                "{} gives memory back by raising the VM's limit; '{}' has no limit; give configurations with one, e.g. {}",
                exp.name,
                c.name,
                experiments::RECOVERY.join(", ")
            )));
        }
    }
    Ok(())
}

/// The configuration ratios are taken against: `--reference`, or the experiment's; for a time
/// series (and a release whose reference is not run) the first configuration.
fn reference_of(
    a: &BenchArgs,
    exp: &experiments::Experiment,
    configs: &[&'static Config],
) -> Result<&'static str, BadInput> {
    let default_missing = !configs.iter().any(|c| c.name == exp.reference);
    let want = match (&a.reference, configs.first()) {
        (None, Some(c))
            if match exp.kind {
                experiments::Kind::Series(_) => true,
                experiments::Kind::Release(_) => default_missing,
                experiments::Kind::Phases => false,
            } =>
        {
            c.name
        }
        _ => a.reference.as_deref().unwrap_or(exp.reference),
    };
    configs
        .iter()
        .find(|c| c.name == want)
        .map(|c| c.name)
        .ok_or_else(|| {
            BadInput(format!(
                "the reference configuration '{want}' is not among those run; add it to --configs or pick --reference"
            ))
        })
}

fn mkdisk(exe: &Path, path: &Path, disk: &experiments::DataDisk) -> Result<(), String> {
    setup::mkdisk(exe, path, disk.size_mb, Some(&disk.files))
}

/// A benchmark of phases, a time series or a release: set up, every run, the outputs.
fn bench(args: &BenchArgs, plan: &Plan) -> Result<(), String> {
    let exe = crate::harness::memvisor_exe()?;
    // Held until the bench ends: a second bench must not clean up this one's swap file.
    let _only_bench = teardown::lock(&args.swap_file)?;
    for line in teardown::preflight(&args.swap_file)? {
        eprintln!("memvisor bench: {line} (left by an earlier run)");
    }
    let Some(setup) = set_up(args, plan, exe)? else {
        return Ok(());
    };
    let b = Bench { args, plan, setup };
    let started = Instant::now();
    let records = b.run_all(started)?;
    b.write_outputs(&records, started)
}

/// What every run of a benchmark shares, set up once before the first.
struct Setup {
    exe: PathBuf,
    /// Disk images, sockets and the pager's swap files, under `--out`.
    work: PathBuf,
    env: Vec<(String, String)>,
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
fn set_up(args: &BenchArgs, plan: &Plan, exe: PathBuf) -> Result<Option<Setup>, String> {
    let exp = &plan.exp;
    let work = plan.out.join("work");
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let env = readings::environment(&plan.out, "qemu-system-x86_64");
    let mut notes = Vec::new();
    let shared_disks = shared_disks(&exe, &work, exp)?;
    if plan.configs.iter().any(|c| c.needs_host_swap()) {
        notes.extend(host_swap(args)?);
    }
    let qemu_limited = plan
        .configs
        .iter()
        .any(|c| c.hv == configs::Hv::Qemu && c.needs_host_swap());
    let qemu_overhead = if qemu_limited {
        let (o, note) = qemu_overhead(&exe, exp.mem)?;
        notes.push(note);
        Some(o)
    } else {
        None
    };
    if teardown::interrupted() {
        return Ok(None);
    }
    notes.extend(config_notes(plan));
    Ok(Some(Setup {
        exe,
        work,
        env,
        notes,
        shared_disks,
        qemu_overhead,
    }))
}

/// Disks: one read-only image shared by all runs, or a fresh one per run when written to.
fn shared_disks(
    exe: &Path,
    work: &Path,
    exp: &experiments::Experiment,
) -> Result<Vec<Option<PathBuf>>, String> {
    let mut shared_disks: Vec<Option<PathBuf>> = Vec::new();
    for (i, step) in exp.steps.iter().enumerate() {
        shared_disks.push(match &step.disk {
            Some(d) if !d.writable => {
                let p = work.join(format!("data-{i}.img"));
                eprintln!("memvisor bench: making {} ({})", p.display(), d.files);
                mkdisk(exe, &p, d)?;
                teardown::track_file(p.clone());
                Some(p)
            }
            _ => None,
        });
    }
    Ok(shared_disks)
}

/// The report's notes on how balloons, free page reporting and sampling were set up.
fn config_notes(plan: &Plan) -> Vec<String> {
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
    if let experiments::Kind::Series(s) = &plan.exp.kind {
        notes.push(format!(
            "working-set sampling: `memvisor run {}`; the harness polls `GET /stats` on the VM's API socket every {} s",
            s.run_flags().join(" "),
            s.every.as_secs_f64()
        ));
    }
    notes
}

/// A benchmark once set up.
struct Bench<'a> {
    args: &'a BenchArgs,
    plan: &'a Plan,
    setup: Setup,
}

impl Bench<'_> {
    /// Every configuration and step, repetition by repetition, each repetition running every
    /// configuration once (in the order of `order::of_rep`: every configuration runs in every
    /// position and after every other), until all ran or the bench is interrupted.
    fn run_all(&self, started: Instant) -> Result<Vec<report::Record>, String> {
        let (exp, plan) = (&self.plan.exp, self.plan);
        let reps = plan.reps;
        let total = u32::try_from(plan.configs.len() * exp.steps.len()).unwrap_or(u32::MAX) * reps;
        let mut records: Vec<report::Record> = Vec::new();
        let mut n = 0;
        let bar = crate::progress::bar(u64::from(total), "runs");
        bar.set_message(exp.name);
        'reps: for rep in 1..=reps {
            for (si, step) in exp.steps.iter().enumerate() {
                for j in order::of_rep(plan.configs.len(), rep) {
                    let c = plan.configs[j];
                    if teardown::interrupted() {
                        break 'reps;
                    }
                    n += 1;
                    let label = format!(
                        "[{} {n}/{total} rep {rep}/{} {} {}]",
                        exp.name, reps, c.name, step.workload
                    );
                    crate::progress::say(
                        &bar,
                        &format!(
                            "{label} starting ({:.0} s since the bench started)",
                            started.elapsed().as_secs_f64()
                        ),
                    );
                    let result = self.run_one(rep, si, c, &label)?;
                    eprintln!(
                        "{label} {} in {:.1} s{}",
                        result.status.as_str(),
                        result.elapsed_ms / 1e3,
                        if result.reason.is_empty() {
                            String::new()
                        } else {
                            format!(": {}", result.reason)
                        }
                    );
                    records.push(report::Record {
                        step: si,
                        config: c,
                        rep,
                        result,
                    });
                    bar.inc(1);
                }
            }
        }
        bar.finish_and_clear();
        Ok(records)
    }

    /// Step `si` of repetition `rep` on configuration `c`, with its own disks made before and
    /// removed after.
    fn run_one(
        &self,
        rep: u32,
        si: usize,
        c: &'static Config,
        label: &str,
    ) -> Result<vm::RunResult, String> {
        let (exp, setup, args) = (&self.plan.exp, &self.setup, self.args);
        let step = &exp.steps[si];
        let (exe, work) = (&setup.exe, &setup.work);
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
        // A fresh guest swap disk per run (sparse: only its header is written).
        let guest_swap = match step.guest_swap_mb {
            Some(mb) => {
                let p = work.join(format!("guest-swap-{}.img", c.name));
                teardown::track_file(p.clone());
                setup::mkdisk(exe, &p, mb, None)?;
                Some(p)
            }
            None => None,
        };
        let spec = vm::RunSpec {
            exe,
            config: c,
            step,
            mem: exp.mem,
            limit: exp.limit,
            disk: disk.clone(),
            work,
            log_prefix: self
                .plan
                .out
                .join("logs")
                .join(format!("{}-{}-rep{rep}", c.name, step.workload)),
            qemu_overhead: setup.qemu_overhead,
            host_swap_file: &args.swap_file,
            timeout: Duration::from_secs(args.timeout),
            kind: &exp.kind,
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
    fn write_outputs(self, records: &[report::Record], started: Instant) -> Result<(), String> {
        let (exp, plan, reps) = (&self.plan.exp, self.plan, self.plan.reps);
        let (env, notes) = (self.setup.env, self.setup.notes);
        let meta = report::Meta {
            experiment: exp,
            reps,
            reference: plan.reference,
            configs: &plan.configs,
            notes,
            env,
        };
        let csv = plan.out.join("results.csv");
        let md_path = plan.out.join("report.md");
        let svg = plan.out.join(format!("{}.svg", exp.name));
        let (csv_text, md, drawn) = match &exp.kind {
            experiments::Kind::Series(s) => (
                workingset::csv(exp.name, s, records),
                workingset::markdown(&meta, s, records),
                workingset::plot(&svg, exp.name, s, records),
            ),
            experiments::Kind::Release(r) => {
                let runs = recovery::load(&plan.out, exp, records);
                (
                    recovery::csv(exp, r, &runs),
                    recovery::markdown(&meta, r, &runs),
                    recovery::plot(&svg, exp, r, &plan.configs, &runs),
                )
            }
            experiments::Kind::Phases => (
                report::csv(exp, records),
                report::markdown(&meta, records),
                plot::write(&svg, exp, &plan.configs, records),
            ),
        };
        // The report shows its figure (the PNG beside it; the SVG is the same figure, scalable).
        let md = match &drawn {
            Ok(()) => format!("{md}\n![{0}]({0}.png)\n", exp.name),
            Err(_) => md,
        };
        std::fs::write(&csv, csv_text).map_err(|e| format!("{}: {e}", csv.display()))?;
        std::fs::write(&md_path, &md).map_err(|e| format!("{}: {e}", md_path.display()))?;
        if let Err(e) = drawn {
            eprintln!("memvisor bench: cannot draw {}: {e}", svg.display());
        }
        println!("{md}");
        eprintln!(
            "memvisor bench: wrote {}, {} and {} in {:.0} s",
            csv.display(),
            md_path.display(),
            svg.display(),
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }
}
