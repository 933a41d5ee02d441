#!/usr/bin/env node
// Times an ONNX model with ONNX Runtime (onnxruntime-node, CPU execution provider).
//
//   node ort_runner.js --model M.onnx --shapes '{"query":[1,2048,768],...}' [--threads N]
//        [--warmup W] [--repeats R] [--inputs DIR] [--output FILE] [--serve]
//
// The model is loaded once (one session: intra-op threads = N, inter-op threads = 1,
// sequential execution, all graph optimizations). Inputs are float32: DIR/<name>.bin
// (raw little-endian float32, C order, of the shape given in --shapes) when --inputs is
// given, else uniform random numbers in [-1, 1). --output writes the first output of the
// first run to FILE as raw float32 (for checking against another engine).
//
// Standalone: W warm-up runs, then R timed runs; prints one JSON line
//   {"ort_version": ..., "threads": N, "ms": [...], "ms_median": x, "ms_min": y}.
// --serve: after the warm-up, prints {"ready": true, "ort_version": ...} and then, for each
// line "run" read on stdin, times one run and prints {"ms": x}; for "run N", N runs back to
// back, printing {"ms": [x1, ..., xN]}; "quit" (or end of input) exits. The caller
// interleaves these runs with other engines' runs, so that all of them see the same state
// of a noisy machine.
//
// ONNX Runtime is loaded from $QKV_ORT_NODE_MODULES (a node_modules directory), else the
// usual Node.js module resolution.
'use strict';

const fs = require('fs');
const path = require('path');
const readline = require('readline');

const { openSession } = require('./ort_session');

function parseArgs(argv) {
  const args = { threads: 1, warmup: 2, repeats: 7, serve: false };
  for (let i = 0; i < argv.length; ++i) {
    const flag = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`missing value for ${flag}`);
      return argv[++i];
    };
    if (flag === '--model') args.model = value();
    else if (flag === '--shapes') args.shapes = JSON.parse(value());
    else if (flag === '--threads') args.threads = parseInt(value(), 10);
    else if (flag === '--warmup') args.warmup = parseInt(value(), 10);
    else if (flag === '--repeats') args.repeats = parseInt(value(), 10);
    else if (flag === '--inputs') args.inputs = value();
    else if (flag === '--output') args.output = value();
    else if (flag === '--serve') args.serve = true;
    else throw new Error(`unknown option ${flag}`);
  }
  if (!args.model || !args.shapes) throw new Error('--model and --shapes are required');
  if (!(args.threads >= 1) || !(args.warmup >= 0) || !(args.repeats >= 1)) {
    throw new Error('--threads and --repeats must be >= 1, --warmup >= 0');
  }
  return args;
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const { ort, session, version } = await openSession(args.model, args.threads);

  const feeds = {};
  for (const [name, shape] of Object.entries(args.shapes)) {
    const count = shape.reduce((a, b) => a * b, 1);
    let data;
    if (args.inputs) {
      const buffer = fs.readFileSync(path.join(args.inputs, `${name}.bin`));
      if (buffer.length !== count * 4) {
        throw new Error(`${name}.bin has ${buffer.length} bytes, expected ${count * 4} for shape ${shape}`);
      }
      // Copy into a fresh, aligned Float32Array (a Buffer may be a view at any offset).
      data = new Float32Array(count);
      new Uint8Array(data.buffer).set(buffer);
    } else {
      data = new Float32Array(count);
      for (let i = 0; i < count; ++i) data[i] = Math.random() * 2 - 1;
    }
    feeds[name] = new ort.Tensor('float32', data, shape);
  }

  const runOnce = async () => {
    const start = process.hrtime.bigint();
    const result = await session.run(feeds);
    const ms = Number(process.hrtime.bigint() - start) / 1e6;
    return { ms, result };
  };

  for (let i = 0; i < Math.max(args.warmup, args.output ? 1 : 0); ++i) {
    const { result } = await runOnce();
    if (i === 0 && args.output) {
      const out = result[session.outputNames[0]];
      fs.writeFileSync(args.output, Buffer.from(out.data.buffer, out.data.byteOffset, out.data.byteLength));
    }
  }

  if (!args.serve) {
    const ms = [];
    for (let i = 0; i < args.repeats; ++i) ms.push((await runOnce()).ms);
    console.log(JSON.stringify({ ort_version: version, threads: args.threads, ms,
                                 ms_median: median(ms), ms_min: Math.min(...ms) }));
    return;
  }

  console.log(JSON.stringify({ ready: true, ort_version: version, threads: args.threads }));
  const lines = readline.createInterface({ input: process.stdin, terminal: false });
  for await (const line of lines) {
    const command = line.trim();
    const burst = /^run (\d+)$/.exec(command);
    const count = burst ? parseInt(burst[1], 10) : 0;
    if (command === 'run') {
      console.log(JSON.stringify({ ms: (await runOnce()).ms }));
    } else if (count >= 1) {
      const ms = [];
      for (let i = 0; i < count; ++i) ms.push((await runOnce()).ms);
      console.log(JSON.stringify({ ms }));
    } else if (command === 'quit') {
      break;
    } else if (command !== '') {
      console.log(JSON.stringify({ error: `unknown command '${command}'` }));
    }
  }
  lines.close();
}

main().catch((e) => {
  console.error(`ort_runner: ${e && e.message ? e.message : e}`);
  process.exit(1);
});
