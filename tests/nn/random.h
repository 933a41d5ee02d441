// Seeded standard-normal tensors for the nn tests.
#pragma once

#include <cstdint>

#include "qkv/rng.h"
#include "qkv/tensor.h"

namespace qkv::testing {

// (shape) f32, entries scale·N(0, 1) from Rng(seed).
inline Tensor randn(const Shape& shape, std::uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  Tensor t = Tensor::empty(shape);
  float* p = t.data_as<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(scale * rng.normal());
  return t;
}

}  // namespace qkv::testing
