// nn::LayerNorm against a naive double loop, and its backward against finite
// differences.

#include "nn/check.h"

namespace {

using qkv::Shape;
using qkv::Tensor;
using namespace qkv::testing;  // nn::, train::, randn, expect_close, check_gradient, ...

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

TEST(NnLayerNorm, BackwardMatchesFiniteDifferences) {
  nn::LayerNorm norm({6}, 1e-5), grads({6}, 1e-5);
  norm.weight = randn({6}, 4);
  norm.bias = randn({6}, 5);
  train::zero_grad(grads.parameters());
  Tensor x = randn({3, 4, 6}, 6), w = randn({3, 4, 6}, 7);
  nn::LayerNorm::Record record;
  Tensor y = norm.forward(x, &record);
  // The recording forward is the inference forward (one oneDNN primitive, training mode).
  EXPECT_EQ(y.to_vector(), norm.forward(x).to_vector());
  Tensor dx = norm.backward(w, record, grads);
  auto loss = [&] { return dot(norm.forward(x), w); };
  check_gradient(x, dx, loss, "dx");
  check_gradient(norm.weight, grads.weight, loss, "dweight");
  check_gradient(norm.bias, grads.bias, loss, "dbias");
}

// A normalized shape of two dimensions normalises over both, forward and backward.
TEST(NnLayerNorm, BackwardOverTwoDimensions) {
  nn::LayerNorm norm({2, 3}, 1e-5), grads({2, 3}, 1e-5);
  norm.weight = randn({2, 3}, 4);
  norm.bias = randn({2, 3}, 5);
  train::zero_grad(grads.parameters());
  Tensor x = randn({4, 2, 3}, 6), w = randn({4, 2, 3}, 7);
  nn::LayerNorm::Record record;
  norm.forward(x, &record);
  EXPECT_EQ(record.mean.shape(), (Shape{4}));
  Tensor dx = norm.backward(w, record, grads);
  auto loss = [&] { return dot(norm.forward(x), w); };
  check_gradient(x, dx, loss, "dx");
  check_gradient(norm.weight, grads.weight, loss, "dweight");
  check_gradient(norm.bias, grads.bias, loss, "dbias");
}

}  // namespace
