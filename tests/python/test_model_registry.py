"""qkv.load_model through the C++ model registry, and output_attentions on every model.

  - load_model returns the class of each embedded model's model_type (models/: sotu-gpt,
    dates, fashion-vit, fashion-point), and the Python classes cover exactly the C++
    registry's types (_qkv._model_types, what `qkv run` accepts);
  - an unknown model_type is the registry's ValueError, listing every known type;
  - GPT2Model(ids, output_attentions=True) on models/sotu-gpt: Hugging Face's per-layer
    (B, H, L, L), equal to the float64 torch twin of test_gpt2.py (reference_logits);
  - the ViT classifier (models/fashion-vit): its per-block (N, H, 1 + P, 1 + P) equal to
    test_vit.py's torch twin (TorchVit) on the same weights and images;
  - the date translator (models/dates): its encoder, decoder and cross attentions equal to
    test_train.py's float64 torch twin (torch.nn.Transformer, TorchSeq2Seq) on the same
    weights and ids, each MultiheadAttention asked for its per-head weights;
  - the point model (models/fashion-point): its per-block (1, 1, P, P) weights, each point's
    mean over channels of its vector attention's softmax over its K neighbours, equal to
    test_point_transformer.py's float64 twin on the same weights and points;
  - the point model and the date translator: shapes, distributions, and equal to
    `qkv run --json` (the same C++ path, so this checks the Python plumbing).
"""
import json
import os
import subprocess

import numpy as np
import pytest
import torch

import qkv
from qkv import _qkv
from test_bert import read_safetensors
from test_gpt2 import qkv_binary, reference_logits
from oracle import recorded_attention
from test_point_transformer import twin as point_twin
from test_train import TorchSeq2Seq
from test_vit import U, twin_of

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
MODELS = os.path.join(ROOT, "models")
SENTENCE = "The animal didn't cross the street because it was too tired"


def model_dir(name):
    return os.path.join(MODELS, name)


def test_python_classes_are_the_registrys_types():
    assert sorted(qkv.models._model_classes()) == _qkv._model_types()
    assert _qkv._model_types() == ["bert", "gpt2", "qkv-recommender", "qkv-seq2seq", "qkv-vision",
                                   "use_lite"]


@pytest.mark.parametrize("name, cls", [("sotu-gpt", qkv.GPT2Model), ("dates", qkv.DateTranslator),
                                       ("fashion-vit", qkv.vision.Classifier),
                                       ("fashion-point", qkv.vision.Classifier)])
def test_load_model_returns_the_class_of_the_type(name, cls):
    model = qkv.load_model(model_dir(name))
    assert type(model) is cls
    if cls is qkv.vision.Classifier:
        assert model.model == name.split("-")[1]


def test_unknown_model_type_lists_the_registrys_types(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ValueError, match='unknown model_type "llama"') as e:
        qkv.load_model(tmp_path)
    for t in _qkv._model_types():
        assert f'"{t}"' in str(e.value)


def test_gpt2_attentions_match_the_torch_twin():
    model = qkv.load_model(model_dir("sotu-gpt"))
    c = model.config
    ids = model.tokenizer.encode(SENTENCE)
    L = len(ids)
    out = model(np.array([ids, ids[::-1]]), output_attentions=True)
    assert out["logits"].shape == (2, L, c["vocab_size"])
    # The same forward, its attention on the reference path (which returns probabilities)
    # instead of the fast kernel: float32 roundings apart, a few ulps of the largest logit
    # per summed term, compounded over the layers: 4·n_layer·L·u·max|logit| (measured ~7e-6).
    plain = model(np.array([ids, ids[::-1]]))
    atol = 4 * c["n_layer"] * L * U * np.abs(plain).max()
    np.testing.assert_allclose(out["logits"], plain, rtol=0, atol=atol)
    attentions = out["attentions"]
    assert isinstance(attentions, tuple) and len(attentions) == c["n_layer"]
    weights = read_safetensors(os.path.join(model_dir("sotu-gpt"), "model.safetensors"))
    for b, row in enumerate((ids, ids[::-1])):
        want = []
        reference_logits(weights, row, heads=c["n_head"], attentions=want)  # float64 (H, L, L)
        for n, (got, w) in enumerate(zip(attentions, want)):
            assert got.shape == (2, c["n_head"], L, L) and got.dtype == np.float32
            # p = softmax(s) moves by at most Δs/2 for a score error Δs (|∂p_j/∂s_k| ≤ 1/4,
            # two terms). s = q·k/√D carries the block input's relative error, float32's
            # rounding compounded through n + 1 pre-norm blocks of E-wide products (each
            # ~√E·u relative, random-walk) plus D·u of its own sum: with |s| ≤ 15 here
            # (the twin's largest is 13.4), Δs ≲ 15·(n + 1)·√(L·E)·u ≈ 15·4·√(16·256)·6e-8
            # ≈ 2.3e-4 at the last layer; Δp ≤ 1.2e-4. Measured: 4e-7 in every layer.
            atol = 0.5 * 15 * (n + 1) * np.sqrt(L * c["n_embd"]) * U
            err = np.abs(got[b] - w.numpy())
            assert err.max() <= atol, (f"row {b} layer {n}: max |Δp| {err.max():.3g} > {atol:.3g} at "
                                       f"{np.unravel_index(err.argmax(), err.shape)}")
            # Causal: exactly 0 above the diagonal.
            assert not np.triu(got[b], k=1).any(), f"row {b} layer {n}: a key after its query"


def test_gpt2_attentions_torch_in_torch_out():
    model = qkv.load_model(model_dir("sotu-gpt"))
    ids = torch.tensor(model.tokenizer.encode("the cat sat"))
    out = model(ids, output_attentions=True)
    assert torch.is_tensor(out["logits"]) and out["logits"].shape[0] == len(ids)
    assert all(torch.is_tensor(a) and a.shape == (1, 4, len(ids), len(ids)) for a in out["attentions"])
    with pytest.raises(TypeError, match="output_attentions"):
        model(ids, output_attentions="yes")


def images(n=3, seed=0):
    """Fashion-MNIST-shaped uint8 images: random ink on a dark background."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    x[:, :6] = 0
    return x


def test_vit_attentions_match_the_torch_twin():
    c = qkv.load_model(model_dir("fashion-vit"))
    pixels = images()
    out = c(pixels, output_attentions=True)
    config = c.config
    T = (config["image_size"] // config["patch_size"]) ** 2 + 1
    assert out["tokens"][:2] == ["[CLS]", "r0c0"] and len(out["tokens"]) == T
    assert out["probabilities"].shape == (3, config["classes"])
    np.testing.assert_allclose(out["probabilities"], c.predict_proba(pixels), rtol=0, atol=0)
    attentions = out["attentions"]
    assert len(attentions) == config["layers"]
    twin = twin_of(config, read_safetensors(os.path.join(model_dir("fashion-vit"), "model.safetensors")))
    # The classifier's input, as vision::to_input computes it in float32.
    x = (pixels.astype(np.float32) / np.float32(255) - qkv.vision.PIXEL_MEAN) / qkv.vision.PIXEL_STD
    with torch.no_grad():
        h = twin.embed(torch.from_numpy(x[:, None]).double())
        for n, block in enumerate(twin.blocks):
            y = block.norm1(h)
            _, want = block.self_attn(y, y, y, need_weights=True, average_attn_weights=False)
            got = attentions[n]
            assert got.dtype == np.float32 and got.shape == (3, config["heads"], T, T)
            # As test_vit.py's check of the same probabilities, for a deeper model: a score
            # error Δs moves p by ≤ Δs/2; the block input's relative error grows ~√(n+1)
            # blocks of float32 products (√E·u each, E = dim) and the score adds Dk·u:
            # Δs ≲ |s|·((n + 1)·√dim + Dk)·u with |s| ≤ 10 (the twin's largest is 5.7): at
            # n = 5, 10·(6·11.3 + 32)·6e-8 ≈ 6e-5, Δp ≲ 3e-5. Measured: ≤ 3e-7.
            atol = 0.5 * 10 * ((n + 1) * np.sqrt(config["dim"]) + config["dim"] / config["heads"]) * U
            err = np.abs(got - want.numpy())
            assert err.max() <= atol, f"block {n}: max |Δp| {err.max():.3g} > {atol:.3g}"
            np.testing.assert_allclose(got.sum(-1), 1.0, rtol=0, atol=T * U * 4, err_msg=f"block {n}")
            h = block(h)


def run_json(*args):
    r = subprocess.run([qkv_binary(), "run", *args, "--json"], capture_output=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_point_attentions_are_the_clis(tmp_path):
    c = qkv.load_model(model_dir("fashion-point"))
    pixels = images(1, seed=4)
    out = c(pixels[0], output_attentions=True)
    P = len(out["tokens"])
    assert P == 128 and all(a.shape == (1, 1, P, P) for a in out["attentions"])
    for a in out["attentions"]:
        np.testing.assert_allclose(a.sum(-1), 1.0, rtol=0, atol=P * U * 4)
        assert ((a > 0).sum(-1) <= 8).all()  # K = 8 neighbours per point
    (tmp_path / "i.pgm").write_bytes(b"P5 28 28 255\n" + pixels[0].tobytes())
    j = run_json("--model", model_dir("fashion-point"), "--image", str(tmp_path / "i.pgm"))
    assert j["tokens"] == out["tokens"]
    for got, want in zip(out["attentions"], j["groups"][0]["attention"]):
        np.testing.assert_array_equal(got[0], np.array(want, dtype=np.float32))


def test_date_translator_attentions_are_the_clis():
    d = qkv.load_model(model_dir("dates"))
    out = d("21 Nov 2026", output_attentions=True)
    assert out["output"] == "2026-11-21" and out["problem"] == ""
    S, T = len("21 Nov 2026"), len("2026-11-21") + 1
    assert out["source_tokens"][2] == "␣" and out["target_tokens"][0] == "<s>"
    shapes = {"encoder_attentions": (1, 4, S, S), "decoder_attentions": (1, 4, T, T),
              "cross_attentions": (1, 4, T, S)}
    j = run_json("--model", model_dir("dates"), "--text", "21 Nov 2026")
    for (key, shape), group in zip(shapes.items(), j["groups"]):
        assert len(out[key]) == 2 and all(a.shape == shape for a in out[key]), key
        for got, want in zip(out[key], group["attention"]):
            np.testing.assert_array_equal(got[0], np.array(want, dtype=np.float32), err_msg=key)
    assert not any(np.triu(a[0], k=1).any() for a in out["decoder_attentions"])
    assert d("21 Nov 2026") == {"output": "2026-11-21", "problem": ""}
    assert d.translate("21.11.2026") == "2026-11-21"
    with pytest.raises(ValueError):
        d("")

def test_date_translator_attentions_equal_the_torch_twin():
    """DateTranslator(text, output_attentions=True) against torch.nn.Transformer in float64 on
    the model's weights: the same source ids (the input's characters), the same decoder input
    (<s> and the translation's characters), every layer's and head's probabilities."""
    d = qkv.load_model(model_dir("dates"))
    text = "Saturday, 21 November 2026"
    out = d(text, output_attentions=True)
    src = np.array([_qkv._dates_encode(text)])
    tgt_in = np.array([[1] + _qkv._dates_encode(out["output"])])  # 1: <s> (dates.h Vocabulary::bos)
    twin = TorchSeq2Seq(d.config).double()
    twin.load_state_dict({k: torch.from_numpy(v).double() for k, v in d._impl.state_dict().items()})
    encoder, decoder, cross = [], [], []
    for layer in twin.transformer.encoder.layers:
        recorded_attention(layer.self_attn, encoder)
    for layer in twin.transformer.decoder.layers:
        recorded_attention(layer.self_attn, decoder)
        recorded_attention(layer.multihead_attn, cross)
    twin(torch.from_numpy(src), [src.shape[1]], torch.from_numpy(tgt_in))
    # Float32 against float64. test_train.py bounds this model's float32 logits at 1e-5 of
    # their scale; the attention scores come earlier in the same chain of products, so each is
    # within 1e-5 of the scores' scale, which is at least the spread of a row (the largest
    # log-probability minus the smallest nonzero one, exact in the float64 twin). A
    # probability moves by at most twice the largest error of its row's scores
    # (|dp_i| = p_i·|ds_i - sum_j p_j ds_j|), so the bound is 2 · 1e-5 · spread.
    spread = max(float((torch.log(w.amax(-1)) - torch.log(torch.where(w > 0, w, w.amax(-1, keepdim=True)))
                        .amin(-1)).max()) for w in encoder + decoder + cross)
    atol = 2 * 1e-5 * spread
    for key, want in (("encoder_attentions", encoder), ("decoder_attentions", decoder),
                      ("cross_attentions", cross)):
        assert len(out[key]) == len(want) == 2, key
        for layer, (got, w) in enumerate(zip(out[key], want)):
            assert got.shape == tuple(w.shape), (key, layer, got.shape, w.shape)
            np.testing.assert_allclose(got, w.numpy(), rtol=0, atol=atol, err_msg=f"{key} layer {layer}")


def test_point_attentions_equal_the_torch_twin():
    """Classifier(image, output_attentions=True) on models/fashion-point against the float64
    twin of test_point_transformer.py: the same points (image_to_points with seed 0, counter
    0, as inference samples them), and each point's weight on a neighbour the mean over the C
    channels of the softmax over its K neighbours, scattered into (P, P)."""
    c = qkv.load_model(model_dir("fashion-point"))
    config = json.load(open(os.path.join(model_dir("fashion-point"), "config.json")))
    pixels = images(1, seed=4)
    out = c(pixels[0], output_attentions=True)
    P = config["points"]
    points = _qkv._pt_images_to_points(pixels[:1], P, 0, 0, config["patch_size"])  # (1, P, F)
    weights = read_safetensors(os.path.join(model_dir("fashion-point"), "model.safetensors"))
    sd = {k: torch.from_numpy(np.asarray(v, dtype=np.float64)) for k, v in weights.items()}
    record = []
    point_twin(sd, config, torch.from_numpy(points).double(), record)
    assert len(out["attentions"]) == len(record) == config["blocks"]
    for block, (got, (softmax, idx)) in enumerate(zip(out["attentions"], record)):
        want = torch.zeros(P, P, dtype=torch.float64)
        want.scatter_add_(1, idx[0], softmax[0].mean(-1))
        # Float32 against float64: the logits come from products of length <= max(C·m, 2C,
        # Hh) = 64 through the blocks before (test_point_transformer.py bounds the logits at
        # 16u relative per product); a softmax weight moves by at most twice its logit's
        # error, and the logits here stay below 64 in magnitude: 2 · 64 · 16 · 2^-24 · 8
        # (products chained to the last block) < 1e-3.
        np.testing.assert_allclose(got[0, 0], want.numpy(), rtol=0, atol=1e-3, err_msg=f"block {block}")
