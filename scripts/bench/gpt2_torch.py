"""GPT-2 (Hugging Face's GPT2LMHeadModel, as published) in eager torch, for the benchmarks
and tests that hold qkv's GPT-2 against torch 1.13:

  read_safetensors(path)       a Hugging Face model.safetensors (F32) as NumPy arrays
  gpt2_directory(directory)    its config.json and weights, "transformer." prefix removed
  TorchGpt2(directory)         decoding with a preallocated KV cache (scripts/bench_models.py,
                               scripts/bench_lm.py)
  TorchGpt2LM(config, weights) the same architecture as a trainable nn.Module: the torch
                               twin of `qkv train lm` (scripts/bench_lm.py,
                               tests/python/test_gpt2_training.py)

Weights are Hugging Face's: Conv1D matrices stored (in, out), used as x @ W + b; the LM
head is wte (tied). Attention is written out (q·kᵀ/√D, causal -inf mask, softmax, ·v), as
torch 1.13's GPT2Attention computes it.
"""
import json
import math
import os
import struct


def read_safetensors(path):
    """name -> read-only float32 array (a view of a memory map)."""
    import numpy as np
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    for name, info in header.items():
        if info["dtype"] != "F32":
            raise ValueError(f"{path}: tensor {name} is {info['dtype']}; only F32 is read here")
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    return {name: data[i["data_offsets"][0]:i["data_offsets"][1]].view(np.float32).reshape(i["shape"])
            for name, i in header.items()}


def gpt2_directory(directory):
    """(config dict, {name: float32 torch tensor}) of a GPT-2 directory, the weights named
    without the "transformer." prefix (wte.weight, h.0.attn.c_attn.weight, ...)."""
    import torch
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    weights = {}
    for name, array in read_safetensors(os.path.join(directory, "model.safetensors")).items():
        name = name[len("transformer."):] if name.startswith("transformer.") else name
        weights[name] = torch.from_numpy(array.copy())
    weights.pop("lm_head.weight", None)  # tied to wte
    return config, weights


def block(x, w, p, H, eps, attend):
    """One pre-norm block: x (..., T, E) -> (..., T, E). attend(q, k, v) with q, k, v
    (..., H, T, D) -> (..., H, T, D) is the caller's (with or without a cache)."""
    import torch.nn.functional as F
    E = x.shape[-1]
    D = E // H
    a = F.layer_norm(x, (E,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
    qkv = a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # Conv1D: (in, out)
    q, k, v = (t.unflatten(-1, (H, D)).transpose(-2, -3) for t in qkv.split(E, dim=-1))
    o = attend(q, k, v).transpose(-2, -3).flatten(-2)  # (..., T, E)
    x = x + o @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
    m = F.layer_norm(x, (E,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
    m = F.gelu(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"], approximate="tanh")
    return x + m @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]


def causal_attention(q, k, v, offset=0):
    """softmax(q·kᵀ/√D + causal mask)·v; query i sits at position offset + i."""
    import torch
    T, S = q.shape[-2], k.shape[-2]
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if T > 1:
        blocked = torch.ones(T, S, dtype=torch.bool).tril(diagonal=offset).logical_not()
        scores = scores.masked_fill(blocked, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


class TorchGpt2:
    """Decoding with a preallocated KV cache, one sequence."""

    def __init__(self, directory):
        import torch
        c, self.w = gpt2_directory(directory)
        self.E, self.H = c["n_embd"], c["n_head"]
        self.D = self.E // self.H
        self.L, self.P = c["n_layer"], c["n_positions"]
        self.eps = c.get("layer_norm_epsilon", 1e-5)
        self.k = torch.zeros(self.L, self.H, self.P, self.D)
        self.v = torch.zeros(self.L, self.H, self.P, self.D)
        self.length = 0

    def clear(self):
        self.length = 0

    def forward(self, ids):
        """The next len(ids) tokens -> the logits (V) of the last one; appends to the cache."""
        import torch
        import torch.nn.functional as F
        w, T, start = self.w, len(ids), self.length
        end = start + T
        x = w["wte.weight"][torch.tensor(ids)] + w["wpe.weight"][start:end]  # (T, E)
        for i in range(self.L):
            def attend(q, k, v, i=i):
                self.k[i, :, start:end] = k
                self.v[i, :, start:end] = v
                return causal_attention(q, self.k[i, :, :end], self.v[i, :, :end], start)
            x = block(x, w, f"h.{i}.", self.H, self.eps, attend)
        self.length = end
        last = F.layer_norm(x[-1], (self.E,), w["ln_f.weight"], w["ln_f.bias"], self.eps)
        return torch.mv(w["wte.weight"], last)  # lm_head tied to wte

    def generate(self, prompt, max_new_tokens):
        """Greedy ids after prompt (the prompt not included)."""
        self.clear()
        out = []
        logits = self.forward(list(prompt))
        for _ in range(max_new_tokens):
            out.append(int(logits.argmax()))
            if len(out) == max_new_tokens:
                break
            logits = self.forward(out[-1:])
        return out


def make_lm_class():
    """TorchGpt2LM, defined when torch is imported (the scripts import torch late, after
    choosing its BLAS)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class TorchGpt2LM(nn.Module):
        """The trainable twin: every Hugging Face weight an nn.Parameter (dots in names
        become "__"), forward(ids (B, T)) -> logits (B, T, V)."""

        def __init__(self, config, weights):
            super().__init__()
            self.H, self.L = config["n_head"], config["n_layer"]
            self.eps = config.get("layer_norm_epsilon", 1e-5)
            for name, t in weights.items():
                self.register_parameter(name.replace(".", "__"), nn.Parameter(t.clone()))

        def weights(self):
            return {name.replace("__", "."): p for name, p in self.named_parameters()}

        def forward(self, ids):
            w = self.weights()
            T = ids.shape[1]
            x = w["wte.weight"][ids] + w["wpe.weight"][:T]  # (B, T, E)
            for i in range(self.L):
                x = block(x, w, f"h.{i}.", self.H, self.eps, causal_attention)
            x = F.layer_norm(x, (x.shape[-1],), w["ln_f.weight"], w["ln_f.bias"], self.eps)
            return x @ w["wte.weight"].t()  # (B, T, V)

        def loss(self, windows):
            """Mean next-token cross-entropy of windows (B, T + 1), as qkv's gpt2_lm_loss."""
            logits = self(windows[:, :-1])
            return F.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten())

    return TorchGpt2LM


def train_twin(model, stream, offsets, steps, batch, context, lr, warmup, min_ratio=0.1,
               weight_decay=0.1, clip=1.0, on_step=None, precision="f32"):
    """`qkv train lm`'s loop in torch: for each step, the windows stream[o : o + context + 1]
    at offsets(step), zero_grad, loss, backward, clip_grad_norm_(clip), AdamW (β 0.9,
    0.999, eps 1e-8; weight decay on matrices only, as qkv's AdamWOptions) at the cosine
    schedule's rate. A warm-up not below `steps` becomes steps // 10, as in train_lm.
    on_step(step, loss) after each step. precision "bf16": the loss (forward and
    cross-entropy) under torch.autocast("cpu", dtype=torch.bfloat16), backward and the
    optimizer outside it (torch's mixed-precision recipe; bench/twins.py autocast)."""
    import torch
    from bench.twins import autocast, cosine_schedule, decay_groups
    warmup = warmup if warmup < steps else steps // 10
    opt = torch.optim.AdamW(decay_groups(model.parameters(), weight_decay), lr=lr, betas=(0.9, 0.999), eps=1e-8)
    for step in range(steps):
        rate = cosine_schedule(step, lr, warmup, steps, min_ratio)
        for group in opt.param_groups:
            group["lr"] = rate
        windows = torch.stack([stream[o:o + context + 1] for o in offsets(step)])
        opt.zero_grad(set_to_none=False)
        with autocast(precision):
            loss = model.loss(windows)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        if on_step:
            on_step(step, loss.item())
