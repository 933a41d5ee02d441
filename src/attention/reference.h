// The reference implementation: the textbook computation, one query row at a time,
// accumulating in double. Obviously right and slow; every fast path is tested against it.
#pragma once

#include "attention/problem.h"

namespace qkv::detail {

// bf16/f16 -> f32 is exact, so reading everything as contiguous f32 first loses nothing
// and keeps the reference loops (forward and backward) free of per-element dtype dispatch.
inline Tensor as_f32_contiguous(const Tensor& t) {
  return t.dtype() == DType::f32 ? t.contiguous() : t.to(DType::f32);
}

AttentionResult reference_attention(const AttentionProblem& problem, const Tensor& q,
                                    const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options);

}  // namespace qkv::detail
