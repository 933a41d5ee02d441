#!/usr/bin/env python3
"""A recipe study for qkv's Fashion-MNIST ViT, on a GPU with torch 2.x: which change to the
training recipe of `qkv train vit --shifted-patches` buys validation accuracy, and how
many epochs reach a given accuracy. Each variant trains the model of include/qkv/vit.h
(the Shifted-Patch ViT: 49 patches + class token, 6 pre-norm blocks, d 128, 4 heads, mlp
256) with qkv's recipe (55,000 training images, the last 5,000 validate; batch 128; AdamW
β 0.9/0.999, weight decay 0.05 on rank >= 2; gradient norm clipped at 1; one epoch of
linear warm-up, then a cosine to lr/100; label smoothing 0.1; a random crop from the
2-pixel padded image and a flip) changed as VARIANTS says. The test set is never read.

This is not the side-by-side twin of scripts/bench_vision.py: torch's own initialisation,
data order and augmentation draws (on the GPU), so two runs differ as two seeds do. It
exists because a GPU trains a variant in about two minutes where the 2-core CPU needs an
hour; the winner is then trained by qkv. TF32 is off (float32 products, as qkv's).
Variants run in parallel processes, in waves; each writes OUT/NAME.json after every epoch:
{"variant", "val" (per epoch), "ema_val", "seconds"}.

  usage: study_vit_recipe.py DATA_DIR OUT_DIR --waves "base,lsa;erase,ema" [--epochs 20]
                             [--deadline SECONDS]
  STUDY_DEVICE=cpu STUDY_STEPS=5 runs 5 steps per epoch on the CPU and validates on 1,000
  images (a smoke test).

Variants: LSA is Locality Self-Attention (Lee, Lee & Song 2021): a learned temperature per
head (initialised to 1/sqrt(d_head)) and the diagonal masked; erase is Random Erasing
(Zhong et al. 2017) as qkv's --erase: with probability p a rectangle of 2–40% of the image,
aspect 0.3–3.3, set to the mean pixel (0 after normalisation); ema keeps an exponential
moving average of the weights (decay 0.999) and scores it too. pd is patch dropout (Liu et al.
2022) as qkv's --patch-dropout: in the first pd_epochs epochs each training image keeps a
random 49 - round(pd * 49) (halves up) of its patch tokens (each with its own position), drawn afresh
every step; validation sees every patch.
"""
import argparse
import gzip
import json
import math
import multiprocessing as mp
import os
import time

import numpy as np


VARIANTS = {
    "base":      {},
    "base_s1":   {"seed": 1},
    "base_s2":   {"seed": 2},
    "lsa":       {"lsa": True},
    "lsa_s1":    {"lsa": True, "seed": 1},
    "lsa_s2":    {"lsa": True, "seed": 2},
    "temp":      {"temp": True},
    "diag":      {"diag": True},
    "lr2":       {"lr": 2e-3},
    "lr2_lsa":   {"lr": 2e-3, "lsa": True},
    "wd1":       {"wd": 0.1},
    "ls0":       {"smooth": 0.0},
    "b256":      {"batch": 256, "lr": 2e-3},
    "erase":     {"erase": 0.25},
    "pad3":      {"pad": 3},
    "minlr0":    {"min_ratio": 0.0},
    "ema":       {"ema": 0.999},
    "lsa_ema":   {"lsa": True, "ema": 0.999},
    "warm2":     {"warmup": 2},
    "l7":        {"layers": 7},
    "e28":       {"epochs": 28},
    "e36":       {"epochs": 36},
    "erase_e36": {"erase": 0.25, "epochs": 36},
    "erase_ema_e28": {"erase": 0.25, "ema": 0.999, "epochs": 28},
    # patch dropout (qkv's --patch-dropout F --patch-dropout-epochs N) with erasing, at about
    # the shipped run's time on the 2-core CPU (a dropped epoch of F 0.5 costs about half a
    # whole one there, of F 0.75 about a third)
    "pd_e30":    {"erase": 0.25, "pd": 0.5, "pd_epochs": 22, "epochs": 30},
    "pd_e30_s1": {"erase": 0.25, "pd": 0.5, "pd_epochs": 22, "epochs": 30, "seed": 1},
    "pd_e33":    {"erase": 0.25, "pd": 0.5, "pd_epochs": 27, "epochs": 33},
    "pd_e36":    {"erase": 0.25, "pd": 0.5, "pd_epochs": 32, "epochs": 36},
    "pd75_e40":  {"erase": 0.25, "pd": 0.75, "pd_epochs": 34, "epochs": 40},
    "pd75_e46":  {"erase": 0.25, "pd": 0.75, "pd_epochs": 40, "epochs": 46},
    "pd_e30_s2": {"erase": 0.25, "pd": 0.5, "pd_epochs": 22, "epochs": 30, "seed": 2},
    "pd75_e40_s1": {"erase": 0.25, "pd": 0.75, "pd_epochs": 34, "epochs": 40, "seed": 1},
    "pd75_e46_s1": {"erase": 0.25, "pd": 0.75, "pd_epochs": 40, "epochs": 46, "seed": 1},
    "pd75_e46_s2": {"erase": 0.25, "pd": 0.75, "pd_epochs": 40, "epochs": 46, "seed": 2},
}

def read_idx(path):
    """A gzipped IDX file -> uint8 array (numpy only: the GPU machine has no qkv build)."""
    with gzip.open(path, "rb") as f:
        b = f.read()
    nd = b[3]
    dims = [int.from_bytes(b[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(b, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)

def run(name, data, out_dir, epochs, deadline):
    import torch, torch.nn as nn, torch.nn.functional as F
    from bench.vit_torch import constant_rows_exact, patchify, shifted_stack
    v = {"seed": 0, "lr": 1e-3, "wd": 0.05, "smooth": 0.1, "batch": 128, "lsa": False, "temp": False,
         "diag": False, "erase": 0.0, "pd": 0.0, "pd_epochs": 0, "pad": 2, "min_ratio": 0.01, "ema": 0.0, "warmup": 1, "layers": 6,
         "epochs": epochs, **VARIANTS[name]}
    epochs = v["epochs"]
    if v["lsa"]: v["temp"] = v["diag"] = True
    torch.manual_seed(v["seed"]); np.random.seed(v["seed"])
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = os.environ.get("STUDY_DEVICE", "cuda")
    X = torch.from_numpy(read_idx(f"{data}/train-images-idx3-ubyte.gz").copy()).to(dev)
    Y = torch.from_numpy(read_idx(f"{data}/train-labels-idx1-ubyte.gz").astype(np.int64)).to(dev)
    Xtr, Ytr, Xva, Yva = X[:55000], Y[:55000], X[55000:], Y[55000:]
    mean, std = 0.2860, 0.3530
    d, H, L = 128, 4, v["layers"]
    dh = d // H

    class Block(nn.Module):
        def __init__(s):
            super().__init__()
            s.n1, s.n2 = nn.LayerNorm(d, eps=1e-6), nn.LayerNorm(d, eps=1e-6)
            s.qkv, s.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
            s.f1, s.f2 = nn.Linear(d, 256), nn.Linear(256, d)
            s.scale = nn.Parameter(torch.full((H,), dh ** -0.5)) if v["temp"] else None
        def forward(s, x):
            B, T, _ = x.shape
            q, k, vv = s.qkv(s.n1(x)).view(B, T, 3, H, dh).permute(2, 0, 3, 1, 4)
            if s.scale is None and not v["diag"] and hasattr(F, "scaled_dot_product_attention"):  # torch >= 2
                a = F.scaled_dot_product_attention(q, k, vv)
            else:
                sc = s.scale.view(1, H, 1, 1) if s.scale is not None else dh ** -0.5
                att = (q @ k.transpose(-1, -2)) * sc
                if v["diag"]:
                    att = att.masked_fill(torch.eye(T, dtype=torch.bool, device=x.device), float("-inf"))
                a = att.softmax(-1) @ vv
            x = x + s.o(a.transpose(1, 2).reshape(B, T, d))
            return x + s.f2(F.gelu(s.f1(s.n2(x))))

    class Vit(nn.Module):
        def __init__(s):
            super().__init__()
            s.pn = nn.LayerNorm(80, eps=1e-6); s.pe = nn.Linear(80, d)
            s.cls = nn.Parameter(torch.randn(d) * 0.02); s.pos = nn.Parameter(torch.randn(50, d) * 0.02)
            s.blocks = nn.ModuleList(Block() for _ in range(L))
            s.norm = nn.LayerNorm(d, eps=1e-6); s.head = nn.Linear(d, 10)
            nn.init.zeros_(s.head.weight); nn.init.zeros_(s.head.bias)
        def forward(s, img, kept=None):            # (B, 1, 28, 28); kept (B, K) patch indices
            B = img.shape[0]
            x = patchify(shifted_stack(img, 2), 4)  # (B, 49, 80)
            x = s.pe(constant_rows_exact(s.pn, x))  # (B, 49, d)
            x = torch.cat([s.cls.expand(B, 1, d), x], 1) + s.pos
            if kept is not None:                    # (B, 1 + K, d): the class token and the kept patches
                x = torch.cat([x[:, :1], torch.gather(x[:, 1:], 1, kept[:, :, None].expand(-1, -1, d))], 1)
            for b in s.blocks: x = b(x)
            return s.head(s.norm(x)[:, 0])

    model = Vit().to(dev)
    ema = None
    if v["ema"]:
        ema = Vit().to(dev); ema.load_state_dict(model.state_dict())
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    other = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": v["wd"]}, {"params": other, "weight_decay": 0.0}],
                            lr=v["lr"], betas=(0.9, 0.999), eps=1e-8, **({"fused": True} if dev == "cuda" else {}))
    Bt = v["batch"]; per_epoch = math.ceil(55000 / Bt); total = per_epoch * epochs
    warm = per_epoch * v["warmup"]
    def lr_at(step):
        if step < warm: return v["lr"] * (step + 1) / warm
        t = (step - warm) / max(1, total - warm)
        lo = v["lr"] * v["min_ratio"]
        return lo + 0.5 * (v["lr"] - lo) * (1 + math.cos(math.pi * t))
    pd = v["pad"]
    keep = max(1, 49 - math.floor(v["pd"] * 49 + 0.5))   # patches kept under patch dropout, as C++ llround
    ar = torch.arange(28, device=dev)
    def augment(imgs):                      # uint8 (B, 28, 28)
        B = imgs.shape[0]
        padded = F.pad(imgs, (pd, pd, pd, pd))
        dy = torch.randint(-pd, pd + 1, (B, 1), device=dev); dx = torch.randint(-pd, pd + 1, (B, 1), device=dev)
        flip = torch.rand(B, 1, device=dev) < 0.5
        xs = torch.where(flip, 27 - ar, ar) + dx + pd
        ys = ar + dy + pd
        out = padded[torch.arange(B, device=dev)[:, None, None], ys[:, :, None], xs[:, None, :]]
        x = (out.float() / 255 - mean) / std
        if v["erase"]:
            # random erasing (Zhong et al.): a rectangle of 2-40% of the image, aspect 0.3-3.3, set to 0 (the mean after normalisation)
            area = torch.empty(B, device=dev).uniform_(0.02, 0.4) * 784
            logr = torch.empty(B, device=dev).uniform_(math.log(0.3), math.log(3.3))
            h = (area * logr.exp()).sqrt().round().clamp(1, 28); w = (area / logr.exp()).sqrt().round().clamp(1, 28)
            y0 = (torch.rand(B, device=dev) * (29 - h)).floor(); x0 = (torch.rand(B, device=dev) * (29 - w)).floor()
            m = ((ar[None, :, None] >= y0[:, None, None]) & (ar[None, :, None] < (y0 + h)[:, None, None]) &
                 (ar[None, None, :] >= x0[:, None, None]) & (ar[None, None, :] < (x0 + w)[:, None, None]))
            m &= (torch.rand(B, 1, 1, device=dev) < v["erase"])
            x = x.masked_fill(m, 0.0)
        return x[:, None]
    def accuracy(m):
        m.eval(); correct = 0
        n = 1000 if smoke else 5000
        with torch.no_grad():
            for i in range(0, n, 1000):
                x = ((Xva[i:i + 1000].float() / 255 - mean) / std)[:, None]
                correct += (m(x).argmax(-1) == Yva[i:i + 1000]).sum().item()
        m.train(); return correct / n
    res = {"name": name, "variant": v, "val": [], "ema_val": [], "seconds": []}
    t0 = time.time(); step = 0
    smoke = "STUDY_STEPS" in os.environ   # a smoke test: a few steps, 1,000 validation images
    for ep in range(epochs):
        perm = torch.randperm(55000, device=dev)
        for s in range(min(per_epoch, int(os.environ.get("STUDY_STEPS", per_epoch)))):
            idx = perm[s * Bt:(s + 1) * Bt]
            x = augment(Xtr[idx]); y = Ytr[idx]
            kept = None
            if v["pd"] and (v["pd_epochs"] == 0 or ep < v["pd_epochs"]):
                kept = torch.rand(x.shape[0], 49, device=dev).argsort(-1)[:, :keep]
            loss = F.cross_entropy(model(x, kept), y, label_smoothing=v["smooth"])
            opt.zero_grad(set_to_none=True); loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            for g in opt.param_groups: g["lr"] = lr_at(step)
            opt.step(); step += 1
            if ema is not None:
                with torch.no_grad():
                    for pe, pm in zip(ema.parameters(), model.parameters()): pe.lerp_(pm, 1 - v["ema"])
        res["val"].append(accuracy(model))
        if ema is not None: res["ema_val"].append(accuracy(ema))
        res["seconds"].append(round(time.time() - t0, 1))
        with open(f"{out_dir}/{name}.json", "w") as f: json.dump(res, f)
        if time.time() > deadline: break
    print(name, res["val"][-3:], res["ema_val"][-3:], res["seconds"][-1], flush=True)

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("data"); ap.add_argument("out")
    ap.add_argument("--waves", required=True); ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--deadline", type=float, default=400)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    end = time.time() + a.deadline
    ctx = mp.get_context("spawn")
    for wave in a.waves.split(";"):
        if time.time() > end - 30: break
        ps = [ctx.Process(target=run, args=(n, a.data, a.out, a.epochs, end)) for n in wave.split(",")]
        for p in ps: p.start()
        for p in ps: p.join()
