"""SASRec (include/qkv/sasrec.h, qkv.recommender) against its torch 1.13 twin,
scripts/bench/sasrec_torch.py's TorchSasRec: torch.nn.TransformerEncoderLayer(norm_first,
dim_feedforward=d, relu, dropout p) blocks under a causal mask between the scaled item and
position embeddings and a last LayerNorm, with the paper's loss.

  - the initial weights (sasrec_initial): the twin's names and shapes, float32, as sasrec.h
    says they are drawn;
  - the forward h (_sasrec_forward) of the same weights and ids, one row right-padded;
  - the loss and every gradient (_sasrec_loss) against torch autograd, without dropout and
    with p = 0.2, qkv's masks rebuilt here and handed to the twin's dropouts;
  - padding and later items change nothing at a real position (right padding + causal);
  - qkv's batches (SasRecBatches) of a small ratings file: their layout, and the loss of
    one of them beside scripts/bench/sasrec_torch.py --check;
  - a few epochs of qkv.recommender.train against train_twin: the same loss every epoch.

The oracle runs in float64; qkv computes in float32, so the differences are qkv's float32
rounding (unit roundoff u = 2⁻²⁴ ≈ 6e-8). Each tolerance is written beside its check.
"""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import qkv

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts")
sys.path.insert(0, SCRIPTS)
from bench.gpt2_torch import read_safetensors  # noqa: E402
from bench.sasrec_torch import make_sasrec_class, parameter_names, train_twin  # noqa: E402

TorchSasRec = make_sasrec_class()
rec = qkv.recommender

NUM_ITEMS, MAX_LEN = 30, 12
# (dim, layers, heads): several heads of a small width, and qkv's default block (d 50, 1 head).
CONFIGS = [(8, 2, 2), (50, 2, 1)]

# B = 3, T = 7: a full row, a right-padded one, one with a single padding position.
IDS = np.array([[3, 1, 4, 1, 5, 9, 2],
                [6, 5, 3, 5, 0, 0, 0],
                [30, 29, 28, 27, 26, 25, 0]], dtype=np.int64)


def perturbed_initial(dim, layers, heads, seed=3):
    """sasrec_initial's weights with every entry moved by N(0, 0.1²): its biases are 0 and
    its gains 1, which would hide a bias or gain used in the wrong place. The padding row
    0 is moved too, so that a padding position is not all position embedding."""
    w = rec.sasrec_initial(NUM_ITEMS, dim=dim, layers=layers, heads=heads, max_len=MAX_LEN, seed=seed)
    rng = np.random.default_rng(7)
    return {name: (np.asarray(a, dtype=np.float32) + 0.1 * rng.standard_normal(np.shape(a))).astype(np.float32)
            for name, a in w.items()}


def twin_h(weights, ids, heads):
    model = TorchSasRec(weights, heads=heads, dtype=torch.float64)
    with torch.no_grad():
        return model(torch.from_numpy(ids)).numpy()


def norm_close(got, want, rtol, floor=0.0, what=""):
    """‖got − want‖ ≤ rtol·‖want‖ + floor (Frobenius norms, float64)."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    err, scale = np.linalg.norm(got - want), np.linalg.norm(want)
    assert err <= rtol * scale + floor, f"{what}: ‖Δ‖ {err:.3g} > {rtol:g}·‖want‖ {scale:.3g} + {floor:g}"


def test_initial_weights():
    dim, layers, heads, max_len, items = 16, 2, 2, 40, 2000
    w = rec.sasrec_initial(items, dim=dim, layers=layers, heads=heads, max_len=max_len, seed=5)
    assert set(w) == set(parameter_names(layers))
    shapes = {"item_emb.weight": (items + 1, dim), "pos_emb.weight": (max_len, dim),
              "last_norm.weight": (dim,), "last_norm.bias": (dim,)}
    for n in range(layers):
        p = f"blocks.{n}."
        shapes.update({p + "self_attn.in_proj_weight": (3 * dim, dim), p + "self_attn.in_proj_bias": (3 * dim,),
                       p + "self_attn.out_proj.weight": (dim, dim), p + "self_attn.out_proj.bias": (dim,),
                       p + "linear1.weight": (dim, dim), p + "linear1.bias": (dim,),
                       p + "linear2.weight": (dim, dim), p + "linear2.bias": (dim,)})
        for norm in ("norm1", "norm2"):
            shapes.update({p + norm + ".weight": (dim,), p + norm + ".bias": (dim,)})
    for name, shape in shapes.items():
        a = np.asarray(w[name])
        assert a.dtype == np.float32 and a.shape == shape, (name, a.dtype, a.shape)
        assert np.all(np.isfinite(a)), name
    # sasrec.h: row 0 (padding) zero; the tables ~ N(0, 2 / (rows + d)) (Xavier normal).
    assert np.all(w["item_emb.weight"][0] == 0)
    for name, rows in (("item_emb.weight", items + 1), ("pos_emb.weight", max_len)):
        a = np.asarray(w[name], dtype=np.float64)[1 if name == "item_emb.weight" else 0:]
        want = math.sqrt(2 / (rows + dim))
        # the sample standard deviation of n ≥ 640 normal draws is within 4/sqrt(2n) ≈ 11%
        # of sigma (4 standard errors)
        assert abs(a.std() / want - 1) < 4 / math.sqrt(2 * a.size), (name, a.std(), want)
    # the blocks as torch initialises a TransformerEncoderLayer: attention biases 0,
    # LayerNorms (1, 0), in_proj Xavier-uniform, Linear weights Kaiming-uniform (|w| ≤ 1/√fan_in).
    for n in range(layers):
        p = f"blocks.{n}."
        assert np.all(w[p + "self_attn.in_proj_bias"] == 0) and np.all(w[p + "self_attn.out_proj.bias"] == 0)
        for norm in ("norm1", "norm2"):
            assert np.all(w[p + norm + ".weight"] == 1) and np.all(w[p + norm + ".bias"] == 0)
        assert np.abs(w[p + "self_attn.in_proj_weight"]).max() <= math.sqrt(6 / (dim + 3 * dim))
        for lin in ("linear1", "linear2"):
            assert np.abs(w[p + lin + ".weight"]).max() <= 1 / math.sqrt(dim)
            assert np.abs(w[p + lin + ".bias"]).max() <= 1 / math.sqrt(dim)
    assert np.all(w["last_norm.weight"] == 1) and np.all(w["last_norm.bias"] == 0)
    # the seed decides them
    again = rec.sasrec_initial(items, dim=dim, layers=layers, heads=heads, max_len=max_len, seed=5)
    other = rec.sasrec_initial(items, dim=dim, layers=layers, heads=heads, max_len=max_len, seed=6)
    assert all(np.array_equal(w[k], again[k]) for k in w)
    assert not np.array_equal(w["item_emb.weight"], other["item_emb.weight"])
    # and the twin loads them under its own names, strictly
    TorchSasRec(w, heads=heads)


@pytest.mark.parametrize("dim, layers, heads", CONFIGS)
def test_forward_matches_torch(dim, layers, heads):
    w = perturbed_initial(dim, layers, heads)
    h = np.asarray(rec._sasrec_forward(w, IDS, dim, layers, heads, MAX_LEN))
    want = twin_h(w, IDS, heads)
    assert h.shape == (3, 7, dim) and h.dtype == np.float32
    real = IDS != 0
    # h is layer-normalised (entries O(1)). Each entry is a chain of ~10 rounded operations
    # per block (sums of ≤ max(d, T) products, each off by ≤ n·u relative; softmax; LayerNorm's
    # 1/σ), over 2 blocks: far under 1e-5 of ‖h‖ (torch's own float32 forward is ~1e-7 from
    # float64 here, qkv's 1.2e-7 and 1.7e-7). Padding positions are left out: what a model
    # puts there is its own.
    norm_close(h[real], want[real], 1e-5, what="h")
    np.testing.assert_allclose(h[real], want[real], rtol=0, atol=1e-5 * np.abs(want[real]).max())


def batch_of(sequences):
    """The sequences s as SasRecBatches makes them: inputs s[:-1], positives s[1:],
    right-padded to T = the longest input, negatives drawn from the items s lacks."""
    B, T = len(sequences), max(len(s) for s in sequences) - 1
    inputs, positives, negatives = (np.zeros((B, T), dtype=np.int64) for _ in range(3))
    rng = np.random.default_rng(11)
    for b, s in enumerate(sequences):
        n = len(s) - 1
        inputs[b, :n], positives[b, :n] = s[:-1], s[1:]
        negatives[b, :n] = [rng.choice(sorted(set(range(1, NUM_ITEMS + 1)) - set(s))) for _ in range(n)]
    return {"users": np.arange(B, dtype=np.int64), "inputs": inputs, "positives": positives,
            "negatives": negatives}


def assert_loss_and_gradients_match(loss, grads, twin, batch, layers):
    """qkv's loss and gradients against the float64 twin's loss of the batch and autograd."""
    want = twin.loss(*(torch.from_numpy(batch[k]) for k in ("inputs", "positives", "negatives")))
    want.backward()
    # The loss: a mean of 17 softplus terms of scores h·e, each off by ~d·u relative: 1e-5
    # leaves ~100x.
    assert float(loss) == pytest.approx(want.item(), rel=1e-5)
    assert set(grads) == set(parameter_names(layers))
    for name, p in twin.named_parameters():
        g = np.asarray(grads[name])
        assert g.dtype == np.float32, name
        ref = p.grad.numpy()
        # Gradients pass forward and back through both blocks (~20 rounded products and
        # sums per entry); torch's own float32 gradients are within 4e-7 of float64 (norm-
        # wise) on these sizes, so 1e-5 of the tensor's norm leaves 25x for another order of
        # summation. The floor 1e-7 covers tensors whose exact gradient is 0 or nearly
        # (the key bias: a constant added to every key's score does not change softmax).
        norm_close(g, ref, 1e-5, floor=1e-7, what=name)
        np.testing.assert_allclose(g, ref, rtol=0, atol=1e-4 * np.abs(ref).max() + 1e-7, err_msg=name)
    # The padding row is never an input of a real position nor a target: no gradient.
    np.testing.assert_array_equal(np.asarray(grads["item_emb.weight"])[0], 0)


@pytest.mark.parametrize("dim, layers, heads", CONFIGS)
def test_loss_and_every_gradient_match_torch(dim, layers, heads):
    w = perturbed_initial(dim, layers, heads)
    batch = batch_of([[3, 1, 4, 1, 5, 9, 2, 6], [6, 5, 3, 5, 8], [30, 29, 28, 27, 26, 25, 24]])
    loss, grads = rec._sasrec_loss(w, batch, dim, layers, heads, MAX_LEN)
    assert_loss_and_gradients_match(loss, grads, TorchSasRec(w, heads=heads, dtype=torch.float64), batch, layers)


# ---------------------------------------------------------------------------------------
# Dropout: qkv's masks rebuilt from their documented derivation (qkv/rng.h's
# counter_uniform; nn::DropoutDraw::site; the sites of sasrec.h and of transformer.h's
# TransformerEncoderLayer::DropoutSite), handed to the twin's dropouts in the order torch
# calls them, so that both compute one function and torch autograd is its oracle.

MASK64 = (1 << 64) - 1


def mix64(z):
    """qkv/rng.h's mix64, of a Python int or of a uint64 array (wrapping as C++ does)."""
    if isinstance(z, int):
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9 & MASK64
        z = (z ^ (z >> 27)) * 0x94d049bb133111eb & MASK64
        return z ^ (z >> 31)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xbf58476d1ce4e5b9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94d049bb133111eb)
        return z ^ (z >> np.uint64(31))


def site(seed, k):
    """nn::DropoutDraw{p, seed}.site(k).seed"""
    return mix64((mix64(seed) + k) & MASK64)


def keep_mask(seed, p, shape):
    """counter_uniform(seed, i) >= p for each flat row-major index i of `shape`: what
    nn::Dropout keeps at offset 0 and what the attention keeps of (b, h, i, j)."""
    key = np.uint64(mix64((seed + 0x9e3779b97f4a7c15) & MASK64))
    bits = mix64(key ^ np.arange(int(np.prod(shape)), dtype=np.uint64)) >> np.uint64(11)
    return (bits.astype(np.float64) * 2.0 ** -53 >= p).reshape(shape)


def qkv_masks(seed, p, B, T, dim, layers, heads):
    """The keep masks of sasrec_loss(dropout = {p, seed}) on a batch that is one length
    group, in the order torch's twin drops: the embedding, then per block the attention
    probabilities ((B·H, T, T) as torch holds them), dropout1, the activation's, dropout2."""
    group = site(seed, 0)
    masks = [keep_mask(site(group, 0), p, (B, T, dim))]
    for n in range(layers):
        block = site(group, 1 + n)
        masks += [keep_mask(site(block, 0), p, (B, heads, T, T)).reshape(B * heads, T, T),
                  keep_mask(site(block, 2), p, (B, T, dim)),
                  keep_mask(site(block, 1), p, (B, T, dim)),  # dim_feedforward = d
                  keep_mask(site(block, 3), p, (B, T, dim))]
    return masks


def test_mask_rebuild_matches_qkvs_dropout():
    """keep_mask against the engine's attention dropout itself: with value = the identity,
    the output row is the dropped-and-rescaled probabilities (tests/python/test_dropout.py)."""
    B, H, L = 2, 3, 9
    rng = np.random.default_rng(0)
    q, k = (rng.standard_normal((B, H, L, 4)).astype(np.float32) for _ in range(2))
    eye = np.ascontiguousarray(np.broadcast_to(np.eye(L, dtype=np.float32), (B, H, L, L)))
    out = qkv.scaled_dot_product_attention(q, k, eye, dropout_p=0.3, seed=77)
    np.testing.assert_array_equal(out != 0, keep_mask(77, 0.3, (B, H, L, L)))


@pytest.mark.parametrize("dim, layers, heads", CONFIGS)
def test_dropout_loss_and_every_gradient_match_torch_with_qkvs_masks(dim, layers, heads, monkeypatch):
    p, seed = 0.2, 12345
    w = perturbed_initial(dim, layers, heads)
    # Rows longest first and T the longest row: one length group holding the batch's rows in
    # the batch's order, so its masks are (B, T, ·).
    batch = batch_of([[3, 1, 4, 1, 5, 9, 2, 6], [30, 29, 28, 27, 26, 25, 24], [6, 5, 3, 5, 8]])
    B, T = batch["inputs"].shape
    loss, grads = rec._sasrec_loss(w, batch, dim, layers, heads, MAX_LEN, dropout=p, seed=seed)
    plain, _ = rec._sasrec_loss(w, batch, dim, layers, heads, MAX_LEN)
    assert abs(loss - plain) > 1e-3 * abs(plain), "dropout 0.2 left the loss as it was"

    calls = iter(qkv_masks(seed, p, B, T, dim, layers, heads))

    def dropout_with_qkvs_masks(input, p=0.5, training=True, inplace=False):
        keep = next(calls)
        assert training and tuple(input.shape) == keep.shape, (tuple(input.shape), keep.shape)
        return input * torch.from_numpy(keep).to(input.dtype) / (1 - p)

    # torch.nn.Dropout and multi_head_attention_forward both call torch.nn.functional.dropout.
    monkeypatch.setattr(torch.nn.functional, "dropout", dropout_with_qkvs_masks)
    twin = TorchSasRec(w, heads=heads, dtype=torch.float64, dropout=p)
    assert_loss_and_gradients_match(loss, grads, twin, batch, layers)
    assert next(calls, None) is None, "the twin dropped at fewer sites than qkv"


@pytest.mark.parametrize("dim, layers, heads", CONFIGS)
def test_padding_and_later_items_change_nothing(dim, layers, heads):
    w = perturbed_initial(dim, layers, heads)
    h = np.asarray(rec._sasrec_forward(w, IDS, dim, layers, heads, MAX_LEN))
    real = IDS != 0
    scale = np.abs(h[real]).max()
    # A position that saw padding or a later item would move by O(1) (h is layer-
    # normalised); the same computation with other blocking or another length of the
    # softmax rows may differ by a few float32 roundings (measured: 2e-7 of the largest
    # entry): 4e-6 of the largest entry.
    atol = 4e-6 * scale
    # more padding appended, up to max_len
    more = np.concatenate([IDS, np.zeros((3, MAX_LEN - 7), dtype=np.int64)], axis=1)
    h_more = np.asarray(rec._sasrec_forward(w, more, dim, layers, heads, MAX_LEN))
    np.testing.assert_allclose(h_more[:, :7][real], h[real], rtol=0, atol=atol)
    # each row alone, without its padding
    for b in range(3):
        n = int(real[b].sum())
        alone = np.asarray(rec._sasrec_forward(w, IDS[b:b + 1, :n].copy(), dim, layers, heads, MAX_LEN))
        np.testing.assert_allclose(alone[0], h[b, :n], rtol=0, atol=atol, err_msg=f"row {b}")
    # causal: other items after position 3 leave positions 0..3 as they were
    later = IDS.copy()
    later[:, 4:] = np.where(real[:, 4:], (IDS[:, 4:] % NUM_ITEMS) + 1, 0)
    h_later = np.asarray(rec._sasrec_forward(w, later, dim, layers, heads, MAX_LEN))
    np.testing.assert_allclose(h_later[:, :4][real[:, :4]], h[:, :4][real[:, :4]], rtol=0, atol=atol)
    assert np.abs(h_later[:, 4:][real[:, 4:]] - h[:, 4:][real[:, 4:]]).max() > 1e-3  # and they do matter


# ---------------------------------------------------------------------------------------
# qkv's batches and training on a small ratings file.

@pytest.fixture(scope="module")
def ratings(tmp_path_factory):
    """24 users of 40 movies, 9 to 30 ratings each, distinct timestamps."""
    rng = np.random.default_rng(2)
    lines = ["userId,movieId,rating,timestamp"]
    t = 1_000_000
    for user in range(1, 25):
        movies = rng.choice(np.arange(1, 41) * 10, size=int(rng.integers(9, 31)), replace=False)
        for m in movies:
            t += int(rng.integers(1, 100))
            lines.append(f"{user},{m},{rng.integers(1, 11) / 2:g},{t}")
    path = tmp_path_factory.mktemp("ratings") / "ratings.csv"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_batches_layout(ratings):
    batches = rec.SasRecBatches(ratings, batch=8, max_len=10, seed=0)
    assert batches.num_items == 40
    assert batches.steps_per_epoch >= 3  # 24 users with ≥ 2 fit ratings, 8 at a time
    seen_users = []
    for step in range(batches.steps_per_epoch):
        b = batches.get(0, step)
        inputs, positives, negatives = (np.asarray(b[k]) for k in ("inputs", "positives", "negatives"))
        users = np.asarray(b["users"])
        assert all(np.asarray(b[k]).dtype == np.int64 for k in ("users", "inputs", "positives", "negatives"))
        B, T = inputs.shape
        assert users.shape == (B,) and positives.shape == negatives.shape == (B, T) and 1 <= T <= 10
        assert inputs.min() >= 0 and inputs.max() <= 40 and negatives.max() <= 40
        for r in range(B):
            n = int((inputs[r] != 0).sum())
            assert n >= 1 and np.all(inputs[r, :n] != 0) and np.all(inputs[r, n:] == 0), "right padding"
            # the targets are the inputs shifted by one, with a negative at each
            assert np.all(positives[r, :n] != 0) and np.all(positives[r, n:] == 0)
            np.testing.assert_array_equal(positives[r, :n - 1], inputs[r, 1:n])
            assert np.all(negatives[r, :n] != 0) and np.all(negatives[r, n:] == 0)
            # a negative is a movie the user has not rated in the fit part
            assert not set(negatives[r, :n]) & (set(inputs[r, :n]) | set(positives[r, :n]))
        seen_users += list(users)
    assert len(seen_users) == len(set(seen_users)), "an epoch visits each user once"
    # the same (epoch, step) gives the same batch; another epoch another order
    again = batches.get(0, 0)
    assert all(np.array_equal(again[k], batches.get(0, 0)[k]) for k in again)
    firsts = [tuple(np.asarray(batches.get(e, 0)["users"])) for e in range(4)]
    assert len(set(firsts)) > 1


def test_loss_of_a_real_batch_matches_the_check_mode(ratings):
    """scripts/bench/sasrec_torch.py --check: torch's loss of sasrec_initial's weights on
    SasRecBatches.get(epoch, step), printed beside qkv's (_sasrec_loss)."""
    build_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(qkv.__file__))))
    cmd = [sys.executable, os.path.join(SCRIPTS, "bench", "sasrec_torch.py"), "--check", "--data", ratings,
           "--batch", "8", "--max-len", "10", "--dim", "16", "--heads", "2", "--seed", "4", "--epoch", "1",
           "--step", "1", "--threads", "1", "--build-dir", build_dir]
    done = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
    out = json.loads(done.stdout.splitlines()[-1])
    # qkv's float32 loss against torch's float64: as in test_loss_and_every_gradient_match_torch
    assert out["loss_qkv"] == pytest.approx(out["loss_torch_f64"], rel=1e-5)
    assert out["loss_torch_f32"] == pytest.approx(out["loss_torch_f64"], rel=1e-5)
    # and the loss of a fresh model is near 2·log 2 (scores near 0: each softplus ≈ log 2)
    assert 1.0 < out["loss_torch_f64"] < 2.0


def test_training_matches_the_twin(ratings, tmp_path):
    """Same initial weights, same batches, AdamW (0.9, 0.98): the same training loss every
    epoch, and the same weights at the epoch qkv keeps."""
    epochs, kw = 3, dict(batch=8, lr=1e-2, dim=16, layers=2, heads=2, max_len=10, seed=1)
    progress = []
    report = rec.train(ratings, str(tmp_path / "qkv"), model="sasrec", epochs=epochs, eval_every=1,
                       progress=progress.append, **kw)
    assert report["train_steps"] > 0
    batches = rec.SasRecBatches(ratings, batch=8, max_len=10, seed=1)
    assert report["train_steps"] == epochs * batches.steps_per_epoch
    w = rec.sasrec_initial(batches.num_items, dim=16, layers=2, heads=2, max_len=10, seed=1)
    twin = TorchSasRec(w, heads=2)
    states = []
    result = train_twin(twin, batches, epochs, lr=1e-2, eval_every=1,
                        evaluate=lambda state: states.append(state) or 0.0)
    qkv_losses = [p["loss"] for p in progress]
    assert len(qkv_losses) == epochs * batches.steps_per_epoch and sum(p["epoch_end"] for p in progress) == epochs
    # The loss of every step. Step 1 differs by float32 rounding alone (~1e-7);
    # AdamW's updates (lr·m/(√v + eps), ±lr for a gradient of any size) let rounding
    # differences grow from step to step. Measured over these 9 steps: 1e-7 relative;
    # 2e-5 leaves room for other kernels (test_gpt2_training.py holds 6 GPT-2 steps to 2e-4).
    np.testing.assert_allclose(qkv_losses, result["losses"], rtol=2e-5)
    # The weights qkv kept (its best validation epoch) against the twin's after that epoch.
    best = report["best_epoch"]
    assert 1 <= best <= epochs
    saved = read_safetensors(str(tmp_path / "qkv" / "model.safetensors"))
    d = 16
    for name, want in states[best - 1].items():
        got = np.asarray(saved[name])
        if name.endswith("in_proj_bias"):
            # the key bias has a zero gradient up to rounding, which AdamW turns into ±lr
            # steps of either sign: it changes no score, so it is left out.
            got, want = np.delete(got, np.s_[d:2 * d]), np.delete(want, np.s_[d:2 * d])
        # weights O(0.1-1) after a few steps of ±lr (1e-2); rounding differences in the
        # gradients move an update by a small fraction of lr (measured: 2.5e-7 at most, the
        # key bias 3e-3): 2e-5 absolute.
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-5, err_msg=name)
