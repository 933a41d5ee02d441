// Validation, text and colour helpers shared by the HTML and SVG renderers; write_file.
#include "common.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "qkv/error.h"
#include "qkv/files.h"
#include "qkv/version.h"

namespace qkv::viz {
namespace detail {

std::string group_label(const AttentionGroup& group, std::size_t index) {
  return "group " + std::to_string(index) + " ('" + repair_utf8(group.name) + "')";
}

CheckedGroup check_group(const AttentionGroup& group, const std::string& where) {
  CheckedGroup c;
  c.queries = static_cast<std::int64_t>(group.query_tokens.size());
  c.keys = static_cast<std::int64_t>(group.key_tokens.size());
  QKV_CHECK(!group.layers.empty(), where << ": has no layers");
  QKV_CHECK(c.queries >= 1, where << ": query_tokens is empty (at least one token needed)");
  QKV_CHECK(c.keys >= 1, where << ": key_tokens is empty (at least one token needed)");
  c.probs.reserve(group.layers.size());
  for (std::size_t n = 0; n < group.layers.size(); ++n) {
    const Tensor& t = group.layers[n];
    QKV_CHECK(t.defined(), where << " layer " << n << ": the tensor is undefined");
    QKV_CHECK(t.dim() == 3, where << " layer " << n << ": expected a 3-D (H, Lq, Lk) tensor, got "
                                  << t.shape_string());
    if (n == 0) {
      c.heads = t.size(0);
      QKV_CHECK(c.heads >= 1, where << " layer 0: has no heads (H = 0)");
    }
    QKV_CHECK(t.size(0) == c.heads, where << " layer " << n << ": has " << t.size(0)
                                          << " heads, layer 0 has " << c.heads
                                          << " (H must be equal across layers)");
    QKV_CHECK(t.size(1) == c.queries,
              where << " layer " << n << ": size(1) (Lq) must equal the " << c.queries
                    << " query tokens, got shape " << t.shape_string());
    QKV_CHECK(t.size(2) == c.keys, where << " layer " << n << ": size(2) (Lk) must equal the "
                                         << c.keys << " key tokens, got shape "
                                         << t.shape_string());
    std::vector<float> v = t.to_vector();  // (H, Lq, Lk) row-major, as f32
    for (std::size_t k = 0; k < v.size(); ++k) {
      // Probabilities: a softmax output never exceeds 1 by more than its rounding.
      if (std::isfinite(v[k]) && v[k] >= 0.0f && v[k] <= 1.0f + 1e-5f) continue;
      const auto e = static_cast<std::int64_t>(k);
      QKV_CHECK(false, where << " layer " << n << ": probability [head " << e / (c.queries * c.keys)
                             << ", query " << (e / c.keys) % c.queries << ", key " << e % c.keys
                             << "] is " << v[k] << "; expected a finite value in [0, 1]");
    }
    c.probs.push_back(std::move(v));
  }
  return c;
}

namespace {

// The length of the valid UTF-8 sequence starting at s[i] (RFC 3629: no overlongs, no
// surrogates, at most U+10FFFF; U+FFFE and U+FFFF also refused, as XML forbids them), or 0.
std::size_t valid_sequence(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c == 0xE0) n = 3, lo = 0xA0;
  else if (c >= 0xE1 && c <= 0xEC) n = 3;
  else if (c == 0xED) n = 3, hi = 0x9F;
  else if (c >= 0xEE && c <= 0xEF) n = 3;
  else if (c == 0xF0) n = 4, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) n = 4;
  else if (c == 0xF4) n = 4, hi = 0x8F;
  else return 0;
  if (i + n > s.size()) return 0;
  if (b(1) < lo || b(1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (b(k) < 0x80 || b(k) > 0xBF) return 0;
  if (c == 0xEF && b(1) == 0xBF && (b(2) == 0xBE || b(2) == 0xBF)) return 0;  // U+FFFE/F
  return n;
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

std::string repair_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = valid_sequence(text, i);
    if (n == 0) {
      out += kReplacement;
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string display_text(std::string_view text) {
  const std::string valid = repair_utf8(text);
  std::string out;
  out.reserve(valid.size());
  for (const char ch : valid) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7F) {
      const unsigned cp = c == 0x7F ? 0x2421u : 0x2400u + c;  // three UTF-8 bytes: E2 90 xx
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += ch;
    }
  }
  return out;
}

std::size_t count_points(std::string_view text) {
  return static_cast<std::size_t>(std::count_if(text.begin(), text.end(), [](char ch) {
    return (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
  }));
}

std::string truncate_points(std::string_view text, std::size_t max_points) {
  if (count_points(text) <= max_points || max_points == 0) return std::string(text);
  std::size_t points = 0, i = 0;
  for (; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80 && points++ == max_points - 1) break;
  }
  return std::string(text.substr(0, i)) + "\xE2\x80\xA6";  // U+2026 …
}

std::string markup_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string json_string(std::string_view text) {
  const std::string dumped = nlohmann::json(repair_utf8(text)).dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(dumped.size());
  for (const char c : dumped) {
    // "</script" or "<!--" inside a script element would end or confuse it (HTML
    // "script data" state); JSON allows any character as \uXXXX.
    if (c == '<') out += "\\u003c";
    else if (c == '>') out += "\\u003e";
    else if (c == '&') out += "\\u0026";
    else out += c;
  }
  return out;
}

void append_number(std::string& out, float value) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, static_cast<double>(value),
                               std::chars_format::general, 6);
  out.append(buf, r.ptr);
}

std::array<int, 3> ramp(double t) {
  // ColorBrewer "Blues" (Brewer 2003): light for 0, dark for the top of the scale.
  static constexpr int kStops[5][3] = {
      {247, 251, 255}, {198, 219, 239}, {107, 174, 214}, {33, 113, 181}, {8, 48, 107}};
  if (!(t > 0)) t = 0;
  if (t > 1) t = 1;
  const double x = t * 4;
  const int k = std::min(3, static_cast<int>(x));
  const double f = x - k;
  std::array<int, 3> rgb{};
  for (int c = 0; c < 3; ++c)
    rgb[static_cast<std::size_t>(c)] =
        static_cast<int>(std::lround(kStops[k][c] + f * (kStops[k + 1][c] - kStops[k][c])));
  return rgb;
}

std::string hex_colour(const std::array<int, 3>& rgb) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
  return buf;
}

std::string self_contained_page(std::string_view title, std::string_view title_suffix, std::string_view subtitle,
                                std::string_view style, std::string_view body, std::string_view data_id,
                                const std::string& data, std::string_view script) {
  const std::string shown = markup_escape(display_text(title));
  std::string page;
  page.reserve(data.size() + style.size() + body.size() + script.size() + 1024);
  page += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
          "<meta name=\"generator\" content=\"qkv ";
  page += kVersion;
  page += "\">\n<title>" + shown + " \xE2\x80\x94 ";
  page += title_suffix;
  page += "</title>\n<style>";
  page += style;
  page += "</style>\n</head>\n<body>\n<header><h1>" + shown + "</h1>";
  if (!subtitle.empty()) page += "<p class=\"sub\">" + markup_escape(display_text(subtitle)) + "</p>";
  page += "</header>\n";
  page += body;
  page += "\n<footer>Drawn by qkv; this page is self-contained and makes no network requests.</footer>\n"
          "<script type=\"application/json\" id=\"";
  page += data_id;
  page += "\">";
  page += data;
  page += "</script>\n<script>";
  page += script;
  page += "</script>\n</body>\n</html>\n";
  return page;
}

}  // namespace detail

void write_file(const std::string& path, const std::string& text) { qkv::write_file(path, text); }

std::string page_title(const std::string& kind, const std::string& directory) {
  if (directory.empty()) return kind;
  // "models/x/", "." and "a/.." name a directory too: their base name is the last
  // component of the absolute, normalised path.
  std::filesystem::path p = std::filesystem::absolute(directory).lexically_normal();
  if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();  // "x/" -> "x"
  std::string base = p.filename().string();
  if (base.empty()) base = p.string();  // the root directory
  return kind + " \xC2\xB7 " + base;  // U+00B7 middle dot
}

}  // namespace qkv::viz
