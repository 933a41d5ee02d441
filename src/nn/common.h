// Private helpers shared by the nn sources.
#pragma once

#include <cstdint>
#include <string>

#include "qkv/attention.h"
#include "qkv/error.h"
#include "qkv/nn.h"
#include "qkv/tensor.h"

namespace qkv::nn::detail {

// x as a contiguous f32 tensor (shared when it already is one).
inline Tensor contiguous_f32(const Tensor& x, const char* fn, const char* name) {
  QKV_CHECK(x.defined(), fn << ": " << name << " is undefined");
  QKV_CHECK_TYPE(x.dtype() != DType::boolean,
                 fn << ": " << name << " must be floating (f32, bf16, f16), got bool");
  Tensor t = x.dtype() == DType::f32 ? x : x.to(DType::f32);
  return t.contiguous();
}

// a + b elementwise, same shape. -> contiguous f32
Tensor add(const Tensor& a, const Tensor& b, const char* fn);

// Deterministic U(−bound, bound) fill of a contiguous f32 tensor.
void fill_uniform(Tensor& t, double bound, std::uint64_t seed);

// C (M, N) = [C +] op(A)·op(B), f32 row-major, through oneDNN's matmul (primitives cached
// per shape). op(A) is (M, K): A stored (M, K), or (K, M) when trans_a; op(B) is (K, N):
// B stored (K, N), or (N, K) when trans_b. accumulate adds into C instead of overwriting.
void gemm(float* c, const float* a, const float* b, std::int64_t M, std::int64_t N,
          std::int64_t K, bool trans_a, bool trans_b, bool accumulate);

// torch.nn.MultiheadAttention's masks (true = NOT allowed) as AttentionOptions wants them
// (causal, key_lengths for suffix padding, or a mask broadcast to (B, H, L, S)).
void resolve_attention_masks(const AttentionMasks& masks, std::int64_t B, std::int64_t H,
                             std::int64_t L, std::int64_t S, AttentionOptions& options);

// Throws naming fn and the argument unless x is batch-first (B, L, width).
inline void check_batch_first(const Tensor& x, std::int64_t width, const char* fn,
                              const char* name) {
  QKV_CHECK(x.defined() && x.dim() == 3 && x.size(2) == width,
            fn << ": " << name << " must be (B, L, d_model = " << width << "), got "
               << (x.defined() ? x.shape_string() : std::string("undefined")));
}

// relu or gelu (erf form), as FeedForward's activation says.
inline Tensor activate(const Tensor& x, Activation a) {
  return a == Activation::relu ? relu(x) : gelu(x);
}

inline std::string join(const std::string& prefix, const char* name) { return prefix + name; }

}  // namespace qkv::nn::detail
