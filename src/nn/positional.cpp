// Positional encodings: sinusoidal, RoPE (and its backward), ALiBi slopes, and helpers to
// combine a table with token embeddings.

#include <cmath>
#include <vector>

#include "nn/common.h"

namespace qkv::nn {

Tensor sinusoidal_positional_encoding(std::int64_t length, std::int64_t dim, double base) {
  QKV_CHECK(length >= 0 && dim >= 0, "sinusoidal_positional_encoding: length and dim must be "
                                     ">= 0, got " << length << ", " << dim);
  QKV_CHECK(base > 0 && std::isfinite(base),
            "sinusoidal_positional_encoding: base must be finite and > 0, got " << base);
  Tensor pe = Tensor::empty({length, dim});  // (L, D)
  float* p = pe.data_as<float>();
  for (std::int64_t pos = 0; pos < length; ++pos) {
    for (std::int64_t i = 0; i < dim; i += 2) {
      // Angle in double: positions up to ~1e6 keep their f32 sin/cos accurate.
      const double angle = static_cast<double>(pos) /
                           std::pow(base, static_cast<double>(i) / static_cast<double>(dim));
      p[pos * dim + i] = static_cast<float>(std::sin(angle));
      if (i + 1 < dim) p[pos * dim + i + 1] = static_cast<float>(std::cos(angle));
    }
  }
  return pe;
}

Tensor timing_signal(std::int64_t length, std::int64_t dim, double min_timescale,
                     double max_timescale) {
  QKV_CHECK(length >= 0, "timing_signal: length must be >= 0, got " << length);
  QKV_CHECK(dim >= 4 && dim % 2 == 0, "timing_signal: dim must be even and >= 4, got " << dim);
  QKV_CHECK(min_timescale > 0 && std::isfinite(min_timescale) && max_timescale >= min_timescale &&
                std::isfinite(max_timescale),
            "timing_signal: timescales must be finite with 0 < min <= max, got "
                << min_timescale << ", " << max_timescale);
  const std::int64_t half = dim / 2;
  // TensorFlow: the increment in double (Python), cast to f32; the rest in f32.
  const float increment = static_cast<float>(std::log(max_timescale / min_timescale) /
                                             static_cast<double>(half - 1));
  std::vector<float> inv(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i)
    inv[i] = static_cast<float>(min_timescale) * std::exp(static_cast<float>(i) * -increment);
  Tensor pe = Tensor::empty({length, dim});  // (L, D)
  float* p = pe.data_as<float>();
  for (std::int64_t pos = 0; pos < length; ++pos) {
    for (std::int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos) * inv[i];
      p[pos * dim + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
      p[pos * dim + half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
    }
  }
  return pe;
}

namespace {

// x rotated pairwise (i, i + D/2) by sign·angle: sign +1 is RoPE; −1 its transpose (and
// inverse), which is RoPE's backward since the forward is linear in x.
Tensor rotate_half_pairs(const Tensor& x, std::int64_t offset, double base, float sign) {
  QKV_CHECK(x.defined() && x.dim() == 4,
            "apply_rope: x must be (B, H, L, D), got "
                << (x.defined() ? x.shape_string() : std::string("undefined")));
  const std::int64_t D = x.size(3);
  QKV_CHECK(D % 2 == 0, "apply_rope: x.size(3) (D) must be even, got " << D);
  QKV_CHECK(offset >= 0, "apply_rope: offset must be >= 0, got " << offset);
  QKV_CHECK(base > 0 && std::isfinite(base), "apply_rope: base must be finite and > 0, got " << base);
  Tensor xc = detail::contiguous_f32(x, "apply_rope", "x");  // (B, H, L, D)
  const std::int64_t rows = x.size(0) * x.size(1), L = x.size(2), half = D / 2;
  Tensor out = Tensor::empty(x.shape());  // (B, H, L, D)
  if (out.numel() == 0) return out;
  // cos/sin table (L, D/2) computed once in double, shared by every (b, h).
  std::vector<float> cos_t(static_cast<std::size_t>(L * half)), sin_t(cos_t.size());
  for (std::int64_t l = 0; l < L; ++l)
    for (std::int64_t i = 0; i < half; ++i) {
      const double theta = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(D));
      const double angle = static_cast<double>(offset + l) * theta;
      cos_t[static_cast<std::size_t>(l * half + i)] = static_cast<float>(std::cos(angle));
      sin_t[static_cast<std::size_t>(l * half + i)] = static_cast<float>(std::sin(angle));
    }
  const float* px = xc.data_as<float>();
  float* po = out.data_as<float>();
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t l = 0; l < L; ++l) {
      const float* xr = px + (r * L + l) * D;
      float* yr = po + (r * L + l) * D;
      for (std::int64_t i = 0; i < half; ++i) {
        const float c = cos_t[static_cast<std::size_t>(l * half + i)];
        const float s = sign * sin_t[static_cast<std::size_t>(l * half + i)];
        yr[i] = xr[i] * c - xr[i + half] * s;
        yr[i + half] = xr[i + half] * c + xr[i] * s;
      }
    }
  return out;
}

}  // namespace

Tensor apply_rope(const Tensor& x, std::int64_t offset, double base) {
  return rotate_half_pairs(x, offset, base, 1.f);
}

// forward: y = R(angle)·x per pair  ->  dx = R(angle)ᵀ·dy = R(−angle)·dy
Tensor apply_rope_backward(const Tensor& dy, std::int64_t offset, double base) {
  return rotate_half_pairs(dy, offset, base, -1.f);
}

namespace {
// 2^(−8/n), its powers: the slopes for n a power of two.
std::vector<double> slopes_power_of_2(std::int64_t n) {
  const double start = std::pow(2.0, -8.0 / static_cast<double>(n));
  std::vector<double> slopes;
  for (std::int64_t i = 0; i < n; ++i) slopes.push_back(std::pow(start, static_cast<double>(i + 1)));
  return slopes;
}

std::vector<double> slopes(std::int64_t n) {
  if ((n & (n - 1)) == 0) return slopes_power_of_2(n);
  std::int64_t m = 1;  // the largest power of two below n
  while (m * 2 < n) m *= 2;
  std::vector<double> out = slopes_power_of_2(m);
  const std::vector<double> twice = slopes(2 * m);
  for (std::int64_t i = 0; i < n - m; ++i) out.push_back(twice[static_cast<std::size_t>(2 * i)]);
  return out;
}
}  // namespace

std::vector<float> alibi_slopes(std::int64_t num_heads) {
  QKV_CHECK(num_heads >= 1, "alibi_slopes: num_heads must be >= 1, got " << num_heads);
  std::vector<float> out;
  for (double s : slopes(num_heads)) out.push_back(static_cast<float>(s));
  return out;
}

Tensor add_positional(const Tensor& x, const Tensor& table) {
  QKV_CHECK(x.defined() && x.dim() == 3, "add_positional: x must be (B, L, D)");
  QKV_CHECK(table.defined() && table.dim() == 2 && table.size(1) == x.size(2) &&
                table.size(0) >= x.size(1),
            "add_positional: table must be (L' >= " << x.size(1) << ", " << x.size(2) << "), got "
                                                    << table.shape_string());
  const std::int64_t B = x.size(0), L = x.size(1), D = x.size(2);
  Tensor t = table.slice(0, 0, L).unsqueeze(0).expand({B, L, D});  // (B, L, D), stride 0 on B
  return add(x, t);
}

Tensor concat_positional(const Tensor& x, const Tensor& table) {
  QKV_CHECK(x.defined() && x.dim() == 3, "concat_positional: x must be (B, L, D)");
  QKV_CHECK(table.defined() && table.dim() == 2 && table.size(0) >= x.size(1),
            "concat_positional: table must be (L' >= " << x.size(1) << ", P), got "
                                                       << table.shape_string());
  const std::int64_t B = x.size(0), L = x.size(1), D = x.size(2), P = table.size(1);
  Tensor out = Tensor::empty({B, L, D + P});  // (B, L, D + P)
  Tensor left = out.slice(2, 0, D);             // (B, L, D) view
  left.copy_from(x);
  Tensor right = out.slice(2, D, D + P);  // (B, L, P) view
  right.copy_from(table.slice(0, 0, L).unsqueeze(0).expand({B, L, P}));
  return out;
}

}  // namespace qkv::nn
