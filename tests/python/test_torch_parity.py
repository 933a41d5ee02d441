"""qkv against PyTorch's own attention: torch 1.13's F._scaled_dot_product_attention and
torch.nn.MultiheadAttention, plain and causal.

PyTorch runs in float64 on the float32 inputs upcast, so it is an oracle here: the
tolerance is the float32 one of test_sweep.py (atol = rtol = 1e-5, 10x over the
rounding and summation error of a float32 result).

What torch 1.13 does, found empirically (test_torch113_bool_mask_polarity pins it):
- F._scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, need_attn_weights,
  is_causal) is a private function in 1.13; is_causal is top-left (tril(ones(Lq, Lk))),
  as PyTorch 2.x.
- Its bool attn_mask has PyTorch 2.x's polarity in this build: True = attend (it was
  feared it might be the opposite, or additive only; it is neither here). The plain and
  causal cases are the comparisons asked for; the bool mask is compared too, after the
  polarity check.
- nn.MultiheadAttention's bool attn_mask has the opposite polarity: True = NOT allowed.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import qkv
from oracle import assert_close

ATOL = RTOL = 1e-5  # float32 result vs a float64 oracle, see test_sweep.py


def _inputs(B, H, Lq, Lk, Dk, Dv, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, Lq, Dk, generator=g)
    k = torch.randn(B, H, Lk, Dk, generator=g)
    v = torch.randn(B, H, Lk, Dv, generator=g)
    return q, k, v


SHAPES = [(1, 1, 1, 1, 8, 8), (2, 3, 17, 17, 16, 16), (2, 2, 5, 33, 32, 8),
          (1, 4, 64, 64, 64, 64), (2, 2, 129, 127, 24, 40)]


@pytest.mark.parametrize("causal", [False, True], ids=["plain", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_against_torch113_private_sdpa(shape, causal):
    q, k, v = _inputs(*shape, seed=sum(shape) + causal)
    want_out, want_w = F._scaled_dot_product_attention(
        q.double(), k.double(), v.double(), None, 0.0, True, causal)
    out = qkv.scaled_dot_product_attention(q, k, v, is_causal=causal)
    weights = qkv.attention_weights(q, k, v, is_causal=causal)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    assert_close(out, want_out, ATOL, RTOL, f"out vs torch 1.13 SDPA {shape} causal={causal}")
    assert_close(weights, want_w, 2e-6, 1e-5, f"weights vs torch 1.13 SDPA {shape}")


def test_torch113_bool_mask_polarity():
    """Finds which bool polarity torch 1.13's private SDPA has and compares qkv with it
    (qkv is True = attend, as PyTorch 2.x)."""
    q, k, v = _inputs(2, 2, 9, 11, 16, 16, seed=7)
    mask = torch.rand(9, 11, generator=torch.Generator().manual_seed(3)) < 0.6
    mask[:, 0] = True  # no fully masked rows: keep both polarities away from NaN
    mask[:, 1] = False
    _, w = F._scaled_dot_product_attention(q.double(), k.double(), v.double(), mask, 0.0,
                                           True, False)
    true_attends = bool((w[..., 1] == 0).all()) and bool((w[..., 0] > 0).all())
    true_masks = bool((w[..., 0] == 0).all()) and bool((w[..., 1] > 0).all())
    assert true_attends != true_masks, "torch 1.13 bool mask polarity is neither"
    # This Debian build: True = attend, the PyTorch 2.x polarity (recorded in the docstring).
    assert true_attends
    torch_mask = mask if true_attends else ~mask
    want, _ = F._scaled_dot_product_attention(q.double(), k.double(), v.double(), torch_mask,
                                              0.0, False, False)
    assert_close(qkv.scaled_dot_product_attention(q, k, v, attn_mask=mask), want, ATOL, RTOL,
                 "bool mask vs torch 1.13 SDPA")


def _mha_with_qkv(mha, x, causal):
    """nn.MultiheadAttention's forward with qkv as the attention core.

    The projections are computed here in float64 from the module's in_proj_weight /
    out_proj, the (B, L, H, D) head split is handed to qkv as a (B, H, L, D) permuted
    view (no copy), in float32."""
    E, H = mha.embed_dim, mha.num_heads
    B, L, _ = x.shape
    w, b = mha.in_proj_weight, mha.in_proj_bias
    proj = [F.linear(x, w[i * E:(i + 1) * E], b[i * E:(i + 1) * E]) for i in range(3)]
    q, k, v = (p.view(B, L, H, E // H).permute(0, 2, 1, 3).float() for p in proj)  # (B, H, L, D)
    assert L == 1 or not q.is_contiguous()  # the strided path is exercised
    out = qkv.scaled_dot_product_attention(q, k, v, is_causal=causal)  # (B, H, L, D) f32
    weights = qkv.attention_weights(q, k, v, is_causal=causal)  # (B, H, L, L)
    out = out.double().permute(0, 2, 1, 3).reshape(B, L, E)
    return mha.out_proj(out), weights.double().mean(dim=1)


@pytest.mark.parametrize("causal", [False, True], ids=["plain", "causal"])
@pytest.mark.parametrize("B,L,E,H", [(1, 1, 8, 2), (2, 17, 32, 4), (3, 40, 48, 8)])
def test_against_multihead_attention(B, L, E, H, causal):
    torch.manual_seed(B * 100 + L + causal)
    mha = torch.nn.MultiheadAttention(E, H, batch_first=True).double().eval()
    x = torch.randn(B, L, E, dtype=torch.float64)
    # nn.MultiheadAttention's bool attn_mask: True = NOT allowed (the opposite of SDPA).
    mask = torch.triu(torch.ones(L, L, dtype=torch.bool), 1) if causal else None
    with torch.no_grad():
        want, want_w = mha(x, x, x, attn_mask=mask, need_weights=True, average_attn_weights=True)
        got, got_w = _mha_with_qkv(mha, x, causal)
    # Tolerance: qkv sees q, k, v rounded to float32 (2^-24 relative) and returns float32
    # (2^-24); the error reaching the output ≲ 1e-6, and out_proj sums E terms of weights
    # |w| < 1/sqrt(E) so at most sqrt(E)·1e-6 < 1e-5 for E <= 48: atol = rtol = 2e-5.
    assert_close(got, want, 2e-5, 2e-5, f"MHA out B={B} L={L} E={E} H={H} causal={causal}")
    assert_close(got_w, want_w, 2e-6, 1e-5, f"MHA averaged weights causal={causal}")
