#!/usr/bin/env node
// Greedy GPT-2 decoding with ONNX Runtime (onnxruntime-node, CPU execution provider) on the
// step graph scripts/bench_models.py exports (decode.onnx):
//   input_ids float32 (1, T), past_k, past_v float32 (n_layer, H, P, D)
//   -> logits (V) of the last token, present_k, present_v (n_layer, H, P + T, D).
// The KV cache stays in this process: each step feeds the previous step's present_* back
// as past_*, so a decode step costs one session.run and no copy through a pipe.
//
//   node ort_gpt2_decode.js --model decode.onnx --layers N --heads H --head-dim D
//        --vocab V [--threads T]
//
// Prints {"ready": true, "ort_version": ...}, then answers each stdin line with one JSON
// line:
//   decode CTX N OUT  the prompt (i·7919 + 11) mod V for i in [0, CTX) in one run (the
//                     prefill, timed apart; past of length 0), its logits' argmax as the
//                     first new token, then N steps of one token each (run + argmax).
//                     -> {"ms": the N steps, "prefill_ms": x, "ids": [first, N more]}.
//                     OUT: the prefill's logits as raw float32, or "-" for none.
//   quit              exits (as does the end of input).
// The session: scripts/bench/ort_session.js (as ort_runner.js).
'use strict';

const fs = require('fs');
const readline = require('readline');

const { openSession } = require('./ort_session');

function parseArgs(argv) {
  const args = { threads: 1 };
  const ints = { '--layers': 'layers', '--heads': 'heads', '--head-dim': 'headDim',
                 '--vocab': 'vocab', '--threads': 'threads' };
  for (let i = 0; i < argv.length; ++i) {
    const flag = argv[i];
    if (i + 1 >= argv.length) throw new Error(`missing value for ${flag}`);
    const value = argv[++i];
    if (flag === '--model') args.model = value;
    else if (flag in ints) args[ints[flag]] = parseInt(value, 10);
    else throw new Error(`unknown option ${flag}`);
  }
  for (const key of ['model', 'layers', 'heads', 'headDim', 'vocab']) {
    if (args[key] === undefined || Number.isNaN(args[key])) throw new Error(`--${key} is required`);
  }
  if (!(args.threads >= 1)) throw new Error('--threads must be >= 1');
  return args;
}

function argmax(data) {
  let best = 0;
  for (let i = 1; i < data.length; ++i) if (data[i] > data[best]) best = i;
  return best;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const { ort, session, version } = await openSession(args.model, args.threads);
  const emptyPast = () => new ort.Tensor('float32', new Float32Array(0),
                                         [args.layers, args.heads, 0, args.headDim]);

  const decode = async (context, steps, out) => {
    const prompt = new Float32Array(context);
    for (let i = 0; i < context; ++i) prompt[i] = (i * 7919 + 11) % args.vocab;
    let start = process.hrtime.bigint();
    let result = await session.run({ input_ids: new ort.Tensor('float32', prompt, [1, context]),
                                     past_k: emptyPast(), past_v: emptyPast() });
    let token = argmax(result.logits.data);
    const prefillMs = Number(process.hrtime.bigint() - start) / 1e6;
    if (out !== '-') {
      const d = result.logits.data;
      fs.writeFileSync(out, Buffer.from(d.buffer, d.byteOffset, d.byteLength));
    }
    const ids = [token];
    start = process.hrtime.bigint();
    for (let i = 0; i < steps; ++i) {
      result = await session.run({ input_ids: new ort.Tensor('float32', Float32Array.of(token), [1, 1]),
                                   past_k: result.present_k, past_v: result.present_v });
      token = argmax(result.logits.data);
      ids.push(token);
    }
    const ms = Number(process.hrtime.bigint() - start) / 1e6;
    return { ms, prefill_ms: prefillMs, ids };
  };

  console.log(JSON.stringify({ ready: true, ort_version: version, threads: args.threads }));
  const lines = readline.createInterface({ input: process.stdin, terminal: false });
  for await (const line of lines) {
    const words = line.trim().split(/\s+/);
    if (words[0] === 'quit') break;
    if (words[0] === '') continue;
    try {
      if (words[0] !== 'decode' || words.length !== 4) throw new Error(`expected "decode CTX N OUT", got '${line.trim()}'`);
      const context = parseInt(words[1], 10), steps = parseInt(words[2], 10);
      if (!(context >= 1) || !(steps >= 0)) throw new Error('decode: CTX >= 1 and N >= 0');
      console.log(JSON.stringify(await decode(context, steps, words[3])));
    } catch (e) {
      console.log(JSON.stringify({ error: e && e.message ? e.message : String(e) }));
    }
  }
  lines.close();
}

main().catch((e) => {
  console.error(`ort_gpt2_decode: ${e && e.message ? e.message : e}`);
  process.exit(1);
});
