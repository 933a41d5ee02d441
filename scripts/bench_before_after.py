#!/usr/bin/python3
"""Two builds of qkv side by side: attention, BERT, GPT-2 and a training step, before and after a change.

    /usr/bin/python3 scripts/bench_before_after.py --before DIR --after DIR [--rounds 7] [--json FILE]

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

Benchmarks only: nothing here asserts a time. The outputs of the two builds are not
compared here (the test suites do that); the GPT-2 greedy ids are, and a difference is
reported.
"""
import argparse
import json
import os
import subprocess
import sys

import bench_models
from bench import log, rounds
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


def print_table(results, header):
    print(header)
    print("| case | before ms | after ms | after/before | rounds before | rounds after |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, per in results.items():
        b, a = rounds.median(per["before"]), rounds.median(per["after"])
        fmt = lambda xs: " ".join(f"{x:.3g}" for x in xs)
        print(f"| {name} | {b:.4g} | {a:.4g} | {a / b:.3f} | {fmt(per['before'])} | {fmt(per['after'])} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--before", required=True, help="the build before the change")
    parser.add_argument("--after", required=True, help="the build after the change")
    parser.add_argument("--rounds", type=int, default=7, help="rounds per case (default 7)")
    parser.add_argument("--repeats", type=int, default=5, help="qkv bench runs per measurement (default 5)")
    parser.add_argument("--train-steps", type=int, default=10, help="timed steps per training measurement")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", default="attention,models,training",
                        help="comma-separated subset of attention, models, training")
    parser.add_argument("--json", metavar="FILE", help="also write every number to FILE")
    args = parser.parse_args()
    if args.rounds < 1 or args.repeats < 1 or args.train_steps < 1 or args.threads < 1:
        parser.error("--rounds, --repeats, --train-steps and --threads must be >= 1")
    parts = args.only.split(",")
    unknown = set(parts) - {"attention", "models", "training"}
    if unknown:
        parser.error(f"--only: unknown {', '.join(sorted(unknown))}")
    sys.stdout.reconfigure(line_buffering=True)
    builds = {}
    for which in ("before", "after"):
        d = os.path.abspath(getattr(args, which))
        builds[which] = {"dir": d, "qkv": program(d, "qkv"),
                         "models": program(d, "bench/qkv_bench_models"),
                         "training": program(d, "bench/qkv_bench_training")}
    load_before = os.getloadavg()
    results = {}
    if "attention" in parts:
        results.update(attention_rounds(builds, args))
    if "models" in parts:
        results.update(model_rounds(builds, args))
    if "training" in parts:
        results.update(training_rounds(builds, args))
    load_after = os.getloadavg()
    print_table(results, f"before {builds['before']['dir']}, after {builds['after']['dir']}; "
                         f"{args.rounds} rounds, threads {args.threads}; load average "
                         f"{load_before[0]:.2f} before the run, {load_after[0]:.2f} after")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"before": builds["before"]["dir"], "after": builds["after"]["dir"],
                       "rounds": args.rounds, "threads": args.threads, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
