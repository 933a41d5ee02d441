"""`qkv heads` against float64 torch twins: every head's weight from a token or word A to B.

On a random BERT (test_bert.write_checkpoint, twin torch_reference) and a random GPT-2
(test_gpt2.write_model, twin reference_logits(attentions=...)): `qkv heads --json` must give,
for every layer and head, the twin's attention probability at (A, B); for a word split into
several tokens the mean over its tokens' rows (from) of the sum over its tokens' columns (to),
as Clark et al. 2019 define it; the ranking the twin's order (up to ties within the
tolerance); and with --file each head's mean, min and max over the lines the twin's.

The positions of A and B are written out by hand below from the tokens (the test's own
oracle of the word rule), not read back from qkv.

Tolerance, derived: a weight is a sum over |B| columns of float32 probabilities (one
probability for a single token), averaged over |A| rows and added up in double, so
|Δweight| <= |B|·δ for δ the largest error of one float32 probability against the float64
twin. For BERT, δ is test_bert's ATOL_PROBS (1e-5, derived there from the float32 products
ahead of the softmax). For GPT-2, δ follows test_model_registry's derivation: p = softmax(s)
moves by at most |Δs|/2; the scores carry float32's rounding compounded through n + 1
pre-norm blocks of E-wide products, ~√(L·E)·u relative (u = 2^-24) each, so
Δs <= S·(n + 1)·√(L·E)·u in layer n, where S, the size of the scores that matter (softmax sees
only their differences), is the largest spread log p_max - log p_min of a row of the twin
(about 70 for these weights: δ ≈ 1e-4, measured errors are below 1e-6). The float32
softmax's own rounding, a few ulps of each p (its sum of L terms: L·u ≈ 1e-6 relative), is
inside δ. The mean over lines keeps the bound.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_bert import ATOL_PROBS  # noqa: E402
from test_bert import CONFIG as BERT_CONFIG  # noqa: E402
from test_bert import VOCAB as BERT_VOCAB  # noqa: E402
from test_bert import qkv_binary, torch_reference, write_checkpoint  # noqa: E402
from test_gpt2 import E as GPT_WIDTH  # noqa: E402
from test_gpt2 import HEADS as GPT_HEADS  # noqa: E402
from test_gpt2 import LAYERS as GPT_LAYERS  # noqa: E402
from test_gpt2 import VOCAB as GPT_VOCAB  # noqa: E402
from test_gpt2 import make_weights, reference_logits, write_model  # noqa: E402

U = 2.0 ** -24  # float32's unit roundoff

BERT_TEXT = "the cat sat on the mat. unhappy dog plays"
BERT_TOKENS = ["[CLS]", "the", "cat", "sat", "on", "the", "mat", ".", "un", "##happy", "dog",
               "play", "##s", "[SEP]"]
GPT_TEXT = "the cat is in the hat, on a boat"
GPT_TOKENS = ["t", "he", "Ġcat", "Ġ", "is", "Ġ", "in", "Ġthe", "Ġ", "h", "at", ",", "Ġ", "on", "Ġa",
              "Ġb", "o", "at"]


def heads_json(*args):
    r = subprocess.run([qkv_binary(), "heads", *args, "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("bert")
    weights = write_checkpoint(str(d))
    return str(d), weights


@pytest.fixture(scope="module")
def gpt_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpt2")
    weights = make_weights(seed=3)
    write_model(str(d), weights)
    return str(d), weights


def bert_twin(weights, tokens):
    """[layer] (H, L, L) float64 probabilities of the twin."""
    ids = [BERT_VOCAB.index(t) for t in tokens]
    _, _, probs = torch_reference(weights, ids, [0] * len(ids))
    return [p[0] for p in probs]


def gpt_twin(weights, tokens):
    probs = []
    reference_logits(weights, [GPT_VOCAB[t] for t in tokens], attentions=probs)
    return [p.numpy() for p in probs]


def gpt_delta(probs):
    """The bound δ on one float32 probability's error (the module's docstring)."""
    delta = 0.0
    for n, p in enumerate(probs):
        spread = max(np.log(row[row > 0]).ptp() for head in p for row in head)
        L = p.shape[-1]
        delta = max(delta, 0.5 * spread * (n + 1) * np.sqrt(L * GPT_WIDTH) * U)
    return delta


def twin_weights(probs, rows, cols):
    """{(layer, head): mean over rows of the sum over cols} (Clark et al. 2019)."""
    return {(l, h): float(np.mean([p[h, r, cols].sum() for r in rows]))
            for l, p in enumerate(probs) for h in range(p.shape[0])}


def check_heads(j, want, atol, group, layers, heads):
    got = {(h["layer"], h["head"]): h["weight"] for h in j["heads"]}
    assert sorted(got) == [(l, h) for l in range(layers) for h in range(heads)]
    assert all(h["group"] == group for h in j["heads"])
    print("max |qkv - twin|", max(abs(got[k] - want[k]) for k in want), "atol", atol)
    for key, w in want.items():
        assert abs(got[key] - w) <= atol, f"layer {key[0]}, head {key[1]}: qkv {got[key]:.8f}, twin {w:.8f}"
    # The ranking: 1, 2, ... by qkv's weights, heaviest first, and the twin's order up to ties
    # that the tolerance cannot separate.
    assert [h["rank"] for h in j["heads"]] == list(range(1, len(j["heads"]) + 1))
    order = [(h["layer"], h["head"]) for h in j["heads"]]
    assert all(got[a] >= got[b] for a, b in zip(order, order[1:]))
    assert all(want[a] >= want[b] - 2 * atol for a, b in zip(order, order[1:])), \
        (order, sorted(want, key=want.get, reverse=True))


def positions(j, n=0):
    g, = j["probes"][n]["groups"]
    return g["from_positions"], g["to_positions"]


def check_probe(d, model_type, text, tokens, source, target, rows, cols):
    """qkv heads on one sentence of the model in `d` against its twin; rows and cols: the
    positions of A and B, written out by hand."""
    j = heads_json("--model", d, "--text", text, "--from", source, "--to", target)
    assert j["model_type"] == model_type
    assert j["probes"][0]["tokens"] == tokens
    assert positions(j) == (rows, cols)
    return j


@pytest.mark.parametrize("source,target,rows,cols", [
    ("cat", "mat", [2], [6]),                 # one token each
    ("unhappy", "plays", [8, 9], [11, 12]),   # split words: mean of rows, sum of columns
    ("the@2", "un", [5], [8]),                # the second "the"; a word's first piece
    ("[SEP]", "unhappy", [13], [8, 9]),
])
def test_bert_heads_are_the_twins_probabilities(bert_dir, source, target, rows, cols):
    d, weights = bert_dir
    j = check_probe(d, "bert", BERT_TEXT, BERT_TOKENS, source, target, rows, cols)
    check_heads(j, twin_weights(bert_twin(weights, BERT_TOKENS), rows, cols), len(cols) * ATOL_PROBS,
                "self-attention", BERT_CONFIG["num_hidden_layers"], BERT_CONFIG["num_attention_heads"])


@pytest.mark.parametrize("source,target,rows,cols", [
    ("boat", "hat", [15, 16, 17], [8, 9, 10]),  # "Ġb" "o" "at" -> "Ġ" "h" "at" (before ",")
    ("Ġthe", "the", [7], [0, 1]),                # the first "the" is the word "t" "he"
    ("on", "cat", [12, 13], [2]),                # "Ġ" "on"; "Ġcat" without its mark
    ("at@2", "cat", [17], [2]),                  # a piece, its second occurrence
])
def test_gpt2_heads_are_the_twins_probabilities(gpt_dir, source, target, rows, cols):
    d, weights = gpt_dir
    j = check_probe(d, "gpt2", GPT_TEXT, GPT_TOKENS, source, target, rows, cols)
    probs = gpt_twin(weights, GPT_TOKENS)
    check_heads(j, twin_weights(probs, rows, cols), len(cols) * gpt_delta(probs), "causal self-attention",
                GPT_LAYERS, GPT_HEADS)


def test_gpt2_file_means_are_the_twins_means(gpt_dir, tmp_path):
    d, weights = gpt_dir
    lines = [  # sentence, A, B, the tokens, rows, cols
        ("the cat is in the hat, on a boat", "boat", "cat", GPT_TOKENS, [15, 16, 17], [2]),
        ("a cat sat on a mat", "mat", "cat", ["a", "Ġcat", "Ġs", "at", "Ġ", "on", "Ġa", "Ġ", "m", "at"],
         [7, 8, 9], [1]),
        ("where is the cat", "cat", "where", ["w", "he", "re", "Ġ", "is", "Ġthe", "Ġcat"], [6], [0, 1, 2]),
    ]
    f = tmp_path / "pairs.tsv"
    f.write_text("# sentence, from, to\n\n" + "".join(f"{s}\t{a}\t{b}\n" for s, a, b, *_ in lines))
    j = heads_json("--model", d, "--file", str(f))
    assert [p["line"] for p in j["probes"]] == [3, 4, 5]  # the comment and the blank line skipped
    per_line, atol = [], 0.0
    for n, (_, _, _, tokens, rows, cols) in enumerate(lines):
        assert j["probes"][n]["tokens"] == tokens
        assert positions(j, n) == (rows, cols)
        probs = gpt_twin(weights, tokens)
        per_line.append(twin_weights(probs, rows, cols))
        atol = max(atol, len(cols) * gpt_delta(probs))
    want = {k: float(np.mean([w[k] for w in per_line])) for k in per_line[0]}
    check_heads(j, want, atol, "causal self-attention", GPT_LAYERS, GPT_HEADS)
    for h in j["heads"]:
        k = (h["layer"], h["head"])
        assert h["lines"] == 3
        assert h["min"] == min(h["weights"]) and h["max"] == max(h["weights"])
        for n, w in enumerate(h["weights"]):
            assert abs(w - per_line[n][k]) <= atol
        assert abs(h["min"] - min(w[k] for w in per_line)) <= atol
        assert abs(h["max"] - max(w[k] for w in per_line)) <= atol


def test_text_table_is_the_json_ranking(gpt_dir):
    d, _ = gpt_dir
    j = heads_json("--model", d, "--text", GPT_TEXT, "--from", "boat", "--to", "hat")
    r = subprocess.run([qkv_binary(), "heads", "--model", d, "--text", GPT_TEXT, "--from", "boat", "--to", "hat",
                        "--top", "3"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rows = [l.split() for l in r.stdout.splitlines() if l[:4].strip().isdigit() and l[4:6] == "  "]
    assert len(rows) == 3
    for row, h in zip(rows, j["heads"]):
        assert row[0] == str(h["rank"]) and row[-3:] == [str(h["layer"]), str(h["head"]), f"{h['weight']:.4f}"]


# --- qkv.heads: the same ranking from Python ---------------------------------------------------

def import_qkv():
    import qkv
    return qkv


@pytest.mark.parametrize("fixture,text,source,target", [
    ("bert_dir", BERT_TEXT, "unhappy", "plays"),
    ("gpt_dir", GPT_TEXT, "boat", "hat"),
])
def test_python_heads_is_the_cli_json_and_the_twin(request, fixture, text, source, target):
    """qkv.heads(text=, source=, target=) is `qkv heads --json`, key for key and head for head
    in the same order, and each head's weight is the twin's."""
    qkv = import_qkv()
    d, weights = request.getfixturevalue(fixture)
    got = qkv.heads(d, text=text, source=source, target=target)
    assert got == heads_json("--model", d, "--text", text, "--from", source, "--to", target)
    rows, cols = positions(got)
    if fixture == "bert_dir":
        assert (rows, cols) == ([8, 9], [11, 12])
        check_heads(got, twin_weights(bert_twin(weights, BERT_TOKENS), rows, cols), len(cols) * ATOL_PROBS,
                    "self-attention", BERT_CONFIG["num_hidden_layers"], BERT_CONFIG["num_attention_heads"])
    else:
        assert (rows, cols) == ([15, 16, 17], [8, 9, 10])
        probs = gpt_twin(weights, GPT_TOKENS)
        check_heads(got, twin_weights(probs, rows, cols), len(cols) * gpt_delta(probs), "causal self-attention",
                    GPT_LAYERS, GPT_HEADS)
    top = qkv.heads(d, text=text, source=source, target=target, top=3)
    assert top["heads"] == got["heads"][:3]


def test_python_heads_probes_are_the_cli_file(gpt_dir, tmp_path):
    """probes=[...] is `qkv heads --file` over the same lines (less its "file" and "line" keys)."""
    qkv = import_qkv()
    d, weights = gpt_dir
    probes = [("the cat is in the hat, on a boat", "boat", "cat"), ("a cat sat on a mat", "mat", "cat"),
              ("where is the cat", "cat", "where")]
    f = tmp_path / "pairs.tsv"
    f.write_text("".join(f"{s}\t{a}\t{b}\n" for s, a, b in probes))
    want = heads_json("--model", d, "--file", str(f))
    assert want.pop("file") == str(f)
    for p in want["probes"]:
        p.pop("line")
    got = qkv.heads(d, probes=probes)
    assert got == want
    assert [h["lines"] for h in got["heads"]] == [3] * (GPT_LAYERS * GPT_HEADS)
    # The first probe's weights are the twin's, as test_gpt2_file_means_are_the_twins_means
    # checks the means.
    probs = gpt_twin(weights, GPT_TOKENS)
    want0 = twin_weights(probs, [15, 16, 17], [2])
    for h in got["heads"]:
        assert abs(h["weights"][0] - want0[(h["layer"], h["head"])]) <= gpt_delta(probs)


def test_python_heads_refusals(gpt_dir):
    qkv = import_qkv()
    d, _ = gpt_dir
    with pytest.raises(ValueError, match=r"^'dog' is not a token or word of the text; its tokens: 't' 'he' 'Ġcat'"):
        qkv.heads(d, text=GPT_TEXT, source="dog", target="cat")
    with pytest.raises(ValueError, match=r"^'dog' is not a token or word of the text"):
        qkv.heads(d, text=GPT_TEXT, source="cat", target="dog")
    with pytest.raises(ValueError, match=r"^T@N counts occurrences from 1, got 'cat@0'$"):
        qkv.heads(d, text=GPT_TEXT, source="cat@0", target="hat")
    with pytest.raises(ValueError, match=r"^probes\[1\]: 'dog' is not a token or word of the sentence; its tokens: "
                                         r"'a' 'Ġcat'"):
        qkv.heads(d, probes=[(GPT_TEXT, "boat", "cat"), ("a cat sat", "dog", "cat")])
    vit = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                       "models", "fashion-vit")
    with pytest.raises(ValueError, match=r"^qkv heads takes text models only \(bert, gpt2, use_lite, qkv-seq2seq\); "
                                         r"the model is qkv-vision, whose input is an image$"):
        qkv.heads(vit, text="x", source="x", target="x")
    with pytest.raises(TypeError, match="give text, source and target, or probes.*missing target"):
        qkv.heads(d, text=GPT_TEXT, source="cat")
    with pytest.raises(TypeError, match="not both"):
        qkv.heads(d, text=GPT_TEXT, source="cat", target="hat", probes=[(GPT_TEXT, "cat", "hat")])
    with pytest.raises(TypeError, match=r"heads: probes\[0\]\[1\] must be a str, got int"):
        qkv.heads(d, probes=[(GPT_TEXT, 1, "hat")])
    with pytest.raises(ValueError, match=r"heads: probes\[0\] must be \(text, source, target\), got 2 items"):
        qkv.heads(d, probes=[(GPT_TEXT, "cat")])
    with pytest.raises(ValueError, match="probes is empty"):
        qkv.heads(d, probes=[])
    with pytest.raises(TypeError, match="model must be the model's directory"):
        qkv.heads(qkv.load_model(d), text=GPT_TEXT, source="cat", target="hat")
    with pytest.raises(ValueError, match="top must be >= 0"):
        qkv.heads(d, text=GPT_TEXT, source="cat", target="hat", top=-1)
