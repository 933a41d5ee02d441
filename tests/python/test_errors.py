"""Bad input raises ValueError (shapes, values, options) or TypeError (dtypes) with a
message naming the argument — never a crash, never a silent result.

The C++ library names tensors as its API does (q, k, v, mask); the Python layer names
the arguments it checks itself as in the signature (query, key, attn_mask, ...).
"""

import math

import numpy as np
import pytest
import torch

import qkv

SDPA = qkv.scaled_dot_product_attention


def _qkv(B=2, Hq=4, Hkv=4, Lq=5, Lk=7, Dk=8, Dv=6, dtype=np.float32):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((B, Hq, Lq, Dk)).astype(dtype),
            rng.standard_normal((B, Hkv, Lk, Dk)).astype(dtype),
            rng.standard_normal((B, Hkv, Lk, Dv)).astype(dtype))


q, k, v = _qkv()

# (id, call, exception, regex the message must match)
CASES = [
    ("Dk_mismatch", lambda: SDPA(q, k[..., :5], v), ValueError, r"k\.size\(3\) \(Dk\).*8.*got 5"),
    ("B_mismatch", lambda: SDPA(q, k[:1], v[:1]), ValueError, r"k\.size\(0\) \(B\)"),
    ("B_mismatch_v", lambda: SDPA(q, k, v[:1]), ValueError, r"v\.size\(0\) \(B\)"),
    ("Lk_k_vs_v", lambda: SDPA(q, k, v[:, :, :6]), ValueError, r"v\.size\(2\) \(Lk\)"),
    ("Hkv_k_vs_v", lambda: SDPA(q, k[:, :2], v, enable_gqa=True), ValueError,
     r"v\.size\(1\) \(Hkv\)"),
    ("Hq_not_multiple", lambda: SDPA(q[:, :3], k[:, :2], v[:, :2], enable_gqa=True),
     ValueError, r"multiple of the key/value heads"),
    ("gqa_not_enabled", lambda: SDPA(q, k[:, :2], v[:, :2]), ValueError, r"enable_gqa"),
    ("mask_not_broadcast", lambda: SDPA(q, k, v, attn_mask=np.ones((5, 6), bool)), ValueError,
     r"mask of shape \(5, 6\) does not broadcast"),
    ("mask_rank_5", lambda: SDPA(q, k, v, attn_mask=np.ones((1, 2, 4, 5, 7), bool)),
     ValueError, r"mask must have rank <= 4"),
    ("int_query", lambda: SDPA(q.astype(np.int32), k, v), TypeError,
     r"query has unsupported dtype int32"),
    ("int_torch_key", lambda: SDPA(q, torch.from_numpy(k).to(torch.int64), v), TypeError,
     r"key has unsupported dtype torch\.int64"),
    ("bool_value", lambda: SDPA(q, k, v > 0), TypeError, r"value has unsupported dtype bool"),
    ("complex_query", lambda: SDPA(q.astype(np.complex64), k, v), TypeError,
     r"query has unsupported dtype complex64"),
    ("int_mask", lambda: SDPA(q, k, v, attn_mask=np.ones((5, 7), np.int64)), TypeError,
     r"attn_mask has unsupported dtype int64"),
    ("int_torch_mask", lambda: SDPA(q, k, v, attn_mask=torch.ones(5, 7, dtype=torch.uint8)),
     TypeError, r"attn_mask has unsupported dtype torch\.uint8"),
    ("mixed_f32_f16", lambda: SDPA(q, k.astype(np.float16), v), TypeError,
     r"q, k and v must share one dtype.*k f16"),
    ("mixed_torch_bf16", lambda: SDPA(torch.from_numpy(q), torch.from_numpy(k).bfloat16(),
                                      torch.from_numpy(v)), TypeError, r"share one dtype"),
    ("key_lengths_negative", lambda: SDPA(q, k, v, key_lengths=[-1, 3]), ValueError,
     r"key_lengths\[0\] must be in \[0, Lk = 7\], got -1"),
    ("key_lengths_too_long", lambda: SDPA(q, k, v, key_lengths=[3, 8]), ValueError,
     r"key_lengths\[1\] must be in \[0, Lk = 7\], got 8"),
    ("key_lengths_count", lambda: SDPA(q, k, v, key_lengths=[3]), ValueError,
     r"key_lengths must have B = 2 entries, got 1"),
    ("key_lengths_float", lambda: SDPA(q, k, v, key_lengths=[1.5, 2]), TypeError,
     r"key_lengths must contain integers"),
    ("key_lengths_2d", lambda: SDPA(q, k, v, key_lengths=[[1, 2]]), ValueError,
     r"key_lengths must be a 1-d"),
    ("window_left_-5", lambda: SDPA(q, k, v, window=(-5, 2)), ValueError,
     r"window\.left must be >= 0, or -1 for unbounded, got -5"),
    ("window_right_-2", lambda: SDPA(q, k, v, window=(None, -2)), ValueError,
     r"window\.right must be >= 0.*got -2"),
    ("window_not_pair", lambda: SDPA(q, k, v, window=3), TypeError, r"window must be a \(left, right\)"),
    ("window_triple", lambda: SDPA(q, k, v, window=(1, 2, 3)), ValueError, r"window must be"),
    ("window_float", lambda: SDPA(q, k, v, window=(1.5, 2)), TypeError, r"window left must be an int"),
    ("scale_nan", lambda: SDPA(q, k, v, scale=math.nan), ValueError, r"scale must be finite, got nan"),
    ("scale_inf", lambda: SDPA(q, k, v, scale=math.inf), ValueError, r"scale must be finite, got inf"),
    ("scale_-inf", lambda: SDPA(q, k, v, scale=-math.inf), ValueError, r"scale must be finite"),
    ("scale_str", lambda: SDPA(q, k, v, scale="big"), TypeError, r"scale must be a float"),
    ("softcap_zero", lambda: SDPA(q, k, v, softcap=0.0), ValueError, r"softcap must be a finite number > 0, got 0"),
    ("softcap_negative", lambda: SDPA(q, k, v, softcap=-1.0), ValueError, r"softcap must be .* > 0"),
    ("softcap_nan", lambda: SDPA(q, k, v, softcap=math.nan), ValueError, r"softcap must be"),
    ("dropout_1.5", lambda: SDPA(q, k, v, dropout_p=1.5), ValueError, r"dropout_p must be in \[0, 1\], got 1\.5"),
    ("dropout_negative", lambda: SDPA(q, k, v, dropout_p=-0.1), ValueError, r"dropout_p must be in \[0, 1\]"),
    ("dropout_nan", lambda: SDPA(q, k, v, dropout_p=math.nan), ValueError, r"dropout_p must be in"),
    ("seed_negative", lambda: SDPA(q, k, v, dropout_p=0.1, seed=-1), ValueError, r"seed must be in \[0, 2\*\*64\)"),
    ("seed_too_big", lambda: SDPA(q, k, v, dropout_p=0.1, seed=2 ** 64), ValueError, r"seed must be in"),
    ("seed_float", lambda: SDPA(q, k, v, dropout_p=0.1, seed=1.5), TypeError, r"seed must be an int"),
    ("query_rank_2", lambda: SDPA(q[0, 0], k[0, 0], v[0, 0]), ValueError,
     r"query must be 4-d \(B, Hq, Lq, Dk\) or 3-d \(Hq, Lq, Dk\), got 2-d shape \(5, 8\)"),
    ("query_rank_5", lambda: SDPA(q[None], k, v), ValueError, r"query must be 4-d .* got 5-d"),
    ("key_rank_3", lambda: SDPA(q, k[0], v), ValueError, r"key must have query's rank 4"),
    ("value_rank_3", lambda: SDPA(q[0], k[0], v), ValueError, r"value must have query's rank 3"),
    ("alibi_length", lambda: SDPA(q, k, v, alibi_slopes=[0.5, 0.25]), ValueError,
     r"alibi_slopes must have Hq = 4 entries, got 2"),
    ("alibi_nan", lambda: SDPA(q, k, v, alibi_slopes=[0.5, math.nan, 0.1, 0.1]), ValueError,
     r"alibi_slopes\[1\] must be finite"),
    ("alibi_2d", lambda: SDPA(q, k, v, alibi_slopes=np.ones((2, 2))), ValueError,
     r"alibi_slopes must be a 1-d"),
    ("alignment_bad", lambda: SDPA(q, k, v, is_causal=True, causal_alignment="diagonal"),
     ValueError, r"causal_alignment must be one of 'top_left', 'bottom_right', got 'diagonal'"),
    ("impl_bad", lambda: SDPA(q, k, v, impl="gpu"), ValueError, r"impl must be one of"),
    ("meta_device", lambda: SDPA(torch.empty(2, 4, 5, 8, device="meta"), k, v), ValueError,
     r"query must be a CPU tensor, got device 'meta'"),
    ("sparse_tensor", lambda: SDPA(torch.from_numpy(q).to_sparse(), k, v), ValueError,
     r"query must be a dense"),
    ("weights_bad_mask", lambda: qkv.attention_weights(q, k, v, attn_mask=np.ones((3, 7), bool)),
     ValueError, r"mask of shape \(3, 7\) does not broadcast"),
    ("weights_int", lambda: qkv.attention_weights(q.astype(np.int8), k, v), TypeError,
     r"attention_weights: query has unsupported dtype int8"),
    ("raw_rank_1", lambda: qkv.self_attention_raw(np.ones(4, np.float32)), ValueError,
     r"x must be \(L, D\) or \(B, L, D\)"),
    ("raw_int", lambda: qkv.self_attention_raw(np.ones((4, 4), np.int32)), TypeError,
     r"self_attention_raw: x has unsupported dtype int32"),
    ("raw_scale_nan", lambda: qkv.self_attention_raw(np.ones((4, 4), np.float32), scale=math.nan),
     ValueError, r"scale must be finite"),
    ("threads_zero", lambda: qkv.set_num_threads(0), ValueError, r"1|thread"),
    ("threads_float", lambda: qkv.set_num_threads(1.5), TypeError, r"integer|int"),
]


@pytest.mark.parametrize("call,exc,pattern", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_raises(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_errors_are_value_and_type_errors_not_runtime_errors():
    """The translator maps qkv::Error by kind, so a C++ check arrives as the right type."""
    with pytest.raises(ValueError) as info:
        SDPA(q, k[..., :5], v)
    assert type(info.value) is ValueError
    with pytest.raises(TypeError) as info:
        SDPA(q, k.astype(np.float16), v)
    assert type(info.value) is TypeError


def test_the_module_survives_a_storm_of_bad_calls():
    """Hundreds of random bad calls in a row: each raises, none crashes, and a good call
    still works afterwards."""
    rng = np.random.default_rng(1)
    for _ in range(300):
        case = CASES[int(rng.integers(len(CASES)))]
        with pytest.raises(case[2]):
            case[1]()
    assert np.isfinite(SDPA(q, k, v)).all()
