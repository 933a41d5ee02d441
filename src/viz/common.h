// Shared by the viz renderers: validation, text cleaning and escaping, the colour ramp.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "qkv/viz.h"

namespace qkv::viz::detail {

// A validated group: sizes, and every layer's probabilities read out as f32.
struct CheckedGroup {
  std::int64_t heads = 0;                // H
  std::int64_t queries = 0;              // Lq
  std::int64_t keys = 0;                 // Lk
  std::vector<std::vector<float>> probs;  // per layer: (H, Lq, Lk) row-major
  float at(std::size_t layer, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return probs[layer][static_cast<std::size_t>((h * queries + i) * keys + j)];
  }
};

// Throws qkv::Error naming `where` (e.g. "render_html: group 1 ('cross-attention')").
CheckedGroup check_group(const AttentionGroup& group, const std::string& where);
std::string group_label(const AttentionGroup& group, std::size_t index);

// Invalid UTF-8 bytes (and overlong forms, surrogates, U+FFFE/U+FFFF) become U+FFFD.
std::string repair_utf8(std::string_view text);
// repair_utf8, then C0 controls and DEL shown as control pictures (U+2400 + c, U+2421).
std::string display_text(std::string_view text);
// At most `max_points` code points of valid UTF-8, the last one "…" when cut.
std::string truncate_points(std::string_view text, std::size_t max_points);
std::size_t count_points(std::string_view text);
// & < > " ' as entities: safe in element content and in quoted attributes (HTML and XML).
std::string markup_escape(std::string_view text);
// A JSON string literal (repaired UTF-8) with < > & as \u003c \u003e \u0026, safe inside
// a <script> element.
std::string json_string(std::string_view text);
// Shortest decimal with 6 significant digits ("0.125", "1.23457e-05", "0").
void append_number(std::string& out, float value);

// A self-contained HTML page, the shell of render_html's and render_image_html's: <head>
// (title "TITLE — title_suffix", `style`), a header with the title and subtitle (both
// escaped here), `body` (markup), the footer, `data` in
// <script type="application/json" id="data_id"> and `script`.
std::string self_contained_page(std::string_view title, std::string_view title_suffix, std::string_view subtitle,
                                std::string_view style, std::string_view body, std::string_view data_id,
                                const std::string& data, std::string_view script);

// The sequential ramp used everywhere (ColorBrewer "Blues", 5 stops), t in [0, 1].
std::array<int, 3> ramp(double t);
std::string hex_colour(const std::array<int, 3>& rgb);  // "#rrggbb"

}  // namespace qkv::viz::detail
