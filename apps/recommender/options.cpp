// The recommenders' training options, declared once for the CLI and Python: one set per
// model (mf, sasrec), each with only its own options.
#include <filesystem>

#include "recommender/recommender.h"

namespace qkv::recommender {
namespace {

using T = RecommenderOptions;

options::OptionSet<T> make_set(const std::string& model, const std::string& about) {
  return options::OptionSet<T>("train " + model, about, [model] {
    T t;
    t.model = model;
    t.out_dir = "recommender-model";
    return t;
  });
}

// What both models take first: the ratings.
void declare_data(options::OptionSet<T>& s) {
  s.path("data", &T::data,
         "The ratings: a CSV (userId,movieId,rating,timestamp) or a directory holding ratings.csv "
         "(scripts/fetch_data.sh movielens DIR writes one)")
      .required = true;
}

// The check that finds the ratings, after the checks of the options themselves (a bad
// --heads is a usage error whether or not the data is there).
void check_data(options::OptionSet<T>& s) {
  s.check([](T& t) {
    if (t.data.empty())
      throw options::OptionError("data", "'" + std::string("train ") + t.model +
                                             "' needs the ratings: a CSV or a directory holding ratings.csv "
                                             "(scripts/fetch_data.sh movielens DIR writes one)");
    std::error_code ec;  // a path the file system refuses (too long, say) reads as absent here
    const bool is_dir = std::filesystem::is_directory(t.data, ec);
    const std::string file = is_dir ? t.data + "/ratings.csv" : t.data;
    if (!std::filesystem::exists(file, ec))
      throw Error("train " + t.model + ": " + file + " does not exist; write it with: scripts/fetch_data.sh movielens " +
                  (is_dir ? t.data : std::string("DIR")));
    t.data = file;
  });
}

const char* kPatience =
    "Stop early after this many evaluations without a better validation score; the best weights are the "
    "model written (0 = never)";

}  // namespace

const options::OptionSet<T>& mf_training_options() {
  static const options::OptionSet<T> set = [] {
    auto s = make_set("mf", "Train matrix factorisation (biases + user and movie embeddings) on movie ratings");
    declare_data(s);
    s.choice("solver", [](T& t) -> auto& { return t.mf.solver; }, {"als", "adamw"},
             "als: the biases fitted exactly (λ chosen on validation), then the embeddings by alternating "
             "least squares, one sweep an epoch; adamw: biases and embeddings together by AdamW (--lr, --l2)");
    s.integer("epochs", [](T& t) -> auto& { return t.mf.epochs; }, 1, 100000,
              "Passes over the ratings (the epoch of best validation RMSE is kept)");
    s.integer("dim", [](T& t) -> auto& { return t.mf.dim; }, 0, 4096, "Embedding width (0 = biases only)");
    s.integer("batch", [](T& t) -> auto& { return t.mf.batch; }, 1, 65536,
              "Ratings per step (als: users and movies solved per step)");
    s.number("lr", [](T& t) -> auto& { return t.mf.lr; }, 1e-7, false, 1.0, false, "Learning rate (adamw)");
    s.number("l2", [](T& t) -> auto& { return t.mf.l2; }, 0.0, false, 100.0, false,
             "adamw: L2 weight λ on the biases and embeddings of each rating");
    s.number("als_l2", [](T& t) -> auto& { return t.mf.als_l2; }, 0.0, true, 1e6, false,
             "als: λ of Σ (r̂ − r)² + λ·(Σ |p_u|² + Σ |q_i|²), a sum over the users and movies");
    s.seed("seed", [](T& t) -> auto& { return t.mf.seed; }, "Seed of the weights and the order");
    s.integer("patience", [](T& t) -> auto& { return t.mf.patience; }, 0, options::kMaxSteps, kPatience);
    train::declare_run_options(s, "config.json, model.safetensors, users.csv, movies.csv, history.csv");
    check_data(s);
    return s;
  }();
  return set;
}

const options::OptionSet<T>& sasrec_training_options() {
  static const options::OptionSet<T> set = [] {
    auto s = make_set("sasrec", "Train SASRec (causal self-attention over each user's history) on movie ratings");
    declare_data(s);
    s.integer("epochs", [](T& t) -> auto& { return t.sasrec.epochs; }, 1, 100000,
              "Passes over the users (the evaluation of best validation HR@10 is kept)");
    s.integer("dim", [](T& t) -> auto& { return t.sasrec.model.dim; }, 1, 4096, "Embedding width d");
    s.integer("layers", [](T& t) -> auto& { return t.sasrec.model.layers; }, 1, 64, "Transformer blocks");
    s.integer("heads", [](T& t) -> auto& { return t.sasrec.model.heads; }, 1, 256, "Attention heads (must divide --dim)");
    s.integer("max_len", [](T& t) -> auto& { return t.sasrec.model.max_len; }, 1, 4096,
              "History positions (longer histories keep their last max_len movies)");
    s.integer("batch", [](T& t) -> auto& { return t.sasrec.batch; }, 1, 65536, "Users per step");
    s.number("lr", [](T& t) -> auto& { return t.sasrec.lr; }, 1e-7, false, 1.0, false, "Learning rate (AdamW)");
    s.number("weight_decay", [](T& t) -> auto& { return t.sasrec.weight_decay; }, 0.0, false, options::kInf, false,
             "AdamW's decoupled weight decay");
    s.integer("eval_every", [](T& t) -> auto& { return t.sasrec.eval_every; }, 1, 100000,
              "Epochs between validation HR@10");
    s.seed("seed", [](T& t) -> auto& { return t.sasrec.seed; },
           "Seed of the weights, the order, the negatives and the dropout masks");
    s.number("dropout", [](T& t) -> auto& { return t.sasrec.dropout; }, 0.0, false, 1.0, true,
             "Dropout p in training: after the embedding and at each block's attention probabilities, "
             "feed-forward activation and both residual branches (the paper's 0.2; 0 = none)");
    s.integer("patience", [](T& t) -> auto& { return t.sasrec.patience; }, 0, options::kMaxSteps, kPatience);
    train::declare_run_options(s, "config.json, model.safetensors, users.csv, movies.csv, history.csv");
    s.check([](T& t) {
      if (t.sasrec.model.dim % t.sasrec.model.heads != 0)
        throw options::OptionError("heads", std::to_string(t.sasrec.model.heads) + " must divide --dim " +
                                                std::to_string(t.sasrec.model.dim));
    });
    check_data(s);
    return s;
  }();
  return set;
}

const options::OptionSet<RecommendQueryOptions>& recommend_options() {
  using Q = RecommendQueryOptions;
  static const options::OptionSet<Q> set = [] {
    options::OptionSet<Q> s("recommend", "Movies for a user, or movies like a liked one, from a trained recommender");
    s.integer("top", &Q::top, 1, 100000, "How many movies");
    s.integer("min_ratings", &Q::min_ratings, 0, std::numeric_limits<std::int32_t>::max(),
              "--like: only movies with at least this many ratings are keys (a movie few people rated keeps an "
              "embedding near its random start; 1 = every movie)");
    s.number("temperature", &Q::temperature, 0.0, true, options::kInf, false,
             "--like: the weights are the softmax of cosine / temperature");
    return s;
  }();
  return set;
}

}  // namespace qkv::recommender
