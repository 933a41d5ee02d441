"""The Universal Sentence Encoder lite as the peers of scripts/bench_use_lite.py rebuild it:
its converted directory read back, its timing signal, and its FLOPs.

The model (scripts/models/convert_use_lite.py reads it from the published TF.js graph;
include/qkv/use_lite.h repeats it):
  x         = embedding_scale · embedding[ids] + timing(position)    (8002, 256) table
  layer i   pre-norm (ε 1e-6), E_i = layer_widths[i] in, E_{i+1} out (the last: output_size):
              x = out_proj(attention(norm1(x))) + (residual_proj(x) if E_i ≠ E_{i+1} else x)
              x = x + linear2(relu(linear1(norm2(x))))
            attention: H heads of D = E_i / H, q scaled by 1/√D, padded keys ignored
  pooled    = mean of x over the sentence's tokens
  embedding = tanh(pooler(pooled)) / sqrt(max(‖·‖², 1e-12))
The weights are torch.nn's layout: a Linear's weight is (out, in).

The helpers beside this one build the peers from what load() returns: use_lite_torch.py (a
torch module), use_lite_onnx.py (an ONNX graph, node by node).
"""
import json
import math
import os

import numpy as np


def load(directory, read_safetensors):
    """directory/config.json and directory/model.safetensors -> (config dict, {name: float32
    array}). read_safetensors: the reader the benchmark scripts share (bench_models.py)."""
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    if config.get("model_type") != "use_lite":
        raise ValueError(f"{directory}/config.json: model_type must be use_lite, got {config.get('model_type')!r}")
    return config, read_safetensors(os.path.join(directory, "model.safetensors"))


def widths(config):
    """[(E_in, E_out)] per layer."""
    w = list(config["layer_widths"]) + [config["output_size"]]
    return list(zip(w[:-1], w[1:]))


def timing_signal(length, width):
    """(length, width) float32: [sin(p·inv), cos(p·inv)] halves, inv_i = exp(-i·ln(1e4)/(width/2 - 1)),
    every step in float32 as TensorFlow's tensor2tensor computes it (get_timing_signal_1d)."""
    half = width // 2
    increment = np.float32(math.log(1e4) / (half - 1))
    inv = np.exp(np.arange(half, dtype=np.float32) * -increment)  # (half)
    angle = np.arange(length, dtype=np.float32)[:, None] * inv[None, :]  # (length, half)
    return np.concatenate([np.sin(angle), np.cos(angle)], axis=1).astype(np.float32)


def flops(config, n):
    """Multiply-adds × 2 of one sentence of n tokens (n ≤ max_length), padding not counted:
    every Linear on every token, attention's two products (4·n²·E_i per layer: Q·Kᵀ and P·V
    over all heads), the pooler. Softmax, norms, activations left out (O(n·E))."""
    F, O = config["dim_feedforward"], config["output_size"]
    total = 0
    for e_in, e_out in widths(config):
        per_token = e_in * 3 * e_in + e_in * e_out + e_out * F + F * e_out
        if e_in != e_out:
            per_token += e_in * e_out  # residual_proj
        total += 2 * n * per_token + 4 * n * n * e_in
    return total + 2 * O * O
