// The reference implementation: the textbook computation, one query row at a time,
// accumulating in double. Obviously right and slow; every fast path is tested against it.
#pragma once

#include "attention/problem.h"
#include "core/budget.h"

namespace qkv::detail {

// bf16/f16 -> f32 is exact, so reading everything as contiguous f32 first loses nothing
// and keeps the reference loops (forward and backward) free of per-element dtype dispatch.
inline Tensor as_f32_contiguous(const Tensor& t) {
  return t.dtype() == DType::f32 ? t.contiguous() : t.to(DType::f32);
}

// Adds the copy as_f32_contiguous(t) makes, if any, to `plan`.
inline void plan_f32_contiguous(MemoryPlan& plan, const char* what, const Tensor& t) {
  if (t.dtype() != DType::f32 || !t.is_contiguous()) plan.add(what, {t.numel(), 4});
}

// The scores of query row (b, h, i) against all Lk keys, in double and in the order
// attention.h documents: s[j] = scale·(q_i·k_j) [softcap] [− ALiBi] [+ float mask], −∞
// where masked (a float mask of −∞ masks too). qi: (Dk) the query row, kb: (Lk, Dk) the
// keys of its key/value head. When t is given, t[j] = tanh(scale·(q_i·k_j)/softcap) under
// a softcap (the backward's chain rule needs it) and 0 otherwise. Returns the largest
// score that is not NaN (−∞ when none) and sets *saw_nan when any score is NaN.
double reference_score_row(const AttentionProblem& p, std::int64_t b, std::int64_t h,
                           std::int64_t i, const float* qi, const float* kb, double* s,
                           double* t, bool* saw_nan);

AttentionResult reference_attention(const AttentionProblem& problem, const Tensor& q,
                                    const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options);

}  // namespace qkv::detail
