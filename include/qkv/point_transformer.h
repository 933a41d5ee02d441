// A Point Transformer (Zhao, Jiang, Jia, Torr & Koltun 2021) that classifies grey images
// as point sets: each image becomes N points sampled from its inked pixels, each point its
// position (x, y) and the intensities of the S × S pixels around it, and blocks of vector
// attention over each point's K nearest neighbours in (x, y) mix their features; a global
// pooling and an MLP classify.
//
//   x = embed(points)                                 Linear(2 + S², C) → ReLU → Linear(C, C)
//   x = x + linear2(relu(attn(linear1(norm(x)), xy)))  per block; attn: nn::VectorAttention
//                                                      over the K nearest points in (x, y)
//   z = norm(x)                                        LayerNorm(C)
//   pooled = [mean_n z ; max_n z]                      (B, 2C)
//   logits = head(pooled)                              Linear(2C, Hh) → ReLU → Linear(Hh, classes)
//
// The block is the paper's (§3.3, Fig. 4a: Linear, the point transformer layer, Linear,
// residual) with a pre-norm LayerNorm where the paper's code has BatchNorm after each
// Linear: qkv's layers have no batch statistics, and a per-point norm behaves the same in
// training and inference. attn is the paper's vector (subtraction) attention with its
// learned relative-position encoding δ = pos_mlp(p_i − p_j) on the 2-D pixel coordinates
// (pos_dim 2; the intensity is a feature, not a position). The paper's classification
// network downsamples between stages (farthest point sampling, "transition down"); with
// 128 points per image one resolution suffices and the network stays small. Global
// pooling concatenates the mean (the paper's) with the max (PointNet's), which the head
// reads both of. Each point carries the S × S window of intensities around its pixel (a
// local descriptor, as points of a scanned cloud carry colours and normals) rather than its
// own intensity alone (S = 1): 128 points keep a third of a garment's inked pixels, and
// with the centre pixel alone the blocks must guess the texture between them. On a
// 12,800-image, 2-epoch probe at C = 32 (validation accuracy): S = 1 64.7%, 3 70.0%,
// 5 71.2%, 7 73.1%, at about the same speed (embed is 5% of the FLOPs). Parameter names
// follow torch's module tree: embed.{0,2}.*, blocks.i.{norm,linear1,attn,linear2}.*
// (attn.* as nn::VectorAttention names them), norm.*, head.{0,2}.*.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "qkv/nn.h"
#include "qkv/tensor.h"

namespace qkv::models {

// ---------------------------------------------------------------------------------------
// Images -> points.
//
// The inked pixels of an image are those brighter than kInkThreshold (0: every pixel that
// is not black). On Fashion-MNIST an image has 392 of them on average (the test set: at
// least 91, fewer than 128 in 0.5% of the images); values 1–4, the anti-aliased rim of the
// silhouette, are 2% of all pixels and harmless, and a higher threshold would start
// erasing dark garments, whose bodies are dim.
//
// N points are drawn uniformly from the M inked pixels, without replacement: when M >= N,
// N distinct pixels; when M < N, every inked pixel ⌊N/M⌋ times and N mod M distinct ones
// once more (so each appears ⌊N/M⌋ or ⌈N/M⌉ times). Uniform rather than weighted by
// intensity: the shape of the garment is the main cue, and weighting by brightness would
// thin out dark garments and their dim regions and so distort the silhouette; the
// intensity is still each point's feature. A black image (M = 0) gives N copies of the
// centre (0, 0) with intensity 0.
//
// A point is 2 + S² floats (S the patch size, odd): x = 2·column/(W − 1) − 1 and
// y = 2·row/(H − 1) − 1 in [−1, 1] (y grows downward, as rows do; 0 when the side is 1
// pixel), then the intensities pixel/255 in [0, 1] of the S × S window centred on the
// point's pixel, row by row (rows row − S/2 … row + S/2, each columns column − S/2 …
// column + S/2; 0 outside the image). S = 1: (x, y, intensity), the point's own pixel.
// Points are listed in raster order of their pixels (repeats next to each other), so the
// result depends only on the set drawn.
//
// Randomness: draw t of image (seed, counter) is counter_uniform(mix64(mix64(seed) +
// counter), t) (qkv/rng.h), a partial Fisher–Yates shuffle of the inked pixels' raster
// indices: a pure function of (pixels, N, seed, counter), whatever thread computes it.
inline constexpr int kInkThreshold = 0;
inline constexpr std::int64_t kMaxPointPatch = 15;  // S at most: 227 floats per point

// Whether S is a window side the sampling takes: odd (centred on the point), 1 ... 15.
inline constexpr bool valid_point_patch(std::int64_t S) { return S >= 1 && S <= kMaxPointPatch && S % 2 == 1; }
// Floats per point for a window of side S: x, y and the S² intensities.
inline constexpr std::int64_t point_floats(std::int64_t S) { return 2 + S * S; }

// pixels (H, W) row-major, 0 = black -> (N, 2 + S²) f32 points, S = patch_size (odd).
Tensor image_to_points(std::span<const std::uint8_t> pixels, std::int64_t height,
                       std::int64_t width, std::int64_t points, std::uint64_t seed,
                       std::uint64_t counter, std::int64_t patch_size = 1);
// pixels (B, H, W) -> (B, N, 2 + S²): image b is image_to_points with counter
// first_counter + b.
Tensor images_to_points(std::span<const std::uint8_t> pixels, std::int64_t count,
                        std::int64_t height, std::int64_t width, std::int64_t points,
                        std::uint64_t seed, std::uint64_t first_counter = 0,
                        std::int64_t patch_size = 1);

// ---------------------------------------------------------------------------------------
// The model.

// The defaults, per image (multiply-adds × 2, matrix products only; flops() counts them):
//   embed        N·((2 + S²)·C + C²)·2                                  0.68 MFLOP
//   per block    N·(C² + 3C² + C²)·2              linear1, to_qkv, linear2  1.31 MFLOP
//              + N·K·(2·Hp + Hp·C + 2·C·Cm)·2     pos_mlp, attn_mlp         5.31 MFLOP
//   head         (2C·Hh + Hh·classes)·2                                 0.01 MFLOP
// ≈ 13.9 MFLOP forward for two blocks (the ViT `qkv train vit` trains: ~86), ~3× that for a
// training step. The products are not what bounds the time: vector attention's per-pair
// loops (a softmax over K per channel in double, its exp recomputed by the backward; the
// gathers) and the K nearest neighbours (N² distances per block) are most of it; they run
// on every thread, split by points. Measured on a 2-core AMD EPYC (2 threads), `qkv train
// vision --model point` with 12,800 training images, each point its pixel alone (S = 1):
// 557 images/s at C = 32, 371 at C = 48, 315 with K = 16 (the paper's k), 261 with N = 256
// (validation included). So K = 8 is the default. The 7 × 7 window adds 0.39 MFLOP to the
// embedding and no per-pair work: the shipped model (these defaults) trained at 466
// images/s over all 55,000 images.
struct PointTransformerConfig {
  std::int64_t points = 128;             // N per image (what image_to_points samples)
  std::int64_t patch_size = 7;           // S, odd: each point's window of intensities
  std::int64_t neighbors = 8;            // K (self included; the paper's k is 16)
  std::int64_t dim = 32;                 // C
  std::int64_t blocks = 2;
  std::int64_t pos_mlp_hidden = 16;      // Hp, the position encoding's hidden width
  std::int64_t attn_mlp_hidden_mult = 1; // m: attn_mlp's hidden width is C·m
  std::int64_t head_hidden = 64;         // Hh
  std::int64_t classes = 10;

  nn::VectorAttentionConfig attention_config() const;  // dim C, pos_dim 2, K neighbours
  std::int64_t point_features() const { return point_floats(patch_size); }  // x, y, the window
  std::int64_t num_parameters() const;
  double flops() const;  // the forward's matrix-product FLOPs per image (see above)
  void check() const;    // throws qkv::Error naming the field out of range
};

struct PointTransformerBlock {
  nn::LayerNorm norm;         // (C)
  nn::Linear linear1;         // (C, C), (C)
  nn::VectorAttention attn;   // dim C, pos_dim 2
  nn::Linear linear2;         // (C, C), (C)
  nn::ParameterList parameters(const std::string& prefix);
};

struct PointTransformerWeights {
  nn::Linear embed0;  // (C, 2 + S²), (C)       — "embed.0"
  nn::Linear embed2;  // (C, C), (C)            — "embed.2"
  std::vector<PointTransformerBlock> blocks;  // blocks.i.*
  nn::LayerNorm norm;  // (C)
  nn::Linear head0;   // (Hh, 2C), (Hh)         — "head.0"
  nn::Linear head2;   // (classes, Hh), (classes) — "head.2"

  struct BlockRecord {
    nn::LayerNorm::Record norm;
    nn::Linear::Record linear1;
    nn::VectorAttention::Record attn;
    Tensor a;  // (B, N, C) attn's output, relu's input
    nn::Linear::Record linear2;
  };
  struct Record {
    std::int64_t B = 0, N = 0;
    nn::Linear::Record embed0, embed2;
    Tensor e0;  // (B, N, C) embed0's output, relu's input
    std::vector<BlockRecord> blocks;
    nn::LayerNorm::Record norm;
    std::vector<std::int64_t> argmax;  // (B, C): the point n of each channel's max
    nn::Linear::Record head0, head2;
    Tensor h0;  // (B, Hh) head0's output, relu's input
  };

  // torch's initialisations of every module (Linear, LayerNorm, nn::VectorAttention's),
  // seeded.
  static PointTransformerWeights initialized(const PointTransformerConfig& config,
                                             std::uint64_t seed);
  static PointTransformerWeights zeros_like(const PointTransformerConfig& config);

  // points (B, N, 2 + S²) f32 as image_to_points makes them, B, N >= 1 ->
  // logits (B, classes). N need not be config.points: with fewer than K points each
  // attends to all of them.
  Tensor forward(const Tensor& points, Record* record = nullptr) const;
  // dlogits (B, classes) -> adds ∂/∂θ into `grads` (the points get no gradient).
  void backward(const Tensor& dlogits, const Record& record, PointTransformerWeights& grads) const;
  // embed.{0,2}.*, blocks.i.{norm,linear1,attn,linear2}.*, norm.*, head.{0,2}.*
  nn::ParameterList parameters();
};

}  // namespace qkv::models
