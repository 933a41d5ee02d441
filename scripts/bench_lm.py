#!/usr/bin/python3
"""`qkv train lm` beside its torch twin, and GPT-2 decoding of the trained model beside torch.

Run with Debian's Python (it builds build/'s qkv and _qkv when missing):

    /usr/bin/python3 scripts/bench.py lm [--data DIR] [--model models/sotu-gpt] [--steps 100]
                                         [--precision f32,bf16] [--threads 2]

It prints its tables and records every timed step of both, both loss curves and the
decoding rates in bench/records/lm/<host kind>.json (scripts/bench/record.py).

DIR holds sotu-train.txt (scripts/fetch_data.sh sotu DIR; without --data it is fetched
into the bench cache, ~/.cache/qkv-bench/data/sotu, once). The model directory gives the
architecture (config.json) and the tokenizer (vocab.json, merges.txt); its weights are not
used for training: both sides start from Gpt2Weights::initialized of that config (seed
--seed), which qkv writes (_qkv._gpt2_initial) and torch reads.

Training (the twin): qkv.train_lm runs in a child process (scripts/bench/twins.py; so the
two never share threads); torch 1.13 runs scripts/bench/gpt2_torch.py's TorchGpt2LM with
train_twin: the same windows in the same order (_qkv._lm_batch_offsets of the same token
stream), batch 16 of n_positions tokens, AdamW (0.9, 0.999, 1e-8, weight decay 0.1 on
matrices), gradient clipping at 1, linear warm-up then cosine to lr/10, dropout 0.
Reported: both loss curves (every step), the final losses (last step, and the mean of the
last 10 steps) and their ratio, seconds per step and tokens/s (B·T per step, the whole
step), and the FLOP/s of each step against the machine's measured ceilings, f32 FMA and
AVX512-BF16's vdpbf16ps (at the start, and sampled after each run): 6·N·tokens for the
matrices, N = parameters including the tied head, plus 12·layers·T·E per token for
attention's two products, forward and backward.

Precisions (--precision, default f32,bf16 where the CPU has AVX512-BF16 or AMX, else f32):
each engine trains once per precision, from the same weights on the same windows: qkv
with precision="bf16" (`qkv train lm --precision bf16`: products of bf16 inputs summed in
f32, master weights, AdamW, LayerNorm, softmax and loss in f32), the twin with its forward
and loss under torch.autocast("cpu", dtype=torch.bfloat16) and backward outside it (torch
1.13's CPU autocast: matmul/linear in bf16, cross-entropy in f32; its softmax and GELU take
what they are given, bf16 scores in the twin's attention). The precisions run one after
the other, which engine goes first alternating. Reported per precision beside the above:
bf16's speed over f32's for qkv and for torch, qkv/torch, and each loss curve against its
f32 one.

Decoding: `qkv generate --json` (greedy, --max-new-tokens) on the model directory against
TorchGpt2 (the same architecture in eager torch with a preallocated KV cache), tokens/s
after the first token, and whether the two greedy continuations are the same ids.

torch runs on Debian's OpenBLAS (scripts/bench/peers.py) unless --torch-blas system.
Nothing here asserts a time; the exit status is 1 when something asked for could not run.
"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from bench import ROOT, log, peers, record, report, twins
from bench.build import add_arguments as add_build_arguments, ensure_programs
from bench.ceilings import measure as measure_ceilings


def run_qkv(args, build_dir, text, out, precision):
    """qkv.train_lm(..., precision=precision) in a child process (bench/twins.py)
    -> (losses, elapsed seconds, result)."""
    with open(os.path.join(args.model, "config.json")) as f:
        config = json.load(f)
    kwargs = {"tokenizer": args.model, "layers": config["n_layer"], "embd": config["n_embd"],
              "heads": config["n_head"], "context": config["n_positions"], "steps": args.steps,
              "batch": args.batch, "lr": args.lr, "warmup": args.warmup, "seed": args.seed,
              "eval_every": 0, "checkpoint_every": 0, "precision": precision}

    def on_progress(info):
        if info["step"] % 10 == 0:
            log(f"qkv {precision} step {info['step']}/{args.steps} loss {info['loss']:.4f}")

    steps, result, _ = twins.train_in_child("lm", build_dir, args.threads, "train_lm", [text, out], kwargs,
                                            on_progress=on_progress)
    if result.get("precision") != precision:
        raise RuntimeError(f"qkv.train_lm(precision={precision!r}) reports precision {result.get('precision')!r}")
    return [s["loss"] for s in steps], [s["elapsed_s"] for s in steps], result


def run_torch(args, config_json, text, build_dir, precision):
    """The twin: initial weights from qkv, the same stream and windows; for bf16 its forward
    and loss under torch's CPU autocast (bench/twins.py autocast)."""
    import torch
    from qkv import _qkv, Tokenizer
    from bench.gpt2_torch import gpt2_directory, make_lm_class, train_twin
    with tempfile.TemporaryDirectory(prefix="qkv-bench-lm-initial-") as initial:
        _qkv._gpt2_initial(initial, config_json, args.seed)
        config, weights = gpt2_directory(initial)
    model = make_lm_class()(config, weights)
    tokenizer = Tokenizer.load(args.model)
    stream = torch.tensor(_qkv._lm_tokens(tokenizer._impl, text))
    T = config["n_positions"]
    offsets = lambda step: _qkv._lm_batch_offsets(args.seed, step, args.batch, T, len(stream))  # noqa: E731
    losses, elapsed = [], []
    start = time.perf_counter()

    def on_step(step, loss):
        losses.append(loss)
        elapsed.append(time.perf_counter() - start)
        if (step + 1) % 10 == 0:
            log(f"torch {precision} step {step + 1}/{args.steps} loss {loss:.4f}")

    train_twin(model, stream, offsets, args.steps, args.batch, T, args.lr, args.warmup,
               on_step=on_step, precision=precision)
    return losses, elapsed


def decode_qkv(binary, model, prompt, n):
    done = subprocess.run([binary, "generate", "--model", model, "--prompt", prompt,
                           "--max-new-tokens", str(n), "--json"], check=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=peers.without_openblas())
    rate = re.search(r"([0-9.]+) tokens/s after the first", done.stderr)
    return json.loads(done.stdout), float(rate.group(1)) if rate else None


def decode_torch(model_dir, prompt_ids, n):
    from bench.gpt2_torch import TorchGpt2
    import torch
    m = TorchGpt2(model_dir)
    with torch.no_grad():
        m.generate(prompt_ids, 4)  # warm-up
        m.clear()
        start = time.perf_counter()
        logits = m.forward(list(prompt_ids))
        first = time.perf_counter()
        ids = [int(logits.argmax())]
        while len(ids) < n:
            ids.append(int(m.forward(ids[-1:]).argmax()))
        end = time.perf_counter()
    return ids, (n - 1) / (end - first), first - start


def add_arguments(parser):
    parser.add_argument("--data", help="directory with sotu-train.txt (default: scripts/fetch_data.sh sotu "
                        "into the bench cache)")
    parser.add_argument("--model", default=os.path.join(ROOT, "models", "sotu-gpt"),
                        help="GPT-2 directory: architecture, tokenizer, and the decoding model")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=100, help="steps // 10 when not below --steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--decode-tokens", type=int, default=200)
    parser.add_argument("--prompt", default="My fellow citizens")
    twins.add_precision_argument(parser)
    twins.add_child_arguments(parser)
    add_build_arguments(parser)
    peers.add_arguments(parser, ort=False)


def run(args):
    if args.child:
        return twins.child(args)
    if args.steps < 6:
        sys.exit("bench.py lm: --steps must be >= 6 (the first 5 steps are not timed)")
    precisions = twins.precisions(args, "lm")
    peers.reexec_with_openblas(args)  # does not return when it re-runs the script
    data = twins.fetch_data("sotu", args.data)
    rec = record.new("lm", args.threads, settings={
        "model": os.path.relpath(os.path.abspath(args.model), ROOT), "steps": args.steps, "batch": args.batch,
        "lr": args.lr, "warmup": args.warmup, "seed": args.seed, "decode_tokens": args.decode_tokens,
        "prompt": args.prompt, "precisions": precisions})

    build_dir = os.path.abspath(args.build_dir)
    programs = ensure_programs(build_dir, {"qkv_cli": "qkv", "_qkv": "python/qkv/_qkv*.so",
                                           "qkv_python_files": "python/qkv/__init__.py",
                                           "qkv_ceilings": "bench/qkv_ceilings"}, args.rebuild)
    text_path = os.path.join(data, "sotu-train.txt")
    text = open(text_path, encoding="utf-8").read()
    assert text.endswith("\n") and "\r" not in text, "the text must read back as train_lm reads it"
    measured = measure_ceilings(programs["qkv_ceilings"], args.threads, quick=True)
    ceiling = measured["f32_fma"]["gflops"]
    bf16_ceiling = (measured.get("bf16_avx512_dpbf16ps") or {}).get("gflops")
    record.add_ceiling(rec, "f32_fma", "GFLOP/s", [ceiling])
    record.add_ceiling(rec, "bf16_dpbf16ps", "GFLOP/s", [bf16_ceiling])
    log(f"ceilings: f32 FMA {ceiling:.0f} GFLOP/s, vdpbf16ps "
        f"{report.cell(bf16_ceiling, '.0f').strip()} GFLOP/s on {args.threads} threads")

    torch_version = torch_blas = None
    if not args.no_torch:
        torch_version, torch_blas = peers.start_torch(args.threads)
    sys.path.insert(0, os.path.join(build_dir, "python"))  # run_torch's qkv (tokenizer, batches)
    # Every run of one (engine, precision): qkv in a child, the twin here; the precisions one
    # after the other, which engine goes first alternating (qkv, torch | torch, qkv), and
    # both ceilings sampled right after each run.
    runs, config_json, q_result = {}, None, None
    for i, p in enumerate(precisions):
        for impl in ("qkv", "torch") if i % 2 == 0 else ("torch", "qkv"):
            if impl == "qkv":
                log(f"qkv {p}: {args.steps} steps")
                with tempfile.TemporaryDirectory(prefix="qkv-bench-lm-") as out:  # the model and checkpoint
                    losses, elapsed, q_result = run_qkv(args, build_dir, text_path, out, p)
                    config_json = open(os.path.join(out, "config.json")).read()
            elif not args.no_torch:
                log(f"torch {torch_version} ({torch_blas}) {p}"
                    f"{' (autocast bf16)' if p == 'bf16' else ''}: {args.steps} steps")
                losses, elapsed = run_torch(args, config_json, text, build_dir, p)
            else:
                continue
            after = twins.sample_precision_ceilings(programs["qkv_ceilings"], args.threads)
            runs[(impl, p)] = {"losses": losses, "elapsed": elapsed, "after": after}
            record.add_ceiling(rec, "f32_fma", "GFLOP/s", [after["f32_fma"]])
            record.add_ceiling(rec, "bf16_dpbf16ps", "GFLOP/s", [after["bf16_dpbf16ps"]])
    config = json.loads(config_json)

    T, E, L, V = config["n_positions"], config["n_embd"], config["n_layer"], config["vocab_size"]
    tokens_per_step = args.batch * T
    params = q_result["parameters"]
    flops_per_token = 6 * params + 6 * L * T * E  # the causal half of 12·L·T·E

    def step_seconds(elapsed):
        """Seconds of every step after the first 5 (warm-up)."""
        return [b - a for a, b in zip(elapsed, elapsed[1:])][4:]

    def summary(run):
        losses, s = run["losses"], statistics.median(step_seconds(run["elapsed"]))
        gflops = tokens_per_step * flops_per_token / s / 1e9
        fma, bf16 = run["after"]["f32_fma"], run["after"]["bf16_dpbf16ps"]
        return {"final_loss": losses[-1], "last10_loss": statistics.mean(losses[-10:]),
                "seconds_per_step": s, "tokens_per_s": tokens_per_step / s, "gflops": gflops,
                "pct_fma": 100 * gflops / fma if fma else None, "pct_bf16": 100 * gflops / bf16 if bf16 else None}

    def compare(mine, theirs):
        """How far two loss curves are apart: final and last-10 ratios, largest per-step deviation."""
        a, b = runs[mine]["losses"], runs[theirs]["losses"]
        return {"final_loss_ratio": a[-1] / b[-1],
                "last10_loss_ratio": statistics.mean(a[-10:]) / statistics.mean(b[-10:]),
                "max_step_loss_ratio_deviation": max(abs(x / y - 1) for x, y in zip(a, b))}

    result = {"runs": {key: summary(run) for key, run in runs.items()}, "vs_torch": {}, "bf16_vs_f32": {}}
    for p in precisions:
        if ("torch", p) in runs:
            result["vs_torch"][p] = {**compare(("qkv", p), ("torch", p)),
                                     "speedup": result["runs"][("torch", p)]["seconds_per_step"]
                                     / result["runs"][("qkv", p)]["seconds_per_step"]}
    if "f32" in precisions and "bf16" in precisions:
        for impl in ("qkv", "torch"):
            if (impl, "bf16") in runs:
                result["bf16_vs_f32"][impl] = {
                    **compare((impl, "bf16"), (impl, "f32")),
                    "speedup": result["runs"][(impl, "f32")]["seconds_per_step"]
                    / result["runs"][(impl, "bf16")]["seconds_per_step"]}

    if os.path.isfile(os.path.join(args.model, "model.safetensors")):
        log(f"decoding {args.decode_tokens} tokens: qkv generate, torch")
        q_gen, q_rate = decode_qkv(programs["qkv_cli"], args.model, args.prompt, args.decode_tokens)
        result["decode"] = {"qkv_tokens_per_s": q_rate, "tokens": args.decode_tokens}
        if not args.no_torch:
            t_ids, t_rate, t_first = decode_torch(args.model, q_gen["prompt_ids"], len(q_gen["ids"]))
            result["decode"].update({"torch_tokens_per_s": t_rate, "speedup": q_rate / t_rate,
                                     "same_ids": t_ids == q_gen["ids"], "torch_first_token_s": t_first})

    print(f"{report.cpu_model()}; qkv {report.where(report.git_describe(), build_dir)}; "
          f"torch {torch_version} ({torch_blas}); {args.threads} threads; 1-min load at the start "
          f"{rec['host']['loadavg_start'][0] if rec['host']['loadavg_start'] else '?'}")
    print(f"model: {L} blocks, E {E}, {config['n_head']} heads, context {T}, vocabulary {V}, "
          f"{params:,} parameters; {args.steps} steps of {args.batch} x {T} tokens; ceilings at the start: "
          f"f32 FMA {ceiling:.0f}, vdpbf16ps {report.cell(bf16_ceiling, '.0f').strip()} GFLOP/s "
          f"({args.threads} threads)")
    print(f"{'impl':6} {'prec':5} {'s/step':>8} {'tokens/s':>9} {'GFLOP/s':>8} {'% FMA':>6} {'% bf16':>6} "
          f"{'loss@1':>8} {'loss@end':>9} {'last-10 mean':>12}")
    for p in precisions:
        for impl in ("qkv", "torch"):
            if (impl, p) not in runs:
                continue
            s, losses = result["runs"][(impl, p)], runs[(impl, p)]["losses"]
            print(f"{impl:6} {p:5} {s['seconds_per_step']:8.3f} {s['tokens_per_s']:9.0f} {s['gflops']:8.1f} "
                  f"{report.cell(s['pct_fma'], '5.0f', '%')} {report.cell(s['pct_bf16'], '5.0f', '%')} "
                  f"{losses[0]:8.4f} {losses[-1]:9.4f} {s['last10_loss']:12.4f}")
    print("% FMA, % bf16: the run's FLOP rate over the f32 FMA and the vdpbf16ps ceilings sampled right after it; "
          "torch bf16 is torch.autocast('cpu', dtype=torch.bfloat16) around forward and loss")
    for p, v in result["vs_torch"].items():
        print(f"{p}: qkv/torch speed {v['speedup']:.2f}x; final loss ratio {v['final_loss_ratio']:.4f}, "
              f"last-10 ratio {v['last10_loss_ratio']:.4f}, largest per-step deviation "
              f"{100 * v['max_step_loss_ratio_deviation']:.2f}%")
    for impl, v in result["bf16_vs_f32"].items():
        print(f"{impl}: bf16/f32 speed {v['speedup']:.2f}x{' (the issue asks >= 1.6)' if impl == 'qkv' else ''}; "
              f"bf16's final loss over f32's {v['final_loss_ratio']:.4f}, last-10 {v['last10_loss_ratio']:.4f}, "
              f"largest per-step deviation {100 * v['max_step_loss_ratio_deviation']:.2f}%")
    keys = [(impl, p) for p in precisions for impl in ("qkv", "torch") if (impl, p) in runs]
    if len(keys) > 1:
        print("  step " + "".join(f" {impl + ' ' + p:>11}" for impl, p in keys))
        for k in sorted({0, 1, 4, 9, 24, 49, 99, args.steps - 1}):
            if k < args.steps:
                print(f"  {k + 1:4} " + "".join(f" {runs[key]['losses'][k]:11.4f}" for key in keys))
    if "decode" in result:
        d = result["decode"]
        line = f"decode ({d['tokens']} greedy tokens after '{args.prompt}'): qkv {d['qkv_tokens_per_s']:.1f} tok/s"
        if "torch_tokens_per_s" in d:
            line += (f", torch {d['torch_tokens_per_s']:.1f} tok/s, {d['speedup']:.2f}x; "
                     f"same ids: {d['same_ids']}")
        print(line)

    # The record: every timed step (steps 6..N) of every run, as tokens/s and as GFLOP/s; a
    # case per precision ("sotu-gpt" is f32, as before precisions; "sotu-gpt bf16").
    import qkv  # build/python is on sys.path
    rec["versions"].update({"qkv": qkv.__version__, "qkv_cpu": qkv.cpu_summary(), "torch": torch_version,
                            "torch_blas": torch_blas})
    shape = f"{L} blocks E={E} H={config['n_head']} T={T} V={V}, batch {args.batch}"
    s = record.add_subject(rec, "lm_training", f"qkv train lm (GPT-2 {shape}) beside its torch twin, training steps",
                           "training throughput", "tokens/s", "higher")
    g = record.add_subject(rec, "lm_training_gflops", f"qkv train lm (GPT-2 {shape}), training FLOP rate",
                           "training FLOP rate", "GFLOP/s", "higher", ceiling="f32_fma", headline=False)
    for p in precisions:
        case = "sotu-gpt" if p == "f32" else f"sotu-gpt {p}"
        impls = [impl for impl in ("qkv", "torch") if (impl, p) in runs]
        rates = {impl: [tokens_per_step / x for x in step_seconds(runs[(impl, p)]["elapsed"])] for impl in impls}
        info = {"parameters": params, "tokens_per_step": tokens_per_step, "flops_per_token": flops_per_token,
                "steps": args.steps, "timed_steps": f"6-{args.steps}", "precision": p,
                **result["vs_torch"].get(p, {})}
        info.pop("speedup", None)
        info["final_loss"] = {impl: result["runs"][(impl, p)]["final_loss"] for impl in impls}
        info["last10_loss"] = {impl: result["runs"][(impl, p)]["last10_loss"] for impl in impls}
        if p == "bf16":
            info["vs_f32"] = {impl: {k: v for k, v in x.items() if k != "speedup"}
                              for impl, x in result["bf16_vs_f32"].items()}
            info["torch_recipe"] = "torch.autocast('cpu', dtype=torch.bfloat16) around forward and loss"
        f32_case = "sotu-gpt" if p != "f32" and "f32" in precisions else None
        record.add_case(s, case, rates, info=info, precision=p, f32_case=f32_case)
        name = twins.PRECISION_CEILINGS[p][1]
        samples = runs[("qkv", p)]["after"][name]
        record.add_case(g, case, {k: [r * flops_per_token / 1e9 for r in v] for k, v in rates.items()},
                        info={"flops_per_token": flops_per_token,
                              "ceiling_after": {impl: runs[(impl, p)]["after"] for impl in impls}},
                        ceiling_samples=[samples] * len(rates["qkv"]) if samples else None, ceiling=name,
                        precision=p, f32_case=f32_case)
        curves = twins.add_loss_curves(rec, {impl: runs[(impl, p)]["losses"] for impl in impls},
                                       name="loss" if p == "f32" else f"loss_{p}")
        if "torch" in curves:
            c = curves["torch"]
            rec["notes"].append(f"Loss curves, {p}: largest per-step relative difference {c['max_rel_diff']:.2e}, "
                                f"at the last step {c['last_abs_diff']:.2e} absolute; the first step apart by more "
                                f"than 1e-3: {c['first_step_diverging']}.")
    if "decode" in result:
        d = result["decode"]
        s = record.add_subject(rec, "lm_decode", f"Greedy decoding of models/sotu-gpt ({L} blocks E={E}), "
                               "after the first token", "decode rate", "tokens/s", "higher")
        engines = {"qkv": [d["qkv_tokens_per_s"]]}
        if "torch_tokens_per_s" in d:
            engines["torch"] = [d["torch_tokens_per_s"]]
        record.add_case(s, f"{d['tokens']} tokens", engines,
                        info={"same_ids": d.get("same_ids"), "prompt": args.prompt})
    rec["notes"] += [
        f"Training: both start from Gpt2Weights::initialized of {os.path.basename(args.model)}'s config "
        f"(seed {args.seed}) and read the same windows of the same token stream; qkv.train_lm in a child "
        "process, the torch twin (scripts/bench/gpt2_torch.py) in this one, one after the other. Each "
        "value is one step's rate (steps 6 onward: the first 5 are warm-up); FLOPs per token 6·N for the "
        "matrices (N with the tied head) + 6·layers·T·E for causal attention.",
        f"Precisions {', '.join(precisions)}: each engine trains once per precision from the same weights on the "
        "same windows (qkv: precision=; torch bf16: torch.autocast('cpu', dtype=torch.bfloat16) around forward and "
        "loss, backward outside it); the precisions one after the other, qkv and torch alternating which goes "
        "first. Case 'sotu-gpt' is f32, 'sotu-gpt bf16' bf16 (its f32_case: 'sotu-gpt'). The GFLOP/s cases are held against the ceiling of their precision's unit (f32 "
        "FMA, vdpbf16ps), sampled once right after the run (every step of the run paired with that sample).",
        "Decoding: `qkv generate --json` (its own tokens/s after the first) against TorchGpt2's eager loop with "
        "a preallocated KV cache, one run each."]
    return rec
