#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "qkv/dtype.h"
#include "qkv/error.h"

namespace qkv {
namespace {

float next_toward_zero_ulps(float x, int n) {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  return std::bit_cast<float>(bits - static_cast<std::uint32_t>(n));
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::boolean), 1u);
  EXPECT_EQ(dtype_size(DType::f64), 8u);
  EXPECT_STREQ(dtype_name(DType::f64), "f64");
  EXPECT_EQ(parse_dtype("f64"), DType::f64);
  EXPECT_EQ(parse_dtype("float64"), DType::f64);
  EXPECT_TRUE(is_floating(DType::f64));
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_EQ(parse_dtype("float16"), DType::f16);
  EXPECT_STREQ(dtype_name(parse_dtype("f32")), "f32");
}

TEST(DType, ParseRejectsUnknownNamesAsTypeError) {
  try {
    parse_dtype("int8");
    FAIL() << "parse_dtype(int8) did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::type);
    EXPECT_NE(std::string(e.what()).find("int8"), std::string::npos) << e.what();
  }
}

// bf16 keeps 8 significant bits: 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7,
// and ties go to the even mantissa (1.0); anything above the tie rounds up.
TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 0x1p-8f)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f)), 1.0f + 0x1p-7f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);  // tie, odd -> even up
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-2.5f)), -2.5f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::infinity()))));
  // The largest finite f32 rounds to infinity in bf16, as in PyTorch.
  EXPECT_TRUE(std::isinf(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::max()))));
}

// Every bf16 and f16 bit pattern survives a round trip through f32 (NaNs stay NaN).
TEST(DType, HalfFormatsRoundTripEveryPattern) {
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    const float fb = bf16_to_f32(bits);
    const float fh = f16_to_f32(bits);
    if (std::isnan(fb)) EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(fb))));
    else ASSERT_EQ(f32_to_bf16(fb), bits) << "bf16 pattern " << h;
    if (std::isnan(fh)) EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(fh))));
    else ASSERT_EQ(f32_to_f16(fh), bits) << "f16 pattern " << h;
  }
}

// Against a definition of round-to-nearest-even that works on doubles: for every pair of
// adjacent finite halves, the midpoint goes to the even one and points just off it go to
// the nearer one.
TEST(DType, F16RoundsToNearestEvenEverywhere) {
  for (std::uint32_t h = 0; h < 0x7bff; ++h) {
    const float lo = f16_to_f32(static_cast<std::uint16_t>(h));
    const float hi = f16_to_f32(static_cast<std::uint16_t>(h + 1));
    const float mid = static_cast<float>((double{lo} + double{hi}) / 2);  // exact in f32
    const std::uint16_t even = (h & 1u) ? static_cast<std::uint16_t>(h + 1) : static_cast<std::uint16_t>(h);
    ASSERT_EQ(f32_to_f16(mid), even) << "midpoint above pattern " << h;
    ASSERT_EQ(f32_to_f16(next_toward_zero_ulps(mid, 1)), h) << "just below midpoint " << h;
    ASSERT_EQ(f32_to_f16(std::nextafter(mid, 1e9f)), h + 1) << "just above midpoint " << h;
    ASSERT_EQ(f32_to_f16(-mid), even | 0x8000u) << "negative midpoint " << h;
  }
  EXPECT_EQ(f16_to_f32(f32_to_f16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(65520.0f))));  // halfway to 2^16 rounds up
  EXPECT_EQ(f16_to_f32(f32_to_f16(65519.0f)), 65504.0f);
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0u);                        // tie with 0: even is 0
  EXPECT_EQ(f32_to_f16(std::nextafter(0x1p-25f, 1.0f)), 1u);  // just above: smallest subnormal
}

}  // namespace
}  // namespace qkv
