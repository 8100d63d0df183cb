#!/usr/bin/env bash
# Calibrates the simulator against real runs (docs/sim.md, "Calibration"): runs the five VMs of
# crates/sim/calibration/mixed.toml on `memvisor host` twice, with room for all (4 GiB) and at
# 600 MiB (about 2x overcommitted), each recording its trace ([host] trace), then sets the
# simulated run of crates/sim/calibration/mixed-sim.toml beside each with
# `memvisor sim --calibrate`. Run from anywhere after `cargo build --release`; needs /dev/kvm.
#
#   scripts/sim-calibrate.sh [OUT]      # default target/calibration; OUT/{roomy,pressured}/
#
# Each host run takes about 80 s. The report of each is OUT/NAME/report/calibration.md.
set -euo pipefail
cd "$(dirname "$0")/.."
mv=$PWD/target/release/memvisor
out=$(realpath -m "${1:-target/calibration}")
cfg=$PWD/crates/sim/calibration/mixed.toml
sim=$PWD/crates/sim/calibration/mixed-sim.toml
[ -x "$mv" ] || { echo "sim-calibrate: build first: cargo build --release" >&2; exit 2; }
mkdir -p "$out/disks"
[ -e "$out/disks/stream.img" ] || "$mv" mkdisk data --out "$out/disks/stream.img" --size 192M --files seq:160M --seed 1
[ -e "$out/disks/tables.img" ] || "$mv" mkdisk data --out "$out/disks/tables.img" --size 96M --files src:64M --seed 2

# Runs the host with [host] memory = $2 in $out/$1 until every VM has exited.
run() {
    local d=$out/$1 memory=$2
    rm -rf "$d"
    mkdir -p "$d"
    ln -s ../disks "$d/disks"
    sed "s/^memory = .*/memory = \"$memory\"/" "$cfg" >"$d/host.toml"
    "$mv" host --config "$d/host.toml" >"$d/host.log" 2>&1 &
    local pid=$! sock=$d/host.state/host.sock
    echo "sim-calibrate: $1 ([host] memory = $memory): running"
    for _ in $(seq 300); do [ -S "$sock" ] && break; sleep 0.1; done
    [ -S "$sock" ] || { echo "sim-calibrate: $1: the host did not start: $(cat "$d/host.log")" >&2; kill "$pid"; exit 1; }
    for _ in $(seq 600); do
        left=$("$mv" ctl --host-sock "$sock" vms | python3 -c '
import json, sys
print(sum(v["state"] not in ("exited", "refused") for v in json.load(sys.stdin)))')
        [ "$left" = 0 ] && break
        sleep 1
    done
    kill -TERM "$pid"
    wait "$pid" || true
    grep -h "phase=done" "$d"/host.state/*.log | sed 's/ free_kb=.*//' >"$d/done.txt"
}

run roomy 4G
run pressured 600M
for name in roomy pressured; do
    budget=$([ "$name" = roomy ] && echo 4G || echo 600M)
    sed "s/^budget = .*/budget = \"$budget\"/" "$sim" >"$out/$name/sim.toml"
    echo
    echo "== $name =="
    "$mv" sim --calibrate "$out/$name/trace.jsonl" "$out/$name/sim.toml" --out "$out/$name/report"
done
