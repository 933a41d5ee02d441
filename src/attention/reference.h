// The reference implementation: the textbook computation, one query row at a time,
// accumulating in double. Obviously right and slow; every fast path is tested against it.
//
// It reads its inputs in a compute element type E: float for f32, bf16 and f16 (bf16/f16
// -> f32 is exact, so nothing is lost), double for f64, so that f64 inputs are computed in
// double end to end with no rounding to f32 anywhere (what a gradient check by finite
// differences needs). The loops are templated on E; with E = float they are the code
// they always were, so f32/bf16/f16 results do not change.
#pragma once

#include <type_traits>

#include "attention/problem.h"
#include "core/budget.h"

namespace qkv::detail {

// The dtype the reference reads a tensor of `dtype` in: f64 stays f64, the rest is f32.
inline DType reference_compute_dtype(DType dtype) {
  return dtype == DType::f64 ? DType::f64 : DType::f32;
}

// The dtype of the compute element type E itself: f64 for double, f32 for float.
template <class E>
inline constexpr DType kComputeDType = std::is_same_v<E, double> ? DType::f64 : DType::f32;

// t as a contiguous tensor of `compute` (reference_compute_dtype): shared when it already
// is one, else a copy (exact: widening, or f64 as is). Keeps the reference loops (forward
// and backward) free of per-element dtype dispatch.
inline Tensor as_compute_contiguous(const Tensor& t, DType compute) {
  return t.dtype() == compute ? t.contiguous() : t.to(compute);
}

// Adds the copy as_compute_contiguous(t, compute) makes, if any, to `plan`.
inline void plan_compute_contiguous(MemoryPlan& plan, const char* what, const Tensor& t,
                                    DType compute) {
  if (t.dtype() != compute || !t.is_contiguous())
    plan.add(what, {t.numel(), static_cast<std::int64_t>(dtype_size(compute))});
}

// The scores of query row (b, h, i) against all Lk keys, in double and in the order
// attention.h documents: s[j] = scale·(q_i·k_j) [softcap] [− ALiBi] [+ float mask], −∞
// where masked (a float mask of −∞ masks too; float masks of any dtype are read exactly,
// as double). qi: (Dk) the query row, kb: (Lk, Dk) the keys of its key/value head, in the
// compute element type E (float or double). When t is given, t[j] =
// tanh(scale·(q_i·k_j)/softcap) under a softcap (the backward's chain rule needs it) and 0
// otherwise. Returns the largest score that is not NaN (−∞ when none) and sets *saw_nan
// when any score is NaN.
template <class E>
double reference_score_row(const AttentionProblem& p, std::int64_t b, std::int64_t h,
                           std::int64_t i, const E* qi, const E* kb, double* s, double* t,
                           bool* saw_nan);
extern template double reference_score_row<float>(const AttentionProblem&, std::int64_t,
                                                   std::int64_t, std::int64_t, const float*,
                                                   const float*, double*, double*, bool*);
extern template double reference_score_row<double>(const AttentionProblem&, std::int64_t,
                                                    std::int64_t, std::int64_t, const double*,
                                                    const double*, double*, double*, bool*);

// out has q's dtype; lse and probs are f64 when q is f64, else f32 (attention.h).
AttentionResult reference_attention(const AttentionProblem& problem, const Tensor& q,
                                    const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options);

}  // namespace qkv::detail
