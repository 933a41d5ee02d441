// qkv::models::BertModel: loading (names, variants, errors) and forward invariants on tiny random
// checkpoints written here with qkv::save_safetensors. Parity with PyTorch is checked by
// tests/python/test_bert.py through the CLI.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "qkv/bert.h"
#include "qkv/error.h"
#include "qkv/rng.h"
#include "qkv/safetensors.h"

namespace {

namespace fs = std::filesystem;
using qkv::Shape;
using qkv::Tensor;

constexpr double kU = 0x1.0p-24;  // f32 unit roundoff

// The tiny model of every test: V 50, E 16, 2 layers, 4 heads (D 4), F 32, P 12, T 2.
constexpr std::int64_t kV = 50, kE = 16, kN = 2, kH = 4, kF = 32, kP = 12, kT = 2;

Tensor randn(const Shape& shape, std::uint64_t seed, double scale) {
  qkv::Rng rng(seed);
  Tensor t = Tensor::empty(shape);
  float* p = t.data_as<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(scale * rng.normal());
  return t;
}

// The HF tensors of the tiny model, names without prefix, LayerNorms as weight/bias.
std::vector<std::pair<std::string, Tensor>> hf_tensors() {
  std::vector<std::pair<std::string, Tensor>> t;
  std::uint64_t seed = 100;
  auto add = [&](const std::string& name, const Shape& shape, double scale = 0.3) {
    t.emplace_back(name, randn(shape, seed++, scale));
  };
  auto norm = [&](const std::string& name) {
    Tensor w = randn({kE}, seed++, 0.1);
    float* p = w.data_as<float>();
    for (std::int64_t i = 0; i < kE; ++i) p[i] += 1.f;  // gamma near 1
    t.emplace_back(name + ".weight", w);
    add(name + ".bias", {kE}, 0.1);
  };
  add("embeddings.word_embeddings.weight", {kV, kE}, 1.0);
  add("embeddings.position_embeddings.weight", {kP, kE}, 1.0);
  add("embeddings.token_type_embeddings.weight", {kT, kE}, 1.0);
  norm("embeddings.LayerNorm");
  for (int n = 0; n < kN; ++n) {
    const std::string p = "encoder.layer." + std::to_string(n) + ".";
    for (const char* m : {"query", "key", "value"}) {
      add(p + "attention.self." + m + ".weight", {kE, kE});
      add(p + "attention.self." + m + ".bias", {kE}, 0.1);
    }
    add(p + "attention.output.dense.weight", {kE, kE});
    add(p + "attention.output.dense.bias", {kE}, 0.1);
    norm(p + "attention.output.LayerNorm");
    add(p + "intermediate.dense.weight", {kF, kE});
    add(p + "intermediate.dense.bias", {kF}, 0.1);
    add(p + "output.dense.weight", {kE, kF});
    add(p + "output.dense.bias", {kE}, 0.1);
    norm(p + "output.LayerNorm");
  }
  add("pooler.dense.weight", {kE, kE});
  add("pooler.dense.bias", {kE}, 0.1);
  return t;
}

std::string config_json(const std::string& model_type = "bert") {
  return "{\"model_type\": \"" + model_type + "\", \"vocab_size\": " + std::to_string(kV) +
         ", \"hidden_size\": " + std::to_string(kE) + ", \"num_hidden_layers\": " +
         std::to_string(kN) + ", \"num_attention_heads\": " + std::to_string(kH) +
         ", \"intermediate_size\": " + std::to_string(kF) + ", \"hidden_act\": \"gelu\"" +
         ", \"max_position_embeddings\": " + std::to_string(kP) +
         ", \"type_vocab_size\": " + std::to_string(kT) + ", \"layer_norm_eps\": 1e-12}";
}

class BertTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("qkv_test_bert_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Writes a checkpoint directory; `edit` may rename, drop or reshape tensors first.
  std::string write(const std::string& name,
                    const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit =
                        nullptr,
                    const std::string& config = config_json()) {
    const fs::path dir = root_ / name;
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << config;
    auto tensors = hf_tensors();
    if (edit) edit(tensors);
    qkv::save_safetensors((dir / "model.safetensors").string(), tensors);
    return dir.string();
  }

  fs::path root_;
};

// Expects loading `dir` to throw qkv::Error whose message holds every needle.
void expect_load_error(const std::string& dir, const std::vector<std::string>& needles) {
  try {
    (void)qkv::models::BertModel::load(dir);
    FAIL() << "loading " << dir << " did not throw";
  } catch (const qkv::Error& e) {
    for (const auto& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "message '" << e.what() << "' lacks '" << n << "'";
  }
}

const std::vector<std::int64_t> kIds = {2, 17, 5, 33, 41, 3, 9, 3};  // L = 8
const std::vector<std::int64_t> kTypes = {0, 0, 0, 0, 0, 0, 1, 1};

TEST_F(BertTest, ShapesAndAttentionRowsSumToOne) {
  const qkv::models::BertModel model = qkv::models::BertModel::load(write("plain"));
  const std::int64_t L = static_cast<std::int64_t>(kIds.size());
  const qkv::models::BertOutput out = model.forward(kIds, 1, L, kTypes, {}, true);
  EXPECT_EQ(out.last_hidden_state.shape(), (Shape{1, L, kE}));
  EXPECT_EQ(out.pooler_output.shape(), (Shape{1, kE}));
  ASSERT_EQ(out.attentions.size(), static_cast<std::size_t>(kN));
  for (const Tensor& a : out.attentions) {
    ASSERT_EQ(a.shape(), (Shape{1, kH, L, L}));
    // Each probability is rounded once to f32 from a double softmax: a row of L sums to
    // 1 within L·u (plus u for the double sum itself).
    const double tol = (L + 1) * kU;
    for (std::int64_t h = 0; h < kH; ++h)
      for (std::int64_t i = 0; i < L; ++i) {
        double sum = 0;
        for (std::int64_t j = 0; j < L; ++j) sum += a.get({0, h, i, j});
        EXPECT_NEAR(sum, 1.0, tol) << "head " << h << " row " << i;
      }
  }
  for (float v : out.last_hidden_state.to_vector()) ASSERT_TRUE(std::isfinite(v));
  for (float v : out.pooler_output.to_vector()) ASSERT_TRUE(std::isfinite(v)) ;
}

TEST_F(BertTest, PrefixAndGammaBetaVariantsLoadTheSameWeights) {
  auto prefixed = [](auto& t) {
    for (auto& [name, tensor] : t) name = "bert." + name;
    t.emplace_back("cls.predictions.bias", Tensor::zeros({kV}));  // ignored
  };
  auto gamma_beta = [](auto& t) {
    for (auto& [name, tensor] : t) {
      const auto dot = name.rfind('.');
      if (name.find("LayerNorm") == std::string::npos) continue;
      name = name.substr(0, dot) + (name.substr(dot) == ".weight" ? ".gamma" : ".beta");
    }
  };
  const std::string dirs[] = {
      write("plain"), write("prefix", prefixed), write("gamma", gamma_beta),
      write("both", [&](auto& t) {
        gamma_beta(t);
        prefixed(t);
      })};
  const std::int64_t L = static_cast<std::int64_t>(kIds.size());
  const auto want = qkv::models::BertModel::load(dirs[0]).forward(kIds, 1, L, kTypes);
  for (const auto& dir : dirs) {
    const auto got = qkv::models::BertModel::load(dir).forward(kIds, 1, L, kTypes);
    // The same weights and the same code path: bitwise equal.
    EXPECT_EQ(got.last_hidden_state.to_vector(), want.last_hidden_state.to_vector()) << dir;
    EXPECT_EQ(got.pooler_output.to_vector(), want.pooler_output.to_vector()) << dir;
  }
}

// f32 weights are views into the checkpoint's mapping, not copies (qkv/bert.h).
TEST_F(BertTest, F32WeightsAreZeroCopyViews) {
  const std::string dir = write("plain");
  const qkv::SafeTensors st = qkv::SafeTensors::open_model(dir);
  const qkv::models::BertConfig config = qkv::models::BertConfig::from_json(config_json());
  const qkv::models::BertWeights w = qkv::models::BertWeights::load(config, st);
  EXPECT_EQ(w.word_embeddings.data(), st.get("embeddings.word_embeddings.weight").data());
  EXPECT_EQ(w.layers[1].output_weight.data(), st.get("encoder.layer.1.output.dense.weight").data());
  EXPECT_EQ(w.pooler_bias.data(), st.get("pooler.dense.bias").data());
}

TEST_F(BertTest, MissingTensorIsNamedWithItsShape) {
  expect_load_error(write("missing", [](auto& t) {
                      std::erase_if(t, [](const auto& e) {
                        return e.first == "encoder.layer.1.intermediate.dense.weight";
                      });
                    }),
                    {"missing tensor", "encoder.layer.1.intermediate.dense.weight", "(32, 16)"});
  expect_load_error(write("missing_norm", [](auto& t) {
                      std::erase_if(t, [](const auto& e) {
                        return e.first == "embeddings.LayerNorm.bias";
                      });
                    }),
                    {"embeddings.LayerNorm.bias", "embeddings.LayerNorm.beta", "(16,)"});
}

TEST_F(BertTest, MisShapedTensorIsNamedWithBothShapes) {
  expect_load_error(write("shape", [](auto& t) {
                      for (auto& [name, tensor] : t)
                        if (name == "encoder.layer.0.attention.self.key.weight")
                          tensor = Tensor::zeros({kE, kE + 1});
                    }),
                    {"encoder.layer.0.attention.self.key.weight", "(16, 16)", "(16, 17)"});
}

TEST_F(BertTest, UnknownModelTypeAndBadConfig) {
  expect_load_error(write("gpt", nullptr, config_json("gpt2")), {"model_type", "gpt2"});
  std::string bad = config_json();
  bad.replace(bad.find("\"gelu\""), 6, "\"swish\"");
  expect_load_error(write("act", nullptr, bad), {"hidden_act", "swish"});
  expect_load_error((root_ / "nowhere").string(), {"does not exist"});
}

// from_json reads text, from_file a path; either names its source and the key in errors.
TEST_F(BertTest, ConfigFromJsonAndFromFile) {
  using qkv::models::BertConfig;
  const fs::path path = root_ / "config.json";
  std::ofstream(path) << config_json();
  const BertConfig a = BertConfig::from_json(config_json());
  const BertConfig b = BertConfig::from_file(path.string());
  for (const BertConfig& c : {a, b}) {
    EXPECT_EQ(c.vocab_size, kV);
    EXPECT_EQ(c.hidden_size, kE);
    EXPECT_EQ(c.num_hidden_layers, kN);
    EXPECT_EQ(c.num_attention_heads, kH);
    EXPECT_EQ(c.intermediate_size, kF);
    EXPECT_EQ(c.max_position_embeddings, kP);
    EXPECT_EQ(c.type_vocab_size, kT);
    EXPECT_EQ(c.layer_norm_eps, 1e-12);
    EXPECT_EQ(c.gelu, qkv::nn::GeluApproximation::none);
  }
  auto expect_error = [](const std::function<void()>& f, const std::vector<std::string>& needles) {
    try {
      f();
      ADD_FAILURE() << "no qkv::Error (expected one mentioning '" << needles.front() << "')";
    } catch (const qkv::Error& e) {
      for (const auto& n : needles)
        EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
            << "message '" << e.what() << "' lacks '" << n << "'";
    }
  };
  std::string no_heads = config_json();
  no_heads.replace(no_heads.find("\"num_attention_heads\""), 21, "\"heads\"");
  expect_error([&] { BertConfig::from_json(no_heads, "mine.json"); },
               {"mine.json", "missing key 'num_attention_heads'"});
  expect_error([&] { BertConfig::from_json(no_heads); }, {"<memory>", "num_attention_heads"});
  expect_error([&] { BertConfig::from_json("[1]", "mine.json"); },
               {"mine.json", "expected a JSON object"});
  std::ofstream(path) << no_heads;  // replaces the file
  expect_error([&] { BertConfig::from_file(path.string()); },
               {path.string(), "missing key 'num_attention_heads'"});
  expect_error([&] { BertConfig::from_file((root_ / "absent.json").string()); },
               {"absent.json", "cannot open"});
}

TEST_F(BertTest, InputLongerThanMaxPositionsThrows) {
  const qkv::models::BertModel model = qkv::models::BertModel::load(write("plain"));
  const std::vector<std::int64_t> ids(kP + 1, 4);
  EXPECT_NO_THROW(model.forward(std::span(ids).first(kP), 1, kP));
  try {
    model.forward(ids, 1, kP + 1);
    FAIL() << "no error for L = P + 1";
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_position_embeddings = 12"), std::string::npos)
        << e.what();
  }
  const std::vector<std::int64_t> bad_id = {2, kV, 3};
  EXPECT_THROW(model.forward(bad_id, 1, 3), qkv::Error);
  const std::vector<std::int64_t> bad_type = {0, 2, 0};
  const std::vector<std::int64_t> three = {2, 5, 3};
  EXPECT_THROW(model.forward(three, 1, 3, bad_type), qkv::Error);
}

TEST_F(BertTest, ShardedCheckpointLoads) {
  const fs::path dir = root_ / "sharded";
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config_json();
  auto tensors = hf_tensors();
  const std::size_t half = tensors.size() / 2;
  std::vector<std::pair<std::string, Tensor>> a(tensors.begin(), tensors.begin() + half);
  std::vector<std::pair<std::string, Tensor>> b(tensors.begin() + half, tensors.end());
  qkv::save_safetensors((dir / "model-00001-of-00002.safetensors").string(), a);
  qkv::save_safetensors((dir / "model-00002-of-00002.safetensors").string(), b);
  std::string index = "{\"weight_map\": {";
  for (std::size_t i = 0; i < tensors.size(); ++i)
    index += (i ? ", \"" : "\"") + tensors[i].first + "\": \"model-0000" +
             (i < half ? "1" : "2") + "-of-00002.safetensors\"";
  std::ofstream(dir / "model.safetensors.index.json") << index << "}}";
  const std::int64_t L = static_cast<std::int64_t>(kIds.size());
  EXPECT_EQ(qkv::models::BertModel::load(dir.string()).forward(kIds, 1, L).last_hidden_state.to_vector(),
            qkv::models::BertModel::load(write("plain")).forward(kIds, 1, L).last_hidden_state.to_vector());
}

// Padded rows of a batch equal their unpadded single runs at the kept positions, through
// both padding paths: key lengths (every mask a suffix of zeros) and a bool mask (one row
// with a hole). Tolerance: the same operations in the same order, except that oneDNN may
// block a matmul of M = B·L rows differently from one of L rows, reordering each dot
// product of K <= 32 terms: <= K·u·Σ|a·b| per product (Higham §3.1); with O(1)
// layer-normed activations, weights of scale 0.3 (Σ|a·b| <= 32·0.3·3 ≈ 30) and LayerNorm
// dividing by σ ≳ 0.3, over 2 layers this stays below 2·32·u·30/0.3 ≈ 4e-4.
TEST_F(BertTest, PaddedBatchRowsEqualTheirSingleRuns) {
  const qkv::models::BertModel model = qkv::models::BertModel::load(write("plain"));
  constexpr std::int64_t L = 8;
  const std::vector<std::vector<std::int64_t>> rows = {
      {2, 17, 5, 33, 41, 3, 9, 3}, {2, 8, 11, 3}, {2, 30, 12, 44, 3, 6}};
  const std::vector<std::vector<std::int64_t>> types = {
      {0, 0, 0, 0, 0, 0, 1, 1}, {0, 0, 0, 0}, {0, 0, 0, 0, 0, 1}};
  constexpr double kTol = 4e-4;

  for (const bool with_hole : {false, true}) {
    const std::int64_t B = with_hole ? 4 : 3;
    std::vector<std::int64_t> ids(B * L, 0), tt(B * L, 0), mask(B * L, 0);
    for (std::size_t b = 0; b < rows.size(); ++b)
      for (std::size_t j = 0; j < rows[b].size(); ++j) {
        ids[b * L + j] = rows[b][j];
        tt[b * L + j] = types[b][j];
        mask[b * L + j] = 1;
      }
    if (with_hole) {  // row 3: row 0 with key 2 masked out: not a suffix -> bool mask path
      for (std::int64_t j = 0; j < L; ++j) {
        ids[3 * L + j] = rows[0][j];
        mask[3 * L + j] = j == 2 ? 0 : 1;
      }
    }
    const qkv::models::BertOutput batch = model.forward(ids, B, L, tt, mask, true);
    for (std::size_t b = 0; b < rows.size(); ++b) {
      const std::int64_t n = static_cast<std::int64_t>(rows[b].size());
      const qkv::models::BertOutput single = model.forward(rows[b], 1, n, types[b], {}, true);
      double worst = 0;
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t e = 0; e < kE; ++e)
          worst = std::max(worst, std::abs(double(batch.last_hidden_state.get(
                                                {static_cast<std::int64_t>(b), i, e})) -
                                            single.last_hidden_state.get({0, i, e})));
      EXPECT_LE(worst, kTol) << "row " << b << (with_hole ? " (bool mask)" : " (key lengths)");
      for (std::int64_t e = 0; e < kE; ++e)
        EXPECT_NEAR(batch.pooler_output.get({static_cast<std::int64_t>(b), e}),
                    single.pooler_output.get({0, e}), kTol);
      // Padded keys get probability 0; the kept ones match the single run.
      for (std::size_t layer = 0; layer < batch.attentions.size(); ++layer)
        for (std::int64_t h = 0; h < kH; ++h)
          for (std::int64_t i = 0; i < n; ++i)
            for (std::int64_t j = 0; j < L; ++j) {
              const float got =
                  batch.attentions[layer].get({static_cast<std::int64_t>(b), h, i, j});
              if (j >= n) {
                EXPECT_EQ(got, 0.f);
              } else {
                EXPECT_NEAR(got, single.attentions[layer].get({0, h, i, j}), kTol);
              }
            }
    }
    if (with_hole) {
      for (std::size_t layer = 0; layer < batch.attentions.size(); ++layer)
        for (std::int64_t h = 0; h < kH; ++h)
          for (std::int64_t i = 0; i < L; ++i) {
            EXPECT_EQ(batch.attentions[layer].get({3, h, i, 2}), 0.f);
            double sum = 0;
            for (std::int64_t j = 0; j < L; ++j) sum += batch.attentions[layer].get({3, h, i, j});
            EXPECT_NEAR(sum, 1.0, (L + 1) * kU);
          }
    }
  }
}

}  // namespace

namespace {

// config_json() with `key`'s value replaced by `value` (the key must be in it).
std::string config_with(const std::string& key, const std::string& value) {
  std::string c = config_json();
  const std::size_t at = c.find("\"" + key + "\": ");
  const std::size_t begin = at + key.size() + 4, end = c.find_first_of(",}", begin);
  return c.replace(begin, end - begin, value);
}

}  // namespace

// Configurations no checkpoint can have: no layers, sizes beyond 2^31 - 1 (positions of
// 2^40), heads that do not divide the width, an epsilon that overflows float.
TEST_F(BertTest, ImpossibleConfigsAreErrors) {
  expect_load_error(write("zero", nullptr, config_with("num_hidden_layers", "0")),
                    {"\"num_hidden_layers\" must be an integer in [1, 2147483647], got 0"});
  expect_load_error(write("huge", nullptr, config_with("max_position_embeddings", "1099511627776")),
                    {"\"max_position_embeddings\" must be an integer in [1, 2147483647], got "
                     "1099511627776"});
  expect_load_error(write("negative", nullptr, config_with("vocab_size", "-3")),
                    {"\"vocab_size\" must be an integer in [1, 2147483647], got -3"});
  expect_load_error(write("heads", nullptr, config_with("num_attention_heads", "3")),
                    {"hidden_size 16 must be a multiple of num_attention_heads 3"});
  expect_load_error(write("eps", nullptr, config_with("layer_norm_eps", "1e39")),
                    {"\"layer_norm_eps\" must be >= 0 and finite as a float32, got 1e+39"});
}

// NaN or ±inf in a weight the model reads is refused at load; an ignored tensor is not read.
TEST_F(BertTest, NonFiniteWeightsAreErrors) {
  expect_load_error(write("nan", [](auto& t) {
                      for (auto& [name, tensor] : t)
                        if (name == "encoder.layer.1.output.dense.weight")
                          tensor.template data_as<float>()[2 * kF + 5] = std::nanf("");
                    }),
                    {"tensor 'encoder.layer.1.output.dense.weight' holds NaN at index [2, 5]",
                     "must be finite"});
  expect_load_error(write("inf", [](auto& t) {
                      for (auto& [name, tensor] : t)
                        if (name == "embeddings.LayerNorm.weight")
                          tensor.template data_as<float>()[0] = INFINITY;
                    }),
                    {"tensor 'embeddings.LayerNorm.weight' holds +inf at index [0]"});
  EXPECT_NO_THROW(qkv::models::BertModel::load(write("cls", [](auto& t) {
    t.emplace_back("cls.predictions.bias", Tensor::full({kV}, NAN));
  })));
}

// Tensors BertModel does not read are listed (front ends warn), apart from the pre-training
// heads and position_ids; a layer beyond num_hidden_layers is a config mismatch.
TEST_F(BertTest, UnusedTensorsAreListedAndExtraLayersRefused) {
  const auto model = qkv::models::BertModel::load(write("extra", [](auto& t) {
    for (auto& [name, tensor] : t) name = "bert." + name;
    t.emplace_back("cls.predictions.bias", Tensor::zeros({kV}));
    t.emplace_back("bert.embeddings.position_ids", Tensor::zeros({1, kP}));
    t.emplace_back("classifier.weight", Tensor::zeros({2, kE}));
    t.emplace_back("bert.encoder.layer.0.attention.self.rotary", Tensor::zeros({4}));
  }));
  EXPECT_EQ(model.weights.unused_tensors,
            (std::vector<std::string>{"bert.encoder.layer.0.attention.self.rotary",
                                      "classifier.weight"}));
  EXPECT_TRUE(qkv::models::BertModel::load(write("plain")).weights.unused_tensors.empty());
  expect_load_error(write("layer2", [](auto& t) {
                      t.emplace_back("encoder.layer.2.output.dense.bias", Tensor::zeros({kE}));
                    }),
                    {"'encoder.layer.2.output.dense.bias' of block 2",
                     "num_hidden_layers = 2", "do not belong together"});
}

// A directory holding only formats qkv does not read says what it found and how to convert.
TEST_F(BertTest, OtherCheckpointFormatsSayHowToConvert) {
  const fs::path dir = root_ / "torch";
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config_json();
  std::ofstream(dir / "pytorch_model.bin") << "PK\x03\x04 not really";
  expect_load_error(dir.string(), {"no model.safetensors", "pytorch_model.bin",
                                   "save_pretrained", "safetensors.torch import save_file"});
  // The same bytes named model.safetensors: recognised by their magic number.
  fs::rename(dir / "pytorch_model.bin", dir / "model.safetensors");
  expect_load_error(dir.string(), {"not a safetensors file", "ZIP archive", "torch.save"});
}

// Weights assembled by hand are held to the config's shapes.
TEST_F(BertTest, ConstructorChecksTheWeights) {
  const auto plain = qkv::models::BertModel::load(write("plain"));
  qkv::models::BertWeights w = plain.weights;
  w.layers[1].intermediate_bias = Tensor::zeros({kF + 1});
  try {
    qkv::models::BertModel model(plain.config, w);
    FAIL() << "no error for a mis-shaped weight";
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "layers[1].intermediate_bias must be f32 of shape (32,), got f32 (33,)"),
              std::string::npos)
        << e.what();
  }
}
