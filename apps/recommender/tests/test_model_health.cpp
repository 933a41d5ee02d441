// The weak-model warnings (recommender/model_health.h) on constructed embeddings and
// validation figures: each fires on what it describes and stays silent otherwise, names
// the measured number and the threshold or baseline; and a model directory carries them
// from training to load (and drops the validation figures when its weights are replaced).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "qkv/embedding_health.h"
#include "qkv/rng.h"
#include "qkv/safetensors.h"
#include "qkv/viz.h"
#include "recommender/model_health.h"
#include "recommender/recommender.h"
#include "temp_dir.h"

namespace {

namespace rec = qkv::recommender;

// I movies' embeddings of width d: `shared` times one common direction plus unit Gaussian
// noise. shared 0: independent directions (cosine about 0); shared 4: nearly one direction.
qkv::Tensor embeddings(std::int64_t I, std::int64_t d, double shared, std::uint64_t seed) {
  qkv::Rng rng(seed);
  std::vector<double> common(static_cast<std::size_t>(d));
  for (double& c : common) c = rng.normal();
  qkv::Tensor t = qkv::Tensor::zeros({I, d});  // (I, d)
  float* p = t.data_as<float>();
  for (std::int64_t i = 0; i < I; ++i)
    for (std::int64_t k = 0; k < d; ++k) p[i * d + k] = static_cast<float>(shared * common[k] + rng.normal());
  return t;
}

bool mentions(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The rows of `a` (n, d), then those of `b` (m, d): (n + m, d).
qkv::Tensor stacked(const qkv::Tensor& a, const qkv::Tensor& b) {
  const std::int64_t d = a.size(1);
  qkv::Tensor t = qkv::Tensor::zeros({a.size(0) + b.size(0), d});
  std::copy(a.data_as<float>(), a.data_as<float>() + a.numel(), t.data_as<float>());
  std::copy(b.data_as<float>(), b.data_as<float>() + b.numel(), t.data_as<float>() + a.numel());
  return t;
}

}  // namespace

TEST(ModelHealth, CollapsedEmbeddingsWarnAndHealthyOnesDoNot) {
  const std::vector<std::int64_t> counts(200, rec::kHealthMinRatings);
  const rec::ModelHealth collapsed = rec::embedding_health("sasrec", embeddings(200, 50, 4.0, 1), counts);
  ASSERT_TRUE(collapsed.mean_cosine.has_value());
  EXPECT_GT(*collapsed.mean_cosine, 0.9);
  EXPECT_EQ(collapsed.movies, 200);
  ASSERT_EQ(collapsed.warnings().size(), 1u);
  const std::string w = collapsed.warnings()[0];
  char measured[16];
  std::snprintf(measured, sizeof measured, "%.3f", *collapsed.mean_cosine);
  EXPECT_TRUE(mentions(w, "collapsed")) << w;
  EXPECT_TRUE(mentions(w, measured)) << w;
  EXPECT_TRUE(mentions(w, "over the 200 most-rated movies")) << w;
  char threshold[16];
  std::snprintf(threshold, sizeof threshold, "above %.2f", rec::kCollapsedCosine);
  EXPECT_TRUE(mentions(w, threshold)) << w;
  EXPECT_TRUE(mentions(w, "qkv train sasrec --data DATA")) << w;

  const rec::ModelHealth healthy = rec::embedding_health("sasrec", embeddings(200, 50, 0.0, 2), counts);
  EXPECT_LT(std::abs(*healthy.mean_cosine), 0.02);
  EXPECT_TRUE(healthy.warnings().empty()) << healthy.warnings()[0];
}

TEST(ModelHealth, TheMostRatedMoviesCount) {
  // 300 random movies rated 50 times, then 400 collapsed ones rated 10 to 49 times: the 200
  // most-rated are the random ones, and the collapsed ones do not count.
  const qkv::Tensor random = embeddings(300, 16, 0.0, 3), collapsed = embeddings(400, 16, 4.0, 4);
  std::vector<std::int64_t> counts(700, 50);
  for (std::int64_t i = 300; i < 700; ++i) counts[i] = 10 + i % 40;
  const rec::ModelHealth h = rec::embedding_health("mf", stacked(random, collapsed), counts);
  EXPECT_EQ(h.movies, rec::kHealthMovies);
  EXPECT_NEAR(*h.mean_cosine, *qkv::mean_pairwise_cosine(random.slice(0, 0, rec::kHealthMovies)), 1e-12);
  EXPECT_FALSE(h.collapsed());
  // The other way round: the collapsed ones most rated.
  std::vector<std::int64_t> reversed(700, 9);  // rated below kHealthMinRatings: never compared
  for (std::int64_t i = 300; i < 700; ++i) reversed[i] = 10 + (i * 7) % 40;
  const rec::ModelHealth c = rec::embedding_health("mf", stacked(random, collapsed), reversed);
  EXPECT_EQ(c.movies, rec::kHealthMovies);
  EXPECT_TRUE(c.collapsed());
  std::vector<std::int64_t> rows;  // the twin: the 200 most-rated by a sort of its own
  for (std::int64_t i = 300; i < 700; ++i) rows.push_back(i);
  std::sort(rows.begin(), rows.end(), [&](std::int64_t a, std::int64_t b) {
    return reversed[a] != reversed[b] ? reversed[a] > reversed[b] : a < b;
  });
  rows.resize(rec::kHealthMovies);
  EXPECT_NEAR(*c.mean_cosine, *qkv::mean_pairwise_cosine(stacked(random, collapsed), rows), 1e-12);
  // Fewer movies rated often enough than kHealthMovies: all of them.
  std::vector<std::int64_t> few(700, 0);
  for (std::int64_t i = 0; i < 30; ++i) few[i] = rec::kHealthMinRatings;
  EXPECT_EQ(rec::embedding_health("mf", stacked(random, collapsed), few).movies, 30);
  // A biases-only model (width 0) has no embedding to collapse.
  EXPECT_FALSE(rec::embedding_health("mf", qkv::Tensor::zeros({700, 0}), counts).mean_cosine.has_value());
}

TEST(ModelHealth, BelowTheBaselineOnValidationWarns) {
  rec::ModelHealth s;
  s.model = "sasrec";
  s.validation = 0.60;
  s.baseline_validation = 0.65;
  ASSERT_EQ(s.warnings().size(), 1u);
  EXPECT_TRUE(mentions(s.warnings()[0], "HR@10 0.6000 against popularity's 0.6500")) << s.warnings()[0];
  EXPECT_TRUE(mentions(s.warnings()[0], "train longer")) << s.warnings()[0];
  s.validation = 0.65;  // level with popularity is not below it
  EXPECT_TRUE(s.warnings().empty());
  s.validation = 0.70;
  EXPECT_TRUE(s.warnings().empty());
  s.validation.reset();  // not recorded: nothing to say
  EXPECT_TRUE(s.warnings().empty());

  // MF: RMSE, lower is better, against the biases'.
  rec::ModelHealth m;
  m.model = "mf";
  m.validation = 0.93;
  m.baseline_validation = 0.92;
  ASSERT_EQ(m.warnings().size(), 1u);
  EXPECT_TRUE(mentions(m.warnings()[0], "RMSE 0.9300 against the biases' 0.9200")) << m.warnings()[0];
  m.validation = 0.91;
  EXPECT_TRUE(m.warnings().empty());
  // Both signs at once: two warnings.
  m.validation = 0.95;
  m.mean_cosine = 0.99;
  m.movies = 3;
  EXPECT_EQ(m.warnings().size(), 2u);
}

// train_recommender records the health in config.json's report; Recommender::load reads
// the validation figures and measures the embeddings again; replace_sasrec_weights with
// collapsed embeddings makes the loaded model warn of them and forgets the figures.
TEST(ModelHealth, TravelsFromTrainingToLoad) {
  qkv::testing::TempDir dir("health");
  const std::string csv = (dir.path / "ratings.csv").string();
  std::ostringstream ratings;
  ratings << "userId,movieId,rating,timestamp\n";
  qkv::Rng rng(5);
  for (int u = 0; u < 30; ++u)
    for (int j = 0; j < 20; ++j) ratings << u + 1 << "," << 1 + (u * 7 + j * 3) % 40 << ",4," << 1000 * u + j << "\n";
  qkv::viz::write_file(csv, ratings.str());
  rec::RecommenderOptions o;
  o.data = csv;
  o.model = "sasrec";
  o.out_dir = (dir.path / "sasrec").string();
  o.sasrec.model.dim = 8;
  o.sasrec.model.max_len = 10;
  o.sasrec.epochs = 2;
  o.sasrec.eval_every = 1;
  const rec::RecommenderReport report = rec::train_recommender(o);
  ASSERT_TRUE(report.health.validation.has_value());
  EXPECT_EQ(*report.health.validation, report.validation);
  ASSERT_TRUE(report.health.baseline_validation.has_value());
  const nlohmann::json j = nlohmann::json::parse(report.to_json());
  EXPECT_EQ(j["warnings"].size(), report.health.warnings().size());
  EXPECT_EQ(j["health"]["baseline"], "popularity");

  const rec::Recommender m = rec::Recommender::load(o.out_dir);
  EXPECT_EQ(m.health().validation, report.health.validation);
  EXPECT_EQ(m.health().baseline_validation, report.health.baseline_validation);
  EXPECT_EQ(m.health().movies, report.health.movies);
  ASSERT_TRUE(m.health().mean_cosine.has_value());
  EXPECT_NEAR(*m.health().mean_cosine, *report.health.mean_cosine, 1e-12);

  // The same directory with collapsed item embeddings (row 0 is padding).
  qkv::nn::StateDict state;
  const qkv::SafeTensors st = qkv::SafeTensors::open(o.out_dir + "/model.safetensors");
  for (const std::string& name : st.names()) state[name] = st.get(name).contiguous();
  const std::int64_t I = report.movies;
  const qkv::Tensor collapsed = embeddings(I + 1, 8, 4.0, 6);
  state["item_emb.weight"] = collapsed;
  rec::replace_sasrec_weights(o.out_dir, state);
  const rec::Recommender c = rec::Recommender::load(o.out_dir);
  EXPECT_FALSE(c.health().validation.has_value());
  EXPECT_TRUE(c.health().collapsed());
  ASSERT_EQ(c.health().warnings().size(), 1u);
  EXPECT_TRUE(mentions(c.health().warnings()[0], "collapsed"));
}
