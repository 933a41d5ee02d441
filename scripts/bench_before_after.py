#!/usr/bin/python3
"""Two builds of qkv side by side: attention, BERT, GPT-2 and a training step, before and after a change.

    /usr/bin/python3 scripts/bench.py before_after --before DIR --after DIR [--rounds 7]

DIR: a CMake build of qkv (Release), e.g. of the commit before a change, made with
  git worktree add /tmp/before REV && cmake -S /tmp/before -B /tmp/before/build -DCMAKE_BUILD_TYPE=Release \\
      -DQKV_BUILD_TESTS=OFF && cmake --build /tmp/before/build -j

A change must not make anything slower; on these shared, noisy machines that can only be
judged from the two builds measured in the same rounds. Every round runs each case once
on each build, the order alternating from round to round (before first in odd rounds),
and the report gives every round, the medians and after/before (below 1: faster after).

  attention  `qkv bench --json` (median of --repeats runs after a warm-up) per build and round:
             f32 B=1 H=12 D=64 at L=2048 and L=512, causal and not; bf16 L=2048; decode
             Lq=1 Lk=8192 H=32 D=128, f32 and bf16.
  models     build/bench/qkv_bench_models of each build, both serving the same checkpoints
             (random weights, written by scripts/bench_models.py's writer): BERT-base
             forward at B=1 L=128 and B=8 L=128; GPT-2-small prefill of 128 tokens and 32
             decode steps (ms per step).
  training   build/bench/qkv_bench_training --json (the date translator's encoder–decoder,
             its default batch): the median step time of --train-steps steps.
  tasks      `qkv train` of each task, small, timed whole (reading the data, the steps,
             writing the model): dates (30 steps of 64 pairs, 100 held-out dates), lm (5 steps on the first 200 KB of the State of the Union
             text with models/sotu-gpt's tokenizer), mf and sasrec (1 epoch of
             the first 20,000 MovieLens ratings), vit and point (1 epoch of 5,500
             Fashion-MNIST training images, of which 5,000 validate; 1,000 test images).
             --data DIR names where scripts/fetch_data.sh wrote sotu, movielens and
             fashion-mnist (DIR/sotu-train.txt, DIR/movielens/ratings.csv,
             DIR/fashion-mnist/); the small sets are written beside them (DIR/small/).

Benchmarks only: nothing here asserts a time. The outputs of the two builds are not
compared here (the test suites do that); the GPT-2 greedy ids are, and a difference is
reported.
"""
import json
import os
import subprocess
import sys

import bench_models
from bench import log, record, rounds
from bench.peers import without_openblas
from bench.servers import QkvModelsServer

ATTENTION = [  # (name, qkv bench arguments)
    ("f32 L=2048", "--batch 1 --heads 12 --seq 2048 --dim 64"),
    ("f32 L=2048 causal", "--batch 1 --heads 12 --seq 2048 --dim 64 --causal"),
    ("f32 L=512", "--batch 1 --heads 12 --seq 512 --dim 64"),
    ("f32 L=512 causal", "--batch 1 --heads 12 --seq 512 --dim 64 --causal"),
    ("bf16 L=2048", "--batch 1 --heads 12 --seq 2048 --dim 64 --dtype bf16"),
    ("decode f32 Lk=8192", "--batch 1 --heads 32 --seq 1 --kv-seq 8192 --dim 128"),
    ("decode bf16 Lk=8192", "--batch 1 --heads 32 --seq 1 --kv-seq 8192 --dim 128 --dtype bf16"),
]
BERT_CASES = [(1, 128), (8, 128)]
GPT2_CONTEXT, GPT2_STEPS = 128, 32


def program(build_dir, relative):
    path = os.path.join(build_dir, relative)
    if not os.path.isfile(path):
        sys.exit(f"bench_before_after: {path} is missing (build {build_dir} first)")
    return path


def in_turn(round_index):
    """Which build goes first in this round: before in even rounds, after in odd ones."""
    return ("before", "after") if round_index % 2 == 0 else ("after", "before")


def attention_rounds(builds, args):
    results = {}
    for name, arguments in ATTENTION:
        log(f"attention {name}")
        per = {"before": [], "after": []}
        for r in range(args.rounds):
            for which in in_turn(r):
                cmd = [builds[which]["qkv"], "bench", *arguments.split(), "--threads", str(args.threads),
                       "--repeats", str(args.repeats), "--warmup", "1", "--json"]
                out = subprocess.run(cmd, capture_output=True, text=True, env=without_openblas())
                if out.returncode != 0:
                    sys.exit(f"bench_before_after: {' '.join(cmd)} failed: {out.stderr.strip()}")
                per[which].append(json.loads(out.stdout)["ms"])
        results[name] = per
    return results


def model_rounds(builds, args):
    bert_dir = bench_models.ensure_checkpoint("bert-base", bench_models.BERT, bench_models.bert_weights, 0)
    gpt2_dir = bench_models.ensure_checkpoint("gpt2-small", bench_models.GPT2, bench_models.gpt2_weights, 0)
    servers = {which: QkvModelsServer(b["models"], args.threads, bert_dir, gpt2_dir) for which, b in builds.items()}
    results = {}
    try:
        for batch, length in BERT_CASES:
            name = f"BERT B={batch} L={length} forward"
            log(name)
            per = {"before": [], "after": []}
            for which in per:  # warm-up
                servers[which].call("bert", batch, length, "-")
            for r in range(args.rounds):
                for which in in_turn(r):
                    per[which].append(servers[which].call("bert", batch, length, "-")["ms"])
            results[name] = per
        log(f"GPT-2 prefill {GPT2_CONTEXT} + {GPT2_STEPS} decode steps")
        prefill = {"before": [], "after": []}
        decode = {"before": [], "after": []}
        ids = {}
        for which in prefill:  # warm-up
            ids[which] = servers[which].call("gpt2", GPT2_CONTEXT, GPT2_STEPS, "-")["ids"]
        if ids["before"] != ids["after"]:
            log(f"GPT-2 greedy ids differ: before {ids['before']}, after {ids['after']}")
        for r in range(args.rounds):
            for which in in_turn(r):
                reply = servers[which].call("gpt2", GPT2_CONTEXT, GPT2_STEPS, "-")
                prefill[which].append(reply["prefill_ms"])
                decode[which].append(reply["ms"] / GPT2_STEPS)
        results[f"GPT-2 prefill {GPT2_CONTEXT}"] = prefill
        results["GPT-2 decode step (ctx 128..160)"] = decode
    finally:
        for server in servers.values():
            server.close()
    return results


def training_rounds(builds, args):
    name = "training step (date model)"
    log(name)
    per = {"before": [], "after": []}
    for r in range(args.rounds):
        for which in in_turn(r):
            cmd = [builds[which]["training"], "--threads", str(args.threads), "--steps", str(args.train_steps),
                   "--warmup", "2", "--json"]
            out = subprocess.run(cmd, capture_output=True, text=True, env=without_openblas())
            if out.returncode != 0:
                sys.exit(f"bench_before_after: {' '.join(cmd)} failed: {out.stderr.strip()}")
            per[which].append(json.loads(out.stdout.strip().splitlines()[-1])["step_ms"])
    return {name: per}


TASKS = [  # (name, qkv train arguments; {small} and {out} filled in)
    ("train dates 30 steps", "dates --steps 30 --batch 64 --eval-size 100 --out {out}"),
    ("train lm 5 steps", "lm --text {small}/sotu.txt --tokenizer {root}/models/sotu-gpt --steps 5 "
                         "--batch 8 --context 128 --layers 2 --embd 128 --heads 4 --eval-every 0 --out {out}"),
    ("train mf 1 epoch", "mf --data {small}/ratings.csv --epochs 1 --out {out}"),
    ("train sasrec 1 epoch", "sasrec --data {small}/ratings.csv --epochs 1 --max-len 50 --out {out}"),
    ("train vit 1 epoch", "vit --data {small}/fashion-mnist --epochs 1 --dim 32 --layers 2 --mlp-dim 64 "
                          "--out {out}"),
    ("train point 1 epoch", "point --data {small}/fashion-mnist --epochs 1 --dim 16 --out {out}"),
]
# A build from before `qkv train` took one subcommand per task spells mf and sasrec as
# `train recommender --model M`, vit and point as `train vision --model M`.
OLD_SPELLING = {"mf": "recommender --model mf", "sasrec": "recommender --model sasrec",
                "vit": "vision --model vit", "point": "vision --model point"}


def train_arguments(qkv, arguments, known={}):
    """The `qkv train` arguments (a list) for the build `qkv`: TASKS' spelling, or the old one
    where that build does not know `qkv train mf`."""
    if qkv not in known:
        known[qkv] = subprocess.run([qkv, "train", "mf", "--help"], capture_output=True).returncode == 0
    task, rest = arguments.split(" ", 1)
    if not known[qkv] and task in OLD_SPELLING:
        arguments = OLD_SPELLING[task] + " " + rest
    return arguments.split()


def small_data(data):
    """DIR/small: sotu.txt (200 KB of DIR/sotu-train.txt, whole lines), ratings.csv (the header
    and the first 20,000 ratings), fashion-mnist/ (the first 5,500 training and 1,000 test
    images and labels)."""
    import gzip
    import struct
    target = os.path.join(data, "small")
    if os.path.isdir(target):
        return target
    tmp = target + ".tmp"
    os.makedirs(os.path.join(tmp, "fashion-mnist"), exist_ok=True)
    text = open(os.path.join(data, "sotu-train.txt"), encoding="utf-8").read(200_000)
    open(os.path.join(tmp, "sotu.txt"), "w", encoding="utf-8").write(text[:text.rindex("\n") + 1])
    with open(os.path.join(data, "movielens", "ratings.csv"), encoding="utf-8") as f:
        lines = [next(f) for _ in range(20_001)]
    open(os.path.join(tmp, "ratings.csv"), "w", encoding="utf-8").writelines(lines)
    for split, n in (("train", 5500), ("t10k", 1000)):
        source = os.path.join(data, "fashion-mnist", f"{split}-images-idx3-ubyte.gz")
        images = gzip.open(source).read()
        rows, cols = struct.unpack(">II", images[8:16])
        labels = gzip.open(source.replace("images-idx3", "labels-idx1")).read()
        with gzip.open(os.path.join(tmp, "fashion-mnist", f"{split}-images-idx3-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">IIII", 0x803, n, rows, cols) + images[16:16 + n * rows * cols])
        with gzip.open(os.path.join(tmp, "fashion-mnist", f"{split}-labels-idx1-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">II", 0x801, n) + labels[8:8 + n])
    os.rename(tmp, target)
    return target


def task_rounds(builds, args):
    import tempfile
    import time
    if not args.data:
        sys.exit("bench_before_after: tasks needs --data DIR (scripts/fetch_data.sh sotu|movielens|fashion-mnist)")
    small = small_data(os.path.abspath(args.data))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(without_openblas(), QKV_NUM_THREADS=str(args.threads))
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, arguments in TASKS:
            log(name)
            per = {"before": [], "after": []}
            for r in range(args.rounds):
                for which in in_turn(r):
                    out = os.path.join(tmp, f"{which}-{r}")
                    cmd = [builds[which]["qkv"], "train",
                           *train_arguments(builds[which]["qkv"], arguments.format(small=small, root=root, out=out))]
                    start = time.perf_counter()
                    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
                    ms = (time.perf_counter() - start) * 1e3
                    if done.returncode != 0:
                        sys.exit(f"bench_before_after: {' '.join(cmd)} failed: {done.stderr.strip()[-2000:]}")
                    per[which].append(ms)
                    subprocess.run(["rm", "-rf", out], check=True)
            results[name] = per
    return results


def print_table(results, header):
    print(header)
    print("| case | before ms | after ms | after/before | rounds before | rounds after |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, per in results.items():
        b, a = rounds.median(per["before"]), rounds.median(per["after"])
        fmt = lambda xs: " ".join(f"{x:.3g}" for x in xs)
        print(f"| {name} | {b:.4g} | {a:.4g} | {a / b:.3f} | {fmt(per['before'])} | {fmt(per['after'])} |")


def build_commit(build_dir):
    """The commit of the source tree a build was configured from (CMakeCache.txt's
    CMAKE_HOME_DIRECTORY), with -dirty, or None."""
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt"), encoding="utf-8") as f:
            source = next((l.split("=", 1)[1].strip() for l in f if l.startswith("CMAKE_HOME_DIRECTORY")), None)
    except OSError:
        return None
    if not source:
        return None
    done = subprocess.run(["git", "-C", source, "describe", "--always", "--dirty"], capture_output=True, text=True)
    return done.stdout.strip() or None if done.returncode == 0 else None


def add_arguments(parser):
    parser.add_argument("--before", required=True, help="the build before the change")
    parser.add_argument("--after", required=True, help="the build after the change")
    parser.add_argument("--rounds", type=int, default=7, help="rounds per case (default 7)")
    parser.add_argument("--repeats", type=int, default=5, help="qkv bench runs per measurement (default 5)")
    parser.add_argument("--train-steps", type=int, default=10, help="timed steps per training measurement")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", default="attention,models,training",
                        help="comma-separated subset of attention, models, training, tasks")
    parser.add_argument("--data", metavar="DIR", help="tasks: where scripts/fetch_data.sh wrote the data sets")


def run(args):
    if args.rounds < 1 or args.repeats < 1 or args.train_steps < 1 or args.threads < 1:
        sys.exit("bench.py before_after: --rounds, --repeats, --train-steps and --threads must be >= 1")
    parts = args.only.split(",")
    unknown = set(parts) - {"attention", "models", "training", "tasks"}
    if unknown:
        sys.exit(f"bench.py before_after: --only: unknown {', '.join(sorted(unknown))}")
    builds = {}
    for which in ("before", "after"):
        d = os.path.abspath(getattr(args, which))
        builds[which] = {"dir": d, "qkv": program(d, "qkv"),
                         "models": program(d, "bench/qkv_bench_models"),
                         "training": program(d, "bench/qkv_bench_training")}
    rec = record.new("before_after", args.threads, settings={
        "rounds": args.rounds, "repeats": args.repeats, "train_steps": args.train_steps, "only": args.only,
        "before": {"dir": builds["before"]["dir"], "commit": build_commit(builds["before"]["dir"])},
        "after": {"dir": builds["after"]["dir"], "commit": build_commit(builds["after"]["dir"])}})
    load_before = os.getloadavg()
    results = {}
    if "attention" in parts:
        results.update(attention_rounds(builds, args))
    if "models" in parts:
        results.update(model_rounds(builds, args))
    if "training" in parts:
        results.update(training_rounds(builds, args))
    if "tasks" in parts:
        results.update(task_rounds(builds, args))
    load_after = os.getloadavg()
    print_table(results, f"before {builds['before']['dir']}, after {builds['after']['dir']}; "
                         f"{args.rounds} rounds, threads {args.threads}; load average "
                         f"{load_before[0]:.2f} before the run, {load_after[0]:.2f} after")
    subject = record.add_subject(rec, "before_after", "Two builds in the same rounds: qkv = after, qkv_before = before",
                                 "time", "ms", "lower")
    for name, per in results.items():
        record.add_case(subject, name, {"qkv": per["after"], "qkv_before": per["before"]})
    rec["notes"].append(f"before: {builds['before']['dir']} ({rec['settings']['before']['commit']}); after: "
                        f"{builds['after']['dir']} ({rec['settings']['after']['commit']}). Each round runs every case "
                        "once per build, the order alternating; qkv/qkv_before above 1: faster after.")
    return rec


