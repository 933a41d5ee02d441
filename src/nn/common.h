// Private helpers shared by the nn sources.
#pragma once

#include <cstdint>
#include <string>

#include "qkv/attention.h"
#include "qkv/error.h"
#include "qkv/nn.h"
#include "qkv/tensor.h"

namespace qkv::detail {
struct Isa;  // attention/kernels/flash.h: a variant of the ISA table
}  // namespace qkv::detail

namespace qkv::nn::detail {

// x as a contiguous f32 tensor (shared when it already is one). The layers compute in f32
// and take f32, bf16 and f16; f64 is refused rather than quietly rounded (only the
// reference attention computes f64, in double: attention.h).
inline Tensor contiguous_f32(const Tensor& x, const char* fn, const char* name) {
  QKV_CHECK(x.defined(), fn << ": " << name << " is undefined");
  QKV_CHECK_TYPE(x.dtype() != DType::boolean && x.dtype() != DType::f64,
                 fn << ": " << name << " must be floating (f32, bf16, f16), got "
                    << dtype_name(x.dtype())
                    << (x.dtype() == DType::f64 ? " (the layers compute in f32; convert first)" : ""));
  Tensor t = x.dtype() == DType::f32 ? x : x.to(DType::f32);
  return t.contiguous();
}

// x as a contiguous bf16 tensor, each element rounded to nearest even (shared when it
// already is one): what the products read under a bf16 ProductPrecision scope
// (qkv/nn/precision.h). Split over qkv's threads for large tensors; elementwise, so the
// split changes no bit. Refuses what contiguous_f32 refuses.
Tensor contiguous_bf16(const Tensor& x, const char* fn, const char* name);

// A gradient buffer the caller owns: written in place, so it must be contiguous f32 of
// the expected shape.
inline void check_grad(const Tensor& g, const Shape& shape, const char* fn, const char* name) {
  QKV_CHECK(g.defined() && g.dtype() == DType::f32 && g.is_contiguous() && g.shape() == shape,
            fn << ": " << name << " must be a contiguous f32 tensor of shape "
               << shape_to_string(shape) << ", got "
               << (g.defined() ? g.shape_string() : std::string("undefined")));
}

// The erf form of GELU (gelu(x) = x·Φ(x)) and its backward (dx = dy·(Φ(x) + x·φ(x))) over n
// contiguous floats, in the loop compiled for `isa` (simd128: any x86-64 CPU; the others:
// AVX2 + FMA). gelu() and gelu_backward() run qkv::detail::selected_isa()'s; the tests run
// every variant the CPU has.
void gelu_erf_span(qkv::detail::Isa isa, const float* x, float* y, std::int64_t n);
void gelu_erf_backward_span(qkv::detail::Isa isa, const float* dy, const float* x, float* dx,
                            std::int64_t n);

// Deterministic U(−bound, bound) fill of a contiguous f32 tensor.
void fill_uniform(Tensor& t, double bound, std::uint64_t seed);

// Throws naming fn and the argument unless x is batch-first (B, L, width).
inline void check_batch_first(const Tensor& x, std::int64_t width, const char* fn,
                              const char* name) {
  QKV_CHECK(x.defined() && x.dim() == 3 && x.size(2) == width,
            fn << ": " << name << " must be (B, L, d_model = " << width << "), got "
               << (x.defined() ? x.shape_string() : std::string("undefined")));
}

// The attention config of a Transformer layer's attentions (encoder_layer.cpp).
MultiheadAttentionConfig attention_config(const TransformerLayerConfig& c);

// Appends `more` to `list` (parameters of a child module).
inline void append(ParameterList& list, ParameterList more) {
  for (auto& p : more) list.push_back(std::move(p));
}

}  // namespace qkv::nn::detail
