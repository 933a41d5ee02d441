"""The Vision Transformer in torch 1.13: the twin of qkv's (include/qkv/vit.h), for
tests/python/test_vit.py and as the torch peer of a ViT training benchmark (the same
initial weights, qkv's _vit_initial, and the same batches).

  DEFAULT_CONFIG               VitConfig's defaults; a config is a dict of these keys
  vit_config(config)           a config with the defaults filled in, unknown keys refused
  parameter_names(config)      the state dict's names, qkv's and the twin's, in qkv's order
  patchify(images, P)          (B, C, H, W) -> (B, N, C·P·P) as qkv's patchify
  shifted_stack(images, s)     (B, C, H, W) -> (B, 5C, H, W) as qkv's shifted_stack
  sincos_positions_2d(grid, d) qkv's fixed 2-D sine-cosine table (1 + grid², d), in torch
  make_vit_class()             TorchVit, an nn.Module under qkv's parameter names
  constant_rows_exact(norm, x) norm(x), with rows of one value given the bias exactly (qkv's rule)
  load_qkv_weights(model, w)   name -> array (or tensor) into the model, strictly
  state_numpy(model)           its parameters back as name -> float32 NumPy arrays, in
                               qkv's order

The model, as vit.h writes it (d = dim, P = patch_size, N = (image_size / P)²):

  patches = patchify(images, P)            (B, N, C·P·P), patch (gy, gx) is row gy·(W/P) + gx,
                                           its features in (c, ky, kx) order
  x = [cls_token; patch_embed(patches)]    patch_embed: nn.Linear(C·P·P, d), which is
      + pos_embed                          nn.Conv2d(C, d, P, stride P) with its kernel
                                           flattened; cls_token (d); pos_embed (1 + N, d)
  x = block_n(x), n < layers               nn.TransformerEncoderLayer(d, heads, mlp_dim,
                                           dropout=0, gelu (erf), batch_first, norm_first,
                                           layer_norm_eps=1e-6)
  logits = head(norm(x)[:, 0])             norm: nn.LayerNorm(d, eps=1e-6);
                                           head: nn.Linear(d, classes)

Patch dropout (forward(images, kept)): x keeps its class token and the rows 1 + kept[b]
of image b, (B, 1 + K, d), before the blocks.

With config["shifted_patches"] (Shifted Patch Tokenization, Lee, Lee & Song 2021):

  patches = patch_norm(patchify(shifted_stack(images, P // 2), P))   (B, N, 5·C·P·P)

patch_norm: nn.LayerNorm(5·C·P·P, eps=1e-6); patch_embed then takes 5·C·P·P features.
A patch whose features are all one finite value (a blank patch) comes out as patch_norm's
bias exactly, as from qkv's LayerNorm: its mean is that value and its variance 0, so x̂ = 0.
torch's float mean of such a row can be off by an ulp, which 1/sqrt(eps) = 1000 magnifies
into noise (constant_rows_exact below).

pos_embed is a parameter when config["learned_positions"], else a buffer (not saved in the
state dict: persistent=False) holding the sine-cosine table, as qkv, where it is no
parameter either. Dropout is 0 (qkv's layers have none), so train() and eval() compute the
same function.
"""

DEFAULT_CONFIG = {"image_size": 28, "channels": 1, "patch_size": 4, "dim": 128, "layers": 6,
                  "heads": 4, "mlp_dim": 256, "classes": 10, "learned_positions": True,
                  "shifted_patches": False}

BLOCK_SUFFIXES = ("self_attn.in_proj_weight", "self_attn.in_proj_bias",
                  "self_attn.out_proj.weight", "self_attn.out_proj.bias",
                  "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
                  "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias")


def vit_config(config=None):
    """config with vit.h's defaults for the keys it lacks; ValueError for an unknown key or
    sizes that do not fit (what VitConfig::check refuses)."""
    config = dict(config or {})
    unknown = sorted(set(config) - set(DEFAULT_CONFIG))
    if unknown:
        raise ValueError(f"vit config: unknown keys {unknown}; expected {sorted(DEFAULT_CONFIG)}")
    c = {**DEFAULT_CONFIG, **config}
    if c["image_size"] % c["patch_size"]:
        raise ValueError(f"vit config: patch_size ({c['patch_size']}) must divide image_size ({c['image_size']})")
    if c["dim"] % c["heads"]:
        raise ValueError(f"vit config: dim ({c['dim']}) must be a multiple of heads ({c['heads']})")
    if not c["learned_positions"] and c["dim"] % 4:
        raise ValueError(f"vit config: sine-cosine positions need dim a multiple of 4, got {c['dim']}")
    if c["shifted_patches"] and c["patch_size"] < 2:
        raise ValueError(f"vit config: shifted patches need patch_size >= 2, got {c['patch_size']}")
    return c


def parameter_names(config=None):
    """The names of a ViT state dict, qkv's and the twin's, in qkv's order
    (VitWeights::parameters). The twin's named_parameters() has the same names in torch's
    order: the module's own tensors (cls_token, pos_embed) before its submodules'."""
    c = vit_config(config)
    names = ["patch_norm.weight", "patch_norm.bias"] if c["shifted_patches"] else []
    names += ["patch_embed.weight", "patch_embed.bias", "cls_token"]
    if c["learned_positions"]:
        names.append("pos_embed")
    for n in range(c["layers"]):
        names += [f"blocks.{n}.{s}" for s in BLOCK_SUFFIXES]
    return names + ["norm.weight", "norm.bias", "head.weight", "head.bias"]


def patchify(images, P):
    """(B, C, H, W) -> (B, N, C·P·P): patch (gy, gx) is row gy·(W/P) + gx and its features
    are in (c, ky, kx) order, the order of torch.nn.functional.unfold(images, P, stride=P)
    transposed, and of a Conv2d kernel (d, C, P, P) flattened."""
    B, C, H, W = images.shape
    if H % P or W % P:
        raise ValueError(f"patchify: patch size {P} must divide H = {H} and W = {W}")
    x = images.reshape(B, C, H // P, P, W // P, P)       # (B, C, gy, ky, gx, kx)
    x = x.permute(0, 2, 4, 1, 3, 5)                      # (B, gy, gx, C, ky, kx)
    return x.reshape(B, (H // P) * (W // P), C * P * P)


def shifted_stack(images, s):
    """(B, C, H, W) -> (B, 5C, H, W): the image, then itself shifted by (dy, dx) = (−s, −s),
    (−s, +s), (+s, −s), (+s, +s): copy k's pixel (y, x) is the image's (y + dy, x + dx), 0
    outside. Written as a crop of the zero-padded image, independently of qkv's loops."""
    import torch
    H, W = images.shape[2], images.shape[3]
    padded = torch.nn.functional.pad(images, (s, s, s, s))
    copies = [images] + [padded[:, :, s + dy:s + dy + H, s + dx:s + dx + W]
                         for dy, dx in ((-s, -s), (-s, s), (s, -s), (s, s))]
    return torch.cat(copies, dim=1)


def sincos_positions_2d(grid, dim):
    """MAE's fixed 2-D sine-cosine positions as vit.h defines them, float64 (1 + grid², dim):
    row 0 (the class token) zeros; patch (gy, gx) is row 1 + gy·grid + gx, its first d/2
    features [sin(gx·ω_k), cos(gx·ω_k)] and its last d/2 [sin(gy·ω_k), cos(gy·ω_k)], with
    ω_k = 10000^(−k/(d/4)), k < d/4."""
    import torch
    if grid < 1 or dim < 4 or dim % 4:
        raise ValueError(f"sincos_positions_2d: need grid >= 1 and dim a positive multiple of 4, "
                         f"got grid = {grid}, dim = {dim}")
    quarter = dim // 4
    omega = 10000.0 ** (-torch.arange(quarter, dtype=torch.float64) / quarter)  # (d/4)
    g = torch.arange(grid, dtype=torch.float64)
    gy, gx = torch.meshgrid(g, g, indexing="ij")                                  # (grid, grid)
    px = gx.reshape(-1, 1) * omega                                                # (grid², d/4)
    py = gy.reshape(-1, 1) * omega
    table = torch.cat([px.sin(), px.cos(), py.sin(), py.cos()], dim=1)            # (grid², d)
    return torch.cat([torch.zeros(1, dim, dtype=torch.float64), table], dim=0)


def make_vit_class():
    """TorchVit, defined when torch is imported (the scripts import torch late, after
    choosing its BLAS)."""
    import torch
    import torch.nn as nn

    class TorchVit(nn.Module):
        """TorchVit(config, weights=None, dtype=torch.float32); forward(images (B, C, H, W))
        -> logits (B, classes). Without weights: torch's initialisation of its modules, the
        class token and learned positions ~ N(0, 0.02²), the head zero (as qkv's
        VitWeights::initialized, not its numbers: load qkv's for those)."""

        def __init__(self, config=None, weights=None, dtype=torch.float32):
            super().__init__()
            c = self.config = vit_config(config)
            d, P = c["dim"], c["patch_size"]
            grid = c["image_size"] // P
            self.patch_size = P
            features = c["channels"] * (5 if c["shifted_patches"] else 1) * P * P
            if c["shifted_patches"]:
                self.patch_norm = nn.LayerNorm(features, eps=1e-6)                  # (5·C·P·P)
            self.patch_embed = nn.Linear(features, d)                               # (d, C'·P·P)
            self.cls_token = nn.Parameter(torch.empty(d).normal_(0.0, 0.02))        # (d)
            if c["learned_positions"]:
                self.pos_embed = nn.Parameter(torch.empty(1 + grid * grid, d).normal_(0.0, 0.02))  # (1 + N, d)
            else:
                # computed in float64 and rounded once by .to(dtype) below, as qkv rounds its
                # double computation to float32
                self.register_buffer("pos_embed", sincos_positions_2d(grid, d), persistent=False)
            self.blocks = nn.ModuleList(
                nn.TransformerEncoderLayer(d_model=d, nhead=c["heads"], dim_feedforward=c["mlp_dim"],
                                           dropout=0.0, activation="gelu", layer_norm_eps=1e-6,
                                           batch_first=True, norm_first=True)
                for _ in range(c["layers"]))
            self.norm = nn.LayerNorm(d, eps=1e-6)
            self.head = nn.Linear(d, c["classes"])                                  # (classes, d)
            nn.init.zeros_(self.head.weight)
            nn.init.zeros_(self.head.bias)
            self.to(dtype)
            if weights is not None:
                load_qkv_weights(self, weights)

        def embed(self, images, kept=None):
            """images (B, C, H, W) -> the first block's input x (B, 1 + N, d); with kept,
            patch dropout's (B, K) patch indices, the class token's row and rows 1 + kept:
            (B, 1 + K, d), every token taken after its position is added."""
            c = self.config
            if images.dim() != 4 or tuple(images.shape[1:]) != (c["channels"], c["image_size"], c["image_size"]):
                raise ValueError(f"TorchVit: images must be (B, {c['channels']}, {c['image_size']}, "
                                 f"{c['image_size']}), got {tuple(images.shape)}")
            if c["shifted_patches"]:
                P = self.patch_size
                patches = patchify(shifted_stack(images, P // 2), P)                # (B, N, 5·C·P·P)
                x = self.patch_embed(constant_rows_exact(self.patch_norm, patches))  # (B, N, d)
            else:
                x = self.patch_embed(patchify(images, self.patch_size))            # (B, N, d)
            cls = self.cls_token.expand(x.shape[0], 1, -1)                          # (B, 1, d)
            x = torch.cat([cls, x], dim=1) + self.pos_embed                         # (B, 1 + N, d)
            if kept is None:
                return x
            kept = torch.as_tensor(kept, dtype=torch.int64)                         # (B, K)
            rows = (1 + kept).unsqueeze(-1).expand(-1, -1, x.shape[-1])             # (B, K, d)
            return torch.cat([x[:, :1], torch.gather(x, 1, rows)], dim=1)           # (B, 1 + K, d)

        def forward(self, images, kept=None):
            x = self.embed(images, kept)
            for block in self.blocks:
                x = block(x)
            return self.head(self.norm(x)[:, 0])

    return TorchVit


def constant_rows_exact(norm, x):
    """norm(x) for an nn.LayerNorm over x's last dimension, but a row of one finite value
    gives norm.bias exactly (x̂ = 0: what its exact mean and zero variance give), as qkv's
    LayerNorm does. The bias still gets those rows' gradient; the weight gets none (x̂ = 0)."""
    import torch
    first = x[..., :1]
    constant = (x == first).all(dim=-1, keepdim=True) & torch.isfinite(first)   # (..., 1)
    return torch.where(constant, norm.bias.expand_as(x), norm(x))


def load_qkv_weights(model, weights):
    """name -> array or tensor (qkv's _vit_initial, any float dtype) into a TorchVit, in its
    dtype: exactly parameter_names(model.config), each of its shape, else ValueError."""
    import numpy as np
    import torch
    expected = parameter_names(model.config)
    missing, unexpected = sorted(set(expected) - set(weights)), sorted(set(weights) - set(expected))
    if missing or unexpected:
        raise ValueError(f"vit weights: missing {missing}, unexpected {unexpected}")
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name in expected:
            w = weights[name]
            t = w if torch.is_tensor(w) else torch.from_numpy(np.array(w))
            p = params[name]
            if tuple(t.shape) != tuple(p.shape):
                raise ValueError(f"vit weights: '{name}' must have shape {tuple(p.shape)}, got {tuple(t.shape)}")
            p.copy_(t.to(p.dtype))
    return model


def state_numpy(model):
    """name -> contiguous float32 NumPy array (parameters only, qkv's names). A copy:
    Tensor.numpy() shares the parameter's memory, which the next optimizer step changes."""
    import numpy as np
    params = dict(model.named_parameters())
    return {name: np.array(params[name].detach().cpu().numpy(), dtype=np.float32, order="C", copy=True)
            for name in parameter_names(model.config)}
