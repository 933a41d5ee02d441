// A Vision Transformer (Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words"): an image
// cut into P×P patches, each patch a token, a learned class token in front, and pre-norm
// Transformer encoder layers over the sequence; the class token's final state classifies.
//
//   patches = patchify(images, P)                 (B, N, C·P·P), N = (H/P)·(W/P), row-major
//   x = [cls; patch_embed(patches)] + pos         (B, 1 + N, d)
//   x = block_n(x), n < layers                    pre-norm TransformerEncoderLayer, GELU
//   logits = head(norm(x)[:, 0])                  (B, classes)
//
// patch_embed is torch's Conv2d(C, d, kernel P, stride P) with its kernel flattened to
// (d, C·P·P) in (c, ky, kx) order: a Linear over patchify's rows.
//
// With shifted_patches (Shifted Patch Tokenization, Lee, Lee & Song 2021, "Vision
// Transformer for Small-Size Datasets"), the embedding reads each patch together with the
// same place in four diagonally shifted copies of the image, and normalises the lot first:
//
//   patches = patchify(shifted_stack(images, P/2), P)   (B, N, 5·C·P·P)
//   embedded = patch_embed(patch_norm(patches))          (B, N, d)
//
// so each token sees the pixels around its patch as well: a little of the locality a
// convolution has and plain patches lack, for the price of a wider first Linear.
//
// Patch dropout (Liu et al. 2022, "PatchDropout: Economizing Vision Transformers Using
// Patch Dropout"; the token masking FLIP trains CLIP with): in training, each image keeps
// only K of its N patch tokens, a random subset, and the blocks run on 1 + K tokens:
//
//   x = [cls + pos[0]; patch_embed(patches[kept]) + pos[1 + kept]]   (B, 1 + K, d)
//
// Attention is indifferent to the order of its tokens; each keeps its own position. The
// blocks' work falls with the token count (their products by K/N, attention by (K/N)²), so
// an epoch costs about (1 + K)/(1 + N) of a full one, and seeing part of an image is also a
// regulariser, as Random Erasing is. Inference keeps every patch.
//
// Positions are learned (a parameter) or the fixed 2-D sine-cosine table of
// sincos_positions_2d. Parameter names are those of scripts/bench/vit_torch.py's torch
// module, one to one. It trains without dropout (its blocks could take an nn::DropoutDraw,
// as SASRec's do); augmentation and label smoothing regularise.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "qkv/nn.h"
#include "qkv/tensor.h"

namespace qkv::models {

struct VitConfig {
  std::int64_t image_size = 28;  // H = W
  std::int64_t channels = 1;     // C
  std::int64_t patch_size = 4;   // P; must divide image_size
  std::int64_t dim = 128;        // d
  std::int64_t layers = 6;
  std::int64_t heads = 4;
  std::int64_t mlp_dim = 256;    // the feed-forward's width
  std::int64_t classes = 10;
  bool learned_positions = true;  // false: sincos_positions_2d, fixed
  bool shifted_patches = false;   // true: Shifted Patch Tokenization (above); patch_size >= 2

  std::int64_t grid() const { return image_size / patch_size; }       // patches per side
  std::int64_t patches() const { return grid() * grid(); }             // N
  std::int64_t tokens() const { return patches() + 1; }                // 1 + N
  std::int64_t patch_channels() const { return channels * (shifted_patches ? 5 : 1); }
  std::int64_t patch_features() const { return patch_channels() * patch_size * patch_size; }
  nn::TransformerLayerConfig block_config() const;
  std::int64_t num_parameters() const;
  void check() const;  // throws qkv::Error naming the field that is out of range
};

// (B, C, H, W) -> (B, N, C·P·P): patch (gy, gx) is row gy·(W/P) + gx, its features in
// (c, ky, kx) order — what torch's Conv2d with kernel = stride = P multiplies.
Tensor patchify(const Tensor& images, std::int64_t patch_size);

// (B, C, H, W) -> (B, 5C, H, W): channel block 0 is the image, block k = 1..4 the image
// shifted by (dy, dx) = (−s, −s), (−s, +s), (+s, −s), (+s, +s): its pixel (y, x) is the
// image's (y + dy, x + dx), 0 where that falls outside.
Tensor shifted_stack(const Tensor& images, std::int64_t shift);

// The fixed 2-D sine-cosine positions of MAE (He et al. 2022): (1 + grid², d), row 0 (the
// class token) zeros; for patch (gy, gx) the first d/2 features encode gx and the last d/2
// encode gy, each as [sin(p·ω_k), cos(p·ω_k)] with ω_k = 10000^(−k/(d/4)), k < d/4.
// d must be a multiple of 4.
Tensor sincos_positions_2d(std::int64_t grid, std::int64_t dim);

// Patch dropout's draw: for each of B images, `keep` distinct patch indices of [0, N), in
// ascending order, a uniform random subset: (B, keep) row-major. Image b's subset is a
// pure function of (seed, b), so a batch's is one of its seed. 1 <= keep <= N.
std::vector<std::int64_t> random_patches(std::int64_t B, std::int64_t N, std::int64_t keep, std::uint64_t seed);

// How many of N patches an image keeps when a fraction `patch_dropout` in [0, 1) of them
// is dropped: N − round(patch_dropout · N) (halves away from zero), at least 1.
std::int64_t patches_kept(std::int64_t N, double patch_dropout);

struct VitWeights {
  nn::LayerNorm patch_norm; // (5·C·P·P), shifted_patches only
  nn::Linear patch_embed;   // (d, C·P·P), or (d, 5·C·P·P) with shifted_patches
  Tensor cls_token;         // (d)
  Tensor pos_embed;         // (1 + N, d); a parameter only when learned
  std::vector<nn::TransformerEncoderLayer> blocks;  // blocks.i.*
  nn::LayerNorm norm;       // (d)
  nn::Linear head;          // (classes, d)
  bool learned_positions = true;
  bool shifted_patches = false;

  struct Record {
    nn::LayerNorm::Record patch_norm;
    nn::Linear::Record patch_embed;
    std::vector<nn::TransformerEncoderLayer::Record> blocks;
    nn::LayerNorm::Record norm;
    nn::Linear::Record head;
    std::int64_t B = 0;
    std::vector<std::int64_t> kept;  // (B, K) the patches kept, when forward was given them
  };

  // torch's initialisations of its modules (Linear, LayerNorm, the encoder layers), the
  // class token and learned positions ~ N(0, 0.02²) (as timm's ViT), the head zero (as the
  // paper: the first steps train the body, not a random readout).
  static VitWeights initialized(const VitConfig& config, std::uint64_t seed);
  static VitWeights zeros_like(const VitConfig& config);

  // images (B, C, H, W) f32 -> logits (B, classes). probs, when given, receives each
  // block's attention probabilities (B, heads, 1 + N, 1 + N). Without probs the last block
  // computes only the class token's row (TransformerEncoderLayer::forward_first), the one
  // the head reads: the same logits for about 12% less of the forward's arithmetic (the
  // default 6-block model).
  //
  // kept, when not empty, is patch dropout's (B, K) patch indices (random_patches; each
  // row distinct, in [0, N)): only those patches are embedded and the blocks see 1 + K
  // tokens, each patch with its own position. Kept = every patch in order is the full
  // forward, bit for bit.
  Tensor forward(const Tensor& images, std::vector<Tensor>* probs = nullptr, Record* record = nullptr,
                 std::span<const std::int64_t> kept = {}) const;
  // dlogits (B, classes) -> adds ∂/∂θ into `grads` (the images get no gradient).
  void backward(const Tensor& dlogits, const Record& record, VitWeights& grads) const;
  // patch_norm.* (when shifted_patches), patch_embed.*, cls_token, pos_embed (when
  // learned), blocks.i.*, norm.*, head.*
  nn::ParameterList parameters();
};

// Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers"),
// the variant with the heads averaged (not their maximum) and the residual path weighted
// as much as attention: per layer A = 0.5·mean_h P_h + 0.5·I, each row divided by its sum,
// R = A_{L−1}···A_1·A_0; returns R's class-token row without itself: (N) weights over the
// patches, summing to at most 1 (the class token keeps the rest). Computed in double.
// probs: what VitWeights::forward fills; b: the image in the batch.
std::vector<float> attention_rollout(const std::vector<Tensor>& probs, std::int64_t b);

}  // namespace qkv::models
