#!/usr/bin/python3
"""`qkv train lm` beside its torch twin, and GPT-2 decoding of the trained model beside torch.

Run with Debian's Python (it builds build/'s qkv and _qkv when missing):

    /usr/bin/python3 scripts/bench.py lm [--data DIR] [--model models/sotu-gpt] [--steps 100]
                                         [--threads 2]

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
step), and the FLOP/s of each step against the machine's measured f32 FMA ceiling (at the
start, and sampled after each side's training): 6·N·tokens for the matrices, N =
parameters including the tied head, plus 12·layers·T·E per token for attention's two
products, forward and backward.

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
from bench.ceilings import measure as measure_ceilings, sample as sample_ceiling


def run_qkv(args, build_dir, text, out):
    """qkv.train_lm in a child process (bench/twins.py) -> (losses, elapsed seconds, result)."""
    with open(os.path.join(args.model, "config.json")) as f:
        config = json.load(f)
    kwargs = {"tokenizer": args.model, "layers": config["n_layer"], "embd": config["n_embd"],
              "heads": config["n_head"], "context": config["n_positions"], "steps": args.steps,
              "batch": args.batch, "lr": args.lr, "warmup": args.warmup, "seed": args.seed,
              "eval_every": 0, "checkpoint_every": 0}

    def on_progress(info):
        if info["step"] % 10 == 0:
            log(f"qkv step {info['step']}/{args.steps} loss {info['loss']:.4f}")

    steps, result, _ = twins.train_in_child("lm", build_dir, args.threads, "train_lm", [text, out], kwargs,
                                            on_progress=on_progress)
    return [s["loss"] for s in steps], [s["elapsed_s"] for s in steps], result


def run_torch(args, config_json, text, build_dir):
    """The twin: initial weights from qkv, the same stream and windows."""
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
            log(f"torch step {step + 1}/{args.steps} loss {loss:.4f}")

    train_twin(model, stream, offsets, args.steps, args.batch, T, args.lr, args.warmup,
               on_step=on_step)
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
    twins.add_child_arguments(parser)
    add_build_arguments(parser)
    peers.add_arguments(parser, ort=False)


def run(args):
    if args.child:
        return twins.child(args)
    if args.steps < 6:
        sys.exit("bench.py lm: --steps must be >= 6 (the first 5 steps are not timed)")
    peers.reexec_with_openblas(args)  # does not return when it re-runs the script
    data = twins.fetch_data("sotu", args.data)
    rec = record.new("lm", args.threads, settings={
        "model": os.path.relpath(os.path.abspath(args.model), ROOT), "steps": args.steps, "batch": args.batch,
        "lr": args.lr, "warmup": args.warmup, "seed": args.seed, "decode_tokens": args.decode_tokens,
        "prompt": args.prompt})

    build_dir = os.path.abspath(args.build_dir)
    programs = ensure_programs(build_dir, {"qkv_cli": "qkv", "_qkv": "python/qkv/_qkv*.so",
                                           "qkv_python_files": "python/qkv/__init__.py",
                                           "qkv_ceilings": "bench/qkv_ceilings"}, args.rebuild)
    text_path = os.path.join(data, "sotu-train.txt")
    text = open(text_path, encoding="utf-8").read()
    assert text.endswith("\n") and "\r" not in text, "the text must read back as train_lm reads it"
    ceiling = measure_ceilings(programs["qkv_ceilings"], args.threads, quick=True)["f32_fma"]["gflops"]
    record.add_ceiling(rec, "f32_fma", "GFLOP/s", [ceiling])
    log(f"f32 FMA ceiling: {ceiling:.0f} GFLOP/s on {args.threads} threads")

    log(f"qkv: {args.steps} steps")
    with tempfile.TemporaryDirectory(prefix="qkv-bench-lm-") as out:  # the model and checkpoint
        q_losses, q_elapsed, q_result = run_qkv(args, build_dir, text_path, out)
        config_json = open(os.path.join(out, "config.json")).read()
    config = json.loads(config_json)
    sys.path.insert(0, os.path.join(build_dir, "python"))
    after_qkv = sample_ceiling(programs["qkv_ceilings"], "fma", args.threads)
    torch_version = torch_blas = None
    t_losses = t_elapsed = after_torch = None
    if not args.no_torch:
        torch_version, torch_blas = peers.start_torch(args.threads)
        log(f"torch {torch_version} ({torch_blas}): {args.steps} steps")
        t_losses, t_elapsed = run_torch(args, config_json, text, build_dir)
        after_torch = sample_ceiling(programs["qkv_ceilings"], "fma", args.threads)
    record.add_ceiling(rec, "f32_fma", "GFLOP/s", [after_qkv, after_torch])

    T, E, L, V = config["n_positions"], config["n_embd"], config["n_layer"], config["vocab_size"]
    tokens_per_step = args.batch * T
    params = q_result["parameters"]
    flops_per_token = 6 * params + 6 * L * T * E  # the causal half of 12·L·T·E

    def step_seconds(elapsed):
        """Seconds of every step after the first 5 (warm-up)."""
        return [b - a for a, b in zip(elapsed, elapsed[1:])][4:]

    def summary(losses, elapsed):
        s = statistics.median(step_seconds(elapsed))
        return {"final_loss": losses[-1], "last10_loss": statistics.mean(losses[-10:]),
                "seconds_per_step": s, "tokens_per_s": tokens_per_step / s,
                "gflops": tokens_per_step * flops_per_token / s / 1e9}

    result = {"qkv": summary(q_losses, q_elapsed)}
    if t_losses:
        result["torch"] = summary(t_losses, t_elapsed)
        result["final_loss_ratio"] = q_losses[-1] / t_losses[-1]
        result["last10_loss_ratio"] = result["qkv"]["last10_loss"] / result["torch"]["last10_loss"]
        result["max_step_loss_ratio_deviation"] = max(abs(a / b - 1) for a, b in zip(q_losses, t_losses))
        result["speedup"] = result["torch"]["seconds_per_step"] / result["qkv"]["seconds_per_step"]

    if os.path.isfile(os.path.join(args.model, "model.safetensors")):
        log(f"decoding {args.decode_tokens} tokens: qkv generate, torch")
        q_gen, q_rate = decode_qkv(programs["qkv_cli"], args.model, args.prompt, args.decode_tokens)
        result["decode"] = {"qkv_tokens_per_s": q_rate, "tokens": args.decode_tokens}
        if not args.no_torch:
            t_ids, t_rate, t_first = decode_torch(args.model, q_gen["prompt_ids"], len(q_gen["ids"]))
            result["decode"].update({"torch_tokens_per_s": t_rate, "speedup": q_rate / t_rate,
                                     "same_ids": t_ids == q_gen["ids"], "torch_first_token_s": t_first})

    print(f"{report.cpu_model()}; qkv {report.where(report.git_describe(), build_dir)}; "
          f"torch {torch_version} ({torch_blas}); {args.threads} threads")
    print(f"model: {L} blocks, E {E}, {config['n_head']} heads, context {T}, vocabulary {V}, "
          f"{params:,} parameters; {args.steps} steps of {args.batch} x {T} tokens; "
          f"f32 FMA ceiling {ceiling:.0f} GFLOP/s ({args.threads} threads)")
    print(f"{'impl':6} {'s/step':>8} {'tokens/s':>9} {'GFLOP/s':>8} {'% FMA':>6} {'loss@1':>8} "
          f"{'loss@end':>9} {'last-10 mean':>12}")
    for impl, losses in (("qkv", q_losses), ("torch", t_losses)):
        if not losses:
            continue
        s = result[impl]
        print(f"{impl:6} {s['seconds_per_step']:8.3f} {s['tokens_per_s']:9.0f} {s['gflops']:8.1f} "
              f"{100 * s['gflops'] / ceiling:5.0f}% {losses[0]:8.4f} {losses[-1]:9.4f} "
              f"{s['last10_loss']:12.4f}")
    if t_losses:
        print(f"qkv/torch speed {result['speedup']:.2f}x; final loss ratio "
              f"{result['final_loss_ratio']:.4f}, last-10 ratio {result['last10_loss_ratio']:.4f}, "
              f"largest per-step deviation {100 * result['max_step_loss_ratio_deviation']:.2f}%")
        for k in sorted({0, 1, 4, 9, 24, 49, 99, args.steps - 1}):
            if k < len(q_losses):
                print(f"  step {k + 1:4}: qkv {q_losses[k]:.4f}  torch {t_losses[k]:.4f}")
    if "decode" in result:
        d = result["decode"]
        line = f"decode ({d['tokens']} greedy tokens after '{args.prompt}'): qkv {d['qkv_tokens_per_s']:.1f} tok/s"
        if "torch_tokens_per_s" in d:
            line += (f", torch {d['torch_tokens_per_s']:.1f} tok/s, {d['speedup']:.2f}x; "
                     f"same ids: {d['same_ids']}")
        print(line)

    # The record: every timed step (steps 6..N) of both, as tokens/s and as GFLOP/s.
    import qkv  # run_torch put build/python on sys.path; with --no-torch it is put here
    rec["versions"].update({"qkv": qkv.__version__, "qkv_cpu": qkv.cpu_summary(), "torch": torch_version,
                            "torch_blas": torch_blas})
    shape = f"{L} blocks E={E} H={config['n_head']} T={T} V={V}, batch {args.batch}"
    rates = {"qkv": [tokens_per_step / s for s in step_seconds(q_elapsed)]}
    if t_elapsed:
        rates["torch"] = [tokens_per_step / s for s in step_seconds(t_elapsed)]
    info = {"parameters": params, "tokens_per_step": tokens_per_step, "flops_per_token": flops_per_token,
            "steps": args.steps, "timed_steps": f"6-{args.steps}"}
    for key in ("final_loss_ratio", "last10_loss_ratio", "max_step_loss_ratio_deviation"):
        if key in result:
            info[key] = result[key]
    info["final_loss"] = {impl: result[impl]["final_loss"] for impl in ("qkv", "torch") if impl in result}
    s = record.add_subject(rec, "lm_training", f"qkv train lm (GPT-2 {shape}) beside its torch twin, training steps",
                           "training throughput", "tokens/s", "higher")
    record.add_case(s, "sotu-gpt", rates, info=info)
    s = record.add_subject(rec, "lm_training_gflops", f"qkv train lm (GPT-2 {shape}), training FLOP rate",
                           "training FLOP rate", "GFLOP/s", "higher", ceiling="f32_fma", headline=False)
    record.add_case(s, "sotu-gpt", {k: [r * flops_per_token / 1e9 for r in v] for k, v in rates.items()},
                    info={"flops_per_token": flops_per_token})
    curves = twins.add_loss_curves(rec, {"qkv": q_losses, "torch": t_losses or []})
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
        "process, then the torch twin (scripts/bench/gpt2_torch.py) in this one, one after the other. Each "
        "value is one step's rate (steps 6 onward: the first 5 are warm-up); FLOPs per token 6·N for the "
        "matrices (N with the tied head) + 6·layers·T·E for causal attention.",
        "Decoding: `qkv generate --json` (its own tokens/s after the first) against TorchGpt2's eager loop with "
        "a preallocated KV cache, one run each."]
    if "torch" in curves:
        c = curves["torch"]
        rec["notes"].append(f"Loss curves: largest per-step relative difference {c['max_rel_diff']:.2e}, "
                            f"at the last step {c['last_abs_diff']:.2e} absolute; the first step apart by more "
                            f"than 1e-3: {c['first_step_diverging']}.")
    return rec
