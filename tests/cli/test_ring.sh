#!/usr/bin/env bash
# qkv bench --ring (ring attention across MPI ranks) end to end.
#   tests/cli/test_ring.sh PATH/TO/qkv MPIEXEC [MPIEXEC FLAGS...]
#   tests/cli/test_ring.sh PATH/TO/qkv --unavailable     (qkv built without MPI)
# Every check asserts; the script prints each failure and exits 1 if there was any.
set -u

QKV=${1:?usage: test_ring.sh PATH/TO/qkv MPIEXEC [FLAGS...] | --unavailable}
shift
PYTHON=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export QKV_NUM_THREADS=1 OMP_NUM_THREADS=1

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

small=(--batch 1 --heads 2 --seq 48 --dim 16)

if [[ ${1:-} == --unavailable ]]; then
  run bench --ring "${small[@]}"
  expect_status 1 "--ring without MPI"
  expect_in err "built without MPI" "--ring without MPI names the reason"
  finish ring
  exit 0
fi

MPI=("$@")

# --json: rank 0 prints one line; the ring agrees with one process.
for ranks in 2 3; do
  QKV_COMMAND=("${MPI[@]}" -np "$ranks" "$QKV")
  run bench --ring "${small[@]}" --kv-heads 1 --causal --backward --json
  expect_status 0 "--ring --json, $ranks ranks"
  if "$PYTHON" - "$TMP/out" "$ranks" <<'PY'; then pass; else fail "--ring --json, $ranks ranks: $(head -c 400 "$TMP/out")"; fi
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, lines
j = json.loads(lines[0])
ranks = int(sys.argv[2])
assert j["ranks"] == ranks and j["op"] == "ring_attention+backward", j
assert j["ms"] > 0 and len(j["compute_ms"]) == ranks and len(j["comm_ms"]) == ranks, j
assert j["compute_ms_max"] >= j["compute_ms_min"] >= 0 and j["comm_ms_max"] >= j["comm_ms_min"] >= 0, j
# f32 attention, |values| <= sqrt(3): the ring's merge order differs from one process's
# only by rounding (the distributed tests bound it at 2e-5 relative).
assert 0 <= j["max_abs_diff"] < 1e-4, j
assert j["max_abs_diff"] == max(j["max_abs_diff_out"], j["max_abs_diff_dq"], j["max_abs_diff_dk"], j["max_abs_diff_dv"]), j
PY
done

QKV_COMMAND=("${MPI[@]}" -np 2 "$QKV")
run bench --ring "${small[@]}" --dtype bf16
expect_status 0 "--ring text"
expect_in out "^ring attention forward  ranks 2  B=1 Hq=2 Hkv=2 L=48 Dk=16 Dv=16$" "--ring text: the problem"
expect_in out "rank 1: compute [0-9.e+-]+ ms  communication [0-9.e+-]+ ms" "--ring text: per-rank times"
expect_in out "largest \|ring - single process\|: out " "--ring text: the difference"

# Refusals: a usage error (2) on every rank, before anything runs.
QKV_COMMAND=("${MPI[@]}" -np 4 "$QKV")
run bench --ring --batch 1 --heads 2 --seq 44 --dim 16
expect_status 2 "--seq not divisible by 2 x ranks"
expect_in err "--seq: must be divisible by 2 x ranks = 8" "--seq not divisible: the message"
QKV_COMMAND=("$QKV")
run bench --ring "${small[@]}" --kv-seq 24
expect_status 2 "--ring --kv-seq"
expect_in err "ring attention needs Lk = Lq" "--ring --kv-seq: the message"
run bench "${small[@]}" --backward --json
expect_status 0 "--backward without --ring"
expect_in out '"op":"attention\+backward"' "--backward without --ring: forward + backward in one process"
# --no-check: every rank only its shards, no comparison; each rank's peak memory reported.
QKV_COMMAND=("${MPI[@]}" -np 2 "$QKV")
run bench --ring "${small[@]}" --causal --no-check --json
expect_status 0 "--ring --no-check"
if "$PYTHON" - "$TMP/out" <<'PY'; then pass; else fail "--ring --no-check --json: $(head -c 400 "$TMP/out")"; fi
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, lines
j = json.loads(lines[0])
assert j["ranks"] == 2 and j["checked"] is False and j["max_abs_diff"] is None, j
assert len(j["peak_rss_mib"]) == 2 and all(m > 0 for m in j["peak_rss_mib"]), j
PY
QKV_COMMAND=("$QKV")
expect_usage_error "--no-check: is for --ring" bench "${small[@]}" --no-check
# One process is a ring of one.
run bench --ring "${small[@]}" --json
expect_status 0 "--ring without mpirun"
expect_in out '"ranks":1' "--ring without mpirun: one rank"

finish ring
