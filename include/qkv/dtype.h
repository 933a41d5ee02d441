// Element types and the conversions between them.
//
// Storage dtypes: f32, bf16 and f16 for data; boolean (one byte, 0 or 1) for masks;
// f64 for the reference attention path, which computes f64 inputs in double end to end
// (gradient checks by finite differences need it; attention.h). Arithmetic always happens
// in f32 or wider; bf16/f16 are storage formats, converted with round-to-nearest-even
// exactly as PyTorch's .to(torch.bfloat16/float16) does. f64 -> f32 is static_cast
// (nearest even, beyond the f32 range ±inf); f64 -> bf16/f16 goes through f32, as
// PyTorch's CPU copy does (c10::BFloat16 and c10::Half are constructed from float), so it
// may round twice.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace qkv {

// f64 comes last so that the values of the others stay what they were.
enum class DType : std::uint8_t { f32, bf16, f16, boolean, f64 };

std::size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);       // "f32", "bf16", "f16", "bool", "f64"
DType parse_dtype(std::string_view name);  // throws qkv::Error(type) naming the accepted ones
inline bool is_floating(DType dtype) { return dtype != DType::boolean; }  // f64 included

// bf16 is the upper half of an f32. Rounding to nearest even; NaN stays a (quiet) NaN.
inline std::uint16_t f32_to_bf16(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  const std::uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding_bias) >> 16);
}

inline float bf16_to_f32(std::uint16_t h) {
  const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// IEEE 754 binary16, round to nearest even, subnormals kept, overflow to ±inf.
std::uint16_t f32_to_f16(float x);
float f16_to_f32(std::uint16_t h);

}  // namespace qkv
