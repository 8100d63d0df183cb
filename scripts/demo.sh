#!/usr/bin/env bash
# Fresh-machine demo: installs the host packages, builds memvisor (with its guest kit), runs the
# guest kit's selftest workload on a 512 MiB VM with a 64 MiB data disk on memvisor and then on
# QEMU microvm, and finally memvisor's main job: a 512 MiB guest whose 160 MiB working set is
# verified word by word while memvisor's pager holds it to 100 MiB of host memory.
# The exit status 1 is success (the guest wrote 0 to the debug-exit port).
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
echo "== integrity under a 100 MiB limit (memvisor's pager)"
data="${TMPDIR:-/tmp}/memvisor-demo-fs.img"
target/release/memvisor mkdisk data --out "$data" --size 64M --force
set +e
MEMVISOR_LOG=info target/release/memvisor run --mem 512M --mem-limit 100M --disk "$data,id=data" \
  --workload integrity --cmdline "anon_mb=160 file_mb=8 rounds=2"
rc=$?
set -e
echo "== exit status $rc"
rm -f "$disk" "$data"
[ "$rc" -eq 1 ]
