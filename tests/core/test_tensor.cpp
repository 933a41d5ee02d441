#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "qkv/error.h"
#include "qkv/tensor.h"

namespace qkv {
namespace {

Tensor iota(const Shape& shape) {
  std::vector<float> values(static_cast<std::size_t>(
      std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>())));
  std::iota(values.begin(), values.end(), 0.0f);
  return Tensor::from_vector(shape, values);
}

TEST(Tensor, EmptyIsAlignedRowMajor) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::boolean}) {
    Tensor t = Tensor::empty({2, 3, 5}, dtype);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data()) % kTensorAlignment, 0u);
    EXPECT_EQ(t.strides(), (Strides{15, 5, 1}));
    EXPECT_EQ(t.numel(), 30);
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_EQ(t.dtype(), dtype);
  }
  EXPECT_FALSE(Tensor().defined());
  Tensor zero = Tensor::zeros({0, 4});
  EXPECT_TRUE(zero.defined());
  EXPECT_EQ(zero.numel(), 0);
  // Empty tensors are contiguous whatever their strides, so view() works on them.
  Tensor middle_empty = Tensor::empty({2, 0, 4});
  EXPECT_TRUE(middle_empty.is_contiguous());
  EXPECT_EQ(middle_empty.view({0, 8}).shape(), (Shape{0, 8}));
}

TEST(Tensor, ViewsShareStorageAndIndexCorrectly) {
  Tensor t = iota({2, 3, 4});  // value = 12a + 4b + c
  Tensor p = t.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_FALSE(p.is_contiguous());
  EXPECT_EQ(p.get({3, 1, 2}), 12 * 1 + 4 * 2 + 3);
  Tensor s = t.slice(2, 1, 4, 2);  // c in {1, 3}
  EXPECT_EQ(s.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(s.get({1, 2, 1}), 12 + 8 + 3);
  Tensor sel = t.select(1, -1);  // b = 2
  EXPECT_EQ(sel.shape(), (Shape{2, 4}));
  EXPECT_EQ(sel.get({1, 0}), 12 + 8);
  Tensor tr = t.transpose(0, 2);
  EXPECT_EQ(tr.get({3, 2, 1}), 12 + 8 + 3);
  sel.set({0, 0}, -1.0f);  // writes through the view
  EXPECT_EQ(t.get({0, 2, 0}), -1.0f);
}

TEST(Tensor, ContiguousOfAViewMatchesLogicalOrder) {
  Tensor t = iota({3, 4});
  Tensor c = t.transpose(0, 1).contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.to_vector(), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  EXPECT_EQ(t.contiguous().data(), t.data());  // already contiguous: shared, not copied
}

TEST(Tensor, ExpandUnsqueezeReshape) {
  Tensor row = iota({1, 3});
  Tensor e = row.expand({4, 2, 3});
  EXPECT_EQ(e.strides(), (Strides{0, 0, 1}));
  EXPECT_EQ(e.get({3, 1, 2}), 2.0f);
  EXPECT_THROW(row.expand({2, 4}), Error);
  Tensor u = iota({2, 3}).unsqueeze(1);
  EXPECT_EQ(u.shape(), (Shape{2, 1, 3}));
  EXPECT_EQ(u.get({1, 0, 2}), 5.0f);
  Tensor r = iota({2, 3, 4}).reshape({6, -1});
  EXPECT_EQ(r.shape(), (Shape{6, 4}));
  Tensor rt = iota({2, 3}).transpose(0, 1).reshape({6});  // copy: not contiguous
  EXPECT_EQ(rt.to_vector(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_THROW(iota({2, 3}).view({4, 2}), Error);
  EXPECT_THROW(iota({2, 3}).transpose(0, 1).view({6}), Error);
}

TEST(Tensor, DtypeConversionRoundsToNearestEven) {
  Tensor t = Tensor::from_vector({3}, std::vector<float>{1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 0.1f});
  Tensor b = t.to(DType::bf16);
  EXPECT_EQ(b.get({0}), 1.0f);
  EXPECT_EQ(b.get({1}), 1.0f + 0x1p-6f);
  Tensor h = t.to(DType::f16);
  EXPECT_EQ(h.get({2}), f16_to_f32(f32_to_f16(0.1f)));
  EXPECT_EQ(h.to(DType::f32).get({2}), h.get({2}));
  // Strided views convert element by element in logical order, both ways (the row copy's
  // typed loops) and for a pair without one (bf16 -> f16 through f32).
  Tensor x = iota({3, 4}).transpose(0, 1);  // (4, 3), strides (1, 4)
  for (std::int64_t i = 0; i < 4; ++i)
    for (std::int64_t j = 0; j < 3; ++j) x.set({i, j}, x.get({i, j}) * 1.001f + 0.37f);
  Tensor xb = x.to(DType::bf16);
  Tensor xbt = xb.transpose(0, 1).to(DType::f32);  // (3, 4) from a strided bf16 view
  Tensor xh = xb.to(DType::f16);
  for (std::int64_t i = 0; i < 4; ++i)
    for (std::int64_t j = 0; j < 3; ++j) {
      const float want = bf16_to_f32(f32_to_bf16(x.get({i, j})));
      EXPECT_EQ(xb.get({i, j}), want);
      EXPECT_EQ(xbt.get({j, i}), want);
      EXPECT_EQ(xh.get({i, j}), f16_to_f32(f32_to_f16(want)));
    }
}

// f64 is stored and copied exactly: strided copies of 8-byte elements, the overlapping
// copy_from path, and conversions that go through double rather than f32. Rounding to
// f32, bf16 and f16 is what PyTorch's .to() does: static_cast for f32, through f32 for
// bf16 and f16 (torch 1.13: 1 + 2^-8 + 2^-30 in float64 .to(bfloat16) is 1, not 1 + 2^-7).
TEST(Tensor, F64IsKeptExactlyAndConvertsAsPyTorch) {
  std::vector<double> values(12);
  for (std::size_t n = 0; n < values.size(); ++n) values[n] = 1.0 + double(n) * 0x1p-40 + 1.0 / 3.0;
  const Tensor t = Tensor::from_vector_f64({3, 4}, values);
  EXPECT_EQ(t.dtype(), DType::f64);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_EQ(t.to_vector_f64(), values);
  // A strided view copied (8-byte elements, row by row) and converted from, in order.
  const Tensor tt = t.transpose(0, 1);  // (4, 3), strides (1, 4)
  const Tensor c = tt.contiguous();
  const Tensor f = tt.to(DType::f32);
  for (std::int64_t i = 0; i < 4; ++i)
    for (std::int64_t j = 0; j < 3; ++j) {
      const double want = values[static_cast<std::size_t>(j * 4 + i)];
      EXPECT_EQ(c.to_vector_f64()[static_cast<std::size_t>(i * 3 + j)], want);
      EXPECT_EQ(f.get({i, j}), static_cast<float>(want));
      EXPECT_EQ(tt.get({i, j}), static_cast<float>(want));
    }
  // f32 -> f64 -> f32 is the identity; f16 -> f64 exact.
  const Tensor back = f.to(DType::f64).to(DType::f32);
  EXPECT_EQ(back.to_vector(), f.to_vector());
  EXPECT_EQ(f.to(DType::f16).to(DType::f64).to_vector_f64()[0], double{f16_to_f32(f32_to_f16(f.get({0, 0})))});
  // Double rounding to bf16 and f16, as PyTorch's CPU conversion does.
  const Tensor ties = Tensor::from_vector_f64({2}, std::vector<double>{1.0 + 0x1p-8 + 0x1p-30, 1.0 + 0x1p-11 + 0x1p-40});
  EXPECT_EQ(ties.to(DType::bf16).get({0}), 1.0f);
  EXPECT_EQ(ties.to(DType::f16).get({1}), 1.0f);
  EXPECT_EQ(ties.to(DType::f32).get({0}), 1.0f + 0x1p-8f);
  // Beyond f32's range: ±inf, as static_cast.
  const Tensor big = Tensor::from_vector_f64({2}, std::vector<double>{1e300, -1e300});
  EXPECT_EQ(big.to(DType::f32).get({0}), std::numeric_limits<float>::infinity());
  EXPECT_EQ(big.to(DType::f32).get({1}), -std::numeric_limits<float>::infinity());
  // copy_from between views of one storage (the gather-then-scatter path) stays exact.
  Tensor square = Tensor::from_vector_f64({2, 2}, std::vector<double>{values[0], values[1], values[2], values[3]});
  Tensor view = square.transpose(0, 1);
  view.copy_from(square);  // square becomes its transpose, through overlapping memory
  EXPECT_EQ(square.to_vector_f64(), (std::vector<double>{values[0], values[2], values[1], values[3]}));
  // Into f64 from every dtype, exactly; f64 into bool is value != 0.
  EXPECT_EQ(Tensor::full({1}, 0.1f).to(DType::f64).to_vector_f64()[0], double{0.1f});
  EXPECT_EQ(Tensor::from_vector_f64({1}, std::vector<double>{1e-60}).to(DType::boolean).get({0}), 1.0f);
  EXPECT_THROW(Tensor::from_vector_f64({2}, std::vector<double>{1.0}), Error);
}

TEST(Tensor, FromBlobKeepsOwnerAlive) {
  auto owner = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5, 6});
  Tensor t = Tensor::from_blob(owner->data(), {3, 2}, {1, 3}, DType::f32, owner);  // a transpose
  std::weak_ptr<std::vector<float>> watch = owner;
  owner.reset();
  EXPECT_FALSE(watch.expired());
  EXPECT_EQ(t.get({2, 1}), 6.0f);
  EXPECT_EQ(t.get({0, 1}), 4.0f);
  EXPECT_THROW(Tensor::from_blob(nullptr, {2}, {1}, DType::f32), Error);
  float x = 0;
  EXPECT_THROW(Tensor::from_blob(&x, {2}, {-1}, DType::f32), Error);
}

TEST(Tensor, BadIndicesAndShapesThrowNamingTheProblem) {
  Tensor t = iota({2, 3});
  EXPECT_THROW(t.get({2, 0}), Error);
  EXPECT_THROW(t.get({0}), Error);
  EXPECT_THROW(t.size(2), Error);
  EXPECT_THROW(t.permute({0, 0}), Error);
  EXPECT_THROW(Tensor::empty({-1, 3}), Error);
  EXPECT_THROW(Tensor::from_vector({2, 2}, std::vector<float>{1, 2, 3}), Error);
  try {
    t.select(0, 5);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 5"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qkv
