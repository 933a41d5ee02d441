// Bounded JSON parsing (issue 48): every JSON text qkv reads (config.json files, safetensors
// headers and index files, search indexes, tokenizer.json / vocab.json, the vision and
// recommender configs) is parsed by parse_json, never by nlohmann::json::parse directly.
//
// Before nlohmann parses anything, check_json_bounds scans the bytes once (O(n), no
// recursion, strings and their escapes skipped) and refuses a text longer than
// `max_bytes` or nested deeper than kMaxJsonDepth arrays and objects. nlohmann's parser
// itself keeps its own stack, but the values it builds are destroyed, compared and
// serialized (dump(), as error messages once quoted them) by recursion: a config.json of
// '[' * 100000 crashed every loader with a stack overflow. Brackets inside strings count
// for nothing ("[[[[" is a string of four characters).
//
// json_brief quotes a value for an error message: at most `max_chars` characters (a prefix,
// "..." when cut), two levels of arrays and objects (deeper ones as "[...]" / "{...}"),
// strings cut before they are serialized; it never walks a whole large or deep value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace qkv::io {

// No real config, header or tokenizer nests more than 5 levels; 64 leaves room for any
// and keeps every recursion over a parsed value shallow.
inline constexpr std::size_t kMaxJsonDepth = 64;
// The largest JSON text any reader takes (a safetensors header may be 100 MB; a config
// 16 MiB and a tokenizer file 64 MiB, which their readers limit first).
inline constexpr std::uint64_t kMaxJsonBytes = 100'000'000;

// Throws qkv::Error "<where>: ..." when `text` is over `max_bytes` or nests arrays and
// objects deeper than kMaxJsonDepth (naming the byte where the level over the limit opens).
// Says nothing about whether the text is valid JSON.
void check_json_bounds(std::string_view text, const std::string& where,
                       std::uint64_t max_bytes = kMaxJsonBytes);

// check_json_bounds, then Json::parse. A syntax error is nlohmann's json::parse_error
// (callers add their file's name to it), or a discarded value when allow_exceptions is
// false; the bounds are a qkv::Error either way. Json: nlohmann::json or ordered_json.
template <class Json = nlohmann::json>
Json parse_json(std::string_view text, const std::string& where, bool allow_exceptions = true,
                std::uint64_t max_bytes = kMaxJsonBytes) {
  check_json_bounds(text, where, max_bytes);
  return Json::parse(text.begin(), text.end(), nullptr, allow_exceptions);
}

// The value as JSON text for a message, at most max_chars characters (see above).
std::string json_brief(const nlohmann::json& value, std::size_t max_chars = 60);

}  // namespace qkv::io
