"""Arguments of the wrong type raise TypeError naming the argument, as PyTorch's argument
parser does: an int is refused where a bool is expected and a bool where an int is; a
float argument takes any real number (bool included, as torch) but not a string. Values of
the right type that are out of range stay ValueError.
"""

import numpy as np
import pytest
import torch

import qkv
from test_bert import write_checkpoint as write_bert
from test_gpt2 import make_weights, write_model as write_gpt2

SDPA = qkv.scaled_dot_product_attention
rng = np.random.default_rng(0)
q = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
x3 = rng.standard_normal((1, 3, 8)).astype(np.float32)

# (id, call, regex the TypeError's message must match)
TYPE_ERRORS = [
    ("dropout_str", lambda: SDPA(q, q, q, dropout_p="0.5"), r"dropout_p must be a float, got str '0\.5'"),
    ("dropout_none", lambda: SDPA(q, q, q, dropout_p=None), r"dropout_p must be a float"),
    ("scale_str", lambda: SDPA(q, q, q, scale="1"), r"scale must be a float or None, got str"),
    ("scale_complex", lambda: SDPA(q, q, q, scale=1j), r"scale must be a float or None"),
    ("softcap_str", lambda: SDPA(q, q, q, softcap="30"), r"softcap must be a float or None"),
    ("seed_bool", lambda: SDPA(q, q, q, dropout_p=0.1, seed=True), r"seed must be an int, got bool"),
    ("seed_str", lambda: SDPA(q, q, q, dropout_p=0.1, seed="7"), r"seed must be an int"),
    ("is_causal_int", lambda: SDPA(q, q, q, is_causal=1), r"is_causal must be a bool, got int 1"),
    ("is_causal_str", lambda: SDPA(q, q, q, is_causal="yes"), r"is_causal must be a bool"),
    ("enable_gqa_int", lambda: SDPA(q, q, q, enable_gqa=1), r"enable_gqa must be a bool"),
    ("return_lse_none", lambda: SDPA(q, q, q, return_lse=None), r"return_lse must be a bool"),
    ("alignment_int", lambda: SDPA(q, q, q, causal_alignment=0), r"causal_alignment must be a string"),
    ("impl_none", lambda: SDPA(q, q, q, impl=None), r"impl must be a string"),
    ("key_lengths_int", lambda: SDPA(q, q, q, key_lengths=3), r"key_lengths must be a 1-d sequence of ints, got int"),
    ("key_lengths_str", lambda: SDPA(q, q, q, key_lengths="3"), r"key_lengths must be a 1-d sequence"),
    ("key_lengths_bool", lambda: SDPA(q, q, q, key_lengths=[True]), r"key_lengths must contain integers"),
    ("key_lengths_none_entry", lambda: SDPA(q, q, q, key_lengths=[None]), r"key_lengths must contain integers"),
    ("window_int", lambda: SDPA(q, q, q, window=3), r"window must be a \(left, right\) pair"),
    ("window_bool_side", lambda: SDPA(q, q, q, window=(True, 1)), r"window left must be an int or None, got bool"),
    ("alibi_float", lambda: SDPA(q, q, q, alibi_slopes=0.5), r"alibi_slopes must be a 1-d sequence of floats"),
    ("alibi_str", lambda: SDPA(q, q, q, alibi_slopes=["a", "b"]), r"alibi_slopes must contain real numbers"),
    ("query_none", lambda: SDPA(None, q, q), r"query must be an array .* got NoneType"),
    ("key_str", lambda: SDPA(q, "k", q), r"key must be an array .* got str"),
    ("mask_dict", lambda: SDPA(q, q, q, attn_mask={"a": 1}), r"attn_mask must be an array"),
    ("weights_causal_int", lambda: qkv.attention_weights(q, q, q, is_causal=0), r"attention_weights: is_causal must be a bool"),
    ("backward_dropout_str", lambda: qkv.attention_backward(q, q, q, q, q, q[..., 0], dropout_p="0"), r"attention_backward: dropout_p must be a float"),
    ("raw_scale_str", lambda: qkv.self_attention_raw(q[0], scale="2"), r"self_attention_raw: scale must be a float or None"),
    ("raw_x_none", lambda: qkv.self_attention_raw(None), r"self_attention_raw: x must be an array"),
    ("threads_bool", lambda: qkv.set_num_threads(True), r"set_num_threads: n must be an int, got bool"),
    ("threads_str", lambda: qkv.set_num_threads("2"), r"set_num_threads: n must be an int"),
    ("cache_bool", lambda: qkv.set_storage_cache_limit(False), r"set_storage_cache_limit: nbytes must be an int, got bool"),
    # qkv.nn: sizes are ints (int(8.7) would have been 8), flags bools, dropout a float.
    ("mha_embed_float", lambda: qkv.MultiheadAttention(8.0, 2), r"MultiheadAttention: embed_dim must be an int, got float"),
    ("mha_heads_str", lambda: qkv.MultiheadAttention(8, "2"), r"num_heads must be an int"),
    ("mha_bias_int", lambda: qkv.MultiheadAttention(8, 2, bias=1), r"bias must be a bool, got int"),
    ("mha_batch_first_str", lambda: qkv.MultiheadAttention(8, 2, batch_first="yes"), r"batch_first must be a bool"),
    ("mha_dropout_str", lambda: qkv.MultiheadAttention(8, 2, dropout="0.1"), r"dropout must be a float"),
    ("mha_kdim_bool", lambda: qkv.MultiheadAttention(8, 2, kdim=True), r"kdim must be an int, got bool"),
    ("mha_need_weights_int", lambda: qkv.MultiheadAttention(8, 2, batch_first=True)(x3, x3, x3, need_weights=0), r"need_weights must be a bool"),
    ("mha_is_causal_str", lambda: qkv.MultiheadAttention(8, 2, batch_first=True)(x3, x3, x3, is_causal="no"), r"is_causal must be a bool"),
    ("enc_d_model_str", lambda: qkv.TransformerEncoderLayer("16", 2), r"TransformerEncoderLayer: d_model must be an int"),
    ("enc_eps_str", lambda: qkv.TransformerEncoderLayer(16, 2, layer_norm_eps="1e-5"), r"layer_norm_eps must be a float"),
    ("enc_norm_first_int", lambda: qkv.TransformerEncoderLayer(16, 2, norm_first=1), r"norm_first must be a bool"),
    ("enc_activation_int", lambda: qkv.TransformerEncoderLayer(16, 2, activation=3), r"activation must be 'relu', 'gelu'"),
    ("enc_forward_causal_int", lambda: qkv.TransformerEncoderLayer(8, 2, batch_first=True)(x3, is_causal=1), r"is_causal must be a bool"),
    ("dec_tgt_causal_int", lambda: qkv.TransformerDecoderLayer(8, 2, batch_first=True)(x3, x3, tgt_is_causal=1), r"tgt_is_causal must be a bool"),
    ("transformer_layers_float", lambda: qkv.Transformer(16, 2, num_encoder_layers=1.0), r"num_encoder_layers must be an int"),
    ("load_state_dict_strict_int", lambda: qkv.MultiheadAttention(8, 2).load_state_dict({}, strict=1), r"strict must be a bool"),
    ("layer_norm_eps_str", lambda: qkv.nn.layer_norm(x3, 8, eps="1e-5"), r"layer_norm: eps must be a float"),
    ("layer_norm_shape_float", lambda: qkv.nn.layer_norm(x3, 8.0), r"normalized_shape must be an int or a sequence"),
    ("gelu_approximate_int", lambda: qkv.nn.gelu(x3, approximate=1), r"gelu: approximate must be a string"),
    ("rope_offset_float", lambda: qkv.nn.apply_rope(q, offset=1.5), r"apply_rope: offset must be an int"),
    ("sinusoidal_length_str", lambda: qkv.nn.sinusoidal_positional_encoding("4", 8), r"length must be an int"),
    ("alibi_heads_bool", lambda: qkv.nn.alibi_slopes(True), r"num_heads must be an int, got bool"),
    ("vector_attention_dim_float", lambda: qkv.nn.VectorAttention(8.5), r"VectorAttention: dim must be an int"),
    # qkv.models
    ("tokenizer_load_int", lambda: qkv.Tokenizer.load(5), r"Tokenizer.load: directory must be a str or os.PathLike, got int"),
    ("load_model_none", lambda: qkv.load_model(None), r"load_model: directory must be a str or os.PathLike"),
    ("load_model_weights_int", lambda: qkv.load_model(".", weights=16), r"load_model: weights must be a string"),
    ("translate_int", lambda: qkv.translate_dates(5), r"translate_dates: dates must be a string or a list of strings, got int"),
    ("translate_bytes_entry", lambda: qkv.translate_dates(["1.1.2000", b"2.2.2000"]), r"dates\[1\] is bytes"),
    ("translate_model_int", lambda: qkv.translate_dates("1.1.2000", model=3), r"translate_dates: directory must be a str"),
]


@pytest.mark.parametrize("call,pattern", [c[1:] for c in TYPE_ERRORS], ids=[c[0] for c in TYPE_ERRORS])
def test_wrong_types_are_type_errors_naming_the_argument(call, pattern):
    with pytest.raises(TypeError, match=pattern):
        call()


def test_what_torch_accepts_is_accepted():
    """Real numbers of any kind for floats, NumPy and 0-d tensor scalars, numpy.bool_ for
    flags, NumPy integers for ints: all as torch takes them."""
    want = SDPA(q, q, q, scale=0.5, is_causal=True)
    for scale in (np.float32(0.5), np.float64(0.5), torch.tensor(0.5), np.array(0.5)):
        np.testing.assert_array_equal(SDPA(q, q, q, scale=scale, is_causal=np.bool_(True)), want)
    np.testing.assert_array_equal(SDPA(q, q, q, dropout_p=0), SDPA(q, q, q))  # an int
    np.testing.assert_array_equal(SDPA(q, q, q, dropout_p=False), SDPA(q, q, q))  # torch takes bool
    SDPA(q, q, q, dropout_p=0.5, seed=np.uint64(7), key_lengths=np.array([2]), window=(np.int64(1), None))
    SDPA(q, q, q, is_causal=torch.tensor(True))
    qkv.MultiheadAttention(np.int64(8), 2, dropout=0)
    assert qkv.nn.alibi_slopes(np.int32(2)) == qkv.nn.alibi_slopes(2)


def test_out_of_range_values_stay_value_errors():
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\], got 2"):
        SDPA(q, q, q, dropout_p=2)
    with pytest.raises(ValueError, match="key_lengths values must fit in int64"):
        SDPA(q, q, q, key_lengths=[2 ** 70])
    with pytest.raises(ValueError, match=r"causal_alignment must be one of"):
        SDPA(q, q, q, is_causal=True, causal_alignment="middle")
    with pytest.raises(ValueError, match=r"MultiheadAttention: embed_dim must be in \[1, 2147483647\], got 0"):
        qkv.MultiheadAttention(0, 1)
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\]"):
        qkv.TransformerEncoderLayer(16, 2, dropout=1.5)
    with pytest.raises(ValueError, match="set_num_threads: n must be in"):
        qkv.set_num_threads(1 << 40)


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    d = tmp_path_factory.mktemp("bert_types")
    write_bert(str(d))
    return qkv.load_model(d)


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpt2_types")
    write_gpt2(d, make_weights(0))
    return qkv.load_model(d)


def test_model_and_tokenizer_arguments(bert, gpt2):
    tok = bert.tokenizer
    cases = [
        (lambda: tok.encode(b"hello"), r"Tokenizer.encode: text must be a str, got bytes"),
        (lambda: tok.encode(None), r"Tokenizer.encode: text must be a str"),
        (lambda: tok.encode_pair("a", 3), r"Tokenizer.encode_pair: b must be a str"),
        (lambda: tok.tokenize(["a"]), r"Tokenizer.tokenize: text must be a str"),
        (lambda: tok.decode(5), r"Tokenizer.decode: ids must be a 1-d sequence of ints, got int"),
        (lambda: tok.decode([1.5]), r"Tokenizer.decode: ids must contain integers"),
        (lambda: tok.id_to_token(True), r"Tokenizer.id_to_token: id must be an int, got bool"),
        (lambda: tok.token_to_id(7), r"Tokenizer.token_to_id: token must be a str"),
        (lambda: bert([[2, 5, 3]], output_attentions=1), r"BertModel: output_attentions must be a bool"),
        (lambda: bert(np.array([[True, False]])), r"BertModel: input_ids must contain integers, got dtype bool"),
        (lambda: bert("hello"), r"BertModel: input_ids must be \(B, L\) integers .* got str"),
        (lambda: bert([[2, 5, 3]], token_type_ids=[[0.0, 0.0, 1.0]]), r"token_type_ids must contain integers"),
        (lambda: gpt2.generate([1, 2], max_new_tokens=True), r"generate: max_new_tokens: must be an int, got bool"),
        (lambda: gpt2.generate([1, 2], max_new_tokens=2.0), r"generate: max_new_tokens: must be an int, got float"),
        (lambda: gpt2.generate([1, 2], temperature="0.7"), r"generate: temperature: must be a float, got str"),
        (lambda: gpt2.generate([1, 2], top_k=1.5), r"generate: top_k: must be an int"),
        (lambda: gpt2.generate([1, 2], top_p="1"), r"generate: top_p: must be a float"),
        (lambda: gpt2.generate([1, 2], seed=True), r"generate: seed: must be an int, got bool"),
        (lambda: gpt2.generate([1, 2], eos_token_id=True), r"eos_token_id \(an int, or False\) must be an int, got bool"),
        (lambda: gpt2.generate(b"the cat"), r"GPT2Model.generate: prompt must be a 1-d sequence of ints, got bytes"),
        (lambda: gpt2(np.zeros((1, 3), np.float32)), r"GPT2Model: input_ids must contain integers"),
        (lambda: qkv.GPT2Model.load(".", weights=None), r"GPT2Model.load: weights must be a string"),
    ]
    for call, pattern in cases:
        with pytest.raises(TypeError, match=pattern):
            call()
    # A bool mask is a mask; eos_token_id=False is documented ("never stop early").
    out = bert([[2, 5, 3]], attention_mask=np.array([[True, True, False]]))
    np.testing.assert_array_equal(out["last_hidden_state"],
                                  bert([[2, 5, 3]], attention_mask=[[1, 1, 0]])["last_hidden_state"])
    assert len(gpt2.generate([1, 2], max_new_tokens=3, eos_token_id=False)) == 3
    with pytest.raises(ValueError, match=r"generate: seed: must be an integer in \[0, 2\^64\), got -1"):
        gpt2.generate([1, 2], seed=-1)
