"""What the training suites share (scripts/bench_lm.py, bench_recommender.py, bench_vision.py,
bench_training.py; the data also bench_use_lite.py): qkv's training in a child process, the
data sets they read, and the loss curves of qkv and its torch twin in the record.

  fetch_data(name, directory)   scripts/fetch_data.sh NAME into directory (default: the
                                bench cache's data/NAME), only when its files are missing
  add_child_arguments(parser)   the hidden --child option of a suite that trains in a child
  child(args)                   what the child runs: a qkv training function, its progress
                                as JSON lines on stdout, then its result
  train_in_child(...)           the parent's side: runs a child through scripts/bench.py
                                (bench/children.py), so that qkv and torch never share
                                threads; -> (progress, result, seconds of the call)
  add_loss_curves(rec, ...)     per-step losses of qkv and the twin as the record's curves,
                                and how far apart they are
  cosine_schedule(...)          qkv's learning-rate schedule (train::cosine_schedule), and
  decay_groups(...)             AdamW's parameter groups as qkv decays them (matrices only),
                                for the twins (bench/gpt2_torch.py, bench_vision.py,
                                bench_training.py)
  add_precision_argument(parser), precisions(args, suite)
                                --precision f32,bf16: the precisions a suite trains in (qkv's
                                precision= option), checked; bf16 only where the CPU has a
                                bf16 dot product (AVX512-BF16 or AMX)
  autocast(precision)           the twin's side of a precision: nothing for f32, torch 1.13's
                                CPU autocast to bfloat16 for bf16

The child is the suite itself, run again with --child (bench/children.py's self_command),
its environment without torch's OpenBLAS (peers.without_openblas) and with build/python on
PYTHONPATH: qkv is timed on its own libraries, as `qkv train` runs.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

from bench import CACHE, ROOT, children, log, peers

# name -> a file scripts/fetch_data.sh writes last into the directory: present, no fetch.
DATA_MARKERS = {"sotu": "sotu-heldout.txt", "brown": "brown-heldout.txt", "movielens": "ratings.csv",
                "fashion-mnist": "t10k-labels-idx1-ubyte.gz", "debian-packages": "debian-packages.txt"}


def fetch_data(name, directory=None):
    """The directory holding data set `name` (scripts/fetch_data.sh NAME DIR), fetched into
    it when its files are missing; default directory: CACHE/data/NAME, reused between
    runs (the script itself caches what it downloads). -> the directory."""
    directory = os.path.abspath(directory or os.path.join(CACHE, "data", name))
    if not os.path.isfile(os.path.join(directory, DATA_MARKERS[name])):
        log(f"fetching {name} into {directory} (scripts/fetch_data.sh {name})")
        subprocess.run(["bash", os.path.join(ROOT, "scripts", "fetch_data.sh"), name, directory],
                       check=True, stdout=sys.stderr)
    return directory


# --------------------------------------------------------------------------------------
# qkv's training in a child process.

def add_child_arguments(parser):
    parser.add_argument("--child", help=argparse.SUPPRESS)  # JSON: the call a child makes


def child(args):
    """--child {"call": "vision.train", "args": [...], "kwargs": {...}, "threads": N,
    "progress": true}: qkv.<call>(*args, **kwargs) in this process with N threads; with
    "progress", one line {"progress": info} per progress call on stdout; then
    {"result": ..., "seconds": wall seconds of the call}. Returns None (no record)."""
    import qkv
    spec = json.loads(args.child)
    qkv.set_num_threads(spec["threads"])
    function = qkv
    for name in spec["call"].split("."):
        function = getattr(function, name)
    kwargs = dict(spec.get("kwargs", {}))
    if spec.get("progress"):
        kwargs["progress"] = lambda info: print(json.dumps({"progress": info}, default=str), flush=True)
    start = time.perf_counter()
    result = function(*spec.get("args", []), **kwargs)
    print(json.dumps({"result": result, "seconds": time.perf_counter() - start}, default=str), flush=True)
    return None


def train_in_child(suite, build_dir, threads, call, args=(), kwargs=None, progress=True, on_progress=None):
    """qkv.<call>(*args, **kwargs) in a child (the suite run again with --child), streaming
    its progress: on_progress(info) is called here as each line arrives.
    -> (the progress dicts, the result, the seconds the call took in the child: the
    process's start, imports and exit not counted)."""
    env = peers.without_openblas()
    env["PYTHONPATH"] = os.path.join(build_dir, "python")
    spec = {"call": call, "args": list(args), "kwargs": kwargs or {}, "threads": threads, "progress": progress}
    cmd = children.self_command(suite, "--child", json.dumps(spec))
    lines = []
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True) as proc:
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            lines.append(json.loads(line))
            if on_progress is not None and "progress" in lines[-1]:
                on_progress(lines[-1]["progress"])
    if proc.returncode != 0:
        raise RuntimeError(f"qkv.{call} in a child process exited {proc.returncode} (its messages are above)")
    results = [x for x in lines if "result" in x]
    if not results:
        raise RuntimeError(f"qkv.{call} in a child process gave no result")
    return [x["progress"] for x in lines if "progress" in x], results[-1]["result"], results[-1]["seconds"]


# --------------------------------------------------------------------------------------
# Loss curves.

def add_loss_curves(rec, losses, name="loss", first_step=1):
    """losses: {engine: [loss at step first_step, first_step + 1, ...]} -> the record's
    curves[name]. -> how far the engines' curves are from qkv's, over their common steps:
    {engine: {"steps", "max_abs_diff", "max_rel_diff", "last_abs_diff", "first_step_diverging"}}
    (the first step whose relative difference exceeds 1e-3, or None), for the notes and infos."""
    from bench import record
    for engine, values in losses.items():
        if values:
            record.add_curve(rec, name, engine, [[first_step + i, v] for i, v in enumerate(values)])
    out = {}
    mine = losses.get("qkv") or []
    for engine, values in losses.items():
        if engine == "qkv" or not values or not mine:
            continue
        pairs = list(zip(mine, values))
        rel = [abs(a - b) / max(abs(b), 1e-12) for a, b in pairs]
        diverging = next((first_step + i for i, r in enumerate(rel) if r > 1e-3), None)
        out[engine] = {"steps": len(pairs), "max_abs_diff": max(abs(a - b) for a, b in pairs),
                       "max_rel_diff": max(rel), "last_abs_diff": abs(pairs[-1][0] - pairs[-1][1]),
                       "first_step_diverging": diverging}
    return out


# --------------------------------------------------------------------------------------
# qkv's optimisation, for the torch twins.

def cosine_schedule(step, peak, warmup, total, min_ratio):
    """train::cosine_schedule (src/nn/train.cpp), step counting from 0: a linear warm-up
    from peak/warmup to peak over `warmup` steps, then a half cosine down to peak·min_ratio
    at `total`."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(total - warmup, 1))
    floor = peak * min_ratio
    return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def decay_groups(parameters, weight_decay):
    """torch.optim.AdamW's parameter groups for qkv's AdamWOptions (decay_vectors = false):
    weight decay on the parameters of rank >= 2 only; biases, LayerNorms, tokens none."""
    parameters = list(parameters)
    return [{"params": [p for p in parameters if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in parameters if p.dim() < 2], "weight_decay": 0.0}]


# --------------------------------------------------------------------------------------
# Precisions: qkv's `--precision` (precision=) and torch's autocast beside it.

PRECISIONS = ("f32", "bf16")
# The ceiling each precision's products are held against (qkv_ceilings: the f32 FMA peak,
# the vdpbf16ps peak): (bench/ceilings.py kind, the record's ceiling name).
PRECISION_CEILINGS = {"f32": ("fma", "f32_fma"), "bf16": ("bf16", "bf16_dpbf16ps")}


def has_bf16_products():
    """Whether this CPU has a bf16 dot product qkv's bf16 training runs on (AVX512-BF16's
    vdpbf16ps, or AMX): where it has none, qkv refuses precision="bf16"."""
    from bench import record
    flags = record.cpu_info()[2]
    return "avx512_bf16" in flags or "amx_bf16" in flags


def default_precisions():
    return "f32,bf16" if has_bf16_products() else "f32"


def add_precision_argument(parser):
    parser.add_argument("--precision", default=None, metavar="LIST",
                        help="the precisions to train in, comma-separated, each once for qkv (precision=) and "
                        "once for the torch twin (bf16: torch.autocast('cpu', dtype=torch.bfloat16) around the "
                        f"forward and the loss); default {default_precisions()!r} on this CPU (bf16 where it has "
                        "AVX512-BF16 or AMX)")


def precisions(args, suite):
    """args.precision ("f32,bf16", None for the default) -> the list, f32 first; exits with
    a message naming what is wrong: an unknown name, one twice, bf16 on a CPU without a
    bf16 dot product."""
    text = default_precisions() if args.precision is None else args.precision
    names = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in names if p not in PRECISIONS]
    if not names or unknown or len(set(names)) != len(names):
        raise SystemExit(f"bench.py {suite}: --precision must be distinct names among {', '.join(PRECISIONS)}, "
                         f"comma-separated; got {text!r}")
    if "bf16" in names and not has_bf16_products():
        raise SystemExit(f"bench.py {suite}: --precision bf16: this CPU has no bf16 dot product (AVX512-BF16 or "
                         "AMX), which qkv's bf16 training needs; use --precision f32")
    return sorted(names, key=PRECISIONS.index)


def autocast(precision):
    """The twin's forward and loss run inside this: for bf16, torch 1.13's CPU autocast
    (matrix products with bf16 inputs; losses and the ops on its fp32 list in f32; the
    parameters, their gradients and AdamW stay f32), as torch's automatic mixed precision
    documents it: backward() outside the context."""
    import contextlib
    if precision == "f32":
        return contextlib.nullcontext()
    import torch
    return torch.autocast("cpu", dtype=torch.bfloat16)


def sample_precision_ceilings(binary, threads):
    """Both ceilings now, beside a run: {"f32_fma": GFLOP/s, "bf16_dpbf16ps": GFLOP/s or None}."""
    from bench.ceilings import sample
    return {name: sample(binary, kind, threads) for kind, name in PRECISION_CEILINGS.values()}
