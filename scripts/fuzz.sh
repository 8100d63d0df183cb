#!/usr/bin/env bash
# Coverage-guided fuzzing of the code that takes outside input (docs/fuzzing.md):
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#   scripts/fuzz.sh --runs N [--max-time SECONDS] [TARGET...]
# runs each target (all of them by default) for SECONDS (default 3600), or for N executions
# (at most SECONDS with --max-time), with cargo-fuzz on the nightly toolchain, starting from
# the seeds in fuzz/corpus/TARGET, and prints per target libFuzzer's last stats line
# (executions, coverage, corpus, exec/s) and the wall time. New inputs go to
# fuzz/target/corpus/TARGET, so the checked-in seeds stay small. An input that panics, trips
# the sanitizer or runs longer than 10 s stops that target with the input in
# fuzz/artifacts/TARGET and makes the script exit non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
number() {
    case $2 in '' | *[!0-9]*)
        echo "fuzz.sh: $1 takes a whole number, not '$2'" >&2
        exit 2
        ;;
    esac
}
if [ "${1:-}" = --runs ]; then
    number --runs "${2:-}"
    limit=(-runs="$2")
    what="$2 runs"
    shift 2
    if [ "${1:-}" = --max-time ]; then
        number --max-time "${2:-}"
        limit+=(-max_total_time="$2")
        what="$what or ${2}s"
        shift 2
    fi
else
    secs=${1:-3600}
    shift || true
    number SECONDS "$secs"
    limit=(-max_total_time="$secs")
    what="${secs}s"
fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(api_request host_config elf_loader indirection_log virtio_mmio virtio_blk virtio_balloon)
if ! rustup toolchain list | grep -q '^nightly'; then
    echo "fuzz.sh: cargo-fuzz needs the nightly toolchain: rustup toolchain install nightly" >&2
    exit 2
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    cargo +nightly install cargo-fuzz --locked
fi
cd fuzz
cargo +nightly fuzz build
status=0
summary=()
for t in "${targets[@]}"; do
    work=target/corpus/$t
    mkdir -p "$work"
    log=target/fuzz-$t.log
    echo "fuzz.sh: $t for $what"
    start=$SECONDS
    if cargo +nightly fuzz run "$t" "$work" "corpus/$t" -- "${limit[@]}" -timeout=10 >"$log" 2>&1; then
        line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n1)
        summary+=("$t: ${line:-no DONE line, see fuzz/$log} ($((SECONDS - start)) s)")
    else
        status=1
        tail -n 40 "$log" >&2
        kind=CRASH
        grep -q 'ERROR: libFuzzer: timeout' "$log" && kind=HANG
        summary+=("$t: $kind after $((SECONDS - start)) s, see fuzz/$log and fuzz/artifacts/$t/")
    fi
done
printf '%s\n' "${summary[@]}"
exit $status
