#!/usr/bin/env bash
# Makes the data disks examples/everything.toml names (once), then runs that host in the
# foreground (SIGTERM or Ctrl-C stops every VM, then the host). Run from anywhere, after
# `cargo build --release`; MEMVISOR names another memvisor binary.
set -euo pipefail
memvisor=$(realpath "${MEMVISOR:-$(dirname "$0")/../target/release/memvisor}")
cd "$(dirname "$0")"
mkdir -p disks
for vm in check1 check2; do
    [ -e "disks/$vm.img" ] || "$memvisor" mkdisk data --out "disks/$vm.img" --size 128M --files src:16M,seq:32M --seed 3
done
exec "$memvisor" host --config everything.toml "$@"
