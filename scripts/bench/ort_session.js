// The ONNX Runtime session both benchmark runners use (ort_runner.js, ort_gpt2_decode.js):
// onnxruntime-node from $QKV_ORT_NODE_MODULES (a node_modules directory), else the usual
// Node.js module resolution; CPU execution provider, intra-op threads = `threads`, one
// inter-op thread, sequential execution, all graph optimizations.
'use strict';

const path = require('path');

function loadOrt() {
  const dir = process.env.QKV_ORT_NODE_MODULES;
  return require(dir ? path.join(dir, 'onnxruntime-node') : 'onnxruntime-node');
}

// -> { ort, session, version }
async function openSession(model, threads) {
  const ort = loadOrt();
  const version = (ort.env && ort.env.versions && ort.env.versions.node) || 'unknown';
  const session = await ort.InferenceSession.create(model, {
    executionProviders: ['cpu'],
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
  return { ort, session, version };
}

module.exports = { openSession };
