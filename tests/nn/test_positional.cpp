// Positional encodings (sinusoidal, RoPE and its backward, ALiBi slopes, add/concat)
// against their definitions in double.

#include "nn/check.h"

namespace {

using qkv::Shape;
using qkv::Tensor;
using namespace qkv::testing;  // nn::, train::, randn, expect_close, check_gradient, ...

TEST(NnPositional, SinusoidalTable) {
  for (std::int64_t D : {1, 6, 7, 64}) {
    Tensor pe = nn::sinusoidal_positional_encoding(50, D);  // (50, D)
    std::vector<double> want;
    for (std::int64_t p = 0; p < 50; ++p)
      for (std::int64_t d = 0; d < D; ++d) {
        const double angle = p / std::pow(10000.0, static_cast<double>(d - d % 2) / D);
        want.push_back(d % 2 == 0 ? std::sin(angle) : std::cos(angle));
      }
    expect_close(pe, want, kU, "sinusoidal D=" + std::to_string(D));  // |sin| <= 1, one rounding
  }
}

// tensor2tensor's layout: sines in the first half, cosines in the second, frequencies
// 10^4^(−i/(D/2 − 1)) — the last exactly 1e-4. Against the definition in double: the f32
// steps TensorFlow takes (and the table reproduces) move the angle by at most a few f32
// ulps of p·inv (< 128 · 2^−23 here), within 2e-5 of the double-precision table.
TEST(NnPositional, TimingSignalTable) {
  for (std::int64_t D : {4, 10, 256}) {
    Tensor pe = nn::timing_signal(128, D);  // (128, D)
    ASSERT_EQ(pe.shape(), (Shape{128, D}));
    const std::int64_t half = D / 2;
    std::vector<double> want;
    for (std::int64_t p = 0; p < 128; ++p)
      for (std::int64_t d = 0; d < D; ++d) {
        const std::int64_t i = d % half;
        const double angle = p * std::exp(-static_cast<double>(i) * std::log(1e4) / (half - 1));
        want.push_back(d < half ? std::sin(angle) : std::cos(angle));
      }
    expect_close(pe, want, 2e-5, "timing_signal D=" + std::to_string(D));
  }
  EXPECT_EQ(nn::timing_signal(3, 8).to_vector()[4], 1.0f);  // cos(0) opens the second half
  EXPECT_THROW(nn::timing_signal(4, 7), qkv::Error);  // odd
  EXPECT_THROW(nn::timing_signal(4, 2), qkv::Error);  // one frequency: no spread
  EXPECT_THROW(nn::timing_signal(4, 8, 0.0), qkv::Error);
}

TEST(NnPositional, RopeRotateHalfWithOffset) {
  const std::int64_t B = 2, H = 3, L = 5, D = 8;
  Tensor x = randn({B, L, H, D}, 4).permute({0, 2, 1, 3});  // (B, H, L, D) strided
  for (std::int64_t offset : {0, 7}) {
    Tensor y = nn::apply_rope(x, offset);  // (B, H, L, D)
    std::vector<double> want;
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t l = 0; l < L; ++l)
          for (std::int64_t d = 0; d < D; ++d) {
            const std::int64_t i = d % (D / 2);
            const double angle = (offset + l) * std::pow(10000.0, -2.0 * i / D);
            const double a = x.get({b, h, l, i}), c = x.get({b, h, l, i + D / 2});
            want.push_back(d < D / 2 ? a * std::cos(angle) - c * std::sin(angle)
                                     : c * std::cos(angle) + a * std::sin(angle));
          }
    // cos/sin rounded to f32 (u each), a product and a sum: 4u·(|a| + |c|) <= 4u·2·max|x|.
    expect_close(y, want, 8 * kU * 5.0, "rope offset=" + std::to_string(offset));
  }
  // Rotating positions 0..L with offset o equals rows o..o+L of a longer rotation.
  Tensor longer = nn::apply_rope(randn({1, 1, 9, 4}, 8));
  Tensor part = nn::apply_rope(randn({1, 1, 9, 4}, 8).slice(2, 4, 9), 4);
  for (std::int64_t l = 0; l < 5; ++l)
    for (std::int64_t d = 0; d < 4; ++d)
      EXPECT_EQ(part.get({0, 0, l, d}), longer.get({0, 0, 4 + l, d}));
  EXPECT_THROW(nn::apply_rope(Tensor::zeros({1, 1, 2, 3})), qkv::Error);
}

TEST(NnPositional, AlibiSlopes) {
  std::vector<float> s8 = nn::alibi_slopes(8);
  for (int h = 0; h < 8; ++h) EXPECT_EQ(s8[h], std::ldexp(1.0f, -(h + 1)));
  // n = 6: slopes for 4 (2^-2, 2^-4, 2^-6, 2^-8), then every other slope for 8 (2^-1, 2^-3).
  std::vector<float> s6 = nn::alibi_slopes(6);
  std::vector<float> want6{0.25f, 0.0625f, 0.015625f, 0.00390625f, 0.5f, 0.125f};
  EXPECT_EQ(s6, want6);
  EXPECT_EQ(nn::alibi_slopes(1), std::vector<float>{0.00390625f});
  EXPECT_EQ(nn::alibi_slopes(12).size(), 12u);
  EXPECT_THROW(nn::alibi_slopes(0), qkv::Error);
}

TEST(NnPositional, AddAndConcat) {
  Tensor x = randn({2, 3, 4}, 1);     // (B, L, D)
  Tensor table = randn({5, 4}, 2);    // (L', D)
  Tensor added = nn::add_positional(x, table);
  Tensor cat = nn::concat_positional(x, randn({5, 2}, 3));  // (2, 3, 6)
  Tensor t2 = randn({5, 2}, 3);
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t l = 0; l < 3; ++l) {
      for (std::int64_t d = 0; d < 4; ++d) {
        EXPECT_EQ(added.get({b, l, d}), x.get({b, l, d}) + table.get({l, d}));
        EXPECT_EQ(cat.get({b, l, d}), x.get({b, l, d}));
      }
      for (std::int64_t d = 0; d < 2; ++d) EXPECT_EQ(cat.get({b, l, 4 + d}), t2.get({l, d}));
    }
  EXPECT_THROW(nn::add_positional(x, randn({2, 4}, 1)), qkv::Error);
}


TEST(NnPositional, RopeBackwardMatchesFiniteDifferences) {
  Tensor x = randn({1, 2, 5, 6}, 15), w = randn({1, 2, 5, 6}, 16);
  check_gradient(x, nn::apply_rope_backward(w, 3), [&] { return dot(nn::apply_rope(x, 3), w); },
                 "rope");
}

}  // namespace
