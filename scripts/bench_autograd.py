#!/usr/bin/python3
"""Attention forward + backward through torch autograd: qkv beside PyTorch 1.13's own attention.

Run with Debian's Python (torch 1.13; it builds what is missing, never rebuilds otherwise):

    /usr/bin/python3 scripts/bench.py autograd [--rounds 5] [--quick]

What one training step of attention costs, as a torch model pays for it: the forward on
CPU tensors that require grad, then out.backward(dout), timed around both (split into the
forward and the backward), with the gradients of q, k and v set to None before each step
so that every step writes fresh gradients rather than accumulating.

Engines (f32 cases; B=1, H=8, D=64 by default, L in --lengths, causal and not):
  qkv          qkv.scaled_dot_product_attention(q, k, v, is_causal=c) on the requires-grad
               tensors: it records qkv.torch.AttentionFunction, whose forward saves
               (q, k, v, out, log-sum-exp) and whose backward is qkv's fused backward
               (FlashAttention-2's: the probabilities recomputed tile by tile from the
               log-sum-exp; nothing of size L x L is stored).
  qkv direct   the same two kernels without autograd, on detached tensors under no_grad:
               qkv.scaled_dot_product_attention(..., return_lse=True), then
               qkv.attention_backward(dout, q, k, v, out, lse). qkv direct / qkv is what
               autograd's bookkeeping and the Function's Python cost.
  torch SDPA   torch.nn.functional._scaled_dot_product_attention(q, k, v, None, 0.0, False,
               is_causal)[0]: 1.13's private SDPA (the public one came in 2.0). On CPU it
               is _scaled_dot_product_attention_math, a composition autograd records
               op by op: q·scale, bmm(q, kᵀ), + mask (for is_causal it builds an L x L
               float mask of 0 and -inf from a bool tril on every call), softmax, bmm(·, v).
               It has no fused kernel and no causal skipping: the whole L x L product
               is computed, and the probabilities (L x L per head) are kept for the
               backward. Its second output (the attention weights) is that same tensor.
  torch        softmax(q @ kᵀ · D^-0.5 + mask) @ v as torch users write it, mask an additive
               (L, L) float tensor of 0 and -inf made once per case (none when not causal).
bf16 cases: qkv alone (torch 1.13 on CPU has no fast bf16 path to compare with), on the
f32 inputs rounded to bf16; the gradients come back in bf16.

Rounds: warm-up runs of every engine, then --rounds rounds of qkv, qkv direct, torch SDPA,
torch, qkv, ... (scripts/bench/rounds.py); in each turn an engine makes 1 + --back-to-back
steps without a pause: the first after --gap seconds of idle, the others back to back, as a
training step runs attention right after the projections. The table shows the back-to-back
medians (median over rounds of each round's median); the first step after idle is in the
"idle" column and the JSON. After each round the f32 FMA ceiling is sampled
(build/bench/qkv_ceilings --only fma, scripts/bench/ceilings.py) and each step's rate is
divided by the sample taken right after its round; the % column is the median of those
per-round percentages. bf16 cases are held against the f32 FMA ceiling too (qkv's backward
computes in f32).

FLOPs, as bench_attention.py and scripts/cuda/check_torch_backward.py count them: forward
4·B·H·L²·D (halved when causal), backward 2.5 times the forward (FlashAttention-2's five
products of the backward: S = QKᵀ recomputed, dV = PᵀdO, dP = dO·Vᵀ, dQ = dS·K, dK = dSᵀQ),
so a step is 3.5 times the forward. The same count for every engine: torch keeps P and does
not recompute QKᵀ (four products), and computes the masked half too; GFLOP/s here are
useful FLOPs per second.

Correctness, once per case before the timing: out, dq, dk and dv of each engine against the
torch composition's, max |diff| printed. The bound is derived as tests/python/oracle.py's
backward_atols: each f32 result is within atol = 2·(2L + D + 16)·2^-24·G of the exact one
(G = D^-0.5·max‖dO‖·max‖v‖·max(|q|, |k|, 1) for dq and dk, max|dO| for dv and out), so two
f32 engines differ by at most 2·atol. bf16: against torch f32 on the same rounded inputs
and dO, bound 2^-7·max|ref| + 2·atol (the gradient's own rounding to bf16, 2^-9 relative,
and the bf16 out the backward reads, with margin). A difference above the bound is printed
as MISMATCH and makes the exit status 1.

Peak memory (unless --no-memory): for each engine, a fresh process of this script
(--memory-probe) makes q, k, v and dO, resets the peak RSS (/proc/self/clear_refs 5), runs
one step and reads VmHWM: the peak beyond the inputs, less out and the three gradients, is
what the step needs in between. It includes one-time allocations of a first call (thread
stacks, BLAS buffers: a few MiB).

torch's BLAS: as in every bench script (scripts/bench/peers.py), torch runs on Debian's
OpenBLAS (first on LD_LIBRARY_PATH for this process only) unless --torch-blas system.
Threads: torch.set_num_threads and qkv.set_num_threads (--threads, default 2).

Benchmarks only: nothing here asserts a time.
"""
import argparse
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

from bench import ceilings, log, peers, record, report, rounds
from bench.children import self_command
from bench.build import add_arguments as add_build_arguments, ensure_programs

ENGINES = ("qkv", "qkv direct", "torch SDPA", "torch")
TORCH_ENGINES = ("torch SDPA", "torch")


# --------------------------------------------------------------------------------------
# Cases and FLOPs.

def cases(args):
    """(name, L, causal, dtype) for every L in --lengths, non-causal then causal, f32 then
    (unless --no-bf16) bf16."""
    out = []
    for length in args.lengths:
        for causal in (False, True):
            for dtype in ("f32",) + (() if args.no_bf16 else ("bf16",)):
                name = f"{dtype} L={length}" + (" causal" if causal else "")
                out.append((name, length, causal, dtype))
    return out


def forward_flops(b, h, length, d, causal):
    flops = 4.0 * b * h * length * length * d
    return flops / 2 if causal else flops


BACKWARD_OVER_FORWARD = 2.5  # FlashAttention-2's five backward products against the forward's two


# --------------------------------------------------------------------------------------
# Inputs and the engines' steps.

def make_inputs(args, length, dtype):
    """q, k, v, dout (B, H, L, D): standard normal f32 from --seed, rounded to bf16 for bf16."""
    import torch

    g = torch.Generator().manual_seed(args.seed)
    shape = (args.batch, args.heads, length, args.dim)
    tensors = [torch.randn(shape, generator=g) for _ in range(4)]  # q, k, v, dout (B, H, L, D)
    if dtype == "bf16":
        tensors = [t.to(torch.bfloat16) for t in tensors]
    return tensors


def make_steps(args, length, causal, dtype, inputs, is_causal_ok):
    """{engine: step}: step() runs one forward and backward and returns (forward seconds,
    total seconds, (out, dq, dk, dv))."""
    import torch
    import torch.nn.functional as F
    import qkv

    q0, k0, v0, dout = inputs
    scale = args.dim ** -0.5

    def autograd_step(forward):
        q, k, v = (t.detach().requires_grad_(True) for t in (q0, k0, v0))  # leaves of the graph

        def step():
            q.grad = k.grad = v.grad = None  # fresh gradients, no accumulation
            start = time.perf_counter()
            out = forward(q, k, v)
            mid = time.perf_counter()
            out.backward(dout)
            end = time.perf_counter()
            return mid - start, end - start, (out.detach(), q.grad, k.grad, v.grad)

        return step

    def direct_step():
        with torch.no_grad():
            start = time.perf_counter()
            out, lse = qkv.scaled_dot_product_attention(q0, k0, v0, is_causal=causal, return_lse=True)
            mid = time.perf_counter()
            dq, dk, dv = qkv.attention_backward(dout, q0, k0, v0, out, lse, is_causal=causal)
            end = time.perf_counter()
        return mid - start, end - start, (out, dq, dk, dv)

    steps = {"qkv": autograd_step(lambda q, k, v: qkv.scaled_dot_product_attention(q, k, v, is_causal=causal))}
    if dtype != "f32":
        return steps
    steps["qkv direct"] = direct_step
    if causal and not is_causal_ok:
        tril = torch.ones(length, length, dtype=torch.bool).tril()
        steps["torch SDPA"] = autograd_step(lambda q, k, v: F._scaled_dot_product_attention(
            q, k, v, tril, 0.0, False, False)[0])
    else:
        steps["torch SDPA"] = autograd_step(lambda q, k, v: F._scaled_dot_product_attention(
            q, k, v, None, 0.0, False, causal)[0])
    mask = causal_mask(length) if causal else None  # (L, L) f32, 0 or -inf

    def composed(q, k, v):
        s = q @ k.transpose(-2, -1) * scale  # (B, H, L, L)
        if mask is not None:
            s = s + mask
        return torch.softmax(s, dim=-1) @ v  # (B, H, L, D)

    steps["torch"] = autograd_step(composed)
    return steps


def causal_mask(length):
    import torch

    return torch.zeros(length, length).masked_fill(~torch.ones(length, length, dtype=torch.bool).tril(),
                                                   -math.inf)


def torch_reference(args, causal, inputs):
    """The torch composition in f32 on these inputs (bf16 ones widened): (out, dq, dk, dv)."""
    import torch

    q, k, v, dout = (t.float() for t in inputs)
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))
    s = q @ k.transpose(-2, -1) * args.dim ** -0.5
    if causal:
        s = s + causal_mask(q.shape[2])
    out = torch.softmax(s, dim=-1) @ v
    out.backward(dout)
    return out.detach(), q.grad, k.grad, v.grad


def f32_atols(args, length, inputs):
    """(atol of dq and dk, atol of dv and out) of one f32 engine against the exact result:
    tests/python/oracle.py's backward_atols for B=1 group, Lq = Lk = L (derived there)."""
    q, k, v, dout = (t.double() for t in inputs)
    u = 2.0 ** -24
    terms = 2 * (2 * length + args.dim + 16) * u
    norm_do = dout.norm(dim=-1).max().item()
    norm_v = v.norm(dim=-1).max().item()
    big = max(q.abs().max().item(), k.abs().max().item(), 1.0)
    return terms * args.dim ** -0.5 * norm_do * norm_v * big, terms * dout.abs().max().item()


def check(args, length, causal, dtype, steps, inputs):
    """One step of each engine (also the first warm-up): max |diff| of out, dq, dk, dv
    against the torch composition's (for bf16, computed apart on the same rounded inputs).
    -> ({engine: {name: diff}}, {name: bound}, [mismatch lines])."""
    results = {engine: step()[2] for engine, step in steps.items()}
    reference = results["torch"] if "torch" in results else torch_reference(args, causal, inputs)
    atol_qk, atol_v = f32_atols(args, length, inputs)
    names = ("out", "dq", "dk", "dv")
    bounds = {"out": 2 * atol_v, "dq": 2 * atol_qk, "dk": 2 * atol_qk, "dv": 2 * atol_v}
    if dtype == "bf16":
        bounds = {n: 2.0 ** -7 * r.abs().max().item() + bounds[n] for n, r in zip(names, reference)}
    diffs, mismatches = {}, []
    for engine, got in results.items():
        if engine == "torch" and dtype == "f32":
            continue
        diffs[engine] = {}
        for name, g, r in zip(names, got, reference):
            diff = (g.float() - r).abs().max().item()
            diffs[engine][name] = diff
            if not diff <= bounds[name]:  # NaN fails too
                mismatches.append(f"MISMATCH: {engine} {name} max |diff| {diff:.3g} > bound {bounds[name]:.3g}")
    return diffs, bounds, mismatches


# --------------------------------------------------------------------------------------
# One case: the check, warm-up, interleaved rounds, ceilings.

def run_case(case, args, torch_info, ceilings_bin):
    name, length, causal, dtype = case
    b, h, d = args.batch, args.heads, args.dim
    fwd_flops = forward_flops(b, h, length, d, causal)
    result = {"case": name, "batch": b, "heads": h, "seq": length, "dim": d, "causal": causal, "dtype": dtype,
              "flops_forward": fwd_flops, "flops_step": fwd_flops * (1 + BACKWARD_OVER_FORWARD)}
    inputs = make_inputs(args, length, dtype)
    steps = make_steps(args, length, causal, dtype, inputs, torch_info["is_causal_ok"])
    if args.no_torch:
        steps = {e: s for e, s in steps.items() if e not in TORCH_ENGINES}
    result["engines"] = list(steps)
    log(f"  {name}: checking {', '.join(steps)}")
    diffs, bounds, mismatches = check(args, length, causal, dtype, steps, inputs)
    result["max_abs_diff"] = diffs
    result["bounds"] = bounds
    result["mismatch"] = mismatches
    gc.collect()

    forwards = {e: [] for e in steps}  # {engine: [forward seconds of every step of the current turn]}

    def burst_of(engine, step):
        def burst(count):
            totals = []
            forwards[engine] = []
            for _ in range(count):
                fwd, total, outputs = step()
                del outputs
                forwards[engine].append(fwd)
                totals.append(total)
            return totals

        return burst

    bursts = {e: burst_of(e, s) for e, s in steps.items()}
    for _ in range(args.warmup):  # the check above was the first warm-up run
        for burst in bursts.values():
            burst(1)
            rounds.pause(args.gap)
    # Forward seconds per round, kept beside rounds.interleaved's totals by wrapping each
    # burst: the first step's and the median of the back-to-back ones.
    fwd_idle = {e: [] for e in steps}
    fwd_warm = {e: [] for e in steps}

    def recording(engine):
        def burst(count):
            totals = bursts[engine](count)
            fwd_idle[engine].append(forwards[engine][0])
            if count > 1:
                fwd_warm[engine].append(statistics.median(forwards[engine][1:]))
            return totals

        return burst

    samples = []
    log(f"  {name}: {args.rounds} rounds")
    idle, warm = rounds.interleaved(
        {e: recording(e) for e in steps}, args.rounds, 0, args.gap, args.back_to_back,
        after_round=lambda: samples.append(ceilings.sample(ceilings_bin, "fma", args.threads)))
    result["round_samples"] = samples  # one per round, None where absent
    measured = [x for x in samples if x is not None]
    if measured:
        result["round_ceiling"] = {"kind": "fma", "samples": measured, "median": statistics.median(measured)}
    for key, totals, fwds in (("idle", idle, fwd_idle), ("warm", warm, fwd_warm)):
        if not args.back_to_back and key == "warm":
            continue
        entry = {}
        for e in steps:
            backward = [t - f for t, f in zip(totals[e], fwds[e])]
            entry[e] = {
                "step_ms": statistics.median(totals[e]) * 1e3, "forward_ms": statistics.median(fwds[e]) * 1e3,
                "backward_ms": statistics.median(backward) * 1e3,
                "step_ms_rounds": [t * 1e3 for t in totals[e]], "forward_ms_rounds": [t * 1e3 for t in fwds[e]],
                "step_pct_fma": ceilings.paired(result["flops_step"], totals[e], samples),
                "forward_pct_fma": ceilings.paired(fwd_flops, fwds[e], samples),
                "backward_pct_fma": ceilings.paired(fwd_flops * BACKWARD_OVER_FORWARD, backward, samples),
            }
            entry[e]["step_gflops"] = result["flops_step"] / (entry[e]["step_ms"] * 1e6)
            entry[e]["forward_gflops"] = fwd_flops / (entry[e]["forward_ms"] * 1e6)
            entry[e]["backward_gflops"] = fwd_flops * BACKWARD_OVER_FORWARD / (entry[e]["backward_ms"] * 1e6)
        result[key] = entry
    del steps, bursts, inputs
    gc.collect()
    return result


# --------------------------------------------------------------------------------------
# Peak memory: one step in a fresh process per engine.

def read_status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def memory_probe(args):
    """--memory-probe ENGINE: one step of ENGINE on the case given by --lengths (one value),
    --probe-causal and --probe-dtype; prints JSON: the RSS before the step, the peak during it."""
    import qkv

    torch_info = peers.probe_torch(args.threads)
    qkv.set_num_threads(args.threads)
    length, causal, dtype = args.lengths[0], args.probe_causal, args.probe_dtype
    inputs = make_inputs(args, length, dtype)
    steps = make_steps(args, length, causal, dtype, inputs, torch_info["is_causal_ok"])
    step = steps[args.memory_probe]
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0, proc(5))
    baseline = read_status_kib("VmRSS")
    step()
    peak = read_status_kib("VmHWM")
    print(json.dumps({"baseline_kib": baseline, "peak_kib": peak}))


def measure_memory(args, case, engines):
    """{engine: MiB beyond the inputs, out and the three gradients}, None where it failed."""
    name, length, causal, dtype = case
    element = 4 if dtype == "f32" else 2
    io_mib = 4 * args.batch * args.heads * length * args.dim * element / 2**20  # out, dq, dk, dv
    out = {}
    for engine in engines:
        cmd = self_command("autograd", "--memory-probe", engine, "--lengths", str(length),
               "--probe-dtype", dtype, "--threads", str(args.threads), "--batch", str(args.batch),
               "--heads", str(args.heads), "--dim", str(args.dim), "--seed", str(args.seed),
               "--build-dir", args.build_dir, *(["--probe-causal"] if causal else []))
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            log(f"  memory probe {engine} failed: {done.stderr.strip()[-400:]}")
            out[engine] = None
            continue
        probe = json.loads(done.stdout.strip().splitlines()[-1])
        out[engine] = (probe["peak_kib"] - probe["baseline_kib"]) / 1024 - io_mib
    return out


# --------------------------------------------------------------------------------------
# The table.

def print_table(results, key):
    cell = report.cell
    header = (f"{'case':<19}{'engine':<12}{'fwd ms':>9}{'bwd ms':>9}{'step ms':>9}{'idle':>9}{'GF/s':>7}"
              f"{'%FMA':>7}{'fwd %':>7}{'bwd %':>7}{'fwd ×':>8}{'step ×':>8}{'MiB':>8}"
              f"{'|Δ|out':>9}{'|Δ|dq':>9}{'|Δ|dk':>9}{'|Δ|dv':>9}")
    print(header)
    print("-" * len(header))
    for r in results:
        entry = r.get(key, {})
        q = entry.get("qkv", {})
        for e in r["engines"]:
            x = entry.get(e)
            if x is None:
                continue
            idle = r.get("idle", {}).get(e, {}).get("step_ms")
            pct = lambda k: (x.get(k) or {}).get("median")  # noqa: E731
            fwd_ratio = x["forward_ms"] / q["forward_ms"] if e != "qkv" and q else None
            step_ratio = x["step_ms"] / q["step_ms"] if e != "qkv" and q else None
            diff = r["max_abs_diff"].get(e, {})
            mem = (r.get("memory_mib") or {}).get(e)
            print(f"{r['case'] if e == r['engines'][0] else '':<19}{e:<12}{cell(x['forward_ms'], '9.1f')}"
                  f"{cell(x['backward_ms'], '9.1f')}{cell(x['step_ms'], '9.1f')}{cell(idle, '9.1f')}"
                  f"{cell(x['step_gflops'], '7.1f')}{cell(pct('step_pct_fma'), '6.1f', '%')}"
                  f"{cell(pct('forward_pct_fma'), '6.1f', '%')}{cell(pct('backward_pct_fma'), '6.1f', '%')}"
                  f"{cell(fwd_ratio, '7.2f', 'x')}{cell(step_ratio, '7.2f', 'x')}{cell(mem, '8.1f')}"
                  + "".join(cell(diff.get(n), "9.1e") for n in ("out", "dq", "dk", "dv")))


def print_summary(results, key, target):
    """Per f32 case: torch time / qkv time, forward and step, against the target."""
    print(f"\nqkv against torch (peer time / qkv time; target: step >= {target:g}x):")
    for r in results:
        entry = r.get(key, {})
        if "qkv" not in entry or r["dtype"] != "f32":
            continue
        parts = []
        for e in TORCH_ENGINES:
            if e in entry:
                step = entry[e]["step_ms"] / entry["qkv"]["step_ms"]
                fwd = entry[e]["forward_ms"] / entry["qkv"]["forward_ms"]
                verdict = "met" if step >= target else "NOT met"
                parts.append(f"{e}: step {step:.2f}x ({verdict}), forward {fwd:.2f}x")
        if "qkv direct" in entry:
            parts.append(f"qkv time / qkv direct time: {entry['qkv']['step_ms'] / entry['qkv direct']['step_ms']:.2f}")
        print(f"  {r['case']}: " + "; ".join(parts))
        bf = next((x for x in results if x["dtype"] == "bf16" and x["seq"] == r["seq"]
                   and x["causal"] == r["causal"]), None)
        if bf and "qkv" in bf.get(key, {}):
            print(f"  {bf['case']}: qkv bf16 step {bf[key]['qkv']['step_ms']:.1f} ms, "
                  f"{entry['qkv']['step_ms'] / bf[key]['qkv']['step_ms']:.2f}x qkv f32's speed")


# --------------------------------------------------------------------------------------

ENGINE_IDS = {"qkv": "qkv", "qkv direct": "qkv_direct", "torch SDPA": "torch_sdpa", "torch": "torch"}


def to_record(rec, results, measured_ceilings, key):
    """Per round of every case: GFLOP/s of the whole step (forward + backward) and of the
    forward, and the peak memory per engine."""
    start = (measured_ceilings.get("f32_fma") or {}).get("gflops")
    if start:
        record.add_ceiling(rec, "f32_fma", "GFLOP/s", [start])
    shape = f"B={results[0]['batch']} H={results[0]['heads']} D={results[0]['dim']}" if results else ""
    step = record.add_subject(rec, "autograd_step", f"Attention forward + backward through torch autograd, {shape}",
                              "step throughput", "GFLOP/s", "higher", "f32_fma")
    forward = record.add_subject(rec, "autograd_forward", f"Its forward alone (requires_grad inputs), {shape}",
                                 "forward throughput", "GFLOP/s", "higher", "f32_fma", headline=False)
    memory = None
    for r in results:
        samples = r.get("round_samples")
        if samples:
            record.add_ceiling(rec, "f32_fma", "GFLOP/s", samples)
        entry = r.get(key, {})
        info = {"dtype": r["dtype"], "causal": r["causal"], "seq": r["seq"], "bounds": r["bounds"],
                "max_abs_diff": {ENGINE_IDS[e]: d for e, d in r["max_abs_diff"].items()}}
        if r["mismatch"]:
            info["mismatch"] = r["mismatch"]
        record.add_case(step, r["case"], {ENGINE_IDS[e]: [r["flops_step"] / (t * 1e6) for t in x["step_ms_rounds"]]
                                          for e, x in entry.items()}, ceiling_samples=samples, info=info)
        record.add_case(forward, r["case"], {ENGINE_IDS[e]: [r["flops_forward"] / (t * 1e6)
                                                             for t in x["forward_ms_rounds"]]
                                             for e, x in entry.items()}, ceiling_samples=samples)
        if r.get("memory_mib"):
            if memory is None:
                memory = record.add_subject(rec, "autograd_memory",
                                            "Peak memory of one step beyond inputs, output and gradients",
                                            "memory", "MiB", "lower")
            record.add_case(memory, r["case"], {ENGINE_IDS[e]: [m] for e, m in r["memory_mib"].items()})


def add_arguments(parser):
    parser.add_argument("--lengths", type=int, nargs="+", default=None,
                        help="sequence lengths L (default 1024 4096; --quick 512)")
    parser.add_argument("--batch", type=int, default=1, help="B (default 1)")
    parser.add_argument("--heads", type=int, default=8, help="H (default 8)")
    parser.add_argument("--dim", type=int, default=64, help="D (default 64)")
    parser.add_argument("--no-bf16", action="store_true", help="leave out the bf16 cases (qkv alone)")
    parser.add_argument("--threads", type=int, default=2, help="threads of torch and qkv (default 2)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds per case (default 5, --quick 3)")
    parser.add_argument("--warmup", type=int, default=1,
                        help="warm-up steps of each engine after the checking step (default 1)")
    parser.add_argument("--back-to-back", type=int, default=2, metavar="N",
                        help="steps each engine makes right after its first in a turn (default 2)")
    parser.add_argument("--gap", type=float, default=0.05, help="seconds of idle after each turn (default 0.05)")
    parser.add_argument("--target", type=float, default=3.0, help="the issue's target, torch / qkv (default 3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a short smoke run: L=512, 3 rounds, quick ceilings")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory processes")
    add_build_arguments(parser)
    peers.add_arguments(parser, ort=False)
    # Internal: one step in a fresh process, for its peak RSS (measure_memory).
    parser.add_argument("--memory-probe", choices=ENGINES, help=argparse.SUPPRESS)
    parser.add_argument("--probe-causal", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--probe-dtype", choices=("f32", "bf16"), default="f32", help=argparse.SUPPRESS)


def run(args):
    args.lengths = args.lengths or ([512] if args.quick else [1024, 4096])
    args.rounds = args.rounds or (3 if args.quick else 5)
    if min(args.threads, args.rounds, args.batch, args.heads, args.dim, *args.lengths) < 1:
        sys.exit("bench.py autograd: --threads, --rounds, --batch, --heads, --dim, --lengths must be >= 1")
    if args.warmup < 0 or args.back_to_back < 0 or args.gap < 0:
        sys.exit("bench.py autograd: --warmup, --back-to-back and --gap must be >= 0")
    build_dir = os.path.abspath(args.build_dir)
    sys.path.insert(0, os.path.join(build_dir, "python"))
    if args.memory_probe:
        args.no_record = True
        memory_probe(args)
        return None

    args.no_ort = True
    peers.ensure_python_peers(args)  # torch itself is needed even with --no-torch: the inputs are torch tensors
    peers.reexec_with_openblas(args)  # does not return when it re-runs the script
    rec = record.new("autograd", args.threads, settings={
        "lengths": args.lengths, "batch": args.batch, "heads": args.heads, "dim": args.dim, "rounds": args.rounds,
        "warmup": args.warmup, "back_to_back": args.back_to_back, "gap_s": args.gap, "seed": args.seed,
        "quick": args.quick, "no_bf16": args.no_bf16})
    programs = ensure_programs(build_dir, {"_qkv": "python/qkv/_qkv*.so", "qkv_ceilings": "bench/qkv_ceilings"},
                               args.rebuild)
    import qkv

    qkv.set_num_threads(args.threads)
    torch_info = peers.probe_torch(args.threads)
    log("measuring the ceilings (qkv_ceilings)")
    measured_ceilings = ceilings.measure(programs["qkv_ceilings"], args.threads, args.quick)

    results, failed = [], []
    load_before = os.getloadavg()
    for case in cases(args):
        log(f"case {case[0]}")
        r = run_case(case, args, torch_info, programs["qkv_ceilings"])
        if not args.no_memory:
            log(f"  {case[0]}: peak memory, one process per engine")
            r["memory_mib"] = measure_memory(args, case, r["engines"])
        results.append(r)
        failed += [f"{case[0]}: {m}" for m in r["mismatch"]]

    machine = {"cpu": qkv.cpu_summary(), "cpu_model": report.cpu_model(), "threads": args.threads,
               "qkv": qkv.__version__, "qkv_git": report.git_describe(), "torch": torch_info["version"],
               "torch_blas": torch_info["blas"],
               "torch_causal": "is_causal=True" if torch_info["is_causal_ok"] else "bool tril mask",
               "python": platform.python_version(),
               "loadavg_1min": {"start": load_before[0], "end": os.getloadavg()[0]}}
    print(f"qkv {machine['qkv']} ({report.where(machine['qkv_git'], build_dir)}); torch {machine['torch']} "
          f"({machine['torch_blas']}); threads {args.threads}; 1-min load {load_before[0]:.2f} -> "
          f"{machine['loadavg_1min']['end']:.2f}")
    print(f"cpu: {machine['cpu']}")
    print(f"ceilings ({args.threads} threads, best of {measured_ceilings['repeats']}): "
          f"{ceilings.describe(measured_ceilings)}")
    print(f"B={args.batch} H={args.heads} D={args.dim}; forward + out.backward(dout) through autograd; medians of "
          f"{args.rounds} interleaved rounds, each turn 1 step after {args.gap * 1e3:.0f} ms idle + "
          f"{args.back_to_back} back to back; FLOPs: forward 4·B·H·L²·D (half when causal), backward 2.5x that")
    print()
    key = "warm" if args.back_to_back else "idle"
    print(f"ms: {'back to back' if key == 'warm' else 'after idle'} (idle: the step after idle); GF/s and %FMA "
          "of the whole step, fwd %/bwd % of each part; × = peer time / qkv time; MiB: peak beyond inputs, out "
          "and gradients; |Δ|: against the torch composition")
    print_table(results, key)
    for r in results:
        rc = r.get("round_ceiling")
        if rc:
            print(f"  {r['case']}: f32 FMA ceiling sampled in its {len(rc['samples'])} rounds: median "
                  f"{rc['median']:.1f} GFLOP/s (range {min(rc['samples']):.1f}-{max(rc['samples']):.1f})")
        worst = max(((d / r["bounds"][n], e, n) for e, ds in r["max_abs_diff"].items() for n, d in ds.items()),
                    default=None)
        if worst:
            print(f"  {r['case']}: largest |Δ| / its bound: {worst[0]:.3f} ({worst[1]} {worst[2]}; bounds "
                  + ", ".join(f"{n} {b:.1e}" for n, b in r["bounds"].items()) + ")")
    print_summary(results, key, args.target)
    for f in failed:
        print(f"  {f}")
    rec["versions"].update(qkv=machine["qkv"], qkv_cpu=machine["cpu"], torch=machine["torch"],
                           torch_blas=machine["torch_blas"])
    to_record(rec, results, measured_ceilings, key)
    rec["notes"] += [
        "Forward and out.backward(dout) of CPU tensors that require grad; each round's value is "
        + (f"the median of the {args.back_to_back} steps right after an engine's first step in its turn (back to "
           "back)" if key == "warm" else f"the first step after {args.gap * 1e3:.0f} ms idle")
        + f"; {args.rounds} interleaved rounds. FLOPs: forward 4·B·H·L²·D (half when causal), backward 2.5x that.",
        "qkv: qkv.scaled_dot_product_attention through autograd; qkv_direct: its forward (return_lse) and "
        "qkv.attention_backward called directly; torch_sdpa: 1.13's private F._scaled_dot_product_attention "
        f"({machine['torch_causal']} for causal); torch: the explicit composition (matmul, softmax, matmul).",
        f"The issue's target: torch step time / qkv step time >= {args.target:g} (f32)."] + failed
    args.failed = bool(failed)
    return rec
