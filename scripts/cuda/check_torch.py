#!/usr/bin/env python3
"""qkv's CUDA forward against PyTorch on a GPU: correctness, then speed side by side.

  python3 scripts/cuda/check_torch.py [--lib PATH] [--quick] [--skip-speed] [--json FILE]

(a) Correctness: qkv.cuda.attention against torch.nn.functional.scaled_dot_product_attention
    in float32 (the options SDPA has: causal top-left, GQA through repeat_interleave), and
    against float64 math written out here for what SDPA lacks (bottom-right causal, window,
    ALiBi, softcap, key lengths, lse). One line per case: the relative L2 error of qkv and,
    where SDPA can run the case in the same dtype, SDPA's own error for scale.
(b) Speed: qkv vs SDPA's flash and cuDNN backends (torch.nn.attention.sdpa_kernel), bf16,
    median of CUDA-event timings over rotating input sets; TFLOP/s as tools/qkv/bench.cpp
    counts them (4·B·H·Lq·Lk·D, halved when causal with Lq == Lk). qkv in several forms
    (QKV_VARIANTS): its default ("qkv": the wgmma kernel where it applies), the wgmma
    kernel's other CTA shapes (QKV_CUDA_SM90_TILE) and the mma.sync kernel
    (QKV_CUDA_KERNEL=mma), with the largest relative L2 difference of their outputs from the
    mma.sync kernel's ("agree", bf16 rounding: ~1e-3).
Exit status 1 when a correctness case fails. Runs on the CPU too (torch without CUDA): then
only the float64 reference is checked against SDPA's math, which tests this script.
"""
import argparse
import importlib.util
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_qkv_cuda(lib):
    if lib:
        os.environ["QKV_CUDA_LIBRARY"] = os.path.abspath(lib)
    spec = importlib.util.spec_from_file_location("qkv_cuda", os.path.join(ROOT, "python", "qkv", "cuda.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference(q, k, v, *, scale=None, causal=False, bottom_right=False, window=None, alibi=None,
              softcap=None, key_lengths=None):
    """float64 attention with qkv's semantics (include/qkv/attention.h): (out, lse)."""
    q, k, v = (t.double() for t in (q, k, v))
    B, Hq, Lq, D = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    if Hq != Hkv:
        k = k.repeat_interleave(Hq // Hkv, dim=1)
        v = v.repeat_interleave(Hq // Hkv, dim=1)
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    s = torch.einsum("bhid,bhjd->bhij", q, k) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    lengths = torch.tensor(key_lengths if key_lengths is not None else [Lk] * B, dtype=torch.float64,
                           device=q.device)
    i = torch.arange(Lq, device=q.device, dtype=torch.float64).view(1, 1, Lq, 1)
    j = torch.arange(Lk, device=q.device, dtype=torch.float64).view(1, 1, 1, Lk)
    diag = i + (lengths.view(B, 1, 1, 1) - Lq if bottom_right else 0)  # i'
    if alibi is not None:
        slopes = torch.tensor(alibi, dtype=torch.float64, device=q.device).view(1, Hq, 1, 1)
        s = s - slopes * (diag - j).abs()
    allowed = j < lengths.view(B, 1, 1, 1)
    if causal:
        allowed = allowed & (j <= diag)
    if window is not None:
        left, right = window
        if left is not None and left >= 0:
            allowed = allowed & (j >= diag - left)
        if right is not None and right >= 0:
            allowed = allowed & (j <= diag + right)
    allowed = allowed.expand(B, Hq, Lq, Lk)
    s = s.masked_fill(~allowed, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.unsqueeze(-1)).nan_to_num(0.0)  # fully masked rows: 0
    return p @ v, lse


def rel(a, b):
    a, b = a.double(), b.double()
    n = b.norm().item()
    return (a - b).norm().item() / (n if n > 0 else 1.0)


class Checker:
    def __init__(self, qc, device):
        self.qc, self.device, self.failures, self.count = qc, device, [], 0

    def case(self, name, dtype, B, Hq, Hkv, Lq, Lk, D, tol=None, sdpa=False, **opts):
        self.count += 1
        g = torch.Generator(device="cpu").manual_seed(self.count)
        mk = lambda *shape: torch.randn(*shape, generator=g).to(self.device, dtype)
        q, k, v = mk(B, Hq, Lq, D), mk(B, Hkv, Lk, D), mk(B, Hkv, Lk, D)
        splits = opts.pop("splits", 0)  # how qkv computes, not what: the reference ignores it
        want, want_lse = reference(q, k, v, **opts)
        tol = tol or (1e-2 if dtype == torch.bfloat16 else 4e-3)
        line = f"{name:<52}"
        try:
            out, lse = self.qc.attention(
                q, k, v, scale=opts.get("scale"), is_causal=opts.get("causal", False),
                causal_alignment="bottom_right" if opts.get("bottom_right") else "top_left",
                window=opts.get("window"), key_lengths=opts.get("key_lengths"),
                alibi_slopes=opts.get("alibi"), softcap=opts.get("softcap"), return_lse=True,
                splits=splits)
            torch.cuda.synchronize()
            err = rel(out, want)
            finite = torch.isfinite(want_lse)
            lse_err = (lse.double()[finite] - want_lse[finite]).abs().max().item() if finite.any() else 0.0
            lse_inf_ok = bool(torch.all(torch.isneginf(lse[~finite]))) if (~finite).any() else True
            nan = int(torch.isnan(out).sum())
            ok = err < tol and lse_err < 5e-3 and lse_inf_ok and nan == 0
            line += f" rel={err:.2e} lse={lse_err:.1e}" + ("" if lse_inf_ok else " lse-inf-WRONG") + (f" nan={nan}" if nan else "")
        except Exception as e:  # noqa: BLE001 — reported per case
            ok = False
            line += f" ERROR {type(e).__name__}: {e}"
        if sdpa and not opts.get("window") and not opts.get("bottom_right"):
            try:
                kk, vv = (k.repeat_interleave(Hq // Hkv, 1), v.repeat_interleave(Hq // Hkv, 1)) if Hq != Hkv else (k, v)
                ts = F.scaled_dot_product_attention(q, kk, vv, is_causal=opts.get("causal", False), scale=opts.get("scale"))
                line += f"  (torch {rel(ts, want):.2e})"
            except Exception as e:  # noqa: BLE001
                line += f"  (torch n/a: {type(e).__name__})"
        print(("ok   " if ok else "FAIL ") + line, flush=True)
        if not ok:
            self.failures.append(line)


def correctness(qc, device, quick):
    c = Checker(qc, device)
    lengths = [(1, 1), (7, 129), (63, 65), (65, 63), (127, 127), (129, 257), (1000, 1000)]
    if quick:
        lengths = [(7, 129), (129, 257)]
    for dtype in (torch.bfloat16, torch.float16):
        dn = "bf16" if dtype == torch.bfloat16 else "f16"
        for D in (64, 128, 256):
            for causal in (False, True):
                for group in (1, 4):
                    for Lq, Lk in lengths:
                        # splits=1: no key split, which sends D <= 128 with Lq > 64 to the
                        # wgmma kernel; automatic splits keep these small grids on mma.sync.
                        for splits in (0, 1):
                            c.case(f"{dn} D={D} {'causal' if causal else 'full  '} g={group} Lq={Lq} Lk={Lk}"
                                   f"{' splits=1' if splits else ''}",
                                   dtype, 2, 2 * group, 2, Lq, Lk, D, sdpa=True, causal=causal, splits=splits)
    for D in (64, 128, 256):
        for dtype in (torch.bfloat16, torch.float16):
            dn = "bf16" if dtype == torch.bfloat16 else "f16"
            for splits in (0, 1):
                sp = " splits=1" if splits else ""
                c.case(f"{dn} D={D} causal bottom_right Lq=100 Lk=300{sp}", dtype, 2, 4, 2, 100, 300, D, causal=True,
                       bottom_right=True, splits=splits)
                c.case(f"{dn} D={D} window(64,0) L=500{sp}", dtype, 1, 4, 4, 500, 500, D, window=(64, 0), splits=splits)
                c.case(f"{dn} D={D} window(30,10) br Lq=77 Lk=600{sp}", dtype, 1, 4, 1, 77, 600, D, window=(30, 10),
                       bottom_right=True, splits=splits)
                c.case(f"{dn} D={D} alibi causal L=300{sp}", dtype, 1, 4, 2, 300, 300, D, causal=True,
                       alibi=[0.5, 0.25, 0.125, 0.0625], splits=splits)
                c.case(f"{dn} D={D} softcap=10 scale=0.2 L=257{sp}", dtype, 2, 4, 4, 257, 257, D, softcap=10.0, scale=0.2,
                       splits=splits)
                c.case(f"{dn} D={D} key_lengths(0,5,300,129) causal br Lq=200{sp}", dtype, 4, 4, 2, 200, 300, D,
                       key_lengths=[0, 5, 300, 129], causal=True, bottom_right=True, splits=splits)
            for splits in (0, 1, 7, 32):
                c.case(f"{dn} D={D} decode Lq=1 Lk=8192 g=4 splits={splits}", dtype, 2, 8, 2, 1, 8192, D,
                       causal=True, bottom_right=True, splits=splits, key_lengths=[8192, 5000])
    # Strided input: (B, L, H, D) projections permuted, as models pass them.
    g = torch.Generator(device="cpu").manual_seed(99)
    base = torch.randn(2, 300, 8, 3, 128, generator=g).to(device, torch.bfloat16)
    q, k, v = (base[:, :, :, n].transpose(1, 2) for n in range(3))
    want, _ = reference(q, k, v, causal=True)
    got = qc.attention(q, k, v, is_causal=True)
    err = rel(got, want)
    ok = err < 1e-2
    print(("ok   " if ok else "FAIL ") + f"{'bf16 D=128 strided (B,L,H,3,D) views':<52} rel={err:.2e}")
    if not ok:
        c.failures.append("strided")
    c.count += 1
    return c


def cuda_time(fn, input_sets, warmup=3, repeats=12):
    """Median ms of fn(*inputs) over CUDA events, rotating through input_sets (so no run
    finds the previous run's data in L2)."""
    for n in range(warmup):
        fn(*input_sets[n % len(input_sets)])
    times = []
    for n in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*input_sets[n % len(input_sets)])
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


# qkv's forward timed in several forms per case, chosen through environment variables that
# libqkv_cuda.so reads at every call (src/attention/cuda/forward.cu, use_sm90 and wide_block;
# forward_sm90.cu, launch_forward_sm90): the default, the wgmma kernel's other CTA shapes
# (warpgroups x keys per tile) and the mma.sync kernel.
QKV_VARIANTS = (("qkv", {}), ("2x128", {"QKV_CUDA_SM90_TILE": "2x128"}), ("2x64", {"QKV_CUDA_SM90_TILE": "2x64"}),
                ("1x128", {"QKV_CUDA_SM90_TILE": "1x128"}), ("1x64", {"QKV_CUDA_SM90_TILE": "1x64"}),
                ("mma", {"QKV_CUDA_KERNEL": "mma"}))


class Env:
    """The environment variables of `values` set inside the with-block, restored after."""

    def __init__(self, values):
        self.values = values

    def __enter__(self):
        self.saved = {name: os.environ.get(name) for name in self.values}
        for name, value in self.values.items():
            os.environ[name] = value

    def __exit__(self, *exc):
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def speed(qc, results):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]
    names = [n for n, _ in QKV_VARIANTS] + [n for n, _ in backends]
    rows = []
    header = f"{'case':<40}" + "".join(f"{n + ' ms':>10}{'TFLOP/s':>9}" for n in names)
    header += "".join(f"{n + '/flash':>12}" for n, _ in QKV_VARIANTS) + f"{'agree':>11}"
    print("\n" + header, flush=True)
    configs = []
    for D in (64, 128, 256):
        for L in (1024, 4096, 8192):
            for causal in (False, True):
                configs.append((16384 // L, 2048 // D, 2048 // D, L, L, D, causal))
    configs.append((8, 32, 32, 1, 8192, 128, False))  # decode, MHA
    configs.append((8, 32, 8, 1, 8192, 128, False))   # decode, GQA (SDPA through repeat_interleave)
    for B, Hq, Hkv, Lq, Lk, D, causal in configs:
        name = f"B={B} H={Hq}/{Hkv} Lq={Lq} Lk={Lk} D={D}{' causal' if causal else ''}"
        flops = 4.0 * B * Hq * Lq * Lk * D * (0.5 if causal and Lq == Lk else 1.0)
        sets = []
        for n in range(3):
            mk = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16)
            sets.append((mk(B, Hq, Lq, D), mk(B, Hkv, Lk, D), mk(B, Hkv, Lk, D)))
        cells, outs = {}, {}
        for vname, env in QKV_VARIANTS:
            with Env(env):
                try:
                    cells[vname] = cuda_time(lambda q, k, v: qc.attention(q, k, v, is_causal=causal), sets)
                    outs[vname] = qc.attention(*sets[0], is_causal=causal)
                except Exception as e:  # noqa: BLE001
                    cells[vname] = f"err {e}"[:60]
        # Every form computes the same thing: their outputs must agree to bf16 rounding.
        agree = (max(rel(outs[n], outs["mma"]) for n in outs) if len(outs) == len(QKV_VARIANTS)
                 else float("nan"))
        del outs
        if Hq != Hkv:
            sets = [(q, k.repeat_interleave(Hq // Hkv, 1), v.repeat_interleave(Hq // Hkv, 1)) for q, k, v in sets]
        for bname, backend in backends:
            try:
                with sdpa_kernel([backend]):
                    cells[bname] = cuda_time(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal), sets)
            except Exception as e:  # noqa: BLE001
                cells[bname] = f"n/a {type(e).__name__}"
        def fmt(x):
            if isinstance(x, str):
                return f"{x[:18]:>19}"
            return f"{x:>10.3f}{flops / (x * 1e9):>9.1f}" if Lq > 1 else f"{x:>10.3f}{'(' + format(2 * B * Hkv * Lk * D * 2 / (x * 1e6), '.0f') + 'GB/s)':>9}"
        def ratio(n):
            ok = all(isinstance(cells[c], float) for c in (n, "flash"))
            return f"{cells['flash'] / cells[n] if ok else float('nan'):>11.2f}x"
        line = f"{name:<40}" + "".join(fmt(cells[n]) for n in names)
        line += "".join(ratio(n) for n, _ in QKV_VARIANTS) + f"{agree:>11.1e}"
        if not agree < 1e-2:
            line += "  MISMATCH"
        print(line, flush=True)
        rows.append(line)
        results.append({"case": name, "flops": flops, "max_rel_to_mma": agree, **{k: v for k, v in cells.items()}})
        del sets
        torch.cuda.empty_cache()
    return header, rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", help="libqkv_cuda.so (default: python/qkv/cuda.py's search)")
    ap.add_argument("--quick", action="store_true", help="fewer correctness cases")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--json", help="write the speed results here")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, device "
          f"{torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'}", flush=True)
    if not torch.cuda.is_available():
        # CPU self-test of this script's float64 reference against SDPA's math.
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(2, 4, 37, 64, generator=g) for _ in range(3))
        for causal in (False, True):
            if hasattr(F, "scaled_dot_product_attention"):
                want = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            else:  # torch 1.x: the same, spelled out
                s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
                if causal:
                    s = s.masked_fill(~torch.ones(37, 37, dtype=torch.bool).tril(), -math.inf)
                want = torch.softmax(s, -1) @ v
            got, _ = reference(q, k, v, causal=causal)
            print(f"cpu self-test causal={causal}: reference vs SDPA rel={rel(got, want):.2e}")
            assert rel(got, want) < 1e-5
        got, lse = reference(q, k, v, key_lengths=[0, 37])
        assert torch.all(got[0] == 0) and torch.all(torch.isneginf(lse[0]))
        print("no CUDA device: correctness and speed skipped")
        return 0
    qc = load_qkv_cuda(args.lib)
    ok, why = qc.available()
    print(f"qkv.cuda library {qc.library_path()}: available={ok} {why}", flush=True)
    if not ok:
        return 1
    t0 = time.time()
    checker = correctness(qc, "cuda", args.quick)
    print(f"\ncorrectness: {checker.count - len(checker.failures)}/{checker.count} passed "
          f"({time.time() - t0:.0f} s)", flush=True)
    for f in checker.failures:
        print("  FAILED " + f)
    results = []
    if not args.skip_speed:
        header, rows = speed(qc, results)
        print("\n== speed (bf16, median of CUDA events) ==\n" + header + "\n" + "\n".join(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"failures": checker.failures, "speed": results}, f, indent=1)
    return 1 if checker.failures else 0


if __name__ == "__main__":
    sys.exit(main())
