#!/usr/bin/env bash
# Reruns the cargo-fuzz (libFuzzer) targets in fuzz/ (docs/bad-inputs.md): each for SECONDS
# (default 60), one process, one core, from its seed corpus in fuzz/seeds/ plus what earlier
# runs kept in fuzz/corpus/ (not committed). A crash leaves its input in fuzz/artifacts/TARGET/
# and stops the script with libFuzzer's report.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]      # make fuzz FUZZ_SECONDS=600
#   RUNS=1000000 scripts/fuzz.sh 3600 arrow    # stop at 1,000,000 executions (or the time)
#   MAX_LEN=8192 scripts/fuzz.sh 600 policy_cuda_async   # shorter inputs (request streams of up to 1,638 ops)
#
# Needs a nightly toolchain and cargo-fuzz (`rustup toolchain install nightly`,
# `cargo install cargo-fuzz`). FUZZ_TARGET_DIR sets the build folder (default fuzz/target;
# its flags differ from the ordinary build's, so it is kept apart).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
target_dir=$(realpath -m "${FUZZ_TARGET_DIR:-fuzz/target}")
if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cd fuzz && cargo +nightly fuzz list)
fi
for t in "${targets[@]}"; do
    case "$t" in
        policy_*) seeds=fuzz/seeds/policy ;;
        *) seeds=fuzz/seeds/$t ;;
    esac
    mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
    echo "== $t ($secs s)" >&2
    # No sanitizer (the core is safe Rust; this doubles the speed) but debug assertions, so
    # integer overflows panic. FUZZ_FLAGS overrides (e.g. "-s address").
    # shellcheck disable=SC2086
    (cd fuzz && cargo +nightly fuzz run ${FUZZ_FLAGS:--s none -a} --target-dir "$target_dir" "$t" "corpus/$t" "../$seeds" -- \
        -max_total_time="$secs" ${RUNS:+-runs="$RUNS"} -rss_limit_mb=2048 -max_len="${MAX_LEN:-65536}" -timeout=10 -print_final_stats=1 \
        -artifact_prefix="artifacts/$t/") 2>&1 | grep -E "^(Done|stat::number_of_executed_units|==[0-9]+==|SUMMARY|thread '|panicked)" || true
    [ -z "$(ls -A "fuzz/artifacts/$t")" ] || { echo "$t: crash inputs in fuzz/artifacts/$t" >&2; exit 1; }
done
