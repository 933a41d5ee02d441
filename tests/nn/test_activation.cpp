// GELU (both forms) and ReLU against their formulas in double, and their backward
// against finite differences; the float Φ of the erf form (vectorised, a few ulp) over a
// dense sweep against double.

#include <string>
#include <vector>

#include "attention/kernels/flash.h"  // the ISA variants
#include "nn/check.h"
#include "nn/common.h"  // nn::detail::gelu_erf_span

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
    erf_form[i] = 0.5 * v * std::erfc(-v / std::sqrt(2.0));  // 1 + erf(v/√2) would cancel for v << 0
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
  // The erf form's Φ is a float approximation (src/nn/activation.cpp): 8 ulp.
  auto tol4 = [&](const std::vector<double>& w) {
    std::vector<double> t = tol(w);
    for (double& v : t) v *= 16;  // kU is half an ulp
    return t;
  };
  expect_close(nn::gelu(x).to_vector(), erf_form, tol4(erf_form), "gelu");
  expect_close(nn::gelu(x, nn::GeluApproximation::tanh).to_vector(), tanh_form, tol(tanh_form),
               "gelu tanh");
  expect_close(nn::relu(x).to_vector(), relu_form, tol(relu_form), "relu");
}

// Every 1/4096 in [-16, 16], in each ISA variant of the loops (SSE2; AVX2 + FMA) and through
// gelu()/gelu_backward(): the forward within 8 ulp of double (relative, or of 1e-30 where the
// true value is smaller), the backward's derivative within 8 ulp of its largest term (Φ and
// x·φ cancel near x = -0.75, where only an absolute bound means anything).
TEST(NnActivations, GeluErfFormSweepAgainstDouble) {
  const std::int64_t n = 32 * 4096 + 1;
  Tensor x = Tensor::empty({n});
  float* px = x.data_as<float>();
  for (std::int64_t i = 0; i < n; ++i) px[i] = static_cast<float>(-16.0 + static_cast<double>(i) / 4096.0);
  const auto check = [&](const std::vector<float>& y, const std::vector<float>& d, const std::string& what) {
    double worst_y = 0, worst_d = 0, at_y = 0, at_d = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double v = px[i];
      const double cdf = 0.5 * std::erfc(-v / std::sqrt(2.0));
      const double pdf = std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI);
      const double want = v * cdf, dwant = cdf + v * pdf;
      const double err_y = std::abs(y[i] - want) / std::max(std::abs(want), 1e-30) / 0x1p-24;
      if (err_y > worst_y) {
        worst_y = err_y;
        at_y = v;
      }
      const double scale = std::max(cdf, std::abs(v * pdf));
      if (scale >= 1e-30 && std::abs(d[i] - dwant) / scale / 0x1p-24 > worst_d) {
        worst_d = std::abs(d[i] - dwant) / scale / 0x1p-24;
        at_d = v;
      }
    }
    EXPECT_LE(worst_y, 8.0) << what << " gelu: worst relative error in ulp";
    EXPECT_LE(worst_d, 8.0) << what << " gelu_backward: worst error in ulp of its largest term";
    std::printf("gelu erf form, %s: worst %.2f ulp forward (x = %g), %.2f backward (x = %g)\n", what.c_str(),
                worst_y, at_y, worst_d, at_d);
  };
  check(nn::gelu(x).to_vector(), nn::gelu_backward(Tensor::full({n}, 1.0f), x).to_vector(), "gelu()");
  const std::vector<float> ones(static_cast<std::size_t>(n), 1.0f);
  for (qkv::detail::Isa isa : qkv::detail::tested_isas()) {
    std::vector<float> y(static_cast<std::size_t>(n)), d(static_cast<std::size_t>(n));
    nn::detail::gelu_erf_span(isa, px, y.data(), n);
    nn::detail::gelu_erf_backward_span(isa, ones.data(), px, d.data(), n);
    check(y, d, qkv::detail::isa_name(isa));
  }
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
