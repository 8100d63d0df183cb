#!/usr/bin/env bash
# Fault latency seen by a busy vCPU while memvisor's limit shrinks.
#
# A 1 GiB guest runs the guest kit's toucher, sweeping a 700 MiB working set with every touch
# timed (lat=1), under a 900 MiB limit. When the first step (WARM_S seconds: the working set is
# faulted in and swept) is over, the limit goes down to 100 MiB through the API socket, as
# `memvisor ctl --api-sock S limit 100M` does, and the toucher keeps sweeping in 1-second steps.
# Reported per run: how long the shrink took (from PUT /memory until the pager's resident pages
# are within the new limit, polling GET /stats), when PUT /memory answered, the
# guest's slow touches (over 2 µs: faults the hypervisor served) per step with p50/p99/max, and
# the pager's own fault_latency from GET /stats at the end of the shrink and at the end of the
# run. Steps whose time overlaps the shrink are marked "during".
#
# Usage: scripts/shrink-latency.sh [RUNS]      (default 3; as root, after cargo build --release)
# Environment (defaults): MEMVISOR=target/release/memvisor OUT=bench-out/shrink MEM=1G
#   WS_MB=700 START_LIMIT=900M LIMIT=100M WARM_S=4 AFTER_STEPS=8 LAT_US=2
#   PAGER_FLAGS="" (more `memvisor run` flags, e.g. "--mapper --preventer")
# Writes OUT/runN/{console,stderr,stats-*.json} and OUT/summary.md (also printed).
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${1:-3}
memvisor=${MEMVISOR:-target/release/memvisor}
out=${OUT:-bench-out/shrink}
mem=${MEM:-1G}
ws=${WS_MB:-700}
start_limit=${START_LIMIT:-900M}
limit=${LIMIT:-100M}
warm=${WARM_S:-4}
after=${AFTER_STEPS:-8}
lat_us=${LAT_US:-2}
pager_flags=${PAGER_FLAGS:-}

die() {
  echo "shrink-latency: $*" >&2
  exit 2
}
[[ $runs =~ ^[1-9][0-9]*$ ]] || die "RUNS=$runs: give a number of runs, at least 1"
[ -x "$memvisor" ] || die "$memvisor not found: run cargo build --release first (or set MEMVISOR)"
command -v jq >/dev/null || die "jq is needed to read GET /stats (apt-get install jq)"
bytes() { # 100M, 1G or bytes -> bytes
  case $1 in
    *G) echo $((${1%G} << 30)) ;;
    *M) echo $((${1%M} << 20)) ;;
    *) echo "$1" ;;
  esac
}
limit_pages=$(($(bytes "$limit") >> 12))
schedule="$ws:$warm"
for ((i = 0; i < after; i++)); do schedule+=",$ws:1"; done
cmdline="schedule=$schedule lat=1 lat_us=$lat_us hold_secs=3"
now_us() { echo "${EPOCHREALTIME/./}"; }
mkdir -p "$out"

vm_pid=""
cleanup() {
  if [ -n "$vm_pid" ] && kill -0 "$vm_pid" 2>/dev/null; then kill "$vm_pid" 2>/dev/null || true; fi
}
trap cleanup EXIT

# Waits until FILE has a line matching PATTERN (or the VM is gone, or SECS pass).
wait_line() {
  local file=$1 pattern=$2 secs=$3 t0=$SECONDS
  until grep -q -- "$pattern" "$file" 2>/dev/null; do
    if ! kill -0 "$vm_pid" 2>/dev/null; then return 1; fi
    if ((SECONDS - t0 > secs)); then return 1; fi
    sleep 0.01
  done
}

# `key=value` of a line.
field() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p"; }

summary="$out/summary.md"
{
  echo "# Fault latency while the limit shrinks"
  echo
  echo "\`memvisor run --mem $mem --mem-limit $start_limit $pager_flags --workload toucher --cmdline \"$cmdline\"\`;"
  echo "after step 1, \`PUT /memory\` limit $limit. Slow touches: over $lat_us µs, as the guest timed them."
  echo "memvisor at commit $(git describe --always --dirty 2>/dev/null || echo unknown), $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
} >"$summary"
runs_table=""

for ((r = 1; r <= runs; r++)); do
  dir="$out/run$r"
  rm -rf "$dir"
  mkdir -p "$dir"
  sock="$dir/api.sock"
  echo "shrink-latency: run $r/$runs" >&2
  # Guest lines with the host time (µs) they arrived at, so steps can be placed against the
  # shrink. The pager's swap file goes in the run's directory (TMPDIR), on disk.
  # shellcheck disable=SC2086
  TMPDIR="$dir" MEMVISOR_LOG=info "$memvisor" run --mem "$mem" --mem-limit "$start_limit" \
    --api-sock "$sock" $pager_flags --workload toucher --cmdline "$cmdline" \
    2>"$dir/stderr" > >(while IFS= read -r l; do echo "${EPOCHREALTIME/./} $l"; done >"$dir/console") &
  vm_pid=$!
  wait_line "$dir/console" "phase=step1 " $((warm + 120)) || die "run $r: step 1 never finished; see $dir"
  "$memvisor" ctl --api-sock "$sock" stats >"$dir/stats-before.json"
  t0=$(now_us)
  "$memvisor" ctl --api-sock "$sock" limit "$limit" >/dev/null
  t_put=$(now_us)
  # Poll until resident pages are within the new limit; the longest GET /stats is how long the
  # pager's lock kept an API request waiting.
  polls=0 worst_poll=0
  while :; do
    p0=$(now_us)
    "$memvisor" ctl --api-sock "$sock" stats >"$dir/stats-after-shrink.json"
    p1=$(now_us)
    polls=$((polls + 1))
    ((p1 - p0 > worst_poll)) && worst_poll=$((p1 - p0))
    resident=$(jq '.pager.resident_pages' "$dir/stats-after-shrink.json")
    ((resident <= limit_pages)) && break
    ((p1 - t0 > 120000000)) && die "run $r: resident pages still $resident after 120 s"
    sleep 0.005
  done
  t1=$(now_us)
  wait_line "$dir/console" "phase=done " 600 || die "run $r: the toucher did not finish; see $dir"
  "$memvisor" ctl --api-sock "$sock" stats >"$dir/stats-end.json" || true
  set +e
  wait "$vm_pid"
  rc=$?
  set -e
  vm_pid=""
  [ "$rc" -eq 1 ] || die "run $r: memvisor exited $rc (1 is success); see $dir"

  shrink_ms=$(((t1 - t0) / 1000))
  lat() { jq -r ".pager.fault_latency | \"\(.p50_us) / \(.p99_us) (\(.samples))\"" "$1"; }
  {
    echo "## Run $r"
    echo
    echo "Shrink $start_limit → $limit: ${shrink_ms} ms until resident ≤ limit; PUT /memory answered after $(((t_put - t0) / 1000)) ms; then $polls GET /stats, the longest $((worst_poll / 1000)) ms."
    echo "Pager fault_latency p50 / p99 µs (samples): before the shrink $(lat "$dir/stats-before.json"); at its end $(lat "$dir/stats-after-shrink.json"); at the end of the run $(lat "$dir/stats-end.json")."
    echo
    echo "| step | host s from shrink start | when | touches | pgfault | slow | p50 µs | p99 µs | max µs |"
    echo "|---|---|---|---|---|---|---|---|---|"
  } >>"$summary"
  prev=""
  during_max=0
  while read -r ts line; do
    step=$(field "$line" phase)
    start=${prev:-$ts}
    when=before
    if ((ts > t0)); then
      when=after
      ((start < t1)) && when=during
    fi
    [ "$step" = step1 ] && when=before
    m=$(field "$line" slow_max_us)
    if [ "$when" = during ] && awk "BEGIN{exit !($m > $during_max)}"; then during_max=$m; fi
    printf '| %s | %+.2f | %s | %s | %s | %s | %s | %s | %s |\n' "$step" \
      "$(awk "BEGIN{print ($ts - $t0) / 1e6}")" "$when" "$(field "$line" touches)" \
      "$(field "$line" pgfault)" "$(field "$line" slow)" "$(field "$line" slow_p50_us)" \
      "$(field "$line" slow_p99_us)" "$m" >>"$summary"
    prev=$ts
  done < <(grep "RESULT workload=toucher phase=step" "$dir/console" | sed 's/ RESULT / /')
  done_line=$(grep "RESULT workload=toucher phase=done" "$dir/console" | cut -d' ' -f2-)
  {
    echo "| all | | | | | $(field "$done_line" slow) | $(field "$done_line" slow_p50_us) | $(field "$done_line" slow_p99_us) | $(field "$done_line" slow_max_us) |"
    echo
  } >>"$summary"
  # The step after the shrink (steady state: the working set no longer fits).
  last=$(grep "RESULT workload=toucher phase=step" "$dir/console" | tail -1 | cut -d' ' -f2-)
  runs_table+="| $r | $shrink_ms | $(((t_put - t0) / 1000)) | $during_max | $(field "$last" slow_p50_us) / $(field "$last" slow_p99_us) / $(field "$last" slow_max_us) | $(jq -r '.pager.fault_latency | "\(.p50_us) / \(.p99_us)"' "$dir/stats-after-shrink.json") | $(jq -r '.pager.fault_latency | "\(.p50_us) / \(.p99_us)"' "$dir/stats-end.json") |"$'\n'
done

{
  echo "## All runs"
  echo
  echo "| run | shrink ms | PUT /memory answered after ms | guest max µs, steps during the shrink | guest p50 / p99 / max µs, last step | pager fault p50 / p99 µs at shrink end | at run end |"
  echo "|---|---|---|---|---|---|---|"
  printf '%s' "$runs_table"
} >>"$summary"
cat "$summary"
