#!/usr/bin/env bash
# The test suite: host packages, formatting, lints, then every unit and integration test
# (the integration tests boot the guest kit on memvisor and on QEMU microvm).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-host.sh
cargo fmt --all -- --check
(cd guest && cargo fmt -- --check)
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
