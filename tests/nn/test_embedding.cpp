// nn::Embedding and LearnedPositionalEmbedding: lookups and their backward.

#include "nn/check.h"

namespace {

using qkv::Shape;
using qkv::Tensor;
using namespace qkv::testing;  // nn::, train::, randn, expect_close, check_gradient, ...

TEST(NnEmbedding, GathersRowsAndChecksRange) {
  nn::Embedding emb(10, 4, 1);
  std::vector<std::int64_t> ids{3, 0, 9, 3, 7, 1};
  Tensor y = emb.forward(ids, {2, 3});  // (2, 3, 4)
  ASSERT_EQ(y.shape(), (Shape{2, 3, 4}));
  for (std::int64_t i = 0; i < 6; ++i)
    for (std::int64_t d = 0; d < 4; ++d)
      EXPECT_EQ(y.get({i / 3, i % 3, d}), emb.weight.get({ids[i], d}));  // a copy: exact
  std::vector<std::int64_t> bad{1, 10};
  EXPECT_THROW(emb.forward(bad, {2}), qkv::Error);
  EXPECT_THROW(emb.forward(ids, {4}), qkv::Error);
  nn::LearnedPositionalEmbedding pos(16, 4, 2);
  Tensor p = pos.forward(3, 5);  // rows 5, 6, 7
  for (std::int64_t l = 0; l < 3; ++l)
    for (std::int64_t d = 0; d < 4; ++d) EXPECT_EQ(p.get({l, d}), pos.table.weight.get({5 + l, d}));
  EXPECT_THROW(pos.forward(12, 5), qkv::Error);
}

TEST(NnEmbedding, BackwardAddsEveryOccurrence) {
  nn::Embedding emb(4, 2, 1), grads(4, 2, 1);
  grads.weight = Tensor::zeros({4, 2});
  const std::vector<std::int64_t> ids{1, 3, 1};
  nn::Embedding::Record record;
  emb.forward(ids, {3}, &record);
  Tensor dy = Tensor::from_vector({3, 2}, std::vector<float>{1, 2, 3, 4, 5, 6});
  emb.backward(dy, record, grads);
  EXPECT_EQ(grads.weight.to_vector(), (std::vector<float>{0, 0, 6, 8, 0, 0, 3, 4}));
  emb.backward(dy, record, grads);  // accumulates
  EXPECT_EQ(grads.weight.to_vector(), (std::vector<float>{0, 0, 12, 16, 0, 0, 6, 8}));
  EXPECT_THROW(emb.backward(Tensor::zeros({2, 2}), record, grads), qkv::Error);
  // Positions: rows offset.. of the table.
  nn::LearnedPositionalEmbedding pos(6, 2, 2), gpos(6, 2, 2);
  gpos.table.weight = Tensor::zeros({6, 2});
  nn::LearnedPositionalEmbedding::Record prec;
  pos.forward(2, 3, &prec);
  pos.backward(Tensor::full({2, 2}, 1.f), prec, gpos);
  EXPECT_EQ(gpos.table.weight.to_vector(), (std::vector<float>{0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0}));
}

}  // namespace
