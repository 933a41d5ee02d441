"""The Vision Transformer (include/qkv/vit.h) against its torch 1.13 twin,
scripts/bench/vit_torch.py's TorchVit: patches through nn.Linear (a flattened Conv2d), a
class token, learned or 2-D sine-cosine positions, plain or shifted patches (SPT), nn.TransformerEncoderLayer(norm_first,
gelu, eps 1e-6, dropout 0) blocks, a LayerNorm and a head on the class token.

  - patchify (_vit_patchify): torch's unfold order, and Linear on it is the Conv2d;
  - the sine-cosine table (_vit_sincos_positions): the formula of vit.h, written in torch;
  - the initial weights (_vit_initial): the twin's names and shapes, float32, seeded;
  - the forward logits (_vit_forward) of the same weights and images;
  - every block's attention probabilities, from the twin's self_attn on norm1(x);
  - every gradient (_vit_backward) against torch autograd;
  - attention rollout (_vit_rollout) against NumPy;
  - patch dropout (kept=): the logits and every gradient of a forward on a subset of the
    patches against the twin's, which drops the tokens after adding their positions;
  - bad input raises ValueError / TypeError naming the problem.

The weights are _vit_initial's moved by N(0, 0.1²) entrywise: its head is zero and its
gains 1 and biases 0, which would hide a head, gain or bias used in the wrong place. The
oracle runs in float64; qkv computes in float32, so the differences are qkv's float32
rounding (unit roundoff u = 2⁻²⁴ ≈ 6e-8). Each tolerance is written beside its check.
"""
import os
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from qkv import _qkv

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts")
sys.path.insert(0, SCRIPTS)
from bench.vit_torch import (load_qkv_weights, make_vit_class, parameter_names, patchify,  # noqa: E402
                             sincos_positions_2d, state_numpy)

TorchVit = make_vit_class()
U = 2.0 ** -24  # float32's unit roundoff

CONFIGS = {
    # one channel, 4×4 patches (N = 4), learned positions, several heads of width 4
    "learned": dict(image_size=8, channels=1, patch_size=4, dim=8, layers=2, heads=2, mlp_dim=12,
                    classes=3, learned_positions=True),
    # two channels, 2×2 patches (N = 16, T = 17), fixed sine-cosine positions, 3 heads
    "sincos": dict(image_size=8, channels=2, patch_size=2, dim=12, layers=2, heads=3, mlp_dim=20,
                   classes=4, learned_positions=False),
    # Shifted Patch Tokenization: two channels become ten, 4×4 patches shifted by 2, the
    # patches normalised (patch_norm) before the embedding
    "shifted": dict(image_size=8, channels=2, patch_size=4, dim=8, layers=2, heads=2, mlp_dim=12,
                    classes=3, learned_positions=True, shifted_patches=True),
}


def perturbed_initial(config, seed=3):
    """_vit_initial's weights with every entry moved by N(0, 0.1²), float32."""
    w = _qkv._vit_initial(config, seed)
    rng = np.random.default_rng(7)
    return {name: (a + 0.1 * rng.standard_normal(a.shape)).astype(np.float32) for name, a in w.items()}


def images_of(config, B=3, seed=5):
    c = config
    rng = np.random.default_rng(seed)
    return rng.standard_normal((B, c["channels"], c["image_size"], c["image_size"])).astype(np.float32)


def twin_of(config, weights):
    return TorchVit(config, weights, dtype=torch.float64)


def norm_close(got, want, rtol, floor=0.0, what=""):
    """‖got − want‖ ≤ rtol·‖want‖ + floor (Frobenius norms, float64); a failure prints the
    error, the scale and the worst entry."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    err, scale = np.linalg.norm(got - want), np.linalg.norm(want)
    worst = np.unravel_index(np.argmax(np.abs(got - want)), got.shape) if got.size else ()
    assert err <= rtol * scale + floor, (f"{what}: ‖Δ‖ {err:.3g} > {rtol:g}·‖want‖ {scale:.3g} + {floor:g}; "
                                         f"worst at {worst}: {got[worst]} vs {want[worst]}")


# ---------------------------------------------------------------------------------------
# The pieces.

@pytest.mark.parametrize("B, C, H, W, P", [(2, 1, 8, 8, 4), (2, 2, 8, 8, 2), (1, 3, 4, 6, 2), (2, 2, 6, 6, 3),
                                           (1, 1, 5, 5, 1), (1, 2, 4, 4, 4)])
def test_patchify_is_torch_unfold_order(B, C, H, W, P):
    rng = np.random.default_rng(B * 100 + C * 10 + P)
    images = rng.standard_normal((B, C, H, W)).astype(np.float32)
    got = _qkv._vit_patchify(images, P)
    # F.unfold: (B, C·P·P, N), features in (c, ky, kx) order, patches row-major. Both are
    # copies of the same float32 values: exactly equal.
    want = F.unfold(torch.from_numpy(images), kernel_size=P, stride=P).transpose(1, 2).numpy()
    assert got.dtype == np.float32 and got.shape == (B, (H // P) * (W // P), C * P * P)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(patchify(torch.from_numpy(images), P).numpy(), want)
    # a strided view (the channels reversed, W reversed) is read by its strides
    view = images[:, ::-1, :, ::-1]
    want_view = F.unfold(torch.from_numpy(view.copy()), kernel_size=P, stride=P).transpose(1, 2).numpy()
    np.testing.assert_array_equal(_qkv._vit_patchify(view, P), want_view)


def test_linear_on_patches_is_the_conv2d():
    """vit.h: patch_embed is Conv2d(C, d, P, stride P) with its kernel flattened to
    (d, C·P·P): the twin's patchify + Linear equals F.conv2d of the reshaped kernel."""
    rng = np.random.default_rng(1)
    B, C, H, P, d = 2, 3, 6, 3, 5
    x = torch.from_numpy(rng.standard_normal((B, C, H, H)))
    weight, bias = torch.from_numpy(rng.standard_normal((d, C * P * P))), torch.from_numpy(rng.standard_normal(d))
    linear = patchify(x, P) @ weight.T + bias                                       # (B, N, d)
    conv = F.conv2d(x, weight.reshape(d, C, P, P), bias, stride=P).flatten(2).transpose(1, 2)
    # float64 sums of 27 products in two orders: ~27·2⁻⁵³·Σ|terms| ≈ 1e-14 absolute
    np.testing.assert_allclose(linear.numpy(), conv.numpy(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("grid, dim", [(1, 4), (2, 8), (4, 12), (7, 16), (14, 128)])
def test_sincos_table_is_the_formula(grid, dim):
    got = _qkv._vit_sincos_positions(grid, dim)
    want = sincos_positions_2d(grid, dim).numpy()
    assert got.dtype == np.float32 and got.shape == (1 + grid * grid, dim)
    # qkv computes each entry in double and rounds it once to float32; entries are in
    # [−1, 1], so that rounding moves one by ≤ u; a last-bit difference between libm's and
    # torch's double sin/pow can tip a rounding to the neighbour: ≤ 2u (measured: u/2).
    np.testing.assert_allclose(got, want, rtol=0, atol=2 * U)
    # and the formula's landmarks, independent of either implementation: row 0 zeros;
    # patch (0, 0) is [0…, 1…, 0…, 1…]; the x half depends on gx only, the y half on gy only
    q = dim // 4
    assert np.all(got[0] == 0)
    np.testing.assert_array_equal(got[1], np.repeat([0, 1, 0, 1], q).astype(np.float32))
    cells = got[1:].reshape(grid, grid, dim)  # (gy, gx, d)
    np.testing.assert_array_equal(cells[:, :, :2 * q], np.broadcast_to(cells[:1, :, :2 * q], cells[:, :, :2 * q].shape))
    np.testing.assert_array_equal(cells[:, :, 2 * q:], np.broadcast_to(cells[:, :1, 2 * q:], cells[:, :, 2 * q:].shape))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_initial_weights(name):
    config = CONFIGS[name]
    w = _qkv._vit_initial(config, 5)
    assert list(w) == parameter_names(config)  # the same names, in the same order
    twin = TorchVit(config)
    shapes = {n: tuple(p.shape) for n, p in twin.named_parameters()}
    assert sorted(shapes) == sorted(parameter_names(config))  # torch lists them in its own order
    for n, a in w.items():
        assert a.dtype == np.float32 and a.shape == shapes[n] and np.all(np.isfinite(a)), n
    # vit.h: the head zero; the class token (and learned positions) N(0, 0.02²): all of
    # their d (·(1 + N)) draws within 6 σ, not all zero
    assert np.all(w["head.weight"] == 0) and np.all(w["head.bias"] == 0)
    for n in ("cls_token", "pos_embed") if config["learned_positions"] else ("cls_token",):
        assert 0 < np.abs(w[n]).max() < 6 * 0.02, n
    again, other = _qkv._vit_initial(config, 5), _qkv._vit_initial(config, 6)
    assert all(np.array_equal(w[n], again[n]) for n in w)
    assert not np.array_equal(w["patch_embed.weight"], other["patch_embed.weight"])
    load_qkv_weights(twin, w)  # strictly, under its own names
    state = state_numpy(twin)
    assert list(state) == list(w) and all(np.array_equal(state[n], w[n]) for n in w)
    # an empty config is vit.h's defaults, and the twin agrees on them
    assert list(_qkv._vit_initial({}, 0)) == parameter_names({})


# ---------------------------------------------------------------------------------------
# The model against the twin.

@pytest.mark.parametrize("name", list(CONFIGS))
def test_forward_matches_torch(name):
    config = CONFIGS[name]
    w = perturbed_initial(config)
    x = images_of(config)
    logits = _qkv._vit_forward(config, w, x)
    with torch.no_grad():
        want = twin_of(config, w)(torch.from_numpy(x).double()).numpy()
    assert logits.dtype == np.float32 and logits.shape == (3, config["classes"])
    # Each logit is the end of a chain of ~10 rounded operations per block (sums of at most
    # max(d, T, C·P², mlp_dim) ≤ 20 products, each off by ≤ 20u relative at worst and
    # ~√20·u typically; softmax; LayerNorm's 1/σ, which can amplify by ‖x‖/σ), over 2
    # blocks, the patch embedding and the head: a few hundred u ≈ 1e-5 relative in the
    # worst case. Measured (norm-wise): qkv 1.6e-7 and 0.8e-7, torch's own float32 forward
    # 2.6e-7 and 1.6e-7 of float64. The bound 1e-5 of ‖logits‖ and, per entry, 1e-5 of the
    # largest logit.
    norm_close(logits, want, 1e-5, what="logits")
    np.testing.assert_allclose(logits, want, rtol=0, atol=1e-5 * np.abs(want).max())
    # probs=True changes nothing but what comes back
    again, probs = _qkv._vit_forward(config, w, x, probs=True)
    np.testing.assert_allclose(again, logits, rtol=0, atol=1e-5 * np.abs(want).max())
    assert len(probs) == config["layers"]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_attention_probabilities_match_torch(name):
    """Each block's (B, heads, T, T) probabilities against the twin's self_attn on norm1(x)
    (nn.TransformerEncoderLayer returns none itself), need_weights per head."""
    config = CONFIGS[name]
    w = perturbed_initial(config)
    x = images_of(config)
    _, probs = _qkv._vit_forward(config, w, x, probs=True)
    T = (config["image_size"] // config["patch_size"]) ** 2 + 1
    for n, want in enumerate(twin_probabilities(config, w, x)):
        got = probs[n]
        assert got.dtype == np.float32 and got.shape == (3, config["heads"], T, T)
        # A probability p = softmax(s) moves by p(1 − p)·Δs ≤ Δs/4 for a score error Δs.
        # A score s = q·k/√Dk (|s| ≲ 5 here) carries the block input's relative error
        # (~1e-7, as the logits) plus Dk·u of its own sum: Δs ≲ 1e-6, Δp ≲ 3e-7; 2e-6
        # absolute (measured: 7e-8). Rows sum to 1 within a rounding per term, T·u, x4.
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-6, err_msg=f"block {n}")
        np.testing.assert_allclose(got.sum(-1), 1.0, rtol=0, atol=T * U * 4, err_msg=f"block {n}")


def twin_probabilities(config, weights, x):
    """The twin's float64 attention probabilities of each block, (B, heads, T, T) NumPy:
    its self_attn on norm1(x) (nn.TransformerEncoderLayer returns none itself)."""
    twin = twin_of(config, weights)
    out = []
    with torch.no_grad():
        h = twin.embed(torch.from_numpy(x).double())
        for block in twin.blocks:
            y = block.norm1(h)
            _, p = block.self_attn(y, y, y, need_weights=True, average_attn_weights=False)
            out.append(p.numpy())
            h = block(h)
    return out


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_gradient_matches_torch(name):
    config = CONFIGS[name]
    w = perturbed_initial(config)
    x = images_of(config)
    dlogits = np.random.default_rng(9).standard_normal((3, config["classes"])).astype(np.float32)
    grads = _qkv._vit_backward(config, w, x, dlogits)

    twin = twin_of(config, w)
    logits = twin(torch.from_numpy(x).double())
    logits.backward(torch.from_numpy(dlogits).double())
    assert list(grads) == parameter_names(config)
    assert sorted(n for n, _ in twin.named_parameters()) == sorted(grads)
    for n, p in twin.named_parameters():
        g = grads[n]
        assert g.dtype == np.float32 and g.shape == tuple(p.shape), n
        ref = p.grad.numpy()
        # Gradients run the forward's chain back through both blocks (~20 rounded products
        # and sums per entry, each ≤ 20u relative), so a few hundred u ≈ 2e-5 of the
        # tensor's norm at worst. Measured, the worst tensor: qkv 5.3e-7 of its norm, torch's
        # float32 4.2e-7. The floor covers tensors whose exact gradient is 0 or nearly (the key
        # bias: a constant added to every key's score does not change softmax, so its
        # gradient is rounding alone, ~u·‖dlogits‖·‖weights‖ ≈ 1e-7).
        norm_close(g, ref, 2e-5, floor=1e-6, what=n)
        np.testing.assert_allclose(g, ref, rtol=0, atol=1e-4 * np.abs(ref).max() + 1e-6, err_msg=n)
    # the class token's gradient is the sum over the batch of the first block input's row 0,
    # and the learned positions' row 0 is that same sum: identical, bit for bit
    if config["learned_positions"]:
        np.testing.assert_array_equal(grads["pos_embed"][0], grads["cls_token"])


def rollout_numpy(probs, b, residual=True):
    """Abnar & Zuidema's rollout as vit.h states it: per layer A = (mean_h P_h + I) / 2,
    each row divided by its sum, R = A·R from the first layer to the last; the class token's
    row, without itself. residual=False: the product of the heads' means alone (the form
    without the residual path, for contrast)."""
    T = probs[0].shape[-1]
    R = np.eye(T)
    for p in probs:
        mean = np.asarray(p[b], dtype=np.float64).mean(axis=0)
        A = 0.5 * (mean + np.eye(T)) if residual else mean
        A = A / A.sum(axis=1, keepdims=True)
        R = A @ R
    return R[0, 1:]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_rollout_matches_numpy(name):
    config = CONFIGS[name]
    w = perturbed_initial(config)
    _, probs = _qkv._vit_forward(config, w, images_of(config), probs=True)
    for b in range(3):
        got = _qkv._vit_rollout(probs, b)
        want = rollout_numpy(probs, b)
        assert got.dtype == np.float32 and got.shape == (len(want),)
        # both in double from the same float32 probabilities; qkv rounds its result once to
        # float32 (≤ u, values ≤ 1); the two orders of summation differ by ~T·2⁻⁵³.
        # Measured: 7e-9.
        np.testing.assert_allclose(got, want, rtol=0, atol=2 * U, err_msg=f"b = {b}")
        # the rows of each A sum to 1, so the class token's row of R does: the patches get
        # all of it but the class token's own share
        assert np.all(got > 0) and got.sum() < 1
    # tuples of layers too; one layer: A's row 0 itself
    np.testing.assert_allclose(_qkv._vit_rollout(tuple(probs[:1]), 0), rollout_numpy(probs[:1], 0), rtol=0, atol=2 * U)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_rollout_matches_the_torch_twin(name):
    """qkv's rollout (its float32 probabilities) against Abnar & Zuidema's computed in float64
    from the twin's own probabilities: the whole chain from the weights to the map, the
    residual form included — the form without the residual is far from qkv's."""
    config = CONFIGS[name]
    w = perturbed_initial(config)
    x = images_of(config)
    _, probs = _qkv._vit_forward(config, w, x, probs=True)
    twin = twin_probabilities(config, w, x)
    T = twin[0].shape[-1]
    for b in range(3):
        got = _qkv._vit_rollout(probs, b).astype(np.float64)
        want = rollout_numpy(twin, b)
        # Each probability within 2e-6 of the twin's (test_attention_probabilities_match_torch),
        # so each entry of A within 1e-6 and each row of A within T·1e-6 in sum; a product of
        # row-stochastic matrices adds the rows' errors layer by layer: |ΔR| ≤ layers·T·1e-6
        # (3.4e-5 for T = 17). Measured: below 1e-7.
        tol = len(probs) * T * 1e-6
        np.testing.assert_allclose(got, want, rtol=0, atol=tol, err_msg=f"b = {b}")
        plain = rollout_numpy(twin, b, residual=False)
        assert np.abs(got - plain).max() > 100 * tol, f"b = {b}: the rollout without the residual is as close"


@pytest.mark.parametrize("name", list(CONFIGS))
def test_patch_dropout_matches_torch(name):
    """kept: each image's own subset of its patches (_vit_random_patches). qkv embeds only
    those patches and adds each its position; the twin embeds all, adds the positions, then
    keeps the rows 1 + kept. Same logits and gradients (tolerances as the full model's
    above); the positions of patches no image kept get no gradient."""
    config = CONFIGS[name]
    N = (config["image_size"] // config["patch_size"]) ** 2
    K = max(1, N // 2)
    w = perturbed_initial(config)
    x = images_of(config)
    kept = _qkv._vit_random_patches(3, N, K, 17)
    assert kept.dtype == np.int64 and kept.shape == (3, K)
    assert all(len(set(row)) == K and list(row) == sorted(row) for row in kept.tolist())
    assert len({tuple(row) for row in kept.tolist()}) > 1, "each image draws its own subset"
    logits = _qkv._vit_forward(config, w, x, kept=kept)
    twin = twin_of(config, w)
    with torch.no_grad():
        want = twin(torch.from_numpy(x).double(), kept=kept).numpy()
        full = twin(torch.from_numpy(x).double()).numpy()
    norm_close(logits, want, 1e-5, what="logits")
    assert np.abs(want - full).max() > 1e-3, "dropping patches must change the logits"
    _, probs = _qkv._vit_forward(config, w, x, probs=True, kept=kept)
    assert probs[0].shape == (3, config["heads"], 1 + K, 1 + K)

    dlogits = np.random.default_rng(9).standard_normal((3, config["classes"])).astype(np.float32)
    grads = _qkv._vit_backward(config, w, x, dlogits, kept=kept)
    twin.zero_grad()
    twin(torch.from_numpy(x).double(), kept=kept).backward(torch.from_numpy(dlogits).double())
    for n, p in twin.named_parameters():
        norm_close(grads[n], p.grad.numpy(), 2e-5, floor=1e-6, what=n)
    if config["learned_positions"]:
        unused = sorted(set(range(N)) - set(kept.ravel().tolist()))
        for n in unused:
            np.testing.assert_array_equal(grads["pos_embed"][1 + n], 0.0)
    # every patch kept, in order: the full model, bit for bit
    every = np.tile(np.arange(N), (3, 1))
    np.testing.assert_array_equal(_qkv._vit_forward(config, w, x, kept=every), _qkv._vit_forward(config, w, x))


# ---------------------------------------------------------------------------------------
# Bad input.

def raises(kind, call, *words):
    """call() raises `kind` whose message contains every one of `words`."""
    with pytest.raises(kind) as info:
        call()
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"


def test_bad_input_is_named():
    config = CONFIGS["learned"]
    w = perturbed_initial(config)
    x = images_of(config)
    dlogits = np.zeros((3, 3), dtype=np.float32)
    fwd, bwd = _qkv._vit_forward, _qkv._vit_backward

    # images: shape, dtype, type
    raises(ValueError, lambda: fwd(config, w, x[:, :, :, :4]), "images", "(3, 1, 8, 4)")
    raises(ValueError, lambda: fwd(config, w, np.zeros((3, 1, 12, 12), np.float32)), "images", "(3, 1, 12, 12)")
    raises(ValueError, lambda: fwd(config, w, np.zeros((3, 2, 8, 8), np.float32)), "images", "(3, 2, 8, 8)")
    raises(ValueError, lambda: fwd(config, w, x[0]), "images", "(B, C, H, W)", "(1, 8, 8)")
    raises(ValueError, lambda: fwd(config, w, x[:0]), "images", "B >= 1")
    raises(TypeError, lambda: fwd(config, w, x.astype(np.float64)), "images", "float32", "float64")
    raises(TypeError, lambda: fwd(config, w, x.tolist()), "images", "numpy.ndarray", "list")
    raises(TypeError, lambda: bwd(config, w, x.astype(np.float16), dlogits), "images", "float16")
    # dlogits
    raises(ValueError, lambda: bwd(config, w, x, np.zeros((3, 4), np.float32)), "dlogits", "(3, 3)", "(3, 4)")
    raises(ValueError, lambda: bwd(config, w, x, np.zeros(9, np.float32)), "dlogits", "(B, classes)")
    raises(TypeError, lambda: bwd(config, w, x, dlogits.astype(np.float64)), "dlogits", "float64")
    # kept: (B, K) integers, each row distinct patches in [0, N) (N = 4 here)
    raises(ValueError, lambda: fwd(config, w, x, kept=np.zeros((2, 2), np.int64)), "kept", "(3, K)", "(2, 2)")
    raises(ValueError, lambda: fwd(config, w, x, kept=np.zeros((3, 0), np.int64)), "kept", "K >= 1")
    raises(ValueError, lambda: fwd(config, w, x, kept=np.zeros((3, 5), np.int64)), "1 <= K <= 4")
    raises(ValueError, lambda: fwd(config, w, x, kept=np.array([[0, 1]] * 2 + [[1, 1]])), "kept patch 1 of image 2",
           "kept twice")
    raises(ValueError, lambda: bwd(config, w, x, dlogits, kept=np.array([[0, 4]] * 3)), "kept patch 4", "[0, 4)")
    raises(TypeError, lambda: fwd(config, w, x, kept=np.zeros((3, 2), np.float32)), "kept", "integer", "float32")
    raises(TypeError, lambda: fwd(config, w, x, kept=[[0, 1]] * 3), "kept", "numpy.ndarray", "list")
    raises(ValueError, lambda: _qkv._vit_random_patches(2, 4, 5, 0), "1 <= keep <= N")

    # weights: a missing name, an unexpected one, a wrong shape, a wrong dtype, not an array
    missing = {k: v for k, v in w.items() if k != "blocks.1.linear1.bias"}
    raises(ValueError, lambda: fwd(config, missing, x), "missing", "blocks.1.linear1.bias")
    raises(ValueError, lambda: bwd(config, missing, x, dlogits), "missing", "blocks.1.linear1.bias")
    raises(ValueError, lambda: fwd(config, {**w, "blocks.2.norm1.weight": w["norm.weight"]}, x),
           "unexpected", "blocks.2.norm1.weight")
    raises(ValueError, lambda: fwd(config, {**w, "cls_token": np.zeros(9, np.float32)}, x), "cls_token", "(8,)", "(9,)")
    raises(TypeError, lambda: fwd(config, {**w, "head.bias": np.zeros(3, np.int64)}, x), "head.bias", "int64")
    raises(TypeError, lambda: fwd(config, {**w, "head.bias": [0.0, 0.0, 0.0]}, x), "head.bias", "list")
    # sine-cosine positions are no parameter
    sincos = {**config, "learned_positions": False}
    raises(ValueError, lambda: fwd(sincos, w, x), "unexpected", "pos_embed")
    # float64 weights (a float64 twin's) are rounded to float32 and accepted
    w64 = {k: v.astype(np.float64) for k, v in w.items()}
    np.testing.assert_array_equal(fwd(config, w64, x), fwd(config, w, x))

    # config: an unknown key, a size that does not fit, a wrong type
    raises(ValueError, lambda: fwd({**config, "patch": 4}, w, x), "unknown key", "'patch'")
    raises(ValueError, lambda: _qkv._vit_initial({**config, "patch_size": 3}, 0), "patch_size (3)", "image_size (8)")
    raises(ValueError, lambda: _qkv._vit_initial({**config, "heads": 3}, 0), "dim (8)", "heads (3)")
    raises(ValueError, lambda: _qkv._vit_initial({**config, "dim": 6, "heads": 2, "learned_positions": False}, 0),
           "multiple of 4", "6")
    raises(ValueError, lambda: _qkv._vit_initial({**config, "classes": 0}, 0), "classes = 0")
    raises(TypeError, lambda: _qkv._vit_initial({**config, "dim": "8"}, 0), "dim", "int", "str")
    raises(TypeError, lambda: _qkv._vit_initial({**config, "dim": 8.0}, 0), "dim", "float")
    raises(TypeError, lambda: _qkv._vit_initial({**config, "learned_positions": "no"}, 0), "learned_positions", "bool")
    assert list(_qkv._vit_initial({**config, "dim": np.int64(8)}, 0)) == parameter_names(config)

    # the pieces
    raises(ValueError, lambda: _qkv._vit_patchify(x, 3), "patch size 3", "H = 8")
    raises(TypeError, lambda: _qkv._vit_patchify(x.astype(np.float64), 4), "images", "float64")
    raises(ValueError, lambda: _qkv._vit_sincos_positions(2, 6), "multiple of 4", "dim = 6")
    raises(ValueError, lambda: _qkv._vit_sincos_positions(0, 8), "grid = 0")
    _, probs = fwd(config, w, x, probs=True)
    raises(ValueError, lambda: _qkv._vit_rollout(probs, 3), "b = 3")
    raises(ValueError, lambda: _qkv._vit_rollout(probs, -1), "b = -1")
    raises(ValueError, lambda: _qkv._vit_rollout([], 0), "no attention probabilities")
    raises(ValueError, lambda: _qkv._vit_rollout([probs[0], probs[1][:, :, :3, :3]], 0), "disagree")
    raises(ValueError, lambda: _qkv._vit_rollout([probs[0][0]], 0), "probs[0]", "(B, heads, T, T)")
    raises(TypeError, lambda: _qkv._vit_rollout([probs[0].astype(np.float64)], 0), "probs[0]", "float64")

    # and the twin refuses what qkv refuses
    twin = TorchVit(config)
    raises(ValueError, lambda: load_qkv_weights(twin, missing), "missing", "blocks.1.linear1.bias")
    raises(ValueError, lambda: load_qkv_weights(twin, {**w, "cls_token": np.zeros(9)}), "cls_token", "(9,)")
    raises(ValueError, lambda: twin(torch.zeros(3, 1, 8, 4)), "(3, 1, 8, 4)")
