//! The commit this build comes from, for the reports that name it (`memvisor bench reproduce`):
//! `git describe` of the checkout as it was built (`-dirty` with changes to tracked files), or
//! `unknown` when it is not a git checkout. The script runs again when the checkout's HEAD or
//! index moves or a source file changes.

use std::path::PathBuf;
use std::process::Command;

fn git(root: &PathBuf, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let root = manifest.join("../..");
    for p in ["crates", "guest/src"] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    if let Some(dir) = git(&root, &["rev-parse", "--absolute-git-dir"]) {
        for f in ["HEAD", "index"] {
            println!("cargo:rerun-if-changed={dir}/{f}");
        }
    }
    let commit = git(&root, &["describe", "--always", "--dirty", "--abbrev=12"])
        .unwrap_or_else(|| "unknown (not built from a git checkout)".into());
    println!("cargo:rustc-env=MEMVISOR_BUILD_COMMIT={commit}");
}
