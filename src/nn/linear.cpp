// Linear: linear() through oneDNN's matmul (bias, activation and residual as post-ops),
// packed weights, the Linear module, and the backward.

#include <algorithm>
#include <cmath>
#include <tuple>
#include <unordered_map>

#include "nn/common.h"
#include "nn/onednn.h"
#include "core/parallel.h"
#include "qkv/threads.h"

namespace qkv::nn {

namespace {

using detail::cpu_engine;

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

// How a product's weights are laid out: plain (N, K) rows in f32 or bf16 (bf16: under a
// ProductPrecision scope, qkv/nn/precision.h), or oneDNN's own blocked layout (format any)
// in f32 or bf16; with bf16 weights the rows of x go in as bf16 too (oneDNN's matmul takes
// no f32 × bf16 mix), the output stays f32.
enum class WeightsKind { plain_f32, plain_bf16, packed_f32, packed_bf16 };

bool bf16_inputs(WeightsKind w) { return w == WeightsKind::plain_bf16 || w == WeightsKind::packed_bf16; }

WeightsKind weights_kind(DType packed) {
  return packed == DType::bf16 ? WeightsKind::packed_bf16 : WeightsKind::packed_f32;
}

// (M, K, N, kind, weights) -> the matmul primitive.
Matmul matmul(std::int64_t M, std::int64_t K, std::int64_t N, const LinearKind& kind,
              WeightsKind weights) {
  using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, LinearKind, WeightsKind>;
  static detail::PrimitiveCache<Key, Matmul> cache(64);
  return cache.get({M, K, N, kind, weights}, [&] {
    using dt = dnnl::memory::data_type;
    const dt in = bf16_inputs(weights) ? dt::bf16 : dt::f32;
    const dnnl::memory::desc src({M, K}, in, dnnl::memory::dims{K, 1});
    const bool plain = weights == WeightsKind::plain_f32 || weights == WeightsKind::plain_bf16;
    const dnnl::memory::desc wei =
        plain ? dnnl::memory::desc({K, N}, in, dnnl::memory::dims{1, K})  // Wᵀ of (N, K)
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
    dnnl::primitive_attr attr = detail::scratchpad_attr();
    attr.set_post_ops(ops);
    const dnnl::matmul::desc desc(src, wei, bia, dst);
    dnnl::matmul::primitive_desc pd;
    try {
      pd = dnnl::matmul::primitive_desc(desc, attr, cpu_engine());
    } catch (const dnnl::error& e) {
      QKV_CHECK_TYPE(!bf16_inputs(weights),
                     "linear: this CPU has no oneDNN matmul for bf16 (" << e.what() << ")");
      throw;
    }
    return Matmul{dnnl::matmul(pd), pd.weights_desc()};
  });
}

}  // namespace

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
    impl->layout = matmul(1, K, N, LinearKind{}, weights_kind(dtype)).weights;
    impl->packed = dnnl::memory(impl->layout, cpu_engine());
    dnnl::memory plain({{K, N}, dnnl::memory::data_type::f32, dnnl::memory::dims{1, K}},
                       cpu_engine(), const_cast<void*>(w.data()));
    detail::reorder(plain, impl->packed);
  }
  impl_ = std::move(impl);
}

std::int64_t PackedWeight::out_features() const { return impl().out_features; }
DType PackedWeight::dtype() const { return impl().dtype; }
std::int64_t PackedWeight::in_features() const { return impl().in_features; }
bool PackedWeight::plain_layout() const {
  const dnnl::memory::desc& layout = impl().layout;
  return layout.data.format_kind == dnnl_blocked && layout.data.format_desc.blocking.inner_nblks == 0;
}

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
  // Under a bf16 ProductPrecision scope a plain weight's product takes x and W rounded to
  // bf16 (a packed weight keeps the dtype it was packed in).
  const bool bf16_products = packed == nullptr && product_dtype() == DType::bf16;
  Tensor x2 = bf16_products ? detail::contiguous_bf16(x, "linear", "x")
                            : detail::contiguous_f32(x, "linear", "x");  // (..., K)
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
    if (r.defined()) add_(out, r);
    return out;
  }
  const LinearKind kind{b.defined(), epilogue.activation, r.defined()};
  const WeightsKind weights_as = packed ? weights_kind(packed->dtype)
                                 : bf16_products ? WeightsKind::plain_bf16
                                                 : WeightsKind::plain_f32;
  Matmul mm = matmul(M, K, N, kind, weights_as);
  using dt = dnnl::memory::data_type;
  dnnl::engine& engine = cpu_engine();
  // (M, K) rows of x in the product's input type: bf16 rounded to nearest even (a plain
  // loop, not a oneDNN reorder: creating that primitive on every call cost more than
  // converting one decoding row), else f32.
  const Tensor x_in = bf16_inputs(weights_as) ? detail::contiguous_bf16(x2, "linear", "x") : x2;
  const dnnl::memory src({{M, K}, bf16_inputs(weights_as) ? dt::bf16 : dt::f32, dnnl::memory::dims{K, 1}},
                         engine, const_cast<void*>(x_in.data()));
  Tensor w_bf16;  // (N, K) the plain weight rounded to bf16, under a bf16 scope
  dnnl::memory weights;
  if (bf16_products) {  // implies a plain weight
    w_bf16 = detail::contiguous_bf16(weight, "linear", "weight");
    weights = dnnl::memory({{K, N}, dt::bf16, dnnl::memory::dims{1, K}}, engine, w_bf16.data());
  } else if (packed == nullptr) {
    weights = dnnl::memory({{K, N}, dt::f32, dnnl::memory::dims{1, K}}, engine,
                           const_cast<void*>(weight.data()));
  } else if (mm.weights == packed->layout) {
    weights = packed->packed;
  } else {  // this shape wants another layout: re-lay the packed copy out for this call
    weights = dnnl::memory(mm.weights, engine);
    detail::reorder(packed->packed, weights);
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
  detail::run(mm.primitive, std::move(args));
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
  detail::check_grad(dweight, weight.shape(), "linear_backward", "dweight");
  const bool with_bias = dbias != nullptr && dbias->defined();
  if (with_bias) detail::check_grad(*dbias, {N}, "linear_backward", "dbias");
  // The products in bf16 (inputs rounded, f32 accumulation) when the forward kept x in
  // bf16 or a bf16 ProductPrecision scope is open: autocast's backward runs in the dtype
  // its forward ran in.
  const bool bf16 = x.dtype() == DType::bf16 || product_dtype() == DType::bf16;
  Tensor g = detail::contiguous_f32(dy, "linear_backward", "dy");      // (M, N), for db
  Tensor xc = bf16 ? detail::contiguous_bf16(x, "linear_backward", "x")
                   : detail::contiguous_f32(x, "linear_backward", "x");  // (M, K)
  Tensor w = bf16 ? detail::contiguous_bf16(weight, "linear_backward", "weight")
                  : detail::contiguous_f32(weight, "linear_backward", "weight");  // (N, K)
  Tensor g16 = bf16 ? detail::contiguous_bf16(g, "linear_backward", "dy") : Tensor();  // (M, N)
  const std::int64_t M = g.numel() / std::max<std::int64_t>(N, 1);
  Tensor dx = Tensor::empty(x.shape());  // (..., K) f32
  if (dx.numel() == 0) return dx;
  const float* pg = g.data_as<float>();
  // C = [C +] op(A)·op(B) over the products' input type: A is dy or x, B is W, x or dy.
  const auto product = [&](float* c, const Tensor& a, const Tensor& b, std::int64_t rows, std::int64_t cols,
                           std::int64_t inner, bool trans_a, bool accumulate) {
    if (bf16)
      detail::gemm_bf16(c, a.data_as<std::uint16_t>(), b.data_as<std::uint16_t>(), rows, cols, inner, trans_a,
                        false, accumulate);
    else
      detail::gemm(c, a.data_as<float>(), b.data_as<float>(), rows, cols, inner, trans_a, false, accumulate);
  };
  const Tensor& gin = bf16 ? g16 : g;  // dy in the products' input type
  // dx (M, K) = dy (M, N) · W (N, K)
  product(dx.data_as<float>(), gin, w, M, K, N, false, false);
  float* pdw = dweight.data_as<float>();
  if (N > K) {
    // dW (N, K) += (xᵀ (K, M) · dy (M, N))ᵀ. oneDNN runs the product with the shorter
    // side as the rows of its result 1.6-1.9x faster (AVX2, M = 4096: an LM head's
    // N = 8192, K = 256 in 119 ms instead of 225; N = 1024, K = 256 in 14 instead of 23),
    // so it is computed as dWᵀ and added back transposed, in tiles, each thread owning
    // whole rows of dW (a fixed order whatever the thread count).
    Tensor t = Tensor::empty({K, N});  // dWᵀ of this batch
    product(t.data_as<float>(), xc, gin, K, N, M, true, false);
    const float* pt = t.data_as<float>();
    constexpr std::int64_t kTile = 32;
    qkv::detail::parallel_chunks("nn.linear_weight_grad", (N + kTile - 1) / kTile, N * K >= (1 << 15),
                                 num_threads(), [&](std::int64_t b0, std::int64_t b1) {
      for (std::int64_t n0 = b0 * kTile; n0 < std::min(N, b1 * kTile); n0 += kTile)
        for (std::int64_t k0 = 0; k0 < K; k0 += kTile)
          for (std::int64_t n = n0; n < std::min(N, n0 + kTile); ++n)
            for (std::int64_t k = k0; k < std::min(K, k0 + kTile); ++k)
              pdw[n * K + k] += pt[k * N + n];
    });
  } else {
    // dW (N, K) += dyᵀ (N, M) · x (M, K)
    product(pdw, gin, xc, N, K, M, true, true);
  }
  if (with_bias) {
    // db (N) += Σ_m dy[m]: each thread owns a range of columns, so the sum order is fixed
    // (db[n] + dy[0][n] + dy[1][n] + …, whatever the thread count). A block of kCols columns
    // is summed in registers down all M rows and stored once: adding each row into db in
    // memory cost a load and a store per element, and 5% of a ViT training step.
    float* pb = dbias->data_as<float>();
    const int threads = static_cast<int>(std::min<std::int64_t>(num_threads(), (N + 15) / 16));
    qkv::detail::parallel_team("nn.linear_bias_grad", std::max(threads, 1), [&](int t, int T) {
      constexpr std::int64_t kCols = 32;
      const std::int64_t n0 = N * t / T, n1 = N * (t + 1) / T;
      std::int64_t c0 = n0;
      for (; c0 + kCols <= n1; c0 += kCols) {
        float acc[kCols];
        for (std::int64_t j = 0; j < kCols; ++j) acc[j] = pb[c0 + j];
        for (std::int64_t m = 0; m < M; ++m) {
          const float* row = pg + m * N + c0;
          for (std::int64_t j = 0; j < kCols; ++j) acc[j] += row[j];
        }
        for (std::int64_t j = 0; j < kCols; ++j) pb[c0 + j] = acc[j];
      }
      for (std::int64_t m = 0; m < M; ++m)  // the last columns, fewer than kCols
        for (std::int64_t n = c0; n < n1; ++n) pb[n] += pg[m * N + n];
    });
  }
  return dx;
}

// ---------------------------------------------------------------------------------------

Linear::Linear(std::int64_t in, std::int64_t out, bool with_bias, std::uint64_t seed) {
  QKV_CHECK(in >= 0 && out >= 0,
            "Linear: in_features and out_features must be >= 0, got " << in << ", " << out);
  weight = Tensor::empty({out, in});
  // torch: kaiming_uniform_(a=√5) = U(±1/√in), bias U(±1/√in).
  const double bound = in > 0 ? 1.0 / std::sqrt(static_cast<double>(in)) : 0.0;
  detail::fill_uniform(weight, bound, seed);
  if (with_bias) {
    bias = Tensor::empty({out});
    detail::fill_uniform(bias, bound, seed ^ 0x5bd1e995ull);
  }
}

std::int64_t Linear::in_features() const {
  return weight.defined() ? weight.size(1) : packed.in_features();
}
std::int64_t Linear::out_features() const {
  return weight.defined() ? weight.size(0) : packed.out_features();
}

void Linear::pack(DType dtype) {
  QKV_CHECK(weight.defined(), "Linear::pack: the weight is undefined");
  packed = PackedWeight(weight, dtype);
}

Tensor Linear::forward(const Tensor& x, const LinearEpilogue& epilogue, Record* record) const {
  if (record == nullptr) {
    // Where the packed copy is only the transposed rows (packed.plain_layout()), oneDNN's
    // sgemm ran 20-30% faster on the stored (N, K) rows from 32 rows of x up, and slower
    // below (AVX2 EPYC, oneDNN 2.6: the Universal Sentence Encoder's products at 128 rows
    // 110 -> 140 GFLOP/s, at 12 rows 85 -> 65), so those calls take the rows when the
    // layer kept them.
    const std::int64_t K = x.defined() && x.dim() >= 1 ? x.size(-1) : 0;
    const bool rows = weight.defined() && packed.defined() && packed.plain_layout() && K > 0 &&
                      x.numel() / K >= 32;
    if (packed.defined() && !rows) return linear(x, packed, bias, epilogue);
    return linear(x, weight, bias, epilogue);
  }
  QKV_CHECK(epilogue.activation == LinearActivation::none,
            "Linear: a forward that records for the backward takes no fused activation "
            "(the backward needs the activation's input)");
  QKV_CHECK(weight.defined(), "Linear: training needs the plain weight; this layer keeps only "
                              "its packed copy");
  // Under a bf16 ProductPrecision scope x is kept as the product reads it, in bf16 (half
  // the memory; the backward's dW += dyᵀ·x reads it so too).
  record->x = product_dtype() == DType::bf16 ? detail::contiguous_bf16(x, "Linear", "x")
                                             : detail::contiguous_f32(x, "Linear", "x");
  return linear(record->x, weight, bias, epilogue);
}

// forward: y = x·Wᵀ + b
Tensor Linear::backward(const Tensor& dy, const Record& record, Linear& grads) const {
  QKV_CHECK(grads.bias.defined() == bias.defined(),
            "Linear::backward: grads must be a Linear of the same shape, with a bias exactly "
            "when this one has one");
  return linear_backward(dy, record.x, weight, grads.weight,
                         grads.bias.defined() ? &grads.bias : nullptr);
}

ParameterList Linear::parameters(const std::string& prefix) {
  ParameterList list{{prefix + "weight", &weight}};
  if (bias.defined()) list.emplace_back(prefix + "bias", &bias);
  return list;
}

}  // namespace qkv::nn
