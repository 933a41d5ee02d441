#!/usr/bin/env bash
# mpirun -np N qkv train (data-parallel training) end to end: dates and lm, then mf, sasrec, vit and point on tiny data.
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

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/lib.sh"

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
run train dates "${small[@]}" --out "$TMP/parallel"
expect_status 0 "mpirun -np 2 train dates"
if [[ $(grep -c '^done: ' "$TMP/out") -eq 1 && $(grep -c '^training the date translator' "$TMP/out") -eq 1 ]]; then pass; else
  fail "mpirun -np 2 train dates: rank 0's output once, got: $(head -c 600 "$TMP/out")"; fi
expect_in out "on each of 2 ranks \(data-parallel, MPI\)" "mpirun -np 2 train dates: says it is data-parallel"
for f in model.safetensors config.json checkpoint.safetensors; do
  if [[ -s $TMP/parallel/$f ]]; then pass; else fail "mpirun -np 2 train dates: $f not written"; fi
done
# As tests/distributed/test_data_parallel.cpp: the whole model within 1e-5 relative, each
# tensor within 1e-4 of its largest magnitude (same_weights.py --close).
if "$PYTHON" "$HERE/same_weights.py" "$TMP/single/model.safetensors" "$TMP/parallel/model.safetensors" --close \
  --key-bias 128 >"$TMP/same" 2>&1; then pass; else fail "2 ranks vs 1 process: $(cat "$TMP/same")"; fi

# Every other task the loop trains, on tiny data: two ranks against one process. Adam
# divides each step by the gradient's own size, so the rounding of the sums taken in
# another order grows fastest in the smallest tensors (a bias near 0): the whole model
# within 1e-5 relative, each tensor within 1e-2 of its largest magnitude. (The point model's
# difference grows from 2e-7 after one step to 2e-5 after 14: one epoch of 4 steps here.)
"$PYTHON" "$HERE/tiny_data.py" ratings "$TMP/ratings.csv" 60 90
mkdir -p "$TMP/images"
"$PYTHON" "$HERE/tiny_data.py" images "$TMP/images" 5300 40
for spec in "mf|0|train mf --data $TMP/ratings.csv --dim 4 --batch 33 --epochs 3" \
            "sasrec|8|train sasrec --data $TMP/ratings.csv --dim 8 --max-len 10 --batch 7 --epochs 3 --eval-every 1" \
            "vit|16|train vit --data $TMP/images --batch 49 --dim 16 --layers 1 --heads 2 --mlp-dim 32 --patch-size 7 --epochs 2" \
            "point|0|train point --data $TMP/images --batch 99 --dim 8 --layers 1 --points 16 --neighbors 4 --epochs 1"; do
  IFS='|' read -r task width args <<<"$spec"  # width: of the attention's in_proj_bias
  read -r -a argv <<<"$args"
  QKV_COMMAND=("$QKV")
  run "${argv[@]}" --quiet --out "$TMP/single_$task"
  expect_status 0 "single-process $task"
  QKV_COMMAND=("${MPI[@]}" -np 2 "$QKV")
  run "${argv[@]}" --quiet --json --out "$TMP/parallel_$task"
  expect_status 0 "mpirun -np 2 $task"
  if "$PYTHON" -c 'import json, sys; j = json.loads(open(sys.argv[1]).read()); sys.exit(not (j["ranks"] == 2 and j["task"] == sys.argv[2]))' \
    "$TMP/out" "$task"; then pass; else fail "mpirun -np 2 $task --json: one line from rank 0: $(head -c 600 "$TMP/out")"; fi
  if "$PYTHON" "$HERE/same_weights.py" "$TMP/single_$task/model.safetensors" "$TMP/parallel_$task/model.safetensors" --close \
    --tensor 1e-2 --key-bias "$width" >"$TMP/same" 2>&1; then pass; else fail "$task: 2 ranks vs 1 process: $(cat "$TMP/same")"; fi
done

# A short last batch that leaves rank 1 no rows (1,320 fitted ratings in batches of 1,319;
# 60 users in batches of 59): that rank weighs nothing and adds nothing to the loss.
for spec in "mf|0|train mf --data $TMP/ratings.csv --dim 4 --batch 1319 --epochs 2" \
            "sasrec|8|train sasrec --data $TMP/ratings.csv --dim 8 --max-len 10 --batch 59 --epochs 2 --eval-every 1"; do
  IFS='|' read -r task width args <<<"$spec"
  read -r -a argv <<<"$args"
  QKV_COMMAND=("$QKV")
  run "${argv[@]}" --quiet --out "$TMP/single_short_$task"
  expect_status 0 "single-process $task, a last batch of one"
  QKV_COMMAND=("${MPI[@]}" -np 2 "$QKV")
  run "${argv[@]}" --quiet --json --out "$TMP/parallel_short_$task"
  expect_status 0 "mpirun -np 2 $task, a last batch of one"
  if "$PYTHON" -c 'import json, math, sys; j = json.loads(open(sys.argv[1]).read()); sys.exit(not (isinstance(j["loss"], float) and math.isfinite(j["loss"])))' \
    "$TMP/out"; then pass; else fail "mpirun -np 2 $task, a last batch of one: the loss: $(head -c 400 "$TMP/out")"; fi
  if "$PYTHON" "$HERE/same_weights.py" "$TMP/single_short_$task/model.safetensors" "$TMP/parallel_short_$task/model.safetensors" \
    --close --tensor 1e-2 --key-bias "$width" >"$TMP/same" 2>&1; then pass; else fail "$task, a last batch of one: $(cat "$TMP/same")"; fi
done

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
