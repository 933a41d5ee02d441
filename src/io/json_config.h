// JsonConfig: a JSON object read from a file or text (a Hugging Face config.json), with
// typed access. Internal: the model configs' public from_json / from_file take JSON text
// or a path and read it with this (bert.cpp, gpt2.cpp, seq2seq.cpp).
//
// Errors name the file (or the label given to parse()), the key, the expected type and
// what was found. A key whose value is null counts as absent: has() is false and the
// getters with a default return the default. get_int accepts integers only (3.0 is not
// an int); get_double accepts any number.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace qkv {

class JsonConfig {
 public:
  // The file must be a regular file of at most 16 MiB holding a JSON object (io::read_file:
  // a directory, a device or an empty file is an error naming the path).
  static JsonConfig load(const std::string& path);
  static JsonConfig parse(const std::string& text, std::string label = "<memory>");

  const std::string& label() const { return label_; }  // the file, or the key path inside it
  bool has(const std::string& key) const;
  std::vector<std::string> keys() const;  // sorted, null values included

  std::int64_t get_int(const std::string& key) const;
  std::int64_t get_int(const std::string& key, std::int64_t fallback) const;
  // A list of integers (e.g. [256, 512]); each element checked as get_int checks one.
  std::vector<std::int64_t> get_int_list(const std::string& key) const;
  double get_double(const std::string& key) const;
  double get_double(const std::string& key, double fallback) const;
  std::string get_string(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  bool get_bool(const std::string& key) const;
  bool get_bool(const std::string& key, bool fallback) const;
  // A nested object (e.g. "text_config"); its errors name "file: key".
  JsonConfig get_object(const std::string& key) const;

 private:
  JsonConfig() = default;  // made only by load(), parse() and get_object()
  struct Data;  // holds the parsed JSON (nlohmann::json, kept out of this header)
  std::shared_ptr<const Data> data_;
  std::string label_;
};

}  // namespace qkv
