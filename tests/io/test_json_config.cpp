// JsonConfig (src/io/json_config.h, internal): typed access to config.json and its error
// messages.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "io/json_bounded.h"
#include "io/json_config.h"
#include "attention/expect_error.h"
#include "qkv/error.h"

namespace {

using qkv::JsonConfig;

using qkv::testing::expect_error_mentioning;

// n levels of `open` around `inner`, closed by `close` (e.g. "{\"a\":", "}").
std::string nested(std::size_t n, const std::string& open, const std::string& close, const std::string& inner = "1") {
  std::string s;
  s.reserve(n * (open.size() + close.size()) + inner.size());
  for (std::size_t i = 0; i < n; ++i) s += open;
  s += inner;
  for (std::size_t i = 0; i < n; ++i) s += close;
  return s;
}

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

// Issue 48 row 1: '[' * 100000 crashed every reader (the value's dump() for the message
// recursed). Nesting is refused before parsing, at 65 levels, whatever the shape.
TEST(JsonBounded, NestingDeeperThan64IsRefusedBeforeParsing) {
  using qkv::io::parse_json;
  EXPECT_EQ(parse_json(nested(64, "[", "]"), "t").dump().size(), 129u);  // 64 levels: read
  EXPECT_TRUE(parse_json(nested(64, "{\"a\":", "}"), "t").is_object());
  expect_error_mentioning([] { parse_json(nested(65, "[", "]"), "deep.json"); },
                          {"deep.json: JSON nested more than 64 levels deep", "the array at byte 64 opens level 65",
                           "refused before parsing"});
  expect_error_mentioning([] { parse_json(nested(100000, "[", "]"), "deep.json"); },
                          {"deep.json", "more than 64 levels"});
  expect_error_mentioning([] { parse_json(nested(100000, "{\"a\":", "}"), "o.json"); },
                          {"o.json", "more than 64 levels", "the object at byte 320 opens level 65"});
  // Mixed shapes, and unbalanced text (no closers at all): still the depth, not a crash.
  expect_error_mentioning([] { parse_json(nested(50000, "[{\"k\":", "}]"), "m.json"); },
                          {"m.json", "more than 64 levels"});
  expect_error_mentioning([] { parse_json(std::string(100000, '['), "open.json"); },
                          {"open.json", "more than 64 levels"});
  // Brackets inside strings are characters, escaped quotes included.
  const std::string in_string = "[\"" + std::string(100000, '[') + "\\\"" + std::string(1000, '{') + "\"]";
  const nlohmann::json v = parse_json(in_string, "s.json");
  ASSERT_TRUE(v.is_array());
  EXPECT_EQ(v[0].get<std::string>().size(), 101001u);
  // Closers past the opened ones are the parser's syntax error, not a negative depth.
  EXPECT_THROW(parse_json("]]]]" + nested(10, "[", "]"), "c.json"), nlohmann::json::parse_error);
  EXPECT_TRUE(parse_json("]]]]" + nested(10, "[", "]"), "c.json", false).is_discarded());
  expect_error_mentioning([] { parse_json("]]]]" + nested(70, "[", "]"), "c.json", false); },
                          {"c.json", "more than 64 levels"});
  // The size limit.
  expect_error_mentioning([] { parse_json("[1, 2, 3]", "big.json", true, 8); },
                          {"big.json: JSON text of 9 bytes is over the limit of 8 bytes"});
}

TEST(JsonBounded, BriefQuotesABoundedPrefix) {
  using qkv::io::json_brief;
  EXPECT_EQ(json_brief(nlohmann::json::parse("[1, \"a\", {\"k\": null}]")), "[1,\"a\",{\"k\":null}]");
  EXPECT_EQ(json_brief(nlohmann::json::parse(nested(5, "[", "]"))), "[[[...]]]");
  nlohmann::json many = nlohmann::json::array();
  for (int i = 0; i < 1000000; ++i) many.push_back(i);
  const std::string b = json_brief(many);
  EXPECT_LE(b.size(), 60u);
  EXPECT_EQ(b.substr(0, 7), "[0,1,2,");
  EXPECT_EQ(b.substr(b.size() - 3), "...");
  EXPECT_EQ(json_brief(nlohmann::json(std::string(1 << 20, 'x'))).size(), 60u);
  EXPECT_LE(json_brief(many, 1000).size(), 1000u);
}

TEST(JsonConfig, DeepNestingIsAnErrorNotACrash) {
  expect_error_mentioning([] { JsonConfig::parse(nested(100000, "[", "]"), "config.json"); },
                          {"config 'config.json'", "more than 64 levels"});
  expect_error_mentioning([] { JsonConfig::parse("{\"n_embd\": " + nested(100000, "{\"a\":", "}") + "}", "c.json"); },
                          {"config 'c.json'", "more than 64 levels"});
  // A wrong type whose value is large and nested to the limit: the message quotes a prefix.
  std::string wide = "[0";
  for (int i = 1; i < 100000; ++i) wide += ",0";
  wide += "]";
  const JsonConfig c = JsonConfig::parse("{\"deep\": " + nested(60, "[", "]") + ", \"wide\": " + wide + "}", "c.json");
  for (const char* key : {"deep", "wide"}) {
    try {
      c.get_int(key);
      ADD_FAILURE() << "no error";
    } catch (const qkv::Error& e) {
      EXPECT_LT(std::string(e.what()).size(), 200u) << e.what();
      EXPECT_NE(std::string(e.what()).find("must be an integer, got array ["), std::string::npos) << e.what();
    }
  }
}

}  // namespace
