// GELU (both forms) and ReLU against their formulas in double, and their backward
// against finite differences.

#include "nn/check.h"

namespace {

using qkv::Shape;
using qkv::Tensor;
using namespace qkv::testing;  // nn::, train::, randn, expect_close, check_gradient, ...

TEST(NnActivations, GeluBothFormsAndRelu) {
  Tensor x = randn({1000}, 21, 3.0);
  std::vector<float> xv = x.to_vector();
  std::vector<double> erf_form(xv.size()), tanh_form(xv.size()), relu_form(xv.size());
  for (std::size_t i = 0; i < xv.size(); ++i) {
    const double v = xv[i];
    erf_form[i] = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    // ½v(1 + tanh u) written as v / (1 + e^(−2u)), in long double: 1 + tanh u cancels to 0
    // in double for v below about −9, where the true value is about −1e-16.
    const long double u = std::sqrt(2.0L / M_PIl) * (v + 0.044715L * v * v * v);
    tanh_form[i] = static_cast<double>(v / (1.0L + std::exp(-2.0L * u)));
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

TEST(NnActivations, BackwardMatchesFiniteDifferences) {
  Tensor x = randn({50}, 8, 2.0), w = randn({50}, 9);
  // Keep relu's inputs away from the kink, where the difference quotient is meaningless.
  float* px = x.data_as<float>();
  for (std::int64_t i = 0; i < 50; ++i)
    if (std::abs(px[i]) < 0.05f) px[i] = 0.5f;
  check_gradient(x, nn::relu_backward(w, x), [&] { return dot(nn::relu(x), w); }, "relu");
  Tensor in_place = w.clone();
  nn::relu_backward_(in_place, x);
  EXPECT_EQ(in_place.to_vector(), nn::relu_backward(w, x).to_vector());
  check_gradient(x, nn::gelu_backward(w, x), [&] { return dot(nn::gelu(x), w); }, "gelu erf");
  const auto tanh_form = nn::GeluApproximation::tanh;
  check_gradient(x, nn::gelu_backward(w, x, tanh_form),
                 [&] { return dot(nn::gelu(x, tanh_form), w); }, "gelu tanh");
}

}  // namespace
