// The reference implementation: the textbook computation, one query row at a time,
// accumulating in double. Obviously right and slow; every fast path is tested against it.
#pragma once

#include "attention/problem.h"

namespace qkv::detail {

AttentionResult reference_attention(const AttentionProblem& problem, const Tensor& q,
                                    const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options);

}  // namespace qkv::detail
