#!/usr/bin/python3
"""SASRec in torch 1.13: the twin of qkv's (include/qkv/sasrec.h, `qkv train
sasrec`), for scripts/bench_recommender.py and tests/python/test_sasrec.py.

  make_sasrec_class()          TorchSasRec, an nn.Module under qkv's parameter names
                               (item_emb.weight, pos_emb.weight, blocks.N.<torch's
                               TransformerEncoderLayer names>, last_norm.*), built from a
                               state dict such as qkv.recommender.sasrec_initial's
  state_numpy(model)           its weights back as name -> float32 NumPy arrays (for
                               qkv.recommender.save_sasrec_weights)
  train_twin(model, batches, ...)  qkv's training loop in torch: every step of every epoch
                               on qkv's batches (qkv.recommender.SasRecBatches.get(epoch,
                               step)), AdamW (0.9, 0.98), eps 1e-8, no weight decay, no
                               clipping, constant lr; the best validation HR@10 kept

The model, as sasrec.h writes it:

  x = item_emb[ids]·√d + pos_emb[0:T]        ids (B, T): item index + 1, 0 = padding
  x = emb_dropout(x)                         nn.Dropout(dropout) (the paper's)
  x = block_n(x)                             nn.TransformerEncoderLayer(d, heads,
                                             dim_feedforward=d, dropout, relu,
                                             batch_first, norm_first), causal mask
  h = last_norm(x)                           nn.LayerNorm(d), eps 1e-5
  loss = mean over (b, t) with positives != 0 of
         softplus(−h·item_emb[pos]) + softplus(h·item_emb[neg])

Sequences are right-padded, so with the causal mask a real position never attends to a
padding one: no key padding mask. The dropouts (default 0) act in train mode only, with
torch's random numbers: qkv's masks are other ones, so the two trainings with dropout agree
in distribution, not step by step.

As a program (Debian's python3 with python3-torch; qkv's module from --build-dir):

  scripts/bench/sasrec_torch.py --data DIR_OR_CSV [--epochs 200] [--seed 0] [--dropout 0]
        [--threads 2] [--out DIR] [--json]
      trains the twin from qkv's initial weights (sasrec_initial, --seed) on qkv's batches
      and prints the loss of every epoch, the training seconds per step and steps/s, the
      best validation epoch and the test metrics (qkv's evaluation of the twin's weights,
      written into a model directory: --out, else a temporary one).
  scripts/bench/sasrec_torch.py --check --data DIR_OR_CSV [--seed 0] [--epoch 0 --step 0]
      the loss torch computes (float32 and float64) for qkv's initial weights and one batch,
      beside qkv's (qkv.recommender._sasrec_loss) when the module has it; one JSON line.
"""
import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time

PARAMETER_SUFFIXES = ("self_attn.in_proj_weight", "self_attn.in_proj_bias",
                      "self_attn.out_proj.weight", "self_attn.out_proj.bias",
                      "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
                      "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias")


def parameter_names(layers):
    """The names of a SASRec state dict, qkv's and the twin's, in qkv's order."""
    names = ["item_emb.weight", "pos_emb.weight"]
    for n in range(layers):
        names += [f"blocks.{n}.{s}" for s in PARAMETER_SUFFIXES]
    return names + ["last_norm.weight", "last_norm.bias"]


def sizes(weights):
    """(num_items, dim, layers, max_len) of a state dict."""
    rows, dim = weights["item_emb.weight"].shape
    layers = 0
    while f"blocks.{layers}.linear1.weight" in weights:
        layers += 1
    return rows - 1, dim, layers, weights["pos_emb.weight"].shape[0]


def make_sasrec_class():
    """TorchSasRec, defined when torch is imported (the scripts import torch late, after
    choosing its BLAS)."""
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class TorchSasRec(nn.Module):
        """forward(ids (B, T) int64) -> h (B, T, d); loss(inputs, positives, negatives).
        weights: name -> array or tensor (any float dtype; the module takes `dtype`);
        dropout: p of the embedding dropout and of the blocks' (train mode only)."""

        def __init__(self, weights, heads=1, dtype=torch.float32, dropout=0.0):
            super().__init__()
            num_items, d, layers, max_len = sizes(weights)
            self.num_items, self.dim, self.heads, self.max_len = num_items, d, heads, max_len
            self.item_emb = nn.Embedding(num_items + 1, d)
            self.pos_emb = nn.Embedding(max_len, d)
            self.emb_dropout = nn.Dropout(dropout)
            self.blocks = nn.ModuleList(
                nn.TransformerEncoderLayer(d_model=d, nhead=heads, dim_feedforward=d, dropout=dropout,
                                           activation="relu", layer_norm_eps=1e-5, batch_first=True,
                                           norm_first=True)
                for _ in range(layers))
            self.last_norm = nn.LayerNorm(d, eps=1e-5)
            self.to(dtype)
            expected = set(parameter_names(layers))
            if set(weights) != expected:
                raise ValueError(f"SASRec weights: missing {sorted(expected - set(weights))}, "
                                 f"unexpected {sorted(set(weights) - expected)}")
            state = {name: torch.as_tensor(np.array(w) if not torch.is_tensor(w) else w).to(dtype).clone()
                     for name, w in weights.items()}
            self.load_state_dict(state, strict=True)
            self._masks = {}

        def causal_mask(self, T):
            """(T, T) bool, True above the diagonal: the keys a query may not see."""
            if T not in self._masks:
                self._masks[T] = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)
            return self._masks[T]

        def forward(self, ids):
            T = ids.shape[1]
            if T > self.max_len:
                raise ValueError(f"sequence length {T} is above max_len {self.max_len}")
            x = self.emb_dropout(self.item_emb(ids) * math.sqrt(self.dim) + self.pos_emb.weight[:T])
            mask = self.causal_mask(T)
            for block in self.blocks:
                x = block(x, src_mask=mask)
            return self.last_norm(x)

        def loss(self, inputs, positives, negatives):
            """The paper's loss: binary cross-entropy of the positive's and the negative's
            scores (BCEWithLogits against 1 and 0) at every position with a target, the sum
            of the two divided by the number of such positions."""
            h = self(inputs)
            target = positives != 0
            hs = h[target]  # (N, d)
            table = self.item_emb.weight
            pos = (hs * table[positives[target]]).sum(-1)
            neg = (hs * table[negatives[target]]).sum(-1)
            total = (F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos), reduction="sum")
                     + F.binary_cross_entropy_with_logits(neg, torch.zeros_like(neg), reduction="sum"))
            return total / hs.shape[0]

    return TorchSasRec


def state_numpy(model):
    """name -> contiguous float32 NumPy array, qkv's names. A copy: Tensor.numpy() shares
    the parameter's memory, which the next optimizer step would change under a kept state."""
    import numpy as np
    return {name: np.array(t.detach().cpu().numpy(), dtype=np.float32, order="C", copy=True)
            for name, t in model.state_dict().items()}


def batch_tensors(batch):
    """A SasRecBatches.get dict -> (inputs, positives, negatives) int64 tensors."""
    import numpy as np
    import torch
    return tuple(torch.from_numpy(np.ascontiguousarray(batch[k], dtype=np.int64))
                 for k in ("inputs", "positives", "negatives"))


def step_flops(dim, layers, inputs):
    """Floating-point operations of one training step (forward and backward) on a
    right-padded (B, T) batch of item ids, counting the real items of each row only (what
    the step must compute; work on padding is not counted): for a row of n items,
    6·(matrix parameters) per item for the blocks' projections (3d², d², and the
    feed-forward's 2d²), attention's two products over the causal half, 12·layers·n·d / 2
    per item, and the two scores (2d each, forward and backward) per position."""
    import numpy as np
    inputs = np.asarray(inputs)
    nonzero = inputs != 0
    # a row's length: through its last item
    lengths = np.where(nonzero.any(axis=1), inputs.shape[1] - np.argmax(nonzero[:, ::-1], axis=1), 0)
    d = dim
    total = 0
    for n in lengths.tolist():
        total += n * (6 * layers * 6 * d * d + 6 * layers * n * d + 3 * 2 * 2 * d)
    return total


def train_twin(model, batches, epochs, lr=1e-3, eval_every=5, evaluate=None, on_epoch=None,
               on_step=None, stop_after_steps=None, precision="f32"):
    """qkv's train_sasrec in torch. For epoch e and step s: batches.get(e, s), zero_grad,
    loss, backward, AdamW step; only these are timed (the batch's conversion included, its
    generation not: that is batch_seconds, which qkv's train_seconds does count). After
    every eval_every-th epoch and after the last, evaluate(state) -> validation HR@10
    (state: state_numpy(model)); the state of the best (the first of equals) is kept. on_epoch(info dict), on_step(epoch, step, loss, seconds).
    -> dict: losses (every step), epoch_losses (mean per epoch), step_seconds,
    train_seconds, batch_seconds, steps, flops, best_epoch (1-based, 0 when never evaluated),
    best_validation, best_state (None when never evaluated), history [(epoch, loss,
    validation or None)]. precision "bf16": the loss (forward, scores and BCE) under
    torch.autocast("cpu", dtype=torch.bfloat16), backward and AdamW outside it (torch's
    mixed-precision recipe; bench/twins.py autocast)."""
    import torch
    from bench.twins import autocast
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.0)
    model.train()
    steps_per_epoch = batches.steps_per_epoch
    losses, step_seconds, epoch_losses, history = [], [], [], []
    flops, batch_seconds = 0, 0.0
    best_epoch, best_validation, best_state = 0, None, None
    start = time.perf_counter()
    for epoch in range(epochs):
        epoch_sum, epoch_steps = 0.0, 0
        for step in range(steps_per_epoch):
            t_get = time.perf_counter()
            batch = batches.get(epoch, step)
            t0 = time.perf_counter()
            batch_seconds += t0 - t_get
            inputs, positives, negatives = batch_tensors(batch)
            opt.zero_grad(set_to_none=False)
            with autocast(precision):
                loss = model.loss(inputs, positives, negatives)
            loss.backward()
            opt.step()
            seconds = time.perf_counter() - t0
            value = loss.item()
            losses.append(value)
            step_seconds.append(seconds)
            flops += step_flops(model.dim, len(model.blocks), inputs)
            epoch_sum += value
            epoch_steps += 1
            if on_step:
                on_step(epoch, step, value, seconds)
            if stop_after_steps and len(losses) >= stop_after_steps:
                break
        epoch_losses.append(epoch_sum / max(1, epoch_steps))
        validation = None
        if evaluate and ((epoch + 1) % eval_every == 0 or epoch + 1 == epochs
                         or (stop_after_steps and len(losses) >= stop_after_steps)):
            state = state_numpy(model)
            validation = evaluate(state)
            if best_validation is None or validation > best_validation:
                best_epoch, best_validation, best_state = epoch + 1, validation, state
        history.append((epoch + 1, epoch_losses[-1], validation))
        if on_epoch:
            on_epoch({"epoch": epoch + 1, "total": epochs, "loss": epoch_losses[-1],
                      "validation": validation, "best": validation is not None and best_epoch == epoch + 1,
                      "elapsed_s": time.perf_counter() - start})
        if stop_after_steps and len(losses) >= stop_after_steps:
            break
    return {"losses": losses, "epoch_losses": epoch_losses, "step_seconds": step_seconds,
            "train_seconds": sum(step_seconds), "batch_seconds": batch_seconds, "steps": len(losses),
            "flops": flops,
            "best_epoch": best_epoch, "best_validation": best_validation,
            "best_state": best_state, "history": history}


def step_summary(step_seconds, warmup=5):
    """Seconds per step: mean and median of the steps after the first `warmup` (all when
    there are not more)."""
    kept = step_seconds[warmup:] if len(step_seconds) > warmup else step_seconds
    return {"mean": statistics.mean(kept), "median": statistics.median(kept)}


# ---------------------------------------------------------------------------------------
# The program.

def ratings_csv(path):
    return os.path.join(path, "ratings.csv") if os.path.isdir(path) else path


def import_qkv(build_dir):
    """qkv from build_dir/python (first on sys.path), as scripts/bench_lm.py finds it."""
    python_dir = os.path.join(os.path.abspath(build_dir), "python")
    if os.path.isdir(os.path.join(python_dir, "qkv")):
        sys.path.insert(0, python_dir)
    import qkv
    return qkv


def make_template(qkv, csv, directory, args):
    """A SASRec model directory of this configuration (config.json, movies.csv,
    history.csv) whose model.safetensors the twin's weights replace: qkv trains 1 epoch."""
    qkv.recommender.train(csv, directory, model="sasrec", epochs=1, batch=args.batch, lr=args.lr,
                          dim=args.dim, layers=args.layers, heads=args.heads, max_len=args.max_len,
                          seed=args.seed, eval_every=1)


def run_check(args):
    """--check: torch's loss of qkv's initial weights on one of qkv's batches (float32 and
    float64), beside qkv's when the module has _sasrec_loss."""
    import numpy as np
    import torch
    torch.set_num_threads(args.threads)
    qkv = import_qkv(args.build_dir)
    rec = qkv.recommender
    csv = ratings_csv(args.data)
    batches = rec.SasRecBatches(csv, batch=args.batch, max_len=args.max_len, seed=args.seed)
    weights = rec.sasrec_initial(batches.num_items, dim=args.dim, layers=args.layers, heads=args.heads,
                                 max_len=args.max_len, seed=args.seed)
    batch = batches.get(args.epoch, args.step)
    TorchSasRec = make_sasrec_class()
    out = {"seed": args.seed, "epoch": args.epoch, "step": args.step,
           "batch_shape": list(np.asarray(batch["inputs"]).shape),
           "targets": int((np.asarray(batch["positives"]) != 0).sum())}
    for name, dtype in (("torch_f32", torch.float32), ("torch_f64", torch.float64)):
        model = TorchSasRec(weights, heads=args.heads, dtype=dtype)
        with torch.no_grad():
            out[f"loss_{name}"] = model.loss(*batch_tensors(batch)).item()
    if hasattr(rec, "_sasrec_loss"):
        loss, _ = rec._sasrec_loss(weights, batch, args.dim, args.layers, args.heads, args.max_len)
        out["loss_qkv"] = float(loss)
        out["relative_difference_f64"] = abs(out["loss_qkv"] - out["loss_torch_f64"]) / abs(out["loss_torch_f64"])
    print(json.dumps(out))
    return 0


def run_train(args):
    import torch
    torch.set_num_threads(args.threads)
    qkv = import_qkv(args.build_dir)
    qkv.set_num_threads(args.threads)
    rec = qkv.recommender
    csv = ratings_csv(args.data)
    batches = rec.SasRecBatches(csv, batch=args.batch, max_len=args.max_len, seed=args.seed)
    weights = rec.sasrec_initial(batches.num_items, dim=args.dim, layers=args.layers, heads=args.heads,
                                 max_len=args.max_len, seed=args.seed)
    torch.manual_seed(args.seed)  # the dropout masks
    model = make_sasrec_class()(weights, heads=args.heads, dropout=args.dropout)
    scratch = tempfile.mkdtemp(prefix="qkv-sasrec-torch-")
    try:
        out = args.out or os.path.join(scratch, "model")
        if args.template:
            if os.path.abspath(args.template) != os.path.abspath(out):
                shutil.copytree(args.template, out, dirs_exist_ok=True)
        else:
            make_template(qkv, csv, out, args)

        def evaluate(state):
            rec.save_sasrec_weights(out, state)
            return rec.evaluate(out, csv, validation=True)["hr10"]

        def on_epoch(info):
            v = "" if info["validation"] is None else f", validation HR@10 {info['validation']:.4f}"
            print(f"torch epoch {info['epoch']}/{info['total']}: loss {info['loss']:.4f}{v}"
                  + (" (best)" if info["best"] else ""), file=sys.stderr, flush=True)

        result = train_twin(model, batches, args.epochs, lr=args.lr, eval_every=args.eval_every,
                            evaluate=evaluate, on_epoch=on_epoch)
        rec.save_sasrec_weights(out, result.pop("best_state"))
        test = rec.evaluate(out, csv)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    per_step = step_summary(result["step_seconds"])
    mean = result["train_seconds"] / result["steps"]  # batches differ in T: the mean, not the median
    summary = {"torch": torch.__version__, "threads": args.threads, "seed": args.seed,
               "epochs": args.epochs, "steps_per_epoch": batches.steps_per_epoch,
               "seconds_per_step": mean, "seconds_per_step_after_5": per_step, "steps_per_s": 1 / mean,
               "gflops": result["flops"] / result["train_seconds"] / 1e9, "test": test,
               **{k: v for k, v in result.items() if k != "history"}}
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"torch {torch.__version__}, {args.threads} threads: {result['steps']} steps "
          f"({batches.steps_per_epoch} per epoch): {mean:.4f} s/step ({1 / mean:.2f} steps/s; training "
          f"time / steps, evaluation excluded; median step {per_step['median']:.4f} s), "
          f"{summary['gflops']:.1f} GFLOP/s")
    for epoch, loss, validation in result["history"]:
        v = "" if validation is None else f"  validation HR@10 {validation:.4f}"
        print(f"  epoch {epoch:4}: loss {loss:.4f}{v}")
    print(f"best epoch {result['best_epoch']} (validation HR@10 {result['best_validation']:.4f}); test: "
          + ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in test.items()))
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="ratings.csv or its directory (fetch_data.sh movielens DIR)")
    parser.add_argument("--check", action="store_true", help="print torch's (and qkv's) loss of one batch")
    parser.add_argument("--epoch", type=int, default=0, help="--check: the batch's epoch")
    parser.add_argument("--step", type=int, default=0, help="--check: the batch's step")
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--dim", type=int, default=50)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=1)
    parser.add_argument("--max-len", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dropout", type=float, default=0.0, help="the embedding's and the blocks' dropout p")
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", help="model directory to write the twin's best weights into")
    parser.add_argument("--template", help="a qkv SASRec model directory of this configuration "
                        "(else qkv trains one for 1 epoch)")
    parser.add_argument("--json", action="store_true")
    from bench import peers
    from bench.build import add_arguments as add_build_arguments
    add_build_arguments(parser)
    peers.add_arguments(parser, ort=False)
    args = parser.parse_args()
    if not args.check:
        peers.reexec_with_openblas(args)  # does not return when it re-runs the script
    return run_check(args) if args.check else run_train(args)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # scripts/
    sys.exit(main())
