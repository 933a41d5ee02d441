"""qkv.models — Hugging Face checkpoint directories from Python: BERT, GPT-2, tokenizers.

>>> import qkv
>>> model = qkv.load_model("path/to/bert")           # config.json's model_type picks the class
>>> enc = model.tokenizer.encode("the cat sat")       # [CLS] ... [SEP]
>>> out = model([enc])                                # dict of (B, L, H), (B, H), ...
>>> gpt = qkv.load_model("path/to/gpt2")
>>> gpt.generate("the cat", max_new_tokens=10)        # list of generated ids

Inputs ids are (B, L) integer NumPy arrays, CPU torch tensors or lists of lists; results
are float32 NumPy arrays, or torch tensors when the ids were a torch tensor. Inference
only; the GIL is released during loading, forward passes and generation.
"""

import json
import operator
import os
import random

import numpy as np

from . import _int_list, _is_torch, _qkv, _torch_module

__all__ = ["load_model", "BertModel", "GPT2Model", "Tokenizer"]

_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json")


def _check_dir(directory, fn):
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        if not os.path.exists(directory):
            raise FileNotFoundError(f"{fn}: no such directory: '{directory}'")
        raise ValueError(f"{fn}: '{directory}' is not a directory")
    return directory


def _ids_2d(input_ids, fn, name):
    """(ndarray int64 (B, L), was_torch). A 1-d sequence is taken as one row (B = 1)."""
    was_torch = _is_torch(input_ids)
    if was_torch:
        input_ids = input_ids.detach().cpu().numpy()
    a = np.asarray(input_ids)
    if a.ndim == 1:
        a = a[np.newaxis]
    if a.ndim != 2:
        raise ValueError(f"{fn}: {name} must be (B, L) integers, got shape {a.shape}")
    if a.size and a.dtype.kind not in "iub":
        raise TypeError(f"{fn}: {name} must contain integers, got dtype {a.dtype}")
    return np.ascontiguousarray(a, dtype=np.int64), was_torch


def _as_output(tensor, torch_out):
    a = tensor.to_array()
    if torch_out:
        return _torch_module().from_numpy(a)
    return a


def _load_tokenizer(directory):
    if any(os.path.isfile(os.path.join(directory, f)) for f in _TOKENIZER_FILES):
        return Tokenizer.load(directory)
    return None


class Tokenizer:
    """A model directory's tokenizer: tokenizer.json if present, else vocab.txt (BERT
    WordPiece, lowercased) or vocab.json + merges.txt (GPT-2 byte-level BPE).

    kind: "wordpiece" or "bpe".
    """

    def __init__(self, impl):
        self._impl = impl

    @classmethod
    def load(cls, directory):
        directory = _check_dir(directory, "Tokenizer.load")
        return cls(_qkv._Tokenizer.load(directory))

    @property
    def kind(self):
        return self._impl.kind

    @property
    def vocab_size(self):
        return self._impl.vocab_size

    @property
    def eos_id(self):
        """BPE: the id of "<|endoftext|>" when the vocabulary has it; else None."""
        return self._impl.eos_id

    def encode(self, text):
        """WordPiece: [CLS] text [SEP]; BPE: the plain ids. -> list of ints."""
        return self._impl.encode(text)

    def encode_pair(self, a, b):
        """WordPiece only: [CLS] a [SEP] b [SEP] -> (ids, token_type_ids), lists of ints."""
        ids, types = self._impl.encode_pair(a, b)
        return ids, types

    def tokenize(self, text):
        """The vocabulary strings text encodes to (no [CLS]/[SEP])."""
        return self._impl.tokenize(text)

    def decode(self, ids):
        """WordPiece: tokens joined, "##" glued, special tokens skipped. BPE: the bytes the
        ids stand for, decoded as UTF-8 (invalid sequences replaced by U+FFFD)."""
        return self._impl.decode(_int_list(ids, "Tokenizer.decode", "ids"))

    def token_to_id(self, token):
        return self._impl.token_to_id(token)

    def id_to_token(self, id):
        return self._impl.id_to_token(operator.index(id))

    def __call__(self, text):
        return self.encode(text)

    def __repr__(self):
        return f"qkv.Tokenizer(kind={self.kind!r}, vocab_size={self.vocab_size})"


class _Model:
    """What both models share: the compiled model (`_native`'s load), its config as a
    dict, and the tokenizer found in the same directory (or None)."""

    _native = None  # the pybind11 class, set by each model

    def __init__(self, impl, tokenizer=None):
        self._impl = impl
        self.config = impl.config
        self.tokenizer = tokenizer

    @classmethod
    def load(cls, directory):
        directory = _check_dir(directory, f"{cls.__name__}.load")
        return cls(cls._native.load(directory), _load_tokenizer(directory))


class BertModel(_Model):
    """Hugging Face's BertModel (inference). Load with ``qkv.load_model(dir)`` or
    ``qkv.BertModel.load(dir)``.

    config: dict of the main config.json fields; tokenizer: qkv.Tokenizer or None.
    """

    _native = _qkv._BertModel

    def __call__(self, input_ids, token_type_ids=None, attention_mask=None,
                 output_attentions=False):
        """input_ids: (B, L) ints (a 1-d sequence is one row; outputs keep B = 1).
        token_type_ids: (B, L), default all 0. attention_mask: (B, L) of 1 (keep) / 0
        (padding), default all 1.

        -> {"last_hidden_state": (B, L, H), "pooler_output": (B, H) or None (checkpoint
        without a pooler), "attentions": list of per-layer (B, heads, L, L) when
        output_attentions else None}, float32, torch tensors when input_ids is one.
        """
        fn = "BertModel"
        ids, torch_out = _ids_2d(input_ids, fn, "input_ids")
        batch, length = ids.shape
        extra = []
        for name, value in (("token_type_ids", token_type_ids),
                            ("attention_mask", attention_mask)):
            if value is None:
                extra.append([])
                continue
            a, _ = _ids_2d(value, fn, name)
            if a.shape != ids.shape:
                raise ValueError(f"{fn}: {name} must have input_ids' shape {ids.shape}, "
                                 f"got {a.shape}")
            extra.append(a.ravel().tolist())
        hidden, pooled, attentions = self._impl.forward(
            ids.ravel().tolist(), batch, length, extra[0], extra[1], bool(output_attentions))
        return {
            "last_hidden_state": _as_output(hidden, torch_out),
            "pooler_output": None if pooled is None else _as_output(pooled, torch_out),
            "attentions": [_as_output(a, torch_out) for a in attentions]
            if output_attentions else None,
        }

    forward = __call__

    def __repr__(self):
        c = self.config
        return (f"qkv.BertModel(layers={c['num_hidden_layers']}, hidden={c['hidden_size']}, "
                f"heads={c['num_attention_heads']}, vocab={c['vocab_size']})")


class GPT2Model(_Model):
    """Hugging Face's GPT2LMHeadModel (inference, KV-cached generation). Load with
    ``qkv.load_model(dir)`` or ``qkv.GPT2Model.load(dir)``.

    config: dict of the main config.json fields; tokenizer: qkv.Tokenizer or None.
    """

    _native = _qkv._Gpt2Model

    @classmethod
    def load(cls, directory, weights="f32"):
        """weights: 'f32' (exact, the default) or 'bf16': the layer and LM-head products
        read bf16 weights (half the memory per decoded token) and round their inputs to
        bf16, accumulating in f32; logits move by ~1e-2. bf16 needs oneDNN's bf16 matmul
        on this CPU (AVX512-BF16 or AMX), else TypeError."""
        directory = _check_dir(directory, f"{cls.__name__}.load")
        if weights not in ("f32", "bf16"):
            raise ValueError(f"{cls.__name__}.load: weights must be 'f32' or 'bf16', got {weights!r}")
        return cls(cls._native.load(directory, weights), _load_tokenizer(directory))

    def __call__(self, input_ids):
        """Logits of every position, no cache, float32.

        input_ids 1-d (L) -> (L, V); 2-d (B, L) -> (B, L, V) (each row is run on its own:
        no padding, all rows of length L). torch tensors when input_ids is one.
        """
        fn = "GPT2Model"
        was_1d = (input_ids.dim() if _is_torch(input_ids) else np.ndim(input_ids)) == 1
        ids, torch_out = _ids_2d(input_ids, fn, "input_ids")
        rows = [self._impl.forward_full(row.tolist()).to_array() for row in ids]
        out = rows[0] if was_1d else np.stack(rows)
        return _torch_module().from_numpy(out) if torch_out else out

    forward = __call__

    def _eos(self, eos_token_id):
        if eos_token_id is not None:
            return None if eos_token_id is False else operator.index(eos_token_id)
        if self.tokenizer is not None and self.tokenizer.eos_id is not None:
            return self.tokenizer.eos_id
        return self.config["eos_token_id"]

    def generate(self, prompt, max_new_tokens=20, temperature=0.0, top_k=0, top_p=1.0,
                 seed=None, eos_token_id=None):
        """Up to max_new_tokens ids after prompt (a str, encoded with self.tokenizer, or a
        1-d sequence of ids), as a list of ints, prompt excluded.

        temperature 0 = greedy (top_k/top_p ignored); else Hugging Face's order:
        temperature, top-k (0 = off), top-p (nucleus). seed: int for reproducible sampling
        (None draws one from Python's random module). Generation stops after the
        end-of-text id (included): eos_token_id, else the tokenizer's "<|endoftext|>",
        else config.json's eos_token_id; pass eos_token_id=False never to stop early.
        """
        fn = "GPT2Model.generate"
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError(f"{fn}: a text prompt needs a tokenizer, and this model "
                                 f"directory has none; pass token ids")
            ids = self.tokenizer.encode(prompt)
        else:
            ids = _int_list(prompt, fn, "prompt")
        if seed is None:
            seed = random.getrandbits(64) if temperature else 0
        seed = operator.index(seed)
        if not 0 <= seed < (1 << 64):
            raise ValueError(f"{fn}: seed must be in [0, 2**64), got {seed}")
        return self._impl.generate(ids, operator.index(max_new_tokens), float(temperature),
                                   operator.index(top_k), float(top_p), seed,
                                   self._eos(eos_token_id))

    def __repr__(self):
        c = self.config
        return (f"qkv.GPT2Model(layers={c['n_layer']}, n_embd={c['n_embd']}, "
                f"heads={c['n_head']}, vocab={c['vocab_size']})")


_MODELS = {"bert": BertModel, "gpt2": GPT2Model}


def load_model(directory, weights="f32"):
    """A Hugging Face model directory (config.json + model.safetensors [+ tokenizer
    files]) as a qkv.BertModel or qkv.GPT2Model, chosen by config.json's model_type.
    weights: 'f32', or 'bf16' for GPT-2's products (see GPT2Model.load).

    Raises FileNotFoundError for a missing directory or config.json, ValueError for an
    unknown model_type (naming it) or a bad checkpoint.
    """
    fn = "load_model"
    directory = _check_dir(directory, fn)
    config_path = os.path.join(directory, "config.json")
    if not os.path.isfile(config_path):
        raise FileNotFoundError(f"{fn}: no config.json in '{directory}'")
    try:
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
    except ValueError as e:
        raise ValueError(f"{fn}: malformed JSON in '{config_path}': {e}") from None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    cls = _MODELS.get(model_type)
    if cls is None:
        raise ValueError(f"{fn}: unsupported model_type {model_type!r} in '{config_path}'; "
                         f"expected one of {', '.join(repr(k) for k in _MODELS)}")
    if cls is GPT2Model:
        return cls.load(directory, weights)
    if weights != "f32":
        raise ValueError(f"{fn}: weights={weights!r} is supported for GPT-2 only; "
                         f"'{directory}' holds a {model_type} model (use 'f32')")
    return cls.load(directory)


def translate_dates(dates, model=None):
    """Dates written by people -> ISO 8601 strings, as `qkv translate` does.

    dates: a string or a list of strings ("Saturday, 21 November 2026", "21.11.2026",
    "二〇二六年十一月二十一日", ...). model: a directory written by `qkv train dates`;
    None uses the date translator embedded in qkv. Returns a string for a string, else a
    list. Empty or over-long inputs and invalid text raise ValueError naming the input.
    """
    single = isinstance(dates, str)
    texts = [dates] if single else list(dates)
    if not all(isinstance(t, str) for t in texts):
        raise TypeError("translate_dates: dates must be a string or a list of strings")
    seq2seq = (_qkv._embedded_date_model() if model is None
               else _qkv._Seq2Seq.load(_check_dir(model, "translate_dates")))
    out = _qkv._dates_translate(seq2seq, texts)
    return out[0] if single else out
