// The backward passes of the functional layers: linear, layer_norm, relu, gelu, embedding.
// Each quotes the forward it differentiates (STYLE.md 5).

#include <algorithm>
#include <cmath>
#include <vector>

#include <omp.h>

#include "nn/common.h"
#include "qkv/nn_backward.h"
#include "qkv/threads.h"

namespace qkv::nn {

namespace {

// A gradient buffer the caller owns: written in place, so it must be contiguous f32 of
// the expected shape.
void check_grad(const Tensor& g, const Shape& shape, const char* fn, const char* name) {
  QKV_CHECK(g.defined() && g.dtype() == DType::f32 && g.is_contiguous() && g.shape() == shape,
            fn << ": " << name << " must be a contiguous f32 tensor of shape "
               << shape_to_string(shape) << ", got "
               << (g.defined() ? g.shape_string() : std::string("undefined")));
}

}  // namespace

// forward: y = x·Wᵀ + b
Tensor linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, Tensor& dweight,
                       Tensor* dbias) {
  QKV_CHECK(weight.defined() && weight.dim() == 2, "linear_backward: weight must be (out, in)");
  const std::int64_t N = weight.size(0), K = weight.size(1);
  QKV_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == K,
            "linear_backward: x must be (..., " << K << ")");
  Shape dy_shape = x.shape();
  dy_shape.back() = N;
  QKV_CHECK(dy.defined() && dy.shape() == dy_shape,
            "linear_backward: dy must be " << shape_to_string(dy_shape) << ", got "
                                           << (dy.defined() ? dy.shape_string() : "undefined"));
  check_grad(dweight, weight.shape(), "linear_backward", "dweight");
  if (dbias && dbias->defined()) check_grad(*dbias, {N}, "linear_backward", "dbias");
  Tensor g = detail::contiguous_f32(dy, "linear_backward", "dy");      // (M, N)
  Tensor xc = detail::contiguous_f32(x, "linear_backward", "x");       // (M, K)
  Tensor w = detail::contiguous_f32(weight, "linear_backward", "weight");  // (N, K)
  const std::int64_t M = g.numel() / std::max<std::int64_t>(N, 1);
  Tensor dx = Tensor::empty(x.shape());  // (..., K)
  if (dx.numel() == 0) return dx;
  const float* pg = g.data_as<float>();
  // dx (M, K) = dy (M, N) · W (N, K)
  detail::gemm(dx.data_as<float>(), pg, w.data_as<float>(), M, K, N, false, false, false);
  // dW (N, K) += dyᵀ (N, M) · x (M, K)
  detail::gemm(dweight.data_as<float>(), pg, xc.data_as<float>(), N, K, M, true, false, true);
  if (dbias && dbias->defined()) {
    // db (N) += Σ_m dy[m]: each thread owns a range of columns, so the sum order is fixed.
    float* pb = dbias->data_as<float>();
    const int threads = static_cast<int>(std::min<std::int64_t>(num_threads(), (N + 15) / 16));
#pragma omp parallel num_threads(std::max(threads, 1))
    {
      const int t = omp_get_thread_num(), T = omp_get_num_threads();
      const std::int64_t n0 = N * t / T, n1 = N * (t + 1) / T;
      for (std::int64_t m = 0; m < M; ++m)
        for (std::int64_t n = n0; n < n1; ++n) pb[n] += pg[m * N + n];
    }
  }
  return dx;
}

Tensor layer_norm_forward_train(const Tensor& x, const LayerNorm& norm, LayerNormSaved& saved) {
  QKV_CHECK(norm.normalized_shape.size() == 1,
            "layer_norm_forward_train: only a LayerNorm over the last dimension is trainable, got "
            "normalized_shape " << shape_to_string(norm.normalized_shape));
  const std::int64_t N = norm.normalized_shape[0];
  QKV_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == N,
            "layer_norm_forward_train: x must be (..., " << N << "), got "
                                                         << (x.defined() ? x.shape_string() : "undefined"));
  saved.x = detail::contiguous_f32(x, "layer_norm_forward_train", "x");  // (..., N)
  const std::int64_t rows = N == 0 ? 0 : x.numel() / N;
  saved.mean = Tensor::empty({rows});
  saved.rstd = Tensor::empty({rows});
  Tensor y = Tensor::empty(x.shape());  // (..., N)
  const float* px = saved.x.data_as<float>();
  const float* pw = norm.weight.defined() ? norm.weight.data_as<float>() : nullptr;
  const float* pb = norm.bias.defined() ? norm.bias.data_as<float>() : nullptr;
  float* py = y.data_as<float>();
  float* pm = saved.mean.data_as<float>();
  float* pr = saved.rstd.data_as<float>();
  const double eps = norm.eps;
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * N;
    // Two passes in f32 (the mean first, then the centred squares) keep the variance
    // accurate without the cancellation of E[x²] − E[x]²; N ≤ a few thousand terms.
    // (omp simd: lets the sums run in vector lanes; the order is fixed per build.)
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t i = 0; i < N; ++i) sum += xr[i];
    const float m = sum / static_cast<float>(N);
    float sq = 0.f;
#pragma omp simd reduction(+ : sq)
    for (std::int64_t i = 0; i < N; ++i) sq += (xr[i] - m) * (xr[i] - m);
    const float rs = 1.f / std::sqrt(sq / static_cast<float>(N) + static_cast<float>(eps));
    pm[r] = m;
    pr[r] = rs;
    float* yr = py + r * N;
    if (pw && pb) {
      for (std::int64_t i = 0; i < N; ++i) yr[i] = (xr[i] - m) * rs * pw[i] + pb[i];
    } else {
      for (std::int64_t i = 0; i < N; ++i) {
        float v = (xr[i] - m) * rs;
        if (pw) v *= pw[i];
        if (pb) v += pb[i];
        yr[i] = v;
      }
    }
  }
  return y;
}

// forward: y = x̂·w + b,  x̂ = (x − mean)·rstd
// dx = rstd·(dx̂ − mean(dx̂) − x̂·mean(dx̂·x̂)),  dx̂ = dy·w
Tensor layer_norm_backward(const Tensor& dy, const LayerNorm& norm, const LayerNormSaved& saved,
                           LayerNorm& grads) {
  const Tensor& x = saved.x;
  QKV_CHECK(dy.defined() && dy.shape() == x.shape(),
            "layer_norm_backward: dy must be " << x.shape_string() << ", got "
                                               << (dy.defined() ? dy.shape_string() : "undefined"));
  const std::int64_t N = norm.normalized_shape[0];
  const std::int64_t rows = saved.mean.numel();
  const bool affine = norm.weight.defined();
  if (affine) {
    check_grad(grads.weight, {N}, "layer_norm_backward", "grads.weight");
    check_grad(grads.bias, {N}, "layer_norm_backward", "grads.bias");
  }
  Tensor g = detail::contiguous_f32(dy, "layer_norm_backward", "dy");
  Tensor dx = Tensor::empty(x.shape());
  const float* pg = g.data_as<float>();
  const float* px = x.data_as<float>();
  const float* pm = saved.mean.data_as<float>();
  const float* pr = saved.rstd.data_as<float>();
  const float* pw = affine ? norm.weight.data_as<float>() : nullptr;
  float* pdx = dx.data_as<float>();
  const int T = num_threads();
  // Per-thread partial sums of dw, db over a fixed contiguous row range, added in thread
  // order afterwards: deterministic for a given thread count.
  std::vector<float> partial(affine ? static_cast<std::size_t>(2 * N * T) : 0, 0.f);
#pragma omp parallel num_threads(T)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const std::int64_t r0 = rows * t / nt, r1 = rows * (t + 1) / nt;
    float* dw = affine ? partial.data() + 2 * N * t : nullptr;
    float* db = affine ? dw + N : nullptr;
    for (std::int64_t r = r0; r < r1; ++r) {
      const float* xr = px + r * N;
      const float* gr = pg + r * N;
      const float m = pm[r], rs = pr[r];
      float sum_dxhat = 0.f, sum_dxhat_xhat = 0.f;
#pragma omp simd reduction(+ : sum_dxhat, sum_dxhat_xhat)
      for (std::int64_t i = 0; i < N; ++i) {
        const float xhat = (xr[i] - m) * rs;
        const float dxhat = pw ? gr[i] * pw[i] : gr[i];
        sum_dxhat += dxhat;
        sum_dxhat_xhat += dxhat * xhat;
        if (affine) {
          dw[i] += gr[i] * xhat;
          db[i] += gr[i];
        }
      }
      const float mean_dxhat = sum_dxhat / static_cast<float>(N);
      const float mean_dxhat_xhat = sum_dxhat_xhat / static_cast<float>(N);
      for (std::int64_t i = 0; i < N; ++i) {
        const float xhat = (xr[i] - m) * rs;
        const float dxhat = pw ? gr[i] * pw[i] : gr[i];
        pdx[r * N + i] = rs * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
      }
    }
  }
  if (affine) {
    float* gw = grads.weight.data_as<float>();
    float* gb = grads.bias.data_as<float>();
    for (int t = 0; t < T; ++t)
      for (std::int64_t i = 0; i < N; ++i) {
        gw[i] += partial[static_cast<std::size_t>(2 * N * t + i)];
        gb[i] += partial[static_cast<std::size_t>(2 * N * t + N + i)];
      }
  }
  return dx;
}

namespace {

// dx = dy·[x > 0], element-wise; dx may be dy (in place).
void relu_mask(const float* dy, const float* x, float* dx, std::int64_t n) {
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (std::int64_t i = 0; i < n; ++i) dx[i] = x[i] > 0.f ? dy[i] : 0.f;
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
#pragma omp parallel for schedule(static) num_threads(num_threads())
    for (std::int64_t i = 0; i < n; ++i) {
      const double v = px[i];
      const double cdf = 0.5 * (1.0 + std::erf(v * M_SQRT1_2));
      const double pdf = inv_sqrt_2pi * std::exp(-0.5 * v * v);
      pd[i] = static_cast<float>(pg[i] * (cdf + v * pdf));
    }
  } else {
    const double c = std::sqrt(2.0 / M_PI), a = 0.044715;
#pragma omp parallel for schedule(static) num_threads(num_threads())
    for (std::int64_t i = 0; i < n; ++i) {
      const double v = px[i];
      const double t = std::tanh(c * (v + a * v * v * v));
      pd[i] = static_cast<float>(pg[i] * (0.5 * (1.0 + t) +
                                          0.5 * v * (1.0 - t * t) * c * (1.0 + 3.0 * a * v * v)));
    }
  }
  return dx;
}

// forward: y[i] = weight[ids[i]]·scale
void embedding_backward(const Tensor& dy, std::span<const std::int64_t> ids, Tensor& dweight,
                        float scale) {
  QKV_CHECK(dweight.defined() && dweight.dim() == 2 && dweight.is_contiguous() &&
                dweight.dtype() == DType::f32,
            "embedding_backward: dweight must be a contiguous f32 (V, E) tensor");
  const std::int64_t V = dweight.size(0), E = dweight.size(1);
  const auto n = static_cast<std::int64_t>(ids.size());
  QKV_CHECK(dy.defined() && dy.numel() == n * E && (n == 0 || dy.size(-1) == E),
            "embedding_backward: dy must hold " << n << " rows of " << E << ", got "
                                                << (dy.defined() ? dy.shape_string() : "undefined"));
  Tensor g = detail::contiguous_f32(dy, "embedding_backward", "dy");
  const float* pg = g.data_as<float>();
  float* pw = dweight.data_as<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t id = ids[static_cast<std::size_t>(i)];
    QKV_CHECK(id >= 0 && id < V, "embedding_backward: ids[" << i << "] = " << id
                                                            << " is out of range [0, " << V << ")");
  }
  // Ids repeat (the same character many times), so threads split the columns, not the
  // rows: each column's additions run in the order of the ids whatever the thread count.
  const int threads = static_cast<int>(std::min<std::int64_t>(num_threads(), std::max<std::int64_t>(E / 16, 1)));
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    const std::int64_t e0 = E * t / T, e1 = E * (t + 1) / T;
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t id = ids[static_cast<std::size_t>(i)];
      for (std::int64_t e = e0; e < e1; ++e) pw[id * E + e] += scale * pg[i * E + e];
    }
  }
}

}  // namespace qkv::nn
