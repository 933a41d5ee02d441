// Vector attention (Point Transformer, Zhao et al. 2021, eq. 3), with the subtraction
// relation and a learned relative-position encoding, in the layout of lucidrains'
// point-transformer-pytorch PointTransformerLayer (state-dict names to_qkv.weight,
// pos_mlp.{0,2}.*, attn_mlp.{0,2}.*):
//
//   q, k, v = to_qkv(x)                              (no bias)
//   δ_ij    = pos_mlp(p_i − p_j)                     Linear(P, Hp) → ReLU → Linear(Hp, C)
//   w_ij    = softmax_j( attn_mlp(q_i − k_j + δ_ij) ) Linear(C, C·m) → ReLU → Linear(C·m, C),
//                                                    softmax over j per channel
//   y_i     = Σ_j w_ij ⊙ (v_j + δ_ij)
//
// j runs over all N points, or over the `num_neighbors` nearest to p_i (Euclidean,
// p_i itself included; ties broken by the lower index).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/nn/layers.h"
#include "qkv/tensor.h"

namespace qkv::nn {

struct VectorAttentionConfig {
  std::int64_t dim = 0;                   // C
  std::int64_t pos_dim = 3;               // P
  std::int64_t pos_mlp_hidden_dim = 64;   // Hp
  std::int64_t attn_mlp_hidden_mult = 4;  // m
  std::int64_t num_neighbors = 0;         // 0 = every point
};

struct VectorAttention {
  VectorAttentionConfig config;
  Linear to_qkv;     // weight (3C, C), no bias
  Linear pos_mlp0;   // (Hp, P), (Hp)  — "pos_mlp.0"
  Linear pos_mlp2;   // (C, Hp), (C)   — "pos_mlp.2"
  Linear attn_mlp0;  // (C·m, C), (C·m) — "attn_mlp.0"
  Linear attn_mlp2;  // (C, C·m), (C)   — "attn_mlp.2"

  // Everything the forward computes, kept for the backward (K neighbours per point).
  struct Record {
    std::int64_t B = 0, N = 0, K = 0;
    std::vector<std::int64_t> idx;  // (B, N, K) neighbour j of (b, i, t)
    Tensor x;       // (B, N, C) contiguous f32
    Tensor qkv;     // (B, N, 3C)
    Tensor rel;     // (B, N, K, P): p_i − p_j
    Tensor h0;      // (B, N, K, Hp) pos_mlp0(rel)
    Tensor r0;      // relu(h0)
    Tensor delta;   // (B, N, K, C) pos_mlp2(r0)
    Tensor pre;     // (B, N, K, C): q_i − k_j + δ_ij
    Tensor a0;      // (B, N, K, C·m) attn_mlp0(pre)
    Tensor ra;      // relu(a0)
    Tensor logits;  // (B, N, K, C) attn_mlp2(ra)
  };

  VectorAttention() = default;
  explicit VectorAttention(const VectorAttentionConfig& config, std::uint64_t seed = 0);
  // x (B, N, C), pos (B, N, P) -> (B, N, C)
  Tensor forward(const Tensor& x, const Tensor& pos, Record* record = nullptr) const;
  // -> dx (B, N, C). Positions are inputs, not learned: no gradient is returned for pos.
  Tensor backward(const Tensor& dy, const Record& record, VectorAttention& grads) const;
  ParameterList parameters(const std::string& prefix = "");
};

// The indices of the k nearest points to each point (Euclidean, self included, ties to
// the lower index), nearest first. pos (B, N, P) -> B·N·k indices in [0, N), row-major
// (B, N, k).
std::vector<std::int64_t> nearest_neighbors(const Tensor& pos, std::int64_t k);

}  // namespace qkv::nn
