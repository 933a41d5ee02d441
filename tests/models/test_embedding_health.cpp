// mean_pairwise_cosine (qkv/embedding_health.h) against its naive twin, the mean of every
// pair's cosine by a double loop, across sizes, widths, subsets, zero rows and dtypes; and
// the values that define it (collapsed, opposite, orthogonal rows) and its refusals.
#include <cmath>
#include <optional>
#include <vector>

#include <gtest/gtest.h>

#include "attention/expect_error.h"
#include "qkv/embedding_health.h"
#include "qkv/rng.h"

namespace {

// The definition: the mean over pairs i < j of the listed rows (all when empty) that are
// not zero, of row_i·row_j / (|row_i| |row_j|).
std::optional<double> naive_mean_cosine(const std::vector<double>& t, std::int64_t d,
                                        std::vector<std::int64_t> rows) {
  const auto N = static_cast<std::int64_t>(t.size()) / d;
  if (rows.empty())
    for (std::int64_t i = 0; i < N; ++i) rows.push_back(i);
  const auto dot = [&](std::int64_t a, std::int64_t b) {
    double s = 0;
    for (std::int64_t k = 0; k < d; ++k) s += t[a * d + k] * t[b * d + k];
    return s;
  };
  std::vector<std::int64_t> kept;
  for (const std::int64_t i : rows)
    if (dot(i, i) > 0) kept.push_back(i);
  double sum = 0;
  std::int64_t pairs = 0;
  for (std::size_t a = 0; a < kept.size(); ++a)
    for (std::size_t b = a + 1; b < kept.size(); ++b, ++pairs)
      sum += dot(kept[a], kept[b]) / std::sqrt(dot(kept[a], kept[a]) * dot(kept[b], kept[b]));
  if (pairs == 0) return std::nullopt;
  return sum / static_cast<double>(pairs);
}

qkv::Tensor table_of(const std::vector<double>& t, std::int64_t d, qkv::DType dtype) {
  const auto N = static_cast<std::int64_t>(t.size()) / d;
  qkv::Tensor out = qkv::Tensor::zeros({N, d}, dtype);
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (dtype == qkv::DType::f64) out.data_as<double>()[i] = t[i];
    else out.data_as<float>()[i] = static_cast<float>(t[i]);
  }
  return out;
}

// Rows = a shared direction times `shared` plus Gaussian noise; some rows zero.
std::vector<double> random_table(std::int64_t N, std::int64_t d, double shared, std::uint64_t seed) {
  qkv::Rng rng(seed);
  std::vector<double> common(static_cast<std::size_t>(d));
  for (double& c : common) c = rng.normal();
  std::vector<double> t(static_cast<std::size_t>(N * d));
  for (std::int64_t i = 0; i < N; ++i)
    for (std::int64_t k = 0; k < d; ++k)
      t[static_cast<std::size_t>(i * d + k)] = i % 5 == 3 ? 0.0 : shared * common[k] + rng.normal();
  return t;
}

}  // namespace

TEST(MeanPairwiseCosine, AgreesWithTheDoubleLoop) {
  // The identity's error: each |u_i|² is 1 to a few ulps, the sum of n of them loses
  // n·eps relative to |Σu|² ≤ n², over n(n − 1) pairs: 1e-12 is far above it for n ≤ 300
  // and far below any difference a threshold cares about.
  for (const std::int64_t N : {2, 3, 4, 17, 300})
    for (const std::int64_t d : {1, 2, 7, 50})
      for (const double shared : {0.0, 0.5, 3.0})
        for (const qkv::DType dtype : {qkv::DType::f32, qkv::DType::f64}) {
          std::vector<double> t = random_table(N, d, shared, static_cast<std::uint64_t>(N * 131 + d));
          if (dtype == qkv::DType::f32)  // the twin sees what the tensor holds
            for (double& x : t) x = static_cast<float>(x);
          const qkv::Tensor table = table_of(t, d, dtype);
          const std::optional<double> fast = qkv::mean_pairwise_cosine(table), slow = naive_mean_cosine(t, d, {});
          ASSERT_EQ(fast.has_value(), slow.has_value()) << "N " << N << " d " << d;
          if (slow) EXPECT_NEAR(*fast, *slow, 1e-12) << "N " << N << " d " << d << " shared " << shared;
          // A subset: every third row, and one out of order.
          std::vector<std::int64_t> rows;
          for (std::int64_t i = N - 1; i >= 0; i -= 3) rows.push_back(i);
          const std::optional<double> fs = qkv::mean_pairwise_cosine(table, rows), ss = naive_mean_cosine(t, d, rows);
          ASSERT_EQ(fs.has_value(), ss.has_value()) << "N " << N << " d " << d;
          if (ss) EXPECT_NEAR(*fs, *ss, 1e-12) << "N " << N << " d " << d << " subset";
        }
}

TEST(MeanPairwiseCosine, KnownValues) {
  // One direction at different lengths: 1. Two opposite rows: −1. The axes: 0.
  EXPECT_NEAR(*qkv::mean_pairwise_cosine(table_of({1, 2, 3, 2, 4, 6, 0.5, 1, 1.5}, 3, qkv::DType::f32)), 1.0, 1e-7);
  EXPECT_NEAR(*qkv::mean_pairwise_cosine(table_of({1, -2, -1, 2}, 2, qkv::DType::f32)), -1.0, 1e-12);
  EXPECT_NEAR(*qkv::mean_pairwise_cosine(table_of({1, 0, 0, 0, 1, 0, 0, 0, 1}, 3, qkv::DType::f64)), 0.0, 1e-15);
  // Zero rows have no direction: left out, not counted as cosine 0.
  EXPECT_NEAR(*qkv::mean_pairwise_cosine(table_of({1, 1, 0, 0, 2, 2, 0, 0}, 2, qkv::DType::f32)), 1.0, 1e-7);
  // Fewer than two non-zero rows: no pair, no mean.
  EXPECT_FALSE(qkv::mean_pairwise_cosine(table_of({1, 1, 0, 0}, 2, qkv::DType::f32)).has_value());
  EXPECT_FALSE(qkv::mean_pairwise_cosine(qkv::Tensor::zeros({0, 4})).has_value());
  const std::int64_t one[] = {1};
  EXPECT_FALSE(qkv::mean_pairwise_cosine(table_of({1, 0, 0, 1}, 2, qkv::DType::f32), one).has_value());
}

TEST(MeanPairwiseCosine, RefusesWhatIsNotATable) {
  using qkv::testing::expect_error;
  expect_error([] { (void)qkv::mean_pairwise_cosine(qkv::Tensor::zeros({4})); }, "must be 2-D");
  const std::int64_t out_of_range[] = {0, 2};
  expect_error([&] { (void)qkv::mean_pairwise_cosine(qkv::Tensor::zeros({2, 3}), out_of_range); },
               "row 2 is out of range [0, 2)");
  qkv::Tensor t = table_of({1, 2, std::nan(""), 4}, 2, qkv::DType::f32);
  expect_error([&] { (void)qkv::mean_pairwise_cosine(t); }, "row 1 holds a value that is not finite");
}
