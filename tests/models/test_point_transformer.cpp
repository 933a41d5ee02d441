// The Point Transformer classifier (qkv/point_transformer.h): the sampling of images into
// points (counts, ranges, only inked pixels, raster order, uniformity, determinism, black
// and one-pixel images, the window of intensities each point carries), every parameter's
// gradient against finite differences, the
// model's invariance to the order of its points, and bad configs and shapes named.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "attention/expect_error.h"
#include "nn/check.h"
#include "qkv/point_transformer.h"

namespace {

using qkv::Tensor;
using namespace qkv::testing;
namespace models = qkv::models;

// A (H, W) image whose pixels are 0 with probability `black`, else uniform in [1, 255].
std::vector<std::uint8_t> random_image(std::int64_t H, std::int64_t W, double black, std::uint64_t seed) {
  qkv::Rng rng(seed);
  std::vector<std::uint8_t> px(static_cast<std::size_t>(H * W));
  for (auto& p : px) p = rng.uniform() < black ? 0 : static_cast<std::uint8_t>(1 + rng.uniform_int(255));
  return px;
}

// The pixel a point came from: (row, column), inverting x = 2·column/(W − 1) − 1.
std::pair<std::int64_t, std::int64_t> pixel_of(const float* point, std::int64_t H, std::int64_t W) {
  return {std::llround((point[1] + 1.0) * static_cast<double>(H - 1) / 2.0),
          std::llround((point[0] + 1.0) * static_cast<double>(W - 1) / 2.0)};
}

// Checks that every point of `points` (N, 3) is a pixel of `px` brighter than the ink
// threshold, with that pixel's exact coordinates and intensity, in raster order; returns how
// many times each raster index was drawn.
std::map<std::int64_t, int> check_points(const Tensor& points, const std::vector<std::uint8_t>& px, std::int64_t H,
                                         std::int64_t W, std::int64_t N, const std::string& what) {
  std::map<std::int64_t, int> drawn;
  EXPECT_EQ(points.shape(), (qkv::Shape{N, 3})) << what;
  if (points.shape() != qkv::Shape{N, 3}) return drawn;
  const auto v = points.to_vector();
  std::int64_t previous = -1;
  for (std::int64_t n = 0; n < N; ++n) {
    const float* p = v.data() + n * 3;
    EXPECT_GE(p[0], -1.0f) << what << " point " << n;
    EXPECT_LE(p[0], 1.0f) << what << " point " << n;
    EXPECT_GE(p[1], -1.0f) << what << " point " << n;
    EXPECT_LE(p[1], 1.0f) << what << " point " << n;
    const auto [row, column] = pixel_of(p, H, W);
    const std::int64_t i = row * W + column;
    // a side of one pixel maps to 0
    EXPECT_EQ(p[0], W > 1 ? static_cast<float>(2.0 * column / static_cast<double>(W - 1) - 1.0) : 0.0f) << what << " point " << n;
    EXPECT_EQ(p[1], H > 1 ? static_cast<float>(2.0 * row / static_cast<double>(H - 1) - 1.0) : 0.0f) << what << " point " << n;
    EXPECT_GT(int{px[static_cast<std::size_t>(i)]}, models::kInkThreshold) << what << " point " << n << " not inked";
    EXPECT_EQ(p[2], static_cast<float>(px[static_cast<std::size_t>(i)] / 255.0)) << what << " point " << n;
    EXPECT_GE(i, previous) << what << ": not in raster order at point " << n;
    previous = i;
    ++drawn[i];
  }
  return drawn;
}

std::int64_t inked_count(const std::vector<std::uint8_t>& px) {
  return std::count_if(px.begin(), px.end(), [](std::uint8_t p) { return p > models::kInkThreshold; });
}

models::PointTransformerConfig tiny() {
  models::PointTransformerConfig c;
  c.points = 10;
  c.patch_size = 3;  // 2 + 9 features per point
  c.neighbors = 4;
  c.dim = 6;
  c.blocks = 2;
  c.pos_mlp_hidden = 5;
  c.attn_mlp_hidden_mult = 2;
  c.head_hidden = 7;
  c.classes = 3;
  return c;
}

// (B, N, F) points at continuous random positions in [−1, 1]² (no ties among distances),
// F − 2 intensities in [0, 1]; F = 11 is tiny()'s 3 × 3 window.
Tensor random_points(std::int64_t B, std::int64_t N, std::uint64_t seed, std::int64_t F = 11) {
  qkv::Rng rng(seed);
  Tensor t = Tensor::empty({B, N, F});
  float* p = t.data_as<float>();
  for (std::int64_t i = 0; i < B * N; ++i) {
    p[i * F] = static_cast<float>(2 * rng.uniform() - 1);
    p[i * F + 1] = static_cast<float>(2 * rng.uniform() - 1);
    for (std::int64_t f = 2; f < F; ++f) p[i * F + f] = static_cast<float>(rng.uniform());
  }
  return t;
}

}  // namespace

TEST(PointSampling, DistinctInkedPixelsWhenEnough) {
  const std::int64_t H = 28, W = 28;
  for (const std::int64_t N : {1, 64, 128}) {
    const auto px = random_image(H, W, 0.5, 3 + static_cast<std::uint64_t>(N));
    ASSERT_GE(inked_count(px), N);
    const Tensor points = models::image_to_points(px, H, W, N, 7, 11);
    const auto drawn = check_points(points, px, H, W, N, "N = " + std::to_string(N));
    EXPECT_EQ(static_cast<std::int64_t>(drawn.size()), N) << "N = " << N << ": a pixel drawn twice";
  }
}

TEST(PointSampling, ExactlyAsManyInkedAsPointsTakesEachOnce) {
  const std::int64_t H = 5, W = 7;
  std::vector<std::uint8_t> px(static_cast<std::size_t>(H * W), 0);
  for (std::size_t i = 0; i < px.size(); i += 3) px[i] = static_cast<std::uint8_t>(10 + i);
  const std::int64_t M = inked_count(px);
  const auto drawn = check_points(models::image_to_points(px, H, W, M, 1, 2), px, H, W, M, "N = M");
  EXPECT_EQ(static_cast<std::int64_t>(drawn.size()), M);
}

TEST(PointSampling, FewerInkedThanPointsRepeatsEvenly) {
  const std::int64_t H = 6, W = 9;
  std::vector<std::uint8_t> px(static_cast<std::size_t>(H * W), 0);
  for (const int i : {0, 8, 20, 45, 53}) px[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(40 + i);  // corners
  for (const std::int64_t N : {6, 12, 13, 17}) {
    for (std::uint64_t counter = 0; counter < 20; ++counter) {
      const std::string what = "N = " + std::to_string(N) + " counter " + std::to_string(counter);
      const auto drawn = check_points(models::image_to_points(px, H, W, N, 5, counter), px, H, W, N, what);
      ASSERT_EQ(drawn.size(), 5u) << what << ": every inked pixel at least once";
      int extra = 0;
      for (const auto& [i, k] : drawn) {
        EXPECT_TRUE(k == N / 5 || k == N / 5 + 1) << what << ": pixel " << i << " drawn " << k << " times";
        extra += k - static_cast<int>(N / 5);
      }
      EXPECT_EQ(extra, N % 5) << what;
    }
  }
  // The corners map onto the corners of [−1, 1]², intensity /255.
  const auto v = models::image_to_points(px, H, W, 5, 0, 0).to_vector();
  const std::vector<float> want = {-1, -1, 40 / 255.f, 1, -1, 48 / 255.f, -1, 1, 85 / 255.f, 1, 1, 93 / 255.f};
  for (std::size_t j = 0; j < want.size(); ++j) {
    const std::size_t at = j < 6 ? j : j + 3;  // skip point 2 (pixel 20, inside)
    EXPECT_FLOAT_EQ(v[at], want[j]) << "value " << at;
  }
}

TEST(PointSampling, BlackAndOnePixelImages) {
  for (const auto [H, W] : {std::pair<std::int64_t, std::int64_t>{28, 28}, {1, 1}, {1, 5}, {4, 1}}) {
    const std::vector<std::uint8_t> black(static_cast<std::size_t>(H * W), 0);
    const Tensor points = models::image_to_points(black, H, W, 16, 3, 4);
    ASSERT_EQ(points.shape(), (qkv::Shape{16, 3}));
    for (float v : points.to_vector()) EXPECT_EQ(v, 0.0f) << H << " x " << W << ": black gives the dark centre";
    std::vector<std::uint8_t> one = black;
    one.back() = 255;
    const auto drawn = check_points(models::image_to_points(one, H, W, 16, 3, 4), one, H, W, 16,
                                    std::to_string(H) + " x " + std::to_string(W) + " one pixel");
    ASSERT_EQ(drawn.size(), 1u);
    EXPECT_EQ(drawn.begin()->second, 16);
    const auto v = models::image_to_points(one, H, W, 1, 0, 0).to_vector();
    EXPECT_EQ(v[0], W > 1 ? 1.0f : 0.0f);  // a side of one pixel is its centre
    EXPECT_EQ(v[1], H > 1 ? 1.0f : 0.0f);
    EXPECT_EQ(v[2], 1.0f);
  }
}

TEST(PointSampling, DeterministicPerSeedAndCounterAndBatched) {
  const std::int64_t H = 28, W = 28, N = 32, B = 4;
  std::vector<std::uint8_t> batch;
  for (std::int64_t b = 0; b < B; ++b) {
    const auto px = random_image(H, W, 0.6, 100 + static_cast<std::uint64_t>(b));
    batch.insert(batch.end(), px.begin(), px.end());
  }
  const std::span<const std::uint8_t> first(batch.data(), static_cast<std::size_t>(H * W));
  const auto a = models::image_to_points(first, H, W, N, 9, 1000).to_vector();
  EXPECT_EQ(a, models::image_to_points(first, H, W, N, 9, 1000).to_vector());
  EXPECT_NE(a, models::image_to_points(first, H, W, N, 9, 1001).to_vector()) << "the counter is ignored";
  EXPECT_NE(a, models::image_to_points(first, H, W, N, 10, 1000).to_vector()) << "the seed is ignored";
  const Tensor all = models::images_to_points(batch, B, H, W, N, 9, 1000);
  ASSERT_EQ(all.shape(), (qkv::Shape{B, N, 3}));
  const auto v = all.to_vector();
  for (std::int64_t b = 0; b < B; ++b) {
    const std::span<const std::uint8_t> image(batch.data() + b * H * W, static_cast<std::size_t>(H * W));
    const auto want = models::image_to_points(image, H, W, N, 9, 1000 + static_cast<std::uint64_t>(b)).to_vector();
    EXPECT_TRUE(std::equal(want.begin(), want.end(), v.begin() + b * N * 3)) << "image " << b;
  }
  EXPECT_EQ(models::images_to_points({}, 0, H, W, N, 9).shape(), (qkv::Shape{0, N, 3}));
}

TEST(PointSampling, UniformOverInkedPixelsWhateverTheirIntensity) {
  // 20 inked pixels of intensities 1..255, N = 5: over 4000 counters each pixel should be
  // drawn 4000·5/20 = 1000 times, binomial sd √(4000·¼·¾) ≈ 27; 6 sd is 165.
  const std::int64_t H = 10, W = 10, N = 5, draws = 4000;
  std::vector<std::uint8_t> px(static_cast<std::size_t>(H * W), 0);
  for (int k = 0; k < 20; ++k) px[static_cast<std::size_t>(k * 5 + k % 3)] = static_cast<std::uint8_t>(1 + k * 13);
  std::map<std::int64_t, int> total;
  for (std::int64_t counter = 0; counter < draws; ++counter) {
    const auto v = models::image_to_points(px, H, W, N, 17, static_cast<std::uint64_t>(counter)).to_vector();
    std::set<std::int64_t> seen;
    for (std::int64_t n = 0; n < N; ++n) {
      const auto [row, column] = pixel_of(v.data() + n * 3, H, W);
      seen.insert(row * W + column);
      ++total[row * W + column];
    }
    ASSERT_EQ(static_cast<std::int64_t>(seen.size()), N) << "counter " << counter;
  }
  ASSERT_EQ(total.size(), 20u);
  for (const auto& [i, k] : total) EXPECT_NEAR(k, 1000, 165) << "pixel " << i << " (intensity " << int{px[static_cast<std::size_t>(i)]} << ")";
}

// Each point of a window S carries the S × S pixels around its own, row by row, 0 outside
// the image; its x, y and the points drawn are those of S = 1, whose intensity is the
// window's centre.
TEST(PointSampling, EachPointCarriesTheWindowAroundItsPixel) {
  constexpr std::int64_t H = 7, W = 9, N = 20;
  const std::vector<std::uint8_t> px = random_image(H, W, 0.5, 11);
  const Tensor alone = models::image_to_points(px, H, W, N, 4, 17);  // (N, 3)
  const auto a = alone.to_vector();
  for (const std::int64_t S : {1, 3, 5, 15}) {
    const std::int64_t F = 2 + S * S, r = S / 2;
    const Tensor points = models::image_to_points(px, H, W, N, 4, 17, S);
    ASSERT_EQ(points.shape(), (qkv::Shape{N, F})) << "S = " << S;
    const auto v = points.to_vector();
    std::int64_t outside = 0;
    for (std::int64_t n = 0; n < N; ++n) {
      const float* p = v.data() + n * F;
      EXPECT_EQ(p[0], a[static_cast<std::size_t>(n * 3)]) << "S = " << S << " point " << n;
      EXPECT_EQ(p[1], a[static_cast<std::size_t>(n * 3 + 1)]) << "S = " << S << " point " << n;
      EXPECT_EQ(p[2 + (F - 2) / 2], a[static_cast<std::size_t>(n * 3 + 2)]) << "S = " << S << " point " << n;
      const auto [row, column] = pixel_of(p, H, W);
      for (std::int64_t dr = -r; dr <= r; ++dr)
        for (std::int64_t dc = -r; dc <= r; ++dc) {
          const std::int64_t pr = row + dr, pc = column + dc;
          const bool inside = pr >= 0 && pr < H && pc >= 0 && pc < W;
          outside += !inside;
          const float want = inside ? static_cast<float>(px[static_cast<std::size_t>(pr * W + pc)] / 255.0) : 0.0f;
          ASSERT_EQ(p[2 + (dr + r) * S + (dc + r)], want) << "S = " << S << " point " << n << " offset " << dr << ", " << dc;
        }
    }
    if (S >= 5) EXPECT_GT(outside, 0) << "S = " << S << ": no window reached past the edge";
    // The batched sampler: the same points per image.
    std::vector<std::uint8_t> two = px;
    two.insert(two.end(), px.rbegin(), px.rend());
    const Tensor batch = models::images_to_points(two, 2, H, W, N, 4, 17, S);
    ASSERT_EQ(batch.shape(), (qkv::Shape{2, N, F}));
    const auto b = batch.to_vector();
    EXPECT_TRUE(std::equal(v.begin(), v.end(), b.begin())) << "S = " << S;
  }
  // A black image: N copies of the centre, all zeros.
  const Tensor black = models::image_to_points(std::vector<std::uint8_t>(H * W, 0), H, W, N, 0, 0, 3);
  for (const float f : black.to_vector()) EXPECT_EQ(f, 0.0f);
}

TEST(PointTransformer, DefaultsFitTheBudget) {
  const models::PointTransformerConfig c;
  c.check();
  // The header's estimate: 13.9 MFLOP per image forward, well under the ViT's ~86.
  EXPECT_DOUBLE_EQ(c.flops(), 679936.0 + 2 * (1310720.0 + 5308416.0) + 9472.0);
  EXPECT_LT(c.flops(), 15e6);
  models::PointTransformerWeights w = models::PointTransformerWeights::initialized(c, 1);
  std::int64_t count = 0;
  for (auto& [name, t] : w.parameters()) count += t->numel();
  EXPECT_EQ(count, c.num_parameters());
}

TEST(PointTransformer, GradientsMatchFiniteDifferences) {
  // Continuous positions with a 3 × 3 window of random intensities, and points sampled
  // from a sparse image (repeats: ties among distances and in the max pooling, which must
  // pick one point consistently), each its own pixel. Sampled with a 3 × 3 window, a few
  // entries were off at each of the 4 dense images tried: mostly black windows give many
  // equal pre-activations, and some sat within this step of a ReLU kink. On this sparse
  // image with 3 × 3 windows the float64 torch twin (tests/python/test_point_transformer.py)
  // agreed with every gradient to 1e-4 over 20 weight seeds (attn_mlp.2's bias aside, whose
  // gradient is rounding alone), so the gradients, not the quotients, were right.
  models::PointTransformerConfig pixel_alone = tiny();
  pixel_alone.patch_size = 1;
  std::vector<std::uint8_t> sparse(64, 0);
  for (const int i : {3, 9, 22, 40, 41, 58}) sparse[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(30 + 3 * i);
  std::vector<std::uint8_t> pixels = sparse;
  const auto dense = random_image(8, 8, 0.3, 5);
  pixels.insert(pixels.end(), dense.begin(), dense.end());
  const std::vector<std::tuple<std::string, models::PointTransformerConfig, Tensor>> inputs = {
      {"random points", tiny(), random_points(2, tiny().points, 21)},
      {"sampled points", pixel_alone, models::images_to_points(pixels, 2, 8, 8, pixel_alone.points, 3)}};
  for (const auto& [kind, c, x] : inputs) {
    models::PointTransformerWeights w = models::PointTransformerWeights::initialized(c, 3);
    perturb(w.parameters(), 7);  // unit gains and zero biases would hide dropped terms
    const Tensor weights = randn({2, c.classes}, 13);  // L = Σ logits ∘ weights
    models::PointTransformerWeights grads = models::PointTransformerWeights::zeros_like(c);
    models::PointTransformerWeights::Record record;
    const Tensor logits = w.forward(x, &record);
    ASSERT_EQ(logits.shape(), (qkv::Shape{2, c.classes}));
    w.backward(weights, record, grads);
    auto loss = [&] { return dot(w.forward(x), weights); };
    EXPECT_NEAR(dot(logits, weights), loss(), 1e-5 * (1 + std::abs(loss()))) << kind;
    // The model is piecewise smooth: ReLUs in the embedding, the blocks, the head and both
    // of attention's MLPs, and the max pooling. A step of 1e-2 made some of them cross a
    // kink (38 entries off, the quotient moving towards the analytic value as h shrank);
    // 1e-3 and 5e-4 both pass. At 5e-4 the f32 rounding of the loss (~1e-6 on 6 logits of
    // order 1, after a few layers) costs ~1e-3 in the quotient, under check_gradient's
    // 2e-3·(1 + max|g|) bound (tests/nn/test_vector_attention.cpp makes the same choice).
    constexpr float h = 5e-4f;
    auto p = w.parameters(), g = grads.parameters();
    ASSERT_EQ(p.size(), g.size());
    ASSERT_EQ(p.size(), 4u + 2u * 15u + 2u + 4u);
    std::int64_t count = 0;
    for (std::size_t i = 0; i < p.size(); ++i) {
      EXPECT_EQ(p[i].first, g[i].first);
      count += p[i].second->numel();
      check_gradient(*p[i].second, *g[i].second, loss, p[i].first + " (" + kind + ")", h);
    }
    EXPECT_EQ(count, c.num_parameters());
    // backward adds: a second pass doubles every gradient
    models::PointTransformerWeights twice = models::PointTransformerWeights::zeros_like(c);
    w.backward(weights, record, twice);
    w.backward(weights, record, twice);
    auto g2 = twice.parameters();
    for (std::size_t i = 0; i < g.size(); ++i) {
      const auto once = g[i].second->to_vector(), two = g2[i].second->to_vector();
      for (std::size_t j = 0; j < once.size(); ++j)
        ASSERT_NEAR(two[j], 2 * once[j], 1e-6 * (1 + std::abs(once[j]))) << g[i].first << " entry " << j;
    }
  }
}

TEST(PointTransformer, NamesFollowTheModuleTree) {
  models::PointTransformerWeights w = models::PointTransformerWeights::initialized(tiny(), 1);
  std::vector<std::string> names;
  for (auto& [name, t] : w.parameters()) names.push_back(name);
  const std::vector<std::string> want_first = {
      "embed.0.weight", "embed.0.bias", "embed.2.weight", "embed.2.bias", "blocks.0.norm.weight",
      "blocks.0.norm.bias", "blocks.0.linear1.weight", "blocks.0.linear1.bias", "blocks.0.attn.to_qkv.weight",
      "blocks.0.attn.pos_mlp.0.weight", "blocks.0.attn.pos_mlp.0.bias", "blocks.0.attn.pos_mlp.2.weight",
      "blocks.0.attn.pos_mlp.2.bias", "blocks.0.attn.attn_mlp.0.weight", "blocks.0.attn.attn_mlp.0.bias",
      "blocks.0.attn.attn_mlp.2.weight", "blocks.0.attn.attn_mlp.2.bias", "blocks.0.linear2.weight",
      "blocks.0.linear2.bias"};
  ASSERT_GE(names.size(), want_first.size());
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(want_first.size())), want_first);
  const std::vector<std::string> want_last = {"norm.weight", "norm.bias", "head.0.weight", "head.0.bias",
                                              "head.2.weight", "head.2.bias"};
  EXPECT_EQ(std::vector<std::string>(names.end() - 6, names.end()), want_last);
  EXPECT_EQ(w.parameters()[0].second->shape(), (qkv::Shape{6, 11}));  // embed.0.weight (C, 2 + S²)
  EXPECT_EQ(w.parameters()[9].second->shape(), (qkv::Shape{5, 2}));  // pos_mlp.0.weight (Hp, 2)
  EXPECT_EQ(w.parameters().end()[-4].second->shape(), (qkv::Shape{7, 12}));  // head.0 (Hh, 2C)
}

TEST(PointTransformer, InvariantToTheOrderOfPoints) {
  const models::PointTransformerConfig c = tiny();
  models::PointTransformerWeights w = models::PointTransformerWeights::initialized(c, 2);
  perturb(w.parameters(), 4);
  const Tensor x = random_points(2, 12, 8);
  const std::int64_t F = x.size(2);
  // reversed point order
  Tensor reversed = Tensor::empty(x.shape());
  const auto v = x.to_vector();
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t n = 0; n < 12; ++n)
      for (std::int64_t k = 0; k < F; ++k)
        reversed.data_as<float>()[(b * 12 + n) * F + k] = v[static_cast<std::size_t>((b * 12 + 11 - n) * F + k)];
  const auto a = w.forward(x).to_vector(), r = w.forward(reversed).to_vector();
  // Only the mean's summation order and the products' row order differ: f32 rounding.
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], r[i], 1e-5 * (1 + std::abs(a[i]))) << "logit " << i;
  // Fewer points than neighbours: each attends to all of them.
  const Tensor three = random_points(1, 3, 9);
  const Tensor out = w.forward(three);
  EXPECT_EQ(out.shape(), (qkv::Shape{1, c.classes}));
  for (float y : out.to_vector()) EXPECT_TRUE(std::isfinite(y));
}

TEST(PointTransformer, BadInputNamed) {
  models::PointTransformerConfig c = tiny();
  c.neighbors = 11;
  expect_error([&] { models::PointTransformerWeights::initialized(c, 1); }, "must not exceed points");
  c = tiny();
  c.dim = 0;
  expect_error([&] { models::PointTransformerWeights::initialized(c, 1); }, "dim = 0");
  c = tiny();
  c.blocks = -1;
  expect_error([&] { models::PointTransformerWeights::zeros_like(c); }, "blocks >= 0");
  for (const std::int64_t S : {0, 4, 17}) {
    c = tiny();
    c.patch_size = S;
    expect_error([&] { models::PointTransformerWeights::initialized(c, 1); },
                 "patch_size (S) must be odd and in [1, 15], got " + std::to_string(S));
  }
  const models::PointTransformerWeights w = models::PointTransformerWeights::initialized(tiny(), 1);
  // points of another window than embed.0 reads (3: a 1 × 1 window's)
  expect_error([&] { w.forward(randn({2, 10, 3}, 1)); }, "(B, N, 11)");
  expect_error([&] { w.forward(randn({10, 11}, 1)); }, "(B, N, 11)");
  expect_error([&] { w.forward(Tensor::zeros({1, 0, 11})); }, "B, N >= 1");
  expect_error([&] { w.forward(randn({1, 4, 11}, 1).to(qkv::DType::f64)); }, "must be f32");
  models::PointTransformerWeights::Record record;
  w.forward(random_points(2, 10, 1), &record);
  models::PointTransformerWeights grads = models::PointTransformerWeights::zeros_like(tiny());
  expect_error([&] { w.backward(randn({2, 4}, 1), record, grads); }, "dlogits must be (B = 2, classes = 3)");
  c = tiny();
  c.blocks = 1;
  models::PointTransformerWeights one_block = models::PointTransformerWeights::zeros_like(c);
  expect_error([&] { w.backward(randn({2, 3}, 1), record, one_block); }, "2 blocks");
  const std::vector<std::uint8_t> px(12, 1);
  expect_error([&] { models::image_to_points(px, 3, 5, 4, 0, 0); }, "height x width = 15 values, got 12");
  expect_error([&] { models::image_to_points(px, 3, 4, 0, 0, 0); }, "points (N) must be >= 1");
  expect_error([&] { models::image_to_points({}, 0, 4, 4, 0, 0); }, "height and width must be >= 1");
  expect_error([&] { models::images_to_points(px, 2, 3, 4, 4, 0); }, "count x height x width = 2 x 3 x 4");
  expect_error([&] { models::image_to_points(px, 3, 4, 4, 0, 0, 2); }, "patch_size must be odd and in [1, 15], got 2");
  expect_error([&] { models::images_to_points(px, 1, 3, 4, 4, 0, 0, 17); }, "patch_size must be odd");
}
