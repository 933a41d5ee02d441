"""`qkv generate` (GPT-2) against a PyTorch reference of the published architecture.

A small GPT-2 with random weights is written in Hugging Face's exact layout (config.json,
model.safetensors with GPT2LMHeadModel's names and Conv1D (in, out) weights, vocab.json +
merges.txt of a byte-level BPE: the 256 byte symbols of bytes_to_unicode, a few merges,
and <|endoftext|> last). The reference below recomputes the whole sequence at every step
(no cache), in float64, and decodes greedily; build/qkv must produce the same ids.

Also usable as a writer for the CLI test:
    /usr/bin/python3 tests/python/test_gpt2.py write DIR [--prefix] [--n-positions N]
"""

import json
import math
import os
import struct
import subprocess
import sys

import torch

E, LAYERS, HEADS, POSITIONS = 32, 2, 4, 64
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("o", "n"),
          ("e", "r"), ("Ġ", "s"), ("r", "e"), ("a", "t"), ("e", "n"), ("Ġ", "c"),
          ("o", "r"), ("Ġ", "w"), ("i", "s"), ("Ġ", "o"), ("l", "l"), ("a", "n"),
          ("Ġ", "b"), ("Ġc", "at")]
EOT = "<|endoftext|>"


def bytes_to_unicode():
    """GPT-2's table (openai/gpt-2 encoder.py): printable bytes map to themselves, the
    rest to 256 + n."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs])), bs


def make_vocab():
    table, order = bytes_to_unicode()
    vocab = {table[b]: i for i, b in enumerate(order)}
    for a, b in MERGES:
        vocab[a + b] = len(vocab)
    vocab[EOT] = len(vocab)
    return vocab


VOCAB = make_vocab()
V = len(VOCAB)
EOT_ID = VOCAB[EOT]


def decode(ids):
    table, _ = bytes_to_unicode()
    inverse = {c: b for b, c in table.items()}
    tokens = {i: t for t, i in VOCAB.items()}
    out = bytearray()
    for i in ids:
        t = tokens[i]
        out += t.encode() if t == EOT else bytes(inverse[c] for c in t)
    return bytes(out)


def make_weights(seed=0, n_positions=POSITIONS):
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, scale=1.0, mean=0.0):
        return (mean + scale * torch.randn(*shape, generator=g, dtype=torch.float64)).float()

    w = {"wte.weight": rnd(V, E, scale=0.2), "wpe.weight": rnd(n_positions, E, scale=0.2)}
    for i in range(LAYERS):
        p = f"h.{i}."
        w[p + "ln_1.weight"] = rnd(E, scale=0.1, mean=1.0)
        w[p + "ln_1.bias"] = rnd(E, scale=0.1)
        w[p + "attn.c_attn.weight"] = rnd(E, 3 * E, scale=0.52)  # Conv1D: (in, out)
        w[p + "attn.c_attn.bias"] = rnd(3 * E, scale=0.1)
        w[p + "attn.c_proj.weight"] = rnd(E, E, scale=0.35)
        w[p + "attn.c_proj.bias"] = rnd(E, scale=0.1)
        w[p + "ln_2.weight"] = rnd(E, scale=0.1, mean=1.0)
        w[p + "ln_2.bias"] = rnd(E, scale=0.1)
        w[p + "mlp.c_fc.weight"] = rnd(E, 4 * E, scale=0.35)
        w[p + "mlp.c_fc.bias"] = rnd(4 * E, scale=0.1)
        w[p + "mlp.c_proj.weight"] = rnd(4 * E, E, scale=0.17)
        w[p + "mlp.c_proj.bias"] = rnd(E, scale=0.1)
    w["ln_f.weight"] = rnd(E, scale=0.1, mean=1.0)
    w["ln_f.bias"] = rnd(E, scale=0.1)
    return w


def write_safetensors(path, tensors):
    """The safetensors format by hand: u64 LE header size, JSON header, data."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        if t.dtype == torch.bool:
            dtype, data = "BOOL", t.to(torch.uint8).contiguous().numpy().tobytes()
        else:
            dtype, data = "F32", t.to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def write_model(directory, weights, prefix=False, n_positions=POSITIONS, model_type="gpt2"):
    os.makedirs(directory, exist_ok=True)
    config = {"model_type": model_type, "architectures": ["GPT2LMHeadModel"], "vocab_size": V,
              "n_positions": n_positions, "n_ctx": n_positions, "n_embd": E, "n_layer": LAYERS,
              "n_head": HEADS, "n_inner": None, "layer_norm_epsilon": 1e-5,
              "activation_function": "gelu_new", "bos_token_id": EOT_ID,
              "eos_token_id": EOT_ID}
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(directory, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(VOCAB, f, ensure_ascii=False)
    with open(os.path.join(directory, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in MERGES:
            f.write(f"{a} {b}\n")
    tensors = {}
    pre = "transformer." if prefix else ""
    for name, t in weights.items():
        tensors[pre + name] = t
        if name.endswith("ln_1.weight"):  # the buffers real checkpoints carry; ignored
            block = name[: -len("ln_1.weight")]
            tensors[pre + block + "attn.bias"] = torch.tril(
                torch.ones(n_positions, n_positions, dtype=torch.bool)).view(
                    1, 1, n_positions, n_positions)
            tensors[pre + block + "attn.masked_bias"] = torch.tensor(-1e4)
    if prefix:
        tensors["lm_head.weight"] = weights["wte.weight"].clone()  # tied
    write_safetensors(os.path.join(directory, "model.safetensors"), tensors)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def reference_logits(w, ids, heads=HEADS, attentions=None):
    """GPT2LMHeadModel's forward over the whole sequence, float64. ids: list -> (L, V).

    w: Hugging Face's names (a "transformer." prefix is dropped), Conv1D (in, out) weights;
    the width and the layer count are read from them, the head count is `heads`.
    attentions, a list, receives every layer's probabilities (H, L, L)."""
    w = {k.removeprefix("transformer."): v.double() if torch.is_tensor(v) else torch.from_numpy(v.astype("float64"))
         for k, v in w.items()}  # torch tensors, or NumPy arrays (read_safetensors')
    E = w["wte.weight"].shape[1]
    layers = sum(1 for k in w if k.startswith("h.") and k.endswith(".ln_1.weight"))
    L, D = len(ids), E // heads
    x = w["wte.weight"][ids] + w["wpe.weight"][:L]
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    for i in range(layers):
        p = f"h.{i}."
        a = torch.nn.functional.layer_norm(x, (E,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], 1e-5)
        qkv = a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # Conv1D: x·W + b
        q, k, v = (t.view(L, heads, D).transpose(0, 1) for t in qkv.split(E, dim=-1))
        s = (q @ k.transpose(1, 2)) / math.sqrt(D)
        s = s.masked_fill(~causal, float("-inf"))
        probs = torch.softmax(s, dim=-1)  # (H, L, L)
        if attentions is not None:
            attentions.append(probs)
        o = (probs @ v).transpose(0, 1).reshape(L, E)
        x = x + o @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        m = torch.nn.functional.layer_norm(x, (E,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], 1e-5)
        h = gelu_new(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = torch.nn.functional.layer_norm(x, (E,), w["ln_f.weight"], w["ln_f.bias"], 1e-5)
    return x @ w["wte.weight"].T  # tied lm_head


def reference_greedy(w, prompt_ids, max_new_tokens):
    """Greedy decoding recomputing the whole sequence each step; stops after <|endoftext|>.
    Returns the ids and the smallest top-1/top-2 logit margin met (to judge near-ties)."""
    ids, out, margin = list(prompt_ids), [], float("inf")
    for _ in range(max_new_tokens):
        logits = reference_logits(w, ids)[-1]
        top = torch.topk(logits, 2).values
        margin = min(margin, float(top[0] - top[1]))
        nxt = int(torch.argmax(logits))
        out.append(nxt)
        ids.append(nxt)
        if nxt == EOT_ID:
            break
    return out, margin


def qkv_binary():
    if os.environ.get("QKV_BIN"):
        return os.environ["QKV_BIN"]
    for entry in sys.path:  # ctest: PYTHONPATH=<build>/python
        candidate = os.path.join(os.path.dirname(os.path.abspath(entry)), "qkv")
        if entry.rstrip("/").endswith("python") and os.path.isfile(candidate) \
                and os.access(candidate, os.X_OK):
            return candidate
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "..", "..", "build", "qkv")


def run_qkv(*args):
    return subprocess.run([qkv_binary(), "generate", *args], capture_output=True, timeout=120)


def generate_json(model_dir, prompt, *extra):
    r = run_qkv("--model", str(model_dir), "--prompt", prompt, "--json", *extra)
    assert r.returncode == 0, r.stderr.decode()
    lines = r.stdout.decode().splitlines()
    assert len(lines) == 1, r.stdout  # --json keeps stdout to the one object
    return json.loads(lines[0])


PROMPT = "the cat is in the hat, on a boat"


if __name__ == "__main__" and len(sys.argv) >= 3 and sys.argv[1] == "write":
    n = POSITIONS
    if "--n-positions" in sys.argv:
        n = int(sys.argv[sys.argv.index("--n-positions") + 1])
    write_model(sys.argv[2], make_weights(0, n), prefix="--prefix" in sys.argv, n_positions=n)
    sys.exit(0)


import pytest  # noqa: E402  (the writer above needs only torch)


@pytest.fixture(scope="module")
def weights():
    return make_weights(0)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, weights):
    d = tmp_path_factory.mktemp("gpt2")
    write_model(d, weights)
    return d


def test_greedy_matches_torch_reference(model_dir, weights):
    out = generate_json(model_dir, PROMPT, "--max-new-tokens", "10")
    assert set(out) == {"prompt_ids", "ids", "text"}
    assert decode(out["prompt_ids"]) == PROMPT.encode()
    assert len(out["prompt_ids"]) < len(PROMPT.encode())  # merges applied
    want, margin = reference_greedy(weights, out["prompt_ids"], 10)
    assert out["ids"] == want, f"smallest top-1/top-2 margin in the reference: {margin}"
    assert margin > 1e-3, "near-tie in the reference: pick another seed"
    assert len(set(want)) > 3  # a model that repeats one token would make a weak test
    text_ids = [i for i in out["ids"] if i != EOT_ID]
    assert out["text"] == decode(text_ids).decode("utf-8", errors="replace")


def test_prefixed_checkpoint_generates_the_same(model_dir, weights, tmp_path):
    write_model(tmp_path, weights, prefix=True)
    a = generate_json(model_dir, PROMPT, "--max-new-tokens", "8")
    b = generate_json(tmp_path, PROMPT, "--max-new-tokens", "8")
    assert a == b


def test_generation_fills_the_context_exactly(model_dir, weights):
    prompt = "on a boat"
    out = generate_json(model_dir, prompt, "--max-new-tokens", "1")
    room = POSITIONS - len(out["prompt_ids"])
    out = generate_json(model_dir, prompt, "--max-new-tokens", str(room))
    want, _ = reference_greedy(weights, out["prompt_ids"], room)
    assert out["ids"] == want


def test_sampling_is_seeded(model_dir):
    args = ("--max-new-tokens", "16", "--temperature", "1.5")
    a = generate_json(model_dir, PROMPT, *args, "--seed", "5")
    assert generate_json(model_dir, PROMPT, *args, "--seed", "5") == a
    others = [generate_json(model_dir, PROMPT, *args, "--seed", str(s))["ids"] for s in range(6, 10)]
    assert any(ids != a["ids"] for ids in others)


def test_degenerate_sampling_is_greedy(model_dir):
    greedy = generate_json(model_dir, PROMPT, "--max-new-tokens", "10")
    k1 = generate_json(model_dir, PROMPT, "--max-new-tokens", "10", "--temperature", "2",
                       "--top-k", "1", "--seed", "3")
    p_tiny = generate_json(model_dir, PROMPT, "--max-new-tokens", "10", "--temperature", "2",
                           "--top-p", "1e-9", "--seed", "4")
    assert k1["ids"] == greedy["ids"]
    assert p_tiny["ids"] == greedy["ids"]


def test_text_mode_streams_prompt_and_continuation(model_dir):
    r = run_qkv("--model", str(model_dir), "--prompt", PROMPT, "--max-new-tokens", "5")
    assert r.returncode == 0, r.stderr.decode()
    out = generate_json(model_dir, PROMPT, "--max-new-tokens", "5")
    assert r.stdout == PROMPT.encode() + decode([i for i in out["ids"] if i != EOT_ID]) + b"\n"
    assert b"tokens" in r.stderr


def test_too_long_prompt_fails(model_dir):
    r = run_qkv("--model", str(model_dir), "--prompt", "x" * (POSITIONS + 5), "--json")
    assert r.returncode == 1
    assert b"n_positions" in r.stderr and b"longer" in r.stderr
    assert r.stdout == b""
    # A continuation that cannot fit after the prompt: --max-new-tokens is out of its range
    # for this model and prompt, a usage error before anything is printed.
    r = run_qkv("--model", str(model_dir), "--prompt", "x" * 60, "--max-new-tokens", "10")
    assert r.returncode == 2
    assert b"--max-new-tokens: must be in [0, 4]" in r.stderr and b"n_positions 64" in r.stderr
    assert r.stdout == b""


@pytest.mark.parametrize("option,value", [("--temperature", "-1"), ("--top-p", "0"),
                                          ("--top-p", "1.5"), ("--top-k", "-2"),
                                          ("--max-new-tokens", "-1")])
def test_bad_options_are_usage_errors(model_dir, option, value):
    r = run_qkv("--model", str(model_dir), "--prompt", "hi", option, value)
    assert r.returncode == 2, r.stderr
    assert option.encode() in r.stderr


def test_unknown_model_type_and_missing_tensor(weights, tmp_path):
    write_model(tmp_path / "bert", weights, model_type="bert")
    r = run_qkv("--model", str(tmp_path / "bert"), "--prompt", "hi")
    assert r.returncode == 1 and b"model_type" in r.stderr
    broken = {k: v for k, v in weights.items() if k != "h.1.attn.c_proj.weight"}
    write_model(tmp_path / "broken", broken)
    r = run_qkv("--model", str(tmp_path / "broken"), "--prompt", "hi")
    assert r.returncode == 1
    assert b"h.1.attn.c_proj.weight" in r.stderr and b"(32, 32)" in r.stderr
