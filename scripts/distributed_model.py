#!/usr/bin/env python3
"""A model of ring attention and data-parallel training across nodes (docs/distributed.md).

  /usr/bin/python3 scripts/distributed_model.py            # the tables of docs/distributed.md

Every number below is an assumption stated next to it, or a measurement on the 2-vCPU
development machine (BENCHMARKS.md, "Distributed"), named as such. The model:

Ring attention, N ranks, each holding L/N tokens (zigzag), B batch, H query heads, Hkv
key/value heads, head dim D, s bytes per element:
  a step computes its queries against one K/V shard:  F = 4·B·H·(L/N)²·D  FLOPs
  (causal, zigzag: half of that on average), and passes that shard on:
  M = 2·B·Hkv·(L/N)·D·s  bytes (the backward: 2.5·F and 2·M, dK/dV travel too).
  With the transfer overlapped with the kernel, a step takes max(F/R, α + M/β) and a call
  N steps; efficiency against one node = (F/R) / max(F/R, α + M/β). The transfer hides
  while L/N ≥ (Hkv/H)·s·R / (2β) (α aside): the shard length at which the kernel's time
  (∝ (L/N)²) still exceeds the link's (∝ L/N).

Data-parallel training, P parameters (f32 gradients), a global batch split over N ranks:
  compute per step  T_c(N) = T_c(1) / N  (each rank its share of the rows),
  ring all-reduce   T_ar(N) = 2(N−1)/N · 4P/β + 2(N−1)·α,
  of which the buckets started during the backward hide all but the last bucket's share
  while the backward (≈ 2/3 of a step) lasts longer than the reduction:
  exposed(N) = max(T_ar(N) − (2/3)·T_c(N), T_ar(N)·b/(4P)), b = bucket bytes (256 KiB),
  efficiency = T_c(N) / (T_c(N) + exposed(N)).
"""

# Links: 100 Gb/s Ethernet or InfiniBand, one-way latency 5 µs (assumption: RDMA-class; TCP
# would be 20-50 µs, which changes nothing below but the smallest shards).
BETA = 12.5e9
ALPHA = 5e-6

# Node compute rates for f32 attention (FLOP/s).
R_HERE = 80e9    # measured: the whole 2-vCPU machine here (qkv bench, L=8192, 1 or 2 threads: 78-83)
R_NODE = 1.2e12  # assumed: a 32-core AVX-512 server (about 15× this machine's per-core rate × cores)
R_H100 = 400e12  # assumed: one H100 per node, bf16 (qkv's wgmma forward measured 367-387 TFLOP/s)

# Data-parallel workloads, measured here where stated.
DATES_P = 693_455            # the date translator's parameters
DATES_STEP_HERE = 0.39       # s per step of 128 pairs on this machine, one process (measured, 2 threads)
LM_P = 5_300_000             # the default language model (qkv train lm), about 5.3 M parameters
LM_STEP_HERE = 1.26          # s per step of 16 windows × 256 tokens here (measured: 3,239 tokens/s,
                             # BENCHMARKS.md, "Language model")
BUCKET = 256 * 1024


def ring_row(L, N, R, H=8, Hkv=8, D=64, s=4, causal=False):
    shard = L / N
    flops = 4 * H * shard * shard * D * (0.5 if causal else 1.0)
    t_compute = flops / R
    t_link = ALPHA + 2 * Hkv * shard * D * s / BETA
    step = max(t_compute, t_link)
    return shard, t_compute, t_link, N * step, t_compute / step


def dp_row(P, step_one, N, node_speedup):
    t_c = step_one / node_speedup / N
    t_ar = 2 * (N - 1) / N * 4 * P / BETA + 2 * (N - 1) * ALPHA if N > 1 else 0.0
    exposed = max(t_ar - (2 / 3) * t_c, t_ar * BUCKET / (4 * P)) if N > 1 else 0.0
    return t_c, t_ar, exposed, t_c / (t_c + exposed)


def main():
    print("### Ring attention, one call, B=1, H=8, D=64, 100 Gb/s links\n")
    print("| L | node | N | tokens per rank | kernel per step | link per step | call | efficiency |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for L, R, s_bytes, name in ((262144, R_HERE, 4, "this machine, f32 (80 GFLOP/s)"),
                                (262144, R_NODE, 4, "32-core server, f32 (1.2 TFLOP/s)"),
                                (262144, R_H100, 2, "H100, bf16 (400 TFLOP/s)"),
                                (1048576, R_H100, 2, "H100, bf16 (400 TFLOP/s)")):
        for N in (8, 16, 32, 64):
            shard, tc, tl, call, eff = ring_row(L, N, R, s=s_bytes)
            print(f"| {L} | {name} | {N} | {shard:.0f} | {tc * 1e3:.3g} ms | {tl * 1e3:.3g} ms | "
                  f"{call:.3g} s | {eff:.3f} |")
    print()
    for R, s, name in ((R_HERE, 4, "this machine, f32"), (R_NODE, 4, "32-core server, f32"),
                       (400e12, 2, "an H100 at 400 TFLOP/s, bf16")):
        print(f"- {name}: the link hides behind the kernel while a rank holds at least "
              f"{s * R / (2 * BETA):.0f} tokens (non-causal; twice that causal)")
    print("\n### Data-parallel training, 100 Gb/s links\n")
    print("| model | node | N | compute per step | all-reduce | exposed | efficiency |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for P, step, name in ((DATES_P, DATES_STEP_HERE, "date translator, 128 pairs"),
                          (LM_P, LM_STEP_HERE, "language model, 16×256 tokens")):
        for speed, node in ((1, "this machine"), (15, "32-core server")):
            for N in (8, 16, 32, 64):
                t_c, t_ar, exposed, eff = dp_row(P, step, N, speed)
                print(f"| {name} | {node} | {N} | {t_c * 1e3:.2f} ms | {t_ar * 1e3:.2f} ms | "
                      f"{exposed * 1e3:.3f} ms | {eff:.3f} |")


if __name__ == "__main__":
    main()
