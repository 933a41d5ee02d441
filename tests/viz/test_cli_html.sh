#!/usr/bin/env bash
# `--html FILE` of `qkv run` (BERT) and `qkv generate` (GPT-2) on synthetic checkpoints
# (tests/python/test_bert.py, tests/python/test_gpt2.py): the help names the option, the
# page holds every layer's attention (GPT-2's against the PyTorch reference of
# test_gpt2.py, recomputed here with the probabilities kept), "wrote FILE" is reported
# (on stderr with --json, whose stdout stays one object), and an unwritable path fails with
# exit 1 and a message naming it. (test_browser.sh draws a page in Chromium.)
#   tests/viz/test_cli_html.sh PATH/TO/qkv
set -u

QKV=${1:?usage: test_cli_html.sh PATH/TO/qkv}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

source "$HERE/../cli/lib.sh"

run run --help
expect_in out "--html" "qkv run --help lists --html"
run generate --help
expect_in out "--html" "qkv generate --help lists --html"

# BERT: one self-attention group, the encoding's tokens, (layers, H, L, L) rows summing to 1.
B="$TMP/bert"
if ! "$PYTHON" "$HERE/../python/test_bert.py" write "$B" 2>"$TMP/err"; then
  fail "writing the BERT checkpoint: $(cat "$TMP/err")"
  finish cli_html
fi
run run --model "$B" --text "the cat sat" --html "$TMP/bert.html"
expect_status 0 "run --html"
expect_in out "^wrote $TMP/bert\.html \(attention of 2 layers × 4 heads\)$" "run --html reports the page"
if "$PYTHON" - "$TMP/bert.html" <<'EOF'; then pass; else fail "run --html page contents"; fi
import json, re, sys
import numpy as np
page = open(sys.argv[1], encoding="utf-8").read()
data = json.loads(re.search(r'id="qkv-attention-data">(.*?)</script>', page, re.S).group(1))
assert data["title"].startswith("BERT ") and data["subtitle"] == "the cat sat", data["title"]
(g,) = data["groups"]
assert g["name"] == "self-attention"
assert g["query_tokens"] == g["key_tokens"] == ["[CLS]", "the", "cat", "sat", "[SEP]"], g
a = np.array(g["attention"])
assert a.shape == (2, 4, 5, 5), a.shape
assert np.abs(a.sum(-1) - 1).max() < 1e-5, a.sum(-1)
EOF

# Unwritable paths, refused before the model runs: exit 1, "qkv: error: --html '<path>': ...".
expect_failure "--html '$TMP/missing/dir/p.html': cannot write: No such file or directory" \
  run --model "$B" --text "the cat" --html "$TMP/missing/dir/p.html"
if [[ ! -s "$TMP/out" ]]; then pass; else fail "unwritable run --html: stdout not empty"; fi
expect_failure "--html '$TMP': is a directory" run --model "$B" --text "the cat" --html "$TMP"

# GPT-2: prompt + continuation, causal, equal to the reference probabilities.
G="$TMP/gpt2"
if ! "$PYTHON" "$HERE/../python/test_gpt2.py" write "$G" 2>"$TMP/err"; then
  fail "writing the GPT-2 checkpoint: $(cat "$TMP/err")"
  finish cli_html
fi
run generate --model "$G" --prompt "the cat is in the hat" --max-new-tokens 6 --html "$TMP/gpt2.html"
expect_status 0 "generate --html"
expect_in out "^the cat is in the hat" "generate --html still prints the text"
expect_in out "^wrote $TMP/gpt2\.html \(attention of 2 layers × 4 heads over [0-9]+ tokens\)$" \
  "generate --html reports the page on stdout"

run generate --model "$G" --prompt "the cat is in the hat" --max-new-tokens 6 --json \
  --html "$TMP/gpt2j.html"
expect_status 0 "generate --json --html"
expect_in err "^wrote $TMP/gpt2j\.html " "with --json, 'wrote' goes to stderr"
if [[ $(wc -l <"$TMP/out") -eq 1 ]]; then pass; else fail "--json --html: stdout is not one line"; fi
if cmp -s "$TMP/gpt2.html" "$TMP/gpt2j.html"; then pass; else
  fail "--json changed the page of the same greedy run"
fi
if "$PYTHON" - "$TMP/out" "$TMP/gpt2j.html" "$HERE/../python" <<'EOF'; then pass; else fail "generate --html page against the reference"; fi
import json, math, re, sys
import numpy as np
sys.path.insert(0, sys.argv[3])
import torch
import test_gpt2 as ref

out = json.loads(open(sys.argv[1]).read())
ids = out["prompt_ids"] + out["ids"]
page = open(sys.argv[2], encoding="utf-8").read()
data = json.loads(re.search(r'id="qkv-attention-data">(.*?)</script>', page, re.S).group(1))
(g,) = data["groups"]
assert g["name"] == "causal self-attention", g["name"]
L = len(ids)
tokens = [ref.decode([i]).decode("utf-8", "replace") for i in ids]
assert len(g["query_tokens"]) == L and g["key_tokens"] == g["query_tokens"], (g["query_tokens"], L)
for got, want in zip(g["query_tokens"], tokens):
    # Bytes that are not UTF-8 on their own are shown as U+FFFD, one per bad byte in qkv
    # (Python may merge a truncated sequence into one); the valid tokens must match exactly.
    assert got == want or ("\ufffd" in got and "\ufffd" in want), (got, want)
assert "".join(g["query_tokens"]).startswith("the cat is in the hat")
a = np.array(g["attention"])  # (layers, H, L, L)
assert a.shape == (ref.LAYERS, ref.HEADS, L, L), a.shape
assert np.all(np.triu(a, 1) == 0), "attention to later positions"

# The reference forward (test_gpt2.reference_logits) keeping each layer's softmax, float64.
w = {k: v.double() for k, v in ref.make_weights(0).items()}
E, H, D = ref.E, ref.HEADS, ref.E // ref.HEADS
x = w["wte.weight"][ids] + w["wpe.weight"][:L]
causal = torch.ones(L, L, dtype=torch.bool).tril()
worst = 0.0
for i in range(ref.LAYERS):
    p = f"h.{i}."
    t = torch.nn.functional.layer_norm(x, (E,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], 1e-5)
    qkv = t @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
    q, k, v = (u.view(L, H, D).transpose(0, 1) for u in qkv.split(E, dim=-1))
    probs = torch.softmax(((q @ k.transpose(1, 2)) / math.sqrt(D)).masked_fill(~causal, float("-inf")), -1)
    worst = max(worst, float(np.abs(probs.numpy() - a[i]).max()))
    o = (probs @ v).transpose(0, 1).reshape(L, E)
    x = x + o @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
    m = torch.nn.functional.layer_norm(x, (E,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], 1e-5)
    x = x + ref.gelu_new(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"]) @ \
        w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
print(f"GPT-2 page vs float64 reference over {L} tokens: max |diff| {worst:.2e}")
# f32 forward through two layers (softmax inputs of size ~10, f32 eps 6e-8) plus the page's
# 6 significant digits: well under 1e-5.
assert worst < 1e-5, worst
EOF

# An unwritable page fails before generating: exit 1, the path named, nothing on stdout.
expect_failure "--html '$TMP/missing/g.html': cannot write: No such file or directory" \
  generate --model "$G" --prompt "the cat" --html "$TMP/missing/g.html"
if [[ ! -s "$TMP/out" ]]; then pass; else fail "unwritable --html: stdout not empty"; fi
expect_failure "--html '$TMP': is a directory" generate --model "$G" --prompt "the cat" \
  --html "$TMP"

finish cli_html
