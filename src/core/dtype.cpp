#include "qkv/dtype.h"

#include <bit>
#include <cmath>

#include "qkv/error.h"

namespace qkv {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::boolean: return 1;
    case DType::f64: return 8;
  }
  throw Error("dtype_size: unknown dtype", ErrorKind::type);
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::boolean: return "bool";
    case DType::f64: return "f64";
  }
  return "unknown";
}

DType parse_dtype(std::string_view name) {
  if (name == "f32" || name == "float32") return DType::f32;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "f16" || name == "float16") return DType::f16;
  if (name == "f64" || name == "float64") return DType::f64;
  if (name == "bool") return DType::boolean;
  throw Error("dtype: expected one of f32, bf16, f16, f64, bool; got '" + std::string(name) + "'",
              ErrorKind::type);
}

// binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Works on the f32 bit pattern
// so that rounding is exactly round-to-nearest-even, including into subnormals.
std::uint16_t f32_to_f16(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // inf or NaN
    const std::uint16_t nan_payload = magnitude > 0x7f800000u ? 0x0200u : 0u;
    return static_cast<std::uint16_t>(sign | 0x7c00u | nan_payload);
  }
  // Values at or above 65520 round to infinity (65504 is the largest finite half).
  if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (magnitude >= 0x38800000u) {  // normal half: exponent >= -14
    const std::uint32_t rebased = magnitude - 0x38000000u;  // exponent bias 127 -> 15
    const std::uint32_t rounded = rebased + 0x0fffu + ((rebased >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | (rounded >> 13));
  }
  if (magnitude < 0x33000000u) return sign;  // below half the smallest subnormal: ±0
  // Subnormal half: value = mantissa · 2^-24. Shift the implicit-1 mantissa into place
  // and round to nearest even on the bits shifted out.
  const std::uint32_t exponent = magnitude >> 23;
  const std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126u - exponent;  // value / 2^-24 = mantissa · 2^(exponent - 126)
  const std::uint32_t kept = mantissa >> shift;
  const std::uint32_t rest = mantissa & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1);
  const std::uint32_t rounded = kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
  return static_cast<std::uint16_t>(sign | rounded);
}

float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {  // zero or subnormal: mantissa · 2^-24, exact in f32
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

}  // namespace qkv
