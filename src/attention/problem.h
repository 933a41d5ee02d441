// AttentionProblem — validated inputs and options, resolved into plain numbers.
//
// Every implementation (the reference now, fused kernels later) starts from this, so
// the semantics of masks, alignment, GQA and broadcasting are decided in one place.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "qkv/attention.h"
#include "qkv/rng.h"  // dropout_key, dropout_threshold: counter_uniform in integers

namespace qkv::detail {

struct AttentionProblem {
  std::int64_t B = 0, Hq = 0, Hkv = 0, Lq = 0, Lk = 0, Dk = 0, Dv = 0;
  std::int64_t group = 1;  // Hq / Hkv: query heads per key/value head
  double scale = 1.0;

  bool causal = false;
  Alignment alignment = Alignment::top_left;
  bool has_window = false;
  std::int64_t window_left = -1, window_right = -1;  // −1 = unbounded
  std::vector<std::int64_t> key_lengths;              // B entries (Lk when not given)
  std::vector<float> alibi_slopes;                    // empty or Hq
  bool has_softcap = false;
  double softcap = 0.0;
  double dropout_p = 0.0;
  std::uint64_t seed = 0;
  // dropout_keeps as integers, for the kernels: keep iff
  // counter_bits(dropout_key, counter) >= dropout_threshold (see dropout_threshold).
  std::uint64_t dropout_key = 0, dropout_threshold = 0;

  // The mask as a 4-d (B, Hq, Lq, Lk) broadcast view: strides 0 where broadcast.
  bool has_mask = false;
  bool mask_is_bool = false;
  const void* mask_data = nullptr;
  DType mask_dtype = DType::boolean;
  std::int64_t mask_stride[4] = {0, 0, 0, 0};

  // The diagonal i' for query i of batch b (see attention.h).
  std::int64_t aligned_query(std::int64_t b, std::int64_t i) const {
    return alignment == Alignment::top_left ? i : i + key_lengths[b] - Lq;
  }

  // The structural masks (causal, window, key length) — those a kernel can decide per
  // tile without reading any tensor. True when key j may be attended by query i.
  bool structurally_allowed(std::int64_t b, std::int64_t i, std::int64_t j) const {
    if (j >= key_lengths[b]) return false;
    const std::int64_t d = aligned_query(b, i);
    if (causal && j > d) return false;
    if (has_window) {
      if (window_left >= 0 && j < d - window_left) return false;
      if (window_right >= 0 && j > d + window_right) return false;
    }
    return true;
  }

  std::int64_t mask_offset(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return b * mask_stride[0] + h * mask_stride[1] + i * mask_stride[2] + j * mask_stride[3];
  }

  // Dropout's counter for probability (b, h, i, j): its flat index in (B, Hq, Lq, Lk).
  // Consecutive keys have consecutive counters, consecutive queries counters Lk apart.
  std::uint64_t dropout_counter(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return static_cast<std::uint64_t>(((b * Hq + h) * Lq + i) * Lk + j);
  }

  // Whether dropout keeps probability (b, h, i, j): a pure function of the seed and
  // the index, so results do not depend on threads or tiling.
  bool dropout_keeps(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const;
};

// The least 53-bit integer x with x·2^-53 >= p, for p in [0, 1]: counter_uniform's value
// is its 53 bits x times 2^-53 (exact in double), so u >= p exactly when x >= ceil(p·2^53)
// (p·2^53 is exact too: a power-of-two scaling). p = 1 gives 2^53, which no x reaches.
std::uint64_t dropout_threshold(double p);

// Validates (throws qkv::Error naming the argument) and resolves.
AttentionProblem make_problem(const Tensor& q, const Tensor& k, const Tensor& v,
                              const AttentionOptions& options);

}  // namespace qkv::detail
