// Activations and their backward passes: GELU (erf and tanh forms) and ReLU.
// Elementwise, so splitting across threads changes no bit of a result.

#include <cmath>

#include "nn/common.h"
#include "core/parallel.h"
#include "qkv/threads.h"

namespace qkv::nn {

Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  Tensor xc = detail::contiguous_f32(x, "gelu", "x");
  Tensor out = Tensor::empty(x.shape());  // same shape as x
  const float* px = xc.data_as<float>();
  float* po = out.data_as<float>();
  const std::int64_t n = out.numel();
  if (approximate == GeluApproximation::none) {
    qkv::detail::parallel_chunks("nn.gelu", n, true, num_threads(), [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i)
        po[i] = static_cast<float>(0.5 * px[i] * (1.0 + std::erf(px[i] * M_SQRT1_2)));
    });
  } else {
    // ½(1 + tanh u) = 1 / (1 + e^(−2u)): one exp instead of tanh (half the time), and no
    // cancellation in 1 + tanh u where tanh u is near −1.
    const double c = std::sqrt(2.0 / M_PI);
    qkv::detail::parallel_chunks("nn.gelu", n, true, num_threads(), [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) {
        const double v = px[i];
        po[i] = static_cast<float>(v / (1.0 + std::exp(-2.0 * c * (v + 0.044715 * v * v * v))));
      }
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
    const double inv_sqrt_2pi = 0.5 * M_2_SQRTPI * M_SQRT1_2;
    qkv::detail::parallel_chunks("nn.gelu_backward", n, true, num_threads(), [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) {
        const double v = px[i];
        const double cdf = 0.5 * (1.0 + std::erf(v * M_SQRT1_2));
        const double pdf = inv_sqrt_2pi * std::exp(-0.5 * v * v);
        pd[i] = static_cast<float>(pg[i] * (cdf + v * pdf));
      }
    });
  } else {
    // With s = ½(1 + tanh u) = 1 / (1 + e^(−2u)), ½(1 − tanh² u) = 2s(1 − s): one float exp
    // per element (a gradient in float needs no more), no cancellation near tanh u = −1.
    const auto c = static_cast<float>(std::sqrt(2.0 / M_PI));
    const float a = 0.044715f;
    qkv::detail::parallel_chunks("nn.gelu_backward", n, true, num_threads(), [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) {
        const float v = px[i];
        const float s = 1.0f / (1.0f + std::exp(-2.0f * c * (v + a * v * v * v)));
        pd[i] = pg[i] * (s + 2.0f * v * s * (1.0f - s) * c * (1.0f + 3.0f * a * v * v));
      }
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
