//! `memvisor bench`: the papers' experiments on memvisor and QEMU, their runs, CSV, reports and plots.
//!
//! Every experiment runs in one go on the same guest kit ELF, disks and memory sizes, with
//! memvisor (the binary that calls [`run`], found as the current executable) and QEMU as child
//! processes.
//!
//! The crate is layered, each layer importing only those below it:
//! - `args`: the flags and the outcome, a leaf;
//! - `harness` and `report`: what every family shares to run and to report;
//! - `families`: one folder per family of experiments, each a [`harness::Family`] that the one
//!   driver, `harness::drive`, runs;
//! - `reproduce`: a paper's set of experiments run through `families::run`, and its published
//!   values beside ours;
//! - this file, which hands `memvisor bench reproduce` to `reproduce::run` and every other
//!   experiment to `families::run`.
//!
//! | Folder / file | What it holds |
//! |---|---|
//! | `args.rs` | `memvisor bench`'s flags ([`BenchArgs`], `Scale`) and how it ended ([`Outcome`]) |
//! | `progress.rs` | progress bars drawn only when a person watches |
//! | `harness/mod.rs` | the `Family` trait and the one driver: checks every family shares (and `--reference` for a family that takes none), output and work directories, signals, teardown, exit |
//! | `harness/child.rs` | child processes: spawning a VMM with its console teed to a log, the one `memvisor host` launcher, stopping on drop, exit, CPU time |
//! | `harness/guest.rs` | the guest's `RESULT` lines and the VMM's final stats file |
//! | `harness/qmp.rs` | the one QMP client (QEMU's balloon) |
//! | `harness/vm.rs` | a started `memvisor run`: its console, socket and logs, a guest phase's line, its pager's stats, its stop |
//! | `harness/setup.rs` | host set-up: the bench lock, `mkdisk`, host swap, QEMU's overhead, the plain VM of `memvisor host` families start from |
//! | `harness/order.rs` | the order configurations run in, per repetition, and the one loop (`interleave`) every family runs its plan through |
//! | `harness/readings.rs` | the host's `/proc` and cgroup readings, and the run's environment |
//! | `harness/teardown.rs` | undoing what a bench did, also on Ctrl-C, SIGTERM or an error |
//! | `report/mod.rs` | the environment and incomplete-runs sections, and writing `results.csv`, the figure and `report.md` |
//! | `report/table.rs` | a `Table` in Markdown and CSV, the one CSV quoting rule and the one Markdown cell rule |
//! | `report/figure.rs` | the font, the lines' colours, one figure drawn to SVG and PNG (a column of panels, their ranges from the points), the legend's style |
//! | `report/claims.rs` | a published value beside ours: the cell of an experiment's `report.md` that holds ours, read, and the one-line verdict |
//! | `report/numbers.rs` | MiB, mean, median, spread and its text, an optional number in a CSV cell or a report's |
//! | `families/mod.rs` | an experiment's name to its family's driver, through `figures` |
//! | `families/figures.rs` | what each experiment reproduces, as data (paper, section, figures, scope, peer, docs section, the flags `reproduce` runs it with at each scale, its published values), and the five papers' sets: `--help`, every report's opening and docs/bench.md's families table are made from it |
//! | `families/published.rs` | the papers' published values, each with its section and the cell of a report that holds ours |
//! | `reproduce.rs` | `memvisor bench reproduce PAPER`: the paper's set run into one directory, `report.md`, `claims.csv` and the figure of ours over the paper's |
//! | `families/phases/` | `catalog` (by name) of `seqread`, `alloc`, `overhead`, `doublepaging` (with `overcommit` and `pressure`) and the others (one file each), `workingset/` and `recovery/` (data and report each; recovery's `trace`): the experiments of phases on memvisor and QEMU `configs`, run one VM at a time (`vm/`: `control`, `monitor`, `result`), reported by `report` and `figure`; `sweep` runs one over the limit or a workload argument, and `holes` sets Tesseract's Tables 1 and 2 per point |
//! | `families/host/` | `shares`, `idletax` on `memvisor host`: `catalog` (by name), `experiment`, `run`, `summary`, `report`, `figure` |
//! | `families/consolidate/` | `consolidate`, `balance`: many VMs under `memvisor host` and on QEMU, in budgets that are fractions of the scenario's joint working set (measured first), each VMM's PSS sampled |
//! | `families/swapin/` | `swapin`: bringing swapped memory back |
//! | `families/reclaimdelay/` | `reclaimdelay`: taking pages from victim VMs |
//! | `families/dwell/` | `dwell`: how long released pages stay out |
//! | `families/sharing/` | `sharing`, `zeroboot`: page sharing through KSM |
//! | `families/confinement/` | `confinement`: what the seccomp filters cost, on guest exits and pager faults against `--seccomp off`, and on each of their calls (`filters.rs`) |
//! | `families/mobility/` | `mobility`: snapshot and restore, live migration with and without pre-copy, beside QEMU's save to a file, `-incoming`, pre-copy and post-copy (`qemu.rs` QEMU's runs) |
//!
//! Each family folder has the same files: `mod.rs` (its `Family`: flags to plan),
//! `experiment.rs` (its sizes and plan, as data), `run.rs` (its runs), `report.rs` (its
//! `results.csv`, `report.md` and figure). Adding a family is adding a folder and its line in
//! `families/mod.rs`.
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
//!    order that changes per repetition, `harness::order`), so drift and what one run leaves the
//!    next hit all configurations alike.
//! 5. Write `results.csv`, `report.md` and `<experiment>.svg` (each family's `report`).
//! 6. Tear down (`harness::teardown`) — also on Ctrl-C, SIGTERM, a crashed guest or an error.

mod args;
mod families;
mod harness;
pub mod progress;
mod report;
mod reproduce;

pub use args::{BenchArgs, Outcome};

/// `memvisor bench`: the experiment named in `args`, run from its flags to its outputs.
pub fn run(args: BenchArgs) -> Outcome {
    if args.experiment == "reproduce" {
        reproduce::run(&args)
    } else {
        families::run(&args)
    }
}
