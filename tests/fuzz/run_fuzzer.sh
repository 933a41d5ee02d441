#!/usr/bin/env bash
# run_fuzzer.sh CLANGXX ROOT OUTDIR HARNESS SOURCES... [-lLIB ...]
# Builds one libFuzzer target (ASan + UBSan) with clang and runs it for a short, bounded
# time from the seeds in OUTDIR/corpus; a crash, leak or sanitizer report fails the test.
set -euo pipefail
clangxx=$1 root=$2 out=$3 harness=$4
shift 4
mkdir -p "$out/corpus"
sources=() libraries=()
for s in "$harness" "$@"; do
  if [[ $s == -* ]]; then libraries+=("$s"); else sources+=("$root/$s"); fi  # -l flags pass through
done
"$clangxx" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -I"$root/include" -I"$root/src" "${sources[@]}" "${libraries[@]}" -o "$out/fuzzer"
seeds="$root/tests/fuzz/seeds/$(basename "$out")"
corpus=("$out/corpus")
[[ -d "$seeds" ]] && corpus+=("$seeds")
"$out/fuzzer" -max_total_time="${QKV_FUZZ_SECONDS:-20}" -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 "${corpus[@]}"
