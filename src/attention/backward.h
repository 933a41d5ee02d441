// The backward pass of attention: the naive double-precision twin and the tiled kernel.
//
// Both take a validated AttentionProblem and the forward's tensors (any strides, q's
// dtype for q, k, v; dout and out any floating dtype, f64 exactly when q is):
//   dout (B, Hq, Lq, Dv)   q (B, Hq, Lq, Dk)   k (B, Hkv, Lk, Dk)   v (B, Hkv, Lk, Dv)
//   out  (B, Hq, Lq, Dv)   lse (B, Hq, Lq) f32 (f64 with f64 inputs)
// and return contiguous f32 gradients dq (B, Hq, Lq, Dk), dk (B, Hkv, Lk, Dk),
// dv (B, Hkv, Lk, Dv); under GQA dk and dv sum over the query heads of their group.
// f64 inputs are the reference's alone, which computes them in double and returns f64
// gradients; the tiled kernel refuses them.
#pragma once

#include "attention/kernels/flash.h"
#include "attention/problem.h"

namespace qkv::detail {

// Materializes every score row in double and differentiates the forward definition
// directly: out and lse are not read (the probabilities and D_i = Σ_j P_ij·dP_ij are
// recomputed), so the result is the exact gradient up to double rounding.
AttentionGradients reference_attention_backward(const AttentionProblem& problem,
                                                const Tensor& dout, const Tensor& q,
                                                const Tensor& k, const Tensor& v);

// The tiled kernel (FlashAttention-2's backward): probabilities recomputed per
// kBlockQ×kBlockK tile from lse, D_i = dO_i·out_i, f32 accumulation; isa's backward entry
// point (flash.h: the bf16-pair and tile variants run the avx512 one). Throws qkv::Error
// when this CPU cannot run isa.
AttentionGradients flash_attention_backward(const AttentionProblem& problem, const Tensor& dout,
                                            const Tensor& q, const Tensor& k, const Tensor& v,
                                            const Tensor& out, const Tensor& lse, Isa isa);

}  // namespace qkv::detail
