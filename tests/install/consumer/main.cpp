// Calls qkv::scaled_dot_product_attention on inputs whose softmax is known by hand and
// checks the result; exits non-zero on a mismatch. Built against an installed qkv by
// test_install.sh (CMake package and pkg-config), so only public headers are used.
#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

#include <qkv/attention.h>
#include <qkv/version.h>

int main() {
  std::printf("qkv %s (%d.%d.%d)\n", qkv::kVersion, qkv::kVersionMajor, qkv::kVersionMinor,
              qkv::kVersionPatch);
  // B = H = 1, Lq = 2, Lk = 3, Dk = Dv = 2; the default scale is 1/sqrt(Dk) = 1/sqrt(2).
  // Query 0 = (1, 0) against keys (sqrt2·ln j, 0), j = 1, 2, 3, scores ln 1, ln 2, ln 3:
  // softmax = (1, 2, 3)/6. Query 1 = (0, 1) scores 0 everywhere: softmax = (1, 1, 1)/3.
  // Values (6, 0), (0, 6), (0, 0): out0 = (6·1, 6·2)/6 = (1, 2), out1 = (6, 6)/3 = (2, 2).
  const double r2 = std::sqrt(2.0);
  const std::vector<float> q = {1, 0,  //
                                0, 1};
  const std::vector<float> k = {static_cast<float>(r2 * std::log(1.0)), 0,  //
                                static_cast<float>(r2 * std::log(2.0)), 0,  //
                                static_cast<float>(r2 * std::log(3.0)), 0};
  const std::vector<float> v = {6, 0,  //
                                0, 6,  //
                                0, 0};
  const float expected[2][2] = {{1, 2}, {2, 2}};
  // f32 throughout: inputs rounded to f32 (relative 2^-24), exp and a 3-term sum each a few
  // ulps, on outputs of size <= 2 — 1e-5 is ~40 ulps of 2, far from any real error.
  const double tolerance = 1e-5;
  try {
    const qkv::Tensor out = qkv::scaled_dot_product_attention(
        qkv::Tensor::from_vector({1, 1, 2, 2}, q), qkv::Tensor::from_vector({1, 1, 3, 2}, k),
        qkv::Tensor::from_vector({1, 1, 3, 2}, v));  // (B, H, Lq, Dv) = (1, 1, 2, 2)
    double max_error = 0;
    int worst_i = 0, worst_d = 0;
    for (int i = 0; i < 2; ++i) {
      for (int d = 0; d < 2; ++d) {
        const double error = std::fabs(out.get({0, 0, i, d}) - expected[i][d]);
        if (!(error <= max_error)) {  // NaN counts as the worst
          max_error = std::isnan(error) ? INFINITY : error;
          worst_i = i, worst_d = d;
        }
      }
    }
    if (!(max_error <= tolerance)) {
      std::printf("FAIL: out[0, 0, %d, %d] = %g, expected %g (error %g > %g)\n", worst_i, worst_d,
                  out.get({0, 0, worst_i, worst_d}), expected[worst_i][worst_d], max_error,
                  tolerance);
      return 1;
    }
    std::printf("ok: attention matches softmax·V by hand, max error %.3g\n", max_error);
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
  return 0;
}
