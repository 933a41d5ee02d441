"""Input kinds and dtypes (NumPy / torch; f32, f16, bf16, f64), what comes back, 3-d inputs,
and strided views.

Tolerances for 16-bit inputs: the inputs are upcast exactly for the oracle, qkv computes
in f32 or wider and rounds the output once to the input's format, so the error is that
rounding: at most u·|out| with the unit roundoff u = 2^-8 for bf16 (8 significant bits)
and 2^-11 for f16 (11 bits), plus 2^-20 of slack for a double rounding through f32
(f64 → f32 → 16-bit), plus the error of the f32 computation before the rounding (the
fused kernel accumulates in f32: test_sweep.py's 1e-5, which also covers f16's
subnormal spacing near 0).
"""

import numpy as np
import pytest
import torch

import qkv
from oracle import assert_close, assert_equal, oracle

F32_TOL = 1e-5  # see test_sweep.py
U16 = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def weight_rounding_atol(v, dtype):
    """On CPUs with AVX512-BF16, bf16 inputs multiply P·V as bf16 pairs, so every weight is
    rounded to bf16 first (relative 2^-9). The output error that adds is at most
    Σ_j 2^-9·w_j·|v_j| <= 2^-9·max|v|: absolute, not relative to the output."""
    return 2.0 ** -9 * float(v.double().abs().max()) if dtype == torch.bfloat16 else 0.0


def _rand(shape, seed, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _oracle_np(q, k, v, **kw):
    t = lambda x: torch.from_numpy(np.asarray(x, dtype=np.float64))  # noqa: E731
    return oracle(t(q), t(k), t(v), **kw)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize("causal", [False, True], ids=["plain", "causal"])
@pytest.mark.parametrize("dims", [(1, 1, 1, 1, 8, 8), (2, 4, 17, 33, 64, 32),
                                  (1, 2, 129, 128, 16, 16)])
def test_16bit_torch_inputs(dims, causal, dtype):
    B, H, Lq, Lk, Dk, Dv = dims
    g = torch.Generator().manual_seed(sum(dims))
    q = torch.randn(B, H, Lq, Dk, generator=g).to(dtype)
    k = torch.randn(B, H, Lk, Dk, generator=g).to(dtype)
    v = torch.randn(B, H, Lk, Dv, generator=g).to(dtype)
    out, lse = qkv.scaled_dot_product_attention(q, k, v, is_causal=causal, return_lse=True)
    assert isinstance(out, torch.Tensor) and out.dtype == dtype
    assert isinstance(lse, torch.Tensor) and lse.dtype == torch.float32
    want, want_lse, _ = oracle(q.double(), k.double(), v.double(), causal=causal)
    u = U16[dtype]
    assert_close(out, want, F32_TOL + weight_rounding_atol(v, dtype), u + 2.0 ** -20, f"{dtype} out")
    # lse is float32 computed from the exact upcast inputs: the float32 tolerance.
    assert_close(lse, want_lse, F32_TOL, F32_TOL, f"{dtype} lse")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_16bit_with_every_option(dtype):
    """Masks, key lengths, window, ALiBi and softcap on 16-bit inputs (GQA 2)."""
    B, Hq, Hkv, Lq, Lk, Dk, Dv = 2, 4, 2, 19, 37, 24, 16
    g = torch.Generator().manual_seed(99)
    q = torch.randn(B, Hq, Lq, Dk, generator=g).to(dtype)
    k = torch.randn(B, Hkv, Lk, Dk, generator=g).to(dtype)
    v = torch.randn(B, Hkv, Lk, Dv, generator=g).to(dtype)
    mask = torch.rand(B, 1, Lq, Lk, generator=g) < 0.8
    kw = dict(is_causal=True, causal_alignment="bottom_right", key_lengths=[37, 11],
              window=(9, None), alibi_slopes=[0.5, 0.25, 0.125, 0.0625], softcap=15.0)
    out, lse = qkv.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True,
                                                return_lse=True, **kw)
    assert out.dtype == dtype
    want, want_lse, _ = oracle(q.double(), k.double(), v.double(), mask=mask, causal=True,
                               alignment="bottom_right", key_lengths=[37, 11], window=(9, None),
                               alibi_slopes=kw["alibi_slopes"], softcap=15.0)
    assert_close(out, want, F32_TOL + weight_rounding_atol(v, dtype), U16[dtype] + 2.0 ** -20,
                 f"{dtype} with options")
    assert_close(lse, want_lse, F32_TOL, F32_TOL, f"{dtype} lse with options")


def test_f16_numpy_in_numpy_out():
    q, k, v = (_rand((2, 3, 9, 16), s, np.float16) for s in (1, 2, 3))
    out = qkv.scaled_dot_product_attention(q, k, v)
    assert isinstance(out, np.ndarray) and out.dtype == np.float16
    want, _, _ = _oracle_np(q, k, v)
    assert_close(out, want, F32_TOL, 2.0 ** -11 + 2.0 ** -20, "f16 numpy")


def test_f32_kinds_and_dtypes():
    q, k, v = (_rand((2, 2, 7, 8), s) for s in (4, 5, 6))
    out_np = qkv.scaled_dot_product_attention(q, k, v)
    assert isinstance(out_np, np.ndarray) and out_np.dtype == np.float32
    out_t = qkv.scaled_dot_product_attention(*(torch.from_numpy(x) for x in (q, k, v)))
    assert isinstance(out_t, torch.Tensor) and out_t.dtype == torch.float32
    assert_equal(out_t.numpy(), out_np, "torch vs numpy")
    # The query decides the kind of the result.
    mixed = qkv.scaled_dot_product_attention(q, torch.from_numpy(k), torch.from_numpy(v))
    assert isinstance(mixed, np.ndarray)
    # Python lists are read as np.asarray does (float64, computed in float32); a list has
    # no dtype of its own, so the result is the computed float32.
    listed = qkv.scaled_dot_product_attention(q.tolist(), k.tolist(), v.tolist())
    assert listed.dtype == np.float32
    assert_equal(listed, out_np, "lists")


def test_float64_inputs_computed_in_double_or_with_impl_fast_in_float32():
    q, k, v = (np.random.default_rng(s).standard_normal((1, 2, 5, 4)) for s in (7, 8, 9))
    out = qkv.scaled_dot_product_attention(q, k, v)
    assert out.dtype == np.float64  # the query's dtype, computed in double (the reference)
    want, _, _ = oracle(*(torch.from_numpy(x) for x in (q, k, v)))
    assert_close(out, want, 1e-14, 1e-13, "f64 computed in double")
    t_out = qkv.scaled_dot_product_attention(*(torch.from_numpy(x) for x in (q, k, v)))
    assert t_out.dtype == torch.float64
    assert_equal(t_out.numpy(), out, "torch f64")
    # impl="fast" has no double kernel: the inputs are rounded to float32 once.
    fast = qkv.scaled_dot_product_attention(q, k, v, impl="fast")
    ref = qkv.scaled_dot_product_attention(*(x.astype(np.float32) for x in (q, k, v)), impl="fast")
    assert fast.dtype == np.float64
    assert_equal(fast, ref.astype(np.float64), "impl=fast: f64 in == f32 of the rounded inputs")


def test_requires_grad_records_on_the_autograd_tape_and_other_functions_detach():
    q = torch.randn(1, 2, 4, 8, requires_grad=True)
    out = qkv.scaled_dot_product_attention(q, q, q)
    assert out.requires_grad and out.grad_fn is not None
    assert_equal(out.detach(), qkv.scaled_dot_product_attention(q.detach(), q.detach(), q.detach()))
    weights = qkv.attention_weights(q, q, q)
    assert not weights.requires_grad


def test_three_d_inputs():
    """(H, L, D) inputs as PyTorch accepts them: a batch of 1 added and removed."""
    q, k, v = _rand((3, 6, 8), 1), _rand((3, 9, 8), 2), _rand((3, 9, 5), 3)
    mask = np.random.default_rng(4).random((3, 6, 9)) < 0.7
    out, lse = qkv.scaled_dot_product_attention(q, k, v, attn_mask=mask, return_lse=True)
    probs = qkv.attention_weights(q, k, v, attn_mask=mask)
    assert out.shape == (3, 6, 5) and lse.shape == (3, 6) and probs.shape == (3, 6, 9)
    out4, lse4 = qkv.scaled_dot_product_attention(q[None], k[None], v[None],
                                                  attn_mask=mask[None], return_lse=True)
    assert_equal(out, out4[0], "3-d vs 4-d out")
    assert_equal(lse, lse4[0], "3-d vs 4-d lse")
    want, _, _ = _oracle_np(q[None], k[None], v[None], mask=torch.from_numpy(mask[None]))
    assert_close(out, want[0], F32_TOL, F32_TOL, "3-d vs oracle")
    t = qkv.scaled_dot_product_attention(torch.from_numpy(q), torch.from_numpy(k),
                                         torch.from_numpy(v), is_causal=True,
                                         key_lengths=[7])
    assert isinstance(t, torch.Tensor) and t.shape == (3, 6, 5)


def test_strided_blhd_view_equals_contiguous():
    """A (B, L, H, D) projection permuted to (B, H, L, D) is read in place and gives the
    same bits as its contiguous copy (the same values through the same arithmetic)."""
    B, L, H, D = 2, 37, 4, 16
    blhd = [_rand((B, L, H, D), s) for s in (11, 12, 13)]
    views = [x.transpose(0, 2, 1, 3) for x in blhd]
    assert not views[0].flags.c_contiguous
    copies = [np.ascontiguousarray(x) for x in views]
    for kw in ({}, {"is_causal": True}, {"key_lengths": [5, 37], "window": (3, 2)}):
        assert_equal(qkv.scaled_dot_product_attention(*views, **kw),
                     qkv.scaled_dot_product_attention(*copies, **kw), f"strided {kw}")
        tv = [torch.from_numpy(x).permute(0, 2, 1, 3) for x in blhd]
        assert_equal(qkv.scaled_dot_product_attention(*tv, **kw).numpy(),
                     qkv.scaled_dot_product_attention(*copies, **kw), f"torch strided {kw}")


def test_other_strides():
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 2, 20, 8)).astype(np.float32)
    k = rng.standard_normal((2, 1, 30, 8)).astype(np.float32)
    v = rng.standard_normal((2, 1, 30, 8)).astype(np.float32)
    ref = qkv.scaled_dot_product_attention(q, np.repeat(k, 2, 1), np.repeat(v, 2, 1))
    # Broadcast (stride 0) heads: no copy, same result as the repeated heads.
    kb, vb = np.broadcast_to(k, (2, 2, 30, 8)), np.broadcast_to(v, (2, 2, 30, 8))
    assert kb.strides[1] == 0
    assert_equal(qkv.scaled_dot_product_attention(q, kb, vb), ref, "stride-0 heads")
    # Negative strides (reversed views) are copied first.
    rev = q[:, :, ::-1]
    assert_equal(qkv.scaled_dot_product_attention(rev, kb, vb),
                 qkv.scaled_dot_product_attention(np.ascontiguousarray(rev), kb, vb),
                 "negative strides")
    # Every other row; and a non-native byte order.
    step = q[:, :, ::2]
    assert_equal(qkv.scaled_dot_product_attention(step, kb, vb),
                 qkv.scaled_dot_product_attention(np.ascontiguousarray(step), kb, vb),
                 "step-2 view")
    swapped = q.astype(q.dtype.newbyteorder(">"))
    assert_equal(qkv.scaled_dot_product_attention(swapped, kb, vb),
                 qkv.scaled_dot_product_attention(q, kb, vb), "big-endian input")
    # Unaligned float32 data (offset by one byte inside a buffer) is copied first.
    buf = np.zeros(q.nbytes + 1, dtype=np.uint8)
    unaligned = np.ndarray(q.shape, dtype=np.float32, buffer=buf, offset=1)
    unaligned[...] = q
    assert not unaligned.flags.aligned
    assert_equal(qkv.scaled_dot_product_attention(unaligned, kb, vb),
                 qkv.scaled_dot_product_attention(q, kb, vb), "unaligned input")


def test_masks_of_every_kind_and_dtype():
    rng = np.random.default_rng(21)
    q, k, v = (rng.standard_normal((2, 2, 6, 8)).astype(np.float32) for _ in range(3))
    fmask = rng.standard_normal((6, 6)).astype(np.float32)
    want, _, _ = _oracle_np(q, k, v, mask=torch.from_numpy(fmask.astype(np.float64)))
    for mask in (fmask, fmask.astype(np.float64), torch.from_numpy(fmask),
                 torch.from_numpy(fmask).expand(2, 2, 6, 6)):
        assert_close(qkv.scaled_dot_product_attention(q, k, v, attn_mask=mask), want,
                     F32_TOL, F32_TOL, f"float mask {type(mask).__name__}")
    # 16-bit float masks are exact upcasts of their own values.
    m16 = torch.from_numpy(fmask).to(torch.bfloat16)
    want16, _, _ = _oracle_np(q, k, v, mask=m16.double())
    assert_close(qkv.scaled_dot_product_attention(q, k, v, attn_mask=m16), want16,
                 F32_TOL, F32_TOL, "bf16 mask")
    bmask = rng.random((2, 1, 6, 6)) < 0.5
    wantb, _, _ = _oracle_np(q, k, v, mask=torch.from_numpy(bmask))
    for mask in (bmask, torch.from_numpy(bmask)):
        assert_close(qkv.scaled_dot_product_attention(q, k, v, attn_mask=mask), wantb,
                     F32_TOL, F32_TOL, "bool mask")


def test_results_are_independent_writable_arrays():
    q = _rand((1, 1, 4, 4), 3)
    a = qkv.scaled_dot_product_attention(q, q, q)
    b = qkv.scaled_dot_product_attention(q, q, q)
    assert a.flags.writeable
    a[...] = 0
    assert not np.all(b == 0)
    del b
    import gc
    gc.collect()
    assert np.all(a == 0)


def test_self_attention_raw_against_torch():
    """softmax(x·xᵀ)·x with no scaling, vs torch in float64. x is small (0.3·N(0, 1)) so the
    softmax is not one-hot and the check sees every weight."""
    for shape in [(1, 1), (7, 5), (3, 17, 16), (2, 64, 32)]:
        x = (0.3 * np.random.default_rng(len(shape)).standard_normal(shape)).astype(np.float32)
        t = torch.from_numpy(x).double()
        want = torch.softmax(t @ t.transpose(-1, -2), dim=-1) @ t
        got = qkv.self_attention_raw(x)
        assert got.shape == x.shape and got.dtype == np.float32
        assert_close(got, want, F32_TOL, F32_TOL, f"self_attention_raw {shape}")
        scaled = torch.softmax((t @ t.transpose(-1, -2)) / np.sqrt(shape[-1]), dim=-1) @ t
        assert_close(qkv.self_attention_raw(x, scale=None), scaled, F32_TOL, F32_TOL,
                     f"self_attention_raw scale=None {shape}")
        half = qkv.self_attention_raw(torch.from_numpy(x).to(torch.bfloat16))
        assert half.dtype == torch.bfloat16
        tb = torch.from_numpy(x).to(torch.bfloat16).double()
        want_b = torch.softmax(tb @ tb.transpose(-1, -2), dim=-1) @ tb
        assert_close(half, want_b, F32_TOL + weight_rounding_atol(tb, torch.bfloat16),
                     2.0 ** -8 + 2.0 ** -20, "bf16 raw")
