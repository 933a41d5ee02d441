"""Training: the loss and every gradient of qkv's encoder–decoder (qkv/seq2seq.h, through
every layer's backward in qkv/nn/*.h) against torch 1.13 autograd on a torch module
with the same children and the same weights, computed in float64.

The model is torch.nn.Transformer (batch_first, dropout 0) between two embeddings scaled
by √E plus the sinusoidal table, and a Linear generator — the module
scripts/bench_training.py times. The oracle is float64, so the difference is qkv's
float32 rounding. Gradients pass through ~4 chained products per layer, each off by about
K·u·Σ|terms|; across 2+2 layers and the loss that stays well under 1e-4 of the largest
gradient entry (measured: about 1e-6), so the bound is 1e-4·max|g| + 1e-7.
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import qkv

_qkv = qkv._qkv


class TorchSeq2Seq(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        V, E = c["vocab_size"], c["d_model"]
        self.E = E
        self.src_embed = torch.nn.Embedding(V, E)
        self.tgt_embed = torch.nn.Embedding(V, E)
        self.transformer = torch.nn.Transformer(
            d_model=E, nhead=c["nhead"], num_encoder_layers=c["num_encoder_layers"],
            num_decoder_layers=c["num_decoder_layers"], dim_feedforward=c["dim_feedforward"],
            dropout=0.0, activation=c.get("activation", "relu"), batch_first=True,
            norm_first=c.get("norm_first", True), layer_norm_eps=c.get("layer_norm_eps", 1e-5))
        self.generator = torch.nn.Linear(E, V)

    def pe(self, L, dtype):
        pos = torch.arange(L, dtype=torch.float64)[:, None]
        i = torch.arange(0, self.E, 2, dtype=torch.float64)
        angle = pos / torch.pow(10000.0, i / self.E)
        pe = torch.zeros(L, self.E, dtype=torch.float64)
        pe[:, 0::2] = torch.sin(angle)
        pe[:, 1::2] = torch.cos(angle[:, : self.E // 2])
        return pe.to(dtype)

    def forward(self, src, src_lengths, tgt_in):
        S, T = src.shape[1], tgt_in.shape[1]
        dtype = self.generator.weight.dtype
        xs = self.src_embed(src) * math.sqrt(self.E) + self.pe(S, dtype)
        xt = self.tgt_embed(tgt_in) * math.sqrt(self.E) + self.pe(T, dtype)
        causal = torch.triu(torch.full((T, T), float("-inf"), dtype=dtype), 1)
        pad = None
        if src_lengths is not None:
            pad = torch.arange(S)[None, :] >= torch.tensor(src_lengths)[:, None]
        h = self.transformer(xs, xt, tgt_mask=causal, src_key_padding_mask=pad,
                             memory_key_padding_mask=pad)
        return self.generator(h)


def batch(rng, B, S, T, V, padded):
    src = rng.integers(4, V, size=(B, S))
    lengths = rng.integers(1, S + 1, size=B).tolist() if padded else None
    if padded:
        lengths[0] = S
        for b, n in enumerate(lengths):
            src[b, n:] = 0
    tgt_in = rng.integers(4, V, size=(B, T))
    tgt_out = rng.integers(4, V, size=(B, T))
    tgt_out[1, T - 2:] = -100  # ignored targets
    return src, lengths, tgt_in, tgt_out


CONFIGS = [
    dict(norm_first=True, activation="relu", padded=True, smoothing=0.0),
    dict(norm_first=True, activation="gelu", padded=False, smoothing=0.1),
    dict(norm_first=False, activation="relu", padded=True, smoothing=0.1),
    dict(norm_first=False, activation="gelu", padded=True, smoothing=0.0),
]


@pytest.mark.parametrize("case", CONFIGS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_loss_and_every_gradient_match_torch_autograd(case):
    config = dict(vocab_size=19, d_model=16, nhead=4, dim_feedforward=24, num_encoder_layers=2,
                  num_decoder_layers=2, max_len=16, norm_first=case["norm_first"],
                  activation=case["activation"])
    model = _qkv._Seq2Seq(config, 7)
    state = model.state_dict()
    ref = TorchSeq2Seq(config).double()
    missing = set(ref.state_dict()) ^ set(state)
    assert not missing, f"parameter names differ from torch's: {sorted(missing)}"
    ref.load_state_dict({k: torch.from_numpy(v).double() for k, v in state.items()})

    rng = np.random.default_rng(3)
    src, lengths, tgt_in, tgt_out = batch(rng, 5, 9, 6, 19, case["padded"])
    loss, grads = model.forward_backward(src, lengths, tgt_in, tgt_out, case["smoothing"])

    logits = ref(torch.from_numpy(src), lengths, torch.from_numpy(tgt_in))
    want = F.cross_entropy(logits.reshape(-1, 19), torch.from_numpy(tgt_out).reshape(-1),
                           ignore_index=-100, label_smoothing=case["smoothing"])
    want.backward()
    assert abs(loss - want.item()) <= 1e-5 * abs(want.item()), (loss, want.item())
    worst = []
    for name, p in ref.named_parameters():
        g_ref = p.grad.numpy()
        g = grads[name]
        assert g.shape == g_ref.shape, name
        err = float(np.abs(g - g_ref).max())
        bound = 1e-4 * float(np.abs(g_ref).max()) + 1e-7
        worst.append((err / bound, name, err))
        assert err <= bound, f"{name}: max error {err:.3g} > {bound:.3g}"
    # Every parameter received a gradient (a layer skipped in the backward would be 0).
    assert all(np.abs(grads[n]).max() > 0 for n, _ in ref.named_parameters())


def test_logits_match_torch_forward():
    config = dict(vocab_size=11, d_model=8, nhead=2, dim_feedforward=16, num_encoder_layers=1,
                  num_decoder_layers=2, max_len=12)
    model = _qkv._Seq2Seq(config, 1)
    ref = TorchSeq2Seq(config).double()
    ref.load_state_dict({k: torch.from_numpy(v).double() for k, v in model.state_dict().items()})
    rng = np.random.default_rng(0)
    src, lengths, tgt_in, _ = batch(rng, 3, 7, 5, 11, True)
    got = model.logits(src, lengths, tgt_in)
    want = ref(torch.from_numpy(src), lengths, torch.from_numpy(tgt_in)).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * (1 + np.abs(want).max()))


def test_greedy_decode_equals_argmax_of_full_forward():
    config = dict(vocab_size=13, d_model=8, nhead=2, dim_feedforward=16, num_encoder_layers=1,
                  num_decoder_layers=1, max_len=12)
    model = _qkv._Seq2Seq(config, 5)
    sources = [[5, 6, 7, 8], [9, 4]]
    outs = model.greedy_decode(sources, 1, 2, 6)
    for src, out in zip(sources, outs):
        prefix = [1]
        for _ in range(6):
            logits = model.logits(np.array([src]), None, np.array([prefix]))
            nxt = int(np.argmax(logits[0, -1]))
            if nxt == 2:
                break
            prefix.append(nxt)
        assert out == prefix[1:]


@pytest.mark.parametrize("bad", ["src_len", "length", "id"])
def test_bad_batches_raise_value_error(bad):
    model = _qkv._Seq2Seq(dict(vocab_size=7, d_model=8, nhead=2, dim_feedforward=8,
                               num_encoder_layers=1, num_decoder_layers=1, max_len=4), 0)
    src = np.full((2, 4), 4)
    lengths = [4, 4]
    tgt = np.full((2, 3), 5)
    if bad == "src_len":
        src = np.full((2, 5), 4)
        lengths = [5, 5]
    elif bad == "length":
        lengths = [4, 0]
    else:
        tgt[0, 0] = 7
    with pytest.raises(ValueError):
        model.forward_backward(src, lengths, tgt, tgt, 0.0)


def test_translate_dates_with_the_embedded_model():
    assert qkv.translate_dates("Saturday, 21 November 2026") == "2026-11-21"
    assert qkv.translate_dates(["2026年11月21日", "the 3rd of March, 1999"]) == [
        "2026-11-21", "1999-03-03"]
    with pytest.raises(ValueError):
        qkv.translate_dates("")
    with pytest.raises(TypeError):
        qkv.translate_dates([3])
    with pytest.raises(FileNotFoundError):
        qkv.translate_dates("21.11.2026", model="/nonexistent-dir")
