// SASRec (qkv/sasrec.h): the loss's gradient against finite differences for every
// parameter (against torch autograd in tests/python/test_sasrec.py), right padding that
// changes no real position, the causal mask, and bad batches named.
#include <cmath>

#include "attention/expect_error.h"
#include "nn/check.h"
#include "qkv/sasrec.h"

namespace {

using qkv::Tensor;
using namespace qkv::testing;
namespace models = qkv::models;

models::SasRecConfig tiny() {
  models::SasRecConfig c;
  c.num_items = 9;
  c.dim = 8;
  c.layers = 2;
  c.heads = 2;
  c.max_len = 6;
  return c;
}

// Every weight moved off its initial value (LayerNorm gains 1, biases 0), so a gradient
// dropped for any of them shows.
models::SasRecWeights perturbed(const models::SasRecConfig& c, std::uint64_t seed) {
  models::SasRecWeights w = models::SasRecWeights::initialized(c, seed);
  perturb(w.parameters(), seed + 11);
  return w;
}

// Two users: a full row and a right-padded one; item 3 repeats (its embedding row collects
// gradients from inputs, positives and negatives).
models::SasRecBatch batch() {
  models::SasRecBatch b;
  b.B = 2;
  b.T = 5;
  b.inputs = {3, 1, 4, 1, 5, 9, 2, 6, 0, 0};
  b.positives = {1, 4, 1, 5, 9, 2, 6, 3, 0, 0};
  b.negatives = {7, 3, 8, 2, 3, 5, 5, 1, 0, 0};
  return b;
}

}  // namespace

TEST(SasRec, LossGradientMatchesFiniteDifferences) {
  const models::SasRecConfig c = tiny();
  models::SasRecWeights w = perturbed(c, 1);
  models::SasRecWeights grads = models::SasRecWeights::zeros_like(c);
  const models::SasRecBatch b = batch();
  const double analytic = models::sasrec_loss(c, w, b, &grads);
  auto loss = [&] { return models::sasrec_loss(c, w, b, nullptr); };
  EXPECT_NEAR(analytic, loss(), 1e-9);
  auto p = w.parameters(), g = grads.parameters();
  ASSERT_EQ(p.size(), g.size());
  ASSERT_EQ(p.size(), 2u + 2u * 12u + 2u);
  for (std::size_t i = 0; i < p.size(); ++i) check_gradient(*p[i].second, *g[i].second, loss, p[i].first);
}

// The loss by its definition, from the forward's hidden states: the naive twin of the
// fused loop (mean over positions with a target of softplus(-s+) + softplus(s-)).
TEST(SasRec, LossIsTheMeanBinaryCrossEntropyOfTheForward) {
  const models::SasRecConfig c = tiny();
  const models::SasRecWeights w = perturbed(c, 2);
  const models::SasRecBatch b = batch();
  const Tensor h = w.forward(b.inputs, b.B, b.T);
  const float* e = w.item_emb.weight.data_as<float>();
  double sum = 0;
  int n = 0;
  for (std::int64_t i = 0; i < b.B * b.T; ++i) {
    if (b.positives[i] == 0) continue;
    double sp = 0, sn = 0;
    for (std::int64_t j = 0; j < c.dim; ++j) {
      sp += h.data_as<float>()[i * c.dim + j] * e[b.positives[i] * c.dim + j];
      sn += h.data_as<float>()[i * c.dim + j] * e[b.negatives[i] * c.dim + j];
    }
    sum += -std::log(1 / (1 + std::exp(-sp))) - std::log(1 - 1 / (1 + std::exp(-sn)));
    ++n;
  }
  // The twin's dot products round each f32 product; ~1e-7 relative over 8 terms.
  EXPECT_NEAR(models::sasrec_loss(c, w, b, nullptr), sum / n, 1e-6);
}

// Right padding and the causal mask: a real position's state is the same with any amount
// of padding (or other items) after it, and its attention puts no weight on later keys.
TEST(SasRec, PaddingAndLaterItemsChangeNoEarlierPosition) {
  const models::SasRecConfig c = tiny();
  const models::SasRecWeights w = perturbed(c, 3);
  const std::vector<std::int64_t> short_ids = {3, 1, 4};
  const std::vector<std::int64_t> padded = {3, 1, 4, 0, 0, 0, 3, 1, 4, 7, 8, 2};  // B = 2, T = 6
  std::vector<Tensor> probs;
  const Tensor a = w.forward(short_ids, 1, 3);
  const Tensor b = w.forward(padded, 2, 6, &probs);
  for (int row = 0; row < 2; ++row)
    for (std::int64_t t = 0; t < 3; ++t)
      for (std::int64_t j = 0; j < c.dim; ++j)
        EXPECT_NEAR(a.data_as<float>()[t * c.dim + j], b.data_as<float>()[(row * 6 + t) * c.dim + j], 1e-5)
            << "row " << row << " position " << t << " dim " << j;
  ASSERT_EQ(probs.size(), 2u);
  EXPECT_EQ(probs[0].shape(), qkv::Shape({2, 2, 6, 6}));
  for (std::int64_t i = 0; i < 6; ++i)
    for (std::int64_t k = i + 1; k < 6; ++k) EXPECT_EQ(probs[1].data_as<float>()[i * 6 + k], 0.0f);
}

TEST(SasRec, BadBatchesAreNamed) {
  const models::SasRecConfig c = tiny();
  const models::SasRecWeights w = models::SasRecWeights::initialized(c, 0);
  models::SasRecBatch b = batch();
  b.positives[0] = 10;  // past num_items
  expect_error([&] { models::sasrec_loss(c, w, b, nullptr); }, "position 0: positive 10");
  b = batch();
  b.negatives[1] = 0;  // a target without a negative
  expect_error([&] { models::sasrec_loss(c, w, b, nullptr); }, "with a negative wherever");
  b = batch();
  for (auto& p : b.positives) p = 0;
  expect_error([&] { models::sasrec_loss(c, w, b, nullptr); }, "no position with a target");
  expect_error([&] { w.forward(std::vector<std::int64_t>(7, 1), 1, 7); }, "max_len = 6");
  expect_error([&] { w.forward(std::vector<std::int64_t>{1, 10}, 1, 2); }, "10");
  models::SasRecConfig odd = c;
  odd.heads = 3;
  expect_error([&] { models::SasRecWeights::initialized(odd, 0); }, "multiple of heads");
}

TEST(SasRec, InitializationKeepsThePaddingRowZero) {
  const models::SasRecConfig c = tiny();
  models::SasRecWeights w = models::SasRecWeights::initialized(c, 5);
  for (std::int64_t j = 0; j < c.dim; ++j) EXPECT_EQ(w.item_emb.weight.data_as<float>()[j], 0.0f);
  std::int64_t n = 0;
  for (auto& [name, t] : w.parameters()) n += t->numel();
  EXPECT_EQ(n, c.num_parameters());
  // Deterministic in the seed, different across seeds.
  models::SasRecWeights again = models::SasRecWeights::initialized(c, 5), other = models::SasRecWeights::initialized(c, 6);
  EXPECT_EQ(again.pos_emb.weight.to_vector(), w.pos_emb.weight.to_vector());
  EXPECT_NE(other.pos_emb.weight.to_vector(), w.pos_emb.weight.to_vector());
}

// A batch longer than one length group (kSasRecGroupTokens): rows of 3000, 2900 and 10
// items make two groups. Its loss is the padded batch's (the forward of the whole batch,
// the naive twin), and its gradients the count-weighted sum of each row's alone.
TEST(SasRec, LengthGroupsChangeNothing) {
  models::SasRecConfig c = tiny();
  c.layers = 1;
  c.max_len = 3000;
  const models::SasRecWeights w = perturbed(c, 4);
  const std::int64_t lengths[3] = {10, 3000, 2900};
  ASSERT_GT(2 * 3000 + 3000, models::kSasRecGroupTokens);
  ASSERT_EQ(models::length_groups(lengths, models::kSasRecGroupTokens).size(), 2u);
  models::SasRecBatch b;
  b.B = 3;
  b.T = 3000;
  qkv::Rng rng(9);
  const auto item = [&] { return 1 + static_cast<std::int64_t>(rng.uniform() * 9); };
  for (std::int64_t r = 0; r < 3; ++r)
    for (std::int64_t t = 0; t < 3000; ++t) {
      const bool real = t < lengths[r];
      b.inputs.push_back(real ? item() : 0);
      b.positives.push_back(real ? item() : 0);
      b.negatives.push_back(real ? item() : 0);
    }
  models::SasRecWeights grads = models::SasRecWeights::zeros_like(c);
  const double loss = models::sasrec_loss(c, w, b, &grads);
  // The naive twin: scores from one forward of the whole padded batch.
  const Tensor h = w.forward(b.inputs, 3, 3000);
  const float* e = w.item_emb.weight.data_as<float>();
  double sum = 0;
  for (std::int64_t i = 0; i < 3 * 3000; ++i) {
    if (b.positives[i] == 0) continue;
    double sp = 0, sn = 0;
    for (std::int64_t j = 0; j < c.dim; ++j) {
      sp += double{h.data_as<float>()[i * c.dim + j]} * e[b.positives[i] * c.dim + j];
      sn += double{h.data_as<float>()[i * c.dim + j]} * e[b.negatives[i] * c.dim + j];
    }
    sum += std::log1p(std::exp(-sp)) + std::log1p(std::exp(sn));
  }
  // f32 states over 5910 positions: rounding differs only in the twin's order of work.
  EXPECT_NEAR(loss, sum / 5910, 1e-5);
  // Each row alone (one group each), weighted by its share of the targets.
  models::SasRecWeights rows = models::SasRecWeights::zeros_like(c);
  for (std::int64_t r = 0; r < 3; ++r) {
    models::SasRecBatch one;
    one.B = 1;
    one.T = 3000;
    for (auto field : {&models::SasRecBatch::inputs, &models::SasRecBatch::positives, &models::SasRecBatch::negatives})
      (one.*field).assign((b.*field).begin() + r * 3000, (b.*field).begin() + (r + 1) * 3000);
    models::SasRecWeights g = models::SasRecWeights::zeros_like(c);
    models::sasrec_loss(c, w, one, &g);
    auto into = rows.parameters(), from = g.parameters();
    for (std::size_t p = 0; p < into.size(); ++p) {
      float* dst = into[p].second->data_as<float>();
      const float* src = from[p].second->data_as<float>();
      for (std::int64_t i = 0; i < into[p].second->numel(); ++i)
        dst[i] += src[i] * static_cast<float>(lengths[r]) / 5910.0f;
    }
  }
  auto got = grads.parameters(), want = rows.parameters();
  for (std::size_t p = 0; p < got.size(); ++p) {
    const auto a = got[p].second->to_vector(), x = want[p].second->to_vector();
    double err = 0, norm = 0;
    for (std::size_t i = 0; i < a.size(); ++i) err += (a[i] - x[i]) * double{a[i] - x[i]}, norm += double{x[i]} * x[i];
    // f32 sums over thousands of positions in another order: 1e-5 of the norm.
    EXPECT_LE(std::sqrt(err), 1e-5 * std::sqrt(norm) + 1e-9) << got[p].first;
  }
}
