#!/usr/bin/env bash
# End-to-end tests of `qkv run` on the models of the model registry that ship in models/:
# GPT-2 (sotu-gpt), the date translator (dates) and the image classifiers (fashion-vit,
# fashion-point): --text/--image, --token (the keys a token attends to, per layer and
# head), --json (parsed, and its listing equal to the terminal's), --html, and the errors:
# a --token not in the input, an unknown model_type, an input of the wrong kind.
# (The recommenders' qkv run checks are in test_recommend.sh, which trains them.)
#   tests/cli/test_run.sh PATH/TO/qkv PROJECT_DIR
# Every check asserts; the script prints each failure and exits 1 if there was any.
set -u

QKV=${1:?usage: test_run.sh PATH/TO/qkv PROJECT_DIR}
ROOT=${2:?usage: test_run.sh PATH/TO/qkv PROJECT_DIR}
PYTHON=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/lib.sh"

GPT="$ROOT/models/sotu-gpt"
SENTENCE="The animal didn't cross the street because it was too tired"

# --- The acceptance example: GPT-2, --token it ----------------------------------------------
run run --model "$GPT" --text "$SENTENCE" --token it
expect_status 0 "run gpt2 --token it"
expect_in out "causal self-attention: the keys 'Ġit' \(query 11\) attends to most, top 5 per head" "names the query"
for layer in 0 1 2 3; do
  for head in 0 1 2 3; do
    expect_in out "^  layer $layer, head $head:  " "a line for layer $layer, head $head"
  done
done
# Causal: "it" is token 11 of The Ġanim al Ġdid n 't Ġcross Ġthe Ġstre et Ġbecause Ġit Ġwas
# Ġtoo Ġt ired: no key after it may be listed.
expect_not_in out "^  layer .*(Ġwas|Ġtoo|Ġt |ired)" "no key after 'it' (causal)"
cp "$TMP/out" "$TMP/text"

run run --model "$GPT" --text "$SENTENCE" --token it --json
expect_status 0 "run gpt2 --token it --json"
json_check "the --token JSON is the terminal's listing" '
assert j["model_type"] == "gpt2" and j["token"] == "it" and j["top"] == 5
g, = j["groups"]
q = g["query"]
assert j["tokens"][q] == "Ġit" == g["query_token"]
assert len(g["layers"]) == 4 and all(len(l["heads"]) == 4 for l in g["layers"])
lines = [l for l in text.splitlines() if l.startswith("  layer ")]
assert len(lines) == 16, lines
for l in g["layers"]:
    for h in l["heads"]:
        keys = h["keys"]
        assert 1 <= len(keys) <= 5
        assert all(k["position"] <= q for k in keys), keys          # causal
        w = [k["weight"] for k in keys]
        assert w == sorted(w, reverse=True) and all(0 < x <= 1 for x in w)
        assert all(j["tokens"][k["position"]] == k["token"] for k in keys)
        want = "  layer %d, head %d:" % (l["layer"], h["head"]) + "".join(
            "  %s %.3f" % (k["token"], k["weight"]) for k in keys)
        assert want in lines, (want, lines)
'

expect_usage_error "does not occur 2 times" run --model "$GPT" --text "$SENTENCE" --token it@2
run run --model "$GPT" --text "the cat and the dog" --token the@2 --json
expect_status 0 "--token the@2"
json_check "T@N picks the N-th occurrence" '
assert j["groups"][0]["query"] == 3, j["groups"][0]["query"]'

run run --model "$GPT" --text "$SENTENCE" --token it --top 2 --json
json_check "--top 2 lists at most two keys" '
assert all(len(h["keys"]) <= 2 for l in j["groups"][0]["layers"] for h in l["heads"])'

# --json without --token: every layer and head; rows are distributions, causal.
run run --model "$GPT" --text "$SENTENCE" --json
expect_status 0 "run gpt2 --json"
json_check "--json holds every layer and head, each row a causal distribution" '
g, = j["groups"]
L = len(j["tokens"])
assert g["query_tokens"] == g["key_tokens"] == j["tokens"]
assert len(g["attention"]) == 4
for layer in g["attention"]:
    assert len(layer) == 4
    for head in layer:
        assert len(head) == L
        for i, row in enumerate(head):
            assert len(row) == L and abs(sum(row) - 1) < 1e-5, (i, sum(row))
            assert all(x == 0 for x in row[i + 1:]), (i, row)
'

# --token not in the text: a usage error listing the text's tokens.
expect_usage_error "'Ġanim' 'al'" run --model "$GPT" --text "$SENTENCE" --token elephant
expect_in err "'elephant' is not a token of the input; its tokens: 'The' 'Ġanim' 'al' 'Ġdid'" "lists the tokens"

# The default output: the tokens and a heatmap; --html: the page.
run run --model "$GPT" --text "the cat sat" --html "$TMP/gpt.html"
expect_status 0 "run gpt2 --html"
expect_in out "^tokens \(4\):" "the tokens (the Ġcat Ġs at)"
expect_in out "causal self-attention, layer 3, head 0 \(layers 0-3, heads 0-3" "the last layer's heatmap"
expect_in out "wrote .*gpt.html" "says it wrote the page"
if grep -q 'id="qkv-attention-data"' "$TMP/gpt.html"; then pass; else fail "--html: no attention data in the page"; fi

# --- The date translator: three groups ------------------------------------------------------
run run --model "$ROOT/models/dates" --text "21 Nov 2026" --token N
expect_status 0 "run dates --token N"
expect_in out "input: 21 Nov 2026  →  2026-11-21" "the translation"
expect_in out "^encoder self-attention: the keys 'N' \(query 3\)" "the encoder's query"
expect_not_in out "^cross-attention" "N is no query of the decoder"
run run --model "$ROOT/models/dates" --text "21 Nov 2026" --token 2 --json
expect_status 0 "run dates --token 2 --json"
json_check "a digit is a query of all three groups" '
names = [g["name"] for g in j["groups"]]
assert names == ["encoder self-attention", "decoder masked self-attention", "cross-attention"], names
assert all(len(g["layers"]) == 2 and len(g["layers"][0]["heads"]) == 4 for g in j["groups"])
'
run run --model "$ROOT/models/dates" --text "21 Nov 2026" --html "$TMP/dates.html"
expect_status 0 "run dates --html"
expect_in out "also: cross-attention" "names the other groups"
expect_usage_error "--token" run --model "$ROOT/models/dates" --text "21 Nov 2026" --token x

# --- The image classifiers --------------------------------------------------------------------
"$PYTHON" - "$TMP/shoe.pgm" <<'PY'
import sys
pixels = bytes((r * 9 + c * 5) % 256 if 8 <= r < 20 else 0 for r in range(28) for c in range(28))
open(sys.argv[1], "wb").write(b"P5 28 28 255\n" + pixels)
PY
run run --model "$ROOT/models/fashion-vit" --image "$TMP/shoe.pgm" --token r3c3 --top 3
expect_status 0 "run fashion-vit --image --token"
expect_in out "^self-attention: the keys 'r3c3' \(query 25\)" "a patch is a token"
expect_in out "^  layer 5, head 3:" "six blocks of four heads"
run run --model "$ROOT/models/fashion-vit" --image "$TMP/shoe.pgm" --json
expect_status 0 "run fashion-vit --json"
json_check "the ViT: [CLS] and 49 patches, rows distributions" '
assert j["model_type"] == "qkv-vision"
assert j["tokens"][0] == "[CLS]" and j["tokens"][1] == "r0c0" and len(j["tokens"]) == 50
g, = j["groups"]
assert len(g["attention"]) == 6 and len(g["attention"][0]) == 4
assert all(abs(sum(row) - 1) < 1e-5 for layer in g["attention"] for head in layer for row in head)
'
run run --model "$ROOT/models/fashion-point" --image "$TMP/shoe.pgm" --token pt0 --json
expect_status 0 "run fashion-point --token pt0 --json"
json_check "the point model: 128 points, 8 neighbours each" '
assert len(j["tokens"]) == 128
g, = j["groups"]
for l in g["layers"]:
    h, = l["heads"]
    assert 1 <= len(h["keys"]) <= 5
'
run run --model "$ROOT/models/fashion-point" --image "$TMP/shoe.pgm"
expect_status 0 "run fashion-point"
expect_in out "too many for a terminal heatmap" "128 keys: no heatmap"
expect_failure "image index 1 is outside [0, 1)" run --model "$ROOT/models/fashion-vit" --image "$TMP/shoe.pgm" --index 1

# --- Inputs of the wrong kind, unknown model types ---------------------------------------------
expect_usage_error "--image: is for image models" run --model "$GPT" --text hi --image "$TMP/shoe.pgm"
expect_usage_error "--text: is for text models" run --model "$ROOT/models/fashion-vit" --text hi
expect_usage_error "--image" run --model "$ROOT/models/fashion-vit"
expect_usage_error "--text" run --model "$GPT"
expect_usage_error "--user: is for sasrec" run --model "$GPT" --text hi --user 1
mkdir -p "$TMP/llama"
echo '{"model_type": "llama"}' >"$TMP/llama/config.json"
expect_failure 'unknown model_type "llama"; the known model types are "bert", "gpt2", "qkv-recommender", "qkv-seq2seq", "qkv-vision", "use_lite"' \
  run --model "$TMP/llama" --text hi

finish "qkv run"
