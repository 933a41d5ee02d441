// SASRec (qkv/sasrec.h): the loss's gradient against finite differences for every
// parameter, without and with dropout (against torch autograd in
// tests/python/test_sasrec.py), dropout's determinism per seed and thread count and its
// distinct sites, right padding that changes no real position, the causal mask, and bad
// batches named.
#include <cmath>
#include <set>

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

// Without dropout, and with the paper's p = 0.2 under a fixed seed (the masks are then
// fixed, and the loss a smooth function of the weights between ReLU kinks).
TEST(SasRec, LossGradientMatchesFiniteDifferences) {
  const models::SasRecConfig c = tiny();
  for (const qkv::nn::DropoutDraw dropout : {qkv::nn::DropoutDraw{}, qkv::nn::DropoutDraw{0.2, 5}}) {
    SCOPED_TRACE(dropout.p);
    models::SasRecWeights w = perturbed(c, 1);
    models::SasRecWeights grads = models::SasRecWeights::zeros_like(c);
    const models::SasRecBatch b = batch();
    const double analytic = models::sasrec_loss(c, w, b, &grads, dropout);
    auto loss = [&] { return models::sasrec_loss(c, w, b, nullptr, dropout); };
    EXPECT_NEAR(analytic, loss(), 1e-9);
    auto p = w.parameters(), g = grads.parameters();
    ASSERT_EQ(p.size(), g.size());
    ASSERT_EQ(p.size(), 2u + 2u * 12u + 2u);
    // ReLU's kinks: a pre-activation within ±h of 0 bends the central difference, and with
    // dropout's masks and 1/(1 − p) scaling the default h = 1e-2 met three of them here
    // (errors 2-8e-3). h = 1e-3 makes that 10x less likely; the f32 loss's rounding (~1e-7
    // of a loss near 1, over 2h) stays ~1e-4, under the 2e-3 tolerance.
    const float h = dropout.active() ? 1e-3f : 1e-2f;
    for (std::size_t i = 0; i < p.size(); ++i) check_gradient(*p[i].second, *g[i].second, loss, p[i].first, h);
  }
}

namespace {

// Restores the thread count a test changes.
struct RestoreThreads {
  int threads = qkv::num_threads();
  ~RestoreThreads() { qkv::set_num_threads(threads); }
};

// The loss and every gradient, as one vector of floats (the loss first, rounded to f32).
std::vector<float> loss_and_gradients(const models::SasRecConfig& c, const models::SasRecWeights& w,
                                      const models::SasRecBatch& b, const qkv::nn::DropoutDraw& dropout) {
  models::SasRecWeights grads = models::SasRecWeights::zeros_like(c);
  std::vector<float> out = {static_cast<float>(models::sasrec_loss(c, w, b, &grads, dropout))};
  for (auto& [name, t] : grads.parameters())
    for (float v : t->to_vector()) out.push_back(v);
  return out;
}

// Relative distance ‖a − b‖ / ‖b‖ of two loss-and-gradient vectors.
double relative_distance(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, norm = 0;
  for (std::size_t i = 0; i < a.size(); ++i) err += (a[i] - double{b[i]}) * (a[i] - double{b[i]}), norm += double{b[i]} * b[i];
  return std::sqrt(err / norm);
}

}  // namespace

// A seed gives the same masks for 1 and 2 threads (the sizes put every site's (B, T, ·)
// tensor above nn::Dropout's parallel threshold of 2^15 elements), so the same loss and
// gradients up to the rounding in which the layers' products differ by thread count, as
// they do without dropout; one thread count repeats itself bit for bit. Another seed gives
// other masks; p = 0 is the path without dropout, bit for bit.
TEST(SasRec, DropoutIsDeterministicPerSeedAndThreadCount) {
  RestoreThreads restore;
  models::SasRecConfig c = tiny();
  c.num_items = 40;
  c.dim = 64;
  c.max_len = 64;
  const models::SasRecWeights w = perturbed(c, 6);
  models::SasRecBatch b;
  b.B = 12;
  b.T = 60;
  qkv::Rng rng(3);
  const auto item = [&] { return 1 + rng.uniform_int(c.num_items); };
  for (std::int64_t i = 0; i < b.B * b.T; ++i) {
    b.inputs.push_back(item());
    b.positives.push_back(item());
    b.negatives.push_back(item());
  }
  ASSERT_GT(b.B * b.T * c.dim, 1 << 15);
  const qkv::nn::DropoutDraw dropout{0.2, 17};
  qkv::set_num_threads(1);
  const std::vector<float> one = loss_and_gradients(c, w, b, dropout), plain_one = loss_and_gradients(c, w, b, {});
  EXPECT_EQ(loss_and_gradients(c, w, b, dropout), one) << "1 thread, twice";
  qkv::set_num_threads(2);
  const std::vector<float> two = loss_and_gradients(c, w, b, dropout);
  EXPECT_EQ(loss_and_gradients(c, w, b, dropout), two) << "2 threads, twice";
  // Without dropout the thread counts' results differ by rounding alone (measured: ~1% of
  // the gradients' entries, in their last bits); a mask that followed the thread count
  // would move the loss and gradients by O(p). Twice the no-dropout distance plus 1e-6
  // separates the two by orders of magnitude.
  const double rounding = relative_distance(loss_and_gradients(c, w, b, {}), plain_one);
  EXPECT_LE(relative_distance(two, one), 2 * rounding + 1e-6) << "1 and 2 threads";
  EXPECT_NEAR(two[0], one[0], 1e-6 * std::abs(one[0])) << "the loss, 1 and 2 threads";
  const std::vector<float> other = loss_and_gradients(c, w, b, {0.2, 18});
  EXPECT_GT(relative_distance(other, two), 1e-3) << "seeds 17 and 18 gave the same result";
  const std::vector<float> none = loss_and_gradients(c, w, b, {});
  EXPECT_GT(relative_distance(none, two), 1e-3) << "p = 0.2 gave the result without dropout";
  EXPECT_EQ(loss_and_gradients(c, w, b, {0.0, 17}), none) << "p = 0 is not the path without dropout";
  // The forward evaluation and recommendation use (no draw) is the p = 0 forward.
  EXPECT_EQ(w.forward(b.inputs, b.B, b.T).to_vector(), w.forward(b.inputs, b.B, b.T, nullptr, nullptr, {0.0, 17}).to_vector());
}

// Every dropout site of a forward draws its own mask: the embedding's, and each block's
// attention probabilities, feed-forward activation and two branches, all with distinct
// seeds (two sites on one seed would drop the same elements of same-shaped tensors), and
// another length group of a batch other seeds again.
TEST(SasRec, EveryDropoutSiteDrawsItsOwnMask) {
  const models::SasRecConfig c = tiny();
  const models::SasRecWeights w = perturbed(c, 7);
  const models::SasRecBatch b = batch();
  std::set<std::uint64_t> seeds;
  std::size_t sites = 0;
  for (std::uint64_t group = 0; group < 2; ++group) {
    models::SasRecWeights::Record record;
    w.forward(b.inputs, b.B, b.T, nullptr, &record, qkv::nn::DropoutDraw{0.2, 8}.site(group));
    const auto add = [&](bool dropped, std::uint64_t seed, const char* what) {
      EXPECT_TRUE(dropped) << what;
      seeds.insert(seed);
      ++sites;
    };
    add(record.embedding_dropout.dropped, record.embedding_dropout.seed, "embedding");
    for (const auto& block : record.blocks) {
      add(block.self_attn.options.dropout_p == 0.2, block.self_attn.options.seed, "attention");
      add(block.ff.dropout.dropped, block.ff.dropout.seed, "activation");
      add(block.dropout1.dropped, block.dropout1.seed, "dropout1");
      add(block.dropout2.dropped, block.dropout2.seed, "dropout2");
    }
  }
  EXPECT_EQ(sites, 2u * (1 + 4 * 2));
  EXPECT_EQ(seeds.size(), sites) << "two sites share a seed";
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
