// qkv::models::Seq2Seq: config.json written by to_json reads back through from_json and
// from_file, and a bad one is named with its source and key; the loss gradient against
// finite differences (and against torch autograd in tests/python/test_train.py).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "temp_dir.h"
#include "qkv/seq2seq.h"
#include "nn/check.h"

namespace {

using qkv::Tensor;
using qkv::models::Seq2SeqConfig;
using namespace qkv::testing;  // nn::, train::, check_gradient, ...
namespace models = qkv::models;

// The message of the qkv::Error that f throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const qkv::Error& e) {
    return e.what();
  }
  return "";
}

// Every field away from its default, so a field that is not read back shows.
Seq2SeqConfig unusual() {
  Seq2SeqConfig c;
  c.vocab_size = 37;
  c.d_model = 24;
  c.nhead = 3;
  c.dim_feedforward = 40;
  c.num_encoder_layers = 1;
  c.num_decoder_layers = 3;
  c.max_len = 17;
  c.layer_norm_eps = 1e-6;
  c.norm_first = false;
  c.activation = qkv::nn::Activation::gelu_tanh;
  return c;
}

void expect_equal(const Seq2SeqConfig& a, const Seq2SeqConfig& b) {
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.d_model, b.d_model);
  EXPECT_EQ(a.nhead, b.nhead);
  EXPECT_EQ(a.dim_feedforward, b.dim_feedforward);
  EXPECT_EQ(a.num_encoder_layers, b.num_encoder_layers);
  EXPECT_EQ(a.num_decoder_layers, b.num_decoder_layers);
  EXPECT_EQ(a.max_len, b.max_len);
  EXPECT_EQ(a.layer_norm_eps, b.layer_norm_eps);
  EXPECT_EQ(a.norm_first, b.norm_first);
  EXPECT_EQ(a.activation, b.activation);
}

TEST(Seq2SeqConfig, ToJsonReadsBack) {
  const Seq2SeqConfig c = unusual();
  expect_equal(Seq2SeqConfig::from_json(c.to_json()), c);

  const auto dir = std::filesystem::temp_directory_path() /
                   ("qkv_test_seq2seq_config_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "config.json").string();
  std::ofstream(path) << c.to_json();
  expect_equal(Seq2SeqConfig::from_file(path), c);

  std::string text = c.to_json();
  text.replace(text.find("\"nhead\""), 7, "\"heads\"");
  std::ofstream(path) << text;  // replaces the file
  std::string msg = error_of([&] { Seq2SeqConfig::from_file(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing key 'nhead'"), std::string::npos) << msg;
  msg = error_of([&] { Seq2SeqConfig::from_json(text, "checkpoint.safetensors"); });
  EXPECT_NE(msg.find("checkpoint.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing key 'nhead'"), std::string::npos) << msg;
  std::filesystem::remove_all(dir);
}

TEST(Seq2SeqConfig, InvalidValuesAreNamed) {
  std::string msg =
      error_of([] { Seq2SeqConfig::from_json(R"({"model_type": "gpt2"})", "c.json"); });
  EXPECT_NE(msg.find("c.json: model_type must be \"qkv-seq2seq\", got \"gpt2\""), std::string::npos)
      << msg;
  std::string text = unusual().to_json();
  text.replace(text.find("\"gelu_tanh\""), 11, "\"tanh\"");
  msg = error_of([&] { Seq2SeqConfig::from_json(text, "c.json"); });
  EXPECT_NE(msg.find("c.json: activation must be \"relu\", \"gelu\" or \"gelu_tanh\", got \"tanh\""),
            std::string::npos)
      << msg;
}

TEST(Seq2Seq, LossMatchesFiniteDifferences) {
  models::Seq2SeqConfig c;
  c.vocab_size = 9;
  c.d_model = 8;
  c.nhead = 2;
  c.dim_feedforward = 8;
  c.num_encoder_layers = 1;
  c.num_decoder_layers = 1;
  c.max_len = 8;
  c.activation = nn::Activation::gelu;  // smooth: a ReLU kink would break the difference quotient
  models::Seq2Seq model(c, 3), grads(c, 3);
  train::zero_grad(grads.parameters());
  models::Seq2SeqBatch b;
  b.batch = 2;
  b.src_len = 4;
  b.tgt_len = 3;
  b.src = {4, 5, 6, 7, 8, 4, 0, 0};
  b.src_lengths = {4, 2};
  b.tgt_in = {1, 5, 6, 1, 7, 8};
  b.tgt_out = {5, 6, 2, 7, 8, -100};
  model.forward_backward(b, grads, 0.1);
  auto loss = [&] {
    Tensor logits = model.forward(b).view({b.batch * b.tgt_len, c.vocab_size});
    return train::cross_entropy(logits, b.tgt_out, nullptr, 0.1).loss;
  };
  auto p = model.parameters(), g = grads.parameters();
  for (std::size_t i = 0; i < p.size(); ++i) check_gradient(*p[i].second, *g[i].second, loss, p[i].first);
}

}  // namespace

namespace {

using qkv::testing::TempDir;

Seq2SeqConfig tiny() {
  Seq2SeqConfig c;
  c.vocab_size = 7;
  c.d_model = 8;
  c.nhead = 2;
  c.dim_feedforward = 12;
  c.num_encoder_layers = 2;
  c.num_decoder_layers = 1;
  c.max_len = 6;
  return c;
}

using Named = std::vector<std::pair<std::string, Tensor>>;

Named tensors_of(models::Seq2Seq& m) {
  Named out;
  for (auto& [name, t] : m.parameters()) out.emplace_back(name, t->clone());
  return out;
}

models::Seq2Seq load_from(const Named& tensors, const Seq2SeqConfig& c,
                          std::vector<std::string>* unused = nullptr) {
  const auto bytes = qkv::serialize_safetensors(tensors);
  return models::Seq2Seq::load(qkv::SafeTensors::parse(bytes), c, unused, "ckpt");
}

}  // namespace

// num_parameters() counts without building; it must agree with the built model.
TEST(Seq2SeqConfig, NumParametersMatchesTheModel) {
  for (const Seq2SeqConfig& c : {unusual(), tiny()}) {
    models::Seq2Seq m(c);
    EXPECT_EQ(c.num_parameters(), m.num_parameters());
  }
}

TEST(Seq2SeqConfig, ImpossibleConfigsAreErrors) {
  const auto with = [](const std::string& key, const std::string& value) {
    std::string text = tiny().to_json();
    const std::size_t at = text.find("\"" + key + "\": ");
    const std::size_t begin = at + key.size() + 4, end = text.find_first_of(",\n}", begin);
    text.replace(begin, end - begin, value);
    return error_of([&] { Seq2SeqConfig::from_json(text, "c.json"); });
  };
  std::string msg = with("num_encoder_layers", "0");
  EXPECT_NE(msg.find("c.json: Seq2Seq: num_encoder_layers must be an integer in [1, 2147483647], "
                     "got 0"),
            std::string::npos) << msg;
  msg = with("max_len", "1099511627776");
  EXPECT_NE(msg.find("max_len must be an integer in [1, 2147483647], got 1099511627776"),
            std::string::npos) << msg;
  msg = with("d_model", "-8");
  EXPECT_NE(msg.find("d_model must be an integer in [1, 2147483647], got -8"), std::string::npos)
      << msg;
  msg = with("nhead", "3");
  EXPECT_NE(msg.find("d_model (8) must be a multiple of nhead (3)"), std::string::npos) << msg;
  msg = with("layer_norm_eps", "1e39");
  EXPECT_NE(msg.find("layer_norm_eps must be >= 0 and finite as a float32"), std::string::npos)
      << msg;
  msg = with("d_model", "2000000");  // 4·E² per attention: 1.6e13 per layer
  EXPECT_NE(msg.find("more than qkv's limit of 2^40"), std::string::npos) << msg;
}

// A config that describes more parameters than the weights hold is refused before the
// model is built (1.2 TB of parameters here), not answered with an allocation failure.
TEST(Seq2Seq, LoadRefusesAConfigLargerThanTheWeights) {
  models::Seq2Seq m(tiny());
  Seq2SeqConfig huge = tiny();
  huge.vocab_size = 100'000'000;
  huge.d_model = 1000;
  huge.nhead = 1;
  const std::string msg = error_of([&] { load_from(tensors_of(m), huge); });
  EXPECT_NE(msg.find("ckpt: config.json describes a model of 300"), std::string::npos) << msg;
  EXPECT_NE(msg.find("do not belong together"), std::string::npos) << msg;
}

TEST(Seq2Seq, LoadChecksFinitenessAndReportsUnusedTensors) {
  models::Seq2Seq m(tiny());
  Named t = tensors_of(m);
  for (auto& [name, w] : t)
    if (name == "transformer.decoder.layers.0.linear2.weight") w.data_as<float>()[13] = NAN;
  std::string msg = error_of([&] { load_from(t, tiny()); });
  EXPECT_NE(msg.find("ckpt: tensor 'transformer.decoder.layers.0.linear2.weight' holds NaN at "
                     "index [1, 1]"),
            std::string::npos) << msg;

  t = tensors_of(m);
  t.emplace_back("optimizer.step", Tensor::zeros({1}));
  std::vector<std::string> unused;
  (void)load_from(t, tiny(), &unused);
  EXPECT_EQ(unused, std::vector<std::string>{"optimizer.step"});

  t = tensors_of(m);
  t.emplace_back("transformer.encoder.layers.2.norm1.bias", Tensor::zeros({8}));
  msg = error_of([&] { load_from(t, tiny()); });
  EXPECT_NE(msg.find("of block 2, but config.json's num_encoder_layers = 2"), std::string::npos)
      << msg;
}

// A directory without model.safetensors says what it holds and how to convert.
TEST(Seq2Seq, LoadDirectoryWithOtherFormats) {
  TempDir dir("formats");
  std::ofstream(dir.path / "config.json") << tiny().to_json();
  std::ofstream(dir.path / "model.gguf") << "GGUF";
  const std::string msg = error_of([&] { models::Seq2Seq::load(dir.path.string()); });
  EXPECT_NE(msg.find("no model.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("GGUF weights (model.gguf"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { models::Seq2Seq::load((dir.path / "nowhere").string()); })
                .find("does not exist"),
            std::string::npos);
}
