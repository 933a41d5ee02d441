// The pointwise kernels' dispatch (pointwise.h) and their naive twins: the scalar loops over
// the C library's exp that the vectorised variants replaced, kept for the tests and for
// bench/training.cpp's before/after.
#include "nn/kernels/pointwise.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <string_view>

namespace qkv::nn::detail {

// Each variant's table (pointwise_body.inc).
namespace pointwise_simd128 { extern const PointwiseKernels kKernels; }
#if defined(__x86_64__)
namespace pointwise_avx2 { extern const PointwiseKernels kKernels; }
namespace pointwise_avx512 { extern const PointwiseKernels kKernels; }
#endif

namespace {

void gelu_tanh_naive(const float* x, float* y, std::int64_t n) {
  const double c = std::sqrt(2.0 / M_PI);
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    y[i] = static_cast<float>(v / (1.0 + std::exp(-2.0 * c * (v + 0.044715 * v * v * v))));
  }
}

void gelu_tanh_backward_naive(const float* dy, const float* x, float* dx, std::int64_t n) {
  const auto c = static_cast<float>(std::sqrt(2.0 / M_PI));
  const float a = 0.044715f;
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float s = 1.0f / (1.0f + std::exp(-2.0f * c * (v + a * v * v * v)));
    dx[i] = dy[i] * (s + 2.0f * v * s * (1.0f - s) * c * (1.0f + 3.0f * a * v * v));
  }
}

void adamw_naive(const AdamWScalars& s, float* p, float* m, float* v, const float* g, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) {
    p[j] *= s.keep;
    m[j] = s.beta1 * m[j] + (1.f - s.beta1) * g[j];
    v[j] = s.beta2 * v[j] + (1.f - s.beta2) * g[j] * g[j];
    p[j] -= s.step_size * m[j] / (std::sqrt(v[j]) * s.inv_sqrt_bias2 + s.eps);
  }
}

float sum_squares_naive(const float* x, std::int64_t n) {
  float s = 0.f;
  for (std::int64_t i = 0; i < n; ++i) s += x[i] * x[i];
  return s;
}

CrossEntropyRow cross_entropy_row_naive(const float* x, std::int64_t V, std::int64_t t,
                                        double label_smoothing, double scale, float* d) {
  CrossEntropyRow out{0.0, 0};
  float mx = -std::numeric_limits<float>::infinity();
  for (std::int64_t v = 0; v < V; ++v)
    if (x[v] > mx) {
      mx = x[v];
      out.argmax = v;
    }
  const double eps = label_smoothing;
  double sum = 0.0, sum_logits = 0.0;
  for (std::int64_t v = 0; v < V; ++v) {
    const float e = std::exp(x[v] - mx);  // exp(x_v − max) ∈ (0, 1]
    if (d != nullptr) d[v] = e;
    sum += e;
    if (eps > 0) sum_logits += x[v];
  }
  const double log_z = mx + std::log(sum);
  out.loss = eps > 0 ? (1 - eps) * (log_z - x[t]) + eps * (log_z - sum_logits / static_cast<double>(V))
                     : log_z - x[t];
  if (d != nullptr) {
    const double inv_sum = 1.0 / sum, smooth = eps / static_cast<double>(V);
    for (std::int64_t v = 0; v < V; ++v) d[v] = static_cast<float>((d[v] * inv_sum - smooth) * scale);
    d[t] = static_cast<float>(d[t] - (1 - eps) * scale);
  }
  return out;
}

const PointwiseKernels kNaive{gelu_tanh_naive, gelu_tanh_backward_naive, adamw_naive, sum_squares_naive,
                              cross_entropy_row_naive};

std::atomic<bool> g_naive{false};

}  // namespace

const PointwiseKernels& pointwise_kernels(qkv::detail::Isa isa) {
#if defined(__x86_64__)
  // The rows after avx2 (avx512, avx512_bf16, amx, amx_emulated) all have AVX-512F/BW/VL/DQ.
  const std::string_view name = qkv::detail::isa_name(isa);
  if (name == "avx2") return pointwise_avx2::kKernels;
  if (name != "simd128") return pointwise_avx512::kKernels;
#else
  (void)isa;
#endif
  return pointwise_simd128::kKernels;
}

const PointwiseKernels& pointwise_kernels() {
  if (g_naive.load(std::memory_order_relaxed)) return kNaive;
  return pointwise_kernels(qkv::detail::selected_isa());
}

const PointwiseKernels& pointwise_naive() { return kNaive; }

void force_naive_pointwise(bool naive) noexcept { g_naive.store(naive, std::memory_order_relaxed); }

}  // namespace qkv::nn::detail
