#!/usr/bin/env bash
# Makes the data disks examples/pressure.toml names (once), then runs that host in the
# foreground (SIGTERM or Ctrl-C stops every VM, then the host). Run from anywhere, after
# `cargo build --release`; MEMVISOR names another memvisor binary.
set -euo pipefail
memvisor=$(realpath "${MEMVISOR:-$(dirname "$0")/../target/release/memvisor}")
cd "$(dirname "$0")"
mkdir -p disks
[ -e disks/stream.img ] || "$memvisor" mkdisk data --out disks/stream.img --size 192M --files seq:160M --seed 1
[ -e disks/tables.img ] || "$memvisor" mkdisk data --out disks/tables.img --size 96M --files src:64M --seed 2
exec "$memvisor" host --config pressure.toml "$@"
