// "qkv-recommender" in the model registry (qkv/model_registry.h): a directory written by
// `qkv train mf` and `qkv train sasrec` (config "model": "mf" or "sasrec", with its movies.csv and
// history.csv), loaded by Recommender::load. SASRec's attention is over a user's history
// (Recommender::attention, what `qkv recommend --show` prints); matrix factorisation has none.
#include <memory>
#include <sstream>
#include <string>

#include "qkv/error.h"
#include "qkv/model_registry.h"
#include "recommender/recommender.h"

namespace qkv::recommender {

viz::AttentionGroup history_attention_group(const Recommender& model, std::int64_t user_id,
                                            const HistoryAttention& attention) {
  viz::AttentionGroup group;
  group.name = "SASRec self-attention over user " + std::to_string(user_id) + "'s history";
  for (const std::int64_t m : attention.history)
    group.query_tokens.push_back(movie_label(model.movies()[static_cast<std::size_t>(m)]));
  group.key_tokens = group.query_tokens;
  group.layers = attention.layers;  // per block (heads, T, T)
  group.text_labels = true;  // movie titles, whose spaces are spaces
  return group;
}

namespace {

class RecommenderEntry final : public models::Model {
 public:
  explicit RecommenderEntry(const std::string& dir) : dir_(dir), model_(Recommender::load(dir)) {}
  std::string model_type() const override { return "qkv-recommender"; }
  std::string description() const override {
    std::ostringstream s;
    s << (model_.kind() == "sasrec" ? "recommender, SASRec (self-attention over a user's history)"
                                    : "recommender, matrix factorisation (no attention)")
      << ": " << model_.movies().size() << " movies, " << model_.user_ids().size() << " users";
    return s.str();
  }
  models::AttentionInput attention_input() const override {
    return model_.kind() == "sasrec" ? models::AttentionInput::user : models::AttentionInput::none;
  }
  models::ModelAttention attention(const models::AttentionRequest& r) const override {
    QKV_CHECK(model_.kind() == "sasrec", "model directory '" << dir_ << "' is a matrix factorisation "
                                             "recommender, which has no attention (a sasrec model has)");
    const HistoryAttention h = model_.attention(model_.user_index(r.user));
    models::ModelAttention a;
    a.view.title = viz::page_title("SASRec recommender", dir_);
    a.view.subtitle = "user " + std::to_string(r.user) + ": the last row scores the next movie";
    a.view.groups.push_back(history_attention_group(model_, r.user, h));
    a.tokens = a.view.groups.front().query_tokens;
    return a;
  }

 private:
  std::string dir_;
  Recommender model_;
};

}  // namespace

void register_recommender_model_type() {
  models::register_model_type("qkv-recommender", [](const std::string& dir) -> std::unique_ptr<models::Model> {
    return std::make_unique<RecommenderEntry>(dir);
  });
}

}  // namespace qkv::recommender
