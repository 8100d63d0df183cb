#!/usr/bin/env bash
# Soak (docs/soak.md): a memvisor host of N VMs at 2x overcommit with every mechanism on
# (balloon with free page reporting, Swap Mapper, False Reads Preventer, Tesseract's indirections,
# pool with LZ4, sampling and the host's policy), running the integrity workload and the papers' workloads in a loop:
#   scripts/soak.sh [DURATION] [--vms N] [--out DIR]
# DURATION: seconds, or 90s / 10m / 1h (default 1h). Exit status 0 only if every run passed
# with 0 mismatches, nothing hung, nothing was OOM-killed and the host stayed up.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
exec python3 scripts/soak.py "$@"
