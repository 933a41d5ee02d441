"""float64 through the compiled module: qkv._qkv._attention and _attention_backward on
float64 NumPy arrays compute in double end to end (impl "reference", and "automatic",
which picks the reference for float64), against torch 1.13 in float64 with autograd.

The oracle is written here from the specification (include/qkv/attention.h) with
whole-tensor torch ops: s = scale·q·kᵀ, softcap, ALiBi, + float mask, masked → −inf,
softmax (a fully masked row 0), ·v; GQA by repeat_interleave; gradients by .backward().

Tolerance, derived: both sides compute in double (u = 2^-53). A score is a length-Dk dot
product plus a few operations, off by (Dk + 8)·u·M with M the largest |score| (scale·
‖q‖·‖k‖, ALiBi and mask included); the softmax's weights by 2·that + (Lk + 8)·u relative;
out (a convex combination of v rows) by the weights' error times max|v|; a gradient
element sums at most Lq·group + Lk products of such terms. So
    atol = 4·(Dk + Lk + Lq·group + 16)·u·(M + 1)·G,
with G the largest magnitude the result is built from (max|v| for out, the gradients'
bound below), is about 1e-13 here; each test also asserts atol <= 1e-12. Rounding any
input, output or intermediate to float32 moves results by ~2^-24 ≈ 6e-8 relative: every
test checks that the f32-rounded computation misses its tolerance, so it can fail.
"""

import math

import numpy as np
import pytest
import torch

from qkv import _qkv

U = 2.0 ** -53


def _tensor(array, name):
    return _qkv._Tensor.from_array(array, name, False)


def _options(mask=None, scale=None, causal=False, alignment="top_left", key_lengths=(),
             window=None, alibi_slopes=(), softcap=None, dropout_p=0.0, seed=0,
             impl="reference"):
    return dict(mask=None if mask is None else _tensor(mask, "mask"), scale=scale,
                causal=causal, alignment=alignment, key_lengths=list(key_lengths),
                window=window, alibi_slopes=list(alibi_slopes), softcap=softcap,
                dropout_p=dropout_p, seed=seed, impl=impl)


def qkv_forward(q, k, v, return_probs=False, **kw):
    out, lse, probs = _qkv._attention(_tensor(q, "q"), _tensor(k, "k"), _tensor(v, "v"),
                                      return_lse=True, return_probs=return_probs,
                                      **_options(**kw))
    return out, lse, probs


def qkv_backward(dout, q, k, v, out, lse, **kw):
    return _qkv._attention_backward(_tensor(dout, "dout"), _tensor(q, "q"), _tensor(k, "k"),
                                    _tensor(v, "v"), _tensor(out, "out"), _tensor(lse, "lse"),
                                    **_options(**kw))


def oracle(q, k, v, mask=None, scale=None, causal=False, alignment="top_left",
           key_lengths=(), window=None, alibi_slopes=(), softcap=None, **_):
    """(out, lse, probs) in float64 torch, differentiable in q, k, v (torch tensors)."""
    B, Hq, Lq, Dk = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    group = Hq // Hkv
    scale = 1.0 / math.sqrt(Dk) if scale is None else scale
    kk, vv = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    s = scale * (q @ kk.transpose(-1, -2))  # (B, Hq, Lq, Lk)
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    lengths = torch.tensor(list(key_lengths) or [Lk] * B).view(B, 1, 1)  # (B, 1, 1)
    i = torch.arange(Lq).view(1, Lq, 1)
    j = torch.arange(Lk).view(1, 1, Lk)
    diag = i + (lengths - Lq) if alignment == "bottom_right" else i.expand(B, Lq, 1)
    if alibi_slopes:
        slopes = torch.tensor(np.asarray(alibi_slopes, np.float32).astype(np.float64)).view(1, Hq, 1, 1)
        s = s - slopes * (diag - j).abs().unsqueeze(1).double()
    keep = (j < lengths).expand(B, Lq, Lk)
    if causal:
        keep = keep & (j <= diag)
    if window is not None:
        if window[0] >= 0:
            keep = keep & (j >= diag - window[0])
        if window[1] >= 0:
            keep = keep & (j <= diag + window[1])
    keep = keep.unsqueeze(1).expand(B, Hq, Lq, Lk)
    if mask is not None:
        m = torch.from_numpy(np.asarray(mask))
        if m.dtype == torch.bool:
            keep = keep & m
        else:
            s = s + m.double()
    s = s.masked_fill(~keep, -math.inf)
    dead = torch.isneginf(s).all(dim=-1, keepdim=True)  # a fully masked row
    probs = torch.softmax(s.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
    lse = torch.logsumexp(s, dim=-1)
    return probs @ vv, lse, probs


def _f64(rng, *shape):
    return rng.standard_normal(shape)  # float64, full 53-bit mantissas


def _atol(q, k, v, kw, magnitude):
    """The derived tolerance of the module docstring, for a result built from `magnitude`."""
    B, Hq, Lq, Dk = q.shape
    Lk, group = k.shape[2], Hq // k.shape[1]
    scale = kw.get("scale") or 1.0 / math.sqrt(Dk)
    M = abs(scale) * np.linalg.norm(q, axis=-1).max() * np.linalg.norm(k, axis=-1).max()
    if kw.get("alibi_slopes"):
        M += max(abs(s) for s in kw["alibi_slopes"]) * (Lq + Lk)
    mask = kw.get("mask")
    if mask is not None and mask.dtype != np.bool_:
        M += np.abs(mask[np.isfinite(mask)]).max()
    atol = 4 * (Dk + Lk + Lq * group + 16) * U * (M + 1) * magnitude
    assert atol <= 1e-12, f"tolerance {atol:.3g} too loose to tell float64 from float32"
    return atol


def _assert_close(got, want, atol, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == np.float64, f"{what}: dtype {got.dtype}, expected float64"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert np.array_equal(np.isneginf(got), np.isneginf(want)), f"{what}: -inf at other places"
    finite = np.isfinite(want)
    err = np.abs(np.where(finite, got, 0) - np.where(finite, want, 0))
    worst = np.unravel_index(int(np.argmax(err)), err.shape) if err.size else ()
    assert not err.size or err.max() <= atol, (
        f"{what}: max error {err.max():.3g} at {tuple(int(x) for x in worst)} > atol {atol:.3g}")


def _rounded(*arrays):
    """The arrays rounded to float32 and back: what a path through f32 would see."""
    return tuple(a.astype(np.float32).astype(np.float64) for a in arrays)


def _cases():
    rng = np.random.default_rng(2024)
    Lq, Lk = 5, 7
    fmask = _f64(rng, 2, 1, Lq, Lk)
    fmask[0, 0, 1, 2] = -np.inf
    bmask = rng.uniform(size=(Lq, Lk)) < 0.7
    return [
        ("plain", 2, 2, dict()),
        ("causal, GQA", 4, 2, dict(causal=True)),
        ("bottom_right causal, key lengths (one 0), MQA",
         2, 1, dict(causal=True, alignment="bottom_right", key_lengths=(0, 5))),
        ("bool mask, scale", 2, 2, dict(mask=bmask, scale=0.6)),
        ("float64 mask with -inf", 2, 2, dict(mask=fmask)),
        ("float32 mask, alibi", 2, 2, dict(mask=fmask.astype(np.float32), alibi_slopes=(0.5, 0.25))),
        ("softcap, window, alibi", 2, 1, dict(softcap=1.5, window=(1, 2), alibi_slopes=(0.3, 0.1))),
        ("window right only", 2, 2, dict(window=(-1, 1))),
    ]


@pytest.mark.parametrize("what,Hq,Hkv,kw", _cases(), ids=[c[0] for c in _cases()])
@pytest.mark.parametrize("impl", ["reference", "automatic"])
def test_forward_and_backward_match_torch_float64(what, Hq, Hkv, kw, impl):
    rng = np.random.default_rng(7)
    B, Lq, Lk, Dk, Dv = 2, 5, 7, 6, 4
    # Halved: smaller magnitudes keep the derived tolerance below 1e-12.
    q, k, v = (0.5 * _f64(rng, B, Hq, Lq, Dk), 0.5 * _f64(rng, B, Hkv, Lk, Dk),
               0.5 * _f64(rng, B, Hkv, Lk, Dv))
    dout = 0.5 * _f64(rng, B, Hq, Lq, Dv)
    kw = dict(kw, impl=impl)

    out, lse, probs = qkv_forward(q, k, v, return_probs=True, **kw)
    assert out.dtype == lse.dtype == probs.dtype == np.float64
    tq, tk, tv = (torch.from_numpy(x).requires_grad_(True) for x in (q, k, v))
    want_out, want_lse, want_probs = oracle(tq, tk, tv, **kw)
    atol = _atol(q, k, v, kw, np.abs(v).max())  # out: a convex combination of v rows
    lse_finite = want_lse.detach().numpy()[np.isfinite(want_lse.detach().numpy())]
    _assert_close(out, want_out.detach().numpy(), atol, f"{what}: out")
    _assert_close(lse, want_lse.detach().numpy(), _atol(q, k, v, kw, 1 + np.abs(lse_finite).max()),
                  f"{what}: lse")
    _assert_close(probs, want_probs.detach().numpy(), _atol(q, k, v, kw, 1.0), f"{what}: probs")

    dq, dk, dv = qkv_backward(dout, q, k, v, out, lse, **kw)
    want_out.backward(torch.from_numpy(dout))
    # Gradients are sums of products bounded by |scale|·‖dout‖·‖v‖·max|q, k| and max|dout|.
    g = np.linalg.norm(dout, axis=-1).max() * np.linalg.norm(v, axis=-1).max() * \
        max(np.abs(q).max(), np.abs(k).max(), 1.0) + np.abs(dout).max()
    gatol = _atol(q, k, v, kw, g)
    for name, got, want in (("dq", dq, tq.grad), ("dk", dk, tk.grad), ("dv", dv, tv.grad)):
        _assert_close(got, want.numpy(), gatol, f"{what}: {name}")

    # The tolerance tells f64 from f32: the same inputs rounded to f32 miss it.
    rq, rk, rv = _rounded(q, k, v)
    rout, _, _ = qkv_forward(rq, rk, rv, **kw)
    assert np.abs(rout - out).max() > 100 * atol, f"{what}: f32 rounding would go unnoticed"


def test_torch_gradcheck_through_the_compiled_module():
    """torch.autograd.gradcheck (float64 central differences against the analytic
    Jacobian) of an autograd.Function over _qkv's reference forward and backward."""

    class Attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            arrays = [t.detach().numpy() for t in (q, k, v)]
            out, lse, _ = qkv_forward(*arrays, causal=True, softcap=2.0)
            ctx.save_for_backward(q, k, v)
            ctx.out, ctx.lse = out, lse
            return torch.from_numpy(out)

        @staticmethod
        def backward(ctx, dout):
            q, k, v = (t.detach().numpy() for t in ctx.saved_tensors)
            dq, dk, dv = qkv_backward(np.ascontiguousarray(dout.numpy()), q, k, v, ctx.out,
                                      ctx.lse, causal=True, softcap=2.0)
            return torch.from_numpy(dq), torch.from_numpy(dk), torch.from_numpy(dv)

    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 3, 5, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 2, 4, 5, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 2, 4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    assert Attention.apply(q, k, v).dtype == torch.float64
    assert torch.autograd.gradcheck(Attention.apply, (q, k, v), eps=1e-6, atol=1e-9, rtol=1e-7)


def test_dropout_keeps_the_float32_pattern():
    """With v the identity (Lk = Dv), out[i, j] = P_ij·Z_ij: zero exactly where dropped,
    at the same (b, h, i, j) in float64 as in float32."""
    rng = np.random.default_rng(5)
    L = 12
    q, k = (0.3 * _f64(rng, 2, 2, L, 4)).astype(np.float32), (0.3 * _f64(rng, 2, 2, L, 4)).astype(np.float32)
    eye = np.broadcast_to(np.eye(L), (2, 2, L, L)).copy()
    kw = dict(dropout_p=0.4, seed=77)
    out64, _, _ = qkv_forward(q.astype(np.float64), k.astype(np.float64), eye, **kw)
    out32, _, _ = qkv_forward(q, k, eye.astype(np.float32), **kw)
    assert out64.dtype == np.float64 and out32.dtype == np.float32
    assert np.array_equal(out64 == 0, out32 == 0)
    assert 0.25 < (out64 == 0).mean() < 0.55


def test_errors_name_the_dtype():
    rng = np.random.default_rng(9)
    q, k, v = _f64(rng, 1, 2, 3, 4), _f64(rng, 1, 2, 5, 4), _f64(rng, 1, 2, 5, 2)
    t = _qkv._Tensor.from_array(q, "q", False)
    assert t.dtype == "f64" and t.shape == (1, 2, 3, 4)
    assert t.to_array().dtype == np.float64
    with pytest.raises(TypeError, match="impl fast computes in float32 and does not take f64"):
        qkv_forward(q, k, v, impl="fast")
    with pytest.raises(TypeError, match="share one dtype, got q f64, k f32, v f64"):
        qkv_forward(q, k.astype(np.float32), v)
    out, lse, _ = qkv_forward(q, k, v)
    dout = _f64(rng, 1, 2, 3, 2)
    with pytest.raises(TypeError, match="impl fast"):
        qkv_backward(dout, q, k, v, out, lse, impl="fast")
    with pytest.raises(TypeError, match="dout must be f64"):
        qkv_backward(dout.astype(np.float32), q, k, v, out, lse)
    with pytest.raises(TypeError, match="lse must be f64"):
        qkv_backward(dout, q, k, v, out, lse.astype(np.float32))
    # The layers compute in float32 and say so rather than read float64 as floats.
    x = _tensor(_f64(rng, 2, 3, 4), "x")
    w = _tensor(_f64(rng, 5, 4).astype(np.float32), "weight")
    with pytest.raises(TypeError, match="linear: x must be floating .* got f64"):
        _qkv._nn_linear(x, w, None)
    with pytest.raises(TypeError, match="got f64"):
        _qkv._nn_relu(x)
    # Other 8-byte types are still refused by name.
    with pytest.raises(TypeError, match="unsupported dtype int64"):
        _qkv._Tensor.from_array(np.zeros(3, np.int64), "q", False)


def test_a_float64_backward_refuses_what_it_would_refuse_in_float32():
    """dout, out and lse of a float64 backward are widened to float64 only when they are
    floating arrays: None and bool arrays still get the errors naming them."""
    import qkv
    q = np.random.default_rng(3).standard_normal((1, 1, 3, 4))
    out, lse = qkv.scaled_dot_product_attention(q, q, q, return_lse=True)
    with pytest.raises(TypeError, match="dout must be an array"):
        qkv.attention_backward(None, q, q, q, out, lse)
    with pytest.raises(TypeError, match="dout has unsupported dtype bool"):
        qkv.attention_backward(np.ones((1, 1, 3, 4), bool), q, q, q, out, lse)
    with pytest.raises(TypeError, match="lse has unsupported dtype torch.bool"):
        qkv.attention_backward(out, q, q, q, out, torch.ones(1, 1, 3, dtype=torch.bool))
    # float32 dout, out and lse are widened exactly; the gradients are float64.
    dq, _, _ = qkv.attention_backward(np.ones((1, 1, 3, 4), np.float32), q, q, q,
                                      out.astype(np.float32), lse.astype(np.float32))
    assert dq.dtype == np.float64
