#!/usr/bin/python3
"""What each attention option costs qkv's fused kernel, beside no option.

    /usr/bin/python3 scripts/bench.py options [--seq 2048] [--heads 12] [--dim 64]
                                              [--threads 2] [--rounds 7] [--build-dir build]

Times qkv.scaled_dot_product_attention on one (1, H, L, D) f32 problem with no option and
with each option alone (causal, ALiBi, a bool (L, L) mask, an f32 (1, 1, L, L) mask, a bool
padding mask (1, 1, 1, L), key lengths, a window, dropout, softcap, GQA), then bf16 and
f16 inputs. Rounds are interleaved (every case once per round, in turn), so that all
cases see the same state of a noisy machine (scripts/bench/rounds.py); it prints each
case's median and its ratio to no option in the same rounds. A benchmark: nothing here
asserts a time. Needs a build (cmake --build build --target _qkv qkv_python_files) and
Debian's python3-torch.
"""
import os
import statistics
import sys

from bench import ROOT, record, rounds


def add_arguments(parser):
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"))


def run(args):
    if min(args.seq, args.heads, args.dim, args.threads, args.rounds) < 1:
        sys.exit("bench.py options: --seq, --heads, --dim, --threads and --rounds must be >= 1")
    if args.heads % 4:
        sys.exit("bench.py options: --heads must be a multiple of 4 (the GQA case shares each K/V head among 4)")
    rec = record.new("options", args.threads, settings={"seq": args.seq, "heads": args.heads, "dim": args.dim,
                                                        "rounds": args.rounds, "warmup": 1})
    sys.path.insert(0, os.path.join(os.path.abspath(args.build_dir), "python"))
    import qkv
    import torch

    qkv.set_num_threads(args.threads)
    L, H, D = args.seq, args.heads, args.dim
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, H, L, D, generator=g) for _ in range(3))
    padding = torch.ones(1, 1, 1, L, dtype=torch.bool)
    padding[..., L - L // 20:] = False
    k_gqa, v_gqa = k[:, : H // 4].contiguous(), v[:, : H // 4].contiguous()
    halves = {dtype: tuple(x.to(dtype) for x in (q, k, v)) for dtype in (torch.bfloat16, torch.float16)}
    cases = {
        "no option": lambda: qkv.scaled_dot_product_attention(q, k, v),
        "causal": lambda: qkv.scaled_dot_product_attention(q, k, v, is_causal=True),
        "ALiBi": lambda: qkv.scaled_dot_product_attention(q, k, v, alibi_slopes=[2.0 ** -(h + 1) for h in range(H)]),
        "bool mask (L, L)": (lambda m: lambda: qkv.scaled_dot_product_attention(q, k, v, attn_mask=m))(
            torch.rand(L, L, generator=g) > 0.1),
        "f32 mask (1, 1, L, L)": (lambda m: lambda: qkv.scaled_dot_product_attention(q, k, v, attn_mask=m))(
            torch.randn(1, 1, L, L, generator=g)),
        "padding mask (1, 1, 1, L)": lambda: qkv.scaled_dot_product_attention(q, k, v, attn_mask=padding),
        "key lengths": lambda: qkv.scaled_dot_product_attention(q, k, v, key_lengths=[L - L // 20]),
        "window (256, 0)": lambda: qkv.scaled_dot_product_attention(q, k, v, window=(256, 0)),
        "dropout 0.1": lambda: qkv.scaled_dot_product_attention(q, k, v, dropout_p=0.1, seed=1),
        "softcap 50": lambda: qkv.scaled_dot_product_attention(q, k, v, softcap=50.0),
        "GQA 4 query heads per K/V head": lambda: qkv.scaled_dot_product_attention(q, k_gqa, v_gqa, enable_gqa=True),
        "bf16 inputs": lambda: qkv.scaled_dot_product_attention(*halves[torch.bfloat16]),
        "f16 inputs": lambda: qkv.scaled_dot_product_attention(*halves[torch.float16]),
    }
    # One warm-up call of each (first-touch of outputs and scratch), then the rounds, with
    # no idle between cases: this compares qkv with itself, warm.
    times, _ = rounds.interleaved({name: rounds.timed(fn) for name, fn in cases.items()}, args.rounds,
                                  warmup=1, gap=0)
    print(f"qkv {qkv.__version__}: B=1, H={H}, L={L}, D={D}, f32 unless stated, {args.threads} threads, "
          f"median of {args.rounds} interleaved rounds")
    base = times["no option"]
    print(f"{'case':<34}{'ms':>9}{'vs no option':>14}")
    for name, ts in times.items():
        ratio = statistics.median(t / b for t, b in zip(ts, base))  # same-round ratios
        print(f"{name:<34}{statistics.median(ts) * 1e3:9.2f}{ratio:13.2f}x")

    rec["versions"].update(qkv=qkv.__version__, qkv_cpu=qkv.cpu_summary(), torch=torch.__version__)
    subject = record.add_subject(rec, "options", f"Attention options inside qkv's kernel, B=1 H={H} L={L} D={D}",
                                 "time", "ms", "lower", baseline="no option")
    for name, ts in times.items():
        record.add_case(subject, name, {"qkv": [t * 1e3 for t in ts]})
    rec["notes"].append("qkv against itself: each option alone against no option in the same rounds (ratio: the "
                        "median of the per-round ratios), f32 unless stated; warm, no idle between cases; no peer, "
                        "no ceiling.")
    return rec
