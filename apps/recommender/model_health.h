// Whether a trained recommender is weak, and the warnings that say so: at the end of `qkv
// train mf|sasrec` (and qkv.train), and whenever `qkv recommend` or qkv.recommender.
// Recommender loads a model directory.
//
// Two signs, each measured against a threshold justified in docs/recommender.md:
//   - collapsed item embeddings: the mean pairwise cosine (qkv/embedding_health.h) of the
//     embeddings of the kHealthMovies most-rated movies above kCollapsedCosine: they all
//     point one way, and `--like` finds every popular movie like every other;
//   - no better than the baseline on the validation parts: SASRec's validation HR@10 (the
//     next movie among 101, as training measures it) below popularity's on the same
//     protocol; for matrix factorisation, which fits ratings and ranks below popularity
//     by design, its validation RMSE above that of the user + movie biases tuned on the
//     same parts (tune_biases): the factors then add nothing a rating's biases do not say.
// Training measures both and records them in config.json ("health"); loading recomputes
// the cosine from the weights (one pass over the table) and reads the validation figures,
// which are dropped when the weights are replaced (replace_sasrec_weights).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "qkv/tensor.h"

namespace qkv::recommender {

// The movies whose embeddings are compared: the kHealthMovies rated most often in the data
// (ties by index), of those rated at least kHealthMinRatings times (the keys `qkv recommend
// --like` uses by default, --min-ratings 10). These are the movies people ask `--like`
// about and that fill its answers, and the best-trained rows of the table. Over every movie
// rated 10+ times (2,245 on MovieLens) the mean does not separate a collapsed model from a
// good one: the rarely rated movies keep scattered embeddings near their random start in
// both (SASRec after 30 epochs 0.124, the recipe's 0.084).
inline constexpr std::int64_t kHealthMinRatings = 10;
inline constexpr std::int64_t kHealthMovies = 200;

// Above this mean pairwise cosine the item embeddings count as collapsed. Measured on
// MovieLens over the 200 most-rated movies (docs/recommender.md, "When a model is weak"):
// SASRec after 30 epochs 0.895, 0.894 and 0.880 with seeds 0, 1 and 2 (the model:
// `--like` gives cosine 0.95 for every popular movie), after 10 epochs 0.732, after 60
// 0.761; the shipped recipe (200 epochs, the best validation epoch kept) 0.236 with seed 0
// (epoch 170) and 0.462 with seed 1 (epoch 105); matrix factorisation's recipe 0.026. 0.65
// lies about midway between the recipe's highest (0.462) and the 30-epoch model's lowest
// (0.880).
inline constexpr double kCollapsedCosine = 0.65;

struct ModelHealth {
  std::string model;                  // "mf" | "sasrec"
  std::optional<double> mean_cosine;  // of the most-rated movies' embeddings; none for < 2
  std::int64_t movies = 0;            // the movies it is the mean over (<= kHealthMovies)
  // Measured on the validation parts at the end of training; none for a model directory
  // without them (written before they were recorded, or its weights replaced since).
  // sasrec: HR@10 of the model and of popularity; mf: RMSE of the model and of the biases.
  std::optional<double> validation, baseline_validation;

  bool collapsed() const { return mean_cosine && *mean_cosine > kCollapsedCosine; }
  // sasrec: HR@10 below popularity's; mf: RMSE above the biases'.
  bool below_baseline() const;
  // One sentence per sign of weakness, each naming what is weak, the measured number, the
  // threshold or the baseline's number, and what to do; empty for a healthy model.
  std::vector<std::string> warnings() const;
  // {"mean_cosine", "movies", "collapsed_above", "metric", "validation", "baseline",
  //  "baseline_validation"} (absent values null), as config.json records it.
  std::string to_json() const;
};

// The item-embedding part of a model's health: table (I, d) of the movies' embeddings,
// ratings_per_movie (I) their ratings in the data. A table of width 0 (biases alone) has
// no embedding to collapse: mean_cosine stays empty.
ModelHealth embedding_health(const std::string& model, const Tensor& table,
                             std::span<const std::int64_t> ratings_per_movie);

}  // namespace qkv::recommender
