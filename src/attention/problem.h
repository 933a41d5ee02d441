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

  // Internal (no public option sets it): B entries added to every query's diagonal, or
  // empty for none. The distributed layer runs attention on blocks of a longer sequence
  // (src/distributed/ring.cpp): a block of queries that starts at global position qs
  // against keys that start at ks has i' = i + (qs − ks), so causal, window and ALiBi keep
  // the meaning they have on the whole sequence. See attention_shifted (below).
  std::vector<std::int64_t> query_shift;

  // The diagonal i' for query i of batch b (see attention.h).
  std::int64_t aligned_query(std::int64_t b, std::int64_t i) const {
    const std::int64_t d = alignment == Alignment::top_left ? i : i + key_lengths[b] - Lq;
    return query_shift.empty() ? d : d + query_shift[static_cast<std::size_t>(b)];
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

// Sets p.query_shift (B entries, or empty for none) and widens the window clamp to match
// (see attention_shifted); throws qkv::Error when query_shift has neither 0 nor B entries.
void set_query_shift(AttentionProblem& p, const AttentionOptions& options,
                     const std::vector<std::int64_t>& query_shift);

// attention() and attention_backward() with every query's diagonal moved by
// query_shift[b] (B entries; AttentionProblem::query_shift), on the CPU implementations
// only. For the distributed layer, which computes a long sequence block by block: with
// options.alignment top_left and query_shift[b] = qs − ks, the block (queries from global
// position qs, keys from ks) sees exactly the masks and ALiBi distances of the whole
// sequence. A window side is then clamped at Lq + Lk + max|shift| (not Lq + Lk), so that
// every diagonal still reaches as far as it did. An empty query_shift is attention().
AttentionResult attention_shifted(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const AttentionOptions& options,
                                  const std::vector<std::int64_t>& query_shift);
AttentionGradients attention_backward_shifted(const Tensor& dout, const Tensor& q,
                                              const Tensor& k, const Tensor& v,
                                              const Tensor& out, const Tensor& lse,
                                              const AttentionOptions& options,
                                              const std::vector<std::int64_t>& query_shift);

}  // namespace qkv::detail
