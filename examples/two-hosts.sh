#!/usr/bin/env bash
# Two hosts on one machine, and a VM moving from one to the other while it runs: host A
# (two-hosts-a.toml) runs two VMs that check every page they write (the integrity workload)
# on a budget that holds about half of their memory; host B (two-hosts-b.toml) has room. Once
# `mover` has filled its memory, A hands it to B (`memvisor ctl --host-sock A move mover --to
# B`: B's admission control takes it or refuses it before anything moves, then the VM runs
# on B at once and its pages follow, post-copy). Both VMs then finish their rounds, `mover` on
# B, and each must report 0 mismatches ("the guest reported success"). Prints both hosts'
# VMs and the events of the move; exits 0 when every page was intact, 1 otherwise.
#
# Run from anywhere, as root, after `cargo build --release`; MEMVISOR names another memvisor
# binary. The hosts' logs go to examples/two-hosts-{a,b}.state/host.log; both hosts stop at the
# end.
set -euo pipefail
memvisor=$(realpath "${MEMVISOR:-$(dirname "$0")/../target/release/memvisor}")
cd "$(dirname "$0")"
mkdir -p disks
for vm in mover stay; do
    [ -e "disks/$vm.img" ] || "$memvisor" mkdisk data --out "disks/$vm.img" --size 64M --files src:8M --seed 5
done
fail() { echo "two-hosts: $*" >&2; exit 1; }
rm -rf two-hosts-a.state two-hosts-b.state
mkdir -p two-hosts-a.state two-hosts-b.state
"$memvisor" host --config two-hosts-a.toml >two-hosts-a.state/host.log 2>&1 &
a=$!
"$memvisor" host --config two-hosts-b.toml >two-hosts-b.state/host.log 2>&1 &
b=$!
trap 'kill -TERM $a $b 2>/dev/null; wait $a $b 2>/dev/null || true' EXIT
A=two-hosts-a.state/host.sock
B=two-hosts-b.state/host.sock
for _ in $(seq 300); do
    [ -S "$A" ] && [ -S "$B" ] && break
    sleep 0.1
done
[ -S "$A" ] && [ -S "$B" ] || fail "the hosts did not start: $(cat two-hosts-[ab].state/host.log)"

# "free F MiB of B MiB, state S, reserved R MiB" of host $1.
budget() {
    "$memvisor" ctl --host-sock "$1" host | python3 -c '
import json, sys
h = json.load(sys.stdin)
print("free %d MiB of %d MiB, state %s, reserved %d MiB" % (h["free_bytes"] >> 20,
      h["budget_bytes"] >> 20, h["free_state"], h["memory_reserved_bytes"] >> 20))'
}

# "name state exit limit swapped why" for each VM of host $1.
vms() {
    "$memvisor" ctl --host-sock "$1" vms | python3 -c '
import json, sys
for v in json.load(sys.stdin):
    print(v["name"], v["state"], v["exit"], "limit %d MiB" % (v["limit_bytes"] >> 20),
          "swapped %d MiB" % (v["swapped_bytes"] >> 20), v["why"] or "-", sep="\t")'
}

# Once mover has written every page of its first round, it moves.
log=two-hosts-a.state/mover/vmm.log
for _ in $(seq 1200); do
    grep -q 'phase=fill' "$log" 2>/dev/null && break
    sleep 0.1
done
grep -q 'phase=fill' "$log" || fail "mover did not fill its memory within 120 s"
echo "two-hosts: host A before the move: $(budget "$A")"
vms "$A"
echo "two-hosts: host B before the move: $(budget "$B")"
echo "two-hosts: moving mover from A to B"
"$memvisor" ctl --host-sock "$A" move mover --to "$B" >/dev/null || fail "the move failed"
echo "two-hosts: host A: $(budget "$A")"
vms "$A"
echo "two-hosts: host B: $(budget "$B")"
vms "$B"

# Both VMs finish their rounds, mover on B.
for _ in $(seq 1800); do
    left=$( (vms "$A"; vms "$B") | awk -F'\t' '$2 != "exited" && $2 != "migrated"' | wc -l)
    [ "$left" -eq 0 ] && break
    sleep 0.1
done
echo "two-hosts: at the end, host A:"
vms "$A"
echo "two-hosts: host B:"
vms "$B"
echo "two-hosts: the events of the move:"
for host in A B; do
    s=$([ $host = A ] && echo "$A" || echo "$B")
    curl -s --unix-socket "$s" http://localhost/events | python3 -c '
import json, sys
for e in json.load(sys.stdin):
    if e["kind"] in ("incoming", "admitted", "migrating", "migrated_in", "migrated_out", "migration_failed"):
        print(sys.argv[1], e["kind"], e["vm"], e["message"], sep="\t")' "$host"
done
[ "$(vms "$A" | awk -F'\t' '$1 == "stay" && $3 == "guest_success"' | wc -l)" -eq 1 ] || fail "stay (on A) did not report success"
[ "$(vms "$A" | awk -F'\t' '$1 == "mover" && $2 == "migrated"' | wc -l)" -eq 1 ] || fail "mover is not listed as migrated on A"
[ "$(vms "$B" | awk -F'\t' '$1 == "mover" && $3 == "guest_success"' | wc -l)" -eq 1 ] || fail "mover (on B) did not report success"
grep -h 'phase=done' two-hosts-a.state/stay/vmm.log two-hosts-b.state/mover/vmm.log || true
echo "two-hosts: ok: every page of both VMs intact, mover finished on B"
