"""The Universal Sentence Encoder lite in torch (1.13), from the converted weights, batched
with padding and a key-padding mask: the torch peer of scripts/bench_use_lite.py.

    model = UseLiteTorch(config, weights)          # use_lite_model.load(directory, ...)
    with torch.inference_mode():
        y = model(ids, lengths)                    # (B, L) int64, (B) int64 -> (B, O) unit rows

Layer 0 changes width (256 in, 512 out: out_proj 256 -> 512 and a residual_proj), which
nn.MultiheadAttention and nn.TransformerEncoderLayer cannot express, so every layer that
changes width is written here in torch ops (F.layer_norm, F.linear, batched matmul, softmax
with padded keys at -inf). A layer that keeps its width (layer 1) is an
nn.TransformerEncoderLayer (norm_first, relu, batch_first), which in eval() under
inference_mode takes torch's fused encoder-layer path (torch._transformer_encoder_layer_fwd)
with src_key_padding_mask; native=False writes it in the same torch ops as layer 0 instead
(the two agree to float32 rounding; the script times the default).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from bench.use_lite_model import timing_signal, widths


def _t(a):
    return torch.from_numpy(a.copy())


class _WideningLayer(nn.Module):
    """A pre-norm layer in torch ops: E_in in, E_out out (a residual_proj where they differ)."""

    def __init__(self, weights, prefix, e_in, e_out, heads, eps):
        super().__init__()
        w = {k[len(prefix):]: _t(v) for k, v in weights.items() if k.startswith(prefix)}
        self.H, self.D, self.E, self.eps = heads, e_in // heads, e_in, eps
        for name, value in w.items():
            self.register_buffer(name.replace(".", "_"), value)
        self.residual = e_in != e_out

    def forward(self, x, key_padding):  # x (B, L, E_in); key_padding (B, 1, 1, L), True = padding
        B, L, _ = x.shape
        H, D, E = self.H, self.D, self.E
        h = F.layer_norm(x, (E,), self.norm1_weight, self.norm1_bias, self.eps)
        qkv = F.linear(h, self.self_attn_in_proj_weight, self.self_attn_in_proj_bias)  # (B, L, 3E)
        q, k, v = (t.reshape(B, L, H, D).transpose(1, 2) for t in qkv.split(E, dim=-1))  # (B, H, L, D)
        scores = torch.matmul(q * (1 / math.sqrt(D)), k.transpose(-1, -2))  # (B, H, L, L)
        scores = scores.masked_fill(key_padding, float("-inf"))
        o = torch.matmul(torch.softmax(scores, dim=-1), v)  # (B, H, L, D)
        o = o.transpose(1, 2).reshape(B, L, E)
        a = F.linear(o, self.self_attn_out_proj_weight, self.self_attn_out_proj_bias)  # (B, L, E_out)
        r = F.linear(x, self.residual_proj_weight, self.residual_proj_bias) if self.residual else x
        x = r + a
        h = F.layer_norm(x, (x.shape[-1],), self.norm2_weight, self.norm2_bias, self.eps)
        return x + F.linear(F.relu(F.linear(h, self.linear1_weight, self.linear1_bias)),
                            self.linear2_weight, self.linear2_bias)


def _native_layer(weights, prefix, e, heads, ffn, eps):
    """nn.TransformerEncoderLayer with the checkpoint's weights (same names as torch's)."""
    layer = nn.TransformerEncoderLayer(e, heads, ffn, dropout=0.0, activation="relu", layer_norm_eps=eps,
                                       batch_first=True, norm_first=True)
    state = {k[len(prefix):]: _t(v) for k, v in weights.items() if k.startswith(prefix)}
    layer.load_state_dict(state, strict=True)
    return layer


class UseLiteTorch(nn.Module):
    def __init__(self, config, weights, native=True):
        super().__init__()
        heads, ffn = config["num_attention_heads"], config["dim_feedforward"]
        eps = config["layer_norm_eps"]
        self.scale = float(config.get("embedding_scale", 1.0))
        self.register_buffer("embedding", _t(weights["embedding.weight"]))  # (rows, E0)
        self.register_buffer("timing", _t(timing_signal(config["max_length"], config["layer_widths"][0])))
        self.layers = nn.ModuleList()
        self.native = []
        for i, (e_in, e_out) in enumerate(widths(config)):
            prefix = f"layers.{i}."
            use_native = native and e_in == e_out
            self.layers.append(_native_layer(weights, prefix, e_in, heads, ffn, eps) if use_native
                               else _WideningLayer(weights, prefix, e_in, e_out, heads, eps))
            self.native.append(use_native)
        self.register_buffer("pooler_weight", _t(weights["pooler.weight"]))  # (O, O)
        self.register_buffer("pooler_bias", _t(weights["pooler.bias"]))
        self.eval()

    def forward(self, ids, lengths):  # ids (B, L) int64, zero-padded; lengths (B) int64, each >= 1
        B, L = ids.shape
        padding = torch.arange(L).unsqueeze(0) >= lengths.unsqueeze(1)  # (B, L), True = padding
        x = self.embedding[ids] * self.scale + self.timing[:L]  # (B, L, E0)
        for layer, native in zip(self.layers, self.native):
            x = layer(x, src_key_padding_mask=padding) if native else layer(x, padding[:, None, None, :])
        x = x.masked_fill(padding.unsqueeze(-1), 0.0)  # the fused path leaves padded rows as they are
        pooled = x.sum(dim=1) / lengths.unsqueeze(1).to(x.dtype)  # (B, O)
        y = torch.tanh(F.linear(pooled, self.pooler_weight, self.pooler_bias))
        return y / torch.sqrt(torch.clamp((y * y).sum(dim=1, keepdim=True), min=1e-12))


def pad(sentences):
    """[[ids]] -> (ids (B, L) int64 zero-padded, lengths (B) int64)."""
    L = max(len(s) for s in sentences)
    ids = torch.zeros(len(sentences), L, dtype=torch.int64)
    for b, s in enumerate(sentences):
        ids[b, :len(s)] = torch.tensor(s, dtype=torch.int64)
    return ids, torch.tensor([len(s) for s in sentences], dtype=torch.int64)
