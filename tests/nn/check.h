// What the tests of tests/nn share (and the models' gradient tests): the nn headers,
// seeded random tensors (nn/random.h), closeness closeness against a double-precision want with a derived tolerance, and gradients against
// central finite differences.
//
// Tolerances: u = 2^-24 (f32 unit roundoff). A dot product of K terms accumulated in f32
// is off by at most ~K·u·Σ|a_k·b_k| (Higham, Accuracy and Stability §3.1); each check
// states its bound beside it.
//
// Finite differences: the loss is L = Σ y∘w for a fixed random w, computed in f32; the
// central difference (L(θ+h) − L(θ−h)) / 2h has truncation error O(h²·L''') and rounding
// error about u·Σ|y∘w| / h. With h = 1e-2 and sums of ~100 terms of order 1 both stay
// below 1e-3, so analytic and numeric gradients must agree within 2e-3·(1 + max|g|) — far
// above the error of a correct backward, far below a missing term (which changes a
// gradient by O(max|g|)).
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nn/random.h"
#include "qkv/error.h"
#include "qkv/nn.h"
#include "qkv/rng.h"
#include "qkv/tensor.h"
#include "qkv/threads.h"
#include "qkv/train.h"

namespace qkv::testing {

namespace nn = qkv::nn;
namespace train = qkv::train;

constexpr double kU = 0x1.0p-24;  // f32 unit roundoff

// Fails with the max error and where, when |got − want| > tol[i] anywhere.
inline void expect_close(const std::vector<float>& got, const std::vector<double>& want,
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

inline void expect_close(const Tensor& got, const std::vector<double>& want, double tol,
                         const std::string& what) {
  expect_close(got.to_vector(), want, std::vector<double>(want.size(), tol), what);
}

inline double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// Adds N(0, scale²) noise to every parameter, seeded. A model's initial biases (0) and
// gains (1) would hide a bias or gain used in the wrong place, or a gradient dropped.
inline void perturb(const nn::ParameterList& parameters, std::uint64_t seed, double scale = 0.3) {
  Rng rng(seed);
  for (auto& [name, t] : parameters) {
    float* p = t->data_as<float>();
    for (std::int64_t i = 0; i < t->numel(); ++i) p[i] += static_cast<float>(scale * rng.normal());
  }
}

// Σ a∘b in double.
inline double dot(const Tensor& a, const Tensor& b) {
  const auto x = a.contiguous().to_vector(), y = b.contiguous().to_vector();
  double s = 0;
  for (std::size_t i = 0; i < x.size(); ++i) s += double{x[i]} * y[i];
  return s;
}

// Checks `analytic` (same shape as `theta`) against central differences of loss() with
// respect to a spread of entries of theta (every entry when small).
inline void check_gradient(Tensor& theta, const Tensor& analytic,
                           const std::function<double()>& loss, const std::string& what,
                           float h = 1e-2f) {
  ASSERT_EQ(theta.shape(), analytic.shape()) << what;
  const auto g = analytic.to_vector();
  double max_g = 0;
  for (float v : g) max_g = std::max(max_g, double{std::abs(v)});
  const std::int64_t n = theta.numel();
  const std::int64_t stride = std::max<std::int64_t>(1, n / 24);
  float* p = theta.data_as<float>();
  for (std::int64_t i = 0; i < n; i += stride) {
    const float keep = p[i];
    p[i] = keep + h;
    const double up = loss();
    p[i] = keep - h;
    const double down = loss();
    p[i] = keep;
    const double numeric = (up - down) / (2.0 * h);
    EXPECT_NEAR(g[static_cast<std::size_t>(i)], numeric, 2e-3 * (1 + max_g))
        << what << " entry " << i;
  }
}

// How many of 2·reps runs of `outputs` gave other bits side by side than alone. For each
// rep, outputs(rep, 0) and outputs(rep, 1) run one after the other on one thread of a
// parallel region, then side by side, each on a thread of its own, as a caller running
// qkv layers from its own threads does; qkv's thread count is 2 throughout, so each run
// uses the cached primitives made for 2 threads. -1 when OpenMP gave one thread (skip).
inline int differ_side_by_side(int reps, const std::function<std::vector<float>(int rep, int t)>& outputs) {
  const int before = num_threads();
  set_num_threads(2);
  int differ = 0;
  for (int rep = 0; rep < reps && differ >= 0; ++rep) {
    std::vector<float> alone[2], together[2];
    int team = 0;
#pragma omp parallel num_threads(2)
    if (omp_get_thread_num() == 0)  // inside a region, as together's runs are: one thread each
      for (int t = 0; t < 2; ++t) alone[t] = outputs(rep, t);
#pragma omp parallel num_threads(2)
    {
      if (omp_get_thread_num() == 0) team = omp_get_num_threads();
      together[omp_get_thread_num()] = outputs(rep, omp_get_thread_num());
    }
    if (team < 2) differ = -1;
    else
      for (int t = 0; t < 2; ++t) differ += together[t] != alone[t];
  }
  set_num_threads(before);
  return differ;
}

}  // namespace qkv::testing
