"""`qkv run` (BERT) against PyTorch, on synthetic checkpoints in Hugging Face's naming.

The checkpoint (config.json, vocab.txt, model.safetensors written by hand, per the
safetensors format) holds random weights. The reference is torch: the BERT embeddings,
then a stack of torch.nn.TransformerEncoderLayer(activation="gelu", post-norm,
layer_norm_eps=1e-12, batch_first=True) with the HF weights mapped onto it
(in_proj_weight = cat(query, key, value)), then the pooler — all in float64, eval mode.

Also usable as a script, to write a checkpoint for tests/cli/test_models.sh:
    /usr/bin/python3 tests/python/test_bert.py write DIR [--prefix] [--gamma-beta]
"""

import json
import os
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))

CONFIG = {
    "model_type": "bert",
    "architectures": ["BertModel"],
    "vocab_size": 120,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "hidden_act": "gelu",
    "max_position_embeddings": 40,
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
    "position_embedding_type": "absolute",
}

WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "play", "run", "hello", "world",
         ".", ",", "!", "##s", "##ing", "##ed", "un", "##happy", "happy"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS


def hf_weights(seed=0):
    """name -> float32 array, HF names without the "bert." prefix, LayerNorm weight/bias."""
    rng = np.random.default_rng(seed)
    c = CONFIG
    E, F = c["hidden_size"], c["intermediate_size"]
    w = {}

    def rand(name, shape, scale):
        w[name] = (scale * rng.standard_normal(shape)).astype(np.float32)

    def norm(name):
        w[name + ".weight"] = (1 + 0.1 * rng.standard_normal(E)).astype(np.float32)
        rand(name + ".bias", (E,), 0.1)

    rand("embeddings.word_embeddings.weight", (c["vocab_size"], E), 1.0)
    rand("embeddings.position_embeddings.weight", (c["max_position_embeddings"], E), 1.0)
    rand("embeddings.token_type_embeddings.weight", (c["type_vocab_size"], E), 1.0)
    norm("embeddings.LayerNorm")
    for n in range(c["num_hidden_layers"]):
        p = f"encoder.layer.{n}."
        for m in ("query", "key", "value"):
            rand(p + f"attention.self.{m}.weight", (E, E), 0.3)
            rand(p + f"attention.self.{m}.bias", (E,), 0.1)
        rand(p + "attention.output.dense.weight", (E, E), 0.2)
        rand(p + "attention.output.dense.bias", (E,), 0.1)
        norm(p + "attention.output.LayerNorm")
        rand(p + "intermediate.dense.weight", (F, E), 0.2)
        rand(p + "intermediate.dense.bias", (F,), 0.1)
        rand(p + "output.dense.weight", (E, F), 0.2)
        rand(p + "output.dense.bias", (E,), 0.1)
        norm(p + "output.LayerNorm")
    rand("pooler.dense.weight", (E, E), 0.2)
    rand("pooler.dense.bias", (E,), 0.1)
    return w


def write_safetensors(path, tensors):
    """The safetensors format by hand: u64 LE header size, JSON header, data."""
    dtypes = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64"}
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        data = a.tobytes()
        header[name] = {"dtype": dtypes[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def write_checkpoint(directory, prefix=False, gamma_beta=False, seed=0, drop=None,
                     config=None):
    """A HF BERT directory. prefix: names under "bert." plus a cls.* head and the I64
    position_ids buffer (as BertForPreTraining saves them); gamma_beta: LayerNorm
    parameters named gamma/beta (old TF conversions); drop: a tensor name to leave out."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config or CONFIG, f)
    with open(os.path.join(directory, "vocab.txt"), "w") as f:
        f.write("\n".join(VOCAB) + "\n")
    weights = hf_weights(seed)
    out = {}
    for name, a in weights.items():
        if name == drop:
            continue
        if gamma_beta and "LayerNorm" in name:
            name = name.replace(".weight", ".gamma").replace(".bias", ".beta")
        out[("bert." if prefix else "") + name] = a
    if prefix:
        out["bert.embeddings.position_ids"] = np.arange(
            CONFIG["max_position_embeddings"], dtype=np.int64)[None]
        out["cls.predictions.bias"] = np.zeros(CONFIG["vocab_size"], np.float32)
        out["cls.predictions.transform.dense.weight"] = np.zeros(
            (CONFIG["hidden_size"], CONFIG["hidden_size"]), np.float32)
    write_safetensors(os.path.join(directory, "model.safetensors"), out)
    return weights


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        assert info["dtype"] == "F32", (name, info["dtype"])
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype=np.float32).reshape(info["shape"])
    return out


def torch_reference(weights, ids, types):
    """(last_hidden_state (1, L, E), pooler_output (1, E), [probs (1, H, L, L)] per layer)."""
    import torch

    c = CONFIG
    E, H = c["hidden_size"], c["num_attention_heads"]
    t = {k: torch.from_numpy(v.copy()).double() for k, v in weights.items()}
    ids = torch.tensor([ids])
    types = torch.tensor([types])
    L = ids.shape[1]
    with torch.no_grad():
        x = (t["embeddings.word_embeddings.weight"][ids]
             + t["embeddings.position_embeddings.weight"][:L][None]
             + t["embeddings.token_type_embeddings.weight"][types])
        x = torch.nn.functional.layer_norm(x, (E,), t["embeddings.LayerNorm.weight"],
                                           t["embeddings.LayerNorm.bias"], 1e-12)
        probs = []
        for n in range(c["num_hidden_layers"]):
            p = f"encoder.layer.{n}."
            layer = torch.nn.TransformerEncoderLayer(
                E, H, c["intermediate_size"], dropout=0.0, activation="gelu",
                layer_norm_eps=1e-12, batch_first=True).double().eval()
            sa = layer.self_attn
            sa.in_proj_weight.copy_(torch.cat([t[p + f"attention.self.{m}.weight"]
                                               for m in ("query", "key", "value")]))
            sa.in_proj_bias.copy_(torch.cat([t[p + f"attention.self.{m}.bias"]
                                             for m in ("query", "key", "value")]))
            sa.out_proj.weight.copy_(t[p + "attention.output.dense.weight"])
            sa.out_proj.bias.copy_(t[p + "attention.output.dense.bias"])
            layer.norm1.weight.copy_(t[p + "attention.output.LayerNorm.weight"])
            layer.norm1.bias.copy_(t[p + "attention.output.LayerNorm.bias"])
            layer.linear1.weight.copy_(t[p + "intermediate.dense.weight"])
            layer.linear1.bias.copy_(t[p + "intermediate.dense.bias"])
            layer.linear2.weight.copy_(t[p + "output.dense.weight"])
            layer.linear2.bias.copy_(t[p + "output.dense.bias"])
            layer.norm2.weight.copy_(t[p + "output.LayerNorm.weight"])
            layer.norm2.bias.copy_(t[p + "output.LayerNorm.bias"])
            _, w = sa(x, x, x, need_weights=True, average_attn_weights=False)
            probs.append(w.numpy())
            x = layer(x)
        pooled = torch.tanh(x[:, 0] @ t["pooler.dense.weight"].T + t["pooler.dense.bias"])
    return x.numpy(), pooled.numpy(), probs


def qkv_binary():
    """$QKV_BIN, else the qkv next to the Python package under test (<build>/python/qkv ->
    <build>/qkv, as ctest sets PYTHONPATH), else <repo>/build/qkv."""
    if "QKV_BIN" in os.environ:
        return os.environ["QKV_BIN"]
    try:
        import qkv

        build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(qkv.__file__))))
        if os.path.isfile(os.path.join(build, "qkv")):
            return os.path.join(build, "qkv")
    except ImportError:
        pass
    return os.path.join(ROOT, "build", "qkv")


def run_qkv(*args):
    return subprocess.run([qkv_binary(), *args], capture_output=True, text=True, timeout=120)


# Tolerance, derived: qkv computes in f32 (u = 2^-24), the reference in f64. Each f32 dot
# product of K <= 64 terms errs by <= K·u·Σ|a·b| (Higham §3.1); with O(1) layer-normed
# inputs and weights of scale <= 0.3, Σ|a·b| <= 64·0.3·3 ≈ 60, so ≈ 2e-4 in the worst
# case per product, typically √K·u·Σ|a·b| ≈ 3e-5. LayerNorm divides by σ ≈ 1 and 2 layers
# add up: atol 1e-4 on hidden states (O(1) values) and pooler; 1e-5 on probabilities,
# which are softmax-damped (|Δp| <= p·|Δs|, |Δs| <= D·u·Σ|q·k| ≈ 1e-5 for D = 8).
ATOL_HIDDEN = 1e-4
ATOL_PROBS = 1e-5


def check_against_torch(tmp_path, directory):
    out = str(tmp_path / "out.safetensors")
    r = run_qkv("run", "--model", directory, "--text", "The cat sat on the mat.",
                "--pair", "a dog plays", "--layer", "0", "--head", "1", "--output", out)
    assert r.returncode == 0, r.stderr
    assert "attention, layer 0, head 1 (layers 0-1, heads 0-3; rows: queries, columns: keys)" in r.stdout
    got = read_safetensors(out)
    ids = [int(v) for v in got["input_ids"][0]]
    types = [int(v) for v in got["token_type_ids"][0]]
    vocab = {t: i for i, t in enumerate(VOCAB)}
    want_tokens = ["[CLS]", "the", "cat", "sat", "on", "the", "mat", ".", "[SEP]",
                   "a", "dog", "play", "##s", "[SEP]"]
    assert ids == [vocab[t] for t in want_tokens]
    assert types == [0] * 9 + [1] * 5
    hidden, pooled, probs = torch_reference(hf_weights(0), ids, types)
    L, E, H = len(ids), CONFIG["hidden_size"], CONFIG["num_attention_heads"]
    assert got["last_hidden_state"].shape == (1, L, E)
    err = np.abs(got["last_hidden_state"] - hidden)
    assert err.max() <= ATOL_HIDDEN, f"hidden max err {err.max()} at {np.unravel_index(err.argmax(), err.shape)}"
    err = np.abs(got["pooler_output"] - pooled)
    assert err.max() <= ATOL_HIDDEN, f"pooler max err {err.max()}"
    for n in range(CONFIG["num_hidden_layers"]):
        a = got[f"attentions.{n}"]
        assert a.shape == (1, H, L, L)
        err = np.abs(a - probs[n])
        assert err.max() <= ATOL_PROBS, f"attentions.{n} max err {err.max()} at {np.unravel_index(err.argmax(), err.shape)}"
    return got


def test_bert_matches_torch(tmp_path):
    d = str(tmp_path / "plain")
    write_checkpoint(d)
    check_against_torch(tmp_path, d)


def test_bert_prefix_gamma_beta_and_extras_match_torch(tmp_path):
    plain = str(tmp_path / "plain")
    write_checkpoint(plain)
    base = check_against_torch(tmp_path, plain)
    d = str(tmp_path / "prefixed")
    write_checkpoint(d, prefix=True, gamma_beta=True)
    got = check_against_torch(tmp_path, d)
    for name, a in base.items():
        np.testing.assert_array_equal(got[name], a)  # the same weights: bitwise equal


def test_bert_missing_tensor_is_named(tmp_path):
    d = str(tmp_path / "broken")
    write_checkpoint(d, drop="encoder.layer.1.attention.self.value.bias")
    r = run_qkv("run", "--model", d, "--text", "the cat")
    assert r.returncode == 1
    assert "encoder.layer.1.attention.self.value.bias" in r.stderr
    assert "(32,)" in r.stderr


def test_bert_too_long_input(tmp_path):
    d = str(tmp_path / "plain")
    write_checkpoint(d)
    r = run_qkv("run", "--model", d, "--text", " ".join(["cat"] * 39))  # 41 tokens > 40
    assert r.returncode == 1
    assert "max_position_embeddings = 40" in r.stderr


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "write":
        write_checkpoint(sys.argv[2], prefix="--prefix" in sys.argv,
                         gamma_beta="--gamma-beta" in sys.argv)
    else:
        sys.exit("usage: test_bert.py write DIR [--prefix] [--gamma-beta]")
