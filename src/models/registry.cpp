// The model registry (qkv/model_registry.h) and the library's own model types: bert, gpt2
// and use_lite, each a wrapper of its loader (BertModel::load, Gpt2Model::load,
// UseLiteModel::load) that tokenizes a text and returns every layer's attention.
#include "qkv/model_registry.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <sstream>
#include <utility>

#include "io/json_config.h"
#include "qkv/bert.h"
#include "qkv/error.h"
#include "qkv/gpt2.h"
#include "qkv/tokenizer.h"
#include "qkv/use_lite.h"

namespace qkv::models {

const char* to_string(AttentionInput input) {
  switch (input) {
    case AttentionInput::none: return "none";
    case AttentionInput::text: return "text";
    case AttentionInput::image: return "image";
    case AttentionInput::user: return "user";
  }
  return "none";
}

const char* describe(AttentionInput input) {
  switch (input) {
    case AttentionInput::image: return "an image";
    case AttentionInput::user: return "a user's history";
    case AttentionInput::none: return "nothing (it has no attention)";
    case AttentionInput::text: break;
  }
  return "a text";
}

namespace {

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, ModelLoader>& registry() {
  static std::map<std::string, ModelLoader> r;
  return r;
}

// (1, H, Lq, Lk) per layer -> (H, Lq, Lk) per layer, as viz::AttentionGroup holds them.
std::vector<Tensor> drop_batch(const std::vector<Tensor>& layers) {
  std::vector<Tensor> out;
  for (const Tensor& t : layers) out.push_back(t.select(0, 0));
  return out;
}

ModelAttention self_attention(std::string name, std::string title, const std::string& text,
                              std::vector<std::string> tokens, std::vector<Tensor> layers) {
  ModelAttention a;
  a.tokens = tokens;
  a.view.title = std::move(title);
  a.view.subtitle = text;
  a.view.groups.push_back({std::move(name), tokens, std::move(tokens), std::move(layers)});
  return a;
}

void check_text(const AttentionRequest& r, const std::string& type) {
  QKV_CHECK(!r.text.empty(), type << " shows the attention over a text: give a non-empty text");
  QKV_CHECK(r.pair.empty() || type == "bert", "a second segment (pair) is for bert, not " << type);
}

class BertEntry final : public Model {
 public:
  explicit BertEntry(const std::string& dir)
      : dir_(dir), model_(BertModel::load(dir)), tokenizer_(Tokenizer::load(dir)) {
    QKV_CHECK(tokenizer_.wordpiece() != nullptr,
              "model directory '" << dir << "': a BERT model needs a WordPiece tokenizer (vocab.txt or "
                                      "tokenizer.json), found "
                                   << (tokenizer_.bpe() ? "BPE" : "SentencePiece"));
  }
  std::string model_type() const override { return "bert"; }
  std::string description() const override {
    const BertConfig& c = model_.config;
    std::ostringstream s;
    s << "BERT: " << c.num_hidden_layers << " layers, " << c.num_attention_heads << " heads, hidden "
      << c.hidden_size << ", vocab " << c.vocab_size;
    return s.str();
  }
  AttentionInput attention_input() const override { return AttentionInput::text; }
  ModelAttention attention(const AttentionRequest& r) const override {
    const Encoding enc = encode(r);
    const auto L = static_cast<std::int64_t>(enc.ids.size());
    const BertOutput out = model_.forward(enc.ids, 1, L, enc.token_type_ids, {}, true);
    return self_attention("self-attention", viz::page_title("BERT", dir_), r.text, enc.tokens, drop_batch(out.attentions));
  }
  LayerWalk layer_walk(const AttentionRequest& r, std::int64_t layer) const override {
    const Encoding enc = encode(r);
    const auto L = static_cast<std::int64_t>(enc.ids.size());
    const BertOutput out = model_.forward(enc.ids, 1, L, enc.token_type_ids, {}, false, true);
    LayerWalk w;
    w.tokens = enc.tokens;
    w.group = "self-attention";
    w.about = "BERT's encoder layers are post-norm, as the original Transformer: LayerNorm after each residual";
    if (layer < 0 || layer >= model_.config.num_hidden_layers) return walk_layer(w, out.hidden_states, {}, layer);
    return walk_layer(w, out.hidden_states, model_.layer(layer), layer);
  }

 private:
  std::string dir_;
  BertModel model_;
  Tokenizer tokenizer_;

  Encoding encode(const AttentionRequest& r) const {
    check_text(r, "bert");
    const WordPieceTokenizer& wp = *tokenizer_.wordpiece();
    Encoding enc = r.pair.empty() ? wp.encode(r.text) : wp.encode_pair(r.text, r.pair);
    QKV_CHECK(static_cast<std::int64_t>(enc.ids.size()) <= model_.config.max_position_embeddings,
              "the text is " << enc.ids.size() << " tokens, longer than max_position_embeddings = "
                             << model_.config.max_position_embeddings);
    return enc;
  }
};

class Gpt2Entry final : public Model {
 public:
  explicit Gpt2Entry(const std::string& dir)
      : dir_(dir), model_(Gpt2Model::load(dir)), tokenizer_(Tokenizer::load(dir)) {
    QKV_CHECK(tokenizer_.bpe() != nullptr, "model directory '" << dir
                                               << "': GPT-2 needs a byte-level BPE tokenizer (vocab.json + "
                                                  "merges.txt or tokenizer.json)");
  }
  std::string model_type() const override { return "gpt2"; }
  std::string description() const override {
    const Gpt2Config& c = model_.config;
    std::ostringstream s;
    s << "GPT-2: " << c.n_layer << " layers, " << c.n_head << " heads, n_embd " << c.n_embd << ", vocab "
      << c.vocab_size << ", causal";
    return s.str();
  }
  AttentionInput attention_input() const override { return AttentionInput::text; }
  ModelAttention attention(const AttentionRequest& r) const override {
    std::vector<std::string> tokens;
    const std::vector<std::int64_t> ids = encode(r, tokens);
    std::vector<Tensor> layers;
    model_.forward_full(ids, &layers);  // n_layer × (1, H, L, L), as qkv generate --html
    return self_attention("causal self-attention", viz::page_title("GPT-2", dir_), r.text, std::move(tokens),
                          drop_batch(layers));
  }
  LayerWalk layer_walk(const AttentionRequest& r, std::int64_t layer) const override {
    LayerWalk w;
    const std::vector<std::int64_t> ids = encode(r, w.tokens);
    std::vector<Tensor> hidden;
    model_.weights.forward(ids, 1, static_cast<std::int64_t>(ids.size()), 0, nullptr, nullptr, nullptr, &hidden);
    w.group = "causal self-attention";
    w.about = "GPT-2's blocks are pre-norm: LayerNorm before the attention and before the feed-forward, "
              "on the residual stream's copy; the scores are causally masked";
    w.causal = true;
    const bool exists = layer >= 0 && layer < model_.config.n_layer;
    return walk_layer(w, hidden, exists ? model_.weights.h[static_cast<std::size_t>(layer)] : nn::TransformerEncoderLayer{},
                      layer);
  }

 private:
  std::string dir_;
  Gpt2Model model_;
  Tokenizer tokenizer_;

  // The text's ids; `tokens` receives the vocabulary's strings ("Ġit": byte-level, Ġ a space).
  std::vector<std::int64_t> encode(const AttentionRequest& r, std::vector<std::string>& tokens) const {
    check_text(r, "gpt2");
    const BpeTokenizer& bpe = *tokenizer_.bpe();
    std::vector<std::int64_t> ids = bpe.encode(r.text);
    QKV_CHECK(!ids.empty(), "the text has no tokens");
    QKV_CHECK(static_cast<std::int64_t>(ids.size()) <= model_.config.n_positions,
              "the text is " << ids.size() << " tokens, longer than n_positions = " << model_.config.n_positions);
    for (const std::int64_t id : ids) tokens.push_back(bpe.id_to_token(id));
    return ids;
  }
};

class UseLiteEntry final : public Model {
 public:
  explicit UseLiteEntry(const std::string& dir) : dir_(dir), model_(UseLiteModel::load(dir)) {}
  std::string model_type() const override { return "use_lite"; }
  std::string description() const override {
    const UseLiteConfig& c = model_.config;
    std::ostringstream s;
    s << "Universal Sentence Encoder lite: " << c.layer_widths.size() << " layers, "
      << c.num_attention_heads << " heads, vocab " << c.vocab_size;
    return s.str();
  }
  AttentionInput attention_input() const override { return AttentionInput::text; }
  ModelAttention attention(const AttentionRequest& r) const override {
    std::vector<std::string> tokens;
    const std::vector<std::int64_t> ids = encode(r, tokens);
    UseLiteOutput out = model_.embed_ids({ids}, /*attentions=*/true);
    return self_attention("self-attention", viz::page_title("Universal Sentence Encoder lite", dir_), r.text,
                          std::move(tokens), std::move(out.attentions[0]));  // per layer (H, L, L)
  }
  LayerWalk layer_walk(const AttentionRequest& r, std::int64_t layer) const override {
    LayerWalk w;
    const std::vector<std::int64_t> ids = encode(r, w.tokens);
    w.group = "self-attention";
    w.about = "USE-lite's layers are pre-norm with ReLU; a layer that changes width (layer 0) carries its "
              "residual through a learned projection, residual_proj, instead of the identity";
    const auto n = static_cast<std::int64_t>(model_.config.layer_widths.size());
    const bool exists = layer >= 0 && layer < n;
    return walk_layer(w, model_.hidden_states(ids),
                      exists ? model_.layer(static_cast<std::size_t>(layer)) : nn::TransformerEncoderLayer{}, layer);
  }

 private:
  std::string dir_;
  UseLiteModel model_;

  std::vector<std::int64_t> encode(const AttentionRequest& r, std::vector<std::string>& tokens) const {
    check_text(r, "use_lite");
    std::vector<std::int64_t> ids = model_.encode(r.text);  // clipped to max_length
    QKV_CHECK(!ids.empty(), "the text has no tokens: there is no attention to show");
    for (const std::int64_t id : ids) tokens.push_back(model_.tokenizer.id_to_token(id));
    return ids;
  }
};

template <class Entry>
ModelLoader loader() {
  return [](const std::string& dir) -> std::unique_ptr<Model> { return std::make_unique<Entry>(dir); };
}

}  // namespace

void register_model_type(const std::string& model_type, ModelLoader loader) {
  QKV_CHECK(!model_type.empty(), "register_model_type: the model_type must not be empty");
  QKV_CHECK(loader != nullptr, "register_model_type: no loader for '" << model_type << "'");
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry()[model_type] = std::move(loader);
}

void register_library_model_types() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_model_type("bert", loader<BertEntry>());
    register_model_type("gpt2", loader<Gpt2Entry>());
    register_model_type("use_lite", loader<UseLiteEntry>());
  });
}

std::vector<std::string> model_types() {
  register_library_model_types();
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<std::string> out;
  for (const auto& [name, _] : registry()) out.push_back(name);
  return out;  // std::map: sorted
}

std::string model_type_of(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  QKV_CHECK(fs::is_directory(dir, ec), "model directory '" << dir << "' does not exist");
  const std::string path = (fs::path(dir) / "config.json").string();
  const std::string type = JsonConfig::load(path).get_string("model_type", "bert");
  const std::vector<std::string> known = model_types();
  if (std::find(known.begin(), known.end(), type) == known.end()) {
    std::string list;
    for (const std::string& k : known) list += (list.empty() ? "\"" : ", \"") + k + "\"";
    throw Error(path + ": unknown model_type \"" + type + "\"; the known model types are " + list);
  }
  return type;
}

std::unique_ptr<Model> load_model(const std::string& dir) {
  const std::string type = model_type_of(dir);
  ModelLoader load;
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    load = registry().at(type);
  }
  return load(dir);
}

}  // namespace qkv::models
