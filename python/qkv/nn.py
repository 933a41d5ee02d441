"""qkv.nn — forward-only Transformer layers with torch.nn's signatures and weight names.

A torch module's ``state_dict()`` loads 1:1 (torch tensors or NumPy arrays):

>>> import numpy as np, qkv
>>> mha = qkv.MultiheadAttention(8, 2, batch_first=True)
>>> x = np.zeros((1, 3, 8), np.float32)
>>> out, weights = mha(x, x, x)
>>> out.shape, weights.shape
((1, 3, 8), (1, 3, 3))

Inference only: dropout arguments are accepted (a float in [0, 1], as torch checks it)
and ignored (torch's eval mode). To train inside a torch model, use qkv.torch's
MultiheadAttention and TransformerEncoderLayer: torch.nn.Modules with the same arguments
and parameter names, differentiated by torch's autograd, with qkv's attention inside. Inputs are NumPy arrays or CPU torch tensors (float32;
float64 is computed in float32); outputs are of the query's kind and dtype. Arguments of
the wrong type raise TypeError naming them (sizes must be ints, flags bools).

Differences from torch, deliberate:
    * A query row whose keys are all masked gives attention output 0 (the layer's output
      is then out_proj.bias); torch gives NaN.
    * ``is_causal=True`` applies a causal mask by itself (torch 2.x takes it only as a
      hint that attn_mask is causal); attn_mask and is_causal combine.
"""

import numpy as np

from . import _bool, _choice, _describe, _float, _int, _qkv, _result, _view

__all__ = [
    "MultiheadAttention",
    "TransformerEncoderLayer",
    "TransformerDecoderLayer",
    "Transformer",
    "VectorAttention",
    "linear",
    "layer_norm",
    "gelu",
    "relu",
    "sinusoidal_positional_encoding",
    "apply_rope",
    "alibi_slopes",
]


def _out(tensor, like):
    return _result(tensor.to_array(), like, False)


def _mask(mask, fn, name):
    return None if mask is None else _view(mask, fn, name, allow_bool=True).tensor


def _swap01(x):
    """(L, B, ...) <-> (B, L, ...) as a view, for NumPy arrays and torch tensors."""
    if hasattr(x, "swapaxes") and isinstance(x, np.ndarray):
        return x.swapaxes(0, 1)
    if hasattr(x, "transpose") and not isinstance(x, np.ndarray):
        return x.transpose(0, 1)
    return np.asarray(x).swapaxes(0, 1)


def _ndim(x):
    return x.dim() if hasattr(x, "dim") and callable(x.dim) else np.ndim(x)


def _unsqueeze0(x):
    if x is None:
        return None
    return x.unsqueeze(0) if hasattr(x, "unsqueeze") else np.asarray(x)[np.newaxis]


def _squeeze0(x):
    return None if x is None else x[0]


def _activation_name(activation, fn):
    if not isinstance(activation, str) and not callable(activation):
        raise TypeError(f"{fn}: activation must be 'relu', 'gelu' or one of those functions, "
                        f"got {_describe(activation)}")
    name = activation if isinstance(activation, str) else getattr(activation, "__name__", None)
    if name not in ("relu", "gelu"):
        raise ValueError(f"{fn}: activation must be 'relu' or 'gelu', got {activation!r}")
    return name


def _size(value, fn, name, minimum=1):
    """A size argument: an int (TypeError otherwise, bool included) >= minimum, below 2**31
    (ValueError otherwise; int(8.7) would have made it 8 without a word)."""
    n = _int(value, fn, name)
    if not minimum <= n < 1 << 31:
        raise ValueError(f"{fn}: {name} must be in [{minimum}, {(1 << 31) - 1}], got {n}")
    return n


def _dropout_p(value, fn):
    """Accepted for torch's signatures and ignored (inference), but checked like torch's."""
    p = _float(value, fn, "dropout")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{fn}: dropout must be in [0, 1], got {value!r}")
    return p


class _Module:
    """State-dict handling shared by the layer classes."""

    _fn = "Module"

    def load_state_dict(self, state_dict, strict=True):
        """Copies a torch-style state dict (name -> torch tensor or NumPy array) into the
        layer. Raises ValueError naming the parameter when one is missing or mis-shaped,
        and (strict) when an entry matches no parameter."""
        fn = f"{self._fn}.load_state_dict"
        if not hasattr(state_dict, "items"):
            raise TypeError(f"{fn}: state_dict must be a mapping, got {type(state_dict).__name__}")
        strict = _bool(strict, fn, "strict")
        converted = {}
        for name, value in state_dict.items():
            if not isinstance(name, str):
                raise TypeError(f"{fn}: state_dict keys must be strings, got {_describe(name)}")
            converted[name] = _view(value, fn, f"state_dict['{name}']").tensor
        self._impl.load_state_dict(converted, strict)
        return self

    def state_dict(self):
        """name -> NumPy float32 array (a copy), in torch's names."""
        return {name: np.array(t.to_array()) for name, t in self._impl.state_dict().items()}

    def parameter_shapes(self):
        """[(name, shape)] in torch's registration order."""
        return [(name, tuple(shape)) for name, shape in self._impl.parameter_shapes()]

    def eval(self):  # API parity with torch: qkv layers are always in eval mode
        return self

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)


class MultiheadAttention(_Module):
    """torch.nn.MultiheadAttention (add_bias_kv=False, add_zero_attn=False), forward only.

    Parameters (as torch): in_proj_weight (3E, E) and in_proj_bias (3E) when kdim == vdim
    == embed_dim, else q_proj_weight (E, E), k_proj_weight (E, kdim), v_proj_weight
    (E, vdim); out_proj.weight (E, E), out_proj.bias (E).
    """

    _fn = "MultiheadAttention"

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False):
        fn = "MultiheadAttention"
        if _bool(add_bias_kv, fn, "add_bias_kv") or _bool(add_zero_attn, fn, "add_zero_attn"):
            raise ValueError("MultiheadAttention: add_bias_kv and add_zero_attn are not supported")
        self.embed_dim = _size(embed_dim, fn, "embed_dim")
        self.num_heads = _size(num_heads, fn, "num_heads")
        self.kdim = self.embed_dim if kdim is None else _size(kdim, fn, "kdim")
        self.vdim = self.embed_dim if vdim is None else _size(vdim, fn, "vdim")
        self.batch_first = _bool(batch_first, fn, "batch_first")
        self.dropout = _dropout_p(dropout, fn)  # ignored: inference only
        self._impl = _qkv._nn_MultiheadAttention(self.embed_dim, self.num_heads,
                                                  _bool(bias, fn, "bias"), self.kdim, self.vdim)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        """(attn_output, attn_weights) as torch: query (L, B, E) or (B, L, E) with
        batch_first, or unbatched (L, E); key (S, B, kdim), value (S, B, vdim).
        key_padding_mask (B, S): bool True = ignore, or float added. attn_mask (L, S) or
        (B*num_heads, L, S): bool True = not allowed, or float added. attn_weights:
        (B, L, S) averaged over heads, or (B, num_heads, L, S); None unless need_weights."""
        fn = "MultiheadAttention"
        need_weights = _bool(need_weights, fn, "need_weights")
        average_attn_weights = _bool(average_attn_weights, fn, "average_attn_weights")
        is_causal = _bool(is_causal, fn, "is_causal")
        unbatched = _ndim(query) == 2
        if unbatched:
            query, key, value = _unsqueeze0(query), _unsqueeze0(key), _unsqueeze0(value)
            key_padding_mask = _unsqueeze0(key_padding_mask)
        elif not self.batch_first:
            query, key, value = _swap01(query), _swap01(key), _swap01(value)
        q = _view(query, fn, "query")
        k = _view(key, fn, "key")
        v = _view(value, fn, "value")
        out, weights = self._impl.forward(
            q.tensor, k.tensor, v.tensor, _mask(key_padding_mask, fn, "key_padding_mask"),
            need_weights, _mask(attn_mask, fn, "attn_mask"), average_attn_weights, is_causal)
        out = _out(out, q)
        weights = None if weights is None else _out(weights, q)
        if unbatched:
            return _squeeze0(out), _squeeze0(weights)
        if not self.batch_first:
            out = _swap01(out)
        return out, weights


class _Layer(_Module):
    def __init__(self, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                 batch_first, norm_first, bias):
        fn = self._fn
        self.d_model = _size(d_model, fn, "d_model")
        self.nhead = _size(nhead, fn, "nhead")
        self.dim_feedforward = _size(dim_feedforward, fn, "dim_feedforward")
        self.activation = _activation_name(activation, fn)
        self.layer_norm_eps = _float(layer_norm_eps, fn, "layer_norm_eps")
        self.batch_first = _bool(batch_first, fn, "batch_first")
        self.norm_first = _bool(norm_first, fn, "norm_first")
        self.bias = _bool(bias, fn, "bias")
        self.dropout = _dropout_p(dropout, fn)  # ignored: inference only

    def _args(self):
        return (self.d_model, self.nhead, self.dim_feedforward, self.activation,
                self.layer_norm_eps, self.norm_first, self.bias)

    def _in(self, x, name):
        if not self.batch_first and _ndim(x) == 3:
            x = _swap01(x)
        return _view(x, self._fn, name)

    def _back(self, tensor, like):
        out = _out(tensor, like)
        return out if self.batch_first else _swap01(out)


class TransformerEncoderLayer(_Layer):
    """torch.nn.TransformerEncoderLayer in eval mode. Parameters: self_attn.*, linear1.*,
    linear2.*, norm1.*, norm2.*."""

    _fn = "TransformerEncoderLayer"

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True):
        super().__init__(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                         batch_first, norm_first, bias)
        self._impl = _qkv._nn_TransformerEncoderLayer(*self._args())

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        fn = self._fn
        s = self._in(src, "src")
        out = self._impl.forward(s.tensor, _mask(src_mask, fn, "src_mask"),
                                 _mask(src_key_padding_mask, fn, "src_key_padding_mask"),
                                 _bool(is_causal, fn, "is_causal"))
        return self._back(out, s)


class TransformerDecoderLayer(_Layer):
    """torch.nn.TransformerDecoderLayer in eval mode. Parameters: self_attn.*,
    multihead_attn.*, linear1.*, linear2.*, norm1.*, norm2.*, norm3.*."""

    _fn = "TransformerDecoderLayer"

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True):
        super().__init__(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                         batch_first, norm_first, bias)
        self._impl = _qkv._nn_TransformerDecoderLayer(*self._args())

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        fn = self._fn
        if _bool(memory_is_causal, fn, "memory_is_causal"):
            raise ValueError(f"{fn}: memory_is_causal is not supported; pass memory_mask")
        tgt_is_causal = _bool(tgt_is_causal, fn, "tgt_is_causal")
        t = self._in(tgt, "tgt")
        m = self._in(memory, "memory")
        out = self._impl.forward(
            t.tensor, m.tensor, _mask(tgt_mask, fn, "tgt_mask"),
            _mask(memory_mask, fn, "memory_mask"),
            _mask(tgt_key_padding_mask, fn, "tgt_key_padding_mask"),
            _mask(memory_key_padding_mask, fn, "memory_key_padding_mask"), tgt_is_causal)
        return self._back(out, t)


class Transformer(_Layer):
    """torch.nn.Transformer in eval mode: encoder and decoder stacks with their final
    norms. Parameters: encoder.layers.{i}.*, encoder.norm.*, decoder.layers.{i}.*,
    decoder.norm.*."""

    _fn = "Transformer"

    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6,
                 dim_feedforward=2048, dropout=0.1, activation="relu", custom_encoder=None,
                 custom_decoder=None, layer_norm_eps=1e-5, batch_first=False, norm_first=False,
                 bias=True):
        if custom_encoder is not None or custom_decoder is not None:
            raise ValueError("Transformer: custom_encoder and custom_decoder are not supported")
        super().__init__(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                         batch_first, norm_first, bias)
        self.num_encoder_layers = _size(num_encoder_layers, self._fn, "num_encoder_layers", 0)
        self.num_decoder_layers = _size(num_decoder_layers, self._fn, "num_decoder_layers", 0)
        self._impl = _qkv._nn_Transformer(
            self.d_model, self.nhead, self.num_encoder_layers, self.num_decoder_layers,
            self.dim_feedforward, self.activation, self.layer_norm_eps, self.norm_first,
            self.bias)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, src_is_causal=False, tgt_is_causal=False,
                memory_is_causal=False):
        fn = self._fn
        if _bool(memory_is_causal, fn, "memory_is_causal"):
            raise ValueError(f"{fn}: memory_is_causal is not supported; pass memory_mask")
        src_is_causal = _bool(src_is_causal, fn, "src_is_causal")
        tgt_is_causal = _bool(tgt_is_causal, fn, "tgt_is_causal")
        s = self._in(src, "src")
        t = self._in(tgt, "tgt")
        out = self._impl.forward(
            s.tensor, t.tensor, _mask(src_mask, fn, "src_mask"), _mask(tgt_mask, fn, "tgt_mask"),
            _mask(memory_mask, fn, "memory_mask"),
            _mask(src_key_padding_mask, fn, "src_key_padding_mask"),
            _mask(tgt_key_padding_mask, fn, "tgt_key_padding_mask"),
            _mask(memory_key_padding_mask, fn, "memory_key_padding_mask"),
            src_is_causal, tgt_is_causal)
        return self._back(out, t)


class VectorAttention(_Module):
    """Point Transformer vector attention (subtraction relation), in the layout of
    lucidrains' point-transformer-pytorch ``PointTransformerLayer``: parameters
    to_qkv.weight (3C, C), pos_mlp.{0,2}.*, attn_mlp.{0,2}.*.

    forward(x (B, N, C), pos (B, N, pos_dim)) -> (B, N, C); with num_neighbors, each
    point attends to its num_neighbors nearest points (itself included)."""

    _fn = "VectorAttention"

    def __init__(self, dim, pos_mlp_hidden_dim=64, attn_mlp_hidden_mult=4, num_neighbors=None,
                 pos_dim=3):
        fn = self._fn
        self.dim = _size(dim, fn, "dim")
        self.num_neighbors = (0 if num_neighbors is None
                              else _size(num_neighbors, fn, "num_neighbors"))
        self._impl = _qkv._nn_VectorAttention(
            self.dim, _size(pos_dim, fn, "pos_dim"),
            _size(pos_mlp_hidden_dim, fn, "pos_mlp_hidden_dim"),
            _size(attn_mlp_hidden_mult, fn, "attn_mlp_hidden_mult"), self.num_neighbors)

    def forward(self, x, pos):
        c = _view(x, self._fn, "x")
        return _out(self._impl.forward(c.tensor, _view(pos, self._fn, "pos").tensor), c)


# --------------------------------------------------------------------------------------
# Functional forms.


def linear(x, weight, bias=None):
    """x @ weight.T + bias (torch.nn.functional.linear); weight (out, in)."""
    fn = "linear"
    c = _view(x, fn, "x")
    b = None if bias is None else _view(bias, fn, "bias").tensor
    return _out(_qkv._nn_linear(c.tensor, _view(weight, fn, "weight").tensor, b), c)


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """torch.nn.functional.layer_norm."""
    fn = "layer_norm"
    if isinstance(normalized_shape, (str, bytes)) or not (
            hasattr(normalized_shape, "__iter__") or hasattr(normalized_shape, "__index__")):
        raise TypeError(f"{fn}: normalized_shape must be an int or a sequence of ints, "
                        f"got {_describe(normalized_shape)}")
    if hasattr(normalized_shape, "__index__"):
        normalized_shape = (normalized_shape,)
    shape = [_size(n, fn, "normalized_shape entry") for n in normalized_shape]
    eps = _float(eps, fn, "eps")
    c = _view(x, fn, "x")
    w = None if weight is None else _view(weight, fn, "weight").tensor
    b = None if bias is None else _view(bias, fn, "bias").tensor
    return _out(_qkv._nn_layer_norm(c.tensor, shape, w, b, eps), c)


def gelu(x, approximate="none"):
    """torch.nn.functional.gelu: approximate 'none' (erf) or 'tanh'."""
    _choice(approximate, "gelu", "approximate", ("none", "tanh"))
    c = _view(x, "gelu", "x")
    return _out(_qkv._nn_gelu(c.tensor, approximate == "tanh"), c)


def relu(x):
    c = _view(x, "relu", "x")
    return _out(_qkv._nn_relu(c.tensor), c)


def sinusoidal_positional_encoding(length, dim, base=10000.0):
    """(length, dim) float32: sin on even columns, cos on odd, angle p / base^(2i/dim)."""
    fn = "sinusoidal_positional_encoding"
    return np.array(_qkv._nn_sinusoidal(_size(length, fn, "length", 0), _size(dim, fn, "dim", 0),
                                        _float(base, fn, "base")).to_array())


def apply_rope(x, offset=0, base=10000.0):
    """Rotary embedding, rotate-half form, on x (B, H, L, D); row l has position offset + l."""
    fn = "apply_rope"
    offset = _int(offset, fn, "offset")
    if not -(1 << 63) <= offset < 1 << 63:
        raise ValueError(f"{fn}: offset must fit in int64, got {offset}")
    base = _float(base, fn, "base")
    c = _view(x, fn, "x")
    return _out(_qkv._nn_rope(c.tensor, offset, base), c)


def alibi_slopes(num_heads):
    """The ALiBi slopes for num_heads heads (Press et al.'s get_slopes), as a list."""
    return list(_qkv._nn_alibi_slopes(_size(num_heads, "alibi_slopes", "num_heads", 0)))
