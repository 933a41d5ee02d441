"""qkv's CUDA forward for CUDA ``torch.Tensor`` s, through libqkv_cuda.so's C ABI.

Not through the pybind module: the C ABI (src/attention/cuda/capi.h) has no Python or
C++ ABI in it, so one libqkv_cuda.so serves any Python and any torch. This file imports
nothing of qkv, so it also works alone (``importlib`` from its path), as
scripts/cuda/check_torch.py loads it on a GPU machine.

The library is found at ``QKV_CUDA_LIBRARY`` when set, else next to this file, else in the
build directories of the repository (build/libqkv_cuda.so, .device/libqkv_cuda.so).

>>> out = qkv.cuda.attention(q, k, v, is_causal=True)           # doctest: +SKIP
>>> out, lse = qkv.cuda.attention(q, k, v, return_lse=True)     # doctest: +SKIP
"""

import ctypes
import math
import os

__all__ = ["attention", "attention_backward", "available", "library_path"]

_ABI_VERSION = 1


class _ForwardArgs(ctypes.Structure):
    # Field by field as struct qkv_cuda_forward_args (capi.h).
    _fields_ = [
        ("dtype", ctypes.c_int64),
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("out", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),
        ("q_strides", ctypes.c_int64 * 3),
        ("k_strides", ctypes.c_int64 * 3),
        ("v_strides", ctypes.c_int64 * 3),
        ("out_strides", ctypes.c_int64 * 3),
        ("B", ctypes.c_int64),
        ("Hq", ctypes.c_int64),
        ("Hkv", ctypes.c_int64),
        ("Lq", ctypes.c_int64),
        ("Lk", ctypes.c_int64),
        ("D", ctypes.c_int64),
        ("scale", ctypes.c_double),
        ("causal", ctypes.c_int64),
        ("bottom_right", ctypes.c_int64),
        ("window_left", ctypes.c_int64),
        ("window_right", ctypes.c_int64),
        ("key_lengths", ctypes.c_void_p),
        ("alibi_slopes", ctypes.c_void_p),
        ("softcap", ctypes.c_double),
        ("splits", ctypes.c_int64),
        ("stream", ctypes.c_void_p),
    ]



class _BackwardArgs(ctypes.Structure):
    # Field by field as struct qkv_cuda_backward_args (capi.h).
    _fields_ = [
        ("forward", _ForwardArgs),
        ("dout", ctypes.c_void_p),
        ("dout_strides", ctypes.c_int64 * 3),
        ("dq", ctypes.c_void_p),
        ("dk", ctypes.c_void_p),
        ("dv", ctypes.c_void_p),
    ]


_library = None


def library_path():
    """Where libqkv_cuda.so is looked for first (it may not exist)."""
    if os.environ.get("QKV_CUDA_LIBRARY"):
        return os.environ["QKV_CUDA_LIBRARY"]
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.path.join(here, "libqkv_cuda.so")]
    root = os.path.dirname(os.path.dirname(here))  # python/qkv/cuda.py -> the repository
    for folder in ("build", ".device", os.path.join(".device", "build")):
        candidates.append(os.path.join(root, folder, "libqkv_cuda.so"))
    for c in candidates:
        if os.path.exists(c):
            return c
    return candidates[0]


def _lib():
    global _library
    if _library is None:
        path = library_path()
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise RuntimeError(f"qkv.cuda: cannot load {path} ({e}); build it (cmake target "
                               "qkv_cuda_capi) or set QKV_CUDA_LIBRARY") from e
        lib.qkv_cuda_abi_version.restype = ctypes.c_int
        lib.qkv_cuda_available.restype = ctypes.c_int
        lib.qkv_cuda_available.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.qkv_cuda_attention_forward.restype = ctypes.c_int
        lib.qkv_cuda_attention_forward.argtypes = [ctypes.POINTER(_ForwardArgs), ctypes.c_char_p,
                                                   ctypes.c_size_t]
        lib.qkv_cuda_attention_backward.restype = ctypes.c_int
        lib.qkv_cuda_attention_backward.argtypes = [ctypes.POINTER(_BackwardArgs), ctypes.c_char_p,
                                                    ctypes.c_size_t]
        version = lib.qkv_cuda_abi_version()
        if version != _ABI_VERSION:
            raise RuntimeError(f"qkv.cuda: {path} has ABI version {version}, expected {_ABI_VERSION}")
        _library = lib
    return _library


def available():
    """(True, "") when the library loads and sees a usable GPU, else (False, why)."""
    try:
        lib = _lib()
    except RuntimeError as e:
        return False, str(e)
    reason = ctypes.create_string_buffer(512)
    ok = lib.qkv_cuda_available(reason, len(reason))
    return bool(ok), reason.value.decode(errors="replace")


def _strides(t, name):
    if t.stride(-1) != 1:
        raise ValueError(f"qkv.cuda.attention: {name}'s last dimension must be contiguous, "
                         f"got strides {tuple(t.stride())}")
    return (ctypes.c_int64 * 3)(t.stride(0), t.stride(1), t.stride(2))


def _aligned(t):
    # The kernels copy 16-byte chunks: pointer and strides must be multiples of 8 elements.
    return (t.stride(-1) == 1 and t.data_ptr() % 16 == 0
            and all(s % 8 == 0 for s in t.stride()[:3]))


def _check_inputs(fn, tensors, dtype=None):
    import torch

    for name, t in tensors:
        if not isinstance(t, torch.Tensor) or not t.is_cuda:
            raise ValueError(f"qkv.cuda.{fn}: {name} must be a CUDA torch.Tensor")
        if t.dim() != 4:
            raise ValueError(f"qkv.cuda.{fn}: {name} must be 4-d (B, H, L, D), got {t.dim()}-d")
    query = tensors[0][1]
    if query.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"qkv.cuda.{fn}: query must be bfloat16 or float16, got {query.dtype}")
    for name, t in tensors[1:]:
        if t.dtype != query.dtype:
            raise TypeError(f"qkv.cuda.{fn}: {name} must have query's dtype {query.dtype}, got {t.dtype}")


def _forward_args(fn, query, key, value, out, lse, scale, is_causal, causal_alignment, window,
                  key_lengths, alibi_slopes, softcap, splits, keep):
    """The C struct for one call; device copies of the lists are appended to `keep`, which
    the caller holds until the call returns."""
    import torch

    B, Hq, Lq, D = query.shape
    Hkv, Lk = key.shape[1], key.shape[2]
    if value.shape[-1] != D:
        raise ValueError(f"qkv.cuda.{fn}: value's head dim {value.shape[-1]} must equal D = {D}")
    lengths_ptr = slopes_ptr = None
    if key_lengths is not None:
        kl = torch.as_tensor(key_lengths, dtype=torch.int32, device=query.device).contiguous()
        keep.append(kl)
        lengths_ptr = kl.data_ptr()
    if alibi_slopes is not None:
        sl = torch.as_tensor(alibi_slopes, dtype=torch.float32, device=query.device).contiguous()
        keep.append(sl)
        slopes_ptr = sl.data_ptr()
    left, right = (-1, -1) if window is None else window
    a = _ForwardArgs()
    a.dtype = 0 if query.dtype == torch.bfloat16 else 1
    a.q, a.k, a.v, a.out = query.data_ptr(), key.data_ptr(), value.data_ptr(), out.data_ptr()
    a.lse = lse.data_ptr() if lse is not None else None
    a.q_strides, a.k_strides = _strides(query, "query"), _strides(key, "key")
    a.v_strides, a.out_strides = _strides(value, "value"), _strides(out, "out")
    a.B, a.Hq, a.Hkv, a.Lq, a.Lk, a.D = B, Hq, Hkv, Lq, Lk, D
    a.scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    a.causal = int(bool(is_causal))
    if causal_alignment not in ("top_left", "bottom_right"):
        raise ValueError(f"qkv.cuda.{fn}: causal_alignment must be 'top_left' or "
                         f"'bottom_right', got {causal_alignment!r}")
    a.bottom_right = int(causal_alignment == "bottom_right")
    a.window_left = -1 if left is None else int(left)
    a.window_right = -1 if right is None else int(right)
    a.key_lengths, a.alibi_slopes = lengths_ptr, slopes_ptr
    a.softcap = 0.0 if softcap is None else float(softcap)
    a.splits = int(splits)
    a.stream = torch.cuda.current_stream(query.device).cuda_stream
    return a


def _call(entry, args):
    error = ctypes.create_string_buffer(1024)
    if entry(ctypes.byref(args), error, len(error)) != 0:
        raise ValueError(error.value.decode(errors="replace"))


def attention(query, key, value, *, scale=None, is_causal=False, causal_alignment="top_left",
              window=None, key_lengths=None, alibi_slopes=None, softcap=None, return_lse=False,
              splits=0, out=None):
    """Attention on CUDA torch tensors, with qkv.scaled_dot_product_attention's semantics.

    query (B, Hq, Lq, D), key and value (B, Hkv, Lk, D): bf16 or f16 on one CUDA device,
    any strides with the last dimension contiguous (others are copied); D in {64, 128, 256};
    Hq a multiple of Hkv (GQA). key_lengths: B ints (list or tensor); alibi_slopes: Hq
    floats; window: (left, right), None or -1 unbounded; softcap: c > 0. splits: 0 picks
    split-KV automatically, n forces n (tests). Runs on torch's current stream.
    Returns out (B, Hq, Lq, D), or (out, lse) with lse (B, Hq, Lq) float32.
    """
    import torch

    _check_inputs("attention", [("query", query), ("key", key), ("value", value)])
    query, key, value = (t if _aligned(t) else t.contiguous() for t in (query, key, value))
    B, Hq, Lq, _ = query.shape
    if out is None:
        out = torch.empty((B, Hq, Lq, value.shape[-1]), dtype=query.dtype, device=query.device)
    lse = torch.empty((B, Hq, Lq), dtype=torch.float32, device=query.device) if return_lse else None
    keep = []  # device copies of the lists, alive until the call returns
    with torch.cuda.device(query.device):
        args = _forward_args("attention", query, key, value, out, lse, scale, is_causal,
                             causal_alignment, window, key_lengths, alibi_slopes, softcap, splits, keep)
        _call(_lib().qkv_cuda_attention_forward, args)
    del keep  # the stream orders any later reuse of their memory after the kernel (torch's allocator)
    return (out, lse) if return_lse else out


def attention_backward(dout, query, key, value, out, lse, *, scale=None, is_causal=False,
                       causal_alignment="top_left", window=None, key_lengths=None,
                       alibi_slopes=None, softcap=None, dq=None, dk=None, dv=None):
    """The gradients of attention(query, key, value, ...) (FlashAttention-2's backward):
    dout (B, Hq, Lq, D) in query's dtype, out and lse what the forward returned for the
    same inputs and options (return_lse=True). Returns dq (B, Hq, Lq, D), dk and dv
    (B, Hkv, Lk, D), float32; under GQA dk and dv sum over the query heads of a group.
    dq, dk, dv: contiguous float32 tensors to write into instead of new ones (every
    element is written)."""
    import torch

    _check_inputs("attention_backward", [("query", query), ("key", key), ("value", value),
                                         ("out", out), ("dout", dout)])
    if not isinstance(lse, torch.Tensor) or not lse.is_cuda or lse.dtype != torch.float32:
        raise TypeError("qkv.cuda.attention_backward: lse must be the forward's float32 CUDA tensor")
    query, key, value, out, dout = (t if _aligned(t) else t.contiguous()
                                    for t in (query, key, value, out, dout))
    lse = lse.contiguous()
    B, Hq, Lq, D = query.shape
    Hkv, Lk = key.shape[1], key.shape[2]
    grads = []
    for name, given, shape in (("dq", dq, (B, Hq, Lq, D)), ("dk", dk, (B, Hkv, Lk, D)),
                               ("dv", dv, (B, Hkv, Lk, D))):
        if given is None:
            given = torch.empty(shape, dtype=torch.float32, device=query.device)
        elif (tuple(given.shape) != shape or given.dtype != torch.float32 or not given.is_cuda
              or not given.is_contiguous()):
            raise ValueError(f"qkv.cuda.attention_backward: {name} must be a contiguous float32 "
                             f"CUDA tensor of shape {shape}")
        grads.append(given)
    dq, dk, dv = grads
    keep = []
    with torch.cuda.device(query.device):
        args = _BackwardArgs()
        args.forward = _forward_args("attention_backward", query, key, value, out, lse, scale,
                                     is_causal, causal_alignment, window, key_lengths,
                                     alibi_slopes, softcap, 0, keep)
        args.dout, args.dout_strides = dout.data_ptr(), _strides(dout, "dout")
        args.dq, args.dk, args.dv = dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
        _call(_lib().qkv_cuda_attention_backward, args)
    del keep
    return dq, dk, dv
