//! `memvisor`: the command-line front end. `memvisor run` boots a guest on memvisor's own VMM or,
//! with `--hypervisor qemu`, on QEMU microvm with the same guest, disks and memory size.
//!
//! | file | owns |
//! |---|---|
//! | `bad_input.rs` | input from a person that a command refuses: one line, exit status 2 (a leaf) |
//! | `cli.rs` | every command's flags and the parsers of their values, and `memvisor host` |
//! | `plan.rs` | `memvisor run`'s flags checked and turned into a `RunPlan`: the kernel, the disks, the guest command line |
//! | `run.rs` | `memvisor run` on memvisor's VMM, its exit status, and its counters (`--stats-json`, the summary) |
//! | `qemu.rs` | `--hypervisor qemu`: the same plan on QEMU microvm |
//! | `jailed.rs` | `memvisor run --jail`: the VMM forked into a PID namespace, and the parent that waits for it outside the jail |
//! | `hostlimit.rs` | a memory limit enforced by the host kernel with a memory cgroup |
//! | `huge_heap.rs` | the VMM's heap on transparent huge pages, by starting itself again with glibc's tunable |
//! | `guest_kit.rs` | the embedded guest kit (built by `build.rs`) and its command line |
//! | `disks.rs` | `memvisor mkdisk` and `memvisor disk disentangle` |
//! | `ctl.rs` | `memvisor ctl`, through `memvisor-api`'s typed clients |
//! | `top.rs` | `memvisor top`, the terminal view of a host |

mod bad_input;
mod cli;
mod ctl;
mod disks;
mod guest_kit;
mod hostlimit;
mod huge_heap;
mod jailed;
mod plan;
mod qemu;
mod run;
mod top;

use std::process::ExitCode;

use clap::Parser;

/// Process exit statuses besides the guest's own debug-exit status `(value << 1) | 1`.
use memvisor_api::exit::status;

/// The exit status of `memvisor bench`.
fn bench_exit(outcome: memvisor_bench::Outcome) -> ExitCode {
    match outcome {
        memvisor_bench::Outcome::Done => ExitCode::SUCCESS,
        memvisor_bench::Outcome::Interrupted => ExitCode::from(130),
        memvisor_bench::Outcome::BadInput => ExitCode::from(status::BAD_INPUT),
        memvisor_bench::Outcome::Failed => ExitCode::from(status::VMM_FAILURE),
    }
}

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
    if let cli::Command::Run(run) = &args.command {
        if run.hypervisor == cli::Hypervisor::Memvisor {
            huge_heap::ensure();
        }
    }
    match args.command {
        cli::Command::Run(args) => run::run(*args),
        cli::Command::Mkdisk(args) => disks::run(args),
        cli::Command::Disk(args) => disks::disk(args),
        cli::Command::Host(args) => cli::host(args),
        cli::Command::Ctl(args) => ctl::run(args),
        cli::Command::Top(args) => top::run(args),
        cli::Command::Bench(args) => bench_exit(memvisor_bench::run(*args)),
        cli::Command::Sim(args) => memvisor_sim::cli::run(args),
    }
}
