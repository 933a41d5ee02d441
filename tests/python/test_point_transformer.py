"""The Point Transformer classifier (include/qkv/point_transformer.h) against twins written
here: the sampling of images into points against a NumPy transcription of the header's
rule (the same counter_uniform draws, so the same points, bit for bit), and the model
against a float64 torch twin — embed, pre-norm blocks of vector attention over the K
nearest neighbours in (x, y) (lucidrains' PointTransformerLayer with a neighbour gather, as
tests/python/test_nn.py writes it), LayerNorm, [mean; max] pooling and the MLP head:

  - the initial weights: names, shapes, float32, seeded;
  - the forward logits of the same weights and points;
  - every gradient (_pt_backward) against torch autograd;
  - bad input raises ValueError / TypeError naming the problem.

The weights are _pt_initial's moved by N(0, 0.1²) entrywise (unit gains and zero biases
would hide one used in the wrong place). The oracle runs in float64; qkv computes in
float32 (unit roundoff u = 2⁻²⁴ ≈ 6e-8). Each tolerance is written beside its check.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from qkv import _qkv

U = 2.0 ** -24  # float32's unit roundoff
M64 = (1 << 64) - 1

CONFIG = dict(points=12, patch_size=3, neighbors=5, dim=8, blocks=2, pos_mlp_hidden=6, attn_mlp_hidden_mult=2,
              head_hidden=7, classes=4)
FEATURES = 2 + CONFIG["patch_size"] ** 2  # floats per point: x, y and the 3 × 3 window


# ---------------------------------------------------------------------------------------
# The sampling, transcribed from the header.

def mix64(z):
    z &= M64
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
    return z ^ (z >> 31)


def counter_uniform(seed, counter):
    key = mix64(seed + 0x9e3779b97f4a7c15)
    return (mix64(key ^ counter) >> 11) * 2.0 ** -53


def sample_points(pixels, N, seed, counter, S=1):
    """point_transformer.h: the inked pixels (> 0), each ⌊N/M⌋ times plus N mod M distinct
    ones by a partial Fisher–Yates shuffle with draw t = counter_uniform(mix64(mix64(seed)
    + counter), t); in raster order; x, y onto [−1, 1], then the S × S window of
    intensities /255 around the pixel (0 outside the image); black: the centre."""
    H, W = pixels.shape
    inked = np.flatnonzero(pixels.ravel() > 0)
    M = len(inked)
    if M == 0:
        return np.zeros((N, 2 + S * S), np.float32)
    copies = np.full(M, N // M)
    order = list(range(M))
    stream = mix64(mix64(seed) + counter)
    for t in range(N % M):
        j = t + min(int(counter_uniform(stream, t) * (M - t)), M - t - 1)
        order[t], order[j] = order[j], order[t]
        copies[order[t]] += 1
    idx = np.repeat(inked, copies)
    row, col = idx // W, idx % W
    x = col * (2.0 / (W - 1)) - 1 if W > 1 else np.zeros(len(idx))  # qkv's order of operations
    y = row * (2.0 / (H - 1)) - 1 if H > 1 else np.zeros(len(idx))
    r = S // 2
    padded = np.pad(pixels / 255.0, r)  # 0 outside the image
    window = np.stack([padded[row + dr, col + dc] for dr in range(S) for dc in range(S)], axis=1)
    return np.concatenate([np.stack([x, y], axis=1), window], axis=1).astype(np.float32)


@pytest.mark.parametrize("H, W, black, N", [(28, 28, 0.5, 128), (28, 28, 0.9, 128), (28, 28, 0.99, 64),
                                            (5, 7, 0.0, 35), (1, 9, 0.5, 4), (6, 1, 0.5, 10), (3, 3, 1.0, 5)])
def test_sampling_matches_the_rule(H, W, black, N):
    rng = np.random.default_rng(H * 100 + W + N)
    pixels = np.where(rng.random((H, W)) < black, 0, rng.integers(1, 256, (H, W))).astype(np.uint8)
    for seed, counter in [(0, 0), (7, 12345), (2 ** 63 + 5, 2 ** 40)]:
        got = _qkv._pt_image_to_points(pixels, N, seed, counter)
        assert got.dtype == np.float32 and got.shape == (N, 3)
        # The same draws and the same float arithmetic (double, then one rounding): equal.
        np.testing.assert_array_equal(got, sample_points(pixels, N, seed, counter), err_msg=f"{seed}, {counter}")
        for S in (3, 5):
            got = _qkv._pt_image_to_points(pixels, N, seed, counter, patch_size=S)
            assert got.shape == (N, 2 + S * S)
            np.testing.assert_array_equal(got, sample_points(pixels, N, seed, counter, S), err_msg=f"S={S}")
    batch = np.stack([pixels, pixels[::-1].copy(), np.zeros_like(pixels)])
    got = _qkv._pt_images_to_points(batch, N, 3, 10)
    for b in range(3):
        np.testing.assert_array_equal(got[b], sample_points(batch[b], N, 3, 10 + b), err_msg=f"image {b}")
    got = _qkv._pt_images_to_points(batch, N, 3, 10, patch_size=7)
    for b in range(3):
        np.testing.assert_array_equal(got[b], sample_points(batch[b], N, 3, 10 + b, 7), err_msg=f"image {b}, S=7")


# ---------------------------------------------------------------------------------------
# The model's twin.

def knn(xy, K):
    """(B, N, K) indices of the K nearest points in xy (B, N, 2), nearest first, ties to the
    lower index (a stable sort). Squared distances summed in qkv's order, in float64 from
    the same float32 coordinates: the same numbers, so the same neighbours."""
    d = ((xy[:, :, None, :] - xy[:, None, :, :]) ** 2).sum(-1)
    return torch.sort(d, dim=-1, stable=True).indices[..., :K]


def vector_attention(sd, p, x, xy, K, record=None):
    """record: a list to which the block's attention, (softmax weights (B, N, K, C), the
    neighbours (B, N, K)), is appended."""
    lin = F.linear
    B, N, _ = x.shape
    q, k, v = lin(x, sd[p + "to_qkv.weight"]).chunk(3, dim=-1)
    idx = knn(xy, min(K, N))
    gather = lambda t: t[torch.arange(B)[:, None, None], idx]  # noqa: E731  (B, N, K, ·)
    rel = xy[:, :, None, :] - gather(xy)
    delta = lin(torch.relu(lin(rel, sd[p + "pos_mlp.0.weight"], sd[p + "pos_mlp.0.bias"])),
                sd[p + "pos_mlp.2.weight"], sd[p + "pos_mlp.2.bias"])
    pre = q[:, :, None, :] - gather(k) + delta
    logits = lin(torch.relu(lin(pre, sd[p + "attn_mlp.0.weight"], sd[p + "attn_mlp.0.bias"])),
                 sd[p + "attn_mlp.2.weight"], sd[p + "attn_mlp.2.bias"])
    weights = logits.softmax(dim=2)
    if record is not None:
        record.append((weights.detach(), idx))
    return (weights * (gather(v) + delta)).sum(2)


def twin(sd, config, points, record=None):
    lin = F.linear
    C, K = config["dim"], config["neighbors"]
    xy = points[..., :2]
    x = lin(torch.relu(lin(points, sd["embed.0.weight"], sd["embed.0.bias"])), sd["embed.2.weight"], sd["embed.2.bias"])
    for i in range(config["blocks"]):
        p = f"blocks.{i}."
        h = F.layer_norm(x, (C,), sd[p + "norm.weight"], sd[p + "norm.bias"], 1e-5)
        a = vector_attention(sd, p + "attn.", lin(h, sd[p + "linear1.weight"], sd[p + "linear1.bias"]), xy, K, record)
        x = x + lin(torch.relu(a), sd[p + "linear2.weight"], sd[p + "linear2.bias"])
    z = F.layer_norm(x, (C,), sd["norm.weight"], sd["norm.bias"], 1e-5)
    pooled = torch.cat([z.mean(1), z.max(1).values], dim=-1)
    return lin(torch.relu(lin(pooled, sd["head.0.weight"], sd["head.0.bias"])), sd["head.2.weight"], sd["head.2.bias"])


def parameter_names(config):
    names = [f"embed.{i}.{t}" for i in (0, 2) for t in ("weight", "bias")]
    for b in range(config["blocks"]):
        p = f"blocks.{b}."
        names += [p + "norm.weight", p + "norm.bias", p + "linear1.weight", p + "linear1.bias", p + "attn.to_qkv.weight"]
        names += [p + f"attn.{m}.{i}.{t}" for m in ("pos_mlp", "attn_mlp") for i in (0, 2) for t in ("weight", "bias")]
        names += [p + "linear2.weight", p + "linear2.bias"]
    return names + ["norm.weight", "norm.bias"] + [f"head.{i}.{t}" for i in (0, 2) for t in ("weight", "bias")]


def perturbed_initial(config, seed=3):
    w = _qkv._pt_initial(config, seed)
    rng = np.random.default_rng(7)
    return {name: (a + 0.1 * rng.standard_normal(a.shape)).astype(np.float32) for name, a in w.items()}


def inputs(config):
    """Continuous random points (no ties among distances), and points sampled from sparse
    images (repeats: ties among distances and in the max)."""
    rng = np.random.default_rng(5)
    B, N = 3, config["points"]
    random = np.concatenate([rng.uniform(-1, 1, (B, N, 2)), rng.uniform(0, 1, (B, N, FEATURES - 2))], axis=-1).astype(np.float32)
    pixels = np.where(rng.random((B, 9, 9)) < 0.9, 0, rng.integers(1, 256, (B, 9, 9))).astype(np.uint8)
    pixels[:, 4, 4] = 200  # at least one inked pixel each
    return {"random": random, "sampled": _qkv._pt_images_to_points(pixels, N, 1, patch_size=config["patch_size"])}


def norm_close(got, want, rtol, floor=0.0, what=""):
    """‖got − want‖ ≤ rtol·‖want‖ + floor; a failure prints the error and the worst entry."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    err, scale = np.linalg.norm(got - want), np.linalg.norm(want)
    worst = np.unravel_index(np.argmax(np.abs(got - want)), got.shape) if got.size else ()
    assert err <= rtol * scale + floor, (f"{what}: ‖Δ‖ {err:.3g} > {rtol:g}·‖want‖ {scale:.3g} + {floor:g}; "
                                         f"worst at {worst}: {got[worst]} vs {want[worst]}")


def test_initial_weights():
    w = _qkv._pt_initial(CONFIG, 5)
    assert list(w) == parameter_names(CONFIG)
    C, Hp, Cm, Hh = CONFIG["dim"], CONFIG["pos_mlp_hidden"], CONFIG["dim"] * CONFIG["attn_mlp_hidden_mult"], CONFIG["head_hidden"]
    shapes = {"embed.0.weight": (C, FEATURES), "blocks.1.attn.to_qkv.weight": (3 * C, C), "blocks.0.attn.pos_mlp.0.weight": (Hp, 2),
              "blocks.0.attn.attn_mlp.0.weight": (Cm, C), "head.0.weight": (Hh, 2 * C), "head.2.bias": (CONFIG["classes"],)}
    for n, shape in shapes.items():
        assert w[n].shape == shape, n
    assert all(a.dtype == np.float32 and np.all(np.isfinite(a)) for a in w.values())
    assert np.all(w["norm.weight"] == 1) and np.all(w["norm.bias"] == 0)  # torch's LayerNorm
    # torch's Linear: U(±1/√in)
    assert 0 < np.abs(w["embed.2.weight"]).max() <= 1 / np.sqrt(C)
    again, other = _qkv._pt_initial(CONFIG, 5), _qkv._pt_initial(CONFIG, 6)
    assert all(np.array_equal(w[n], again[n]) for n in w)
    assert not np.array_equal(w["embed.0.weight"], other["embed.0.weight"])
    assert list(_qkv._pt_initial({}, 0)) == parameter_names(dict(blocks=2))  # the header's defaults


@pytest.mark.parametrize("kind", ["random", "sampled"])
def test_forward_matches_torch(kind):
    w = perturbed_initial(CONFIG)
    x = inputs(CONFIG)[kind]
    got = _qkv._pt_forward(CONFIG, w, x)
    sd = {n: torch.from_numpy(a).double() for n, a in w.items()}
    with torch.no_grad():
        want = twin(sd, CONFIG, torch.from_numpy(x).double()).numpy()
    assert got.dtype == np.float32 and got.shape == (3, CONFIG["classes"])
    # Each logit ends a chain of ~15 rounded operations per block (sums of at most
    # max(C·m, 2C, Hh) = 16 products, ≤ 16u relative each at worst; a softmax over K;
    # LayerNorm's 1/σ, which can amplify by ‖x‖/σ) over 2 blocks, the embedding, the pooling
    # and the head: a few hundred u ≈ 2e-5 relative at worst (measured: 6e-8 and 8e-8).
    # The bound 2e-5 of ‖logits‖ and, per entry, 2e-5 of the largest logit.
    norm_close(got, want, 2e-5, what="logits")
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * np.abs(want).max())


@pytest.mark.parametrize("kind", ["random", "sampled"])
def test_every_gradient_matches_torch(kind):
    w = perturbed_initial(CONFIG)
    x = inputs(CONFIG)[kind]
    dlogits = np.random.default_rng(9).standard_normal((3, CONFIG["classes"])).astype(np.float32)
    grads = _qkv._pt_backward(CONFIG, w, x, dlogits)
    sd = {n: torch.from_numpy(a).double().requires_grad_() for n, a in w.items()}
    twin(sd, CONFIG, torch.from_numpy(x).double()).backward(torch.from_numpy(dlogits).double())
    assert list(grads) == parameter_names(CONFIG)
    for n, p in sd.items():
        g, ref = grads[n], p.grad.numpy()
        assert g.dtype == np.float32 and g.shape == ref.shape, n
        # The forward's chain run back through both blocks, ~30 rounded products and sums
        # per entry: a few hundred u ≈ 2e-5 of the tensor's norm at worst (measured, the
        # worst tensor: 1.7e-6). The floor covers gradients that are exactly 0: attn_mlp.2's
        # bias adds the same to all K logits of a channel, which softmax ignores, so its
        # gradient is rounding alone (measured ‖·‖ 1e-8).
        norm_close(g, ref, 2e-5, floor=1e-6, what=n)
        np.testing.assert_allclose(g, ref, rtol=0, atol=1e-4 * np.abs(ref).max() + 1e-6, err_msg=n)


# ---------------------------------------------------------------------------------------
# Bad input.

def raises(kind, call, *words):
    with pytest.raises(kind) as info:
        call()
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"


def test_bad_input_named():
    w = _qkv._pt_initial(CONFIG, 1)
    x = inputs(CONFIG)["random"]
    raises(ValueError, lambda: _qkv._pt_initial(dict(CONFIG, neighbors=13), 1), "must not exceed points")
    raises(ValueError, lambda: _qkv._pt_initial(dict(CONFIG, heads=2), 1), "unknown key 'heads'")
    raises(TypeError, lambda: _qkv._pt_initial(dict(CONFIG, dim=8.0), 1), "dim must be an int")
    raises(TypeError, lambda: _qkv._pt_forward(CONFIG, w, x.astype(np.float64)), "float32")
    raises(ValueError, lambda: _qkv._pt_forward(CONFIG, w, x[..., :3].copy()), "(B, N, 11)")
    raises(ValueError, lambda: _qkv._pt_initial(dict(CONFIG, patch_size=4), 1), "patch_size (S) must be odd")
    raises(ValueError, lambda: _qkv._pt_image_to_points(np.ones((4, 4), np.uint8), 4, 0, 0, patch_size=17),
           "patch_size must be odd and in [1, 15], got 17")
    raises(ValueError, lambda: _qkv._pt_forward(CONFIG, dict(w, extra=np.zeros(2, np.float32)), x), "extra")
    raises(ValueError, lambda: _qkv._pt_backward(CONFIG, w, x, np.zeros((3, 5), np.float32)), "dlogits")
    raises(TypeError, lambda: _qkv._pt_image_to_points(np.zeros((4, 4), np.float32), 8, 0, 0), "uint8")
    raises(ValueError, lambda: _qkv._pt_image_to_points(np.zeros((4, 4), np.uint8), 0, 0, 0), "points (N)")
    raises(ValueError, lambda: _qkv._pt_images_to_points(np.zeros((4, 4), np.uint8), 8, 0), "(B, H, W)")
