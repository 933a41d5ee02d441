#include "print.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdarg>
#include <cstdio>
#include <iostream>

namespace qkv::cli {

std::string quote_path(std::string_view path) { return quote_value(path, path.size()); }

std::string layer_head_words(std::int64_t layer, std::int64_t layers, std::int64_t head, std::int64_t heads,
                             std::string_view note) {
  const auto range = [](const char* one, const char* many, std::int64_t n) {
    return n == 1 ? format("%s 0 only", one) : format("%s 0-%lld", many, static_cast<long long>(n - 1));
  };
  std::string s = format("layer %lld, ", static_cast<long long>(layer)) +
                  (head < 0 ? std::string("mean of the heads") : format("head %lld", static_cast<long long>(head))) +
                  " (" + range("layer", "layers", layers) + ", " + range("head", "heads", heads);
  if (!note.empty()) s += "; " + std::string(note);
  return s + ")";
}

void warn(std::string_view message) { std::cerr << "qkv: warning: " << printable(message) << "\n"; }

void warn_unused_tensors(const std::vector<std::string>& names, std::string_view directory,
                         std::string_view model) {
  if (names.empty()) return;
  std::string shown;
  for (std::size_t i = 0; i < names.size() && i < 10; ++i) shown += (i ? ", " : "") + names[i];
  if (names.size() > 10) shown += format(", ... (%zu in all)", names.size());
  std::cerr << printable(format("qkv: warning: %zu tensor(s) of the checkpoint in ", names.size()) +
                         quote_path(directory) + " are not used by " + std::string(model) +
                         " and were ignored: " + shown +
                         ". Check that config.json and the weights belong together.")
            << "\n";
}

std::string printable(std::string_view message, std::size_t max_chars) {
  bool cut = false;
  const std::string body = text::escaped(message, max_chars, false, &cut);
  return cut ? body + format("… (%zu bytes in all)", message.size()) : body;
}

std::string format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string s(static_cast<std::size_t>(std::max(n, 0)), '\0');
  std::vsnprintf(s.data(), s.size() + 1, fmt, args);
  va_end(args);
  return s;
}

int display_width(std::string_view text) {
  int width = 0;
  for (const char c : text) {
    if ((static_cast<unsigned char>(c) & 0xC0u) != 0x80u) ++width;  // not a continuation byte
  }
  return width;
}

std::string truncate_display(std::string_view text, int width) {
  if (display_width(text) <= width) return std::string(text);
  std::string out;
  int kept = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const bool starts = (static_cast<unsigned char>(text[i]) & 0xC0u) != 0x80u;
    if (starts && kept == width - 1) break;
    if (starts) ++kept;
    out += text[i];
  }
  return out + "…";
}

std::string pad_left(std::string_view text, int width) {
  return std::string(static_cast<std::size_t>(std::max(0, width - display_width(text))), ' ') +
         std::string(text);
}

std::string pad_right(std::string_view text, int width) {
  return std::string(text) +
         std::string(static_cast<std::size_t>(std::max(0, width - display_width(text))), ' ');
}

std::string shade(double weight) {
  static const char* const kLevels[] = {" ", "░", "▒", "▓", "█"};
  if (!(weight >= 0.0)) return "?";  // NaN or negative: not a weight
  const int level = std::clamp(static_cast<int>(std::lround(weight * 4.0)), 0, 4);
  return kLevels[level];
}

namespace {

std::string format_number(double v, int precision) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-∞" : "∞";
  std::string s = format("%.*f", precision, v);
  // "-0.000" reads as a sign that is not there: drop it.
  if (s[0] == '-' && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);
  return s;
}

}  // namespace

Block render_matrix(const Matrix& m, const MatrixStyle& style) {
  std::vector<std::string> cells(m.data.size());
  for (std::size_t i = 0; i < cells.size(); ++i) {
    cells[i] = style.format ? style.format(m.data[i]) : format_number(m.data[i], style.precision);
  }
  int cell_w = 1;
  for (const auto& c : cells) cell_w = std::max(cell_w, display_width(c));
  for (const auto& l : style.col_labels) cell_w = std::max(cell_w, display_width(l));
  int label_w = 0;
  for (const auto& l : style.row_labels) label_w = std::max(label_w, display_width(l));

  std::vector<std::string> sums;
  int sum_w = 3;  // "sum"
  if (style.row_sums) {
    for (std::int64_t i = 0; i < m.rows; ++i) {
      double s = 0.0;
      for (std::int64_t j = 0; j < m.cols; ++j) s += m(i, j);
      sums.push_back(format_number(s, style.precision));
      sum_w = std::max(sum_w, display_width(sums.back()));
    }
  }

  Block block;
  if (!style.title.empty()) block.push_back(style.title);
  if (!style.col_labels.empty() || style.row_sums) {
    std::string header = std::string(static_cast<std::size_t>(label_w), ' ');
    for (std::int64_t j = 0; j < m.cols; ++j) {
      const std::string label =
          j < static_cast<std::int64_t>(style.col_labels.size()) ? style.col_labels[j] : "";
      header += std::string(static_cast<std::size_t>(style.spacing), ' ') + pad_left(label, cell_w);
    }
    if (style.row_sums) header += "   " + pad_left("sum", sum_w);
    block.push_back(header);
  }
  for (std::int64_t i = 0; i < m.rows; ++i) {
    const std::string label =
        i < static_cast<std::int64_t>(style.row_labels.size()) ? style.row_labels[i] : "";
    std::string line = pad_right(label, label_w);
    for (std::int64_t j = 0; j < m.cols; ++j) {
      line += std::string(static_cast<std::size_t>(style.spacing), ' ') +
              pad_left(cells[static_cast<std::size_t>(i * m.cols + j)], cell_w);
    }
    if (style.row_sums) line += "   " + pad_left(sums[static_cast<std::size_t>(i)], sum_w);
    if (style.shades) {
      line += "  │";
      for (std::int64_t j = 0; j < m.cols; ++j) line += shade(m(i, j));
      line += "│";
    }
    block.push_back(line);
  }
  return block;
}

void print_side_by_side(std::ostream& out, const std::vector<Block>& blocks, int indent, int gap) {
  std::size_t height = 0;
  std::vector<int> widths;
  for (const auto& b : blocks) {
    height = std::max(height, b.size());
    int w = 0;
    for (const auto& line : b) w = std::max(w, display_width(line));
    widths.push_back(w);
  }
  int total = indent;
  for (std::size_t k = 0; k < blocks.size(); ++k) total += widths[k] + (k > 0 ? gap : 0);
  if (total > kMaxWidth && blocks.size() > 1) {  // too wide together: one under the other
    for (std::size_t k = 0; k < blocks.size(); ++k) {
      if (k > 0) out << '\n';
      print_side_by_side(out, {blocks[k]}, indent, gap);
    }
    return;
  }
  for (std::size_t row = 0; row < height; ++row) {
    std::string line(static_cast<std::size_t>(indent), ' ');
    for (std::size_t k = 0; k < blocks.size(); ++k) {
      const std::string cell = row < blocks[k].size() ? blocks[k][row] : "";
      line += k + 1 < blocks.size() ? pad_right(cell, widths[k] + gap) : cell;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << '\n';
  }
}

void print_block(std::ostream& out, const Block& block, int indent) {
  print_side_by_side(out, {block}, indent, 0);
}

void print_paragraph(std::ostream& out, std::string_view text, int indent, int width,
                     int first_indent) {
  if (first_indent < 0) first_indent = indent;
  std::string line(static_cast<std::size_t>(first_indent), ' ');
  int line_w = first_indent;
  bool line_has_word = false;
  std::size_t pos = 0;
  while (pos < text.size()) {
    if (text[pos] == ' ' || text[pos] == '\n') {
      ++pos;
      continue;
    }
    std::size_t end = std::min(text.find_first_of(" \n", pos), text.size());
    // A short parenthesised group such as a shape "(1, 1, 3, 3)" is not broken.
    if (text[pos] == '(') {
      const std::size_t close = text.find(')', pos);
      if (close != std::string_view::npos && close - pos <= 14) {
        end = std::min(text.find_first_of(" \n", close), text.size());
      }
    }
    const std::string_view word = text.substr(pos, end - pos);
    const int word_w = display_width(word);
    if (line_has_word && line_w + 1 + word_w > width) {
      out << line << '\n';
      line = std::string(static_cast<std::size_t>(indent), ' ');
      line_w = indent;
      line_has_word = false;
    }
    if (line_has_word) {
      line += ' ';
      ++line_w;
    }
    line += word;
    line_w += word_w;
    line_has_word = true;
    pos = end;
  }
  if (line_has_word) out << line << '\n';
}

namespace {

// True for one UTF-8 character that terminals draw two columns wide: the CJK blocks
// (U+2E80–U+A4CF, U+AC00–U+D7A3, U+F900–U+FAFF, U+FE30–U+FE4F, U+FF00–U+FF60).
bool is_wide(std::string_view c) {
  if (c.size() != 3) return false;
  const auto b = [&](std::size_t i) { return static_cast<unsigned>(static_cast<unsigned char>(c[i])); };
  const unsigned cp = ((b(0) & 0x0Fu) << 12) | ((b(1) & 0x3Fu) << 6) | (b(2) & 0x3Fu);
  return (cp >= 0x2E80 && cp <= 0xA4CF) || (cp >= 0xAC00 && cp <= 0xD7A3) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0xFE30 && cp <= 0xFE4F) ||
         (cp >= 0xFF00 && cp <= 0xFF60);
}

}  // namespace

std::vector<std::string> code_points(std::string_view text) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < text.size();) {
    std::size_t n = 1;
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0xF0) n = 4;
    else if (c >= 0xE0) n = 3;
    else if (c >= 0xC0) n = 2;
    n = std::min(n, text.size() - i);
    out.emplace_back(text.substr(i, n));
    i += n;
  }
  return out;
}

void print_attention_heatmap(std::ostream& out, const Matrix& probs,
                             const std::vector<std::string>& row_tokens,
                             const std::vector<std::string>& col_tokens) {
  const std::int64_t R = probs.rows, C = probs.cols;
  const int cell = C <= 40 ? 2 : 1;  // columns per key; 2 keeps the map roughly square
  constexpr int kLabelHeight = 6;    // code points of a column label, downwards
  double top = 0;
  for (double p : probs.data) top = std::max(top, p);
  std::vector<std::string> row_labels;
  int label_w = 0;
  for (std::int64_t i = 0; i < R; ++i) {
    row_labels.push_back(format("%2lld ", static_cast<long long>(i)) +
                         truncate_display(row_tokens[static_cast<std::size_t>(i)], 12));
    label_w = std::max(label_w, display_width(row_labels.back()));
  }
  for (int k = 0; k < kLabelHeight; ++k) {
    std::string line = "   " + std::string(static_cast<std::size_t>(label_w) + 2, ' ');
    bool any = false;
    for (std::int64_t j = 0; j < C; ++j) {
      const auto cps = code_points(truncate_display(col_tokens[static_cast<std::size_t>(j)], kLabelHeight));
      std::string c = " ";
      if (k < static_cast<int>(cps.size())) {
        c = cps[static_cast<std::size_t>(k)];
        any = true;
      }
      // A wide (CJK) character already fills two terminal columns.
      const int pad = cell - (is_wide(c) ? 2 : 1);
      line += c + std::string(static_cast<std::size_t>(std::max(pad, 0)), ' ');
    }
    if (!any) break;
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << '\n';
  }
  for (std::int64_t i = 0; i < R; ++i) {
    std::string line = "   " + pad_right(row_labels[static_cast<std::size_t>(i)], label_w) + " │";
    std::int64_t best = 0;
    for (std::int64_t j = 0; j < C; ++j) {
      const double p = probs(i, j);
      if (p > probs(i, best)) best = j;
      std::string s = shade(top > 0 ? p / top : 0.0);
      for (int c = 0; c < cell; ++c) line += s;
    }
    line += "│ → " + truncate_display(col_tokens[static_cast<std::size_t>(best)], 12) +
            format(" %.2f", probs(i, best));
    out << line << '\n';
  }
  out << "   shade = probability / " << format("%.4f", top)
      << " (the largest here): ' ' < 0.2 ≤ ░ < 0.4 ≤ ▒ < 0.6 ≤ ▓ < 0.8 ≤ █\n"
      << "   → the key each query attends to most, with its probability\n";
}

std::string english_list(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return out;
}

}  // namespace qkv::cli
