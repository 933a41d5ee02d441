"""qkv — Transformer attention on the CPU, exact against PyTorch.

The functions take NumPy arrays or CPU ``torch.Tensor`` s and give back the same kind:

>>> import numpy as np, qkv
>>> q = k = v = np.random.default_rng(0).standard_normal((1, 2, 5, 8), dtype=np.float32)
>>> qkv.scaled_dot_product_attention(q, k, v, is_causal=True).shape
(1, 2, 5, 8)

Inputs
    * NumPy ``float32`` arrays are read in place, whatever their strides (a (B, L, H, D)
      projection transposed to (B, H, L, D) is not copied); arrays with negative strides,
      a foreign byte order or unaligned data are copied first.
    * NumPy ``float64``: when query, key and value all are float64, the attention
      functions compute in double end to end (the reference implementation; impl="fast"
      instead rounds the inputs to float32 once and computes in float32); the layers of
      qkv.nn round float64 to float32. The result is float64 either way
      (``out.dtype == query.dtype``); ``float16`` is computed as f16.
    * CPU ``torch.Tensor`` s of ``float32``, ``float16`` and ``bfloat16`` (and ``float64``,
      as above) are read in place. When one of query, key or value requires grad (and
      grad mode is on), ``scaled_dot_product_attention`` records itself on torch's
      autograd tape (``qkv.torch.AttentionFunction``: ``.backward()`` runs qkv's
      backward); the other functions read the values and record nothing. CUDA
      ``torch.Tensor`` s (bf16/f16, 4-d) of ``scaled_dot_product_attention`` go to the
      GPU kernels (``qkv.cuda``, through libqkv_cuda.so; not on the autograd tape: one
      that requires grad raises ValueError); tensors on other devices raise ValueError.
    * ``bool`` is accepted for ``attn_mask`` only. Any other dtype raises TypeError
      naming the argument and the dtype.

The result is a ``torch.Tensor`` when ``query`` is one, else a NumPy array; the output has
``query``'s dtype; log-sum-exp and probabilities are float32, or float64 when computed
in double.

Errors: bad shapes, options and values raise ValueError; bad dtypes and arguments of the
wrong type TypeError (as PyTorch: a bool is not accepted where an int is expected, nor an
int where a bool is; a float argument takes any real number, but not a string); memory that
cannot be had MemoryError. The message names the argument.

torch is never imported by qkv: it is used only when a tensor is passed in, which means
it has already been imported.
"""

import math
import numbers
import operator
import os
import random
import sys

import numpy as np

from . import _qkv

__version__ = _qkv.__version__

__all__ = [
    "scaled_dot_product_attention",
    "attention_weights",
    "attention_backward",
    "self_attention_raw",
    "cpu_summary",
    "set_num_threads",
    "get_num_threads",
    "storage_cache_limit",
    "set_storage_cache_limit",
    "cached_storage_bytes",
    "release_cached_storage",
    "memory_limit",
    "set_memory_limit",
    "__version__",
    "MultiheadAttention",
    "TransformerEncoderLayer",
    "TransformerDecoderLayer",
    "Transformer",
    "load_model",
    "heads",
    "translate_dates",
    "train",
    "options",
    "train_lm",
    "train_dates",
    "BertModel",
    "GPT2Model",
    "DateTranslator",
    "UseLiteModel",
    "SearchIndex",
    "search",
    "Tokenizer",
]

_ALIGNMENTS = ("top_left", "bottom_right")
_IMPLS = ("automatic", "reference", "fast")
_SEED_LIMIT = 1 << 64  # seeds are uint64 on the C++ side


def cpu_summary():
    """One line: the CPU's brand and the instruction-set features qkv detected and
    dispatches on (AVX2, FMA, F16C, AVX-512 ..., AMX)."""
    return _qkv.cpu_summary()


def set_num_threads(n):
    """Set the number of threads qkv's parallel loops use (``n >= 1``, else ValueError;
    TypeError for anything but an int).

    Results are bitwise identical for every thread count (dropout included)."""
    n = _int(n, "set_num_threads", "n")
    if not 1 <= n <= 1 << 20:
        raise ValueError(f"set_num_threads: n must be in [1, {1 << 20}], got {n}")
    return _qkv.set_num_threads(n)


def get_num_threads():
    """The number of threads qkv uses: the last ``set_num_threads``, else the environment
    variable ``QKV_NUM_THREADS``, else ``OMP_NUM_THREADS``, else the CPUs this process may
    run on. Importing torch first does not change it (torch lowers OpenMP's own default).
    With one thread per CPU (the default), OpenMP's worker threads are pinned one per CPU,
    never the calling thread; ``QKV_BIND_THREADS=0`` or an OpenMP binding variable
    (``OMP_PROC_BIND``, ``OMP_PLACES``) turns that off."""
    return _qkv.get_num_threads()


def storage_cache_limit():
    """How many bytes of freed tensor memory qkv keeps for reuse (256 MiB unless the
    environment variable ``QKV_STORAGE_CACHE_MB`` or ``set_storage_cache_limit`` says
    otherwise). Blocks of 128 KiB and more that qkv's results free (when their arrays are
    deleted) are kept and handed to the next result of about the same size, so that a
    loop of calls does not fault the same pages in again, as glibc's malloc would make it."""
    return _qkv._storage_cache_limit()


def set_storage_cache_limit(nbytes):
    """Set the cache's capacity in bytes (0 turns it off); cached blocks beyond it are
    freed now. ValueError for a negative size, TypeError for a non-integer."""
    n = _int(nbytes, "set_storage_cache_limit", "nbytes")
    if not 0 <= n < 1 << 64:
        raise ValueError(f"set_storage_cache_limit: nbytes must be in [0, 2**64), got {n}")
    _qkv._set_storage_cache_limit(n)


def cached_storage_bytes():
    """Bytes of freed tensor memory the cache holds now (no array uses them)."""
    return _qkv._cached_storage_bytes()


def release_cached_storage():
    """Give every cached block back to the system allocator, as
    ``torch.cuda.empty_cache()`` does for PyTorch's GPU cache."""
    _qkv._release_cached_storage()


def memory_limit():
    """The most bytes one call may allocate (its outputs, scratch and temporary copies, added
    up before anything is allocated; beyond it the call raises MemoryError naming the bytes
    and what they were for). Default: 80% of the least of physical memory, the cgroup's
    memory limit and the address-space limit (``ulimit -v``); the environment variable
    ``QKV_MEMORY_LIMIT`` (bytes, or with a suffix K, M, G or T: "8G") or
    ``set_memory_limit`` replaces it."""
    return _qkv._memory_limit()


def set_memory_limit(nbytes):
    """Set the memory limit in bytes (>= 1); None goes back to ``QKV_MEMORY_LIMIT`` or the
    default. ValueError for a size below 1, TypeError for a non-integer."""
    if nbytes is None:
        _qkv._set_memory_limit(None)
        return
    try:
        n = operator.index(nbytes)
    except TypeError:
        raise TypeError(f"set_memory_limit: nbytes must be an int or None, got {nbytes!r}") from None
    if n < 1 or n >= 1 << 64:
        raise ValueError(f"set_memory_limit: nbytes must be in [1, 2^64), got {n}")
    _qkv._set_memory_limit(n)


# --------------------------------------------------------------------------------------
# Conversions between the caller's arrays and the C++ views.


def _torch_module():
    return sys.modules.get("torch")


def _is_torch(x):
    torch = _torch_module()
    return torch is not None and isinstance(x, torch.Tensor)


class _Converted:
    """One input as the C++ side sees it.

    tensor:  the _qkv._Tensor view (keeps the NumPy array, and so the torch storage, alive)
    source:  "torch" or "numpy"
    dtype:   the caller's dtype (numpy.dtype or torch.dtype), to give results back in it
    """

    __slots__ = ("tensor", "source", "dtype", "ndim", "shape")

    def __init__(self, tensor, source, dtype, ndim, shape):
        self.tensor = tensor
        self.source = source
        self.dtype = dtype
        self.ndim = ndim
        self.shape = shape


def _dtype_error(fn, name, dtype, allow_bool):
    accepted = "float32, float16, bfloat16 or float64"
    if allow_bool:
        accepted += ", or bool"
    return TypeError(f"{fn}: {name} has unsupported dtype {dtype}; expected {accepted}")


def _array_from_torch(x, fn, name, allow_bool, keep_f64=False):
    """(ndarray, bf16_bits) sharing memory with the CPU tensor x where possible.
    float64 stays float64 with keep_f64 (the reference attention computes it in double),
    else it becomes float32."""
    torch = _torch_module()
    if x.device.type != "cpu":
        raise ValueError(f"{fn}: {name} must be a CPU tensor, got device '{x.device}'")
    if x.layout != torch.strided:
        raise ValueError(f"{fn}: {name} must be a dense (strided) tensor, got layout {x.layout}")
    # qkv records no autograd graph: reading the values is what is asked. resolve_neg
    # materializes a lazily negated view (torch's neg bit), which .numpy() cannot share.
    x = x.detach().resolve_neg()
    if x.dtype == torch.bfloat16:
        # NumPy has no bfloat16: the bits travel as int16 (same strides, no copy).
        return x.view(torch.int16).numpy(), True
    if x.dtype in (torch.float32, torch.float16):
        return x.numpy(), False
    if x.dtype == torch.float64:
        return (x.numpy() if keep_f64 else x.to(torch.float32).numpy()), False
    if allow_bool and x.dtype == torch.bool:
        return x.numpy(), False
    raise _dtype_error(fn, name, x.dtype, allow_bool)


def _check_array_like(x, fn, name):
    """TypeError for what is no array at all (None, a string, a mapping, a set): np.asarray
    would make a 0-d object or string array of it, and the error would be about shapes."""
    if x is None or isinstance(x, (str, bytes, dict, set, frozenset)):
        raise TypeError(f"{fn}: {name} must be an array (numpy.ndarray or torch.Tensor), "
                        f"got {_describe(x)}")


def _asarray(x, fn, name):
    """np.asarray(x), with a ragged nesting a ValueError naming the argument and memory
    that cannot be had a MemoryError naming it."""
    try:
        return np.asarray(x)
    except MemoryError as e:
        raise MemoryError(f"{fn}: converting {name} to an array: {e}") from None
    except ValueError as e:
        raise ValueError(f"{fn}: {name} is not a rectangular array: {e}") from None


def _array_from_other(x, fn, name, allow_bool, keep_f64=False):
    """(ndarray, False) for NumPy arrays and anything np.asarray accepts (float64 kept
    with keep_f64, else float32)."""
    _check_array_like(x, fn, name)
    a = _asarray(x, fn, name)
    dt = a.dtype
    if dt.kind == "f" and dt.itemsize == 8:
        if not keep_f64:
            a = a.astype(np.float32)
    elif dt.kind == "f" and dt.itemsize in (4, 2):
        pass
    elif allow_bool and dt.kind == "b":
        pass
    else:
        raise _dtype_error(fn, name, dt, allow_bool)
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    # qkv::Tensor strides are non-negative element counts; copy anything else.
    if not a.flags.aligned or any(s < 0 or s % a.itemsize for s in a.strides):
        a = np.array(a, order="C", copy=True)  # a fresh allocation is aligned
    return a, False


def _convert(x, fn, name, allow_bool=False, keep_f64=False):
    if _is_torch(x):
        array, bf16 = _array_from_torch(x, fn, name, allow_bool, keep_f64)
        source, dtype = "torch", x.dtype
    else:
        array, bf16 = _array_from_other(x, fn, name, allow_bool, keep_f64)
        source, dtype = "numpy", getattr(x, "dtype", array.dtype)
        if not isinstance(dtype, np.dtype):
            dtype = array.dtype
    return _Converted(None, source, dtype, array.ndim, array.shape), array, bf16


def _is_f64(x):
    """Whether x is a float64 NumPy array or torch tensor (a list has no dtype of its own:
    it is read as float32, as before)."""
    torch = _torch_module()
    if torch is not None and isinstance(x, torch.Tensor):
        return x.dtype == torch.float64
    return isinstance(x, np.ndarray) and x.dtype.kind == "f" and x.dtype.itemsize == 8


def _keeps_f64(impl, *tensors):
    """float64 is computed in double end to end by impl "reference" and "automatic" when
    query, key and value all are float64; anything else is computed in float32 as before."""
    return impl != "fast" and all(_is_f64(t) for t in tensors)


def _widened(x):
    """x as float64 (exact from float32/16), for dout, out and lse of a float64 backward.
    Only floating tensors and arrays are widened: anything else goes on as it is, to be
    refused by _view naming the argument (None, a bool array) or read as it would be."""
    if _is_f64(x):
        return x
    torch = _torch_module()
    if torch is not None and isinstance(x, torch.Tensor):
        return x.detach().to(torch.float64) if x.is_floating_point() else x
    if isinstance(x, np.ndarray) and x.dtype.kind == "f":
        return x.astype(np.float64)
    return x


def _view(x, fn, name, allow_bool=False, add_batch=False, keep_f64=False):
    """The _Converted description of x with its C++ view; add_batch prepends a size-1 dim."""
    converted, array, bf16 = _convert(x, fn, name, allow_bool, keep_f64)
    if add_batch:
        array = array[np.newaxis]
    converted.tensor = _qkv._Tensor.from_array(array, name, bf16)
    return converted


def _result(array, like, drop_batch):
    """A C++ result (NumPy array, bf16 as int16 bits) as the caller's kind of array.

    like: the _Converted query, whose kind (torch or NumPy) and dtype the output takes;
          None keeps the C++ dtype (used for lse and probs, always float32).
    """
    if array is None:
        return None
    if drop_batch:
        array = array[0]
    torch = _torch_module()
    bf16_bits = array.dtype == np.int16
    if like is not None and like.source == "torch" and torch is not None:
        t = torch.from_numpy(array)
        if bf16_bits:
            t = t.view(torch.bfloat16)
        if like.dtype == torch.float64:
            t = t.to(torch.float64)
        return t
    if bf16_bits:  # cannot happen for NumPy callers; widen rather than return raw bits
        array = (array.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    if like is not None and like.dtype == np.float64:
        array = array.astype(np.float64)
    return array


# --------------------------------------------------------------------------------------
# Arguments: types checked as PyTorch's argument parser does, each error naming the
# argument. bool is a subclass of int in Python, but torch refuses it where an int is
# expected (and an int where a bool is); a float parameter takes any real number.


def _describe(value):
    """'str '0.5''-style: the type and a short repr, for messages."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def _is_bool(value):
    return isinstance(value, (bool, np.bool_))


def _bool(value, fn, name):
    """A flag: bool or numpy.bool_ (a 0-d bool tensor too); anything else is TypeError."""
    if _is_bool(value):
        return bool(value)
    if _is_torch(value) and value.dim() == 0 and value.dtype == _torch_module().bool:
        return bool(value.item())
    raise TypeError(f"{fn}: {name} must be a bool, got {_describe(value)}")


def _int(value, fn, name):
    """An int (or anything with __index__: NumPy integers, 0-d integer tensors); bool and
    float are TypeError."""
    if _is_bool(value) or (_is_torch(value) and value.dtype == _torch_module().bool):
        raise TypeError(f"{fn}: {name} must be an int, got {_describe(value)}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{fn}: {name} must be an int, got {_describe(value)}") from None


def _float(value, fn, name, what="a float"):
    """A real number as a Python float: int, float, bool (torch takes it), NumPy scalars,
    0-d real arrays and tensors. Strings, complex numbers and the rest are TypeError."""
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "biuf":
        return float(value)
    if (_is_torch(value) and value.dim() == 0 and not value.is_complex()
            and value.layout == _torch_module().strided):
        return float(value.item())
    raise TypeError(f"{fn}: {name} must be {what}, got {_describe(value)}")


def _ranged(value, fn, name, low, high):
    """An int (as _int) in [low, high]; outside is ValueError."""
    value = _int(value, fn, name)
    if not low <= value <= high:
        raise ValueError(f"{fn}: {name} must be in [{low}, {high}], got {value}")
    return value


def _path(value, fn, name):
    """A file or directory argument: str or os.PathLike (TypeError otherwise), non-empty
    and without NUL (ValueError), as a str."""
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{fn}: {name} must be a str or os.PathLike, got {_describe(value)}")
    value = os.fspath(value)
    if isinstance(value, bytes) or not value or "\0" in value:
        raise ValueError(f"{fn}: {name} must be a non-empty str path, got {value!r}")
    return value


# The longest text a Python entry takes, in bytes of UTF-8: the qkv CLI's limit of a line
# (kMaxLineBytes, src/io/text_input.h), so that a text one refuses the other refuses too.
_MAX_TEXT_BYTES = _qkv._max_text_bytes


def _text(value, fn, name):
    """A text argument: a str (TypeError otherwise) that is valid Unicode (ValueError for a
    lone surrogate, which has no UTF-8 and which pybind11 would refuse with "incompatible
    function arguments", naming its position) and at most _MAX_TEXT_BYTES bytes of UTF-8
    (ValueError naming the limit). The one check of every text that goes to C++."""
    if not isinstance(value, str):
        raise TypeError(f"{fn}: {name} must be a str, got {_describe(value)}")
    limit = f"the limit of {_MAX_TEXT_BYTES} bytes (1 MiB) of UTF-8 per text, as the qkv CLI's"
    if len(value) > _MAX_TEXT_BYTES:  # each character is at least a byte: no need to encode
        raise ValueError(f"{fn}: {name} has {len(value)} characters, over {limit}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as e:  # lone surrogates (U+D800..U+DFFF) cannot become UTF-8
        raise ValueError(f"{fn}: {name} is not valid Unicode text: a lone surrogate "
                         f"U+{ord(value[e.start]):04X} at index {e.start} (UTF-8 cannot encode "
                         f"it)") from None
    if size > _MAX_TEXT_BYTES:
        raise ValueError(f"{fn}: {name} is {size} bytes of UTF-8, over {limit}")
    return value


def _optional_float(value, fn, name):
    if value is None:
        return None
    return _float(value, fn, name, "a float or None")


def _choice(value, fn, name, choices):
    """One of the strings `choices`: TypeError for a non-string, ValueError for another one."""
    listed = ", ".join(repr(c) for c in choices)
    if not isinstance(value, str):
        raise TypeError(f"{fn}: {name} must be a string, one of {listed}, got {_describe(value)}")
    if value not in choices:
        raise ValueError(f"{fn}: {name} must be one of {listed}, got {value!r}")
    return value


def _torch_values(x, fn, name):
    """A torch tensor's values on the CPU, detached: ValueError naming the argument for a
    tensor without values (the 'meta' device) or one that cannot be copied to the CPU,
    instead of torch's own message."""
    if x.device.type == "meta":
        raise ValueError(f"{fn}: {name} is a tensor on the 'meta' device, which has a shape "
                         f"but no values; pass a CPU tensor")
    if x.layout != _torch_module().strided:
        raise ValueError(f"{fn}: {name} must be a dense (strided) tensor, got layout {x.layout}")
    try:
        return x.detach().cpu()
    except (RuntimeError, NotImplementedError) as e:
        raise ValueError(f"{fn}: {name} cannot be copied to the CPU (device '{x.device}'): "
                         f"{e}") from None


def _sequence_array(values, fn, name, kind):
    """values as a 1-d NumPy array (TypeError for a scalar, a string or a mapping:
    np.asarray would take them as 0-d arrays)."""
    if _is_torch(values):
        values = _torch_values(values, fn, name).numpy()
    if isinstance(values, (str, bytes, dict)) or np.ndim(values) == 0:
        raise TypeError(f"{fn}: {name} must be a 1-d sequence of {kind}, got {_describe(values)}")
    try:
        a = np.asarray(values)
    except (ValueError, TypeError) as e:  # ragged nesting
        raise ValueError(f"{fn}: {name} must be a 1-d sequence of {kind}: {e}") from None
    if a.ndim != 1:
        raise ValueError(f"{fn}: {name} must be a 1-d sequence of {kind}, got shape {a.shape}")
    return a


def _int_list(values, fn, name):
    """A list of Python ints from a sequence, NumPy array or torch tensor of integers."""
    a = _sequence_array(values, fn, name, "ints")
    if a.size and a.dtype.kind == "O":
        # Python ints beyond int64 make an object array: range, not type, is what is wrong.
        for x in a.tolist():
            if _is_bool(x) or not isinstance(x, numbers.Integral):
                raise TypeError(f"{fn}: {name} must contain integers, got {_describe(x)}")
    elif a.size and a.dtype.kind not in "iu":
        raise TypeError(f"{fn}: {name} must contain integers, got dtype {a.dtype}")
    out = [int(x) for x in a.tolist()]
    for x in out:
        if x < -(1 << 63) or x >= (1 << 63):
            raise ValueError(f"{fn}: {name} values must fit in int64, got {x}")
    return out


def _float_list(values, fn, name):
    if values is None:
        return []
    if _is_torch(values):
        values = _torch_values(values, fn, name).to(_torch_module().float64).numpy()
    a = _sequence_array(values, fn, name, "floats")
    if a.size and a.dtype.kind not in "fiu":
        raise TypeError(f"{fn}: {name} must contain real numbers, got dtype {a.dtype}")
    return [float(x) for x in a.tolist()]


def _window(window, fn):
    """(left, right) with -1 for an unbounded side, or None for no window."""
    if window is None:
        return None
    if isinstance(window, (str, bytes, dict)) or not hasattr(window, "__iter__"):
        raise TypeError(
            f"{fn}: window must be a (left, right) pair of ints (None or -1 = unbounded), "
            f"got {_describe(window)}")
    try:
        left, right = window
    except (TypeError, ValueError):
        raise ValueError(
            f"{fn}: window must be a (left, right) pair of ints (None or -1 = unbounded), "
            f"got {window!r}") from None
    sides = []
    for side, value in (("left", left), ("right", right)):
        if value is None:
            sides.append(-1)
            continue
        if _is_bool(value):
            raise TypeError(f"{fn}: window {side} must be an int or None, got {_describe(value)}")
        try:
            sides.append(operator.index(value))
        except TypeError:
            raise TypeError(f"{fn}: window {side} must be an int or None, got {value!r}") from None
    if any(s < -(1 << 63) or s >= (1 << 63) for s in sides):
        raise ValueError(f"{fn}: window values must fit in int64, got {window!r}")
    return tuple(sides)


def _alignment(causal_alignment, fn):
    return _choice(causal_alignment, fn, "causal_alignment", _ALIGNMENTS)


def _impl(impl, fn):
    return _choice(impl, fn, "impl", _IMPLS)


def _seed(seed, dropout_p, fn):
    """The dropout seed: the caller's, else (only when dropout is on) one drawn from
    Python's `random` module, so random.seed(n) makes an unseeded call reproducible."""
    if seed is None:
        return random.getrandbits(64) if dropout_p > 0.0 else 0
    seed = _int(seed, fn, "seed")
    if not 0 <= seed < _SEED_LIMIT:
        raise ValueError(f"{fn}: seed must be in [0, 2**64), got {seed}")
    return seed


def _dropout(dropout_p, fn):
    p = _float(dropout_p, fn, "dropout_p")
    if not 0.0 <= p <= 1.0:  # also rejects NaN
        raise ValueError(f"{fn}: dropout_p must be in [0, 1], got {dropout_p!r}")
    return p


def _inputs(fn, query, key, value, enable_gqa, keep_f64=False):
    """Views of query, key and value as 4-d (B, H, L, D), checked for what the C++ side
    cannot see (rank, enable_gqa). Returns (q, k, v, add_batch); add_batch is True for
    3-d (H, L, D) inputs, which gain a batch dimension of 1."""
    for name, x in (("query", query), ("key", key), ("value", value)):
        _check_array_like(x, fn, name)
    # (A list's rank, read as np.asarray would; the list itself goes on to _view.)
    qnd = query.dim() if _is_torch(query) else _asarray(query, fn, "query").ndim
    if qnd not in (3, 4):
        shape = tuple(query.shape) if hasattr(query, "shape") else np.shape(query)
        raise ValueError(
            f"{fn}: query must be 4-d (B, Hq, Lq, Dk) or 3-d (Hq, Lq, Dk), "
            f"got {qnd}-d shape {shape}")
    add_batch = qnd == 3
    q = _view(query, fn, "query", add_batch=add_batch, keep_f64=keep_f64)
    k = _view(key, fn, "key", add_batch=add_batch, keep_f64=keep_f64)
    v = _view(value, fn, "value", add_batch=add_batch, keep_f64=keep_f64)
    for name, c in (("key", k), ("value", v)):
        if c.ndim != qnd:
            raise ValueError(
                f"{fn}: {name} must have query's rank {qnd} ({'(B, H, L, D)' if qnd == 4 else '(H, L, D)'}), "
                f"got {c.ndim}-d shape {tuple(c.shape)}")
    if not _bool(enable_gqa, fn, "enable_gqa") and (k.shape[-3] != q.shape[-3]
                                                    or v.shape[-3] != q.shape[-3]):
        raise ValueError(
            f"{fn}: key/value heads (Hkv = {k.shape[-3]}, {v.shape[-3]}) differ from query heads "
            f"(Hq = {q.shape[-3]}); pass enable_gqa=True for grouped-query attention "
            f"(Hq must then be a multiple of Hkv)")
    return q, k, v, add_batch


def _options(fn, attn_mask, dropout_p, is_causal, scale, causal_alignment, key_lengths, window,
             alibi_slopes, softcap, seed, impl, keep_f64=False):
    """The keyword arguments _qkv._attention and _qkv._attention_backward share."""
    mask = None
    if attn_mask is not None:
        mask = _view(attn_mask, fn, "attn_mask", allow_bool=True, keep_f64=keep_f64).tensor
    p = _dropout(dropout_p, fn)
    return dict(
        mask=mask,
        scale=_optional_float(scale, fn, "scale"),
        causal=_bool(is_causal, fn, "is_causal"),
        alignment=_alignment(causal_alignment, fn),
        key_lengths=[] if key_lengths is None else _int_list(key_lengths, fn, "key_lengths"),
        window=_window(window, fn),
        alibi_slopes=_float_list(alibi_slopes, fn, "alibi_slopes"),
        softcap=_optional_float(softcap, fn, "softcap"),
        dropout_p=p,
        seed=_seed(seed, p, fn),
        impl=_impl(impl, fn),
    )


def _run(fn, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
         causal_alignment, key_lengths, window, alibi_slopes, softcap, seed,
         return_lse, return_probs, impl):
    """Converts, checks what the C++ side cannot see, calls _qkv._attention.

    Returns (out, lse, probs) in the caller's kind of array (lse/probs None unless asked).
    """
    keep_f64 = _keeps_f64(impl, query, key, value)
    q, k, v, add_batch = _inputs(fn, query, key, value, enable_gqa, keep_f64)
    options = _options(fn, attn_mask, dropout_p, is_causal, scale, causal_alignment,
                       key_lengths, window, alibi_slopes, softcap, seed, impl, keep_f64)
    out, lse, probs = _qkv._attention(q.tensor, k.tensor, v.tensor, return_lse=return_lse,
                                      return_probs=return_probs, **options)
    lse = _result(lse, None, add_batch)
    probs = _result(probs, None, add_batch)
    if q.source == "torch":  # lse and probs follow the query's kind (float32)
        torch = _torch_module()
        lse = torch.from_numpy(lse) if lse is not None else None
        probs = torch.from_numpy(probs) if probs is not None else None
    return _result(out, q, add_batch), lse, probs


def _gradient(array, like, drop_batch):
    """A float32 gradient from C++ in the kind and dtype of the input it belongs to (as
    autograd gives gradients: same dtype as the tensor)."""
    if drop_batch:
        array = array[0]
    torch = _torch_module()
    if like.source == "torch" and torch is not None:
        return torch.from_numpy(array).to(like.dtype)
    return array.astype(like.dtype, copy=False)


def _records_gradient(*tensors):
    """Whether torch's autograd is recording and one of the tensors requires grad: then
    scaled_dot_product_attention goes through qkv.torch.AttentionFunction."""
    torch = _torch_module()
    return (torch is not None and torch.is_grad_enabled()
            and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors))


# --------------------------------------------------------------------------------------
# The public functions.


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False, *,
                                 causal_alignment="top_left", key_lengths=None, window=None,
                                 alibi_slopes=None, softcap=None, seed=None, return_lse=False,
                                 impl="automatic"):
    """softmax(scale · query · keyᵀ + bias, masked) · value — PyTorch 2.x's
    ``torch.nn.functional.scaled_dot_product_attention``, plus the masks and biases of
    FlashAttention-style kernels.

    Shapes (B batch, Hq/Hkv heads, Lq/Lk lengths, Dk/Dv head sizes)::

        query (B, Hq, Lq, Dk)   key (B, Hkv, Lk, Dk)   value (B, Hkv, Lk, Dv)
        -> out (B, Hq, Lq, Dv)  [lse (B, Hq, Lq) float32 (float64 for float64 inputs)
                                 with return_lse=True]

    3-d inputs (H, L, D) are accepted too (as PyTorch does); the result is then 3-d.

    Args (the first eight as PyTorch 2.x):
        attn_mask: broadcastable to (B, Hq, Lq, Lk) with NumPy's rules, e.g. (Lq, Lk),
            (B, 1, Lq, Lk), (1, Hq, Lq, Lk). bool: True = attend (PyTorch 2.x polarity);
            float: added to the scores (-inf masks). May be combined with is_causal
            (both apply; PyTorch forbids this).
        dropout_p: in [0, 1]. Each probability is kept with probability 1 - p and scaled
            by 1/(1 - p); which ones is a pure function of (seed, b, h, i, j).
        is_causal: keep key j for query i only when j <= i' (see causal_alignment).
        scale: default 1/sqrt(Dk); must be finite.
        enable_gqa: allow Hq != Hkv (Hq a multiple of Hkv; query head h reads key/value
            head h // (Hq // Hkv), as repeat_interleave). Without it Hq != Hkv is a
            ValueError, as in PyTorch.

    Keyword-only extensions:
        causal_alignment: "top_left" (PyTorch's is_causal: i' = i) or "bottom_right"
            (FlashAttention, KV caches: i' = i + Lk_b - Lq, the last query sees every
            key), where Lk_b = key_lengths[b] or Lk. Also the diagonal of `window`.
        key_lengths: B ints in [0, Lk]; keys j >= key_lengths[b] are padding (masked).
        window: (left, right): keep i' - left <= j <= i' + right; None or -1 leaves a
            side unbounded.
        alibi_slopes: Hq floats; adds -slope[h] · |i' - j| to the scores.
        softcap: c > 0; scores become c · tanh(s / c) (before ALiBi and the mask).
        seed: int in [0, 2**64) for dropout. When dropout_p > 0 and seed is None, a seed
            is drawn with ``random.getrandbits(64)`` (Python's ``random`` module: call
            ``random.seed(n)`` for reproducible unseeded calls).
        return_lse: also return the log-sum-exp of the scores over the kept keys
            (before dropout), float32 (B, Hq, Lq); float64 when computed in double.
        impl: "automatic" (default: the fastest implementation for the request; for
            float64 inputs the reference, which computes in double), "fast" (the fused
            tiled kernel: float32 accumulation, instruction set chosen at run time or by
            the environment variable QKV_ISA) or "reference" (the naive double-precision
            twin the fast one is tested against).

    Scores are built in this order: s = scale·q·k; softcap; ALiBi; + float mask; every
    masked position (causal, window, key length, bool mask) -inf. A fully masked row
    gives output 0 (not NaN) and lse -inf.

    Returns:
        out, or (out, lse) with return_lse=True. out has query's dtype and kind (torch
        tensor or NumPy array).

    Raises:
        ValueError for shapes, options and values; TypeError for dtypes. Messages name
        the argument.
    """
    fn = "scaled_dot_product_attention"
    return_lse = _bool(return_lse, fn, "return_lse")
    if _records_gradient(query, key, value):
        from . import torch as qkv_torch  # imports torch, which the caller already has
        return qkv_torch.scaled_dot_product_attention(
            query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
            causal_alignment=causal_alignment, key_lengths=key_lengths, window=window,
            alibi_slopes=alibi_slopes, softcap=softcap, seed=seed, return_lse=return_lse,
            impl=impl)
    if getattr(query, "is_cuda", False):
        # CUDA torch tensors: the GPU kernels (qkv/cuda.py, through libqkv_cuda.so's C ABI).
        if attn_mask is not None or dropout_p:
            raise ValueError(f"{fn}: attn_mask and dropout_p are not supported for CUDA "
                             "tensors (use is_causal, window or key_lengths)")
        if query.dim() != 4:
            raise ValueError(f"{fn}: CUDA tensors must be 4-d (B, H, L, D), got {query.dim()}-d")
        if key.shape[1] != query.shape[1] and not enable_gqa:
            raise ValueError(f"{fn}: Hq != Hkv needs enable_gqa=True")
        from . import cuda
        return cuda.attention(query, key, value, scale=scale, is_causal=is_causal,
                              causal_alignment=causal_alignment, window=window,
                              key_lengths=key_lengths, alibi_slopes=alibi_slopes,
                              softcap=softcap, return_lse=return_lse)
    out, lse, _ = _run(fn, query, key, value, attn_mask, dropout_p, is_causal, scale,
                       enable_gqa, causal_alignment, key_lengths, window, alibi_slopes,
                       softcap, seed, return_lse, False, impl)
    return (out, lse) if return_lse else out


def attention_weights(query, key, value, attn_mask=None, is_causal=False, scale=None,
                      enable_gqa=False, *, causal_alignment="top_left", key_lengths=None,
                      window=None, alibi_slopes=None, softcap=None, impl="automatic"):
    """The attention probabilities softmax(scores) that scaled_dot_product_attention
    applies to value (no dropout): float32 (B, Hq, Lq, Lk), or (Hq, Lq, Lk) for 3-d
    inputs — what an attention heatmap shows.

    Arguments and semantics are those of scaled_dot_product_attention. Each row sums to
    1, or is all 0 when every key is masked for that query. The probabilities always
    come from the reference implementation (the fused kernel never forms them), so
    `impl` changes nothing here; it is accepted for symmetry.
    """
    fn = "attention_weights"
    _, _, probs = _run(fn, query, key, value, attn_mask, 0.0, is_causal, scale, enable_gqa,
                       causal_alignment, key_lengths, window, alibi_slopes, softcap, None,
                       False, True, impl)
    return probs


def attention_backward(dout, query, key, value, out, lse, attn_mask=None, dropout_p=0.0,
                       is_causal=False, scale=None, enable_gqa=False, *,
                       causal_alignment="top_left", key_lengths=None, window=None,
                       alibi_slopes=None, softcap=None, seed=None, impl="automatic"):
    """The gradients of scaled_dot_product_attention with respect to query, key and value.

    ``out, lse = scaled_dot_product_attention(query, key, value, ..., return_lse=True)``
    then ``dq, dk, dv = attention_backward(dout, query, key, value, out, lse, ...)``
    with the same arguments (masks, options, and the same ``seed`` when dropout_p > 0:
    the dropout pattern is regenerated from it, not stored).

    Shapes::

        dout (B, Hq, Lq, Dv) = ∂loss/∂out     out (B, Hq, Lq, Dv)   lse (B, Hq, Lq)
        -> dq (B, Hq, Lq, Dk), dk (B, Hkv, Lk, Dk), dv (B, Hkv, Lk, Dv)

    (3-d inputs without the batch dimension, as the forward.) Under GQA dk and dv sum
    over the query heads that share each key/value head. The probabilities are
    recomputed tile by tile from lse (FlashAttention-2's backward): nothing of size
    Lq × Lk is stored. A fully masked row contributes nothing (zero gradients).
    attn_mask and alibi_slopes are constants: no gradient is returned for them.

    The gradients come back in the kind (torch tensor or NumPy array) and dtype of
    query, key and value respectively; they are computed in float32 (impl="fast" or
    "automatic") or double (impl="reference", the naive twin, rounded to float32), and in
    double end to end when query, key and value are float64 (impl other than "fast";
    dout, out and lse are then read as float64).

    Raises:
        ValueError for shapes (dout and out must have the output's shape, lse
        (B, Hq, Lq)), options, and dropout_p > 0 without a seed; TypeError for dtypes
        (lse must be float32, or float64 for float64 inputs). Messages name the argument.
    """
    fn = "attention_backward"
    if seed is None and _dropout(dropout_p, fn) > 0.0:
        raise ValueError(f"{fn}: seed must be given when dropout_p > 0 (the forward's seed: "
                         f"the dropout pattern is regenerated from it)")
    keep_f64 = _keeps_f64(impl, query, key, value)
    if keep_f64:  # the C++ side takes float64 all the way or not at all
        dout, out, lse = _widened(dout), _widened(out), _widened(lse)
    q, k, v, add_batch = _inputs(fn, query, key, value, enable_gqa, keep_f64)
    dout_view = _view(dout, fn, "dout", add_batch=add_batch, keep_f64=keep_f64)
    out_view = _view(out, fn, "out", add_batch=add_batch, keep_f64=keep_f64)
    lse_view = _view(lse, fn, "lse", add_batch=add_batch, keep_f64=keep_f64)
    options = _options(fn, attn_mask, dropout_p, is_causal, scale, causal_alignment,
                       key_lengths, window, alibi_slopes, softcap, seed, impl, keep_f64)
    dq, dk, dv = _qkv._attention_backward(dout_view.tensor, q.tensor, k.tensor, v.tensor,
                                          out_view.tensor, lse_view.tensor, **options)
    return (_gradient(dq, q, add_batch), _gradient(dk, k, add_batch),
            _gradient(dv, v, add_batch))


def self_attention_raw(x, scale=1.0):
    """The raw self-attention of the classic explanations: softmax(scale · x · xᵀ) · x,
    with no projections.

    x: (L, D) or (B, L, D), float32/float16/bfloat16 (float64 is computed in float32);
    the result has x's shape, dtype and kind. scale defaults to 1 (no scaling, as the
    explanations write it); None means 1/sqrt(D).
    """
    fn = "self_attention_raw"
    c = _view(x, fn, "x", keep_f64=_is_f64(x))
    out = _qkv._self_attention_raw(c.tensor, _optional_float(scale, fn, "scale"))
    return _result(out, c, False)
from .nn import MultiheadAttention, TransformerEncoderLayer, TransformerDecoderLayer, Transformer  # noqa: E402
from .models import (load_model, heads, translate_dates, train_lm, train_dates, BertModel, GPT2Model,  # noqa: E402
                     UseLiteModel, DateTranslator, SearchIndex, search, Tokenizer)
from .training import train, options  # noqa: E402
from . import recommender, vision  # noqa: E402,F401
