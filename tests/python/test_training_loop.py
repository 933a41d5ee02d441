"""The one training loop from Python, for every model qkv trains (dates, lm, mf, sasrec, vit,
point): the same progress dict after every step, the same result fields, Ctrl-C stopping
after a checkpoint with KeyboardInterrupt, resume=True ending where the straight run ends
(bit for bit), stop_at returning an interrupted result."""
import json
import os
import signal
import struct
import sys

import pytest

import qkv

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "cli"))
import tiny_data  # noqa: E402

PROGRESS_KEYS = {"task", "step", "total", "epoch", "epochs", "epoch_end", "loss", "accuracy", "epoch_loss", "lr",
                 "items_per_s", "unit", "elapsed_s", "metric", "score", "best"}
LOOP_KEYS = {"task", "steps", "interrupted", "stopped_early", "seconds", "items_per_s", "unit", "precision", "loss", "evaluations",
             "metric", "best_step", "best_score", "checkpoint"}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("loop_data")
    tiny_data.ratings(str(d / "ratings.csv"), 60, 90)
    (d / "images").mkdir()
    tiny_data.images(str(d / "images"), 5300, 40)
    return d


def trainer(task, data):
    """task -> train(out, **run options) calling that task's Python entry with tiny settings."""
    readme = os.path.join(HERE, "..", "..", "README.md")
    if task == "dates":
        return lambda out, **kw: qkv.train_dates(out, steps=8, batch=8, eval_size=10, checkpoint_every=3, **kw)
    if task == "lm":
        return lambda out, **kw: qkv.train_lm(readme, out, vocab_size=300, layers=1, embd=32, heads=2, context=32,
                                              steps=8, batch=4, eval_every=3, checkpoint_every=3, **kw)
    if task == "mf":
        return lambda out, **kw: qkv.recommender.train(str(data / "ratings.csv"), out, model="mf", epochs=3, dim=4,
                                                       batch=32, **kw)
    if task == "sasrec":
        return lambda out, **kw: qkv.recommender.train(str(data / "ratings.csv"), out, model="sasrec", epochs=3, dim=8,
                                                       max_len=10, batch=8, eval_every=1, **kw)
    tiny = dict(vit=dict(dim=16, layers=1, heads=2, mlp_dim=32, patch_size=7),
                point=dict(dim=8, layers=1, points=16, neighbors=4))[task]
    return lambda out, **kw: qkv.vision.train(str(data / "images"), out, model=task, epochs=2, batch=50, **tiny, **kw)


def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    return {k: raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in header.items()
            if k != "__metadata__"}


@pytest.mark.parametrize("task", ["dates", "lm", "mf", "sasrec", "vit", "point"])
def test_progress_ctrl_c_resume_and_stop_at(task, data, tmp_path):
    train = trainer(task, data)
    seen = []
    straight = train(tmp_path / "straight", progress=seen.append)
    assert LOOP_KEYS <= set(straight) and straight["task"] == task and straight["interrupted"] is False
    assert [p["step"] for p in seen] == list(range(1, straight["steps"] + 1))
    assert all(set(p) == PROGRESS_KEYS and p["task"] == task and p["total"] == straight["steps"] for p in seen)
    assert [[p["step"], p["score"]] for p in seen if p["metric"] is not None] == straight["evaluations"]

    # Ctrl-C from inside the callback at step 3: a checkpoint at step 3, KeyboardInterrupt.
    def ctrl_c_at_3(info):
        if info["step"] == 3:
            os.kill(os.getpid(), signal.SIGINT)

    stopped = tmp_path / "stopped"
    with pytest.raises(KeyboardInterrupt):
        train(stopped, progress=ctrl_c_at_3)
    assert (stopped / "checkpoint.safetensors").is_file()
    resumed_steps = []
    resumed = train(stopped, resume=True, progress=lambda p: resumed_steps.append(p["step"]))
    assert resumed_steps == list(range(4, straight["steps"] + 1))
    assert resumed["steps"] == straight["steps"] and resumed["evaluations"] == straight["evaluations"]
    assert tensors(stopped / "model.safetensors") == tensors(tmp_path / "straight" / "model.safetensors")

    # stop_at: a checkpoint, an interrupted result, no exception.
    s = train(tmp_path / "at", stop_at=2)
    assert s["interrupted"] is True and s["steps"] == 2 and (tmp_path / "at" / "checkpoint.safetensors").is_file()


def test_resume_of_another_run_names_the_option(tmp_path):
    qkv.train_dates(tmp_path, steps=4, batch=4, eval_size=10, stop_at=2)
    with pytest.raises(ValueError, match=r"was written by a run with other options \(batch '4' there, '8' now\)"):
        qkv.train_dates(tmp_path, steps=4, batch=8, eval_size=10, resume=True)
    with pytest.raises(ValueError, match="is finished"):
        qkv.train_dates(tmp_path, steps=4, batch=4, eval_size=10)  # a run to the end, then
        qkv.train_dates(tmp_path, steps=4, batch=4, eval_size=10, resume=True)
    with pytest.raises(TypeError, match="progress must be callable"):
        qkv.train_dates(tmp_path, steps=4, progress=3)


def test_patience_stops_early_with_the_best_weights(data, tmp_path):
    r = qkv.recommender.train(str(data / "ratings.csv"), tmp_path / "m", model="mf", epochs=1000, dim=4, batch=32,
                              patience=3)
    e = r["evaluations"]
    assert r["stopped_early"] is True and r["steps"] == e[-1][0] and len(e) < 1000
    assert r["best_step"] == e[-4][0] and r["best_score"] == min(x[1] for x in e)
    with pytest.raises(ValueError, match="patience"):
        qkv.recommender.train(str(data / "ratings.csv"), tmp_path / "n", patience=-1)


# bf16 products (precision="bf16", `--precision bf16`): every trainer with matrix products.
BF16_TASKS = ["dates", "lm", "sasrec", "vit", "point"]
HAS_BF16 = "avx512_bf16" in qkv.cpu_summary() or "amx_bf16" in qkv.cpu_summary()


def loss_curve(train, out, **kw):
    curve = []
    result = train(out, progress=lambda p: curve.append(p["loss"]), **kw)
    return result, curve


@pytest.mark.parametrize("task", BF16_TASKS)
def test_bf16_loss_curve_follows_f32(task, data, tmp_path):
    """Each step's training loss in bf16 against f32's, from the same weights and batches.

    The bound, 2^-8 of the loss at every step: what rounding the loss itself to bf16 once
    would cost. Derivation of why a correct bf16 run stays inside it: a product of two
    bf16-rounded factors moves each term by at most 2^-8 of its size, but the terms' errors
    are independent and of both signs, so a sum of K terms moves by about 2^-8/sqrt(K) of
    its magnitude (K >= 16 here: under 2^-10), and the mean loss over the B·T items of a
    batch averages those again; over these runs' <= 24 steps AdamW, whose update does not
    depend on the gradient's scale, turns gradient errors of that size into weight
    differences of the same relative size per step. Measured on the AVX512-BF16 machine
    (worst step, relative): dates 2.8e-4, lm 3e-5, sasrec 1.8e-4, vit (lr 1e-2) 1.6e-3,
    point 1.5e-4. A bf16 backward that dropped the gradient below every linear layer
    moved them by 0.62, 0.012, 0.0055, 0.026 and 0.0062: every task fails. (ViT trains at
    lr 1e-2 here: at its default 1e-3 this tiny run barely moves, and such a broken backward
    moved its loss by only 5e-4.)
    """
    if not HAS_BF16:
        pytest.skip("no bf16 dot product on this CPU (the refusal is tested below)")
    train = trainer(task, data)
    more = {"lr": 1e-2} if task == "vit" else {}
    r32, c32 = loss_curve(train, tmp_path / "f32", **more)
    r16, c16 = loss_curve(train, tmp_path / "bf16", precision="bf16", **more)
    assert r32["precision"] == "f32" and r16["precision"] == "bf16"
    assert len(c16) == len(c32) >= 3
    assert c16 != c32, "bf16 gave f32's losses bit for bit: the products did not run in bf16"
    bound = 2.0 ** -8
    worst = max(abs(a - b) / max(1.0, abs(b)) for a, b in zip(c16, c32))
    assert worst <= bound, f"{task}: bf16 loss off f32's by {worst:.4f} (relative), bound {bound:.4f}: {c16} vs {c32}"
    # The model written is f32 (the master weights) and loads as any other.
    assert r16["steps"] == r32["steps"]


@pytest.mark.skipif(not HAS_BF16, reason="no bf16 dot product on this CPU")
def test_bf16_resume_in_another_precision_names_both(tmp_path):
    qkv.train_dates(tmp_path, steps=4, batch=4, eval_size=10, stop_at=2, precision="bf16")
    with pytest.raises(ValueError, match=r"precision 'bf16' there, 'f32' now"):
        qkv.train_dates(tmp_path, steps=4, batch=4, eval_size=10, resume=True)
    r = qkv.train_dates(tmp_path, steps=4, batch=4, eval_size=10, resume=True, precision="bf16")
    assert r["steps"] == 4 and r["precision"] == "bf16"


def test_bf16_refusals(data, tmp_path):
    with pytest.raises(ValueError, match="precision"):
        qkv.train_dates(tmp_path / "x", steps=2, precision="fp16")
    with pytest.raises(ValueError, match="matrix factorisation has no matrix products to run in bf16"):
        trainer("mf", data)(tmp_path / "mf", precision="bf16")
    if not HAS_BF16:
        with pytest.raises(ValueError, match="no bf16 dot product"):
            qkv.train_dates(tmp_path / "y", steps=2, precision="bf16")


def test_bf16_refused_where_the_kernels_run_without_it(tmp_path):
    # QKV_ISA picks the attention kernels' instruction set; one without bf16 pairs refuses
    # bf16 training by name (as a CPU without AVX512-BF16 does), in a fresh process since the
    # choice is made once per process.
    import subprocess
    env = dict(os.environ, QKV_ISA="avx2" if "avx2" in qkv.cpu_summary() else "simd128")
    code = ("import qkv\n"
            "try:\n"
            f"    qkv.train_dates({str(tmp_path)!r}, steps=2, batch=4, eval_size=10, precision='bf16')\n"
            "except ValueError as e:\n"
            "    print('refused:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    if HAS_BF16:
        assert "refused: train dates --precision bf16: the attention kernels run the instruction set" in out.stdout, \
            out.stdout
    else:
        assert "refused: train dates --precision bf16: this CPU has no bf16 dot product" in out.stdout, out.stdout
