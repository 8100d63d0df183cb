#!/usr/bin/env bash
# Fresh-machine demo: installs the host packages, builds memvisor (with its guest kit), and runs
# the guest kit's selftest workload on a 512 MiB VM with a 64 MiB data disk, on memvisor and then
# on QEMU microvm. The exit status 1 is success (the guest wrote 0 to the debug-exit port).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-host.sh
cargo build --release
disk="${TMPDIR:-/tmp}/memvisor-demo-data.img"
rm -f "$disk"
truncate -s 64M "$disk"
for hv in memvisor qemu; do
  echo "== selftest on $hv"
  set +e
  target/release/memvisor run --hypervisor "$hv" --mem 512M --vcpus 2 --disk "$disk,id=data" --workload selftest
  rc=$?
  set -e
  echo "== exit status $rc"
  [ "$rc" -eq 1 ] || exit 1
done
