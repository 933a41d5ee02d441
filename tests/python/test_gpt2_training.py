"""The GPT-2 language model qkv trains (`qkv train lm`, qkv.train_lm) against torch autograd.

The torch twin is scripts/bench/gpt2_torch.py's TorchGpt2LM, written from Hugging Face's
published architecture: the loss and every gradient of qkv's backward (gpt2_lm_loss)
agree with it in float64, and a few training steps of qkv.train_lm (same initial weights,
same windows, AdamW, clipping, schedule) give the same losses as train_twin. Also:
GPT2Model.score against the twin's loss, and what train_lm refuses.
"""
import json
import os
import sys

import numpy as np
import pytest
import torch

import qkv
from qkv import _qkv

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
from bench.gpt2_torch import gpt2_directory, make_lm_class, train_twin  # noqa: E402

TorchGpt2LM = make_lm_class()

TEXT = "".join(f"Mr. Speaker, the state of our Union is strong, and {n} of us know it.\n"
               for n in range(60))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny model trained 6 steps by qkv (so biases and gains are no longer 0 and 1)."""
    root = tmp_path_factory.mktemp("lm")
    text = root / "text.txt"
    text.write_text(TEXT)
    out = root / "model"
    losses = []
    result = qkv.train_lm(text, out, vocab_size=300, layers=2, embd=16, heads=2, context=12,
                          steps=6, batch=3, warmup=2, eval_every=0, seed=4,
                          progress=lambda info: losses.append(info["loss"]))
    return {"root": root, "text": str(text), "out": str(out), "result": result, "losses": losses}


def test_loss_and_every_gradient_match_torch(trained):
    config, weights = gpt2_directory(trained["out"])
    tok = qkv.Tokenizer.load(trained["out"])
    stream = _qkv._lm_tokens(tok._impl, TEXT)
    windows = np.array([stream[o:o + 13] for o in (0, 7, 40)], dtype=np.int64)  # (3, T + 1)
    loss, grads = _qkv._gpt2_lm_loss(trained["out"], windows, True)

    twin = TorchGpt2LM(config, weights).double()
    want = twin.loss(torch.from_numpy(windows))
    want.backward()
    assert loss == pytest.approx(want.item(), rel=1e-5)
    got_names = {name[len("transformer."):] for name in grads}
    assert got_names == set(twin.weights())
    for name, p in twin.weights().items():
        g = grads["transformer." + name]
        scale = p.grad.abs().max().item()
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=0, atol=1e-4 * scale + 1e-7,
                                   err_msg=name)


def test_training_steps_match_the_torch_twin(trained):
    """Same initial weights (Gpt2Weights::initialized of the same config and seed), same
    windows (lm_batch_offsets), same optimizer: the losses of every step agree."""
    with open(os.path.join(trained["out"], "config.json")) as f:
        config_json = f.read()
    initial = trained["root"] / "initial"
    _qkv._gpt2_initial(str(initial), config_json, 4)
    config, weights = gpt2_directory(str(initial))
    twin = TorchGpt2LM(config, weights)
    tok = qkv.Tokenizer.load(trained["out"])
    stream = torch.tensor(_qkv._lm_tokens(tok._impl, TEXT))
    offsets = lambda step: _qkv._lm_batch_offsets(4, step, 3, 12, len(stream))  # noqa: E731
    losses = []
    train_twin(twin, stream, offsets, steps=6, batch=3, context=12, lr=1e-3, warmup=2,
               on_step=lambda step, loss: losses.append(loss))
    assert len(trained["losses"]) == 6
    np.testing.assert_allclose(trained["losses"], losses, rtol=2e-4)
    # and the weights after those steps
    _, final = gpt2_directory(trained["out"])
    for name, p in twin.weights().items():
        np.testing.assert_allclose(final[name].numpy(), p.detach().numpy(), rtol=0,
                                   atol=2e-5, err_msg=name)


def test_score_matches_the_twin(trained):
    model = qkv.load_model(trained["out"])
    text = "the state of our Union"
    s = model.score(text)
    config, weights = gpt2_directory(trained["out"])
    ids = _qkv._lm_tokens(model.tokenizer._impl, text)
    assert len(ids) <= config["n_positions"]  # one window
    want = TorchGpt2LM(config, weights).double().loss(torch.tensor([ids])).item()
    assert s["tokens"] == len(ids) - 1
    assert s["bytes"] == len(text.encode())
    assert s["loss"] == pytest.approx(want, rel=1e-5)
    assert s["bits_per_byte"] == pytest.approx(want * (len(ids) - 1) / np.log(2) / len(text), rel=1e-5)
    long = model.score(TEXT[:400], stride=3)
    assert long["stride"] == 3 and long["windows"] > 1
    with pytest.raises(ValueError, match="stride"):
        model.score(text, stride=12)
    with pytest.raises(ValueError, match="empty"):
        model.score("")
    with pytest.raises(TypeError):
        model.score(b"bytes")


def test_progress_exception_stops_after_a_checkpoint(trained, tmp_path):
    def stop(info):
        if info["step"] == 2:
            raise RuntimeError("enough")

    out = tmp_path / "stopped"
    with pytest.raises(RuntimeError, match="enough"):
        qkv.train_lm(trained["text"], out, vocab_size=300, layers=1, embd=8, heads=2,
                     context=8, steps=5, batch=2, eval_every=0, progress=stop)
    assert (out / "checkpoint.safetensors").exists()
    r = qkv.train_lm(trained["text"], out, vocab_size=300, layers=1, embd=8, heads=2,
                     context=8, steps=5, batch=2, eval_every=0, resume=True)
    assert r["steps"] == 5 and not r["interrupted"]
    assert isinstance(qkv.load_model(out), qkv.GPT2Model)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"vocab_size": 100}, ValueError, "vocab_size"),
    ({"heads": 3}, ValueError, "divide"),
    ({"n_head": 4}, TypeError, "n_head is now heads"),
    ({"lr": float("nan")}, ValueError, "lr"),
    ({"steps": 0}, ValueError, "steps"),
    ({"progress": 5}, TypeError, "progress"),
    ({"context": "12"}, TypeError, "context"),
])
def test_bad_arguments_are_named(trained, tmp_path, kwargs, error, match):
    with pytest.raises(error, match=match):
        qkv.train_lm(trained["text"], tmp_path / "m", **kwargs)


def test_bad_files_are_named(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty"):
        qkv.train_lm(empty, tmp_path / "m")
    short = tmp_path / "short.txt"
    short.write_text("Hi.")
    with pytest.raises(ValueError, match="one training window"):
        qkv.train_lm(short, tmp_path / "m", vocab_size=260, context=16, embd=8, heads=2)
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"ab\0cd\n")
    with pytest.raises(ValueError):
        qkv.train_lm(binary, tmp_path / "m")
