// qkv run: a model of the model registry (qkv/model_registry.h: config.json's model_type)
// on its input — a text (bert, gpt2, use_lite, qkv-seq2seq), an image (qkv-vision) or a
// user's history (qkv-recommender, sasrec) — and its attention:
//   - bert and use_lite in text mode keep their fuller output: the tokens, a summary of the
//     final hidden states and the pooler (bert) or the sentence embedding (use_lite), one
//     layer/head as a terminal heatmap, optionally every output to a .safetensors file;
//   - every other model, and bert/use_lite with --json or --token, through the registry:
//     the tokens and one layer/head's heatmap, or --json (every group, layer and head), or
//     --token T (per layer and head the keys T attends to most);
// and, for every model, --html: every group, layer and head as a qkv::viz page.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "io/json_config.h"
#include "print.h"
#include "qkv/bert.h"
#include "qkv/error.h"
#include "qkv/model_registry.h"
#include "qkv/safetensors.h"
#include "qkv/tokenizer.h"
#include "qkv/use_lite.h"
#include "qkv/viz.h"
#include "models/token_choice.h"

namespace qkv::cli {

using models::parse_token_choice;
using models::token_list;
using models::token_span;
using models::TokenChoice;
using models::TokenSpan;

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

// What a terminal heatmap's rows and columns are, after its layer and head.
constexpr const char* kRowsAreQueries = "rows: queries, columns: keys";

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
  // ids empty: the tokens alone (a model of the registry, whose ids the front end never sees).
  out << "tokens (" << tokens.size() << "):\n";
  std::string line = "  ";
  for (std::size_t k = 0; k < tokens.size(); ++k) {
    std::string item = " ";
    item += printable(tokens[k], 40);
    if (!ids.empty()) item += "/" + std::to_string(ids[k]);
    if (!types.empty() && types[k]) item += "ᴮ";
    if (display_width(line) + display_width(item) > kMaxWidth) {
      out << line << '\n';
      line = "  ";
    }
    line += item;
  }
  out << line << '\n';
  if (!ids.empty())
    out << "   (token/id" << (types.empty() ? "" : "; ᴮ marks segment B, token type 1") << ")\n";
  out << '\n';
}

void write_html(const RunOptions& o, const std::string& title, const std::vector<std::string>& tokens,
                const std::vector<Tensor>& layers, std::ostream& out) {  // layers: (H, L, L) each
  viz::AttentionGroup group;
  group.name = "self-attention";
  group.query_tokens = tokens;
  group.key_tokens = tokens;
  group.layers = layers;
  viz::AttentionView view;
  view.title = viz::page_title(title, o.model);
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

  out << "\nattention, " << layer_head_words(layer, layers, o.head, c.num_attention_heads, kRowsAreQueries)
      << ":\n";
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


// --- Any model of the registry ------------------------------------------------------------

// One group's query position for the choice, or -1 when the token is not among its queries.
std::int64_t query_position(const viz::AttentionGroup& g, const TokenChoice& c) {
  const TokenSpan span = token_span(g.query_tokens, c);
  return span.found() ? span.first : -1;
}

struct Key {
  std::int64_t position;
  double weight;
};

// Row `query` of head `head` of one layer (H, Lq, Lk): its `top` heaviest keys of weight > 0,
// heaviest first, ties by position.
std::vector<Key> top_keys(const Tensor& layer, std::int64_t head, std::int64_t query, std::int64_t top) {
  std::vector<Key> keys;
  for (std::int64_t j = 0; j < layer.size(2); ++j) {
    const double w = layer.get({head, query, j});
    if (w > 0) keys.push_back({j, w});
  }
  std::stable_sort(keys.begin(), keys.end(), [](const Key& x, const Key& y) { return x.weight > y.weight; });
  if (static_cast<std::int64_t>(keys.size()) > top) keys.resize(static_cast<std::size_t>(top));
  return keys;
}

nlohmann::ordered_json header_json(const models::Model& model, const models::ModelAttention& a) {
  nlohmann::ordered_json j;
  j["model_type"] = model.model_type();
  j["description"] = model.description();
  j["input"] = a.view.subtitle;
  j["tokens"] = a.tokens;
  return j;
}

void print_json(std::ostream& out, const nlohmann::ordered_json& j) {
  out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
}

int show_token(const RunOptions& o, const models::Model& model, const models::ModelAttention& a,
               std::ostream& out) {
  std::vector<std::vector<std::string>> queries;
  for (const auto& g : a.view.groups) queries.push_back(g.query_tokens);
  TokenChoice choice;
  try {
    choice = parse_token_choice(o.token, queries);
  } catch (const Error& e) {
    throw UsageError("--token", e.what());
  }
  bool found = false;
  for (const auto& g : a.view.groups) found = found || query_position(g, choice) >= 0;
  if (!found) {
    std::string message = quote_value(o.token) + " is not a token of the input";
    if (choice.occurrence > 0) message = quote_value(choice.name) + " does not occur " +
                                         std::to_string(choice.occurrence) + " times in the input";
    message += "; its tokens: " + token_list(a.tokens);
    for (const auto& g : a.view.groups)
      if (g.query_tokens != a.tokens) message += "; the queries of the " + g.name + ": " + token_list(g.query_tokens);
    throw UsageError("--token", message);
  }
  nlohmann::ordered_json j = header_json(model, a);
  j["token"] = o.token;
  j["top"] = o.top;
  j["groups"] = nlohmann::ordered_json::array();
  if (!o.json)
    out << "model: " << printable(o.model) << " (" << printable(model.description()) << ")\n"
        << "input: " << printable(a.view.subtitle) << "\n\n";
  for (const auto& g : a.view.groups) {
    const std::int64_t q = query_position(g, choice);
    if (q < 0) continue;
    nlohmann::ordered_json jg;
    jg["name"] = g.name;
    jg["query"] = q;
    jg["query_token"] = g.query_tokens[static_cast<std::size_t>(q)];
    jg["layers"] = nlohmann::ordered_json::array();
    if (!o.json)
      out << g.name << ": the keys " << quote_value(g.query_tokens[static_cast<std::size_t>(q)])
          << " (query " << q << ") attends to most, top " << o.top << " per head:\n";
    for (std::size_t l = 0; l < g.layers.size(); ++l) {
      const Tensor& layer = g.layers[l];  // (H, Lq, Lk)
      nlohmann::ordered_json jl;
      jl["layer"] = l;
      jl["heads"] = nlohmann::ordered_json::array();
      for (std::int64_t h = 0; h < layer.size(0); ++h) {
        const std::vector<Key> keys = top_keys(layer, h, q, o.top);
        nlohmann::ordered_json jh;
        jh["head"] = h;
        jh["keys"] = nlohmann::ordered_json::array();
        std::string line = format("  layer %zu, head %lld:", l, static_cast<long long>(h));
        for (const Key& k : keys) {
          const std::string& t = g.key_tokens[static_cast<std::size_t>(k.position)];
          jh["keys"].push_back({{"position", k.position}, {"token", t}, {"weight", k.weight}});
          line += "  " + printable(t, 30) + format(" %.3f", k.weight);
        }
        jl["heads"].push_back(std::move(jh));
        if (!o.json) out << line << '\n';
      }
      jg["layers"].push_back(std::move(jl));
    }
    j["groups"].push_back(std::move(jg));
    if (!o.json) out << '\n';
  }
  if (o.json) print_json(out, j);
  return 0;
}

void show_all_json(const models::Model& model, const models::ModelAttention& a, std::ostream& out) {
  nlohmann::ordered_json j = header_json(model, a);
  j["groups"] = nlohmann::ordered_json::array();
  for (const auto& g : a.view.groups) {
    nlohmann::ordered_json jg;
    jg["name"] = g.name;
    jg["query_tokens"] = g.query_tokens;
    jg["key_tokens"] = g.key_tokens;
    nlohmann::ordered_json layers = nlohmann::ordered_json::array();  // [layer][head][query][key]
    for (const Tensor& layer : g.layers) {
      const Tensor p = layer.to(DType::f32).contiguous();  // (H, Lq, Lk)
      const float* v = p.data_as<float>();
      nlohmann::ordered_json heads = nlohmann::ordered_json::array();
      for (std::int64_t h = 0; h < p.size(0); ++h) {
        nlohmann::ordered_json rows = nlohmann::ordered_json::array();
        for (std::int64_t i = 0; i < p.size(1); ++i)
          rows.push_back(std::vector<float>(v + (h * p.size(1) + i) * p.size(2), v + (h * p.size(1) + i + 1) * p.size(2)));
        heads.push_back(std::move(rows));
      }
      layers.push_back(std::move(heads));
    }
    jg["attention"] = std::move(layers);
    j["groups"].push_back(std::move(jg));
  }
  print_json(out, j);
}

// The first group's --layer/--head as a terminal heatmap (too wide a matrix: a pointer to
// --token, --json and --html instead).
void show_heatmap(const RunOptions& o, const models::Model& model, const models::ModelAttention& a,
                  std::ostream& out) {
  const viz::AttentionGroup& g = a.view.groups.front();
  const auto layers = static_cast<std::int64_t>(g.layers.size());
  const std::int64_t layer = checked_layer(o, layers, layers ? g.layers[0].size(0) : 0);
  out << "model: " << printable(o.model) << " (" << printable(model.description()) << ")\n"
      << "input: " << printable(a.view.subtitle) << "\n\n";
  print_tokens(out, a.tokens, {}, {});
  for (const auto& other : a.view.groups)
    if (&other != &g) out << "also: " << other.name << " (" << other.layers.size() << " layers; --json, --token, --html)\n";
  constexpr std::size_t kMaxColumns = 64;  // wider does not fit a terminal's heatmap
  if (g.key_tokens.size() > kMaxColumns) {
    out << "\n" << g.name << ": " << g.key_tokens.size() << " keys, too many for a terminal heatmap; "
        << "see --token T, --json or --html\n";
    return;
  }
  const Tensor& p = g.layers[static_cast<std::size_t>(layer)];  // (H, Lq, Lk)
  out << "\n" << g.name << ", " << layer_head_words(layer, layers, o.head, p.size(0), kRowsAreQueries) << ":\n";
  print_attention_heatmap(out, head_matrix(p.unsqueeze(0), o.head), g.query_tokens, g.key_tokens);
}

int run_registered(const RunOptions& o, std::ostream& out) {
  const std::unique_ptr<models::Model> model = models::load_model(o.model);
  const models::AttentionInput input = model->attention_input();
  const std::string type = model->model_type();
  if (input == models::AttentionInput::none)
    throw Error("model directory " + quote_path(o.model) + " (" + type + ", " + model->description() +
                ") has no attention to show");
  const auto refuse = [&](bool given, const char* option, const char* what) {
    if (given)
      throw UsageError(option, std::string("is for ") + what + "; " + o.model + " is " + type + ", whose "
                               "input is " + models::to_string(input));
  };
  refuse(o.has_text && input != models::AttentionInput::text, "--text", "text models");
  refuse(!o.pair.empty() && type != "bert", "--pair", "bert");
  refuse(!o.image.empty() && input != models::AttentionInput::image, "--image", "image models (qkv-vision)");
  refuse(o.has_index && input != models::AttentionInput::image, "--index", "image models (qkv-vision)");
  refuse(o.has_user && input != models::AttentionInput::user, "--user", "sasrec recommenders");
  refuse(!o.output.empty(), "--output", "bert and use_lite without --json or --token");
  models::AttentionRequest r;
  r.text = o.text;
  r.pair = o.pair;
  r.image_path = o.image;
  r.image_index = o.index;
  r.user = o.user;
  if (input == models::AttentionInput::text && !o.has_text)
    throw UsageError("--text", type + " reads a text: give --text");
  if (input == models::AttentionInput::image && o.image.empty())
    throw UsageError("--image", type + " reads an image: give --image FILE (and --index N for an IDX file)");
  if (input == models::AttentionInput::user && !o.has_user)
    throw UsageError("--user", type + " attends over a user's history: give --user ID");
  const models::ModelAttention a = model->attention(r);
  if (!o.token.empty()) show_token(o, *model, a, out);
  else if (o.json) show_all_json(*model, a, out);
  else show_heatmap(o, *model, a, out);
  if (!o.html.empty()) {
    viz::write_file(o.html, viz::render_html(a.view));
    std::size_t layers = 0;
    for (const auto& g : a.view.groups) layers += g.layers.size();
    (o.json ? std::cerr : out) << "wrote " << printable(o.html) << " (attention of " << a.view.groups.size()
                               << (a.view.groups.size() == 1 ? " group, " : " groups, ") << layers
                               << " layers in all)\n";
  }
  return 0;
}

}  // namespace

int run_run(const RunOptions& o, std::ostream& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  Inputs inputs;
  add_directory_inputs(inputs, "--model", o.model);
  add_input(inputs, "--image", o.image);
  if (!o.output.empty()) check_output_path("--output", o.output, inputs);
  if (!o.html.empty()) check_output_path("--html", o.html, inputs);
  QKV_CHECK(fs::is_directory(o.model, ec),
            "model directory " << quote_path(o.model) << " does not exist");
  const std::string type = models::model_type_of(o.model);  // refuses unknown types, listing the known
  const bool detailed = (type == "bert" || type == "use_lite") && !o.json && o.token.empty();
  if (!detailed) return run_registered(o, out);
  if (!o.has_text) throw UsageError("--text", type + " reads a text: give --text");
  const auto refuse = [&](bool given, const char* option) {
    if (given) throw UsageError(option, "is not for " + type + ", whose input is a text");
  };
  refuse(!o.image.empty(), "--image");
  refuse(o.has_index, "--index");
  refuse(o.has_user, "--user");
  if (type == "use_lite") return run_use_lite(o, out);
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

  out << "\nattention, "
      << layer_head_words(layer, c.num_hidden_layers, o.head, c.num_attention_heads, kRowsAreQueries) << ":\n";
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
