// The backward pass of attention: the naive double-precision twin and the tiled kernel.
//
// Both take a validated AttentionProblem and the forward's tensors (any strides, q's
// dtype for q, k, v; dout and out any floating dtype):
//   dout (B, Hq, Lq, Dv)   q (B, Hq, Lq, Dk)   k (B, Hkv, Lk, Dk)   v (B, Hkv, Lk, Dv)
//   out  (B, Hq, Lq, Dv)   lse (B, Hq, Lq) f32
// and return contiguous f32 gradients dq (B, Hq, Lq, Dk), dk (B, Hkv, Lk, Dk),
// dv (B, Hkv, Lk, Dv); under GQA dk and dv sum over the query heads of their group.
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
// kBlockQ×kBlockK tile from lse, D_i = dO_i·out_i, f32 accumulation; the ISA variant as
// the forward's (avx512_bf16 runs the avx512 one).
AttentionGradients flash_attention_backward(const AttentionProblem& problem, const Tensor& dout,
                                            const Tensor& q, const Tensor& k, const Tensor& v,
                                            const Tensor& out, const Tensor& lse, Isa isa);

// One kernel per ISA variant, all of this signature; g holds contiguous f32 tensors, which
// the kernel fills completely:
// dq (B, Hq, Lq, Dk), dk (B, Hkv, Lk, Dk), dv (B, Hkv, Lk, Dv).
using FlashBackward = void(const AttentionProblem& p, const Tensor& dout, const Tensor& q,
                           const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                           AttentionGradients& g);
namespace scalar { FlashBackward flash_backward; }
namespace avx2 { FlashBackward flash_backward; }
namespace avx512 { FlashBackward flash_backward; }

}  // namespace qkv::detail
