#!/usr/bin/env bash
# The weak-model warnings (apps/recommender/model_health.h) on the real MovieLens models of
# the recommender_recipes fixture (train_recipe_models.sh): SASRec after 30 epochs, whose
# movie embeddings have collapsed, is warned of at the end of training and whenever `qkv
# recommend` loads it, on stderr and in --json's "warnings"; the shipped recipe's model
# (the defaults, 200 epochs) is not.
#   tests/cli/test_recommend_weak.sh PATH/TO/qkv FIXTURE_DIR
set -u

QKV=${1:?usage: test_recommend_weak.sh PATH/TO/qkv FIXTURE_DIR}
FIXTURE=${2:?usage: test_recommend_weak.sh PATH/TO/qkv FIXTURE_DIR}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/lib.sh"

weak="$FIXTURE/sasrec-30"
recipe="$FIXTURE/sasrec-recipe"
# The collapse warning's words, with the measured cosine (0.65-0.99) and the threshold.
collapsed="the sasrec model's movie embeddings have collapsed: their mean pairwise cosine is 0\.(6[5-9]|[7-9][0-9])[0-9] over the 200 most-rated movies, above 0\.65, so .--like. finds them all alike whichever is liked; train longer: the recipe is .qkv train sasrec --data DATA. \(200 epochs"

# The end of training: the 30-epoch run warned (once: its validation HR@10 is above
# popularity's) and its --json carries the warning; the recipe's run did not.
cp "$FIXTURE/sasrec-30.err" "$TMP/err"
expect_in err "^qkv: warning: '$weak': $collapsed" "the 30-epoch training warns of collapsed embeddings"
[[ $(grep -c "warning" "$TMP/err") -eq 1 ]] && pass || fail "the 30-epoch training: one warning, got: $(cat "$TMP/err")"
cp "$FIXTURE/sasrec-30.json" "$TMP/out"
json_check "the 30-epoch --json's warnings" "
import re
assert len(j['warnings']) == 1 and re.match(r'''$collapsed''', j['warnings'][0]), j['warnings']
h = j['health']
assert h['mean_cosine'] > h['collapsed_above'] == 0.65 and h['movies'] == 200, h
assert h['validation'] > h['baseline_validation'], h  # above popularity: the collapse alone is weak"
cp "$FIXTURE/sasrec-recipe.err" "$TMP/err"
expect_not_in err "warning" "the recipe's training warns of nothing"
cp "$recipe/config.json" "$TMP/out"
json_check "the recipe's report" "
r = j['report']
assert r['warnings'] == [] and r['best_epoch'] > 30, r
h = r['health']
assert h['mean_cosine'] < h['collapsed_above'] and h['validation'] > h['baseline_validation'], h"

# Loading: recommend --like and --user warn of the 30-epoch model, on stderr and in --json.
run recommend --model "$weak" --like "Toy Story" --top 3
expect_status 0 "recommend --like on the 30-epoch model"
expect_in err "^qkv: warning: '$weak': $collapsed" "recommend warns of the 30-epoch model"
expect_in out "^  1\. cos " "and still answers"
run recommend --model "$weak" --user 4 --top 3 --json
expect_status 0 "recommend --user --json on the 30-epoch model"
expect_in err "^qkv: warning: '$weak': $collapsed" "recommend --json warns on stderr too"
json_check "--json carries the warning" "
import re
assert len(j['warnings']) == 1 and re.match(r'''$collapsed''', j['warnings'][0]), j['warnings']"
for args in "--like Toy\ Story --top 3" "--user 4 --top 3 --json"; do
  eval run recommend --model "\$recipe" $args
  expect_status 0 "recommend $args on the recipe's model"
  expect_not_in err "warning" "the recipe's model: no warning ($args)"
done
json_check "the recipe's --json: no warnings" "assert j['warnings'] == [], j['warnings']"

finish recommend_weak
