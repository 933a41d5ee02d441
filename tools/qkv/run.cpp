// qkv run: a model on one text, dispatched on config.json's model_type —
//   "bert" (or none): a BERT checkpoint on a text (or pair): the tokens, a summary of the
//     final hidden states and the pooler;
//   "use_lite": the Universal Sentence Encoder lite: the tokens and the sentence embedding;
// then one layer/head's attention as a terminal heatmap; optionally every output to a
// .safetensors file and every layer's attention to an HTML page (qkv::viz).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "io/json_config.h"
#include "print.h"
#include "qkv/bert.h"
#include "qkv/error.h"
#include "qkv/safetensors.h"
#include "qkv/tokenizer.h"
#include "qkv/use_lite.h"
#include "qkv/viz.h"

namespace qkv::cli {
namespace {

struct Stats {
  double mean = 0, std = 0, min = 0, max = 0;
};

Stats stats(const float* p, std::int64_t n) {
  Stats s;
  if (n == 0) return s;
  double sum = 0, sq = 0;
  s.min = s.max = p[0];
  for (std::int64_t i = 0; i < n; ++i) {
    sum += p[i];
    s.min = std::min(s.min, double(p[i]));
    s.max = std::max(s.max, double(p[i]));
  }
  s.mean = sum / double(n);
  for (std::int64_t i = 0; i < n; ++i) sq += (p[i] - s.mean) * (p[i] - s.mean);
  s.std = std::sqrt(sq / double(n));  // population std, as torch.std(unbiased=False)
  return s;
}

std::string stats_line(const Stats& s) {
  return format("mean %+.4f  std %.4f  min %+.4f  max %+.4f", s.mean, s.std, s.min, s.max);
}

// One head of (1, H, L, L) probabilities as a Matrix (rows = queries, columns = keys).
Matrix head_matrix(const Tensor& probs, std::int64_t head) {
  const std::int64_t L = probs.size(2);
  Matrix m(L, probs.size(3));
  for (std::int64_t i = 0; i < L; ++i)
    for (std::int64_t j = 0; j < m.cols; ++j) m(i, j) = probs.get({0, head, i, j});
  return m;
}

// --layer (default the last) and --head checked against the model's sizes.
std::int64_t checked_layer(const RunOptions& o, std::int64_t layers, std::int64_t heads) {
  const std::int64_t layer = o.layer < 0 ? layers - 1 : o.layer;
  if (layers == 0) throw UsageError("--layer", "the model has no layers, so no attention to show");
  if (layer >= layers)
    throw UsageError("--layer", format("must be in [0, %lld) for this model, got %lld",
                                       static_cast<long long>(layers), static_cast<long long>(layer)));
  if (o.head >= heads)
    throw UsageError("--head", format("must be in [0, %lld) for this model, got %lld",
                                      static_cast<long long>(heads), static_cast<long long>(o.head)));
  return layer;
}

void print_tokens(std::ostream& out, const std::vector<std::string>& tokens,
                  const std::vector<std::int64_t>& ids, const std::vector<std::int64_t>& types) {
  out << "tokens (" << ids.size() << "):\n";
  std::string line = "  ";
  for (std::size_t k = 0; k < ids.size(); ++k) {
    std::string item = " " + tokens[k] + "/" + std::to_string(ids[k]) +
                       (!types.empty() && types[k] ? "ᴮ" : "");
    if (display_width(line) + display_width(item) > kMaxWidth) {
      out << line << '\n';
      line = "  ";
    }
    line += item;
  }
  out << line << "\n   (token/id" << (types.empty() ? "" : "; ᴮ marks segment B, token type 1")
      << ")\n\n";
}

void write_html(const RunOptions& o, const std::string& title, const std::vector<std::string>& tokens,
                const std::vector<Tensor>& layers, std::ostream& out) {  // layers: (H, L, L) each
  viz::AttentionGroup group;
  group.name = "self-attention";
  group.query_tokens = tokens;
  group.key_tokens = tokens;
  group.layers = layers;
  viz::AttentionView view;
  view.title = title + " " + o.model;
  view.subtitle = o.pair.empty() ? o.text : o.text + "  ‖  " + o.pair;
  view.groups.push_back(std::move(group));
  viz::write_file(o.html, viz::render_html(view));
  out << (o.output.empty() ? "\n" : "") << "wrote " << printable(o.html) << " (attention of "
      << layers.size() << " layers × " << (layers.empty() ? 0 : layers[0].size(0)) << " heads)\n";
}

// The Universal Sentence Encoder lite on one text: its SentencePiece tokens, the sentence
// embedding, and its two layers' attention.
int run_use_lite(const RunOptions& o, std::ostream& out) {
  if (!o.pair.empty())
    throw UsageError("--pair", "the Universal Sentence Encoder embeds one text; --pair is for BERT");
  const models::UseLiteModel model = models::UseLiteModel::load(o.model);
  const models::UseLiteConfig& c = model.config;
  const auto layers = static_cast<std::int64_t>(c.layer_widths.size());
  const std::int64_t layer = checked_layer(o, layers, c.num_attention_heads);
  bool clipped = false;
  std::vector<std::int64_t> ids;
  try {
    ids = model.encode(o.text, &clipped);
  } catch (const Error& e) {
    throw Error("--text: " + std::string(e.what()), e.kind());
  }
  if (clipped)
    std::cerr << "qkv: warning: --text is longer than the model's " << c.max_length
              << " tokens; only the first " << c.max_length << " are embedded\n";
  QKV_CHECK(!ids.empty(), "--text has no tokens: there is no attention to show");
  std::vector<std::string> tokens;
  for (std::int64_t id : ids) tokens.push_back(model.tokenizer.id_to_token(id));
  const models::UseLiteOutput result = model.embed_ids({ids}, /*attentions=*/true);
  const std::vector<Tensor>& attentions = result.attentions[0];  // per layer (H, L, L)

  out << "model: " << o.model << " (Universal Sentence Encoder lite: " << layers
      << " layers, widths";
  for (std::size_t i = 0; i < c.layer_widths.size(); ++i) out << (i ? " → " : " ") << c.layer_widths[i];
  out << " → " << c.output_size << ", " << c.num_attention_heads << " heads, vocab " << c.vocab_size
      << ")\n\n";
  print_tokens(out, tokens, ids, {});
  const Tensor& e = result.embeddings;  // (1, O), a unit vector
  std::string first;
  for (std::int64_t k = 0; k < std::min<std::int64_t>(e.size(1), 6); ++k)
    first += format(" %+.4f", double{e.data_as<float>()[k]});
  out << "embedding " << e.shape_string() << ": " << stats_line(stats(e.data_as<float>(), e.numel()))
      << "\n   [" << first << " …] (unit length: cosine similarity is a dot product)\n";

  out << "\nattention, layer " << layer << " of " << layers << ", head " << o.head << " of "
      << c.num_attention_heads << " (rows: queries, columns: keys):\n";
  print_attention_heatmap(out, head_matrix(attentions[static_cast<std::size_t>(layer)].unsqueeze(0), o.head),
                          tokens, tokens);
  if (!o.output.empty()) {
    std::vector<float> id_values(ids.begin(), ids.end());
    std::vector<std::pair<std::string, Tensor>> tensors = {
        {"input_ids", Tensor::from_vector({1, static_cast<std::int64_t>(ids.size())}, id_values)},
        {"embedding", e}};
    for (std::size_t n = 0; n < attentions.size(); ++n)
      tensors.emplace_back("attentions." + std::to_string(n), attentions[n].unsqueeze(0));  // (1, H, L, L)
    save_safetensors(o.output, tensors, {{"format", "pt"}, {"input_ids", "F32 values of the ids"}});
    out << "\nwrote " << printable(o.output) << " (input_ids, embedding, attentions.0-" << attentions.size() - 1
        << ")\n";
  }
  if (!o.html.empty()) write_html(o, "Universal Sentence Encoder lite", tokens, attentions, out);
  return 0;
}

}  // namespace

int run_run(const RunOptions& o, std::ostream& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  Inputs inputs;
  add_directory_inputs(inputs, "--model", o.model);
  if (!o.output.empty()) check_output_path("--output", o.output, inputs);
  if (!o.html.empty()) check_output_path("--html", o.html, inputs);
  QKV_CHECK(fs::is_directory(o.model, ec),
            "model directory " << quote_value(o.model) << " does not exist");
  const std::string type =
      JsonConfig::load((fs::path(o.model) / "config.json").string()).get_string("model_type", "bert");
  if (type == "use_lite") return run_use_lite(o, out);
  QKV_CHECK(type == "bert", "model directory " << quote_value(o.model) << ": qkv run knows model_type "
                            "\"bert\" and \"use_lite\", config.json has \"" << type
                            << "\" (GPT-2: qkv generate)");
  const models::BertModel model = models::BertModel::load(o.model);
  warn_unused_tensors(model.weights.unused_tensors, o.model, "BERT");
  const models::BertConfig& c = model.config;
  const std::int64_t layer = checked_layer(o, c.num_hidden_layers, c.num_attention_heads);

  const Tokenizer tokenizer = Tokenizer::load(o.model);
  const WordPieceTokenizer* wp = tokenizer.wordpiece();
  QKV_CHECK(wp != nullptr, "model directory '" << o.model
                                               << "': qkv run needs a WordPiece (BERT) tokenizer "
                                                  "(vocab.txt or tokenizer.json), found "
                                               << (tokenizer.bpe() ? "BPE" : "SentencePiece"));
  Encoding enc;
  try {
    enc = o.pair.empty() ? wp->encode(o.text) : wp->encode_pair(o.text, o.pair);
  } catch (const Error& e) {
    throw Error((o.pair.empty() ? "--text: " : "--text/--pair: ") + std::string(e.what()));
  }
  const auto L = static_cast<std::int64_t>(enc.ids.size());
  QKV_CHECK(L <= c.max_position_embeddings,
            "the input is " << L << " tokens, longer than max_position_embeddings = "
                            << c.max_position_embeddings);

  const models::BertOutput result = model.forward(enc.ids, 1, L, enc.token_type_ids, {}, true);

  out << "model: " << o.model << " (BERT: " << c.num_hidden_layers << " layers, "
      << c.num_attention_heads << " heads, hidden " << c.hidden_size << ", vocab "
      << c.vocab_size << ")\n\n";
  print_tokens(out, enc.tokens, enc.ids, enc.token_type_ids);

  const Tensor& hidden = result.last_hidden_state;  // (1, L, E), contiguous
  const std::int64_t E = c.hidden_size;
  out << "last_hidden_state " << hidden.shape_string() << ": "
      << stats_line(stats(hidden.data_as<float>(), hidden.numel())) << '\n';
  const std::int64_t shown = std::min<std::int64_t>(L, 8);
  for (std::int64_t i = 0; i < shown; ++i) {
    const float* row = hidden.data_as<float>() + i * E;
    std::string first;
    for (std::int64_t e = 0; e < std::min<std::int64_t>(E, 3); ++e)
      first += format(" %+.3f", double(row[e]));
    out << "   " << pad_right(format("%2lld ", static_cast<long long>(i)) +
                                  truncate_display(enc.tokens[static_cast<std::size_t>(i)], 12),
                              16)
        << stats_line(stats(row, E)) << "  [" << first << " …]\n";
  }
  if (shown < L) out << "   … " << (L - shown) << " more tokens\n";
  if (result.pooler_output.defined())
    out << "pooler_output " << result.pooler_output.shape_string() << ": "
        << stats_line(stats(result.pooler_output.data_as<float>(), result.pooler_output.numel()))
        << '\n';
  else
    out << "pooler_output: none (the checkpoint has no pooler)\n";

  out << "\nattention, layer " << layer << " of " << c.num_hidden_layers << ", head " << o.head
      << " of " << c.num_attention_heads << " (rows: queries, columns: keys):\n";
  print_attention_heatmap(out, head_matrix(result.attentions[static_cast<std::size_t>(layer)], o.head),
                          enc.tokens, enc.tokens);

  if (!o.output.empty()) {
    std::vector<float> ids(enc.ids.begin(), enc.ids.end());
    std::vector<float> types(enc.token_type_ids.begin(), enc.token_type_ids.end());
    std::vector<std::pair<std::string, Tensor>> tensors = {
        {"input_ids", Tensor::from_vector({1, L}, ids)},            // (B, L) ids as f32
        {"token_type_ids", Tensor::from_vector({1, L}, types)},     // (B, L) as f32
        {"last_hidden_state", hidden},                              // (B, L, E)
    };
    if (result.pooler_output.defined()) tensors.emplace_back("pooler_output", result.pooler_output);
    for (std::size_t n = 0; n < result.attentions.size(); ++n)
      tensors.emplace_back("attentions." + std::to_string(n), result.attentions[n]);  // (B, H, L, L)
    save_safetensors(o.output, tensors,
                     {{"format", "pt"},
                      {"input_ids", "F32 values of the int64 ids (exact below 2^24)"},
                      {"tokens", [&] {
                         std::string s;
                         for (const auto& t : enc.tokens) s += (s.empty() ? "" : " ") + t;
                         return s;
                       }()}});
    out << "\nwrote " << printable(o.output) << " (input_ids, token_type_ids, last_hidden_state"
        << (result.pooler_output.defined() ? ", pooler_output" : "") << ", attentions.0-"
        << result.attentions.size() - 1 << ")\n";
  }
  if (!o.html.empty()) {
    std::vector<Tensor> layers;
    for (const Tensor& a : result.attentions) layers.push_back(a.select(0, 0));  // (H, L, L)
    write_html(o, "BERT", enc.tokens, layers, out);
  }
  return 0;
}

}  // namespace qkv::cli
