// The recommender task (recommender/recommender.h): reading ratings (malformed lines named), the
// temporal split's rule, SASRec's batches, the ranking evaluation against hand-made
// scorers, matrix factorisation on planted low-rank ratings, and a trained model directory
// read back: predictions, recommendations and the retrieval view against naive twins.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <sstream>

#include "attention/expect_error.h"
#include "nn/check.h"
#include "temp_dir.h"
#include "recommender/recommender.h"
#include "qkv/rng.h"
#include "qkv/safetensors.h"
#include "qkv/viz.h"

namespace {

using namespace qkv::testing;
namespace rec = qkv::recommender;

// U users × I movies, each user rating a random `per_user` of them: rating =
// clip(3 + 1.5·(a_u·b_i), 0.5, 5) rounded to halves, with planted 2-D factors a, b, so a
// factorisation of rank >= 2 can explain what biases cannot. Timestamps increase per user.
std::string planted_csv(int U, int I, int per_user, std::uint64_t seed) {
  qkv::Rng rng(seed);
  std::vector<std::array<double, 2>> a(U), b(I);
  for (auto& v : a) v = {rng.normal(), rng.normal()};
  for (auto& v : b) v = {rng.normal(), rng.normal()};
  std::ostringstream csv;
  csv << "movieId,title,year,genres,userId,rating,timestamp\n";
  for (int u = 0; u < U; ++u) {
    std::vector<int> movies(I);
    for (int i = 0; i < I; ++i) movies[i] = i;
    for (int i = I; i > 1; --i) std::swap(movies[i - 1], movies[static_cast<int>(rng.uniform() * i)]);
    for (int j = 0; j < per_user; ++j) {
      const int i = movies[j];
      const double r = std::clamp(std::round(2 * (3 + 1.5 * (a[u][0] * b[i][0] + a[u][1] * b[i][1]))) / 2, 0.5, 5.0);
      csv << 10 + i << ",\"Movie " << i << (i % 7 == 0 ? ", The" : "") << "\"," << 1950 + i % 50
          << ",Drama," << 100 + u << "," << r << "," << 1000000 + 1000 * u + j << "\n";
    }
  }
  return csv.str();
}

}  // namespace

TEST(Ratings, ReadsTheColumnsByNameAndIndexesIdsInOrder) {
  const rec::Ratings d = rec::parse_ratings(
      "userId,rating,movieId,timestamp,title,year\n"
      "7,4.5,30,100,\"Heat, The\",1995\n"
      "3,1,20,50,,\n"
      "7,0.5,20,90,,\n");
  EXPECT_EQ(d.user_ids, (std::vector<std::int64_t>{3, 7}));
  ASSERT_EQ(d.movies.size(), 2u);
  EXPECT_EQ(d.movies[0].id, 20);
  EXPECT_EQ(rec::movie_label(d.movies[0]), "movie 20");
  EXPECT_EQ(rec::movie_label(d.movies[1]), "Heat, The (1995)");
  ASSERT_EQ(d.ratings.size(), 3u);
  EXPECT_EQ(d.ratings[0].user, 1);
  EXPECT_EQ(d.ratings[0].movie, 1);
  EXPECT_EQ(d.ratings[0].rating, 4.5f);
  EXPECT_EQ(d.ratings[1].timestamp, 50);
  EXPECT_EQ(*d.movie_index(30), 1);
  EXPECT_FALSE(d.user_index(5).has_value());
}

TEST(Ratings, MalformedInputNamesTheLine) {
  const std::string h = "userId,movieId,rating,timestamp\n";
  expect_error([] { rec::parse_ratings("", "r.csv"); }, "r.csv: empty");
  expect_error([&] { rec::parse_ratings(h, "r.csv"); }, "no ratings after the header");
  expect_error([] { rec::parse_ratings("userId,movieId,rating\n1,2,3\n", "r.csv"); }, "no 'timestamp' column");
  expect_error([&] { rec::parse_ratings(h + "1,2,3,4\n1,3,4\n", "r.csv"); }, "r.csv line 3: 3 fields, the header has 4");
  expect_error([&] { rec::parse_ratings(h + "1,2,7,4\n", "r.csv"); }, "r.csv line 2: rating 7 is outside [0.5, 5]");
  // The rating as written, not rounded to 6 digits ("rating 5 is outside [0.5, 5]").
  expect_error([&] { rec::parse_ratings(h + "1,2,5.0000001,4\n", "r.csv"); },
               "r.csv line 2: rating 5.0000001 is outside [0.5, 5]");
  expect_error([&] { rec::parse_ratings(h + "1,2,nan,4\n", "r.csv"); }, "line 2: rating 'nan' is not a number");
  expect_error([&] { rec::parse_ratings(h + "1,2,3,soon\n", "r.csv"); }, "line 2: timestamp 'soon' is not an integer");
  expect_error([&] { rec::parse_ratings(h + "1,2,3,4\n\n1,2,4,5\n", "r.csv"); },
               "r.csv line 4: user 1 rated movie 2 already on line 2");
  expect_error([] { rec::parse_ratings("userId,movieId,rating,timestamp,title\n1,2,3,4,A\n2,2,3,4,B\n", "r.csv"); },
               "line 3: movie 2 is 'B' here but 'A' on line 2");
  expect_error([&] { rec::parse_ratings(h + "1,2,3,\"4\n", "r.csv"); }, "r.csv line 2: a quoted field is never closed");
}

// The rule of the header, user by user: n = 1 (all test), 2 (m = 1: no validation), 3, 12, 25.
TEST(Split, FollowsTheTemporalRule) {
  std::ostringstream csv;
  csv << "userId,movieId,rating,timestamp\n";
  const int sizes[] = {1, 2, 3, 12, 25};
  for (int u = 0; u < 5; ++u)
    for (int j = 0; j < sizes[u]; ++j)  // timestamps descend with the movie, ties at j = 0, 1
      csv << u << "," << 100 - j << ",3," << (j < 2 ? 7 : 1000 - j) << "\n";
  const rec::Ratings d = rec::parse_ratings(csv.str());
  const rec::Split s = rec::temporal_split(d);
  const std::int64_t want[5][3] = {{0, 0, 1}, {1, 0, 1}, {1, 1, 1}, {9, 1, 2}, {18, 2, 5}};  // fit, val, test
  for (int u = 0; u < 5; ++u) {
    EXPECT_EQ(s.users[u].fit, want[u][0]) << "user " << u;
    EXPECT_EQ(s.users[u].validation, want[u][1]) << "user " << u;
    EXPECT_EQ(s.users[u].test, want[u][2]) << "user " << u;
    const auto& r = s.users[u].ratings;
    for (std::size_t j = 1; j < r.size(); ++j) {
      ASSERT_LE(r[j - 1].timestamp, r[j].timestamp);
      if (r[j - 1].timestamp == r[j].timestamp) EXPECT_LT(d.movies[r[j - 1].movie].id, d.movies[r[j].movie].id);
    }
  }
  EXPECT_EQ(s.fit + s.validation + s.test, 43);
  EXPECT_EQ(s.part(2).size(), 10u);
  const rec::RandomFold f = rec::random_fold(d, 5, 2, 0);
  EXPECT_EQ(f.train.size() + f.test.size(), 43u);
  EXPECT_EQ(f.test.size(), 9u);  // positions 2, 7, ..., 42 of the shuffled order
}

TEST(SasRecBatches, ShiftTruncateAndSampleUnratedNegatives) {
  const rec::Ratings d = rec::parse_ratings(planted_csv(30, 40, 20, 1));
  const rec::Split s = rec::temporal_split(d);
  const rec::SasRecBatches batches(s, 40, 8, 10, 3);
  EXPECT_EQ(batches.steps_per_epoch(), 4);  // 30 users with 14 fit ratings each
  std::set<std::int64_t> seen_users;
  for (std::int64_t step = 0; step < 4; ++step) {
    const qkv::models::SasRecBatch b = batches.get(2, step);
    EXPECT_EQ(b.T, 10);  // the last max_len + 1 = 11 of 14 fit items: 10 inputs
    for (std::int64_t row = 0; row < b.B; ++row) {
      const std::int64_t u = b.users[row];
      EXPECT_TRUE(seen_users.insert(u).second) << "user " << u << " twice in one epoch";
      const auto& r = s.users[u];
      std::set<std::int64_t> fit;
      for (std::int64_t j = 0; j < r.fit; ++j) fit.insert(r.ratings[j].movie);
      for (std::int64_t t = 0; t < b.T; ++t) {
        const std::int64_t at = row * b.T + t;
        EXPECT_EQ(b.inputs[at], r.ratings[r.fit - 11 + t].movie + 1);
        EXPECT_EQ(b.positives[at], r.ratings[r.fit - 10 + t].movie + 1);
        EXPECT_FALSE(fit.count(b.negatives[at] - 1)) << "negative " << b.negatives[at] - 1 << " was rated";
      }
    }
  }
  EXPECT_EQ(seen_users.size(), 30u);
  // A pure function of (seed, epoch, step).
  const rec::SasRecBatches again(s, 40, 8, 10, 3);
  EXPECT_EQ(again.get(2, 1).negatives, batches.get(2, 1).negatives);
  EXPECT_NE(again.get(3, 1).users, batches.get(2, 1).users);
}

// An oracle that scores the held-out movie highest gets HR@10 = NDCG@10 = 1; one that
// scores it lowest 0; a constant scorer 0 too (ties count against the target).
TEST(Ranking, MetricsOfHandMadeScorers) {
  const rec::Ratings d = rec::parse_ratings(planted_csv(12, 150, 30, 2));
  const rec::Split s = rec::temporal_split(d);
  const std::int64_t I = 150;
  // The movie each scorer must put first: the next held-out one after the history.
  const auto next_of = [&](std::int64_t u, std::size_t history) { return s.users[u].ratings[history].movie; };
  const auto scorer = [&](double sign) -> rec::BatchScorer {
    return [&, sign](std::span<const std::int64_t> users, const std::vector<std::vector<std::int64_t>>& histories,
                     std::span<float> scores) {
      for (std::size_t b = 0; b < users.size(); ++b) {
        for (std::int64_t i = 0; i < I; ++i) scores[b * I + i] = 0.0f;
        scores[b * I + next_of(users[b], histories[b].size())] = static_cast<float>(sign);
      }
    };
  };
  const rec::RankingMetrics best = rec::evaluate_ranking(s, I, scorer(1.0));
  EXPECT_EQ(best.users, 12);
  EXPECT_DOUBLE_EQ(best.hr10, 1.0);
  EXPECT_DOUBLE_EQ(best.ndcg10, 1.0);
  EXPECT_DOUBLE_EQ(best.hr10_catalogue, 1.0);
  EXPECT_DOUBLE_EQ(best.hr10_all, 1.0);
  EXPECT_DOUBLE_EQ(best.ndcg10_all, 1.0);
  const rec::RankingMetrics worst = rec::evaluate_ranking(s, I, scorer(-1.0));
  EXPECT_DOUBLE_EQ(worst.hr10, 0.0);
  EXPECT_DOUBLE_EQ(worst.hr10_all, 0.0);
  const rec::RankingMetrics flat = rec::evaluate_ranking(s, I, scorer(0.0));
  EXPECT_DOUBLE_EQ(flat.hr10, 0.0);
  // Validation: the first validation movie follows the fit part.
  const rec::RankingMetrics val = rec::evaluate_ranking(s, I, scorer(1.0), true, false);
  EXPECT_DOUBLE_EQ(val.hr10, 1.0);
  // The target ranked third among its candidates: NDCG@10 = 1 / log2(4) = 0.5.
  const rec::BatchScorer third = [&](std::span<const std::int64_t> users,
                                     const std::vector<std::vector<std::int64_t>>& histories, std::span<float> scores) {
    for (std::size_t b = 0; b < users.size(); ++b) {
      const auto& r = s.users[users[b]];
      std::vector<char> rated(I, 0);
      for (const auto& x : r.ratings) rated[x.movie] = 1;
      for (std::int64_t i = 0; i < I; ++i) scores[b * I + i] = rated[i] ? -1.0f : 0.0f;
      scores[b * I + next_of(users[b], histories[b].size())] = 0.5f;
      // two unrated movies above it: every unrated movie competes in the catalogue, and
      // with 100 of the 120 unrated ones sampled the two are not always among them
      int above = 0;
      for (std::int64_t i = 0; i < I && above < 2; ++i)
        if (!rated[i]) scores[b * I + i] = 1.0f, ++above;
    }
  };
  const rec::RankingMetrics m3 = rec::evaluate_ranking(s, I, third);
  EXPECT_DOUBLE_EQ(m3.hr10_catalogue, 1.0);
  EXPECT_DOUBLE_EQ(m3.ndcg10_catalogue, 0.5);
  EXPECT_GE(m3.ndcg10, 0.5);
  EXPECT_LT(m3.ndcg10, 1.0);
}

// Planted rank-2 ratings: the biases alone cannot explain them, a factorisation can, by
// either solver; the weights of the best validation epoch are the ones returned. The default
// solver, alternating least squares, keeps the tuned biases untouched by its sweeps.
TEST(MatrixFactorisation, BeatsTheBiasesOnPlantedFactors) {
  const rec::Ratings d = rec::parse_ratings(planted_csv(120, 80, 40, 3));
  const rec::Split s = rec::temporal_split(d);
  const auto fit = s.part(0), val = s.part(1), test = s.part(2);
  const rec::MfModel b = rec::tune_biases(fit, val, 120, 80).fit.model;
  EXPECT_EQ(rec::MfOptions{}.solver, "als");
  for (const std::string solver : {"adamw", "als"}) {
    SCOPED_TRACE(solver);
    rec::MfOptions o;
    o.solver = solver;
    o.dim = 4;
    o.epochs = solver == "als" ? 15 : 60;
    o.batch = 64;
    o.lr = 1e-2;
    o.l2 = 0.01;
    o.als_l2 = 1.0;
    std::vector<double> validation;
    const rec::MfModel m = rec::train_mf(fit, val, 120, 80, o, [&](const qkv::train::Progress& p) {
      if (p.evaluated) validation.push_back(p.score);
    }).model;
    EXPECT_LT(rec::rmse(m, test), 0.7 * rec::rmse_constant(m.mean, test));
    EXPECT_LT(rec::rmse(m, test), 0.7 * rec::rmse(b, test)) << "biases " << rec::rmse(b, test);
    ASSERT_EQ(validation.size(), static_cast<std::size_t>(o.epochs));
    EXPECT_NEAR(rec::rmse(m, val), *std::min_element(validation.begin(), validation.end()), 1e-12);
    if (solver == "als")
      for (int u = 0; u < 120; ++u)
        ASSERT_EQ(m.user_bias.data_as<float>()[u], b.user_bias.data_as<float>()[u]) << "user " << u;
    // predict is μ + b_u + b_i + p_u·q_i, clipped.
    const float* P = m.user_factors.data_as<float>();
    const float* Q = m.movie_factors.data_as<float>();
    double want = m.mean + m.user_bias.data_as<float>()[5] + m.movie_bias.data_as<float>()[7];
    for (int j = 0; j < 4; ++j) want += P[5 * 4 + j] * Q[7 * 4 + j];
    EXPECT_NEAR(m.predict(5, 7, false), want, 1e-5);
    EXPECT_EQ(m.predict(5, 7), std::clamp(m.predict(5, 7, false), 0.5f, 5.0f));
  }
}

namespace {

// Ratings r = 3.5 + b_u + b_i + N(0, σ²), unrounded, with b_u, b_i ~ N(0, 0.5²): each user rates
// each movie with probability `density`; every user and movie rates / is rated at least once.
struct PlantedBiases {
  std::vector<rec::Rating> ratings;
  std::vector<double> user, movie;
};
PlantedBiases planted_biases(int U, int I, double density, double sigma, std::uint64_t seed) {
  qkv::Rng rng(seed);
  PlantedBiases p;
  for (int u = 0; u < U; ++u) p.user.push_back(0.5 * rng.normal());
  for (int i = 0; i < I; ++i) p.movie.push_back(0.5 * rng.normal());
  for (int u = 0; u < U; ++u)
    for (int i = 0; i < I; ++i)
      if (u % I == i || i % U == u || rng.uniform() < density)
        p.ratings.push_back({.user = u, .movie = i,
                             .rating = static_cast<float>(3.5 + p.user[u] + p.movie[i] + sigma * rng.normal())});
  return p;
}

// Solves the dense system [M | rhs] (n rows of n + 1) in place by Gauss-Jordan elimination
// with partial pivoting: afterwards x_j = a[j][n] / a[j][j].
void gauss_jordan(std::vector<std::vector<double>>& a) {
  const auto n = static_cast<int>(a.size());
  for (int c = 0; c < n; ++c) {
    int pivot = c;
    for (int r = c + 1; r < n; ++r)
      if (std::abs(a[r][c]) > std::abs(a[pivot][c])) pivot = r;
    std::swap(a[c], a[pivot]);
    for (int r = 0; r < n; ++r)
      if (r != c) {
        const double m = a[r][c] / a[c][c];
        for (int k = c; k <= n; ++k) a[r][k] -= m * a[c][k];
      }
  }
}

double centred_rms_error(const float* fitted, const std::vector<double>& truth) {
  const auto n = static_cast<double>(truth.size());
  double mf = 0, mt = 0;
  for (std::size_t j = 0; j < truth.size(); ++j) mf += fitted[j] / n, mt += truth[j] / n;
  double s = 0;
  for (std::size_t j = 0; j < truth.size(); ++j) s += std::pow((fitted[j] - mf) - (truth[j] - mt), 2) / n;
  return std::sqrt(s);
}

}  // namespace

// b_u − b_i' offsets are all a rating set identifies (a constant moves between the sides), so
// the centred biases are compared. With n ratings per user, b̂_u − b_u ≈ the mean of its n
// noises and of its movies' errors, sd ≈ σ·sqrt(1/n + 1/(n·n_i)) ≈ σ/√n; λ = 1 shrinks by
// λ/(λ + n) < 1%, 0.005 at |b| = 0.5. So the RMS error over 200 users (or movies) is
// σ/√n ± 10%: bound it by 1.5·σ/√n (n ≈ 100, σ = 0.3: 0.045; not fitting at all gives 0.5).
TEST(MfBiases, AlternatingLeastSquaresRecoversPlantedBiases) {
  const double sigma = 0.3;
  const PlantedBiases p = planted_biases(200, 200, 0.5, sigma, 11);
  const rec::BiasFit f = rec::fit_biases(p.ratings, 200, 200, 1.0);
  EXPECT_TRUE(f.converged) << f.sweeps << " sweeps";
  EXPECT_EQ(f.model.user_factors.size(1), 0);
  const double bound = 1.5 * sigma / std::sqrt(100.0);
  EXPECT_LT(centred_rms_error(f.model.user_bias.data_as<float>(), p.user), bound);
  EXPECT_LT(centred_rms_error(f.model.movie_bias.data_as<float>(), p.movie), bound);
  double mean = 0;
  for (const rec::Rating& r : p.ratings) mean += r.rating / static_cast<double>(p.ratings.size());
  EXPECT_NEAR(f.model.mean, mean, 1e-5);  // μ is the fit ratings' mean
}

// A tiny case against the normal equations of the same objective, (AᵀA + λ·1) x = Aᵀ(r − μ),
// x = (b_u..., b_i...), A's row per rating one-hot at its user and its movie; solved densely
// in double by gauss_jordan. A user and a movie without
// ratings keep 0 (their rows of the system: λ·x = 0).
TEST(MfBiases, AlternatingLeastSquaresEqualsTheNormalEquations) {
  const int U = 5, I = 5;  // user 4 and movie 4 rate / are rated nothing
  const std::vector<rec::Rating> fit = {
      {.user = 0, .movie = 0, .rating = 4}, {.user = 0, .movie = 1, .rating = 3.5f}, {.user = 0, .movie = 3, .rating = 5},
      {.user = 1, .movie = 0, .rating = 2}, {.user = 1, .movie = 2, .rating = 1.5f}, {.user = 2, .movie = 1, .rating = 4.5f},
      {.user = 2, .movie = 2, .rating = 3}, {.user = 2, .movie = 3, .rating = 4}, {.user = 3, .movie = 0, .rating = 0.5f},
      {.user = 3, .movie = 3, .rating = 2.5f}, {.user = 1, .movie = 3, .rating = 3}};
  for (const double l2 : {0.7, 3.0}) {
    const rec::BiasFit f = rec::fit_biases(fit, U, I, l2);
    ASSERT_TRUE(f.converged) << "λ " << l2;
    const int n = U + I;
    std::vector<std::vector<double>> a(n, std::vector<double>(n + 1, 0.0));  // [AᵀA + λ | Aᵀ(r − μ)]
    for (int j = 0; j < n; ++j) a[j][j] = l2;
    for (const rec::Rating& r : fit) {
      const int cols[2] = {static_cast<int>(r.user), U + static_cast<int>(r.movie)};
      for (const int x : cols) {
        for (const int y : cols) a[x][y] += 1;
        a[x][n] += r.rating - static_cast<double>(f.model.mean);
      }
    }
    gauss_jordan(a);
    for (int u = 0; u < U; ++u)
      EXPECT_NEAR(f.model.user_bias.data_as<float>()[u], a[u][n] / a[u][u], 1e-6) << "user " << u << ", λ " << l2;
    for (int i = 0; i < I; ++i)
      EXPECT_NEAR(f.model.movie_bias.data_as<float>()[i], a[U + i][n] / a[U + i][U + i], 1e-6)
          << "movie " << i << ", λ " << l2;
  }
}

// Few noisy ratings per user (σ = 1, n ≈ 6): too little λ overfits, too much flattens the
// biases (the best is near σ²/var(b) = 4), so the choice is inside the grid, and it must be
// the grid value whose fit has the lowest RMSE on the validation ratings.
TEST(MfBiases, TuneChoosesTheLowestValidationRmse) {
  const PlantedBiases p = planted_biases(150, 150, 0.05, 1.0, 5);
  std::vector<rec::Rating> fit, val;
  for (std::size_t j = 0; j < p.ratings.size(); ++j) (j % 4 == 3 ? val : fit).push_back(p.ratings[j]);
  const std::vector<double> grid = {0, 0.3, 1, 3, 10, 100, 1000};
  const rec::TunedBiases t = rec::tune_biases(fit, val, 150, 150, grid);
  ASSERT_EQ(t.validation_rmses.size(), grid.size());
  std::size_t best = 0;
  for (std::size_t g = 0; g < grid.size(); ++g) {
    const double v = rec::rmse(rec::fit_biases(fit, 150, 150, grid[g]).model, val);
    EXPECT_NEAR(t.validation_rmses[g], v, 1e-12) << "λ " << grid[g];
    if (v < rec::rmse(rec::fit_biases(fit, 150, 150, grid[best]).model, val)) best = g;
  }
  EXPECT_GT(best, 0u);
  EXPECT_LT(best, grid.size() - 1);
  EXPECT_EQ(t.l2, grid[best]);
  EXPECT_NEAR(t.validation_rmse, rec::rmse(t.fit.model, val), 1e-12);
  EXPECT_NEAR(t.validation_rmse, t.validation_rmses[best], 1e-12);
}

namespace {

// The naive twin of one half-sweep: each row of `self` (n_self, k) the minimiser of
// Σ (y − x·o)² + λ|x|² over its ratings, from the normal equations (Σ o oᵀ + λ·1) x = Σ y o
// solved densely by gauss_jordan in double; y = r − μ − b_u − b_i of `model`'s biases.
std::vector<double> ridge_twin(const std::vector<rec::Rating>& fit, const rec::MfModel& model, bool users,
                               const float* other, std::int64_t n_self, std::int64_t k, double l2) {
  std::vector<double> out(static_cast<std::size_t>(n_self * k), 0.0);
  for (std::int64_t e = 0; e < n_self; ++e) {
    std::vector<std::vector<double>> a(k, std::vector<double>(k + 1, 0.0));
    for (std::int64_t c = 0; c < k; ++c) a[c][c] = l2;
    bool any = false;
    for (const rec::Rating& r : fit) {
      if ((users ? r.user : r.movie) != e) continue;
      any = true;
      const float* o = other + (users ? r.movie : r.user) * k;
      const double y = static_cast<double>(r.rating) - model.mean - model.user_bias.data_as<float>()[r.user] -
                       model.movie_bias.data_as<float>()[r.movie];
      for (std::int64_t c = 0; c < k; ++c) {
        for (std::int64_t d = 0; d < k; ++d) a[c][d] += static_cast<double>(o[c]) * o[d];
        a[c][k] += y * o[c];
      }
    }
    if (!any) continue;  // no rating: 0
    gauss_jordan(a);
    for (std::int64_t c = 0; c < k; ++c) out[static_cast<std::size_t>(e * k + c)] = a[c][k] / a[c][c];
  }
  return out;
}

void expect_rows_equal(const rec::MfModel& m, bool users, const std::vector<double>& want, const char* what) {
  const qkv::Tensor& t = users ? m.user_factors : m.movie_factors;
  for (std::int64_t j = 0; j < t.numel(); ++j)  // float32 factors: |x| < 3 here, 1e-5 is ~30 ulp
    ASSERT_NEAR(t.data_as<float>()[j], want[static_cast<std::size_t>(j)], 1e-5) << what << ", element " << j;
}

}  // namespace

// One and two sweeps against the naive twin. Without validation ratings the last sweep is
// returned and the biases are fit_biases' at λ 0 (the grid's first). The first sweep's users
// are solved from random movie factors the test cannot see, so the check is: sweep 1's
// movies from sweep 1's users; sweep 2's users from sweep 1's movies, and its movies from
// them. With k = 3, the users and movies 0, 1, 2 and 4 have 3 or more ratings (n >= k: the
// k × k system), movies 3 and 5 two (n < k: the n × n form); movie 6 and user 5 none (0).
// batch 1 spreads a sweep over 13 steps (one user or movie each), batch 5 over 3 (a step
// holding users and movies); both must give the same sweep.
TEST(MatrixFactorisation, AlternatingLeastSquaresSweepEqualsTheNormalEquations) {
  const std::int64_t U = 6, I = 7, k = 3;
  const std::vector<rec::Rating> fit = {
      {.user = 0, .movie = 0, .rating = 4}, {.user = 0, .movie = 1, .rating = 3.5f}, {.user = 0, .movie = 3, .rating = 5},
      {.user = 1, .movie = 0, .rating = 2}, {.user = 1, .movie = 2, .rating = 1.5f}, {.user = 2, .movie = 1, .rating = 4.5f},
      {.user = 2, .movie = 0, .rating = 3}, {.user = 2, .movie = 4, .rating = 4}, {.user = 3, .movie = 0, .rating = 0.5f},
      {.user = 3, .movie = 3, .rating = 2.5f}, {.user = 1, .movie = 5, .rating = 3}, {.user = 4, .movie = 0, .rating = 5},
      {.user = 4, .movie = 2, .rating = 1}, {.user = 0, .movie = 4, .rating = 2}, {.user = 3, .movie = 5, .rating = 4.5f},
      {.user = 4, .movie = 1, .rating = 3}, {.user = 2, .movie = 2, .rating = 2}, {.user = 1, .movie = 4, .rating = 5}};
  const double l2 = 0.7;
  const auto run = [&](std::int64_t epochs, std::int64_t batch) {
    rec::MfOptions o;
    o.dim = k;
    o.epochs = epochs;
    o.batch = batch;
    o.als_l2 = l2;
    o.seed = 3;
    return rec::train_mf(fit, {}, U, I, o).model;
  };
  const rec::MfModel one = run(1, 1), two = run(2, 1);
  const rec::MfModel biases = rec::fit_biases(fit, U, I, 0.0).model;
  for (std::int64_t i = 0; i < I; ++i)
    ASSERT_EQ(one.movie_bias.data_as<float>()[i], biases.movie_bias.data_as<float>()[i]) << "movie " << i;
  expect_rows_equal(one, false, ridge_twin(fit, one, false, one.user_factors.data_as<float>(), I, k, l2), "sweep 1, movies");
  expect_rows_equal(two, true, ridge_twin(fit, two, true, one.movie_factors.data_as<float>(), U, k, l2), "sweep 2, users");
  expect_rows_equal(two, false, ridge_twin(fit, two, false, two.user_factors.data_as<float>(), I, k, l2), "sweep 2, movies");
  for (std::int64_t c = 0; c < k; ++c) {  // not fitted: 0, and something was fitted
    EXPECT_EQ(two.user_factors.data_as<float>()[5 * k + c], 0.0f);
    EXPECT_EQ(two.movie_factors.data_as<float>()[6 * k + c], 0.0f);
  }
  EXPECT_GT(std::abs(two.movie_factors.data_as<float>()[0]), 1e-3);
  const rec::MfModel two_in_4 = run(2, 5);
  for (std::int64_t j = 0; j < U * k; ++j)
    ASSERT_EQ(two_in_4.user_factors.data_as<float>()[j], two.user_factors.data_as<float>()[j]) << j;
}

// A model directory written by train_recommender, read back: every query against its
// naive twin over the saved tensors.
TEST(Recommender, TrainedDirectoryAnswersAsItsTensors) {
  TempDir dir("recommender");
  const std::string csv = (dir.path / "ratings.csv").string();
  qkv::viz::write_file(csv, planted_csv(50, 60, 25, 4) + "1,Movie 1,1999,Drama,100,4,1\n");
  rec::RecommenderOptions o;
  o.data = csv;
  o.out_dir = (dir.path / "mf").string();
  o.mf.dim = 3;
  o.mf.epochs = 5;
  const rec::RecommenderReport report = rec::train_recommender(o);
  EXPECT_EQ(report.users, 50);
  EXPECT_EQ(report.movies, 61);
  EXPECT_GT(report.rmse_global_mean, 0.0);
  const rec::Recommender m = rec::Recommender::load(o.out_dir);
  EXPECT_EQ(m.kind(), "mf");
  const std::int64_t u = m.user_index(103);
  // recommend: the unseen movies in score order.
  const std::vector<float> s = m.scores(u);
  const auto top = m.recommend(u, 5);
  ASSERT_EQ(top.size(), 5u);
  const auto& h = m.history(u);
  for (std::size_t i = 0; i < top.size(); ++i) {
    EXPECT_EQ(std::count(h.begin(), h.end(), top[i].movie), 0);
    EXPECT_EQ(top[i].score, s[top[i].movie]);
    if (i) EXPECT_GE(top[i - 1].score, top[i].score);
  }
  float best_unseen = -1e9f;
  for (std::int64_t i = 0; i < 61; ++i)
    if (std::count(h.begin(), h.end(), i) == 0) best_unseen = std::max(best_unseen, s[i]);
  EXPECT_EQ(top[0].score, best_unseen);
  // predict = clip(score).
  const std::int64_t users[] = {u}, movies[] = {top[0].movie};
  EXPECT_EQ(m.predict(users, movies)[0], std::clamp(s[top[0].movie], 0.5f, 5.0f));
  // similar: the cosines of the saved factors, the weights their softmax at temperature 0.1.
  const qkv::SafeTensors st = qkv::SafeTensors::open(o.out_dir + "/model.safetensors");
  const std::vector<float> Q = st.get("movie_factors").to_vector();
  const std::int64_t liked = m.find_movie("movie 5 (1955)");
  const auto cos = [&](std::int64_t a, std::int64_t b) {
    double ab = 0, aa = 0, bb = 0;
    for (int j = 0; j < 3; ++j) ab += Q[a * 3 + j] * Q[b * 3 + j], aa += Q[a * 3 + j] * Q[a * 3 + j], bb += Q[b * 3 + j] * Q[b * 3 + j];
    return ab / std::sqrt(aa * bb);
  };
  double z = 0;
  for (std::int64_t i = 0; i < 61; ++i) z += std::exp(cos(liked, i) / 0.1);
  const auto near = m.similar(liked, 60, 0.1, 1);
  ASSERT_EQ(near.size(), 60u);
  for (std::size_t i = 0; i < near.size(); ++i) {
    EXPECT_NE(near[i].movie, liked);
    EXPECT_NEAR(near[i].score, cos(liked, near[i].movie), 1e-5);
    EXPECT_NEAR(near[i].weight, std::exp(cos(liked, near[i].movie) / 0.1) / z, 1e-5);
    if (i) EXPECT_GE(near[i - 1].weight, near[i].weight);
  }
  // min_ratings: only movies rated that often are keys (and so are returned); the softmax
  // runs over those keys alone.
  std::int64_t often = 0;
  for (std::int64_t i = 0; i < 61; ++i) often += i != liked && m.ratings_of(i) >= 22;
  ASSERT_GT(often, 3);
  ASSERT_LT(often, 59);
  const auto popular = m.similar(liked, 100, 0.1, 22);
  ASSERT_EQ(static_cast<std::int64_t>(popular.size()), often);
  double zk = std::exp(1.0 / 0.1);  // the liked movie is a key: cos 1
  for (std::int64_t i = 0; i < 61; ++i)
    if (i != liked && m.ratings_of(i) >= 22) zk += std::exp(cos(liked, i) / 0.1);
  for (const auto& r : popular) {
    EXPECT_GE(m.ratings_of(r.movie), 22);
    EXPECT_NEAR(r.weight, std::exp(cos(liked, r.movie) / 0.1) / zk, 1e-5);
  }
  // Titles: with or without the year, case-insensitive; the same title twice is ambiguous.
  EXPECT_EQ(m.find_movie("MOVIE 0, THE"), m.movie_index(10));
  expect_error([&] { m.find_movie("Movie 1"); }, "ambiguous: 2 movies");
  EXPECT_EQ(m.find_movie("movie 1 (1999)"), m.movie_index(1));
  EXPECT_EQ(m.find_movie("Movie 1 (1951)"), m.movie_index(11));
  expect_error([&] { m.find_movie("Movi 3"); }, "close matches: 'Movie 3 (1953)'");
  expect_error([&] { m.user_index(5); }, "unknown user 5");
  expect_error([&] { m.attention(u); }, "needs a sasrec model");
  // The same data's split evaluates to the report's metrics.
  const rec::RankingMetrics again = m.evaluate(rec::read_ratings(csv));
  EXPECT_DOUBLE_EQ(again.hr10, report.trained.hr10);
}

// Every movieId a ratings file accepts (any int64, negative too) is one find_movie reads,
// so the id an ambiguous title's message advises is one --like then finds.
TEST(Recommender, FindsEveryMovieIdTheRatingsHold) {
  TempDir dir("recommender_ids");
  const std::string csv = (dir.path / "ratings.csv").string();
  qkv::viz::write_file(csv, planted_csv(12, 10, 6, 3) +
                                "-5,Twin,2000,Drama,100,4,1\n"
                                "9223372036854775807,Twin,2000,Drama,101,4,1\n"
                                "-9223372036854775808,Low,2001,Drama,102,4,1\n"
                                "123456789012345678,Long,2002,Drama,103,4,1\n");
  rec::RecommenderOptions o;
  o.data = csv;
  o.out_dir = (dir.path / "mf").string();
  o.mf.dim = 2;
  o.mf.epochs = 1;
  rec::train_recommender(o);
  const rec::Recommender m = rec::Recommender::load(o.out_dir);
  expect_error([&] { m.find_movie("Twin"); }, "movieId -5); 'Twin (2000)' (movieId 9223372036854775807);");
  EXPECT_EQ(m.find_movie("-5"), m.movie_index(-5));
  EXPECT_EQ(m.find_movie("9223372036854775807"), m.movie_index(9223372036854775807));
  EXPECT_EQ(m.find_movie("-9223372036854775808"), m.movie_index(std::numeric_limits<std::int64_t>::min()));
  EXPECT_EQ(m.find_movie("123456789012345678"), m.movie_index(123456789012345678));
  expect_error([&] { m.find_movie("9223372036854775808"); }, "no movie is titled '9223372036854775808'");
  expect_error([&] { m.find_movie("-6"); }, "no movie is titled '-6'");
  // A temperature whose reciprocal is no float32 is refused by name (not as a bad scale).
  expect_error([&] { m.similar(m.movie_index(-5), 3, 1e-300, 1); }, "temperature must be a finite number >= ");
  expect_error([&] { m.similar(m.movie_index(-5), 3, 1e-39, 1); }, "(1 / temperature must be finite in float32), got 1e-39");
  EXPECT_EQ(m.similar(m.movie_index(-5), 3, 1e-38, 1).size(), 3u);
}

TEST(Recommender, SasRecDirectoryShowsItsAttention) {
  TempDir dir("sasrec");
  const std::string csv = (dir.path / "ratings.csv").string();
  qkv::viz::write_file(csv, planted_csv(20, 30, 12, 5));
  rec::RecommenderOptions o;
  o.data = csv;
  o.out_dir = (dir.path / "sasrec").string();
  o.model = "sasrec";
  o.sasrec.model.dim = 8;
  o.sasrec.model.heads = 2;
  o.sasrec.model.max_len = 6;
  o.sasrec.epochs = 2;
  o.sasrec.eval_every = 1;
  const rec::RecommenderReport report = rec::train_recommender(o);
  EXPECT_GE(report.best_epoch, 1);
  const rec::Recommender m = rec::Recommender::load(o.out_dir);
  const std::int64_t u = m.user_index(104);
  const rec::HistoryAttention a = m.attention(u);
  EXPECT_EQ(a.history.size(), 6u);  // the last max_len of the user's 10 known ratings
  EXPECT_EQ(std::vector<std::int64_t>(m.history(u).end() - 6, m.history(u).end()), a.history);
  ASSERT_EQ(a.layers.size(), 2u);
  EXPECT_EQ(a.layers[0].shape(), qkv::Shape({2, 6, 6}));
  double row = 0;
  for (int k = 0; k < 6; ++k) row += a.layers[1].data_as<float>()[5 * 6 + k];  // head 0, last query
  EXPECT_NEAR(row, 1.0, 1e-5);
  expect_error([&] { m.predict(std::vector<std::int64_t>{u}, std::vector<std::int64_t>{0}); },
               "ranks movies and does not predict ratings");
  EXPECT_EQ(m.recommend(u, 3).size(), 3u);
}

// SASRec's scorer runs a batch of histories in length groups (more than 8,192 tokens here:
// two groups); each row must be what the history alone gives: its last state's dot
// products with every movie's embedding.
TEST(Ranking, SasRecScorerMatchesOneHistoryAtATime) {
  qkv::models::SasRecConfig c;
  c.num_items = 40;
  c.dim = 8;
  c.layers = 2;
  c.heads = 2;
  c.max_len = 200;
  qkv::models::SasRecWeights w = qkv::models::SasRecWeights::initialized(c, 3);
  perturb(w.parameters(), 4);
  qkv::Rng rng(5);
  std::vector<std::vector<std::int64_t>> histories;
  for (int b = 0; b < 50; ++b) {
    std::vector<std::int64_t> h(b % 5 == 0 ? 250 : 1 + static_cast<std::size_t>(rng.uniform() * 200));
    for (auto& m : h) m = static_cast<std::int64_t>(rng.uniform() * 40);
    histories.push_back(h);
  }
  std::vector<std::int64_t> users(50, 0);
  std::vector<float> scores(50 * 40);
  rec::sasrec_scorer(c, w)(users, histories, scores);
  for (int b = 0; b < 50; ++b) {
    const auto& h = histories[b];
    const std::size_t n = std::min<std::size_t>(h.size(), 200);  // the last max_len
    std::vector<std::int64_t> ids;
    for (std::size_t t = h.size() - n; t < h.size(); ++t) ids.push_back(h[t] + 1);
    const qkv::Tensor state = w.forward(ids, 1, static_cast<std::int64_t>(n));
    const float* last = state.data_as<float>() + (n - 1) * 8;
    for (int i = 0; i < 40; ++i) {
      double want = 0;
      for (int j = 0; j < 8; ++j) want += double{last[j]} * w.item_emb.weight.data_as<float>()[(i + 1) * 8 + j];
      ASSERT_NEAR(scores[b * 40 + i], want, 1e-4 * (1 + std::abs(want))) << "history " << b << " movie " << i;
    }
  }
}
