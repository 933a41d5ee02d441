// The recommender task: ratings, the split, matrix factorisation, SASRec training, the
// ranking evaluation and the model directory. See apps/recommender/recommender.h.

#include "recommender/recommender.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "recommender/csv.h"
#include "io/json_bounded.h"
#include "io/json_config.h"
#include "io/text_input.h"
#include "qkv/attention.h"
#include "qkv/error.h"
#include "qkv/files.h"
#include "qkv/rng.h"
#include "qkv/safetensors.h"
#include "qkv/train.h"
#include "qkv/viz.h"

namespace qkv::recommender {

namespace {


std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Levenshtein distance over bytes, for "did you mean" lists.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), std::size_t{0});
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}


// The movies a user rated in any part, as flags over the catalogue.
std::vector<char> rated_flags(const UserRatings& u, std::int64_t num_items) {
  std::vector<char> rated(static_cast<std::size_t>(num_items), 0);
  for (const Rating& r : u.ratings) rated[static_cast<std::size_t>(r.movie)] = 1;
  return rated;
}

// The index of `id` in `ids` (ascending), or nothing.
std::optional<std::int64_t> index_of(const std::vector<std::int64_t>& ids, std::int64_t id) {
  const auto it = std::lower_bound(ids.begin(), ids.end(), id);
  if (it == ids.end() || *it != id) return std::nullopt;
  return it - ids.begin();
}
// The index of movieId `id` in `movies` (ascending ids), or nothing.
std::optional<std::int64_t> index_of(const std::vector<Movie>& movies, std::int64_t id) {
  const auto it = std::lower_bound(movies.begin(), movies.end(), id,
                                   [](const Movie& m, std::int64_t x) { return m.id < x; });
  if (it == movies.end() || it->id != id) return std::nullopt;
  return it - movies.begin();
}

// Up to `count` distinct movies with rated[m] == 0, uniformly by rejection (Floyd's
// would need the complement's size; rejection is cheap while most movies are unrated).
std::vector<std::int64_t> sample_unrated(const std::vector<char>& rated, std::int64_t count, Rng& rng) {
  const auto I = static_cast<std::int64_t>(rated.size());
  const std::int64_t unrated = I - std::count(rated.begin(), rated.end(), 1);
  count = std::min(count, unrated);
  std::vector<char> taken(rated);
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(count));
  if (count <= 0) return out;
  if (unrated < 4 * count) {  // few left: take a random subset of the complement exactly
    std::vector<std::int64_t> rest;
    for (std::int64_t m = 0; m < I; ++m)
      if (!rated[static_cast<std::size_t>(m)]) rest.push_back(m);
    for (std::int64_t i = 0; i < count; ++i) {
      const std::int64_t j = i + rng.uniform_int(static_cast<std::int64_t>(rest.size()) - i);
      std::swap(rest[static_cast<std::size_t>(i)], rest[static_cast<std::size_t>(j)]);
      out.push_back(rest[static_cast<std::size_t>(i)]);
    }
    return out;
  }
  while (static_cast<std::int64_t>(out.size()) < count) {
    const std::int64_t m = rng.uniform_int(I);
    if (taken[static_cast<std::size_t>(m)]) continue;
    taken[static_cast<std::size_t>(m)] = 1;
    out.push_back(m);
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Data.

std::string movie_label(const Movie& m) {
  if (m.title.empty()) return "movie " + std::to_string(m.id);
  return m.year > 0 ? m.title + " (" + std::to_string(m.year) + ")" : m.title;
}

std::optional<std::int64_t> Ratings::user_index(std::int64_t user_id) const {
  return index_of(user_ids, user_id);
}

std::optional<std::int64_t> Ratings::movie_index(std::int64_t movie_id) const {
  return index_of(movies, movie_id);
}

Ratings parse_ratings(std::string_view csv, const std::string& label) {
  const std::vector<io::CsvRecord> records = io::parse_csv(csv, label);
  QKV_CHECK(!records.empty(), label << ": empty (no header and no ratings)");
  const std::vector<std::string>& header = records[0].fields;
  const auto column = [&](const char* name, bool required) -> std::int64_t {
    for (std::size_t i = 0; i < header.size(); ++i)
      if (header[i] == name) return static_cast<std::int64_t>(i);
    QKV_CHECK(!required, label << " line " << records[0].line << ": the header has no '" << name
                               << "' column (need userId, movieId, rating, timestamp; "
                                  "title, year, genres optional)");
    return -1;
  };
  const std::int64_t c_user = column("userId", true), c_movie = column("movieId", true),
                     c_rating = column("rating", true), c_time = column("timestamp", true),
                     c_title = column("title", false), c_year = column("year", false),
                     c_genres = column("genres", false);
  QKV_CHECK(records.size() > 1, label << ": no ratings after the header");

  struct Raw {
    std::int64_t user, movie;
    float rating;
    std::int64_t timestamp;
  };
  std::vector<Raw> raw;
  raw.reserve(records.size() - 1);
  std::map<std::int64_t, std::pair<Movie, std::int64_t>> movies;  // id -> (movie, first line)
  for (std::size_t r = 1; r < records.size(); ++r) {
    const io::CsvRecord& rec = records[r];
    const std::string where = label + " line " + std::to_string(rec.line);
    QKV_CHECK(rec.fields.size() == header.size(),
              where << ": " << rec.fields.size() << " fields, the header has " << header.size());
    const auto field = [&](std::int64_t c) -> const std::string& { return rec.fields[static_cast<std::size_t>(c)]; };
    Raw x{};
    x.user = io::csv_integer(field(c_user), where, "userId");
    x.movie = io::csv_integer(field(c_movie), where, "movieId");
    const double rating = io::csv_number(field(c_rating), where, "rating");
    // The field as written, not the double shortened to 6 digits ("5.0000001" is not "5").
    QKV_CHECK(rating >= 0.5 && rating <= 5.0,
              where << ": rating " << field(c_rating) << " is outside [0.5, 5]");
    x.rating = static_cast<float>(rating);
    x.timestamp = io::csv_integer(field(c_time), where, "timestamp");
    Movie m;
    m.id = x.movie;
    if (c_title >= 0) m.title = field(c_title);
    if (c_year >= 0 && !field(c_year).empty()) {
      m.year = io::csv_integer(field(c_year), where, "year");
      QKV_CHECK(m.year >= 1 && m.year <= 9999, where << ": year " << m.year << " is outside [1, 9999]");
    }
    if (c_genres >= 0) m.genres = field(c_genres);
    const auto [it, fresh] = movies.try_emplace(x.movie, m, rec.line);
    QKV_CHECK(fresh || (it->second.first.title == m.title && it->second.first.year == m.year),
              where << ": movie " << x.movie << " is '" << movie_label(m) << "' here but '"
                    << movie_label(it->second.first) << "' on line " << it->second.second);
    raw.push_back(x);
  }
  Ratings data;
  for (auto& [id, m] : movies) data.movies.push_back(std::move(m.first));
  for (const Raw& x : raw) data.user_ids.push_back(x.user);
  std::sort(data.user_ids.begin(), data.user_ids.end());
  data.user_ids.erase(std::unique(data.user_ids.begin(), data.user_ids.end()), data.user_ids.end());
  data.ratings.reserve(raw.size());
  std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> seen;  // (user, movie) -> line
  for (std::size_t r = 0; r < raw.size(); ++r) {
    const Raw& x = raw[r];
    const std::int64_t line = records[r + 1].line;
    const auto [it, fresh] = seen.try_emplace({x.user, x.movie}, line);
    QKV_CHECK(fresh, label << " line " << line << ": user " << x.user << " rated movie " << x.movie
                           << " already on line " << it->second);
    data.ratings.push_back({*data.user_index(x.user), *data.movie_index(x.movie), x.rating, x.timestamp});
  }
  return data;
}

Ratings read_ratings(const std::string& path) {
  return parse_ratings(io::read_text(path, "ratings"), path);
}

// ---------------------------------------------------------------------------------------
// The split.

Split temporal_split(const Ratings& data) {
  Split s;
  s.users.resize(data.user_ids.size());
  for (const Rating& r : data.ratings) s.users[static_cast<std::size_t>(r.user)].ratings.push_back(r);
  for (UserRatings& u : s.users) {
    const std::int64_t n = static_cast<std::int64_t>(u.ratings.size());
    std::sort(u.ratings.begin(), u.ratings.end(), [&](const Rating& a, const Rating& b) {
      if (a.timestamp != b.timestamp) return a.timestamp < b.timestamp;
      return data.movies[static_cast<std::size_t>(a.movie)].id < data.movies[static_cast<std::size_t>(b.movie)].id;
    });
    u.test = std::min<std::int64_t>(n, std::max<std::int64_t>(1, n / 5));
    const std::int64_t m = n - u.test;
    u.validation = m < 2 ? 0 : std::max<std::int64_t>(1, m / 10);
    u.fit = m - u.validation;
    s.fit += u.fit;
    s.validation += u.validation;
    s.test += u.test;
  }
  return s;
}

std::vector<Rating> Split::part(int which) const {
  std::vector<Rating> out;
  for (const UserRatings& u : users) {
    const std::int64_t begin = which == 0 ? 0 : which == 1 ? u.fit : u.fit + u.validation;
    const std::int64_t end = which == 0 ? u.fit : which == 1 ? u.fit + u.validation : u.fit + u.validation + u.test;
    out.insert(out.end(), u.ratings.begin() + begin, u.ratings.begin() + end);
  }
  return out;
}

std::string split_description(const Split& s) {
  std::ostringstream o;
  o << "split per user by time (ties by movieId): the last max(1, floor(0.2·n)) of n ratings test, "
       "the last max(1, floor(0.1·m)) of the m before validation, the rest fit — "
    << s.fit << " fit, " << s.validation << " validation, " << s.test << " test ratings of "
    << s.users.size() << " users";
  return o.str();
}

RandomFold random_fold(const Ratings& data, std::int64_t folds, std::int64_t fold, std::uint64_t seed) {
  QKV_CHECK(folds >= 2 && fold >= 0 && fold < folds,
            "random_fold: need folds >= 2 and fold in [0, folds), got " << folds << ", " << fold);
  std::vector<std::size_t> order(data.ratings.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  Rng rng(mix64(seed + 0x666f6c64ull));
  shuffle(order, rng);
  RandomFold f;
  for (std::size_t i = 0; i < order.size(); ++i)
    (static_cast<std::int64_t>(i % static_cast<std::size_t>(folds)) == fold ? f.test : f.train)
        .push_back(data.ratings[order[i]]);
  return f;
}

// ---------------------------------------------------------------------------------------
// Matrix factorisation.

float MfModel::predict(std::int64_t u, std::int64_t i, bool clip) const {
  const std::int64_t k = user_factors.size(1);
  const float* p = user_factors.data_as<float>() + u * k;
  const float* q = movie_factors.data_as<float>() + i * k;
  double s = static_cast<double>(mean) + user_bias.data_as<float>()[u] + movie_bias.data_as<float>()[i];
  for (std::int64_t j = 0; j < k; ++j) s += static_cast<double>(p[j]) * q[j];
  return clip ? static_cast<float>(std::clamp(s, 0.5, 5.0)) : static_cast<float>(s);
}

namespace {

nn::ParameterList mf_parameters(MfModel& m) {
  return {{"user_bias", &m.user_bias},
          {"movie_bias", &m.movie_bias},
          {"user_factors", &m.user_factors},
          {"movie_factors", &m.movie_factors}};
}

// μ, the mean of the fitted ratings: the global-mean baseline and MF's offset.
float mean_rating(const std::vector<Rating>& ratings) {
  double sum = 0;
  for (const Rating& r : ratings) sum += r.rating;
  return static_cast<float>(sum / static_cast<double>(ratings.size()));
}

MfModel mf_zeros(std::int64_t U, std::int64_t I, std::int64_t k) {
  MfModel m;
  m.user_bias = Tensor::zeros({U});
  m.movie_bias = Tensor::zeros({I});
  m.user_factors = Tensor::zeros({U, k});
  m.movie_factors = Tensor::zeros({I, k});
  return m;
}

}  // namespace

double rmse_constant(float prediction, const std::vector<Rating>& ratings) {
  QKV_CHECK(!ratings.empty(), "rmse: no ratings");
  double s = 0;
  for (const Rating& r : ratings) s += (prediction - r.rating) * static_cast<double>(prediction - r.rating);
  return std::sqrt(s / static_cast<double>(ratings.size()));
}

double rmse(const MfModel& model, const std::vector<Rating>& ratings) {
  QKV_CHECK(!ratings.empty(), "rmse: no ratings");
  double s = 0;
  for (const Rating& r : ratings) {
    const double e = model.predict(r.user, r.movie) - static_cast<double>(r.rating);
    s += e * e;
  }
  return std::sqrt(s / static_cast<double>(ratings.size()));
}

BiasFit fit_biases(const std::vector<Rating>& fit, std::int64_t U, std::int64_t I, double l2,
                   std::int64_t max_sweeps) {
  QKV_CHECK(!fit.empty(), "fit biases: no ratings to fit");
  QKV_CHECK(l2 >= 0 && std::isfinite(l2), "fit biases: need l2 >= 0, got " << l2);
  QKV_CHECK(max_sweeps >= 1, "fit biases: need max_sweeps >= 1, got " << max_sweeps);
  BiasFit out;
  out.model = mf_zeros(U, I, 0);
  out.model.mean = mean_rating(fit);
  const double mu = out.model.mean;  // the float μ predict adds, so the fit is exact for it
  std::vector<double> bu(static_cast<std::size_t>(U), 0.0), bi(static_cast<std::size_t>(I), 0.0);
  std::vector<double> nu(bu.size(), 0.0), ni(bi.size(), 0.0), sum_u(bu.size()), sum_i(bi.size());
  for (const Rating& r : fit) {
    QKV_CHECK(r.user >= 0 && r.user < U && r.movie >= 0 && r.movie < I,
              "fit biases: rating of user " << r.user << ", movie " << r.movie << " outside " << U << " users, "
                                            << I << " movies");
    nu[static_cast<std::size_t>(r.user)] += 1;
    ni[static_cast<std::size_t>(r.movie)] += 1;
  }
  // One half-sweep: every bias of one side from the other side's, in closed form.
  const auto update = [&](std::vector<double>& b, const std::vector<double>& other, const std::vector<double>& n,
                          std::vector<double>& sum, bool users) {
    std::fill(sum.begin(), sum.end(), 0.0);
    for (const Rating& r : fit) {
      const auto self = static_cast<std::size_t>(users ? r.user : r.movie);
      const auto o = static_cast<std::size_t>(users ? r.movie : r.user);
      sum[self] += static_cast<double>(r.rating) - mu - other[o];
    }
    double moved = 0;
    for (std::size_t j = 0; j < b.size(); ++j) {
      const double v = n[j] > 0 ? sum[j] / (l2 + n[j]) : 0.0;
      moved = std::max(moved, std::abs(v - b[j]));
      b[j] = v;
    }
    return moved;
  };
  while (out.sweeps < max_sweeps && !out.converged) {
    const double moved = std::max(update(bu, bi, nu, sum_u, true), update(bi, bu, ni, sum_i, false));
    ++out.sweeps;
    out.converged = moved < 1e-9;
  }
  std::copy(bu.begin(), bu.end(), out.model.user_bias.data_as<float>());
  std::copy(bi.begin(), bi.end(), out.model.movie_bias.data_as<float>());
  return out;
}

TunedBiases tune_biases(const std::vector<Rating>& fit, const std::vector<Rating>& validation, std::int64_t U,
                        std::int64_t I, std::span<const double> grid) {
  QKV_CHECK(!grid.empty(), "tune biases: no λ to choose from");
  TunedBiases best;
  for (const double l2 : grid) {
    BiasFit f = fit_biases(fit, U, I, l2);
    const double v = validation.empty() ? 0.0 : rmse(f.model, validation);
    best.validation_rmses.push_back(v);
    if (best.validation_rmses.size() == 1 || v < best.validation_rmse) {
      best.fit = std::move(f);
      best.l2 = l2;
      best.validation_rmse = v;
    }
  }
  return best;
}

namespace {

// One minibatch of matrix factorisation: the epoch's shuffled ratings (each epoch shuffles the
// order the one before left, as the straight run did), this rank's rows of the batch.
struct MfTask : train::Task {
  const std::vector<Rating>& fit;
  const std::vector<Rating>& validation;
  const MfOptions& o;
  MfModel m, grads;
  std::vector<std::size_t> order;
  std::int64_t order_epoch = -1;  // the epoch `order` is shuffled for
  MfTask(const std::vector<Rating>& f, const std::vector<Rating>& v, std::int64_t U, std::int64_t I,
         const MfOptions& options)
      : fit(f), validation(v), o(options), m(mf_zeros(U, I, options.dim)), grads(mf_zeros(U, I, options.dim)) {
    m.mean = mean_rating(fit);
    Rng init(mix64(o.seed + 0x6d66ull));
    // N(0, 0.01²): near zero, so the biases fit first; on MovieLens (validation RMSE) it
    // matched Funk's N(0, 0.1²) and beat 0.3 (0.8897 vs 0.8904 and 0.8961, dim 64, λ 0.1).
    for (Tensor* t : {&m.user_factors, &m.movie_factors}) {
      float* p = t->data_as<float>();
      for (std::int64_t i = 0; i < t->numel(); ++i) p[i] = static_cast<float>(0.01 * init.normal());
    }
  }
  nn::ParameterList parameters() override { return mf_parameters(m); }
  nn::ParameterList gradients() override { return mf_parameters(grads); }
  void shuffle_for(std::int64_t epoch) {
    if (order.empty() || epoch != order_epoch + 1) {  // a resumed run replays the shuffles before its epoch
      order.resize(fit.size());
      std::iota(order.begin(), order.end(), std::size_t{0});
      order_epoch = -1;
    }
    for (std::int64_t e = order_epoch + 1; e <= epoch; ++e) {
      Rng rng(mix64(o.seed * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(e) + 1));
      shuffle(order, rng);
    }
    order_epoch = epoch;
  }
  train::StepResult step(const train::StepContext& ctx) override {
    if (ctx.epoch != order_epoch) shuffle_for(ctx.epoch);
    const std::int64_t k = o.dim;
    const auto n = static_cast<std::int64_t>(order.size());
    const std::int64_t batch_first = ctx.step_in_epoch * o.batch;
    const distributed::RowShare rows = ctx.share(std::min(n, batch_first + o.batch) - batch_first);
    const auto first = static_cast<std::size_t>(batch_first + rows.lo), last = static_cast<std::size_t>(batch_first + rows.hi);
    ctx.weigh(static_cast<double>(last - first));
    const double inv = 1.0 / static_cast<double>(last - first);
    float* gbu = grads.user_bias.data_as<float>();
    float* gbi = grads.movie_bias.data_as<float>();
    float* gp = grads.user_factors.data_as<float>();
    float* gq = grads.movie_factors.data_as<float>();
    const float* bu = m.user_bias.data_as<float>();
    const float* bi = m.movie_bias.data_as<float>();
    const float* P = m.user_factors.data_as<float>();
    const float* Q = m.movie_factors.data_as<float>();
    // loss = mean over the batch of (r̂ − r)² + λ(b_u² + b_i² + |p_u|² + |q_i|²),
    // r̂ = μ + b_u + b_i + p_u·q_i (unclipped: the clip has no gradient).
    double loss = 0;
    for (std::size_t j = first; j < last; ++j) {
      const Rating& r = fit[order[j]];
      const std::int64_t u = r.user, i = r.movie;
      const double e = m.predict(u, i, false) - static_cast<double>(r.rating);
      double reg = static_cast<double>(bu[u]) * bu[u] + static_cast<double>(bi[i]) * bi[i];
      for (std::int64_t c = 0; c < k; ++c)
        reg += static_cast<double>(P[u * k + c]) * P[u * k + c] + static_cast<double>(Q[i * k + c]) * Q[i * k + c];
      loss += e * e + o.l2 * reg;
      const auto g = static_cast<float>(2.0 * e * inv), lam = static_cast<float>(2.0 * o.l2 * inv);
      gbu[u] += g + lam * bu[u];
      gbi[i] += g + lam * bi[i];
      for (std::int64_t c = 0; c < k; ++c) {
        gp[u * k + c] += g * Q[i * k + c] + lam * P[u * k + c];
        gq[i * k + c] += g * P[u * k + c] + lam * Q[i * k + c];
      }
    }
    const auto count = static_cast<double>(last - first);
    return {.loss = loss / count, .count = count, .items = count};
  }
  double evaluate() override { return rmse(m, validation); }
};

// x = (A + λ·1)⁻¹ b for the symmetric positive semi-definite A (k, k), row-major, its lower
// triangle read, by Cholesky (λ > 0 makes the system positive definite); A and b are
// overwritten, x is b.
void solve_ridge_system(std::vector<double>& A, std::vector<double>& b, double l2, std::int64_t k) {
  for (std::int64_t j = 0; j < k; ++j) A[j * k + j] += l2;
  for (std::int64_t j = 0; j < k; ++j) {  // A = L Lᵀ, L in the lower triangle
    double d = A[j * k + j];
    for (std::int64_t c = 0; c < j; ++c) d -= A[j * k + c] * A[j * k + c];
    const double l = std::sqrt(d);
    A[j * k + j] = l;
    for (std::int64_t r = j + 1; r < k; ++r) {
      double v = A[r * k + j];
      for (std::int64_t c = 0; c < j; ++c) v -= A[r * k + c] * A[j * k + c];
      A[r * k + j] = v / l;
    }
  }
  for (std::int64_t j = 0; j < k; ++j) {  // L y = b
    for (std::int64_t c = 0; c < j; ++c) b[j] -= A[j * k + c] * b[c];
    b[j] /= A[j * k + j];
  }
  for (std::int64_t j = k - 1; j >= 0; --j) {  // Lᵀ x = y
    for (std::int64_t c = j + 1; c < k; ++c) b[j] -= A[c * k + j] * b[c];
    b[j] /= A[j * k + j];
  }
}

// The ridge solution x = (XᵀX + λ·1)⁻¹ Xᵀy for X (n, k), y (n), into x (k). With n < k, as
// for most movies, the same x is Xᵀ(XXᵀ + λ·1)⁻¹ y (push-through identity), an n × n system.
void ridge(const std::vector<double>& X, const std::vector<double>& y, std::int64_t n, std::int64_t k, double l2,
           std::vector<double>& A, std::vector<double>& b, float* x) {
  const std::int64_t m = std::min(n, k);
  A.assign(static_cast<std::size_t>(m * m), 0.0);
  if (n >= k) {
    b.assign(static_cast<std::size_t>(k), 0.0);
    for (std::int64_t r = 0; r < n; ++r) {
      const double* xr = X.data() + r * k;
      for (std::int64_t c = 0; c < k; ++c) {
        b[static_cast<std::size_t>(c)] += y[static_cast<std::size_t>(r)] * xr[c];
        for (std::int64_t d = 0; d <= c; ++d) A[static_cast<std::size_t>(c * k + d)] += xr[c] * xr[d];
      }
    }
    solve_ridge_system(A, b, l2, k);
    for (std::int64_t c = 0; c < k; ++c) x[c] = static_cast<float>(b[static_cast<std::size_t>(c)]);
    return;
  }
  b.assign(y.begin(), y.begin() + n);
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t s = 0; s <= r; ++s) {
      double v = 0;
      for (std::int64_t c = 0; c < k; ++c) v += X[static_cast<std::size_t>(r * k + c)] * X[static_cast<std::size_t>(s * k + c)];
      A[static_cast<std::size_t>(r * n + s)] = v;
    }
  solve_ridge_system(A, b, l2, n);
  for (std::int64_t c = 0; c < k; ++c) {
    double v = 0;
    for (std::int64_t r = 0; r < n; ++r) v += X[static_cast<std::size_t>(r * k + c)] * b[static_cast<std::size_t>(r)];
    x[c] = static_cast<float>(v);
  }
}

// Matrix factorisation by alternating least squares (Koren, Bell & Volinsky 2009; Zhou et al.
// 2008, with an unweighted λ): μ, b_u and b_i are the tuned biases' and stay fixed; the factors
// minimise Σ_fit (y − p_u·q_i)² + λ(Σ_u |p_u|² + Σ_i |q_i|²), y = r − μ − b_u − b_i. Given the
// movies' q, each p_u is the ridge solution (Σ_i q_i q_iᵀ + λ·1)⁻¹ Σ_i y q_i over its ratings,
// exactly, and likewise each q_i given the users' p. An epoch is one sweep: every user, then
// every movie, spread over the epoch's S steps (entities [E·s/S, E·(s+1)/S) of the E = U + I,
// users first), so checkpoints, resume and stop work as for AdamW. The step moves the weights
// itself and leaves the gradients zero, so the loop's AdamW (no weight decay) moves nothing.
// On MovieLens (dim 64, validation) it beat the AdamW fit, whose biases and factors share one
// per-rating λ: the biases want λ ≈ 3, the factors ≈ 15 (docs/recommender.md).
struct MfAlsTask : train::Task {
  const std::vector<Rating>& fit;
  const std::vector<Rating>& validation;
  const MfOptions& o;
  std::int64_t U, I, per_epoch;
  MfModel m, grads;  // grads: zeros, never written
  std::vector<double> residual;                 // (N) y of each fit rating
  std::vector<std::size_t> user_rows, movie_rows;  // fit rating indices grouped by user, by movie
  std::vector<std::size_t> user_first, movie_first;  // (U + 1), (I + 1): each group's start
  MfAlsTask(const std::vector<Rating>& f, const std::vector<Rating>& v, std::int64_t num_users,
            std::int64_t num_movies, const MfOptions& options, const MfModel& biases, std::int64_t steps_per_epoch)
      : fit(f), validation(v), o(options), U(num_users), I(num_movies), per_epoch(steps_per_epoch),
        m(mf_zeros(num_users, num_movies, options.dim)), grads(mf_zeros(num_users, num_movies, options.dim)) {
    m.mean = biases.mean;
    std::copy_n(biases.user_bias.data_as<float>(), U, m.user_bias.data_as<float>());
    std::copy_n(biases.movie_bias.data_as<float>(), I, m.movie_bias.data_as<float>());
    // N(0, 0.1²) movie factors (the users are solved from them first, so theirs do not
    // matter): at 0.01 the first sweeps, shrunk by λ, would barely leave zero.
    Rng init(mix64(o.seed + 0x6d66ull));
    float* q = m.movie_factors.data_as<float>();
    for (std::int64_t j = 0; j < m.movie_factors.numel(); ++j) q[j] = static_cast<float>(0.1 * init.normal());
    residual.resize(fit.size());
    for (std::size_t j = 0; j < fit.size(); ++j)
      residual[j] = static_cast<double>(fit[j].rating) - m.mean - m.user_bias.data_as<float>()[fit[j].user] -
                    m.movie_bias.data_as<float>()[fit[j].movie];
    group(true, user_rows, user_first);
    group(false, movie_rows, movie_first);
  }
  void group(bool users, std::vector<std::size_t>& rows, std::vector<std::size_t>& first) const {
    first.assign(static_cast<std::size_t>(users ? U : I) + 1, 0);
    for (const Rating& r : fit) ++first[static_cast<std::size_t>(users ? r.user : r.movie) + 1];
    std::partial_sum(first.begin(), first.end(), first.begin());
    std::vector<std::size_t> next(first.begin(), first.end() - 1);
    rows.resize(fit.size());
    for (std::size_t j = 0; j < fit.size(); ++j) rows[next[static_cast<std::size_t>(users ? fit[j].user : fit[j].movie)]++] = j;
  }
  nn::ParameterList parameters() override { return mf_parameters(m); }
  nn::ParameterList gradients() override { return mf_parameters(grads); }
  train::StepResult step(const train::StepContext& ctx) override {
    const std::int64_t k = o.dim, E = U + I;
    ctx.weigh(1.0);  // every rank solves the same entities; the gradients are zero anyway
    const std::int64_t lo = E * ctx.step_in_epoch / per_epoch, hi = E * (ctx.step_in_epoch + 1) / per_epoch;
    std::vector<double> X, y, A, b;  // (n, k), (n): the other side's vectors and the targets
    double squared = 0, count = 0;
    for (std::int64_t e = lo; e < hi; ++e) {
      const bool user = e < U;
      const std::int64_t self = user ? e : e - U;
      const auto& rows = user ? user_rows : movie_rows;
      const auto& first = user ? user_first : movie_first;
      float* x = (user ? m.user_factors : m.movie_factors).data_as<float>() + self * k;
      const float* other = (user ? m.movie_factors : m.user_factors).data_as<float>();
      const std::size_t a = first[static_cast<std::size_t>(self)], z = first[static_cast<std::size_t>(self) + 1];
      const auto n = static_cast<std::int64_t>(z - a);
      if (n == 0) {  // no fit rating: the minimiser is 0, the prediction its biases'
        std::fill_n(x, k, 0.0f);
        continue;
      }
      X.resize(static_cast<std::size_t>(n * k));
      y.resize(static_cast<std::size_t>(n));
      for (std::int64_t r = 0; r < n; ++r) {
        const Rating& rating = fit[rows[a + static_cast<std::size_t>(r)]];
        std::copy_n(other + (user ? rating.movie : rating.user) * k, k, X.begin() + r * k);
        y[static_cast<std::size_t>(r)] = residual[rows[a + static_cast<std::size_t>(r)]];
      }
      ridge(X, y, n, k, o.als_l2, A, b, x);
      for (std::size_t j = a; j < z; ++j) {  // the loss: squared error of the ratings just refitted
        const double e2 = m.predict(fit[rows[j]].user, fit[rows[j]].movie, false) - static_cast<double>(fit[rows[j]].rating);
        squared += e2 * e2;
        count += 1;
      }
    }
    return {.loss = count > 0 ? squared / count : 0.0, .count = 1.0, .items = count};
  }
  double evaluate() override { return rmse(m, validation); }
};

}  // namespace

MfTraining train_mf(const std::vector<Rating>& fit, const std::vector<Rating>& validation, std::int64_t U,
                    std::int64_t I, const MfOptions& o, const train::ProgressCallback& on_progress,
                    const std::atomic<bool>* stop) {
  QKV_CHECK(!fit.empty(), "train mf: no ratings to fit");
  QKV_CHECK(o.solver == "als" || o.solver == "adamw", "train mf: solver must be 'als' or 'adamw', got '" << o.solver << "'");
  // Refused rather than ignored: MF's products are one dot product per rating (adamw) or
  // small exact solves (als), none of them a matrix product bf16 would speed up.
  QKV_CHECK(o.run.precision == "f32", "train mf: --precision " << o.run.precision << ": matrix factorisation has "
                                      "no matrix products to run in bf16 (one dot product per rating, and ALS's "
                                      "exact solves are f32); train it in f32, or train sasrec in bf16");
  QKV_CHECK(o.dim >= 0 && o.epochs >= 1 && o.batch >= 1 && o.lr > 0 && std::isfinite(o.lr) &&
                o.l2 >= 0 && std::isfinite(o.l2) && o.als_l2 > 0 && std::isfinite(o.als_l2),
            "train mf: need dim >= 0, epochs >= 1, batch >= 1, lr > 0, l2 >= 0 and als_l2 > 0, got dim = "
                << o.dim << ", epochs = " << o.epochs << ", batch = " << o.batch << ", lr = " << o.lr
                << ", l2 = " << o.l2 << ", als_l2 = " << o.als_l2);
  const int ranks = o.run.communicator != nullptr ? o.run.communicator->size() : 1;
  QKV_CHECK(o.batch >= ranks, "train mf: --batch " << o.batch << " gives some of the " << ranks
                                                  << " ranks no ratings; it must be at least the number of ranks");
  const bool als = o.solver == "als";
  // adamw: `batch` ratings a step; als: `batch` users and movies solved a step (a step costs
  // the loop an AdamW pass over every weight, so not one per `batch` ratings: 284 steps a
  // sweep on MovieLens made the run 5 times slower than its 39).
  const std::size_t per_step_of = als ? static_cast<std::size_t>(U + I) : fit.size();
  const auto per_epoch = static_cast<std::int64_t>(
      std::max<std::size_t>(1, (per_step_of + static_cast<std::size_t>(o.batch) - 1) / static_cast<std::size_t>(o.batch)));
  std::optional<MfTask> adamw_task;
  std::optional<MfAlsTask> als_task;
  if (als)
    als_task.emplace(fit, validation, U, I, o, tune_biases(fit, validation, U, I).fit.model, per_epoch);
  else
    adamw_task.emplace(fit, validation, U, I, o);
  train::Task& task = als ? static_cast<train::Task&>(*als_task) : *adamw_task;
  train::LoopOptions loop;
  static_cast<train::RunOptions&>(loop) = o.run;
  loop.task = o.dim == 0 ? "biases" : "mf";
  loop.steps = per_epoch * o.epochs;
  loop.steps_per_epoch = per_epoch;
  loop.unit = "ratings";
  loop.eval_every = validation.empty() ? 0 : 1;
  loop.metric = "validation RMSE";
  loop.higher_is_better = false;
  loop.keep_best = true;
  loop.patience = o.patience;
  loop.adam.weight_decay = 0.0;  // L2 is in the loss
  loop.lr = {o.lr, 0, 1.0};      // constant
  // No checkpoint at every epoch end: an epoch is a tenth of a second on MovieLens and a
  // checkpoint (weights, moments, best weights: 11 MB) a sizeable part of that; Ctrl-C,
  // stop_at and checkpoint_every still write one.
  loop.identity = {{"solver", o.solver},
                   {"dim", std::to_string(o.dim)},
                   {"batch", std::to_string(o.batch)},
                   {"l2", train::identity_value(als ? o.als_l2 : o.l2)},
                   {"seed", std::to_string(o.seed)},
                   {"shape", std::to_string(U) + " users, " + std::to_string(I) + " movies, " +
                                 std::to_string(fit.size()) + " ratings fitted"}};
  MfTraining result;
  static_cast<train::LoopResult&>(result) = train::fit(task, loop, on_progress, stop);
  result.model = std::move(als ? als_task->m : adamw_task->m);
  return result;
}

std::vector<FoldRmse> mf_cross_validation(const Ratings& data, std::int64_t folds, const MfOptions& o,
                                          std::uint64_t seed) {
  const auto U = static_cast<std::int64_t>(data.user_ids.size()), I = static_cast<std::int64_t>(data.movies.size());
  std::vector<FoldRmse> out;
  for (std::int64_t f = 0; f < folds; ++f) {
    RandomFold fold = random_fold(data, folds, f, seed);
    // random_fold's training part is in shuffled order already: its last ninth validates.
    const auto cut = static_cast<std::ptrdiff_t>(fold.train.size() - fold.train.size() / 9);
    const std::vector<Rating> fit(fold.train.begin(), fold.train.begin() + cut),
        val(fold.train.begin() + cut, fold.train.end());
    FoldRmse r;
    r.global_mean = rmse_constant(mean_rating(fit), fold.test);
    r.biases = rmse(tune_biases(fit, val, U, I).fit.model, fold.test);
    r.mf = rmse(train_mf(fit, val, U, I, o).model, fold.test);
    out.push_back(r);
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// SASRec training.

SasRecBatches::SasRecBatches(const Split& split, std::int64_t num_items, std::int64_t batch,
                             std::int64_t max_len, std::uint64_t seed)
    : num_items_(num_items), batch_(batch), max_len_(max_len), seed_(seed) {
  QKV_CHECK(batch >= 1 && max_len >= 1, "sasrec batches: batch and max_len must be >= 1, got "
                                            << batch << ", " << max_len);
  for (std::size_t u = 0; u < split.users.size(); ++u) {
    const UserRatings& r = split.users[u];
    if (r.fit < 2) continue;
    std::vector<std::int64_t> seq;
    std::vector<char> rated(static_cast<std::size_t>(num_items), 0);
    for (std::int64_t j = 0; j < r.fit; ++j) {
      seq.push_back(r.ratings[static_cast<std::size_t>(j)].movie);
      rated[static_cast<std::size_t>(seq.back())] = 1;
    }
    QKV_CHECK(std::count(rated.begin(), rated.end(), 1) < num_items,
              "sasrec batches: user index " << u << " rated every movie: no negative to sample");
    if (static_cast<std::int64_t>(seq.size()) > max_len + 1) seq.erase(seq.begin(), seq.end() - (max_len + 1));
    users_.push_back(static_cast<std::int64_t>(u));
    sequences_.push_back(std::move(seq));
    rated_.push_back(std::move(rated));
  }
  QKV_CHECK(!users_.empty(), "sasrec: no user has 2 or more ratings in the fit part");
}

std::int64_t SasRecBatches::steps_per_epoch() const {
  return (static_cast<std::int64_t>(users_.size()) + batch_ - 1) / batch_;
}

models::SasRecBatch SasRecBatches::get(std::int64_t epoch, std::int64_t step) const {
  QKV_CHECK(epoch >= 0 && step >= 0 && step < steps_per_epoch(),
            "sasrec batches: step " << step << " of epoch " << epoch << " is outside [0, "
                                    << steps_per_epoch() << ")");
  const auto n = static_cast<std::int64_t>(users_.size());
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  Rng rng_order(mix64(seed_ * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(epoch) + 1));
  shuffle(order, rng_order);
  const std::int64_t first = step * batch_, last = std::min(n, first + batch_);
  models::SasRecBatch b;
  b.B = last - first;
  for (std::int64_t j = first; j < last; ++j)
    b.T = std::max(b.T, static_cast<std::int64_t>(sequences_[static_cast<std::size_t>(order[static_cast<std::size_t>(j)])].size()) - 1);
  b.inputs.assign(static_cast<std::size_t>(b.B * b.T), 0);
  b.positives = b.inputs;
  b.negatives = b.inputs;
  Rng rng(mix64((seed_ + 0x6e6567ull) * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(epoch) * 1000003ull +
                static_cast<std::uint64_t>(step)));
  for (std::int64_t row = 0; row < b.B; ++row) {
    const auto t = static_cast<std::size_t>(order[static_cast<std::size_t>(first + row)]);
    b.users.push_back(users_[t]);
    const std::vector<std::int64_t>& seq = sequences_[t];
    const std::vector<char>& rated = rated_[t];
    for (std::size_t j = 0; j + 1 < seq.size(); ++j) {
      const auto at = static_cast<std::size_t>(row * b.T) + j;
      b.inputs[at] = seq[j] + 1;
      b.positives[at] = seq[j + 1] + 1;
      std::int64_t neg;
      do {
        neg = rng.uniform_int(num_items_);
      } while (rated[static_cast<std::size_t>(neg)]);
      b.negatives[at] = neg + 1;
    }
  }
  return b;
}

namespace {

// Rows [lo, hi) of a SASRec batch, padded to the batch's T.
models::SasRecBatch rows_of(const models::SasRecBatch& b, std::int64_t lo, std::int64_t hi) {
  models::SasRecBatch r;
  r.B = hi - lo;
  r.T = b.T;
  r.users.assign(b.users.begin() + lo, b.users.begin() + hi);
  const auto rows = [&](const std::vector<std::int64_t>& v) {
    return std::vector<std::int64_t>(v.begin() + lo * b.T, v.begin() + hi * b.T);
  };
  r.inputs = rows(b.inputs);
  r.positives = rows(b.positives);
  r.negatives = rows(b.negatives);
  return r;
}

// One SASRec step: the epoch's users in their shuffled order, `batch` at a time, this rank's
// rows; the paper's loss over every position with a target.
struct SasRecTask : train::Task {
  const Split& split;
  const SasRecOptions& o;
  const SasRecBatches batches;
  models::SasRecWeights w, grads;
  SasRecTask(const Split& s, const SasRecOptions& options)
      : split(s), o(options), batches(s, options.model.num_items, options.batch, options.model.max_len, options.seed),
        w(models::SasRecWeights::initialized(options.model, options.seed)),
        grads(models::SasRecWeights::zeros_like(options.model)) {}
  nn::ParameterList parameters() override { return w.parameters(); }
  nn::ParameterList gradients() override { return grads.parameters(); }
  train::StepResult step(const train::StepContext& ctx) override {
    models::SasRecBatch b = batches.get(ctx.epoch, ctx.step_in_epoch);
    const distributed::RowShare rows = ctx.share(b.B);
    if (ctx.ranks > 1) b = rows_of(b, rows.lo, rows.hi);
    const auto targets =
        static_cast<double>(std::count_if(b.positives.begin(), b.positives.end(), [](std::int64_t t) { return t != 0; }));
    ctx.weigh(targets);
    // A rank's share of a short last batch may be empty: no loss, no gradient.
    if (targets == 0) return {};
    // Every step and rank its own masks, the same on a resumed run: (seed, step, rank).
    const nn::DropoutDraw dropout =
        nn::DropoutDraw{o.dropout, mix64(o.seed ^ 0x44726f70ull)}.site(static_cast<std::uint64_t>(ctx.step))
            .site(static_cast<std::uint64_t>(ctx.rank));  // "Drop": apart from the seed's other uses
    const double loss = models::sasrec_loss(o.model, w, b, &grads, dropout);
    return {.loss = loss, .count = targets, .items = static_cast<double>(b.B)};
  }
  double evaluate() override {
    return validation_hr10(split, o.model.num_items, sasrec_scorer(o.model, w));
  }
};

}  // namespace

SasRecTraining train_sasrec(const Split& split, const SasRecOptions& o, const train::ProgressCallback& on_progress,
                            const std::atomic<bool>* stop) {
  QKV_CHECK(o.epochs >= 1 && o.batch >= 1 && o.lr > 0 && std::isfinite(o.lr) && o.eval_every >= 1 &&
                o.weight_decay >= 0 && o.dropout >= 0 && o.dropout < 1,
            "train sasrec: need epochs >= 1, batch >= 1, lr > 0, eval_every >= 1, weight_decay >= 0 and "
            "dropout in [0, 1)");
  const int ranks = o.run.communicator != nullptr ? o.run.communicator->size() : 1;
  QKV_CHECK(o.batch >= ranks, "train sasrec: --batch " << o.batch << " gives some of the " << ranks
                                                      << " ranks no users; it must be at least the number of ranks");
  const models::SasRecConfig& c = o.model;
  SasRecTask task(split, o);
  train::LoopOptions loop;
  static_cast<train::RunOptions&>(loop) = o.run;
  loop.task = "sasrec";
  loop.steps_per_epoch = task.batches.steps_per_epoch();
  loop.steps = loop.steps_per_epoch * o.epochs;
  loop.unit = "users";
  loop.eval_every = o.eval_every;
  loop.eval_at_end = true;
  loop.metric = "validation HR@10";
  loop.keep_best = true;
  loop.patience = o.patience;
  loop.adam.beta2 = 0.98;  // the paper's Adam: β = (0.9, 0.98)
  loop.adam.weight_decay = o.weight_decay;
  loop.lr = {o.lr, 0, 1.0};  // constant
  // No checkpoint at every epoch end (5 steps on MovieLens; a checkpoint of 8 MB took 40% of
  // an epoch of the 20,000-rating sample): Ctrl-C, stop_at and checkpoint_every write one.
  loop.identity = {{"config", std::to_string(c.num_items) + " items, dim " + std::to_string(c.dim) + ", " +
                                  std::to_string(c.layers) + " blocks, " + std::to_string(c.heads) + " heads, max_len " +
                                  std::to_string(c.max_len)},
                   {"batch", std::to_string(o.batch)},
                   {"seed", std::to_string(o.seed)},
                   {"dropout", std::to_string(o.dropout)}};
  SasRecTraining result;
  static_cast<train::LoopResult&>(result) = train::fit(task, loop, on_progress, stop);
  result.weights = std::move(task.w);
  if (result.best >= 0) {
    const train::Evaluation& e = result.evaluations[static_cast<std::size_t>(result.best)];
    result.best_epoch = e.step / loop.steps_per_epoch + (e.step % loop.steps_per_epoch != 0);
    result.best_validation = e.score;
  }
  return result;
}

// ---------------------------------------------------------------------------------------
// Ranking evaluation.

double validation_hr10(const Split& split, std::int64_t num_items, const BatchScorer& scorer) {
  return evaluate_ranking(split, num_items, scorer, true, false).hr10;
}

RankingMetrics evaluate_ranking(const Split& split, std::int64_t I, const BatchScorer& scorer,
                                bool validation, bool all_test_movies, std::uint64_t seed) {
  struct Query {
    std::int64_t user, target;
    std::vector<std::int64_t> history, negatives;
    bool first;  // the first held-out movie of its user
  };
  RankingMetrics m;
  std::vector<Query> queries;
  for (std::size_t u = 0; u < split.users.size(); ++u) {
    const UserRatings& r = split.users[u];
    const std::int64_t begin = validation ? r.fit : r.fit + r.validation;
    const std::int64_t count = validation ? r.validation : r.test;
    if (count == 0) continue;
    const std::vector<char> rated = rated_flags(r, I);
    Rng rng(mix64(seed * 0x9e3779b97f4a7c15ull + u + 1));
    for (std::int64_t j = 0; j < (all_test_movies ? count : 1); ++j) {
      Query q;
      q.user = static_cast<std::int64_t>(u);
      q.target = r.ratings[static_cast<std::size_t>(begin + j)].movie;
      for (std::int64_t h = 0; h < begin + j; ++h) q.history.push_back(r.ratings[static_cast<std::size_t>(h)].movie);
      q.negatives = sample_unrated(rated, 100, rng);
      q.first = j == 0;
      queries.push_back(std::move(q));
    }
  }
  QKV_CHECK(!queries.empty(), "evaluate_ranking: no user has a " << (validation ? "validation" : "test") << " part");
  std::vector<double> user_hr(split.users.size(), 0), user_ndcg(split.users.size(), 0);
  std::vector<std::int64_t> user_count(split.users.size(), 0);
  constexpr std::size_t kBatch = 128;
  std::vector<float> scores;
  for (std::size_t first = 0; first < queries.size(); first += kBatch) {
    const std::size_t last = std::min(queries.size(), first + kBatch);
    std::vector<std::int64_t> users;
    std::vector<std::vector<std::int64_t>> histories;
    for (std::size_t i = first; i < last; ++i) {
      users.push_back(queries[i].user);
      histories.push_back(queries[i].history);
    }
    scores.assign((last - first) * static_cast<std::size_t>(I), 0.0f);
    scorer(users, histories, scores);
    for (std::size_t i = first; i < last; ++i) {
      const Query& q = queries[i];
      const float* s = scores.data() + (i - first) * static_cast<std::size_t>(I);
      const float target = s[q.target];
      std::int64_t rank = 0;  // candidates scoring >= the target (ties count against it)
      for (const std::int64_t n : q.negatives) rank += !(s[n] < target);
      const double hr = rank < 10, ndcg = rank < 10 ? 1.0 / std::log2(static_cast<double>(rank) + 2.0) : 0.0;
      user_hr[static_cast<std::size_t>(q.user)] += hr;
      user_ndcg[static_cast<std::size_t>(q.user)] += ndcg;
      ++user_count[static_cast<std::size_t>(q.user)];
      if (!q.first) continue;
      m.hr10 += hr;
      m.ndcg10 += ndcg;
      // catalogue: every movie not in the history competes
      std::vector<char> in_history(static_cast<std::size_t>(I), 0);
      for (const std::int64_t h : q.history) in_history[static_cast<std::size_t>(h)] = 1;
      std::int64_t crank = 0;
      for (std::int64_t c = 0; c < I; ++c)
        crank += c != q.target && !in_history[static_cast<std::size_t>(c)] && !(s[c] < target);
      if (crank < 10) {
        m.hr10_catalogue += 1;
        m.ndcg10_catalogue += 1.0 / std::log2(static_cast<double>(crank) + 2.0);
      }
      ++m.users;
    }
  }
  const auto U = static_cast<double>(m.users);
  m.hr10 /= U;
  m.ndcg10 /= U;
  m.hr10_catalogue /= U;
  m.ndcg10_catalogue /= U;
  for (std::size_t u = 0; u < split.users.size(); ++u) {
    if (user_count[u] == 0) continue;
    m.hr10_all += user_hr[u] / static_cast<double>(user_count[u]) / U;
    m.ndcg10_all += user_ndcg[u] / static_cast<double>(user_count[u]) / U;
  }
  if (!all_test_movies) m.hr10_all = m.ndcg10_all = 0;
  return m;
}

BatchScorer popularity_scorer(const Split& split, std::int64_t I) {
  auto counts = std::make_shared<std::vector<float>>(static_cast<std::size_t>(I), 0.0f);
  for (const UserRatings& u : split.users)
    for (std::int64_t j = 0; j < u.fit; ++j) (*counts)[static_cast<std::size_t>(u.ratings[static_cast<std::size_t>(j)].movie)] += 1;
  return [counts, I](std::span<const std::int64_t> users, const std::vector<std::vector<std::int64_t>>&,
                     std::span<float> scores) {
    for (std::size_t b = 0; b < users.size(); ++b)
      std::copy(counts->begin(), counts->end(), scores.begin() + static_cast<std::ptrdiff_t>(b * static_cast<std::size_t>(I)));
  };
}

BatchScorer mf_scorer(const MfModel& model) {
  // b_i + p_u·q_i: μ and b_u are the same for every movie of a user.
  return [&model](std::span<const std::int64_t> users, const std::vector<std::vector<std::int64_t>>&,
                  std::span<float> scores) {
    const std::int64_t I = model.movie_bias.size(0);
    for (std::size_t b = 0; b < users.size(); ++b)
      for (std::int64_t i = 0; i < I; ++i)
        scores[b * static_cast<std::size_t>(I) + static_cast<std::size_t>(i)] =
            model.predict(users[b], i, false) - model.user_bias.data_as<float>()[users[b]] - model.mean;
  };
}

namespace {

// The last hidden state of each history (its last max_len movies): -> (B, d). The
// histories run in length groups (models::length_groups), each right-padded to its longest.
// Empty histories score from the padding token alone.
Tensor sasrec_last_states(const models::SasRecConfig& c, const models::SasRecWeights& w,
                          const std::vector<std::vector<std::int64_t>>& histories,
                          std::vector<Tensor>* probs = nullptr) {
  const auto B = static_cast<std::int64_t>(histories.size());
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(B));
  for (std::int64_t b = 0; b < B; ++b)
    lengths[static_cast<std::size_t>(b)] =
        std::max<std::int64_t>(1, std::min<std::int64_t>(c.max_len, static_cast<std::int64_t>(histories[static_cast<std::size_t>(b)].size())));
  Tensor out = Tensor::zeros({B, c.dim});
  const std::int64_t budget = probs ? std::numeric_limits<std::int64_t>::max() : models::kSasRecGroupTokens;
  for (const models::LengthGroup& g : models::length_groups(lengths, budget)) {
    const auto Bg = static_cast<std::int64_t>(g.rows.size()), T = g.T;
    std::vector<std::int64_t> ids(static_cast<std::size_t>(Bg * T), 0);
    for (std::int64_t r = 0; r < Bg; ++r) {
      const auto& h = histories[static_cast<std::size_t>(g.rows[static_cast<std::size_t>(r)])];
      const std::int64_t n = std::min<std::int64_t>(c.max_len, static_cast<std::int64_t>(h.size()));
      for (std::int64_t t = 0; t < n; ++t)
        ids[static_cast<std::size_t>(r * T + t)] = h[h.size() - static_cast<std::size_t>(n - t)] + 1;
    }
    const Tensor h = w.forward(ids, Bg, T, probs);  // (Bg, T, d)
    for (std::int64_t r = 0; r < Bg; ++r) {
      const std::int64_t b = g.rows[static_cast<std::size_t>(r)];
      const std::int64_t last = lengths[static_cast<std::size_t>(b)] - 1;
      std::copy_n(h.data_as<float>() + (r * T + last) * c.dim, c.dim, out.data_as<float>() + b * c.dim);
    }
  }
  return out;
}

}  // namespace

BatchScorer sasrec_scorer(const models::SasRecConfig& c, const models::SasRecWeights& w) {
  const Tensor items = w.item_emb.weight.slice(0, 1, c.num_items + 1).contiguous();  // (I, d)
  return [&c, &w, items](std::span<const std::int64_t>, const std::vector<std::vector<std::int64_t>>& histories,
                         std::span<float> scores) {
    const Tensor h = sasrec_last_states(c, w, histories);  // (B, d)
    const Tensor s = nn::linear(h, items);                  // (B, I)
    std::copy_n(s.data_as<float>(), s.numel(), scores.data());
  };
}

// ---------------------------------------------------------------------------------------
// The whole run and the model directory.

namespace {

nlohmann::ordered_json metrics_json(const RankingMetrics& m) {
  return {{"hr10", m.hr10},
          {"ndcg10", m.ndcg10},
          {"hr10_catalogue", m.hr10_catalogue},
          {"ndcg10_catalogue", m.ndcg10_catalogue},
          {"hr10_all", m.hr10_all},
          {"ndcg10_all", m.ndcg10_all},
          {"users", m.users}};
}

std::string movies_csv(const std::vector<Movie>& movies) {
  std::string out = "movieId,title,year,genres\n";
  for (const Movie& m : movies)
    out += std::to_string(m.id) + "," + io::csv_field(m.title) + "," +
           (m.year > 0 ? std::to_string(m.year) : "") + "," + io::csv_field(m.genres) + "\n";
  return out;
}

// users.csv: the userIds in index order. (Models written before it held them in
// config.json's "user_ids", which at millions of users outgrew config.json's 16 MiB.)
// The ratings of each movie in the data (I): what history.csv holds, so what Recommender's
// ratings_of counts when the model is loaded.
std::vector<std::int64_t> ratings_per_movie(const Ratings& data) {
  std::vector<std::int64_t> n(data.movies.size(), 0);
  for (const Rating& r : data.ratings) ++n[static_cast<std::size_t>(r.movie)];
  return n;
}

std::string users_csv(const std::vector<std::int64_t>& user_ids) {
  std::string out = "userId\n";
  for (const std::int64_t id : user_ids) out += std::to_string(id) + "\n";
  return out;
}

std::string history_csv(const Ratings& data, const Split& split) {
  std::ostringstream out;
  out << "userId,movieId,rating,timestamp\n";
  for (std::size_t u = 0; u < split.users.size(); ++u) {
    const UserRatings& r = split.users[u];
    for (std::int64_t j = 0; j < static_cast<std::int64_t>(r.ratings.size()); ++j) {
      const Rating& x = r.ratings[static_cast<std::size_t>(j)];
      out << data.user_ids[u] << "," << data.movies[static_cast<std::size_t>(x.movie)].id << ","
          << x.rating << "," << x.timestamp << "\n";
    }
  }
  return out.str();
}

}  // namespace

std::string RecommenderReport::to_json() const {
  nlohmann::ordered_json j;
  j["model"] = model;
  j["split"] = split;
  j["users"] = users;
  j["movies"] = movies;
  j["ratings"] = ratings;
  if (model == "mf") {
    j["rmse_global_mean"] = rmse_global_mean;
    j["rmse_biases"] = rmse_biases;
    j["biases_l2"] = biases_l2;
    j["rmse_mf"] = rmse_mf;
  }
  j["popularity"] = metrics_json(popularity);
  j["trained"] = metrics_json(trained);
  j["best_epoch"] = best_epoch;
  j["validation"] = validation;
  if (model == "sasrec") j["dropout"] = dropout;
  j["train_seconds"] = train_seconds;
  j["train_steps"] = train_steps;
  j["num_parameters"] = num_parameters;
  if (!health.model.empty()) j["health"] = nlohmann::ordered_json::parse(health.to_json());
  j["warnings"] = health.warnings();
  return training.to_json(j.dump());
}

RecommenderReport train_recommender(const RecommenderOptions& o,
                                    const train::ProgressCallback& on_progress, const std::atomic<bool>* stop) {
  QKV_CHECK(o.model == "mf" || o.model == "sasrec",
            "train " << o.model << ": model must be 'mf' or 'sasrec', got '" << o.model << "'");
  QKV_CHECK(!o.out_dir.empty(), "train " << o.model << ": an output directory is required");
  const Ratings data = read_ratings(o.data);
  const Split split = temporal_split(data);
  const auto U = static_cast<std::int64_t>(data.user_ids.size()), I = static_cast<std::int64_t>(data.movies.size());
  RecommenderReport report;
  report.model = o.model;
  report.split = split_description(split);
  report.users = U;
  report.movies = I;
  report.ratings = static_cast<std::int64_t>(data.ratings.size());
  const std::vector<Rating> fit = split.part(0), val = split.part(1), test = split.part(2);
  QKV_CHECK(!fit.empty(), "train " << o.model << ": " << o.data << ": no user has a rating to fit (each user's "
                                                   "first 80% by time; users need 2 or more ratings)");
  // Without a validation part nothing chooses the biases' λ, MF's or SASRec's epoch, nor
  // judges the model weak: an error, not a model whose choices were never made.
  QKV_CHECK(!val.empty(), "train " << o.model << ": " << o.data << ": the ratings are too few for a validation "
                                   "part (the last 10% of each user's first 80% by time; a user needs 3 or more "
                                   "ratings to have one, and none has)");
  report.popularity = evaluate_ranking(split, I, popularity_scorer(split, I));
  const train::RunOptions run = train::run_options(o, o.out_dir + "/checkpoint.safetensors");
  nlohmann::ordered_json config;
  config["model_type"] = "qkv-recommender";
  config["model"] = o.model;
  config["num_users"] = U;
  config["num_movies"] = I;
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> meta = {{"trained_with", o.command}};
  if (o.model == "mf") {
    report.rmse_global_mean = rmse_constant(mean_rating(fit), test);
    // The biases alone, fitted exactly (ALS) on the same fit parts as MF, their λ chosen on
    // the same validation parts. They take a second: fitted again on --resume, and not
    // stopped by `stop` (the model's training, after them, stops at its first step instead).
    const TunedBiases biases = tune_biases(fit, val, U, I);
    report.rmse_biases = rmse(biases.fit.model, test);
    report.biases_l2 = biases.l2;
    MfOptions mo = o.mf;
    mo.run = run;
    MfTraining trained = train_mf(fit, val, U, I, mo, on_progress, stop);
    report.training = trained;
    if (trained.interrupted) return report;
    if (trained.best >= 0) {
      const train::Evaluation& e = trained.evaluations[static_cast<std::size_t>(trained.best)];
      report.best_epoch = e.step / (trained.total / o.mf.epochs);
      report.validation = e.score;
    }
    report.train_seconds = trained.step_seconds;
    report.train_steps = trained.steps;
    MfModel& m = trained.model;
    report.rmse_mf = rmse(m, test);
    report.trained = evaluate_ranking(split, I, mf_scorer(m));
    report.num_parameters = (U + I) * (o.mf.dim + 1) + 1;
    // Ranking is not what MF fits (it falls below popularity by design): its baseline is the
    // biases', on the same validation parts both chose their epoch and λ on.
    report.health = embedding_health("mf", m.movie_factors, ratings_per_movie(data));
    if (!val.empty()) {
      report.health.validation = report.validation;
      report.health.baseline_validation = biases.validation_rmse;
    }
    config["dim"] = o.mf.dim;
    meta["mean"] = std::to_string(m.mean);
    for (auto& [name, t] : mf_parameters(m)) tensors.emplace_back(name, *t);
  } else {
    SasRecOptions so = o.sasrec;
    so.model.num_items = I;
    so.run = run;
    SasRecTraining t = train_sasrec(split, so, on_progress, stop);
    report.training = t;
    if (t.interrupted) return report;
    report.best_epoch = t.best_epoch;
    report.validation = t.best_validation;
    report.dropout = so.dropout;
    report.train_seconds = t.step_seconds;
    report.train_steps = t.steps;
    report.trained = evaluate_ranking(split, I, sasrec_scorer(so.model, t.weights));
    report.num_parameters = so.model.num_parameters();
    report.health = embedding_health("sasrec", t.weights.item_emb.weight.slice(0, 1, I + 1), ratings_per_movie(data));
    if (split.validation > 0) {  // the HR@10 that chose the epoch, beside popularity's
      report.health.validation = t.best_validation;
      report.health.baseline_validation = validation_hr10(split, I, popularity_scorer(split, I));
    }
    config["dim"] = so.model.dim;
    config["layers"] = so.model.layers;
    config["heads"] = so.model.heads;
    config["max_len"] = so.model.max_len;
    config["dropout"] = so.dropout;  // training's; the model itself never drops
    for (auto& [name, p] : t.weights.parameters()) tensors.emplace_back(name, *p);
  }
  // Rank 0 alone writes the model (data-parallel runs).
  if (o.communicator != nullptr && o.communicator->rank() != 0) return report;
  config["report"] = io::parse_json(report.to_json(), "recommender report");
  ModelFiles files(o.out_dir);  // the directory changes as a whole, config.json last
  save_safetensors(files.add("model.safetensors"), tensors, meta);
  files.add("users.csv", users_csv(data.user_ids));
  files.add("movies.csv", movies_csv(data.movies));
  files.add("history.csv", history_csv(data, split));
  files.commit(config.dump());
  return report;
}

void replace_sasrec_weights(const std::string& dir, const nn::StateDict& state) {
  const Recommender before = Recommender::load(dir);
  QKV_CHECK(before.kind() == "sasrec", dir << " is not a sasrec model");
  // Checked before anything is written: a wrong name or shape leaves the directory as it was.
  models::SasRecWeights weights = models::SasRecWeights::zeros_like(before.sasrec_config_);
  nn::load_state_dict(weights.parameters(), state);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [name, p] : weights.parameters()) tensors.emplace_back(name, *p);

  const std::string config_path = dir + "/config.json";
  nlohmann::json config = io::parse_json(io::read_text(config_path, "config"), config_path);
  // The validation figures training recorded belong to the weights replaced: loading then
  // checks the new weights' embeddings alone.
  if (config.contains("report") && config["report"].is_object()) {
    config["report"].erase("health");
    config["report"].erase("warnings");
  }
  ModelFiles files(dir);
  save_safetensors(files.add("model.safetensors"), tensors, {{"trained_with", "replace_sasrec_weights"}});
  for (const char* name : {"users.csv", "movies.csv", "history.csv"}) {  // kept, recorded again
    const std::string path = dir + "/" + name;
    if (std::filesystem::exists(path)) files.add(name, io::read_text(path, name));
  }
  files.commit(config.dump());
  (void)Recommender::load(dir);
}

// ---------------------------------------------------------------------------------------
// A trained model.

Recommender Recommender::load(const std::string& dir) {
  Recommender r;
  const JsonConfig config = JsonConfig::load(dir + "/config.json");
  QKV_CHECK(config.get_string("model_type", "") == "qkv-recommender",
            dir << "/config.json: not a qkv recommender (model_type is not 'qkv-recommender')");
  r.kind_ = config.get_string("model");
  QKV_CHECK(r.kind_ == "mf" || r.kind_ == "sasrec",
            dir << "/config.json: model must be 'mf' or 'sasrec', got '" << r.kind_ << "'");
  const std::string users_path = dir + "/users.csv";
  if (config.has("user_ids")) {
    r.user_ids_ = config.get_int_list("user_ids");
  } else {
    const std::vector<io::CsvRecord> users = io::parse_csv(io::read_text(users_path, "users"), users_path);
    QKV_CHECK(!users.empty() && users[0].fields == std::vector<std::string>({"userId"}),
              users_path << " line 1: the header must be userId");
    for (std::size_t i = 1; i < users.size(); ++i) {
      const std::string where = users_path + " line " + std::to_string(users[i].line);
      QKV_CHECK(users[i].fields.size() == 1, where << ": " << users[i].fields.size() << " fields, expected 1");
      r.user_ids_.push_back(io::csv_integer(users[i].fields[0], where, "userId"));
    }
  }
  QKV_CHECK(std::is_sorted(r.user_ids_.begin(), r.user_ids_.end()) &&
                std::adjacent_find(r.user_ids_.begin(), r.user_ids_.end()) == r.user_ids_.end(),
            dir << (config.has("user_ids") ? "/config.json: user_ids" : "/users.csv: the userIds")
                << " must be ascending and distinct");
  const std::int64_t U = static_cast<std::int64_t>(r.user_ids_.size());
  const std::int64_t I = config.get_int("num_movies");
  QKV_CHECK(config.get_int("num_users") == U, dir << "/config.json: num_users disagrees with the "
                                                    << U << " user ids");

  // movies.csv: movieId,title,year,genres in index order.
  const std::string movies_path = dir + "/movies.csv";
  const std::vector<io::CsvRecord> movies = io::parse_csv(io::read_text(movies_path, "movies"), movies_path);
  QKV_CHECK(!movies.empty() && movies[0].fields == std::vector<std::string>({"movieId", "title", "year", "genres"}),
            movies_path << " line 1: the header must be movieId,title,year,genres");
  for (std::size_t i = 1; i < movies.size(); ++i) {
    const io::CsvRecord& rec = movies[i];
    const std::string where = movies_path + " line " + std::to_string(rec.line);
    QKV_CHECK(rec.fields.size() == 4, where << ": " << rec.fields.size() << " fields, expected 4");
    Movie m;
    m.id = io::csv_integer(rec.fields[0], where, "movieId");
    m.title = rec.fields[1];
    m.year = rec.fields[2].empty() ? 0 : io::csv_integer(rec.fields[2], where, "year");
    m.genres = rec.fields[3];
    QKV_CHECK(r.movies_.empty() || r.movies_.back().id < m.id, where << ": movieIds must ascend");
    r.movies_.push_back(std::move(m));
  }
  QKV_CHECK(static_cast<std::int64_t>(r.movies_.size()) == I,
            movies_path << ": " << r.movies_.size() << " movies, config.json says " << I);

  // history.csv: userId,movieId,rating,timestamp, each user's in time order.
  const std::string history_path = dir + "/history.csv";
  const std::vector<io::CsvRecord> history = io::parse_csv(io::read_text(history_path, "history"), history_path);
  QKV_CHECK(!history.empty(), history_path << ": empty");
  r.history_.assign(static_cast<std::size_t>(U), {});
  for (std::size_t i = 1; i < history.size(); ++i) {
    const io::CsvRecord& rec = history[i];
    const std::string where = history_path + " line " + std::to_string(rec.line);
    QKV_CHECK(rec.fields.size() == 4, where << ": " << rec.fields.size() << " fields, expected 4");
    const std::int64_t user = io::csv_integer(rec.fields[0], where, "userId");
    const std::int64_t movie = io::csv_integer(rec.fields[1], where, "movieId");
    const std::optional<std::int64_t> u = index_of(r.user_ids_, user), m = index_of(r.movies_, movie);
    QKV_CHECK(u.has_value(), where << ": user " << user << " is not one of the model's users");
    QKV_CHECK(m.has_value(), where << ": movie " << movie << " is not in movies.csv");
    r.history_[static_cast<std::size_t>(*u)].push_back(*m);
  }
  r.ratings_per_movie_.assign(r.movies_.size(), 0);
  for (const auto& h : r.history_)
    for (const std::int64_t m : h) ++r.ratings_per_movie_[static_cast<std::size_t>(m)];

  const std::string weights_path = dir + "/model.safetensors";
  const SafeTensors st = SafeTensors::open(weights_path);
  const auto get_checked = [&](const std::string& name, const Shape& shape) {
    QKV_CHECK(st.contains(name), weights_path << ": no tensor '" << name << "'");
    Tensor t = st.get(name).to(DType::f32).contiguous();
    QKV_CHECK(t.shape() == shape, weights_path << ": '" << name << "' has shape " << shape_to_string(t.shape())
                                               << ", expected " << shape_to_string(shape));
    const float* p = t.data_as<float>();
    for (std::int64_t i = 0; i < t.numel(); ++i)
      QKV_CHECK(std::isfinite(p[i]), weights_path << ": '" << name << "' element " << i << " is not finite");
    return t;
  };
  std::set<std::string> read;
  const auto get = [&](const std::string& name, const Shape& shape) {
    read.insert(name);
    return get_checked(name, shape);
  };
  if (r.kind_ == "mf") {
    const std::int64_t k = config.get_int("dim");
    QKV_CHECK(k >= 0 && k <= 4096, dir << "/config.json: dim must be in [0, 4096], got " << k);
    QKV_CHECK(st.metadata().count("mean"), weights_path << ": no 'mean' in the metadata");
    r.mf_.mean = static_cast<float>(io::csv_number(st.metadata().at("mean"), weights_path, "mean"));
    r.mf_.user_bias = get("user_bias", {U});
    r.mf_.movie_bias = get("movie_bias", {I});
    r.mf_.user_factors = get("user_factors", {U, k});
    r.mf_.movie_factors = get("movie_factors", {I, k});
  } else {
    models::SasRecConfig& c = r.sasrec_config_;
    c.num_items = I;
    c.dim = config.get_int("dim");
    c.layers = config.get_int("layers");
    c.heads = config.get_int("heads");
    c.max_len = config.get_int("max_len");
    QKV_CHECK(c.dim <= 4096 && c.layers <= 64 && c.max_len <= 1 << 20,
              dir << "/config.json: dim, layers or max_len out of range");
    r.sasrec_ = models::SasRecWeights::zeros_like(c);
    nn::StateDict state;
    for (auto& [name, t] : r.sasrec_.parameters()) state[name] = get(name, t->shape());
    nn::load_state_dict(r.sasrec_.parameters(), state);
  }
  for (const std::string& name : st.names())
    QKV_CHECK(read.count(name), weights_path << ": tensor '" << name << "' is not part of a " << r.kind_
                                             << " model of this config.json (a config that does not "
                                                "match the weights?)");
  // The embeddings' cosine from these weights; the validation figures as training recorded them.
  r.health_ = embedding_health(r.kind_, r.movie_embeddings(), r.ratings_per_movie_);
  if (config.has("report") && config.get_object("report").has("health")) {
    const JsonConfig h = config.get_object("report").get_object("health");
    if (h.has("validation")) r.health_.validation = h.get_double("validation");
    if (h.has("baseline_validation")) r.health_.baseline_validation = h.get_double("baseline_validation");
  }
  return r;
}

Tensor Recommender::movie_embeddings() const {
  const auto I = static_cast<std::int64_t>(movies_.size());
  return kind_ == "mf" ? mf_.movie_factors : sasrec_.item_emb.weight.slice(0, 1, I + 1).contiguous();
}

std::int64_t Recommender::user_index(std::int64_t user_id) const {
  const std::optional<std::int64_t> u = index_of(user_ids_, user_id);
  QKV_CHECK(u.has_value(), "unknown user " << user_id << " (the model knows " << user_ids_.size() << " users, ids "
                                           << user_ids_.front() << " to " << user_ids_.back() << ")");
  return *u;
}

std::int64_t Recommender::movie_index(std::int64_t movie_id) const {
  const std::optional<std::int64_t> m = index_of(movies_, movie_id);
  QKV_CHECK(m.has_value(), "unknown movie " << movie_id);
  return *m;
}

std::int64_t Recommender::find_movie(const std::string& query) const {
  const std::string q = lower(query);
  QKV_CHECK(!q.empty(), "--like: the title is empty");
  std::vector<std::int64_t> by_label, by_title;
  for (std::size_t i = 0; i < movies_.size(); ++i) {
    if (lower(movie_label(movies_[i])) == q) by_label.push_back(static_cast<std::int64_t>(i));
    if (!movies_[i].title.empty() && lower(movies_[i].title) == q) by_title.push_back(static_cast<std::int64_t>(i));
  }
  if (by_label.size() == 1) return by_label[0];
  if (by_label.empty() && by_title.size() == 1) return by_title[0];
  // No title matches: a movieId picks a movie even where title and year are shared. Any
  // id a ratings file accepts (io::csv_integer: an int64, a leading '-' allowed) is read.
  if (by_label.empty() && by_title.empty()) {
    std::int64_t id = 0;
    const auto [end, ec] = std::from_chars(q.data(), q.data() + q.size(), id);
    if (ec == std::errc() && end == q.data() + q.size())
      if (const std::optional<std::int64_t> m = index_of(movies_, id)) return *m;
  }
  std::ostringstream msg;
  const std::vector<std::int64_t>& same = by_label.empty() ? by_title : by_label;
  if (!same.empty()) {
    msg << "the title '" << query << "' is ambiguous: " << same.size() << " movies have it —";
    for (const std::int64_t i : same)
      msg << " '" << movie_label(movies_[static_cast<std::size_t>(i)]) << "' (movieId "
          << movies_[static_cast<std::size_t>(i)].id << ");";
    if (by_label.empty())
      msg << " add the year, e.g. '" << movie_label(movies_[static_cast<std::size_t>(same[0])]) << "', or";
    msg << " give the movieId instead, e.g. '" << movies_[static_cast<std::size_t>(same[0])].id << "'";
    throw Error(msg.str());
  }
  // Close matches: titles containing the query first, then the smallest edit distances.
  std::vector<std::pair<std::size_t, std::int64_t>> near;
  for (std::size_t i = 0; i < movies_.size(); ++i) {
    const std::string label = lower(movie_label(movies_[i]));
    const std::size_t d = label.find(q) != std::string::npos ? 0 : 1 + edit_distance(q, lower(movies_[i].title));
    near.emplace_back(d, static_cast<std::int64_t>(i));
  }
  const std::size_t shown = std::min<std::size_t>(5, near.size());
  std::partial_sort(near.begin(), near.begin() + static_cast<std::ptrdiff_t>(shown), near.end());
  msg << "no movie is titled '" << query << "'; close matches:";
  for (std::size_t i = 0; i < shown; ++i) msg << (i ? "; '" : " '") << movie_label(movies_[static_cast<std::size_t>(near[i].second)]) << "'";
  throw Error(msg.str());
}

std::vector<float> Recommender::scores(std::int64_t user) const {
  QKV_CHECK(user >= 0 && user < static_cast<std::int64_t>(user_ids_.size()), "user index " << user << " out of range");
  const auto I = static_cast<std::int64_t>(movies_.size());
  std::vector<float> s(static_cast<std::size_t>(I));
  if (kind_ == "mf") {  // the predicted rating, unclipped (the ranking scorer drops μ + b_u)
    for (std::int64_t i = 0; i < I; ++i) s[static_cast<std::size_t>(i)] = mf_.predict(user, i, false);
  } else {
    const std::int64_t users[1] = {user};
    scorer()(users, {history_[static_cast<std::size_t>(user)]}, s);
  }
  return s;
}

std::vector<Recommendation> Recommender::recommend(std::int64_t user, std::int64_t k) const {
  QKV_CHECK(k >= 1, "--top must be >= 1, got " << k);
  const std::vector<float> s = scores(user);
  std::vector<char> seen(movies_.size(), 0);
  for (const std::int64_t m : history_[static_cast<std::size_t>(user)]) seen[static_cast<std::size_t>(m)] = 1;
  std::vector<std::int64_t> candidates;
  for (std::size_t i = 0; i < movies_.size(); ++i)
    if (!seen[i]) candidates.push_back(static_cast<std::int64_t>(i));
  const std::size_t n = std::min(candidates.size(), static_cast<std::size_t>(k));
  std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(n), candidates.end(),
                    [&](std::int64_t a, std::int64_t b) {
                      return s[static_cast<std::size_t>(a)] != s[static_cast<std::size_t>(b)]
                                 ? s[static_cast<std::size_t>(a)] > s[static_cast<std::size_t>(b)] : a < b;
                    });
  std::vector<Recommendation> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back({candidates[i], s[static_cast<std::size_t>(candidates[i])], 0.0f});
  return out;
}

std::vector<Recommendation> Recommender::similar(std::int64_t movie, std::int64_t k, double temperature,
                                                 std::int64_t min_ratings) const {
  QKV_CHECK(k >= 1, "--top must be >= 1, got " << k);
  // cos / temperature is computed in float32 (the attention's scale 1 / temperature): a
  // temperature so small that its reciprocal is not a float32 is refused by name here, not
  // reported as a bad `scale`.
  QKV_CHECK(temperature > 0 && std::isfinite(temperature) &&
                1.0 / temperature <= static_cast<double>(std::numeric_limits<float>::max()),
            "temperature must be a finite number >= " << 1.0 / std::numeric_limits<float>::max()
                << " (1 / temperature must be finite in float32), got " << temperature);
  QKV_CHECK(min_ratings >= 0, "min_ratings must be >= 0, got " << min_ratings);
  const auto I = static_cast<std::int64_t>(movies_.size());
  QKV_CHECK(movie >= 0 && movie < I, "movie index " << movie << " out of range");
  const Tensor table = movie_embeddings();  // (I, d)
  const std::int64_t d = table.size(1);
  QKV_CHECK(d >= 1, "--like: this model has no movie embeddings (dim 0, biases only)");
  // The keys: the movies with at least min_ratings ratings, the liked one among them. A
  // movie few people rated keeps an embedding close to its random start.
  std::vector<std::int64_t> key_movies;  // key index -> movie
  std::int64_t query_key = -1;
  for (std::int64_t i = 0; i < I; ++i)
    if (i == movie || ratings_per_movie_[static_cast<std::size_t>(i)] >= min_ratings) {
      if (i == movie) query_key = static_cast<std::int64_t>(key_movies.size());
      key_movies.push_back(i);
    }
  const auto K = static_cast<std::int64_t>(key_movies.size());
  // Keys and query normalised: one head of attention then weighs every key by
  // softmax(cos / temperature).
  Tensor keys = Tensor::zeros({1, 1, K, d});  // (1, 1, K, d)
  float* kp = keys.data_as<float>();
  const float* src = table.data_as<float>();
  for (std::int64_t key = 0; key < K; ++key) {
    const float* e = src + key_movies[static_cast<std::size_t>(key)] * d;
    double norm = 0;
    for (std::int64_t j = 0; j < d; ++j) norm += static_cast<double>(e[j]) * e[j];
    const double inv = norm > 0 ? 1.0 / std::sqrt(norm) : 0.0;
    for (std::int64_t j = 0; j < d; ++j) kp[key * d + j] = static_cast<float>(e[j] * inv);
  }
  const Tensor query = keys.slice(2, query_key, query_key + 1).contiguous();  // (1, 1, 1, d)
  AttentionOptions opt;
  opt.scale = 1.0 / temperature;
  opt.return_probs = true;
  const AttentionResult a = qkv::attention(query, keys, keys, opt);
  const float* w = a.probs.data_as<float>();  // (1, 1, 1, K)
  std::vector<std::int64_t> order;
  for (std::int64_t key = 0; key < K; ++key)
    if (key != query_key) order.push_back(key);
  const std::size_t n = std::min(order.size(), static_cast<std::size_t>(k));
  // cos = q·k: recomputed from the normalised rows (the probabilities are its softmax).
  const auto cosine = [&](std::int64_t key) {
    double s = 0;
    for (std::int64_t j = 0; j < d; ++j) s += static_cast<double>(kp[query_key * d + j]) * kp[key * d + j];
    return static_cast<float>(s);
  };
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(),
                    [&](std::int64_t x, std::int64_t y) { return w[x] != w[y] ? w[x] > w[y] : x < y; });
  std::vector<Recommendation> out;
  for (std::size_t i = 0; i < n; ++i)
    out.push_back({key_movies[static_cast<std::size_t>(order[i])], cosine(order[i]), w[order[i]]});
  return out;
}

std::vector<float> Recommender::predict(std::span<const std::int64_t> users, std::span<const std::int64_t> movies) const {
  QKV_CHECK(kind_ == "mf", "predict: a " << kind_ << " model ranks movies and does not predict ratings; "
                                            "use an mf model");
  QKV_CHECK(users.size() == movies.size(), "predict: " << users.size() << " users but " << movies.size() << " movies");
  std::vector<float> out;
  out.reserve(users.size());
  for (std::size_t i = 0; i < users.size(); ++i) {
    QKV_CHECK(users[i] >= 0 && users[i] < static_cast<std::int64_t>(user_ids_.size()) && movies[i] >= 0 &&
                  movies[i] < static_cast<std::int64_t>(movies_.size()),
              "predict: entry " << i << ": user or movie index out of range");
    out.push_back(mf_.predict(users[i], movies[i]));
  }
  return out;
}

BatchScorer Recommender::scorer() const {
  return kind_ == "mf" ? mf_scorer(mf_) : sasrec_scorer(sasrec_config_, sasrec_);
}

RankingMetrics Recommender::evaluate(const Ratings& data, bool validation) const {
  QKV_CHECK(data.movies.size() == movies_.size() && data.user_ids == user_ids_ &&
                std::equal(movies_.begin(), movies_.end(), data.movies.begin(),
                           [](const Movie& a, const Movie& b) { return a.id == b.id; }),
            "evaluate: the ratings are not the ones this model was trained on (other users or movies)");
  return evaluate_ranking(temporal_split(data), static_cast<std::int64_t>(movies_.size()), scorer(), validation);
}

HistoryAttention Recommender::attention(std::int64_t user) const {
  QKV_CHECK(kind_ == "sasrec", "the attention over a user's history needs a sasrec model; this one is "
                                   << kind_ << " (matrix factorisation has no attention)");
  QKV_CHECK(user >= 0 && user < static_cast<std::int64_t>(user_ids_.size()), "user index " << user << " out of range");
  const std::vector<std::int64_t>& h = history_[static_cast<std::size_t>(user)];
  QKV_CHECK(!h.empty(), "user " << user_ids_[static_cast<std::size_t>(user)] << " has no history");
  HistoryAttention out;
  const std::size_t n = std::min<std::size_t>(h.size(), static_cast<std::size_t>(sasrec_config_.max_len));
  out.history.assign(h.end() - static_cast<std::ptrdiff_t>(n), h.end());
  std::vector<Tensor> probs;
  sasrec_last_states(sasrec_config_, sasrec_, {out.history}, &probs);
  for (const Tensor& p : probs) out.layers.push_back(p.select(0, 0).contiguous());  // (H, T, T)
  return out;
}

}  // namespace qkv::recommender
