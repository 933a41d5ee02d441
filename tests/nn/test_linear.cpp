// nn::linear, PackedWeight and nn::Linear against a naive double loop, and Linear's
// backward against finite differences.

#include <array>

#include "nn/check.h"

namespace {

using qkv::Shape;
using qkv::Tensor;
using namespace qkv::testing;  // nn::, train::, randn, expect_close, check_gradient, ...

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

// Linear::forward with both forms: where the packed copy is only transposed rows
// (plain_layout(), f32 on CPUs without AVX-512), 32 rows of x and more take the stored
// weight, fewer the packed copy; elsewhere always the packed copy. Either way the result
// is the one of the form it took, bit for bit.
TEST(NnLinear, ForwardPicksTheFormByRows) {
  nn::Linear lin(48, 40, true, 5);
  lin.pack();
  for (std::int64_t M : {1, 31, 32, 100}) {
    Tensor x = randn({M, 48}, 6);
    const bool rows = lin.packed.plain_layout() && M >= 32;
    const Tensor want = rows ? nn::linear(x, lin.weight, lin.bias) : nn::linear(x, lin.packed, lin.bias);
    EXPECT_EQ(lin.forward(x).to_vector(), want.to_vector()) << "M=" << M;
  }
  nn::Linear packed_only = lin;
  packed_only.weight = Tensor();  // a layer that dropped its plain copy uses the packed one
  Tensor x = randn({64, 48}, 7);
  EXPECT_EQ(packed_only.forward(x).to_vector(), nn::linear(x, lin.packed, lin.bias).to_vector());
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


TEST(NnLinear, BackwardMatchesFiniteDifferences) {
  nn::Linear layer(7, 5, true, 3);
  Tensor x = randn({2, 3, 7}, 1), w = randn({2, 3, 5}, 2);
  nn::Linear grads(7, 5, true, 3);
  train::zero_grad(grads.parameters());
  nn::Linear::Record record;
  const Tensor y = layer.forward(x, {}, &record);
  // The recording forward is the inference forward.
  EXPECT_EQ(y.to_vector(), layer.forward(x).to_vector());
  Tensor dx = layer.backward(w, record, grads);
  auto loss = [&] { return dot(layer.forward(x), w); };
  check_gradient(x, dx, loss, "dx");
  check_gradient(layer.weight, grads.weight, loss, "dweight");
  check_gradient(layer.bias, grads.bias, loss, "dbias");
}

TEST(NnLinear, BackwardAccumulatesIntoGradients) {
  nn::Linear layer(4, 3, true, 1), grads(4, 3, true, 1);
  train::zero_grad(grads.parameters());
  Tensor x = randn({5, 4}, 1), w = randn({5, 3}, 2);
  nn::Linear::Record record;
  layer.forward(x, {}, &record);
  layer.backward(w, record, grads);
  const auto once = grads.weight.to_vector();
  layer.backward(w, record, grads);
  const auto twice = grads.weight.to_vector();
  for (std::size_t i = 0; i < once.size(); ++i) EXPECT_FLOAT_EQ(twice[i], 2 * once[i]);
}

// Two threads running a linear layer of one shape at once, forward and backward, get what
// each gets alone: the cached matmul primitives are shared, their scratchpads are not. The
// shape is the ViT's q, k, v projection over a batch (128 images of 50 tokens). Which
// products need a scratchpad is oneDNN's choice per CPU: on AVX2 (oneDNN 2.6's gemm:jit)
// these need none and the test passes either way; AVX-512 CPUs get its brgemm matmul, which
// keeps packed blocks in one. NnLayerNorm.BackwardsOfOneShapeOnTwoThreadsAtOnce is the check
// that fails on every CPU without per-run scratchpads.
TEST(NnLinear, ProductsOfOneShapeOnTwoThreadsAtOnce) {
  const std::int64_t M = 6400, K = 128, N = 384;
  const Tensor w = randn({N, K}, 3), b = randn({N}, 4);
  const int reps = 6;
  const int differ = differ_side_by_side(reps, [&](int rep, int t) {  // y, dx, dweight, dbias
    const Tensor x = randn({M, K}, (t == 0 ? 5 : 50) + rep), dy = randn({M, N}, (t == 0 ? 6 : 60) + rep);
    const Tensor y = nn::linear(x, w, b);
    Tensor dw = Tensor::zeros({N, K}), db = Tensor::zeros({N});
    const Tensor dx = nn::linear_backward(dy, x, w, dw, &db);
    std::vector<float> out = y.to_vector();
    for (const Tensor& more : {dx, dw, db}) {
      const std::vector<float> v = more.to_vector();
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  });
  if (differ < 0) GTEST_SKIP() << "OpenMP gave one thread";
  EXPECT_EQ(differ, 0) << "of " << 2 * reps << " runs side by side";
}

}  // namespace
