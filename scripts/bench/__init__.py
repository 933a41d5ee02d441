"""What the benchmark suites (scripts/bench_*.py, run by scripts/bench.py SUITE) share; each
suite keeps its own cases and its own printed table.

  record.py    the JSON record of a run (bench/records/<suite>/<host kind>.json), from which
               scripts/benchmarks_md.py makes BENCHMARKS.md
  peers.py     getting the peers: PyTorch and ONNX for Python (apt), ONNX Runtime for
               Node.js (npm, into a cache), torch on Debian's OpenBLAS (the script re-runs
               itself with it first on LD_LIBRARY_PATH)
  build.py     building the qkv programs a script runs (CMake, Release)
  servers.py   the child processes a script times, each answering lines on its stdin with
               JSON lines: ort_runner.js, ort_gpt2_decode.js, ort_use_lite.js,
               use_pipeline.js, qkv_bench_products, qkv_bench_models
  ceilings.py  the machine's ceilings (build/bench/qkv_ceilings): measured at the start,
               sampled once per round, and percentages paired round by round
  rounds.py    interleaved rounds of several engines, and their medians
  report.py    table cells, output comparison, and what ran where (versions, commit, CPU)
  children.py  a suite's helper processes: the suite run again with other options
  use_lite_model.py, use_lite_torch.py, use_lite_onnx.py
               the Universal Sentence Encoder lite rebuilt for its peers (scripts/
               bench_use_lite.py): its weights read back, a torch module, an ONNX graph

The Node.js programs beside them (ort_runner.js, ort_gpt2_decode.js, ort_use_lite.js and
the session they share, ort_session.js) run ONNX Runtime for servers.py; use_pipeline.js
runs the USE-lite's published TensorFlow.js pipeline.

The suites import this package as `bench`: Python puts a script's own directory,
scripts/, first on sys.path.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Downloaded peers (onnxruntime-node, OpenBLAS) and generated checkpoints: outside the
# source tree, reused between runs.
CACHE = os.environ.get("QKV_BENCH_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "qkv-bench"))


def log(message):
    """Progress goes to stderr, so that stdout holds only the tables (or the JSON)."""
    print(message, file=sys.stderr, flush=True)
