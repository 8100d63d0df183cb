#!/usr/bin/env bash
# The test suite: host packages, formatting, lints, then every unit and integration test
# (the integration tests boot the guest kit on memvisor and on QEMU microvm).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-host.sh
# The commit convention (CONTRIBUTING.md) on every commit since it began.
scripts/check-commits.sh
# No file under src/ over 900 lines, no import circle, nothing pointing outside the repository.
scripts/check-structure.py
cargo fmt --all -- --check
(cd guest && cargo fmt -- --check)
(cd fuzz && cargo fmt -- --check)
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
# A short soak (docs/soak.md): a host of 4 VMs at 2x overcommit with every mechanism on, running
# the integrity workload and the papers' workloads in a loop for 2 minutes (then the last runs
# finish): every run must pass with 0 mismatches, with no hang and no OOM kill.
scripts/soak.sh 120 --vms 4 --out target/soak
# What a new user runs first (scripts/examples.sh): the README's host quickstart as it is
# written, and every config in examples/ as it is, each checked for VMs that fail.
scripts/examples.sh
# A short crash test (docs/tesseract.md): memvisor with Tesseract's indirections killed with
# SIGKILL at random moments while the guest writes; after each kill a fresh boot checks every
# acknowledged write, and no indirection log or swap file may be left behind.
scripts/crashtest.sh --kills 3 --out target/crashtest
# A short fuzzing run of every target (scripts/fuzz.sh, docs/fuzzing.md): the build of the fuzz
# crate, then 10 s each.
if rustup toolchain list | grep -q '^nightly'; then
    scripts/fuzz.sh 10
else
    echo "test.sh: fuzzing skipped: cargo-fuzz needs the nightly toolchain, and rustup has none (rustup toolchain install nightly)"
fi
