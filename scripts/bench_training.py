#!/usr/bin/python3
"""Training steps of qkv's encoder-decoder (models::Seq2Seq, the date translator) beside the
same model in PyTorch, interleaved.

Run with Debian's Python (it builds build/bench/qkv_bench_training when missing):

    /usr/bin/python3 scripts/bench.py training [--threads 2] [--rounds 3] [--steps 20]

It prints its table and records every timed step of both in
bench/records/training/<host kind>.json (scripts/bench/record.py), with both loss curves.

The model (defaults: the date translator's shape; every number is a flag):
  src_embed, tgt_embed = nn.Embedding(V, E); x = embed(ids)·√E + sinusoidal PE
  (pe[p, 2i] = sin(p / 10000^(2i/E)), pe[p, 2i+1] = cos(...));
  transformer = nn.Transformer(E, H, N encoder layers, M decoder layers, F, dropout 0,
  relu, batch_first, norm_first); generator = nn.Linear(E, V); causal float mask on the
  decoder (-inf above the diagonal), no padding masks.
One step, for both: zero the gradients, forward, cross-entropy over the B·T targets,
backward, clip_grad_norm(1.0), AdamW(lr 1e-3, weight_decay 0.01, decay on matrices only:
qkv's AdamWOptions default, so torch gets two parameter groups). One fixed batch of ids
drawn uniformly from [4, V) (no padding), B rows of S source and T target tokens.
Embeddings start at N(0, 1/E) in both, as qkv's Seq2Seq does (torch's default is N(0, 1)),
so the two losses fall alike: a rough check that qkv trains. Reported: the first and the
last loss of each impl's first round (W + K steps from the initial weights, for both; the
torch model is built once and keeps training in later rounds, qkv starts afresh).
tokens/s = B·(S+T) / step time.

Rounds: qkv, torch, qkv, torch, ... (--rounds each). A qkv round is one run of
build/bench/qkv_bench_training --json (a fresh process: it builds the model, runs W
warm-up steps and K timed steps); a torch round runs W warm-up and K timed steps of one
model built once in this process. Each impl's median is over all its timed steps; the
per-round medians are in the record's info. --gap seconds of idle separate two rounds, so
that spinning worker threads of one do not eat into the other. The f32 FMA ceiling is
measured at the start and sampled after every round (the record's ceilings).

torch's BLAS: as in every bench script (scripts/bench/peers.py), torch runs on Debian's
OpenBLAS (unpacked into ~/.cache/qkv-bench, first on LD_LIBRARY_PATH for this process
only) unless --torch-blas system.

Benchmarks only: nothing here asserts a time. The exit status is 1 when an impl that was
asked for could not run.
"""
import json
import math
import os
import statistics
import subprocess
import sys
import time

from bench import log, peers, record, report, twins
from bench.build import add_arguments as add_build_arguments, ensure_programs
from bench.ceilings import measure as measure_ceilings, sample as sample_ceiling

SHAPE_FLAGS = [  # (flag, default, what)
    ("batch", 128, "B, sequences per step"),
    ("src_len", 32, "S, source tokens per sequence"),
    ("tgt_len", 11, "T, target tokens per sequence"),
    ("d_model", 128, "E"),
    ("nhead", 4, "H"),
    ("ffn", 256, "F, dim_feedforward"),
    ("enc", 2, "N, encoder layers"),
    ("dec", 2, "M, decoder layers"),
    ("vocab", 79, "V, shared by source and target (the date vocabulary)"),
]


# --------------------------------------------------------------------------------------
# qkv: build/bench/qkv_bench_training, one process per round.

def run_qkv_round(binary, args):
    cmd = [binary, "--json", "--threads", str(args.threads), "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--seed", str(args.seed)]
    for flag, _, _ in SHAPE_FLAGS:
        cmd += ["--" + flag.replace("_", "-"), str(getattr(args, flag))]
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=peers.without_openblas())
    if result.returncode != 0:
        raise RuntimeError(f"qkv_bench_training exited {result.returncode}: {result.stderr.strip()}")
    return json.loads(result.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------------
# torch: the same module, parameter names as qkv's Seq2Seq (include/qkv/seq2seq.h).

def build_torch(args):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    E, V = args.d_model, args.vocab

    def sinusoidal(length, dim):
        pos = torch.arange(length, dtype=torch.float64)[:, None]
        i2 = torch.arange(0, dim, 2, dtype=torch.float64)
        angle = pos / torch.pow(10000.0, i2 / dim)
        pe = torch.zeros(length, dim, dtype=torch.float64)
        pe[:, 0::2] = torch.sin(angle)
        pe[:, 1::2] = torch.cos(angle[:, : dim // 2])
        return pe.float()

    class Seq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.src_embed = nn.Embedding(V, E)
            self.tgt_embed = nn.Embedding(V, E)
            self.transformer = nn.Transformer(d_model=E, nhead=args.nhead, num_encoder_layers=args.enc,
                                              num_decoder_layers=args.dec, dim_feedforward=args.ffn, dropout=0.0,
                                              activation="relu", batch_first=True, norm_first=True)
            self.generator = nn.Linear(E, V)
            self.register_buffer("pe", sinusoidal(max(args.src_len, args.tgt_len), E), persistent=False)
            self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(args.tgt_len),
                                 persistent=False)  # float, -inf above the diagonal

        def forward(self, src, tgt_in):
            scale = math.sqrt(E)
            src_x = self.src_embed(src) * scale + self.pe[: src.shape[1]]
            tgt_x = self.tgt_embed(tgt_in) * scale + self.pe[: tgt_in.shape[1]]
            h = self.transformer(src_x, tgt_x, tgt_mask=self.causal, src_key_padding_mask=None,
                                 memory_key_padding_mask=None)
            return self.generator(h)

    torch.manual_seed(args.seed)
    model = Seq2Seq().train()
    with torch.no_grad():  # qkv's init (src/models/seq2seq.cpp): embeddings N(0, 1/E), so ·√E gives N(0, 1)
        model.src_embed.weight.mul_(1.0 / math.sqrt(E))
        model.tgt_embed.weight.mul_(1.0 / math.sqrt(E))
    opt = torch.optim.AdamW(twins.decay_groups(model.parameters(), 0.01), lr=1e-3)
    g = torch.Generator().manual_seed(args.seed + 1)
    src = torch.randint(4, V, (args.batch, args.src_len), generator=g)
    tgt_in = torch.randint(4, V, (args.batch, args.tgt_len), generator=g)
    tgt_out = torch.randint(4, V, (args.batch, args.tgt_len), generator=g)

    def step():
        opt.zero_grad(set_to_none=False)  # qkv's zero_grad writes zeros too
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return float(loss)

    parameters = sum(p.numel() for p in model.parameters())
    return step, parameters


def run_torch_round(step, args):
    losses, steps_ms = [], []
    for i in range(args.warmup + args.steps):
        start = time.perf_counter()
        losses.append(step())
        ms = (time.perf_counter() - start) * 1e3
        if i >= args.warmup:
            steps_ms.append(ms)
    return {"impl": "torch", "step_ms": statistics.median(steps_ms), "steps_ms": steps_ms,
            "loss_first": losses[0], "loss_last": losses[-1], "losses": losses}


# --------------------------------------------------------------------------------------

def add_arguments(parser):
    for flag, default, what in SHAPE_FLAGS:
        parser.add_argument("--" + flag.replace("_", "-"), type=int, default=default,
                            help=f"{what} (default {default})")
    parser.add_argument("--steps", type=int, default=20, help="K, timed steps per round (default 20)")
    parser.add_argument("--warmup", type=int, default=3, help="W, discarded steps per round (default 3)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each impl, interleaved (default 3)")
    parser.add_argument("--threads", type=int, default=2, help="threads of both impls (default 2)")
    parser.add_argument("--gap", type=float, default=0.5, help="seconds of idle between rounds (default 0.5)")
    parser.add_argument("--seed", type=int, default=0)
    add_build_arguments(parser)
    peers.add_arguments(parser, ort=False)
    parser.add_argument("--no-qkv", action="store_true", help="time torch alone")


def run(args):
    if min(args.steps, args.rounds, args.threads) < 1 or args.warmup < 0:
        sys.exit("bench.py training: --steps, --rounds, --threads >= 1, --warmup >= 0")
    if args.d_model % args.nhead or args.vocab <= 4:
        sys.exit("bench.py training: --d-model must be a multiple of --nhead, --vocab > 4")
    peers.reexec_with_openblas(args)  # does not return when it re-runs the script
    shape = {flag: getattr(args, flag) for flag, _, _ in SHAPE_FLAGS}
    rec = record.new("training", args.threads, settings={
        **shape, "steps": args.steps, "warmup": args.warmup, "rounds": args.rounds, "gap_s": args.gap,
        "seed": args.seed})

    failed = []
    binary = None
    build_dir = os.path.abspath(args.build_dir)
    programs = ensure_programs(build_dir, {"qkv_bench_training": "bench/qkv_bench_training",
                                           "qkv_ceilings": "bench/qkv_ceilings"}, args.rebuild, check=False)
    if not args.no_qkv:
        binary = programs["qkv_bench_training"]
        if binary is None:
            failed.append("qkv: could not build qkv_bench_training in " + args.build_dir)
    ceilings_bin = programs["qkv_ceilings"]
    if ceilings_bin:
        log("measuring the f32 FMA ceiling (qkv_ceilings)")
        fma = measure_ceilings(ceilings_bin, args.threads, quick=True)["f32_fma"]["gflops"]
        record.add_ceiling(rec, "f32_fma", "GFLOP/s", [fma])
    torch_step = torch_version = torch_blas = torch_params = None
    if not args.no_torch:
        torch_version, torch_blas = peers.start_torch(args.threads)
        torch_step, torch_params = build_torch(args)

    rounds = {"qkv": [], "torch": []}
    for r in range(args.rounds):
        for impl in ("qkv", "torch"):
            if (impl == "qkv" and binary is None) or (impl == "torch" and torch_step is None):
                continue
            if rounds["qkv"] or rounds["torch"]:
                time.sleep(args.gap)
            log(f"round {r + 1}/{args.rounds}: {impl}")
            try:
                rounds[impl].append(run_qkv_round(binary, args) if impl == "qkv" else run_torch_round(torch_step, args))
            except RuntimeError as e:
                failed.append(str(e))
                binary = None if impl == "qkv" else binary
        if ceilings_bin:
            record.add_ceiling(rec, "f32_fma", "GFLOP/s", [sample_ceiling(ceilings_bin, "fma", args.threads)])

    tokens = args.batch * (args.src_len + args.tgt_len)
    summary = {}
    for impl, rs in rounds.items():
        if not rs:
            continue
        steps = [ms for r in rs for ms in r["steps_ms"]]
        ms = statistics.median(steps)
        summary[impl] = {"step_ms": ms, "tokens_per_s": tokens / (ms * 1e-3),
                         "round_ms": [r["step_ms"] for r in rs],
                         "loss_first": rs[0]["loss_first"], "loss_last": rs[0]["loss_last"]}
    if rounds["qkv"]:
        summary["qkv"]["parameters"] = rounds["qkv"][0].get("parameters")
    if "torch" in summary:
        summary["torch"]["parameters"] = torch_params
    ratio = summary["torch"]["step_ms"] / summary["qkv"]["step_ms"] if len(summary) == 2 else None
    qkv_cpu = rounds["qkv"][0].get("cpu") if rounds["qkv"] else None

    load = rec["host"]["loadavg_start"] or [float("nan")]
    print(f"machine: {report.cpu_model()} ({os.cpu_count()} logical CPUs); threads {args.threads}; "
          f"torch {torch_version} ({torch_blas}); 1-min load average at start {load[0]:.2f}")
    print("Seq2Seq " + " ".join(f"{k}={v}" for k, v in shape.items())
          + f"; {tokens} tokens/step; {args.rounds} rounds x {args.steps} steps ({args.warmup} warm-up each)")
    print(f"{'impl':<6} {'step ms (median)':>17} {'tokens/s':>10} {'params':>8} {'loss first->last':>17}  "
          "round medians (ms)")
    for impl, s in summary.items():
        rounds_ms = " ".join(f"{x:.1f}" for x in s["round_ms"])
        print(f"{impl:<6} {s['step_ms']:>17.2f} {s['tokens_per_s']:>10.0f} {s['parameters'] or 0:>8} "
              f"{s['loss_first']:>8.3f}->{s['loss_last']:<7.3f}  {rounds_ms}")
    if ratio is not None:
        print(f"qkv/torch speed ratio {ratio:.2f} (torch step ms / qkv step ms; above 1: qkv is faster)")
    for f in failed:
        print(f"FAILED: {f}")

    rec["versions"].update({"qkv_cpu": qkv_cpu, "torch": torch_version, "torch_blas": torch_blas})
    if rounds["qkv"]:
        rec["versions"]["qkv"] = rounds["qkv"][0].get("qkv")
    if summary:
        title = ("Training steps of the date translator's encoder-decoder (Seq2Seq "
                 + " ".join(f"{k}={v}" for k, v in shape.items()) + f", {tokens} tokens a step)")
        s = record.add_subject(rec, "training", title, "training throughput", "tokens/s", "higher")
        # every timed step of every round, in order; an impl that failed a round is short of
        # steps, so the lists are cut to the shorter one
        per_step = {impl: [tokens / (ms * 1e-3) for r in rs for ms in r["steps_ms"]] for impl, rs in rounds.items() if rs}
        n = min(len(v) for v in per_step.values())
        record.add_case(s, "Seq2Seq 2+2 layers E=128", {impl: v[:n] for impl, v in per_step.items()},
                        info={"parameters": {impl: x["parameters"] for impl, x in summary.items()},
                              "round_median_step_ms": {impl: x["round_ms"] for impl, x in summary.items()},
                              "steps_per_round": args.steps, "warmup_per_round": args.warmup,
                              "loss_first_last": {impl: [x["loss_first"], x["loss_last"]] for impl, x in summary.items()}})
        twins.add_loss_curves(rec, {impl: rs[0]["losses"] for impl, rs in rounds.items() if rs and "losses" in rs[0]},
                              first_step=1)
    rec["notes"] += [
        f"Each value is one timed training step's tokens/s (B·(S+T) = {tokens} tokens over the whole step: zero "
        "grad, forward, cross-entropy, backward, clipping, AdamW); rounds alternate qkv, torch with "
        f"{args.gap:g} s idle between; {args.warmup} warm-up steps per round are not timed.",
        "A qkv round is a fresh process (build/bench/qkv_bench_training); torch's model is built once and keeps "
        "training across its rounds.",
        "The two start from the same distributions, not the same numbers, and train on their own random fixed "
        "batch: the loss curves (each impl's first round, warm-up steps included) fall alike, they do not "
        "coincide; the twin suites (lm, recommender, vision) start from the same weights."]
    if failed:
        rec["notes"] += [f"FAILED: {f}" for f in failed]
        args.failed = True
    return rec if summary else None
