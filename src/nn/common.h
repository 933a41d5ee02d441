// Private helpers shared by the nn sources.
#pragma once

#include <cstdint>
#include <string>

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

inline std::string join(const std::string& prefix, const char* name) { return prefix + name; }

}  // namespace qkv::nn::detail
