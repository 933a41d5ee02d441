// qkv::nn against naive loops written here in double precision.
//
// Tolerances: u = 2^-24 (f32 unit roundoff). A dot product of K terms accumulated in f32
// is off by at most ~K·u·Σ|a_k·b_k| (Higham, Accuracy and Stability §3.1); each check
// states its bound beside it.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <functional>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "qkv/attention.h"
#include "qkv/error.h"
#include "qkv/nn.h"
#include "qkv/rng.h"
#include "nn/random.h"

namespace {

using qkv::Shape;
using qkv::Tensor;
namespace nn = qkv::nn;

constexpr double kU = 0x1.0p-24;  // f32 unit roundoff

using qkv::testing::randn;

// Fails with the max error and where, when |got − want| > tol[i] anywhere.
void expect_close(const std::vector<float>& got, const std::vector<double>& want,
                  const std::vector<double>& tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = -1;
  std::size_t at = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_FALSE(std::isnan(got[i])) << what << ": NaN at " << i;
    const double excess = std::abs(got[i] - want[i]) - tol[i];
    if (excess > worst) worst = excess, at = i;
  }
  EXPECT_LE(worst, 0.0) << what << ": max excess over tolerance " << worst << " at " << at
                        << " got " << got[at] << " want " << want[at] << " tol " << tol[at];
}

void expect_close(const Tensor& got, const std::vector<double>& want, double tol,
                  const std::string& what) {
  expect_close(got.to_vector(), want, std::vector<double>(want.size(), tol), what);
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// y[m, n] = Σ_k x[m, k]·w[n, k] + b[n] in double; also Σ|x·w| for the error bound.
void naive_linear(const std::vector<float>& x, const std::vector<float>& w,
                  const std::vector<float>& b, std::int64_t M, std::int64_t K, std::int64_t N,
                  std::vector<double>& y, std::vector<double>& mag) {
  y.assign(static_cast<std::size_t>(M * N), 0);
  mag.assign(y.size(), 0);
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n) {
      double s = b.empty() ? 0 : b[n], a = b.empty() ? 0 : std::abs(b[n]);
      for (std::int64_t k = 0; k < K; ++k) {
        s += static_cast<double>(x[m * K + k]) * w[n * K + k];
        a += std::abs(static_cast<double>(x[m * K + k]) * w[n * K + k]);
      }
      y[m * N + n] = s;
      mag[m * N + n] = a;
    }
}

TEST(NnLinear, MatchesNaiveAcrossShapes) {
  for (auto [M, K, N] : std::vector<std::array<std::int64_t, 3>>{
           {1, 1, 1}, {3, 5, 7}, {17, 64, 33}, {128, 129, 65}, {2, 257, 3}}) {
    for (bool bias : {true, false}) {
      nn::Linear lin(K, N, bias, 7);
      Tensor x = randn({M, K}, 11);  // (M, K)
      Tensor y = lin.forward(x);     // (M, N)
      ASSERT_EQ(y.shape(), (Shape{M, N}));
      std::vector<double> want, mag;
      naive_linear(x.to_vector(), lin.weight.to_vector(),
                   bias ? lin.bias.to_vector() : std::vector<float>(), M, K, N, want, mag);
      // f32 accumulation over K (+1 for the bias) terms: (K + 1)·u·Σ|x·w| per output.
      std::vector<double> tol(mag.size());
      for (std::size_t i = 0; i < mag.size(); ++i) tol[i] = 2.0 * (K + 1) * kU * mag[i] + 1e-30;
      expect_close(y.to_vector(), want, tol,
                   "Linear M=" + std::to_string(M) + " K=" + std::to_string(K) +
                       " N=" + std::to_string(N));
    }
  }
}

TEST(NnLinear, StridedBatchedInputAndEdges) {
  nn::Linear lin(6, 4, true, 3);
  Tensor base = randn({2, 6, 5}, 5);          // (B, K, L)
  Tensor x = base.transpose(1, 2);             // (B, L, K) strided view
  Tensor y = lin.forward(x);                   // (B, L, N)
  ASSERT_EQ(y.shape(), (Shape{2, 5, 4}));
  Tensor yc = lin.forward(x.contiguous());
  EXPECT_EQ(y.to_vector(), yc.to_vector());   // the same contiguous copy goes in
  // M = 0: empty output; K = 0: the bias alone.
  EXPECT_EQ(lin.forward(Tensor::zeros({0, 6})).shape(), (Shape{0, 4}));
  nn::Linear empty_in(0, 3, true, 1);
  Tensor y0 = empty_in.forward(Tensor::zeros({2, 0}));  // (2, 3)
  for (std::int64_t m = 0; m < 2; ++m)
    for (std::int64_t n = 0; n < 3; ++n) EXPECT_EQ(y0.get({m, n}), empty_in.bias.get({n}));
  EXPECT_THROW(lin.forward(Tensor::zeros({2, 5})), qkv::Error);
  try {
    nn::linear(Tensor::zeros({2, 6}), Tensor::zeros({4, 6}), Tensor::zeros({3}));
    FAIL() << "no throw";
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("bias"), std::string::npos) << e.what();
  }
}

// linear(x, W, b, {activation, residual}): oneDNN's post-ops against act(naive) + residual.
TEST(NnLinear, FusedEpilogueMatchesNaive) {
  using Act = nn::LinearActivation;
  const auto activate = [](Act a, double v) {
    switch (a) {
      case Act::relu: return v > 0 ? v : 0.0;
      case Act::gelu_erf: return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
      case Act::gelu_tanh:
        return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
      case Act::none: break;
    }
    return v;
  };
  for (auto [M, K, N] : std::vector<std::array<std::int64_t, 3>>{
           {1, 1, 1}, {17, 64, 33}, {128, 129, 65}, {3, 0, 5}}) {
    for (Act act : {Act::none, Act::relu, Act::gelu_erf, Act::gelu_tanh}) {
      for (bool with_residual : {false, true}) {
        nn::Linear lin(K, N, true, 7);
        Tensor x = randn({M, K}, 11);                                         // (M, K)
        Tensor residual = randn({N, M}, 12).transpose(0, 1);                 // (M, N) strided
        nn::LinearEpilogue epilogue{act, with_residual ? residual : Tensor()};
        Tensor y = nn::linear(x, lin.weight, lin.bias, epilogue);           // (M, N)
        ASSERT_EQ(y.shape(), (Shape{M, N}));
        std::vector<double> pre, mag;
        naive_linear(x.to_vector(), lin.weight.to_vector(), lin.bias.to_vector(), M, K, N, pre,
                     mag);
        const std::vector<float> r = residual.to_vector();
        std::vector<double> want(pre.size()), tol(pre.size());
        for (std::size_t i = 0; i < pre.size(); ++i) {
          const double a = activate(act, pre[i]);
          want[i] = a + (with_residual ? r[i] : 0.0);
          // The product's bound (as above) through an activation of slope ≤ 1.13; the
          // activation itself (oneDNN's erf/tanh polynomials) within 8u of |a| + |pre|;
          // the residual add rounds once more.
          tol[i] = 1.13 * 2.0 * (K + 1) * kU * mag[i] + 8 * kU * (std::abs(a) + std::abs(pre[i])) +
                   2 * kU * std::abs(want[i]) + 1e-30;
        }
        expect_close(y.to_vector(), want, tol,
                     "linear epilogue M=" + std::to_string(M) + " K=" + std::to_string(K) +
                         " act=" + std::to_string(static_cast<int>(act)) +
                         " residual=" + std::to_string(with_residual));
      }
    }
  }
  nn::Linear lin(4, 3, true, 1);
  try {
    nn::linear(Tensor::zeros({2, 4}), lin.weight, lin.bias, {.residual = Tensor::zeros({3, 2})});
    FAIL() << "no throw";
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("residual"), std::string::npos) << e.what();
  }
}

// A packed weight gives what its plain tensor gives (M = 1 is the decoding case), keeps
// its own copy, and names its problems.
TEST(NnLinear, PackedWeightMatchesNaive) {
  for (auto [M, K, N] : std::vector<std::array<std::int64_t, 3>>{
           {1, 1, 1}, {1, 64, 33}, {1, 300, 70}, {17, 64, 33}, {128, 129, 65}, {2, 0, 3}}) {
    nn::Linear lin(K, N, true, 7);
    const nn::PackedWeight packed(lin.weight.transpose(0, 1).contiguous().transpose(0, 1));
    EXPECT_EQ(packed.out_features(), N);
    EXPECT_EQ(packed.in_features(), K);
    Tensor x = randn({M, K}, 11);  // (M, K)
    for (nn::LinearActivation act : {nn::LinearActivation::none, nn::LinearActivation::relu}) {
      Tensor residual = randn({M, N}, 13);
      nn::LinearEpilogue epilogue{act, act == nn::LinearActivation::relu ? residual : Tensor()};
      Tensor y = nn::linear(x, packed, lin.bias, epilogue);  // (M, N)
      std::vector<double> want, mag;
      naive_linear(x.to_vector(), lin.weight.to_vector(), lin.bias.to_vector(), M, K, N, want,
                   mag);
      const std::vector<float> r = residual.to_vector();
      std::vector<double> tol(want.size());
      for (std::size_t i = 0; i < want.size(); ++i) {
        if (act == nn::LinearActivation::relu) want[i] = std::max(want[i], 0.0) + r[i];
        tol[i] = 2.0 * (K + 1) * kU * mag[i] + 2 * kU * std::abs(want[i]) + 1e-30;
      }
      expect_close(y.to_vector(), want, tol,
                   "packed M=" + std::to_string(M) + " K=" + std::to_string(K) +
                       " N=" + std::to_string(N));
    }
  }
  // The packed copy is its own: changing the source afterwards changes nothing.
  nn::Linear lin(8, 5, false, 3);
  const nn::PackedWeight packed(lin.weight);
  Tensor x = randn({2, 8}, 4);
  const std::vector<float> before = nn::linear(x, packed).to_vector();
  lin.weight.data_as<float>()[0] += 1.f;
  EXPECT_EQ(nn::linear(x, packed).to_vector(), before);
  EXPECT_THROW(nn::linear(randn({2, 7}, 1), packed), qkv::Error);
  EXPECT_THROW(nn::linear(x, nn::PackedWeight()), qkv::Error);
  EXPECT_THROW(nn::PackedWeight(Tensor::zeros({3})), qkv::Error);
}

// bf16 packing: oneDNN multiplies bf16(x) by bf16(W) and accumulates in f32, so the
// result is the naive product of the rounded factors up to the f32 accumulation bound.
TEST(NnLinear, PackedBf16WeightIsTheProductOfRoundedFactors) {
  const auto round_bf16 = [](const Tensor& t) { return t.to(qkv::DType::bf16).to(qkv::DType::f32); };
  for (auto [M, K, N] : std::vector<std::array<std::int64_t, 3>>{{1, 64, 33}, {1, 300, 70},
                                                                 {17, 128, 65}}) {
    nn::Linear lin(K, N, true, 5);
    nn::PackedWeight packed;
    try {
      packed = nn::PackedWeight(lin.weight, qkv::DType::bf16);
    } catch (const qkv::Error& e) {
      if (std::string(e.what()).find("no oneDNN matmul for bf16") == std::string::npos) throw;
      GTEST_SKIP() << e.what();
    }
    EXPECT_EQ(packed.dtype(), qkv::DType::bf16);
    Tensor x = randn({M, K}, 8);
    Tensor y = nn::linear(x, packed, lin.bias);  // (M, N) f32
    std::vector<double> want, mag;
    naive_linear(round_bf16(x).to_vector(), round_bf16(lin.weight).to_vector(),
                 lin.bias.to_vector(), M, K, N, want, mag);
    std::vector<double> tol(mag.size());
    for (std::size_t i = 0; i < mag.size(); ++i) tol[i] = 2.0 * (K + 1) * kU * mag[i] + 1e-30;
    expect_close(y.to_vector(), want, tol, "bf16 packed M=" + std::to_string(M));
  }
  EXPECT_THROW(nn::PackedWeight(Tensor::zeros({2, 2}), qkv::DType::f16), qkv::Error);
}

TEST(NnEmbedding, GathersRowsAndChecksRange) {
  nn::Embedding emb(10, 4, 1);
  std::vector<std::int64_t> ids{3, 0, 9, 3, 7, 1};
  Tensor y = emb.forward(ids, {2, 3});  // (2, 3, 4)
  ASSERT_EQ(y.shape(), (Shape{2, 3, 4}));
  for (std::int64_t i = 0; i < 6; ++i)
    for (std::int64_t d = 0; d < 4; ++d)
      EXPECT_EQ(y.get({i / 3, i % 3, d}), emb.weight.get({ids[i], d}));  // a copy: exact
  std::vector<std::int64_t> bad{1, 10};
  EXPECT_THROW(emb.forward(bad, {2}), qkv::Error);
  EXPECT_THROW(emb.forward(ids, {4}), qkv::Error);
  nn::LearnedPositionalEmbedding pos(16, 4, 2);
  Tensor p = pos.forward(3, 5);  // rows 5, 6, 7
  for (std::int64_t l = 0; l < 3; ++l)
    for (std::int64_t d = 0; d < 4; ++d) EXPECT_EQ(p.get({l, d}), pos.table.weight.get({5 + l, d}));
  EXPECT_THROW(pos.forward(12, 5), qkv::Error);
}

TEST(NnLayerNorm, MatchesNaive) {
  for (std::int64_t N : {1, 7, 64, 129}) {
    nn::LayerNorm ln({N}, 1e-5);
    ln.weight = randn({N}, 3);
    ln.bias = randn({N}, 4);
    Tensor x = randn({3, 5, N}, 9, 3.0);  // (3, 5, N)
    Tensor y = ln.forward(x);
    std::vector<float> xv = x.to_vector(), w = ln.weight.to_vector(), b = ln.bias.to_vector();
    std::vector<double> want(xv.size()), tol(xv.size());
    for (std::size_t r = 0; r < xv.size() / N; ++r) {
      double mean = 0, var = 0, largest = 0;
      for (std::int64_t i = 0; i < N; ++i) mean += xv[r * N + i];
      mean /= N;
      for (std::int64_t i = 0; i < N; ++i) var += (xv[r * N + i] - mean) * (xv[r * N + i] - mean);
      var /= N;
      for (std::int64_t i = 0; i < N; ++i) largest = std::max(largest, std::abs(1.0 * xv[r * N + i]));
      const double inv = 1 / std::sqrt(var + 1e-5);
      for (std::int64_t i = 0; i < N; ++i) {
        const std::size_t at = r * N + i;
        want[at] = (xv[at] - mean) * inv * w[i] + b[i];
        // f32 statistics (oneDNN): the mean is off by ≤ N·u·max|x|, 1/σ relatively by
        // ≤ (N + 4)·u (sum of squares, sqrt, division), then the affine step rounds twice.
        tol[at] = 2 * (N + 4) * kU * std::abs(w[i]) * (std::abs(xv[at] - mean) + largest) * inv +
                  2 * kU * (std::abs(want[at]) + std::abs(b[i]));
      }
    }
    expect_close(y.to_vector(), want, tol, "LayerNorm N=" + std::to_string(N));
  }
  // No affine parameters; a multi-dimensional normalized shape.
  nn::LayerNorm plain({2, 3}, 1e-6, false);
  EXPECT_FALSE(plain.weight.defined());
  Tensor y = plain.forward(randn({4, 2, 3}, 1));
  double sum = 0;
  for (std::int64_t i = 0; i < 2; ++i)
    for (std::int64_t j = 0; j < 3; ++j) sum += y.get({1, i, j});
  EXPECT_NEAR(sum, 0.0, 6 * 4 * kU);  // mean zero up to rounding of 6 outputs of size ~1
  EXPECT_THROW(plain.forward(randn({4, 3, 2}, 1)), qkv::Error);
}

TEST(NnActivations, GeluBothFormsAndRelu) {
  Tensor x = randn({1000}, 21, 3.0);
  std::vector<float> xv = x.to_vector();
  std::vector<double> erf_form(xv.size()), tanh_form(xv.size()), relu_form(xv.size());
  for (std::size_t i = 0; i < xv.size(); ++i) {
    const double v = xv[i];
    erf_form[i] = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    tanh_form[i] = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    relu_form[i] = v > 0 ? v : 0;
  }
  // Double evaluation rounded once to f32: u·|y|, + 1e-30 for exact zeros.
  auto tol = [](const std::vector<double>& w) {
    std::vector<double> t(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) t[i] = kU * std::abs(w[i]) + 1e-30;
    return t;
  };
  expect_close(nn::gelu(x).to_vector(), erf_form, tol(erf_form), "gelu");
  expect_close(nn::gelu(x, nn::GeluApproximation::tanh).to_vector(), tanh_form, tol(tanh_form),
               "gelu tanh");
  expect_close(nn::relu(x).to_vector(), relu_form, tol(relu_form), "relu");
}

TEST(NnPositional, SinusoidalTable) {
  for (std::int64_t D : {1, 6, 7, 64}) {
    Tensor pe = nn::sinusoidal_positional_encoding(50, D);  // (50, D)
    std::vector<double> want;
    for (std::int64_t p = 0; p < 50; ++p)
      for (std::int64_t d = 0; d < D; ++d) {
        const double angle = p / std::pow(10000.0, static_cast<double>(d - d % 2) / D);
        want.push_back(d % 2 == 0 ? std::sin(angle) : std::cos(angle));
      }
    expect_close(pe, want, kU, "sinusoidal D=" + std::to_string(D));  // |sin| <= 1, one rounding
  }
}

TEST(NnPositional, RopeRotateHalfWithOffset) {
  const std::int64_t B = 2, H = 3, L = 5, D = 8;
  Tensor x = randn({B, L, H, D}, 4).permute({0, 2, 1, 3});  // (B, H, L, D) strided
  for (std::int64_t offset : {0, 7}) {
    Tensor y = nn::apply_rope(x, offset);  // (B, H, L, D)
    std::vector<double> want;
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t l = 0; l < L; ++l)
          for (std::int64_t d = 0; d < D; ++d) {
            const std::int64_t i = d % (D / 2);
            const double angle = (offset + l) * std::pow(10000.0, -2.0 * i / D);
            const double a = x.get({b, h, l, i}), c = x.get({b, h, l, i + D / 2});
            want.push_back(d < D / 2 ? a * std::cos(angle) - c * std::sin(angle)
                                     : c * std::cos(angle) + a * std::sin(angle));
          }
    // cos/sin rounded to f32 (u each), a product and a sum: 4u·(|a| + |c|) <= 4u·2·max|x|.
    expect_close(y, want, 8 * kU * 5.0, "rope offset=" + std::to_string(offset));
  }
  // Rotating positions 0..L with offset o equals rows o..o+L of a longer rotation.
  Tensor longer = nn::apply_rope(randn({1, 1, 9, 4}, 8));
  Tensor part = nn::apply_rope(randn({1, 1, 9, 4}, 8).slice(2, 4, 9), 4);
  for (std::int64_t l = 0; l < 5; ++l)
    for (std::int64_t d = 0; d < 4; ++d)
      EXPECT_EQ(part.get({0, 0, l, d}), longer.get({0, 0, 4 + l, d}));
  EXPECT_THROW(nn::apply_rope(Tensor::zeros({1, 1, 2, 3})), qkv::Error);
}

TEST(NnPositional, AlibiSlopes) {
  std::vector<float> s8 = nn::alibi_slopes(8);
  for (int h = 0; h < 8; ++h) EXPECT_EQ(s8[h], std::ldexp(1.0f, -(h + 1)));
  // n = 6: slopes for 4 (2^-2, 2^-4, 2^-6, 2^-8), then every other slope for 8 (2^-1, 2^-3).
  std::vector<float> s6 = nn::alibi_slopes(6);
  std::vector<float> want6{0.25f, 0.0625f, 0.015625f, 0.00390625f, 0.5f, 0.125f};
  EXPECT_EQ(s6, want6);
  EXPECT_EQ(nn::alibi_slopes(1), std::vector<float>{0.00390625f});
  EXPECT_EQ(nn::alibi_slopes(12).size(), 12u);
  EXPECT_THROW(nn::alibi_slopes(0), qkv::Error);
}

TEST(NnPositional, AddAndConcat) {
  Tensor x = randn({2, 3, 4}, 1);     // (B, L, D)
  Tensor table = randn({5, 4}, 2);    // (L', D)
  Tensor added = nn::add_positional(x, table);
  Tensor cat = nn::concat_positional(x, randn({5, 2}, 3));  // (2, 3, 6)
  Tensor t2 = randn({5, 2}, 3);
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t l = 0; l < 3; ++l) {
      for (std::int64_t d = 0; d < 4; ++d) {
        EXPECT_EQ(added.get({b, l, d}), x.get({b, l, d}) + table.get({l, d}));
        EXPECT_EQ(cat.get({b, l, d}), x.get({b, l, d}));
      }
      for (std::int64_t d = 0; d < 2; ++d) EXPECT_EQ(cat.get({b, l, 4 + d}), t2.get({l, d}));
    }
  EXPECT_THROW(nn::add_positional(x, randn({2, 4}, 1)), qkv::Error);
}

// ---------------------------------------------------------------------------------------
// MultiheadAttention against a naive double loop in torch's polarity.

struct NaiveMha {
  std::vector<double> out;      // (B, L, E)
  std::vector<double> weights;  // (B, H, L, S)
};

// allowed(b, h, i, j) / added(b, h, i, j) describe the masks in the test's own terms.
template <class Allowed, class Added>
NaiveMha naive_mha(const nn::MultiheadAttention& m, const Tensor& query, const Tensor& key,
                   const Tensor& value, Allowed allowed, Added added) {
  const std::int64_t B = query.size(0), L = query.size(1), S = key.size(1);
  const std::int64_t E = m.config.embed_dim, H = m.config.num_heads, D = E / H;
  auto project = [&](const Tensor& x, std::int64_t which, std::int64_t n) {
    const Tensor w = m.packed() ? m.in_proj_weight.slice(0, which * E, (which + 1) * E)
                                : (which == 0 ? m.q_proj_weight
                                              : which == 1 ? m.k_proj_weight : m.v_proj_weight);
    std::vector<double> y(static_cast<std::size_t>(B * n * E));
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < n; ++t)
        for (std::int64_t e = 0; e < E; ++e) {
          double s = m.in_proj_bias.defined() ? m.in_proj_bias.get({which * E + e}) : 0.0;
          for (std::int64_t c = 0; c < x.size(2); ++c) s += double(x.get({b, t, c})) * w.get({e, c});
          y[(b * n + t) * E + e] = s;
        }
    return y;  // (B, n, E)
  };
  const auto q = project(query, 0, L), k = project(key, 1, S), v = project(value, 2, S);
  NaiveMha r;
  r.weights.assign(static_cast<std::size_t>(B * H * L * S), 0);
  std::vector<double> merged(static_cast<std::size_t>(B * L * E), 0);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < L; ++i) {
        std::vector<double> s(static_cast<std::size_t>(S));
        double mx = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j < S; ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < D; ++d)
            dot += q[(b * L + i) * E + h * D + d] * k[(b * S + j) * E + h * D + d];
          s[j] = allowed(b, h, i, j) ? dot / std::sqrt(double(D)) + added(b, h, i, j)
                                     : -std::numeric_limits<double>::infinity();
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (std::int64_t j = 0; j < S; ++j) z += s[j] == -INFINITY ? 0 : std::exp(s[j] - mx);
        for (std::int64_t j = 0; j < S; ++j) {
          const double p = s[j] == -INFINITY ? 0 : std::exp(s[j] - mx) / z;
          r.weights[((b * H + h) * L + i) * S + j] = p;
          for (std::int64_t d = 0; d < D; ++d)
            merged[(b * L + i) * E + h * D + d] += p * v[(b * S + j) * E + h * D + d];
        }
      }
  r.out.assign(merged.size(), 0);
  for (std::int64_t bl = 0; bl < B * L; ++bl)
    for (std::int64_t e = 0; e < E; ++e) {
      double s = m.out_proj.bias.defined() ? m.out_proj.bias.get({e}) : 0.0;
      for (std::int64_t c = 0; c < E; ++c) s += merged[bl * E + c] * m.out_proj.weight.get({e, c});
      r.out[bl * E + e] = s;
    }
  return r;
}

// Three f32 products of at most max(E, kdim, vdim) terms each, on inputs of size ~1 and
// weights ~1/√E, plus the softmax (a few u relative): 64·K·u·(1 + max|y|) covers it with
// room for the chained roundings (inputs of one stage carry the previous stage's error).
double mha_tolerance(std::int64_t K, const std::vector<double>& want) {
  return 64.0 * static_cast<double>(K) * kU * (1.0 + max_abs(want));
}

void set_random_biases(nn::MultiheadAttention& m, std::uint64_t seed) {
  if (m.in_proj_bias.defined()) m.in_proj_bias = randn({3 * m.config.embed_dim}, seed, 0.5);
  if (m.out_proj.bias.defined()) m.out_proj.bias = randn({m.config.embed_dim}, seed + 1, 0.5);
}

TEST(MultiHeadAttention, SelfCausalCrossAgainstNaive) {
  const std::int64_t B = 2, E = 16, H = 4;
  for (bool bias : {true, false}) {
    nn::MultiheadAttention m({E, H, bias}, 3);
    set_random_biases(m, 5);
    Tensor x = randn({B, 7, E}, 1);  // (B, L, E)
    auto all = [](auto...) { return true; };
    auto none = [](auto...) { return 0.0; };
    {  // self
      auto got = m.forward(x, x, x, {}, true, false);
      auto want = naive_mha(m, x, x, x, all, none);
      expect_close(got.out, want.out, mha_tolerance(E, want.out), "self out");
      expect_close(got.weights, want.weights, 16 * E * kU, "self weights per head");
    }
    {  // causal, averaged weights
      nn::AttentionMasks masks;
      masks.is_causal = true;
      auto got = m.forward(x, x, x, masks, true, true);
      auto want = naive_mha(m, x, x, x, [](auto, auto, auto i, auto j) { return j <= i; }, none);
      expect_close(got.out, want.out, mha_tolerance(E, want.out), "causal out");
      std::vector<double> avg(static_cast<std::size_t>(B * 7 * 7), 0);
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < H; ++h)
          for (std::int64_t i = 0; i < 49; ++i) avg[b * 49 + i] += want.weights[(b * H + h) * 49 + i] / H;
      ASSERT_EQ(got.weights.shape(), (Shape{B, 7, 7}));
      expect_close(got.weights, avg, 16 * E * kU, "causal weights averaged");
    }
    {  // cross: L = 3 queries over S = 11 keys
      Tensor q = randn({B, 3, E}, 2), kv = randn({B, 11, E}, 3);
      auto got = m.forward(q, kv, kv);
      auto want = naive_mha(m, q, kv, kv, all, none);
      expect_close(got.out, want.out, mha_tolerance(E, want.out), "cross out");
      EXPECT_FALSE(got.weights.defined());
    }
  }
}

TEST(MultiHeadAttention, EdgeSizes) {
  // D = 1 (as many heads as features), L = S = 1, and an empty query.
  nn::MultiheadAttention m({4, 4}, 2);
  set_random_biases(m, 1);
  auto all = [](auto...) { return true; };
  auto none = [](auto...) { return 0.0; };
  for (auto [L, S] : std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 1}, {1, 5}, {3, 1}}) {
    Tensor q = randn({1, L, 4}, 3), kv = randn({1, S, 4}, 4);
    auto got = m.forward(q, kv, kv, {}, true, false);
    auto want = naive_mha(m, q, kv, kv, all, none);
    expect_close(got.out, want.out, mha_tolerance(4, want.out), "edge out");
    expect_close(got.weights, want.weights, 16 * 4 * kU, "edge weights");
  }
  auto empty = m.forward(Tensor::zeros({2, 0, 4}), randn({2, 3, 4}, 1), randn({2, 3, 4}, 2));
  EXPECT_EQ(empty.out.shape(), (Shape{2, 0, 4}));
}

TEST(MultiHeadAttention, KdimVdimSeparateProjections) {
  const std::int64_t B = 2, E = 12, H = 3, kdim = 5, vdim = 9;
  nn::MultiheadAttention m({E, H, true, kdim, vdim}, 4);
  set_random_biases(m, 6);
  EXPECT_FALSE(m.packed());
  EXPECT_EQ(m.k_proj_weight.shape(), (Shape{E, kdim}));
  Tensor q = randn({B, 4, E}, 1), k = randn({B, 6, kdim}, 2), v = randn({B, 6, vdim}, 3);
  auto got = m.forward(q, k, v);
  auto want = naive_mha(m, q, k, v, [](auto...) { return true; }, [](auto...) { return 0.0; });
  expect_close(got.out, want.out, mha_tolerance(vdim, want.out), "kdim/vdim out");
  EXPECT_THROW(m.forward(q, v, v), qkv::Error);  // key with vdim features
}

TEST(MultiHeadAttention, MasksInTorchPolarity) {
  const std::int64_t B = 2, E = 8, H = 2, L = 4, S = 6;
  nn::MultiheadAttention m({E, H}, 9);
  set_random_biases(m, 2);
  Tensor q = randn({B, L, E}, 1), kv = randn({B, S, E}, 2);
  // key_padding_mask (B, S), true = IGNORE; not a suffix in batch 1 (so no key_lengths).
  const bool pad[2][6] = {{false, false, false, false, true, true},
                          {true, false, false, true, false, false}};
  Tensor kpm = Tensor::empty({B, S}, qkv::DType::boolean);
  Tensor kpm_suffix = Tensor::empty({B, S}, qkv::DType::boolean);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t j = 0; j < S; ++j) {
      kpm.set({b, j}, pad[b][j]);
      kpm_suffix.set({b, j}, j >= 4 - b);
    }
  // attn_mask (L, S) bool, true = NOT allowed: block j == i + 1.
  Tensor am = Tensor::empty({L, S}, qkv::DType::boolean);
  for (std::int64_t i = 0; i < L; ++i)
    for (std::int64_t j = 0; j < S; ++j) am.set({i, j}, j == i + 1);
  // attn_mask (B·H, L, S) float, added.
  Tensor amf = randn({B * H, L, S}, 7);
  auto none = [](auto...) { return 0.0; };
  struct Case {
    std::string name;
    nn::AttentionMasks masks;
    std::function<bool(std::int64_t, std::int64_t, std::int64_t, std::int64_t)> allowed;
    std::function<double(std::int64_t, std::int64_t, std::int64_t, std::int64_t)> added;
  };
  std::vector<Case> cases;
  cases.push_back({"kpm", {Tensor(), kpm, false},
                   [&](auto b, auto, auto, auto j) { return !pad[b][j]; }, none});
  cases.push_back({"kpm suffix (key_lengths)", {Tensor(), kpm_suffix, false},
                   [&](auto b, auto, auto, auto j) { return j < 4 - b; }, none});
  cases.push_back({"bool attn_mask", {am, Tensor(), false},
                   [&](auto, auto, auto i, auto j) { return j != i + 1; }, none});
  cases.push_back({"float attn_mask per head", {amf, Tensor(), false},
                   [](auto...) { return true; },
                   [&](auto b, auto h, auto i, auto j) { return double(amf.get({b * H + h, i, j})); }});
  cases.push_back({"bool attn_mask + kpm + causal", {am, kpm, true},
                   [&](auto b, auto, auto i, auto j) { return !pad[b][j] && j != i + 1 && j <= i; },
                   none});
  cases.push_back({"float attn_mask + bool kpm", {amf, kpm, false},
                   [&](auto b, auto, auto, auto j) { return !pad[b][j]; },
                   [&](auto b, auto h, auto i, auto j) { return double(amf.get({b * H + h, i, j})); }});
  for (const auto& c : cases) {
    auto got = m.forward(q, kv, kv, c.masks, true, false);
    auto want = naive_mha(m, q, kv, kv, c.allowed, c.added);
    expect_close(got.out, want.out, mha_tolerance(E, want.out), c.name + " out");
    expect_close(got.weights, want.weights, 16 * E * kU, c.name + " weights");
  }
  // Bad shapes name the argument.
  for (auto [masks, name] : std::vector<std::pair<nn::AttentionMasks, std::string>>{
           {{Tensor::zeros({L, S + 1}), Tensor(), false}, "attn_mask"},
           {{Tensor(), Tensor::zeros({B, S - 1}), false}, "key_padding_mask"}}) {
    try {
      m.forward(q, kv, kv, masks);
      FAIL() << name;
    } catch (const qkv::Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

TEST(MultiHeadAttention, FullyMaskedRowGivesBiasNotNaN) {
  // torch gives NaN for a row with every key masked; qkv gives attention output 0, so the
  // layer's output row is out_proj.bias.
  nn::MultiheadAttention m({8, 2}, 1);
  set_random_biases(m, 3);
  Tensor x = randn({1, 3, 8}, 4);
  Tensor kpm = Tensor::full({1, 3}, 1.f, qkv::DType::boolean);
  auto got = m.forward(x, x, x, {Tensor(), kpm, false});
  for (std::int64_t i = 0; i < 3; ++i)
    for (std::int64_t e = 0; e < 8; ++e) EXPECT_EQ(got.out.get({0, i, e}), m.out_proj.bias.get({e}));
}

TEST(MultiHeadAttention, KVCacheDecodingEqualsCausalForward) {
  const std::int64_t B = 2, E = 16, H = 4, L = 9;
  nn::MultiheadAttention m({E, H}, 5);
  set_random_biases(m, 8);
  Tensor x = randn({B, L, E}, 3);  // (B, L, E)
  nn::AttentionMasks causal;
  causal.is_causal = true;
  Tensor full = m.forward(x, x, x, causal).out;  // (B, L, E)
  std::vector<double> want;
  for (float f : full.to_vector()) want.push_back(f);
  for (std::int64_t chunk : {1, 2, 4}) {  // token by token, and prefill-style chunks
    nn::KVCache cache = m.make_cache(B, L);
    EXPECT_EQ(cache.k.shape(), (Shape{B, H, L, E / H}));
    const void* storage = cache.k.data();
    std::vector<double> got_v(static_cast<std::size_t>(B * L * E));
    for (std::int64_t t = 0; t < L; t += chunk) {
      const std::int64_t T = std::min(chunk, L - t);
      Tensor step = m.forward_incremental(x.slice(1, t, t + T), cache);  // (B, T, E)
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t i = 0; i < T; ++i)
          for (std::int64_t e = 0; e < E; ++e) got_v[(b * L + t + i) * E + e] = step.get({b, i, e});
    }
    EXPECT_EQ(cache.length, L);
    EXPECT_EQ(cache.k.data(), storage);  // allocated once
    std::vector<float> got(got_v.begin(), got_v.end());
    // The same products; only the attention kernel's split differs (decode path merges
    // partial softmaxes): a few u relative to the output's magnitude per term of E.
    expect_close(got, want, std::vector<double>(want.size(), 8 * E * kU * (1 + max_abs(want))),
                 "kv cache chunk=" + std::to_string(chunk));
    EXPECT_THROW(m.forward_incremental(x.slice(1, 0, 1), cache), qkv::Error);  // full
  }
  // A bf16 cache: k, v and (to match them) q are rounded to bf16 (2^-9 relative each), and
  // the kernel rounds P to bf16 for P·V: three roundings per score, one per weight, each
  // ~2^-9 of the output's magnitude per term of the E-wide out_proj.
  nn::KVCache half = m.make_cache(B, L, qkv::DType::bf16);
  EXPECT_EQ(half.k.dtype(), qkv::DType::bf16);
  std::vector<float> got(static_cast<std::size_t>(B * L * E));
  for (std::int64_t t = 0; t < L; ++t) {
    const std::vector<float> step = m.forward_incremental(x.slice(1, t, t + 1), half).to_vector();
    for (std::int64_t b = 0; b < B; ++b)  // step (B, 1, E) -> rows (b, t) of (B, L, E)
      std::copy_n(step.begin() + b * E, E, got.begin() + (b * L + t) * E);
  }
  double err = 0;
  for (std::size_t i = 0; i < got.size(); ++i) err = std::max(err, std::abs(got[i] - want[i]));
  EXPECT_LE(err, 4 * E * std::ldexp(1.0, -9) * (1 + max_abs(want)));
  EXPECT_GT(err, 0.0) << "a bf16 cache gave the f32 result exactly: not rounded?";
  EXPECT_THROW(m.make_cache(B, L, qkv::DType::boolean), qkv::Error);
}

TEST(MultiHeadAttention, ConfigAndStateDictErrors) {
  try {
    nn::MultiheadAttention bad({10, 3});
    FAIL();
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_heads"), std::string::npos) << e.what();
  }
  nn::MultiheadAttention m({8, 2});
  nn::StateDict sd = nn::state_dict(m);
  std::vector<std::string> names;
  for (auto& [n, t] : sd) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"in_proj_bias", "in_proj_weight", "out_proj.bias",
                                             "out_proj.weight"}));
  auto expect_error = [&](nn::StateDict s, const std::string& name) {
    try {
      nn::load_state_dict(m, s);
      FAIL() << name;
    } catch (const qkv::Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  };
  nn::StateDict missing = sd;
  missing.erase("out_proj.weight");
  expect_error(missing, "out_proj.weight");
  nn::StateDict misshaped = sd;
  misshaped["in_proj_weight"] = Tensor::zeros({8, 8});
  expect_error(misshaped, "in_proj_weight");
  nn::StateDict extra = sd;
  extra["bias_k"] = Tensor::zeros({1, 1, 8});
  expect_error(extra, "bias_k");
  // Loading copies: changing the source afterwards changes nothing.
  nn::StateDict fresh;
  for (auto& [n, t] : sd) fresh[n] = randn(t.shape(), 3);
  nn::load_state_dict(m, fresh);
  const float before = m.in_proj_weight.get({0, 0});
  fresh["in_proj_weight"].set({0, 0}, before + 1);
  EXPECT_EQ(m.in_proj_weight.get({0, 0}), before);
}

// ---------------------------------------------------------------------------------------
// Blocks, against their definitions composed from the (tested) pieces above.

TEST(NnBlocks, EncoderLayerBothNormOrders) {
  for (bool norm_first : {false, true})
    for (auto act : {nn::Activation::relu, nn::Activation::gelu}) {
      nn::TransformerLayerConfig c{16, 4, 32, act, 1e-5, norm_first, true};
      nn::TransformerEncoderLayer layer(c, 3);
      layer.norm1.weight = randn({16}, 1);
      layer.norm2.bias = randn({16}, 2);
      Tensor x = randn({2, 5, 16}, 4);
      nn::AttentionMasks masks;
      masks.is_causal = true;
      Tensor got = layer.forward(x, masks);
      auto sa = [&](const Tensor& t) { return layer.self_attn.forward(t, t, t, masks).out; };
      // residual + linear2(act(linear1(t))), the activation and the residual as the
      // products' epilogues (FeedForward's fused form).
      auto ff_plus = [&](const Tensor& t, const Tensor& residual) {
        const nn::LinearActivation a = act == nn::Activation::relu ? nn::LinearActivation::relu
                                                                   : nn::LinearActivation::gelu_erf;
        Tensor h = nn::linear(t, layer.ff.linear1.weight, layer.ff.linear1.bias, {a, Tensor()});
        return nn::linear(h, layer.ff.linear2.weight, layer.ff.linear2.bias,
                          {nn::LinearActivation::none, residual});
      };
      auto add = [](const Tensor& a, const Tensor& b) {
        Tensor o = a.clone();
        for (std::int64_t i = 0; i < o.numel(); ++i) o.data_as<float>()[i] += b.contiguous().data_as<float>()[i];
        return o;
      };
      Tensor want;
      if (norm_first) {
        want = add(x, sa(layer.norm1.forward(x)));
        want = ff_plus(layer.norm2.forward(want), want);
      } else {
        want = layer.norm1.forward(add(x, sa(x)));
        want = layer.norm2.forward(ff_plus(want, want));
      }
      // The same operations in the same order: bitwise equal.
      EXPECT_EQ(got.to_vector(), want.to_vector()) << "norm_first=" << norm_first;
    }
}

TEST(NnBlocks, TransformerParameterNamesAndLoad) {
  nn::TransformerConfig c;
  c.layer = {8, 2, 16, nn::Activation::relu, 1e-5, false, true};
  c.num_encoder_layers = 2;
  c.num_decoder_layers = 1;
  nn::Transformer t(c, 1);
  nn::StateDict sd = nn::state_dict(t);
  for (const char* name : {"encoder.layers.0.self_attn.in_proj_weight", "encoder.layers.1.linear1.weight",
                           "encoder.layers.1.norm2.bias", "encoder.norm.weight",
                           "decoder.layers.0.multihead_attn.out_proj.bias",
                           "decoder.layers.0.norm3.weight", "decoder.norm.bias"})
    EXPECT_EQ(sd.count(name), 1u) << name;
  // 2 encoder layers × 12 + 2 + 1 decoder layer × 18 + 2.
  EXPECT_EQ(sd.size(), 2u * 12 + 2 + 18 + 2);
  Tensor src = randn({2, 5, 8}, 1), tgt = randn({2, 3, 8}, 2);
  Tensor out = t.forward(src, tgt);
  ASSERT_EQ(out.shape(), (Shape{2, 3, 8}));
  // Loading a state dict of another instance reproduces its output.
  nn::Transformer other(c, 99);
  nn::load_state_dict(other, sd);
  EXPECT_EQ(other.forward(src, tgt).to_vector(), out.to_vector());
  EXPECT_THROW(t.forward(src, randn({3, 3, 8}, 1)), qkv::Error);
}

// ---------------------------------------------------------------------------------------
// Vector attention against the Point Transformer formula in double.

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

}  // namespace
