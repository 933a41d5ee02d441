#!/usr/bin/python3
"""qkv beside PyTorch on the same inputs, interleaved in one process (PERF.md).

Run after a build:  /usr/bin/python3 scripts/bench_peers.py [--threads 2] [--repeats 7]
Prints one row per shape: median ms of each, GFLOP/s, and the qkv/peer speed ratio.
Peers: PyTorch 1.13 (Debian's python3-torch), torch.nn.functional._scaled_dot_product_attention,
which in 1.13 materializes the full Lq×Lk matrix. ONNX Runtime and the measured machine
ceilings come with the fast-kernel benchmark script (issue 3).
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import qkv  # noqa: E402

SHAPES = [  # (B, H, L, D, causal)
    (1, 12, 512, 64, False),
    (1, 12, 512, 64, True),
    (1, 12, 2048, 64, False),
    (1, 12, 2048, 64, True),
]


def flops(b, h, l, d, causal):
    f = 4.0 * b * h * l * l * d
    return f / 2 if causal else f


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    qkv.set_num_threads(args.threads)
    print(f"qkv {qkv.__version__}; torch {torch.__version__}; threads {args.threads}; {qkv.cpu_summary()}")
    print(f"{'shape':<28}{'qkv ms':>10}{'torch ms':>10}{'qkv GFLOP/s':>13}{'qkv/torch':>11}")
    for b, h, l, d, causal in SHAPES:
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(b, h, l, d, generator=gen) for _ in range(3))
        mask = torch.ones(l, l, dtype=torch.bool).tril() if causal else None
        # torch 1.13's _scaled_dot_product_attention takes (q, k, v, mask, dropout, need_weights, is_causal).
        runs = {
            "qkv": lambda: qkv.scaled_dot_product_attention(q, k, v, is_causal=causal),
            "torch": lambda: F._scaled_dot_product_attention(q, k, v, None, 0.0, False, causal),
        }
        if causal:  # check 1.13's is_causal really masks; fall back to an explicit float mask
            ref = F._scaled_dot_product_attention(q[:, :1, :64], k[:, :1, :64], v[:, :1, :64], None, 0.0, False, True)[0]
            exp = qkv.scaled_dot_product_attention(q[:, :1, :64], k[:, :1, :64], v[:, :1, :64], is_causal=True)
            if not torch.allclose(ref, exp, atol=1e-4):
                additive = torch.zeros(l, l).masked_fill(~mask, float("-inf"))
                runs["torch"] = lambda: F._scaled_dot_product_attention(q, k, v, additive, 0.0, False, False)
        times = {name: [] for name in runs}
        for name, fn in runs.items():  # warm-up, discarded
            fn()
        for _ in range(args.repeats):  # interleaved, so both see the same machine state
            for name, fn in runs.items():
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        med = {name: statistics.median(ts) for name, ts in times.items()}
        shape = f"B{b} H{h} L{l} D{d}{' causal' if causal else ''}"
        print(f"{shape:<28}{med['qkv'] * 1e3:>10.2f}{med['torch'] * 1e3:>10.2f}"
              f"{flops(b, h, l, d, causal) / med['qkv'] / 1e9:>13.1f}{med['torch'] / med['qkv']:>10.2f}x")


if __name__ == "__main__":
    main()
