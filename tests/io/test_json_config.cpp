// JsonConfig (src/io/json_config.h, internal): typed access to config.json and its error
// messages.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "io/json_config.h"
#include "attention/expect_error.h"
#include "qkv/error.h"

namespace {

using qkv::JsonConfig;

using qkv::testing::expect_error_mentioning;

const char* kBert = R"({
  "architectures": ["BertModel"],
  "hidden_size": 768,
  "num_attention_heads": 12,
  "layer_norm_eps": 1e-12,
  "hidden_act": "gelu",
  "tie_word_embeddings": true,
  "pad_token_id": 0,
  "torch_dtype": null,
  "vocab_size": -1,
  "huge": 18446744073709551615,
  "three": 3.0,
  "text_config": {"d_model": 512, "name": 7}
})";

TEST(JsonConfig, TypedAccess) {
  const JsonConfig c = JsonConfig::parse(kBert, "config.json");
  EXPECT_EQ(c.get_int("hidden_size"), 768);
  EXPECT_EQ(c.get_int("vocab_size"), -1);
  EXPECT_EQ(c.get_int("missing", 5), 5);
  EXPECT_EQ(c.get_int("pad_token_id", 5), 0);
  EXPECT_DOUBLE_EQ(c.get_double("layer_norm_eps"), 1e-12);
  EXPECT_DOUBLE_EQ(c.get_double("hidden_size"), 768.0);  // any number is a double
  EXPECT_DOUBLE_EQ(c.get_double("nope", 0.5), 0.5);
  EXPECT_EQ(c.get_string("hidden_act"), "gelu");
  EXPECT_EQ(c.get_string("nope", "relu"), "relu");
  EXPECT_TRUE(c.get_bool("tie_word_embeddings"));
  EXPECT_FALSE(c.get_bool("nope", false));
  EXPECT_TRUE(c.has("hidden_size"));
  EXPECT_FALSE(c.has("nope"));
  // null counts as absent.
  EXPECT_FALSE(c.has("torch_dtype"));
  EXPECT_EQ(c.get_string("torch_dtype", "float32"), "float32");
  const JsonConfig text = c.get_object("text_config");
  EXPECT_EQ(text.get_int("d_model"), 512);
  const std::vector<std::string> keys = c.keys();
  EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));
  EXPECT_EQ(keys.size(), 12u);
}

TEST(JsonConfig, Errors) {
  const JsonConfig c = JsonConfig::parse(kBert, "config.json");
  expect_error_mentioning([&] { c.get_int("num_layers"); }, {"config.json", "missing key 'num_layers'", "an integer"});
  expect_error_mentioning([&] { c.get_int("torch_dtype"); }, {"config.json", "missing key 'torch_dtype'"});
  expect_error_mentioning([&] { c.get_int("hidden_act"); }, {"config.json", "'hidden_act'", "must be an integer", "string \"gelu\""});
  expect_error_mentioning([&] { c.get_int("three"); }, {"'three'", "must be an integer", "number 3.0"});
  expect_error_mentioning([&] { c.get_int("layer_norm_eps", 1); }, {"'layer_norm_eps'", "must be an integer"});
  expect_error_mentioning([&] { c.get_int("huge"); }, {"'huge'", "18446744073709551615", "does not fit"});
  expect_error_mentioning([&] { c.get_double("hidden_act"); }, {"'hidden_act'", "must be a number"});
  expect_error_mentioning([&] { c.get_double("missing"); }, {"missing key 'missing'", "a number"});
  expect_error_mentioning([&] { c.get_string("hidden_size"); }, {"'hidden_size'", "must be a string", "number 768"});
  expect_error_mentioning([&] { c.get_string("architectures", "x"); }, {"'architectures'", "must be a string", "array"});
  expect_error_mentioning([&] { c.get_bool("pad_token_id"); }, {"'pad_token_id'", "must be a boolean", "number 0"});
  expect_error_mentioning([&] { c.get_bool("missing"); }, {"missing key 'missing'", "a boolean"});
  expect_error_mentioning([&] { c.get_object("hidden_size"); }, {"'hidden_size'", "must be an object"});
  expect_error_mentioning([&] { c.get_object("text_config").get_string("name"); },
               {"config.json: text_config", "'name'", "must be a string"});
}

TEST(JsonConfig, ParseAndLoadErrors) {
  expect_error_mentioning([] { JsonConfig::parse("{\"a\": ", "c.json"); }, {"c.json", "not valid JSON"});
  expect_error_mentioning([] { JsonConfig::parse("", "c.json"); }, {"c.json", "not valid JSON"});
  expect_error_mentioning([] { JsonConfig::parse("[1, 2]", "c.json"); }, {"c.json", "expected a JSON object", "array"});
  expect_error_mentioning([] { JsonConfig::parse("null", "c.json"); }, {"c.json", "expected a JSON object"});

  const auto dir = std::filesystem::temp_directory_path() /
                   ("qkv_io_JsonConfig_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "config.json").string();
  std::ofstream(path) << "{\"hidden_size\": 64}";
  EXPECT_EQ(JsonConfig::load(path).get_int("hidden_size"), 64);
  expect_error_mentioning([&] { JsonConfig::load(path).get_int("heads"); }, {path, "missing key 'heads'"});
  expect_error_mentioning([&] { JsonConfig::load((dir / "absent.json").string()); }, {"absent.json", "cannot open"});
  std::filesystem::remove_all(dir);
}

// config.json is read bounded (io::read_file): directories, devices, empty and oversized
// files are errors naming the path, before anything is read.
TEST(JsonConfig, LoadRefusesWhatIsNotAConfigFile) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("qkv_io_JsonConfig_files_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "a_directory");
  expect_error_mentioning([&] { JsonConfig::load((dir / "a_directory").string()); },
               {"a_directory", "not a regular file (a directory)"});
  expect_error_mentioning([] { JsonConfig::load("/dev/zero"); },
               {"/dev/zero", "not a regular file (a character device)"});
  const std::string empty = (dir / "empty.json").string();
  std::ofstream(empty).close();
  expect_error_mentioning([&] { JsonConfig::load(empty); }, {"empty.json", "the file is empty"});
  // A sparse file of 16 MiB + 1 byte: over the limit, and no disk space taken.
  const std::string big = (dir / "big.json").string();
  std::ofstream(big).close();
  std::filesystem::resize_file(big, (std::uint64_t{16} << 20) + 1);
  expect_error_mentioning([&] { JsonConfig::load(big); },
               {"big.json", "16.0 MiB (16777217 bytes), over the limit of 16.0 MiB"});
  std::filesystem::remove_all(dir);
}

}  // namespace
