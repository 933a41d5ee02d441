// The elementwise helpers (add, add_, scale_) against plain loops, on views and edges.

#include "nn/check.h"

namespace {

using qkv::Shape;
using qkv::Tensor;
using namespace qkv::testing;  // nn::, train::, randn, expect_close, check_gradient, ...

TEST(NnElementwise, AddOfViewsAndInPlace) {
  // Sizes below and above the threshold where the loop goes parallel.
  for (std::int64_t n : {0, 1, 7, 40000}) {
    Tensor a = randn({n}, 1), b = randn({n}, 2);
    const std::vector<float> av = a.to_vector(), bv = b.to_vector();
    const Tensor sum = nn::add(a, b);
    EXPECT_EQ(a.to_vector(), av) << "add changed its input";
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(sum.get({i}), av[i] + bv[i]);
    nn::add_(a, b);
    EXPECT_EQ(a.to_vector(), sum.to_vector());
    nn::scale_(a, 0.5f);
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(a.get({i}), (av[i] + bv[i]) * 0.5f);
  }
  // b a broadcast view (stride 0) and a transposed one.
  Tensor x = randn({3, 4}, 3);
  const Tensor row = randn({4}, 4).unsqueeze(0).expand({3, 4});
  const Tensor xt = randn({4, 3}, 5).transpose(0, 1);
  const Tensor want = x.clone();
  nn::add_(x, row);
  nn::add_(x, xt);
  for (std::int64_t i = 0; i < 3; ++i)
    for (std::int64_t j = 0; j < 4; ++j)
      EXPECT_EQ(x.get({i, j}), want.get({i, j}) + row.get({i, j}) + xt.get({i, j}));
  // add of a non-contiguous a gives a contiguous result without touching a.
  const Tensor s = nn::add(xt, xt);
  EXPECT_TRUE(s.is_contiguous());
  EXPECT_EQ(s.get({2, 1}), xt.get({2, 1}) * 2);
}

TEST(NnElementwise, ErrorsNameTheProblem) {
  Tensor a = randn({2, 3}, 1);
  EXPECT_THROW(nn::add(a, randn({3, 2}, 2)), qkv::Error);
  EXPECT_THROW(nn::add_(a, randn({6}, 2)), qkv::Error);
  Tensor view = a.transpose(0, 1);
  EXPECT_THROW(nn::add_(view, view), qkv::Error);  // written in place: must be contiguous
  Tensor half = a.to(qkv::DType::bf16);
  EXPECT_THROW(nn::scale_(half, 2.f), qkv::Error);
  EXPECT_THROW(nn::add(Tensor(), a), qkv::Error);
}

}  // namespace
