"""The child processes the benchmark scripts time. Each one starts, loads what it runs once,
prints a JSON line with "ready", and then answers every line on its stdin with one JSON
line, until "quit". Keeping them waiting lets a script interleave their runs with the
other engines' runs, so that every engine sees the same state of a noisy machine.

  OrtRunner        scripts/bench/ort_runner.js --serve: one ONNX model in ONNX Runtime
  OrtGpt2Decoder   scripts/bench/ort_gpt2_decode.js: greedy GPT-2 decoding in ONNX Runtime
  ProductsRunner   build/bench/qkv_bench_products: attention's two products in oneDNN
  QkvModelsServer  build/bench/qkv_bench_models: qkv's BERT, GPT-2 and USE-lite
  UsePipeline      scripts/bench/use_pipeline.js: the Universal Sentence Encoder lite's
                   published pipeline (TensorFlow.js on WebAssembly)
  OrtUseLite       scripts/bench/ort_use_lite.js: that model's ONNX graph in ONNX Runtime
"""
import json
import os
import subprocess

from bench.peers import without_openblas

HERE = os.path.dirname(os.path.abspath(__file__))
ORT_RUNNER = os.path.join(HERE, "ort_runner.js")
ORT_GPT2_DECODER = os.path.join(HERE, "ort_gpt2_decode.js")
ORT_USE_LITE = os.path.join(HERE, "ort_use_lite.js")
USE_PIPELINE = os.path.join(HERE, "use_pipeline.js")


class JsonLineServer:
    """A child process that answers each line on its stdin with one JSON line, and stops
    on "quit"."""

    def __init__(self, name, cmd, env):
        self.name = name
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        self.hello = self._reply()
        if not self.hello.get("ready"):
            raise RuntimeError(f"{name} did not start: {self.hello}")

    def _reply(self):
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            raise RuntimeError(f"{self.name} exited ({self.proc.returncode}): "
                               + self.proc.stderr.read().strip())
        return json.loads(line)

    def request(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        reply = self._reply()
        if "error" in reply:
            raise RuntimeError(f"{self.name}: {reply['error']}")
        return reply

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=30)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


class BurstServer(JsonLineServer):
    """A server that times its own runs: "run N" -> {"ms": [N times]}."""

    def run(self):
        """One run: its time in seconds."""
        return self.run_burst(1)[0]

    def run_burst(self, count):
        """count runs back to back, timed inside the server: their times in seconds."""
        reply = self.request(f"run {count}")
        if not isinstance(reply.get("ms"), list) or len(reply["ms"]) != count:
            raise RuntimeError(f"{self.name}: {reply}")
        return [ms / 1e3 for ms in reply["ms"]]


def ort_env(node_modules):
    """The environment of a node process running onnxruntime-node from node_modules."""
    return dict(without_openblas(), QKV_ORT_NODE_MODULES=node_modules)


class OrtRunner(BurstServer):
    """scripts/bench/ort_runner.js in --serve mode on one model and its inputs
    (workdir/<input name>.bin, raw float32). The first output of its first run is left in
    self.output, raw float32, to check against another engine's."""

    def __init__(self, node_modules, workdir, model, shapes, threads, warmup, tag="model"):
        self.output = os.path.join(workdir, f"ort_output_{tag}.bin")
        super().__init__("ort_runner",
                         ["node", ORT_RUNNER, "--model", model, "--shapes", json.dumps(shapes), "--threads",
                          str(threads), "--warmup", str(warmup), "--inputs", workdir, "--output",
                          self.output, "--serve"], ort_env(node_modules))
        self.version = self.hello.get("ort_version")


class ProductsRunner(BurstServer):
    """build/bench/qkv_bench_products in one shape: attention's two matrix products alone
    in oneDNN (S = Q·Kᵀ written to memory, then S·V; no softmax). self.impl: the two
    primitives' oneDNN implementations."""

    def __init__(self, binary, heads, lq, lk, d, threads):
        super().__init__("qkv_bench_products",
                         [binary, "--heads", str(heads), "--seq-q", str(lq), "--seq-k", str(lk), "--dim", str(d),
                          "--threads", str(threads)], without_openblas())
        self.impl = self.hello.get("impl")


class OrtGpt2Decoder(JsonLineServer):
    """scripts/bench/ort_gpt2_decode.js: greedy decoding on a GPT-2 step graph
    (decode.onnx), the KV cache kept in the node process between steps."""

    def __init__(self, node_modules, model, layers, heads, head_dim, vocab, threads):
        super().__init__("ort_gpt2_decode",
                         ["node", ORT_GPT2_DECODER, "--model", model, "--layers", str(layers),
                          "--heads", str(heads), "--head-dim", str(head_dim),
                          "--vocab", str(vocab), "--threads", str(threads)], ort_env(node_modules))

    def decode(self, context, steps, out="-"):
        """A prompt of `context` tokens, then `steps` greedy steps -> {"ms", "prefill_ms",
        "ids"}; out: a file for the prompt's logits (raw float32), or "-"."""
        return self.request(f"decode {context} {steps} {out}")


class QkvModelsServer(JsonLineServer):
    """build/bench/qkv_bench_models with the checkpoints it serves (bert_dir, gpt2_dir,
    use_lite_dir: any may be None)."""

    def __init__(self, binary, threads, bert_dir, gpt2_dir, use_lite_dir=None):
        cmd = [binary, "--threads", str(threads)]
        if bert_dir:
            cmd += ["--bert", bert_dir]
        if gpt2_dir:
            cmd += ["--gpt2", gpt2_dir]
        if use_lite_dir:
            cmd += ["--use-lite", use_lite_dir]
        super().__init__("qkv_bench_models", cmd, without_openblas())

    def call(self, *words):
        return self.request(" ".join(str(w) for w in words))


class UsePipeline(JsonLineServer):
    """scripts/bench/use_pipeline.js: the published USE-lite pipeline, loaded from
    node_modules (what scripts/fetch_model.sh --with-pipeline prints). self.hello holds its
    versions, backend and WebAssembly flags."""

    def __init__(self, node_modules):
        super().__init__("use_pipeline", ["node", USE_PIPELINE],
                         dict(without_openblas(), QKV_USE_NODE_MODULES=node_modules))

    def embed(self, batch, text_file, out="-"):
        """Every line of text_file, B at a time -> {"ms", "cpu_ms"}."""
        return self.request(f"embed {batch} {text_file} {out}")

    def tokenize(self, text_file):
        """The pipeline's token ids of every line of text_file (unclipped)."""
        return self.request(f"tokenize {text_file}")["ids"]

    def threads(self):
        """{"wall_ms", "thread_cpu_ms": [per thread, over every embed so far]}."""
        return self.request("threads")


class OrtUseLite(JsonLineServer):
    """scripts/bench/ort_use_lite.js on a USE-lite graph (scripts/bench/use_lite_onnx.py)."""

    def __init__(self, node_modules, model, threads):
        super().__init__("ort_use_lite", ["node", ORT_USE_LITE, "--model", model, "--threads", str(threads)],
                         ort_env(node_modules))
        self.version = self.hello.get("ort_version")

    def embed(self, batch, ids_file, out="-"):
        """The sentences of ids_file (a JSON list of id lists), B at a time -> {"ms"}."""
        return self.request(f"embed {batch} {ids_file} {out}")
