"""Dropout: determinism per seed and thread count, the 1/(1 − p) scaling of the kept
probabilities, the keep rate, and unbiasedness over seeds.

The kept pattern is recovered black-box: with value = the identity (Dv = Lk), output row
i is exactly the row of dropped-and-rescaled probabilities, so keep[i, j] = out[i, j] != 0
wherever probs[i, j] > 0. The pattern is a function of (seed, b, h, i, j) only
(attention.h), so the same seed and shapes with another value reuse it.
"""

import random

import numpy as np
import pytest
import torch

import qkv
from oracle import assert_close, assert_equal


def _inputs(B=2, H=2, Lq=24, Lk=40, D=16, seed=0):
    rng = np.random.default_rng(seed)
    q = (0.5 * rng.standard_normal((B, H, Lq, D))).astype(np.float32)
    k = (0.5 * rng.standard_normal((B, H, Lk, D))).astype(np.float32)
    v = rng.standard_normal((B, H, Lk, D)).astype(np.float32)
    return q, k, v


def test_same_seed_same_output_different_seed_differs():
    q, k, v = _inputs()
    a = qkv.scaled_dot_product_attention(q, k, v, dropout_p=0.3, seed=123)
    b = qkv.scaled_dot_product_attention(q, k, v, dropout_p=0.3, seed=123)
    c = qkv.scaled_dot_product_attention(q, k, v, dropout_p=0.3, seed=124)
    assert_equal(a, b, "same seed")
    assert not np.array_equal(a, c), "seeds 123 and 124 gave identical dropout"
    big = qkv.scaled_dot_product_attention(q, k, v, dropout_p=0.3, seed=2 ** 64 - 1)
    assert np.isfinite(big).all()


def test_thread_count_does_not_change_dropout(threads):
    q, k, v = _inputs(B=3, H=2, Lq=33, Lk=29)
    threads.set_num_threads(1)
    one = qkv.scaled_dot_product_attention(q, k, v, dropout_p=0.4, seed=9, is_causal=True)
    threads.set_num_threads(2)
    two = qkv.scaled_dot_product_attention(q, k, v, dropout_p=0.4, seed=9, is_causal=True)
    assert_equal(one, two, "dropout, 1 vs 2 threads")


def test_p_one_gives_zeros_and_p_zero_is_identity():
    q, k, v = _inputs()
    assert np.all(qkv.scaled_dot_product_attention(q, k, v, dropout_p=1.0, seed=1) == 0.0)
    assert_equal(qkv.scaled_dot_product_attention(q, k, v, dropout_p=0.0, seed=5),
                 qkv.scaled_dot_product_attention(q, k, v), "p = 0")


def test_lse_is_taken_before_dropout():
    q, k, v = _inputs()
    _, lse = qkv.scaled_dot_product_attention(q, k, v, return_lse=True)
    _, lse_d = qkv.scaled_dot_product_attention(q, k, v, dropout_p=0.5, seed=3, return_lse=True)
    assert_equal(lse_d, lse, "lse with dropout")


# Relative error of one output weight w/(1 − p) against the f32 probabilities / (1 − p):
# the reference rounds each once from the same double (2 · 2^-24); the fused float32
# kernel forms each weight as exp(s − m)/l with f32 scores (error ≈ sqrt(D)·2^-24·Σ|q k|,
# < 4·2^-24 for these small inputs), an f32 exp and division (2 · 2^-24) and a sum l of
# Lk terms (≤ sqrt(Lk)·2^-24 ≈ 7·2^-24 probabilistically): 32·2^-24 covers it with margin.
WEIGHT_RTOL = {"reference": 4 * 2.0 ** -24, "fast": 32 * 2.0 ** -24}


@pytest.mark.parametrize("impl", ["fast", "reference"])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_kept_probabilities_are_scaled_by_one_over_one_minus_p(p, impl):
    B, H, Lq, Lk, D = 2, 3, 20, 48, 16
    q, k, v = _inputs(B, H, Lq, Lk, D, seed=int(p * 10))
    kw = dict(dropout_p=p, seed=777, is_causal=True, causal_alignment="bottom_right", impl=impl)
    probs = qkv.attention_weights(q, k, v, is_causal=True,
                                  causal_alignment="bottom_right").astype(np.float64)
    eye = np.broadcast_to(np.eye(Lk, dtype=np.float32), (B, H, Lk, Lk))
    dropped = qkv.scaled_dot_product_attention(q, k, eye, **kw).astype(np.float64)
    live = probs > 0
    keep = live & (dropped != 0)
    # Never anything where the probability is 0 (masked keys are not resurrected).
    assert np.all(dropped[~live] == 0.0), "dropout output where the probability is 0"
    assert_close(np.where(keep, dropped, 0), np.where(keep, probs / (1 - p), 0),
                 1e-9, WEIGHT_RTOL[impl], f"{impl}: kept weights")
    # The keep rate: n Bernoulli(1 − p) trials; 6 standard deviations (a false alarm has
    # probability ~2e-9 under the normal approximation, n >= 1000 here).
    n = int(live.sum())
    rate = keep.sum() / n
    sigma = np.sqrt(p * (1 - p) / n)
    assert abs(rate - (1 - p)) <= 6 * sigma, f"keep rate {rate:.4f} vs {1 - p} (n={n})"
    # The same pattern applied to a real value: out = (probs · keep / (1 − p)) @ v.
    out = qkv.scaled_dot_product_attention(q, k, v, **kw)
    weights = probs * keep / (1 - p)
    want = weights @ v.astype(np.float64)
    # Each weight is within WEIGHT_RTOL of its f32 value, so the sum is within
    # WEIGHT_RTOL·Σ_j w_j|v_j| (+ the f32 accumulation over Lk terms in the fused kernel,
    # included in WEIGHT_RTOL's sqrt(Lk) share) and the output's own 2^-24 rounding.
    bound = weights @ np.abs(v.astype(np.float64))
    assert_close(out, want, 1e-7 + WEIGHT_RTOL[impl] * bound.max(), 2.0 ** -24,
                 f"{impl}: dropout out vs recovered pattern p={p}")


def test_mean_over_seeds_is_the_undropped_output():
    """Inverted dropout is unbiased: E[out] = out without dropout. Per element,
    Var[out_d] = p/(1 − p) · Σ_j w_j² v_jd², so the mean of N seeds is within
    6·sqrt(Var/N) of the exact output except with probability ~2e-9 per element
    (normal approximation), ~1e-6 over the elements checked here."""
    B, H, Lq, Lk, D = 1, 2, 8, 12, 8
    q, k, v = _inputs(B, H, Lq, Lk, D, seed=42)
    p, N = 0.3, 400
    exact = qkv.scaled_dot_product_attention(q, k, v).astype(np.float64)
    w = qkv.attention_weights(q, k, v).astype(np.float64)
    var = p / (1 - p) * ((w ** 2) @ (v.astype(np.float64) ** 2))
    mean = np.zeros_like(exact)
    for seed in range(N):
        mean += qkv.scaled_dot_product_attention(q, k, v, dropout_p=p, seed=seed)
    mean /= N
    bound = 6 * np.sqrt(var / N) + 1e-6
    err = np.abs(mean - exact)
    where = np.unravel_index(int(np.argmax(err - bound)), err.shape)
    assert np.all(err <= bound), (f"mean over {N} seeds off by {err[where]:.3g} > "
                                  f"{bound[where]:.3g} at {where}")


def test_unseeded_dropout_draws_from_python_random():
    q, k, v = _inputs()
    random.seed(2024)
    a = qkv.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    b = qkv.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    random.seed(2024)
    c = qkv.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert not np.array_equal(a, b), "two unseeded calls gave the same dropout"
    assert_equal(a, c, "random.seed makes unseeded dropout reproducible")


def test_dropout_with_torch_and_bf16():
    q, k, v = (torch.from_numpy(x).to(torch.bfloat16) for x in _inputs())
    a = qkv.scaled_dot_product_attention(q, k, v, dropout_p=0.2, seed=11)
    b = qkv.scaled_dot_product_attention(q, k, v, dropout_p=0.2, seed=11)
    assert a.dtype == torch.bfloat16
    assert torch.equal(a, b)
