// The model registry (qkv/model_registry.h) with the applications' types registered as the
// CLI and the Python module register them: each embedded model directory loads to its
// model_type, an unknown type is refused with the known ones listed, and every attention a
// model returns is a probability distribution per row (causal for GPT-2).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "model_types.h"
#include "qkv/error.h"
#include "qkv/model_registry.h"
#include "temp_dir.h"

namespace {

namespace models = qkv::models;
using qkv::testing::TempDir;

// QKV_PROJECT_DIR: set for this file by tests/models/tests.cmake.
std::string model_dir(const std::string& name) { return std::string(QKV_PROJECT_DIR) + "/models/" + name; }

class ModelRegistry : public ::testing::Test {
 protected:
  void SetUp() override { qkv::apps::register_model_types(); }
};

TEST_F(ModelRegistry, KnowsEveryType) {
  const std::vector<std::string> want = {"bert", "gpt2", "qkv-recommender", "qkv-seq2seq", "qkv-vision",
                                         "use_lite"};
  EXPECT_EQ(models::model_types(), want);
}

TEST_F(ModelRegistry, LoadsEachEmbeddedModelToItsType) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"dates", "qkv-seq2seq"}, {"sotu-gpt", "gpt2"}, {"fashion-vit", "qkv-vision"}, {"fashion-point", "qkv-vision"}};
  for (const auto& [name, type] : cases) {
    EXPECT_EQ(models::model_type_of(model_dir(name)), type) << name;
    const auto model = models::load_model(model_dir(name));
    ASSERT_NE(model, nullptr) << name;
    EXPECT_EQ(model->model_type(), type) << name;
    EXPECT_EQ(model->attention_input(),
              type == "qkv-vision" ? models::AttentionInput::image : models::AttentionInput::text)
        << name;
  }
}

TEST_F(ModelRegistry, UnknownTypeNamesItAndListsTheKnownOnes) {
  TempDir dir("registry");
  std::ofstream(dir.file("config.json")) << R"({"model_type": "llama"})";
  try {
    models::load_model(dir.path.string());
    FAIL() << "an unknown model_type loaded";
  } catch (const qkv::Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("\"llama\""), std::string::npos) << message;
    for (const std::string& type : models::model_types())
      EXPECT_NE(message.find("\"" + type + "\""), std::string::npos) << type << " not listed: " << message;
  }
}

// Every row of every layer and head of every group sums to 1, each value in [0, 1]; for a
// causal group every value above the diagonal is exactly 0 (masked before the softmax).
// A row of L float32 probabilities, each within a unit roundoff u = 2^-24 of its exact
// value after the normalisation, sums to within about L·u of 1 (plus L·u for the float
// additions here, which are done in double: none); 4·L·u leaves room for the exp's few ulps.
void expect_distributions(const models::ModelAttention& a, const std::string& what, bool causal = false) {
  ASSERT_FALSE(a.view.groups.empty()) << what;
  ASSERT_FALSE(a.tokens.empty()) << what;
  EXPECT_EQ(a.tokens, a.view.groups.front().query_tokens) << what;
  for (const auto& g : a.view.groups) {
    ASSERT_FALSE(g.layers.empty()) << what << " " << g.name;
    for (std::size_t l = 0; l < g.layers.size(); ++l) {
      const qkv::Tensor& p = g.layers[l];  // (H, Lq, Lk)
      ASSERT_EQ(p.dim(), 3) << what;
      ASSERT_EQ(p.size(1), static_cast<std::int64_t>(g.query_tokens.size())) << what;
      ASSERT_EQ(p.size(2), static_cast<std::int64_t>(g.key_tokens.size())) << what;
      const double tolerance = 4.0 * static_cast<double>(p.size(2)) * std::ldexp(1.0, -24);
      for (std::int64_t h = 0; h < p.size(0); ++h)
        for (std::int64_t i = 0; i < p.size(1); ++i) {
          double sum = 0;
          for (std::int64_t j = 0; j < p.size(2); ++j) {
            const double v = p.get({h, i, j});
            ASSERT_TRUE(v >= 0 && v <= 1) << what << " " << g.name << " layer " << l << " head " << h << " (" << i
                                          << ", " << j << ") = " << v;
            if (causal && j > i) ASSERT_EQ(v, 0.0) << what << " layer " << l << " head " << h << " (" << i << ", " << j << ")";
            sum += v;
          }
          EXPECT_NEAR(sum, 1.0, tolerance) << what << " " << g.name << " layer " << l << " head " << h << " row " << i;
        }
    }
  }
}

TEST_F(ModelRegistry, Gpt2AttentionIsCausalAndNormalised) {
  const auto model = models::load_model(model_dir("sotu-gpt"));
  models::AttentionRequest r;
  r.text = "The animal didn't cross the street because it was too tired";
  const models::ModelAttention a = model->attention(r);
  ASSERT_EQ(a.view.groups.size(), 1u);
  EXPECT_EQ(a.view.groups[0].layers.size(), 4u);  // n_layer of models/sotu-gpt
  EXPECT_EQ(a.tokens.size(), static_cast<std::size_t>(a.view.groups[0].layers[0].size(1)));
  expect_distributions(a, "sotu-gpt", /*causal=*/true);
}

TEST_F(ModelRegistry, DateAttentionHasItsThreeGroups) {
  const auto model = models::load_model(model_dir("dates"));
  models::AttentionRequest r;
  r.text = "21 Nov 2026";
  const models::ModelAttention a = model->attention(r);
  ASSERT_EQ(a.view.groups.size(), 3u);
  EXPECT_EQ(a.tokens.size(), 11u);  // the characters of the date
  EXPECT_NE(a.view.subtitle.find("2026-11-21"), std::string::npos) << a.view.subtitle;
  expect_distributions(a, "dates");
  // The decoder's self-attention is causal.
  models::ModelAttention decoder = a;
  decoder.view.groups = {a.view.groups[1]};
  decoder.tokens = a.view.groups[1].query_tokens;
  expect_distributions(decoder, "dates decoder", /*causal=*/true);
}

TEST_F(ModelRegistry, VisionAttentionOverPatchesAndPoints) {
  TempDir dir("registry-image");
  {
    std::ofstream f(dir.file("image.pgm"), std::ios::binary);
    f << "P5 28 28 255\n";
    for (int i = 0; i < 28 * 28; ++i) f.put(static_cast<char>((i * 7) % 256));
  }
  models::AttentionRequest r;
  r.image_path = dir.file("image.pgm");
  const models::ModelAttention vit = models::load_model(model_dir("fashion-vit"))->attention(r);
  ASSERT_EQ(vit.tokens.size(), 50u);  // the class token and 7 × 7 patches
  EXPECT_EQ(vit.tokens[0], "[CLS]");
  EXPECT_EQ(vit.tokens[1], "r0c0");
  expect_distributions(vit, "fashion-vit");
  const models::ModelAttention point = models::load_model(model_dir("fashion-point"))->attention(r);
  EXPECT_EQ(point.tokens.size(), 128u);  // the points
  expect_distributions(point, "fashion-point");
  r.image_index = 1;
  EXPECT_THROW(models::load_model(model_dir("fashion-vit"))->attention(r), qkv::Error);
}

}  // namespace
