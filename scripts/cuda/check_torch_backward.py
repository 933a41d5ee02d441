#!/usr/bin/env python3
"""qkv's CUDA attention backward against PyTorch autograd, on the device machine.

The reference is float64 autograd through the attention formula of include/qkv/attention.h
(scores, softcap, ALiBi, causal/window/key-length masks, softmax, P·V), with GQA as
repeat_interleave; qkv's backward runs through libqkv_cuda.so's C ABI
(qkv.cuda.attention_backward, python/qkv/cuda.py) on CUDA torch tensors, with
q, k, v and dout given as (B, L, H, D) projections permuted to (B, H, L, D), so the device
form's strides are exercised. For the cases SDPA can express, bf16/f16 SDPA autograd's
own error against the same float64 reference is printed beside qkv's, as a yardstick.

Usage: python3 scripts/cuda/check_torch_backward.py [--lib build/libqkv_cuda.so]
           [--qkv-forward]   (out and lse from qkv's forward instead of the reference)
Exits 1 when a case exceeds its tolerance.
"""
import argparse
import math
import sys

import torch

from check_torch import load_qkv_cuda  # qkv/cuda.py alone, as on the GPU machine


# ---------------------------------------------------------------------------------------
# The float64 reference.

def reference(q, k, v, dout, c, slopes, lengths):
    """Returns out (float64), lse (float64, −inf for fully masked rows), dq, dk, dv."""
    B, Hq, Lq, D = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    group = Hq // Hkv
    kr, vr = kd.repeat_interleave(group, dim=1), vd.repeat_interleave(group, dim=1)
    s = c["scale"] * qd @ kr.transpose(-1, -2)  # (B, Hq, Lq, Lk)
    if c["softcap"] > 0:
        s = c["softcap"] * torch.tanh(s / c["softcap"])
    dev = q.device
    lkb = (lengths.long() if lengths is not None else torch.full((B,), Lk, device=dev)).view(B, 1, 1, 1)
    i = torch.arange(Lq, device=dev).view(1, 1, Lq, 1)
    j = torch.arange(Lk, device=dev).view(1, 1, 1, Lk)
    ip = i + (lkb - Lq if c["bottom_right"] else 0)  # the diagonal i'
    if slopes is not None:
        s = s - slopes.double().view(1, Hq, 1, 1) * (ip - j).abs()
    allowed = j < lkb
    if c["causal"]:
        allowed = allowed & (j <= ip)
    left, right = c["window"]
    if left >= 0:
        allowed = allowed & (j >= ip - left)
    if right >= 0:
        allowed = allowed & (j <= ip + right)
    allowed = allowed.expand(B, Hq, Lq, Lk)
    empty = ~allowed.any(-1, keepdim=True)  # fully masked rows: out 0, lse −inf, no gradient
    s = s.masked_fill(~allowed, -math.inf).masked_fill(empty, 0.0)
    p = torch.softmax(s, -1) * (~empty)
    out = p @ vr
    out.backward(dout.double())
    lse = torch.logsumexp(s.detach(), -1).masked_fill(empty.squeeze(-1), -math.inf)
    return out.detach(), lse, qd.grad, kd.grad, vd.grad


def rel_l2(a, b):
    """‖a − b‖ / ‖b‖, with ‖b‖ floored at an RMS of 1e-2: where the exact gradient is 0 (one
    key per row: the softmax is constant, dq = dk = 0), a is held to an RMS of 1e-2·tol."""
    num = (a.double() - b).norm().item()
    den = max(b.norm().item(), 1e-2 * math.sqrt(b.numel()))
    return num / den


def sdpa_error(q, k, v, dout, c, want):
    """bf16/f16 SDPA autograd's error against the reference, where SDPA expresses the case."""
    if c["softcap"] or c["alibi"] or c["key_lengths"] or c["window"] != (-1, -1) or c["bottom_right"]:
        return None
    qs, ks, vs = (t.detach().clone().requires_grad_() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    out = torch.nn.functional.scaled_dot_product_attention(
        qs, ks.repeat_interleave(group, 1), vs.repeat_interleave(group, 1),
        is_causal=c["causal"], scale=c["scale"])
    out.backward(dout)
    return max(rel_l2(qs.grad, want[0]), rel_l2(ks.grad, want[1]), rel_l2(vs.grad, want[2]))


# ---------------------------------------------------------------------------------------

def projection(B, L, H, D, dtype, scale=1.0):
    """A (B, H, L, D) view of a (B, L, H, D) tensor: strides as after a linear projection."""
    return (torch.randn(B, L, H, D, device="cuda") * scale).to(dtype).transpose(1, 2)


def check_backward(qc, use_qkv_forward=False):
    """Runs the case matrix through qkv.cuda (qc); returns the number of failures."""
    cases = []
    for dtype in (torch.bfloat16, torch.float16):
        for D in (64, 128, 256):
            for causal, br in ((False, False), (True, False), (True, True)):
                for group in (1, 2):
                    for Lq, Lk in ((1, 1), (63, 129), (129, 65), (256, 256)):
                        cases.append(dict(dtype=dtype, D=D, causal=causal, bottom_right=br, group=group,
                                          Lq=Lq, Lk=Lk, window=(-1, -1), alibi=False, softcap=0.0,
                                          key_lengths=False, qscale=1.0))
        for D in (64, 128, 256):
            base = dict(dtype=dtype, D=D, causal=False, bottom_right=True, group=2, Lq=129, Lk=200,
                        window=(-1, -1), alibi=False, softcap=0.0, key_lengths=False, qscale=1.0)
            cases.append({**base, "window": (17, 5)})
            cases.append({**base, "alibi": True, "causal": True})
            cases.append({**base, "softcap": 2.0, "qscale": 3.0})
            cases.append({**base, "key_lengths": True, "causal": True})
            cases.append({**base, "window": (50, -1), "causal": True, "alibi": True, "softcap": 5.0,
                          "key_lengths": True, "qscale": 2.0})
    failures = 0
    B, Hkv = 3, 2
    for c in cases:
        torch.manual_seed(len(cases) + failures + hash(str(c)) % 1000)
        dtype, D, Hq = c["dtype"], c["D"], Hkv * c["group"]
        c["scale"] = 1.0 / math.sqrt(D)
        q = projection(B, c["Lq"], Hq, D, dtype, c["qscale"])
        k = projection(B, c["Lk"], Hkv, D, dtype)
        v = projection(B, c["Lk"], Hkv, D, dtype)
        dout = projection(B, c["Lq"], Hq, D, dtype)
        slopes = (torch.rand(Hq, device="cuda") * 0.5) if c["alibi"] else None
        lengths = (torch.tensor([0, c["Lk"] // 3, c["Lk"]], dtype=torch.int32, device="cuda")
                   if c["key_lengths"] else None)
        ref_out, ref_lse, *want = reference(q, k, v, dout, c, slopes, lengths)

        options = dict(scale=c["scale"], is_causal=c["causal"],
                       causal_alignment="bottom_right" if c["bottom_right"] else "top_left",
                       window=c["window"], key_lengths=lengths, alibi_slopes=slopes,
                       softcap=c["softcap"] or None)
        if use_qkv_forward:
            out, lse = qc.attention(q, k, v, return_lse=True, **options)
        else:
            out = ref_out.to(dtype)
            lse = ref_lse.float().contiguous()
        dq = torch.full((B, Hq, c["Lq"], D), math.nan, device="cuda")  # poisoned: every
        dk = torch.full((B, Hkv, c["Lk"], D), math.nan, device="cuda")  # element must be written
        dv = torch.full((B, Hkv, c["Lk"], D), math.nan, device="cuda")
        qc.attention_backward(dout, q, k, v, out, lse, dq=dq, dk=dk, dv=dv, **options)
        torch.cuda.synchronize()

        errors = [rel_l2(dq, want[0]), rel_l2(dk, want[1]), rel_l2(dv, want[2])]
        tol = 2e-2 if dtype == torch.bfloat16 else 5e-3
        ok = all(e < tol for e in errors)  # NaN compares false
        failures += not ok
        yard = sdpa_error(q, k, v, dout, c, want)
        name = (f"{str(dtype)[6:]:8} D={D:3} causal={int(c['causal'])} br={int(c['bottom_right'])} "
                f"g={c['group']} Lq={c['Lq']:3} Lk={c['Lk']:3} win={c['window']} alibi={int(c['alibi'])} "
                f"cap={c['softcap']} kl={int(c['key_lengths'])}")
        print(f"{'ok  ' if ok else 'FAIL'} {name}  dq {errors[0]:.2e} dk {errors[1]:.2e} dv {errors[2]:.2e}"
              + (f"  (sdpa {yard:.2e})" if yard is not None else ""))
    print(f"{len(cases) - failures}/{len(cases)} backward cases within tolerance")
    return failures


def speed(qc):
    """The backward alone, bf16, beside SDPA's flash and cuDNN backends' backward (autograd
    with the graph kept). FLOPs: the five products of the backward, 2.5 times the forward's
    4·B·H·L²·D (halved when causal)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from check_torch import cuda_time

    print(f"\n== backward speed (bf16, median of CUDA events) ==\n{'case':<34}{'qkv ms':>9}{'TFLOP/s':>9}"
          f"{'flash ms':>10}{'TFLOP/s':>9}{'cudnn ms':>10}{'TFLOP/s':>9}{'qkv/flash':>10}")
    for B, H, L, D, causal in ((4, 16, 4096, 128, False), (4, 16, 4096, 128, True), (8, 32, 2048, 64, False)):
        flops = 2.5 * 4.0 * B * H * L * L * D * (0.5 if causal else 1.0)
        mk = lambda: torch.randn(B, H, L, D, device="cuda", dtype=torch.bfloat16)  # noqa: E731
        sets = [(mk(), mk(), mk(), mk()) for _ in range(2)]
        cells = {}
        try:
            prepared = [(dout, q, k, v, *qc.attention(q, k, v, is_causal=causal, return_lse=True))
                        for q, k, v, dout in sets]
            cells["qkv"] = cuda_time(lambda dout, q, k, v, out, lse: qc.attention_backward(
                dout, q, k, v, out, lse, is_causal=causal), prepared)
        except Exception as e:  # noqa: BLE001 — reported in the table
            cells["qkv"] = f"err {e}"[:30]
        for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel([backend]):
                    graphs = []
                    for q, k, v, dout in sets:
                        qs, ks, vs = (t.clone().requires_grad_() for t in (q, k, v))
                        graphs.append((torch.nn.functional.scaled_dot_product_attention(
                            qs, ks, vs, is_causal=causal), dout))
                    cells[name] = cuda_time(lambda out, dout: out.backward(dout, retain_graph=True), graphs)
            except Exception as e:  # noqa: BLE001
                cells[name] = f"n/a {type(e).__name__}"
        fmt = lambda x: f"{x[:18]:>18}" if isinstance(x, str) else f"{x:>9.3f}{flops / (x * 1e9):>9.1f}"  # noqa: E731
        ratio = (cells["flash"] / cells["qkv"] if all(isinstance(cells[n], float) for n in ("qkv", "flash"))
                 else float("nan"))
        print(f"{f'B={B} H={H} L={L} D={D}' + (' causal' if causal else ''):<34}{fmt(cells['qkv'])} "
              f"{fmt(cells['flash'])} {fmt(cells['cudnn'])}{ratio:>9.2f}x", flush=True)
        del sets
        torch.cuda.empty_cache()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", default=None)
    parser.add_argument("--qkv-forward", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    a = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no CUDA device for torch")
    qc = load_qkv_cuda(a.lib)
    failures = check_backward(qc, a.qkv_forward)
    if not a.skip_speed:
        speed(qc)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
