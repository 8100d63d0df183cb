#!/usr/bin/env bash
# Coverage-guided fuzzing of the parsers that take outside input (docs/fuzzing.md):
#   scripts/fuzz.sh [SECONDS] [TARGET...]
# runs each target (all of them by default) for SECONDS (default 3600) with cargo-fuzz on the
# nightly toolchain, starting from the seeds in fuzz/corpus/TARGET, and prints per target the
# executions and coverage of libFuzzer's last stats line. New inputs go to
# fuzz/target/corpus/TARGET, so the checked-in seeds stay small. A crash stops the run with its
# input in fuzz/artifacts/TARGET and a non-zero exit.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-3600}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(api_request host_config elf_loader)
case $secs in '' | *[!0-9]*)
    echo "fuzz.sh: SECONDS '$secs' is not a whole number of seconds" >&2
    exit 2
    ;;
esac
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
    echo "fuzz.sh: $t for ${secs}s"
    if cargo +nightly fuzz run "$t" "$work" "corpus/$t" -- -max_total_time="$secs" >"$log" 2>&1; then
        line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n1)
        summary+=("$t: ${line:-no DONE line, see fuzz/$log}")
    else
        status=1
        tail -n 40 "$log" >&2
        summary+=("$t: CRASH, see fuzz/$log and fuzz/artifacts/$t/")
    fi
done
printf '%s\n' "${summary[@]}"
exit $status
