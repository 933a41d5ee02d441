"""qkv.scaled_dot_product_attention on torch's autograd tape (qkv.torch.AttentionFunction).

Oracles:
  * float32 (the fused kernel): torch autograd through the float64 oracle (oracle.oracle,
    written from the specification), every option the backward supports, within
    oracle.backward_atols (derived there);
  * dropout: the same naive float64 formula applying qkv's own keep pattern for that seed
    (read back from qkv by attending to an identity matrix of values), since torch's
    dropout draws other positions;
  * float64 (impl "reference" and "automatic"): torch.autograd.gradcheck, central finite
    differences of qkv's own forward against its backward.
"""

import math
import random

import numpy as np
import pytest
import torch

import qkv
from oracle import assert_close, backward_atols, oracle


def _inputs(B, Hq, Hkv, Lq, Lk, Dk, Dv, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Hq, Lq, Dk, generator=g, dtype=torch.float64).to(dtype)
    k = torch.randn(B, Hkv, Lk, Dk, generator=g, dtype=torch.float64).to(dtype)
    v = torch.randn(B, Hkv, Lk, Dv, generator=g, dtype=torch.float64).to(dtype)
    dout = torch.randn(B, Hq, Lq, Dv, generator=g, dtype=torch.float64).to(dtype)
    return q, k, v, dout


def _qkv_grads(q, k, v, dout, **kwargs):
    """(out, dq, dk, dv) through qkv's autograd function."""
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    out = qkv.scaled_dot_product_attention(q, k, v, **kwargs)
    assert out.grad_fn is not None, "the result is not connected to autograd"
    out.backward(dout)
    return out.detach(), q.grad, k.grad, v.grad


def _oracle_grads(q, k, v, dout, attn_mask=None, is_causal=False, scale=None,
                  causal_alignment="top_left", key_lengths=None, window=None,
                  alibi_slopes=None, softcap=None, enable_gqa=False):
    """(out, dq, dk, dv) by autograd through the float64 oracle."""
    del enable_gqa  # the oracle reads the group size from the shapes
    q, k, v = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    mask = attn_mask if attn_mask is None or attn_mask.dtype == torch.bool else attn_mask.double()
    out, _, _ = oracle(q, k, v, mask=mask, causal=is_causal, alignment=causal_alignment,
                       key_lengths=key_lengths, window=window, alibi_slopes=alibi_slopes,
                       softcap=softcap, scale=scale)
    out.backward(dout.double())
    return out.detach(), q.grad, k.grad, v.grad


def _check(got, want, atols, what):
    for name, g, w, atol in zip(("dq", "dk", "dv"), got, want,
                                (atols[0], atols[0], atols[1])):
        assert g.dtype == torch.float32, f"{what} {name}: dtype {g.dtype}"
        assert_close(g, w, atol, 1e-5, f"{what}: {name}")


def _bool_mask(B, Lq, Lk, seed):
    m = torch.rand(B, 1, Lq, Lk, generator=torch.Generator().manual_seed(seed)) < 0.6
    m[..., 0] = True  # no row fully masked: the oracle's gradient would be NaN there
    return m


def _float_mask(Hq, Lq, Lk, seed):
    g = torch.Generator().manual_seed(seed)
    m = torch.randn(Hq, Lq, Lk, generator=g)
    m[torch.rand(Hq, Lq, Lk, generator=g) < 0.3] = -math.inf
    m[..., 0] = 0.5
    return m


# (name, (B, Hq, Hkv, Lq, Lk, Dk, Dv), options): every option of the backward, alone and
# combined. Lq <= Lk under bottom-right alignment, so that no query row is fully masked.
CASES = [
    ("plain", (2, 2, 2, 37, 45, 32, 24), {}),
    ("causal-top-left", (2, 2, 2, 45, 37, 32, 32), dict(is_causal=True)),
    ("causal-bottom-right", (2, 2, 2, 37, 45, 32, 32),
     dict(is_causal=True, causal_alignment="bottom_right")),
    ("bool-mask", (2, 3, 3, 21, 30, 16, 16), dict(attn_mask=_bool_mask(2, 21, 30, 1))),
    ("float-mask-scale", (2, 3, 3, 21, 30, 16, 16),
     dict(attn_mask=_float_mask(3, 21, 30, 2), scale=0.3)),
    ("key-lengths", (3, 2, 2, 19, 40, 32, 32), dict(key_lengths=[40, 17, 1])),
    ("gqa", (2, 4, 2, 30, 26, 32, 24), dict(enable_gqa=True, is_causal=True)),
    ("mqa", (1, 4, 1, 30, 26, 16, 16), dict(enable_gqa=True)),
    ("window", (1, 2, 2, 40, 40, 16, 16), dict(window=(5, 3))),
    ("window-causal-bottom-right", (1, 2, 2, 20, 40, 16, 16),
     dict(window=(4, 0), is_causal=True, causal_alignment="bottom_right")),
    ("alibi", (1, 4, 4, 33, 33, 16, 16),
     dict(alibi_slopes=[0.5, 0.25, 0.125, 0.0625], is_causal=True)),
    ("softcap", (2, 2, 2, 25, 31, 32, 32), dict(softcap=3.0, scale=0.5)),
    ("all-combined", (2, 4, 2, 24, 40, 32, 16),
     dict(enable_gqa=True, is_causal=True, causal_alignment="bottom_right",
          key_lengths=[40, 29], window=(9, -1), alibi_slopes=[0.3, 0.2, 0.1, 0.05],
          softcap=5.0, attn_mask=_float_mask(4, 24, 40, 3))),
    ("long", (1, 1, 1, 130, 129, 64, 40), dict(is_causal=True)),
]


@pytest.mark.parametrize("impl", ["automatic", "fast"])
@pytest.mark.parametrize("name,shape,options", CASES, ids=[c[0] for c in CASES])
def test_gradients_match_the_float64_oracle(name, shape, options, impl):
    q, k, v, dout = _inputs(*shape, seed=len(name))
    got = _qkv_grads(q, k, v, dout, impl=impl, **options)
    want = _oracle_grads(q, k, v, dout, **options)
    atols = backward_atols(q, k, v, dout, scale=options.get("scale"))
    assert_close(got[0], want[0], atols[1], 1e-5, f"{name}: out")
    _check(got[1:], want[1:], atols, name)


def test_a_fully_masked_row_and_an_empty_batch_have_zero_gradients():
    q, k, v, dout = _inputs(2, 2, 2, 6, 8, 16, 16, seed=3)
    mask = torch.ones(2, 1, 6, 8, dtype=torch.bool)
    mask[0, 0, 2] = False  # query row 2 of batch 0 sees nothing
    _, dq, dk, dv = _qkv_grads(q, k, v, dout, attn_mask=mask, key_lengths=[8, 0])
    for t in (dq, dk, dv):
        assert torch.isfinite(t).all()
    assert torch.count_nonzero(dq[0, :, 2]) == 0
    assert torch.count_nonzero(dq[1]) + torch.count_nonzero(dk[1]) + torch.count_nonzero(dv[1]) == 0


def _keep_pattern(B, Hq, Hkv, Lq, Lk, Dk, p, seed, options):
    """qkv's dropout keep pattern for (seed, b, h, i, j), read back from qkv itself: with
    value = the identity, out[b, h, i] is row i of the dropped probabilities, zero exactly
    where dropped (the probabilities of these inputs are all positive)."""
    g = torch.Generator().manual_seed(1)
    q = torch.randn(B, Hq, Lq, Dk, generator=g) * 0.1
    k = torch.randn(B, Hkv, Lk, Dk, generator=g) * 0.1
    eye = torch.eye(Lk).expand(B, Hkv, Lk, Lk)
    dropped = qkv.scaled_dot_product_attention(q, k, eye, dropout_p=p, seed=seed,
                                               impl="reference", **options)
    return dropped != 0  # (B, Hq, Lq, Lk)


@pytest.mark.parametrize("impl", ["automatic", "fast"])
def test_dropout_against_the_naive_formula_with_qkvs_keep_pattern(impl):
    B, Hq, Hkv, Lq, Lk, Dk, Dv = 2, 4, 2, 23, 31, 16, 16
    p, seed = 0.3, 20261126
    options = dict(enable_gqa=True, softcap=4.0)
    keep = _keep_pattern(B, Hq, Hkv, Lq, Lk, Dk, p, seed, options)
    assert 0.6 < keep.double().mean().item() < 0.8  # about 1 - p of the positions kept
    q, k, v, dout = _inputs(B, Hq, Hkv, Lq, Lk, Dk, Dv, seed=4)
    got = _qkv_grads(q, k, v, dout, dropout_p=p, seed=seed, impl=impl, **options)

    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    kk = k64.repeat_interleave(Hq // Hkv, dim=1)  # (B, Hq, Lk, Dk)
    vv = v64.repeat_interleave(Hq // Hkv, dim=1)  # (B, Hq, Lk, Dv)
    s = 4.0 * torch.tanh((q64 @ kk.transpose(-1, -2)) / math.sqrt(Dk) / 4.0)  # (B, Hq, Lq, Lk)
    out = (torch.softmax(s, dim=-1) * keep / (1 - p)) @ vv  # (B, Hq, Lq, Dv)
    out.backward(dout.double())
    atols = backward_atols(q, k, v, dout, dropout_p=p)
    assert_close(got[0], out.detach(), atols[1], 1e-5, "dropout out")
    _check(got[1:], (q64.grad, k64.grad, v64.grad), atols, "dropout")


def test_an_unseeded_dropout_backward_reuses_the_forwards_seed():
    q, k, v, dout = _inputs(1, 2, 2, 9, 9, 8, 8, seed=5)
    random.seed(7)
    seed = random.getrandbits(64)
    want = _qkv_grads(q, k, v, dout, dropout_p=0.5, seed=seed)
    random.seed(7)
    got = _qkv_grads(q, k, v, dout, dropout_p=0.5)
    for g, w in zip(got, want):
        assert torch.equal(g, w)


@pytest.mark.parametrize("impl", ["reference", "automatic"])
@pytest.mark.parametrize("options", [
    dict(is_causal=True),
    dict(enable_gqa=True, causal_alignment="bottom_right", is_causal=True, key_lengths=[5, 3]),
    dict(softcap=2.0, alibi_slopes=[0.3, 0.1], window=(2, 1)),
    dict(attn_mask=torch.tensor([[True, False, True, True, True]]).expand(4, 5)),
    dict(dropout_p=0.25, seed=3),
], ids=["causal", "gqa-padded", "softcap-alibi-window", "bool-mask", "dropout"])
def test_gradcheck_in_float64(options, impl):
    g = torch.Generator().manual_seed(6)
    Hkv = 1 if options.get("enable_gqa") else 2
    q = torch.randn(2, 2, 4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, Hkv, 5, 3, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, Hkv, 5, 4, generator=g, dtype=torch.float64, requires_grad=True)

    def attention(q, k, v):
        return qkv.scaled_dot_product_attention(q, k, v, impl=impl, **options)

    assert attention(q, k, v).dtype == torch.float64
    assert torch.autograd.gradcheck(attention, (q, k, v), eps=1e-6, atol=1e-8, rtol=1e-6)


def test_float64_gradients_are_not_rounded_through_float32():
    """Rounding the inputs or the computation to float32 would leave errors near 1e-7;
    the float64 path agrees with the float64 oracle to 1e-12."""
    q, k, v, dout = _inputs(1, 2, 2, 7, 9, 8, 8, seed=8, dtype=torch.float64)
    got = _qkv_grads(q, k, v, dout, is_causal=True)
    want = _oracle_grads(q, k, v, dout, is_causal=True)
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, want):
        assert a.dtype == torch.float64, name
        assert_close(a, b, 1e-12, 1e-12, f"float64 {name}")


def test_strided_and_expanded_output_gradients():
    """autograd passes the output's gradient transposed, sliced or expanded (stride 0)."""
    q, k, v, dout = _inputs(2, 2, 2, 11, 13, 16, 16, seed=9)
    _, dq, dk, dv = _qkv_grads(q, k, v, dout, is_causal=True)
    for make_loss in (lambda o: (o.transpose(1, 2) * dout.transpose(1, 2)).sum(),  # transposed
                      lambda o: (o * dout).sum()):                                    # plain
        qs, ks, vs = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
        make_loss(qkv.scaled_dot_product_attention(qs, ks, vs, is_causal=True)).backward()
        for a, b in zip((qs.grad, ks.grad, vs.grad), (dq, dk, dv)):
            assert_close(a, b, 1e-6, 1e-6, "transposed dout")
    # Expanded: .sum() hands over a stride-0 tensor of ones; even columns only: a strided one.
    ones = torch.ones(2, 2, 11, 16)
    want = _qkv_grads(q, k, v, ones, is_causal=True)
    qs, ks, vs = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    qkv.scaled_dot_product_attention(qs, ks, vs, is_causal=True).sum().backward()
    for a, b in zip((qs.grad, ks.grad, vs.grad), want[1:]):
        assert_close(a, b, 0.0, 0.0, "expanded dout")
    half = torch.zeros(2, 2, 11, 16)
    half[..., ::2] = 1.0
    want = _qkv_grads(q, k, v, half, is_causal=True)
    qs, ks, vs = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    qkv.scaled_dot_product_attention(qs, ks, vs, is_causal=True)[..., ::2].sum().backward()
    for a, b in zip((qs.grad, ks.grad, vs.grad), want[1:]):
        assert_close(a, b, 0.0, 0.0, "sliced dout")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_gradients_come_back_in_the_inputs_dtype(dtype):
    q, k, v, dout = _inputs(1, 2, 2, 16, 16, 16, 16, seed=10, dtype=dtype)
    _, dq, dk, dv = _qkv_grads(q, k, v, dout, is_causal=True)
    want = _oracle_grads(q, k, v, dout, is_causal=True)[1:]
    u = 2.0 ** -8 if dtype == torch.bfloat16 else 2.0 ** -11
    for name, g, w in zip(("dq", "dk", "dv"), (dq, dk, dv), want):
        assert g.dtype == dtype, name
        # The inputs are exact in both; the gradient is rounded once to the half type.
        assert_close(g, w, 4 * u * w.abs().max().item() + 1e-3, u, f"{dtype} {name}")


def test_only_the_requested_gradients_and_lse_without_one():
    q, k, v, dout = _inputs(1, 1, 1, 5, 6, 8, 8, seed=11)
    q.requires_grad_(True)
    out, lse = qkv.scaled_dot_product_attention(q, k, v, return_lse=True)
    assert out.requires_grad and not lse.requires_grad
    out.backward(dout)
    assert q.grad is not None and k.grad is None and v.grad is None
    with torch.no_grad():
        assert qkv.scaled_dot_product_attention(q, k, v).grad_fn is None


def test_a_torch_model_trains_through_qkv_attention():
    """One layer of attention with learned projections learns to copy the previous token;
    the loss must fall by far (a broken backward leaves it near log(V))."""
    torch.manual_seed(0)
    V, E, L = 8, 32, 12
    emb = torch.nn.Embedding(V, E)
    pos = torch.nn.Parameter(torch.randn(L, E) * 0.3)
    proj = torch.nn.Linear(E, 3 * E)
    head = torch.nn.Linear(E, V)
    params = list(emb.parameters()) + [pos] + list(proj.parameters()) + list(head.parameters())
    opt = torch.optim.Adam(params, lr=3e-2)
    first = last = None
    for step in range(150):
        x = torch.randint(0, V, (16, L))
        h = emb(x) + pos  # (B, L, E)
        q, k, v = proj(h).unsqueeze(1).chunk(3, dim=-1)  # (B, 1, L, E) each
        y = head(qkv.scaled_dot_product_attention(q, k, v, is_causal=True).squeeze(1))
        loss = torch.nn.functional.cross_entropy(y[:, 1:].reshape(-1, V), x[:, :-1].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
        last = loss.item()
    assert first > 1.5 and last < 0.3, (first, last)


def test_errors_name_the_argument():
    q = torch.randn(1, 1, 4, 8, requires_grad=True)
    with pytest.raises(ValueError, match="key is on 'meta'"):
        qkv.scaled_dot_product_attention(q, torch.empty(1, 1, 4, 8, device="meta"),
                                         q.detach())
    c = torch.randn(1, 1, 4, 8, dtype=torch.complex64, requires_grad=True)
    with pytest.raises(TypeError, match="query has dtype torch.complex64"):
        qkv.scaled_dot_product_attention(c, c, c)
    mask = torch.zeros(4, 4, requires_grad=True)
    with pytest.raises(ValueError, match="attn_mask requires grad"):
        qkv.scaled_dot_product_attention(q, q, q, attn_mask=mask)
    with pytest.raises(ValueError, match="dropout_p"):
        qkv.scaled_dot_product_attention(q, q, q, dropout_p=1.5)
    with pytest.raises(ValueError, match="key/value heads"):
        qkv.scaled_dot_product_attention(q, torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8))
    # A bad upstream gradient: the wrong shape is autograd's own error, before qkv.
    out = qkv.scaled_dot_product_attention(q, q, q)
    with pytest.raises(RuntimeError, match="shape"):
        out.backward(torch.ones(1, 1, 4, 7))
    assert np.isfinite(out.detach().numpy()).all()
