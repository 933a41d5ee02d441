// The image classification task (vision/vision.h): augmentation against a naive twin, batches
// as pure functions of their seed, the split, reading images of every kind with bad input
// named, a tiny training run that learns, --resume reproducing an uninterrupted run bit for
// bit, and model directories loaded back (another kind of model refused); the same for the
// point model, whose input is the images' sampled points.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <tuple>

#include "attention/expect_error.h"
#include "vision/idx.h"
#include "qkv/safetensors.h"
#include "vision/vision.h"
#include "temp_dir.h"

namespace {

namespace vision = qkv::vision;
using qkv::testing::expect_error;

// n images of h x w whose pixels encode (image, y, x), labels i % 10.
vision::Images synthetic(std::int64_t n, std::int64_t h = 28, std::int64_t w = 28) {
  vision::Images im;
  im.count = n;
  im.height = h;
  im.width = w;
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t y = 0; y < h; ++y)
      for (std::int64_t x = 0; x < w; ++x) im.pixels.push_back(static_cast<std::uint8_t>((i * 37 + y * 7 + x * 3) % 251 + 1));
    im.labels.push_back(i % 10);
  }
  return im;
}

float normalised(int p) { return (static_cast<float>(p) / 255.0f - vision::kPixelMean) / vision::kPixelStd; }

}  // namespace

TEST(Vision, InputWithoutAugmentationIsNormalisedPixels) {
  const vision::Images im = synthetic(3, 5, 4);
  const std::int64_t idx[2] = {2, 0};
  const qkv::Tensor t = vision::to_input(im, idx);
  ASSERT_EQ(t.shape(), (qkv::Shape{2, 1, 5, 4}));
  const auto v = t.to_vector();
  for (int b = 0; b < 2; ++b)
    for (int k = 0; k < 20; ++k)
      EXPECT_EQ(v[static_cast<std::size_t>(b * 20 + k)], normalised(im.pixels[static_cast<std::size_t>(idx[b] * 20 + k)]));
}

TEST(Vision, AugmentationIsAShiftedPaddedCropAndAFlip) {
  // Each output image must equal one of the (2·pad+1)² shifts, flipped or not, of its source
  // (padding black), and over many images every shift and both flips must occur.
  const vision::Images im = synthetic(400, 6, 7);
  std::vector<std::int64_t> idx;
  for (std::int64_t i = 0; i < 400; ++i) idx.push_back(i);
  const vision::Augmentation aug{2, true};
  const auto v = vision::to_input(im, idx, &aug, 99).to_vector();
  std::set<std::tuple<int, int, bool>> seen;
  for (std::int64_t b = 0; b < 400; ++b) {
    bool found = false;
    for (int dy = -2; dy <= 2 && !found; ++dy)
      for (int dx = -2; dx <= 2 && !found; ++dx)
        for (const bool flip : {false, true}) {
          bool same = true;
          for (int y = 0; y < 6 && same; ++y)
            for (int x = 0; x < 7 && same; ++x) {
              const int sy = y + dy, sx = (flip ? 6 - x : x) + dx;
              const int p = sy >= 0 && sy < 6 && sx >= 0 && sx < 7 ? im.pixels[static_cast<std::size_t>((b * 6 + sy) * 7 + sx)] : 0;
              same = v[static_cast<std::size_t>((b * 6 + y) * 7 + x)] == normalised(p);
            }
          if (same) {
            found = true;
            seen.insert({dy, dx, flip});
            break;
          }
        }
    ASSERT_TRUE(found) << "image " << b << " is no shift or flip of its source";
  }
  EXPECT_EQ(seen.size(), 50u);  // 25 shifts x 2 flips
  const vision::Augmentation none{0, false};
  EXPECT_EQ(vision::to_input(im, idx, &none, 99).to_vector(), vision::to_input(im, idx).to_vector());
}

TEST(Vision, RandomErasingSetsOneRectangleToTheMeanPixel) {
  // Erasing changes nothing but one rectangle (all kErasePixel) of the cropped and flipped
  // image, which is the image without erasing elsewhere; with probability `erase`; of
  // 2-40% of the area (the mean near 21%), tall and wide, anywhere in the image.
  const std::int64_t n = 2000, H = 28, W = 28;
  const vision::Images im = synthetic(n, H, W);
  std::vector<std::int64_t> idx;
  for (std::int64_t i = 0; i < n; ++i) idx.push_back(i);
  const vision::Augmentation plain{2, true, 0.0}, erasing{2, true, 0.5}, always{2, true, 1.0};
  const std::vector<std::uint8_t> a = vision::augmented_pixels(im, idx, &plain, 5);
  const std::vector<std::uint8_t> e = vision::augmented_pixels(im, idx, &erasing, 5);
  std::int64_t erased = 0, tall = 0, wide = 0, top = H, left = W, bottom = 0, right = 0;
  double area_sum = 0.0;
  for (std::int64_t b = 0; b < n; ++b) {
    const vision::ErasedRectangle r = vision::erased_rectangle(H, W, 0.5, 5, b);
    const bool hit = r.height > 0;
    if (hit) {
      ASSERT_TRUE(r.width >= 1 && r.y0 >= 0 && r.x0 >= 0 && r.y0 + r.height <= H && r.x0 + r.width <= W) << b;
      const double fraction = static_cast<double>(r.height * r.width) / static_cast<double>(H * W);
      EXPECT_TRUE(fraction >= 0.015 && fraction <= 0.45) << "image " << b << ": " << fraction;
      ++erased;
      area_sum += fraction;
      tall += r.height > r.width;
      wide += r.width > r.height;
      top = std::min(top, r.y0), left = std::min(left, r.x0);
      bottom = std::max(bottom, r.y0 + r.height), right = std::max(right, r.x0 + r.width);
    }
    for (std::int64_t y = 0; y < H; ++y)
      for (std::int64_t x = 0; x < W; ++x) {
        const bool inside = hit && y >= r.y0 && y < r.y0 + r.height && x >= r.x0 && x < r.x0 + r.width;
        const std::size_t k = static_cast<std::size_t>((b * H + y) * W + x);
        ASSERT_EQ(e[k], inside ? vision::kErasePixel : a[k]) << "image " << b << " at " << y << ", " << x;
      }
  }
  EXPECT_NEAR(static_cast<double>(erased) / n, 0.5, 0.05);
  EXPECT_NEAR(area_sum / static_cast<double>(erased), 0.2, 0.03);
  EXPECT_GT(tall, erased / 4);
  EXPECT_GT(wide, erased / 4);
  EXPECT_EQ(top, 0);
  EXPECT_EQ(left, 0);
  EXPECT_EQ(bottom, H);
  EXPECT_EQ(right, W);
  // erase = 1 erases every image; the rectangles are those of erase = 0.5's draws where
  // both erase (the probability draw is the only one that depends on erase).
  const std::vector<std::uint8_t> all = vision::augmented_pixels(im, idx, &always, 5);
  for (std::int64_t b = 0; b < n; ++b) {
    const vision::ErasedRectangle r = vision::erased_rectangle(H, W, 1.0, 5, b);
    ASSERT_GT(r.height * r.width, 0) << b;
    const vision::ErasedRectangle half = vision::erased_rectangle(H, W, 0.5, 5, b);
    if (half.height > 0) EXPECT_TRUE(half.y0 == r.y0 && half.x0 == r.x0 && half.height == r.height && half.width == r.width);
    EXPECT_EQ(all[static_cast<std::size_t>((b * H + r.y0) * W + r.x0)], vision::kErasePixel);
  }
  // The model input: an erased pixel normalises to about 0.
  EXPECT_NEAR(normalised(vision::kErasePixel), 0.0f, 1e-3f);
  const vision::Augmentation bad{2, true, 1.5};
  expect_error([&] { vision::augmented_pixels(im, idx, &bad, 5); }, "erase in [0, 1]");
  const vision::Augmentation nan{2, true, std::nan("")};
  expect_error([&] { vision::augmented_pixels(im, idx, &nan, 5); }, "erase in [0, 1]");
}

TEST(Vision, BatchesArePureFunctionsCoveringTheEpoch) {
  const vision::Images im = synthetic(50, 8, 8);
  const vision::Augmentation aug;
  const vision::Batch a = vision::training_batch(im, 7, 3, 1, 16, aug);
  const vision::Batch b = vision::training_batch(im, 7, 3, 1, 16, aug);
  EXPECT_EQ(a.indices, b.indices);
  EXPECT_EQ(a.images.to_vector(), b.images.to_vector());
  EXPECT_NE(vision::training_batch(im, 7, 4, 1, 16, aug).indices, a.indices);  // another epoch, another order
  std::vector<int> hits(50, 0);
  for (std::int64_t s = 0; s < vision::steps_per_epoch(50, 16); ++s) {
    const vision::Batch batch = vision::training_batch(im, 7, 3, s, 16, aug);
    EXPECT_EQ(batch.labels.size(), s < 3 ? 16u : 2u);
    for (std::size_t k = 0; k < batch.indices.size(); ++k) {
      ++hits[static_cast<std::size_t>(batch.indices[k])];
      EXPECT_EQ(batch.labels[k], batch.indices[k] % 10);
    }
  }
  for (const int h : hits) EXPECT_EQ(h, 1);  // every image once per epoch
  expect_error([&] { vision::training_batch(im, 7, 3, 4, 16, aug); }, "step 4 outside");
}

TEST(Vision, ReadsIdxPgmAndRefusesOtherSizes) {
  qkv::testing::TempDir dir;
  qkv::io::IdxArray a;
  a.dims = {2, 28, 28};
  a.data.assign(2 * 28 * 28, 7);
  qkv::io::write_idx(dir.file("im.idx"), a);
  const vision::Images im = vision::read_images(dir.file("im.idx"));
  EXPECT_EQ(im.count, 2);
  qkv::io::IdxArray l;
  l.dims = {2};
  l.data = {3, 9};
  qkv::io::write_idx(dir.file("l.idx"), l);
  vision::Images labelled = im;
  vision::read_labels(dir.file("l.idx"), labelled);
  EXPECT_EQ(labelled.labels, (std::vector<std::int64_t>{3, 9}));
  l.dims = {3};
  l.data = {1, 2, 3};
  qkv::io::write_idx(dir.file("l3.idx"), l);
  expect_error([&] { vision::read_labels(dir.file("l3.idx"), labelled); }, "3 labels for 2 images");
  {
    std::ofstream f(dir.file("small.pgm"), std::ios::binary);
    f << "P5\n3 2\n255\n" << std::string(6, '\x10');
  }
  expect_error([&] { vision::read_images(dir.file("small.pgm")); }, "images are 2x3, the model takes 28x28");
  EXPECT_EQ(vision::read_images(dir.file("small.pgm"), 2, 3).pixels, std::vector<std::uint8_t>(6, 0x10));
  a.dims = {2, 784};
  a.data.assign(2 * 784, 1);
  qkv::io::write_idx(dir.file("flat.idx"), a);
  expect_error([&] { vision::read_images(dir.file("flat.idx")); }, "images need 3 (N, H, W)");
  {
    std::ofstream f(dir.file("text.txt"));
    f << "hello";
  }
  expect_error([&] { vision::read_images(dir.file("text.txt")); }, "text.txt");
}

namespace {

vision::FashionMnist tiny_data() {
  vision::FashionMnist d;
  // Learnable: class k's images are bright in row band k (plus a little texture).
  const auto make = [](std::int64_t n, std::uint64_t salt) {
    vision::Images im;
    im.count = n;
    im.height = im.width = 12;
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t k = (i * 7 + static_cast<std::int64_t>(salt)) % 10;
      for (std::int64_t y = 0; y < 12; ++y)
        for (std::int64_t x = 0; x < 12; ++x)
          im.pixels.push_back(static_cast<std::uint8_t>(y == k + 1 ? 230 : (x * 13 + y * 5 + i) % 40));
      im.labels.push_back(k);
    }
    return im;
  };
  d.train = make(240, 0);
  d.validation = make(60, 3);
  d.test = make(60, 5);
  return d;
}

vision::VisionTrainingOptions tiny_options(const std::string& out) {
  vision::VisionTrainingOptions o;
  o.vit.image_size = 12;
  o.vit.patch_size = 4;
  o.vit.dim = 16;
  o.vit.layers = 2;
  o.vit.heads = 2;
  o.vit.mlp_dim = 32;
  o.epochs = 12;
  o.batch = 32;
  o.peak_lr = 1e-2;  // a tiny ViT needs it: at 3e-3 torch's twin too stays near 45% after 96 steps
  o.warmup_epochs = 0.5;
  o.augment = {0, false};  // the bands must stay where they are
  o.out_dir = out;
  o.checkpoint_every = 0;
  return o;
}

// Trains with `o` until step `stop_at` (an interruption, checked), then resumes to the end.
vision::VisionTrainingResult stopped_then_resumed(vision::VisionTrainingOptions o, const vision::FashionMnist& data,
                                                  std::int64_t stop_at) {
  o.stop_at = stop_at;
  EXPECT_TRUE(vision::train_vision(o, data, nullptr).interrupted);
  o.stop_at = 0;
  o.resume = true;
  return vision::train_vision(o, data, nullptr);
}

}  // namespace

TEST(Vision, TrainingLearnsAndResumesBitForBit) {
  qkv::testing::TempDir dir;
  const vision::FashionMnist data = tiny_data();
  const vision::VisionTrainingResult whole = vision::train_vision(tiny_options(dir.file("a")), data, nullptr);
  ASSERT_EQ(whole.validation_accuracy.size(), 12u);
  EXPECT_GT(whole.test_accuracy, 0.9) << "a band per class is easy";
  EXPECT_GE(whole.best_epoch, 1);

  // Stopped at step 11 (inside epoch 2), then resumed: the same weights and accuracies.
  vision::VisionTrainingOptions o = tiny_options(dir.file("b"));
  o.stop_at = 11;
  const vision::VisionTrainingResult first = vision::train_vision(o, data, nullptr);
  EXPECT_TRUE(first.interrupted);
  EXPECT_EQ(first.steps, 11);
  EXPECT_FALSE(std::filesystem::exists(dir.file("b") + "/model.safetensors"));
  o.stop_at = 0;
  o.resume = true;
  const vision::VisionTrainingResult rest = vision::train_vision(o, data, nullptr);
  EXPECT_EQ(rest.steps, whole.steps);
  EXPECT_EQ(rest.validation_accuracy, whole.validation_accuracy);
  EXPECT_EQ(rest.test_accuracy, whole.test_accuracy);
  const qkv::SafeTensors wa = qkv::SafeTensors::open(dir.file("a") + "/model.safetensors");
  const qkv::SafeTensors wb = qkv::SafeTensors::open(dir.file("b") + "/model.safetensors");
  ASSERT_EQ(wa.names(), wb.names());
  for (const std::string& name : wa.names()) EXPECT_EQ(wa.get(name).to_vector(), wb.get(name).to_vector()) << name;

  // A changed architecture cannot resume.
  vision::VisionTrainingOptions other = tiny_options(dir.file("b"));
  other.resume = true;
  other.vit.dim = 8;
  expect_error([&] { vision::train_vision(other, data, nullptr); }, "was written by a run with other options (config '...");
}

// Patch dropout: each step's kept patches are drawn from the batch's seed, so a resumed run
// still reproduces an uninterrupted one bit for bit; dropping a quarter of the patches is
// not the run without it, yet learns the bands; limited to the first epochs, it is the
// same run until then. Bad settings are named.
TEST(Vision, PatchDropoutLearnsAndResumesBitForBit) {
  qkv::testing::TempDir dir;
  const vision::FashionMnist data = tiny_data();
  vision::VisionTrainingOptions o = tiny_options(dir.file("a"));
  o.patch_dropout = 0.25;  // 12×12 images, 4×4 patches: 7 of the 9 kept
  const vision::VisionTrainingResult whole = vision::train_vision(o, data, nullptr);
  EXPECT_GT(whole.test_accuracy, 0.8) << "validation and test see every patch (chance: 0.1)";
  const vision::VisionTrainingResult plain = vision::train_vision(tiny_options(dir.file("p")), data, nullptr);
  EXPECT_NE(whole.validation_accuracy, plain.validation_accuracy);

  o.out_dir = dir.file("b");
  EXPECT_EQ(stopped_then_resumed(o, data, 11).validation_accuracy, whole.validation_accuracy);
  const qkv::SafeTensors wa = qkv::SafeTensors::open(dir.file("a") + "/model.safetensors");
  const qkv::SafeTensors wb = qkv::SafeTensors::open(dir.file("b") + "/model.safetensors");
  for (const std::string& name : wa.names()) EXPECT_EQ(wa.get(name).to_vector(), wb.get(name).to_vector()) << name;

  // Patch dropout in the first 6 of the 12 epochs only: those 6 are the run above's, what
  // follows is another run (every patch), ending with other weights than either run's.
  vision::VisionTrainingOptions half = tiny_options(dir.file("h"));
  half.patch_dropout = 0.25;
  half.patch_dropout_epochs = 6;
  const vision::VisionTrainingResult h = vision::train_vision(half, data, nullptr);
  EXPECT_EQ(std::vector<double>(h.validation_accuracy.begin(), h.validation_accuracy.begin() + 6),
            std::vector<double>(whole.validation_accuracy.begin(), whole.validation_accuracy.begin() + 6));
  const qkv::SafeTensors wh = qkv::SafeTensors::open(dir.file("h") + "/model.safetensors");
  const qkv::SafeTensors wp = qkv::SafeTensors::open(dir.file("p") + "/model.safetensors");
  EXPECT_NE(wh.get("head.weight").to_vector(), wa.get("head.weight").to_vector());
  EXPECT_NE(wh.get("head.weight").to_vector(), wp.get("head.weight").to_vector());
  half.out_dir = dir.file("h12");
  half.patch_dropout_epochs = 12;  // = epochs: every epoch, as 0
  (void)vision::train_vision(half, data, nullptr);
  EXPECT_EQ(qkv::SafeTensors::open(dir.file("h12") + "/model.safetensors").get("head.weight").to_vector(),
            wa.get("head.weight").to_vector());

  vision::VisionTrainingOptions bad = tiny_options(dir.file("c"));
  bad.patch_dropout_epochs = 13;
  expect_error([&] { vision::train_vision(bad, data, nullptr); }, "patch dropout's epochs must be in [0, epochs = 12], got 13");
  bad.patch_dropout_epochs = -1;
  expect_error([&] { vision::train_vision(bad, data, nullptr); }, "got -1");
  bad.patch_dropout_epochs = 5;  // in range, but with no patch dropout to limit
  expect_error([&] { vision::train_vision(bad, data, nullptr); },
               "patch dropout's epochs (5) given without patch dropout");
  bad.patch_dropout_epochs = 0;
  bad.patch_dropout = 1.0;
  expect_error([&] { vision::train_vision(bad, data, nullptr); }, "patch dropout must be in [0, 1), got 1");
  bad.patch_dropout = -0.1;
  expect_error([&] { vision::train_vision(bad, data, nullptr); }, "patch dropout must be in [0, 1)");
  bad.patch_dropout = std::nan("");
  expect_error([&] { vision::train_vision(bad, data, nullptr); }, "patch dropout must be in [0, 1)");
  bad.patch_dropout = 0.25;
  bad.model = "point";
  expect_error([&] { vision::train_vision(bad, data, nullptr); }, "patch dropout applies to the vit model only");
}

TEST(Vision, ClassifierLoadsWhatTrainingWrote) {
  qkv::testing::TempDir dir;
  const vision::FashionMnist data = tiny_data();
  vision::VisionTrainingOptions o = tiny_options(dir.file("m"));
  o.epochs = 2;
  o.bf16 = true;
  const vision::VisionTrainingResult r = vision::train_vision(o, data, nullptr);
  const vision::Classifier c = vision::Classifier::load(dir.file("m"));
  const std::vector<vision::Prediction> p = c.classify(data.test, 7);  // batches of 7: a short last one
  ASSERT_EQ(p.size(), 60u);
  const vision::Evaluation e = vision::evaluate(p, data.test.labels, 10);
  // bf16 weights move the logits a little; the accuracy can differ by an image or two.
  EXPECT_NEAR(e.accuracy(), r.test_accuracy, 3.0 / 60);
  std::int64_t total = 0;
  for (const std::int64_t n : e.counts) total += n;
  EXPECT_EQ(total, 60);
  for (const auto& q : p) {
    double s = 0;
    for (const float x : q.probabilities) s += x;
    EXPECT_NEAR(s, 1.0, 1e-5);
    EXPECT_EQ(q.score, q.probabilities[static_cast<std::size_t>(q.label)]);
  }
  const std::vector<float> roll = c.rollout(data.test, 3);
  EXPECT_EQ(roll.size(), 9u);  // 3 x 3 patches
  expect_error([&] { c.classify(vision::Images{1, 28, 28, std::vector<std::uint8_t>(784), {}}); }, "takes 12x12");

  // Another kind of model directory, and a damaged one.
  std::filesystem::create_directories(dir.file("other"));
  {
    std::ofstream f(dir.file("other") + "/config.json");
    f << R"({"model_type": "qkv-recommender"})";
  }
  expect_error([&] { vision::Classifier::load(dir.file("other")); }, "not a qkv image classifier");
  std::filesystem::remove(dir.file("m") + "/model.safetensors");
  expect_error([&] { vision::Classifier::load(dir.file("m")); }, "model.safetensors");
}

// classify with tta: each image's probabilities are the mean of its own and its mirror
// image's (mirrored here by the test's own loop), so an image and its mirror get the same.
TEST(Vision, TestTimeAugmentationAveragesAnImageAndItsMirror) {
  qkv::testing::TempDir dir;
  const vision::FashionMnist data = tiny_data();
  vision::VisionTrainingOptions o = tiny_options(dir.file("m"));
  o.epochs = 2;
  vision::train_vision(o, data, nullptr);
  const vision::Classifier c = vision::Classifier::load(dir.file("m"));
  const vision::Images& im = data.test;
  const std::int64_t H = im.height, W = im.width;
  vision::Images mirror = im;
  for (std::int64_t i = 0; i < im.count; ++i)
    for (std::int64_t y = 0; y < H; ++y)
      for (std::int64_t x = 0; x < W; ++x)
        mirror.pixels[static_cast<std::size_t>((i * H + y) * W + x)] = im.pixels[static_cast<std::size_t>((i * H + y) * W + W - 1 - x)];
  const auto plain = c.classify(im, 7), plain_mirror = c.classify(mirror, 7);
  const auto tta = c.classify(im, 7, true), tta_mirror = c.classify(mirror, 7, true);
  ASSERT_EQ(tta.size(), plain.size());
  int seen_apart = 0;  // images the model tells from their mirror: the average shows there
  for (std::size_t i = 0; i < tta.size(); ++i) {
    const std::vector<float>& p = tta[i].probabilities;
    for (std::size_t k = 0; k < p.size(); ++k) {
      EXPECT_NEAR(p[k], 0.5 * (plain[i].probabilities[k] + plain_mirror[i].probabilities[k]), 1e-7) << i << ", " << k;
      EXPECT_EQ(tta_mirror[i].probabilities[k], p[k]) << i << ", " << k;
    }
    EXPECT_EQ(tta[i].label, std::max_element(p.begin(), p.end()) - p.begin()) << i;
    EXPECT_EQ(tta[i].score, p[static_cast<std::size_t>(tta[i].label)]) << i;
    seen_apart += plain[i].probabilities != plain_mirror[i].probabilities;
  }
  EXPECT_GT(seen_apart, 50) << "of " << tta.size();
}

// ---------------------------------------------------------------------------------------
// The point model behind the same loop and classifier.

namespace {

vision::VisionTrainingOptions tiny_point_options(const std::string& out) {
  vision::VisionTrainingOptions o = tiny_options(out);
  o.model = "point";
  o.point.points = 64;
  o.point.neighbors = 8;
  o.point.dim = 16;
  o.point.blocks = 1;
  o.point.head_hidden = 32;
  o.peak_lr = 1e-2;
  o.epochs = 30;  // the sampled points vary each epoch: slower than the ViT to find the band
  return o;
}

}  // namespace

TEST(Vision, PointInputIsTheImagesSampledPoints) {
  const vision::Images im = synthetic(3);
  vision::VisionNetwork net;
  net.model = "point";
  net.point.points = 50;
  net.point.patch_size = 3;  // 11 floats per point
  // Inference: each image with seed 0, counter 0, wherever it sits in the batch.
  const std::int64_t two[2] = {2, 0}, one[1] = {0};
  const std::vector<float> a = net.input(im, two).to_vector(), b = net.input(im, one).to_vector();
  ASSERT_EQ(a.size(), 2u * 50 * 11);
  EXPECT_EQ(std::vector<float>(a.begin() + 550, a.end()), b);
  const std::span<const std::uint8_t> pixels0(im.pixels.data(), 784);
  EXPECT_EQ(b, qkv::models::image_to_points(pixels0, 28, 28, 50, 0, 0, 3).to_vector());
  // Training: the augmented pixels, sampled with the batch's seed, counter = position.
  const vision::Augmentation aug{2, true};
  const std::vector<std::uint8_t> shifted = vision::augmented_pixels(im, two, &aug, 77);
  EXPECT_EQ(net.input(im, two, &aug, 77).to_vector(),
            qkv::models::images_to_points(shifted, 2, 28, 28, 50, 77, 0, 3).to_vector());
  // augmented_pixels is what to_input normalises.
  const std::vector<float> x = vision::to_input(im, two, &aug, 77).to_vector();
  for (std::size_t k = 0; k < x.size(); ++k) ASSERT_EQ(x[k], normalised(shifted[k])) << k;
}

TEST(Vision, PointModelTrainsResumesAndLoads) {
  qkv::testing::TempDir dir;
  const vision::FashionMnist data = tiny_data();
  const vision::VisionTrainingResult whole = vision::train_vision(tiny_point_options(dir.file("a")), data, nullptr);
  ASSERT_EQ(whole.validation_accuracy.size(), 30u);
  EXPECT_GT(whole.test_accuracy, 0.8) << "the bright band's points give the class";
  EXPECT_EQ(whole.num_parameters, tiny_point_options("").point.num_parameters());

  const vision::VisionTrainingResult rest = stopped_then_resumed(tiny_point_options(dir.file("b")), data, 13);
  EXPECT_EQ(rest.validation_accuracy, whole.validation_accuracy);
  EXPECT_EQ(rest.test_accuracy, whole.test_accuracy);

  // A ViT cannot resume a point model's checkpoint.
  vision::VisionTrainingOptions vit = tiny_options(dir.file("b"));
  vit.resume = true;
  expect_error([&] { vision::train_vision(vit, data, nullptr); }, "is a checkpoint of 'qkv train point', not of 'qkv train vit'");

  const vision::Classifier c = vision::Classifier::load(dir.file("a"));
  EXPECT_EQ(c.model(), "point");
  EXPECT_EQ(c.image_size(), 12);
  const std::vector<vision::Prediction> p = c.classify(data.test, 7);
  EXPECT_EQ(vision::evaluate(p, data.test.labels, 10).accuracy(), whole.test_accuracy) << "f32 weights: the same";

  const vision::Classifier::PointView v = c.point_view(data.test, 4);
  ASSERT_EQ(v.points.size(), 64u * 3);
  ASSERT_EQ(v.neighbors, 8);
  ASSERT_EQ(v.neighbor.size(), 64u * 8);
  double received = 0;
  for (std::int64_t n = 0; n < 64; ++n) {
    double row = 0;
    for (std::int64_t k = 0; k < 8; ++k) {
      const std::int64_t j = v.neighbor[static_cast<std::size_t>(n * 8 + k)];
      ASSERT_TRUE(j >= 0 && j < 64);
      row += v.weight[static_cast<std::size_t>(n * 8 + k)];
    }
    EXPECT_NEAR(row, 1.0, 1e-5) << "point " << n << ": a softmax per channel, averaged";
    EXPECT_EQ(v.neighbor[static_cast<std::size_t>(n * 8)], n) << "the nearest point is itself";
    received += v.received[static_cast<std::size_t>(n)];
  }
  EXPECT_NEAR(received, 1.0, 1e-5);
  expect_error([&] { c.rollout(data.test, 0); }, "rollout is the ViT's");
  expect_error([&] { c.point_view(data.test, 60); }, "image 60 outside");

  // A config.json whose point sizes are out of range, or whose model is unknown.
  const std::string config = dir.file("a") + "/config.json";
  std::ifstream in(config);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto rewrite = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    std::ofstream(config) << t;
  };
  rewrite("\"points\": 64", "\"points\": 1000000");
  expect_error([&] { vision::Classifier::load(dir.file("a")); }, "points <= 65536");
  rewrite("\"model\": \"point\"", "\"model\": \"cnn\"");
  expect_error([&] { vision::Classifier::load(dir.file("a")); }, "must be 'vit' or 'point'");
  rewrite("\"neighbors\": 8", "\"neighbors\": 65");
  expect_error([&] { vision::Classifier::load(dir.file("a")); }, "must not exceed points");
  rewrite("\"patch_size\": 7", "\"patch_size\": 4");
  expect_error([&] { vision::Classifier::load(dir.file("a")); }, "patch_size (S) must be odd");
  // Absent (models written before the window): each point its own pixel, so this model's
  // embed.0 (16, 2 + 7²) is refused by name.
  rewrite("\"patch_size\": 7,", "");
  expect_error([&] { vision::Classifier::load(dir.file("a")); }, "embed.0.weight");
}
