// Activations and their backward passes: GELU (erf and tanh forms) and ReLU.
// Elementwise, so splitting across threads changes no bit of a result.

#include <bit>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "attention/kernels/flash.h"  // qkv::detail::Isa, selected_isa(): the one ISA choice
#include "nn/common.h"
#include "nn/kernels/pointwise.h"  // the tanh form's loops
#include "core/parallel.h"
#include "qkv/threads.h"

namespace qkv::nn {

namespace {

// The standard normal CDF Φ(x) and e^(−x²/2) in float, with no branches and no library
// calls, so that the loops below vectorise: the exact GELU spent most of a ViT training
// step's non-product time in glibc's scalar erf and exp, one element at a time in double.
// With z = |x|/√2:
//   z < ½:   erf(z) = z·P(z²), P of degree 6 (least-squares fit of erf(z)/z on [0, 1],
//            relative error 1.4e-9), Φ = ½ ± ½·erf(z) (no cancellation below ½: Φ >= 0.24);
//   z >= ½:  erfc(z) = e^(−z²)·R(t), t = 1/(1 + z), R of degree 10 (least-squares fit of
//            erfc(z)·e^(z²) on [½, 9.5] weighted for relative error, 1.2e-8; 2.1e-7 evaluated
//            in float), Φ = ½erfc(z) or 1 − ½erfc(z);
//   |x| > 13.15 (z > 9.3): Φ = 0 or 1 (½erfc(9.3) is below float's smallest normal number).
// e^(−z²) = e^(−x²/2) keeps its accuracy for large |x|: x² = xh² + (x − xh)(x + xh) with xh
// the top 12 bits of x, so xh² is exact and the small rest joins the reduced argument of the exp
// (n = round(y/ln 2), r = y − n·ln 2 by a two-part ln 2, e^r by its Taylor series to
// r⁷/7!, 2^n put into the exponent bits). Measured against double over every float the
// tests draw: a few ulp; tests/nn/test_activation.cpp states the bound it checks.
[[gnu::always_inline]] inline void normal_cdf_and_gaussian(float x, float& cdf, float& gaussian) {
  constexpr float kP[] = {1.1283791665109655f, -0.3761262884494322f, 0.11283612432260079f,
                          -0.026854808357051396f, 0.005190052742782947f, -0.0008024343166680159f,
                          7.898163331231112e-05f};
  constexpr float kR[] = {2.7243782332547463e-06f, 0.5640678186197674f, 0.5664836704145577f,
                          0.2584988411419124f,     -0.14058000304250856f, -1.1713377098027598f,
                          0.32879698828443843f,    3.883375187520371f,    -6.857351258958577f,
                          4.951568552750427f,      -1.3891622501068819f};
  const float ax = std::fabs(x), z = ax * 0.70710678118654752f;
  // e^(−x²/2), from x rather than z, whose rounding x²/2 would amplify: x² = xh² + (x − xh)(x + xh)
  const float xc = ax < 13.15f ? ax : 13.15f;  // z <= 9.3 (a select, not fmin: it vectorises)
  const float xh = std::bit_cast<float>(std::bit_cast<std::uint32_t>(xc) & 0xFFFFF000u);
  const float yh = -0.5f * (xh * xh), yl = -0.5f * ((xc - xh) * (xc + xh));
  const float n = (yh * 1.4426950408889634f + 12582912.0f) - 12582912.0f;  // round to nearest
  const float r = (yh - n * 0.693145751953125f) - n * 1.428606765330187e-06f + yl;
  const float e =
      1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720 + r / 5040))))));
  const float scale = std::bit_cast<float>(static_cast<std::uint32_t>(static_cast<std::int32_t>(n) + 127) << 23);
  gaussian = ax > 13.15f ? 0.0f : e * scale;
  // Φ
  const float zc = xc * 0.70710678118654752f, z2 = zc * zc;
  const float p = kP[0] + z2 * (kP[1] + z2 * (kP[2] + z2 * (kP[3] + z2 * (kP[4] + z2 * (kP[5] + z2 * kP[6])))));
  const float t = 1.0f / (1.0f + zc);
  const float q =
      kR[0] + t * (kR[1] + t * (kR[2] + t * (kR[3] + t * (kR[4] + t * (kR[5] + t * (kR[6] + t * (kR[7] + t * (kR[8] + t * (kR[9] + t * kR[10])))))))));
  const float half_erfc = 0.5f * gaussian * q;  // ½erfc(z), z >= 1/2
  const float half_erf = 0.5f * zc * p;         // ½erf(z), z < 1/2
  const float upper = z < 0.5f ? 0.5f - half_erf : half_erfc;  // Φ(−|x|)
  cdf = x > 0.0f ? 1.0f - upper : upper;
}

// The erf form's loops over n floats. Each is compiled twice: for any x86-64 CPU (SSE2's 4
// lanes, separate multiplies and adds) and, below, with AVX2 + FMA (8 lanes, fused
// multiply-adds), which ran the ViT's GELU forward and backward ~3x faster (a training
// step spent 11% of its time here with SSE2 alone). The two differ in the last bits where
// FMA skips a rounding; each is held to the same bound against double (test_activation).
[[gnu::always_inline]] inline void gelu_erf_loop(const float* x, float* y, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    float cdf, gaussian;
    normal_cdf_and_gaussian(x[i], cdf, gaussian);
    y[i] = x[i] * cdf;
  }
}

[[gnu::always_inline]] inline void gelu_erf_backward_loop(const float* dy, const float* x, float* dx,
                                                          std::int64_t n) {
  const auto inv_sqrt_2pi = static_cast<float>(0.5 * M_2_SQRTPI * M_SQRT1_2);
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    float cdf, gaussian;
    normal_cdf_and_gaussian(x[i], cdf, gaussian);
    dx[i] = dy[i] * (cdf + x[i] * (inv_sqrt_2pi * gaussian));
  }
}

void gelu_erf_baseline(const float* x, float* y, std::int64_t n) { gelu_erf_loop(x, y, n); }
void gelu_erf_backward_baseline(const float* dy, const float* x, float* dx, std::int64_t n) {
  gelu_erf_backward_loop(dy, x, dx, n);
}
#if defined(__x86_64__)
[[gnu::target("avx2,fma")]] void gelu_erf_avx2(const float* x, float* y, std::int64_t n) {
  gelu_erf_loop(x, y, n);
}
[[gnu::target("avx2,fma")]] void gelu_erf_backward_avx2(const float* dy, const float* x, float* dx,
                                                        std::int64_t n) {
  gelu_erf_backward_loop(dy, x, dx, n);
}
#endif

// Every variant after simd128 in the ISA table runs AVX2 + FMA (avx512 and up use the AVX2 loops).
bool runs_avx2(qkv::detail::Isa isa) {
#if defined(__x86_64__)
  return std::string_view(qkv::detail::isa_name(isa)) != "simd128";
#else
  (void)isa;
  return false;
#endif
}

}  // namespace

namespace detail {

void gelu_erf_span(qkv::detail::Isa isa, const float* x, float* y, std::int64_t n) {
#if defined(__x86_64__)
  if (runs_avx2(isa)) return gelu_erf_avx2(x, y, n);
#endif
  gelu_erf_baseline(x, y, n);
}

void gelu_erf_backward_span(qkv::detail::Isa isa, const float* dy, const float* x, float* dx, std::int64_t n) {
#if defined(__x86_64__)
  if (runs_avx2(isa)) return gelu_erf_backward_avx2(dy, x, dx, n);
#endif
  gelu_erf_backward_baseline(dy, x, dx, n);
}

}  // namespace detail

Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  Tensor xc = detail::contiguous_f32(x, "gelu", "x");
  Tensor out = Tensor::empty(x.shape());  // same shape as x
  const float* px = xc.data_as<float>();
  float* po = out.data_as<float>();
  const std::int64_t n = out.numel();
  if (approximate == GeluApproximation::none) {
    const qkv::detail::Isa isa = qkv::detail::selected_isa();
    qkv::detail::parallel_chunks("nn.gelu", n, true, num_threads(), [&](std::int64_t i0, std::int64_t i1) {
      detail::gelu_erf_span(isa, px + i0, po + i0, i1 - i0);
    });
  } else {
    // ½(1 + tanh u) = 1 / (1 + e^(−2u)): one exp instead of tanh (half the time), and no
    // cancellation in 1 + tanh u where tanh u is near −1. Vectorised (nn/kernels/pointwise.h).
    const nn::detail::PointwiseKernels& k = nn::detail::pointwise_kernels();
    qkv::detail::parallel_chunks("nn.gelu", n, true, num_threads(), [&](std::int64_t i0, std::int64_t i1) {
      k.gelu_tanh(px + i0, po + i0, i1 - i0);
    });
  }
  return out;
}

Tensor relu(const Tensor& x) {
  Tensor xc = detail::contiguous_f32(x, "relu", "x");
  Tensor out = Tensor::empty(x.shape());  // same shape as x
  const float* px = xc.data_as<float>();
  float* po = out.data_as<float>();
  // x > 0 ? x : 0 keeps NaN as torch does (std::max(x, 0) would give 0).
  const std::int64_t n = out.numel();
  qkv::detail::parallel_chunks("nn.relu", n, true, num_threads(), [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) po[i] = px[i] < 0.f ? 0.f : px[i];
  });
  return out;
}

// forward (none): y = x·Φ(x)            -> dy/dx = Φ(x) + x·φ(x)
// forward (tanh): y = ½x(1 + tanh(u)), u = c(x + a·x³)
//                 -> dy/dx = ½(1 + tanh u) + ½x(1 − tanh² u)·c(1 + 3a·x²)
Tensor gelu_backward(const Tensor& dy, const Tensor& x, GeluApproximation approximate) {
  QKV_CHECK(dy.defined() && x.defined() && dy.shape() == x.shape(),
            "gelu_backward: dy and x must have the same shape");
  Tensor g = detail::contiguous_f32(dy, "gelu_backward", "dy");
  Tensor xc = detail::contiguous_f32(x, "gelu_backward", "x");
  Tensor dx = Tensor::empty(x.shape());
  const float* pg = g.data_as<float>();
  const float* px = xc.data_as<float>();
  float* pd = dx.data_as<float>();
  const std::int64_t n = dx.numel();
  if (approximate == GeluApproximation::none) {
    const qkv::detail::Isa isa = qkv::detail::selected_isa();
    qkv::detail::parallel_chunks("nn.gelu_backward", n, true, num_threads(), [&](std::int64_t i0, std::int64_t i1) {
      detail::gelu_erf_backward_span(isa, pg + i0, px + i0, pd + i0, i1 - i0);
    });
  } else {
    // With s = ½(1 + tanh u) = 1 / (1 + e^(−2u)), ½(1 − tanh² u) = 2s(1 − s): one float exp
    // per element (a gradient in float needs no more), no cancellation near tanh u = −1.
    const nn::detail::PointwiseKernels& k = nn::detail::pointwise_kernels();
    qkv::detail::parallel_chunks("nn.gelu_backward", n, true, num_threads(), [&](std::int64_t i0, std::int64_t i1) {
      k.gelu_tanh_backward(pg + i0, px + i0, pd + i0, i1 - i0);
    });
  }
  return dx;
}

namespace {

// dx = dy·[x > 0], element-wise; dx may be dy (in place).
void relu_mask(const float* dy, const float* x, float* dx, std::int64_t n) {
  qkv::detail::parallel_chunks("nn.relu_backward", n, true, num_threads(), [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) dx[i] = x[i] > 0.f ? dy[i] : 0.f;
  });
}

}  // namespace

// forward: y = x > 0 ? x : 0
Tensor relu_backward(const Tensor& dy, const Tensor& x) {
  QKV_CHECK(dy.defined() && x.defined() && dy.shape() == x.shape(),
            "relu_backward: dy and x must have the same shape");
  Tensor g = detail::contiguous_f32(dy, "relu_backward", "dy");
  Tensor xc = detail::contiguous_f32(x, "relu_backward", "x");
  Tensor dx = Tensor::empty(x.shape());
  relu_mask(g.data_as<float>(), xc.data_as<float>(), dx.data_as<float>(), dx.numel());
  return dx;
}

void relu_backward_(Tensor& dy, const Tensor& x) {
  QKV_CHECK(dy.defined() && x.defined() && dy.shape() == x.shape(),
            "relu_backward_: dy and x must have the same shape");
  QKV_CHECK(dy.dtype() == DType::f32 && dy.is_contiguous(),
            "relu_backward_: dy must be contiguous f32 (it is overwritten)");
  Tensor xc = detail::contiguous_f32(x, "relu_backward_", "x");
  relu_mask(dy.data_as<float>(), xc.data_as<float>(), dy.data_as<float>(), dy.numel());
}

}  // namespace qkv::nn
