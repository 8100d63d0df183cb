//! `memvisor bench`: the papers' experiments on memvisor and QEMU, their runs, CSV, reports and plots.
//!
//! Every experiment runs in one go on the same guest kit ELF, disks and memory sizes, with
//! memvisor (the binary that calls [`run`], found as the current executable) and QEMU as child
//! processes.
//!
//! The crate is layered, each layer importing only those below it:
//! - `experiments` (and `configs`): what each experiment runs, as data, one file per experiment;
//! - `harness`: what every family shares to run: child processes, the one QMP client, running
//!   and watching one VM (`harness::vm`), host set-up (`harness::setup`), the run order, the
//!   host's `/proc` and cgroup readings (`harness::readings`), and undoing it all
//!   (`harness::teardown`);
//! - `run`: running each family's configurations (memvisor or QEMU child processes,
//!   `memvisor host`);
//! - `report`: what every report shares: `results.csv`'s one quoting rule (`report::csv`), the
//!   numbers (`report::numbers`), drawing a figure (`report::figure`), writing the outputs;
//! - `output`: each family's `results.csv`, `report.md` and figures;
//! - `drive`: each family of experiments from its flags to its outputs;
//! - `families`: the families moved to one folder each (plan, runs, report), run by the one
//!   driver `harness::drive` through the `harness::Family` trait.
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
//!    next hit all configurations alike (`harness::order`, `harness::vm`).
//! 5. Write `results.csv`, `report.md` and `<experiment>.svg` (`output::report`, `output::plot`;
//!    for the time series of `workingset`, `output::workingset`; for the throughput over time of
//!    `recovery`, `output::recovery`).
//! 6. Tear down (`harness::teardown`) — also on Ctrl-C, SIGTERM, a crashed guest or an error.

mod args;
mod configs;
mod drive;
mod experiments;
mod families;
mod harness;
mod output;
pub mod progress;
mod report;
mod run;

pub use args::{BenchArgs, Outcome};

/// `memvisor bench`: the experiment named in `args`, run from its flags to its outputs.
pub fn run(args: BenchArgs) -> Outcome {
    match args.experiment.as_str() {
        "consolidate" => harness::drive(
            &families::consolidate::Consolidate { balance: false },
            &args,
        ),
        "balance" => harness::drive(&families::consolidate::Consolidate { balance: true }, &args),
        "swapin" => harness::drive(&families::swapin::Swapin, &args),
        "reclaimdelay" => harness::drive(&families::reclaimdelay::ReclaimDelay, &args),
        "dwell" => harness::drive(&families::dwell::Dwell, &args),
        "sharing" => harness::drive(
            &families::sharing::Sharing {
                experiment: "sharing",
            },
            &args,
        ),
        "zeroboot" => harness::drive(
            &families::sharing::Sharing {
                experiment: "zeroboot",
            },
            &args,
        ),
        name if families::host::NAMES.contains(&name) => {
            harness::drive(&families::host::Host, &args)
        }
        _ => drive::phases::run(&args),
    }
}
