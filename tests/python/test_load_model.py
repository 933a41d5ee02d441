"""qkv.load_model / qkv.BertModel / qkv.GPT2Model / qkv.Tokenizer against PyTorch.

The checkpoints are the synthetic ones of test_bert.py and test_gpt2.py (their writers
and float64 torch references are reused, so the expectations are the same ones the CLI
tests check).
"""

import json

import numpy as np
import pytest
import torch

import qkv
from test_bert import ATOL_HIDDEN, ATOL_PROBS
from test_bert import CONFIG as BERT_CONFIG
from test_bert import VOCAB as BERT_VOCAB
from test_bert import hf_weights, torch_reference, write_checkpoint
from test_gpt2 import EOT_ID, PROMPT, POSITIONS, V, make_weights, reference_greedy
from test_gpt2 import decode as gpt2_decode
from test_gpt2 import reference_logits, write_model

# GPT-2 logits: qkv is f32, the reference f64. Products have K <= 4E = 128 terms of O(1)
# layer-normed activations times weights of scale <= 0.52, so each is within ~√K·u·Σ|a·b|
# ≈ 1e-5 typically; two residual blocks and the tied (V, E) head add up to |logits| of a
# few units (4.3 here): atol 1e-4 (measured: 5e-6), loose enough for reordered sums, tight enough to
# catch any wrong weight, mask or position (errors of order 0.1 and above).
ATOL_LOGITS = 1e-4


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("bert")
    write_checkpoint(str(d))
    return d


@pytest.fixture(scope="module")
def gpt2_weights():
    return make_weights(0)


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory, gpt2_weights):
    d = tmp_path_factory.mktemp("gpt2")
    write_model(d, gpt2_weights)
    return d


@pytest.fixture(scope="module")
def bert(bert_dir):
    return qkv.load_model(bert_dir)


@pytest.fixture(scope="module")
def gpt2(gpt2_dir):
    return qkv.load_model(str(gpt2_dir))


# ---- load_model -----------------------------------------------------------------------


def test_load_model_picks_the_class(bert, gpt2):
    assert isinstance(bert, qkv.BertModel)
    assert isinstance(gpt2, qkv.GPT2Model)
    assert bert.config["hidden_size"] == BERT_CONFIG["hidden_size"]
    assert bert.config["num_hidden_layers"] == BERT_CONFIG["num_hidden_layers"]
    assert bert.config["model_type"] == "bert"
    assert gpt2.config["vocab_size"] == V and gpt2.config["n_positions"] == POSITIONS
    assert gpt2.config["eos_token_id"] == EOT_ID
    assert bert.tokenizer.kind == "wordpiece"
    assert gpt2.tokenizer.kind == "bpe"


def test_unknown_model_type_is_value_error(tmp_path, gpt2_weights):
    write_model(tmp_path, gpt2_weights, model_type="llama")
    with pytest.raises(ValueError, match="llama"):
        qkv.load_model(tmp_path)


def test_missing_directory_names_the_path(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises((ValueError, FileNotFoundError), match="nope"):
        qkv.load_model(missing)
    with pytest.raises((ValueError, FileNotFoundError), match="config.json"):
        qkv.load_model(tmp_path)  # exists, but no config.json


def test_broken_checkpoint_is_value_error_naming_the_tensor(tmp_path):
    write_checkpoint(str(tmp_path), drop="encoder.layer.1.attention.self.value.bias")
    with pytest.raises(ValueError, match="encoder.layer.1.attention.self.value.bias"):
        qkv.load_model(tmp_path)


def test_no_tokenizer_files_gives_none(tmp_path, bert_dir):
    for name in ("config.json", "model.safetensors"):
        (tmp_path / name).write_bytes((bert_dir / name).read_bytes())
    model = qkv.load_model(tmp_path)
    assert model.tokenizer is None


# ---- BERT -----------------------------------------------------------------------------


def test_bert_matches_torch(bert):
    ids, types = bert.tokenizer.encode_pair("The cat sat on the mat.", "a dog plays")
    vocab = {t: i for i, t in enumerate(BERT_VOCAB)}
    want_tokens = ["[CLS]", "the", "cat", "sat", "on", "the", "mat", ".", "[SEP]",
                   "a", "dog", "play", "##s", "[SEP]"]
    assert ids == [vocab[t] for t in want_tokens]
    assert types == [0] * 9 + [1] * 5

    out = bert(np.array([ids]), token_type_ids=np.array([types]), output_attentions=True)
    hidden, pooled, probs = torch_reference(hf_weights(0), ids, types)
    L, E, H = len(ids), BERT_CONFIG["hidden_size"], BERT_CONFIG["num_attention_heads"]
    got = out["last_hidden_state"]
    assert isinstance(got, np.ndarray) and got.dtype == np.float32 and got.shape == (1, L, E)
    assert np.abs(got - hidden).max() <= ATOL_HIDDEN
    assert out["pooler_output"].shape == (1, E)
    assert np.abs(out["pooler_output"] - pooled).max() <= ATOL_HIDDEN
    assert len(out["attentions"]) == BERT_CONFIG["num_hidden_layers"]
    for n, a in enumerate(out["attentions"]):
        assert a.shape == (1, H, L, L) and a.dtype == np.float32
        assert np.abs(a - probs[n]).max() <= ATOL_PROBS, f"layer {n}"


def test_bert_padded_batch_matches_each_row(bert):
    """Two rows of different lengths, the shorter padded with attention_mask 0: each row's
    kept positions equal the reference run on the row alone."""
    a = bert.tokenizer.encode("the cat sat on the mat")
    b = bert.tokenizer.encode("hello world")
    L = len(a)
    pad = bert.tokenizer.token_to_id("[PAD]")
    ids = [a, b + [pad] * (L - len(b))]
    mask = [[1] * L, [1] * len(b) + [0] * (L - len(b))]
    out = bert(ids, attention_mask=mask, output_attentions=True)  # lists of lists
    assert out["last_hidden_state"].shape == (2, L, BERT_CONFIG["hidden_size"])
    for row, seq in enumerate((a, b)):
        hidden, pooled, probs = torch_reference(hf_weights(0), seq, [0] * len(seq))
        n = len(seq)
        assert np.abs(out["last_hidden_state"][row, :n] - hidden[0]).max() <= ATOL_HIDDEN
        assert np.abs(out["pooler_output"][row] - pooled[0]).max() <= ATOL_HIDDEN
        for layer, p in enumerate(probs):
            got = out["attentions"][layer][row, :, :n, :n]
            assert np.abs(got - p[0]).max() <= ATOL_PROBS
            assert np.all(out["attentions"][layer][row, :, :, n:] == 0)  # padded keys


def test_bert_torch_in_torch_out(bert):
    ids = bert.tokenizer.encode("the dog runs")
    np_out = bert(np.array([ids]))
    t_out = bert(torch.tensor([ids]))
    assert isinstance(t_out["last_hidden_state"], torch.Tensor)
    assert isinstance(t_out["pooler_output"], torch.Tensor)
    assert t_out["last_hidden_state"].dtype == torch.float32
    assert t_out["attentions"] is None
    np.testing.assert_array_equal(t_out["last_hidden_state"].numpy(),
                                  np_out["last_hidden_state"])
    np.testing.assert_array_equal(t_out["pooler_output"].numpy(), np_out["pooler_output"])


def test_bert_bad_inputs(bert):
    with pytest.raises(TypeError, match="input_ids"):
        bert(np.zeros((1, 3), np.float32))
    with pytest.raises(ValueError, match="input_ids"):
        bert(np.zeros((1, 2, 3), np.int64))
    with pytest.raises(ValueError, match="attention_mask"):
        bert([[2, 5, 3]], attention_mask=[[1, 1]])
    with pytest.raises(ValueError, match="max_position_embeddings"):
        bert([[5] * 41])


# ---- GPT-2 ----------------------------------------------------------------------------


def test_gpt2_logits_match_torch(gpt2, gpt2_weights):
    ids = gpt2.tokenizer.encode(PROMPT)
    want = reference_logits(gpt2_weights, ids).numpy()
    got = gpt2(ids)
    assert isinstance(got, np.ndarray) and got.dtype == np.float32
    assert got.shape == (len(ids), V)
    assert np.abs(got - want).max() <= ATOL_LOGITS
    batched = gpt2(np.array([ids, ids]))
    assert batched.shape == (2, len(ids), V)
    np.testing.assert_array_equal(batched[0], got)
    np.testing.assert_array_equal(batched[1], got)


def test_gpt2_bf16_weights_stay_within_their_rounding(gpt2_dir, gpt2, gpt2_weights):
    # The products with bf16 weights and inputs: each is off by up to 2^-8 of sum|x*w|; the
    # 4*layers + 1 products on the way to a logit bound the logits' error (as the C++ test).
    try:
        half = qkv.load_model(gpt2_dir, weights="bf16")
    except TypeError as e:
        if "no oneDNN matmul for bf16" not in str(e):
            raise
        pytest.skip(str(e))
    ids = gpt2.tokenizer.encode(PROMPT)
    want = gpt2(ids)
    err = np.abs(half(ids) - want).max()
    layers = gpt2.config["n_layer"]
    assert 0 < err <= (4 * layers + 1) * 2.0 ** -8 * (1 + np.abs(want).max())
    assert len(half.generate(PROMPT, max_new_tokens=5)) == 5
    with pytest.raises(ValueError, match="weights"):
        qkv.load_model(gpt2_dir, weights="f16")


def test_bf16_weights_are_gpt2_only(bert_dir):
    with pytest.raises(ValueError, match="GPT-2 only"):
        qkv.load_model(bert_dir, weights="bf16")


def test_gpt2_torch_in_torch_out(gpt2):
    ids = gpt2.tokenizer.encode("on a boat")
    out = gpt2(torch.tensor([ids]))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    assert tuple(out.shape) == (1, len(ids), V)
    np.testing.assert_array_equal(out[0].numpy(), gpt2(ids))


def test_gpt2_greedy_matches_torch(gpt2, gpt2_weights):
    prompt_ids = gpt2.tokenizer.encode(PROMPT)
    assert gpt2_decode(prompt_ids) == PROMPT.encode()
    got = gpt2.generate(prompt_ids, max_new_tokens=10)
    want, margin = reference_greedy(gpt2_weights, prompt_ids, 10)
    assert got == want, f"smallest top-1/top-2 margin in the reference: {margin}"
    assert margin > 1e-3
    # A text prompt is encoded with the tokenizer; torch input is accepted too.
    assert gpt2.generate(PROMPT, max_new_tokens=10) == want
    assert gpt2.generate(torch.tensor(prompt_ids), max_new_tokens=10) == want


def test_gpt2_sampling_is_seeded(gpt2):
    kw = dict(max_new_tokens=12, temperature=1.5, eos_token_id=False)
    a = gpt2.generate(PROMPT, seed=5, **kw)
    assert len(a) == 12
    assert gpt2.generate(PROMPT, seed=5, **kw) == a
    assert any(gpt2.generate(PROMPT, seed=s, **kw) != a for s in range(6, 10))
    greedy = gpt2.generate(PROMPT, max_new_tokens=8)
    assert gpt2.generate(PROMPT, max_new_tokens=8, temperature=2.0, top_k=1, seed=3) == greedy


def test_gpt2_bad_options(gpt2):
    with pytest.raises(ValueError, match="temperature"):
        gpt2.generate(PROMPT, temperature=-1.0)
    with pytest.raises(ValueError, match="top_p"):
        gpt2.generate(PROMPT, top_p=0.0)
    with pytest.raises(ValueError, match="n_positions"):
        gpt2.generate("x" * 60, max_new_tokens=10)


# ---- Tokenizer ------------------------------------------------------------------------


def test_wordpiece_round_trip(bert_dir):
    tok = qkv.Tokenizer.load(bert_dir)
    assert tok.kind == "wordpiece" and tok.vocab_size == len(BERT_VOCAB)
    ids = tok.encode("The cat sat on the mat.")
    assert ids[0] == BERT_VOCAB.index("[CLS]") and ids[-1] == BERT_VOCAB.index("[SEP]")
    assert tok.decode(ids) == "the cat sat on the mat ."
    assert tok.decode(tok.encode("unhappy dogs")) == "unhappy dogs"
    assert tok.tokenize("unhappy dogs") == ["un", "##happy", "dog", "##s"]
    ids, types = tok.encode_pair("a cat", "the dog")
    assert len(ids) == len(types) == 7 and types == [0] * 4 + [1] * 3


def test_bpe_round_trip(gpt2_dir):
    tok = qkv.Tokenizer.load(gpt2_dir)
    assert tok.kind == "bpe" and tok.vocab_size == V and tok.eos_id == EOT_ID
    for text in (PROMPT, "héllo wörld ✓", "<|endoftext|>the cat"):
        ids = tok.encode(text)
        assert tok.decode(ids) == text
        assert gpt2_decode(ids) == text.encode()
    assert tok.encode("<|endoftext|>") == [EOT_ID]
    assert len(tok.encode(PROMPT)) < len(PROMPT.encode())  # merges applied
    with pytest.raises(ValueError, match="WordPiece"):
        tok.encode_pair("a", "b")


def test_tokenizer_errors(tmp_path):
    with pytest.raises((ValueError, FileNotFoundError), match="nope"):
        qkv.Tokenizer.load(tmp_path / "nope")
    with pytest.raises(ValueError, match="vocab"):
        qkv.Tokenizer.load(tmp_path)  # a directory without tokenizer files
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ValueError):
        qkv.Tokenizer.load(tmp_path)
