// qkv explain — one self-attention computation on a tiny example, step by step.
//
// The walkthrough follows the classic explanations (Vaswani et al. 2017, "Attention Is
// All You Need", §3.2; Raschka, "Understanding and Coding Self-Attention"; Alammar,
// "The Illustrated Transformer"): raw softmax(X·Xᵀ)·X, learned Q/K/V projections with
// the 1/√d_k scale, two heads, and the causal mask of a decoder.
//
// Every intermediate matrix is computed here with plain loops in double, so the reader
// sees each step; every final result (and every printed weight matrix) comes from the
// library, and is checked against the step-by-step computation. A mismatch is printed
// and makes the command exit 1: the walkthrough doubles as an end-to-end test.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "print.h"
#include "qkv/qkv.h"

namespace qkv::cli {
namespace {

constexpr std::int64_t kModelWidth = 4;  // d_model: the width of an embedding
constexpr std::int64_t kHeadWidth = 3;   // d_k = d_v of the single-head example
constexpr std::int64_t kHeads = 2;       // the multi-head example
constexpr std::int64_t kMultiHeadWidth = kModelWidth / kHeads;  // 2: H·d = d_model
constexpr int kLabelWidth = 6;  // row labels are cut to this many characters

// ---- step-by-step arithmetic (double, plain loops) ---------------------------------

Matrix matmul(const Matrix& a, const Matrix& b) {  // (n, m)·(m, p) -> (n, p)
  Matrix c(a.rows, b.cols);
  for (std::int64_t i = 0; i < a.rows; ++i) {
    for (std::int64_t j = 0; j < b.cols; ++j) {
      double s = 0.0;
      for (std::int64_t t = 0; t < a.cols; ++t) s += a(i, t) * b(t, j);
      c(i, j) = s;
    }
  }
  return c;
}

Matrix transpose(const Matrix& a) {
  Matrix t(a.cols, a.rows);
  for (std::int64_t i = 0; i < a.rows; ++i) {
    for (std::int64_t j = 0; j < a.cols; ++j) t(j, i) = a(i, j);
  }
  return t;
}

Matrix scaled(Matrix a, double s) {
  for (double& x : a.data) x *= s;
  return a;
}

// Each row: exp(s − max) / Σ exp(s − max). Subtracting the row maximum changes nothing
// mathematically and keeps exp from overflowing. −∞ entries get weight 0.
Matrix softmax_rows(const Matrix& s) {
  Matrix p(s.rows, s.cols);
  for (std::int64_t i = 0; i < s.rows; ++i) {
    double m = -std::numeric_limits<double>::infinity();
    for (std::int64_t j = 0; j < s.cols; ++j) m = std::max(m, s(i, j));
    if (std::isinf(m)) continue;  // a fully masked row: zeros, as the library
    double sum = 0.0;
    for (std::int64_t j = 0; j < s.cols; ++j) sum += (p(i, j) = std::exp(s(i, j) - m));
    for (std::int64_t j = 0; j < s.cols; ++j) p(i, j) /= sum;
  }
  return p;
}

// The library stores f32: the step-by-step path uses the same f32 inputs so that the
// only difference left is the library's own arithmetic.
Matrix round_to_f32(Matrix a) {
  for (double& x : a.data) x = static_cast<float>(x);
  return a;
}

// Columns [first, first + count) of a.
Matrix columns(const Matrix& a, std::int64_t first, std::int64_t count) {
  Matrix c(a.rows, count);
  for (std::int64_t i = 0; i < a.rows; ++i) {
    for (std::int64_t j = 0; j < count; ++j) c(i, j) = a(i, first + j);
  }
  return c;
}

Matrix hconcat(const std::vector<Matrix>& parts) {
  std::int64_t cols = 0;
  for (const auto& p : parts) cols += p.cols;
  Matrix c(parts.front().rows, cols);
  std::int64_t first = 0;
  for (const auto& p : parts) {
    for (std::int64_t i = 0; i < p.rows; ++i) {
      for (std::int64_t j = 0; j < p.cols; ++j) c(i, first + j) = p(i, j);
    }
    first += p.cols;
  }
  return c;
}

// Entries N(0, stddev²), rounded to f32.
Matrix random_matrix(qkv::Rng& rng, std::int64_t rows, std::int64_t cols, double stddev) {
  Matrix m(rows, cols);
  for (double& x : m.data) x = static_cast<float>(stddev * rng.normal());
  return m;
}

// ---- library bridge -------------------------------------------------------------------

qkv::Tensor to_tensor(const Matrix& m, const qkv::Shape& shape) {
  std::vector<float> values(m.data.begin(), m.data.end());
  return qkv::Tensor::from_vector(shape, values);
}

// A tensor with rows·cols elements, read in logical row-major order as (rows, cols).
Matrix to_matrix(const qkv::Tensor& t, std::int64_t rows, std::int64_t cols) {
  const std::vector<float> values = t.to_vector();
  QKV_CHECK(static_cast<std::int64_t>(values.size()) == rows * cols,
            "explain: expected a tensor of " << rows * cols << " elements, got shape "
                                             << t.shape_string());
  Matrix m(rows, cols);
  std::copy(values.begin(), values.end(), m.data.begin());
  return m;
}

// ---- the walkthrough ---------------------------------------------------------------

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> words;
  std::istringstream in(text);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// 64-bit FNV-1a: the embedding of a word depends on the word, not on its position.
std::uint64_t hash_word(const std::string& word) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char c : word) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Compares a library result with the step-by-step one and prints the verdict.
class Checker {
 public:
  explicit Checker(std::ostream& out) : out_(out) {}

  void check(const std::string& what, const Matrix& library, const Matrix& by_hand) {
    double diff = 0.0, magnitude = 0.0;
    bool same_shape = library.rows == by_hand.rows && library.cols == by_hand.cols;
    for (std::size_t i = 0; same_shape && i < library.data.size(); ++i) {
      const double d = std::abs(library.data[i] - by_hand.data[i]);
      diff = std::isnan(d) ? d : std::max(diff, d);
      if (std::isnan(d)) break;
      if (std::isfinite(by_hand.data[i]))
        magnitude = std::max(magnitude, std::abs(by_hand.data[i]));
    }
    // The library returns f32 from the same f32 inputs, so the difference is its
    // rounding: ~6e-8 relative for the double-accumulating reference, a few ulp per
    // term for an f32 kernel over these ≤ 12-term sums. 1e-5 relative leaves ~10x room.
    const double tolerance = 1e-5 * std::max(1.0, magnitude);
    ++checks_;
    if (same_shape && diff <= tolerance) {
      out_ << "   ✓ " << what << format(" (max |difference| %.1e)", diff) << '\n';
      max_diff_ = std::max(max_diff_, diff);
    } else {
      const std::string why =
          same_shape ? format("differs from the step-by-step result by %.3g (tolerance %.1e)", diff,
                              tolerance)
                     : "has the wrong shape";
      out_ << "   ✗ MISMATCH: " << what << ": " << why << '\n';
      failures_.push_back(what + ": " + why);
    }
  }

  int checks() const { return checks_; }
  double max_diff() const { return max_diff_; }
  const std::vector<std::string>& failures() const { return failures_; }

 private:
  std::ostream& out_;
  int checks_ = 0;
  double max_diff_ = 0.0;
  std::vector<std::string> failures_;
};

std::vector<std::string> indexed(const std::string& prefix, std::int64_t n) {
  std::vector<std::string> labels;
  for (std::int64_t i = 0; i < n; ++i) labels.push_back(prefix + std::to_string(i));
  return labels;
}

void heading(std::ostream& out, const std::string& title) {
  out << '\n'
      << title << '\n'
      << std::string(static_cast<std::size_t>(display_width(title)), '-') << '\n';
}

}  // namespace

int run_explain(const ExplainOptions& options, std::ostream& out) {
  const std::vector<std::string> tokens = split_words(options.text);
  if (tokens.empty()) throw UsageError("--text", "needs at least one word, got an empty text");
  if (static_cast<int>(tokens.size()) > kExplainMaxTokens) {
    throw UsageError("--text", format("at most %d words fit on screen, got %zu", kExplainMaxTokens,
                                      tokens.size()));
  }
  const auto L = static_cast<std::int64_t>(tokens.size());

  // Labels: rows are tokens; columns are tokens too, or their numbers when there are
  // too many to fit 100 columns (then three decimals become two).
  const bool wide = L > 8;
  const int precision = wide ? 2 : 3;
  std::vector<std::string> rows_tok, cols_tok;
  for (std::int64_t i = 0; i < L; ++i) {
    const std::string t = truncate_display(tokens[static_cast<std::size_t>(i)], kLabelWidth);
    rows_tok.push_back(wide ? format("%2lld %s", static_cast<long long>(i + 1), t.c_str()) : t);
    cols_tok.push_back(wide ? std::to_string(i + 1) : t);
  }
  auto style = [&](std::string title, std::vector<std::string> col_labels,
                   std::vector<std::string> row_labels) {
    MatrixStyle s;
    s.title = std::move(title);
    s.row_labels = std::move(row_labels);
    s.col_labels = std::move(col_labels);
    s.precision = precision;
    s.spacing = wide ? 1 : 2;
    return s;
  };
  auto token_style = [&](std::string title, std::vector<std::string> col_labels) {
    return style(std::move(title), std::move(col_labels), rows_tok);
  };
  auto weight_style = [&](std::string title) {
    MatrixStyle s = token_style(std::move(title), cols_tok);
    s.row_sums = true;
    s.shades = true;
    return s;
  };
  Checker checker(out);

  // ---- 0. The example -----------------------------------------------------------------
  out << "qkv explain: one self-attention computation, step by step\n\n";
  std::string token_list;
  for (const auto& t : tokens) token_list += "[" + t + "] ";
  print_paragraph(out,
                  format("Text \"%s\": %lld token%s %s(seed %llu).", options.text.c_str(),
                         static_cast<long long>(L), L == 1 ? "" : "s", token_list.c_str(),
                         static_cast<unsigned long long>(options.seed)),
                  0);
  out << '\n';
  print_paragraph(out,
                  "Self-attention builds a new vector for every token as a weighted average of all "
                  "the tokens' vectors, the weights saying how relevant each token is to it. In "
                  "every weight matrix below, row i is the token that looks (the query) and "
                  "column j the token it looks at (the key); ░▒▓█ shade the weights from 0 to 1.",
                  0);
  if (wide) out << "Columns are numbered by token: the numbers before the row labels.\n";

  // ---- 1. Embeddings ------------------------------------------------------------------
  heading(out, format("1. Embeddings X (%lld tokens × %lld)", static_cast<long long>(L),
                      static_cast<long long>(kModelWidth)));
  print_paragraph(out,
                  "A model sees vectors, not words: each token is looked up in an embedding "
                  "table, one row of numbers per token. Real models learn the table and use "
                  "hundreds of numbers per token; here it is random (seeded) and 4 wide. The "
                  "same word always gets the same row, wherever it stands: attention alone does "
                  "not know word order (positional encodings add it).");
  Matrix X(L, kModelWidth);  // (L, d_model)
  for (std::int64_t i = 0; i < L; ++i) {
    qkv::Rng rng(qkv::mix64(options.seed ^ hash_word(tokens[static_cast<std::size_t>(i)])));
    for (std::int64_t d = 0; d < kModelWidth; ++d) X(i, d) = static_cast<float>(rng.normal());
  }
  out << '\n';
  print_block(out, render_matrix(X, token_style("X", indexed("d", kModelWidth))));

  // ---- 2. Raw self-attention ----------------------------------------------------------
  heading(out, "2. Raw self-attention: Y = softmax(X·Xᵀ)·X");
  print_paragraph(out,
                  "The simplest form has no learned weights: every token is compared with every "
                  "token, and the comparisons decide how to mix the token vectors.");
  const Matrix S_raw = matmul(X, transpose(X));  // (L, L)
  out << '\n';
  print_paragraph(out,
                  "a) Scores S = X·Xᵀ: entry (i, j) is the dot product of token i's vector with "
                  "token j's, large when the two point the same way.",
                  6, 88, 3);
  print_block(out, render_matrix(S_raw, token_style("S", cols_tok)));
  const Matrix A_raw = softmax_rows(S_raw);  // (L, L)
  out << '\n';
  print_paragraph(out,
                  "b) Weights A = softmax of each row of S: a_ij = exp(s_ij) / Σ_j exp(s_ij). "
                  "Every weight is positive and every row sums to 1.000: row i says how token i "
                  "shares out its attention.",
                  6, 88, 3);
  print_block(out, render_matrix(A_raw, weight_style("A")));
  const Matrix Y_raw = matmul(A_raw, X);  // (L, d_model)
  out << '\n';
  print_paragraph(out,
                  "c) Output Y = A·X: each token's new vector is the average of all the token "
                  "vectors, weighted by its row of A.",
                  6, 88, 3);
  print_block(out, render_matrix(Y_raw, token_style("Y", indexed("d", kModelWidth))));
  const Matrix Y_lib =
      to_matrix(qkv::self_attention_raw(to_tensor(X, {L, kModelWidth})), L, kModelWidth);
  checker.check("qkv::self_attention_raw(X) computes the same Y in one call", Y_lib, Y_raw);
  out << '\n';
  print_paragraph(out,
                  "The diagonal s_ii = |x_i|² is often the largest score of its row, so raw "
                  "attention tends to look at the token itself; and one vector has to serve to "
                  "ask, to be found and to be passed on. Learned projections separate these "
                  "roles.");

  // ---- 3. Learned projections ---------------------------------------------------------
  qkv::Rng weights_rng(qkv::mix64(options.seed ^ 0x7765696768747321ull));
  // Entries N(0, 1/d_model): Q and K rows then have about unit size, so the scores are
  // neither all alike nor saturated (Glorot-style initialisation).
  const double w_std = 1.0 / std::sqrt(static_cast<double>(kModelWidth));
  heading(out, "3. Queries, keys and values: scaled dot-product attention");
  print_paragraph(out,
                  "Three learned matrices give every token three roles: a query q = x·W_q (what "
                  "it is looking for), a key k = x·W_k (what it can be found by) and a value "
                  "v = x·W_v (what it passes on when found). Here they map width 4 to d_k = 3 "
                  "and are random (seeded).");
  const Matrix Wq = random_matrix(weights_rng, kModelWidth, kHeadWidth, w_std);  // (d_model, d_k)
  const Matrix Wk = random_matrix(weights_rng, kModelWidth, kHeadWidth, w_std);  // (d_model, d_k)
  const Matrix Wv = random_matrix(weights_rng, kModelWidth, kHeadWidth, w_std);  // (d_model, d_v)
  const auto dims = indexed("d", kModelWidth);
  out << '\n';
  print_side_by_side(out, {render_matrix(Wq, style("W_q", indexed("q", kHeadWidth), dims)),
                           render_matrix(Wk, style("W_k", indexed("k", kHeadWidth), dims)),
                           render_matrix(Wv, style("W_v", indexed("v", kHeadWidth), dims))});
  const Matrix Q = round_to_f32(matmul(X, Wq));  // (L, d_k)
  const Matrix K = round_to_f32(matmul(X, Wk));  // (L, d_k)
  const Matrix V = round_to_f32(matmul(X, Wv));  // (L, d_v)
  out << '\n';
  print_paragraph(out, "Q = X·W_q, K = X·W_k, V = X·W_v: one row per token.");
  print_side_by_side(out, {render_matrix(Q, token_style("Q", indexed("q", kHeadWidth))),
                           render_matrix(K, token_style("K", indexed("k", kHeadWidth))),
                           render_matrix(V, token_style("V", indexed("v", kHeadWidth)))});
  const double scale = 1.0 / std::sqrt(static_cast<double>(kHeadWidth));
  const Matrix S = scaled(matmul(Q, transpose(K)), scale);  // (L, L)
  out << '\n';
  print_paragraph(out, format("Scores S = Q·Kᵀ/√d_k, here /√3 = ×%.3f. A dot product of d_k terms "
                              "grows like √d_k; without the scale, wide heads would push softmax "
                              "onto a single key and its gradients towards 0 (Vaswani et al. 2017, "
                              "§3.2.1).",
                              scale));
  print_block(out, render_matrix(S, token_style("S", cols_tok)));

  const qkv::Tensor q = to_tensor(Q, {1, 1, L, kHeadWidth});  // (B, H, L, d_k)
  const qkv::Tensor k = to_tensor(K, {1, 1, L, kHeadWidth});  // (B, H, L, d_k)
  const qkv::Tensor v = to_tensor(V, {1, 1, L, kHeadWidth});  // (B, H, L, d_v)
  qkv::AttentionOptions with_probs;
  with_probs.return_probs = true;
  const qkv::AttentionResult single = qkv::attention(q, k, v, with_probs);
  const Matrix A_lib = to_matrix(single.probs, L, L);  // (L, L)
  const Matrix A = softmax_rows(S);
  out << '\n';
  print_paragraph(out,
                  "Weights A = softmax of each row of S, as returned by qkv::attention(q, k, v) "
                  "with options.return_probs = true:");
  print_block(out, render_matrix(A_lib, weight_style("A")));
  checker.check("the library's weights equal softmax(S) computed step by step", A_lib, A);
  const Matrix O_lib =
      to_matrix(qkv::scaled_dot_product_attention(q, k, v), L, kHeadWidth);  // (L, d_v)
  const Matrix O = matmul(A, V);
  out << '\n';
  print_paragraph(out, format("Output O = A·V, each token's weighted average of the value vectors, "
                              "from qkv::scaled_dot_product_attention(q, k, v) with q, k, v as "
                              "(B, H, L, D) = (1, 1, %lld, 3) tensors:",
                              static_cast<long long>(L)));
  print_block(out, render_matrix(O_lib, token_style("O", indexed("v", kHeadWidth))));
  checker.check("equal to A·V computed step by step", O_lib, O);

  // ---- 4. Two heads -------------------------------------------------------------------
  heading(out, "4. Multi-head attention: two heads");
  print_paragraph(out,
                  "One softmax gives one way of mixing. Multi-head attention runs several smaller "
                  "attentions side by side, each with its own W_q, W_k and W_v, so one head can "
                  "follow one relation between the tokens and another head another. Here: 2 heads "
                  "of width 2 (2 × 2 = 4, the model width, as in real Transformers).");
  std::vector<Matrix> Wq_h, Wk_h, Wv_h;  // per head: (d_model, d)
  for (std::int64_t h = 0; h < kHeads; ++h) {
    Wq_h.push_back(random_matrix(weights_rng, kModelWidth, kMultiHeadWidth, w_std));
    Wk_h.push_back(random_matrix(weights_rng, kModelWidth, kMultiHeadWidth, w_std));
    Wv_h.push_back(random_matrix(weights_rng, kModelWidth, kMultiHeadWidth, w_std));
  }
  const Matrix Wo = random_matrix(weights_rng, kModelWidth, kModelWidth, w_std);  // (H·d, d_model)
  for (std::int64_t h = 0; h < kHeads; ++h) {
    const std::string n = std::to_string(h + 1);
    out << '\n';
    print_side_by_side(
        out,
        {render_matrix(Wq_h[h], style("W_q (head " + n + ")", indexed("q", kMultiHeadWidth), dims)),
         render_matrix(Wk_h[h], style("W_k (head " + n + ")", indexed("k", kMultiHeadWidth), dims)),
         render_matrix(Wv_h[h],
                       style("W_v (head " + n + ")", indexed("v", kMultiHeadWidth), dims))});
  }
  // All heads' projections in one product each, as a model computes them:
  // X·[W_q¹ W_q²] is (L, H·d) = (L, H, d) per token.
  const Matrix Q_all = round_to_f32(matmul(X, hconcat(Wq_h)));  // (L, H·d)
  const Matrix K_all = round_to_f32(matmul(X, hconcat(Wk_h)));  // (L, H·d)
  const Matrix V_all = round_to_f32(matmul(X, hconcat(Wv_h)));  // (L, H·d)
  // (1, L, H, d) -> (1, H, L, d) by a permute: a strided view, no copy.
  const qkv::Shape blhd = {1, L, kHeads, kMultiHeadWidth};
  const qkv::Tensor qh = to_tensor(Q_all, blhd).permute({0, 2, 1, 3});  // (B, H, L, d)
  const qkv::Tensor kh = to_tensor(K_all, blhd).permute({0, 2, 1, 3});  // (B, H, L, d)
  const qkv::Tensor vh = to_tensor(V_all, blhd).permute({0, 2, 1, 3});  // (B, H, L, d)
  const qkv::AttentionResult multi = qkv::attention(qh, kh, vh, with_probs);
  std::vector<Matrix> O_heads;  // step by step, per head: (L, d)
  std::vector<Matrix> A_heads;  // step by step, per head: (L, L)
  std::vector<Matrix> A_heads_lib;
  std::vector<Block> weight_blocks;
  for (std::int64_t h = 0; h < kHeads; ++h) {
    const Matrix Qh = columns(Q_all, h * kMultiHeadWidth, kMultiHeadWidth);
    const Matrix Kh = columns(K_all, h * kMultiHeadWidth, kMultiHeadWidth);
    const Matrix Vh = columns(V_all, h * kMultiHeadWidth, kMultiHeadWidth);
    const double scale_h = 1.0 / std::sqrt(static_cast<double>(kMultiHeadWidth));
    A_heads.push_back(softmax_rows(scaled(matmul(Qh, transpose(Kh)), scale_h)));
    O_heads.push_back(matmul(A_heads.back(), Vh));
    A_heads_lib.push_back(to_matrix(multi.probs.select(1, h), L, L));
    weight_blocks.push_back(render_matrix(
        A_heads_lib.back(), weight_style(format("A (head %lld)", static_cast<long long>(h + 1)))));
  }
  out << '\n';
  print_paragraph(out,
                  "Each head's weights, from one call of qkv::attention with H = 2. Its q is "
                  "X·[W_q¹ W_q²], a (1, L, 2, 2) tensor permuted to (1, 2, L, 2): a strided view, "
                  "no copy.");
  print_side_by_side(out, weight_blocks);
  for (std::int64_t h = 0; h < kHeads; ++h) {
    checker.check(format("head %lld: the library's weights equal the step-by-step ones",
                         static_cast<long long>(h + 1)),
                  A_heads_lib[static_cast<std::size_t>(h)], A_heads[static_cast<std::size_t>(h)]);
  }
  // The output from the default path (a fused kernel when built: attention() with
  // return_probs is answered by the reference); permuted back to (1, L, H, d), read
  // row-major: the heads' outputs side by side.
  const qkv::Tensor out_heads = qkv::scaled_dot_product_attention(qh, kh, vh);  // (B, H, L, d)
  const Matrix concat_lib =
      to_matrix(out_heads.permute({0, 2, 1, 3}), L, kHeads * kMultiHeadWidth);  // (L, H·d)
  std::vector<std::string> concat_labels;
  for (std::int64_t h = 0; h < kHeads; ++h) {
    for (std::int64_t d = 0; d < kMultiHeadWidth; ++d) {
      concat_labels.push_back(
          format("h%lld.%lld", static_cast<long long>(h + 1), static_cast<long long>(d)));
    }
  }
  out << '\n';
  print_paragraph(out,
                  "The heads' outputs, from qkv::scaled_dot_product_attention with H = 2, side "
                  "by side (concatenated); W_o then mixes them back into one vector of width 4 "
                  "per token.");
  print_side_by_side(out, {render_matrix(concat_lib, token_style("concat", concat_labels)),
                           render_matrix(Wo, style("W_o", dims, concat_labels))});
  checker.check("the library's heads equal the per-head step-by-step outputs", concat_lib,
                hconcat(O_heads));
  const Matrix result = matmul(concat_lib, Wo);  // (L, d_model)
  out << '\n';
  print_paragraph(out,
                  "Multi-head attention's result = concat·W_o: a new vector of width 4 per token.");
  print_block(out, render_matrix(result, token_style("result", dims)));

  // ---- 5. Causal ----------------------------------------------------------------------
  heading(out, "5. Causal attention: the decoder's mask");
  print_paragraph(out,
                  "A decoder such as GPT writes text one token at a time, so token i must not "
                  "look at the tokens after it: they do not exist yet when it is computed. The "
                  "causal mask lets token i attend to tokens 1..i only. Masked scores become −∞ "
                  "before the softmax, so their weights are exactly 0 and every row still sums "
                  "to 1.");
  Matrix mask(L, L);  // (L, L): 1 = may attend
  Matrix S_masked = S;
  for (std::int64_t i = 0; i < L; ++i) {
    for (std::int64_t j = 0; j < L; ++j) {
      mask(i, j) = j <= i ? 1.0 : 0.0;
      if (j > i) S_masked(i, j) = -std::numeric_limits<double>::infinity();
    }
  }
  MatrixStyle mask_style = token_style("mask (✓ = may attend)", cols_tok);
  mask_style.format = [](double allowed) { return allowed != 0.0 ? "✓" : "·"; };
  out << '\n';
  print_side_by_side(out,
                     {render_matrix(mask, mask_style),
                      render_matrix(S_masked, token_style("masked S (from step 3)", cols_tok))});
  qkv::AttentionOptions causal;
  causal.causal = true;
  qkv::AttentionOptions causal_probs = causal;
  causal_probs.return_probs = true;
  const Matrix A_causal_lib = to_matrix(qkv::attention(q, k, v, causal_probs).probs, L, L);
  const Matrix A_causal = softmax_rows(S_masked);
  const Matrix O_causal_lib =
      to_matrix(qkv::scaled_dot_product_attention(q, k, v, causal), L, kHeadWidth);
  out << '\n';
  print_paragraph(out,
                  "Weights and output from qkv::attention and qkv::scaled_dot_product_attention "
                  "with options.causal = true:");
  print_side_by_side(out,
                     {render_matrix(A_causal_lib, weight_style("A")),
                      render_matrix(O_causal_lib, token_style("O", indexed("v", kHeadWidth)))});
  checker.check("the library's causal weights equal the step-by-step ones", A_causal_lib, A_causal);
  checker.check("the library's causal output equals A·V step by step", O_causal_lib,
                matmul(A_causal, V));
  out << '\n';
  print_paragraph(out,
                  "The first token can see only itself: its weight is 1 and its output is its own "
                  "value vector, row 1 of V. The last token sees every token, as in step 3.");

  // ---- Summary ------------------------------------------------------------------------
  out << '\n';
  if (!checker.failures().empty()) {
    out.flush();
    throw qkv::Error(
        format("explain: %zu of %d library results differ from the step-by-step "
               "computation; first: %s",
               checker.failures().size(), checker.checks(), checker.failures().front().c_str()));
  }
  print_paragraph(out,
                  format("All %d library results match the step-by-step computation "
                         "(max |difference| %.1e).",
                         checker.checks(), checker.max_diff()),
                  0);
  return 0;
}

}  // namespace qkv::cli
