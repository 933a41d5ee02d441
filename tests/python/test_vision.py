"""qkv.vision from Python: train, classify, predict_proba and rollout with NumPy arrays in and
out, each against an independent witness — the qkv CLI (`qkv train vit --json`, `qkv
classify --json` and its --html page's rollout) on the same directory, the arrays that were
written into the IDX files, and a NumPy re-implementation of the batches' normalisation and
augmentation — and bad input as ValueError / TypeError naming what was wrong.

The data directory is synthetic, in fetch_data.sh fashion-mnist's layout (gzipped IDX):
5,300 training images (the last 5,000 validate) and 60 test images of 28×28 whose class k is
a bright band at rows 2k + 4 and 2k + 5 over dim noise. The model is tiny (dim 16, one
block, 7×7 patches: a 4×4 grid) and trains on the first 200 images, 4 steps an epoch.
"""
import gzip
import json
import os
import re
import struct
import subprocess
import sys

import numpy as np
import pytest

import qkv
from qkv import _qkv

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from bench.gpt2_torch import read_safetensors  # noqa: E402

vision = qkv.vision

# 200 images in batches of 50: 4 steps an epoch, 8 in the 2 epochs every run here takes.
TINY = dict(dim=16, layers=1, heads=2, mlp_dim=32, patch_size=7, batch=50, lr=3e-3, train_limit=200,
            checkpoint_every=0)
EPOCHS, STEPS = 2, 8
# The fields of every qkv training result (the training loop's), then the task's.
LOOP_KEYS = {"task", "steps", "interrupted", "stopped_early", "seconds", "items_per_s", "unit", "precision", "loss", "evaluations",
             "metric", "best_step", "best_score", "checkpoint"}
PROGRESS_KEYS = {"task", "step", "total", "epoch", "epochs", "epoch_end", "loss", "accuracy", "epoch_loss", "lr",
                 "items_per_s", "unit", "elapsed_s", "metric", "score", "best"}
RESULT_KEYS = LOOP_KEYS | {"validation_accuracy", "best_epoch", "test_accuracy", "num_parameters", "out"}


def idx_bytes(a):
    """An IDX file of unsigned bytes (type 0x08), as the data sets ship them."""
    a = np.ascontiguousarray(a, dtype=np.uint8)
    return struct.pack(">BBBB", 0, 0, 0x08, a.ndim) + b"".join(struct.pack(">I", d) for d in a.shape) + a.tobytes()


def banded_images(n, salt, rng):
    labels = ((np.arange(n) * 7 + salt) % 10).astype(np.uint8)
    pixels = rng.integers(0, 40, size=(n, 28, 28), dtype=np.uint8)
    for i, k in enumerate(labels):
        pixels[i, 2 * k + 4:2 * k + 6, :] = 230
    return pixels, labels


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The data directory and the arrays written into it: {"dir", "train", "test"}."""
    d = tmp_path_factory.mktemp("fashion-mnist")
    rng = np.random.default_rng(5)
    arrays = {"dir": d}
    for name, n, salt in (("train", 5300, 0), ("t10k", 60, 3)):
        pixels, labels = banded_images(n, salt, rng)
        (d / f"{name}-images-idx3-ubyte.gz").write_bytes(gzip.compress(idx_bytes(pixels)))
        (d / f"{name}-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx_bytes(labels)))
        arrays["test" if name == "t10k" else name] = (pixels, labels.astype(np.int64))
    return arrays


@pytest.fixture(scope="module")
def trained(data, tmp_path_factory):
    """(model directory, train()'s result, every progress info) of a run of TINY."""
    out = tmp_path_factory.mktemp("vit") / "model"
    seen = []
    result = vision.train(data["dir"], out, epochs=EPOCHS, progress=seen.append, **TINY)
    return out, result, seen


def qkv_binary():
    """$QKV_BIN, else the qkv next to the Python package under test (<build>/python/qkv ->
    <build>/qkv, as ctest sets PYTHONPATH)."""
    if os.environ.get("QKV_BIN"):
        return os.environ["QKV_BIN"]
    build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(qkv.__file__))))
    path = os.path.join(build, "qkv")
    if not os.path.isfile(path):
        pytest.skip(f"no qkv binary at {path} (set QKV_BIN)")
    return path


def run_qkv(*args):
    r = subprocess.run([qkv_binary(), *map(str, args)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"qkv {' '.join(map(str, args))}: status {r.returncode}\n{r.stderr}"
    return r.stdout


def normalised(pixels):
    """(p / 255 − mean) / std in float32, each operation rounded as the C++ table is."""
    return (pixels.astype(np.float32) / np.float32(255) - np.float32(vision.PIXEL_MEAN)) / np.float32(vision.PIXEL_STD)


# ---------------------------------------------------------------------------------------
# Training.

def test_train_result_progress_and_files(trained, data):
    out, result, seen = trained
    assert set(result) == RESULT_KEYS
    assert result["steps"] == STEPS and result["interrupted"] is False
    assert result["out"] == str(out) and result["checkpoint"] == str(out / "checkpoint.safetensors")
    acc = result["validation_accuracy"]
    assert len(acc) == EPOCHS and all(0 <= a <= 1 for a in acc)
    assert result["best_epoch"] == 1 + int(np.argmax(acc))  # the first of equals, as `>` keeps it
    assert 0 <= result["test_accuracy"] <= 1 and result["seconds"] > 0 and result["items_per_s"] > 0
    # num_parameters: the sizes of the model's tensors, counted from _vit_initial of its config
    c = vision.Classifier(out)
    assert result["num_parameters"] == sum(a.size for a in _qkv._vit_initial(c.config, 0).values())
    for name in ("config.json", "model.safetensors", "checkpoint.safetensors"):
        assert (out / name).is_file(), name
    assert json.loads((out / "config.json").read_text())["model_type"] == "qkv-vision"
    # progress: every step, in order, the epoch ends with the result's validation accuracies
    assert [p["step"] for p in seen] == list(range(1, STEPS + 1))
    assert all(p["total"] == STEPS for p in seen)
    assert [p["epoch"] for p in seen] == [1] * 4 + [2] * 4
    assert [p["epoch_end"] for p in seen] == [False, False, False, True] * 2
    assert [p["score"] for p in seen if p["epoch_end"]] == acc
    assert all(p["metric"] == "validation accuracy" for p in seen if p["epoch_end"])
    assert all(p["score"] is None and p["metric"] is None for p in seen if not p["epoch_end"])
    # the keys of every training loop's progress
    assert all(set(p) == PROGRESS_KEYS for p in seen)
    assert all(np.isfinite(p["loss"]) and 0 <= p["accuracy"] <= 1 and p["lr"] > 0 for p in seen)
    # the model directory records the run
    assert c.report["validation_accuracy"] == acc and c.report["steps"] == STEPS
    assert c.report["test_accuracy"] == result["test_accuracy"]
    assert c.report["trained_with"].startswith("qkv.train('vit'")
    assert c.config == dict(image_size=28, channels=1, patch_size=7, dim=16, layers=1, heads=2, mlp_dim=32,
                            classes=10, learned_positions=True, shifted_patches=False)
    assert c.class_names == list(vision.CLASSES) and len(c.class_names) == 10


def test_train_equals_the_cli(trained, data, tmp_path):
    """The same options through `qkv train vit --json` train the same model: Python's
    option names reach the same fields (a wrong lr, width or seed would move every number)."""
    out, result, _ = trained
    cli = tmp_path / "cli"
    line = run_qkv("train", "vit", "--data", data["dir"], "--out", cli, "--epochs", EPOCHS, "--dim", 16,
                   "--layers", 1, "--heads", 2, "--mlp-dim", 32, "--patch-size", 7, "--batch", 50, "--lr", 3e-3,
                   "--train-limit", 200, "--checkpoint-every", 0, "--json", "--quiet")
    j = json.loads(line)
    assert set(j) == RESULT_KEYS
    for key in ("steps", "validation_accuracy", "best_epoch", "test_accuracy", "num_parameters"):
        assert j[key] == result[key], key
    test = data["test"][0]
    np.testing.assert_array_equal(vision.Classifier(cli).predict_proba(test),
                                  vision.Classifier(out).predict_proba(test))


def test_patch_dropout_trains_as_the_cli_option_does(trained, data, tmp_path):
    """train(patch_dropout=0.5, patch_dropout_epochs=1) and `--patch-dropout 0.5
    --patch-dropout-epochs 1` train the same model, another than
    the one without (the kept patches are drawn per image and step); config.json's report
    records it. Bad values are refused by name."""
    out, _, _ = trained
    py = tmp_path / "py"
    vision.train(data["dir"], py, epochs=EPOCHS, patch_dropout=0.5, patch_dropout_epochs=1, **TINY)
    cli = tmp_path / "cli"
    run_qkv("train", "vit", "--data", data["dir"], "--out", cli, "--epochs", EPOCHS, "--dim", 16,
            "--layers", 1, "--heads", 2, "--mlp-dim", 32, "--patch-size", 7, "--batch", 50, "--lr", 3e-3,
            "--train-limit", 200, "--checkpoint-every", 0, "--patch-dropout", 0.5, "--patch-dropout-epochs", 1,
            "--json", "--quiet")
    test = data["test"][0]
    dropped = vision.Classifier(py).predict_proba(test)
    np.testing.assert_array_equal(vision.Classifier(cli).predict_proba(test), dropped)
    assert np.abs(dropped - vision.Classifier(out).predict_proba(test)).max() > 1e-3
    report = vision.Classifier(py).report
    assert report["patch_dropout"] == 0.5 and report["patch_dropout_epochs"] == 1
    fn = "train vit"
    with pytest.raises(ValueError, match=rf"{fn}: patch_dropout: must be a finite number in \[0, 1\), got 1"):
        vision.train(data["dir"], tmp_path / "x", patch_dropout=1.0)
    with pytest.raises(ValueError, match=rf"{fn}: patch_dropout: must be a finite number in \[0, 1\), got nan"):
        vision.train(data["dir"], tmp_path / "x", patch_dropout=float("nan"))
    with pytest.raises(TypeError, match=f"{fn}: patch_dropout: must be a float"):
        vision.train(data["dir"], tmp_path / "x", patch_dropout="0.5")
    with pytest.raises(ValueError, match=rf"{fn}: patch_dropout_epochs: 3 exceeds --epochs 2"):
        vision.train(data["dir"], tmp_path / "x", epochs=2, patch_dropout=0.5, patch_dropout_epochs=3)
    with pytest.raises(ValueError, match=rf"{fn}: patch_dropout_epochs: given without --patch-dropout"):
        vision.train(data["dir"], tmp_path / "x", epochs=2, patch_dropout_epochs=1)
    with pytest.raises(TypeError, match="train point: unknown option patch_dropout"):  # vit's
        vision.train(data["dir"], tmp_path / "x", model="point", patch_dropout=0.25)


def test_stop_resume_and_an_exception_in_progress(trained, data, tmp_path):
    out, result, _ = trained

    class Stop(Exception):
        pass

    def stop_at_3(info):
        if info["step"] == 3:
            raise Stop("from the callback")

    m = tmp_path / "m"
    with pytest.raises(Stop, match="from the callback"):
        vision.train(data["dir"], m, epochs=EPOCHS, progress=stop_at_3, **TINY)
    assert (m / "checkpoint.safetensors").is_file() and not (m / "model.safetensors").exists()
    seen = []
    resumed = vision.train(data["dir"], m, epochs=EPOCHS, resume=True, progress=seen.append, **TINY)
    assert [p["step"] for p in seen] == list(range(4, STEPS + 1))
    assert resumed["steps"] == STEPS and resumed["validation_accuracy"] == result["validation_accuracy"]
    # the checkpoint holds the weights, the AdamW moments and the step: the same model
    test = data["test"][0]
    np.testing.assert_array_equal(vision.Classifier(m).predict_proba(test),
                                  vision.Classifier(out).predict_proba(test))

    s = vision.train(data["dir"], tmp_path / "s", epochs=EPOCHS, stop_at=2, **TINY)
    assert s["interrupted"] is True and s["steps"] == 2 and "test_accuracy" not in s
    assert set(s) == RESULT_KEYS - {"test_accuracy"}
    assert not (tmp_path / "s" / "model.safetensors").exists()


_CTRL_C = """
import os, signal, sys, threading, qkv
threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
try:
    qkv.vision.train(sys.argv[1], sys.argv[2], epochs=10_000, **{tiny!r})
except KeyboardInterrupt:
    sys.exit(42)
"""


def test_ctrl_c_stops_training_with_a_checkpoint(data, tmp_path):
    """SIGINT while the loop runs (its GIL released, no progress callback): the relay runs
    Python's handlers between steps, the loop stops and writes its checkpoint, and
    KeyboardInterrupt propagates — in a child process, long before 10,000 epochs end."""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(qkv.__file__))))
    r = subprocess.run([sys.executable, "-c", _CTRL_C.format(tiny=TINY), str(data["dir"]), str(tmp_path / "m")],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 42, r.stderr
    assert (tmp_path / "m" / "checkpoint.safetensors").is_file()
    assert not (tmp_path / "m" / "model.safetensors").exists()


# ---------------------------------------------------------------------------------------
# A trained model.

def test_classify_equals_the_cli(trained, data):
    out, _, _ = trained
    c = vision.Classifier(out)
    pixels, labels = data["test"]
    path = data["dir"] / "t10k-images-idx3-ubyte.gz"
    cli = [json.loads(line) for line in run_qkv("classify", "--model", out, "--images", path, "--json").splitlines()]
    got = c.classify(pixels)  # in the CLI's batches of 256
    assert len(got) == len(cli) == 60
    for i, (g, want) in enumerate(zip(got, cli)):
        assert set(g) == {"label", "class", "score"}
        assert (g["label"], g["class"]) == (want["label"], want["class"]), i
        assert abs(g["score"] - want["score"]) <= 5e-7 + 1e-12, i  # the CLI rounds to 6 decimals
    probs = c.predict_proba(pixels)
    assert probs.dtype == np.float32 and probs.shape == (60, 10)
    # a softmax row: each term rounded to float32 (relative u = 2⁻²⁴) and summed in double
    np.testing.assert_allclose(probs.sum(axis=1, dtype=np.float64), 1, rtol=0, atol=10 * 2.0 ** -24)
    np.testing.assert_array_equal(probs.argmax(axis=1), [g["label"] for g in got])
    np.testing.assert_array_equal(probs.max(axis=1), np.array([g["score"] for g in got], dtype=np.float32))
    np.testing.assert_array_equal(c.predict(pixels), probs.argmax(axis=1))
    # batches of 7 (the last one short): the same up to float32 rounding, which the matrix
    # products' blocking over B may order differently (probabilities ~0.1: a few ulps)
    np.testing.assert_allclose(c.predict_proba(pixels, batch=7), probs, rtol=0, atol=1e-6)
    # one image (H, W): one result without the batch dimension; a torch uint8 tensor alike
    assert c.classify(pixels[5]) == got[5] and c.predict(pixels[5]) == got[5]["label"]
    # (exactly as a batch of that one image; against the batch of 60, within the rounding above)
    np.testing.assert_array_equal(c.predict_proba(pixels[5]), c.predict_proba(pixels[5:6])[0])
    np.testing.assert_allclose(c.predict_proba(pixels[5]), probs[5], rtol=0, atol=1e-6)
    torch = pytest.importorskip("torch")
    np.testing.assert_array_equal(c.predict_proba(torch.from_numpy(pixels[:3])), c.predict_proba(pixels[:3]))
    # the images read back from the file are the ones written
    np.testing.assert_array_equal(vision.read_images(path), pixels)
    np.testing.assert_array_equal(vision.read_labels(data["dir"] / "t10k-labels-idx1-ubyte.gz", 60), labels)


def test_tta_averages_an_image_and_its_mirror_as_the_cli_does(trained, data):
    out, _, _ = trained
    c = vision.Classifier(out)
    pixels, _ = data["test"]
    mirror = np.ascontiguousarray(pixels[:, :, ::-1])
    plain, plain_mirror = c.predict_proba(pixels), c.predict_proba(mirror)
    got = c.predict_proba(pixels, tta=True)
    np.testing.assert_allclose(got, (plain + plain_mirror) / 2, rtol=0, atol=1e-7)
    assert not np.array_equal(got, plain)  # the model tells images from their mirrors
    np.testing.assert_array_equal(c.predict_proba(mirror, tta=True), got)
    np.testing.assert_array_equal(c.predict(pixels, tta=np.True_), got.argmax(axis=1))
    path = data["dir"] / "t10k-images-idx3-ubyte.gz"
    cli = [json.loads(line) for line in
           run_qkv("classify", "--model", out, "--images", path, "--json", "--tta").splitlines()]
    assert [g["label"] for g in c.classify(pixels, tta=True)] == [g["label"] for g in cli]
    np.testing.assert_allclose([g["score"] for g in cli], got.max(axis=1), rtol=0, atol=5e-7 + 1e-12)
    with pytest.raises(TypeError, match="classify: tta: must be a bool, got str"):
        c.predict(pixels, tta="yes")


def test_rollout_equals_the_cli_page(trained, data, tmp_path):
    out, _, _ = trained
    c = vision.Classifier(out)
    pixels = data["test"][0]
    page = tmp_path / "page.html"
    run_qkv("classify", "--model", out, "--images", data["dir"] / "t10k-images-idx3-ubyte.gz", "--html", page,
            "--html-images", 3)
    text = page.read_text()
    shown = json.loads(re.search(r'id="qkv-image-data">(.*?)</script>', text, re.S).group(1))["images"]
    assert len(shown) == 3
    for i, im in enumerate(shown):
        r = c.rollout(pixels, i)
        assert r.dtype == np.float32 and r.shape == (4, 4)
        assert 0 < r.sum() <= 1 + 16 * 2.0 ** -24 and np.all(r >= 0)
        # the page prints 6 significant digits: relative error ≤ 5e-6
        np.testing.assert_allclose(r.ravel(), im["heat"], rtol=1e-5, atol=0)
        np.testing.assert_array_equal(c.rollout(pixels[i]), r)  # one image (H, W)
    assert not np.array_equal(c.rollout(pixels, 0), c.rollout(pixels, 1))


# ---------------------------------------------------------------------------------------
# The data and the batches.

def test_load_fashion_mnist_is_the_split_of_the_files(data):
    d = vision.load_fashion_mnist(data["dir"])
    pixels, labels = data["train"]
    for part, rows in (("train", slice(0, 300)), ("validation", slice(300, 5300))):
        assert d[part]["images"].dtype == np.uint8 and d[part]["labels"].dtype == np.int64
        np.testing.assert_array_equal(d[part]["images"], pixels[rows])
        np.testing.assert_array_equal(d[part]["labels"], labels[rows])
    np.testing.assert_array_equal(d["test"]["images"], data["test"][0])
    assert vision.load_fashion_mnist(data["dir"], validation=5299)["train"]["labels"].shape == (1,)


def test_training_batches_are_an_epochs_shuffle(data):
    pixels, labels = data["train"][0][:130], data["train"][1][:130]
    b = vision.TrainingBatches(pixels, labels, batch=50, seed=4, pad=0, flip=False)
    assert b.steps_per_epoch == 3 == vision.steps_per_epoch(130, 50)
    seen = []
    for step, size in enumerate((50, 50, 30)):
        images, got_labels, indices = b.get(1, step)
        assert images.dtype == np.float32 and images.shape == (size, 1, 28, 28)
        assert got_labels.dtype == indices.dtype == np.int64 and indices.shape == (size,)
        np.testing.assert_array_equal(got_labels, labels[indices])
        # pad 0, no flip: the normalised images, bit for bit
        np.testing.assert_array_equal(images[:, 0], normalised(pixels[indices]))
        seen.extend(indices.tolist())
    assert sorted(seen) == list(range(130)) and seen != list(range(130))
    # a pure function of (seed, epoch, step): again the same, another epoch or seed another order
    np.testing.assert_array_equal(b.get(1, 0)[2], seen[:50])
    np.testing.assert_array_equal(vision.training_batch(pixels, labels, 4, 1, 0, batch=50, pad=0, flip=False)[2],
                                  seen[:50])
    assert not np.array_equal(b.get(2, 0)[2], seen[:50])
    assert not np.array_equal(vision.training_batch(pixels, labels, 5, 1, 0, batch=50)[2], seen[:50])
    # the augmentation only moves pixels: not the order
    np.testing.assert_array_equal(vision.training_batch(pixels, labels, 4, 1, 0, batch=50)[2], seen[:50])


def test_training_batch_augmentation_is_a_shift_and_a_flip(data):
    """Each augmented image is its source shifted by (dy, dx) in [-2, 2]² (black fill) and
    maybe flipped left-right — found by trying all 50 — and both kinds occur."""
    pixels, labels = data["train"][0][:64], data["train"][1][:64]
    images, _, indices = vision.training_batch(pixels, labels, seed=0, epoch=0, step=0, batch=64)
    padded = np.pad(normalised(pixels), ((0, 0), (2, 2), (2, 2)), constant_values=normalised(np.uint8(0)))
    found = []
    for b, i in enumerate(indices):
        matches = [(dy, dx, flip) for dy in range(-2, 3) for dx in range(-2, 3) for flip in (False, True)
                   if np.array_equal(images[b, 0], (lambda w: w[:, ::-1] if flip else w)(
                       padded[i, 2 + dy:30 + dy, 2 + dx:30 + dx]))]
        assert matches, f"image {b} (source {i}) is no shift or flip of its source"
        found.append(matches[0])
    assert {f for _, _, f in found} == {False, True}
    assert len({(dy, dx) for dy, dx, _ in found}) > 5


def test_training_batch_erasing_sets_one_rectangle_to_the_mean_pixel(data):
    """erase=1: each image is its erase=0 self except one rectangle of the normalised mean
    pixel (73), 2–40% of the image; the shifts and flips are the same. Bad erase refused."""
    pixels, labels = data["train"][0][:64], data["train"][1][:64]
    plain, _, idx = vision.training_batch(pixels, labels, seed=3, epoch=0, step=0, batch=64)
    erased, _, idx_e = vision.training_batch(pixels, labels, seed=3, epoch=0, step=0, batch=64, erase=1.0)
    np.testing.assert_array_equal(idx, idx_e)
    fill = normalised(np.uint8(73))
    assert abs(fill) < 1e-3
    for b in range(64):
        diff = erased[b, 0] != plain[b, 0]
        # the rectangle: the bounding box of the changed pixels, all of it the fill value
        ys, xs = np.nonzero(diff)
        assert len(ys) > 0 or np.all(plain[b, 0] == fill), f"image {b} not erased"
        y0, y1, x0, x1 = ys.min(), ys.max() + 1, xs.min(), xs.max() + 1
        assert np.all(erased[b, 0, y0:y1, x0:x1] == fill), f"image {b}: the erased area is not a filled rectangle"
        assert (y1 - y0) * (x1 - x0) <= 0.45 * 784, f"image {b}: erased {(y1 - y0) * (x1 - x0)} pixels"
    none, _, _ = vision.training_batch(pixels, labels, seed=3, epoch=0, step=0, batch=64, erase=0.0)
    np.testing.assert_array_equal(none, plain)
    with pytest.raises(ValueError, match=r"TrainingBatches: erase must be in \[0, 1\], got 1.5"):
        vision.TrainingBatches(pixels, labels, erase=1.5)
    with pytest.raises(TypeError, match="TrainingBatches: erase must be a float"):
        vision.TrainingBatches(pixels, labels, erase="0.5")
    with pytest.raises(TypeError, match="train point: unknown option erase"):  # vit's
        vision.train(data["dir"], "unused", model="point", erase=0.25)


def test_kept_is_the_patch_dropout_train_draws(data, tmp_path):
    """TrainingBatches.kept gives the patches train() keeps: two epochs of one step of 2
    images that keep 1 of their 16 patches each (patch dropout 0.95). The head starts at
    zero, so the first step moves only the head; the position rows the second step moves by
    about the learning rate are the class token's and those of the patches kept in the
    second epoch (epoch 1, counting from 0) alone (the others only decay, by lr · 0.05 of
    themselves). Then its shape, order, purity and errors."""
    pixels, labels = data["train"][0], data["train"][1]
    options = dict(TINY, batch=2, train_limit=2, seed=9)
    vision.train(data["dir"], tmp_path / "m", epochs=2, patch_dropout=0.95, **options)
    b = vision.TrainingBatches(pixels[:2], labels[:2], batch=2, seed=9)
    kept = b.kept(1, 0, 0.95, patch_size=7)
    assert kept.dtype == np.int64 and kept.shape == (2, 1)
    config = {"dim": 16, "layers": 1, "heads": 2, "mlp_dim": 32, "patch_size": 7}
    before = _qkv._vit_initial(config, 9)["pos_embed"]                            # (1 + 16, 16)
    after = read_safetensors(str(tmp_path / "m" / "checkpoint.safetensors"))["pos_embed"]
    moved = np.abs(after - before).max(axis=1) > TINY["lr"] / 2
    assert sorted(np.nonzero(moved)[0].tolist()) == sorted({0, *(1 + kept.ravel()).tolist()})

    b = vision.TrainingBatches(pixels[:130], labels[:130], batch=50, seed=4)
    kept = b.kept(1, 2, 0.75)                                # 49 patches of 4×4, keep 12
    assert kept.shape == (30, 12)
    assert all(list(row) == sorted(set(row)) and 0 <= row[0] and row[-1] < 49 for row in kept.tolist())
    np.testing.assert_array_equal(kept, b.kept(1, 2, 0.75))
    assert not np.array_equal(kept, b.kept(2, 2, 0.75)[:30])
    assert b.kept(0, 0, 0.0) is None and b.kept(0, 0, 0.75, patch_size=28) is None
    with pytest.raises(ValueError, match=r"TrainingBatches.kept: patch_dropout must be in \[0, 1\), got 1.0"):
        b.kept(0, 0, 1.0)
    with pytest.raises(ValueError, match="TrainingBatches.kept: patch_size 5 does not divide the 28×28 images"):
        b.kept(0, 0, 0.5, patch_size=5)
    with pytest.raises(ValueError, match=r"TrainingBatches.kept: step must be in \[0, 2\], got 3"):
        b.kept(0, 3, 0.5)


# ---------------------------------------------------------------------------------------
# Bad input.

def test_errors_name_what_was_wrong(trained, data, tmp_path):
    out, _, _ = trained
    c = vision.Classifier(out)
    pixels, labels = data["test"]
    d = data["dir"]
    # images: uint8 (N, H, W) or (H, W) of the model's size
    with pytest.raises(TypeError, match=r"classify: images must have dtype uint8.*got float32"):
        c.classify(pixels.astype(np.float32) / 255)
    with pytest.raises(TypeError, match="predict_proba: images must be a numpy.ndarray"):
        c.predict_proba(pixels.tolist())
    with pytest.raises(ValueError, match=r"must be \(N, H, W\) or one image \(H, W\), got shape \(1, 60, 28, 28\)"):
        c.classify(pixels[None])
    with pytest.raises(ValueError, match="the model takes 28x28 images, got 14x14"):
        c.classify(pixels[:, :14, :14])
    with pytest.raises(ValueError, match="index is required for 60 images"):
        c.rollout(pixels)
    with pytest.raises(ValueError, match=r"index must be in \[0, 59\], got 60"):
        c.rollout(pixels, 60)
    with pytest.raises(TypeError, match="classify: batch: must be an int, got float"):
        c.classify(pixels, batch=2.0)
    # the bindings check for themselves
    with pytest.raises(TypeError, match="classify: images: expected dtype uint8"):
        c._c.classify(pixels.astype(np.int16), 8)
    with pytest.raises(ValueError, match=r"rollout: images: expected \(N, H, W\), got shape \(28, 28\)"):
        c._c.rollout(pixels[0], 0)
    with pytest.raises(ValueError, match="rollout: image 60 outside"):
        c._c.rollout(pixels, 60)
    with pytest.raises(TypeError, match="train vit: epochs: must be an int, got str"):
        vision.train(d, tmp_path / "x", epochs="3")
    with pytest.raises(TypeError, match=r"train vit: unknown option epoch \(did you mean epochs\?\)"):
        vision.train(d, tmp_path / "x", epoch=3)
    with pytest.raises(ValueError, match=r"train vit: seed: must be an integer in \[0, 2\^64\), got -1"):
        vision.train(d, tmp_path / "x", seed=-1)
    with pytest.raises(TypeError, match="training batches: labels: expected an integer dtype"):
        _qkv._vision_training_batch(pixels, labels.astype(np.float64), 0, 0, 0, 8)
    # model directories
    with pytest.raises(ValueError, match="config.json"):
        vision.Classifier(tmp_path / "nowhere")
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text('{"model_type": "qkv-recommender"}')
    with pytest.raises(ValueError, match="not a qkv image classifier"):
        vision.Classifier(other)
    with pytest.raises(TypeError, match="Classifier: directory must be a str or os.PathLike, got int"):
        vision.Classifier(3)
    # training options
    with pytest.raises(ValueError, match="is not a directory"):
        vision.train(tmp_path / "nowhere", tmp_path / "x", **TINY)
    for kwargs, error, message in (
            (dict(epochs=0), ValueError, r"train vit: epochs: must be an integer in \[1, 100000\], got 0"),
            (dict(epochs=2.0), TypeError, "train vit: epochs: must be an int, got float"),
            (dict(patch_size=5), ValueError, r"train vit: patch_size: must divide 28 \(the images' side\), got 5"),
            (dict(heads=3), ValueError, "train vit: heads: 3 must divide --dim 16"),
            (dict(dim=18, heads=2, positions="sincos"), ValueError, "train vit: positions: sincos needs --dim a multiple of 4"),
            (dict(positions="rope"), ValueError, "train vit: positions: must be one of learned, sincos, got 'rope'"),
            (dict(shifted_patches="yes"), TypeError, "train vit: shifted_patches: must be a bool"),
            (dict(patch_size=1, shifted_patches=True), ValueError, r"train vit: shifted_patches: needs --patch-size >= 2"),
            (dict(lr=float("nan")), ValueError, r"train vit: lr: must be a finite number in \[1e-07, 1\], got nan"),
            (dict(label_smoothing=1.0), ValueError, r"train vit: label_smoothing: must be a finite number in \[0, 1\)"),
            (dict(resume=1), TypeError, "train vit: resume: must be a bool"),
            (dict(progress=3), TypeError, "train vit: progress must be callable or None, got int"),
    ):
        with pytest.raises(error, match=message):
            vision.train(d, tmp_path / "x", **{**TINY, **kwargs})
    with pytest.raises(ValueError, match="no checkpoint"):
        vision.train(d, tmp_path / "fresh", resume=True, **TINY)
    # files
    with pytest.raises(ValueError, match="holds 1 dimensions, images need 3"):
        vision.read_images(d / "t10k-labels-idx1-ubyte.gz")
    with pytest.raises(ValueError, match="images are 28x28, the model takes 14x14"):
        vision.read_images(d / "t10k-images-idx3-ubyte.gz", 14, 14)
    with pytest.raises(ValueError, match="60 labels for 59 images"):
        vision.read_labels(d / "t10k-labels-idx1-ubyte.gz", 59)
    with pytest.raises(ValueError, match="no-such"):
        vision.read_images(tmp_path / "no-such.idx")
    # batches
    with pytest.raises(TypeError, match="TrainingBatches: labels must have an integer dtype, got float64"):
        vision.TrainingBatches(pixels, labels.astype(np.float64))
    with pytest.raises(ValueError, match=r"labels must be \(60,\), one per image, got shape \(59,\)"):
        vision.TrainingBatches(pixels, labels[:59])
    with pytest.raises(TypeError, match="TrainingBatches: images must have dtype uint8"):
        vision.TrainingBatches(pixels.astype(np.float32), labels)
    with pytest.raises(ValueError, match=r"step must be in \[0, 1\], got 2"):
        vision.training_batch(pixels, labels, 0, 0, 2, batch=50)


# ---------------------------------------------------------------------------------------
# The point model.

POINT = dict(dim=16, layers=1, points=48, neighbors=6, batch=50, lr=1e-2, train_limit=200, checkpoint_every=0)


def test_point_model_trains_equals_the_cli_and_shows_its_points(data, tmp_path):
    out = tmp_path / "p"
    result = vision.train(data["dir"], out, model="point", epochs=EPOCHS, **POINT)
    assert set(result) == RESULT_KEYS and result["steps"] == STEPS
    c = vision.Classifier(out)
    assert c.model == "point"
    assert c.config == dict(points=48, patch_size=7, neighbors=6, dim=16, blocks=1, pos_mlp_hidden=16,
                            attn_mlp_hidden_mult=1, head_hidden=64, classes=10)
    assert result["num_parameters"] == sum(a.size for a in _qkv._pt_initial(c.config, 0).values())
    assert c.report["trained_with"].startswith("qkv.train('point'")
    line = run_qkv("train", "point", "--data", data["dir"], "--out", tmp_path / "cli",
                   "--epochs", EPOCHS, "--dim", 16, "--layers", 1, "--points", 48, "--neighbors", 6, "--batch", 50,
                   "--lr", 1e-2, "--train-limit", 200, "--checkpoint-every", 0, "--json", "--quiet")
    j = json.loads(line)
    for key in ("steps", "validation_accuracy", "best_epoch", "test_accuracy", "num_parameters"):
        assert j[key] == result[key], key
    test = data["test"][0]
    np.testing.assert_array_equal(vision.Classifier(tmp_path / "cli").predict_proba(test), c.predict_proba(test))

    # point_view against NumPy: the sampled points, their 6 nearest (self first, ties to the
    # lower index), softmax rows summing to 1, and the weight each point receives.
    v = c.point_view(test, 5)
    np.testing.assert_array_equal(v["points"], _qkv._pt_image_to_points(test[5], 48, 0, 0))
    xy = v["points"][:, :2].astype(np.float64)
    d = ((xy[:, None, :] - xy[None, :, :]) ** 2).sum(-1)
    # (distances, not indices: grid points tie, and float32 rounding may break a tie either way)
    chosen = np.take_along_axis(d, v["neighbors"], axis=1)
    np.testing.assert_allclose(np.sort(chosen, axis=1), np.sort(d, axis=1)[:, :6], atol=1e-6)
    np.testing.assert_array_equal(v["neighbors"][:, 0], np.arange(48))
    np.testing.assert_allclose(v["weights"].sum(1), 1, atol=1e-5)
    received = np.bincount(v["neighbors"].ravel(), weights=v["weights"].ravel(), minlength=48) / 48
    np.testing.assert_allclose(v["received"], received, atol=1e-6)
    with pytest.raises(ValueError, match="rollout is the ViT's"):
        c.rollout(test[0])
    with pytest.raises(ValueError, match="train point: neighbors: 9 exceeds --points 8"):
        vision.train(data["dir"], tmp_path / "x", model="point", points=8, neighbors=9)
    with pytest.raises(ValueError, match="train point: patch_size: must be odd"):
        vision.train(data["dir"], tmp_path / "x", model="point", patch_size=4)
    with pytest.raises(ValueError, match="model must be 'vit' or 'point'"):
        vision.train(data["dir"], tmp_path / "x", model="cnn")
