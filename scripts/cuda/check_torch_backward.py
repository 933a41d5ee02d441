#!/usr/bin/env python3
"""qkv's CUDA attention backward against PyTorch autograd, on the device machine.

The reference is float64 autograd through the attention formula of include/qkv/attention.h
(scores, softcap, ALiBi, causal/window/key-length masks, softmax, P·V), with GQA as
repeat_interleave; qkv's backward runs through libqkv_cuda.so's C ABI
(src/attention/cuda/capi.h, qkv_cuda_attention_backward) on CUDA torch tensors, with
q, k, v and dout given as (B, L, H, D) projections permuted to (B, H, L, D), so the device
form's strides are exercised. For the cases SDPA can express, bf16/f16 SDPA autograd's
own error against the same float64 reference is printed beside qkv's, as a yardstick.

Usage: python3 scripts/cuda/check_torch_backward.py [--lib build/libqkv_cuda.so]
           [--qkv-forward]   (out and lse from qkv's forward instead of the reference)
Exits 1 when a case exceeds its tolerance, 2 when the library has no backward entry.
"""
import argparse
import ctypes
import math
import os
import sys

import torch


# ---------------------------------------------------------------------------------------
# The C ABI (capi.h), field by field.

class ForwardArgs(ctypes.Structure):
    _fields_ = [
        ("dtype", ctypes.c_int64),
        ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
        ("out", ctypes.c_void_p), ("lse", ctypes.c_void_p),
        ("q_strides", ctypes.c_int64 * 3), ("k_strides", ctypes.c_int64 * 3),
        ("v_strides", ctypes.c_int64 * 3), ("out_strides", ctypes.c_int64 * 3),
        ("B", ctypes.c_int64), ("Hq", ctypes.c_int64), ("Hkv", ctypes.c_int64),
        ("Lq", ctypes.c_int64), ("Lk", ctypes.c_int64), ("D", ctypes.c_int64),
        ("scale", ctypes.c_double),
        ("causal", ctypes.c_int64), ("bottom_right", ctypes.c_int64),
        ("window_left", ctypes.c_int64), ("window_right", ctypes.c_int64),
        ("key_lengths", ctypes.c_void_p), ("alibi_slopes", ctypes.c_void_p),
        ("softcap", ctypes.c_double), ("splits", ctypes.c_int64), ("stream", ctypes.c_void_p),
    ]


class BackwardArgs(ctypes.Structure):
    _fields_ = [
        ("forward", ForwardArgs),
        ("dout", ctypes.c_void_p), ("dout_strides", ctypes.c_int64 * 3),
        ("dq", ctypes.c_void_p), ("dk", ctypes.c_void_p), ("dv", ctypes.c_void_p),
    ]


def find_library(path):
    for p in [path, "build/libqkv_cuda.so", "build-cuda/libqkv_cuda.so", "build/release/libqkv_cuda.so"]:
        if p and os.path.exists(p):
            return ctypes.CDLL(os.path.abspath(p))
    sys.exit("libqkv_cuda.so not found (build with -DQKV_CUDA=ON, or pass --lib)")


def strides3(t):
    return (ctypes.c_int64 * 3)(t.stride(0), t.stride(1), t.stride(2))


def fill_forward(args, q, k, v, out, lse, c, slopes, lengths):
    args.dtype = 0 if q.dtype == torch.bfloat16 else 1
    args.q, args.k, args.v, args.out = q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr()
    args.lse = lse.data_ptr()
    args.q_strides, args.k_strides = strides3(q), strides3(k)
    args.v_strides, args.out_strides = strides3(v), strides3(out)
    args.B, args.Hq, args.Lq, args.D = q.shape
    args.Hkv, args.Lk = k.shape[1], k.shape[2]
    args.scale = c["scale"]
    args.causal = int(c["causal"])
    args.bottom_right = int(c["bottom_right"])
    args.window_left, args.window_right = c["window"]
    args.key_lengths = lengths.data_ptr() if lengths is not None else None
    args.alibi_slopes = slopes.data_ptr() if slopes is not None else None
    args.softcap = c["softcap"]
    args.splits = 0
    args.stream = torch.cuda.current_stream().cuda_stream


def call(fn, args):
    error = ctypes.create_string_buffer(1024)
    if fn(ctypes.byref(args), error, ctypes.c_size_t(len(error))) != 0:
        raise RuntimeError(error.value.decode())


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


def check_backward(lib, use_qkv_forward=False):
    """Runs the case matrix; returns the number of failures."""
    if not hasattr(lib, "qkv_cuda_attention_backward"):
        print("libqkv_cuda.so has no qkv_cuda_attention_backward (see the C ABI entry needed)")
        sys.exit(2)
    backward = lib.qkv_cuda_attention_backward
    forward = lib.qkv_cuda_attention_forward
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

        if use_qkv_forward:
            out = torch.empty(B, Hq, c["Lq"], D, dtype=dtype, device="cuda")
            lse = torch.empty(B, Hq, c["Lq"], dtype=torch.float32, device="cuda")
            fa = ForwardArgs()
            fill_forward(fa, q, k, v, out, lse, c, slopes, lengths)
            call(forward, fa)
        else:
            out = ref_out.to(dtype)
            lse = ref_lse.float().contiguous()
        dq = torch.full((B, Hq, c["Lq"], D), math.nan, device="cuda")  # poisoned
        dk = torch.full((B, Hkv, c["Lk"], D), math.nan, device="cuda")
        dv = torch.full((B, Hkv, c["Lk"], D), math.nan, device="cuda")
        args = BackwardArgs()
        fill_forward(args.forward, q, k, v, out, lse, c, slopes, lengths)
        args.dout, args.dout_strides = dout.data_ptr(), strides3(dout)
        args.dq, args.dk, args.dv = dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
        call(backward, args)
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", default=None)
    parser.add_argument("--qkv-forward", action="store_true")
    a = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no CUDA device for torch")
    lib = find_library(a.lib)
    sys.exit(1 if check_backward(lib, a.qkv_forward) else 0)


if __name__ == "__main__":
    main()
