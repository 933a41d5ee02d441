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
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "explain_steps.h"
#include "print.h"
#include "qkv/qkv.h"

namespace qkv::cli {
namespace {

constexpr std::int64_t kModelWidth = 4;  // d_model: the width of an embedding
constexpr std::int64_t kHeadWidth = 3;   // d_k = d_v of the single-head example
constexpr std::int64_t kHeads = 2;       // the multi-head example
constexpr std::int64_t kMultiHeadWidth = kModelWidth / kHeads;  // 2: H·d = d_model
constexpr std::int64_t kFeedForwardWidth = 8;  // the feed-forward's hidden width: 2·d_model
constexpr int kLabelWidth = 6;  // row labels are cut to this many characters

// Entries N(0, stddev²), rounded to f32.
Matrix random_matrix(qkv::Rng& rng, std::int64_t rows, std::int64_t cols, double stddev) {
  Matrix m(rows, cols);
  for (double& x : m.data) x = static_cast<float>(stddev * rng.normal());
  return m;
}

using TokenStyle = std::function<MatrixStyle(std::string, std::vector<std::string>)>;

// Section 6: after attention, the rest of a post-LN encoder layer (BERT's), on the toy
// numbers: the residual, LayerNorm, the feed-forward and its residual, each step checked
// against the library's module on the same f32 inputs, and the whole layer against
// nn::TransformerEncoderLayer built from every weight of sections 4 and 6.
void walk_rest_of_layer(std::ostream& out, Checker& checker, qkv::Rng& rng, const Matrix& X,
                        const Matrix& attention_out, const std::vector<Matrix>& in_proj, const Matrix& Wo,
                        const TokenStyle& token_style) {
  const std::int64_t L = X.rows, E = kModelWidth, F = kFeedForwardWidth;
  const double eps = 1e-5;
  const auto dims = indexed("d", E);
  heading(out, "6. The rest of the layer: residual, LayerNorm, feed-forward");
  print_paragraph(out,
                  "Attention is one of a Transformer layer's two sub-layers; a feed-forward network "
                  "applied to every token alone is the other. Each sub-layer is wrapped in a residual "
                  "connection (its input added to its output, so the layer learns a change of x, not "
                  "a new x) and a LayerNorm. BERT and the original Transformer normalise after the "
                  "residual (post-LN): x = LN(x + sublayer(x)), as here. GPT-2 and most later models "
                  "normalise the sub-layer's input instead (pre-LN): x = x + sublayer(LN(x)), which "
                  "keeps deep stacks stable to train.");
  // a) Residual.
  const Matrix H1 = round_to_f32(add(X, attention_out));  // (L, E)
  out << '\n';
  print_paragraph(out, "a) Residual: X + the multi-head result of step 4.", 6, 88, 3);
  print_block(out, render_matrix(H1, token_style("X + result", dims)));
  // b) LayerNorm, its statistics shown.
  Matrix gamma(1, E), beta(1, E);  // (1, E): learned; here near 1 and 0
  for (double& g : gamma.data) g = static_cast<float>(1.0 + 0.2 * rng.normal());
  for (double& b : beta.data) b = static_cast<float>(0.1 * rng.normal());
  Matrix stats(L, 2);  // (L, 2): mean, variance of each row
  for (std::int64_t i = 0; i < L; ++i) {
    for (std::int64_t j = 0; j < E; ++j) stats(i, 0) += H1(i, j) / E;
    for (std::int64_t j = 0; j < E; ++j) stats(i, 1) += (H1(i, j) - stats(i, 0)) * (H1(i, j) - stats(i, 0)) / E;
  }
  const Matrix N1 = layer_norm(H1, gamma, beta, eps);  // (L, E)
  out << '\n';
  print_paragraph(out,
                  "b) LayerNorm: each token's row gets mean μ = 0 and variance σ² = 1, "
                  "(x − μ)/√(σ² + ε) with ε = 1e-5, then a learned scale γ and shift β per column "
                  "(here random near 1 and 0). Whatever the scale of the sum, the next sub-layer "
                  "sees rows of one size.",
                  6, 88, 3);
  print_side_by_side(out, {render_matrix(stats, token_style("row statistics", {"μ", "σ²"})),
                           render_matrix(N1, token_style("LN(X + result)", dims))});
  const auto column_style = [&dims](std::string title) {  // a (1, E) row: columns named, no row label
    MatrixStyle s;
    s.title = std::move(title);
    s.col_labels = dims;
    return s;
  };
  print_side_by_side(out, {render_matrix(gamma, column_style("γ")), render_matrix(beta, column_style("β"))});
  nn::LayerNorm norm1({E}, eps), norm2({E}, eps);
  norm1.weight = to_tensor(gamma, {E});
  norm1.bias = to_tensor(beta, {E});
  checker.check("qkv::nn::LayerNorm gives the same rows",
                to_matrix(norm1.forward(to_tensor(H1, {L, E})), L, E), N1);
  // c) Feed-forward.
  const Matrix W1 = random_matrix(rng, F, E, 1.0 / std::sqrt(double(E)));  // (F, E), torch's (out, in)
  const Matrix b1 = random_matrix(rng, 1, F, 0.1);
  const Matrix W2 = random_matrix(rng, E, F, 1.0 / std::sqrt(double(F)));  // (E, F)
  const Matrix b2 = random_matrix(rng, 1, E, 0.1);
  const Matrix G = activation(linear(N1, W1, b1), nn::Activation::gelu);  // (L, F)
  const Matrix FF = linear(G, W2, b2);                                    // (L, E)
  out << '\n';
  print_paragraph(out,
                  format("c) Feed-forward, on each token alone: widen to %lld with W_1 and b_1, apply "
                         "GELU(z) = z·Φ(z) (BERT's and GPT-2's activation; the original Transformer "
                         "used ReLU, max(0, z)), and narrow back to %lld with W_2 and b_2: "
                         "FF(x) = GELU(x·W_1ᵀ + b_1)·W_2ᵀ + b_2. Real models widen 4×; its "
                         "weights are most of a layer's parameters.",
                         static_cast<long long>(F), static_cast<long long>(E)),
                  6, 88, 3);
  print_side_by_side(out, {render_matrix(G, token_style("GELU(x·W_1ᵀ + b_1)", indexed("f", F))),
                           render_matrix(FF, token_style("FF(x)", dims))});
  nn::FeedForward ff(E, F, nn::Activation::gelu);
  ff.linear1.weight = to_tensor(W1, {F, E});
  ff.linear1.bias = to_tensor(b1, {F});
  ff.linear2.weight = to_tensor(W2, {E, F});
  ff.linear2.bias = to_tensor(b2, {E});
  checker.check("qkv::nn::FeedForward gives the same rows",
                to_matrix(ff.forward(to_tensor(round_to_f32(N1), {L, E})), L, E), FF);
  // d) Second residual and LayerNorm: the layer's output.
  Matrix gamma2(1, E), beta2(1, E);
  for (double& g : gamma2.data) g = static_cast<float>(1.0 + 0.2 * rng.normal());
  for (double& b : beta2.data) b = static_cast<float>(0.1 * rng.normal());
  norm2.weight = to_tensor(gamma2, {E});
  norm2.bias = to_tensor(beta2, {E});
  const Matrix H2 = round_to_f32(add(round_to_f32(N1), round_to_f32(FF)));  // (L, E)
  const Matrix Y = layer_norm(H2, gamma2, beta2, eps);                      // (L, E)
  out << '\n';
  print_paragraph(out,
                  "d) The feed-forward's residual and a second LayerNorm (its own γ and β): "
                  "Y = LN(x + FF(x)), the layer's output, one row of width 4 per token, ready for "
                  "the next layer.",
                  6, 88, 3);
  print_block(out, render_matrix(Y, token_style("Y", dims)));
  checker.check("qkv::nn::LayerNorm gives the same output",
                to_matrix(norm2.forward(to_tensor(H2, {L, E})), L, E), Y);
  // e) The whole layer in one library call.
  nn::TransformerEncoderLayer layer({.d_model = E, .nhead = kHeads, .dim_feedforward = F,
                                     .activation = nn::Activation::gelu, .layer_norm_eps = eps,
                                     .norm_first = false, .bias = true});
  // in_proj (3E, E) holds W_q, W_k, W_v as torch's Linear: q = x·W_qᵀ, so the rows are the
  // columns of step 4's X·[W_q⁰ W_q¹].
  layer.self_attn.in_proj.weight = to_tensor(transpose(hconcat(in_proj)), {3 * E, E});
  layer.self_attn.in_proj.bias = Tensor::zeros({3 * E});
  layer.self_attn.out_proj.weight = to_tensor(transpose(Wo), {E, E});
  layer.self_attn.out_proj.bias = Tensor::zeros({E});
  layer.ff = ff;
  layer.norm1 = norm1;
  layer.norm2 = norm2;
  out << '\n';
  print_paragraph(out,
                  "e) All of it, from X, is one call of qkv::nn::TransformerEncoderLayer (post-norm, "
                  "GELU) holding step 4's W_q, W_k, W_v and W_o and this step's weights:",
                  6, 88, 3);
  checker.check("qkv::nn::TransformerEncoderLayer(X) gives the same Y",
                to_matrix(layer.forward(to_tensor(X, {1, L, E})), L, E), Y);
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

}  // namespace

int run_explain(const ExplainOptions& options, std::ostream& out) {
  if (!options.model.empty()) return run_explain_model(options, out);
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
    rows_tok.push_back(wide ? format("%2lld %s", static_cast<long long>(i), t.c_str()) : t);  // 0-based, as --token
    cols_tok.push_back(wide ? std::to_string(i) : t);
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
  // The library returns f32 from the same f32 inputs, so the difference is its rounding:
  // ~6e-8 relative for the double-accumulating reference, a few ulp per term for an f32
  // kernel over these ≤ 12-term sums. 1e-5 relative leaves ~10x room.
  Checker checker(out, 1e-5);

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
    const std::string n = std::to_string(h);  // heads are 0-based, as --head and the pages
    out << '\n';
    print_side_by_side(
        out,
        {render_matrix(Wq_h[h], style("W_q (head " + n + ")", indexed("q", kMultiHeadWidth), dims)),
         render_matrix(Wk_h[h], style("W_k (head " + n + ")", indexed("k", kMultiHeadWidth), dims)),
         render_matrix(Wv_h[h],
                       style("W_v (head " + n + ")", indexed("v", kMultiHeadWidth), dims))});
  }
  // All heads' projections in one product each, as a model computes them:
  // X·[W_q⁰ W_q¹] is (L, H·d) = (L, H, d) per token.
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
        A_heads_lib.back(), weight_style(format("A (head %lld)", static_cast<long long>(h)))));
  }
  out << '\n';
  print_paragraph(out,
                  "Each head's weights, from one call of qkv::attention with H = 2. Its q is "
                  "X·[W_q⁰ W_q¹], a (1, L, 2, 2) tensor permuted to (1, 2, L, 2): a strided view, "
                  "no copy.");
  print_side_by_side(out, weight_blocks);
  for (std::int64_t h = 0; h < kHeads; ++h) {
    checker.check(format("head %lld: the library's weights equal the step-by-step ones",
                         static_cast<long long>(h)),
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
          format("h%lld.%lld", static_cast<long long>(h), static_cast<long long>(d)));
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

  // ---- 6. The rest of the layer -------------------------------------------------------
  walk_rest_of_layer(out, checker, weights_rng, X, result, {hconcat(Wq_h), hconcat(Wk_h), hconcat(Wv_h)}, Wo,
                     token_style);

  // ---- Summary ------------------------------------------------------------------------
  out << '\n';
  checker.throw_on_mismatch();
  print_paragraph(out,
                  format("All %zu library results match the step-by-step computation "
                         "(max |difference| %.1e).",
                         checker.results().size(), checker.max_diff()),
                  0);
  return 0;
}

}  // namespace qkv::cli
