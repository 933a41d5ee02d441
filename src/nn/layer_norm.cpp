// Layer normalization through oneDNN's primitives — forward (inference, or training with
// the per-row mean and variance) and backward — and the LayerNorm module.
//
// One implementation, chosen by measurement (BENCHMARKS.md, "LayerNorm: oneDNN or a loop
// of our own"): oneDNN's JIT-compiled kernels use the CPU's widest vectors, where a loop
// here is compiled for the baseline ISA; at 128 rows and more, oneDNN's forward took
// 0.43-0.48x and its backward 0.64-0.94x the time of the two-pass loops qkv had.

#include <algorithm>
#include <cmath>
#include <tuple>
#include <unordered_map>

#include "nn/common.h"
#include "nn/onednn.h"

namespace qkv::nn {

namespace {

using dt = dnnl::memory::data_type;

// A (rows, N) row-major f32 matrix, its (N) parameters, its (rows) statistics.
dnnl::memory::desc data_desc(std::int64_t rows, std::int64_t N) {
  return {{rows, N}, dt::f32, dnnl::memory::dims{N, 1}};
}
dnnl::memory::desc param_desc(std::int64_t N) { return {{N}, dt::f32, dnnl::memory::dims{1}}; }
dnnl::memory::desc stat_desc(std::int64_t rows) { return {{rows}, dt::f32, dnnl::memory::dims{1}}; }

dnnl::normalization_flags flags(bool scale, bool shift) {
  auto f = dnnl::normalization_flags::none;
  if (scale) f |= dnnl::normalization_flags::use_scale;
  if (shift) f |= dnnl::normalization_flags::use_shift;
  return f;
}

dnnl::layer_normalization_forward::primitive_desc forward_desc(std::int64_t rows, std::int64_t N,
                                                               float eps, bool scale, bool shift,
                                                               bool training) {
  const auto prop = training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  return {{prop, data_desc(rows, N), eps, flags(scale, shift)}, detail::scratchpad_attr(), detail::cpu_engine()};
}

// (rows, N, eps, scale, shift, training) -> the forward primitive; training also writes the
// mean and variance.
dnnl::layer_normalization_forward forward_primitive(std::int64_t rows, std::int64_t N, float eps,
                                                    bool scale, bool shift, bool training) {
  using Key = std::tuple<std::int64_t, std::int64_t, float, bool, bool, bool>;
  static detail::PrimitiveCache<Key, dnnl::layer_normalization_forward> cache(64);
  return cache.get({rows, N, eps, scale, shift, training}, [&] {
    return dnnl::layer_normalization_forward(forward_desc(rows, N, eps, scale, shift, training));
  });
}

// (rows, N, eps, affine) -> the backward primitive (diff_scale and diff_shift when affine).
dnnl::layer_normalization_backward backward_primitive(std::int64_t rows, std::int64_t N, float eps,
                                                      bool affine) {
  using Key = std::tuple<std::int64_t, std::int64_t, float, bool>;
  static detail::PrimitiveCache<Key, dnnl::layer_normalization_backward> cache(64);
  return cache.get({rows, N, eps, affine}, [&] {
    const dnnl::layer_normalization_backward::desc desc(
        dnnl::prop_kind::backward, data_desc(rows, N), data_desc(rows, N), eps, flags(affine, affine));
    const dnnl::layer_normalization_backward::primitive_desc pd(
        desc, detail::scratchpad_attr(), detail::cpu_engine(), forward_desc(rows, N, eps, affine, affine, true));
    return dnnl::layer_normalization_backward(pd);
  });
}

float checked_eps(double eps, const char* fn) {
  QKV_CHECK(eps >= 0 && std::isfinite(static_cast<float>(eps)),
            fn << ": eps must be finite and >= 0 in float32, got " << eps);
  return static_cast<float>(eps);
}

// Rows of N in x, for the statistics of a forward or a backward.
std::int64_t rows_of(const Tensor& x, std::int64_t N) { return N == 0 ? 0 : x.numel() / N; }

// A row whose N entries are one finite value v has mean v and variance 0 exactly, so
// x̂ = 0 and y = b. oneDNN's float mean of such a row can be off by an ulp of v, and
// 1/sqrt(variance + eps) then magnifies x − mean (1000x at eps 1e-6) into a y that is
// noise around b: the blank patches of an image are such rows, and their noise made qkv's
// and torch's ViT gradients differ by 4x float rounding. Set those rows exactly, and their
// statistics for the backward (which then finds x̂ = 0 too). The scan leaves most rows at
// their second entry.
void set_constant_rows(const float* x, std::int64_t rows, std::int64_t N, const float* bias, float* out,
                       float* mean, float* variance) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * N;
    const float v = row[0];
    if (!std::isfinite(v) || !std::all_of(row + 1, row + N, [v](float e) { return e == v; })) continue;
    for (std::int64_t j = 0; j < N; ++j) out[r * N + j] = bias ? bias[j] : 0.0f;
    if (mean) {
      mean[r] = v;
      variance[r] = 0.0f;
    }
  }
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized, const Tensor& weight,
                  const Tensor& bias, double eps, Tensor* mean, Tensor* variance) {
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
  QKV_CHECK((mean == nullptr) == (variance == nullptr),
            "layer_norm: give both mean and variance, or neither");
  const float e = checked_eps(eps, "layer_norm");
  Tensor xc = detail::contiguous_f32(x, "layer_norm", "x");  // (..., N)
  Tensor w = weight.defined() ? detail::contiguous_f32(weight, "layer_norm", "weight") : Tensor();
  Tensor b = bias.defined() ? detail::contiguous_f32(bias, "layer_norm", "bias") : Tensor();
  std::int64_t N = 1;
  for (auto n : normalized) N *= n;
  const std::int64_t rows = rows_of(x, N);
  const bool training = mean != nullptr;
  if (training) {
    *mean = Tensor::zeros({rows});      // (rows)
    *variance = Tensor::zeros({rows});  // (rows)
  }
  Tensor out = Tensor::empty(x.shape());  // (..., N)
  if (out.numel() == 0) return out;
  const auto prim = forward_primitive(rows, N, e, w.defined(), b.defined(), training);
  dnnl::engine& engine = detail::cpu_engine();
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(data_desc(rows, N), engine, const_cast<void*>(xc.data()))},
      {DNNL_ARG_DST, dnnl::memory(data_desc(rows, N), engine, out.data())}};
  if (w.defined())
    args.emplace(DNNL_ARG_SCALE, dnnl::memory(param_desc(N), engine, const_cast<void*>(w.data())));
  if (b.defined())
    args.emplace(DNNL_ARG_SHIFT, dnnl::memory(param_desc(N), engine, const_cast<void*>(b.data())));
  if (training) {
    args.emplace(DNNL_ARG_MEAN, dnnl::memory(stat_desc(rows), engine, mean->data()));
    args.emplace(DNNL_ARG_VARIANCE, dnnl::memory(stat_desc(rows), engine, variance->data()));
  }
  detail::run(prim, std::move(args));
  set_constant_rows(xc.data_as<float>(), rows, N, b.defined() ? b.data_as<float>() : nullptr, out.data_as<float>(),
                    training ? mean->data_as<float>() : nullptr, training ? variance->data_as<float>() : nullptr);
  return out;
}

// forward: y = x̂·w + b,  x̂ = (x − mean)/sqrt(variance + eps)
Tensor layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                           const Tensor& variance, const Tensor& weight, double eps,
                           Tensor* dweight, Tensor* dbias) {
  const char* fn = "layer_norm_backward";
  QKV_CHECK(x.defined() && dy.defined() && dy.shape() == x.shape(),
            fn << ": dy must be " << (x.defined() ? x.shape_string() : "undefined") << ", got "
               << (dy.defined() ? dy.shape_string() : "undefined"));
  const std::int64_t rows = mean.defined() ? mean.numel() : 0;
  QKV_CHECK(mean.defined() && variance.defined() && variance.numel() == rows &&
                mean.dtype() == DType::f32 && variance.dtype() == DType::f32 &&
                mean.is_contiguous() && variance.is_contiguous() &&
                (rows == 0 ? x.numel() == 0 : x.numel() % rows == 0),
            fn << ": mean and variance must be the forward's (rows) f32 statistics");
  const std::int64_t N = rows == 0 ? 0 : x.numel() / rows;
  const bool affine = weight.defined();
  QKV_CHECK(!affine || weight.numel() == N, fn << ": weight must hold N = " << N << " entries");
  QKV_CHECK(affine || (dweight == nullptr && dbias == nullptr),
            fn << ": dweight and dbias need the weight (a LayerNorm without affine parameters "
                  "has none)");
  if (dweight) detail::check_grad(*dweight, weight.shape(), fn, "dweight");
  if (dbias) detail::check_grad(*dbias, weight.shape(), fn, "dbias");
  const float e = checked_eps(eps, fn);
  Tensor g = detail::contiguous_f32(dy, fn, "dy");  // (rows, N)
  Tensor xc = detail::contiguous_f32(x, fn, "x");   // (rows, N)
  Tensor dx = Tensor::empty(x.shape());             // (..., N)
  if (dx.numel() == 0) return dx;
  dnnl::engine& engine = detail::cpu_engine();
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(data_desc(rows, N), engine, const_cast<void*>(xc.data()))},
      {DNNL_ARG_DIFF_DST, dnnl::memory(data_desc(rows, N), engine, const_cast<void*>(g.data()))},
      {DNNL_ARG_DIFF_SRC, dnnl::memory(data_desc(rows, N), engine, dx.data())},
      {DNNL_ARG_MEAN, dnnl::memory(stat_desc(rows), engine, const_cast<void*>(mean.data()))},
      {DNNL_ARG_VARIANCE, dnnl::memory(stat_desc(rows), engine, const_cast<void*>(variance.data()))}};
  // oneDNN writes dw and db; the module's contract is to add them.
  Tensor wc, dw, db;  // (N)
  if (affine) {
    wc = detail::contiguous_f32(weight, fn, "weight");
    dw = Tensor::empty({N});
    db = Tensor::empty({N});
    args.emplace(DNNL_ARG_SCALE, dnnl::memory(param_desc(N), engine, wc.data()));
    // The shift is not read by the backward, but this oneDNN (2.6) refuses to run
    // without it when the primitive has one: any (N) buffer serves.
    args.emplace(DNNL_ARG_SHIFT, dnnl::memory(param_desc(N), engine, wc.data()));
    args.emplace(DNNL_ARG_DIFF_SCALE, dnnl::memory(param_desc(N), engine, dw.data()));
    args.emplace(DNNL_ARG_DIFF_SHIFT, dnnl::memory(param_desc(N), engine, db.data()));
  }
  detail::run(backward_primitive(rows, N, e, affine), std::move(args));
  if (dweight) add_(*dweight, dw.view(dweight->shape()));
  if (dbias) add_(*dbias, db.view(dbias->shape()));
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
  return layer_norm(record->x, normalized_shape, weight, bias, eps, &record->mean,
                    &record->variance);
}

Tensor LayerNorm::backward(const Tensor& dy, const Record& record, LayerNorm& grads) const {
  QKV_CHECK(grads.weight.defined() == weight.defined() && grads.bias.defined() == bias.defined(),
            "LayerNorm::backward: grads must be a LayerNorm of the same shape and affinity");
  QKV_CHECK(weight.defined() == bias.defined(),
            "LayerNorm::backward: trains a LayerNorm with both weight and bias, or neither");
  return layer_norm_backward(dy, record.x, record.mean, record.variance, weight, eps,
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
