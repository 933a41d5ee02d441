#!/usr/bin/python3
"""qkv's attention beside ONNX Runtime and PyTorch, against the machine's measured ceilings.

Run after a build (it builds what is missing), with Debian's Python:

    /usr/bin/python3 scripts/bench.py attention [--threads 2] [--quick] [--repeats 7]

It prints its tables and records every round in bench/records/attention/<host kind>.json
(scripts/bench/record.py), from which scripts/benchmarks_md.py makes BENCHMARKS.md.

What it does, in order:
  1. Installs the peers when missing (scripts/bench/peers.py says how): python3-torch
     and python3-onnx (Debian), ONNX Runtime for Node.js (npm onnxruntime-node, into a
     cache outside the source tree, ~/.cache/qkv-bench or $QKV_BENCH_CACHE). torch runs
     on Debian's OpenBLAS, for this process only, unless --torch-blas system: on the
     system's default reference BLAS it is a straw man (4x slower at L=2048 here).
  2. Measures the ceilings with build/bench/qkv_ceilings (f32 FMA peak, AVX512-BF16 and
     AMX peaks where present, memory read bandwidth). The host's ceilings drift within
     minutes, so each round of a case also samples the ceiling that case is held against
     (the f32 FMA peak for f32 cases, vdpbf16ps for bf16, the read bandwidth over a
     buffer of the case's K+V size for decode; scripts/bench/ceilings.py). qkv's rate in
     each round is divided by the sample taken right after that round, and the % columns
     show the median of those percentages.
  3. For each case, builds an ONNX graph of ONE com.microsoft MultiHeadAttention node
     (query/key/value as (B, L, H*D) float32, num_heads = H; causal through the node's
     `unidirectional` = 1 attribute, checked at start on a tiny problem, with an additive
     `attention_bias` input (-inf above the diagonal) as the fallback; by default causal
     cases also time the attention_bias graph, reported in a note: ORT's speed depends on
     how causal is expressed), starts
     scripts/bench/ort_runner.js on it (intra-op threads = N) and keeps it waiting, then
     runs each engine once and compares the outputs with qkv's (max |diff|: catches a
     wrong head layout or mask), then W warm-up runs of each, then R rounds of
     qkv, ORT, torch, qkv, ORT, torch, ... (interleaved, so that all three see the same
     state of a noisy machine), and reports medians in two tables. In each turn an engine
     runs 1 + --back-to-back times without a pause: the first run comes after idle, with
     the engine's worker threads asleep (on these VMs a sleeping vCPU took a median 1.8 ms
     to start a thread after 50 ms idle: the first run pays it), the rest back to back,
     as a layer's attention runs right after its projections.
     qkv: the Python module, qkv.scaled_dot_product_attention on (B, H, L, D) NumPy
     arrays (torch bf16 tensors for bf16). torch 1.13:
     torch.nn.functional._scaled_dot_product_attention(q, k, v, None, 0.0, False,
     is_causal) on (B, H, L, D) tensors sharing the same memory; for the softcap case
     (which 1.13's SDPA lacks) matmul, c·tanh(s/c), softmax, matmul, as its users would
     write it, and no ORT (MultiHeadAttention has no softcap). ORT: its natural
     (B, L, H*D) layout, the same numbers. Each engine's time includes allocating its
     output. Between two turns the script sleeps --gap seconds, so that no engine's
     spinning worker threads eat into the next engine's run (ORT's pool spins for about
     30 ms after a run; OpenMP's workers much less).
     Beside them, in the same rounds (f32 cases without a mask or softcap): the two matrix
     products alone, S = Q·Kᵀ written to memory and then S·V, in oneDNN's batched matmul
     (build/bench/qkv_bench_products, which checks 64 entries of each against double sums
     first). That is a lower bound for any unfused attention built on a tuned matrix
     library, and it says how close qkv's whole attention (products, softmax and all) runs
     to pure matrix-product speed. Reported in a note: its time, GFLOP/s and
     products time / qkv time.
  4. Runs `build/qkv bench --batch 1 --heads 1 --seq 65536 --dim 64 --repeats 1
     --warmup 0 --json` and reports its peak RSS - baseline RSS - bytes of q, k, v and
     the output: the memory the computation needed beyond its inputs and output, against
     the 64 MiB target.

FLOPs: 4*B*H*Lq*Lk*D, halved for a causal square problem. Ratios are speed ratios:
qkv/ORT = ORT's median time / qkv's median time (above 1: qkv is faster). % peak: qkv's
GFLOP/s over the f32 FMA peak at the same thread count, round by round against the sample
taken after it, median over the rounds. For decode, the K+V read rate
2*B*Hkv*Lk*D*(4 for f32, 2 for bf16) bytes / time over the memory read bandwidth, paired
by round the same way.

Benchmarks only: nothing here asserts a time. A mismatch between engines is reported
(and makes the exit status 1), never hidden.
"""
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile

from bench import ceilings, log, peers, record, report, rounds
from bench.build import add_arguments as add_build_arguments, ensure_programs
from bench.servers import OrtRunner, ProductsRunner

MEMORY_TARGET_MIB = 64.0
CAUSAL_EXPRESSIONS = {
    "unidirectional": "MultiHeadAttention attribute unidirectional=1",
    "bias": "MultiHeadAttention additive attention_bias input (1, 1, Lq, Lk), -inf above the diagonal",
}


# --------------------------------------------------------------------------------------
# Cases.

def cases(quick):
    # (name, B, H, Lq, Lk, D, causal, dtype, decode, softcap)
    if quick:
        return [
            ("f32 L=512", 1, 12, 512, 512, 64, False, "f32", False, None),
            ("f32 L=512 causal", 1, 12, 512, 512, 64, True, "f32", False, None),
            ("bf16 L=512", 1, 12, 512, 512, 64, False, "bf16", False, None),
            ("decode Lk=2048 H=32 D=128", 1, 32, 1, 2048, 128, False, "f32", True, None),
        ]
    return [
        ("f32 L=512", 1, 12, 512, 512, 64, False, "f32", False, None),
        ("f32 L=1024", 1, 12, 1024, 1024, 64, False, "f32", False, None),
        ("f32 L=2048", 1, 12, 2048, 2048, 64, False, "f32", False, None),
        ("f32 L=4096", 1, 12, 4096, 4096, 64, False, "f32", False, None),
        ("f32 L=512 causal", 1, 12, 512, 512, 64, True, "f32", False, None),
        ("f32 L=2048 causal", 1, 12, 2048, 2048, 64, True, "f32", False, None),
        # Gemma 2's attention softcap (c = 50): ORT's MultiHeadAttention has none; torch
        # computes it as its users write it, c·tanh(s/c) on the materialized scores.
        ("f32 L=2048 softcap 50", 1, 12, 2048, 2048, 64, False, "f32", False, 50.0),
        ("bf16 L=2048", 1, 12, 2048, 2048, 64, False, "bf16", False, None),
        ("decode Lk=8192 H=32 D=128", 1, 32, 1, 8192, 128, False, "f32", True, None),
        ("decode bf16 Lk=8192 H=32 D=128", 1, 32, 1, 8192, 128, False, "bf16", True, None),
    ]


def attention_flops(b, h, lq, lk, d, causal):
    flops = 4.0 * b * h * lq * lk * d
    return flops / 2 if causal and lq == lk else flops


# --------------------------------------------------------------------------------------
# The peers' attention: ONNX Runtime's MultiHeadAttention node, torch's softcap.

def build_mha_model(path, b, h, lq, lk, d, causal, causal_mode):
    """One com.microsoft MultiHeadAttention node. Inputs query (b, lq, h*d), key and value
    (b, lk, h*d), float32; output (b, lq, h*d). causal_mode: 'unidirectional' (the node's
    attribute) or 'bias' (an additive attention_bias input (1, 1, lq, lk), -inf above the
    diagonal). Returns the input names (in the order the feeds need)."""
    import onnx
    from onnx import TensorProto, helper

    inputs = [
        helper.make_tensor_value_info("query", TensorProto.FLOAT, [b, lq, h * d]),
        helper.make_tensor_value_info("key", TensorProto.FLOAT, [b, lk, h * d]),
        helper.make_tensor_value_info("value", TensorProto.FLOAT, [b, lk, h * d]),
    ]
    node_inputs = ["query", "key", "value"]
    attributes = {"num_heads": h}
    if causal and causal_mode == "unidirectional":
        attributes["unidirectional"] = 1
    elif causal and causal_mode == "bias":
        # MultiHeadAttention's inputs: query, key, value, bias, key_padding_mask,
        # attention_bias, ... ('' = absent).
        inputs.append(helper.make_tensor_value_info("attention_bias", TensorProto.FLOAT, [1, 1, lq, lk]))
        node_inputs += ["", "", "attention_bias"]
    node = helper.make_node("MultiHeadAttention", node_inputs, ["output"], domain="com.microsoft",
                            name="mha", **attributes)
    graph = helper.make_graph([node], "qkv_bench_mha", inputs,
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [b, lq, h * d])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)],
                              producer_name="qkv bench_attention.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return [name for name in node_inputs if name]


def causal_bias(lq, lk):
    import numpy as np

    allowed = np.tril(np.ones((lq, lk), dtype=bool))
    return np.where(allowed, 0.0, -np.inf).astype(np.float32).reshape(1, 1, lq, lk)


def probe_ort_causal(node_modules, workdir, causal_mode):
    """Does this ORT honour the causal expression? A tiny causal problem: query row 0 may
    see key 0 only, so output row 0 must equal value row 0 (per head)."""
    import numpy as np

    b, h, l, d = 1, 2, 8, 4
    model = os.path.join(workdir, "probe.onnx")
    names = build_mha_model(model, b, h, l, l, d, True, causal_mode)
    rng = np.random.default_rng(1)
    feeds = {n: rng.standard_normal((b, l, h * d), dtype=np.float32) for n in ("query", "key", "value")}
    if "attention_bias" in names:
        feeds["attention_bias"] = causal_bias(l, l)
    for name, array in feeds.items():
        array.tofile(os.path.join(workdir, f"{name}.bin"))
    shapes = {name: list(feeds[name].shape) for name in names}
    try:
        runner = OrtRunner(node_modules, workdir, model, shapes, 1, 0)
    except RuntimeError as error:
        return False, str(error)
    runner.close()
    out = np.fromfile(runner.output, dtype=np.float32).reshape(b, l, h * d)
    err = float(np.abs(out[:, 0] - feeds["value"][:, 0]).max())
    return err < 1e-5, f"row 0 vs value row 0: max |diff| {err:.2e}"


def choose_ort_causal(node_modules, ort_version, wanted_causal):
    """Which causal expressions this ORT honours, probed on a tiny problem: the one the ORT
    column uses, and the other one to time beside it where both were asked for."""
    probe_dir = tempfile.mkdtemp(prefix="qkv-bench-probe-")
    try:
        wanted = ["unidirectional", "bias"] if wanted_causal == "both" else [wanted_causal]
        honoured, probes = [], {}
        for mode in ("unidirectional", "bias"):
            if mode in wanted or not honoured:
                ok, probes[mode] = probe_ort_causal(node_modules, probe_dir, mode)
                if ok:
                    honoured.append(mode)
                else:
                    log(f"ORT {ort_version}: causal via {mode} is not honoured ({probes[mode]})")
    finally:
        shutil.rmtree(probe_dir, ignore_errors=True)
    usable = [m for m in wanted if m in honoured] or honoured or wanted[:1]
    return {"node_modules": node_modules, "version": ort_version, "causal_mode": usable[0],
            "extra_mode": usable[1] if len(usable) > 1 else None, "causal_probes": probes}


def torch_softcapped_attention(q, k, v, softcap):
    """softmax(c·tanh(q·kᵀ/(√D·c)))·v in PyTorch operations, for a peer without softcap."""
    import torch

    scores = torch.matmul(q, k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
    return torch.matmul(torch.softmax(softcap * torch.tanh(scores / softcap), dim=-1), v)


# --------------------------------------------------------------------------------------
# One case.

def run_case(case, args, ort_info, torch_info, ceilings_bin, products_bin):
    import numpy as np
    import qkv

    name, b, h, lq, lk, d, causal, dtype, decode, softcap = case
    rng = np.random.default_rng(args.seed)
    q = rng.standard_normal((b, h, lq, d), dtype=np.float32)
    k = rng.standard_normal((b, h, lk, d), dtype=np.float32)
    v = rng.standard_normal((b, h, lk, d), dtype=np.float32)
    result = {"case": name, "batch": b, "heads": h, "seq_q": lq, "seq_k": lk, "dim": d, "causal": causal,
              "dtype": dtype, "flops": attention_flops(b, h, lq, lk, d, causal)}
    if decode:
        result["kv_bytes"] = 2.0 * b * h * lk * d * (4 if dtype == "f32" else 2)

    engines = {}  # name -> callable returning the output (as NumPy float32 for checking)
    bursts = {}  # name -> its burst (rounds.timed(engine) where the engine does not time itself)
    outputs = {}
    notes = []
    torch = None
    if torch_info is not None:
        import torch
        import torch.nn.functional as F
    if dtype == "f32":
        engines["qkv"] = lambda: qkv.scaled_dot_product_attention(q, k, v, is_causal=causal, softcap=softcap)
    else:  # bf16: NumPy has no bfloat16; qkv reads torch bf16 tensors in place
        if torch is None:
            notes.append("bf16 needs torch tensors as input: skipped")
            return result, notes
        qb, kb, vb = (torch.from_numpy(x).to(torch.bfloat16) for x in (q, k, v))
        engines["qkv"] = lambda: qkv.scaled_dot_product_attention(qb, kb, vb, is_causal=causal)

    runners = []
    workdir = tempfile.mkdtemp(prefix="qkv-bench-")
    try:
        if ort_info is not None and softcap is not None:
            notes.append("ORT: not run (its MultiHeadAttention has no softcap)")
        elif ort_info is not None and dtype == "f32":
            # The primary causal expression gives the "ORT" column; in causal cases the other
            # one (when asked for) is timed too, as "ORT <mode>", reported in a note.
            modes = [("ORT", ort_info["causal_mode"])]
            if causal and ort_info.get("extra_mode"):
                modes.append((f"ORT {ort_info['extra_mode']}", ort_info["extra_mode"]))
            feeds = {"query": q, "key": k, "value": v}
            written = set()
            for engine, mode in modes:
                tag = mode if causal else "plain"
                model = os.path.join(workdir, f"mha_{tag}.onnx")
                names = build_mha_model(model, b, h, lq, lk, d, causal, mode)
                shapes = {}
                for n in names:  # (B, H, L, D) -> (B, L, H*D), ORT's layout
                    array = causal_bias(lq, lk) if n == "attention_bias" else \
                        np.ascontiguousarray(feeds[n].transpose(0, 2, 1, 3)).reshape(b, -1, h * d)
                    if n not in written:
                        array.tofile(os.path.join(workdir, f"{n}.bin"))
                        written.add(n)
                    shapes[n] = list(array.shape)
                runner = OrtRunner(ort_info["node_modules"], workdir, model, shapes, args.threads, 0, tag)
                runners.append(runner)
                out = np.fromfile(runner.output, dtype=np.float32).reshape(b, lq, h, d).transpose(0, 2, 1, 3)
                outputs[engine] = out
                engines[engine] = runner.run
                bursts[engine] = runner.run_burst  # timed inside Node.js around session.run
            for n in written:
                os.remove(os.path.join(workdir, f"{n}.bin"))
        elif ort_info is not None:
            notes.append("ORT: not run for bf16 (the MultiHeadAttention graph here is float32)")

        # oneDNN's two products alone, as a reference, where they are all of the work but the
        # softmax: f32 attention without a mask (oneDNN has no triangular product) or softcap.
        if products_bin and dtype == "f32" and not causal and not decode and softcap is None:
            products = ProductsRunner(products_bin, b * h, lq, lk, d, args.threads)
            runners.append(products)
            result["products_impl"] = products.impl
            engines["products"] = products.run
            bursts["products"] = products.run_burst

        if torch_info is not None:
            if dtype == "f32":
                qt, kt, vt = (torch.from_numpy(x) for x in (q, k, v))
            else:
                qt, kt, vt = qb, kb, vb
            if softcap is not None:
                engines["torch"] = lambda: torch_softcapped_attention(qt, kt, vt, softcap)
            elif causal and not torch_info["is_causal_ok"]:
                mask = torch.ones(lq, lk, dtype=torch.bool).tril()
                engines["torch"] = lambda: F._scaled_dot_product_attention(qt, kt, vt, mask, 0.0, False, False)[0]
            else:
                engines["torch"] = lambda: F._scaled_dot_product_attention(qt, kt, vt, None, 0.0, False, causal)[0]
            if dtype == "bf16":
                try:
                    engines["torch"]()
                except RuntimeError as error:
                    notes.append(f"torch bf16 SDPA failed on this CPU: {error}")
                    del engines["torch"]

        # One run of each: the outputs, checked against qkv's (and the first warm-up).
        def as_numpy(x):
            return x.float().numpy() if torch is not None and isinstance(x, torch.Tensor) else np.asarray(x)

        outputs["qkv"] = as_numpy(engines["qkv"]())
        if "torch" in engines:
            outputs["torch"] = as_numpy(engines["torch"]())
        tolerance = 1e-3 if dtype == "f32" else 5e-2
        result["max_abs_diff"] = {}
        result["mismatch"] = []
        for peer in [e for e in outputs if e != "qkv"]:
            diff = report.max_abs_diff(outputs["qkv"], outputs[peer])
            result["max_abs_diff"][peer] = diff
            if not diff <= tolerance:
                result["mismatch"].append(peer)
                notes.append(f"MISMATCH: qkv vs {peer} max |diff| {diff:.3g} > {tolerance:g}")
        outputs.clear()

        # Per round and engine: its first run after the gap (idle: its threads asleep) and
        # the median of --back-to-back runs right after it (warm, as inside a model); after
        # each round, a sample of the ceiling this case is held against.
        kind = ceilings.kind_for(dtype, decode)
        samples = []  # None where the CPU lacks that ceiling
        idle, warm = rounds.interleaved(
            {engine: bursts.get(engine) or rounds.timed(call) for engine, call in engines.items()},
            args.repeats, args.warmup, args.gap, args.back_to_back,
            after_round=lambda: samples.append(
                ceilings.sample(ceilings_bin, kind, args.threads, result.get("kv_bytes"))))
        result["round_samples"] = {"kind": kind, "samples": samples}  # one per round, None where absent
        measured = [x for x in samples if x is not None]
        if measured:
            result["round_ceiling"] = {"kind": kind, "samples": measured, "median": statistics.median(measured)}
        for key, times in (("", idle), ("_warm", warm)):
            if not args.back_to_back and key:
                continue
            result["ms_all" + key] = {e: [t * 1e3 for t in ts] for e, ts in times.items()}
            result["ms" + key] = {e: statistics.median(ts) * 1e3 for e, ts in times.items()}
            result["gflops" + key] = {e: result["flops"] / (ms * 1e6) for e, ms in result["ms" + key].items()}
            if decode:
                result["kv_gb_per_s" + key] = {e: result["kv_bytes"] / (ms * 1e6)
                                               for e, ms in result["ms" + key].items()}
            work = result["kv_bytes"] if decode else result["flops"]
            pct = {}
            for e, ts in times.items():
                paired = ceilings.paired(work, ts, samples)
                if paired:
                    pct[e] = paired
            if pct:
                result["pct_of_ceiling" + key] = {"kind": kind, "engines": pct}
    finally:
        for runner in runners:
            runner.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return result, notes


# --------------------------------------------------------------------------------------
# The tables.

def case_ceilings(r, peak, bf16_peak, bandwidth):
    """(f32 FMA peak, read bandwidth, vdpbf16ps peak) to hold case r against: the median of
    the samples from its own rounds where it has them, else the start-of-run ceilings."""
    rc = r.get("round_ceiling")
    if rc and rc["kind"] == "fma":
        peak = rc["median"]
    elif rc and rc["kind"] == "mem":
        bandwidth = rc["median"]
    elif rc and rc["kind"] == "bf16":
        bf16_peak = rc["median"]
    return peak, bandwidth, bf16_peak


def pct_of_ceilings(r, key, peak, bf16_peak, bandwidth, engine="qkv"):
    """The engine's percentage of (the f32 FMA peak, the read bandwidth, the vdpbf16ps
    peak), None where it does not apply. For the ceiling the case sampled each round, the
    median of the per-round percentages; for the others, the engine's median rate over
    case_ceilings()."""
    peak_r, bandwidth_r, bf16_peak_r = case_ceilings(r, peak, bf16_peak, bandwidth)
    gf = r.get("gflops" + key, {})
    rates = r.get("kv_gb_per_s" + key, {})
    pct = {"fma": 100 * gf[engine] / peak_r if peak_r and engine in gf else None,
           "mem": 100 * rates[engine] / bandwidth_r if bandwidth_r and engine in rates else None,
           "bf16": 100 * gf[engine] / bf16_peak_r if bf16_peak_r and engine in gf and r["dtype"] == "bf16" else None}
    paired = r.get("pct_of_ceiling" + key)
    if paired and engine in paired["engines"]:
        pct[paired["kind"]] = paired["engines"][engine]["median"]
    return pct["fma"], pct["mem"], pct["bf16"]


def print_table(results, measured_ceilings, key=""):
    """One table of the results' medians: after idle (key "") or back to back (key "_warm")."""
    cell = report.cell
    peak = (measured_ceilings.get("f32_fma") or {}).get("gflops")
    bf16_peak = (measured_ceilings.get("bf16_avx512_dpbf16ps") or {}).get("gflops")
    bandwidth = (measured_ceilings.get("mem_read") or {}).get("gb_per_s")
    header = (f"{'case':<27}{'qkv ms':>9}{'ORT ms':>9}{'torch ms':>10}{'qkv GF/s':>10}{'ORT GF/s':>10}"
              f"{'torch GF/s':>11}{'qkv/ORT':>9}{'qkv/torch':>10}{'%f32 pk':>9}{'%mem BW':>9}"
              f"{'|Δ| ORT':>10}{'|Δ| torch':>10}")
    print(header)
    print("-" * len(header))
    for r in results:
        ms = r.get("ms" + key, {})
        gf = r.get("gflops" + key, {})
        diff = r.get("max_abs_diff", {})
        q = ms.get("qkv")
        ratio_ort = ms["ORT"] / q if q and "ORT" in ms else None
        ratio_torch = ms["torch"] / q if q and "torch" in ms else None
        pct_peak, pct_bw, _ = pct_of_ceilings(r, key, peak, bf16_peak, bandwidth)
        print(f"{r['case']:<27}{cell(q, '9.2f')}{cell(ms.get('ORT'), '9.2f')}{cell(ms.get('torch'), '10.2f')}"
              f"{cell(gf.get('qkv'), '10.1f')}{cell(gf.get('ORT'), '10.1f')}{cell(gf.get('torch'), '11.1f')}"
              f"{cell(ratio_ort, '8.2f', 'x')}{cell(ratio_torch, '9.2f', 'x')}"
              f"{cell(pct_peak, '8.1f', '%')}{cell(pct_bw, '8.1f', '%')}"
              f"{cell(diff.get('ORT'), '10.1e')}{cell(diff.get('torch'), '10.1e')}")
    for r in results:
        bf16_peak_r = case_ceilings(r, peak, bf16_peak, bandwidth)[2]
        rc = r.get("round_ceiling")
        if rc and not key:  # the same samples serve both tables: named once
            unit = "GB/s" if rc["kind"] == "mem" else "GFLOP/s"
            what = {"mem": "memory read", "bf16": "vdpbf16ps", "fma": "f32 FMA"}[rc["kind"]]
            print(f"  {r['case']}: {what} ceiling sampled in its {len(rc['samples'])} rounds: median "
                  f"{rc['median']:.1f} {unit} (range {min(rc['samples']):.1f}-{max(rc['samples']):.1f})")
        for engine, ms in r.get("ms" + key, {}).items():
            if engine.startswith("ORT ") and "qkv" in r["ms" + key]:
                print(f"  {r['case']}: {engine} (causal as {CAUSAL_EXPRESSIONS[engine[4:]]}): {ms:.2f} ms, "
                      f"{r['gflops' + key][engine]:.1f} GFLOP/s, qkv/{engine.replace(' ', '-')} "
                      f"{ms / r['ms' + key]['qkv']:.2f}x, |diff| {r['max_abs_diff'].get(engine, math.nan):.1e}")
        products = r.get("ms" + key, {}).get("products")
        if products and "qkv" in r["ms" + key]:
            print(f"  {r['case']}: oneDNN's two products alone (Q·Kᵀ to memory, then ·V; no softmax; "
                  f"{'/'.join(r.get('products_impl') or [])}): {products:.2f} ms, "
                  f"{r['gflops' + key]['products']:.1f} GFLOP/s; qkv's whole attention is "
                  f"{products / r['ms' + key]['qkv']:.2f}x their speed")
        if "kv_gb_per_s" + key in r:
            def share(e):
                pct = pct_of_ceilings(r, key, peak, bf16_peak, bandwidth, e)[1]
                return "" if pct is None else f" ({pct:.0f}%)"

            rates = ", ".join(f"{e} {x:.1f} GB/s{share(e)}" for e, x in r["kv_gb_per_s" + key].items())
            print(f"  {r['case']}: K+V read rate {rates} (of {r['kv_bytes'] / 2**20:.0f} MiB per call)")
        pct_bf16 = pct_of_ceilings(r, key, peak, bf16_peak, bandwidth)[2]
        if r["dtype"] == "bf16" and pct_bf16 is not None:
            print(f"  {r['case']}: qkv at {pct_bf16:.1f}% of the measured vdpbf16ps peak "
                  f"({bf16_peak_r:.0f} GFLOP/s)")


def measure_memory(cli, threads):
    """qkv bench at L=65536: the peak RSS beyond the baseline and q, k, v and the output."""
    out = subprocess.run([cli, "bench", "--batch", "1", "--heads", "1", "--seq", "65536", "--dim", "64",
                          "--repeats", "1", "--warmup", "0", "--threads", str(threads), "--json"],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    memory = json.loads(out)
    memory["beyond_io_mib"] = memory["peak_rss_mib"] - memory["baseline_rss_mib"] - memory["io_mib"]
    return memory


# --------------------------------------------------------------------------------------

# The record (scripts/bench/record.py): every round of every engine.

# results' engine names -> the record's
ENGINE_IDS = {"qkv": "qkv", "ORT": "ort", "ORT unidirectional": "ort_unidirectional", "ORT bias": "ort_bias",
              "torch": "torch", "products": "onednn_products"}
CEILING_NAMES = {"fma": ("f32_fma", "GFLOP/s"), "bf16": ("bf16_dpbf16ps", "GFLOP/s"), "mem": ("mem_read", "GB/s")}


def subject_of(r):
    """(id, title, metric, unit, ceiling kind, x) of the record's table that case r belongs to."""
    shape = f"B={r['batch']} H={r['heads']} D={r['dim']}"
    if "kv_bytes" in r:
        return ("decode", f"Decode attention (Lq = 1), K+V read rate, {shape}", "K+V read rate", "GB/s", "mem", "Lk")
    if r["dtype"] == "bf16":
        return ("attention_bf16", f"Attention forward, bf16 inputs, {shape}", "throughput", "GFLOP/s", "bf16", "L")
    if r["causal"]:
        return ("attention_causal", f"Attention forward, f32, causal, {shape}", "throughput", "GFLOP/s", "fma", "L")
    return ("attention", f"Attention forward, f32, {shape}", "throughput", "GFLOP/s", "fma", "L")


def to_record(rec, results, measured_ceilings, back_to_back):
    """Adds the cases to rec: per round, the back-to-back median (the rate inside a model)
    where --back-to-back > 0, else the first run after idle; the runs after idle go to each
    case's info. GFLOP/s (GB/s of K+V for decode) per round."""
    for kind, (name, unit) in CEILING_NAMES.items():
        key, field = ceilings.KINDS[kind][1:]
        start = (measured_ceilings.get(key) or {}).get(field)
        if start:
            record.add_ceiling(rec, name, unit, [start])
    subjects = {}
    key = "ms_all_warm" if back_to_back else "ms_all"
    for r in results:
        if key not in r:
            continue
        sid, title, metric, unit, kind, axis = subject_of(r)
        if sid not in subjects:
            subjects[sid] = record.add_subject(rec, sid, title, metric, unit, "higher", CEILING_NAMES[kind][0], axis)
        work = r.get("kv_bytes", r["flops"])

        def rates(ms_list):
            return [None if t is None else work / (t * 1e6) for t in ms_list]

        samples = r.get("round_samples", {}).get("samples")
        if samples:
            record.add_ceiling(rec, CEILING_NAMES[kind][0], CEILING_NAMES[kind][1], samples)
        x = None if r["case"].endswith(("softcap 50",)) or "softcap" in r["case"] else r["seq_k"]
        info = {"shape": {k: r[k] for k in ("batch", "heads", "seq_q", "seq_k", "dim")}, "causal": r["causal"],
                "dtype": r["dtype"], "work": work,
                "max_abs_diff": {ENGINE_IDS.get(e, e): d for e, d in r.get("max_abs_diff", {}).items()}}
        if back_to_back:
            info["after_idle"] = {ENGINE_IDS.get(e, e): rates(ts) for e, ts in r["ms_all"].items()}
        if r.get("products_impl"):
            info["products_impl"] = r["products_impl"]
        if r.get("mismatch"):
            info["mismatch"] = [ENGINE_IDS.get(e, e) for e in r["mismatch"]]
        record.add_case(subjects[sid], r["case"], {ENGINE_IDS.get(e, e): rates(ts) for e, ts in r[key].items()},
                        x=x, ceiling_samples=samples, info=info)


def add_arguments(parser):
    parser.add_argument("--threads", type=int, default=2, help="threads for every engine (default 2)")
    parser.add_argument("--repeats", type=int, default=None, help="timed rounds per case (default 7, --quick 5)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up runs per engine (default 2, --quick 1)")
    parser.add_argument("--quick", action="store_true", help="smaller shapes, fewer runs, shorter ceilings")
    add_build_arguments(parser)
    peers.add_arguments(parser)
    parser.add_argument("--ort-causal", choices=("unidirectional", "bias", "both"), default="both",
                        help="how the ORT graph expresses causal: the MHA attribute unidirectional=1, an additive "
                             "attention_bias input, or both (default: the ORT column is unidirectional, the bias "
                             "graph is timed beside it and reported in a note)")
    parser.add_argument("--gap", type=float, default=0.05,
                        help="seconds of idle between two engines' turns (default 0.05: ONNX Runtime's threads spin "
                             "for about 30 ms after a run)")
    parser.add_argument("--back-to-back", type=int, default=3, metavar="N",
                        help="runs each engine makes right after its first run in a turn, timed as 'back to back' "
                             "(default 3; 0: only the runs after idle)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-products", action="store_true",
                        help="leave out oneDNN's two products alone (the matrix-product reference)")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory run")
    parser.add_argument("--only", action="append", metavar="TEXT",
                        help="run only the cases whose name contains TEXT (repeatable), e.g. --only 'L=512'")


def run(args):
    if args.threads < 1:
        sys.exit("bench.py attention: --threads must be >= 1")
    args.repeats = args.repeats or (5 if args.quick else 7)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)
    if args.repeats < 1 or args.warmup < 0 or args.back_to_back < 0 or args.gap < 0:
        sys.exit("bench.py attention: --repeats must be >= 1, and --warmup, --back-to-back and --gap >= 0")
    build_dir = os.path.abspath(args.build_dir)

    peers.ensure_python_peers(args)
    peers.reexec_with_openblas(args)  # does not return when it re-runs the script
    rec = record.new("attention", args.threads, settings={
        "repeats": args.repeats, "warmup": args.warmup, "gap_s": args.gap, "back_to_back": args.back_to_back,
        "seed": args.seed, "quick": args.quick, "only": args.only, "ort_causal": args.ort_causal})
    ort_modules = ort_version = None
    if not args.no_ort:
        ort_modules, ort_version = peers.ensure_ort(args.ort_version)
    programs = ensure_programs(build_dir, {"qkv_cli": "qkv", "_qkv": "python/qkv/_qkv*.so",
                                           "qkv_ceilings": "bench/qkv_ceilings",
                                           "qkv_bench_products": "bench/qkv_bench_products"}, args.rebuild)
    ceilings_bin = programs["qkv_ceilings"]
    products_bin = None if args.no_products else programs["qkv_bench_products"]

    sys.path.insert(0, os.path.join(build_dir, "python"))
    import numpy as np
    import qkv

    qkv.set_num_threads(args.threads)
    torch_info = None if args.no_torch else peers.probe_torch(args.threads)
    ort_info = None if args.no_ort else choose_ort_causal(ort_modules, ort_version, args.ort_causal)

    log("measuring the ceilings (qkv_ceilings)")
    measured_ceilings = ceilings.measure(ceilings_bin, args.threads, args.quick)

    results, all_notes = [], []
    for case in cases(args.quick):
        if args.only and not any(text in case[0] for text in args.only):
            continue
        log(f"case {case[0]}")
        result, notes = run_case(case, args, ort_info, torch_info, ceilings_bin, products_bin)
        results.append(result)
        all_notes += [f"{case[0]}: {n}" for n in notes]

    memory = None
    if not args.no_memory:
        log("peak memory: qkv bench --seq 65536")
        memory = measure_memory(programs["qkv_cli"], args.threads)

    machine = {
        "cpu": qkv.cpu_summary(), "threads": args.threads, "qkv": qkv.__version__, "qkv_git": report.git_describe(),
        "torch": torch_info["version"] if torch_info else None,
        "torch_blas": torch_info["blas"] if torch_info else None,
        "torch_causal": ("is_causal=True" if torch_info["is_causal_ok"] else "bool tril mask") if torch_info else None,
        "onnxruntime_node": ort_version, "node": report.node_version(), "numpy": np.__version__,
        "ort_causal": CAUSAL_EXPRESSIONS[ort_info["causal_mode"]] if ort_info else None,
        "python": platform.python_version(),
    }
    print(report.versions_line(machine, report.where(machine["qkv_git"], build_dir)))
    print(f"cpu: {machine['cpu']}")
    print(f"ceilings ({args.threads} threads, best of {measured_ceilings['repeats']}): "
          f"{ceilings.describe(measured_ceilings)}")
    print(f"ORT causal: {machine['ort_causal']}; torch causal: {machine['torch_causal']}; "
          f"medians of {args.repeats} interleaved rounds after {args.warmup} warm-up; "
          f"ratios = peer time / qkv time")
    print()
    print(f"first run after {args.gap * 1e3:.0f} ms idle (worker threads asleep):")
    print_table(results, measured_ceilings)
    if args.back_to_back:
        print()
        print(f"back to back (median of the {args.back_to_back} runs right after it, in the same turn):")
        print_table(results, measured_ceilings, "_warm")
    for note in all_notes:
        print(f"  note: {note}")
    if memory:
        verdict = "within" if memory["beyond_io_mib"] <= MEMORY_TARGET_MIB else "OVER"
        print()
        print(f"memory (qkv bench B=1 H=1 L=65536 D=64 f32, {memory['threads']} threads): peak RSS "
              f"{memory['peak_rss_mib']:.1f} MiB - baseline {memory['baseline_rss_mib']:.1f} MiB - q,k,v,out "
              f"{memory['io_mib']:.1f} MiB = {memory['beyond_io_mib']:.1f} MiB beyond inputs and output "
              f"({verdict} the {MEMORY_TARGET_MIB:.0f} MiB target); that run: {memory['ms']:.0f} ms, "
              f"{memory['gflops']:.1f} GFLOP/s")

    rec["versions"].update({"qkv": machine["qkv"], "qkv_cpu": machine["cpu"], "torch": machine["torch"],
                            "torch_blas": machine["torch_blas"], "onnxruntime_node": ort_version,
                            "node": machine["node"], "numpy": machine["numpy"]})
    to_record(rec, results, measured_ceilings, args.back_to_back)
    if memory:
        s = record.add_subject(rec, "memory", "Peak memory beyond inputs and output, qkv bench B=1 H=1 L=65536 D=64 f32",
                               "memory beyond inputs and output", "MiB", "lower")
        record.add_case(s, "L=65536", {"qkv": [memory["beyond_io_mib"]]},
                        info={"target_mib": MEMORY_TARGET_MIB, "peak_rss_mib": memory["peak_rss_mib"],
                              "baseline_rss_mib": memory["baseline_rss_mib"], "io_mib": memory["io_mib"]})
    rounds_what = (f"the median of the {args.back_to_back} runs right after an engine's first run in its turn "
                   f"(back to back, as inside a model); the first run after {args.gap * 1e3:.0f} ms idle is in each "
                   "case's info.after_idle") if args.back_to_back else f"the first run after {args.gap * 1e3:.0f} ms idle"
    rec["notes"] += [f"Each round's value is {rounds_what}; {args.repeats} interleaved rounds after {args.warmup} "
                     "warm-up runs; every engine's time includes allocating its output.",
                     f"torch: {machine['torch_causal'] or 'not run'} for causal, on {machine['torch_blas']}; "
                     f"ORT: com.microsoft MultiHeadAttention, causal as {machine['ort_causal']}.",
                     "onednn_products: oneDNN's two batched products alone (Q·Kᵀ to memory, then ·V; no softmax), "
                     "a lower bound for an unfused attention on a tuned matrix library."] + all_notes
    args.failed = any(r.get("mismatch") for r in results)
    return rec
