// Layer normalization: oneDNN's primitive forward (inference, or training with the
// per-row statistics), its backward, and the LayerNorm module.
//
// One implementation, chosen by measurement: oneDNN's JIT-compiled forward uses the CPU's
// widest vectors, where a loop here is compiled for the baseline ISA (see BENCHMARKS.md,
// "LayerNorm"). The backward is written here: it needs dw and db ADDED into gradients, in
// a fixed order.

#include <algorithm>
#include <cmath>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "nn/common.h"
#include "nn/onednn.h"
#include "qkv/threads.h"

namespace qkv::nn {

namespace {

// (rows, N, eps, scale, shift, training) -> oneDNN's layer normalization over the last
// dimension of a (rows, N) row-major matrix; training also writes mean and variance.
dnnl::layer_normalization_forward layer_norm_primitive(std::int64_t rows, std::int64_t N,
                                                       float eps, bool scale, bool shift,
                                                       bool training) {
  using Key = std::tuple<std::int64_t, std::int64_t, float, bool, bool, bool>;
  static detail::PrimitiveCache<Key, dnnl::layer_normalization_forward> cache(64);
  return cache.get({rows, N, eps, scale, shift, training}, [&] {
    const dnnl::memory::desc data({rows, N}, dnnl::memory::data_type::f32,
                                  dnnl::memory::dims{N, 1});
    auto flags = dnnl::normalization_flags::none;
    if (scale) flags |= dnnl::normalization_flags::use_scale;
    if (shift) flags |= dnnl::normalization_flags::use_shift;
    const auto prop = training ? dnnl::prop_kind::forward_training
                               : dnnl::prop_kind::forward_inference;
    const dnnl::layer_normalization_forward::desc desc(prop, data, eps, flags);
    return dnnl::layer_normalization_forward(
        dnnl::layer_normalization_forward::primitive_desc(desc, detail::cpu_engine()));
  });
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized, const Tensor& weight,
                  const Tensor& bias, double eps, Tensor* mean, Tensor* rstd) {
  const auto k = static_cast<std::int64_t>(normalized.size());
  QKV_CHECK(x.defined(), "layer_norm: x is undefined");
  QKV_CHECK(k >= 1 && x.dim() >= k, "layer_norm: x " << x.shape_string()
                                                     << " must end in normalized_shape "
                                                     << shape_to_string(normalized));
  for (std::int64_t d = 0; d < k; ++d)
    QKV_CHECK(x.size(x.dim() - k + d) == normalized[d],
              "layer_norm: x " << x.shape_string() << " must end in normalized_shape "
                               << shape_to_string(normalized));
  QKV_CHECK(!weight.defined() || weight.shape() == normalized,
            "layer_norm: weight must be " << shape_to_string(normalized) << ", got "
                                          << weight.shape_string());
  QKV_CHECK(!bias.defined() || bias.shape() == normalized,
            "layer_norm: bias must be " << shape_to_string(normalized) << ", got "
                                        << bias.shape_string());
  QKV_CHECK(eps >= 0 && std::isfinite(static_cast<float>(eps)),
            "layer_norm: eps must be finite and >= 0 in float32, got " << eps);
  QKV_CHECK((mean == nullptr) == (rstd == nullptr),
            "layer_norm: give both mean and rstd, or neither");
  Tensor xc = detail::contiguous_f32(x, "layer_norm", "x");  // (..., N)
  Tensor w = weight.defined() ? detail::contiguous_f32(weight, "layer_norm", "weight") : Tensor();
  Tensor b = bias.defined() ? detail::contiguous_f32(bias, "layer_norm", "bias") : Tensor();
  std::int64_t N = 1;
  for (auto n : normalized) N *= n;
  const std::int64_t rows = N == 0 ? 0 : x.numel() / N;
  const bool training = mean != nullptr;
  if (training) {
    *mean = Tensor::zeros({rows});  // (rows)
    *rstd = Tensor::zeros({rows});  // (rows): the variance first, then 1/sqrt(var + eps)
  }
  Tensor out = Tensor::empty(x.shape());  // (..., N)
  if (out.numel() == 0) return out;
  dnnl::layer_normalization_forward prim = layer_norm_primitive(
      rows, N, static_cast<float>(eps), w.defined(), b.defined(), training);
  using dt = dnnl::memory::data_type;
  dnnl::engine& engine = detail::cpu_engine();
  const dnnl::memory::desc data({rows, N}, dt::f32, dnnl::memory::dims{N, 1});
  const dnnl::memory::desc param({N}, dt::f32, dnnl::memory::dims{1});
  const dnnl::memory::desc stat({rows}, dt::f32, dnnl::memory::dims{1});
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(data, engine, const_cast<void*>(xc.data()))},
      {DNNL_ARG_DST, dnnl::memory(data, engine, out.data())}};
  if (w.defined())
    args.emplace(DNNL_ARG_SCALE, dnnl::memory(param, engine, const_cast<void*>(w.data())));
  if (b.defined())
    args.emplace(DNNL_ARG_SHIFT, dnnl::memory(param, engine, const_cast<void*>(b.data())));
  if (training) {
    args.emplace(DNNL_ARG_MEAN, dnnl::memory(stat, engine, mean->data()));
    args.emplace(DNNL_ARG_VARIANCE, dnnl::memory(stat, engine, rstd->data()));
  }
  detail::run(prim, args);
  if (training) {
    float* r = rstd->data_as<float>();
    const auto e = static_cast<float>(eps);
    for (std::int64_t i = 0; i < rows; ++i) r[i] = 1.f / std::sqrt(r[i] + e);
  }
  return out;
}

// forward: y = x̂·w + b,  x̂ = (x − mean)·rstd
// dx = rstd·(dx̂ − mean(dx̂) − x̂·mean(dx̂·x̂)),  dx̂ = dy·w
Tensor layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                           const Tensor& rstd, const Tensor& weight, Tensor* dweight,
                           Tensor* dbias) {
  QKV_CHECK(x.defined() && dy.defined() && dy.shape() == x.shape(),
            "layer_norm_backward: dy must be " << (x.defined() ? x.shape_string() : "undefined")
                                               << ", got "
                                               << (dy.defined() ? dy.shape_string() : "undefined"));
  const std::int64_t rows = mean.defined() ? mean.numel() : 0;
  QKV_CHECK(mean.defined() && rstd.defined() && rstd.numel() == rows &&
                mean.dtype() == DType::f32 && rstd.dtype() == DType::f32 &&
                mean.is_contiguous() && rstd.is_contiguous() &&
                (rows == 0 ? x.numel() == 0 : x.numel() % rows == 0),
            "layer_norm_backward: mean and rstd must be the forward's (rows) statistics");
  const std::int64_t N = rows == 0 ? 0 : x.numel() / rows;
  const bool affine = weight.defined();
  QKV_CHECK(!affine || weight.numel() == N,
            "layer_norm_backward: weight must hold N = " << N << " entries");
  const bool with_dw = affine && dweight != nullptr, with_db = dbias != nullptr;
  if (with_dw) detail::check_grad(*dweight, weight.shape(), "layer_norm_backward", "dweight");
  if (with_db) {
    QKV_CHECK(dbias->defined() && dbias->numel() == N, "layer_norm_backward: dbias must hold "
                                                           << N << " entries");
    detail::check_grad(*dbias, dbias->shape(), "layer_norm_backward", "dbias");
  }
  Tensor g = detail::contiguous_f32(dy, "layer_norm_backward", "dy");
  Tensor xc = detail::contiguous_f32(x, "layer_norm_backward", "x");
  Tensor wc = affine ? detail::contiguous_f32(weight, "layer_norm_backward", "weight") : Tensor();
  Tensor dx = Tensor::empty(x.shape());
  if (dx.numel() == 0) return dx;
  const float* pg = g.data_as<float>();
  const float* px = xc.data_as<float>();
  const float* pm = mean.data_as<float>();
  const float* pr = rstd.data_as<float>();
  const float* pw = affine ? wc.data_as<float>() : nullptr;
  float* pdx = dx.data_as<float>();
  const int T = num_threads();
  // Per-thread partial sums of dw, db over a fixed contiguous row range, added in thread
  // order afterwards: deterministic for a given thread count.
  std::vector<float> partial(static_cast<std::size_t>(2 * N * T), 0.f);
#pragma omp parallel num_threads(T)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const std::int64_t r0 = rows * t / nt, r1 = rows * (t + 1) / nt;
    float* dw = partial.data() + 2 * N * t;
    float* db = dw + N;
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
        dw[i] += gr[i] * xhat;
        db[i] += gr[i];
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
  float* gw = with_dw ? dweight->data_as<float>() : nullptr;
  float* gb = with_db ? dbias->data_as<float>() : nullptr;
  for (int t = 0; t < T; ++t)
    for (std::int64_t i = 0; i < N; ++i) {
      if (gw) gw[i] += partial[static_cast<std::size_t>(2 * N * t + i)];
      if (gb) gb[i] += partial[static_cast<std::size_t>(2 * N * t + N + i)];
    }
  return dx;
}

// ---------------------------------------------------------------------------------------

LayerNorm::LayerNorm(Shape shape, double eps_, bool elementwise_affine)
    : normalized_shape(std::move(shape)), eps(eps_) {
  QKV_CHECK(!normalized_shape.empty(), "LayerNorm: normalized_shape must not be empty");
  if (elementwise_affine) {
    weight = Tensor::full(normalized_shape, 1.f);
    bias = Tensor::zeros(normalized_shape);
  }
}

Tensor LayerNorm::forward(const Tensor& x, Record* record) const {
  if (record == nullptr) return layer_norm(x, normalized_shape, weight, bias, eps);
  record->x = detail::contiguous_f32(x, "LayerNorm", "x");
  return layer_norm(record->x, normalized_shape, weight, bias, eps, &record->mean, &record->rstd);
}

Tensor LayerNorm::backward(const Tensor& dy, const Record& record, LayerNorm& grads) const {
  QKV_CHECK(grads.weight.defined() == weight.defined() && grads.bias.defined() == bias.defined(),
            "LayerNorm::backward: grads must be a LayerNorm of the same shape and affinity");
  return layer_norm_backward(dy, record.x, record.mean, record.rstd, weight,
                             grads.weight.defined() ? &grads.weight : nullptr,
                             grads.bias.defined() ? &grads.bias : nullptr);
}

ParameterList LayerNorm::parameters(const std::string& prefix) {
  ParameterList list;
  if (weight.defined()) list.emplace_back(prefix + "weight", &weight);
  if (bias.defined()) list.emplace_back(prefix + "bias", &bias);
  return list;
}

}  // namespace qkv::nn
