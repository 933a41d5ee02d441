// Bounded JSON parsing and quoting (io/json_bounded.h).
#include "io/json_bounded.h"

#include "qkv/error.h"

namespace qkv::io {

void check_json_bounds(std::string_view text, const std::string& where, std::uint64_t max_bytes) {
  QKV_CHECK(text.size() <= max_bytes, where << ": JSON text of " << text.size()
                                            << " bytes is over the limit of " << max_bytes << " bytes");
  std::size_t depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      QKV_CHECK(++depth <= kMaxJsonDepth,
                where << ": JSON nested more than " << kMaxJsonDepth << " levels deep (the "
                      << (c == '[' ? "array" : "object") << " at byte " << i << " opens level " << depth
                      << "); refused before parsing");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;  // unmatched closers are the parser's syntax error to report
    }
  }
}

namespace {

using json = nlohmann::json;

// Appends at most about `limit` characters of `value` to `out`; `levels` arrays and objects
// are opened, deeper ones written as "[...]" / "{...}". Recursion: `levels` deep at most.
void brief_into(const json& value, std::string& out, std::size_t limit, int levels) {
  const auto quote = [&](const std::string& s) {
    // Cut before serializing: a 16 MiB string is never copied whole. A cut inside a
    // UTF-8 sequence is replaced (U+FFFD), not an error.
    out += json(s.size() > limit ? s.substr(0, limit) : s).dump(-1, ' ', false, json::error_handler_t::replace);
  };
  if (value.is_string()) return quote(value.get_ref<const std::string&>());
  if (!value.is_structured()) {
    out += value.dump(-1, ' ', false, json::error_handler_t::replace);  // a number, bool or null
    return;
  }
  const bool object = value.is_object();
  if (value.empty()) {
    out += object ? "{}" : "[]";
    return;
  }
  if (levels == 0) {
    out += object ? "{...}" : "[...]";
    return;
  }
  out += object ? '{' : '[';
  bool first = true;
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (out.size() > limit) return;  // the caller cuts and adds "..."
    if (!first) out += ',';
    first = false;
    if (object) {
      quote(it.key());
      out += ':';
    }
    brief_into(it.value(), out, limit, levels - 1);
  }
  out += object ? '}' : ']';
}

}  // namespace

std::string json_brief(const json& value, std::size_t max_chars) {
  if (max_chars < 4) max_chars = 4;
  std::string out;
  brief_into(value, out, max_chars, 2);
  if (out.size() > max_chars) out = out.substr(0, max_chars - 3) + "...";
  return out;
}

}  // namespace qkv::io
