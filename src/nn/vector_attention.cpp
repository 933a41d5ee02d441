// Vector attention (Point Transformer) with optional k-nearest-neighbour sets: one forward
// (keeping its activations when given a record) and its backward.
//
// The per-pair loops (neighbour search, gathers, the per-channel softmax) run on every
// thread, split by point rows (or by images where rows of one image write to each other's
// gradients), so each row's arithmetic and order are the same whatever the split.

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/parallel.h"
#include "nn/common.h"
#include "qkv/threads.h"

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
  qkv::detail::parallel_chunks(
      "nn.nearest_neighbors", B * N, B * N * N >= (1 << 14), num_threads(), [&](std::int64_t r0, std::int64_t r1) {
        std::vector<std::pair<double, std::int64_t>> d(static_cast<std::size_t>(N));
        for (std::int64_t r = r0; r < r1; ++r) {  // r = b·N + i
          const std::int64_t b = r / N;
          for (std::int64_t j = 0; j < N; ++j) {
            double s = 0;
            for (std::int64_t c = 0; c < P; ++c) {
              const double diff = double(pp[r * P + c]) - pp[(b * N + j) * P + c];
              s += diff * diff;
            }
            d[static_cast<std::size_t>(j)] = {s, j};  // pairs compare (distance, index): ties to the lower index
          }
          std::partial_sort(d.begin(), d.begin() + k, d.end());
          for (std::int64_t t = 0; t < k; ++t)
            out[static_cast<std::size_t>(r * k + t)] = d[static_cast<std::size_t>(t)].second;
        }
      });
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

namespace {

// Fills `a` with everything up to the softmax's logits.
void run_to_logits(const VectorAttention& va, const Tensor& x, const Tensor& pos,
                   VectorAttention::Record& a) {
  const std::int64_t C = va.config.dim, P = va.config.pos_dim;
  QKV_CHECK(x.defined() && x.dim() == 3 && x.size(2) == C,
            "VectorAttention: x must be (B, N, dim = " << C << "), got "
                << (x.defined() ? x.shape_string() : std::string("undefined")));
  const std::int64_t B = a.B = x.size(0), N = a.N = x.size(1);
  QKV_CHECK(pos.defined() && pos.dim() == 3 && pos.size(0) == B && pos.size(1) == N &&
                pos.size(2) == P,
            "VectorAttention: pos must be (B = " << B << ", N = " << N << ", pos_dim = " << P
                << "), got " << (pos.defined() ? pos.shape_string() : std::string("undefined")));
  if (B == 0 || N == 0) return;
  const std::int64_t K = a.K = va.config.num_neighbors > 0 ? std::min(va.config.num_neighbors, N) : N;
  if (K < N) {
    a.idx = nearest_neighbors(pos, K);
  } else {
    a.idx.resize(static_cast<std::size_t>(B * N * N));
    for (std::int64_t bi = 0; bi < B * N; ++bi)
      std::iota(a.idx.begin() + bi * N, a.idx.begin() + (bi + 1) * N, std::int64_t{0});
  }
  a.x = detail::contiguous_f32(x, "VectorAttention", "x");
  a.qkv = va.to_qkv.forward(a.x);  // (B, N, 3C) contiguous
  const Tensor p = detail::contiguous_f32(pos, "VectorAttention", "pos");  // (B, N, P)
  const float* pq = a.qkv.data_as<float>();
  const float* pp = p.data_as<float>();

  const bool parallel = B * N * K >= (1 << 12);
  a.rel = Tensor::empty({B, N, K, P});
  float* pr = a.rel.data_as<float>();
  qkv::detail::parallel_chunks("nn.vector_attention.rel", B * N, parallel, num_threads(), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r)  // r = b·N + i
      for (std::int64_t t = 0; t < K; ++t) {
        const std::int64_t j = a.idx[static_cast<std::size_t>(r * K + t)], b = r / N;
        for (std::int64_t c = 0; c < P; ++c) pr[(r * K + t) * P + c] = pp[r * P + c] - pp[(b * N + j) * P + c];
      }
  });
  a.h0 = va.pos_mlp0.forward(a.rel);
  a.r0 = relu(a.h0);
  a.delta = va.pos_mlp2.forward(a.r0);
  const float* pd = a.delta.data_as<float>();

  a.pre = Tensor::empty({B, N, K, C});
  float* pe = a.pre.data_as<float>();
  qkv::detail::parallel_chunks("nn.vector_attention.pre", B * N, parallel, num_threads(), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r)  // r = b·N + i
      for (std::int64_t t = 0; t < K; ++t) {
        const std::int64_t j = a.idx[static_cast<std::size_t>(r * K + t)], b = r / N;
        const std::int64_t at = (r * K + t) * C;
        for (std::int64_t c = 0; c < C; ++c)
          pe[at + c] = pq[r * 3 * C + c] - pq[(b * N + j) * 3 * C + C + c] + pd[at + c];
      }
  });
  a.a0 = va.attn_mlp0.forward(a.pre);
  a.ra = relu(a.a0);
  a.logits = va.attn_mlp2.forward(a.ra);
}

// w (B, N, K, C): softmax over the K neighbours, per channel, of the logits (in double).
// u (B, N, K, C) = v_j + δ_ij. out (B, N, C) = Σ_t w ⊙ u.
void softmax_and_sum(const VectorAttention::Record& a, std::int64_t C, float* w, float* u,
                     float* out) {
  const std::int64_t B = a.B, N = a.N, K = a.K;
  const float* pq = a.qkv.data_as<float>();
  const float* pd = a.delta.data_as<float>();
  const float* pl = a.logits.data_as<float>();
  qkv::detail::parallel_chunks(
      "nn.vector_attention.softmax", B * N, B * N * K * C >= (1 << 14), num_threads(),
      [&](std::int64_t r0, std::int64_t r1) {
        std::vector<double> m(static_cast<std::size_t>(C)), z(static_cast<std::size_t>(C)),
            acc(static_cast<std::size_t>(C));
        for (std::int64_t r = r0; r < r1; ++r) {  // r = b·N + i
          const std::int64_t b = r / N, row = r * K;  // row: the first (b, i, t) of this point
          std::fill(m.begin(), m.end(), -std::numeric_limits<double>::infinity());
          std::fill(z.begin(), z.end(), 0.0);
          std::fill(acc.begin(), acc.end(), 0.0);
          for (std::int64_t t = 0; t < K; ++t)
            for (std::int64_t c = 0; c < C; ++c) m[c] = std::max(m[c], double(pl[(row + t) * C + c]));
          for (std::int64_t t = 0; t < K; ++t) {
            const std::int64_t j = a.idx[static_cast<std::size_t>(row + t)];
            for (std::int64_t c = 0; c < C; ++c) {
              const double e = std::exp(double(pl[(row + t) * C + c]) - m[c]);
              const double value = double(pq[(b * N + j) * 3 * C + 2 * C + c]) + pd[(row + t) * C + c];
              z[c] += e;
              acc[c] += e * value;
              if (w) w[(row + t) * C + c] = static_cast<float>(e);  // normalised below
              if (u) u[(row + t) * C + c] = static_cast<float>(value);
            }
          }
          for (std::int64_t c = 0; c < C; ++c) {
            out[r * C + c] = static_cast<float>(acc[c] / z[c]);
            if (w)
              for (std::int64_t t = 0; t < K; ++t)
                w[(row + t) * C + c] = static_cast<float>(w[(row + t) * C + c] / z[c]);
          }
        }
      });
}

}  // namespace

Tensor VectorAttention::forward(const Tensor& x, const Tensor& pos, Record* record) const {
  Record scratch;  // the activations, when nobody keeps them
  Record& a = record ? *record : scratch;
  a = Record();
  run_to_logits(*this, x, pos, a);
  Tensor out = Tensor::zeros({a.B, a.N, config.dim});  // (B, N, C)
  if (a.B == 0 || a.N == 0) return out;
  softmax_and_sum(a, config.dim, nullptr, nullptr, out.data_as<float>());
  return out;
}

// forward: y_i = Σ_t w_it ⊙ u_it, w = softmax_t(attn_mlp(q_i − k_j + δ_ij)), u = v_j + δ_ij,
//          δ = pos_mlp(p_i − p_j), q, k, v = to_qkv(x)
Tensor VectorAttention::backward(const Tensor& dy, const Record& a, VectorAttention& grads) const {
  const VectorAttention& layer = *this;
  const std::int64_t B = a.B, N = a.N, K = a.K, C = layer.config.dim;
  QKV_CHECK(dy.defined() && dy.dim() == 3 && dy.size(0) == B && dy.size(1) == N && dy.size(2) == C,
            "VectorAttention::backward: dy must be (" << B << ", " << N << ", " << C << ")");
  Tensor dx = Tensor::zeros({B, N, C});
  if (B == 0 || N == 0) return dx;
  Tensor w = Tensor::empty({B, N, K, C}), u = Tensor::empty({B, N, K, C}), y = Tensor::empty({B, N, C});
  softmax_and_sum(a, C, w.data_as<float>(), u.data_as<float>(), y.data_as<float>());
  Tensor g = detail::contiguous_f32(dy, "VectorAttention::backward", "dy");
  const float* pg = g.data_as<float>();
  const float* pw = w.data_as<float>();
  const float* pu = u.data_as<float>();
  const float* py = y.data_as<float>();
  // y = Σ_t w ⊙ u:  du = dy·w;  dlogits = w ⊙ (dy·u − Σ_t' w·dy·u) = w ⊙ dy ⊙ (u − y)
  Tensor du = Tensor::empty({B, N, K, C}), dlogits = Tensor::empty({B, N, K, C});
  float* pdu = du.data_as<float>();
  float* pdl = dlogits.data_as<float>();
  const bool parallel = B * N * K * C >= (1 << 14);
  qkv::detail::parallel_chunks("nn.vector_attention.dlogits", B * N, parallel, num_threads(), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r)
      for (std::int64_t t = 0; t < K; ++t)
        for (std::int64_t c = 0; c < C; ++c) {
          const std::int64_t at = (r * K + t) * C + c;
          pdu[at] = pg[r * C + c] * pw[at];
          pdl[at] = pw[at] * pg[r * C + c] * (pu[at] - py[r * C + c]);
        }
  });
  // logits = attn_mlp2(relu(attn_mlp0(pre)))
  Tensor dra = linear_backward(dlogits, a.ra, layer.attn_mlp2.weight, grads.attn_mlp2.weight,
                               &grads.attn_mlp2.bias);
  relu_backward_(dra, a.a0);
  Tensor dpre = linear_backward(dra, a.pre, layer.attn_mlp0.weight,
                                grads.attn_mlp0.weight, &grads.attn_mlp0.bias);
  // δ enters both pre and u
  Tensor ddelta = add(dpre, du);
  // δ = pos_mlp2(relu(pos_mlp0(rel))); rel = p_i − p_j is an input (no gradient returned)
  Tensor dr0 = linear_backward(ddelta, a.r0, layer.pos_mlp2.weight, grads.pos_mlp2.weight,
                               &grads.pos_mlp2.bias);
  relu_backward_(dr0, a.h0);
  linear_backward(dr0, a.rel, layer.pos_mlp0.weight, grads.pos_mlp0.weight,
                  &grads.pos_mlp0.bias);
  // pre = q_i − k_j + δ, u = v_j + δ: gather back into (B, N, 3C) in a fixed order (split
  // by images: the points of one image add into each other's rows)
  Tensor dqkv = Tensor::zeros({B, N, 3 * C});
  float* pq = dqkv.data_as<float>();
  const float* pp = dpre.data_as<float>();
  qkv::detail::parallel_chunks("nn.vector_attention.dqkv", B, parallel, num_threads(), [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b)
      for (std::int64_t i = 0; i < N; ++i)
        for (std::int64_t t = 0; t < K; ++t) {
          const std::int64_t j = a.idx[static_cast<std::size_t>((b * N + i) * K + t)];
          const std::int64_t at = ((b * N + i) * K + t) * C;
          for (std::int64_t c = 0; c < C; ++c) {
            pq[(b * N + i) * 3 * C + c] += pp[at + c];
            pq[(b * N + j) * 3 * C + C + c] -= pp[at + c];
            pq[(b * N + j) * 3 * C + 2 * C + c] += pdu[at + c];
          }
        }
  });
  // q, k, v = to_qkv(x)
  return linear_backward(dqkv, a.x, layer.to_qkv.weight, grads.to_qkv.weight, nullptr);
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
