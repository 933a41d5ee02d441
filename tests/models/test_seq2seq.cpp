// qkv::models::Seq2Seq: config.json written by to_json reads back through from_json and
// from_file, and a bad one is named with its source and key; the loss gradient against
// finite differences (and against torch autograd in tests/python/test_train.py).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

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
