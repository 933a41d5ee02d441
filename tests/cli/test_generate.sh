#!/usr/bin/env bash
# End-to-end tests of `qkv generate` (GPT-2) on a synthetic checkpoint with random weights,
# written by tests/python/test_gpt2.py (Hugging Face's layout: config.json,
# model.safetensors, vocab.json + merges.txt).
#   tests/cli/test_generate.sh PATH/TO/qkv
# Every check asserts; the script prints each failure and exits 1 if there was any.
set -u

QKV=${1:?usage: test_generate.sh PATH/TO/qkv}
HERE=$(cd "$(dirname "$0")" && pwd)
PYTHON=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

QKV_COMMAND=("$QKV" generate)  # every run here is `qkv generate ...`
source "$HERE/lib.sh"

M="$TMP/model"
if ! "$PYTHON" "$HERE/../python/test_gpt2.py" write "$M"; then
  echo "FAIL: could not write the synthetic model" >&2
  exit 1
fi

# Success, text mode: the prompt, then the continuation on stdout; timings on stderr.
run --model "$M" --prompt "the cat is in the hat" --max-new-tokens 8
expect_status 0 "greedy text"
expect_in out "^the cat is in the hat" "text mode starts with the prompt"
expect_in err "tokens generated" "timings on stderr"

# --weights bf16: the products in bf16 (where this CPU has oneDNN's bf16 matmul).
run --model "$M" --prompt "the cat is in the hat" --max-new-tokens 4 --weights bf16
if grep -q "no oneDNN matmul for bf16" "$TMP/err"; then
  expect_status 1 "bf16 weights on a CPU without a bf16 matmul"
else
  expect_status 0 "--weights bf16"
  expect_in out "^the cat is in the hat" "bf16: text mode starts with the prompt"
fi
expect_usage_error --weights --model "$M" --prompt hi --weights f16

# --json: one object, exactly the three keys, generated ids only.
run --model "$M" --prompt "the cat is in the hat" --max-new-tokens 8 --json
expect_status 0 "greedy --json"
if "$PYTHON" - "$TMP/out" <<'EOF'; then pass; else fail "--json shape: $(head -c 400 "$TMP/out")"; fi
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, lines
j = json.loads(lines[0])
assert sorted(j) == ["ids", "prompt_ids", "text"], j
assert all(isinstance(i, int) for i in j["prompt_ids"] + j["ids"]), j
assert 1 <= len(j["ids"]) <= 8 and len(j["prompt_ids"]) >= 1, j
assert isinstance(j["text"], str)
EOF
cp "$TMP/out" "$TMP/greedy.json"

# Greedy is deterministic; sampling is deterministic per seed.
run --model "$M" --prompt "the cat is in the hat" --max-new-tokens 8 --json
if cmp -s "$TMP/out" "$TMP/greedy.json"; then pass; else fail "greedy twice differs"; fi
run --model "$M" --prompt "the cat" --max-new-tokens 8 --temperature 1.2 --top-k 20 --top-p 0.9 --seed 11 --json
expect_status 0 "sampling"
cp "$TMP/out" "$TMP/s1.json"
run --model "$M" --prompt "the cat" --max-new-tokens 8 --temperature 1.2 --top-k 20 --top-p 0.9 --seed 11 --json
if cmp -s "$TMP/out" "$TMP/s1.json"; then pass; else fail "same seed twice differs"; fi
run --model "$M" --prompt "the cat" --max-new-tokens 0 --json
expect_status 0 "--max-new-tokens 0"
expect_in out '"ids":\[\]' "--max-new-tokens 0 generates nothing"

# Usage errors: exit 2, naming the option.
expect_usage_error --temperature --model "$M" --prompt hi --temperature -0.5
expect_usage_error --temperature --model "$M" --prompt hi --temperature abc
expect_usage_error --top-p --model "$M" --prompt hi --top-p 0
expect_usage_error --top-p --model "$M" --prompt hi --top-p 1.01
expect_usage_error --top-k --model "$M" --prompt hi --top-k -1
expect_usage_error --max-new-tokens --model "$M" --prompt hi --max-new-tokens -3
expect_usage_error --seed --model "$M" --prompt hi --seed -1
expect_usage_error --prompt --model "$M"
expect_usage_error --model --prompt hi

# Library errors: exit 1 with "qkv: error:", nothing on stdout with --json.
run --model "$TMP/nowhere" --prompt hi
expect_status 1 "missing model directory"
expect_in err "^qkv: error: .*config.json" "missing directory names config.json"
run --model "$M" --prompt "$(printf 'x%.0s' {1..70})" --json
expect_status 1 "prompt longer than n_positions"
expect_in err "^qkv: error: .*longer than n_positions = 64" "too-long prompt message"
if [[ ! -s "$TMP/out" ]]; then pass; else fail "too-long prompt: stdout not empty"; fi
# A continuation that would not fit after the prompt: a usage error stating the range
# for this model and prompt, before anything is printed (the prompt is not echoed).
expect_usage_error "--max-new-tokens: must be in [0, 4] for this model and prompt (n_positions 64 minus the prompt's 60 tokens), got 5" \
  --model "$M" --prompt "$(printf 'x%.0s' {1..60})" --max-new-tokens 5
sed -i 's/"model_type": "gpt2"/"model_type": "llama"/' "$M/config.json"
run --model "$M" --prompt hi
expect_status 1 "unknown model_type"
expect_in err "model_type must be \"gpt2\", got \"llama\"" "model_type message"

finish generate
