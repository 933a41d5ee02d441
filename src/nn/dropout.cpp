// nn::Dropout's forward and backward (qkv/nn/dropout.h): one masked scaling, the mask drawn
// from qkv/rng.h's counter generator, so the backward regenerates it from (seed, offset).

#include "qkv/nn/dropout.h"

#include "core/parallel.h"
#include "nn/common.h"
#include "qkv/rng.h"
#include "qkv/threads.h"

namespace qkv::nn {

namespace {

// Below this many elements a parallel region costs more than the loop (as nn.add's).
constexpr std::int64_t kParallelFrom = 1 << 15;

// 1/(1 − p) is finite for p < 1; p = 1 (torch allows it: all zeros) is refused because a
// residual branch that is always dropped is a configuration mistake, not a regulariser.
void check_p(double p, const char* fn) {
  QKV_CHECK(p >= 0.0 && p < 1.0, fn << ": p (the dropout probability) must be in [0, 1), got " << p);
}

// out[i] = in[i] · scale where keep(seed, offset + i), else 0; in and out n contiguous floats
// (they may be the same). The counter is the element's global index, never a per-thread one.
void apply_mask(const float* in, float* out, std::int64_t n, double p, std::uint64_t seed,
                std::uint64_t offset) {
  const auto scale = static_cast<float>(1.0 / (1.0 - p));
  qkv::detail::parallel_chunks("nn.dropout", n, n >= kParallelFrom, num_threads(),
                               [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      const bool keep = counter_uniform(seed, offset + static_cast<std::uint64_t>(i)) >= p;
      out[i] = keep ? in[i] * scale : 0.0f;
    }
  });
}

}  // namespace

Dropout::Dropout(double p_, bool training_) : p(p_), training(training_) { check_p(p, "Dropout"); }

Tensor Dropout::forward(const Tensor& x, std::uint64_t seed, std::uint64_t offset,
                        Record* record) const {
  check_p(p, "Dropout.forward");
  const Tensor xc = detail::contiguous_f32(x, "Dropout.forward", "x");  // (...)
  const bool dropped = training && p > 0.0;
  if (record) *record = Record{xc.shape(), dropped, p, seed, offset};
  if (!dropped) return xc;
  Tensor y = Tensor::empty(xc.shape());  // (...)
  apply_mask(xc.data_as<float>(), y.data_as<float>(), xc.numel(), p, seed, offset);
  return y;
}

Tensor Dropout::backward(const Tensor& dy, const Record& record) const {
  QKV_CHECK(dy.defined() && dy.shape() == record.shape,
            "Dropout.backward: dy must have the forward's shape " << shape_to_string(record.shape)
                << ", got " << (dy.defined() ? dy.shape_string() : std::string("undefined")));
  const Tensor dyc = detail::contiguous_f32(dy, "Dropout.backward", "dy");  // (...)
  // y = x ⊙ keep / (1 − p) is linear in x: dx = dy ⊙ keep / (1 − p), the same mask.
  if (!record.dropped) return dyc;
  Tensor dx = Tensor::empty(dyc.shape());  // (...)
  apply_mask(dyc.data_as<float>(), dx.data_as<float>(), dyc.numel(), record.p, record.seed,
             record.offset);
  return dx;
}

}  // namespace qkv::nn
