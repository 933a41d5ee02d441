"""qkv.attention_backward against torch autograd (torch 1.13, float64).

The autograd oracle is the attention formula written with whole-tensor torch ops in
float64 (softmax(scale·q·kᵀ + mask, masked → −inf)·v, GQA by repeat_interleave, a fully
masked row's probabilities forced to 0), differentiated by .backward(dout). Dropout masks
are qkv's own (a function of (seed, b, h, i, j)), so with dropout the fast kernel is
compared with qkv's double-precision reference backward (impl="reference") instead.

Tolerance: oracle.backward_atols (derived there).
"""

import math

import numpy as np
import pytest
import torch

import qkv
from oracle import assert_close, backward_atols as _atol

def _inputs(B, Hq, Hkv, Lq, Lk, Dk, Dv, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Hq, Lq, Dk, generator=g)
    k = torch.randn(B, Hkv, Lk, Dk, generator=g)
    v = torch.randn(B, Hkv, Lk, Dv, generator=g)
    dout = torch.randn(B, Hq, Lq, Dv, generator=g)
    return q, k, v, dout


def torch_grads(q, k, v, dout, mask=None, causal=False, key_lengths=None, scale=None):
    """(dq, dk, dv) by autograd through the attention formula in float64."""
    q, k, v = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    B, Hq, Lq, Dk = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    group = Hq // Hkv
    scale = 1.0 / math.sqrt(Dk) if scale is None else scale
    kk = k.repeat_interleave(group, dim=1)  # (B, Hq, Lk, Dk)
    vv = v.repeat_interleave(group, dim=1)  # (B, Hq, Lk, Dv)
    s = scale * (q @ kk.transpose(-1, -2))  # (B, Hq, Lq, Lk)
    keep = torch.ones(B, Hq, Lq, Lk, dtype=torch.bool)
    if causal:  # top-left, as PyTorch's is_causal
        keep = keep & torch.ones(Lq, Lk, dtype=torch.bool).tril()
    if key_lengths is not None:
        lengths = torch.tensor(key_lengths).view(B, 1, 1, 1)
        keep = keep & (torch.arange(Lk).view(1, 1, 1, Lk) < lengths)
    if mask is not None:
        if mask.dtype == torch.bool:
            keep = keep & mask
        else:
            s = s + mask.double()
    s = s.masked_fill(~keep, -math.inf)
    dead = torch.isneginf(s).all(dim=-1, keepdim=True)  # (B, Hq, Lq, 1): nothing to attend
    p = torch.softmax(s.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
    out = p @ vv  # (B, Hq, Lq, Dv)
    out.backward(dout.double())
    return q.grad, k.grad, v.grad


def _check(got, want, atols, what):
    for name, g, w, atol in zip(("dq", "dk", "dv"), got, want, (atols[0], atols[0], atols[1])):
        assert isinstance(g, torch.Tensor) and g.dtype == torch.float32, f"{what} {name}: {type(g)}"
        assert_close(g, w, atol, 1e-5, f"{what}: {name}")


def _forward_backward(q, k, v, dout, **kwargs):
    out, lse = qkv.scaled_dot_product_attention(q, k, v, return_lse=True, **kwargs)
    return qkv.attention_backward(dout, q, k, v, out, lse, **kwargs)


SHAPES = [(1, 1, 1, 1, 1, 8, 8), (2, 3, 3, 17, 17, 16, 16), (1, 2, 2, 5, 33, 32, 8),
          (2, 2, 2, 65, 70, 32, 32), (1, 1, 1, 130, 129, 64, 40)]


@pytest.mark.parametrize("causal", [False, True], ids=["plain", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_plain_and_causal_against_autograd(shape, causal):
    q, k, v, dout = _inputs(*shape, seed=sum(shape) + causal)
    got = _forward_backward(q, k, v, dout, is_causal=causal)
    _check(got, torch_grads(q, k, v, dout, causal=causal), _atol(q, k, v, dout),
           f"{shape} causal={causal}")


def test_bool_mask_true_attends():
    q, k, v, dout = _inputs(2, 2, 2, 9, 11, 16, 12, seed=1)
    mask = torch.rand(2, 1, 9, 11, generator=torch.Generator().manual_seed(2)) < 0.6
    mask[0, 0, 3] = False  # one fully masked row: zero gradient, not NaN
    got = _forward_backward(q, k, v, dout, attn_mask=mask)
    _check(got, torch_grads(q, k, v, dout, mask=mask), _atol(q, k, v, dout), "bool mask")
    assert torch.count_nonzero(got[0][0, :, 3]) == 0


def test_float_mask_with_minus_infinity():
    q, k, v, dout = _inputs(2, 3, 3, 20, 24, 16, 16, seed=3)
    g = torch.Generator().manual_seed(4)
    mask = torch.randn(3, 20, 24, generator=g)
    mask[torch.rand(3, 20, 24, generator=g) < 0.3] = -math.inf
    got = _forward_backward(q, k, v, dout, attn_mask=mask, scale=0.3)
    want = torch_grads(q, k, v, dout, mask=mask, scale=0.3)
    _check(got, want, _atol(q, k, v, dout, scale=0.3), "float mask")


@pytest.mark.parametrize("hkv", [2, 1], ids=["gqa", "mqa"])
def test_grouped_query_attention(hkv):
    q, k, v, dout = _inputs(2, 4, hkv, 30, 26, 32, 24, seed=5 + hkv)
    got = _forward_backward(q, k, v, dout, enable_gqa=True, is_causal=True)
    assert got[1].shape == k.shape and got[2].shape == v.shape
    want = torch_grads(q, k, v, dout, causal=True)
    _check(got, want, _atol(q, k, v, dout), f"Hkv={hkv}")


def test_key_padding_including_an_empty_batch():
    q, k, v, dout = _inputs(3, 4, 4, 31, 40, 32, 32, seed=6)
    lengths = [40, 17, 0]
    got = _forward_backward(q, k, v, dout, key_lengths=lengths)
    want = torch_grads(q, k, v, dout, key_lengths=lengths)
    _check(got, want, _atol(q, k, v, dout), "key_lengths")
    assert torch.count_nonzero(got[0][2]) == 0 and torch.count_nonzero(got[1][1, :, 17:]) == 0


def test_dropout_zero_is_exact_attention():
    q, k, v, dout = _inputs(2, 2, 2, 16, 16, 8, 8, seed=7)
    got = _forward_backward(q, k, v, dout, dropout_p=0.0, is_causal=True)
    _check(got, torch_grads(q, k, v, dout, causal=True), _atol(q, k, v, dout), "dropout_p=0")


@pytest.mark.parametrize("options", [dict(is_causal=True), dict(key_lengths=[12, 5], softcap=2.0)],
                         ids=["causal", "padded-softcap"])
def test_dropout_against_the_reference_backward(options):
    """Dropout masks are qkv's (seeded); torch's would differ, so the reference backward
    (double, materialized probabilities) is the oracle."""
    q, k, v, dout = _inputs(2, 2, 2, 14, 12, 16, 16, seed=8)
    kwargs = dict(dropout_p=0.3, seed=1234, **options)
    out, lse = qkv.scaled_dot_product_attention(q, k, v, return_lse=True, **kwargs)
    fast = qkv.attention_backward(dout, q, k, v, out, lse, impl="fast", **kwargs)
    ref = qkv.attention_backward(dout, q, k, v, out, lse, impl="reference", **kwargs)
    _check(fast, [r.double() for r in ref], _atol(q, k, v, dout, dropout_p=0.3), "dropout")
    # Another seed is another pattern: the gradients must change.
    other = qkv.attention_backward(dout, q, k, v, out, lse, impl="reference",
                                   **dict(kwargs, seed=99))
    assert not torch.equal(other[2], ref[2])


def test_numpy_and_three_dimensional_inputs():
    q, k, v, dout = _inputs(1, 2, 2, 7, 9, 8, 8, seed=9)
    qn, kn, vn, dn = (t[0].numpy().astype(np.float64) for t in (q, k, v, dout))  # (H, L, D)
    out, lse = qkv.scaled_dot_product_attention(qn, kn, vn, return_lse=True)
    dq, dk, dv = qkv.attention_backward(dn, qn, kn, vn, out, lse)
    assert isinstance(dq, np.ndarray) and dq.dtype == np.float64 and dq.shape == (2, 7, 8)
    want = torch_grads(q, k, v, dout)
    atols = _atol(q, k, v, dout)
    for name, g, w, atol in zip(("dq", "dk", "dv"), (dq, dk, dv), want, (atols[0],) * 2 + (atols[1],)):
        assert_close(g, w[0], atol, 1e-5, f"numpy 3-d {name}")


def test_errors_name_the_argument():
    q, k, v, dout = _inputs(1, 2, 2, 5, 6, 8, 4, seed=10)
    out, lse = qkv.scaled_dot_product_attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match="dout must have the output's shape"):
        qkv.attention_backward(dout[..., :3], q, k, v, out, lse)
    with pytest.raises(ValueError, match="lse must have shape"):
        qkv.attention_backward(dout, q, k, v, out, lse[:, :1])
    with pytest.raises(TypeError, match="lse must be f32"):
        qkv.attention_backward(dout, q, k, v, out, lse.half())
    with pytest.raises(ValueError, match="seed must be given"):
        qkv.attention_backward(dout, q, k, v, out, lse, dropout_p=0.1)
    with pytest.raises(ValueError, match="enable_gqa"):
        qkv.attention_backward(dout, q, k[:, :1], v[:, :1], out, lse)
