//! `workload=boot`: report and exit immediately (boot-time measurement).

use crate::debug_exit::ExitCode;

pub fn run(cpus: u32) -> ExitCode {
    println!("RESULT workload=boot ok=1 cpus={cpus}");
    ExitCode::Success
}
