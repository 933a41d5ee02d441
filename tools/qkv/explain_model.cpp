// qkv explain --model DIR --text T: one layer of a real model, step by step, on the user's
// own sentence. The model describes the layer (models::LayerWalk: its input rows, its
// weights, its own output); every step is redone here in double with plain loops
// (explain_steps.h) and checked: the attention probabilities against the registry's
// attention() of that layer, each sub-layer against the library's module on the same f32
// input, and the layer's output against the model's own forward. A mismatch exits 1.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "explain_steps.h"
#include "print.h"
#include "qkv/model_registry.h"
#include "qkv/qkv.h"
#include "models/token_choice.h"

namespace qkv::cli {

using models::parse_token_choice;
using models::token_list;
using models::token_span;
using models::TokenSpan;

namespace {

constexpr std::int64_t kShownColumns = 6;  // columns printed of a wide matrix
constexpr int kTokenLabelWidth = 10;

Matrix vector_row(const Tensor& t) { return to_matrix(t, 1, t.numel()); }  // (n) -> (1, n)

nlohmann::ordered_json json_matrix(const Matrix& m) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (std::int64_t i = 0; i < m.rows; ++i) {
    nlohmann::ordered_json row = nlohmann::ordered_json::array();
    for (std::int64_t j = 0; j < m.cols; ++j) {
      if (std::isfinite(m(i, j))) row.push_back(m(i, j));
      else row.push_back(nullptr);  // a masked score (−∞): JSON has no infinity
    }
    rows.push_back(row);
  }
  return rows;
}

class Walk {
 public:
  Walk(std::ostream& text, const std::vector<std::string>& tokens) : text_(text) {
    for (std::size_t i = 0; i < tokens.size(); ++i)
      labels_.push_back(format("%2zu %s", i, truncate_display(printable(tokens[i], 40), kTokenLabelWidth).c_str()));
  }

  // The first kShownColumns columns of m (L, n), one row per token.
  void show(const std::string& title, const Matrix& m, const std::string& column_prefix) const {
    const std::int64_t shown = std::min(m.cols, kShownColumns);
    MatrixStyle s;
    s.title = m.cols > shown ? format("%s (columns 0-%lld of %lld)", title.c_str(), static_cast<long long>(shown - 1),
                                      static_cast<long long>(m.cols))
                             : title;
    s.row_labels = labels_;
    s.col_labels = indexed(column_prefix, shown);
    print_block(text_, render_matrix(columns(m, 0, shown), s));
  }

  std::ostream& text() const { return text_; }
  const std::vector<std::string>& labels() const { return labels_; }

 private:
  std::ostream& text_;
  std::vector<std::string> labels_;
};

}  // namespace

int run_explain_model(const ExplainOptions& o, std::ostream& out) {
  const std::unique_ptr<models::Model> model = models::load_model(o.model);
  if (model->attention_input() != models::AttentionInput::text)
    (void)model->layer_walk({}, o.layer);  // throws: a walk takes a text model
  models::AttentionRequest request;
  request.text = o.text;
  const models::ModelAttention a = model->attention(request);
  QKV_CHECK(!a.view.groups.empty(), "explain: the model returned no attention");
  const viz::AttentionGroup& group = a.view.groups.front();  // the stack a walk takes
  const auto layers = static_cast<std::int64_t>(group.layers.size());
  const std::int64_t heads = group.layers.front().size(0);
  if (o.layer >= layers)
    throw UsageError("--layer", format("must be in [0, %lld]: the %s has layers 0-%lld, got %lld",
                                       static_cast<long long>(layers - 1), group.name.c_str(),
                                       static_cast<long long>(layers - 1), static_cast<long long>(o.layer)));
  if (o.head >= heads)
    throw UsageError("--head", format("must be in [0, %lld]: the %s has heads 0-%lld, got %lld",
                                      static_cast<long long>(heads - 1), group.name.c_str(),
                                      static_cast<long long>(heads - 1), static_cast<long long>(o.head)));
  const models::LayerWalk w = model->layer_walk(request, o.layer);
  QKV_CHECK(w.group == group.name && w.tokens == group.query_tokens,
            "explain: the layer walk (" << w.group << ") is not over attention()'s first group (" << group.name << ")");
  const std::vector<std::string>& tokens = w.tokens;
  const auto L = static_cast<std::int64_t>(tokens.size());
  std::int64_t a_pos = L - 1;  // the token whose softmax row is shown; default the last
  if (!o.token.empty()) {
    models::TokenChoice choice;
    try {
      choice = parse_token_choice(o.token, {tokens});
    } catch (const Error& e) {
      throw UsageError("--token", e.what());
    }
    const TokenSpan span = token_span(tokens, choice);
    if (!span.found())
      throw UsageError("--token", quote_value(o.token) + " is not a token of the input; its tokens: " + token_list(tokens));
    a_pos = span.first;
  }

  const nn::TransformerEncoderLayer& layer = w.layer;
  const nn::TransformerLayerConfig& c = layer.config;
  const std::int64_t E = c.d_model, E_out = layer.out_features(), H = c.nhead, dk = E / H, F = c.dim_feedforward;
  const std::int64_t h = o.head;
  QKV_CHECK(H == heads, "explain: the layer has " << H << " heads, its attention " << heads);
  const bool pre = c.norm_first;

  std::ostringstream discarded;  // --json: the text goes nowhere
  std::ostream& text = o.json ? static_cast<std::ostream&>(discarded) : out;
  // The library computes in f32 over sums of up to F terms; the step-by-step path in double
  // from the same f32 inputs. Their difference is the library's rounding: ~1e-6 relative for
  // these widths (f32's 6e-8 times √F-ish accumulated terms, amplified by LayerNorm's 1/σ),
  // so 1e-4 relative leaves room; a wrong step (a skipped γ, a missing bias) is off by far more.
  Checker checker(text, 1e-4);
  const Walk walk(text, tokens);
  nlohmann::ordered_json j;

  const Matrix x = to_matrix(w.x, L, E);  // (L, E)
  text << "qkv explain: " << printable(layer_head_words(o.layer, layers, h, H)) << " of " << printable(o.model)
       << ", step by step\n\n";
  print_paragraph(text, "model: " + printable(model->description()), 0);
  print_paragraph(text, "this layer: " + w.about + ".", 0);
  print_paragraph(text, format("token A = %s (position %lld): its row of the softmax is shown.",
                               quote_value(tokens[static_cast<std::size_t>(a_pos)]).c_str(),
                               static_cast<long long>(a_pos)),
                  0);
  std::string list;
  for (std::int64_t i = 0; i < L; ++i) list += format("[%lld] %s ", static_cast<long long>(i), printable(tokens[i], 40).c_str());
  print_paragraph(text, "tokens: " + list, 0);

  heading(text, format("1. The layer's input x (%lld tokens × %lld)", static_cast<long long>(L), static_cast<long long>(E)));
  print_paragraph(text, o.layer == 0 ? "The token embeddings plus positions, as the model computes them."
                                     : "The previous layer's output, from the model's own forward.");
  walk.show("x", x, "d");

  // ---- pre-LN: the attention reads LN1(x) ----------------------------------------------
  const Matrix g1 = vector_row(layer.norm1.weight), b1n = vector_row(layer.norm1.bias);
  const Matrix g2 = vector_row(layer.norm2.weight), b2n = vector_row(layer.norm2.bias);
  const double eps = c.layer_norm_eps;
  Matrix att_in = x;
  int step = 2;
  if (pre) {
    heading(text, format("%d. LayerNorm before attention (pre-LN, as GPT-2)", step++));
    print_paragraph(text, format("Each row: (x − μ)/√(σ² + ε)·γ + β, ε = %g; the residual stream x itself goes on unnormalised.", eps));
    att_in = layer_norm(x, g1, b1n, eps);
    walk.show("LN₁(x)", att_in, "d");
    checker.check("qkv::nn::LayerNorm (norm1) gives the same rows", to_matrix(layer.norm1.forward(w.x), L, E), att_in);
  }

  // ---- Q, K, V -----------------------------------------------------------------------
  const Matrix W_in = to_matrix(layer.self_attn.in_proj.weight, 3 * E, E);  // (3E, E): W_q, W_k, W_v
  const Matrix b_in = vector_row(layer.self_attn.in_proj.bias);
  const Matrix QKV = linear(att_in, W_in, b_in);  // (L, 3E)
  const Matrix Q = columns(QKV, h * dk, dk), K = columns(QKV, E + h * dk, dk), V = columns(QKV, 2 * E + h * dk, dk);
  heading(text, format("%d. Queries, keys, values of head %lld (d_k = %lld)", step++, static_cast<long long>(h),
                       static_cast<long long>(dk)));
  print_paragraph(text, format("q = x·W_qᵀ + b_q, k = x·W_kᵀ + b_k, v = x·W_vᵀ + b_v with W (%lld × %lld) each; "
                               "head %lld's are columns %lld-%lld of each, %lld heads × %lld = %lld.",
                               static_cast<long long>(E), static_cast<long long>(E), static_cast<long long>(h),
                               static_cast<long long>(h * dk), static_cast<long long>(h * dk + dk - 1),
                               static_cast<long long>(H), static_cast<long long>(dk), static_cast<long long>(E)));
  walk.show("Q", Q, "q");
  walk.show("K", K, "k");
  walk.show("V", V, "v");

  // ---- scores, softmax: every head, for the check against attention() ------------------
  const double scale = 1.0 / std::sqrt(static_cast<double>(dk));
  std::vector<Matrix> S_heads, P_heads, O_heads;
  for (std::int64_t g = 0; g < H; ++g) {
    const Matrix Qg = columns(QKV, g * dk, dk), Kg = columns(QKV, E + g * dk, dk), Vg = columns(QKV, 2 * E + g * dk, dk);
    Matrix S = scaled(matmul(Qg, transpose(Kg)), scale);  // (L, L)
    if (w.causal) S = causal_masked(S);
    P_heads.push_back(softmax_rows(S));
    O_heads.push_back(matmul(P_heads.back(), Vg));  // (L, dk)
    S_heads.push_back(std::move(S));
  }
  const Matrix& S = S_heads[static_cast<std::size_t>(h)];
  const Matrix& P = P_heads[static_cast<std::size_t>(h)];
  heading(text, format("%d. Scores Q·Kᵀ/√d_k = Q·Kᵀ × %.4f%s", step++, scale, w.causal ? ", causal mask" : ""));
  if (w.causal) print_paragraph(text, "Token i may look at tokens 0..i only: the later keys' scores are −∞.");
  if (L <= 12) {
    MatrixStyle s;
    s.title = "S (rows: queries, columns: keys)";
    s.row_labels = walk.labels();
    s.col_labels = indexed("", L);
    s.precision = 2;
    s.spacing = 1;
    print_block(text, render_matrix(S, s));
  } else {
    print_paragraph(text, format("S is %lld × %lld: token A's row of it is below.", static_cast<long long>(L),
                                 static_cast<long long>(L)));
  }
  heading(text, format("%d. Softmax: token A's row", step++));
  print_paragraph(text, "p_j = exp(s_j − max) / Σ exp(s − max): how A shares out its attention over the keys.");
  for (std::int64_t k = 0; k < L; ++k) {
    text << "   " << pad_right(walk.labels()[k], kTokenLabelWidth + 4)
         << format(" score %9.3f   weight %.4f  ", S(a_pos, k), P(a_pos, k))
         << std::string(static_cast<std::size_t>(std::lround(P(a_pos, k) * 40)), '#') << '\n';
  }
  std::vector<std::int64_t> order(static_cast<std::size_t>(L));
  for (std::int64_t k = 0; k < L; ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t u, std::int64_t v) { return P(a_pos, u) > P(a_pos, v); });
  std::string top;
  for (std::size_t k = 0; k < std::min<std::size_t>(3, order.size()); ++k)
    top += format("%s%s %.3f", k ? ", " : "", quote_value(tokens[order[k]]).c_str(), P(a_pos, order[k]));
  text << "   top keys: " << top << '\n';
  const Tensor& probs_lib = group.layers[static_cast<std::size_t>(o.layer)];  // (H, L, L)
  Matrix P_all(0, L);
  for (const Matrix& p : P_heads) P_all.data.insert(P_all.data.end(), p.data.begin(), p.data.end());
  P_all.rows = H * L;
  checker.check(format("every head's probabilities equal the model's attention() for layer %lld",
                       static_cast<long long>(o.layer)),
                to_matrix(probs_lib, H * L, L), P_all);

  heading(text, format("%d. Weighted sum: token A's output of head %lld", step++, static_cast<long long>(h)));
  print_paragraph(text, "o_A = Σ_j p_j·v_j: the values, weighted by A's row.");
  MatrixStyle os;
  os.title = format("o_A (columns 0-%lld of %lld)", static_cast<long long>(std::min(dk, kShownColumns) - 1),
                    static_cast<long long>(dk));
  os.row_labels = {walk.labels()[a_pos]};
  os.col_labels = indexed("v", std::min(dk, kShownColumns));
  const Matrix o_A = rows(O_heads[static_cast<std::size_t>(h)], a_pos, 1);
  print_block(text, render_matrix(columns(o_A, 0, std::min(dk, kShownColumns)), os));

  heading(text, format("%d. The heads concatenated, and the output projection W_o", step++));
  const Matrix concat = hconcat(O_heads);  // (L, E)
  const Matrix attn = linear(concat, to_matrix(layer.self_attn.out_proj.weight, E_out, E),
                             vector_row(layer.self_attn.out_proj.bias));  // (L, E_out)
  print_paragraph(text, format("All %lld heads' outputs side by side (L × %lld), then ·W_oᵀ + b_o.", static_cast<long long>(H),
                               static_cast<long long>(E)));
  walk.show("attention(x)", attn, "d");
  nn::AttentionMasks masks;
  masks.is_causal = w.causal;
  const Tensor att_in_t = to_tensor(round_to_f32(att_in), {1, L, E});
  checker.check("qkv::nn::MultiheadAttention gives the same rows",
                to_matrix(layer.self_attn.forward(att_in_t, att_in_t, att_in_t, masks), L, E_out), attn);

  // ---- residual, LayerNorm -------------------------------------------------------------
  heading(text, format("%d. Residual%s", step++, pre ? "" : " and LayerNorm (post-LN, as BERT and the original Transformer)"));
  Matrix r = x;
  if (layer.residual_proj.weight.defined()) {
    r = linear(x, to_matrix(layer.residual_proj.weight, E_out, E), vector_row(layer.residual_proj.bias));
    print_paragraph(text, format("This layer changes width (%lld -> %lld), so x is carried across by a learned "
                                 "projection: residual = x·W_rᵀ + b_r.",
                                 static_cast<long long>(E), static_cast<long long>(E_out)));
    checker.check("qkv::nn::Linear (residual_proj) gives the same rows",
                  to_matrix(layer.residual_proj.forward(w.x), L, E_out), r);
  }
  Matrix h1 = add(r, attn);  // (L, E_out)
  if (!pre) {
    print_paragraph(text, format("x + attention(x), then LayerNorm: (v − μ)/√(σ² + ε)·γ + β, ε = %g.", eps));
    const Matrix sum = round_to_f32(h1);
    h1 = layer_norm(sum, g1, b1n, eps);
    walk.show("LN₁(x + attention(x))", h1, "d");
    checker.check("qkv::nn::LayerNorm (norm1) gives the same rows",
                  to_matrix(layer.norm1.forward(to_tensor(sum, {L, E_out})), L, E_out), h1);
  } else {
    print_paragraph(text, "x + attention(LN₁(x)): the residual stream, not normalised.");
    walk.show("x + attention", h1, "d");
  }

  // ---- feed-forward --------------------------------------------------------------------
  const char* act = nn::activation_name(layer.ff.activation);
  heading(text, format("%d. Feed-forward%s: W_1 (%lld × %lld), %s, W_2 (%lld × %lld)", step++,
                       pre ? " on LN₂ (pre-LN)" : "", static_cast<long long>(F), static_cast<long long>(E_out), act,
                       static_cast<long long>(E_out), static_cast<long long>(F)));
  Matrix ff_in = round_to_f32(h1);
  if (pre) {
    const Matrix normed = layer_norm(ff_in, g2, b2n, eps);
    checker.check("qkv::nn::LayerNorm (norm2) gives the same rows",
                  to_matrix(layer.norm2.forward(to_tensor(ff_in, {L, E_out})), L, E_out), normed);
    ff_in = round_to_f32(normed);
  }
  const Matrix hidden = activation(linear(ff_in, to_matrix(layer.ff.linear1.weight, F, E_out),
                                          vector_row(layer.ff.linear1.bias)), layer.ff.activation);  // (L, F)
  const Matrix ffo = linear(hidden, to_matrix(layer.ff.linear2.weight, E_out, F), vector_row(layer.ff.linear2.bias));
  print_paragraph(text, format("FF(v) = %s(v·W_1ᵀ + b_1)·W_2ᵀ + b_2, each token alone.", act));
  walk.show(format("%s(v·W_1ᵀ + b_1)", act), hidden, "f");
  walk.show("FF", ffo, "d");
  checker.check("qkv::nn::FeedForward gives the same rows",
                to_matrix(layer.ff.forward(to_tensor(ff_in, {L, E_out})), L, E_out), ffo);

  // ---- the layer's output --------------------------------------------------------------
  heading(text, format("%d. The layer's output: %s", step++, pre ? "x + FF(LN₂(x))" : "LN₂(x + FF(x))"));
  Matrix y = add(round_to_f32(h1), ffo);
  if (!pre) {
    const Matrix sum = round_to_f32(y);
    y = layer_norm(sum, g2, b2n, eps);
    checker.check("qkv::nn::LayerNorm (norm2) gives the same rows",
                  to_matrix(layer.norm2.forward(to_tensor(sum, {L, E_out})), L, E_out), y);
  }
  walk.show("y", y, "d");
  checker.check("the layer's output equals the model's own forward (its hidden state after this layer)",
                to_matrix(w.output, L, E_out), y);

  text << '\n';
  if (o.json) {
    j["model_type"] = model->model_type();
    j["group"] = w.group;
    j["layer"] = o.layer;
    j["layers"] = layers;
    j["head"] = h;
    j["heads"] = H;
    j["dk"] = dk;
    j["norm"] = pre ? "pre" : "post";
    j["causal"] = w.causal;
    j["tokens"] = tokens;
    j["token"] = a_pos;
    j["x"] = json_matrix(x);
    j["q"] = json_matrix(Q);
    j["k"] = json_matrix(K);
    j["v"] = json_matrix(V);
    j["scores"] = json_matrix(S);
    j["probs_row"] = json_matrix(rows(P, a_pos, 1))[0];
    j["weighted_sum"] = json_matrix(o_A)[0];
    j["attention_output"] = json_matrix(attn);
    j["output"] = json_matrix(y);
    j["checks"] = nlohmann::ordered_json::array();
    for (const Checker::Result& cr : checker.results())
      j["checks"].push_back({{"step", cr.what}, {"max_diff", cr.max_diff}, {"tolerance", cr.tolerance}, {"ok", cr.ok}});
    out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  }
  checker.throw_on_mismatch();
  if (!o.json)
    print_paragraph(out, format("All %zu checks match the step-by-step computation (max |difference| %.1e).",
                                checker.results().size(), checker.max_diff()),
                    0);
  return 0;
}

}  // namespace qkv::cli
