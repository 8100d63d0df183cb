#!/usr/bin/env bash
# Crash test of Tesseract's indirections (docs/tesseract.md): memvisor killed with SIGKILL while
# the guest writes, then a fresh boot checks every acknowledged write:
#   scripts/crashtest.sh [--kills N] [--out DIR] [--seed S]
# Exit status 0 only if no acknowledged write was lost and nothing leaked.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
exec python3 scripts/crashtest.py "$@"
