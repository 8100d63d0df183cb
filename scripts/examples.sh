#!/usr/bin/env bash
# Runs what a new user runs first, as it is written, from the repository root (after
# `cargo build --release`, which the quickstart itself runs):
#  1. the README's host quickstart: the sh block between the `quickstart` markers, run by bash as
#     it stands; `top --once` must show both VMs of examples/two-vms.toml, starting or running,
#     and the host must stop cleanly;
#  2. examples/everything.sh (every mechanism on, integrity workloads): both VMs must end with
#     "the guest reported success" (0 mismatches);
#  3. examples/pressure.sh (three VMs at about 2x overcommit): for 40 s no VM may fail, and the
#     host must stop cleanly on SIGTERM;
#  4. examples/two-hosts.sh (a VM moved from a host under pressure to another while it runs): it
#     must end with every page of both VMs intact (it checks that itself, exit status 0).
set -euo pipefail
cd "$(dirname "$0")/.."
mv=target/release/memvisor
fail() { echo "examples: $*" >&2; exit 1; }

# The VMs of a host socket as "name state exit why" lines.
vms() {
    "$mv" ctl --host-sock "$1" vms | python3 -c '
import json, sys
for v in json.load(sys.stdin):
    print(v["name"], v["state"], v["exit"], v["why"] or "-", sep="\t")'
}

# 1. The README's quickstart, as written.
quickstart=$(awk '/^<!-- quickstart/{q=1; next} /^<!-- \/quickstart/{q=0} q && /^```/{f=!f; next} q && f' README.md)
[ -n "$quickstart" ] || fail "no quickstart block in README.md"
rm -rf examples/two-vms.state
echo "examples: the README's quickstart"
out=$(bash -e -c "$quickstart" 2>&1) || fail "the quickstart failed: $out"
echo "$out" | grep -E '^memvisor host  budget 1.00 GiB' >/dev/null || fail "no header from top --once in: $out"
for vm in web batch; do
    echo "$out" | grep -E "^$vm +(starting|running) " >/dev/null || fail "no $vm row starting or running in: $out"
done
echo "$out" | sed -n '/^memvisor host  budget/,$p'

# Runs an example script in the background; its host socket in $sock, its pid in $pid.
start() {
    local name=$1
    rm -rf "examples/$name.state"
    "examples/$name.sh" >"target/examples-$name.log" 2>&1 &
    pid=$!
    sock=examples/$name.state/host.sock
    for _ in $(seq 300); do
        [ -S "$sock" ] && return 0
        kill -0 "$pid" 2>/dev/null || fail "$name: the host did not start: $(cat "target/examples-$name.log")"
        sleep 0.1
    done
    fail "$name: no host socket after 30 s"
}

stop() {
    kill -TERM "$pid"
    wait "$pid" || fail "$1: the host exited with status $? (see target/examples-$1.log)"
}

# 2. Every mechanism, every page checked: both VMs must end with success.
echo "examples: everything.sh"
start everything
for _ in $(seq 600); do
    running=$(vms "$sock" | awk -F'\t' '$2 != "exited" && $2 != "refused"' | wc -l)
    [ "$running" -eq 0 ] && break
    sleep 1
done
vms "$sock"
[ "$(vms "$sock" | awk -F'\t' '$3 == "guest_success"' | wc -l)" -eq 2 ] || fail "everything: not every VM reported success"
stop everything

# 3. Under pressure: 40 s in which no VM may fail.
echo "examples: pressure.sh"
start pressure
sleep 40
vms "$sock"
bad=$(vms "$sock" | awk -F'\t' '$2 == "refused" || ($2 == "exited" && $3 != "guest_success")')
[ -z "$bad" ] || fail "pressure: $bad"
"$mv" top --host-sock "$sock" --once
stop pressure

# 4. Two hosts, a VM handed from one to the other mid-run, every page checked.
echo "examples: two-hosts.sh"
examples/two-hosts.sh >target/examples-two-hosts.log 2>&1 || fail "two-hosts: $(tail -20 target/examples-two-hosts.log)"
tail -3 target/examples-two-hosts.log
echo "examples: ok"
