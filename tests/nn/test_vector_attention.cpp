// nn::VectorAttention (Point Transformer) against its formula in double, and its
// backward against finite differences.

#include "nn/check.h"

namespace {

using qkv::Shape;
using qkv::Tensor;
using namespace qkv::testing;  // nn::, train::, randn, expect_close, check_gradient, ...

std::vector<double> naive_vector_attention(const nn::VectorAttention& va, const Tensor& x,
                                           const Tensor& pos, std::int64_t k_neighbors) {
  const std::int64_t B = x.size(0), N = x.size(1), C = va.config.dim, P = va.config.pos_dim;
  auto lin = [](const nn::Linear& l, const std::vector<double>& in) {
    std::vector<double> y(static_cast<std::size_t>(l.weight.size(0)));
    for (std::int64_t o = 0; o < l.weight.size(0); ++o) {
      double s = l.bias.defined() ? l.bias.get({o}) : 0.0;
      for (std::int64_t c = 0; c < l.weight.size(1); ++c) s += l.weight.get({o, c}) * in[c];
      y[o] = s;
    }
    return y;
  };
  auto relu_v = [](std::vector<double> v) {
    for (auto& e : v) e = std::max(e, 0.0);
    return v;
  };
  std::vector<double> out;
  for (std::int64_t b = 0; b < B; ++b) {
    std::vector<std::vector<double>> q(N), k(N), v(N);
    for (std::int64_t i = 0; i < N; ++i) {
      std::vector<double> xi(C);
      for (std::int64_t c = 0; c < C; ++c) xi[c] = x.get({b, i, c});
      auto all = lin(va.to_qkv, xi);
      q[i].assign(all.begin(), all.begin() + C);
      k[i].assign(all.begin() + C, all.begin() + 2 * C);
      v[i].assign(all.begin() + 2 * C, all.end());
    }
    for (std::int64_t i = 0; i < N; ++i) {
      // neighbour set: brute force, sorted by (distance, index)
      std::vector<std::pair<double, std::int64_t>> d;
      for (std::int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (std::int64_t c = 0; c < P; ++c)
          s += std::pow(double(pos.get({b, i, c})) - pos.get({b, j, c}), 2);
        d.push_back({s, j});
      }
      std::sort(d.begin(), d.end());
      const std::int64_t K = k_neighbors > 0 ? std::min(k_neighbors, N) : N;
      std::vector<std::vector<double>> logits, vals;
      for (std::int64_t t = 0; t < K; ++t) {
        const std::int64_t j = d[t].second;
        std::vector<double> rel(P);
        for (std::int64_t c = 0; c < P; ++c) rel[c] = double(pos.get({b, i, c})) - pos.get({b, j, c});
        auto delta = lin(va.pos_mlp2, relu_v(lin(va.pos_mlp0, rel)));
        std::vector<double> pre(C), val(C);
        for (std::int64_t c = 0; c < C; ++c) {
          pre[c] = q[i][c] - k[j][c] + delta[c];
          val[c] = v[j][c] + delta[c];
        }
        logits.push_back(lin(va.attn_mlp2, relu_v(lin(va.attn_mlp0, pre))));
        vals.push_back(val);
      }
      for (std::int64_t c = 0; c < C; ++c) {
        double mx = -INFINITY, z = 0, acc = 0;
        for (std::int64_t t = 0; t < K; ++t) mx = std::max(mx, logits[t][c]);
        for (std::int64_t t = 0; t < K; ++t) {
          z += std::exp(logits[t][c] - mx);
          acc += std::exp(logits[t][c] - mx) * vals[t][c];
        }
        out.push_back(acc / z);
      }
    }
  }
  return out;
}

TEST(NnVectorAttention, MatchesFormulaAllAndNearest) {
  const std::int64_t B = 2, N = 9, C = 8;
  nn::VectorAttentionConfig c{C, 3, 16, 2, 0};
  for (std::int64_t k : {0, 1, 4, 9, 20}) {
    c.num_neighbors = k;
    nn::VectorAttention va(c, 5);
    for (auto* l : {&va.pos_mlp0, &va.attn_mlp0}) l->bias = randn(l->bias.shape(), 9, 0.5);
    Tensor x = randn({B, N, C}, 1), pos = randn({B, N, 3}, 2);
    Tensor got = va.forward(x, pos);  // (B, N, C)
    std::vector<double> want = naive_vector_attention(va, x, pos, k);
    // Chains of f32 products of at most max(C·m, Hp) = 16 terms (qkv, two MLPs each with
    // two layers), inputs ~1: 64·16·u·(1 + max|y|) per the derivation at the top.
    expect_close(got, want, 64.0 * 16 * kU * (1 + max_abs(want)), "vector attention k=" + std::to_string(k));
  }
  nn::VectorAttention va(c, 1);
  EXPECT_EQ(nn::state_dict(va).size(), 9u);  // to_qkv.weight + 4 × (weight, bias)
  EXPECT_EQ(nn::state_dict(va).count("attn_mlp.2.bias"), 1u);
  EXPECT_THROW(va.forward(randn({B, N, C}, 1), randn({B, N, 2}, 1)), qkv::Error);
  EXPECT_EQ(va.forward(Tensor::zeros({1, 0, C}), Tensor::zeros({1, 0, 3})).shape(), (Shape{1, 0, C}));
}

TEST(NnVectorAttention, NearestNeighborsBruteForce) {
  // Points on a line at 0, 1, 3, 6: neighbours of point 1 are 1 (self), 0, 2.
  Tensor pos = Tensor::from_vector({1, 4, 1}, std::vector<float>{0, 1, 3, 6});
  std::vector<std::int64_t> idx = nn::nearest_neighbors(pos, 3);
  EXPECT_EQ(std::vector<std::int64_t>(idx.begin() + 3, idx.begin() + 6),
            (std::vector<std::int64_t>{1, 0, 2}));
  // A tie (points 0 and 2 at distance 1 from 1) goes to the lower index.
  Tensor tie = Tensor::from_vector({1, 3, 1}, std::vector<float>{0, 1, 2});
  idx = nn::nearest_neighbors(tie, 2);
  EXPECT_EQ(idx[2], 1);
  EXPECT_EQ(idx[3], 0);
  EXPECT_THROW(nn::nearest_neighbors(tie, 4), qkv::Error);
}

class VectorAttentionBackward : public ::testing::TestWithParam<std::int64_t> {};  // neighbours

TEST_P(VectorAttentionBackward, MatchesFiniteDifferences) {
  nn::VectorAttentionConfig c;
  c.dim = 4;
  c.pos_dim = 3;
  c.pos_mlp_hidden_dim = 5;
  c.attn_mlp_hidden_mult = 2;
  c.num_neighbors = GetParam();
  nn::VectorAttention va(c, 31), grads(c, 31);
  // Every point is its own neighbour, so rel = p_i − p_i = 0 makes pos_mlp.0's
  // pre-activation exactly its bias on B·N rows at once: keep the bias away from the ReLU
  // kink, where a difference quotient means nothing.
  for (std::int64_t k = 0; k < c.pos_mlp_hidden_dim; ++k)
    va.pos_mlp0.bias.set({k}, k % 2 ? 0.4f : -0.4f);
  train::zero_grad(grads.parameters());
  Tensor x = randn({2, 6, 4}, 32), pos = randn({2, 6, 3}, 33), w = randn({2, 6, 4}, 34);
  nn::VectorAttention::Record record;
  const Tensor y = va.forward(x, pos, &record);
  EXPECT_EQ(y.to_vector(), va.forward(x, pos).to_vector());  // recording changes nothing
  Tensor dx = va.backward(w, record, grads);
  auto loss = [&] { return dot(va.forward(x, pos), w); };
  // A first-layer weight moves the pre-activation of up to B·N·K = 72 (point, neighbour)
  // rows at once, so steps of 1e-2 and 2e-3 made some ReLU cross its kink (the quotient
  // then moved towards the analytic value as h shrank). At 5e-4 the f32 rounding of the
  // loss (~1e-6 on sums of ~50 terms of order 1) costs ~1e-3 in the quotient, under the
  // 2e-3·(1 + max|g|) bound.
  constexpr float h = 5e-4f;
  check_gradient(x, dx, loss, "dx", h);
  auto p = va.parameters(), g = grads.parameters();
  for (std::size_t i = 0; i < p.size(); ++i)
    check_gradient(*p[i].second, *g[i].second, loss, p[i].first, h);
}

INSTANTIATE_TEST_SUITE_P(Neighbours, VectorAttentionBackward, ::testing::Values(0, 3));

}  // namespace
