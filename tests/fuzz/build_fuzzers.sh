#!/usr/bin/env bash
# build_fuzzers.sh CLANGXX ROOT OUTDIR MANIFEST
# Builds every libFuzzer target (ASan + UBSan) with clang, for run_fuzzer.sh: each source
# that any target names compiles once, into OUTDIR/objects (the text layer's sources serve
# four fuzzers), in parallel; then each target links its harness, its objects and its -l
# flags into OUTDIR/NAME/fuzzer. MANIFEST has one target a line:
#   NAME HARNESS SOURCE... [-lLIB ...]     (paths relative to ROOT)
# Everything is rebuilt from nothing on every run: the objects are never stale.
set -euo pipefail
clangxx=$1 root=$2 out=$3 manifest=$4
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
       -I"$root/include" -I"$root/src" -I"$root/apps")
objects=$out/objects
rm -rf "$objects"
mkdir -p "$objects"
object_of() { local s=${1//\//_}; echo "$objects/${s%.cpp}.o"; }

# The sources, each once.
mapfile -t sources < <(tr ' ' '\n' <"$manifest" | grep -E '\.cpp$' | sort -u)
start=$(date +%s)
# xargs runs a fresh bash per source; the flags travel as one exported string.
flag_string=$(printf '%q ' "${flags[@]}")
export clangxx root objects flag_string
export -f object_of
printf '%s\n' "${sources[@]}" | xargs -P "$(nproc)" -I{} bash -c \
  'eval "flags=($flag_string)"; "$clangxx" "${flags[@]}" -c "$root/$0" -o "$(object_of "$0")"' {}
echo "compiled ${#sources[@]} sources in $(( $(date +%s) - start )) s"

while read -r name harness rest; do
  [[ -n ${name:-} ]] || continue
  objs=("$(object_of "$harness")") libraries=()
  for s in $rest; do
    if [[ $s == -* ]]; then libraries+=("$s"); else objs+=("$(object_of "$s")"); fi
  done
  mkdir -p "$out/$name"
  "$clangxx" -fsanitize=fuzzer,address,undefined "${objs[@]}" "${libraries[@]}" -o "$out/$name/fuzzer"
  echo "linked $name"
done <"$manifest"
