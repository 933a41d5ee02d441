#!/usr/bin/env bash
# run_fuzzer.sh ROOT OUTDIR
# Runs one libFuzzer target that build_fuzzers.sh built (OUTDIR/fuzzer, ASan + UBSan) for a
# short, bounded time from the seeds in ROOT/tests/fuzz/seeds/NAME and its corpus in
# OUTDIR/corpus; a crash, leak or sanitizer report fails the test.
set -euo pipefail
root=$1 out=$2
[[ -x $out/fuzzer ]] || { echo "no $out/fuzzer: fuzz.build did not build it" >&2; exit 1; }
mkdir -p "$out/corpus"
seeds="$root/tests/fuzz/seeds/$(basename "$out")"
corpus=("$out/corpus")
[[ -d "$seeds" ]] && corpus+=("$seeds")
"$out/fuzzer" -max_total_time="${QKV_FUZZ_SECONDS:-10}" -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 "${corpus[@]}"
