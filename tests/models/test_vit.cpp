// The Vision Transformer (qkv/vit.h): patchify and shifted_stack against naive twins, the
// 2-D sine-cosine table's values, every parameter's gradient against finite differences
// (learned and fixed positions, plain and shifted patches), attention rollout against a direct computation, and bad shapes named.
// Patch dropout: random_patches' subsets, every patch kept in any order being the full
// forward, the gradients of a dropped forward against finite differences, bad kept
// patches named.
// tests/python/test_vit.py checks the forward and backward against torch.
#include <algorithm>
#include <cmath>
#include <set>
#include <utility>
#include <vector>

#include "attention/expect_error.h"
#include "nn/check.h"
#include "qkv/vit.h"

namespace {

using qkv::Tensor;
using namespace qkv::testing;
namespace models = qkv::models;

models::VitConfig tiny(bool learned = true, bool shifted = false) {
  models::VitConfig c;
  c.image_size = 6;
  c.channels = 2;
  c.patch_size = 3;  // 4 patches, 5 tokens
  c.dim = 8;
  c.layers = 2;
  c.heads = 2;
  c.mlp_dim = 12;
  c.classes = 3;
  c.learned_positions = learned;
  c.shifted_patches = shifted;  // a shift of 1 (patch_size / 2)
  return c;
}

Tensor images(std::int64_t B, const models::VitConfig& c, std::uint64_t seed) {
  return randn({B, c.channels, c.image_size, c.image_size}, seed);
}

}  // namespace

TEST(Vit, PatchifyMatchesNaiveIndexing) {
  const Tensor x = randn({2, 3, 8, 12}, 5);
  const Tensor p = qkv::models::patchify(x, 4);  // grid 2 x 3
  ASSERT_EQ(p.shape(), (qkv::Shape{2, 6, 48}));
  const auto xv = x.to_vector(), pv = p.to_vector();
  for (int b = 0; b < 2; ++b)
    for (int gy = 0; gy < 2; ++gy)
      for (int gx = 0; gx < 3; ++gx)
        for (int c = 0; c < 3; ++c)
          for (int ky = 0; ky < 4; ++ky)
            for (int kx = 0; kx < 4; ++kx) {
              const float want = xv[static_cast<std::size_t>(((b * 3 + c) * 8 + gy * 4 + ky) * 12 + gx * 4 + kx)];
              const float got = pv[static_cast<std::size_t>((b * 6 + gy * 3 + gx) * 48 + (c * 4 + ky) * 4 + kx)];
              ASSERT_EQ(got, want) << "b " << b << " patch (" << gy << ", " << gx << ") c " << c;
            }
}

TEST(Vit, ShiftedStackMatchesNaiveIndexing) {
  const Tensor x = randn({2, 3, 5, 7}, 6);
  const std::int64_t s = 2;
  const Tensor y = qkv::models::shifted_stack(x, s);
  ASSERT_EQ(y.shape(), (qkv::Shape{2, 15, 5, 7}));
  const auto xv = x.to_vector(), yv = y.to_vector();
  const int dy[5] = {0, -2, -2, 2, 2}, dx[5] = {0, -2, 2, -2, 2};
  for (int b = 0; b < 2; ++b)
    for (int k = 0; k < 5; ++k)
      for (int c = 0; c < 3; ++c)
        for (int r = 0; r < 5; ++r)
          for (int col = 0; col < 7; ++col) {
            const int sr = r + dy[k], sc = col + dx[k];
            const bool inside = sr >= 0 && sr < 5 && sc >= 0 && sc < 7;
            const float want = inside ? xv[static_cast<std::size_t>(((b * 3 + c) * 5 + sr) * 7 + sc)] : 0.0f;
            const float got = yv[static_cast<std::size_t>(((b * 15 + k * 3 + c) * 5 + r) * 7 + col)];
            ASSERT_EQ(got, want) << "b " << b << " copy " << k << " c " << c << " (" << r << ", " << col << ")";
          }
  // a shift as wide as the image leaves the four copies black
  const auto wide = qkv::models::shifted_stack(x, 7).to_vector();
  for (std::size_t i = 0; i < wide.size(); ++i)
    if ((i / (5 * 7)) % 15 >= 3) ASSERT_EQ(wide[i], 0.0f) << i;
}

TEST(Vit, SincosTableValues) {
  const Tensor t = qkv::models::sincos_positions_2d(3, 8);  // quarter = 2: ω = 1, 0.01
  ASSERT_EQ(t.shape(), (qkv::Shape{10, 8}));
  const auto v = t.to_vector();
  for (int j = 0; j < 8; ++j) EXPECT_EQ(v[static_cast<std::size_t>(j)], 0.0f);  // the class token
  // patch (gy, gx) = (2, 1) is row 1 + 2·3 + 1 = 8
  const float* row = v.data() + 8 * 8;
  EXPECT_NEAR(row[0], std::sin(1.0), 1e-6);
  EXPECT_NEAR(row[1], std::sin(0.01), 1e-6);
  EXPECT_NEAR(row[2], std::cos(1.0), 1e-6);
  EXPECT_NEAR(row[3], std::cos(0.01), 1e-6);
  EXPECT_NEAR(row[4], std::sin(2.0), 1e-6);
  EXPECT_NEAR(row[5], std::sin(0.02), 1e-6);
  EXPECT_NEAR(row[6], std::cos(2.0), 1e-6);
  EXPECT_NEAR(row[7], std::cos(0.02), 1e-6);
}

TEST(Vit, GradientsMatchFiniteDifferences) {
  for (const auto& [learned, shifted] : {std::pair{true, false}, std::pair{false, false}, std::pair{true, true}}) {
    const models::VitConfig c = tiny(learned, shifted);
    models::VitWeights w = models::VitWeights::initialized(c, 3);
    perturb(w.parameters(), 7);  // the zero head and unit gains would hide dropped terms
    const Tensor x = images(3, c, 11);
    const Tensor weights = randn({3, c.classes}, 13);  // L = Σ logits ∘ weights
    models::VitWeights grads = models::VitWeights::zeros_like(c);
    models::VitWeights::Record record;
    const Tensor logits = w.forward(x, nullptr, &record);
    ASSERT_EQ(logits.shape(), (qkv::Shape{3, c.classes}));
    w.backward(weights, record, grads);
    auto loss = [&] { return dot(w.forward(x), weights); };
    // The forward without a record fuses the activation into linear1's product: f32
    // rounding apart, not bit-equal.
    EXPECT_NEAR(dot(logits, weights), loss(), 1e-5 * (1 + std::abs(loss())));
    auto p = w.parameters(), g = grads.parameters();
    ASSERT_EQ(p.size(), g.size());
    ASSERT_EQ(p.size(), (learned ? 4u : 3u) + (shifted ? 2u : 0u) + 2u * 12u + 4u);
    std::int64_t count = 0;
    for (std::size_t i = 0; i < p.size(); ++i) {
      EXPECT_EQ(p[i].first, g[i].first);
      count += p[i].second->numel();
      check_gradient(*p[i].second, *g[i].second, loss,
                     p[i].first + (learned ? " (learned" : " (sincos") + (shifted ? ", shifted)" : ")"));
    }
    EXPECT_EQ(count, c.num_parameters());
  }
}

TEST(Vit, RolloutMatchesDirectProduct) {
  const models::VitConfig c = tiny();
  models::VitWeights w = models::VitWeights::initialized(c, 4);
  perturb(w.parameters(), 9);
  std::vector<Tensor> probs;
  const Tensor with_probs = w.forward(images(2, c, 21), &probs);
  ASSERT_EQ(probs.size(), 2u);
  // Without probs the last block computes only the class token's row: the same logits.
  std::vector<double> want;
  for (float f : with_probs.to_vector()) want.push_back(f);
  expect_close(w.forward(images(2, c, 21)), want, 64 * kU * (1 + max_abs(want)), "class row only");
  const std::int64_t T = c.tokens(), H = c.heads;
  for (std::int64_t b = 0; b < 2; ++b) {
    // Direct: R = A2·A1 with A = (mean_h P + I)/2; the class row without itself.
    auto layer = [&](int l) {
      std::vector<double> a(static_cast<std::size_t>(T * T));
      const auto p = probs[static_cast<std::size_t>(l)].to_vector();
      for (std::int64_t i = 0; i < T; ++i)
        for (std::int64_t j = 0; j < T; ++j) {
          double m = 0;
          for (std::int64_t h = 0; h < H; ++h) m += p[static_cast<std::size_t>(((b * H + h) * T + i) * T + j)];
          a[static_cast<std::size_t>(i * T + j)] = (m / H + (i == j)) / 2;
        }
      return a;
    };
    const auto a1 = layer(0), a2 = layer(1);
    const std::vector<float> got = models::attention_rollout(probs, b);
    ASSERT_EQ(static_cast<std::int64_t>(got.size()), T - 1);
    double total = 0;
    for (std::int64_t j = 1; j < T; ++j) {
      double want = 0;
      for (std::int64_t k = 0; k < T; ++k) want += a2[static_cast<std::size_t>(k)] * a1[static_cast<std::size_t>(k * T + j)];
      EXPECT_NEAR(got[static_cast<std::size_t>(j - 1)], want, 1e-6) << "b " << b << " patch " << j - 1;
      total += got[static_cast<std::size_t>(j - 1)];
    }
    EXPECT_GT(total, 0.0);
    EXPECT_LT(total, 1.0);  // the class token keeps some of its own weight
  }
}

// Rollout on probabilities made here (not a forward's): three layers of random row-stochastic
// maps with heads that differ, against Abnar & Zuidema's definition computed directly in
// double — per layer A = 0.5·mean_h P_h + 0.5·I, each row divided by its sum, R = A₃·A₂·A₁,
// the class token's row over the patches — and two closed forms: heads that attend only to
// themselves leave the class token all its weight (every patch 0), and uniform attention
// gives each patch (1 − 2^−L)/T (A = ½U + ½I with U idempotent: A^L = 2^−L·I + (1 − 2^−L)·U).
TEST(Vit, RolloutIsAbnarZuidemaOnGivenProbabilities) {
  const std::int64_t B = 2, H = 3, T = 5, L = 3;
  std::vector<Tensor> probs;
  for (std::int64_t l = 0; l < L; ++l) {
    Tensor p = randn({B, H, T, T}, 40 + static_cast<std::uint64_t>(l));
    float* v = p.data_as<float>();
    for (std::int64_t row = 0; row < B * H * T; ++row) {  // exp, then each row summing to 1
      double sum = 0;
      for (std::int64_t j = 0; j < T; ++j) sum += (v[row * T + j] = std::exp(2.0f * v[row * T + j]));
      for (std::int64_t j = 0; j < T; ++j) v[row * T + j] = static_cast<float>(v[row * T + j] / sum);
    }
    probs.push_back(p);
  }
  for (std::int64_t b = 0; b < B; ++b) {
    std::vector<double> R(static_cast<std::size_t>(T * T), 0.0);
    for (std::int64_t i = 0; i < T; ++i) R[static_cast<std::size_t>(i * T + i)] = 1;
    for (std::int64_t l = 0; l < L; ++l) {
      const auto p = probs[static_cast<std::size_t>(l)].to_vector();
      std::vector<double> A(R.size()), next(R.size(), 0.0);
      for (std::int64_t i = 0; i < T; ++i) {
        double row = 0;
        for (std::int64_t j = 0; j < T; ++j) {
          double mean = 0;
          for (std::int64_t h = 0; h < H; ++h) mean += p[static_cast<std::size_t>(((b * H + h) * T + i) * T + j)];
          row += A[static_cast<std::size_t>(i * T + j)] = 0.5 * mean / H + 0.5 * (i == j);
        }
        for (std::int64_t j = 0; j < T; ++j) A[static_cast<std::size_t>(i * T + j)] /= row;
      }
      for (std::int64_t i = 0; i < T; ++i)
        for (std::int64_t k = 0; k < T; ++k)
          for (std::int64_t j = 0; j < T; ++j)
            next[static_cast<std::size_t>(i * T + j)] +=
                A[static_cast<std::size_t>(i * T + k)] * R[static_cast<std::size_t>(k * T + j)];
      R = next;
    }
    const std::vector<float> got = models::attention_rollout(probs, b);
    ASSERT_EQ(static_cast<std::int64_t>(got.size()), T - 1);
    // float32 probabilities, double arithmetic, one rounding to float: a few u of values ≤ 1
    for (std::int64_t j = 1; j < T; ++j)
      EXPECT_NEAR(got[static_cast<std::size_t>(j - 1)], R[static_cast<std::size_t>(j)], 4 * kU)
          << "b " << b << " patch " << j - 1;
  }
  const auto constant = [&](auto value) {
    std::vector<Tensor> same;
    for (std::int64_t l = 0; l < L; ++l) {
      Tensor p = Tensor::zeros({1, H, T, T});
      float* v = p.data_as<float>();
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t i = 0; i < T; ++i)
          for (std::int64_t j = 0; j < T; ++j) v[(h * T + i) * T + j] = value(i, j);
      same.push_back(p);
    }
    return models::attention_rollout(same, 0);
  };
  for (const float w : constant([](std::int64_t i, std::int64_t j) { return i == j ? 1.0f : 0.0f; }))
    EXPECT_EQ(w, 0.0f) << "attention to oneself only: the class token keeps its weight";
  const double uniform = (1.0 - std::pow(0.5, static_cast<double>(L))) / static_cast<double>(T);
  for (const float w : constant([&](std::int64_t, std::int64_t) { return 1.0f / static_cast<float>(T); }))
    EXPECT_NEAR(w, uniform, 4 * kU) << "uniform attention: (1 - 2^-L)/T each";
}

TEST(Vit, RandomPatchesAreUniformSortedSubsets) {
  const std::int64_t B = 3000, N = 9, K = 4;
  const std::vector<std::int64_t> kept = models::random_patches(B, N, K, 21);
  ASSERT_EQ(kept.size(), static_cast<std::size_t>(B * K));
  EXPECT_EQ(kept, models::random_patches(B, N, K, 21)) << "a pure function of the seed";
  EXPECT_NE(kept, models::random_patches(B, N, K, 22));
  std::vector<std::int64_t> times(N, 0);
  std::set<std::vector<std::int64_t>> subsets;
  for (std::int64_t b = 0; b < B; ++b) {
    const std::vector<std::int64_t> row(kept.begin() + b * K, kept.begin() + (b + 1) * K);
    for (std::int64_t k = 0; k < K; ++k) {
      ASSERT_TRUE(row[k] >= 0 && row[k] < N) << row[k];
      if (k > 0) ASSERT_LT(row[k - 1], row[k]) << "ascending, so distinct";
      ++times[static_cast<std::size_t>(row[k])];
    }
    subsets.insert(row);
  }
  // Each patch is kept with probability K/N: 1333 of 3000 times, σ = √(B·(K/N)(1 − K/N)) ≈ 27.
  for (std::int64_t n = 0; n < N; ++n) EXPECT_NEAR(times[n], B * K / N, 150) << "patch " << n;
  EXPECT_EQ(subsets.size(), 126u) << "all C(9, 4) subsets turn up in 3000 draws";
  EXPECT_EQ(models::random_patches(2, N, N, 5), (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8,
                                                                           0, 1, 2, 3, 4, 5, 6, 7, 8}));
  expect_error([] { models::random_patches(2, 4, 5, 1); }, "1 <= keep <= N");
  expect_error([] { models::random_patches(2, 4, 0, 1); }, "1 <= keep <= N");
}

TEST(Vit, PatchesKeptRoundsHalvesAwayFromZeroAndKeepsOne) {
  // N − round(F·N): 0.75·49 = 36.75 -> 37 dropped, 0.5·49 = 24.5 -> 25 (a half rounds up,
  // as the study script and the shipped model's recipe count it), 0.99·49 -> all but one.
  EXPECT_EQ(models::patches_kept(49, 0.0), 49);
  EXPECT_EQ(models::patches_kept(49, 0.75), 12);
  EXPECT_EQ(models::patches_kept(49, 0.5), 24);
  EXPECT_EQ(models::patches_kept(16, 0.95), 1);
  EXPECT_EQ(models::patches_kept(49, 0.99), 1);
  EXPECT_EQ(models::patches_kept(1, 0.5), 1);
  expect_error([] { models::patches_kept(49, 1.0); }, "patch dropout in [0, 1)");
  expect_error([] { models::patches_kept(49, -0.1); }, "patch dropout in [0, 1)");
  expect_error([] { models::patches_kept(0, 0.5); }, "N >= 1");
}

TEST(Vit, PatchDropoutOfNoPatchIsTheFullForward) {
  for (const bool shifted : {false, true}) {
    const models::VitConfig c = tiny(true, shifted);
    models::VitWeights w = models::VitWeights::initialized(c, 3);
    perturb(w.parameters(), 7);
    const Tensor x = images(3, c, 11);
    const Tensor full = w.forward(x);
    // every patch, in order: the same computation, bit for bit
    const std::vector<std::int64_t> all = models::random_patches(3, c.patches(), c.patches(), 1);
    EXPECT_EQ(w.forward(x, nullptr, nullptr, all).to_vector(), full.to_vector());
    // every patch in another order per image: attention does not care where a token sits
    // in the sequence, only which position it carries, so the same logits up to the sums'
    // rounding. (Tokens given the positions of their place instead would change them.)
    const std::vector<std::int64_t> shuffled = {3, 2, 1, 0, 1, 3, 0, 2, 2, 0, 3, 1};
    const std::vector<float> got = w.forward(x, nullptr, nullptr, shuffled).to_vector(), want = full.to_vector();
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
  }
}

TEST(Vit, PatchDropoutGradientsMatchFiniteDifferences) {
  for (const auto& [learned, shifted] : {std::pair{true, false}, std::pair{true, true}}) {
    const models::VitConfig c = tiny(learned, shifted);
    models::VitWeights w = models::VitWeights::initialized(c, 3);
    perturb(w.parameters(), 7);
    const Tensor x = images(3, c, 11);
    const Tensor weights = randn({3, c.classes}, 13);
    const std::vector<std::int64_t> kept = {1, 3, 0, 2, 2, 3};  // 2 of the 4 patches each
    models::VitWeights grads = models::VitWeights::zeros_like(c);
    models::VitWeights::Record record;
    const Tensor logits = w.forward(x, nullptr, &record, kept);
    w.backward(weights, record, grads);
    auto loss = [&] { return dot(w.forward(x, nullptr, nullptr, kept), weights); };
    EXPECT_NEAR(dot(logits, weights), loss(), 1e-5 * (1 + std::abs(loss())));
    EXPECT_GT(std::abs(loss() - dot(w.forward(x), weights)), 1e-3) << "dropping patches changes the logits";
    auto p = w.parameters(), g = grads.parameters();
    for (std::size_t i = 0; i < p.size(); ++i)
      check_gradient(*p[i].second, *g[i].second, loss, p[i].first + (shifted ? " (shifted)" : ""));
    // With every image keeping patches 1 and 3, the positions of patches 0 and 2
    // (pos_embed rows 1 and 3) take no part, and get no gradient.
    const std::vector<std::int64_t> one = {1, 3, 1, 3, 1, 3};
    models::VitWeights g1 = models::VitWeights::zeros_like(c);
    models::VitWeights::Record r1;
    (void)w.forward(x, nullptr, &r1, one);
    w.backward(weights, r1, g1);
    const std::vector<float> dpos = g1.pos_embed.to_vector();
    for (const std::int64_t row : {1, 3})  // patches 0 and 2: tokens 1 and 3 of pos_embed
      for (std::int64_t j = 0; j < c.dim; ++j) EXPECT_EQ(dpos[static_cast<std::size_t>(row * c.dim + j)], 0.0f) << row;
  }
}

TEST(Vit, BadInputNamed) {
  models::VitConfig c = tiny();
  c.patch_size = 4;
  expect_error([&] { models::VitWeights::initialized(c, 1); }, "must divide image_size");
  c = tiny();
  c.heads = 3;
  expect_error([&] { models::VitWeights::initialized(c, 1); }, "multiple of heads");
  c = tiny(false);
  c.dim = 6;
  c.heads = 2;
  expect_error([&] { models::VitWeights::initialized(c, 1); }, "multiple of 4");
  c = tiny(true, true);
  c.patch_size = 1;
  expect_error([&] { models::VitWeights::initialized(c, 1); }, "shifted patches need patch_size >= 2");
  // a plain model's weights do not fit images that a shifted model of the same shape takes,
  // and the reverse: the patch width differs (5·C·P² against C·P²)
  const models::VitWeights shifted = models::VitWeights::initialized(tiny(true, true), 1);
  expect_error([&] { shifted.forward(randn({1, 10, 6, 6}, 1)); }, "do not fit");
  const models::VitWeights w = models::VitWeights::initialized(tiny(), 1);
  expect_error([&] { w.forward(randn({1, 2, 9, 9}, 1)); }, "do not fit");
  expect_error([&] { w.forward(randn({1, 1, 6, 6}, 1)); }, "do not fit");
  expect_error([&] { w.forward(randn({2, 6, 6}, 1)); }, "(B, C, H, W)");
  expect_error([&] { qkv::models::patchify(randn({1, 1, 7, 8}, 1), 4); }, "must divide");
  // patch dropout's kept patches: (B, K), 1 <= K <= N, distinct, in range
  const Tensor x = images(2, tiny(), 1);
  expect_error([&] { w.forward(x, nullptr, nullptr, std::vector<std::int64_t>{0, 1, 2}); }, "must be (B, K)");
  expect_error([&] { w.forward(x, nullptr, nullptr, std::vector<std::int64_t>(10, 0)); }, "1 <= K <= 4");
  expect_error([&] { w.forward(x, nullptr, nullptr, std::vector<std::int64_t>{0, 4, 1, 2}); },
               "kept patch 4 of image 0 is outside [0, 4) or kept twice");
  expect_error([&] { w.forward(x, nullptr, nullptr, std::vector<std::int64_t>{0, 1, 2, 2}); },
               "kept patch 2 of image 1");
  expect_error([&] { w.forward(x, nullptr, nullptr, std::vector<std::int64_t>{-1, 1, 2, 3}); }, "kept patch -1");
}
