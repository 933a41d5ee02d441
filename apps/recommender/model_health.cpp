// A trained recommender's health and its warnings. See apps/recommender/model_health.h.

#include "recommender/model_health.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "qkv/embedding_health.h"
#include "qkv/error.h"
#include "recommender/recommender.h"

namespace qkv::recommender {

namespace {

std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

// What to do about a weak model: the shipped recipe, whose defaults are the options'.
std::string remedy(const std::string& model) {
  if (model == "sasrec")
    return "train longer: the recipe is `qkv train sasrec --data DATA` (" +
           std::to_string(SasRecOptions{}.epochs) + " epochs, the best validation HR@10 kept)";
  return "train with the recipe, `qkv train mf --data DATA` (" + std::to_string(MfOptions{}.epochs) +
         " epochs, dimension " + std::to_string(MfOptions{}.dim) + ", the best validation RMSE kept)";
}

}  // namespace

bool ModelHealth::below_baseline() const {
  if (!validation || !baseline_validation) return false;
  return model == "sasrec" ? *validation < *baseline_validation : *validation > *baseline_validation;
}

std::vector<std::string> ModelHealth::warnings() const {
  std::vector<std::string> out;
  if (collapsed())
    out.push_back("the " + model + " model's movie embeddings have collapsed: their mean pairwise cosine is " +
                  fixed(*mean_cosine, 3) + " over the " + std::to_string(movies) + " most-rated movies, above " +
                  fixed(kCollapsedCosine, 2) + ", so `--like` finds them all alike whichever is liked; " +
                  remedy(model));
  if (below_baseline()) {
    if (model == "sasrec")
      out.push_back("the sasrec model ranks below popularity on the validation parts: HR@10 " +
                    fixed(*validation, 4) + " against popularity's " + fixed(*baseline_validation, 4) +
                    " (the next movie among 101), so its recommendations are no better than the "
                    "most-rated movies; " + remedy(model));
    else
      out.push_back("the mf model predicts ratings worse than user + movie biases alone on the validation "
                    "parts: RMSE " + fixed(*validation, 4) + " against the biases' " +
                    fixed(*baseline_validation, 4) + ", so its factors add error; " + remedy(model));
  }
  return out;
}

std::string ModelHealth::to_json() const {
  const auto value = [](const std::optional<double>& x) { return x ? nlohmann::json(*x) : nlohmann::json(); };
  nlohmann::ordered_json j;
  j["mean_cosine"] = value(mean_cosine);
  j["movies"] = movies;
  j["collapsed_above"] = kCollapsedCosine;
  j["metric"] = model == "sasrec" ? "validation HR@10" : "validation RMSE";
  j["validation"] = value(validation);
  j["baseline"] = model == "sasrec" ? "popularity" : "biases";
  j["baseline_validation"] = value(baseline_validation);
  return j.dump();
}

ModelHealth embedding_health(const std::string& model, const Tensor& table,
                             std::span<const std::int64_t> ratings_per_movie) {
  QKV_CHECK(table.dim() == 2 && table.size(0) == static_cast<std::int64_t>(ratings_per_movie.size()),
            "embedding_health: " << ratings_per_movie.size() << " movies' ratings for a table of shape "
                                 << table.shape_string());
  ModelHealth h;
  h.model = model;
  std::vector<std::int64_t> rows;  // movie indices, most-rated first, ties by index
  for (std::size_t i = 0; i < ratings_per_movie.size(); ++i)
    if (ratings_per_movie[i] >= kHealthMinRatings) rows.push_back(static_cast<std::int64_t>(i));
  std::stable_sort(rows.begin(), rows.end(), [&](std::int64_t a, std::int64_t b) {
    return ratings_per_movie[static_cast<std::size_t>(a)] > ratings_per_movie[static_cast<std::size_t>(b)];
  });
  if (static_cast<std::int64_t>(rows.size()) > kHealthMovies) rows.resize(static_cast<std::size_t>(kHealthMovies));
  h.movies = static_cast<std::int64_t>(rows.size());
  if (table.size(1) > 0 && !rows.empty()) h.mean_cosine = mean_pairwise_cosine(table, rows);
  return h;
}

}  // namespace qkv::recommender
