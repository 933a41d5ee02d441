#!/usr/bin/env bash
# mpirun -np N qkv train dates (data-parallel training) end to end.
#   tests/cli/test_train_mpi.sh PATH/TO/qkv MPIEXEC [MPIEXEC FLAGS...]
#   tests/cli/test_train_mpi.sh PATH/TO/qkv --unavailable     (qkv built without MPI)
# Every check asserts; the script prints each failure and exits 1 if there was any.
set -u

QKV=${1:?usage: test_train_mpi.sh PATH/TO/qkv MPIEXEC [FLAGS...] | --unavailable}
shift
PYTHON=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export QKV_NUM_THREADS=1 OMP_NUM_THREADS=1

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

small=(--steps 20 --batch 13 --eval-size 8 --checkpoint-every 0 --seed 3 --quiet)

if [[ ${1:-} == --unavailable ]]; then
  # What mpirun sets in each process: a qkv without MPI must not train N times alone.
  QKV_COMMAND=(env OMPI_COMM_WORLD_SIZE=2 "$QKV")
  run train dates "${small[@]}" --out "$TMP/alone"
  expect_status 1 "train dates under mpirun without MPI"
  expect_in err "built without MPI" "train dates under mpirun without MPI: the reason"
  finish train_mpi
  exit 0
fi

MPI=("$@")

# Two ranks against one process, the same global batch: the same weights, rank 0's output only.
QKV_COMMAND=("$QKV")
run train dates "${small[@]}" --out "$TMP/single" --json
expect_status 0 "single-process train dates"
QKV_COMMAND=("${MPI[@]}" -np 2 "$QKV")
run train dates "${small[@]}" --out "$TMP/parallel" --json
expect_status 0 "mpirun -np 2 train dates"
if [[ $(grep -c '^{' "$TMP/out") -eq 1 && $(grep -c '^training the date translator' "$TMP/out") -eq 1 ]]; then pass; else
  fail "mpirun -np 2 train dates: rank 0's output once, got: $(head -c 600 "$TMP/out")"; fi
expect_in out "on each of 2 ranks \(data-parallel, MPI\)" "mpirun -np 2 train dates: says it is data-parallel"
for f in model.safetensors config.json checkpoint.safetensors; do
  if [[ -s $TMP/parallel/$f ]]; then pass; else fail "mpirun -np 2 train dates: $f not written"; fi
done
# The weights, read from the safetensors files (8-byte header length, JSON header, data).
if "$PYTHON" - "$TMP/single/model.safetensors" "$TMP/parallel/model.safetensors" <<'PY'; then pass; else fail "2 ranks vs 1 process: weights differ"; fi
import json, struct, sys
import numpy as np
def load(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + a:8 + n + b], dtype=np.float32)
    return out
single, parallel = load(sys.argv[1]), load(sys.argv[2])
assert single.keys() == parallel.keys()
# As tests/distributed/test_data_parallel.cpp: the whole model within 1e-5 relative (norm of
# the difference over the norm of the weights), each tensor within 1e-4 of its largest
# magnitude, the key part of each in_proj_bias (which the output does not depend on) left out.
E = 128
diff2 = norm2 = 0.0
for name in single:
    a, b = single[name].astype(np.float64), parallel[name].astype(np.float64)
    if name.endswith("in_proj_bias"):
        a, b = np.concatenate([a[:E], a[2 * E:]]), np.concatenate([b[:E], b[2 * E:]])
    worst, scale = np.abs(a - b).max(), np.abs(a).max()
    assert worst <= 1e-4 * scale, (name, worst, scale)
    diff2 += ((a - b) ** 2).sum()
    norm2 += (a ** 2).sum()
assert diff2 ** 0.5 <= 1e-5 * norm2 ** 0.5, (diff2 ** 0.5, norm2 ** 0.5)
PY

# The language model the same way (tests/distributed compares its weights): one JSON line
# from rank 0, which says how the gradient sums went.
QKV_COMMAND=("${MPI[@]}" -np 2 "$QKV")
run train lm --text "$(dirname "${BASH_SOURCE[0]}")/../../README.md" --vocab-size 300 --context 32 --layers 1 \
  --embd 32 --heads 2 --steps 6 --batch 5 --eval-every 0 --checkpoint-every 0 --quiet --json --out "$TMP/lm"
expect_status 0 "mpirun -np 2 train lm"
if "$PYTHON" - "$TMP/out" <<'PY'; then pass; else fail "mpirun -np 2 train lm --json: $(head -c 600 "$TMP/out")"; fi
import json, sys
lines = [l for l in open(sys.argv[1]).read().splitlines() if l.startswith("{")]
assert len(lines) == 1, lines
j = json.loads(lines[0])
assert j["steps"] == 6 and j["ranks"] == 2 and j["reductions"] >= 6, j
assert 0 < j["reductions_started_early"] <= j["reductions"], j
PY

# A rank that dies: mpirun ends the others and exits non-zero within a bounded time, and no
# checkpoint is left that looks complete but is not (checkpoints are written to a temporary
# file beside it and renamed, qkv/files.h).
mkdir -p "$TMP/killed"
"${MPI[@]}" -np 2 "$QKV" train dates --steps 100000 --batch 8 --checkpoint-every 5 --out "$TMP/killed" --quiet \
  >"$TMP/killed.out" 2>"$TMP/killed.err" &
mpirun_pid=$!
for _ in $(seq 100); do [[ -f $TMP/killed/checkpoint.safetensors ]] && break; sleep 0.2; done
victim=$(pgrep -n -P "$mpirun_pid" -f "train dates" || pgrep -n -f "^$QKV train dates --steps 100000")
if [[ -n $victim ]]; then kill -9 "$victim"; pass; else fail "a rank to kill was not found"; fi
ended=0
for _ in $(seq 300); do
  if ! kill -0 "$mpirun_pid" 2>/dev/null; then ended=1; break; fi
  sleep 0.1
done
if [[ $ended -eq 1 ]]; then pass; else fail "mpirun still running 30 s after a rank died"; kill -9 "$mpirun_pid"; fi
wait "$mpirun_pid"
status=$?
if [[ $status -ne 0 ]]; then pass; else fail "mpirun exited 0 after a rank died"; fi
if [[ -f $TMP/killed/checkpoint.safetensors ]]; then
  if "$PYTHON" - "$TMP/killed/checkpoint.safetensors" <<'PY'; then pass; else fail "the checkpoint left behind is damaged"; fi
import json, os, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
end = max(t["data_offsets"][1] for k, t in header.items() if k != "__metadata__")
assert 8 + n + end == len(data), (8 + n + end, len(data))
PY
fi
pkill -9 -f "$QKV train dates --steps 100000" 2>/dev/null

finish train_mpi
