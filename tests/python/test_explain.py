"""`qkv explain --model`: one layer of a real model walked by hand, against float64 torch twins.

On a random BERT (test_bert.write_checkpoint) and a random GPT-2 (test_gpt2.write_model),
`qkv explain --model ... --json` must give the twin's values for the walked layer: its input
rows x, head H's Q, K and V rows, the scores Q·Kᵀ/√d_k (GPT-2: −∞, JSON null, above the
diagonal), token A's softmax row, A's weighted sum and the layer's output; and every one of
its own checks (against the library) must say ok. The twins here are written from the
architectures' definitions (BERT post-LN with erf GELU, GPT-2 pre-LN with gelu_new), not from
qkv. The date translator (models/dates, its encoder) and USE-lite (when the use_lite fixture
has fetched it) are checked through explain's own checks, and bad input through its errors.

Tolerance: the JSON values are computed in double from the model's float32 hidden state x,
which differs from the float64 twin's by test_bert's ATOL_HIDDEN (1e-4, derived there for
these sizes); each later step multiplies by weights of scale <= 0.52 over E = 32 terms and
LayerNorm divides by σ ≈ 1, so relative 1e-4 plus absolute 2e-4 covers Q/K/V, scores and
outputs; probabilities are softmax-damped (|Δp| <= |Δs|/2): 1e-4.
"""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_bert import CONFIG as BERT_CONFIG  # noqa: E402
from test_bert import VOCAB as BERT_VOCAB  # noqa: E402
from test_bert import qkv_binary, write_checkpoint  # noqa: E402
from test_gpt2 import HEADS as GPT_HEADS  # noqa: E402
from test_gpt2 import VOCAB as GPT_VOCAB  # noqa: E402
from test_gpt2 import gelu_new, make_weights, write_model  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
RTOL, ATOL, ATOL_PROBS = 1e-4, 2e-4, 1e-4


def explain(*args):
    return subprocess.run([qkv_binary(), "explain", *args], capture_output=True, text=True, timeout=60)


def explain_json(*args):
    r = explain(*args, "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["checks"] and all(c["ok"] for c in j["checks"]), j["checks"]
    return j


def close(got, want, atol=ATOL):
    got = np.array([[np.nan if v is None else v for v in row] for row in got], dtype=float) \
        if isinstance(got[0], list) else np.array(got, dtype=float)
    want = np.asarray(want, dtype=float)
    finite = np.isfinite(want)
    assert np.array_equal(np.isnan(got), ~finite), "masked entries differ"
    np.testing.assert_allclose(got[finite], want[finite], rtol=RTOL, atol=atol)


def layer_norm(x, w, b, eps):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps)


def attention_steps(q, k, v, heads, causal):
    """q, k, v (L, E) -> per head (H, L, D) q, k, v, scores, probs, and the concat (L, E)."""
    L, E = q.shape
    D = E // heads
    q, k, v = (t.view(L, heads, D).transpose(0, 1) for t in (q, k, v))
    s = q @ k.transpose(1, 2) / math.sqrt(D)
    if causal:
        s = s.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), float("-inf"))
    p = torch.softmax(s, dim=-1)
    return q, k, v, s, p, (p @ v).transpose(0, 1).reshape(L, E)


def bert_twin(weights, ids, layer):
    """BERT (post-LN): x of `layer`, and its steps, float64."""
    c = BERT_CONFIG
    t = {k: torch.from_numpy(v.copy()).double() for k, v in weights.items()}
    eps, H, L = c["layer_norm_eps"], c["num_attention_heads"], len(ids)
    x = (t["embeddings.word_embeddings.weight"][ids] + t["embeddings.position_embeddings.weight"][:L]
         + t["embeddings.token_type_embeddings.weight"][0])
    x = layer_norm(x, t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"], eps)
    for n in range(layer + 1):
        p = f"encoder.layer.{n}."
        lin = lambda z, name: z @ t[p + name + ".weight"].T + t[p + name + ".bias"]  # noqa: E731
        steps = attention_steps(lin(x, "attention.self.query"), lin(x, "attention.self.key"),
                                lin(x, "attention.self.value"), H, False)
        h = layer_norm(x + lin(steps[-1], "attention.output.dense"),
                       t[p + "attention.output.LayerNorm.weight"], t[p + "attention.output.LayerNorm.bias"], eps)
        f = lin(torch.nn.functional.gelu(lin(h, "intermediate.dense")), "output.dense")
        y = layer_norm(h + f, t[p + "output.LayerNorm.weight"], t[p + "output.LayerNorm.bias"], eps)
        if n == layer:
            return x, steps, y
        x = y


def gpt2_twin(w, ids, layer):
    """GPT-2 (pre-LN, causal, gelu_new; Conv1D weights (in, out)): x of `layer`, its steps."""
    w = {k: v.double() for k, v in w.items()}
    L, E = len(ids), w["wte.weight"].shape[1]
    x = w["wte.weight"][ids] + w["wpe.weight"][:L]
    for n in range(layer + 1):
        p = f"h.{n}."
        a = layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], 1e-5)
        qkv = a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        steps = attention_steps(*qkv.split(E, dim=-1), GPT_HEADS, True)
        h = x + steps[-1] @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        m = layer_norm(h, w[p + "ln_2.weight"], w[p + "ln_2.bias"], 1e-5)
        y = h + gelu_new(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"]) @ w[p + "mlp.c_proj.weight"] \
            + w[p + "mlp.c_proj.bias"]
        if n == layer:
            return x, steps, y
        x = y


def check_against_twin(j, twin, head):
    x, (q, k, v, s, p, _), y = twin
    a = j["token"]
    close(j["x"], x)
    close(j["q"], q[head])
    close(j["k"], k[head])
    close(j["v"], v[head])
    close(j["scores"], s[head])
    close(j["probs_row"], p[head, a], atol=ATOL_PROBS)
    close(j["weighted_sum"], (p[head] @ v[head])[a])
    close(j["output"], y)


def test_bert_layer_matches_torch(tmp_path):
    d = str(tmp_path / "bert")
    weights = write_checkpoint(d, seed=3)
    j = explain_json("--model", d, "--text", "the cat sat on the mat", "--token", "cat", "--layer", "1", "--head", "2")
    assert j["tokens"] == ["[CLS]", "the", "cat", "sat", "on", "the", "mat", "[SEP]"]
    assert (j["token"], j["layer"], j["head"], j["norm"], j["causal"]) == (2, 1, 2, "post", False)
    ids = [BERT_VOCAB.index(t) for t in j["tokens"]]
    check_against_twin(j, bert_twin(weights, ids, 1), 2)


def test_gpt2_layer_matches_torch(tmp_path):
    d = str(tmp_path / "gpt2")
    weights = make_weights(seed=5)
    write_model(d, weights)
    j = explain_json("--model", d, "--text", "the cat sat on the mat", "--layer", "1", "--head", "3")
    assert (j["norm"], j["causal"], j["token"]) == ("pre", True, len(j["tokens"]) - 1)  # default A: the last
    assert j["scores"][0][1] is None  # masked: −∞
    ids = [GPT_VOCAB[t] for t in j["tokens"]]
    check_against_twin(j, gpt2_twin(weights, ids, 1), 3)


def test_text_walk_checks_every_step(tmp_path):
    d = str(tmp_path / "bert")
    write_checkpoint(d)
    r = explain("--model", d, "--text", "the dog sat")
    assert r.returncode == 0, r.stderr
    for step in ("The layer's input x", "Queries, keys, values of head 0", "Scores", "Softmax: token A's row",
                 "Weighted sum", "output projection", "LayerNorm (post-LN", "Feed-forward", "The layer's output"):
        assert step in r.stdout, step
    assert r.stdout.count("✓") == 6 and "✗" not in r.stdout
    assert "All 6 checks match" in r.stdout


def test_dates_encoder_layer():
    for layer in ("0", "1"):
        j = explain_json("--model", os.path.join(ROOT, "models", "dates"), "--text", "21 November 2026",
                         "--token", "N", "--layer", layer)
        assert j["group"] == "encoder self-attention" and j["norm"] == "pre"
    r = explain("--model", os.path.join(ROOT, "models", "dates"), "--text", "21 November 2026")
    assert r.returncode == 0 and "its decoder is not walked" in r.stdout


def use_lite_dir():
    for d in (os.environ.get("QKV_TEST_USE_DIR", ""), os.path.join(os.path.dirname(qkv_binary()), "tests", "use_lite", "model")):
        if d and os.path.isfile(os.path.join(d, "model.safetensors")):
            return d
    return None


@pytest.mark.skipif(use_lite_dir() is None, reason="USE-lite is fetched by the use_lite fixture (tests/models)")
def test_use_lite_layers():
    for layer in ("0", "1"):
        j = explain_json("--model", use_lite_dir(), "--text", "The quick brown fox jumps", "--layer", layer)
        assert j["norm"] == "pre" and len(j["output"][0]) == 512


def test_bad_input(tmp_path):
    d = str(tmp_path / "bert")
    write_checkpoint(d)
    r = explain("--model", d, "--text", "the cat sat", "--token", "dog")
    assert r.returncode == 2 and "'dog' is not a token of the input; its tokens: '[CLS]' 'the' 'cat'" in r.stderr
    r = explain("--model", d, "--text", "the cat sat", "--layer", "2")
    assert r.returncode == 2 and "--layer: must be in [0, 1]: the self-attention has layers 0-1, got 2" in r.stderr
    r = explain("--model", d, "--text", "the cat sat", "--head", "4")
    assert r.returncode == 2 and "--head: must be in [0, 3]" in r.stderr
    r = explain("--model", os.path.join(ROOT, "models", "fashion-vit"), "--text", "a shirt")
    assert r.returncode == 1 and "this model is qkv-vision, whose input is an image" in r.stderr, r.stderr
    r = explain("--layer", "1")
    assert r.returncode == 2 and "--layer: is for --model" in r.stderr
