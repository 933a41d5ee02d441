"""qkv.torch.MultiheadAttention and qkv.torch.TransformerEncoderLayer against torch.nn's.

Each qkv module loads the torch module's state_dict (strict), then the outputs and the
gradients of every parameter are compared:
  * in float64, where qkv computes in double (the reference path), to 1e-10: any
    difference in the masks, the projections or the backward shows;
  * in float32 (the fused kernel) against the torch module in float64, within a bound
    relative to the largest value: every quantity is a sum of at most E + S + F products
    of f32-rounded terms, (E + S + F + 16)·u relative error with u = 2^-24, doubled for the
    forward values the backward reads, times 4 for the LayerNorm's division by the
    standard deviation of values of order 1.
And a small model trains the same in both (same steps, same parameters after).
"""

import math

import pytest
import torch

import qkv
import qkv.torch as qt
from oracle import assert_close

U = 2.0 ** -24


def _pair(torch_module, qkv_module, dtype):
    torch_module = torch_module.to(dtype)
    qkv_module = qkv_module.to(dtype)
    qkv_module.load_state_dict(torch_module.state_dict(), strict=True)
    return torch_module.eval(), qkv_module.eval()


def _run(module, inputs, **kwargs):
    """(output, {parameter name: gradient}, [input gradients]) for loss = Σ output·w."""
    module.zero_grad()
    inputs = [x.detach().clone().requires_grad_(True) for x in inputs]
    out = module(*inputs, **kwargs)
    out = out[0] if isinstance(out, tuple) else out
    w = torch.linspace(-1.0, 1.0, out.numel(), dtype=out.dtype).view(out.shape)
    (out * w).sum().backward()
    grads = {name: p.grad.detach().clone() for name, p in module.named_parameters()}
    return out.detach(), grads, [x.grad for x in inputs]


def _compare(want, got, bound, what):
    """got (qkv) against want (torch); bound(t) the absolute tolerance for tensor t."""
    assert_close(got[0], want[0], bound(want[0]), 0.0, f"{what}: output")
    assert got[1].keys() == want[1].keys()
    for name in want[1]:
        assert_close(got[1][name], want[1][name], bound(want[1][name]), 0.0, f"{what}: d{name}")
    for i, (g, w) in enumerate(zip(got[2], want[2])):
        assert_close(g, w, bound(w), 0.0, f"{what}: d(input {i})")


def _f32_bound(terms):
    return lambda t: 8 * (terms + 16) * U * max(t.abs().max().item(), 1.0)


def _inputs(shapes, seed, dtype):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=torch.float64).to(dtype) for s in shapes]


E, H, L, S, B = 32, 4, 7, 9, 3

MHA_CASES = [  # (name, constructor kwargs, input shapes, forward kwargs)
    ("seq-first", {}, [(L, B, E), (S, B, E), (S, B, E)], {}),
    ("batch-first", dict(batch_first=True), [(B, L, E), (B, S, E), (B, S, E)], {}),
    ("kdim-vdim-no-bias", dict(kdim=12, vdim=20, bias=False, batch_first=True),
     [(B, L, E), (B, S, 12), (B, S, 20)], {}),
    ("unbatched", {}, [(L, E), (S, E), (S, E)], {}),
    ("key-padding-bool", dict(batch_first=True), [(B, L, E), (B, S, E), (B, S, E)],
     dict(key_padding_mask=torch.arange(S).view(1, S) >= torch.tensor([[9], [4], [1]]))),
    ("attn-mask-bool", {}, [(L, B, E), (S, B, E), (S, B, E)],
     dict(attn_mask=torch.ones(L, S, dtype=torch.bool).triu(3))),
    ("attn-mask-float-per-head-and-padding-bool", dict(batch_first=True),
     [(B, L, E), (B, S, E), (B, S, E)],
     dict(attn_mask=torch.randn(B * H, L, S, generator=torch.Generator().manual_seed(5)),
          key_padding_mask=torch.arange(S).view(1, S) >= torch.tensor([[9], [6], [2]]))),
    # (A float attn_mask with a float key_padding_mask is left out: torch 1.13 reads the
    # padding mask as bool there, nonzero = masked; qkv adds the two, as torch 2.x does.)
    ("attn-mask-bool-and-padding-float", dict(batch_first=True),
     [(B, L, E), (B, S, E), (B, S, E)],
     dict(attn_mask=torch.ones(L, S, dtype=torch.bool).triu(4),
          key_padding_mask=torch.where(torch.arange(S).view(1, S) >= torch.tensor([[9], [6], [2]]),
                                       -math.inf, 0.0))),
]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name,ctor,shapes,fwd", MHA_CASES, ids=[c[0] for c in MHA_CASES])
def test_multihead_attention_matches_torch(name, ctor, shapes, fwd, dtype):
    torch.manual_seed(1)
    theirs, ours = _pair(torch.nn.MultiheadAttention(E, H, **ctor),
                         qt.MultiheadAttention(E, H, **ctor), dtype)
    inputs = _inputs(shapes, seed=len(name), dtype=dtype)
    fwd = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in fwd.items()}
    # The oracle is torch's layer in float64 either way.
    want = _run(theirs.double(), [x.double() for x in inputs], need_weights=False,
                **{k: (v.double() if v.is_floating_point() else v) for k, v in fwd.items()})
    got = _run(ours, inputs, **fwd)
    bound = (lambda t: 1e-10 * max(t.abs().max().item(), 1.0)) if dtype == torch.float64 \
        else _f32_bound(E + S)
    _compare(want, got, bound, name)


def test_is_causal_is_the_causal_mask():
    torch.manual_seed(2)
    theirs, ours = _pair(torch.nn.MultiheadAttention(E, H, batch_first=True),
                         qt.MultiheadAttention(E, H, batch_first=True), torch.float64)
    x = _inputs([(B, L, E)], seed=3, dtype=torch.float64)
    want = _run(theirs, [x[0]] * 3, attn_mask=torch.ones(L, L, dtype=torch.bool).triu(1),
                need_weights=False)
    got = _run(ours, [x[0]] * 3, is_causal=True)
    _compare(want, got, lambda t: 1e-10 * max(t.abs().max().item(), 1.0), "is_causal")


@pytest.mark.parametrize("average", [True, False])
def test_need_weights_gives_torchs_weights(average):
    torch.manual_seed(3)
    theirs, ours = _pair(torch.nn.MultiheadAttention(E, H), qt.MultiheadAttention(E, H),
                         torch.float32)
    q, kv = _inputs([(L, B, E), (S, B, E)], seed=4, dtype=torch.float32)
    mask = torch.ones(L, S, dtype=torch.bool).triu(2)
    out_t, w_t = theirs(q, kv, kv, attn_mask=mask, average_attn_weights=average)
    out_q, w_q = ours(q, kv, kv, attn_mask=mask, need_weights=True,
                      average_attn_weights=average)
    assert w_q.shape == w_t.shape and not w_q.requires_grad
    assert_close(w_q, w_t, 1e-6, 1e-5, "weights")
    assert_close(out_q, out_t, 1e-5, 1e-5, "output")
    assert ours(q, kv, kv)[1] is None  # need_weights defaults to False


LAYER_CASES = [
    ("post-norm-relu", dict(), [(S, B, E)], {}),
    ("pre-norm-gelu-batch-first", dict(norm_first=True, activation="gelu", batch_first=True),
     [(B, S, E)], dict(src_key_padding_mask=torch.arange(S).view(1, S) >= torch.tensor([[9], [5], [2]]))),
    ("causal-mask", dict(batch_first=True), [(B, S, E)],
     dict(src_mask=torch.ones(S, S, dtype=torch.bool).triu(1))),
]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name,ctor,shapes,fwd", LAYER_CASES, ids=[c[0] for c in LAYER_CASES])
def test_encoder_layer_matches_torch(name, ctor, shapes, fwd, dtype):
    torch.manual_seed(4)
    F = 48
    theirs, ours = _pair(torch.nn.TransformerEncoderLayer(E, H, F, dropout=0.1, **ctor),
                         qt.TransformerEncoderLayer(E, H, F, dropout=0.1, **ctor), dtype)
    inputs = _inputs(shapes, seed=len(name), dtype=dtype)
    want = _run(theirs.double(), [x.double() for x in inputs], **fwd)
    got = _run(ours, inputs, **fwd)
    bound = (lambda t: 1e-10 * max(t.abs().max().item(), 1.0)) if dtype == torch.float64 \
        else _f32_bound(E + S + F)
    _compare(want, got, bound, name)


def _model(layer_class):
    torch.manual_seed(5)
    return torch.nn.Sequential(
        layer_class(E, H, 64, dropout=0.0, batch_first=True, norm_first=True),
        layer_class(E, H, 64, dropout=0.0, batch_first=True))


def test_a_model_trains_the_same_as_with_torchs_layers():
    """Twenty AdamW steps from the same weights on the same batches: the float64 runs end
    with the same parameters, and the loss falls."""
    theirs = _model(torch.nn.TransformerEncoderLayer).double()
    ours = _model(qt.TransformerEncoderLayer).double()
    ours.load_state_dict(theirs.state_dict())
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (theirs, ours)]
    g = torch.Generator().manual_seed(6)
    losses = []
    for _ in range(20):
        x = torch.randn(4, 10, E, generator=g, dtype=torch.float64)
        target = x.roll(1, dims=1)  # each position learns its predecessor
        step = []
        for model, opt in zip((theirs, ours), opts):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), target)
            loss.backward()
            opt.step()
            step.append(loss.item())
        assert step[1] == pytest.approx(step[0], rel=1e-9, abs=1e-12)
        losses.append(step[1])
    assert losses[-1] < 0.9 * losses[0], losses
    for (name, p), (_, r) in zip(theirs.named_parameters(), ours.named_parameters()):
        assert_close(r, p, 1e-9, 1e-8, f"after training: {name}")


def test_dropout_follows_torchs_generator_and_train_mode():
    torch.manual_seed(7)
    mha = qt.MultiheadAttention(E, H, dropout=0.5, batch_first=True)
    x = torch.randn(2, S, E)
    torch.manual_seed(8)
    a = mha(x, x, x)[0]
    torch.manual_seed(8)
    b = mha(x, x, x)[0]
    c = mha(x, x, x)[0]
    assert torch.equal(a, b) and not torch.equal(a, c)
    mha.eval()
    assert torch.equal(mha(x, x, x)[0], mha(x, x, x)[0])


def test_bad_arguments_raise_naming_them():
    with pytest.raises(ValueError, match="add_bias_kv"):
        qt.MultiheadAttention(E, H, add_bias_kv=True)
    with pytest.raises(ValueError, match="divisible by num_heads"):
        qt.MultiheadAttention(30, 4)
    with pytest.raises(TypeError, match="num_heads"):
        qt.MultiheadAttention(E, 4.0)
    mha = qt.MultiheadAttention(E, H)
    x = torch.randn(L, B, E)
    with pytest.raises(ValueError, match="attn_mask must be"):
        mha(x, x, x, attn_mask=torch.zeros(L, L + 1, dtype=torch.bool))
    with pytest.raises(ValueError, match="key_padding_mask must be"):
        mha(x, x, x, key_padding_mask=torch.zeros(B, L + 1, dtype=torch.bool))
    with pytest.raises(ValueError, match="activation"):
        qt.TransformerEncoderLayer(E, H, activation="swish")

