#!/usr/bin/env bash
# End-to-end tests of `qkv heads` on the shipped models: GPT-2 (sotu-gpt) with a word split
# into tokens, the date translator (dates: a group without A or B is skipped and named),
# --file, and every refusal: --text and --file both or neither, --from/--to missing or not in
# the text (the message lists the tokens), an empty file, a line without its pair (named by
# its number), a model that does not read text. (The weights themselves are checked against
# float64 torch twins in tests/python/test_heads.py.)
#   tests/cli/test_heads.sh PATH/TO/qkv PROJECT_DIR
set -u

QKV=${1:?usage: test_heads.sh PATH/TO/qkv PROJECT_DIR}
ROOT=${2:?usage: test_heads.sh PATH/TO/qkv PROJECT_DIR}
PYTHON=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/lib.sh"

GPT="$ROOT/models/sotu-gpt"
DATES="$ROOT/models/dates"
SENTENCE="The animal didn't cross the street because it was too tired"

# --- Working runs ---------------------------------------------------------------------------
run heads --model "$GPT" --text "$SENTENCE" --from it --to animal
expect_status 0 "heads gpt2 it -> animal"
expect_in out "from token 11 'Ġit' to tokens 1-2 'Ġanim' 'al' \(the sum of their columns\)" "the word animal, two tokens"
expect_in out "top 10 of 16:" "top 10 of the 16 heads"
expect_in out "^rank  group +layer  head  weight$" "the table's header"
expect_in out "^   1  causal self-attention +[0-3] +[0-3]  0\.[0-9]{4}$" "rank 1"
expect_not_in out "^  11  " "no rank 11 by default"

run heads --model "$GPT" --text "$SENTENCE" --from it --to animal --top 0 --json
expect_status 0 "heads --json"
json_check "--json: every head, ranked, and the positions" '
assert len(j["heads"]) == 16 and [h["rank"] for h in j["heads"]] == list(range(1, 17))
w = [h["weight"] for h in j["heads"]]
assert w == sorted(w, reverse=True)
assert sorted((h["layer"], h["head"]) for h in j["heads"]) == [(l, h) for l in range(4) for h in range(4)]
p, = j["probes"]
assert p["tokens"][11] == "Ġit" and p["groups"][0]["from_positions"] == [11] and p["groups"][0]["to_positions"] == [1, 2]'

# seq2seq: "-" is only among the decoder's tokens, "2@2" the second "2" of each group's keys.
run heads --model "$DATES" --text "21 November 2026" --from - --to 2@2 --top 0
expect_status 0 "heads dates"
expect_in out "skipped: encoder self-attention \('-' is not among its queries\)" "the encoder's group is skipped, and named"
expect_in out "^cross-attention: from token 5 '-' to token 12 '2'$" "cross-attention: the encoder's second 2"
run heads --model "$DATES" --text "21 November 2026" --from 1 --to November
expect_status 0 "heads dates, a word of characters"
expect_in out "cross-attention: from token 6 '1' to tokens 3-10 " "November: the characters between the spaces"
expect_in out "skipped: decoder masked self-attention \('November' is not among its keys\)" "the decoder skipped"

printf '# sentence\tfrom\tto\n\n%s\tit\tanimal\nThe cat sat on the mat because it was tired\tit\tcat\n' "$SENTENCE" >"$TMP/pairs.tsv"
run heads --model "$GPT" --file "$TMP/pairs.tsv" --top 3
expect_status 0 "heads --file"
expect_in out "\(2 lines\)" "counts the lines"
expect_in out "^rank  group +layer  head    mean     min     max  lines$" "mean, min, max, lines"
expect_in out "^   1  causal self-attention .* 2$" "each head over both lines"

# --- Refusals -------------------------------------------------------------------------------
expect_usage_error "--text: give --text with --from and --to, or --file" heads --model "$GPT"
expect_usage_error "give --text (with --from and --to) or --file, not both" \
  heads --model "$GPT" --text "$SENTENCE" --from it --to animal --file "$TMP/pairs.tsv"
expect_usage_error "--to: give the token or word of --text attended to" heads --model "$GPT" --text "$SENTENCE" --from it
expect_usage_error "--from: is for --text; each line of --file names its own pair" \
  heads --model "$GPT" --file "$TMP/pairs.tsv" --from it
expect_usage_error "--from: 'dog' is not a token or word of the text; its tokens: 'The' 'Ġanim' 'al'" \
  heads --model "$GPT" --text "$SENTENCE" --from dog --to animal
expect_usage_error "--to: 'anima' is not a token or word of the text; its tokens: 'The'" \
  heads --model "$GPT" --text "$SENTENCE" --from it --to anima
expect_usage_error "--to: 'it@3' is not a token or word" heads --model "$GPT" --text "$SENTENCE" --from it --to it@3
expect_usage_error "--from: T@N counts occurrences from 1, got 'it@0'" heads --model "$GPT" --text "$SENTENCE" --from it@0 --to it
expect_usage_error "--to: no attention group has 'N' among its queries and '-' among its keys" \
  heads --model "$DATES" --text "21 November 2026" --from N --to -
expect_usage_error "--model: qkv heads takes text models only (bert, gpt2, use_lite, qkv-seq2seq); " \
  heads --model "$ROOT/models/fashion-vit" --text x --from x --to x
expect_in err "is qkv-vision, whose input is an image" "names the type it got"

: >"$TMP/empty.tsv"
expect_failure "--file '$TMP/empty.tsv' holds no line sentence<TAB>from<TAB>to" heads --model "$GPT" --file "$TMP/empty.tsv"
printf '# only a comment\n\n' >"$TMP/comments.tsv"
expect_failure "holds no line sentence<TAB>from<TAB>to (blank lines and lines starting with '#' are skipped)" \
  heads --model "$GPT" --file "$TMP/comments.tsv"
printf '%s\tit\tanimal\n%s\n' "$SENTENCE" "$SENTENCE" >"$TMP/nopair.tsv"
expect_failure "--file '$TMP/nopair.tsv' line 2: expected sentence<TAB>from<TAB>to (three fields, none empty), got 1 field" \
  heads --model "$GPT" --file "$TMP/nopair.tsv"
printf 'a cat\tcat\t\n' >"$TMP/emptyfield.tsv"
expect_failure "line 1: expected sentence<TAB>from<TAB>to (three fields, none empty), got 3 fields with an empty one" \
  heads --model "$GPT" --file "$TMP/emptyfield.tsv"
printf '%s\tit\tanimal\nthe cat sat\tdog\tcat\n' "$SENTENCE" >"$TMP/missing.tsv"
expect_failure "--file '$TMP/missing.tsv' line 2: 'dog' is not a token or word of the sentence; its tokens: 'the' 'Ġcat' 'Ġs' 'at'" \
  heads --model "$GPT" --file "$TMP/missing.tsv"
expect_failure "does not exist" heads --model "$TMP/nowhere" --text x --from x --to x

finish "qkv heads"
