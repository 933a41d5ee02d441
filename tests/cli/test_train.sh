#!/usr/bin/env bash
# End-to-end tests of `qkv train` and `qkv translate`.
#   tests/cli/test_train.sh PATH/TO/qkv GROUP     GROUP: train | tokenizer | lm | translate
# train: a few steps of training, checkpoints, --resume, Ctrl-C (SIGINT) saving a
# checkpoint, bad options. tokenizer: `qkv train tokenizer` writes GPT-2 files that
# `qkv tokenize` loads and that round-trip the text; bad input. lm: `qkv train lm` writes a
# GPT-2 directory that `qkv generate` and `qkv score` read; --json, --stop-at/--resume,
# Ctrl-C, bad input. translate: the embedded model on dates in every family of
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
  expect_status 130 "--stop-at"
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

  # One subcommand per task: no task, an unknown one, and the old spellings (train
  # recommender / vision [--model ...]) are usage errors naming what to type instead.
  local tasks="the tasks are dates, tokenizer, lm, mf, sasrec, vit and point"
  expect_usage_error "$tasks" train poems
  expect_usage_error "$tasks" train foo --steps 3
  expect_usage_error "name what to train (qkv train TASK): the tasks are dates, tokenizer, lm, mf, sasrec, vit and point" train
  expect_usage_error "'qkv train recommender' is now 'qkv train mf'" train recommender --data "$TMP/x.csv"
  expect_usage_error "'qkv train recommender' is now 'qkv train mf'" train recommender --model mf --data "$TMP/x.csv"
  expect_usage_error "'qkv train recommender' is now 'qkv train sasrec'" train recommender --model sasrec --data "$TMP/x.csv"
  expect_usage_error "'qkv train recommender' is now 'qkv train sasrec'" train recommender --data "$TMP/x.csv" --epochs 2 --model sasrec
  expect_usage_error "'qkv train vision' is now 'qkv train vit'" train vision --data "$TMP/images"
  expect_usage_error "'qkv train vision' is now 'qkv train point'" train vision --model point --data "$TMP/images"
  expect_usage_error "'qkv train vision' is now 'qkv train point'" train vision --data "$TMP/images" --points 16 --model point
  if [[ ! -e "$TMP/x.csv" && ! -e recommender-model && ! -e vision-model ]]; then pass; else
    fail "an old spelling wrote something"
  fi
  # --model is no option of any task now; another task's option is an unknown one.
  expect_usage_error "unknown option --model; the options are --steps, --batch" train dates --model mf
  expect_usage_error "unknown option --data; the options are --steps" train dates --data "$TMP/x.csv"
  expect_usage_error "unknown option --stepz (did you mean --steps?)" train dates --stepz 3
  # Values out of range name the range and the value as given.
  expect_usage_error "--steps: must be an integer in [1, 100000000], got '0'" train dates --steps 0
  expect_usage_error "--batch: must be an integer in [1, 65536], got 'x'" train dates --batch x
  expect_usage_error "--batch: must be an integer in [1, 65536], got '0'" train dates --batch 0
  expect_usage_error "--stop-at: must be an integer in [0, 100000000], got '-1'" train dates --stop-at -1
  expect_usage_error "--lr: must be a finite number in [1e-07, 1]" train dates --lr 2
  # --stop-at 0 is the default: never stop (the run ends with its model, exit 0).
  run train dates --steps 2 --batch 8 --eval-size 10 --stop-at 0 --out "$TMP/stop0" --quiet
  expect_status 0 "train dates --stop-at 0 (never)"
  [[ -s $TMP/stop0/model.safetensors ]] && pass || fail "--stop-at 0 did not write the model"
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

test_tokenizer() {
  local text="$TMP/speech.txt" dir="$TMP/bpe"
  for i in $(seq 1 40); do
    echo "Mr. Speaker, the state of our Union is strong; the nation's $i-th budget is balanced."
    echo "Naïve café owners — and 東京 — ask: what is the state of the Union? (Applause.)"
  done >"$text"
  run train tokenizer --text "$text" --vocab-size 300 --out "$dir"
  expect_status 0 "train tokenizer"
  expect_in out "wrote .*/vocab.json and .*/merges.txt" "train tokenizer says what it wrote"
  for f in vocab.json merges.txt; do
    if [[ -s "$dir/$f" ]]; then pass; else fail "train tokenizer did not write $f"; fi
  done
  # GPT-2's formats: vocab.json {token: id}, ids 0..N-1; merges.txt "#version" then pairs.
  "$PYTHON" - "$dir" "$text" <<'PY' >"$TMP/check" 2>&1
import json, sys
d, text = sys.argv[1], open(sys.argv[2], encoding="utf-8").read()
vocab = json.load(open(d + "/vocab.json", encoding="utf-8"))
merges = open(d + "/merges.txt", encoding="utf-8").read().split("\n")
assert merges[0] == "#version: 0.2", merges[0]
pairs = [m.split(" ") for m in merges[1:] if m]
assert sorted(vocab.values()) == list(range(len(vocab))), "ids are not 0..N-1"
assert len(vocab) == 256 + len(pairs) + 1 and vocab["<|endoftext|>"] == len(vocab) - 1
assert all(a + b in vocab for a, b in pairs), "a merge's result is not in the vocabulary"
assert "Ġthe" in vocab, "the most frequent word is not a token"
print("ok", len(vocab))
PY
  expect_in check "^ok 300$" "the files are GPT-2's format: $(head -c 300 "$TMP/check")"
  mkdir -p "$TMP/model"
  cp "$dir/vocab.json" "$dir/merges.txt" "$TMP/model/"
  run tokenize --model "$TMP/model" --json --text "in the state of our Union 😀"
  expect_status 0 "qkv tokenize loads the trained vocabulary"
  expect_in out "Ġthe" "tokenize uses the learned merges"
  run train tokenizer --text "$text" --vocab-size 300 --out "$TMP/again" --json
  expect_status 0 "train tokenizer --json"
  expect_in out '"merges":43,' "--json reports the merges"
  if cmp -s "$dir/merges.txt" "$TMP/again/merges.txt"; then pass; else fail "training is not deterministic"; fi

  : >"$TMP/empty.txt"
  expect_failure "is empty" train tokenizer --text "$TMP/empty.txt" --out "$TMP/x"
  printf 'ab\0cd\n' >"$TMP/binary.txt"
  expect_failure "binary data" train tokenizer --text "$TMP/binary.txt" --out "$TMP/x"
  printf 'ab\xff\n' >"$TMP/latin1.txt"
  expect_failure "UTF-8" train tokenizer --text "$TMP/latin1.txt" --out "$TMP/x"
  expect_usage_error "--vocab-size" train tokenizer --text "$text" --vocab-size 257
  expect_usage_error "--text is required" train tokenizer --out "$TMP/x"
  expect_usage_error "--text: 1 required TEXT missing" train tokenizer --text
  expect_usage_error "unknown option --steps; the options are --text, --out, --vocab-size, --min-frequency" \
    train tokenizer --text "$text" --steps 3
  expect_usage_error "unknown option --resume; the options are --text" train tokenizer --text "$text" --resume
  expect_usage_error "unknown option --text; the options are --steps" train dates --text "$text"
  expect_usage_error "--min-frequency: must be an integer in [1, 2^63), got '0'" \
    train tokenizer --text "$text" --min-frequency 0
}

test_lm() {
  local text="$TMP/speech.txt" heldout="$TMP/heldout.txt" m="$TMP/lm"
  "$PYTHON" - "$text" "$heldout" <<'PY'
import sys
words = "the people of the union and the congress of the states shall work for peace".split()
lines = [" ".join(words[(i * 7 + j) % len(words)] for j in range(40)) + "." for i in range(80)]
open(sys.argv[1], "w").write("\n".join(lines[:70]) + "\n")
open(sys.argv[2], "w").write("\n".join(lines[70:]) + "\n")
PY
  local small=(--vocab-size 300 --layers 1 --embd 16 --heads 2 --context 16 --batch 2)
  run train lm --text "$text" --heldout "$heldout" "${small[@]}" --steps 6 --eval-every 3 --out "$m" --quiet
  expect_status 0 "train lm"
  expect_in out "done: 6 steps" "train lm reports its steps"
  expect_in out "held-out loss [0-9.]+" "train lm reports the held-out loss"
  for f in config.json model.safetensors vocab.json merges.txt checkpoint.safetensors; do
    if [[ -s "$m/$f" ]]; then pass; else fail "train lm did not write $f"; fi
  done
  if grep -q '"model_type": "gpt2"' "$m/config.json"; then pass; else fail "config.json is not a GPT-2 config"; fi

  # The directory is a GPT-2 model for generate (with the viewer) and score.
  run generate --model "$m" --prompt "the people" --max-new-tokens 4 --html "$TMP/lm.html"
  expect_status 0 "generate on the trained model"
  if grep -q "qkv-attention-data" "$TMP/lm.html"; then pass; else fail "generate --html on the trained model"; fi
  run score --model "$m" --file "$heldout" --json
  expect_status 0 "score --json"
  "$PYTHON" - "$TMP/out" "$heldout" <<'PY' && pass || fail "score --json: $(cat "$TMP/out")"
import json, math, os, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, lines
s = json.loads(lines[0])
assert s["bytes"] == os.path.getsize(sys.argv[2]), s
assert s["tokens"] > 0 and s["loss"] > 0, s
assert abs(s["perplexity"] - math.exp(s["loss"])) < 1e-6 * s["perplexity"], s
assert abs(s["bits_per_byte"] - s["loss"] * s["tokens"] / math.log(2) / s["bytes"]) < 1e-9, s
assert s["stride"] == 8 and s["windows"] > 1, s
PY
  run score --model "$m" --file "$heldout" --stride 4
  expect_status 0 "score --stride"
  expect_in out "bits per byte" "score prints bits per byte"
  expect_in out "stride 4" "score names its stride"

  # --stop-at, then --resume to the end, equals the straight run above.
  run train lm --text "$text" --heldout "$heldout" "${small[@]}" --steps 6 --eval-every 3 --out "$TMP/lm2" --stop-at 2 --quiet
  expect_status 130 "train lm --stop-at"
  expect_in out "stopped at step 2 of 6" "--stop-at message"
  run train lm --text "$text" --heldout "$heldout" "${small[@]}" --steps 6 --eval-every 3 --out "$TMP/lm2" --resume --json --quiet
  expect_status 0 "train lm --resume"
  expect_in out '"steps":6' "resume reaches step 6"
  expect_in out '"heldout_loss":[0-9.]+' "--json has the held-out loss"
  if cmp -s <(tail -c +4097 "$m/model.safetensors") <(tail -c +4097 "$TMP/lm2/model.safetensors") &&
     [[ $(stat -c %s "$m/model.safetensors") == $(stat -c %s "$TMP/lm2/model.safetensors") ]]; then pass; else
    "$PYTHON" - "$m/model.safetensors" "$TMP/lm2/model.safetensors" <<'PY' && pass || fail "stop + resume differs from the straight run"
import json, struct, sys
def tensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    head = json.loads(data[8:8 + n]); body = data[8 + n:]
    return {k: body[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in head.items() if k != "__metadata__"}
sys.exit(0 if tensors(sys.argv[1]) == tensors(sys.argv[2]) else 1)
PY
  fi

  # --data NAME reads DATA_DIR/NAME-train.txt and NAME-heldout.txt.
  mkdir -p "$TMP/data" && cp "$text" "$TMP/data/brown-train.txt" && cp "$heldout" "$TMP/data/brown-heldout.txt"
  run train lm --data brown --data-dir "$TMP/data" "${small[@]}" --steps 2 --out "$TMP/brown" --json --quiet
  expect_status 0 "train lm --data brown"
  expect_in out '"heldout_loss":[0-9.]+' "--data brown measures the held-out loss"
  expect_usage_error "--data" train lm --data poems --out "$TMP/x"

  # Ctrl-C: a checkpoint and the model are written, the status is 130, --resume goes on.
  "$QKV" train lm --text "$text" "${small[@]}" --steps 100000 --out "$TMP/int" --quiet >"$TMP/out" 2>"$TMP/err" &
  local pid=$!
  sleep 3
  kill -INT "$pid"
  wait "$pid"
  status=$?
  expect_status 130 "train lm SIGINT"
  expect_in out "interrupted at step [0-9]+ of 100000; checkpoint saved" "train lm SIGINT message"
  if [[ -s "$TMP/int/checkpoint.safetensors" && -s "$TMP/int/model.safetensors" ]]; then pass; else
    fail "no checkpoint or model after SIGINT"
  fi

  # Bad input: each a message and a non-zero status.
  : >"$TMP/empty.txt"
  expect_failure "is empty" train lm --text "$TMP/empty.txt" --out "$TMP/x"
  printf 'ab\0cd\n' >"$TMP/binary.txt"
  expect_failure "binary data" train lm --text "$TMP/binary.txt" --out "$TMP/x"
  printf 'Hi.\n' >"$TMP/short.txt"
  expect_failure "one training window" train lm --text "$TMP/short.txt" "${small[@]}" --out "$TMP/x"
  expect_failure "fetch_data.sh sotu $TMP/nodata" train lm --data sotu --data-dir "$TMP/nodata" --out "$TMP/x"
  expect_usage_error "--data: names the training and held-out texts" train lm --data sotu --text "$text"
  expect_usage_error "needs a training text" train lm --out "$TMP/x"
  expect_usage_error "--heads: 3 must divide --embd 16" train lm --text "$text" --embd 16 --heads 3
  expect_usage_error "--vocab-size" train lm --text "$text" --vocab-size 200
  expect_usage_error "unknown option --min-frequency; the options are --text, --heldout" \
    train lm --text "$text" --min-frequency 3
  expect_usage_error "unknown option --epochs; the options are --text" train lm --text "$text" --epochs 3
  expect_usage_error "unknown option --patch-size; the options are --text" train lm --text "$text" --patch-size 4
  expect_usage_error "unknown option --embed (did you mean --embd?)" train lm --text "$text" --embed 16
  expect_usage_error "unknown option --layers; the options are --steps" train dates --layers 2
  expect_usage_error "unknown option --context; the options are --text" train tokenizer --text "$text" --context 8
  expect_usage_error "--batch: must be an integer in [1, 65536], got '0'" train lm --text "$text" --batch 0
  expect_usage_error "--context: must be an integer in [2, 8192], got '1'" train lm --text "$text" --context 1
  expect_failure "no checkpoint" train lm --text "$text" --out "$TMP/fresh" --resume
  expect_usage_error "--stride" score --model "$m" --file "$heldout" --stride 16
  expect_failure "is empty" score --model "$m" --file "$TMP/empty.txt"
  expect_failure "cannot open" score --model "$m" --file "$TMP/missing.txt"
  mkdir -p "$TMP/partial" && cp "$m/config.json" "$m/vocab.json" "$m/merges.txt" "$TMP/partial/"
  expect_failure "model.safetensors" score --model "$TMP/partial" --file "$heldout"
  expect_usage_error "--prompt: must encode to at least one token" generate --model "$m" --prompt ""

  # The shipped model (models/sotu-gpt) loads and is the trained one: on a paragraph
  # written for this test, in the speeches' register but in none of them, it needs far
  # fewer bits than an untrained model of its vocabulary (about 3.1 bits per byte).
  local shipped="$HERE/../../models/sotu-gpt"
  printf '%s\n' "My fellow citizens, the state of our Union is strong. Tonight I ask the Congress to work with me to reduce the public debt, to keep the peace, and to give every American a fair chance." >"$TMP/speech-test.txt"
  run score --model "$shipped" --file "$TMP/speech-test.txt" --json
  expect_status 0 "score the shipped model"
  "$PYTHON" - "$TMP/out" <<'PY' && pass || fail "the shipped model on a new paragraph: $(cat "$TMP/out")"
import json, sys
s = json.loads(open(sys.argv[1]).read())
assert s["bits_per_byte"] < 2.2, s
PY
  run generate --model "$shipped" --prompt "My fellow citizens" --max-new-tokens 12
  expect_status 0 "generate with the shipped model"
  expect_in out "^My fellow citizens.*[a-z]+ [a-z]+" "the shipped model continues the prompt with words"
}

case "$GROUP" in
  train) test_train ;;
  tokenizer) test_tokenizer ;;
  lm) test_lm ;;
  translate) test_translate ;;
  *) echo "unknown group $GROUP" >&2; exit 2 ;;
esac
finish "$GROUP"
