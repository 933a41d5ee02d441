"""The float64 oracle the pytest suite measures qkv against, and the comparison helper.

The oracle is written from the specification (include/qkv/attention.h), not from the C++
code, with whole-tensor torch operations in float64:

    s = scale · q·kᵀ                          (B, Hq, Lq, Lk)
    softcap c:  s = c · tanh(s / c)
    ALiBi:      s −= slope_h · |i' − j|
    float mask: s += mask
    masked (causal j > i', window outside [i' − left, i' + right], j >= key_lengths[b],
            bool mask False) → −inf
    lse = logsumexp_j s;  probs = exp(s − lse);  out = probs · v
    a row whose scores are all −inf: out 0, lse −inf, probs 0

with the diagonal i' = i (top_left) or i' = i + (Lk_b − Lq) (bottom_right), where
Lk_b = key_lengths[b] if given else Lk, and GQA by repeat_interleave of k and v over
heads (query head h reads key/value head h // (Hq // Hkv)).
"""

import math

import numpy as np
import torch


def oracle(q, k, v, mask=None, causal=False, alignment="top_left", key_lengths=None,
           window=None, alibi_slopes=None, softcap=None, scale=None):
    """Reference attention in float64.

    q (B, Hq, Lq, Dk), k (B, Hkv, Lk, Dk), v (B, Hkv, Lk, Dv): float64 torch tensors.
    mask: None, a bool tensor (True = attend) or a float64 tensor (added), broadcastable
    to (B, Hq, Lq, Lk). window: (left, right), None or -1 = unbounded on that side.
    Returns (out (B, Hq, Lq, Dv), lse (B, Hq, Lq), probs (B, Hq, Lq, Lk)), float64.
    """
    B, Hq, Lq, Dk = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    group = Hq // Hkv
    k = k.repeat_interleave(group, dim=1)  # (B, Hq, Lk, Dk)
    v = v.repeat_interleave(group, dim=1)  # (B, Hq, Lk, Dv)
    if scale is None:
        scale = 1.0 / math.sqrt(Dk)

    s = scale * (q @ k.transpose(-1, -2))  # (B, Hq, Lq, Lk)
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)

    lengths = torch.tensor(key_lengths if key_lengths is not None else [Lk] * B,
                           dtype=torch.int64).view(B, 1, 1)  # (B, 1, 1)
    i = torch.arange(Lq).view(1, Lq, 1)  # (1, Lq, 1)
    j = torch.arange(Lk).view(1, 1, Lk)  # (1, 1, Lk)
    if alignment == "bottom_right":
        diag = i + (lengths - Lq)  # (B, Lq, 1)
    else:
        assert alignment == "top_left"
        diag = i.expand(B, Lq, 1)  # (B, Lq, 1)

    if alibi_slopes is not None:
        slopes = torch.as_tensor(np.asarray(alibi_slopes, dtype=np.float64)).view(1, Hq, 1, 1)
        s = s - slopes * (diag - j).abs().unsqueeze(1).to(torch.float64)

    keep = (j < lengths).expand(B, Lq, Lk)  # (B, Lq, Lk)
    if causal:
        keep = keep & (j <= diag)
    if window is not None:
        left, right = (-1 if w is None else w for w in window)
        if left >= 0:
            keep = keep & (j >= diag - left)
        if right >= 0:
            keep = keep & (j <= diag + right)
    keep = keep.unsqueeze(1).expand(B, Hq, Lq, Lk)  # (B, Hq, Lq, Lk)
    if mask is not None:
        if mask.dtype == torch.bool:
            keep = keep & mask
        else:
            s = s + mask.to(torch.float64)
    s = s.masked_fill(~keep, -math.inf)

    lse = torch.logsumexp(s, dim=-1)  # (B, Hq, Lq); −inf for fully masked rows
    dead = torch.isneginf(lse).unsqueeze(-1)  # (B, Hq, Lq, 1)
    probs = torch.where(dead, torch.zeros((), dtype=torch.float64),
                        torch.exp(s - lse.unsqueeze(-1)))
    out = probs @ v  # (B, Hq, Lq, Dv)
    return out, lse, probs


def backward_atols(q, k, v, dout, scale=None, dropout_p=0.0):
    """(atol for dq and dk, atol for dv) of the float32 backward against a float64 oracle.

    Derived: each gradient element is a sum of at most Lq·group or Lk products built from
    length-D f32 dot products, each product bounded by G = |scale|·max‖dO‖·max‖v‖·
    max(|q|, |k|, 1) (dq, dk) or max|dO| (dv), times 1/(1 − dropout_p) for the kept
    probabilities. f32 rounding of the scores, the recomputed probabilities and the sums
    gives at most (Lq·group + Lk + D + 16)·u relative to G, and the forward's own f32 out
    and lse (which the backward reads) add the same again, hence
    atol = 2·(Lq·group + Lk + D + 16)·u·G with u = 2^-24. A softcap's derivative is at
    most 1 and ALiBi and masks add constants, so the bound covers every option.
    """
    u = 2.0 ** -24
    B, Hq, Lq, Dk = q.shape
    Hkv, Lk, Dv = k.shape[1], k.shape[2], v.shape[3]
    scale = 1.0 / math.sqrt(Dk) if scale is None else scale
    keep = 1.0 / (1.0 - dropout_p)
    norm_do = dout.double().norm(dim=-1).max().item()
    norm_v = v.double().norm(dim=-1).max().item()
    big = max(q.abs().max().item(), k.abs().max().item(), 1.0)
    terms = 2 * (Lq * (Hq // Hkv) + Lk + max(Dk, Dv) + 16) * u
    g_qk = keep * abs(scale) * norm_do * norm_v * big
    g_v = keep * dout.abs().max().item()
    return terms * g_qk, terms * g_v


def to_numpy64(x):
    if isinstance(x, torch.Tensor):
        return x.detach().to(torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


def assert_close(got, want, atol, rtol, what=""):
    """|got − want| <= atol + rtol·|want| elementwise; NaN and ±inf must sit at the same
    places in both. A failure names the worst element, its error and the bound."""
    got = to_numpy64(got)
    want = to_numpy64(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != expected {want.shape}"
    nan_got, nan_want = np.isnan(got), np.isnan(want)
    if not np.array_equal(nan_got, nan_want):
        where = tuple(int(x) for x in np.argwhere(nan_got != nan_want)[0])
        raise AssertionError(f"{what}: NaN mismatch at {where}: got {got[where]}, "
                             f"expected {want[where]} ({int((nan_got != nan_want).sum())} "
                             f"elements differ in NaN-ness)")
    inf_got, inf_want = np.isinf(got), np.isinf(want)
    inf_bad = (inf_got != inf_want) | (inf_want & (got != want))
    if inf_bad.any():
        where = tuple(int(x) for x in np.argwhere(inf_bad)[0])
        raise AssertionError(f"{what}: infinity mismatch at {where}: got {got[where]}, "
                             f"expected {want[where]} ({int(inf_bad.sum())} elements)")
    finite = np.isfinite(want)
    err = np.abs(np.where(finite, got, 0.0) - np.where(finite, want, 0.0))
    bound = atol + rtol * np.abs(np.where(finite, want, 0.0))
    excess = err - bound
    if got.size and (excess > 0).any():
        where = np.unravel_index(int(np.argmax(excess)), got.shape)
        worst = np.unravel_index(int(np.argmax(err)), got.shape)
        raise AssertionError(
            f"{what}: {int((excess > 0).sum())} of {got.size} elements out of tolerance "
            f"(atol={atol:.3g}, rtol={rtol:.3g}); worst at {tuple(int(x) for x in where)}: "
            f"got {got[where]!r}, expected {want[where]!r}, error {err[where]:.3g} > bound "
            f"{bound[where]:.3g}; max abs error {err[worst]:.3g} at "
            f"{tuple(int(x) for x in worst)}")


def assert_equal(got, want, what=""):
    """Bitwise equality (NaN == NaN); a failure names the first differing element."""
    got = np.asarray(got.detach().numpy() if isinstance(got, torch.Tensor) else got)
    want = np.asarray(want.detach().numpy() if isinstance(want, torch.Tensor) else want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    same = (got == want) | (np.isnan(got) & np.isnan(want)) if got.dtype.kind == "f" \
        else got == want
    if not same.all():
        where = tuple(int(x) for x in np.argwhere(~same)[0])
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        raise AssertionError(f"{what}: {int((~same).sum())} of {got.size} elements differ; "
                             f"first at {where}: {got[where]!r} != {want[where]!r}; max abs "
                             f"difference {np.nanmax(diff) if diff.size else 0:.3g}")


def recorded_attention(mha, store):
    """Makes torch's MultiheadAttention `mha` also append its per-head weights (B, H, Lq, Lk)
    to `store`: the Transformer layers call it with need_weights=False."""
    forward = mha.forward

    def with_weights(*args, **kwargs):
        kwargs.update(need_weights=True, average_attn_weights=False)
        out, weights = forward(*args, **kwargs)
        store.append(weights.detach())
        return out, weights

    mha.forward = with_weights
