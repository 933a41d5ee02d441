#!/usr/bin/env bash
# The recommender_recipes fixture: SASRec trained on the real MovieLens ratings twice, as a
# user would, for the weak-model warnings' tests (test_recommend_weak.sh, and
# tests/python/test_recommender_weak.py):
#   OUT/sasrec-30      qkv train sasrec --epochs 30 --json (the issue's weak model; its
#                      stdout and stderr kept as sasrec-30.json and sasrec-30.err)
#   OUT/sasrec-recipe  qkv train sasrec with the defaults: the shipped recipe (200 epochs;
#                      stdout and stderr kept as sasrec-recipe.out and sasrec-recipe.err)
# 86 s on 2 idle cores (the recipe's 1,200 steps 64 s), so trained once for every test that
# reads them, and kept while the qkv binary and the data are the same (OUT/stamp holds their
# SHA-256s).
#   tests/cli/train_recipe_models.sh PATH/TO/qkv PATH/TO/fetch_data.sh OUT
set -euo pipefail
qkv=${1:?usage: train_recipe_models.sh QKV FETCH_DATA_SH OUT}
fetch=${2:?usage: train_recipe_models.sh QKV FETCH_DATA_SH OUT}
out=${3:?usage: train_recipe_models.sh QKV FETCH_DATA_SH OUT}
mkdir -p "$out"
"$fetch" movielens "$out/data" >/dev/null
stamp=$(sha256sum "$qkv" "$out/data/ratings.csv" | cut -d' ' -f1 | tr '\n' ' ')
if [[ -f "$out/stamp" && $(cat "$out/stamp") == "$stamp" && -f "$out/sasrec-recipe/config.json" ]]; then
  echo "train_recipe_models: $out holds the models of this qkv and data"
  exit 0
fi
rm -f "$out/stamp"
rm -rf "$out/sasrec-30" "$out/sasrec-recipe"
start=$SECONDS
"$qkv" train sasrec --data "$out/data" --epochs 30 --out "$out/sasrec-30" --json \
  >"$out/sasrec-30.json" 2>"$out/sasrec-30.err" || { cat "$out/sasrec-30.err" >&2; exit 1; }
middle=$SECONDS
"$qkv" train sasrec --data "$out/data" --out "$out/sasrec-recipe" --quiet \
  >"$out/sasrec-recipe.out" 2>"$out/sasrec-recipe.err" || { cat "$out/sasrec-recipe.err" >&2; exit 1; }
echo "$stamp" >"$out/stamp"
echo "train_recipe_models: 30 epochs in $((middle - start)) s, the recipe in $((SECONDS - middle)) s"
