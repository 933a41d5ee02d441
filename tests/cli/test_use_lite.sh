#!/usr/bin/env bash
# End-to-end tests of `qkv embed`, `qkv search` and `qkv run` on the Universal Sentence
# Encoder lite (the use_lite fixture of tests/models: the converted model and the
# published pipeline's embeddings). Success and bad input: a missing or altered model
# file, text that is not UTF-8, an empty corpus, --top 0, an index of another model, a
# damaged index. Every check asserts; the script prints each failure and exits 1.
#   tests/cli/test_use_lite.sh PATH/TO/qkv MODEL_DIR REFERENCE_JSON
set -u

QKV=${1:?usage: test_use_lite.sh PATH/TO/qkv MODEL_DIR REFERENCE_JSON}
MODEL=${2:?}
REFERENCE=${3:?}
PYTHON=/usr/bin/python3
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

source "$HERE/lib.sh"

# embed --json: one line per input, {"text", "embedding"} in that order, equal to the
# pipeline's embedding within 1e-5 (two texts of the pipeline's corpus).
mapfile -t texts < <("$PYTHON" -c 'import json, sys; r = json.load(open(sys.argv[1], encoding="utf-8")); print("\n".join(e["text"] for e in r if e["text"].strip() and "\n" not in e["text"])[:2000])' "$REFERENCE" 2>/dev/null | head -n 2)
run embed --model "$MODEL" --text "${texts[0]}" --text "${texts[1]}" --json
expect_status 0 "embed --json"
if "$PYTHON" - "$TMP/out" "$REFERENCE" <<'PY'; then pass; else fail "embed --json against the pipeline"; fi
import json, sys
lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
assert len(lines) == 2, lines
rows = [json.loads(l) for l in lines]
assert [list(r) for r in rows] == [["text", "embedding"]] * 2, "key order"
ref = {r["text"]: r["embedding"] for r in json.load(open(sys.argv[2], encoding="utf-8"))}
for row in rows:
    assert len(row["embedding"]) == 512
    assert max(abs(a - b) for a, b in zip(row["embedding"], ref[row["text"]])) < 1e-5
PY

# --file, and a line over 128 tokens: clipped, with a warning naming it.
printf 'one line\n%s\n' "$(printf 'word %.0s' {1..300})" > "$TMP/in.txt"
run embed --model "$MODEL" --file "$TMP/in.txt"
expect_status 0 "embed --file"
expect_in out "^# 'one line' \(2 tokens\) -> 512 values" "embed prints a header per input"
expect_in err "line 2 is longer than the model's 128 tokens" "embed warns when it clips"
printf 'ok\nbad \xff byte\n' > "$TMP/bad.txt"
expect_failure "line 2" embed --model "$MODEL" --file "$TMP/bad.txt"
expect_failure "not valid UTF-8" embed --model "$MODEL" --text $'bad \xc3\x28'
expect_usage_error "--text" embed --model "$MODEL"

# A model directory that is missing or altered.
expect_failure "does not exist" embed --model "$TMP/none" --text x
mkdir -p "$TMP/m"
cp "$MODEL"/config.json "$MODEL"/tokenizer.json "$TMP/m/"
expect_failure "model.safetensors" embed --model "$TMP/m" --text x
head -c 1000 "$MODEL/model.safetensors" > "$TMP/m/model.safetensors"
expect_failure "model.safetensors" embed --model "$TMP/m" --text x
cp "$MODEL/model.safetensors" "$TMP/m/"
sed 's/"num_attention_heads": 4/"num_attention_heads": 3/' "$MODEL/config.json" > "$TMP/m/config.json"
expect_failure "num_attention_heads" embed --model "$TMP/m" --text x

# search: a corpus, its index beside it, reused on the second query.
printf 'I like pizza\nthe weather is nice today\n\nquantum physics lecture notes\nplay chess against the computer\n' > "$TMP/corpus.txt"
run search --model "$MODEL" --corpus "$TMP/corpus.txt" --query "a chess engine" --top 2 --json
expect_status 0 "search --json"
expect_in out '^\{"rank":1,"score":0\.[0-9]+,"scoring":"cosine","line":5,"text":"play chess against the computer"\}$' "the best hit"
expect_in err "indexed" "the first query builds the index"
[[ -f "$TMP/corpus.txt.qkv-index" ]] && pass || fail "no index beside the corpus"
run search --model "$MODEL" --corpus "$TMP/corpus.txt" --query "food"
expect_status 0 "search (text)"
expect_in out '^rank +cosine +line  text$' "the text names the score"
expect_in out '^  1\. +0\.[0-9]{4} +1: I like pizza' "text hits: rank, score, line, text"
expect_not_in err "indexed" "the second query reuses the index"
[[ $(wc -l < "$TMP/out") -eq 5 ]] && pass || fail "a header and 4 non-blank lines, 4 hits: $(cat "$TMP/out")"
expect_not_in err "warning" "varied lines: no collapse warning"
# Lines the model cannot tell apart (apps/search/index_health.h): a warning naming the mean
# pairwise cosine and the threshold, on opening the index as on building it.
for i in $(seq 1 300); do echo "package number $i"; done > "$TMP/same.txt"
for pass in build open; do
  run search --model "$MODEL" --corpus "$TMP/same.txt" --query "package 7" --top 1
  expect_status 0 "search of lines alike ($pass)"
  expect_in err "^qkv: warning: the embeddings of the lines in .*same\.txt\.qkv-index have collapsed: their mean pairwise cosine is 0\.9[0-9]{2}, above 0\.80" "lines alike warn ($pass)"
done

# --lexical (BM25) and --hybrid (RRF) say which score they print; a query without a word is
# a usage error for both, and the two together are one.
run search --model "$MODEL" --corpus "$TMP/corpus.txt" --query "Chess computers" --lexical --json
expect_status 0 "search --lexical"
expect_in out '^\{"rank":1,"score":[0-9.]+,"scoring":"bm25","line":5,"text":"play chess against the computer"\}$' "BM25's hit"
[[ $(wc -l < "$TMP/out") -eq 1 ]] && pass || fail "one line shares a word with the query: $(cat "$TMP/out")"
run search --model "$MODEL" --corpus "$TMP/corpus.txt" --query "chess engine" --hybrid
expect_status 0 "search --hybrid"
expect_in out '^rank +rrf +line  text$' "the hybrid's score is RRF's"
expect_in out '^  1\. +0\.0328 +5: play chess' "first in both rankings: 2/61"
run search --model "$MODEL" --corpus "$TMP/corpus.txt" --query "zebra" --lexical
expect_status 0 "search --lexical, no line matches"
expect_in err "no line of .* shares a word with the query" "says that nothing matched"
expect_usage_error "--query: has no word for BM25 (--lexical)" search --model "$MODEL" --corpus "$TMP/corpus.txt" --query "?!" --lexical
expect_usage_error "--query: has no word for BM25 (--hybrid)" search --model "$MODEL" --corpus "$TMP/corpus.txt" --query " " --hybrid
expect_usage_error "--lexical: and --hybrid" search --model "$MODEL" --corpus "$TMP/corpus.txt" --query x --lexical --hybrid
# An index written before the lexical part (the embeddings and metadata alone): --hybrid
# adds the BM25 index, says so, and answers.
"$PYTHON" - "$TMP/corpus.txt.qkv-index" <<'PY'
import json, struct, sys
path = sys.argv[1]
data = open(path, "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
meta = {k: v for k, v in header["__metadata__"].items() if k != "lexical"}
begin, end = header["embeddings"]["data_offsets"]
head = json.dumps({"__metadata__": meta, "embeddings": {"dtype": "F32", "shape": header["embeddings"]["shape"],
                   "data_offsets": [0, end - begin]}}, separators=(",", ":"))
head += " " * (-len(head) % 8)
open(path, "wb").write(struct.pack("<Q", len(head)) + head.encode() + data[8 + n + begin:8 + n + end])
PY
run search --model "$MODEL" --corpus "$TMP/corpus.txt" --query "chess engine" --hybrid
expect_status 0 "--hybrid on an older index"
expect_in err "had no lexical \(BM25\) index .*: added it" "says it added the lexical part"
expect_not_in err "indexed" "the embeddings are kept"
grep -q "bm25.lengths" "$TMP/corpus.txt.qkv-index" && pass || fail "the index file has its lexical part now"

expect_usage_error "--top" search --model "$MODEL" --corpus "$TMP/corpus.txt" --query x --top 0
: > "$TMP/empty.txt"
expect_failure "empty" search --model "$MODEL" --corpus "$TMP/empty.txt" --query x
expect_failure "missing.txt" search --model "$MODEL" --corpus "$TMP/missing.txt" --query x
# An index of another model (the same weights, another config.json byte for byte), then a
# damaged one; --reindex overwrites either.
mkdir -p "$TMP/other"
cp "$MODEL"/* "$TMP/other/"
echo >> "$TMP/other/config.json"
expect_failure "another model" search --model "$TMP/other" --corpus "$TMP/corpus.txt" --query x
run search --model "$TMP/other" --corpus "$TMP/corpus.txt" --query x --reindex
expect_status 0 "--reindex rebuilds"
head -c 100 "$TMP/corpus.txt.qkv-index" > "$TMP/cut" && mv "$TMP/cut" "$TMP/corpus.txt.qkv-index"
expect_failure "damaged" search --model "$MODEL" --corpus "$TMP/corpus.txt" --query x
expect_failure "not valid UTF-8" search --model "$MODEL" --corpus "$TMP/corpus.txt" --query $'\xff' --reindex

# tokenize reads the SentencePiece tokenizer.json: the pipeline's ids.
run tokenize --model "$MODEL" --text "hello world :)" --json
expect_status 0 "tokenize (SentencePiece)"
expect_equal out '{"ids":[2002,102,311,658],"tokens":["▁hell","o","▁world","▁:)"]}' "tokenize --json"

# run dispatches on model_type: the sentence encoder's tokens, embedding and attention.
run run --model "$MODEL" --text "The cat sat on the mat." --html "$TMP/a.html" --output "$TMP/o.safetensors"
expect_status 0 "run (use_lite)"
expect_in out "Universal Sentence Encoder lite: 2 layers" "run names the model"
expect_in out "▁cat/1163" "run lists the SentencePiece tokens"
expect_in out "^embedding \(1, 512\)" "run shows the embedding"
expect_in out "attention, layer 1, head 0 \(layers 0-1, heads 0-3" "run shows the last layer's attention"
grep -q "Universal Sentence Encoder lite" "$TMP/a.html" && pass || fail "the attention page"
[[ -s "$TMP/o.safetensors" ]] && pass || fail "run --output"
expect_usage_error "--pair" run --model "$MODEL" --text a --pair b
expect_usage_error "--layer" run --model "$MODEL" --text a --layer 2

finish use_lite
