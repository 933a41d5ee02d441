#!/usr/bin/env bash
# What the one training loop gives every `qkv train` task, checked per task end to end:
#   tests/cli/test_train_loop.sh PATH/TO/qkv TASK      TASK: dates lm mf sasrec vit point
# - --stop-at N: a checkpoint, exit 130; --resume then ends with the straight run's weights,
#   bit for bit;
# - Ctrl-C (SIGINT) in the middle of a run: the same, at whatever step it arrived;
# - --json: the fields every task's result has (task, steps, interrupted, seconds, ...);
# - --resume refuses another run's checkpoint (naming the option), another task's and a
#   damaged one, with a message and exit 1.
# On tiny data written here (tiny_data.py). Every check asserts; the script prints each
# failure and exits 1 if there was any.
set -u

QKV=${1:?usage: test_train_loop.sh PATH/TO/qkv TASK}
TASK=${2:?usage: test_train_loop.sh PATH/TO/qkv TASK}
PYTHON=/usr/bin/python3
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export QKV_NUM_THREADS=2
source "$HERE/lib.sh"

# BASE: the task's command; SHORT / LONG: a run's length (LONG lasts a second or more, so a
# signal sent after its first checkpoint arrives in the middle); K: a step inside SHORT.
case $TASK in
  dates) BASE=(train dates --batch 8 --eval-size 10 --checkpoint-every 3 --quiet)
         SHORT=(--steps 8) LONG=(--steps 60) K=5 ;;
  lm) BASE=(train lm --text "$HERE/../../README.md" --vocab-size 300 --context 32 --layers 1 --embd 32 --heads 2
            --batch 4 --eval-every 3 --checkpoint-every 3 --quiet)
      SHORT=(--steps 8) LONG=(--steps 400) K=5 ;;
  mf|sasrec)
    "$PYTHON" "$HERE/tiny_data.py" ratings "$TMP/ratings.csv" 60 90
    if [[ $TASK == mf ]]; then
      BASE=(train mf --data "$TMP/ratings.csv" --dim 4 --batch 32 --checkpoint-every 20 --quiet) SHORT=(--epochs 3) LONG=(--epochs 150) K=3
    else
      BASE=(train sasrec --data "$TMP/ratings.csv" --dim 8 --max-len 10 --batch 8 --eval-every 1 --checkpoint-every 20 --quiet)
      SHORT=(--epochs 3) LONG=(--epochs 150) K=3
    fi ;;
  vit|point)
    mkdir -p "$TMP/images"
    "$PYTHON" "$HERE/tiny_data.py" images "$TMP/images" 5300 40
    if [[ $TASK == vit ]]; then
      BASE=(train vit --data "$TMP/images" --batch 50 --dim 16 --layers 1 --heads 2 --mlp-dim 32 --patch-size 7 --quiet)
      SHORT=(--epochs 2) LONG=(--epochs 30) K=5
    else
      BASE=(train point --data "$TMP/images" --batch 50 --dim 8 --layers 1 --points 16 --neighbors 4 --quiet)
      SHORT=(--epochs 2) LONG=(--epochs 6) K=5
    fi ;;
  *) echo "unknown task $TASK" >&2; exit 2 ;;
esac

same_weights() {  # same_weights A_DIR B_DIR WHAT
  if "$PYTHON" "$HERE/same_weights.py" "$1/model.safetensors" "$2/model.safetensors" >"$TMP/same" 2>&1; then pass; else
    fail "$3: $(cat "$TMP/same")"; fi
}

# The straight run, and --json's common fields.
run "${BASE[@]}" "${SHORT[@]}" --out "$TMP/straight" --json
expect_status 0 "$TASK: the straight run"
if "$PYTHON" - "$TMP/out" "$TASK" <<'PY'; then pass; else fail "$TASK --json: $(head -c 600 "$TMP/out")"; fi
import json, sys
j = json.loads(open(sys.argv[1]).read())
for key in ("task", "steps", "interrupted", "stopped_early", "seconds", "items_per_s", "unit", "loss",
            "evaluations", "metric", "best_step", "best_score", "checkpoint"):
    assert key in j, key
assert j["task"] == sys.argv[2] and j["interrupted"] is False and j["steps"] > 0, j
PY

# --stop-at: a checkpoint and 130; --resume ends where the straight run ended.
run "${BASE[@]}" "${SHORT[@]}" --out "$TMP/stopped" --stop-at "$K"
expect_status 130 "$TASK --stop-at"
expect_in out "stopped at step $K of [0-9]+; checkpoint saved to $TMP/stopped/checkpoint.safetensors" "$TASK --stop-at: says so"
expect_in out "continue with: .* --resume" "$TASK --stop-at: says how to go on"
run "${BASE[@]}" "${SHORT[@]}" --out "$TMP/stopped" --resume
expect_status 0 "$TASK --resume after --stop-at"
same_weights "$TMP/straight" "$TMP/stopped" "$TASK: --stop-at $K, then --resume, against the straight run"

# Ctrl-C after the first checkpoint: 130, a checkpoint; --resume ends where the straight run ends.
"$QKV" "${BASE[@]}" "${LONG[@]}" --out "$TMP/int" >"$TMP/out" 2>"$TMP/err" &
pid=$!
for _ in $(seq 600); do [[ -f $TMP/int/checkpoint.safetensors ]] && break; sleep 0.05; done
kill -INT "$pid"
wait "$pid"
status=$?
expect_status 130 "$TASK: SIGINT"
expect_in out "interrupted at step [0-9]+ of [0-9]+; checkpoint saved" "$TASK: SIGINT says so"
run "${BASE[@]}" "${LONG[@]}" --out "$TMP/int" --resume
expect_status 0 "$TASK: --resume after SIGINT"
run "${BASE[@]}" "${LONG[@]}" --out "$TMP/long"
expect_status 0 "$TASK: the long run straight"
same_weights "$TMP/long" "$TMP/int" "$TASK: SIGINT, then --resume, against the straight run"

# --resume of what is not this run's checkpoint: refused, named, exit 1.
run "${BASE[@]}" "${SHORT[@]}" --out "$TMP/stopped2" --stop-at "$K"
expect_status 130 "$TASK --stop-at again"
expect_failure "was written by a run with other options (" "${BASE[@]}" "${SHORT[@]}" --out "$TMP/stopped2" --resume --seed 9
expect_in err "seed '0' there, '9' now" "$TASK: the option that differs is named"
cp "$TMP/stopped2/checkpoint.safetensors" "$TMP/stopped2/good"
head -c 300 "$TMP/stopped2/good" >"$TMP/stopped2/checkpoint.safetensors"
expect_failure "$TMP/stopped2/checkpoint.safetensors" "${BASE[@]}" "${SHORT[@]}" --out "$TMP/stopped2" --resume
if [[ $TASK == dates ]]; then other=(train lm --text "$HERE/../../README.md" --vocab-size 300 --context 32 --layers 1
                                     --embd 32 --heads 2 --batch 4 --steps 3 --quiet) other_task=lm
else other=(train dates --batch 2 --steps 3 --quiet) other_task=dates; fi
run "${other[@]}" --stop-at 1 --out "$TMP/other"
cp "$TMP/other/checkpoint.safetensors" "$TMP/stopped2/checkpoint.safetensors"
expect_failure "is a checkpoint of 'qkv train $other_task', not of 'qkv train $TASK'" "${BASE[@]}" "${SHORT[@]}" --out "$TMP/stopped2" --resume
# The sibling model (once the same command with another --model, now its own subcommand)
# writes the same files: its checkpoint is refused naming both subcommands.
case $TASK in
  mf) sibling=(train sasrec --data "$TMP/ratings.csv" --dim 8 --max-len 10 --batch 8 --epochs 3 --quiet) sibling_task=sasrec ;;
  sasrec) sibling=(train mf --data "$TMP/ratings.csv" --dim 4 --batch 32 --epochs 3 --quiet) sibling_task=mf ;;
  vit) sibling=(train point --data "$TMP/images" --batch 50 --dim 8 --layers 1 --points 16 --neighbors 4 --epochs 2 --quiet)
       sibling_task=point ;;
  point) sibling=(train vit --data "$TMP/images" --batch 50 --dim 16 --layers 1 --heads 2 --mlp-dim 32 --patch-size 7
                  --epochs 2 --quiet) sibling_task=vit ;;
  *) sibling=() ;;
esac
if [[ ${#sibling[@]} -gt 0 ]]; then
  run "${sibling[@]}" --stop-at 1 --out "$TMP/sibling"
  expect_status 130 "$TASK: the sibling $sibling_task --stop-at 1"
  expect_in out "continue with: qkv train $sibling_task .*--resume" "$TASK: the sibling's stop names its subcommand"
  cp "$TMP/sibling/checkpoint.safetensors" "$TMP/stopped2/checkpoint.safetensors"
  expect_failure "is a checkpoint of 'qkv train $sibling_task', not of 'qkv train $TASK'" \
    "${BASE[@]}" "${SHORT[@]}" --out "$TMP/stopped2" --resume
fi

# --patience (the tasks that keep their best evaluation's weights): a long run stops early
# after that many evaluations without a better one, and says so.
if [[ $TASK == mf || $TASK == sasrec || $TASK == vit ]]; then
  run "${BASE[@]}" "${LONG[@]}" --patience 2 --out "$TMP/patient" --json
  expect_status 0 "$TASK --patience 2"
  if "$PYTHON" - "$TMP/out" <<'PY'; then pass; else fail "$TASK --patience 2: $(head -c 600 "$TMP/out")"; fi
import json, sys
j = json.loads(open(sys.argv[1]).read())
e = j["evaluations"]
assert j["stopped_early"] is True and j["steps"] == e[-1][0], j["steps"]
# the last two evaluations were no better than the best, which came just before them
assert [x[0] for x in e[-3:]] and j["best_step"] == e[-3][0], (j["best_step"], e[-4:])
PY
fi

finish "train_loop_$TASK"
