#!/usr/bin/python3
"""`qkv train vit` (a Vision Transformer on Fashion-MNIST) beside its torch 1.13 twin on
the same batches, and `qkv classify` beside the twin's forward.

Run with Debian's Python (it builds build/'s _qkv and qkv_ceilings when missing):

    /usr/bin/python3 scripts/bench.py vision [--data-dir DIR] [--epochs 20] [--seed 0]
                                             [--seeds 0,1,2 [--torch-seeds N]]
                                             [--precision f32,bf16]
                                             [--shifted-patches] [--erase P]
                                             [--patch-dropout F [--patch-dropout-epochs N]]
                                             [--threads 2] [--quick]

It prints its tables and records every epoch (a round of training), every classify round
and every step's loss of both in bench/records/vision/<host kind>.json
(scripts/bench/record.py).

DIR holds the four gzipped IDX files (scripts/fetch_data.sh fashion-mnist DIR; fetched into
DIR when missing, without --data-dir into the bench cache,
~/.cache/qkv-bench/data/fashion-mnist). --quick is a tiny
ViT (d 32, 2 blocks, 7×7 patches) for 2 epochs of 8 steps of 64 images: it checks that the
script runs, in about a minute.
--train-limit N trains on the first N of the 55,000 training images, --steps-per-epoch S
on the first S·batch (an epoch is then S steps; the schedule is over these epochs).

Training. qkv: qkv.vision.train in a child process (scripts/bench/twins.py; so the two
never share threads), one child per epoch: the first trains epoch 1 and stops (stop_at), each next one resumes from
the checkpoint (resume=True, bit-for-bit the same run as one without stops, which
tests/python/test_vision.py checks) for one more epoch, the last one finishes and writes
the model directory. torch: scripts/bench/vit_torch.py's TorchVit with the same initial
weights (qkv's _vit_initial of the seed), on the same batches in the same order
(qkv.vision.TrainingBatches of the seed: qkv's augmented batches, epoch e, step s), with
qkv's optimisation (apps/vision/vision.h VisionTrainingOptions, apps/vision/vision.cpp
train_vision): cross-entropy with label smoothing 0.1; gradients clipped to global L2 norm
1; torch.optim.AdamW (0.9, 0.999), eps 1e-8, weight decay 0.05 on the parameters of rank
>= 2 only (qkv's AdamWOptions.decay_vectors = false: biases, LayerNorms and the class
token are not decayed; the learned positions (1 + N, d) are); the learning rate of
train::cosine_schedule at every step (warm-up over the first epoch, then a half cosine to
lr/100). The two alternate epoch by epoch, qkv, torch | torch, qkv | ..., so that a
drift of the machine falls on both. With --patch-dropout F (in the first N epochs with
--patch-dropout-epochs N, else in all), the twin's blocks see the class token and the
patches qkv keeps in the same step (TrainingBatches.kept: K = N − round(F·N) of each
image's N patches), each with its own patch's position, as qkv's do; the twin embeds every
patch and then takes the kept rows (TorchVit.embed), qkv embeds only the kept ones.

Precisions and seeds. --precision (default f32,bf16 where the CPU has AVX512-BF16 or
AMX, else f32): each engine trains once per precision from the same weights on the same
batches: qkv with precision="bf16" (`qkv train vit --precision bf16`: products of bf16
inputs summed in f32; master weights, AdamW, LayerNorm, softmax and loss in f32), the twin
with its forward and loss under torch.autocast("cpu", dtype=torch.bfloat16), backward
outside it. --seeds trains the whole thing once per seed (the twin in the first
--torch-seeds of them only, to save its time), one seed after the other; within a seed
every (engine, precision) trains epoch e in turn, the order reversed every other epoch.
Reported per precision: the tables below (rounds: the epochs of every seed), and side by
side: each seed's last-epoch test accuracy and the mean over the seeds, training images/s
and GFLOP/s (against the f32 FMA and the vdpbf16ps ceilings), qkv/torch, and bf16's
images/s over f32's and the change of the mean accuracy, per engine. The issue's short
recipe for that comparison (each precision about 12 minutes of 2 idle cores, the twin in
one seed):

    /usr/bin/python3 scripts/bench.py vision --epochs 3 --train-limit 20000 \
        --seeds 0,1,2 --torch-seeds 1 --precision f32,bf16

Test accuracy after every epoch, the same way for both: the epoch's weights (qkv's from its
checkpoint.safetensors, which holds the current weights under their names; the twin's
state dict) classified by qkv's forward (_vit_forward, float32) on the 10,000 test images,
normalised as qkv's to_input does; so the two differ by their training alone. (qkv's own
result, the test accuracy of its best-validation epoch, is shown too.) The per-step
training losses of the first steps are printed side by side: step 1 is ln 10 on both (the
head starts at zero), and the next ones agree to float32 rounding (within 3e-7 over --quick's
first epoch).

Training images/s: the images of the timed steps over their seconds, per epoch and over all
epochs. A step is timed from the end of the previous step to its end: qkv's from the
elapsed_s of its progress, the twin's around its own step. The first step of every epoch
is not timed on either side: it runs cold, right after the other side's epoch (and qkv's
first in a fresh process). Timed: forward, loss, backward, clipping and the
AdamW step; for qkv also making its batch (TrainingBatches.get: the epoch's shuffle and the
augmentation) and its progress callback; the twin's batches come from the same
TrainingBatches outside its timing (their time is shown). Not timed: qkv's validation at
each epoch's end and its checkpoints (written at epoch ends only: checkpoint_every=0),
test evaluation, data loading and process starts. GFLOP/s count 3× the forward's FLOPs
per image for a training step (backward ≈ 2 forwards) and the forward's for classify:

    per image, N = (28 / P)² patches, T = N + 1 tokens, d = dim, m = mlp_dim:
    2·N·P²·d (patch embedding) + layers·(8·T·d² (q, k, v and out projections)
    + 4·T·d·m (feed-forward) + 4·T²·d (q·kᵀ and p·v)) + 2·d·10 (head)

(P² is 5·P² with shifted patches; in an epoch with patch dropout, N is the K kept patches.)

LayerNorm, GELU, softmax and AdamW's element-wise work are not counted. Both sides are
credited this same count, the model's: qkv's last block computes only the class token's row
(the head reads nothing else), about 12% of the forward less arithmetic than the count
with the default model; the twin computes every row. Each side's
percentage of the f32 FMA ceiling is against the ceiling sampled right after each of its
epochs, as scripts/bench/ceilings.py pairs a round with its sample (the median over the
epochs is shown).

Classify: images/s of qkv.vision.Classifier.classify (on the trained model directory) and
of the twin with the same weights in eval() under no_grad (uint8 pixels normalised, logits,
softmax, the best class and its score, the same list of dicts), at batch 1 (--batch1-images
single-image calls per run) and 256 (one call on 256 test images): interleaved rounds,
the median after warm-up, the ceiling sampled after each round. Both run in this process,
each with --threads threads.

torch runs on Debian's OpenBLAS (scripts/bench/peers.py) unless --torch-blas system.
Nothing here asserts a time or an accuracy; the exit status is 1 when something asked for
could not run.
"""
import os
import shutil
import statistics
import sys
import tempfile
import time

from bench import log, peers, record, report, rounds, twins
from bench.build import add_arguments as add_build_arguments, ensure_programs
from bench.ceilings import measure as measure_ceilings, paired, sample as sample_ceiling

# qkv's training recipe (apps/vision/vision.h VisionTrainingOptions); the Python API takes
# lr and label_smoothing, the others are fixed there and mirrored here for the twin.
WARMUP_EPOCHS = 1.0
MIN_LR_RATIO = 0.01
WEIGHT_DECAY = 0.05
CLIP_NORM = 1.0
LABEL_SMOOTHING = 0.1
BETAS = (0.9, 0.999)
EPS = 1e-8

# The full run's ViT is vit.h's default (scripts/bench/vit_torch.py DEFAULT_CONFIG); --quick's
# is tiny. Explicit options override either.
FULL = {"epochs": 20, "batch": 128, "dim": 128, "layers": 6, "heads": 4, "mlp_dim": 256, "patch_size": 4,
        "steps_per_epoch": 0, "rounds": 7, "warmup": 2, "batch1_images": 32}
QUICK = {"epochs": 2, "batch": 64, "dim": 32, "layers": 2, "heads": 2, "mlp_dim": 64, "patch_size": 7,
         "steps_per_epoch": 8, "rounds": 5, "warmup": 1, "batch1_images": 8}
FIRST_STEPS = 6  # the per-step losses printed side by side


def run_qkv_epoch(args, build_dir, data_dir, out, epoch, per_epoch, seed, precision):
    """Epoch `epoch` (0-based) of qkv's run of this seed and precision in a child process
    (bench/twins.py): resumes from out's checkpoint after the first, stops after the epoch's
    last step before the last epoch. -> (progress dicts, the result)."""
    kwargs = {"epochs": args.epochs, "batch": args.batch, "lr": args.lr, "label_smoothing": LABEL_SMOOTHING,
              "dim": args.dim, "layers": args.layers, "heads": args.heads, "mlp_dim": args.mlp_dim,
              "patch_size": args.patch_size, "positions": args.positions,
              "shifted_patches": args.shifted_patches, "erase": args.erase, "seed": seed,
              "patch_dropout": args.patch_dropout, "patch_dropout_epochs": args.patch_dropout_epochs,
              "train_limit": args.train_images, "checkpoint_every": 0, "resume": epoch > 0,
              "stop_at": 0 if epoch + 1 == args.epochs else (epoch + 1) * per_epoch,
              "precision": precision}

    def on_progress(info):
        if info["epoch_end"]:
            log(f"  qkv {precision} seed {seed} epoch {info['epoch']}: loss {info['loss']:.4f}, validation accuracy "
                f"{info['score']:.4f}, {info['items_per_s']:.0f} images/s (whole run)")

    progress, result, _ = twins.train_in_child("vision", build_dir, args.threads, "vision.train", [data_dir, out],
                                               kwargs, on_progress=on_progress)
    if len(progress) != per_epoch:
        raise RuntimeError(f"qkv.vision.train (epoch {epoch + 1}) made {len(progress)} steps, expected {per_epoch}")
    if result.get("precision") != precision:
        raise RuntimeError(f"qkv.vision.train(precision={precision!r}) reports precision {result.get('precision')!r}")
    return progress, result


def drops_patches(patch_dropout, patch_dropout_epochs, epoch):
    """Whether epoch `epoch` (0-based) trains with patch dropout, as train_vision decides:
    in every epoch when patch_dropout_epochs is 0, else in the first patch_dropout_epochs."""
    return patch_dropout > 0 and (patch_dropout_epochs == 0 or epoch < patch_dropout_epochs)


class TorchTwin:
    """qkv's train_vision in torch, one epoch at a time: the model, its AdamW and the global
    step live between epochs."""

    def __init__(self, model, batches, epochs, lr, patch_dropout=0.0, patch_dropout_epochs=0, precision="f32"):
        import torch
        self.torch = torch
        self.precision = precision  # bf16: forward and loss under torch's CPU autocast
        self.model = model
        self.batches = batches
        self.per_epoch = batches.steps_per_epoch
        self.total = self.per_epoch * epochs
        self.warmup = int(WARMUP_EPOCHS * self.per_epoch)  # as train_vision truncates it
        self.lr = lr
        self.patch_dropout, self.patch_dropout_epochs = patch_dropout, patch_dropout_epochs
        # AdamWOptions.decay_vectors = false: only parameters of rank >= 2 are decayed
        self.opt = torch.optim.AdamW(twins.decay_groups(model.parameters(), WEIGHT_DECAY), lr=lr, betas=BETAS,
                                     eps=EPS)
        self.step = 0

    def epoch(self, epoch):
        """Every step of epoch `epoch` (0-based) on batches.get(epoch, s) (and, in an epoch
        with patch dropout, the patches batches.kept(epoch, s, ...)): zero_grad, forward,
        loss (under twins.autocast(precision)), backward, clipping, the step's lr, AdamW; only these are timed (the batch's
        conversion included, its generation and the draw of its patches not: batch_seconds).
        -> {"losses", "step_seconds", "images" (per step), "batch_seconds"}."""
        torch, F = self.torch, self.torch.nn.functional
        self.model.train()
        params = list(self.model.parameters())
        dropping = drops_patches(self.patch_dropout, self.patch_dropout_epochs, epoch)
        losses, seconds, images, batch_seconds = [], [], [], 0.0
        for s in range(self.per_epoch):
            t_get = time.perf_counter()
            x_np, y_np, _ = self.batches.get(epoch, s)
            kept = (self.batches.kept(epoch, s, self.patch_dropout, self.model.patch_size)
                    if dropping else None)  # (B, K) or None
            t0 = time.perf_counter()
            batch_seconds += t0 - t_get
            x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)    # (B, 1, 28, 28), (B)
            self.opt.zero_grad(set_to_none=False)
            with twins.autocast(self.precision):
                loss = F.cross_entropy(self.model(x, kept=kept), y, label_smoothing=LABEL_SMOOTHING)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, CLIP_NORM)
            lr = twins.cosine_schedule(self.step, self.lr, self.warmup, self.total, MIN_LR_RATIO)
            for group in self.opt.param_groups:
                group["lr"] = lr
            self.opt.step()
            value = loss.item()
            seconds.append(time.perf_counter() - t0)
            losses.append(value)
            images.append(len(y_np))
            self.step += 1
        return {"losses": losses, "step_seconds": seconds, "images": images, "batch_seconds": batch_seconds}


def patches(c):
    return (c["image_size"] // c["patch_size"]) ** 2


def forward_flops(c, kept=None):
    """FLOPs of the ViT forward for one image (the module docstring's count), on `kept` of
    its patches (default: all)."""
    P, d, L, m = c["patch_size"], c["dim"], c["layers"], c["mlp_dim"]
    N = patches(c) if kept is None else kept
    T = N + 1
    features = c["channels"] * (5 if c["shifted_patches"] else 1) * P * P
    return (2 * N * features * d + L * (8 * T * d * d + 4 * T * d * m + 4 * T * T * d)
            + 2 * d * c["classes"])


def pixel_table(vision):
    """uint8 pixel -> the model's input, float32, as to_input computes it:
    (p / 255 − mean) / std in float32."""
    import numpy as np
    p = np.arange(256, dtype=np.float32)
    return (p / np.float32(255) - np.float32(vision.PIXEL_MEAN)) / np.float32(vision.PIXEL_STD)


def test_accuracy(qkv, config, weights, inputs, labels, batch=256):
    """The fraction of inputs (float32 (N, 1, 28, 28)) whose argmax of qkv's logits is their
    label, for weights (name -> float32 array)."""
    correct = 0
    for b in range(0, len(labels), batch):
        logits = qkv._qkv._vit_forward(config, weights, inputs[b:b + batch])  # (B, classes)
        correct += int((logits.argmax(axis=1) == labels[b:b + batch]).sum())
    return correct / len(labels)


def checkpoint_weights(path, names):
    """The weights `names` of a float32 safetensors file: in qkv's training checkpoint the
    current ones (not their "best." copies nor the optimizer's moments), in a model
    directory's model.safetensors the kept ones. name -> float32 array, copied out of the
    file (the next epoch rewrites it)."""
    import numpy as np
    from bench.gpt2_torch import read_safetensors
    tensors = read_safetensors(path)
    return {name: np.array(tensors[name], dtype=np.float32) for name in names}


def max_weight_diff(a, b):
    return max(report.max_abs_diff(a[name], b[name]) for name in a)


def timed_steps(seconds, images):
    """(images, seconds) of an epoch's timed steps: all but the first (all of a one-step epoch)."""
    k = 1 if len(seconds) > 1 else 0
    return sum(images[k:]), sum(seconds[k:])


def classify_rounds(args, qkv, model_dir, twin_weights, config, pixels, ceilings_bin):
    """qkv's Classifier and the twin (the same weights) at batch 1 and 256: interleaved
    rounds. -> {"agreement": {...}, "cases": [{"batch", "images_per_run", engine: {...}}]}."""
    vision = qkv.vision
    classifier = vision.Classifier(model_dir)
    model = None
    if twin_weights is not None:
        import torch
        from bench.vit_torch import make_vit_class
        model = make_vit_class()(config, twin_weights).eval()
        table = torch.from_numpy(pixel_table(vision))
        names = list(vision.CLASSES)

        def torch_logits(px):
            x = table[torch.from_numpy(px).long()].unsqueeze(1)  # (B, 1, 28, 28)
            return model(x)

        def torch_classify(px):
            with torch.no_grad():
                scores, labels = torch.softmax(torch_logits(px), dim=1).max(dim=1)
            return [{"label": k, "class": names[k], "score": s} for k, s in zip(labels.tolist(), scores.tolist())]

    out = {"cases": []}
    probe = pixels[:256]
    if model is not None:
        with torch.no_grad():
            t_probs = torch.softmax(torch_logits(probe), dim=1).numpy()
        q_probs = classifier.predict_proba(probe)
        out["agreement"] = {"images": len(probe), "max_abs_prob_diff": report.max_abs_diff(q_probs, t_probs),
                            "same_labels": int((q_probs.argmax(1) == t_probs.argmax(1)).sum())}
    fwd = forward_flops(config)
    for batch in (1, 256):
        if batch == 1:
            singles = [pixels[i:i + 1] for i in range(args.batch1_images)]
            n = len(singles)
            bursts = {"qkv": rounds.timed(lambda: [classifier.classify(p, batch=1) for p in singles])}
            if model is not None:
                bursts["torch"] = rounds.timed(lambda: [torch_classify(p) for p in singles])
        else:
            n = len(probe)
            bursts = {"qkv": rounds.timed(lambda: classifier.classify(probe, batch=256))}
            if model is not None:
                bursts["torch"] = rounds.timed(lambda: torch_classify(probe))
        samples = []
        first, _ = rounds.interleaved(bursts, args.rounds, args.warmup, gap=0.05,
                                      after_round=lambda: samples.append(sample_ceiling(ceilings_bin, "fma",
                                                                                        args.threads)))
        case = {"batch": batch, "images_per_run": n, "ceiling_samples": samples}
        for engine, seconds in first.items():
            t = statistics.median(seconds)
            case[engine] = {"images_per_s": n / t, "gflops": n * fwd / t / 1e9,
                            "pct_fma": paired(n * fwd, seconds, samples), "seconds": seconds}
        if "torch" in case:
            case["speedup"] = case["qkv"]["images_per_s"] / case["torch"]["images_per_s"]
        out["cases"].append(case)
        log(f"classify batch {batch}: qkv {case['qkv']['images_per_s']:.0f} images/s"
            + (f", torch {case['torch']['images_per_s']:.0f} images/s" if "torch" in case else ""))
    return out


def add_arguments(parser):
    parser.add_argument("--data-dir", help="directory with Fashion-MNIST's four .gz files (fetched there when "
                        "missing; default: scripts/fetch_data.sh fashion-mnist into the bench cache)")
    parser.add_argument("--epochs", type=int, help=f"default {FULL['epochs']} (--quick {QUICK['epochs']})")
    parser.add_argument("--batch", type=int, help=f"default {FULL['batch']} (--quick {QUICK['batch']})")
    parser.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (default 1e-3)")
    parser.add_argument("--train-limit", type=int, default=0,
                        help="train on the first N training images (default 0: all 55,000)")
    parser.add_argument("--steps-per-epoch", type=int,
                        help="cap an epoch at S steps: train on the first S·batch images (default 0: no cap; "
                        f"--quick {QUICK['steps_per_epoch']})")
    for name in ("dim", "layers", "heads", "mlp_dim", "patch_size"):
        parser.add_argument("--" + name.replace("_", "-"), type=int,
                            help=f"default {FULL[name]} (--quick {QUICK[name]})")
    parser.add_argument("--positions", choices=("learned", "sincos"), default="learned")
    parser.add_argument("--shifted-patches", action="store_true",
                        help="Shifted Patch Tokenization (qkv train vit --shifted-patches)")
    parser.add_argument("--erase", type=float, default=0.0,
                        help="Random Erasing probability (qkv train vit --erase; the twin gets the same batches)")
    parser.add_argument("--patch-dropout", type=float, default=0.0,
                        help="the fraction of patches each training image drops, in [0, 1) (qkv train vit "
                        "--patch-dropout; the twin keeps the same patches)")
    parser.add_argument("--patch-dropout-epochs", type=int, default=0,
                        help="patch dropout in the first N epochs only (default 0: in every epoch)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", help="comma-separated: train once per seed (default: --seed alone); test "
                        "accuracy is compared as the mean over the seeds")
    parser.add_argument("--torch-seeds", type=int,
                        help="the torch twin trains in the first N seeds only (default: all)")
    twins.add_precision_argument(parser)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, help=f"classify: interleaved rounds (default {FULL['rounds']})")
    parser.add_argument("--warmup", type=int, help=f"classify: warm-up runs (default {FULL['warmup']})")
    parser.add_argument("--batch1-images", type=int,
                        help=f"classify at batch 1: single-image calls per run (default {FULL['batch1_images']})")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny ViT, 2 epochs of 8 steps, 5 classify rounds: checks that the script runs")
    twins.add_child_arguments(parser)
    add_build_arguments(parser)
    peers.add_arguments(parser, ort=False)


def seed_list(args):
    """--seeds "0,1,2" (default: --seed alone) -> [0, 1, 2], distinct; --torch-seeds checked."""
    if args.seeds is None:
        seeds = [args.seed]
    else:
        try:
            seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
        except ValueError:
            seeds = []
        if not seeds or len(set(seeds)) != len(seeds):
            sys.exit(f"bench.py vision: --seeds must be distinct integers, comma-separated; got {args.seeds!r}")
    if args.torch_seeds is not None and not 0 <= args.torch_seeds <= len(seeds):
        sys.exit(f"bench.py vision: --torch-seeds must be in [0, {len(seeds)}] (the seeds given), "
                 f"got {args.torch_seeds}")
    return seeds


def run(args):
    if args.child:
        return twins.child(args)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if not 0 <= args.patch_dropout < 1:
        sys.exit(f"bench.py vision: --patch-dropout must be in [0, 1), got {args.patch_dropout}")
    if not 0 <= args.patch_dropout_epochs <= args.epochs or (args.patch_dropout_epochs and not args.patch_dropout):
        sys.exit("bench.py vision: --patch-dropout-epochs must be in [0, --epochs] and needs --patch-dropout")
    precisions = twins.precisions(args, "vision")
    seeds = seed_list(args)
    args.seed = seeds[0]
    torch_seeds = len(seeds) if args.torch_seeds is None else args.torch_seeds
    peers.reexec_with_openblas(args)  # does not return when it re-runs the script
    data_dir = twins.fetch_data("fashion-mnist", args.data_dir)
    rec = record.new("vision", args.threads, settings={
        **{k: getattr(args, k) for k in ("epochs", "batch", "lr", "train_limit", "steps_per_epoch", "dim", "layers",
                                         "heads", "mlp_dim", "patch_size", "positions", "shifted_patches", "erase",
                                         "patch_dropout", "patch_dropout_epochs", "seed", "rounds", "warmup",
                                         "batch1_images", "quick")},
        "seeds": seeds, "torch_seeds": torch_seeds, "precisions": precisions})

    build_dir = os.path.abspath(args.build_dir)
    programs = ensure_programs(build_dir, {"_qkv": "python/qkv/_qkv*.so",
                                           "qkv_python_files": "python/qkv/__init__.py",
                                           "qkv_ceilings": "bench/qkv_ceilings"}, args.rebuild)
    ceilings_bin = programs["qkv_ceilings"]
    measured = measure_ceilings(ceilings_bin, args.threads, quick=True)
    ceiling = measured["f32_fma"]["gflops"]
    bf16_ceiling = (measured.get("bf16_avx512_dpbf16ps") or {}).get("gflops")
    record.add_ceiling(rec, "f32_fma", "GFLOP/s", [ceiling])
    record.add_ceiling(rec, "bf16_dpbf16ps", "GFLOP/s", [bf16_ceiling])
    log(f"ceilings: f32 FMA {ceiling:.0f} GFLOP/s, vdpbf16ps {report.cell(bf16_ceiling, '.0f').strip()} GFLOP/s "
        f"on {args.threads} threads")

    torch_version = torch_blas = None
    if not args.no_torch:
        torch_version, torch_blas = peers.start_torch(args.threads)
    sys.path.insert(0, os.path.join(build_dir, "python"))
    import qkv
    qkv.set_num_threads(args.threads)  # the test evaluations and classify
    vision = qkv.vision
    from bench.vit_torch import make_vit_class, parameter_names, state_numpy, vit_config

    work = tempfile.mkdtemp(prefix="qkv-bench-vision-")
    # per precision: the epoch rows of every seed, one after the other; qkv's result of each seed
    rows_of = {prec: [] for prec in precisions}
    results_of = {prec: [] for prec in precisions}
    try:
        data = vision.load_fashion_mnist(data_dir)
        n = len(data["train"]["labels"])
        if args.train_limit > 0:
            n = min(n, args.train_limit)
        if args.steps_per_epoch > 0:
            n = min(n, args.steps_per_epoch * args.batch)
        args.train_images = n
        config = vit_config({"patch_size": args.patch_size, "dim": args.dim, "layers": args.layers,
                             "heads": args.heads, "mlp_dim": args.mlp_dim,
                             "learned_positions": args.positions == "learned",
                             "shifted_patches": args.shifted_patches})
        names = parameter_names(config)
        test_pixels, test_labels = data["test"]["images"], data["test"]["labels"]
        test_inputs = pixel_table(vision)[test_pixels][:, None]  # (10000, 1, 28, 28)
        for si, seed in enumerate(seeds):
            batches = vision.TrainingBatches(data["train"]["images"][:n], data["train"]["labels"][:n],
                                             batch=args.batch, seed=seed, erase=args.erase)
            per_epoch = batches.steps_per_epoch
            # the patches an image keeps in an epoch with patch dropout: K of N, as qkv counts them
            drawn = batches.kept(0, 0, args.patch_dropout, args.patch_size) if args.patch_dropout else None
            args.kept = patches(config) if drawn is None else drawn.shape[1]
            twin, outs = {}, {}
            for prec in precisions:
                outs[prec] = os.path.join(work, f"model-{seed}-{prec}")
                if not args.no_torch and si < torch_seeds:
                    initial = qkv._qkv._vit_initial(config, seed)
                    twin[prec] = TorchTwin(make_vit_class()(config, initial), batches, args.epochs, args.lr,
                                           args.patch_dropout, args.patch_dropout_epochs, precision=prec)
            # Every (engine, precision) trains the same epoch in turn, then the next epoch in
            # the reverse order (qkv f32, torch f32, qkv bf16, torch bf16 | torch bf16, ...), so
            # that a drift of the machine falls on all of them.
            jobs = [(impl, prec) for prec in precisions for impl in ("qkv", "torch")
                    if impl == "qkv" or prec in twin]
            for e in range(args.epochs):
                dropping = drops_patches(args.patch_dropout, args.patch_dropout_epochs, e)
                rows = {prec: {"epoch": e + 1, "seed": seed, "patches": args.kept if dropping else patches(config)}
                        for prec in precisions}
                weights = {prec: {} for prec in precisions}
                for impl, prec in jobs if e % 2 == 0 else jobs[::-1]:
                    row, own = rows[prec], twins.PRECISION_CEILINGS[prec][1]
                    if impl == "qkv":
                        progress, result = run_qkv_epoch(args, build_dir, data_dir, outs[prec], e, per_epoch,
                                                         seed, prec)
                        after = twins.sample_precision_ceilings(ceilings_bin, args.threads)
                        elapsed = [p["elapsed_s"] for p in progress]
                        seconds = [elapsed[0]] + [b - a for a, b in zip(elapsed, elapsed[1:])]
                        images = [min(args.batch, n - s * args.batch) for s in range(per_epoch)]
                        weights[prec]["qkv"] = checkpoint_weights(os.path.join(outs[prec], "checkpoint.safetensors"),
                                                                  names)
                        row["qkv"] = {"losses": [p["loss"] for p in progress], "step_seconds": seconds,
                                      "images": images, "validation_accuracy": progress[-1]["score"],
                                      "ceiling": after[own], "ceilings": after}
                        if e + 1 == args.epochs:
                            results_of[prec].append(result)
                    else:
                        t = twin[prec].epoch(e)
                        after = twins.sample_precision_ceilings(ceilings_bin, args.threads)
                        weights[prec]["torch"] = state_numpy(twin[prec].model)
                        row["torch"] = {**t, "ceiling": after[own], "ceilings": after}
                        log(f"  torch {prec} seed {seed} epoch {e + 1}: loss {t['losses'][-1]:.4f}")
                    record.add_ceiling(rec, "f32_fma", "GFLOP/s", [after["f32_fma"]])
                    record.add_ceiling(rec, "bf16_dpbf16ps", "GFLOP/s", [after["bf16_dpbf16ps"]])
                for prec in precisions:
                    row = rows[prec]
                    for impl in weights[prec]:
                        row[impl]["test_accuracy"] = test_accuracy(qkv, config, weights[prec][impl], test_inputs,
                                                                   test_labels)
                    if len(weights[prec]) == 2:
                        row["max_abs_weight_diff"] = max_weight_diff(weights[prec]["qkv"], weights[prec]["torch"])
                    log(f"seed {seed} {prec} epoch {e + 1}/{args.epochs}: test accuracy "
                        + ", ".join(f"{impl} {row[impl]['test_accuracy']:.4f}" for impl in ("qkv", "torch")
                                    if impl in row))
                    rows_of[prec].append(row)
            if si == 0:
                # classify (f32 inference) with the first seed's model of the first precision; the
                # twin classifies with the weights of that model directory (its best epoch's)
                main = outs[precisions[0]]
                kept = None if args.no_torch else checkpoint_weights(os.path.join(main, "model.safetensors"), names)
                cases = classify_rounds(args, qkv, main, kept, config, test_pixels, ceilings_bin)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    summaries = {}
    for prec in precisions:
        summaries[prec] = summarise(args, config, rows_of[prec], results_of[prec][0],
                                    cases if prec == precisions[0] else None, ceiling, per_epoch)
        summaries[prec].update({"torch_version": torch_version, "torch_blas": torch_blas, "threads": args.threads,
                                "precision": prec, "bf16_ceiling_gflops": bf16_ceiling,
                                "seeds": seeds, "torch_seeds": torch_seeds, "precisions": precisions,
                                "seeds_first_precision": precisions[0],
                                "qkv_results": [{k: q.get(k) for k in ("best_epoch", "test_accuracy")}
                                                for q in results_of[prec]]})
    comparison = compare_precisions(args, summaries, seeds)
    print_tables(args, summaries[precisions[0]], build_dir)
    for prec in precisions[1:]:
        print()
        print_tables(args, summaries[prec], build_dir, header=False)
    print_comparison(comparison)
    rec["versions"].update({"qkv": qkv.__version__, "qkv_cpu": qkv.cpu_summary(), "torch": torch_version,
                            "torch_blas": torch_blas})
    for prec in precisions:
        to_record(rec, args, rows_of[prec], summaries[prec], f32_too="f32" in precisions)
    seeds_to_record(rec, comparison)
    return rec


def subject(rec, id, *args, **kwargs):
    """The record's subject `id`, added on first use (the precisions share the subjects)."""
    found = next((x for x in rec["subjects"] if x["id"] == id), None)
    return found or record.add_subject(rec, id, *args, **kwargs)


def to_record(rec, args, epochs, r, f32_too):
    """One precision's cases. An epoch (of any seed) is a round of training (images/s,
    GFLOP/s, test accuracy), a classify round one of classify; the per-step losses of all
    epochs are the curves. f32's cases keep their names from before precisions ("ViT",
    "test accuracy"); bf16's are named "ViT bf16", "test accuracy bf16" (their f32_case the
    f32 one when f32 ran too). A round the twin did not train (--torch-seeds) is null."""
    c = r["config"]
    prec = r["precision"]
    suffix = "" if prec == "f32" else f" {prec}"
    own = twins.PRECISION_CEILINGS[prec][1]
    shape = (f"d={c['dim']}, {c['layers']} blocks, {c['heads']} heads, mlp {c['mlp_dim']}, "
             f"{c['patch_size']}x{c['patch_size']} {'shifted ' if c['shifted_patches'] else ''}patches")
    rows = r["per_epoch"]
    impls = [impl for impl in ("qkv", "torch") if any(impl in row for row in rows)]

    def column(impl, key):
        return [row[impl][key] if impl in row else None for row in rows]

    qkv_samples = [row["qkv"]["ceiling"] for row in epochs]
    info = {"precision": prec, "epochs": args.epochs, "seeds": [row["seed"] for row in rows],
            "steps_per_epoch": r["steps_per_epoch"], "batch": r["batch"],
            "train_images": r["train_images"], "tokens_per_image": [row["patches"] + 1 for row in rows],
            "timed": "every step of an epoch but its first",
            "timed_images": {impl: column(impl, "timed_images") for impl in impls},
            "timed_seconds": {impl: column(impl, "timed_seconds") for impl in impls}}
    if "torch" in impls:
        info["torch_ceiling_samples"] = [row["torch"]["ceiling"] if "torch" in row else None for row in epochs]
        info["torch_batch_seconds_per_step"] = column("torch", "batch_seconds_per_step")
    f32_case = (lambda name: name) if prec != "f32" and f32_too else (lambda name: None)
    s = subject(rec, "vit_training", f"ViT training on Fashion-MNIST ({shape})", "training throughput", "images/s",
                "higher")
    record.add_case(s, "ViT" + suffix, {impl: column(impl, "images_per_s") for impl in impls},
                    ceiling_samples=qkv_samples, info=info, precision=prec, f32_case=f32_case("ViT"))
    s = subject(rec, "vit_training_gflops", f"ViT training FLOP rate ({shape}; 3 forwards per image)",
                "training FLOP rate", "GFLOP/s", "higher", ceiling="f32_fma", headline=False)
    record.add_case(s, "ViT" + suffix, {impl: column(impl, "gflops") for impl in impls},
                    ceiling_samples=qkv_samples, info={"forward_flops_per_image": r["forward_flops_per_image"],
                                                       "precision": prec},
                    ceiling=own, precision=prec, f32_case=f32_case("ViT"))
    s = subject(rec, "vit_accuracy", "ViT test accuracy after each epoch (both scored by qkv's forward "
                "on the 10,000 test images)", "test accuracy", "fraction", "higher")
    accuracy_info = {"precision": prec, "qkv_validation_accuracy": column("qkv", "validation_accuracy"),
                     "qkv_result": r["qkv_result"]}
    if "torch" in impls:
        accuracy_info["max_abs_weight_diff"] = [row.get("max_abs_weight_diff") for row in rows]
        if "first_steps" in r:
            accuracy_info["first_steps"] = r["first_steps"]
            accuracy_info["epoch1_max_abs_loss_diff"] = r["epoch1_max_abs_loss_diff"]
    record.add_case(s, "test accuracy" + suffix, {impl: column(impl, "test_accuracy") for impl in impls},
                    info=accuracy_info, precision=prec, f32_case=f32_case("test accuracy"))
    cl = r["classify"]
    if cl is not None:
        s = subject(rec, "vit_classify", "ViT classify (qkv.vision.Classifier beside the twin's eval() "
                    "forward, the same weights)", "classify throughput", "images/s", "higher")
        g = subject(rec, "vit_classify_gflops", "ViT classify FLOP rate", "classify FLOP rate", "GFLOP/s",
                    "higher", ceiling="f32_fma", headline=False)
        for case in cl["cases"]:
            engines = [e for e in ("qkv", "torch") if e in case]
            n, fwd = case["images_per_run"], r["forward_flops_per_image"]
            record.add_ceiling(rec, "f32_fma", "GFLOP/s", case["ceiling_samples"])
            info = {"images_per_run": n, "model": f"the first seed's, trained in {prec}; inference in f32"}
            if cl.get("agreement"):
                info["agreement"] = cl["agreement"]
            record.add_case(s, f"batch {case['batch']}", {e: [n / t for t in case[e]["seconds"]] for e in engines},
                            ceiling_samples=case["ceiling_samples"], info=info)
            record.add_case(g, f"batch {case['batch']}", {e: [n * fwd / t / 1e9 for t in case[e]["seconds"]]
                                                         for e in engines}, ceiling_samples=case["ceiling_samples"])
    mine = [row for row in rows if row["seed"] == args.seed]  # the first seed's (the others': plots enough)
    steps = {impl: [x for row in mine for x in row[impl]["losses"]] for impl in impls if impl in mine[0]}
    twins.add_loss_curves(rec, steps, name="vit_step_loss" + suffix.replace(" ", "_"))
    if prec != r["seeds_first_precision"]:
        return
    rec["notes"] += [
        "Training: both start from qkv's _vit_initial of the seed and train on the same augmented batches "
        "(qkv.vision.TrainingBatches) in the same order with qkv's recipe (label smoothing 0.1, clipping at 1, "
        "AdamW, warm-up then cosine); qkv one child process per epoch (resumed from its checkpoint), the torch "
        "twin (scripts/bench/vit_torch.py) here; they alternate epoch by epoch. A round is an epoch: images of "
        "its timed steps (all but its first) over their seconds; qkv's time counts making its batches, the "
        "twin's does not (info).",
        "GFLOP/s credit both with the model's count, 3 forwards per training image; % of the ceiling of the "
        "precision's unit (f32 FMA; vdpbf16ps for bf16) against the sample taken right after qkv's epoch (the "
        "twin's samples in info).",
        f"Precisions {', '.join(r['precisions'])}, seeds {', '.join(map(str, r['seeds']))} (the twin in the first "
        f"{r['torch_seeds']}): every (engine, precision) trains each epoch in turn, the order reversed every other "
        "epoch; qkv with precision='bf16', the twin with forward and loss under torch.autocast('cpu', "
        "dtype=torch.bfloat16). Rounds are the epochs of every seed, one seed after the other (info: seeds). "
        "vit_accuracy_seeds: each seed's last-epoch test accuracy, the mean over the seeds.",
        "Classify: interleaved rounds at batch 1 (single-image calls) and 256 after warm-up; both in this "
        "process, with the first seed's model of the first precision. Curves: every training step's loss of the first "
        "seed, epochs one after the other."]


def compare_precisions(args, summaries, seeds):
    """Each precision's last-epoch test accuracy per seed and its mean over the seeds (qkv's,
    the twin's where it trained, qkv's own best-validation result), its training images/s;
    with f32 and bf16, bf16's speed over f32's and the change of the mean accuracy, per engine."""
    out = {"seeds": seeds, "epochs": args.epochs, "per_precision": {}, "bf16_vs_f32": {}}
    for prec, r in summaries.items():
        last = [row for row in r["per_epoch"] if row["epoch"] == args.epochs]
        per_seed = [{"seed": row["seed"], **{impl: row[impl]["test_accuracy"] if impl in row else None
                                              for impl in ("qkv", "torch")},
                     "qkv_best_validation": q.get("test_accuracy")}
                    for row, q in zip(last, r["qkv_results"])]
        mean = {}
        for impl in ("qkv", "torch", "qkv_best_validation"):
            values = [x[impl] for x in per_seed if x[impl] is not None]
            mean[impl] = statistics.mean(values) if values else None
        # the twin's seeds only, for a like-for-like mean of qkv beside it
        twin_seeds = [x for x in per_seed if x["torch"] is not None]
        mean["qkv_twin_seeds"] = statistics.mean(x["qkv"] for x in twin_seeds) if twin_seeds else None
        out["per_precision"][prec] = {
            "per_seed": per_seed, "mean": mean,
            "images_per_s": {impl: r[impl]["images_per_s"] for impl in ("qkv", "torch") if impl in r},
            "gflops": {impl: r[impl]["gflops"] for impl in ("qkv", "torch") if impl in r},
            "pct_fma": {impl: r[impl]["pct_fma_median"] for impl in ("qkv", "torch") if impl in r},
            "pct_bf16": {impl: r[impl]["pct_bf16_median"] for impl in ("qkv", "torch") if impl in r},
            "qkv_over_torch": r.get("speedup")}
    pp = out["per_precision"]
    if "f32" in pp and "bf16" in pp:
        for impl in ("qkv", "torch"):
            a, b = pp["f32"], pp["bf16"]
            if impl in a["images_per_s"] and impl in b["images_per_s"]:
                out["bf16_vs_f32"][impl] = {
                    "speedup": b["images_per_s"][impl] / a["images_per_s"][impl],
                    "delta_points_of_means": 100 * (b["mean"][impl] - a["mean"][impl])
                    if a["mean"][impl] is not None and b["mean"][impl] is not None else None}
    return out


def print_comparison(cmp):
    print(f"== precisions side by side: last-epoch ({cmp['epochs']}) test accuracy per seed, %; qkv best: qkv's own "
          "result (the test accuracy of its best-validation epoch)")
    print(f"{'prec':5} {'seed':>5} {'qkv':>7} {'torch':>7} {'qkv best':>8}")
    for prec, x in cmp["per_precision"].items():
        for row in x["per_seed"] + [{"seed": "mean", **x["mean"]}]:
            print(f"{prec:5} {row['seed']:>5} " + " ".join(
                report.cell(None if row[k] is None else 100 * row[k], w) for k, w in
                (("qkv", "7.2f"), ("torch", "7.2f"), ("qkv_best_validation", "8.2f"))))
    print(f"{'prec':5} {'impl':6} {'images/s':>9} {'GFLOP/s':>8} {'% FMA':>6} {'% bf16':>6} {'qkv/torch':>9}")
    for prec, x in cmp["per_precision"].items():
        for impl in x["images_per_s"]:
            print(f"{prec:5} {impl:6} {x['images_per_s'][impl]:9.1f} {x['gflops'][impl]:8.1f} "
                  f"{report.cell(x['pct_fma'][impl], '5.1f', '%')} {report.cell(x['pct_bf16'][impl], '5.1f', '%')} "
                  f"{report.cell(x['qkv_over_torch'] if impl == 'qkv' else None, '8.2f', 'x')}")
    for impl, v in cmp["bf16_vs_f32"].items():
        target = " (the issue asks ≥ 1.5 and ≤ 0.3 points)" if impl == "qkv" else ""
        print(f"{impl}: bf16/f32 training images/s {v['speedup']:.2f}x; mean last-epoch test accuracy bf16 − f32 "
              f"{'-' if v['delta_points_of_means'] is None else format(v['delta_points_of_means'], '+.2f')} "
              f"points{target}")


def seeds_to_record(rec, cmp):
    """vit_accuracy_seeds: each seed's last-epoch test accuracy (a round is a seed; the
    tables show the mean), a case per precision."""
    s = record.add_subject(rec, "vit_accuracy_seeds", f"ViT test accuracy after the last epoch ({cmp['epochs']}), "
                           "per seed (scored by qkv's forward on the 10,000 test images)", "test accuracy",
                           "fraction", "higher", aggregate="mean")
    f32_too = "f32" in cmp["per_precision"]
    for prec, x in cmp["per_precision"].items():
        engines = {impl: [row[impl] for row in x["per_seed"]] for impl in ("qkv", "torch")}
        if all(v is None for v in engines["torch"]):
            del engines["torch"]
        info = {"precision": prec, "seeds": [row["seed"] for row in x["per_seed"]],
                "qkv_best_validation": [row["qkv_best_validation"] for row in x["per_seed"]]}
        if prec == "bf16" and cmp["bf16_vs_f32"]:
            info["vs_f32"] = cmp["bf16_vs_f32"]
        record.add_case(s, f"{prec}, last epoch", engines, info=info, precision=prec,
                        f32_case="f32, last epoch" if prec != "f32" and f32_too else None)


def summarise(args, config, epochs, q_result, classify, ceiling, per_epoch):
    fwd = forward_flops(config)
    out = {"epochs": args.epochs, "batch": args.batch, "lr": args.lr, "seed": args.seed,
           "train_images": args.train_images, "steps_per_epoch": per_epoch, "config": config,
           "num_parameters": q_result["num_parameters"], "forward_flops_per_image": fwd,
           "ceiling_gflops": ceiling, "per_epoch": [], "classify": classify,
           "qkv_result": {k: q_result.get(k) for k in ("best_epoch", "test_accuracy", "validation_accuracy")}}
    out["patch_dropout"] = {"fraction": args.patch_dropout, "epochs": args.patch_dropout_epochs,
                            "kept": args.kept, "of": patches(config)}
    totals = {}
    for row in epochs:
        r = {"epoch": row["epoch"], "seed": row.get("seed", args.seed), "patches": row["patches"]}
        for impl in ("qkv", "torch"):
            if impl not in row:
                continue
            x = row[impl]
            images, seconds = timed_steps(x["step_seconds"], x["images"])
            work = 3 * forward_flops(config, row["patches"]) * images
            fma, bf16 = x["ceilings"]["f32_fma"], x["ceilings"]["bf16_dpbf16ps"]
            r[impl] = {"test_accuracy": x["test_accuracy"], "loss_mean": statistics.mean(x["losses"]),
                       "losses": x["losses"], "images_per_s": images / seconds, "gflops": work / seconds / 1e9,
                       "pct_fma": 100 * work / seconds / 1e9 / fma if fma else None,
                       "pct_bf16": 100 * work / seconds / 1e9 / bf16 if bf16 else None,
                       "ceiling": x["ceiling"], "timed_images": images, "timed_seconds": seconds}
            if impl == "torch":
                r[impl]["batch_seconds_per_step"] = x["batch_seconds"] / len(x["losses"])
            else:
                r[impl]["validation_accuracy"] = x["validation_accuracy"]
            t = totals.setdefault(impl, {"images": 0, "seconds": 0.0, "work": 0.0, "pct": [], "pct_bf16": []})
            t["images"] += images
            t["seconds"] += seconds
            t["work"] += work
            if r[impl]["pct_fma"] is not None:
                t["pct"].append(r[impl]["pct_fma"])
            if r[impl]["pct_bf16"] is not None:
                t["pct_bf16"].append(r[impl]["pct_bf16"])
        if "qkv" in r and "torch" in r:
            r["abs_delta_points"] = 100 * abs(r["qkv"]["test_accuracy"] - r["torch"]["test_accuracy"])
            r["max_abs_weight_diff"] = row["max_abs_weight_diff"]
            r["speedup"] = r["qkv"]["images_per_s"] / r["torch"]["images_per_s"]
        out["per_epoch"].append(r)
    for impl, t in totals.items():
        rate = t["images"] / t["seconds"]
        out[impl] = {"images_per_s": rate, "gflops": t["work"] / t["seconds"] / 1e9,
                     "pct_fma_median": statistics.median(t["pct"]) if t["pct"] else None,
                     "pct_bf16_median": statistics.median(t["pct_bf16"]) if t["pct_bf16"] else None}
    rows = out["per_epoch"]
    if "qkv" in out and "torch" in out:
        # the twin may have trained in the first seeds only (--torch-seeds): qkv's rate over the
        # same epochs
        both = [r for r in rows if "torch" in r]
        q_rate = sum(r["qkv"]["timed_images"] for r in both) / sum(r["qkv"]["timed_seconds"] for r in both)
        out["speedup"] = q_rate / out["torch"]["images_per_s"]
        out["max_abs_delta_points"] = max(r["abs_delta_points"] for r in both)
    if rows and "qkv" in rows[0] and "torch" in rows[0]:
        q, t = rows[0]["qkv"]["losses"], rows[0]["torch"]["losses"]
        out["first_steps"] = [{"step": i + 1, "qkv": a, "torch": b, "abs_diff": abs(a - b)}
                              for i, (a, b) in enumerate(zip(q[:FIRST_STEPS], t[:FIRST_STEPS]))]
        out["epoch1_max_abs_loss_diff"] = max(abs(a - b) for a, b in zip(q, t))
    return out


def print_tables(args, r, build_dir, header=True):
    """One precision's tables (r: summarise's); header: the lines saying what ran where."""
    c = r["config"]
    grid = c["image_size"] // c["patch_size"]
    if header:
        print(f"{report.cpu_model()}; qkv {report.where(report.git_describe(), build_dir)}; "
              f"torch {r['torch_version']} ({r['torch_blas']}); {args.threads} threads")
    bf16 = r["precision"] == "bf16"
    print(f"== precision {r['precision']}" + (": qkv precision='bf16', the twin under torch.autocast('cpu', "
                                              "dtype=torch.bfloat16)" if bf16 else "")
          + f"; seeds {', '.join(map(str, r['seeds']))} (the twin in the first {r['torch_seeds']})")
    print(f"ViT: d {c['dim']}, {c['layers']} blocks, {c['heads']} heads, mlp {c['mlp_dim']}, "
          f"{c['patch_size']}x{c['patch_size']} {'shifted ' if c['shifted_patches'] else ''}patches "
          f"({grid * grid} + 1 tokens), {args.positions} positions, "
          f"{r['num_parameters']:,} parameters, {r['forward_flops_per_image'] / 1e6:.2f} MFLOP/image forward; "
          f"{r['epochs']} epochs of {r['steps_per_epoch']} steps of batch {r['batch']} ({r['train_images']:,} images), "
          f"lr {r['lr']:g}; ceilings at the start: f32 FMA {r['ceiling_gflops']:.0f}, vdpbf16ps "
          f"{report.cell(r['bf16_ceiling_gflops'], '.0f').strip()} GFLOP/s")
    pd = r["patch_dropout"]
    if pd["fraction"]:
        when = f"the first {pd['epochs']} epochs" if pd["epochs"] else "every epoch"
        print(f"patch dropout {pd['fraction']:g} in {when}: each image keeps {pd['kept']} of its {pd['of']} "
              f"patches (+ the class token; column 'tok'), the same ones in qkv and the twin")
    if "first_steps" in r:
        print("training loss of the first steps (same initial weights, same batches):")
        print(f"{'step':>5} {'qkv':>10} {'torch':>10} {'|Δ|':>9}")
        for s in r["first_steps"]:
            print(f"{s['step']:>5} {s['qkv']:10.6f} {s['torch']:10.6f} {s['abs_diff']:9.2e}")
        print(f"epoch 1: max |Δloss| over its {r['steps_per_epoch']} steps {r['epoch1_max_abs_loss_diff']:.2e}")
    print(f"{'seed':>4} {'epoch':>5} {'tok':>3} {'impl':6} {'test acc':>8} {'|Δ| pts':>7} {'loss':>7} "
          f"{'images/s':>8} {'GFLOP/s':>7} {'% FMA':>6} {'% bf16':>6} {'max|Δθ|':>8}")
    for row in r["per_epoch"]:
        for impl in ("qkv", "torch"):
            if impl not in row:
                continue
            x = row[impl]
            both = "abs_delta_points" in row and impl == "qkv"
            print(f"{row['seed']:>4} {row['epoch']:>5} {row['patches'] + 1:>3} {impl:6} "
                  f"{100 * x['test_accuracy']:7.2f}% "
                  f"{report.cell(row['abs_delta_points'] if both else None, '7.2f')} {x['loss_mean']:7.4f} "
                  f"{x['images_per_s']:8.1f} {x['gflops']:7.1f} {report.cell(x['pct_fma'], '5.1f', '%')} "
                  f"{report.cell(x['pct_bf16'], '5.1f', '%')} "
                  f"{report.cell(row['max_abs_weight_diff'] if both else None, '8.1e')}")
    print("tok: the tokens a training image has in the epoch; test acc: of the epoch's weights, both by qkv's "
          "forward on the 10,000 test images (every patch); loss: the epoch's mean training loss; max|Δθ|: the "
          "largest difference of a weight, qkv against torch, after the epoch")
    if "max_abs_delta_points" in r:
        print(f"max |Δ test accuracy| over the epochs, qkv against torch: {r['max_abs_delta_points']:.2f} points"
              + (" (the issue asks ≤ 0.5)" if not bf16 else ""))
    q = r["qkv_result"]
    if q.get("test_accuracy") is not None:
        print(f"qkv's own result: best validation epoch {q['best_epoch']}, its test accuracy "
              f"{100 * q['test_accuracy']:.2f}%")
    line = f"training images/s (timed steps of all epochs): qkv {r['qkv']['images_per_s']:.1f}"
    if "torch" in r:
        line += (f", torch {r['torch']['images_per_s']:.1f}; qkv/torch {r['speedup']:.2f}x (over the same epochs)"
                 + (" (the issue asks ≥ 2)" if not bf16 else ""))
    print(line)
    for impl in ("qkv", "torch"):
        if impl in r:
            print(f"  {impl}: {r[impl]['gflops']:.1f} GFLOP/s (3 forwards per image, on its tokens), "
                  f"{report.cell(r[impl]['pct_fma_median'], '.1f', '%').strip()} of the f32 FMA ceiling, "
                  f"{report.cell(r[impl]['pct_bf16_median'], '.1f', '%').strip()} of the vdpbf16ps one "
                  f"(median over the epochs of each against the ceilings sampled right after it)")
    line = ("  not timed: the first step of each epoch, qkv's validation and checkpoints; "
            "qkv's time counts making its batches")
    if "torch" in r:
        batch_s = statistics.median(row["torch"]["batch_seconds_per_step"] for row in r["per_epoch"]
                                    if "torch" in row)
        line += f", the twin's does not: {1000 * batch_s:.2f} ms/step in the twin's process"
    print(line)
    cl = r["classify"]
    if cl is None:  # classify ran once, with the first precision's model
        return
    if "agreement" in cl:
        a = cl["agreement"]
        print(f"classify: qkv and torch agree on {a['same_labels']}/{a['images']} labels, max |Δprobability| "
              f"{a['max_abs_prob_diff']:.1e}")
    print(f"{'batch':>5} {'impl':6} {'images/s':>9} {'GFLOP/s':>7} {'% FMA':>6} {'qkv/torch':>9}")
    for case in cl["cases"]:
        for impl in ("qkv", "torch"):
            if impl not in case:
                continue
            x = case[impl]
            pct = x["pct_fma"]["median"] if x["pct_fma"] else None
            speedup = case.get("speedup") if impl == "qkv" else None
            print(f"{case['batch']:>5} {impl:6} {x['images_per_s']:9.1f} {x['gflops']:7.1f} "
                  f"{report.cell(pct, '5.1f', '%')} {report.cell(speedup, '8.2f', 'x')}")
    print(f"classify: medians of {args.rounds} interleaved rounds after {args.warmup} warm-up; batch 1 is "
          f"{args.batch1_images} single-image calls a run; qkv: Classifier.classify, torch: eval() under no_grad "
          "(normalise, forward, softmax, best class, the same dicts)")


