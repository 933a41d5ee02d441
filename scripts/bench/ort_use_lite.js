#!/usr/bin/env node
// The Universal Sentence Encoder lite in ONNX Runtime (onnxruntime-node, CPU execution
// provider) on the graph scripts/bench/use_lite_onnx.py builds:
//   ids float32 (B, L), mask float32 (B, L) (1 for a token, 0 for padding) -> embeddings (B, 512).
// A server for scripts/bench_use_lite.py:
//
//   node ort_use_lite.js --model use_lite.onnx [--threads T]
//
// Prints {"ready": true, "ort_version": ...}, then answers each line on stdin with one JSON
// line:
//   embed B FILE OUT  the sentences of FILE (a JSON array of token-id arrays, already clipped
//                     to 128; read at the first command naming it and kept) in chunks of B in
//                     file order, one session.run per chunk, each padded to its longest
//                     sentence (the padding and the mask built inside the timed run, as a
//                     caller holding ids would). -> {"ms": all chunks}. OUT: the embeddings
//                     (N, 512) in file order as raw float32, or "-" for none.
//   quit              exits (as does the end of input).
// The session: scripts/bench/ort_session.js (as ort_runner.js).
'use strict';

const fs = require('fs');
const { serve } = require('./serve');

const { openSession } = require('./ort_session');

function parseArgs(argv) {
  const args = { threads: 1 };
  for (let i = 0; i < argv.length; ++i) {
    const flag = argv[i];
    if (i + 1 >= argv.length) throw new Error(`missing value for ${flag}`);
    const value = argv[++i];
    if (flag === '--model') args.model = value;
    else if (flag === '--threads') args.threads = parseInt(value, 10);
    else throw new Error(`unknown option ${flag}`);
  }
  if (!args.model) throw new Error('--model is required');
  if (!(args.threads >= 1)) throw new Error('--threads must be >= 1');
  return args;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const { ort, session, version } = await openSession(args.model, args.threads);
  const output = session.outputNames[0];
  const files = new Map();

  // One chunk: (B, L) ids and mask, zero-padded -> the session's (B, O) output.
  const runChunk = async (sentences) => {
    const B = sentences.length;
    const L = Math.max(...sentences.map((s) => s.length));
    const ids = new Float32Array(B * L);   // (B, L)
    const mask = new Float32Array(B * L);  // (B, L)
    sentences.forEach((s, b) => {
      ids.set(s, b * L);
      mask.fill(1, b * L, b * L + s.length);
    });
    const result = await session.run({ ids: new ort.Tensor('float32', ids, [B, L]),
                                       mask: new ort.Tensor('float32', mask, [B, L]) });
    return result[output].data;
  };

  console.log(JSON.stringify({ ready: true, ort_version: version, threads: args.threads }));
  await serve(async (words, line) => {
    if (words[0] === 'embed' && words.length === 4) {
      const B = parseInt(words[1], 10);
      if (!(B >= 1)) throw new Error('embed: B must be >= 1');
      if (!files.has(words[2])) files.set(words[2], JSON.parse(fs.readFileSync(words[2], 'utf8')));
      const sentences = files.get(words[2]);
      if (sentences.some((s) => s.length === 0)) throw new Error(`${words[2]}: a sentence without tokens`);
      const rows = [];
      const start = process.hrtime.bigint();
      for (let first = 0; first < sentences.length; first += B) {
        rows.push(await runChunk(sentences.slice(first, first + B)));
      }
      const ms = Number(process.hrtime.bigint() - start) / 1e6;
      if (words[3] !== '-') {
        const out = new Float32Array(rows.reduce((n, r) => n + r.length, 0));
        let at = 0;
        for (const r of rows) {
          out.set(r, at);
          at += r.length;
        }
        fs.writeFileSync(words[3], Buffer.from(out.buffer));
      }
      return { ms };
    }
    return undefined;
  });
}

main().catch((e) => {
  console.error(`ort_use_lite: ${e && e.message ? e.message : e}`);
  process.exit(1);
});
