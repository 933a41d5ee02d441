// The recommender task: movie ratings (MovieLens, `scripts/fetch_data.sh movielens DIR`),
// the split every tool uses, two models and the evaluations the literature reports.
//
//   - Matrix factorisation ("mf"): rating(u, i) = clip(μ + b_u + b_i + p_u·q_i, 0.5, 5),
//     the biases fitted exactly, then the vectors by alternating least squares (or AdamW),
//     each on the squared error plus L2 (collaborative filtering).
//   - SASRec ("sasrec", qkv/sasrec.h): each user's history as a sequence, causal
//     self-attention, the next movie scored by a dot product with its embedding.
//   - Retrieval: a liked movie's embedding is the query, every movie's embedding a key;
//     the softmax of the scaled cosine similarities ranks the movies (Recommender::similar).
//
//   Ratings data = read_ratings("ratings.csv");
//   Split split = temporal_split(data);
//   RecommenderReport r = train_recommender({.data = "ratings.csv", .out_dir = "mf"}, print);
//   Recommender m = Recommender::load("mf");
//   m.recommend(m.user_index(1), 10);   m.similar(m.find_movie("Toy Story"), 10);
//
// The split (fixed, printed by the tools): each user's ratings in time order (ties by
// movieId); of n ratings, the last max(1, floor(0.2·n)) are the test part; of the m before,
// the last max(1, floor(0.1·m)) the validation part (none when m < 2, so every user keeps
// one rating to fit), the rest the fit part. Models are fitted on the fit parts, choose
// their epoch on the validation parts, and are reported on the test parts only.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qkv/sasrec.h"
#include "qkv/tensor.h"
#include "qkv/trainer.h"
#include "qkv/viz.h"
#include "recommender/model_health.h"

namespace qkv::recommender {

// ---------------------------------------------------------------------------------------
// Data.

struct Movie {
  std::int64_t id = 0;     // movieId
  std::string title;       // may be empty (two dslabs movies have no title)
  std::int64_t year = 0;   // 0 = unknown
  std::string genres;      // "Comedy|Drama"
};
// "Toy Story (1995)", "Toy Story" without a year, "movie 108583" without a title.
std::string movie_label(const Movie& movie);

struct Rating {
  std::int64_t user = 0;   // index into Ratings::user_ids
  std::int64_t movie = 0;  // index into Ratings::movies
  float rating = 0.0f;
  std::int64_t timestamp = 0;
};

struct Ratings {
  std::vector<std::int64_t> user_ids;  // index -> userId, ascending
  std::vector<Movie> movies;           // index -> movie, ascending movieId
  std::vector<Rating> ratings;         // in file order
  std::optional<std::int64_t> user_index(std::int64_t user_id) const;
  std::optional<std::int64_t> movie_index(std::int64_t movie_id) const;
};

// RFC 4180 CSV with a header naming at least userId, movieId, rating (in [0.5, 5]) and
// timestamp, in any order; title, year and genres are read when present (the columns of
// fetch_data.sh movielens). Throws qkv::Error naming the file and line of a malformed line
// (an unclosed quote, a wrong number of fields, a value that is not a number), a missing
// column, a movie whose title or year differs between lines, a repeated (user, movie), or
// no ratings at all.
Ratings read_ratings(const std::string& path);
Ratings parse_ratings(std::string_view csv, const std::string& label = "ratings");

// ---------------------------------------------------------------------------------------
// The split.

struct UserRatings {
  std::vector<Rating> ratings;  // the user's, by timestamp, ties by movieId
  std::int64_t fit = 0;         // ratings[0, fit): the fit part
  std::int64_t validation = 0;  // ratings[fit, fit + validation)
  std::int64_t test = 0;        // the last `test`
};
struct Split {
  std::vector<UserRatings> users;  // by user index
  std::int64_t fit = 0, validation = 0, test = 0;  // ratings in each part
  std::vector<Rating> part(int which) const;       // 0 fit, 1 validation, 2 test
};
Split temporal_split(const Ratings& data);
// The words the tools print about the split.
std::string split_description(const Split& split);

// For comparison with published figures: ratings shuffled with `seed` (Fisher–Yates over
// file order) and dealt into `folds` folds; fold `fold` is the test set.
struct RandomFold {
  std::vector<Rating> train, test;
};
RandomFold random_fold(const Ratings& data, std::int64_t folds, std::int64_t fold,
                       std::uint64_t seed);

// ---------------------------------------------------------------------------------------
// Matrix factorisation.

struct MfModel {
  float mean = 0.0f;    // μ, of the fit ratings
  Tensor user_bias;     // (U)
  Tensor movie_bias;    // (I)
  Tensor user_factors;  // (U, k); k = 0 is the biases-only baseline
  Tensor movie_factors; // (I, k)
  // μ + b_u + b_i + p_u·q_i, clipped to [0.5, 5] when `clip`.
  float predict(std::int64_t user, std::int64_t movie, bool clip = true) const;
};

// Defaults chosen on the MovieLens validation parts (docs/recommender.md, "What was measured").
struct MfOptions {
  // "als": the biases are tune_biases' (fixed) and the factors are fitted to what they leave
  // by alternating least squares, one sweep (every p_u, then every q_i, each exact) an epoch.
  // "adamw": biases and factors together by AdamW on minibatches (lr, l2).
  std::string solver = "als";
  std::int64_t dim = 64;
  std::int64_t epochs = 30;
  std::int64_t batch = 256;  // adamw: ratings per step; als: users and movies solved per step
  double lr = 5e-3;
  double l2 = 0.1;        // adamw's λ: loss = mean (r̂ − r)² + λ·(b_u² + b_i² + |p_u|² + |q_i|²)
  // als's λ: the factors minimise Σ_fit (r̂ − r)² + λ·(Σ_u |p_u|² + Σ_i |q_i|²), a sum as the
  // biases' λ is. On MovieLens's validation parts (dim 64) 15 beat 10 and 20.
  double als_l2 = 15.0;
  std::uint64_t seed = 0;
  std::int64_t patience = 0;  // > 0: stop after this many epochs without a lower validation RMSE
  train::RunOptions run;  // checkpoint, resume, stop_at, ranks (none: the baselines, the folds)
};

// What train_mf returns: the loop's result (qkv/trainer.h; the validation RMSE of every
// epoch as its evaluations) and the weights of the best epoch.
struct MfTraining : train::LoopResult {
  MfModel model;
};

// Fits on `fit` with the one training loop (train::fit, task "mf", or "biases" for dim 0):
// adamw on minibatches of ratings, reshuffled every epoch; als by sweeps, after the biases
// (tune_biases on `fit` and `validation`). After each epoch measures the RMSE on
// `validation` and returns the weights of the best epoch (the last when `validation` is
// empty). `stop` is checked once per step.
MfTraining train_mf(const std::vector<Rating>& fit, const std::vector<Rating>& validation,
                    std::int64_t num_users, std::int64_t num_movies, const MfOptions& options,
                    const train::ProgressCallback& on_progress = {}, const std::atomic<bool>* stop = nullptr);
// sqrt(mean (predict − r)²); of a constant prediction when model is null.
double rmse(const MfModel& model, const std::vector<Rating>& ratings);
double rmse_constant(float prediction, const std::vector<Rating>& ratings);

// The user + movie biases baseline, r̂ = clip(μ + b_u + b_i), μ the mean of `fit`: the
// minimiser of  Σ_fit (r − μ − b_u − b_i)² + λ·(Σ_u b_u² + Σ_i b_i²)  (a sum, not MfOptions'
// per-rating mean), by alternating least squares: every b_u = Σ_i (r − μ − b_i) / (λ + n_u)
// at once, then every b_i likewise, until no bias moves by 1e-9 (or max_sweeps). Exact for
// its λ where SGD is not, so MF is compared with the baseline at its best. A user or movie
// with no fit rating keeps 0 (λ = 0 included). The model has k = 0.
struct BiasFit {
  MfModel model;
  std::int64_t sweeps = 0;  // user + movie updates done
  bool converged = false;   // the last sweep moved no bias by 1e-9
};
BiasFit fit_biases(const std::vector<Rating>& fit, std::int64_t num_users, std::int64_t num_movies,
                   double l2, std::int64_t max_sweeps = 5000);

// λ from 0 (unregularised) to 100, in steps of about ×2, since a movie's λ/(λ + n_i) shrinkage
// matters across MovieLens's counts (n_i from 1 to hundreds); on its validation parts the best
// λ is 3, inside the grid.
inline constexpr double kBiasL2Grid[] = {0, 0.3, 1, 2, 3, 5, 10, 20, 50, 100};
// fit_biases on `fit` for each λ of `grid`; the one with the lowest RMSE on `validation`
// (the first of equals; grid[0] when `validation` is empty).
struct TunedBiases {
  BiasFit fit;
  double l2 = 0;
  double validation_rmse = 0;             // 0 when `validation` is empty
  std::vector<double> validation_rmses;   // per grid value
};
TunedBiases tune_biases(const std::vector<Rating>& fit, const std::vector<Rating>& validation,
                        std::int64_t num_users, std::int64_t num_movies,
                        std::span<const double> grid = kBiasL2Grid);

// Matrix factorisation under random folds, for comparison with published figures (which
// use random 5-fold splits): for each fold, the other folds' ratings are shuffled again and
// their last 1/9 is the validation set that picks the epoch; test RMSE of the global mean,
// the biases alone (tune_biases on the same fit and validation sets) and MF on the fold.
struct FoldRmse {
  double global_mean = 0, biases = 0, mf = 0;
};
std::vector<FoldRmse> mf_cross_validation(const Ratings& data, std::int64_t folds,
                                          const MfOptions& options, std::uint64_t seed = 0);

// ---------------------------------------------------------------------------------------
// SASRec training.

struct SasRecOptions {
  models::SasRecConfig model;  // num_items is the catalogue's
  std::int64_t epochs = 200;
  std::int64_t batch = 128;
  double lr = 1e-3;
  double weight_decay = 0.0;
  std::int64_t eval_every = 5;  // epochs between validation HR@10
  std::uint64_t seed = 0;
  std::int64_t patience = 0;    // > 0: stop after this many evaluations without a higher HR@10
  // The paper's dropout p in training (qkv/sasrec.h: the embedding and every block's four
  // sites), one seed per step derived from seed, the step and the rank; 0 = none.
  double dropout = 0.0;
  train::RunOptions run;        // checkpoint, resume, stop_at, ranks
};

// The users that train: those with at least 2 fit ratings, in user-index order.
// Epoch e visits them in an order shuffled with (seed, e), `batch` at a time; each user's
// fit sequence, truncated to its last max_len + 1 items, gives inputs s[:-1] and targets
// s[1:]; each target's negative is drawn uniformly, with (seed, e, step) and by rejection,
// from the movies the user has no rating of in the fit part.
class SasRecBatches {
 public:
  SasRecBatches(const Split& split, std::int64_t num_items, std::int64_t batch,
                std::int64_t max_len, std::uint64_t seed);
  std::int64_t steps_per_epoch() const;
  models::SasRecBatch get(std::int64_t epoch, std::int64_t step) const;

 private:
  std::vector<std::vector<std::int64_t>> sequences_;  // per training user: item indices
  std::vector<std::vector<char>> rated_;              // per training user: (num_items)
  std::vector<std::int64_t> users_;
  std::int64_t num_items_, batch_, max_len_;
  std::uint64_t seed_;
};

// What train_sasrec returns: the loop's result (qkv/trainer.h: step_seconds is the time of
// the training steps alone; the validation HR@10 as its evaluations) and the best weights.
struct SasRecTraining : train::LoopResult {
  models::SasRecWeights weights;  // of the best validation epoch
  std::int64_t best_epoch = 0;
  double best_validation = 0.0;   // HR@10
};
// With the one training loop (train::fit, task "sasrec").
SasRecTraining train_sasrec(const Split& split, const SasRecOptions& options,
                            const train::ProgressCallback& on_progress = {},
                            const std::atomic<bool>* stop = nullptr);

// ---------------------------------------------------------------------------------------
// Ranking evaluation (the SASRec paper's protocol, on this split).
//
// A scorer maps a user and the history it may see (movie indices in time order) to a
// score for every movie. For each user with a test part:
//   - next: the first test movie, the history everything before it, ranked against 100
//     movies the user never rated (any part), drawn with a fixed seed per user;
//   - catalogue: the same movie ranked against every movie not in the history;
//   - all: every test movie in turn, the history everything before it (earlier test
//     movies included), each against its own 100 sampled negatives; averaged per user.
// A movie's rank is the number of candidates scoring higher or equal (ties count
// against it); HR@10 = [rank < 10], NDCG@10 = [rank < 10] / log2(rank + 2); means over users.
// With `validation`, the validation part plays the test part's role (history = fit part;
// 'all' over the validation movies).
using Scorer = std::function<void(std::int64_t user, std::span<const std::int64_t> history,
                                  std::span<float> scores)>;
// Scores many users at once: histories[b] -> scores (B, I), row-major. A model scores its
// batch in one forward; a scorer for one user is wrapped by batch_scorer.
using BatchScorer = std::function<void(std::span<const std::int64_t> users,
                                       const std::vector<std::vector<std::int64_t>>& histories,
                                       std::span<float> scores)>;

struct RankingMetrics {
  double hr10 = 0, ndcg10 = 0;                      // next movie among 101
  double hr10_catalogue = 0, ndcg10_catalogue = 0;  // next movie among all unseen
  double hr10_all = 0, ndcg10_all = 0;              // every test movie among 101
  std::int64_t users = 0;
};
RankingMetrics evaluate_ranking(const Split& split, std::int64_t num_items,
                                const BatchScorer& scorer, bool validation = false,
                                bool all_test_movies = true, std::uint64_t seed = 42);
// The score SASRec's training keeps its best evaluation by, and the weak-model check sets
// beside popularity's: HR@10 of each user's next validation movie among 101.
double validation_hr10(const Split& split, std::int64_t num_items, const BatchScorer& scorer);
BatchScorer popularity_scorer(const Split& split, std::int64_t num_items);  // fit-part counts
BatchScorer mf_scorer(const MfModel& model);
BatchScorer sasrec_scorer(const models::SasRecConfig& config, const models::SasRecWeights& w);

// ---------------------------------------------------------------------------------------
// `qkv train mf` and `qkv train sasrec`: the whole run, and the model directory it writes.

struct RecommenderOptions {
  std::string data;           // ratings CSV
  std::string out_dir;
  std::string model = "mf";   // "mf" | "sasrec"
  MfOptions mf;
  SasRecOptions sasrec;
  std::string command;        // recorded in the model's metadata
  // Checkpointing, stopping and resuming the model's training (out_dir/checkpoint.safetensors;
  // the baselines train again, they take seconds), and data-parallel ranks.
  bool resume = false;
  std::int64_t checkpoint_every = 0;
  std::int64_t stop_at = 0;
  std::string precision = "f32";  // SASRec's products: f32 or bf16 (MF has none: f32 only)
  const distributed::Communicator* communicator = nullptr;
};

struct RecommenderReport {
  std::string model;
  std::string split;                   // split_description
  std::int64_t users = 0, movies = 0, ratings = 0;
  double rmse_global_mean = 0, rmse_biases = 0, rmse_mf = 0;  // test RMSE (mf only)
  double biases_l2 = 0;  // mf only: the biases' λ, chosen by tune_biases on the validation parts
  RankingMetrics popularity, trained;  // the model's ranking metrics, beside popularity's
  std::int64_t best_epoch = 0;
  double validation = 0;               // at best_epoch: MF validation RMSE, SASRec HR@10
  double dropout = 0;                  // sasrec only: the dropout it trained with
  double train_seconds = 0;
  std::int64_t train_steps = 0;
  std::int64_t num_parameters = 0;
  train::LoopResult training;          // the model's training run
  ModelHealth health;                  // its weaknesses, if any (recommender/model_health.h)
  bool interrupted() const { return training.interrupted; }
  // The loop's fields (qkv/trainer.h), then the report's, then "health" and "warnings"
  // (health.warnings(): [] for a healthy model).
  std::string to_json() const;
};

// Reads options.data, splits it, trains, evaluates on the test parts and writes out_dir:
//   config.json       {"model_type": "qkv-recommender", "model": "mf"|"sasrec", sizes}
//                     (+ the report under "report", and "files": qkv/files.h's ModelFiles)
//   users.csv         userId in index order (older models: config.json's "user_ids")
//   model.safetensors MF: user_bias, movie_bias, user_factors, movie_factors (+ "mean" in
//                     the metadata); SASRec: SasRecWeights::parameters() by name
//   movies.csv        movieId,title,year,genres in index order
//   history.csv       userId,movieId,rating,timestamp: every rating of the data, each
//                     user's in time order: what recommend() excludes and what SASRec
//                     attends over (the evaluations read the data's split instead)
// When stopped (stop, stop_at), the checkpoint is written and nothing else: the report says
// interrupted() and holds only the split and the training run.
// The options of `qkv train mf` / `qkv train sasrec` and qkv.train("mf") / ("sasrec"),
// declared once (qkv/options.h); model is fixed by the set. data may name a directory
// holding ratings.csv: the check replaces it with the file's path.
const options::OptionSet<RecommenderOptions>& mf_training_options();
const options::OptionSet<RecommenderOptions>& sasrec_training_options();

RecommenderReport train_recommender(const RecommenderOptions& options,
                                    const train::ProgressCallback& on_progress = {},
                                    const std::atomic<bool>* stop = nullptr);

// ---------------------------------------------------------------------------------------
// A trained model, for recommending.

struct Recommendation {
  std::int64_t movie = 0;  // index into movies()
  float score = 0.0f;      // the model's score (MF: the predicted rating, unclipped)
  float weight = 0.0f;     // similar(): the softmax weight of this key; else 0
};

// The SASRec attention behind one user's recommendation: each block's probabilities of the
// last history position over the history (the query that scores the next movie).
struct HistoryAttention {
  std::vector<std::int64_t> history;  // movie indices attended over (the last max_len)
  std::vector<Tensor> layers;         // per block: (heads, T, T) probabilities
};

// Replaces a sasrec model directory's weights (a torch twin's, say) with `state`, checked
// first against the directory's configuration (every tensor, by name and shape: qkv::Error
// names the first wrong one and the directory is untouched); the directory then changes as
// a whole (ModelFiles): config.json's "files" records the new weights beside the other files.
void replace_sasrec_weights(const std::string& dir, const nn::StateDict& state);

class Recommender {
 public:
  // Throws qkv::Error naming the file and what is wrong.
  static Recommender load(const std::string& dir);

  const std::string& kind() const { return kind_; }  // "mf" | "sasrec"
  const std::vector<Movie>& movies() const { return movies_; }
  const std::vector<std::int64_t>& user_ids() const { return user_ids_; }
  // qkv::Error for an id the model does not know.
  std::int64_t user_index(std::int64_t user_id) const;
  std::int64_t movie_index(std::int64_t movie_id) const;
  // "Toy Story" or "Toy Story (1995)", case-insensitive, or a movieId ("1") where no title
  // matches. qkv::Error when no movie or more than one has that title (the error lists the
  // close matches or the candidates with their movieIds).
  std::int64_t find_movie(const std::string& title) const;
  const std::vector<std::int64_t>& history(std::int64_t user) const { return history_[user]; }

  std::vector<float> scores(std::int64_t user) const;  // (I), every movie
  // The top k by score among the movies not in the user's history.
  std::vector<Recommendation> recommend(std::int64_t user, std::int64_t k) const;
  // The k movies nearest the liked one (itself excluded): query = its embedding (MF: q_i;
  // SASRec: its item embedding), keys = the embeddings of every movie with at least
  // min_ratings ratings in history.csv (a movie few people rated keeps an embedding near its
  // random start; 0 or 1 = every movie), normalised; weight = softmax over those keys of the
  // cosine similarity / temperature, through qkv's attention.
  std::vector<Recommendation> similar(std::int64_t movie, std::int64_t k, double temperature = 0.1,
                                      std::int64_t min_ratings = 10) const;
  // The ratings of each movie in history.csv.
  std::int64_t ratings_of(std::int64_t movie) const { return ratings_per_movie_.at(static_cast<std::size_t>(movie)); }
  // MF only (SASRec ranks, it does not predict ratings): clipped predicted ratings.
  std::vector<float> predict(std::span<const std::int64_t> users,
                             std::span<const std::int64_t> movies) const;
  // SASRec only.
  HistoryAttention attention(std::int64_t user) const;
  // The model as a scorer for evaluate_ranking (over this model's catalogue).
  BatchScorer scorer() const;
  // evaluate_ranking of this model on `data`'s split; qkv::Error unless `data` has this
  // model's movies and users (the data it was trained on).
  RankingMetrics evaluate(const Ratings& data, bool validation = false) const;
  // Its item embeddings' cosine, measured at load, and the validation figures training
  // recorded: health().warnings() are what `qkv recommend` and Python warn of.
  const ModelHealth& health() const { return health_; }

 private:
  std::string kind_;
  std::vector<Movie> movies_;
  std::vector<std::int64_t> user_ids_;
  std::vector<std::vector<std::int64_t>> history_;  // per user: movie indices, time order
  std::vector<std::int64_t> ratings_per_movie_;      // (I): occurrences in history_
  MfModel mf_;
  friend void replace_sasrec_weights(const std::string& dir, const nn::StateDict& state);
  models::SasRecConfig sasrec_config_;
  models::SasRecWeights sasrec_;
  ModelHealth health_;
  // (I, d): the movies' embeddings similar() compares (MF: q_i; SASRec: item_emb without
  // its padding row).
  Tensor movie_embeddings() const;
};

// The group qkv::viz shows for a HistoryAttention of the user with id `user_id`: the
// history's movies (movie_label) as queries and keys, every block's (heads, T, T).
viz::AttentionGroup history_attention_group(const Recommender& model, std::int64_t user_id,
                                            const HistoryAttention& attention);

// Registers "qkv-recommender" (apps/recommender/model_type.cpp) in the model registry;
// called by qkv::apps::register_model_types().
void register_recommender_model_type();

// The query options of `qkv recommend` and Recommender.recommend / similar, declared once
// (qkv/options.h).
struct RecommendQueryOptions {
  std::int64_t top = 10;
  std::int64_t min_ratings = 10;  // similar: the keys are movies rated at least this often
  double temperature = 0.1;       // similar: the weights are the softmax of cosine / temperature
};
const options::OptionSet<RecommendQueryOptions>& recommend_options();

}  // namespace qkv::recommender
