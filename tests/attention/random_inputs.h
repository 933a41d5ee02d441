// Helpers shared by the attention tests: seeded random inputs and magnitudes.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "qkv/rng.h"
#include "qkv/tensor.h"

namespace qkv::testing {

// Standard normal entries times `scale`, made in f32 and then converted to `dtype`.
inline Tensor random_tensor(const Shape& shape, Rng& rng, double scale = 1.0,
                            DType dtype = DType::f32) {
  Tensor t = Tensor::empty(shape, DType::f32);
  float* p = t.data_as<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(scale * rng.normal());
  return dtype == DType::f32 ? t : t.to(dtype);
}

// A bool mask whose entries are true (attend) with probability `keep`.
inline Tensor random_bool_mask(const Shape& shape, Rng& rng, double keep) {
  Tensor m = Tensor::empty(shape, DType::boolean);
  for (std::int64_t n = 0; n < m.numel(); ++n) m.data_as<std::uint8_t>()[n] = rng.uniform() < keep;
  return m;
}

// A float mask: standard normal values, each replaced by −inf (masked) with probability
// `holes`.
inline Tensor random_float_mask(const Shape& shape, Rng& rng, double holes) {
  Tensor m = random_tensor(shape, rng);
  for (std::int64_t n = 0; n < m.numel(); ++n)
    if (rng.uniform() < holes) m.data_as<float>()[n] = -std::numeric_limits<float>::infinity();
  return m;
}

inline double max_abs(const Tensor& t) {
  double m = 0;
  for (float x : t.to_vector()) m = std::max(m, double{std::abs(x)});
  return m;
}

// The largest 2-norm over the rows of the last dimension.
inline double max_row_norm(const Tensor& t) {
  const std::vector<float> x = t.to_vector();
  const std::int64_t d = t.size(-1);
  double m = 0;
  for (std::size_t r = 0; d > 0 && r < x.size() / static_cast<std::size_t>(d); ++r) {
    double s = 0;
    for (std::int64_t c = 0; c < d; ++c) s += double{x[r * d + c]} * x[r * d + c];
    m = std::max(m, std::sqrt(s));
  }
  return m;
}

}  // namespace qkv::testing
