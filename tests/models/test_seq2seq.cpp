// qkv::models::Seq2SeqConfig: config.json written by to_json reads back through from_json
// and from_file, and a bad one is named with its source and key. (The model's gradients
// are tested in tests/nn/test_backward.cpp and against torch in tests/python/test_train.py.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "qkv/error.h"
#include "qkv/seq2seq.h"

namespace {

using qkv::models::Seq2SeqConfig;

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
  c.activation = qkv::nn::Activation::gelu;
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
  text.replace(text.find("\"gelu\""), 6, "\"tanh\"");
  msg = error_of([&] { Seq2SeqConfig::from_json(text, "c.json"); });
  EXPECT_NE(msg.find("c.json: activation must be \"relu\" or \"gelu\", got \"tanh\""),
            std::string::npos)
      << msg;
}

}  // namespace
