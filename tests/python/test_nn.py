"""qkv.nn against torch.nn (1.13) with the same weights, torch modules in eval mode.

The oracle is the torch module in float64 fed the same float32 inputs, so the difference
is qkv's float32 rounding alone. A chain of f32 dot products of at most K terms is off by
about K·u·Σ|terms| per product (u = 2^-24); with inputs and weights of order 1 the
outputs' error is bounded by c·K·u·(1 + max|ref|), c counting the chained products
(projections, scores, weighted sum, output projection, feed-forward: < 16) with a factor
2 of slack for the softmax and layer-norm roundings: c = 32 per layer.
"""

import math

import numpy as np
import pytest
import torch

import qkv
import qkv.nn as qnn

U = 2.0**-24


def tol(k, ref, layers=1):
    """32·K·u·(1 + max|ref|) per layer: see the module docstring."""
    ref = ref.detach().double().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
    return 32 * k * U * (1 + float(np.abs(ref).max(initial=0))) * layers


def check(got, want, bound, what=""):
    got = got.detach().double().numpy() if isinstance(got, torch.Tensor) else np.asarray(got, np.float64)
    want = want.detach().double().numpy() if isinstance(want, torch.Tensor) else np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert not np.isnan(got).any(), f"{what}: NaN in output"
    err = np.abs(got - want)
    worst = np.unravel_index(int(err.argmax()), err.shape) if err.size else ()
    assert err.size == 0 or err.max() <= bound, (
        f"{what}: max error {err.max():.3g} at {worst} exceeds {bound:.3g}")


def randn(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float32)


def randomize(module, seed=0):
    """torch initialises biases to zero and LayerNorm to (1, 0): make every parameter
    random so a mixed-up name or layout cannot pass."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.3 if p.dim() > 1 else 0.5))
    return module.eval()


# --------------------------------------------------------------------------------------
# Functional pieces.


@pytest.mark.parametrize("shape,out", [((5, 7), 3), ((2, 3, 64), 33), ((1, 129), 65)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear(shape, out, bias):
    lin = randomize(torch.nn.Linear(shape[-1], out, bias=bias))
    x = randn(*shape, seed=1)
    got = qnn.linear(x, lin.weight, lin.bias if bias else None)
    assert isinstance(got, torch.Tensor)
    want = lin.double()(x.double())
    check(got, want, tol(shape[-1], want), "linear")
    got_np = qnn.linear(x.numpy(), lin.weight.detach().numpy(),
                        lin.bias.detach().numpy() if bias else None)
    assert isinstance(got_np, np.ndarray)
    check(got_np, want, tol(shape[-1], want), "linear numpy")


def test_layer_norm_and_activations():
    x = randn(3, 4, 17, seed=2) * 3
    ln = randomize(torch.nn.LayerNorm(17, eps=1e-6))
    want = ln.double()(x.double())
    check(qnn.layer_norm(x, 17, ln.weight, ln.bias, 1e-6), want, tol(17, want), "layer_norm")
    want = torch.nn.functional.layer_norm(x.double(), (4, 17))
    check(qnn.layer_norm(x, (4, 17)), want, tol(68, want), "layer_norm 2-d, no affine")
    for approximate in ("none", "tanh"):
        want = torch.nn.functional.gelu(x.double(), approximate=approximate)
        check(qnn.gelu(x, approximate), want, 4 * U * (1 + want.abs().max().item()), approximate)
    check(qnn.relu(x), torch.relu(x), 0.0, "relu")


def test_sinusoidal_against_formula():
    L, D = 40, 10
    pe = qnn.sinusoidal_positional_encoding(L, D)
    p = np.arange(L)[:, None]
    i = np.arange(0, D, 2)[None, :]
    angle = p / 10000.0 ** (i / D)
    want = np.zeros((L, D))
    want[:, 0::2] = np.sin(angle)
    want[:, 1::2] = np.cos(angle)
    check(pe, want, U, "sinusoidal")  # |sin| <= 1, rounded once


def test_rope_against_formula():
    B, H, L, D, offset = 2, 3, 6, 8, 5
    x = randn(B, H, L, D, seed=3).numpy()
    got = qnn.apply_rope(x, offset=offset)
    theta = 10000.0 ** (-np.arange(D // 2) * 2.0 / D)
    angle = (offset + np.arange(L))[:, None] * theta[None, :]
    cos = np.concatenate([np.cos(angle)] * 2, -1)
    sin = np.concatenate([np.sin(angle)] * 2, -1)
    rot = np.concatenate([-x[..., D // 2:], x[..., :D // 2]], -1)  # rotate_half
    want = x * cos + rot * sin
    check(got, want, 8 * U * (1 + np.abs(x).max()), "rope")  # cos, sin rounded; 2 products, 1 sum


def _reference_alibi(n):
    # Press et al., github.com/ofirpress/attention_with_linear_biases, get_slopes.
    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start**i for i in range(n)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + _reference_alibi(2 * closest)[0::2][:n - closest]


@pytest.mark.parametrize("heads", [1, 2, 5, 6, 8, 12, 16, 20, 33])
def test_alibi_slopes(heads):
    np.testing.assert_allclose(qnn.alibi_slopes(heads), _reference_alibi(heads), rtol=U)


# --------------------------------------------------------------------------------------
# MultiheadAttention.


def make_mha(E, H, bias=True, kdim=None, vdim=None, batch_first=False, seed=0):
    ref = randomize(torch.nn.MultiheadAttention(E, H, bias=bias, kdim=kdim, vdim=vdim,
                                                batch_first=batch_first), seed)
    ours = qkv.MultiheadAttention(E, H, bias=bias, kdim=kdim, vdim=vdim, batch_first=batch_first)
    ours.load_state_dict(ref.state_dict())
    return ref.double(), ours


def run_ref(ref, q, k, v, **kw):
    with torch.no_grad():
        return ref(q.double(), k.double(), v.double(), need_weights=True, **kw)


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_mha_self(batch_first, bias):
    E, H, B, L = 16, 4, 3, 7
    ref, ours = make_mha(E, H, bias=bias, batch_first=batch_first)
    x = randn(B, L, E, seed=1) if batch_first else randn(L, B, E, seed=1)
    want, want_w = run_ref(ref, x, x, x)
    got, got_w = ours(x, x, x)
    check(got, want, tol(E, want), "self out")
    check(got_w, want_w, tol(E, want_w), "self weights")


def test_mha_causal_mask_and_is_causal():
    E, H, B, L = 16, 2, 2, 9
    ref, ours = make_mha(E, H, batch_first=True)
    x = randn(B, L, E, seed=2)
    causal = torch.triu(torch.ones(L, L, dtype=torch.bool), 1)  # True = not allowed
    want, want_w = run_ref(ref, x, x, x, attn_mask=causal, average_attn_weights=False)
    for kwargs in ({"attn_mask": causal}, {"is_causal": True}):
        got, got_w = ours(x, x, x, average_attn_weights=False, **kwargs)
        assert got_w.shape == (B, H, L, L)
        check(got, want, tol(E, want), f"causal {list(kwargs)}")
        check(got_w, want_w, tol(E, want_w), f"causal weights {list(kwargs)}")


def test_mha_cross_and_kdim_vdim():
    E, H, B, L, S = 12, 3, 2, 4, 11
    ref, ours = make_mha(E, H)
    q, kv = randn(L, B, E, seed=3), randn(S, B, E, seed=4)
    want, want_w = run_ref(ref, q, kv, kv)
    got, got_w = ours(q, kv, kv)
    check(got, want, tol(E, want), "cross")
    check(got_w, want_w, tol(E, want_w), "cross weights")
    ref, ours = make_mha(E, H, kdim=5, vdim=7)
    assert {"q_proj_weight", "k_proj_weight", "v_proj_weight"} <= set(ours.state_dict())
    k, v = randn(S, B, 5, seed=5), randn(S, B, 7, seed=6)
    want, want_w = run_ref(ref, q, k, v)
    got, got_w = ours(q, k, v)
    check(got, want, tol(E, want), "kdim/vdim")
    check(got_w, want_w, tol(E, want_w), "kdim/vdim weights")


def test_mha_masks():
    E, H, B, L, S = 8, 2, 3, 5, 6
    ref, ours = make_mha(E, H, batch_first=True, seed=3)
    q, kv = randn(B, L, E, seed=7), randn(B, S, E, seed=8)
    kpm = torch.tensor([[False, False, False, False, True, True],   # suffix
                        [True, False, False, True, False, False],   # not a suffix
                        [False] * 6])                                 # no padding
    am_bool = torch.zeros(L, S, dtype=torch.bool)
    am_bool[torch.arange(L), torch.arange(L) + 1] = True  # block j = i + 1 (never a whole row)
    am_float = randn(B * H, L, S, seed=9)
    kpm_float = torch.where(kpm, -1e4, 0.0) + randn(B, S, seed=10) * 0.1
    cases = {
        "kpm": dict(key_padding_mask=kpm),
        "bool attn_mask": dict(attn_mask=am_bool),
        "float attn_mask (B*H, L, S)": dict(attn_mask=am_float),
        "bool attn_mask + kpm": dict(attn_mask=am_bool, key_padding_mask=kpm),
        "float attn_mask + bool kpm": dict(attn_mask=am_float, key_padding_mask=kpm),
        "float kpm": dict(key_padding_mask=kpm_float),
    }
    for name, kw in cases.items():
        ref_kw = {k: (v.double() if v.is_floating_point() else v) for k, v in kw.items()}
        for average in (True, False):
            want, want_w = run_ref(ref, q, kv, kv, average_attn_weights=average, **ref_kw)
            got, got_w = ours(q, kv, kv, average_attn_weights=average, **kw)
            check(got, want, tol(E, want), name)
            check(got_w, want_w, tol(E, want_w), f"{name} weights average={average}")
        # numpy masks as well
        got_np, _ = ours(q.numpy(), kv.numpy(), kv.numpy(),
                         **{k: v.numpy() for k, v in kw.items()})
        check(got_np, want, tol(E, want), f"{name} numpy")


def test_mha_no_weights_unbatched_and_kinds():
    E, H, L = 8, 4, 5
    ref, ours = make_mha(E, H)
    x = randn(L, E, seed=11)
    want, want_w = run_ref(ref, x, x, x)
    got, got_w = ours(x, x, x)
    check(got, want, tol(E, want), "unbatched")
    check(got_w, want_w, tol(E, want_w), "unbatched weights")
    out, w = ours(x.numpy(), x.numpy(), x.numpy(), need_weights=False)
    assert w is None and isinstance(out, np.ndarray) and out.dtype == np.float32
    out64, _ = ours(x.double().numpy(), x.double().numpy(), x.double().numpy())
    assert out64.dtype == np.float64
    check(out64, want, tol(E, want), "float64 input")


def test_mha_errors():
    with pytest.raises(ValueError, match="num_heads"):
        qkv.MultiheadAttention(10, 3)
    ref, ours = make_mha(8, 2)
    sd = ref.state_dict()
    missing = {k: v for k, v in sd.items() if k != "out_proj.weight"}
    with pytest.raises(ValueError, match="out_proj.weight"):
        ours.load_state_dict(missing)
    with pytest.raises(ValueError, match="in_proj_weight"):
        ours.load_state_dict({**sd, "in_proj_weight": torch.zeros(8, 8)})
    with pytest.raises(ValueError, match="bias_k"):
        ours.load_state_dict({**sd, "bias_k": torch.zeros(1, 1, 8)})
    ours.load_state_dict({**sd, "bias_k": torch.zeros(1, 1, 8)}, strict=False)
    x = randn(3, 2, 8)
    with pytest.raises(ValueError, match="query"):
        ours(randn(3, 2, 6), x, x)
    with pytest.raises(ValueError, match="key_padding_mask"):
        ours(x, x, x, key_padding_mask=torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="attn_mask"):
        ours(x, x, x, attn_mask=torch.zeros(3, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="key_padding_mask"):
        ours(x, x, x, key_padding_mask=torch.zeros(2, 3, dtype=torch.int64))


# --------------------------------------------------------------------------------------
# Encoder / decoder layers and the Transformer.

LAYER_CASES = [(nf, act) for nf in (False, True) for act in ("relu", "gelu")]


@pytest.mark.parametrize("norm_first,activation", LAYER_CASES)
def test_encoder_layer(norm_first, activation):
    E, H, F, B, L = 16, 4, 24, 2, 6
    ref = randomize(torch.nn.TransformerEncoderLayer(E, H, F, activation=activation,
                                                     norm_first=norm_first), 1)
    ours = qkv.TransformerEncoderLayer(E, H, F, activation=activation, norm_first=norm_first)
    ours.load_state_dict(ref.state_dict())
    ref = ref.double()
    x = randn(L, B, E, seed=12)
    causal = torch.triu(torch.ones(L, L, dtype=torch.bool), 1)
    kpm = torch.tensor([[False] * L, [False] * (L - 2) + [True] * 2])
    with torch.no_grad():
        want = ref(x.double(), src_mask=causal, src_key_padding_mask=kpm)
    got = ours(x, src_mask=causal, src_key_padding_mask=kpm)
    check(got, want, tol(F, want), f"encoder norm_first={norm_first} {activation}")
    got = ours(x, is_causal=True, src_key_padding_mask=kpm)
    check(got, want, tol(F, want), "encoder is_causal")


@pytest.mark.parametrize("norm_first,activation", LAYER_CASES)
def test_decoder_layer(norm_first, activation):
    E, H, F, B, T, S = 16, 2, 20, 2, 5, 7
    ref = randomize(torch.nn.TransformerDecoderLayer(E, H, F, activation=activation,
                                                     norm_first=norm_first, batch_first=True), 2)
    ours = qkv.TransformerDecoderLayer(E, H, F, activation=activation, norm_first=norm_first,
                                       batch_first=True)
    ours.load_state_dict(ref.state_dict())
    ref = ref.double()
    tgt, mem = randn(B, T, E, seed=13), randn(B, S, E, seed=14)
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    mkpm = torch.tensor([[False] * S, [True] + [False] * (S - 1)])
    with torch.no_grad():
        want = ref(tgt.double(), mem.double(), tgt_mask=causal, memory_key_padding_mask=mkpm)
    got = ours(tgt, mem, tgt_mask=causal, memory_key_padding_mask=mkpm)
    check(got, want, tol(F, want), f"decoder norm_first={norm_first} {activation}")


@pytest.mark.parametrize("norm_first,activation", LAYER_CASES)
def test_transformer(norm_first, activation):
    E, H, F, B, S, T = 16, 4, 32, 2, 6, 4
    ref = randomize(torch.nn.Transformer(E, H, 2, 2, F, activation=activation,
                                         norm_first=norm_first), 3)
    ours = qkv.Transformer(E, H, 2, 2, F, activation=activation, norm_first=norm_first)
    assert [n for n, _ in ours.parameter_shapes()] == list(ref.state_dict().keys())
    ours.load_state_dict(ref.state_dict())
    ref = ref.double()
    src, tgt = randn(S, B, E, seed=15), randn(T, B, E, seed=16)
    tgt_mask = torch.nn.Transformer.generate_square_subsequent_mask(T)  # float −inf above
    with torch.no_grad():
        want = ref(src.double(), tgt.double(), tgt_mask=tgt_mask.double())
    got = ours(src, tgt, tgt_mask=tgt_mask)
    check(got, want, tol(F, want, layers=4), f"transformer norm_first={norm_first} {activation}")
    got = ours(src.numpy(), tgt.numpy(), tgt_is_causal=True)
    assert isinstance(got, np.ndarray)
    check(got, want, tol(F, want, layers=4), "transformer tgt_is_causal, numpy")


def test_layer_errors():
    with pytest.raises(ValueError, match="activation"):
        qkv.TransformerEncoderLayer(8, 2, activation="swish")
    ref = torch.nn.TransformerEncoderLayer(8, 2, 16)
    ours = qkv.TransformerEncoderLayer(8, 2, 16)
    sd = dict(ref.state_dict())
    sd["linear1.weight"] = torch.zeros(16, 4)
    with pytest.raises(ValueError, match="linear1.weight"):
        ours.load_state_dict(sd)
    with pytest.raises(ValueError, match="src"):
        ours(randn(3, 2, 6))


# --------------------------------------------------------------------------------------
# Vector attention against lucidrains' PointTransformerLayer.forward, written out in torch.


def _point_transformer_reference(sd, x, pos, num_neighbors):
    lin = torch.nn.functional.linear
    q, k, v = lin(x, sd["to_qkv.weight"]).chunk(3, dim=-1)
    rel_pos = pos[:, :, None, :] - pos[:, None, :, :]
    rel_pos_emb = lin(torch.relu(lin(rel_pos, sd["pos_mlp.0.weight"], sd["pos_mlp.0.bias"])),
                      sd["pos_mlp.2.weight"], sd["pos_mlp.2.bias"])
    qk_rel = q[:, :, None, :] - k[:, None, :, :]
    v = v[:, None, :, :].expand_as(qk_rel)
    if num_neighbors:
        _, idx = rel_pos.norm(dim=-1).topk(num_neighbors, largest=False)
        gather = lambda t: t.gather(2, idx[..., None].expand(*idx.shape, t.shape[-1]))  # noqa: E731
        v, qk_rel, rel_pos_emb = gather(v), gather(qk_rel), gather(rel_pos_emb)
    v = v + rel_pos_emb
    sim = lin(torch.relu(lin(qk_rel + rel_pos_emb, sd["attn_mlp.0.weight"], sd["attn_mlp.0.bias"])),
              sd["attn_mlp.2.weight"], sd["attn_mlp.2.bias"])
    attn = sim.softmax(dim=-2)
    return (attn * v).sum(dim=2)


@pytest.mark.parametrize("num_neighbors", [None, 1, 5])
def test_vector_attention(num_neighbors):
    B, N, C = 2, 12, 8
    ours = qnn.VectorAttention(C, pos_mlp_hidden_dim=16, attn_mlp_hidden_mult=2,
                               num_neighbors=num_neighbors)
    shapes = dict(ours.parameter_shapes())
    sd = {name: randn(*shape, seed=i) * 0.4 for i, (name, shape) in enumerate(shapes.items())}
    ours.load_state_dict(sd)
    x, pos = randn(B, N, C, seed=20), randn(B, N, 3, seed=21)
    want = _point_transformer_reference({k: v.double() for k, v in sd.items()}, x.double(),
                                        pos.double(), num_neighbors)
    got = ours(x, pos)
    check(got, want, tol(16, want, layers=2), f"vector attention k={num_neighbors}")
    with pytest.raises(ValueError, match="pos"):
        ours(x, pos[..., :2])
