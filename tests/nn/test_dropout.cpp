// nn::Dropout: the fraction dropped and the scale of what is kept, the mask as a function of
// (seed, offset + index) whatever the thread count, the backward against finite differences,
// the identities (p = 0, eval mode) and the errors.

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <utility>

#include "nn/check.h"

namespace {

using qkv::Shape;
using qkv::Tensor;
using namespace qkv::testing;  // nn::, randn, check_gradient, dot, ...

// Restores the thread count a test changes.
struct RestoreThreads {
  int threads = qkv::num_threads();
  ~RestoreThreads() { qkv::set_num_threads(threads); }
};

// 2^16 elements: above the size where the loop goes parallel, so 2 and 3 threads split it.
const Shape kLarge = {64, 1024};

TEST(NnDropout, DropsAFractionPAndScalesTheRestByOneOverOneMinusP) {
  const Tensor ones = Tensor::full(kLarge, 1.0f);
  const Tensor x = randn(kLarge, 1);
  const auto n = static_cast<double>(x.numel());
  for (double p : {0.1, 0.5, 0.9}) {
    SCOPED_TRACE(p);
    const nn::Dropout dropout(p);
    const auto scale = static_cast<float>(1.0 / (1.0 - p));
    // On ones: every output is 0 or exactly 1/(1 − p) (rounded to f32 once).
    const std::vector<float> y1 = dropout.forward(ones, 11).to_vector();
    double dropped = 0, sum = 0;
    for (float v : y1) {
      ASSERT_TRUE(v == 0.0f || v == scale) << v;
      dropped += v == 0.0f;
      sum += v;
    }
    // The count dropped is Binomial(n, p): within 5σ.
    EXPECT_LE(std::abs(dropped - n * p), 5 * std::sqrt(n * p * (1 - p))) << dropped << " of " << n;
    // The mean is preserved in expectation: each output has mean 1, variance p/(1 − p).
    EXPECT_LE(std::abs(sum / n - 1.0), 5 * std::sqrt(p / (1 - p) / n)) << sum / n;
    // On random values: a kept element is x·scale, bit for bit.
    const std::vector<float> xv = x.to_vector(), y = dropout.forward(x, 11).to_vector();
    for (std::size_t i = 0; i < xv.size(); ++i)
      ASSERT_TRUE(y[i] == 0.0f || y[i] == xv[i] * scale) << i << ": " << xv[i] << " -> " << y[i];
    // The same mask as on ones (it does not depend on the values).
    for (std::size_t i = 0; i < xv.size(); ++i) ASSERT_EQ(y[i] == 0.0f, y1[i] == 0.0f) << i;
  }
}

TEST(NnDropout, TheMaskIsTheDocumentedFunctionOfSeedAndIndex) {
  const Tensor ones = Tensor::full({3, 5, 7}, 1.0f);
  const double p = 0.3;
  const nn::Dropout dropout(p);
  for (std::uint64_t offset : {0ull, 1000ull}) {
    const std::vector<float> y = dropout.forward(ones, 42, offset).to_vector();
    for (std::size_t i = 0; i < y.size(); ++i)
      ASSERT_EQ(y[i] != 0.0f, qkv::counter_uniform(42, offset + i) >= p) << offset << " " << i;
  }
  // A tensor at offset k has the mask of a longer one's elements from k on.
  const std::vector<float> whole = dropout.forward(Tensor::full({100}, 1.0f), 5).to_vector();
  const std::vector<float> tail = dropout.forward(Tensor::full({60}, 1.0f), 5, 40).to_vector();
  for (std::size_t i = 0; i < tail.size(); ++i) ASSERT_EQ(tail[i], whole[40 + i]) << i;
}

TEST(NnDropout, SameSeedSameMaskForAnyThreadCountAndOtherSeedsOtherMasks) {
  RestoreThreads restore;
  const Tensor x = randn(kLarge, 2);
  const nn::Dropout dropout(0.5);
  qkv::set_num_threads(1);
  const std::vector<float> want = dropout.forward(x, 7).to_vector();
  for (int threads : {2, 3}) {
    qkv::set_num_threads(threads);
    EXPECT_EQ(dropout.forward(x, 7).to_vector(), want) << threads << " threads";
    nn::Dropout::Record record;
    dropout.forward(x, 7, 0, &record);
    EXPECT_EQ(dropout.backward(x, record).to_vector(), want) << threads << " threads, backward";
  }
  // Another seed, or another offset: about half the elements change (each is kept or dropped
  // independently with probability 1/2, so 1/2 of them differ in expectation).
  for (auto [seed, offset] : {std::pair<std::uint64_t, std::uint64_t>{8, 0}, {7, 1}}) {
    const std::vector<float> other = dropout.forward(x, seed, offset).to_vector();
    double differ = 0;
    for (std::size_t i = 0; i < want.size(); ++i) differ += (other[i] == 0.0f) != (want[i] == 0.0f);
    const auto n = static_cast<double>(want.size());
    EXPECT_LE(std::abs(differ - n / 2), 5 * std::sqrt(n / 4)) << "seed " << seed << " offset " << offset;
  }
}

TEST(NnDropout, BackwardMatchesFiniteDifferences) {
  // y = x ⊙ keep/(1 − p) is linear in x for a fixed seed: L = Σ y∘w has ∂L/∂x = dx exactly,
  // and the central difference is exact up to rounding.
  Tensor x = randn({3, 5, 7}, 3);
  const Tensor w = randn({3, 5, 7}, 4);
  for (double p : {0.25, 0.6}) {
    SCOPED_TRACE(p);
    const nn::Dropout dropout(p);
    nn::Dropout::Record record;
    dropout.forward(x, 21, 3, &record);
    const Tensor dx = dropout.backward(w, record);
    check_gradient(x, dx, [&] { return dot(dropout.forward(x, 21, 3), w); }, "dropout dx");
    // Some of dx is dropped and some kept, or the check above would prove little.
    int zeros = 0;
    for (float v : dx.to_vector()) zeros += v == 0.0f;
    EXPECT_GT(zeros, 0);
    EXPECT_LT(zeros, x.numel());
  }
}

TEST(NnDropout, PZeroAndEvalModeAreTheIdentity) {
  const Tensor x = randn({4, 9}, 5);
  nn::Dropout eval(0.5, /*training=*/false);
  for (const nn::Dropout& dropout : {nn::Dropout(0.0), eval}) {
    nn::Dropout::Record record;
    EXPECT_EQ(dropout.forward(x, 1, 0, &record).to_vector(), x.to_vector());
    EXPECT_FALSE(record.dropped);
    EXPECT_EQ(dropout.backward(x, record).to_vector(), x.to_vector());
  }
  // The default module is p = 0 (changes nothing where it is added but not configured).
  EXPECT_EQ(nn::Dropout().forward(x, 1).to_vector(), x.to_vector());
  // Other floating dtypes come out as f32.
  const Tensor y = nn::Dropout(0.0).forward(x.to(qkv::DType::bf16), 1);
  EXPECT_EQ(y.dtype(), qkv::DType::f32);
  EXPECT_EQ(y.to_vector(), x.to(qkv::DType::bf16).to(qkv::DType::f32).to_vector());
}

// Runs f, which must throw qkv::Error containing every string of `parts`.
template <class F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const qkv::Error& e) {
    for (const std::string& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(NnDropout, ErrorsNameTheProblem) {
  for (double p : {1.0, -0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    std::ostringstream value;
    value << p;
    expect_error([&] { nn::Dropout d(p); }, {"p (the dropout probability)", "[0, 1)", value.str()});
  }
  nn::Dropout changed(0.5);
  changed.p = 1.0;  // set after construction: the forward checks it too
  expect_error([&] { changed.forward(Tensor::zeros({2}), 1); }, {"Dropout.forward", "p (the dropout probability)", "got 1"});
  const nn::Dropout dropout(0.5);
  nn::Dropout::Record record;
  dropout.forward(Tensor::zeros({2, 3}), 1, 0, &record);
  expect_error([&] { dropout.backward(Tensor::zeros({3, 2}), record); },
               {"Dropout.backward", qkv::shape_to_string({2, 3}), qkv::shape_to_string({3, 2})});
  expect_error([&] { dropout.forward(Tensor::zeros({2}, qkv::DType::f64), 1); }, {"Dropout.forward", "x", "f64"});
}

}  // namespace
