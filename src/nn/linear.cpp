// Linear (oneDNN matmul), Embedding, LayerNorm, activations, state dicts.

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <unordered_map>

#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include "nn/common.h"
#include "qkv/rng.h"
#include "qkv/threads.h"

namespace qkv::nn {

namespace detail {

Tensor add(const Tensor& a, const Tensor& b, const char* fn) {
  QKV_CHECK(a.shape() == b.shape(), fn << ": cannot add " << a.shape_string() << " and "
                                       << b.shape_string());
  Tensor x = contiguous_f32(a, fn, "a");
  Tensor y = contiguous_f32(b, fn, "b");
  Tensor out = Tensor::empty(a.shape());  // same shape as a
  const float* px = x.data_as<float>();
  const float* py = y.data_as<float>();
  float* po = out.data_as<float>();
  const std::int64_t n = out.numel();
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (std::int64_t i = 0; i < n; ++i) po[i] = px[i] + py[i];
  return out;
}

void fill_uniform(Tensor& t, double bound, std::uint64_t seed) {
  Rng rng(seed);
  float* p = t.data_as<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i)
    p[i] = static_cast<float>((2.0 * rng.uniform() - 1.0) * bound);
}

}  // namespace detail

namespace {

// One CPU engine for the process. oneDNN primitives may be executed from several threads
// at once (oneDNN's documented thread-safety of execute()), so one cached primitive per
// shape serves every caller.
dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// oneDNN (its OpenMP build) runs on OpenMP's thread count, which other libraries in the
// process change: importing PyTorch sets it to the physical cores, 1 on a 2-vCPU machine,
// and a BERT layer then ran at half speed. Within this scope, on this thread, OpenMP's
// count is qkv's (threads.h); it is restored after. A primitive fixes its split of the
// work when created, so the scope covers creation too, and the caches are keyed by the
// count.
class OmpThreadScope {
 public:
  explicit OmpThreadScope(int threads) : before_(omp_get_max_threads()) {
    if (threads != before_) omp_set_num_threads(threads);
  }
  ~OmpThreadScope() {
    if (omp_get_max_threads() != before_) omp_set_num_threads(before_);
  }
  OmpThreadScope(const OmpThreadScope&) = delete;
  OmpThreadScope& operator=(const OmpThreadScope&) = delete;

 private:
  int before_;
};

// Runs one primitive on the CPU engine and waits for it: every oneDNN call of this file.
void run(const dnnl::primitive& primitive, const std::unordered_map<int, dnnl::memory>& args) {
  const OmpThreadScope threads(num_threads());
  dnnl::stream stream(cpu_engine());
  primitive.execute(stream, args);
  stream.wait();
}

// Copies `from` into `to`, converting layout and type.
void reorder(dnnl::memory from, dnnl::memory to) {
  const OmpThreadScope threads(num_threads());  // around the primitive's creation too
  run(dnnl::reorder(from, to), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
}

// What a linear() primitive computes besides x·Wᵀ: bias, activation, residual.
struct LinearKind {
  bool bias = false;
  LinearActivation activation = LinearActivation::none;
  bool residual = false;
  auto operator<=>(const LinearKind&) const = default;
};

dnnl::algorithm eltwise_algorithm(LinearActivation a) {
  switch (a) {
    case LinearActivation::relu: return dnnl::algorithm::eltwise_relu;
    case LinearActivation::gelu_erf: return dnnl::algorithm::eltwise_gelu_erf;
    case LinearActivation::gelu_tanh: return dnnl::algorithm::eltwise_gelu_tanh;
    case LinearActivation::none: break;
  }
  throw Error("linear: no eltwise algorithm for LinearActivation::none");
}

// A matmul primitive and the weights layout it reads.
struct Matmul {
  dnnl::matmul primitive;
  dnnl::memory::desc weights;
};

// How a product's weights are laid out: plain f32 (N, K) rows, or oneDNN's own blocked
// layout (format any) in f32 or bf16; with bf16 weights the rows of x go in as bf16 too
// (oneDNN's matmul takes no f32 × bf16 mix), the output stays f32.
enum class WeightsKind { plain_f32, packed_f32, packed_bf16 };

WeightsKind weights_kind(DType packed) {
  return packed == DType::bf16 ? WeightsKind::packed_bf16 : WeightsKind::packed_f32;
}

// (M, K, N, kind, weights) -> the matmul primitive. oneDNN has its own primitive cache, but
// creating the descriptors still costs microseconds per call; this skips that. Bounded:
// cleared when it grows past kMaxCached shapes (decoding changes M every step otherwise).
struct MatmulCache {
  static constexpr std::size_t kMaxCached = 64;
  using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, LinearKind, WeightsKind, int>;  // .., threads
  std::mutex mutex;
  std::map<Key, Matmul> primitives;

  Matmul get(std::int64_t M, std::int64_t K, std::int64_t N, const LinearKind& kind,
             WeightsKind weights) {
    std::lock_guard<std::mutex> lock(mutex);
    const int threads = num_threads();
    const Key key{M, K, N, kind, weights, threads};
    auto it = primitives.find(key);
    if (it != primitives.end()) return it->second;
    const OmpThreadScope scope(threads);
    using dt = dnnl::memory::data_type;
    const dt in = weights == WeightsKind::packed_bf16 ? dt::bf16 : dt::f32;
    const dnnl::memory::desc src({M, K}, in, dnnl::memory::dims{K, 1});
    const dnnl::memory::desc wei =
        weights == WeightsKind::plain_f32
            ? dnnl::memory::desc({K, N}, dt::f32, dnnl::memory::dims{1, K})  // Wᵀ of (N, K)
            : dnnl::memory::desc({K, N}, in, dnnl::memory::format_tag::any);
    const dnnl::memory::desc dst({M, N}, dt::f32, dnnl::memory::dims{N, 1});
    const dnnl::memory::desc bia = kind.bias
        ? dnnl::memory::desc({1, N}, dt::f32, dnnl::memory::dims{N, 1})
        : dnnl::memory::desc();
    // Post-ops run on each output block while it is still in registers or cache: the
    // activation first (it applies to x·Wᵀ + b), then the residual (binary add of a
    // (M, N) row-major tensor).
    dnnl::post_ops ops;
    if (kind.activation != LinearActivation::none)
      ops.append_eltwise(1.f, eltwise_algorithm(kind.activation), 0.f, 0.f);
    if (kind.residual) ops.append_binary(dnnl::algorithm::binary_add, dst);
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
    const dnnl::matmul::desc desc(src, wei, bia, dst);
    dnnl::matmul::primitive_desc pd;
    try {
      pd = dnnl::matmul::primitive_desc(desc, attr, cpu_engine());
    } catch (const dnnl::error& e) {
      QKV_CHECK_TYPE(weights != WeightsKind::packed_bf16,
                     "linear: this CPU has no oneDNN matmul for bf16 weights (" << e.what()
                                                                               << ")");
      throw;
    }
    if (primitives.size() >= kMaxCached) primitives.clear();
    return primitives.emplace(key, Matmul{dnnl::matmul(pd), pd.weights_desc()}).first->second;
  }
};

MatmulCache& matmul_cache() {
  static MatmulCache cache;
  return cache;
}

// (M, N, K, trans_a, trans_b, accumulate) -> the matmul primitive, for detail::gemm.
struct GemmCache {
  static constexpr std::size_t kMaxCached = 256;
  using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, bool, bool, bool, int>;  // .., threads
  std::mutex mutex;
  std::map<Key, dnnl::matmul> primitives;

  dnnl::matmul get(std::int64_t M, std::int64_t N, std::int64_t K, bool trans_a, bool trans_b, bool accumulate) {
    std::lock_guard<std::mutex> lock(mutex);
    const int threads = num_threads();
    const Key key{M, N, K, trans_a, trans_b, accumulate, threads};
    auto it = primitives.find(key);
    if (it != primitives.end()) return it->second;
    const OmpThreadScope scope(threads);
    using dt = dnnl::memory::data_type;
    // A stored (M, K) row-major, or (K, M) when transposed; likewise B (K, N) or (N, K).
    const dnnl::memory::desc a({M, K}, dt::f32,
                               trans_a ? dnnl::memory::dims{1, M} : dnnl::memory::dims{K, 1});
    const dnnl::memory::desc b({K, N}, dt::f32,
                               trans_b ? dnnl::memory::dims{1, K} : dnnl::memory::dims{N, 1});
    const dnnl::memory::desc c({M, N}, dt::f32, dnnl::memory::dims{N, 1});
    dnnl::primitive_attr attr;
    if (accumulate) {  // C = 1·C + A·B: oneDNN's sum post-op
      dnnl::post_ops ops;
      ops.append_sum(1.f);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::desc desc(a, b, c);
    const dnnl::matmul::primitive_desc pd(desc, attr, cpu_engine());
    if (primitives.size() >= kMaxCached) primitives.clear();
    return primitives.emplace(key, dnnl::matmul(pd)).first->second;
  }
};

// (rows, N, eps, scale, shift) -> oneDNN's inference layer normalization over the last
// dimension of a (rows, N) row-major matrix.
struct LayerNormCache {
  static constexpr std::size_t kMaxCached = 64;
  using Key = std::tuple<std::int64_t, std::int64_t, float, bool, bool, int>;  // .., threads
  std::mutex mutex;
  std::map<Key, dnnl::layer_normalization_forward> primitives;

  dnnl::layer_normalization_forward get(std::int64_t rows, std::int64_t N, float eps,
                                        bool scale, bool shift) {
    std::lock_guard<std::mutex> lock(mutex);
    const int threads = num_threads();
    const Key key{rows, N, eps, scale, shift, threads};
    auto it = primitives.find(key);
    if (it != primitives.end()) return it->second;
    const OmpThreadScope scope(threads);
    const dnnl::memory::desc data({rows, N}, dnnl::memory::data_type::f32,
                                  dnnl::memory::dims{N, 1});
    auto flags = dnnl::normalization_flags::none;
    if (scale) flags |= dnnl::normalization_flags::use_scale;
    if (shift) flags |= dnnl::normalization_flags::use_shift;
    const dnnl::layer_normalization_forward::desc desc(dnnl::prop_kind::forward_inference, data,
                                                       eps, flags);
    const dnnl::layer_normalization_forward::primitive_desc pd(desc, cpu_engine());
    if (primitives.size() >= kMaxCached) primitives.clear();
    return primitives.emplace(key, dnnl::layer_normalization_forward(pd)).first->second;
  }
};

LayerNormCache& layer_norm_cache() {
  static LayerNormCache cache;
  return cache;
}

GemmCache& gemm_cache() {
  static GemmCache cache;
  return cache;
}

}  // namespace

namespace detail {

void gemm(float* c, const float* a, const float* b, std::int64_t M, std::int64_t N,
          std::int64_t K, bool trans_a, bool trans_b, bool accumulate) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum
    if (!accumulate) std::fill_n(c, M * N, 0.f);
    return;
  }
  dnnl::matmul prim = gemm_cache().get(M, N, K, trans_a, trans_b, accumulate);
  using dt = dnnl::memory::data_type;
  dnnl::engine& engine = cpu_engine();
  dnnl::memory a_mem({{M, K}, dt::f32, trans_a ? dnnl::memory::dims{1, M} : dnnl::memory::dims{K, 1}},
                     engine, const_cast<float*>(a));
  dnnl::memory b_mem({{K, N}, dt::f32, trans_b ? dnnl::memory::dims{1, K} : dnnl::memory::dims{N, 1}},
                     engine, const_cast<float*>(b));
  dnnl::memory c_mem({{M, N}, dt::f32, dnnl::memory::dims{N, 1}}, engine, c);
  run(prim, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
}

}  // namespace detail

struct PackedWeight::Impl {
  std::int64_t out_features = 0, in_features = 0;  // N, K
  DType dtype = DType::f32;                         // f32 or bf16
  dnnl::memory::desc layout;                        // oneDNN's blocked (K, N)
  dnnl::memory packed;                              // owns the reordered copy
};

PackedWeight::PackedWeight(const Tensor& weight, DType dtype) {
  QKV_CHECK(weight.defined() && weight.dim() == 2,
            "PackedWeight: weight must be (out_features, in_features), got "
                << (weight.defined() ? weight.shape_string() : std::string("undefined")));
  QKV_CHECK_TYPE(dtype == DType::f32 || dtype == DType::bf16,
                 "PackedWeight: dtype must be f32 or bf16, got " << dtype_name(dtype));
  auto impl = std::make_shared<Impl>();
  impl->out_features = weight.size(0);
  impl->in_features = weight.size(1);
  impl->dtype = dtype;
  const Tensor w = detail::contiguous_f32(weight, "PackedWeight", "weight");  // (N, K)
  const std::int64_t N = impl->out_features, K = impl->in_features;
  if (N > 0 && K > 0) {
    // The layout oneDNN picks does not depend on M for its brgemm kernels (checked for
    // M = 1 ... 4096); linear() re-lays the copy out per call should a shape want another.
    impl->layout = matmul_cache().get(1, K, N, LinearKind{}, weights_kind(dtype)).weights;
    impl->packed = dnnl::memory(impl->layout, cpu_engine());
    dnnl::memory plain({{K, N}, dnnl::memory::data_type::f32, dnnl::memory::dims{1, K}},
                       cpu_engine(), const_cast<void*>(w.data()));
    reorder(plain, impl->packed);
  }
  impl_ = std::move(impl);
}

std::int64_t PackedWeight::out_features() const { return impl().out_features; }
DType PackedWeight::dtype() const { return impl().dtype; }
std::int64_t PackedWeight::in_features() const { return impl().in_features; }

const PackedWeight::Impl& PackedWeight::impl() const {
  QKV_CHECK(impl_ != nullptr, "PackedWeight: undefined (default-constructed)");
  return *impl_;
}

namespace {

// y = act(x·Wᵀ + b) + residual, W (N, K_w) as plain rows `weight` (contiguous f32) or
// packed (then `weight` is undefined).
Tensor run_linear(const Tensor& x, std::int64_t N, std::int64_t K_w, const Tensor& weight,
                  const PackedWeight::Impl* packed, const Tensor& bias,
                  const LinearEpilogue& epilogue) {
  QKV_CHECK(x.defined() && x.dim() >= 1, "linear: x must have rank >= 1");
  const std::int64_t K = x.size(-1);
  QKV_CHECK(K_w == K, "linear: the weight's in_features must equal x.size(-1) = "
                          << K << ", got weight (" << N << ", " << K_w << ")");
  if (bias.defined())
    QKV_CHECK(bias.dim() == 1 && bias.size(0) == N,
              "linear: bias must be (" << N << "), got " << bias.shape_string());
  Shape out_shape = x.shape();
  out_shape.back() = N;
  const Tensor& residual = epilogue.residual;
  if (residual.defined())
    QKV_CHECK(residual.shape() == out_shape,
              "linear: residual must have the output's shape " << shape_to_string(out_shape)
                                                               << ", got "
                                                               << residual.shape_string());
  Tensor x2 = detail::contiguous_f32(x, "linear", "x");  // (..., K)
  Tensor b = bias.defined() ? detail::contiguous_f32(bias, "linear", "bias") : Tensor();  // (N)
  Tensor r = residual.defined() ? detail::contiguous_f32(residual, "linear", "residual")
                                : Tensor();  // (..., N)
  const std::int64_t M = K == 0 ? x.numel() : x.numel() / K;  // rows; K == 0 handled below
  Tensor out = Tensor::empty(out_shape);  // (..., N)
  if (out.numel() == 0) return out;
  float* po = out.data_as<float>();
  if (K == 0) {  // an empty sum: y = act(b) + residual, in the same order as the post-ops
    for (std::int64_t m = 0; m < out.numel() / N; ++m)
      for (std::int64_t n = 0; n < N; ++n) po[m * N + n] = b.defined() ? b.data_as<float>()[n] : 0.f;
    if (epilogue.activation == LinearActivation::relu) out = relu(out);
    if (epilogue.activation == LinearActivation::gelu_erf) out = gelu(out);
    if (epilogue.activation == LinearActivation::gelu_tanh) out = gelu(out, GeluApproximation::tanh);
    return r.defined() ? detail::add(out, r, "linear") : out;
  }
  const LinearKind kind{b.defined(), epilogue.activation, r.defined()};
  const WeightsKind weights_as = packed ? weights_kind(packed->dtype) : WeightsKind::plain_f32;
  Matmul mm = matmul_cache().get(M, K, N, kind, weights_as);
  using dt = dnnl::memory::data_type;
  dnnl::engine& engine = cpu_engine();
  dnnl::memory src({{M, K}, dt::f32, dnnl::memory::dims{K, 1}}, engine,
                   const_cast<void*>(x2.data()));
  Tensor x_bf16;  // (M, K) bf16, rounded to nearest even
  if (weights_as == WeightsKind::packed_bf16) {
    // A plain loop, not a oneDNN reorder: creating that primitive on every call cost
    // more than converting one decoding row.
    x_bf16 = Tensor::empty({M, K}, DType::bf16);
    const float* from = x2.data_as<float>();
    std::uint16_t* to = x_bf16.data_as<std::uint16_t>();
    const std::int64_t n = M * K;
#pragma omp parallel for schedule(static) num_threads(num_threads()) if (n >= (1 << 16))
    for (std::int64_t i = 0; i < n; ++i) to[i] = f32_to_bf16(from[i]);
    src = dnnl::memory({{M, K}, dt::bf16, dnnl::memory::dims{K, 1}}, engine, x_bf16.data());
  }
  dnnl::memory weights;
  if (packed == nullptr) {
    weights = dnnl::memory({{K, N}, dt::f32, dnnl::memory::dims{1, K}}, engine,
                           const_cast<void*>(weight.data()));
  } else if (mm.weights == packed->layout) {
    weights = packed->packed;
  } else {  // this shape wants another layout: re-lay the packed copy out for this call
    weights = dnnl::memory(mm.weights, engine);
    reorder(packed->packed, weights);
  }
  const dnnl::memory::desc rows({M, N}, dt::f32, dnnl::memory::dims{N, 1});
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, src},
      {DNNL_ARG_WEIGHTS, weights},
      {DNNL_ARG_DST, dnnl::memory(rows, engine, po)}};
  if (b.defined())
    args.emplace(DNNL_ARG_BIAS, dnnl::memory({{1, N}, dt::f32, dnnl::memory::dims{N, 1}}, engine,
                                             const_cast<void*>(b.data())));
  if (r.defined()) {  // the residual is the last post-op
    const int index = epilogue.activation == LinearActivation::none ? 0 : 1;
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1,
                 dnnl::memory(rows, engine, const_cast<void*>(r.data())));
  }
  run(mm.primitive, args);
  return out;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
              const LinearEpilogue& epilogue) {
  QKV_CHECK(weight.defined() && weight.dim() == 2,
            "linear: weight must be (out_features, in_features), got "
                << (weight.defined() ? weight.shape_string() : std::string("undefined")));
  const Tensor w = detail::contiguous_f32(weight, "linear", "weight");  // (N, K)
  return run_linear(x, w.size(0), w.size(1), w, nullptr, bias, epilogue);
}

Tensor linear(const Tensor& x, const PackedWeight& weight, const Tensor& bias,
              const LinearEpilogue& epilogue) {
  const PackedWeight::Impl& impl = weight.impl();
  return run_linear(x, impl.out_features, impl.in_features, Tensor(), &impl, bias, epilogue);
}

Tensor layer_norm(const Tensor& x, const Shape& normalized, const Tensor& weight,
                  const Tensor& bias, double eps) {
  const auto k = static_cast<std::int64_t>(normalized.size());
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
  QKV_CHECK(eps >= 0 && std::isfinite(eps), "layer_norm: eps must be finite and >= 0, got " << eps);
  Tensor xc = detail::contiguous_f32(x, "layer_norm", "x");  // (..., N)
  Tensor w = weight.defined() ? detail::contiguous_f32(weight, "layer_norm", "weight") : Tensor();
  Tensor b = bias.defined() ? detail::contiguous_f32(bias, "layer_norm", "bias") : Tensor();
  std::int64_t N = 1;
  for (auto n : normalized) N *= n;
  Tensor out = Tensor::empty(x.shape());  // (..., N)
  if (out.numel() == 0) return out;
  const std::int64_t rows = out.numel() / N;
  dnnl::layer_normalization_forward prim =
      layer_norm_cache().get(rows, N, static_cast<float>(eps), w.defined(), b.defined());
  using dt = dnnl::memory::data_type;
  dnnl::engine& engine = cpu_engine();
  const dnnl::memory::desc data({rows, N}, dt::f32, dnnl::memory::dims{N, 1});
  const dnnl::memory::desc param({N}, dt::f32, dnnl::memory::dims{1});
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(data, engine, const_cast<void*>(xc.data()))},
      {DNNL_ARG_DST, dnnl::memory(data, engine, out.data())}};
  if (w.defined())
    args.emplace(DNNL_ARG_SCALE, dnnl::memory(param, engine, const_cast<void*>(w.data())));
  if (b.defined())
    args.emplace(DNNL_ARG_SHIFT, dnnl::memory(param, engine, const_cast<void*>(b.data())));
  run(prim, args);
  return out;
}

Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  Tensor xc = detail::contiguous_f32(x, "gelu", "x");
  Tensor out = Tensor::empty(x.shape());  // same shape as x
  const float* px = xc.data_as<float>();
  float* po = out.data_as<float>();
  const std::int64_t n = out.numel();
  // Elementwise, so splitting across threads changes no bit of the result.
  if (approximate == GeluApproximation::none) {
#pragma omp parallel for schedule(static) num_threads(num_threads())
    for (std::int64_t i = 0; i < n; ++i)
      po[i] = static_cast<float>(0.5 * px[i] * (1.0 + std::erf(px[i] * M_SQRT1_2)));
  } else {
    const double c = std::sqrt(2.0 / M_PI);
#pragma omp parallel for schedule(static) num_threads(num_threads())
    for (std::int64_t i = 0; i < n; ++i) {
      const double v = px[i];
      po[i] = static_cast<float>(0.5 * v * (1.0 + std::tanh(c * (v + 0.044715 * v * v * v))));
    }
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
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (std::int64_t i = 0; i < n; ++i) po[i] = px[i] < 0.f ? 0.f : px[i];
  return out;
}

// ---------------------------------------------------------------------------------------

Linear::Linear(std::int64_t in_features, std::int64_t out_features, bool with_bias,
               std::uint64_t seed) {
  QKV_CHECK(in_features >= 0 && out_features >= 0,
            "Linear: in_features and out_features must be >= 0, got " << in_features << ", "
                                                                      << out_features);
  weight = Tensor::empty({out_features, in_features});
  // torch: kaiming_uniform_(a=√5) = U(±1/√in), bias U(±1/√in).
  const double bound = in_features > 0 ? 1.0 / std::sqrt(static_cast<double>(in_features)) : 0.0;
  detail::fill_uniform(weight, bound, seed);
  if (with_bias) {
    bias = Tensor::empty({out_features});
    detail::fill_uniform(bias, bound, seed ^ 0x5bd1e995ull);
  }
}

Tensor Linear::forward(const Tensor& x) const { return linear(x, weight, bias); }

ParameterList Linear::parameters(const std::string& prefix) {
  ParameterList list{{prefix + "weight", &weight}};
  if (bias.defined()) list.emplace_back(prefix + "bias", &bias);
  return list;
}

Embedding::Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, std::uint64_t seed) {
  QKV_CHECK(num_embeddings >= 0 && embedding_dim >= 0,
            "Embedding: num_embeddings and embedding_dim must be >= 0, got "
                << num_embeddings << ", " << embedding_dim);
  weight = Tensor::empty({num_embeddings, embedding_dim});
  Rng rng(seed);  // torch: N(0, 1)
  float* p = weight.data_as<float>();
  for (std::int64_t i = 0; i < weight.numel(); ++i) p[i] = static_cast<float>(rng.normal());
}

Tensor Embedding::forward(std::span<const std::int64_t> ids, const Shape& shape) const {
  std::int64_t count = 1;
  for (auto s : shape) {
    QKV_CHECK(s >= 0, "Embedding: shape " << shape_to_string(shape) << " has a negative size");
    count *= s;
  }
  QKV_CHECK(static_cast<std::int64_t>(ids.size()) == count,
            "Embedding: ids has " << ids.size() << " entries, shape " << shape_to_string(shape)
                                  << " needs " << count);
  const std::int64_t V = weight.size(0), E = weight.size(1);
  Tensor w = detail::contiguous_f32(weight, "Embedding", "weight");  // (V, E)
  Shape out_shape = shape;
  out_shape.push_back(E);
  Tensor out = Tensor::empty(out_shape);  // (shape..., E)
  float* po = out.data_as<float>();
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int64_t id = ids[static_cast<std::size_t>(i)];
    QKV_CHECK(id >= 0 && id < V, "Embedding: ids[" << i << "] = " << id
                                                   << " is out of range [0, " << V << ")");
    std::copy_n(w.data_as<float>() + id * E, E, po + i * E);
  }
  return out;
}

ParameterList Embedding::parameters(const std::string& prefix) {
  return {{prefix + "weight", &weight}};
}

LearnedPositionalEmbedding::LearnedPositionalEmbedding(std::int64_t max_positions,
                                                       std::int64_t dim, std::uint64_t seed)
    : table(max_positions, dim, seed) {}

Tensor LearnedPositionalEmbedding::forward(std::int64_t length, std::int64_t offset) const {
  QKV_CHECK(length >= 0 && offset >= 0 && offset + length <= table.weight.size(0),
            "LearnedPositionalEmbedding: positions [" << offset << ", " << offset + length
                                                      << ") exceed max_positions "
                                                      << table.weight.size(0));
  std::vector<std::int64_t> ids(static_cast<std::size_t>(length));
  for (std::int64_t i = 0; i < length; ++i) ids[static_cast<std::size_t>(i)] = offset + i;
  return table.forward(ids, {length});
}

ParameterList LearnedPositionalEmbedding::parameters(const std::string& prefix) {
  return table.parameters(prefix);
}

LayerNorm::LayerNorm(Shape shape, double eps_, bool elementwise_affine)
    : normalized_shape(std::move(shape)), eps(eps_) {
  QKV_CHECK(!normalized_shape.empty(), "LayerNorm: normalized_shape must not be empty");
  if (elementwise_affine) {
    weight = Tensor::full(normalized_shape, 1.f);
    bias = Tensor::zeros(normalized_shape);
  }
}

Tensor LayerNorm::forward(const Tensor& x) const {
  return layer_norm(x, normalized_shape, weight, bias, eps);
}

ParameterList LayerNorm::parameters(const std::string& prefix) {
  ParameterList list;
  if (weight.defined()) list.emplace_back(prefix + "weight", &weight);
  if (bias.defined()) list.emplace_back(prefix + "bias", &bias);
  return list;
}

// ---------------------------------------------------------------------------------------

void load_state_dict(const ParameterList& parameters, const StateDict& state, bool strict) {
  std::set<std::string> used;
  for (const auto& [name, param] : parameters) {
    auto it = state.find(name);
    QKV_CHECK(it != state.end(), "load_state_dict: missing parameter '" << name << "' of shape "
                                                                       << param->shape_string());
    const Tensor& src = it->second;
    QKV_CHECK(src.defined(), "load_state_dict: parameter '" << name << "' is undefined");
    QKV_CHECK_TYPE(src.dtype() != DType::boolean,
                   "load_state_dict: parameter '" << name << "' must be floating, got bool");
    QKV_CHECK(src.shape() == param->shape(),
              "load_state_dict: parameter '" << name << "' must have shape "
                                             << param->shape_string() << ", got "
                                             << src.shape_string());
    // A fresh allocation, so layers that were copied from one another (and so share
    // storage) do not change together.
    Tensor fresh = Tensor::empty(param->shape());
    fresh.copy_from(src);
    *param = fresh;
    used.insert(name);
  }
  if (strict) {
    for (const auto& [name, tensor] : state)
      QKV_CHECK(used.count(name), "load_state_dict: unexpected entry '" << name
                                                                        << "' matches no parameter");
  }
}

StateDict state_dict(const ParameterList& parameters) {
  StateDict state;
  for (const auto& [name, param] : parameters) state.emplace(name, *param);
  return state;
}

}  // namespace qkv::nn
