// render_svg: one head's (Lq, Lk) attention as a standalone SVG heatmap for papers.
//
// Layout, top to bottom: the title (group, layer, head), the key labels written upwards,
// then the grid with the query labels on its left and the colour scale on its right.
// Widths of labels are estimated (no font metrics without a renderer): 0.6 em per code
// point, 1 em for wide scripts (CJK, from U+1100), which holds for the generic sans-serif
// faces; labels are cut at 20 code points.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "common.h"
#include "qkv/error.h"

namespace qkv::viz {
namespace {

using detail::markup_escape;

constexpr std::size_t kMaxLabelPoints = 20;

double text_width(const std::string& text, double font) {
  double w = 0;
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const std::size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    // A lead byte E1 and above (with n >= 3) is U+1000 or beyond: count it wide.
    w += (n >= 3 && c >= 0xE1) ? font : 0.6 * font;
    i += n;
  }
  return w;
}

std::string num(double v, const char* format = "%.1f") {
  char buf[32];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// A token as a label: spaces as U+2423 "␣", as the page shows them (GPT-2's " the" and
// "the" are different tokens, and a lone space would be invisible); the labels of a group
// whose labels are text (movie titles) keep their spaces.
std::string label(const std::string& token, bool text) {
  std::string shown;
  for (const char c : detail::display_text(token)) {
    if (c == ' ' && !text) shown += "\xE2\x90\xA3";
    else shown += c;
  }
  return detail::truncate_points(shown, kMaxLabelPoints);
}

}  // namespace

std::string render_svg(const AttentionGroup& group, std::int64_t layer, std::int64_t head) {
  const std::string where = "render_svg: group '" + detail::repair_utf8(group.name) + "'";
  const detail::CheckedGroup g = detail::check_group(group, where);
  const auto layers = static_cast<std::int64_t>(group.layers.size());
  QKV_CHECK(layer >= 0 && layer < layers,
            where << ": layer must be in [0, " << layers << "), got " << layer);
  QKV_CHECK(head >= 0 && head < g.heads,
            where << ": head must be in [0, " << g.heads << "), got " << head);
  const auto n = static_cast<std::size_t>(layer);
  const std::int64_t Lq = g.queries, Lk = g.keys;

  float top = 0;  // the scale runs from 0 to the largest probability of this head
  for (std::int64_t i = 0; i < Lq; ++i)
    for (std::int64_t j = 0; j < Lk; ++j) top = std::max(top, g.at(n, head, i, j));

  std::vector<std::string> rows, cols;
  for (const auto& t : group.query_tokens) rows.push_back(label(t, group.text_labels));
  for (const auto& t : group.key_tokens) cols.push_back(label(t, group.text_labels));

  const double cell = std::clamp(std::round(480.0 / double(std::max(Lq, Lk))), 6.0, 28.0);
  const double font = std::clamp(cell - 2, 7.0, 12.0);
  double row_w = 0, col_h = 0;
  for (const auto& r : rows) row_w = std::max(row_w, text_width(r, font));
  for (const auto& c : cols) col_h = std::max(col_h, text_width(c, font));
  const std::string title = detail::display_text(group.name) + " \xE2\x80\x94 layer " +
                            std::to_string(layer) + ", head " + std::to_string(head);
  const double title_w = text_width(title, 15);

  const double x0 = std::ceil(12 + row_w + 6);  // grid origin
  const double y0 = std::ceil(50 + col_h + 6);
  const double grid_w = cell * double(Lk), grid_h = cell * double(Lq);
  const double bar_x = x0 + grid_w + 24, bar_w = 14;
  const double bar_h = std::clamp(grid_h, 80.0, 240.0);
  const double width = std::ceil(std::max(bar_x + bar_w + 56, 12 + title_w + 12));
  const double height = std::ceil(std::max(y0 + grid_h, y0 + bar_h) + 16);

  std::string s;
  s.reserve(static_cast<std::size_t>(Lq * Lk) * 96 + 4096);
  s += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width, "%.0f") +
       "\" height=\"" + num(height, "%.0f") + "\" viewBox=\"0 0 " + num(width, "%.0f") + " " +
       num(height, "%.0f") + "\" font-family=\"sans-serif\">\n";
  s += "<title>" + markup_escape(title) + "</title>\n";
  s += "<defs><linearGradient id=\"scale\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">";
  for (int k = 0; k <= 8; ++k) {
    s += "<stop offset=\"" + num(k / 8.0, "%.3f") + "\" stop-color=\"" +
         detail::hex_colour(detail::ramp(k / 8.0)) + "\"/>";
  }
  s += "</linearGradient></defs>\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  s += "<text x=\"12\" y=\"22\" font-size=\"15\" font-weight=\"bold\" fill=\"#222\">" +
       markup_escape(title) + "</text>\n";
  s += "<text x=\"12\" y=\"40\" font-size=\"11\" fill=\"#555\">rows: queries, columns: keys"
       "</text>\n";

  // Key labels, written upwards above their columns.
  s += "<g font-size=\"" + num(font) + "\" fill=\"#222\">\n";
  for (std::int64_t j = 0; j < Lk; ++j) {
    const double x = x0 + (double(j) + 0.5) * cell;
    s += "<text transform=\"translate(" + num(x) + "," + num(y0 - 6) +
         ") rotate(-90)\" dominant-baseline=\"central\">" +
         markup_escape(cols[static_cast<std::size_t>(j)]) + "</text>\n";
  }
  for (std::int64_t i = 0; i < Lq; ++i) {
    const double y = y0 + (double(i) + 0.5) * cell;
    s += "<text x=\"" + num(x0 - 6) + "\" y=\"" + num(y) +
         "\" text-anchor=\"end\" dominant-baseline=\"central\">" +
         markup_escape(rows[static_cast<std::size_t>(i)]) + "</text>\n";
  }
  s += "</g>\n";

  // The cells, each with its value as a tooltip.
  s += "<g shape-rendering=\"crispEdges\">\n";
  for (std::int64_t i = 0; i < Lq; ++i) {
    for (std::int64_t j = 0; j < Lk; ++j) {
      const float p = g.at(n, head, i, j);
      s += "<rect x=\"" + num(x0 + double(j) * cell) + "\" y=\"" + num(y0 + double(i) * cell) +
           "\" width=\"" + num(cell) + "\" height=\"" + num(cell) + "\" fill=\"" +
           detail::hex_colour(detail::ramp(top > 0 ? p / top : 0.0)) + "\"><title>" +
           markup_escape(rows[static_cast<std::size_t>(i)]) + " \xE2\x86\x92 " +
           markup_escape(cols[static_cast<std::size_t>(j)]) + ": ";
      detail::append_number(s, p);
      s += "</title></rect>\n";
    }
  }
  s += "</g>\n";
  s += "<rect x=\"" + num(x0) + "\" y=\"" + num(y0) + "\" width=\"" + num(grid_w) +
       "\" height=\"" + num(grid_h) + "\" fill=\"none\" stroke=\"#888\" stroke-width=\"0.5\"/>\n";

  // The colour scale: 0 at the bottom, the head's maximum at the top.
  s += "<rect x=\"" + num(bar_x) + "\" y=\"" + num(y0) + "\" width=\"" + num(bar_w) +
       "\" height=\"" + num(bar_h) + "\" fill=\"url(#scale)\" stroke=\"#888\" "
       "stroke-width=\"0.5\"/>\n";
  s += "<g font-size=\"10\" fill=\"#222\">\n";
  for (int k = 0; k <= 2; ++k) {
    const double y = y0 + bar_h * (1.0 - k / 2.0);
    s += "<line x1=\"" + num(bar_x + bar_w) + "\" y1=\"" + num(y) + "\" x2=\"" +
         num(bar_x + bar_w + 4) + "\" y2=\"" + num(y) + "\" stroke=\"#888\"/>";
    s += "<text x=\"" + num(bar_x + bar_w + 6) + "\" y=\"" + num(y) +
         "\" dominant-baseline=\"central\">" + num(double(top) * k / 2.0, "%.3g") + "</text>\n";
  }
  s += "</g>\n</svg>\n";
  return s;
}

}  // namespace qkv::viz
