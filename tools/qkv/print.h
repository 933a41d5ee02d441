// Terminal printing for the qkv tool: labelled matrices in aligned columns, several
// matrices side by side, a one-character heatmap per weight, and wrapped paragraphs.
//
// Everything renders to lines first (a Block), so blocks can be placed side by side.
// Widths are counted in code points, not bytes, so the UTF-8 shade characters
// (░▒▓█), ✓, −∞ and ᵀ line up in any UTF-8 terminal.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "text/unicode.h"

namespace qkv::cli {

// A small dense matrix for display and for the walkthrough's step-by-step arithmetic.
struct Matrix {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::vector<double> data;  // (rows, cols), row-major

  Matrix() = default;
  Matrix(std::int64_t r, std::int64_t c)
      : rows(r), cols(c), data(static_cast<std::size_t>(r * c)) {}
  double& operator()(std::int64_t i, std::int64_t j) {
    return data[static_cast<std::size_t>(i * cols + j)];
  }
  double operator()(std::int64_t i, std::int64_t j) const {
    return data[static_cast<std::size_t>(i * cols + j)];
  }
};

struct MatrixStyle {
  std::string title;                    // printed above the matrix
  std::vector<std::string> row_labels;  // one per row; empty = none
  std::vector<std::string> col_labels;  // one per column; empty = none
  int precision = 3;                    // digits after the point
  int spacing = 2;                      // spaces between columns
  bool row_sums = false;                // a "sum" column after the values
  bool shades = false;                  // a heat strip, one ░▒▓█ per value in [0, 1]
  // Replaces the numeric format of every cell when set (e.g. a mask as ✓ / ·).
  std::function<std::string(double)> format;
};

using Block = std::vector<std::string>;  // lines of one rendered item

Block render_matrix(const Matrix& m, const MatrixStyle& style);

inline constexpr int kMaxWidth = 100;  // terminal columns the output is laid out for

// Places blocks left to right, `gap` spaces apart, each line prefixed by `indent` spaces;
// one under the other instead when together they would be wider than kMaxWidth.
void print_side_by_side(std::ostream& out, const std::vector<Block>& blocks, int indent = 3,
                        int gap = 3);
void print_block(std::ostream& out, const Block& block, int indent = 3);

// Word-wraps `text` to `width` columns, every line prefixed by `indent` spaces
// (`first_indent` for the first line when given).
void print_paragraph(std::ostream& out, std::string_view text, int indent = 3, int width = 88,
                     int first_indent = -1);

// One character for a weight in [0, 1]: " ░▒▓█" in five equal steps.
std::string shade(double weight);

// Display width of UTF-8 text in code points (every character here is one column wide).
int display_width(std::string_view text);
// At most `width` code points of `text`; a cut label ends in "…".
std::string truncate_display(std::string_view text, int width);
std::string pad_left(std::string_view text, int width);
std::string pad_right(std::string_view text, int width);

// The code points of UTF-8 text (each one column wide in this file's convention).
std::vector<std::string> code_points(std::string_view text);

// An attention matrix (rows = queries, columns = keys) as shades, rows labelled with
// row_tokens, columns with col_tokens written downwards; each row ends with the key it
// attends to most. Shades are relative to the largest probability shown.
void print_attention_heatmap(std::ostream& out, const Matrix& probs,
                             const std::vector<std::string>& row_tokens,
                             const std::vector<std::string>& col_tokens);

// "a", "a and b", "a, b and c": names as a sentence lists them.
std::string english_list(const std::vector<std::string>& names);

// A value given by the user, as messages quote it (text/unicode.h, where the library's
// messages quote values so too).
using text::quote_value;
// A file or directory name as messages quote it: as quote_value, but whole (a path cut
// short hides which file is meant; the system bounds its length).
std::string quote_path(std::string_view path);

// How layers and heads are written everywhere (0-based, as --layer/--head and the JSON
// number them): "layer 1, head 0 (layers 0-1, heads 0-3)", `note` appended inside the
// parentheses after "; ". head < 0: "mean of the heads" instead of "head N".
std::string layer_head_words(std::int64_t layer, std::int64_t layers, std::int64_t head, std::int64_t heads,
                             std::string_view note = {});

// A message as the tool prints it: control characters and bytes that are not UTF-8 as
// \xNN (file names and values inside it come from the user), at most max_chars characters.
std::string printable(std::string_view message, std::size_t max_chars = 2000);

// "qkv: warning: MESSAGE" on stderr, the message printable().
void warn(std::string_view message);

// Hugging Face's "Some weights of the model checkpoint ... were not used" on stderr: the
// library records a checkpoint's unread tensors (BertWeights/Gpt2Weights::unused_tensors)
// and never prints; the tool warns with their names (the first ten) and goes on.
void warn_unused_tensors(const std::vector<std::string>& names, std::string_view directory,
                         std::string_view model);

// printf-style formatting into a std::string.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace qkv::cli
