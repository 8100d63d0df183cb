//! What several test binaries share: running the `memvisor` binary with its output logged, and
//! writing small PVH kernels made by the tests themselves.

#![allow(dead_code)] // Each test binary uses a part.

use std::process::{Command, Output};

pub const MEMVISOR: &str = env!("CARGO_BIN_EXE_memvisor");

/// Runs `memvisor ARGS` to the end; its status and output go to the test's log.
pub fn memvisor(args: &[&str]) -> Output {
    let out = Command::new(MEMVISOR)
        .args(args)
        .output()
        .expect("memvisor runs");
    eprintln!(
        "--- memvisor {args:?}: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `kernel` in a 64 MiB VM on `hypervisor` (`memvisor` or `qemu`).
pub fn run_kernel(hypervisor: &str, kernel: &tempfile::NamedTempFile) -> Output {
    memvisor(&[
        "run",
        "--hypervisor",
        hypervisor,
        "--mem",
        "64M",
        "--kernel",
        kernel.path().to_str().unwrap(),
    ])
}

/// A PVH ELF file loading `image` at `base` and entering it there.
pub fn pvh_kernel(base: u64, image: &[u8]) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().unwrap();
    let entry = u32::try_from(base).unwrap();
    std::fs::write(
        f.path(),
        memvisor_boot::test_utils::make_elf(base, image, Some(entry)),
    )
    .unwrap();
    f
}
