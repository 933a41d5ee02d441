#!/usr/bin/python3
"""`qkv train sasrec` beside its torch 1.13 twin on the same batches,
and matrix factorisation beside its baselines, on MovieLens (dslabs' 100,004 ratings).

Run with Debian's Python (it builds build/'s _qkv and qkv_ceilings when missing):

    /usr/bin/python3 scripts/bench.py recommender [--data-dir DIR] [--epochs 200]
                                                  [--seeds 0,1,2] [--dropout 0,0.2]
                                                  [--precision f32,bf16] [--threads 2] [--quick]

It prints its tables and records each seed's numbers (a seed is a round), the loss
curves and MF's RMSEs in bench/records/recommender/<host kind>.json
(scripts/bench/record.py).

DIR holds ratings.csv (scripts/fetch_data.sh movielens DIR; fetched into DIR when missing,
without --data-dir into the bench cache, ~/.cache/qkv-bench/data/movielens).

SASRec, per seed: qkv.recommender.train(model="sasrec") runs in a child process
(scripts/bench/twins.py; so the two never share threads); torch runs scripts/bench/sasrec_torch.py's TorchSasRec with
train_twin: the same initial weights (qkv.recommender.sasrec_initial of the seed), the
same batches in the same order (qkv.recommender.SasRecBatches of the seed: epoch e, step s),
AdamW (0.9, 0.98, 1e-8, no weight decay), constant lr, no clipping. Each seed trains once
per --dropout setting p: qkv with `--dropout p` (qkv/sasrec.h: the embedding and every
block's four sites), the twin with nn.Dropout(p) on the embedding and
TransformerEncoderLayer(dropout=p), torch.manual_seed(seed) first; the two draw different
masks, so with p > 0 they agree in distribution only (compare the means of the seeds). Both keep
the weights of the best validation HR@10, measured every --eval-every epochs (the twin:
its weights written into a copy of qkv's model directory, qkv.recommender.evaluate(...,
validation=True)); the test metrics of both come from qkv's evaluation of those weights
(qkv.recommender.evaluate), so the two differ by their training alone. The runs alternate
qkv, torch | torch, qkv | qkv, torch ... so that a drift of the machine falls on both.

Reported per dropout setting, per seed and as the mean of the seeds: HR@10 and NDCG@10 of the next movie among
101 (the paper's protocol), among the whole catalogue, and of every test movie among 101;
popularity's beside them; |ΔHR@10| of the means; the epoch-1 and last-epoch training
losses; seconds per training step (training time / steps: forward, backward and AdamW,
evaluation excluded; qkv's includes making its batches, the twin's does not, and that
time is shown) and torch/qkv, the median over the seeds of each side's s/step;
GFLOP/s of each against the machine's measured f32 FMA ceiling (measured at the start,
sampled after each seed's two runs; bench/sasrec_torch.py's
step_flops: the real items of each row, padding not counted, the causal half of attention;
torch computes its padding too, qkv runs each batch's rows in groups of similar length).

Precisions (--precision, default f32,bf16 where the CPU has AVX512-BF16 or AMX, else f32):
each seed and dropout setting trains once per precision on both sides: qkv with
precision="bf16" (`qkv train sasrec --precision bf16`: products of bf16 inputs summed in
f32; weights, AdamW, LayerNorm, softmax and loss in f32), the twin with its loss (forward,
scores, BCE) under torch.autocast("cpu", dtype=torch.bfloat16), backward outside it.
Reported per precision: the ranking metrics per seed and their means, s/step and GFLOP/s
(bf16's against the vdpbf16ps ceiling), and for bf16 each engine's speed over its f32 one
and the change of its mean HR@10 and NDCG@10.

Matrix factorisation, once (seed 0, f32: MF has no matrix products to run in bf16): test RMSE beside the global mean's and the biases',
its ranking metrics beside popularity's; and the three RMSEs under a random 5-fold split
(qkv.recommender.mf_cross_validation), the protocol of published MovieLens figures.

torch runs on Debian's OpenBLAS (scripts/bench/peers.py) unless --torch-blas system.
Nothing here asserts a time or a metric; the exit status is 1 when something asked for
could not run.
"""
import os
import shutil
import statistics
import sys
import tempfile

from bench import log, peers, record, report, twins
from bench.build import add_arguments as add_build_arguments, ensure_programs
from bench.ceilings import measure as measure_ceilings

METRICS = ("hr10", "ndcg10", "hr10_catalogue", "ndcg10_catalogue", "hr10_all", "ndcg10_all")


def run_qkv(args, build_dir, csv, out, **kwargs):
    """qkv.recommender.train in a child process (bench/twins.py) -> (progress, report, seconds).
    With "cross_validation" among kwargs: qkv.recommender.mf_cross_validation(csv, **the
    others) instead, its report {"folds": ...}."""
    if kwargs.pop("cross_validation", False):
        _, folds, seconds = twins.train_in_child("recommender", build_dir, args.threads,
                                                 "recommender.mf_cross_validation", [csv], kwargs, progress=False)
        return [], {"folds": folds, "seconds": seconds}, seconds
    return twins.train_in_child("recommender", build_dir, args.threads, "recommender.train", [csv, out], kwargs)


def sasrec_kwargs(args, seed, dropout, precision):
    return {"model": "sasrec", "epochs": args.epochs, "batch": args.batch, "lr": args.lr, "dim": args.dim,
            "layers": args.layers, "heads": args.heads, "max_len": args.max_len, "seed": seed,
            "eval_every": args.eval_every, "dropout": dropout, "precision": precision}


def run_torch(args, qkv, csv, template, seed, dropout, precision):
    """The twin of one seed, dropout p and precision (bf16: its loss under torch's CPU
    autocast); the test metrics from qkv's evaluation of its best weights."""
    import torch
    from bench.sasrec_torch import make_sasrec_class, train_twin
    rec = qkv.recommender
    batches = rec.SasRecBatches(csv, batch=args.batch, max_len=args.max_len, seed=seed)
    weights = rec.sasrec_initial(batches.num_items, dim=args.dim, layers=args.layers, heads=args.heads,
                                 max_len=args.max_len, seed=seed)
    torch.manual_seed(seed)  # the dropout masks
    model = make_sasrec_class()(weights, heads=args.heads, dropout=dropout)
    with tempfile.TemporaryDirectory(prefix="qkv-bench-sasrec-torch-") as scratch:
        out = os.path.join(scratch, "model")
        shutil.copytree(template, out)

        def evaluate(state):
            rec.save_sasrec_weights(out, state)
            return rec.evaluate(out, csv, validation=True)["hr10"]

        def on_epoch(info):
            if info["validation"] is not None or info["epoch"] == 1:
                v = "" if info["validation"] is None else f", validation HR@10 {info['validation']:.4f}"
                log(f"  torch {precision} seed {seed} dropout {dropout:g} epoch {info['epoch']}/{info['total']}: "
                    f"loss {info['loss']:.4f}{v}")

        result = train_twin(model, batches, args.epochs, lr=args.lr, eval_every=args.eval_every,
                            evaluate=evaluate, on_epoch=on_epoch, precision=precision)
        rec.save_sasrec_weights(out, result.pop("best_state"))
        result["test"] = rec.evaluate(out, csv)
    return result


def run_flops(qkv, args, csv, seed, steps):
    """The FLOPs of qkv's `steps` training steps of this seed (the batches' shapes)."""
    from bench.sasrec_torch import step_flops
    batches = qkv.recommender.SasRecBatches(csv, batch=args.batch, max_len=args.max_len, seed=seed)
    total, n = 0, batches.steps_per_epoch
    for i in range(steps):
        total += step_flops(args.dim, args.layers, batches.get(i // n, i % n)["inputs"])
    return total


def metrics_cells(m):
    return " ".join(report.cell(None if m is None else m.get(k), "8.4f") for k in METRICS)


def add_arguments(parser):
    parser.add_argument("--data-dir", help="directory with ratings.csv (fetched there when missing; "
                        "default: scripts/fetch_data.sh movielens into the bench cache)")
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated (default 0,1,2)")
    parser.add_argument("--dropout", default="0,0.2",
                        help="SASRec's dropout p, comma-separated: each seed trains once per p (default 0,0.2: "
                        "none and the paper's)")
    twins.add_precision_argument(parser)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--dim", type=int, default=50)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=1)
    parser.add_argument("--max-len", type=int, default=200)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--mf-epochs", type=int, help="MF's epochs (default: qkv's)")
    parser.add_argument("--no-mf", action="store_true", help="leave matrix factorisation out")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--note", action="append", default=[],
                        help="a line for the record's notes (how busy the machine was, say); repeatable")
    parser.add_argument("--quick", action="store_true",
                        help="2 epochs, validation every epoch, MF 2 epochs: checks that the script runs")
    twins.add_child_arguments(parser)
    add_build_arguments(parser)
    peers.add_arguments(parser, ort=False)


def run(args):
    if args.child:
        return twins.child(args)
    if args.quick:
        args.epochs, args.eval_every = min(args.epochs, 2), 1
        args.mf_epochs = args.mf_epochs or 2
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    dropouts = dropout_settings(args.dropout)
    precisions = twins.precisions(args, "recommender")
    peers.reexec_with_openblas(args)  # does not return when it re-runs the script
    csv = os.path.join(twins.fetch_data("movielens", args.data_dir), "ratings.csv")
    rec = record.new("recommender", args.threads, settings={
        "epochs": args.epochs, "seeds": seeds, "dropout": dropouts, "batch": args.batch, "lr": args.lr, "dim": args.dim,
        "layers": args.layers, "heads": args.heads, "max_len": args.max_len, "eval_every": args.eval_every,
        "mf_epochs": args.mf_epochs, "mf": not args.no_mf, "quick": args.quick, "precisions": precisions})

    build_dir = os.path.abspath(args.build_dir)
    programs = ensure_programs(build_dir, {"_qkv": "python/qkv/_qkv*.so",
                                           "qkv_python_files": "python/qkv/__init__.py",
                                           "qkv_ceilings": "bench/qkv_ceilings"}, args.rebuild)
    measured = measure_ceilings(programs["qkv_ceilings"], args.threads, quick=True)
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
    qkv.set_num_threads(args.threads)  # the twin's evaluations

    work = tempfile.mkdtemp(prefix="qkv-bench-recommender-")
    runs = {}
    template = None
    samples = []  # both ceilings after each seed's runs: {"f32_fma": ..., "bf16_dpbf16ps": ...}
    try:
        turn = 0
        for seed in seeds:
            for p in dropouts:
                for prec in precisions:
                    order = ("qkv", "torch") if turn % 2 == 0 or template is None else ("torch", "qkv")
                    turn += 1
                    for impl in order:
                        what = f"seed {seed} dropout {p:g} {prec}"
                        if impl == "qkv":
                            log(f"qkv SASRec {what}: {args.epochs} epochs")
                            out = os.path.join(work, f"sasrec-{seed}-{p:g}-{prec}")
                            progress, result, seconds = run_qkv(args, build_dir, csv, out,
                                                                **sasrec_kwargs(args, seed, p, prec))
                            if result.get("precision") != prec:
                                raise RuntimeError(f"qkv.recommender.train(precision={prec!r}) reports precision "
                                                   f"{result.get('precision')!r}")
                            template = template or out
                            runs[("qkv", seed, p, prec)] = {
                                "report": result, "progress": progress, "call_s": seconds,
                                "flops": run_flops(qkv, args, csv, seed, result["train_steps"])}
                            log(f"  qkv {what}: best epoch {result['best_epoch']}, test HR@10 "
                                f"{result['trained']['hr10']:.4f}, "
                                f"{result['train_seconds'] / result['train_steps']:.4f} s/step")
                        elif not args.no_torch:
                            log(f"torch {torch_version} SASRec {what}: {args.epochs} epochs")
                            t = runs[("torch", seed, p, prec)] = run_torch(args, qkv, csv, template, seed, p, prec)
                            log(f"  torch {what}: best epoch {t['best_epoch']}, test HR@10 "
                                f"{t['test']['hr10']:.4f}, {t['train_seconds'] / t['steps']:.4f} s/step")
            samples.append(twins.sample_precision_ceilings(programs["qkv_ceilings"], args.threads))
        record.add_ceiling(rec, "f32_fma", "GFLOP/s", [x["f32_fma"] for x in samples])
        record.add_ceiling(rec, "bf16_dpbf16ps", "GFLOP/s", [x["bf16_dpbf16ps"] for x in samples])
        mf = None
        if not args.no_mf:
            log("qkv MF (seed 0)")
            kwargs = {"model": "mf", "seed": 0}
            if args.mf_epochs:
                kwargs["epochs"] = args.mf_epochs
            _, mf, _ = run_qkv(args, build_dir, csv, os.path.join(work, "mf"), **kwargs)
            mf["random_5fold"] = random_folds(qkv, args, build_dir, csv, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    result = summarise(args, seeds, dropouts, precisions, runs, ceiling, bf16_ceiling, mf)
    result.update({"torch_version": torch_version, "torch_blas": torch_blas, "threads": args.threads})
    print_tables(args, seeds, result, build_dir)
    rec["versions"].update({"qkv": qkv.__version__, "qkv_cpu": qkv.cpu_summary(), "torch": torch_version,
                            "torch_blas": torch_blas})
    to_record(rec, args, seeds, result, samples)
    rec["notes"] += args.note
    return rec


def dropout_settings(text):
    """--dropout "0,0.2" -> [0.0, 0.2]: each in [0, 1), none twice."""
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"bench recommender: --dropout must be comma-separated numbers in [0, 1), got {text!r}")
    if not values or any(not 0 <= v < 1 for v in values) or len(set(values)) != len(values):
        raise SystemExit(f"bench recommender: --dropout must be distinct numbers in [0, 1), got {text!r}")
    return values


def setting_name(p, precision="f32"):
    """A setting's name in the tables and the record's cases: "dropout 0.2", and ", bf16"
    after it for bf16 (f32's keep their names from before precisions)."""
    return f"dropout {p:g}" + ("" if precision == "f32" else f", {precision}")


def to_record(rec, args, seeds, r, samples):
    """Per seed (a round) and dropout setting (a case each, named by it; its info says p):
    training steps/s and GFLOP/s of both, the ranking metrics of both (their mean over the
    seeds in BENCHMARKS.md) and of popularity; MF's RMSEs beside its baselines; each seed's
    and setting's step losses."""
    shape = f"d={args.dim}, {args.layers} blocks, {args.heads} heads, max_len {args.max_len}, batch {args.batch}"
    subjects = {}
    names = {"hr10": "HR@10 among 101", "ndcg10": "NDCG@10 among 101", "hr10_catalogue": "HR@10 catalogue",
             "ndcg10_catalogue": "NDCG@10 catalogue", "hr10_all": "HR@10 every test movie",
             "ndcg10_all": "NDCG@10 every test movie"}
    for setting in r["settings"]:
        p, prec = setting["dropout"], setting["precision"]
        rows = [row for row in setting["per_seed"] if "qkv" in row]
        if not rows:
            continue
        if not subjects:
            subjects = {
                "steps": record.add_subject(rec, "sasrec_training", f"SASRec training on MovieLens ({shape})",
                                            "training steps per second", "steps/s", "higher"),
                "gflops": record.add_subject(rec, "sasrec_training_gflops",
                                             f"SASRec training FLOP rate ({shape}; real items only)",
                                             "training FLOP rate", "GFLOP/s", "higher", ceiling="f32_fma",
                                             headline=False),
                "quality": record.add_subject(rec, "sasrec_quality", "SASRec test ranking metrics without and "
                                              "with dropout (each seed's best-validation weights, scored by "
                                              "qkv's evaluation)", "ranking metric", "fraction", "higher",
                                              aggregate="mean")}
        impls = [impl for impl in ("qkv", "torch") if all(impl in row for row in rows)]
        ceiling_name = twins.PRECISION_CEILINGS[prec][1]
        ceiling_samples = [samples[seeds.index(row["seed"])][ceiling_name] for row in rows]
        info = {"dropout": p, "precision": prec, "seeds": [row["seed"] for row in rows], "epochs": args.epochs,
                "steps": {impl: [row[impl]["steps"] for row in rows] for impl in impls},
                "best_epoch": {impl: [row[impl]["best_epoch"] for row in rows] for impl in impls}}
        for row in rows:
            curve = (f"sasrec_step_loss_seed{row['seed']}" + ("" if p == 0 else f"_dropout{p:g}")
                     + ("" if prec == "f32" else f"_{prec}"))
            agreement = twins.add_loss_curves(rec, {impl: row[impl]["step_losses"] for impl in impls}, name=curve)
            if "torch" in agreement:
                info.setdefault("loss_curves_vs_torch", {})[str(row["seed"])] = agreement["torch"]
        if "torch" in impls:
            info["torch_batch_seconds_per_step"] = [row["torch"]["batch_seconds_per_step"] for row in rows]
            info["torch_median_step_seconds"] = [row["torch"]["median_step_seconds"] for row in rows]
        if "vs_f32" in setting:
            info["vs_f32"] = setting["vs_f32"]
        label = f"SASRec, {setting_name(p, prec)}"
        f32_label = f"SASRec, {setting_name(p)}" if prec != "f32" and "f32" in r["precisions"] else None
        record.add_case(subjects["steps"], label,
                        {impl: [1 / row[impl]["seconds_per_step"] for row in rows] for impl in impls},
                        ceiling_samples=ceiling_samples, info=info, precision=prec, f32_case=f32_label)
        record.add_case(subjects["gflops"], label, {impl: [row[impl]["gflops"] for row in rows] for impl in impls},
                        ceiling_samples=ceiling_samples, info={"dropout": p, "precision": prec}, ceiling=ceiling_name,
                        precision=prec, f32_case=f32_label)
        for key in METRICS:
            engines = {impl: [row[impl]["test"][key] for row in rows] for impl in impls}
            if r["popularity"]:
                engines["popularity"] = [r["popularity"][key]] * len(rows)
            record.add_case(subjects["quality"], f"{names[key]}, {setting_name(p, prec)}", engines,
                            info={"dropout": p, "precision": prec, "seeds": [row["seed"] for row in rows]},
                            precision=prec, f32_case=f"{names[key]}, {setting_name(p)}" if f32_label else None)

    mf = r["mf"]
    if mf:
        s = record.add_subject(rec, "mf_rmse", "Matrix factorisation test RMSE beside its baselines (seed 0)",
                               "test RMSE", "stars", "lower")
        record.add_case(s, "temporal split", {"qkv": [mf["rmse_mf"]], "global_mean": [mf["rmse_global_mean"]],
                                              "biases": [mf["rmse_biases"]]},
                        info={"best_epoch": mf.get("best_epoch"), "ranking": mf.get("trained"),
                              "popularity_ranking": mf.get("popularity")})
        cv = mf["random_5fold"]
        if isinstance(cv, dict):
            record.add_case(s, "random 5-fold", {"qkv": [f["mf"] for f in cv["folds"]],
                                                 "global_mean": [f["global_mean"] for f in cv["folds"]],
                                                 "biases": [f["biases"] for f in cv["folds"]]},
                            info={"seconds": cv["seconds"]})
    rec["notes"] += [
        "SASRec: both start from qkv.recommender.sasrec_initial of the seed and train on the same batches "
        "(SasRecBatches) in the same order; qkv in a child process, the torch twin (scripts/bench/sasrec_torch.py) "
        "here, alternating which goes first by seed. A round is a seed: steps/s = training steps / training time "
        "(evaluation excluded); qkv's time counts making its batches, torch's does not (info).",
        "qkv runs each batch's rows in groups of similar length (no padding computed); torch pads every row to the "
        "batch's longest. GFLOP/s count the real items only, for both.",
        "Ranking: the next movie among 101 (the paper's protocol), among the whole catalogue, and every test movie "
        "among 101; popularity's beside them. Curves: each seed's training loss at every step.",
        "The epoch losses in the table are the plain mean of each epoch's step losses for both (qkv's progress "
        "reports an epoch_loss weighted by items, which differs from that mean).",
        "Dropout: each seed trains once per setting (the case names it; its info says p): qkv with --dropout p, the "
        "twin with nn.Dropout(p) on the embedding and TransformerEncoderLayer(dropout=p) after torch.manual_seed(seed). "
        "The two draw different masks, so with p > 0 their curves part from the first step and only the means over "
        "the seeds compare; the ranking table gives those means.",
        f"Precisions {', '.join(r['precisions'])}: each seed and dropout trains once per precision (qkv: "
        "precision='bf16'; the twin: its loss under torch.autocast('cpu', dtype=torch.bfloat16), backward outside "
        "it), from the same weights on the same batches; cases named '..., bf16' (their f32_case: the same name "
        "without it). GFLOP/s are held against the ceiling of the precision's unit: f32 FMA, vdpbf16ps for bf16, "
        "sampled after each seed's runs."]


def random_folds(qkv, args, build_dir, csv, work):
    """MF's test RMSE under a random 5-fold split (qkv.recommender.mf_cross_validation, in
    a child process): {"global_mean", "biases", "mf"} means over the folds, and "folds";
    or a string saying why it was skipped."""
    if not hasattr(qkv.recommender, "mf_cross_validation"):
        return "skipped: qkv.recommender has no mf_cross_validation"
    log("qkv MF random 5-fold cross-validation (seed 0)")
    kwargs = {"cross_validation": True, "folds": 5, "seed": 0}
    if args.mf_epochs:
        kwargs["epochs"] = args.mf_epochs
    _, result, _ = run_qkv(args, build_dir, csv, os.path.join(work, "mf-cv"), **kwargs)
    folds = result["folds"]
    means = {k: statistics.mean(f[k] for f in folds) for k in ("global_mean", "biases", "mf")}
    return {**means, "folds": folds, "seconds": result["seconds"]}


def summarise(args, seeds, dropouts, precisions, runs, ceiling, bf16_ceiling, mf):
    out = {"epochs": args.epochs, "seeds": seeds, "dropouts": dropouts, "precisions": precisions,
           "batch": args.batch, "dim": args.dim, "layers": args.layers, "heads": args.heads, "max_len": args.max_len,
           "lr": args.lr, "eval_every": args.eval_every, "ceiling_gflops": ceiling, "bf16_ceiling_gflops": bf16_ceiling,
           "settings": [], "mf": mf, "popularity": None}
    for p, prec in [(p, prec) for p in dropouts for prec in precisions]:
        setting = {"dropout": p, "precision": prec, "per_seed": []}
        q_steps, t_steps = [], []
        for seed in seeds:
            q = runs.get(("qkv", seed, p, prec))
            t = runs.get(("torch", seed, p, prec))
            row = {"seed": seed}
            if q:
                r = q["report"]
                out["popularity"] = r["popularity"]
                s = r["train_seconds"] / r["train_steps"]
                q_steps.append(s)
                # the mean of each epoch's step losses, as the twin's epoch_losses (qkv's own
                # epoch_loss weighs its steps by their items)
                by_epoch = {}
                for prog in q["progress"]:
                    by_epoch.setdefault(prog["epoch"], []).append(prog["loss"])
                losses = [statistics.mean(v) for _, v in sorted(by_epoch.items())]
                row["qkv"] = {"test": r["trained"], "best_epoch": r["best_epoch"], "steps": r["train_steps"],
                              "dropout": r.get("dropout"), "seconds_per_step": s,
                              "train_seconds": r["train_seconds"], "gflops": q["flops"] / r["train_seconds"] / 1e9,
                              "loss_first_epoch": losses[0] if losses else None,
                              "loss_last_epoch": losses[-1] if losses else None, "epoch_losses": losses,
                              "step_losses": [prog["loss"] for prog in q["progress"]]}
            if t:
                s = t["train_seconds"] / t["steps"]
                t_steps.append(s)
                per = t["step_seconds"][5:] or t["step_seconds"]
                row["torch"] = {"test": t["test"], "best_epoch": t["best_epoch"], "steps": t["steps"],
                                "seconds_per_step": s, "median_step_seconds": statistics.median(per),
                                "train_seconds": t["train_seconds"],
                                "batch_seconds_per_step": t["batch_seconds"] / t["steps"],
                                "gflops": t["flops"] / t["train_seconds"] / 1e9,
                                "loss_first_epoch": t["epoch_losses"][0], "loss_last_epoch": t["epoch_losses"][-1],
                                "epoch_losses": t["epoch_losses"], "step_losses": t["losses"]}
            if q and t:
                row["delta_hr10"] = row["qkv"]["test"]["hr10"] - row["torch"]["test"]["hr10"]
            setting["per_seed"].append(row)
        for impl in ("qkv", "torch"):
            rows = [r[impl] for r in setting["per_seed"] if impl in r]
            if rows:
                setting[f"{impl}_mean"] = {k: statistics.mean(r["test"][k] for r in rows) for k in METRICS}
        if "qkv_mean" in setting and "torch_mean" in setting:
            setting["abs_delta_hr10_of_means"] = abs(setting["qkv_mean"]["hr10"] - setting["torch_mean"]["hr10"])
        if q_steps:
            setting["qkv_seconds_per_step"] = statistics.median(q_steps)
        if t_steps:
            setting["torch_seconds_per_step"] = statistics.median(t_steps)
        if q_steps and t_steps:
            setting["speedup"] = setting["torch_seconds_per_step"] / setting["qkv_seconds_per_step"]
        out["settings"].append(setting)
    # bf16 against f32 of the same dropout: each engine's speed ratio (median s/step over the
    # seeds, f32's over bf16's) and the change of its mean test metrics
    for setting in out["settings"]:
        f32 = next((x for x in out["settings"] if x["dropout"] == setting["dropout"] and x["precision"] == "f32"), None)
        if setting["precision"] == "f32" or f32 is None:
            continue
        vs = setting["vs_f32"] = {}
        for impl in ("qkv", "torch"):
            if f"{impl}_mean" in setting and f"{impl}_mean" in f32:
                vs[impl] = {"speedup": f32[f"{impl}_seconds_per_step"] / setting[f"{impl}_seconds_per_step"],
                            "delta_hr10_of_means": setting[f"{impl}_mean"]["hr10"] - f32[f"{impl}_mean"]["hr10"],
                            "delta_ndcg10_of_means": setting[f"{impl}_mean"]["ndcg10"]
                            - f32[f"{impl}_mean"]["ndcg10"]}
    return out


def print_tables(args, seeds, r, build_dir):
    print(f"{report.cpu_model()}; qkv {report.where(report.git_describe(), build_dir)}; "
          f"torch {r['torch_version']} ({r['torch_blas']}); {args.threads} threads")
    print(f"SASRec: d {args.dim}, {args.layers} blocks, {args.heads} heads, max_len {args.max_len}; "
          f"{args.epochs} epochs of batch {args.batch}, lr {args.lr:g}, validation every {args.eval_every}; "
          f"precisions {', '.join(r['precisions'])}; ceilings at the start: f32 FMA {r['ceiling_gflops']:.0f}, "
          f"vdpbf16ps {report.cell(r['bf16_ceiling_gflops'], '.0f').strip()} GFLOP/s ({args.threads} threads)")
    head = " ".join(f"{h:>8}" for h in ("HR@10", "NDCG@10", "HR@10c", "NDCG@10c", "HR@10a", "NDCG@10a"))
    for setting in r["settings"]:
        bf16 = setting["precision"] == "bf16"
        fma, dpbf16 = r["ceiling_gflops"], r["bf16_ceiling_gflops"]
        print(f"SASRec, {setting_name(setting['dropout'], setting['precision'])}"
              + (" (qkv precision='bf16'; torch under torch.autocast('cpu', dtype=torch.bfloat16)):" if bf16 else ":"))
        print(f"{'seed':>4} {'impl':6} {head} {'best':>5} {'loss@1':>7} {'loss@end':>8} {'s/step':>7} {'GFLOP/s':>7} "
              f"{'% FMA':>6} {'% bf16':>6}")
        for row in setting["per_seed"]:
            for impl in ("qkv", "torch"):
                if impl not in row:
                    continue
                x = row[impl]
                print(f"{row['seed']:>4} {impl:6} {metrics_cells(x['test'])} {x['best_epoch']:>5} "
                      f"{report.cell(x['loss_first_epoch'], '7.4f')} {report.cell(x['loss_last_epoch'], '8.4f')} "
                      f"{x['seconds_per_step']:7.4f} {x['gflops']:7.1f} "
                      f"{report.cell(100 * x['gflops'] / fma if fma else None, '5.1f', '%')} "
                      f"{report.cell(100 * x['gflops'] / dpbf16 if dpbf16 else None, '5.1f', '%')}")
            if "delta_hr10" in row:
                print(f"{row['seed']:>4} {'Δ':6} {row['delta_hr10']:+8.4f}")
        for impl in ("qkv", "torch"):
            if f"{impl}_mean" in setting:
                print(f"{'mean':>4} {impl:6} {metrics_cells(setting[f'{impl}_mean'])}")
        if r["popularity"]:
            print(f"{'':>4} {'popul.':6} {metrics_cells(r['popularity'])}")
        if "abs_delta_hr10_of_means" in setting:
            print(f"|ΔHR@10| of the means of {len(seeds)} seeds: {setting['abs_delta_hr10_of_means']:.4f}")
        if "speedup" in setting:
            rows = [row for row in setting["per_seed"] if "torch" in row]
            median_torch = statistics.median(row["torch"]["median_step_seconds"] for row in rows)
            print(f"training s/step (median over seeds of training time / steps): qkv "
                  f"{setting['qkv_seconds_per_step']:.4f}, torch {setting['torch_seconds_per_step']:.4f} (its median "
                  f"step {median_torch:.4f}); torch/qkv {setting['speedup']:.2f}x")
            batch_s = statistics.median(row["torch"]["batch_seconds_per_step"] for row in rows)
            print(f"  qkv's time counts its batches' generation (SasRecBatches.get), torch's does not: "
                  f"{batch_s:.4f} s/step in the twin's process")
        for impl, v in setting.get("vs_f32", {}).items():
            print(f"{impl} bf16 against f32 (dropout {setting['dropout']:g}): speed {v['speedup']:.2f}x; mean HR@10 "
                  f"{v['delta_hr10_of_means']:+.4f}, NDCG@10 {v['delta_ndcg10_of_means']:+.4f}"
                  + (" (the issue asks |ΔHR@10| <= 0.01)" if impl == "qkv" else ""))
    print("HR@10/NDCG@10: the next movie among 101; c: among the whole catalogue; a: every test movie among 101; "
          "% FMA / % bf16: of the f32 FMA / vdpbf16ps ceiling at the start (the record pairs each seed with the "
          "samples taken after its runs)")
    mf = r["mf"]
    if mf:
        print(f"MF (seed 0, best epoch {mf.get('best_epoch')}): test RMSE (temporal split) {mf['rmse_mf']:.4f}; "
              f"global mean {mf['rmse_global_mean']:.4f}, biases {mf['rmse_biases']:.4f}")
        cv = mf["random_5fold"]
        if isinstance(cv, dict):
            print(f"MF random 5-fold RMSE (mean of the folds): {cv['mf']:.4f}; global mean {cv['global_mean']:.4f}, "
                  f"biases {cv['biases']:.4f} (folds: " + ", ".join(f"{f['mf']:.4f}" for f in cv["folds"]) + ")")
        else:
            print(f"MF random 5-fold RMSE: {cv}")
        print(f"{'':>4} {'MF':6} {metrics_cells(mf['trained'])}")
        print(f"{'':>4} {'popul.':6} {metrics_cells(mf['popularity'])}")


