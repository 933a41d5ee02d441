"""qkv inside PyTorch training: attention as a torch.autograd.Function, and the attention
layers as torch.nn.Modules whose parameters torch's optimizers train.

``qkv.scaled_dot_product_attention`` comes here by itself when a CPU tensor requires grad
(and grad mode is on); this module is imported only then, or by ``import qkv.torch``.

>>> import torch, qkv
>>> q = torch.randn(1, 2, 5, 8, requires_grad=True)
>>> qkv.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
>>> q.grad.shape
torch.Size([1, 2, 5, 8])

The forward saves (query, key, value, out, log-sum-exp); the backward recomputes the
probabilities tile by tile from the log-sum-exp (FlashAttention-2's backward), so nothing
of size Lq × Lk is kept between the passes. Dropout keeps its seed, not its mask: the
backward regenerates the same pattern.

Layers: ``MultiheadAttention`` and ``TransformerEncoderLayer`` take torch.nn's constructor
arguments, parameter names and forward signatures, so a torch layer's ``state_dict()``
loads 1:1 and the module drops into a torch model. Their projections, LayerNorms and
feed-forward are torch's own operations (autograd differentiates them and the optimizer
sees ordinary Parameters); the attention between the projections is qkv's fused kernel.
They are not qkv's C++ layers (``qkv.nn``, inference only): those own their weights, so a
training step would copy every parameter in and every gradient out, for products that
torch already runs through the same kind of BLAS.

Not differentiated: attn_mask and alibi_slopes are constants (a float attn_mask that
requires grad raises ValueError), and the returned log-sum-exp carries no gradient.
"""

import math

import torch

from . import (_bool, _choice, _dropout, _float, _run, _seed, attention_backward,
               attention_weights)
from .nn import _dropout_p, _size

__all__ = ["AttentionFunction", "scaled_dot_product_attention", "MultiheadAttention",
           "TransformerEncoderLayer"]


class AttentionFunction(torch.autograd.Function):
    """out, lse = AttentionFunction.apply(query, key, value, attn_mask, options).

    options: the keyword arguments of qkv.attention_backward besides the tensors
    (dropout_p, is_causal, scale, enable_gqa, causal_alignment, key_lengths, window,
    alibi_slopes, softcap, seed, impl), with the dropout seed already drawn, so the
    backward regenerates the forward's dropout pattern.
    """

    @staticmethod
    def forward(ctx, query, key, value, attn_mask, options):
        o = options
        out, lse, _ = _run("scaled_dot_product_attention", query, key, value, attn_mask,
                           o["dropout_p"], o["is_causal"], o["scale"], o["enable_gqa"],
                           o["causal_alignment"], o["key_lengths"], o["window"],
                           o["alibi_slopes"], o["softcap"], o["seed"], True, False, o["impl"])
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.attn_mask = attn_mask
        ctx.options = options
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        query, key, value, out, lse = ctx.saved_tensors
        if grad_out is None:  # only the (non-differentiable) lse was used
            return None, None, None, None, None
        # autograd hands over expanded (stride-0) gradients, e.g. from .sum(); qkv reads
        # any non-negative strides, so only a dtype unlike the output's needs a copy.
        if grad_out.dtype != out.dtype:
            grad_out = grad_out.to(out.dtype)
        dq, dk, dv = attention_backward(grad_out, query, key, value, out, lse, ctx.attn_mask,
                                        **ctx.options)
        needs = ctx.needs_input_grad
        return (dq if needs[0] else None, dk if needs[1] else None,
                dv if needs[2] else None, None, None)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False, *,
                                 causal_alignment="top_left", key_lengths=None, window=None,
                                 alibi_slopes=None, softcap=None, seed=None, return_lse=False,
                                 impl="automatic"):
    """qkv.scaled_dot_product_attention recorded on torch's autograd tape (same arguments,
    same results; see its docstring). qkv.scaled_dot_product_attention calls this when a
    CPU tensor argument requires grad."""
    fn = "scaled_dot_product_attention"
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor for autograd, "
                            f"got {type(t).__name__}")
        if t.device.type != "cpu":
            raise ValueError(f"{fn}: autograd through qkv runs on CPU tensors; {name} is on "
                             f"'{t.device}' (for CUDA use qkv.cuda.attention and "
                             f"qkv.cuda.attention_backward)")
        if t.requires_grad and not (t.is_floating_point() and t.dtype in _GRAD_DTYPES):
            raise TypeError(f"{fn}: {name} has dtype {t.dtype}, which autograd through qkv "
                            f"cannot differentiate; expected float32, float64, float16 or "
                            f"bfloat16")
    if isinstance(attn_mask, torch.Tensor) and attn_mask.requires_grad:
        raise ValueError(f"{fn}: attn_mask requires grad, but qkv treats the mask as a "
                         f"constant and returns no gradient for it; pass attn_mask.detach() "
                         f"(or learn the bias outside the attention)")
    p = _dropout(dropout_p, fn)
    options = dict(dropout_p=p, is_causal=_bool(is_causal, fn, "is_causal"), scale=scale,
                   enable_gqa=_bool(enable_gqa, fn, "enable_gqa"),
                   causal_alignment=causal_alignment, key_lengths=key_lengths, window=window,
                   alibi_slopes=alibi_slopes, softcap=softcap, seed=_seed(seed, p, fn),
                   impl=impl)
    out, lse = AttentionFunction.apply(query, key, value, attn_mask, options)
    return (out, lse) if _bool(return_lse, fn, "return_lse") else out


_GRAD_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


# --------------------------------------------------------------------------------------
# Layers.


def _dropout_seed():
    """A dropout seed from torch's default generator, so torch.manual_seed(n) makes a
    training run with qkv's dropout reproducible."""
    return int(torch.randint(0, (1 << 63) - 1, (), dtype=torch.int64))


class MultiheadAttention(torch.nn.Module):
    """torch.nn.MultiheadAttention with qkv's fused attention between the projections.

    Constructor, parameters (in_proj_weight (3E, E) and in_proj_bias (3E) when kdim ==
    vdim == embed_dim, else q_proj_weight (E, E), k_proj_weight (E, kdim), v_proj_weight
    (E, vdim); out_proj.weight (E, E), out_proj.bias (E)), their initialization and the
    forward's arguments are torch's; add_bias_kv and add_zero_attn are not supported.

    Differences from torch, deliberate:
        * need_weights defaults to False: the fused kernel never forms the probabilities.
          With need_weights=True they are computed separately (qkv.attention_weights)
          and returned without a gradient: a loss built on them would train nothing.
        * A query whose keys are all masked gives attention output 0 (torch: NaN).
        * is_causal=True applies a causal mask by itself, with or without attn_mask.
    """

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None,
                 dtype=None):
        super().__init__()
        fn = "MultiheadAttention"
        if _bool(add_bias_kv, fn, "add_bias_kv") or _bool(add_zero_attn, fn, "add_zero_attn"):
            raise ValueError(f"{fn}: add_bias_kv and add_zero_attn are not supported")
        self.embed_dim = _size(embed_dim, fn, "embed_dim")
        self.num_heads = _size(num_heads, fn, "num_heads")
        if self.embed_dim % self.num_heads:
            raise ValueError(f"{fn}: embed_dim ({self.embed_dim}) must be divisible by "
                             f"num_heads ({self.num_heads})")
        self.head_dim = self.embed_dim // self.num_heads
        self.kdim = self.embed_dim if kdim is None else _size(kdim, fn, "kdim")
        self.vdim = self.embed_dim if vdim is None else _size(vdim, fn, "vdim")
        self._qkv_same_embed_dim = self.kdim == self.embed_dim and self.vdim == self.embed_dim
        self.dropout = _dropout_p(dropout, fn)
        self.batch_first = _bool(batch_first, fn, "batch_first")
        bias = _bool(bias, fn, "bias")
        factory = dict(device=device, dtype=dtype)
        E = self.embed_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = torch.nn.Parameter(torch.empty(3 * E, E, **factory))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = torch.nn.Parameter(torch.empty(E, E, **factory))
            self.k_proj_weight = torch.nn.Parameter(torch.empty(E, self.kdim, **factory))
            self.v_proj_weight = torch.nn.Parameter(torch.empty(E, self.vdim, **factory))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = torch.nn.Parameter(torch.empty(3 * E, **factory))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = torch.nn.Linear(E, E, bias=bias, **factory)
        self._reset_parameters()

    def _reset_parameters(self):
        # torch.nn.MultiheadAttention's initialization.
        if self._qkv_same_embed_dim:
            torch.nn.init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                torch.nn.init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            torch.nn.init.constant_(self.in_proj_bias, 0.0)
            torch.nn.init.constant_(self.out_proj.bias, 0.0)

    def _projections(self, query, key, value):
        E = self.embed_dim
        b = self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else (b[:E], b[E:2 * E], b[2 * E:])
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight
            wq, wk, wv = w[:E], w[E:2 * E], w[2 * E:]
        else:
            wq, wk, wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        F = torch.nn.functional
        return F.linear(query, wq, bq), F.linear(key, wk, bk), F.linear(value, wv, bv)

    def _mask(self, attn_mask, key_padding_mask, B, L, S, dtype):
        """torch's two masks (True = masked) as one mask for qkv (bool True = attend, or
        float added), broadcastable to (B, H, L, S)."""
        fn = "MultiheadAttention"
        mask = None
        if attn_mask is not None:
            if attn_mask.dim() == 3:
                if attn_mask.shape != (B * self.num_heads, L, S):
                    raise ValueError(f"{fn}: 3-d attn_mask must be (B*num_heads, L, S) = "
                                     f"{(B * self.num_heads, L, S)}, got {tuple(attn_mask.shape)}")
                attn_mask = attn_mask.view(B, self.num_heads, L, S)
            elif attn_mask.dim() != 2 or attn_mask.shape != (L, S):
                raise ValueError(f"{fn}: attn_mask must be (L, S) = {(L, S)} or "
                                 f"(B*num_heads, L, S), got {tuple(attn_mask.shape)}")
            mask = (~attn_mask if attn_mask.dtype == torch.bool
                    else attn_mask.detach().to(dtype))
        if key_padding_mask is not None:
            if key_padding_mask.shape != (B, S):
                raise ValueError(f"{fn}: key_padding_mask must be (B, S) = {(B, S)}, "
                                 f"got {tuple(key_padding_mask.shape)}")
            kpm = key_padding_mask.view(B, 1, 1, S)
            if kpm.dtype == torch.bool:
                kpm = ~kpm
                if mask is None:
                    mask = kpm
                elif mask.dtype == torch.bool:
                    mask = mask & kpm
                else:
                    mask = mask.masked_fill(~kpm, -math.inf)
            else:
                kpm = kpm.detach().to(dtype)
                if mask is None:
                    mask = kpm
                elif mask.dtype == torch.bool:
                    mask = kpm.masked_fill(~mask, -math.inf)
                else:
                    mask = mask + kpm
        return mask

    def forward(self, query, key, value, key_padding_mask=None, need_weights=False,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        """(attn_output, attn_weights): query (L, B, E), or (B, L, E) with batch_first, or
        unbatched (L, E); key (S, B, kdim), value (S, B, vdim). key_padding_mask (B, S):
        bool True = ignore, or float added. attn_mask (L, S) or (B*num_heads, L, S): bool
        True = not allowed, or float added. attn_weights (need_weights=True only, no
        gradient): (B, L, S) averaged over heads, or (B, num_heads, L, S)."""
        fn = "MultiheadAttention"
        unbatched = query.dim() == 2
        if unbatched:
            query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif query.dim() != 3:
            raise ValueError(f"{fn}: query must be 3-d (or 2-d unbatched), got "
                             f"{query.dim()}-d shape {tuple(query.shape)}")
        elif not self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        B, L, _ = query.shape
        S = key.shape[1]
        q, k, v = self._projections(query, key, value)  # (B, L|S, E)
        H, D = self.num_heads, self.head_dim
        q = q.view(B, L, H, D).transpose(1, 2)  # (B, H, L, D)
        k = k.view(B, S, H, D).transpose(1, 2)  # (B, H, S, D)
        v = v.view(B, S, H, D).transpose(1, 2)  # (B, H, S, D)
        mask = self._mask(attn_mask, key_padding_mask, B, L, S, q.dtype)
        p = self.dropout if self.training else 0.0
        seed = _dropout_seed() if p > 0.0 else None
        from . import scaled_dot_product_attention as sdpa
        out = sdpa(q, k, v, attn_mask=mask, dropout_p=p, is_causal=_bool(is_causal, fn, "is_causal"),
                   seed=seed)  # (B, H, L, D)
        out = self.out_proj(out.transpose(1, 2).reshape(B, L, self.embed_dim))  # (B, L, E)
        weights = None
        if _bool(need_weights, fn, "need_weights"):
            with torch.no_grad():
                weights = attention_weights(q, k, v, attn_mask=mask, is_causal=is_causal)
            weights = weights.to(query.dtype)  # (B, H, L, S)
            if _bool(average_attn_weights, fn, "average_attn_weights"):
                weights = weights.mean(dim=1)  # (B, L, S)
            if unbatched:
                weights = weights.squeeze(0)
        if unbatched:
            return out.squeeze(0), weights
        if not self.batch_first:
            out = out.transpose(0, 1)
        return out, weights


class TransformerEncoderLayer(torch.nn.Module):
    """torch.nn.TransformerEncoderLayer with qkv's MultiheadAttention as self_attn.

    Constructor, submodule names (self_attn, linear1, dropout, linear2, norm1, norm2,
    dropout1, dropout2) and forward are torch's, so a torch layer's state_dict loads 1:1.
    activation: "relu", "gelu" or a callable.
    """

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, device=None,
                 dtype=None):
        super().__init__()
        fn = "TransformerEncoderLayer"
        factory = dict(device=device, dtype=dtype)
        d_model = _size(d_model, fn, "d_model")
        dim_feedforward = _size(dim_feedforward, fn, "dim_feedforward")
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout,
                                            batch_first=batch_first, **factory)
        self.linear1 = torch.nn.Linear(d_model, dim_feedforward, **factory)
        self.dropout = torch.nn.Dropout(_dropout_p(dropout, fn))
        self.linear2 = torch.nn.Linear(dim_feedforward, d_model, **factory)
        self.norm_first = _bool(norm_first, fn, "norm_first")
        eps = _float(layer_norm_eps, fn, "layer_norm_eps")
        self.norm1 = torch.nn.LayerNorm(d_model, eps=eps, **factory)
        self.norm2 = torch.nn.LayerNorm(d_model, eps=eps, **factory)
        self.dropout1 = torch.nn.Dropout(dropout)
        self.dropout2 = torch.nn.Dropout(dropout)
        if callable(activation):
            self.activation = activation
        else:
            name = _choice(activation, fn, "activation", ("relu", "gelu"))
            self.activation = getattr(torch.nn.functional, name)

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           need_weights=False, is_causal=is_causal)[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        """src (S, B, E), or (B, S, E) with batch_first, or unbatched (S, E); masks as
        MultiheadAttention's attn_mask and key_padding_mask."""
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x
