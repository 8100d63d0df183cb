//! `memvisor`: the command-line front end. `memvisor run` boots a guest on memvisor's own VMM or,
//! with `--hypervisor qemu`, on QEMU microvm with the same guest, disks and memory size.

mod bench;
mod cli;
mod ctl;
mod disks;
mod guest_kit;
mod hostlimit;
mod progress;
mod qemu;
mod top;

use std::process::ExitCode;

use clap::Parser;

/// Process exit statuses besides the guest's own debug-exit status `(value << 1) | 1`.
pub use memvisor_api::exit::status;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MEMVISOR_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    let args = cli::Cli::parse();
    match args.command {
        cli::Command::Run(run) => cli::run(run),
        cli::Command::Mkdisk(args) => disks::run(args),
        cli::Command::Disk(args) => disks::disk(args),
        cli::Command::Host(args) => cli::host(args),
        cli::Command::Ctl(args) => ctl::run(args),
        cli::Command::Top(args) => top::run(args),
        cli::Command::Bench(args) => bench::run(args),
        cli::Command::Sim(args) => memvisor_sim::cli::run(args),
    }
}
