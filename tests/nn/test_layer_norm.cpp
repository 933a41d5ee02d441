// nn::LayerNorm against a naive double loop, and its backward against finite
// differences, and called from inside a parallel region, alone and two at once.

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "nn/check.h"
#include "qkv/threads.h"

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

// The backward against its formula evaluated in double (statistics in double too), with
// and without affine parameters; twice the same call gives the same bits.
// A row of one finite value v (a blank image patch) has mean v and variance 0 exactly, so
// x̂ = 0: y is the bias exactly, and the backward adds nothing to dweight from it. A float
// mean off by an ulp would leave y = b + noise magnified by 1/sqrt(eps) (1000x at 1e-6). A
// row of infinities stays NaN, as in torch.
TEST(NnLayerNorm, ConstantRowsAreExact) {
  const std::int64_t N = 80, rows = 64;
  nn::LayerNorm norm({N}, 1e-6), grads({N}, 1e-6);
  norm.weight = randn({N}, 5);
  norm.bias = randn({N}, 6);
  train::zero_grad(grads.parameters());
  const std::vector<float> values = randn({rows}, 7, 2.0).to_vector();
  Tensor x = Tensor::empty({rows, N});
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < N; ++i) x.data_as<float>()[r * N + i] = r == 0 ? -0.8101983f : values[r];
  nn::LayerNorm::Record record;
  const std::vector<float> y = norm.forward(x, &record).to_vector();
  EXPECT_EQ(norm.forward(x).to_vector(), y) << "inference and training forwards differ";
  const std::vector<float> b = norm.bias.to_vector();
  std::int64_t off = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t i = 0; i < N; ++i) off += y[r * N + i] != b[i];
    EXPECT_EQ(record.mean.data_as<float>()[r], x.data_as<float>()[r * N]) << "row " << r;
    EXPECT_EQ(record.variance.data_as<float>()[r], 0.0f) << "row " << r;
  }
  EXPECT_EQ(off, 0) << "outputs of constant rows that are not the bias exactly";
  // dy·x̂ = 0 on every row: dweight stays 0; dbias = Σ dy.
  const Tensor dy = randn({rows, N}, 8);
  norm.backward(dy, record, grads);
  EXPECT_EQ(grads.weight.to_vector(), std::vector<float>(N, 0.0f));
  std::vector<double> want_db(N, 0.0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < N; ++i) want_db[i] += dy.data_as<float>()[r * N + i];
  expect_close(grads.bias, want_db, rows * kU * (1 + max_abs(want_db)), "dbias");
  // Non-finite rows keep oneDNN's NaN.
  Tensor inf = Tensor::full({2, N}, std::numeric_limits<float>::infinity());
  inf.data_as<float>()[N] = std::numeric_limits<float>::quiet_NaN();
  for (float v : norm.forward(inf).to_vector()) EXPECT_TRUE(std::isnan(v));
}

TEST(NnLayerNorm, BackwardMatchesItsFormulaInDouble) {
  for (std::int64_t N : {1, 7, 64, 129})
    for (bool affine : {true, false}) {
      const std::int64_t rows = 15;
      nn::LayerNorm norm({N}, 1e-5, affine), grads({N}, 1e-5, affine);
      if (affine) {
        norm.weight = randn({N}, 3);
        train::zero_grad(grads.parameters());
      }
      Tensor x = randn({rows, N}, 9, 2.0), dy = randn({rows, N}, 10);
      nn::LayerNorm::Record record;
      norm.forward(x, &record);
      const Tensor dx = norm.backward(dy, record, grads);
      const std::vector<float> dx2 = norm.backward(dy, record, grads).to_vector();
      EXPECT_EQ(dx.to_vector(), dx2) << "not deterministic";
      const auto xv = x.to_vector(), gv = dy.to_vector();
      const auto wv = affine ? norm.weight.to_vector() : std::vector<float>(N, 1.f);
      std::vector<double> want_dx(xv.size()), want_dw(N, 0), want_db(N, 0);
      for (std::int64_t r = 0; r < rows; ++r) {
        double mean = 0, var = 0;
        for (std::int64_t i = 0; i < N; ++i) mean += xv[r * N + i];
        mean /= N;
        for (std::int64_t i = 0; i < N; ++i) var += (xv[r * N + i] - mean) * (xv[r * N + i] - mean);
        const double rstd = 1 / std::sqrt(var / N + 1e-5);
        double sum = 0, sum_xhat = 0;
        for (std::int64_t i = 0; i < N; ++i) {
          const double xhat = (xv[r * N + i] - mean) * rstd, dxhat = gv[r * N + i] * wv[i];
          sum += dxhat;
          sum_xhat += dxhat * xhat;
          want_dw[i] += gv[r * N + i] * xhat;
          want_db[i] += gv[r * N + i];
        }
        for (std::int64_t i = 0; i < N; ++i) {
          const double xhat = (xv[r * N + i] - mean) * rstd;
          want_dx[r * N + i] = rstd * (gv[r * N + i] * wv[i] - sum / N - xhat * sum_xhat / N);
        }
      }
      // f32 sums over N (the row's two reductions) or rows (dw, db) terms of size ~|dy·w|,
      // scaled by rstd (≤ 1/σ of a row of N(0, 4) values, ~1): (N + rows)·u per term with
      // a factor 16 for the chained roundings.
      const double tol = 16 * (N + rows) * kU;
      const std::string what = "N=" + std::to_string(N) + (affine ? " affine" : "");
      expect_close(dx, want_dx, tol * (1 + max_abs(want_dx)), "dx " + what);
      if (affine) {
        // Two backward calls: the gradients added twice.
        for (auto& v : want_dw) v *= 2;
        for (auto& v : want_db) v *= 2;
        expect_close(grads.weight, want_dw, tol * (1 + max_abs(want_dw)), "dweight " + what);
        expect_close(grads.bias, want_db, tol * (1 + max_abs(want_db)), "dbias " + what);
      }
    }
}

// Called from inside a parallel region (work split per thread by the caller), a LayerNorm runs
// on its caller alone, so its oneDNN primitives must be made for one thread (qkv/threads.h):
// the backward's primitive made for two and run on one summed two threads' partial dweights
// of which one had been computed.
TEST(NnLayerNorm, InsideAParallelRegionComputesWhatItComputesOutside) {
  const int before = qkv::num_threads();
  qkv::set_num_threads(2);
  const std::int64_t N = 64;
  const Tensor x = randn({300, N}, 5), dy = randn({300, N}, 6), w = randn({N}, 7), b = randn({N}, 8);
  const auto run = [&] {
    Tensor mean, variance;
    const Tensor y = nn::layer_norm(x, {N}, w, b, 1e-5, &mean, &variance);
    Tensor dw = Tensor::zeros({N}), db = Tensor::zeros({N});
    const Tensor dx = nn::layer_norm_backward(dy, x, mean, variance, w, 1e-5, &dw, &db);
    return std::vector<std::vector<float>>{y.to_vector(), dx.to_vector(), dw.to_vector(), db.to_vector()};
  };
  const std::vector<std::vector<float>> outside = run();
  std::vector<std::vector<float>> inside;
  int team = 0, threads_inside = 0;
#pragma omp parallel num_threads(2)
  if (omp_get_thread_num() == 0) {
    team = omp_get_num_threads();
    threads_inside = qkv::num_threads();
    inside = run();
  }
  qkv::set_num_threads(before);
  if (team > 1) EXPECT_EQ(threads_inside, 1) << "a region nested in an active one gets one thread";
  ASSERT_EQ(inside.size(), outside.size());
  const char* what[] = {"y", "dx", "dweight", "dbias"};
  for (std::size_t k = 0; k < outside.size(); ++k) {
    double scale = 0;
    for (const float v : outside[k]) scale = std::max(scale, std::abs(static_cast<double>(v)));
    for (std::size_t i = 0; i < outside[k].size(); ++i)
      ASSERT_NEAR(inside[k][i], outside[k][i], 1e-5 * scale) << what[k] << "[" << i << "]";
  }
}

// Two threads running the backward of LayerNorms of one shape at once get what each gets
// alone: the cached primitive is shared, its scratchpad is not. With oneDNN's own
// scratchpad, 34 of 40 such runs gave other results in one trial, 3 of 20 in another.
TEST(NnLayerNorm, BackwardsOfOneShapeOnTwoThreadsAtOnce) {
  const std::int64_t N = 128;
  const Tensor w = randn({N}, 7), b = randn({N}, 8);
  const int reps = 20;
  const int differ = differ_side_by_side(reps, [&](int rep, int t) {  // dweight, dbias, dx
    const Tensor x = randn({3200, N}, (t == 0 ? 5 : 50) + rep), dy = randn({3200, N}, (t == 0 ? 6 : 60) + rep);
    Tensor mean, variance;
    nn::layer_norm(x, {N}, w, b, 1e-5, &mean, &variance);
    Tensor dw = Tensor::zeros({N}), db = Tensor::zeros({N});
    const Tensor dx = nn::layer_norm_backward(dy, x, mean, variance, w, 1e-5, &dw, &db);
    std::vector<float> out = dw.to_vector(), more = db.to_vector(), dxv = dx.to_vector();
    out.insert(out.end(), more.begin(), more.end());
    out.insert(out.end(), dxv.begin(), dxv.end());
    return out;
  });
  if (differ < 0) GTEST_SKIP() << "OpenMP gave one thread";
  EXPECT_EQ(differ, 0) << "of " << 2 * reps << " runs side by side";
}

}  // namespace
