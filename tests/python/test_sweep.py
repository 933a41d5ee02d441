"""qkv against the float64 oracle over a seeded sweep of shapes, masks and options.

Each case is its own test id (case000 ... case263) and is rebuilt from its index alone,
so a failure reproduces with `pytest -k case042`.

Tolerance (float32 inputs): the inputs are built in float32 and upcast for the oracle,
so both sides see exactly the same numbers. The C++ reference accumulates in double and
rounds once to float32, an error of at most 2^-24 ≈ 6e-8 of the value (|out| <= max|v|
≈ 4 here). A fast float32 kernel adds summation error; by the probabilistic bound
(Higham & Mary 2019) it grows like sqrt(n)·u over the n <= 129 terms of each dot product
and weighted sum: ≈ 11 · 6e-8 · |terms| ≈ 1e-6 for the score sizes here (|s| < ~10).
atol = rtol = 1e-5 leaves a 10x margin over that, while a semantic error (one key
included or excluded wrongly, a wrong diagonal) moves outputs by 1e-3 or more.
lse is a float32 log of magnitude < ~40 here: same bound. probs lie in [0, 1]: the
rounding is 2^-24 of each, a score error δs moves p by p·δs, so atol 2e-6 + rtol 1e-5.
"""

import math

import numpy as np
import pytest
import torch

import qkv
from oracle import assert_close, oracle

N_CASES = 264
EDGE_SIZES = [1, 3, 17, 127, 128, 129]
SIZES = EDGE_SIZES + [2, 5, 8, 33, 64]
HEAD_DIMS = [1, 3, 8, 16, 17, 32, 64]
GQA_RATIOS = [1, 2, 4, 8]
MASK_SHAPES = ["LL", "B1LL", "1HLL", "BHLL", "B11L", "L"]
PRIMARY = ["none", "causal_top_left", "causal_bottom_right", "bool_mask", "float_mask",
           "key_lengths", "window", "alibi", "softcap", "scale", "combo"]
WORK_LIMIT = 12_000_000  # B·Hq·Lq·Lk·(Dk + Dv): keeps the naive reference fast

ATOL = RTOL = 1e-5  # see the module docstring
PROBS_ATOL, PROBS_RTOL = 2e-6, 1e-5


def _mask_shape(kind, B, Hq, Lq, Lk):
    return {"LL": (Lq, Lk), "B1LL": (B, 1, Lq, Lk), "1HLL": (1, Hq, Lq, Lk),
            "BHLL": (B, Hq, Lq, Lk), "B11L": (B, 1, 1, Lk), "L": (Lk,)}[kind]


def make_case(idx):
    """The idx-th case: a dict of qkv keyword arguments, arrays and a description."""
    rng = np.random.default_rng([20240517, idx])
    primary = PRIMARY[idx % len(PRIMARY)]
    combo = primary == "combo"

    def pick(seq):
        return seq[int(rng.integers(len(seq)))]

    def maybe(feature, p=0.35):
        return primary == feature or (combo and rng.random() < p)

    ratio = GQA_RATIOS[(idx // len(PRIMARY)) % len(GQA_RATIOS)]
    Hkv = pick([1, 2])
    Hq = Hkv * ratio
    B = pick([1, 2, 3])
    Lq, Lk = pick(SIZES), pick(SIZES)
    if idx < 36 * 2:  # the first cases walk every (Lq, Lk) pair of edge sizes
        Lq, Lk = EDGE_SIZES[idx % 6], EDGE_SIZES[(idx // 6) % 6]
    Dk = pick(HEAD_DIMS)
    Dv = Dk if rng.random() < 0.3 else pick(HEAD_DIMS)
    while B * Hq * Lq * Lk * (Dk + Dv) > WORK_LIMIT:
        if B > 1:
            B -= 1
        elif Hkv > 1:
            Hkv, Hq = 1, ratio
        elif Dk > 17 or Dv > 17:
            Dk, Dv = min(Dk, 17), min(Dv, 17)
        else:
            break

    args = {"is_causal": False, "causal_alignment": pick(["top_left", "bottom_right"])}
    if primary == "causal_top_left":
        args.update(is_causal=True, causal_alignment="top_left")
    elif primary == "causal_bottom_right":
        args.update(is_causal=True, causal_alignment="bottom_right")
    elif combo and rng.random() < 0.5:
        args["is_causal"] = True

    mask_kind = None
    if primary in ("bool_mask", "float_mask"):
        mask_kind = primary
    elif combo and rng.random() < 0.5:
        mask_kind = pick(["bool_mask", "float_mask"])
    mask = None
    mask_shape_kind = None
    if mask_kind:
        mask_shape_kind = MASK_SHAPES[(idx // 2) % len(MASK_SHAPES)]
        shape = _mask_shape(mask_shape_kind, B, Hq, Lq, Lk)
        if mask_kind == "bool_mask":
            mask = rng.random(shape) < 0.75
            if mask.ndim >= 2 and mask.shape[-2] > 1 and rng.random() < 0.5:
                mask[..., rng.integers(mask.shape[-2]), :] = False  # a fully masked row
        else:
            mask = rng.standard_normal(shape).astype(np.float32)
            mask[rng.random(shape) < 0.1] = -np.inf
    args["attn_mask"] = mask

    if maybe("key_lengths"):
        choices = [0, Lk, int(rng.integers(0, Lk + 1)), max(Lk - 1, 0)]
        lengths = [pick(choices) for _ in range(B)]
        if primary == "key_lengths":
            lengths[0] = int(rng.integers(1, Lk + 1)) if Lk > 1 else 1  # partial
            if B > 1:
                lengths[1] = 0
        args["key_lengths"] = lengths
    if maybe("window"):
        sides = [None, -1, 0, 1, 4, int(rng.integers(0, max(Lk, 1)))]
        left, right = pick(sides), pick(sides)
        if primary == "window" and (left in (None, -1)) and (right in (None, -1)):
            left = pick([0, 1, 4])
        args["window"] = (left, right)
    if maybe("alibi"):
        if rng.random() < 0.5:  # the ALiBi paper's geometric slopes 2^(-8h/H)
            slopes = [2.0 ** (-8.0 * (h + 1) / Hq) for h in range(Hq)]
        else:
            slopes = rng.uniform(0.0, 1.0, Hq).tolist()
        args["alibi_slopes"] = np.asarray(slopes, dtype=np.float32)  # what C++ stores
    if maybe("softcap"):
        args["softcap"] = pick([0.5, 2.0, 10.0, 30.0])
    if maybe("scale"):
        args["scale"] = pick([0.0, 0.05, 0.3, 1.0, -0.5, 2.0])
    layout = pick(["contiguous", "contiguous", "blhd"])

    q = rng.standard_normal((B, Hq, Lq, Dk)).astype(np.float32)
    k = rng.standard_normal((B, Hkv, Lk, Dk)).astype(np.float32)
    v = rng.standard_normal((B, Hkv, Lk, Dv)).astype(np.float32)
    if layout == "blhd":  # (B, L, H, D) storage viewed as (B, H, L, D): no copy in qkv
        q, k, v = (np.ascontiguousarray(x.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
                   for x in (q, k, v))
    desc = (f"{primary}: B={B} Hq={Hq} Hkv={Hkv} Lq={Lq} Lk={Lk} Dk={Dk} Dv={Dv} "
            f"layout={layout} mask={mask_kind}{'/' + mask_shape_kind if mask_kind else ''} "
            + " ".join(f"{key}={val!r}" for key, val in args.items()
                       if key not in ("attn_mask", "alibi_slopes") and val is not None)
            + (" alibi" if "alibi_slopes" in args else ""))
    return {"q": q, "k": k, "v": v, "args": args, "desc": desc, "primary": primary,
            "dims": (B, Hq, Hkv, Lq, Lk, Dk, Dv), "mask_kind": mask_kind,
            "mask_shape": mask_shape_kind, "layout": layout}


def _oracle_for(case):
    a = case["args"]
    t = lambda x: torch.from_numpy(np.asarray(x, dtype=np.float64))  # noqa: E731
    mask = a["attn_mask"]
    if mask is not None:
        mask = torch.from_numpy(mask) if mask.dtype == np.bool_ else t(mask)
    return oracle(t(case["q"]), t(case["k"]), t(case["v"]), mask=mask, causal=a["is_causal"],
                  alignment=a["causal_alignment"], key_lengths=a.get("key_lengths"),
                  window=a.get("window"), alibi_slopes=a.get("alibi_slopes"),
                  softcap=a.get("softcap"), scale=a.get("scale"))


def test_sweep_covers_the_edges():
    """The generator must keep producing the cases the sweep promises."""
    cases = [make_case(i) for i in range(N_CASES)]
    seen_lq = {c["dims"][3] for c in cases}
    seen_lk = {c["dims"][4] for c in cases}
    assert set(EDGE_SIZES) <= seen_lq and set(EDGE_SIZES) <= seen_lk
    assert {c["dims"][1] // c["dims"][2] for c in cases} == set(GQA_RATIOS)
    assert any(c["dims"][3] != c["dims"][4] for c in cases)
    assert any(c["dims"][5] != c["dims"][6] for c in cases)
    for kind in ("bool_mask", "float_mask"):
        assert {c["mask_shape"] for c in cases if c["mask_kind"] == kind} == set(MASK_SHAPES)
    assert any(0 in c["args"].get("key_lengths", []) for c in cases)
    assert any(any(0 < n < c["dims"][4] for n in c["args"].get("key_lengths", []))
               for c in cases)
    windows = [c["args"]["window"] for c in cases if "window" in c["args"]]
    assert any(None in w or -1 in w for w in windows)
    assert any(all(x not in (None, -1) for x in w) for w in windows)
    for alignment in ("top_left", "bottom_right"):
        assert any(c["args"]["is_causal"] and c["args"]["causal_alignment"] == alignment
                   for c in cases)
    # A mask together with is_causal (a qkv extension: both apply).
    assert any(c["args"]["is_causal"] and c["mask_kind"] for c in cases)
    combos = [c for c in cases if c["primary"] == "combo"]
    assert sum(len(set(c["args"]) - {"is_causal", "causal_alignment", "attn_mask"}) >= 2
               for c in combos) >= 5


@pytest.mark.parametrize("idx", range(N_CASES), ids=lambda i: f"case{i:03d}")
def test_sweep_against_oracle(idx):
    """Both implementations against the oracle: the fused kernel ("fast", what
    "automatic" runs; its instruction set is the CPU's best, test_isas.py repeats the
    sweep for every other one) and the double-precision reference."""
    case = make_case(idx)
    a = case["args"]
    want_out, want_lse, want_probs = _oracle_for(case)
    desc = case["desc"]
    for impl in ("fast", "reference"):
        out, lse = qkv.scaled_dot_product_attention(case["q"], case["k"], case["v"], **a,
                                                    enable_gqa=True, return_lse=True,
                                                    impl=impl)
        assert isinstance(out, np.ndarray) and out.dtype == np.float32
        assert lse.dtype == np.float32
        assert_close(out, want_out, ATOL, RTOL, f"{impl} out [{desc}]")
        assert_close(lse, want_lse, ATOL, RTOL, f"{impl} lse [{desc}]")
        dead = np.isneginf(want_lse.numpy())
        assert np.all(out[dead] == 0.0), f"{impl}: fully masked rows must be exactly 0 [{desc}]"

    probs = qkv.attention_weights(case["q"], case["k"], case["v"], enable_gqa=True, **a)
    assert probs.dtype == np.float32
    assert_close(probs, want_probs, PROBS_ATOL, PROBS_RTOL, f"probs [{desc}]")
    # Each row of probabilities sums to 1, or to 0 when the row is fully masked (lse −inf).
    # Bound: each of the Lk entries carries up to 2^-24 relative rounding (summed in f64).
    Lk = case["dims"][4]
    sums = probs.astype(np.float64).sum(axis=-1)
    expected = np.where(np.isneginf(want_lse.numpy()), 0.0, 1.0)
    assert_close(sums, expected, Lk * 2.0 ** -24 + 1e-6, 0.0, f"probs row sums [{desc}]")
