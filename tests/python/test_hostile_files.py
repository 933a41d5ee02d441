"""Model directories and vocabularies that are wrong, as Python sees them: clear errors
(ValueError naming the file, tensor or entry), a warning for tensors the model does not
use (as Hugging Face warns), MemoryError for allocations that fail, never a crash.
"""

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import qkv
from test_bert import CONFIG as BERT_CONFIG
from test_bert import hf_weights, write_checkpoint as write_bert, write_safetensors


def bert_dir(tmp_path, name="bert", extra=None, edit=None, config=None):
    d = tmp_path / name
    write_bert(str(d), config=config)
    if extra or edit:
        tensors = dict(hf_weights(0))
        if edit:
            edit(tensors)
        tensors.update(extra or {})
        write_safetensors(str(d / "model.safetensors"), tensors)
    return d


def test_unused_tensors_are_a_warning_naming_them(tmp_path):
    d = bert_dir(tmp_path, extra={"classifier.weight": np.zeros((2, 16), np.float32),
                                  "classifier.bias": np.zeros(2, np.float32)})
    with pytest.warns(UserWarning, match=r"BertModel: 2 tensor\(s\) of the checkpoint in .* "
                                         r"classifier\.bias, classifier\.weight") as record:
        model = qkv.load_model(d)
    # The warning points at the caller's line, not into qkv.
    assert record[0].filename == __file__
    assert isinstance(model, qkv.BertModel)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a checkpoint with nothing extra loads silently
        qkv.load_model(bert_dir(tmp_path, "plain"))


def test_extra_layers_and_non_finite_weights_are_errors(tmp_path):
    layers = BERT_CONFIG["num_hidden_layers"]
    extra = {f"encoder.layer.{layers}.output.dense.bias": np.zeros(16, np.float32)}
    with pytest.raises(ValueError, match=rf"of block {layers}, but config.json's "
                                         rf"num_hidden_layers = {layers}"):
        qkv.load_model(bert_dir(tmp_path, "extra", extra=extra))

    def poison(tensors):
        tensors["encoder.layer.0.attention.self.query.weight"][1, 2] = np.nan

    with pytest.raises(ValueError, match=r"'encoder.layer.0.attention.self.query.weight' holds "
                                         r"NaN at index \[1, 2\]"):
        qkv.load_model(bert_dir(tmp_path, "nan", edit=poison))


def test_zero_layers_and_a_bin_checkpoint_are_explained(tmp_path):
    config = dict(BERT_CONFIG, num_hidden_layers=0)
    with pytest.raises(ValueError, match=r'"num_hidden_layers" must be an integer in '
                                         r"\[1, 2147483647\], got 0"):
        qkv.load_model(bert_dir(tmp_path, "zero", config=config))
    d = bert_dir(tmp_path, "torch")
    os.rename(d / "model.safetensors", d / "pytorch_model.bin")
    with pytest.raises(ValueError, match=r"PyTorch weights \(pytorch_model.bin\).*save_pretrained"):
        qkv.load_model(d)


def test_a_tokenizer_larger_than_the_model_vocabulary(tmp_path):
    d = bert_dir(tmp_path)
    with open(d / "vocab.txt", "a") as f:
        f.write("".join(f"extra{i}\n" for i in range(BERT_CONFIG["vocab_size"])))
    with pytest.raises(ValueError, match=r"the tokenizer in .* has \d+ tokens but the model's "
                                         r"vocab_size is \d+"):
        qkv.load_model(d)


def test_vocabulary_ids_are_checked_before_allocating(tmp_path):
    """An id of 1e9 in vocab.json once asked for 32 GB (std::bad_alloc)."""
    (tmp_path / "vocab.json").write_text(json.dumps({"a": 0, "b": 1_000_000_000}))
    (tmp_path / "merges.txt").write_text("#version: 0.2\n")
    with pytest.raises(ValueError, match=r'the id of "b" is 1000000000; the vocabulary\'s 2 '
                                         r"tokens must have the ids 0..1"):
        qkv.Tokenizer.load(tmp_path)


def test_an_undecodable_file_name_in_a_message_still_raises(tmp_path):
    """Messages may quote names that are not UTF-8; the translator must not lose the error."""
    d = bert_dir(tmp_path)
    os.remove(d / "model.safetensors")
    with open(os.path.join(os.fsencode(d), b"\xffweights.bin"), "wb") as f:
        f.write(b"PK")
    with pytest.raises(ValueError, match=r"PyTorch weights \(\\xffweights.bin\)"):
        qkv.load_model(d)


def test_allocation_failures_are_memory_errors_naming_the_call():
    """Under an address-space limit, a container allocation that fails inside qkv
    (std::bad_alloc) arrives as MemoryError saying which call and on how much input."""
    code = r"""
import resource, sys
import qkv
tok = qkv.Tokenizer.load(sys.argv[1])
tok.encode("warm up")
# The longest text Python takes (1 MiB of UTF-8, the CLI's limit per line too): the
# tokenizer holds 4 bytes per character and more, so 1 MiB of room is too little.
text = "a" * qkv._qkv._max_text_bytes
with open("/proc/self/status") as f:
    vm = next(int(l.split()[1]) for l in f if l.startswith("VmSize:")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 20), resource.RLIM_INFINITY))
try:
    tok.encode(text)
except MemoryError as e:
    print("MemoryError:", e)
"""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        write_bert(d)
        env = dict(os.environ, OMP_NUM_THREADS="1", QKV_NUM_THREADS="1")
        run = subprocess.run([sys.executable, "-c", code, d], capture_output=True, text=True,
                             timeout=120, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "MemoryError: Tokenizer.encode of a text of 1048576 bytes: out of memory" in run.stdout, \
        run.stdout + run.stderr[-2000:]
