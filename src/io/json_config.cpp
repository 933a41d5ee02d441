// JsonConfig (io/json_config.h): typed access to a JSON object (a Hugging Face config.json).
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "io/json_bounded.h"
#include "io/json_config.h"
#include "io/read_file.h"
#include "qkv/error.h"
#include "qkv/files.h"

namespace qkv {

struct JsonConfig::Data {
  nlohmann::json value;  // an object
};

namespace {

using json = nlohmann::json;

// A config.json is a few kilobytes (one with a large id2label map, tens); 16 MiB leaves
// room for any real one and keeps a wrong path (a checkpoint, /dev/zero) from being read.
constexpr std::uint64_t kMaxConfigBytes = std::uint64_t{16} << 20;

// The value's type and a bounded prefix of it (io::json_brief: never the whole value).
std::string brief(const json& value) { return std::string(value.type_name()) + " " + io::json_brief(value); }

// The value of `key`, or nullptr when it is absent or null.
const json* find(const json& object, const std::string& key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

}  // namespace

JsonConfig JsonConfig::parse(const std::string& text, std::string label) {
  JsonConfig config;
  auto data = std::make_shared<Data>();
  try {
    data->value = io::parse_json(text, "config '" + label + "'", true, kMaxConfigBytes);
  } catch (const json::exception& e) {
    throw Error("config '" + label + "': not valid JSON: " + e.what());
  }
  QKV_CHECK(data->value.is_object(),
            "config '" << label << "': expected a JSON object, got " << brief(data->value));
  config.data_ = std::move(data);
  config.label_ = std::move(label);
  return config;
}

JsonConfig JsonConfig::load(const std::string& path) {
  const std::string text = io::read_file(path, "config", kMaxConfigBytes);
  QKV_CHECK(!text.empty(), "config '" << path << "': the file is empty (expected a JSON object)");
  JsonConfig config = parse(text, path);
  // A model directory's config.json written by qkv records its files (qkv/files.h): a
  // directory whose files are not the ones written with it is refused here, for every model.
  if (std::filesystem::path(path).filename() == "config.json" && config.has("files"))
    check_model_files(path);
  return config;
}

bool JsonConfig::has(const std::string& key) const { return find(data_->value, key) != nullptr; }

std::vector<std::string> JsonConfig::keys() const {
  std::vector<std::string> out;
  for (const auto& [key, value] : data_->value.items()) out.push_back(key);
  return out;  // nlohmann's object is a std::map: already sorted
}

#define QKV_CONFIG_REQUIRE(value, key, kind)                                         \
  QKV_CHECK((value) != nullptr,                                                      \
            "config '" << label_ << "': missing key '" << (key) << "' (" << (kind) << ")")

std::vector<std::int64_t> JsonConfig::get_int_list(const std::string& key) const {
  const json* v = find(data_->value, key);
  QKV_CONFIG_REQUIRE(v, key, "a list of integers");
  QKV_CHECK(v->is_array(), "config '" << label_ << "': key '" << key
                                      << "' must be a list of integers, got " << brief(*v));
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < v->size(); ++i) {
    const json& e = (*v)[i];
    QKV_CHECK(e.is_number_integer() &&
                  (!e.is_number_unsigned() ||
                   e.get<std::uint64_t>() <=
                       static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())),
              "config '" << label_ << "': key '" << key << "'[" << i
                         << "] must be a 64-bit integer, got " << brief(e));
    out.push_back(e.get<std::int64_t>());
  }
  return out;
}

std::int64_t JsonConfig::get_int(const std::string& key) const {
  const json* v = find(data_->value, key);
  QKV_CONFIG_REQUIRE(v, key, "an integer");
  QKV_CHECK(v->is_number_integer(), "config '" << label_ << "': key '" << key
                                               << "' must be an integer, got " << brief(*v));
  if (v->is_number_unsigned())
    QKV_CHECK(v->get<std::uint64_t>() <=
                  static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
              "config '" << label_ << "': key '" << key << "' = " << v->get<std::uint64_t>()
                         << " does not fit a 64-bit signed integer");
  return v->get<std::int64_t>();
}

std::int64_t JsonConfig::get_int(const std::string& key, std::int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}

double JsonConfig::get_double(const std::string& key) const {
  const json* v = find(data_->value, key);
  QKV_CONFIG_REQUIRE(v, key, "a number");
  QKV_CHECK(v->is_number(), "config '" << label_ << "': key '" << key
                                       << "' must be a number, got " << brief(*v));
  return v->get<double>();
}

double JsonConfig::get_double(const std::string& key, double fallback) const {
  return has(key) ? get_double(key) : fallback;
}

std::string JsonConfig::get_string(const std::string& key) const {
  const json* v = find(data_->value, key);
  QKV_CONFIG_REQUIRE(v, key, "a string");
  QKV_CHECK(v->is_string(), "config '" << label_ << "': key '" << key
                                       << "' must be a string, got " << brief(*v));
  return v->get<std::string>();
}

std::string JsonConfig::get_string(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}

bool JsonConfig::get_bool(const std::string& key) const {
  const json* v = find(data_->value, key);
  QKV_CONFIG_REQUIRE(v, key, "a boolean");
  QKV_CHECK(v->is_boolean(), "config '" << label_ << "': key '" << key
                                        << "' must be a boolean, got " << brief(*v));
  return v->get<bool>();
}

bool JsonConfig::get_bool(const std::string& key, bool fallback) const {
  return has(key) ? get_bool(key) : fallback;
}

JsonConfig JsonConfig::get_object(const std::string& key) const {
  const json* v = find(data_->value, key);
  QKV_CONFIG_REQUIRE(v, key, "an object");
  QKV_CHECK(v->is_object(), "config '" << label_ << "': key '" << key
                                       << "' must be an object, got " << brief(*v));
  JsonConfig child;
  child.data_ = std::make_shared<Data>(Data{*v});
  child.label_ = label_ + ": " + key;
  return child;
}

#undef QKV_CONFIG_REQUIRE

}  // namespace qkv
