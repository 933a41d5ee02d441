#!/usr/bin/env bash
# End-to-end tests of `qkv train` and `qkv translate`.
#   tests/cli/test_train.sh PATH/TO/qkv GROUP     GROUP: train | translate
# train: a few steps of training, checkpoints, --resume, Ctrl-C (SIGINT) saving a
# checkpoint, bad options. translate: the embedded model on dates in every family of
# formats, --file, --json, --show, --html, --svg, --model, bad input.
# Every check asserts; the script prints each failure and exits 1 if there was any.
set -u

QKV=${1:?usage: test_train.sh PATH/TO/qkv GROUP}
GROUP=${2:-train}
PYTHON=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/lib.sh"

test_train() {
  local m="$TMP/model"
  run train dates --steps 4 --batch 8 --out "$m" --eval-size 20 --checkpoint-every 2 --quiet
  expect_status 0 "train 4 steps"
  expect_in out "held-out exact match: [0-9.]+% of 20 dates" "train prints the held-out score"
  for f in model.safetensors config.json checkpoint.safetensors; do
    if [[ -s "$m/$f" ]]; then pass; else fail "train did not write $f"; fi
  done
  # The weights record how they were made and how well they did.
  "$PYTHON" - "$m/model.safetensors" >"$TMP/meta" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
meta = json.loads(data[8:8 + n])["__metadata__"]
print(meta["trained_with"]); print(meta["steps"]); print(meta["held_out_exact_match"])
PY
  if grep -q "train dates --steps 4" "$TMP/meta" && sed -n 2p "$TMP/meta" | grep -qx 4; then pass; else
    fail "model metadata: $(cat "$TMP/meta")"
  fi

  # --stop-at stops with a checkpoint; --resume continues from its step.
  m="$TMP/resumed"
  run train dates --steps 6 --batch 8 --out "$m" --stop-at 3 --quiet
  expect_status 0 "--stop-at"
  expect_in out "stopped at step 3 of 6; checkpoint saved" "--stop-at message"
  run train dates --steps 6 --batch 8 --out "$m" --eval-size 20 --resume --json --quiet
  expect_status 0 "resume"
  expect_in out '"steps":6' "resume reaches step 6"
  # A resumed run equals an uninterrupted one (the batches are a function of seed and step).
  run train dates --steps 6 --batch 8 --out "$TMP/straight" --eval-size 20 --json --quiet
  expect_status 0 "train 6 steps straight"
  if cmp -s "$m/model.safetensors" "$TMP/straight/model.safetensors" ||
     "$PYTHON" - "$m/model.safetensors" "$TMP/straight/model.safetensors" <<'PY'
import json, struct, sys
def tensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    head = json.loads(data[8:8 + n]); body = data[8 + n:]
    return {k: body[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in head.items() if k != "__metadata__"}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
sys.exit(0 if a == b else 1)
PY
  then pass; else fail "3 steps + resume to 6 differs from 6 steps straight"; fi

  # Ctrl-C: the run stops at a step boundary, saves a checkpoint, exits 130, and resumes.
  "$QKV" train dates --steps 100000 --batch 8 --out "$TMP/int" --quiet >"$TMP/out" 2>"$TMP/err" &
  local pid=$!
  sleep 3
  kill -INT "$pid"
  wait "$pid"
  status=$?
  expect_status 130 "SIGINT"
  expect_in out "interrupted at step [0-9]+ of 100000; checkpoint saved" "SIGINT message"
  if [[ -s "$TMP/int/checkpoint.safetensors" ]]; then pass; else fail "no checkpoint after SIGINT"; fi
  local at
  at=$(grep -Eo "interrupted at step [0-9]+" "$TMP/out" | grep -Eo "[0-9]+$")
  run train dates --steps $((at + 2)) --batch 8 --out "$TMP/int" --eval-size 10 --resume --json --quiet
  expect_status 0 "resume after SIGINT"
  expect_in out "\"steps\":$((at + 2))" "resume after SIGINT reaches its steps"

  expect_usage_error "the only task is 'dates'" train poems
  expect_usage_error "--steps" train dates --steps 0
  expect_usage_error "--batch" train dates --batch x
  expect_failure "no checkpoint" train dates --steps 3 --out "$TMP/empty" --resume
}

test_translate() {
  # One date of each family of formats, through the embedded model.
  local inputs=("Saturday, 21 November 2026" "21 November 2026" "November 21, 2026"
    "Nov 21, 2026" "21 Nov 2026" "November 21st 2026" "the 21st of November, 2026"
    "Saturday, November 21, 2026" "Sat 21 Nov 2026" "21.11.2026" "2026/11/21" "2026-11-21"
    "2026年11月21日" "2026年11月21日星期六" "二〇二六年十一月二十一日" "1 january 1900"
    "DECEMBER 31, 2099" "the 3rd of march, 1999" "29.02.2000")
  local want=(2026-11-21 2026-11-21 2026-11-21 2026-11-21 2026-11-21 2026-11-21 2026-11-21
    2026-11-21 2026-11-21 2026-11-21 2026-11-21 2026-11-21 2026-11-21 2026-11-21 2026-11-21
    1900-01-01 2099-12-31 1999-03-03 2000-02-29)
  run translate "${inputs[@]}"
  expect_status 0 "translate"
  expect_equal out "$(printf '%s\n' "${want[@]}")" "translate every format family"

  printf '%s\n' "${inputs[@]:0:3}" >"$TMP/dates.txt"
  run translate --file "$TMP/dates.txt" --json
  expect_status 0 "translate --file --json"
  "$PYTHON" - "$TMP/out" <<'PY' && pass || fail "--json lines: $(cat "$TMP/out")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert [l["input"] for l in lines] == ["Saturday, 21 November 2026", "21 November 2026", "November 21, 2026"], lines
assert all(l["output"] == "2026-11-21" for l in lines), lines
PY

  run translate --show "Sat 21 Nov 2026"
  expect_status 0 "translate --show"
  expect_in out "Sat 21 Nov 2026  →  2026-11-21" "--show names input and output"
  expect_in out "cross-attention, decoder layer" "--show titles the heatmap"
  expect_in out "[░▒▓█]" "--show draws shades"

  run translate --html "$TMP/view.html" --svg "$TMP/view.svg" "2026年11月21日"
  expect_status 0 "translate --html --svg"
  expect_in out "wrote $TMP/view.html" "--html says where"
  if grep -q "qkv-attention-data" "$TMP/view.html" && grep -q "cross-attention" "$TMP/view.html" &&
     grep -q "decoder masked self-attention" "$TMP/view.html"; then pass; else fail "--html page content"; fi
  if ! grep -Eq "(src|href)=\"https?:" "$TMP/view.html"; then pass; else fail "--html fetches from the network"; fi
  if head -c 200 "$TMP/view.svg" | grep -q "<svg"; then pass; else fail "--svg is not SVG"; fi

  expect_usage_error "give dates to translate" translate
  expect_usage_error "--layer" translate --layer 9 "21.11.2026"
  expect_failure "--file '$TMP/missing.txt': cannot open" translate --file "$TMP/missing.txt"
  expect_failure "config.json" translate --model "$TMP/nowhere" "21.11.2026"
  printf '\xff\xfe bad\n' >"$TMP/bad.txt"
  expect_failure "UTF-8" translate --file "$TMP/bad.txt"
  expect_failure "characters" translate "$(printf 'x%.0s' {1..80})"
  expect_failure "cannot" translate --html /nonexistent-dir/page.html "21.11.2026"
}

case "$GROUP" in
  train) test_train ;;
  translate) test_translate ;;
  *) echo "unknown group $GROUP" >&2; exit 2 ;;
esac
finish "$GROUP"
