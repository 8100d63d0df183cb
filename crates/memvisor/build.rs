//! Builds the guest kit (`guest/`, its own freestanding cargo workspace) so `memvisor` can embed it.
//!
//! The guest kit is a `no_std` ELF for the host target with its own rustflags and linker script,
//! so it is built by a nested `cargo build` run inside `guest/` (where its `.cargo/config.toml`
//! applies), into this build's `OUT_DIR`, with the outer build's cargo variables removed.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let guest = manifest
        .join("../../guest")
        .canonicalize()
        .expect("the guest kit lives in guest/ at the repository root");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    for p in [
        "src",
        "Cargo.toml",
        "Cargo.lock",
        "build.rs",
        "link.ld",
        ".cargo/config.toml",
    ] {
        println!("cargo:rerun-if-changed={}", guest.join(p).display());
    }
    // The guest kit's memory manager core lives in this workspace.
    for p in ["src", "Cargo.toml"] {
        println!(
            "cargo:rerun-if-changed={}",
            manifest.join("../guest-mm").join(p).display()
        );
    }

    // A guest kit built elsewhere (e.g. while guest/ is being edited) can stand in.
    println!("cargo:rerun-if-env-changed=MEMVISOR_PREBUILT_GUEST");
    if let Some(elf) = std::env::var_os("MEMVISOR_PREBUILT_GUEST") {
        println!(
            "cargo:rustc-env=MEMVISOR_GUEST_KIT={}",
            PathBuf::from(elf).display()
        );
        return;
    }
    let target_dir = out.join("guest-target");
    let mut cmd = Command::new(cargo);
    // `--locked`, not `--offline`: the kit depends on miniz_oxide from crates.io, which a fresh
    // machine may not have yet (cargo fetches it once, then builds without the network); the
    // lock file, committed, pins it.
    cmd.current_dir(&guest)
        .args(["build", "--release", "--locked", "--target-dir"])
        .arg(&target_dir);
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        let outer = (k.starts_with("CARGO_") && k != "CARGO_HOME")
            || k.starts_with("RUSTC_")
            || [
                "RUSTFLAGS",
                "RUSTDOCFLAGS",
                "TARGET",
                "HOST",
                "PROFILE",
                "OPT_LEVEL",
                "DEBUG",
            ]
            .contains(&k.as_ref());
        if outer {
            cmd.env_remove(&key);
        }
    }
    let status = cmd
        .status()
        .expect("cannot run cargo to build the guest kit");
    assert!(
        status.success(),
        "building the guest kit in {} failed",
        guest.display()
    );
    let elf = target_dir.join("x86_64-unknown-linux-gnu/release/guest-kit");
    assert!(
        elf.is_file(),
        "the guest kit build produced no {}",
        elf.display()
    );
    println!("cargo:rustc-env=MEMVISOR_GUEST_KIT={}", elf.display());
}
