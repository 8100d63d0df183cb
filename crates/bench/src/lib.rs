//! `memvisor bench`: the papers' experiments on memvisor and QEMU, their runs, CSV, reports and plots.
//!
//! Every experiment runs in one go on the same guest kit ELF, disks and memory sizes, with
//! memvisor (the binary that calls [`run`], found as the current executable) and QEMU as child
//! processes.
//!
//! How a benchmark goes:
//! 1. Check the input (experiment, configurations, repetitions, output directory): bad input is
//!    one line and [`Outcome::BadInput`] (exit status 2).
//! 2. Clean what an earlier run left (its host swap file, `memvisor-*` cgroups of dead
//!    processes), or refuse to start saying what is left and why it cannot go.
//! 3. Set up: data disks (`memvisor mkdisk`), the host swap file and `vm.swappiness` if a
//!    configuration needs host swap, QEMU's overhead measured by a calibration run (printed, and
//!    passed to QEMU runs for their cgroup limit).
//! 4. Run repetition by repetition, each repetition running every configuration once (in an
//!    order rotated per repetition), so drift hits all configurations alike (`runner`).
//! 5. Write `results.csv`, `report.md` and `<experiment>.svg` (`report`, `plot`; for the
//!    time series of `workingset`, `workingset`; for the throughput over time of `recovery`,
//!    `recovery`).
//! 6. Tear down (`teardown`) — also on Ctrl-C, SIGTERM, a crashed guest or an error.

mod configs;
mod experiments;
mod output;
pub mod progress;
mod run;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use configs::Config;
use experiments::Scale;
use output::{plot, recovery, report, workingset};
use run::{consolidate, host, hostexp, swapin, teardown, vm};

/// `memvisor bench` flags.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// The experiment: seqread (VSwapper Fig. 9), alloc (Fig. 10), overhead (no limit),
    /// workingset (ESX Fig. 6), recovery (MemFlex Fig. 5), doublepaging (Tesseract §6), shares (ESX §5.1 on memvisor host),
    /// idletax (ESX §5.2, Fig. 7), consolidate (VSwapper Fig. 14) or swapin (MemFlex Table 1,
    /// Fig. 7).
    pub experiment: String,
    /// Repetitions of every configuration, interleaved (default 3; 2 for recovery and swapin; 1
    /// for workingset, shares, idletax and consolidate).
    #[arg(long)]
    pub reps: Option<u32>,
    /// Configurations to run, comma-separated (default: the experiment's list; for swapin its
    /// modes: pool-proactive, pool-faults, disk-proactive, disk-faults).
    #[arg(long, value_delimiter = ',')]
    pub configs: Vec<String>,
    /// Directory for results.csv, report.md, the plot, logs and disk images (default bench-out/EXPERIMENT).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The configuration ratios are taken against (default: the experiment's, qemu).
    #[arg(long)]
    pub reference: Option<String>,
    /// `full` (the papers' sizes) or `tiny` (seconds; for tests).
    #[arg(long, value_enum, default_value_t = Scale::Full)]
    pub scale: Scale,
    /// The host swap file the harness creates, enables and removes.
    #[arg(long, default_value = "/var/tmp/memvisor-bench.swap")]
    pub swap_file: PathBuf,
    /// Size of the host swap file.
    #[arg(long, default_value = "2G", value_parser = memvisor_api::parse_size)]
    pub swap_size: u64,
    /// vm.swappiness during the run (host-swap configurations' cgroups inherit it; restored after).
    #[arg(long, default_value_t = 100)]
    pub swappiness: u32,
    /// End a run that takes longer than this many seconds (recorded as timeout).
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
    /// consolidate: the numbers of VMs to run, e.g. 1,2,4 (default 1,2,3,4,6).
    #[arg(long, value_delimiter = ',')]
    pub vms: Vec<u32>,
    /// swapin: the sizes of memory to bring back, e.g. 256M,1G (default 256M,512M,1G,2G).
    #[arg(long, value_delimiter = ',', value_parser = memvisor_api::parse_size)]
    pub sizes: Vec<u64>,
}

/// How `memvisor bench` ended; the binary turns it into its exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The benchmark ran (runs killed by the host are recorded, not errors).
    Done,
    /// Ctrl-C or SIGTERM: partial results written, the host cleaned up.
    Interrupted,
    /// Bad input, reported as one line.
    BadInput,
    /// The benchmark could not run (a command, a file, the host), reported as one line.
    Failed,
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

fn plan(a: &BenchArgs) -> Result<Plan, BadInput> {
    let exp = experiments::find(&a.experiment, a.scale).ok_or_else(|| {
        BadInput(format!(
            "unknown experiment '{}'; memvisor bench runs: {}, {}, consolidate, swapin",
            a.experiment,
            experiments::NAMES.join(", "),
            hostexp::NAMES.join(", ")
        ))
    })?;
    let reps = a.reps.unwrap_or_else(|| exp.default_reps());
    if reps == 0 {
        return Err(BadInput("--reps 0: give at least one repetition".into()));
    }
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
    let reference = configs
        .iter()
        .find(|c| c.name == want)
        .map(|c| c.name)
        .ok_or_else(|| {
            BadInput(format!(
                "the reference configuration '{want}' is not among those run; add it to --configs or pick --reference"
            ))
        })?;
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| Path::new("bench-out").join(exp.name));
    std::fs::create_dir_all(out.join("logs"))
        .and_then(|()| std::fs::write(out.join(".write-test"), b""))
        .and_then(|()| std::fs::remove_file(out.join(".write-test")))
        .map_err(|e| {
            BadInput(format!(
                "--out {}: cannot write there ({e}); give a writable directory",
                out.display()
            ))
        })?;
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

fn mkdisk(exe: &Path, path: &Path, disk: &experiments::DataDisk) -> Result<(), String> {
    let st = std::process::Command::new(exe)
        .args(["mkdisk", "data", "--force", "--out"])
        .arg(path)
        .args([
            "--size",
            &format!("{}M", disk.size_mb),
            "--files",
            &disk.files,
        ])
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("cannot run mkdisk: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("mkdisk {} failed ({st})", path.display()))
    }
}

fn mkswap(exe: &Path, path: &Path, mb: u64) -> Result<(), String> {
    let st = std::process::Command::new(exe)
        .args(["mkdisk", "swap", "--force", "--out"])
        .arg(path)
        .args(["--size", &format!("{mb}M")])
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("cannot run mkdisk: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("mkdisk swap {} failed ({st})", path.display()))
    }
}

/// `memvisor bench`.
pub fn run(args: BenchArgs) -> Outcome {
    if args.experiment == "consolidate" {
        return run_consolidate(&args);
    }
    if args.experiment == "swapin" {
        return run_swapin(&args);
    }
    if hostexp::NAMES.contains(&args.experiment.as_str()) {
        return hostexp::run(&args);
    }
    let plan = match plan(&args) {
        Ok(p) => p,
        Err(BadInput(m)) => {
            eprintln!("memvisor bench: {m}");
            return Outcome::BadInput;
        }
    };
    teardown::catch_signals();
    let guard = teardown::Guard;
    let outcome = bench(&args, &plan);
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

/// `memvisor bench consolidate`: many VMs under `memvisor host` (and QEMU with static
/// balloons), see `consolidate.rs`.
fn run_consolidate(args: &BenchArgs) -> Outcome {
    let bad = |m: String| {
        eprintln!("memvisor bench: {m}");
        Outcome::BadInput
    };
    let mut configs = Vec::new();
    for name in &args.configs {
        match consolidate::CONFIGS.iter().find(|(c, _)| *c == name.trim()) {
            Some(&c) => configs.push(c),
            None => {
                return bad(format!(
                    "unknown configuration '{name}' for consolidate; it runs: {}",
                    consolidate::CONFIGS.map(|c| c.0).join(", ")
                ))
            }
        }
    }
    if configs.is_empty() {
        configs = consolidate::CONFIGS.to_vec();
    }
    let ns = if args.vms.is_empty() {
        vec![1, 2, 3, 4, 6]
    } else {
        args.vms.clone()
    };
    if let Some(n) = ns.iter().find(|&&n| n == 0 || n > 16) {
        return bad(format!("--vms {n}: give 1 to 16 VMs"));
    }
    if args.reps == Some(0) {
        return bad("--reps 0: give at least one repetition".into());
    }
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return bad(format!("cannot find memvisor itself: {e}")),
    };
    let setup = consolidate::Setup {
        exe,
        out: args
            .out
            .clone()
            .unwrap_or_else(|| Path::new("bench-out").join("consolidate")),
        ns,
        configs,
        reps: args.reps.unwrap_or(1),
    };
    if let Err(e) = std::fs::create_dir_all(setup.out.join("logs")) {
        return bad(format!("--out {}: {e}", setup.out.display()));
    }
    teardown::catch_signals();
    let outcome = consolidate::run(&setup, &teardown::interrupted);
    finished("consolidate", &setup.out, outcome)
}

/// The exit of an experiment that writes its own report in `out`: 130 when interrupted (its
/// partial results written), the failure's status with its message, or success with where
/// the report is.
fn finished<T>(name: &str, out: &Path, outcome: Result<T, String>) -> Outcome {
    match outcome {
        Ok(_) if teardown::interrupted() => {
            eprintln!("memvisor bench: interrupted; partial results written");
            Outcome::Interrupted
        }
        Ok(_) => {
            eprintln!(
                "memvisor bench: {name} done: {}",
                out.join("report.md").display()
            );
            Outcome::Done
        }
        Err(e) => {
            eprintln!("memvisor bench: {e}");
            Outcome::Failed
        }
    }
}

/// `memvisor bench swapin`: the time to bring swapped memory back, from the pool or the swap
/// file, proactively or by faults (MemFlex Table 1, Fig. 7), see `swapin.rs`.
fn run_swapin(args: &BenchArgs) -> Outcome {
    let bad = |m: String| {
        eprintln!("memvisor bench: {m}");
        Outcome::BadInput
    };
    let mut modes = Vec::new();
    for name in &args.configs {
        match swapin::mode(name.trim()) {
            Some(m) if !modes.contains(&m) => modes.push(m),
            Some(_) => {}
            None => {
                return bad(format!(
                    "unknown mode '{name}' for swapin; it runs: {}",
                    swapin::MODES.map(|m| m.name).join(", ")
                ))
            }
        }
    }
    if modes.is_empty() {
        modes = swapin::MODES.iter().collect();
    }
    let mut sizes = Vec::new();
    for &s in if args.sizes.is_empty() {
        &swapin::DEFAULT_SIZES[..]
    } else {
        &args.sizes[..]
    } {
        match swapin::check_size(s) {
            Ok(s) if !sizes.contains(&s) => sizes.push(s),
            Ok(_) => {}
            Err(m) => return bad(m),
        }
    }
    if args.reps == Some(0) {
        return bad("--reps 0: give at least one repetition".into());
    }
    if let Some(r) = &args.reference {
        return bad(format!(
            "--reference {r}: swapin compares its modes with MemFlex's figures, not with a reference configuration; leave it out"
        ));
    }
    if args.timeout == 0 {
        return bad("--timeout 0: give seconds, at least 1".into());
    }
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return bad(format!("cannot find memvisor itself: {e}")),
    };
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| Path::new("bench-out").join("swapin"));
    if let Err(e) = std::fs::create_dir_all(out.join("logs"))
        .and_then(|()| std::fs::write(out.join(".write-test"), b""))
        .and_then(|()| std::fs::remove_file(out.join(".write-test")))
    {
        return bad(format!(
            "--out {}: cannot write there ({e}); give a writable directory",
            out.display()
        ));
    }
    let setup = swapin::Setup {
        exe,
        out,
        sizes,
        modes,
        reps: args.reps.unwrap_or(2),
        timeout: Duration::from_secs(args.timeout),
    };
    teardown::catch_signals();
    let guard = teardown::Guard;
    let outcome = swapin::run(&setup);
    drop(guard);
    finished("swapin", &setup.out, outcome)
}

fn bench(args: &BenchArgs, plan: &Plan) -> Result<(), String> {
    let exp = &plan.exp;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find memvisor itself: {e}"))?;
    // Held until the bench ends: a second bench must not clean up this one's swap file.
    let _only_bench = teardown::lock(&args.swap_file)?;
    for line in teardown::preflight(&args.swap_file)? {
        eprintln!("memvisor bench: {line} (left by an earlier run)");
    }
    let work = plan.out.join("work");
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let env = host::environment(&plan.out, "qemu-system-x86_64");
    let mut notes = Vec::new();

    // Disks: one read-only image shared by all runs, or a fresh one per run when written to.
    let mut shared_disks: Vec<Option<PathBuf>> = Vec::new();
    for (i, step) in exp.steps.iter().enumerate() {
        shared_disks.push(match &step.disk {
            Some(d) if !d.writable => {
                let p = work.join(format!("data-{i}.img"));
                eprintln!("memvisor bench: making {} ({})", p.display(), d.files);
                mkdisk(&exe, &p, d)?;
                teardown::track_file(p.clone());
                Some(p)
            }
            _ => None,
        });
    }

    let host_swap = plan.configs.iter().any(|c| c.needs_host_swap());
    if host_swap {
        let others = host::swap_areas();
        if !others.is_empty() {
            notes.push(format!(
                "swap already enabled on the host before the run, also usable: {}",
                others.join(", ")
            ));
        }
        teardown::enable_swap_file(&args.swap_file, args.swap_size)?;
        teardown::set_swappiness(args.swappiness)?;
        notes.push(format!(
            "host swap: {} ({} MiB) created, enabled and removed by the harness; vm.swappiness={} during the run (each run's memory cgroup inherits it as memory.swappiness; the kernel default is 60)",
            args.swap_file.display(),
            args.swap_size >> 20,
            args.swappiness
        ));
    }
    let qemu_limited = plan
        .configs
        .iter()
        .any(|c| c.hv == configs::Hv::Qemu && c.needs_host_swap());
    let qemu_overhead = if qemu_limited {
        eprintln!("memvisor bench: measuring QEMU's overhead (RSS outside guest RAM)");
        let o = vm::measure_qemu_overhead(&exe, exp.mem)?;
        eprintln!(
            "memvisor bench: QEMU overhead measured: {:.1} MiB; QEMU cgroups get limit + this + memvisor's RSS + 16 MiB slack",
            o as f64 / f64::from(1u32 << 20)
        );
        notes.push(format!(
            "QEMU's overhead, measured in this run (RSS outside the guest RAM mapping, from smaps, peak over a short guest kit run): {:.1} MiB; the QEMU cgroup limit is the guest limit + this + the memvisor launcher's RSS + 16 MiB slack",
            o as f64 / f64::from(1u32 << 20)
        ));
        Some(o)
    } else {
        None
    };
    if teardown::interrupted() {
        return Ok(());
    }
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

    if let experiments::Kind::Series(s) = &exp.kind {
        notes.push(format!(
            "working-set sampling: `memvisor run {}`; the harness polls `GET /stats` on the VM's API socket every {} s",
            s.run_flags().join(" "),
            s.every.as_secs_f64()
        ));
    }

    let reps = plan.reps;
    let total = u32::try_from(plan.configs.len() * exp.steps.len()).unwrap_or(u32::MAX) * reps;
    let mut records: Vec<report::Record> = Vec::new();
    let started = Instant::now();
    let mut n = 0;
    let bar = crate::progress::bar(u64::from(total), "runs");
    bar.set_message(exp.name);
    'reps: for rep in 1..=reps {
        for (si, step) in exp.steps.iter().enumerate() {
            let k = plan.configs.len();
            for j in 0..k {
                // Rotate the order per repetition so no configuration always runs first.
                let c = plan.configs[(j + usize::try_from(rep - 1).unwrap_or(0)) % k];
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
                let disk = match (&step.disk, &shared_disks[si]) {
                    (Some(_), Some(p)) => Some((p.clone(), false)),
                    (Some(d), None) => {
                        let p = work.join(format!("data-{si}-{}.img", c.name));
                        teardown::track_file(p.clone());
                        mkdisk(&exe, &p, d)?;
                        Some((p, true))
                    }
                    _ => None,
                };
                // A fresh guest swap disk per run (sparse: only its header is written).
                let guest_swap = match step.guest_swap_mb {
                    Some(mb) => {
                        let p = work.join(format!("guest-swap-{}.img", c.name));
                        teardown::track_file(p.clone());
                        mkswap(&exe, &p, mb)?;
                        Some(p)
                    }
                    None => None,
                };
                let spec = vm::RunSpec {
                    exe: &exe,
                    config: c,
                    step,
                    mem: exp.mem,
                    limit: exp.limit,
                    disk: disk.clone(),
                    work: &work,
                    log_prefix: plan
                        .out
                        .join("logs")
                        .join(format!("{}-{}-rep{rep}", c.name, step.workload)),
                    qemu_overhead,
                    host_swap_file: &args.swap_file,
                    timeout: Duration::from_secs(args.timeout),
                    kind: &exp.kind,
                    guest_swap: guest_swap.clone(),
                    label: label.clone(),
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
            workingset::csv(exp.name, s, &records),
            workingset::markdown(&meta, s, &records),
            workingset::plot(&svg, exp.name, s, &records),
        ),
        experiments::Kind::Release(r) => {
            let runs = recovery::load(&plan.out, exp, &records);
            (
                recovery::csv(exp, r, &runs),
                recovery::markdown(&meta, r, &runs),
                recovery::plot(&svg, exp, r, &plan.configs, &runs),
            )
        }
        experiments::Kind::Phases => (
            report::csv(exp, &records),
            report::markdown(&meta, &records),
            plot::write(&svg, exp, &plan.configs, &records),
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
