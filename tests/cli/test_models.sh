#!/usr/bin/env bash
# End-to-end tests of the model commands of the qkv tool on synthetic checkpoints.
#   tests/cli/test_models.sh PATH/TO/qkv GROUP     GROUP: bert
# bert: `qkv run` and `qkv tokenize` (WordPiece and byte-level BPE directories), success
# and error cases. The checkpoints are written by tests/python/test_bert.py (numpy only).
# Every check asserts; the script prints each failure and exits 1 if there was any.
set -u

QKV=${1:?usage: test_models.sh PATH/TO/qkv GROUP}
GROUP=${2:-bert}
PYTHON=/usr/bin/python3
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

source "$HERE/lib.sh"

# A byte-level BPE directory: the 256 byte symbols with id = byte, then he, ll, hell,
# hello, <|endoftext|>; "hello hello" -> hello Ġ hello = 259 32 259.
write_bpe() {
  mkdir -p "$1"
  "$PYTHON" - "$1" <<'EOF'
import json, sys
bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
     list(range(ord("®"), ord("ÿ") + 1))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
enc = {b: chr(c) for b, c in zip(bs, cs)}
vocab = {enc[b]: b for b in range(256)}
for i, t in enumerate(["he", "ll", "hell", "hello", "<|endoftext|>"]):
    vocab[t] = 256 + i
json.dump(vocab, open(sys.argv[1] + "/vocab.json", "w"), ensure_ascii=False)
open(sys.argv[1] + "/merges.txt", "w").write("#version: 0.2\nh e\nl l\nhe ll\nhell o\n")
EOF
}

test_bert() {
  local m="$TMP/bert"
  if ! "$PYTHON" "$HERE/../python/test_bert.py" write "$m" 2>"$TMP/err"; then
    fail "writing the synthetic checkpoint: $(cat "$TMP/err")"
    return
  fi

  run run --model "$m" --text "the cat sat"
  expect_status 0 "run"
  expect_in out "tokens \(5\)" "run lists the tokens"
  expect_in out "\[CLS\]/2 the/5 cat/6 sat/7 \[SEP\]/3" "run prints token/id pairs"
  expect_in out "last_hidden_state \(1, 5, 32\): mean" "run summarises the hidden states"
  expect_in out "pooler_output \(1, 32\)" "run summarises the pooler output"
  expect_in out "attention, layer 1, head 0 \(layers 0-1, heads 0-3" "run defaults to the last layer, head 0"
  expect_in out "^ +2 cat +│.*│ → " "heatmap row labelled with its token"

  run run --model "$m" --text "the cat" --pair "a dog plays" --layer 0 --head 3 \
    --output "$TMP/o.safetensors"
  expect_status 0 "run --pair --output"
  expect_in out "attention, layer 0, head 3 \(layers 0-1, heads 0-3" "run --layer 0 --head 3"
  expect_in out "a/10ᴮ dog/11ᴮ play/12ᴮ ##s/19ᴮ \[SEP\]/3ᴮ" "segment B marked"
  expect_in out "wrote .*o.safetensors" "run --output reports the file"
  if "$PYTHON" - "$TMP/o.safetensors" <<'EOF'; then pass; else fail "--output contents"; fi
import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
want = {"input_ids": [1, 9], "token_type_ids": [1, 9], "last_hidden_state": [1, 9, 32],
        "pooler_output": [1, 32], "attentions.0": [1, 4, 9, 9], "attentions.1": [1, 4, 9, 9]}
got = {k: v["shape"] for k, v in h.items() if k != "__metadata__"}
sys.exit(0 if got == want and all(v["dtype"] == "F32" for k, v in h.items() if k != "__metadata__") else 1)
EOF

  run tokenize --model "$m" --text "The cat sat."
  expect_status 0 "tokenize"
  expect_equal out "2 5 6 7 16 3" "tokenize --text (WordPiece)"
  run tokenize --model "$m" --text "unhappy dogs" --json
  expect_equal out '{"ids":[2,22,23,11,19,3],"tokens":["[CLS]","un","##happy","dog","##s","[SEP]"]}' \
    "tokenize --json"
  printf 'the cat\r\n\nhello world!\n' >"$TMP/lines.txt"
  run tokenize --model "$m" --file "$TMP/lines.txt"
  expect_equal out $'2 5 6 3\n2 3\n2 14 15 18 3' "tokenize --file: one line per input line"

  write_bpe "$TMP/bpe"
  run tokenize --model "$TMP/bpe" --text "hello hello"
  expect_equal out "259 32 259" "tokenize (BPE)"
  run tokenize --model "$TMP/bpe" --text "hello hello" --json
  expect_equal out '{"ids":[259,32,259],"tokens":["hello","Ġ","hello"]}' "tokenize --json (BPE)"

  # Errors while running: status 1, the message names what is wrong.
  expect_failure "does not exist" run --model "$TMP/nowhere" --text "x"
  expect_failure "does not exist" tokenize --model "$TMP/nowhere" --text "x"
  expect_failure "config.json" run --model "$TMP/bpe" --text "x"
  mkdir -p "$TMP/gpt"
  cp "$m"/* "$TMP/gpt/"
  sed -i 's/"model_type": "bert"/"model_type": "gpt2"/' "$TMP/gpt/config.json"
  # The model registry reads it as GPT-2, whose loader names the first tensor it lacks.
  expect_failure "gpt2: checkpoint is missing tensor 'wte.weight'" run --model "$TMP/gpt" --text "x"
  sed -i 's/"model_type": "gpt2"/"model_type": "t5"/' "$TMP/gpt/config.json"
  expect_failure 'unknown model_type "t5"; the known model types are "bert", "gpt2"' run --model "$TMP/gpt" --text "x"
  mkdir -p "$TMP/broken"
  (cd "$HERE/../python" && "$PYTHON" -c "import sys, test_bert as t; t.write_checkpoint(sys.argv[1], drop='encoder.layer.0.output.dense.weight')" "$TMP/broken")
  expect_failure "missing tensor 'encoder.layer.0.output.dense.weight' of shape (32, 64)" \
    run --model "$TMP/broken" --text "x"
  expect_failure "max_position_embeddings = 40" run --model "$m" --text "$(printf 'cat %.0s' {1..39})"
  mkdir -p "$TMP/empty"
  expect_failure "$TMP/empty" tokenize --model "$TMP/empty" --text "x"
  expect_failure "cannot open" tokenize --model "$m" --file "$TMP/no_such_file"

  # Usage errors: status 2, one line naming the option.
  expect_usage_error "--layer" run --model "$m" --text "x" --layer 2
  expect_usage_error "--head" run --model "$m" --text "x" --head 4
  expect_usage_error "--layer" run --model "$m" --text "x" --layer -1
  expect_usage_error "--model" run --text "x"
  expect_usage_error "--text" tokenize --model "$m"
  expect_usage_error "--file" tokenize --model "$m" --text "x" --file "$TMP/lines.txt"
}

case "$GROUP" in
  bert) test_bert ;;
  *) echo "unknown group '$GROUP'" >&2; exit 2 ;;
esac

finish "$GROUP"
