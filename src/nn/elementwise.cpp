// The elementwise helpers every layer and model uses: add, the in-place residual add,
// scale (qkv/nn/functional.h).

#include "nn/common.h"
#include "core/parallel.h"
#include "qkv/threads.h"

namespace qkv::nn {

namespace {

// Below this many elements a parallel region costs more than the loop (a decoding step's
// (1, 1, E) residual): run on the calling thread.
constexpr std::int64_t kParallelFrom = 1 << 15;

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  QKV_CHECK(a.defined() && b.defined() && a.shape() == b.shape(),
            "add: cannot add " << (a.defined() ? a.shape_string() : "undefined") << " and "
                               << (b.defined() ? b.shape_string() : "undefined"));
  Tensor out = detail::contiguous_f32(a, "add", "a");  // (a's shape)
  if (out.data() == a.data()) out = out.clone();             // ours, to write
  add_(out, b);
  return out;
}

void add_(Tensor& a, const Tensor& b) {
  QKV_CHECK(a.defined() && a.dtype() == DType::f32 && a.is_contiguous(),
            "add_: a must be a contiguous f32 tensor (it is written in place), got "
                << (a.defined() ? a.shape_string() + " " + dtype_name(a.dtype()) : "undefined"));
  QKV_CHECK(b.defined() && a.shape() == b.shape(),
            "add_: cannot add " << (b.defined() ? b.shape_string() : "undefined") << " to "
                                << a.shape_string());
  const Tensor bc = detail::contiguous_f32(b, "add_", "b");  // a copy only for views
  float* pa = a.data_as<float>();
  const float* pb = bc.data_as<float>();
  const std::int64_t n = a.numel();
  qkv::detail::parallel_chunks("nn.add", n, n >= kParallelFrom, num_threads(), [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) pa[i] += pb[i];
  });
}

void scale_(Tensor& a, float s) {
  QKV_CHECK(a.defined() && a.dtype() == DType::f32 && a.is_contiguous(),
            "scale_: a must be a contiguous f32 tensor (it is written in place)");
  float* pa = a.data_as<float>();
  const std::int64_t n = a.numel();
  qkv::detail::parallel_chunks("nn.scale", n, n >= kParallelFrom, num_threads(), [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) pa[i] *= s;
  });
}

}  // namespace qkv::nn
