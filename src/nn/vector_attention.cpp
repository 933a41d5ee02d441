// Vector attention (Point Transformer) with optional k-nearest-neighbour sets.

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "nn/common.h"

namespace qkv::nn {

std::vector<std::int64_t> nearest_neighbors(const Tensor& pos, std::int64_t k) {
  QKV_CHECK(pos.defined() && pos.dim() == 3,
            "nearest_neighbors: pos must be (B, N, P), got "
                << (pos.defined() ? pos.shape_string() : std::string("undefined")));
  const std::int64_t B = pos.size(0), N = pos.size(1), P = pos.size(2);
  QKV_CHECK(k >= 1 && k <= N, "nearest_neighbors: k must be in [1, N = " << N << "], got " << k);
  Tensor p = detail::contiguous_f32(pos, "nearest_neighbors", "pos");  // (B, N, P)
  const float* pp = p.data_as<float>();
  std::vector<std::int64_t> out(static_cast<std::size_t>(B * N * k));  // (B, N, k)
  std::vector<std::pair<double, std::int64_t>> d(static_cast<std::size_t>(N));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < N; ++i) {
      for (std::int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (std::int64_t c = 0; c < P; ++c) {
          const double diff = double(pp[(b * N + i) * P + c]) - pp[(b * N + j) * P + c];
          s += diff * diff;
        }
        d[static_cast<std::size_t>(j)] = {s, j};  // pairs compare (distance, index): ties to the lower index
      }
      std::partial_sort(d.begin(), d.begin() + k, d.end());
      for (std::int64_t t = 0; t < k; ++t)
        out[static_cast<std::size_t>((b * N + i) * k + t)] = d[static_cast<std::size_t>(t)].second;
    }
  return out;
}

VectorAttention::VectorAttention(const VectorAttentionConfig& c, std::uint64_t seed) : config(c) {
  QKV_CHECK(c.dim >= 1 && c.pos_dim >= 1 && c.pos_mlp_hidden_dim >= 1 &&
                c.attn_mlp_hidden_mult >= 1 && c.num_neighbors >= 0,
            "VectorAttention: dim, pos_dim, pos_mlp_hidden_dim, attn_mlp_hidden_mult must be "
            ">= 1 and num_neighbors >= 0");
  const std::int64_t C = c.dim, Cm = c.dim * c.attn_mlp_hidden_mult;
  to_qkv = Linear(C, 3 * C, false, seed);
  pos_mlp0 = Linear(c.pos_dim, c.pos_mlp_hidden_dim, true, seed + 1);
  pos_mlp2 = Linear(c.pos_mlp_hidden_dim, C, true, seed + 2);
  attn_mlp0 = Linear(C, Cm, true, seed + 3);
  attn_mlp2 = Linear(Cm, C, true, seed + 4);
}

Tensor VectorAttention::forward(const Tensor& x, const Tensor& pos) const {
  const std::int64_t C = config.dim, P = config.pos_dim;
  QKV_CHECK(x.defined() && x.dim() == 3 && x.size(2) == C,
            "VectorAttention: x must be (B, N, dim = " << C << "), got "
                << (x.defined() ? x.shape_string() : std::string("undefined")));
  const std::int64_t B = x.size(0), N = x.size(1);
  QKV_CHECK(pos.defined() && pos.dim() == 3 && pos.size(0) == B && pos.size(1) == N &&
                pos.size(2) == P,
            "VectorAttention: pos must be (B = " << B << ", N = " << N << ", pos_dim = " << P
                << "), got " << (pos.defined() ? pos.shape_string() : std::string("undefined")));
  Tensor out = Tensor::zeros({B, N, C});  // (B, N, C)
  if (B == 0 || N == 0) return out;
  const std::int64_t K = config.num_neighbors > 0 ? std::min(config.num_neighbors, N) : N;
  std::vector<std::int64_t> idx;  // (B, N, K)
  if (K < N) {
    idx = nearest_neighbors(pos, K);
  } else {
    idx.resize(static_cast<std::size_t>(B * N * N));
    for (std::int64_t bi = 0; bi < B * N; ++bi)
      std::iota(idx.begin() + bi * N, idx.begin() + (bi + 1) * N, std::int64_t{0});
  }
  const Tensor qkv = to_qkv.forward(x);  // (B, N, 3C) contiguous
  const Tensor p = detail::contiguous_f32(pos, "VectorAttention", "pos");  // (B, N, P)
  const float* pq = qkv.data_as<float>();
  const float* pp = p.data_as<float>();

  Tensor rel = Tensor::empty({B, N, K, P});  // (B, N, K, P): p_i − p_j
  float* pr = rel.data_as<float>();
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < N; ++i)
      for (std::int64_t t = 0; t < K; ++t) {
        const std::int64_t j = idx[static_cast<std::size_t>((b * N + i) * K + t)];
        for (std::int64_t c = 0; c < P; ++c)
          pr[((b * N + i) * K + t) * P + c] = pp[(b * N + i) * P + c] - pp[(b * N + j) * P + c];
      }
  const Tensor delta = pos_mlp2.forward(relu(pos_mlp0.forward(rel)));  // (B, N, K, C)
  const float* pd = delta.data_as<float>();

  Tensor pre = Tensor::empty({B, N, K, C});  // (B, N, K, C): q_i − k_j + δ_ij
  float* pe = pre.data_as<float>();
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < N; ++i)
      for (std::int64_t t = 0; t < K; ++t) {
        const std::int64_t j = idx[static_cast<std::size_t>((b * N + i) * K + t)];
        const std::int64_t at = ((b * N + i) * K + t) * C;
        for (std::int64_t c = 0; c < C; ++c)
          pe[at + c] = pq[(b * N + i) * 3 * C + c] - pq[(b * N + j) * 3 * C + C + c] + pd[at + c];
      }
  const Tensor logits = attn_mlp2.forward(relu(attn_mlp0.forward(pre)));  // (B, N, K, C)
  const float* pl = logits.data_as<float>();

  float* po = out.data_as<float>();
  std::vector<double> m(static_cast<std::size_t>(C)), z(static_cast<std::size_t>(C)),
      acc(static_cast<std::size_t>(C));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < N; ++i) {
      const std::int64_t row = (b * N + i) * K;  // first (b, i, t) of this point
      std::fill(m.begin(), m.end(), -std::numeric_limits<double>::infinity());
      std::fill(z.begin(), z.end(), 0.0);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (std::int64_t t = 0; t < K; ++t)
        for (std::int64_t c = 0; c < C; ++c) m[c] = std::max(m[c], double(pl[(row + t) * C + c]));
      // softmax over the neighbours, per channel, applied to v_j + δ_ij
      for (std::int64_t t = 0; t < K; ++t) {
        const std::int64_t j = idx[static_cast<std::size_t>(row + t)];
        for (std::int64_t c = 0; c < C; ++c) {
          const double e = std::exp(double(pl[(row + t) * C + c]) - m[c]);
          z[c] += e;
          acc[c] += e * (double(pq[(b * N + j) * 3 * C + 2 * C + c]) + pd[(row + t) * C + c]);
        }
      }
      for (std::int64_t c = 0; c < C; ++c) po[(b * N + i) * C + c] = static_cast<float>(acc[c] / z[c]);
    }
  return out;
}

ParameterList VectorAttention::parameters(const std::string& prefix) {
  ParameterList list = to_qkv.parameters(prefix + "to_qkv.");
  for (auto* lin : {&pos_mlp0, &pos_mlp2, &attn_mlp0, &attn_mlp2}) {
    const char* name = lin == &pos_mlp0 ? "pos_mlp.0." : lin == &pos_mlp2 ? "pos_mlp.2."
                       : lin == &attn_mlp0 ? "attn_mlp.0." : "attn_mlp.2.";
    for (auto& p : lin->parameters(prefix + name)) list.push_back(p);
  }
  return list;
}

}  // namespace qkv::nn
