// BERT: Hugging Face BertModel (transformers/models/bert/modeling_bert.py) on qkv's layers.
#include "qkv/bert.h"

#include <cmath>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include "io/json_config.h"
#include "models/checkpoint.h"
#include "qkv/error.h"

namespace qkv::models {
namespace {

// Finds HF names in a checkpoint, with or without "bert.", and checks shapes.
class Lookup {
 public:
  Lookup(const SafeTensors& tensors, std::string label)
      : tensors_(tensors), label_(std::move(label)) {
    prefix_ = tensors_.contains("bert.embeddings.word_embeddings.weight") ? "bert." : "";
  }

  bool contains(const std::string& name) const { return tensors_.contains(prefix_ + name); }
  const std::string& prefix() const { return prefix_; }
  const std::set<std::string>& read() const { return read_; }

  // The tensor `name` (after the prefix) as f32: a view into the loaded file when f32.
  Tensor get(const std::string& name, const Shape& shape) const {
    const std::string full = prefix_ + name;
    QKV_CHECK(tensors_.contains(full), label_ << ": missing tensor '" << full << "' of shape "
                                              << shape_to_string(shape));
    return checked(full, shape);
  }

  // A LayerNorm parameter: "<name>.weight" or "<name>.gamma" (and bias / beta).
  Tensor get_norm(const std::string& norm, bool weight, const Shape& shape) const {
    const std::string modern = prefix_ + norm + (weight ? ".weight" : ".bias");
    const std::string legacy = prefix_ + norm + (weight ? ".gamma" : ".beta");
    if (tensors_.contains(modern)) return checked(modern, shape);
    if (tensors_.contains(legacy)) return checked(legacy, shape);
    throw Error(label_ + ": missing tensor '" + modern + "' (or '" + legacy + "') of shape " +
                shape_to_string(shape));
  }

 private:
  Tensor checked(const std::string& full, const Shape& shape) const {
    const TensorInfo& info = tensors_.info(full);
    QKV_CHECK(info.shape == shape, label_ << ": tensor '" << full << "' must have shape "
                                          << shape_to_string(shape) << ", got "
                                          << shape_to_string(info.shape));
    Tensor t = tensors_.get(full);  // view when aligned (always for F32 files we know)
    if (t.dtype() != DType::f32) t = t.to(DType::f32);
    detail::check_finite(t, label_, full);
    read_.insert(full);
    return t;
  }

  const SafeTensors& tensors_;
  std::string label_;
  std::string prefix_;
  mutable std::set<std::string> read_;  // the full names get() and get_norm() returned
};

constexpr std::int64_t kMaxSize = detail::kMaxConfigSize;
using detail::config_size;

BertConfig read_config(const JsonConfig& json) {
  const std::string type = json.get_string("model_type", "bert");
  QKV_CHECK(type == "bert", json.label() << ": model_type must be \"bert\", got \"" << type
                                         << "\"");
  BertConfig c;
  c.vocab_size = config_size(json, "vocab_size");
  c.hidden_size = config_size(json, "hidden_size");
  // A model without layers is embeddings and a LayerNorm: no config.json of a real BERT
  // says so, and running it would answer without attention, so it is refused.
  c.num_hidden_layers = config_size(json, "num_hidden_layers");
  c.num_attention_heads = config_size(json, "num_attention_heads");
  QKV_CHECK(c.hidden_size % c.num_attention_heads == 0,
            json.label() << ": hidden_size " << c.hidden_size
                         << " must be a multiple of num_attention_heads "
                         << c.num_attention_heads);
  c.intermediate_size = config_size(json, "intermediate_size");
  c.max_position_embeddings = config_size(json, "max_position_embeddings");
  c.type_vocab_size = json.has("type_vocab_size") ? config_size(json, "type_vocab_size") : 2;
  c.layer_norm_eps = json.get_double("layer_norm_eps", 1e-12);
  // Checked as LayerNorm uses it, in float: 1e39 is finite as a double only.
  QKV_CHECK(c.layer_norm_eps >= 0 && std::isfinite(static_cast<float>(c.layer_norm_eps)),
            json.label() << ": \"layer_norm_eps\" must be >= 0 and finite as a float32, got "
                         << c.layer_norm_eps);
  const std::string act = json.get_string("hidden_act", "gelu");
  if (act == "gelu") {
    c.gelu = nn::GeluApproximation::none;
  } else if (act == "gelu_new" || act == "gelu_pytorch_tanh") {
    c.gelu = nn::GeluApproximation::tanh;
  } else {
    throw Error(json.label() + ": hidden_act must be \"gelu\", \"gelu_new\" or "
                               "\"gelu_pytorch_tanh\", got \"" + act + "\"");
  }
  const std::string pos = json.get_string("position_embedding_type", "absolute");
  QKV_CHECK(pos == "absolute", json.label()
                                   << ": position_embedding_type must be \"absolute\", got \""
                                   << pos << "\"");
  return c;
}

}  // namespace

BertConfig BertConfig::from_json(const std::string& text, std::string label) {
  return read_config(JsonConfig::parse(text, std::move(label)));
}

BertConfig BertConfig::from_file(const std::string& path) {
  return read_config(JsonConfig::load(path));
}

BertWeights BertWeights::load(const BertConfig& c, const SafeTensors& tensors,
                              const std::string& label) {
  const Lookup t(tensors, label);
  const std::int64_t E = c.hidden_size, F = c.intermediate_size;
  BertWeights w;
  w.word_embeddings = t.get("embeddings.word_embeddings.weight", {c.vocab_size, E});
  w.position_embeddings =
      t.get("embeddings.position_embeddings.weight", {c.max_position_embeddings, E});
  w.token_type_embeddings = t.get("embeddings.token_type_embeddings.weight", {c.type_vocab_size, E});
  w.embeddings_norm_weight = t.get_norm("embeddings.LayerNorm", true, {E});
  w.embeddings_norm_bias = t.get_norm("embeddings.LayerNorm", false, {E});
  for (std::int64_t n = 0; n < c.num_hidden_layers; ++n) {
    const std::string p = "encoder.layer." + std::to_string(n) + ".";
    BertLayerWeights l;
    l.query_weight = t.get(p + "attention.self.query.weight", {E, E});
    l.query_bias = t.get(p + "attention.self.query.bias", {E});
    l.key_weight = t.get(p + "attention.self.key.weight", {E, E});
    l.key_bias = t.get(p + "attention.self.key.bias", {E});
    l.value_weight = t.get(p + "attention.self.value.weight", {E, E});
    l.value_bias = t.get(p + "attention.self.value.bias", {E});
    l.attention_output_weight = t.get(p + "attention.output.dense.weight", {E, E});
    l.attention_output_bias = t.get(p + "attention.output.dense.bias", {E});
    l.attention_norm_weight = t.get_norm(p + "attention.output.LayerNorm", true, {E});
    l.attention_norm_bias = t.get_norm(p + "attention.output.LayerNorm", false, {E});
    l.intermediate_weight = t.get(p + "intermediate.dense.weight", {F, E});
    l.intermediate_bias = t.get(p + "intermediate.dense.bias", {F});
    l.output_weight = t.get(p + "output.dense.weight", {E, F});
    l.output_bias = t.get(p + "output.dense.bias", {E});
    l.output_norm_weight = t.get_norm(p + "output.LayerNorm", true, {E});
    l.output_norm_bias = t.get_norm(p + "output.LayerNorm", false, {E});
    w.layers.push_back(std::move(l));
  }
  // The pooler is optional (BertModel(add_pooling_layer=False), BertForMaskedLM exports);
  // half a pooler is an error.
  if (t.contains("pooler.dense.weight") || t.contains("pooler.dense.bias")) {
    w.pooler_weight = t.get("pooler.dense.weight", {E, E});
    w.pooler_bias = t.get("pooler.dense.bias", {E});
  }
  // What BertModel knowingly leaves: the pre-training heads (cls.*, never prefixed) and the
  // position_ids buffer. Anything else unread is reported, as Hugging Face reports
  // unexpected keys.
  const std::string prefix = t.prefix();
  const auto ignored = [&](const std::string& name) {
    return name.starts_with("cls.") || name == prefix + "embeddings.position_ids";
  };
  w.unused_tensors = detail::unused_tensors(
      tensors, t.read(), ignored,
      {{prefix + "encoder.layer.", c.num_hidden_layers, "num_hidden_layers"}}, label);
  return w;
}

namespace {

// query, key and value stacked as self_attn.in_proj holds them: weights (3E, E) or biases (3E).
Tensor stacked_qkv(const BertLayerWeights& l, bool bias) {
  const std::int64_t E = l.query_weight.size(0);
  Tensor stacked = bias ? Tensor::empty({3 * E}) : Tensor::empty({3 * E, E});
  const Tensor* parts[3] = {bias ? &l.query_bias : &l.query_weight, bias ? &l.key_bias : &l.key_weight,
                            bias ? &l.value_bias : &l.value_weight};
  for (std::int64_t i = 0; i < 3; ++i) stacked.slice(0, i * E, (i + 1) * E).copy_from(*parts[i]);
  return stacked;
}

// Layer n of the model as an nn::TransformerEncoderLayer (post-norm, GELU) on the
// checkpoint's tensors, its products packed. Filled, not constructed: no random
// initialisation to discard.
nn::TransformerEncoderLayer encoder_layer(const BertConfig& c, const BertLayerWeights& l) {
  const std::int64_t E = c.hidden_size;
  nn::TransformerEncoderLayer layer;
  layer.config = {.d_model = E,
                  .nhead = c.num_attention_heads,
                  .dim_feedforward = c.intermediate_size,
                  .activation = c.gelu == nn::GeluApproximation::tanh ? nn::Activation::gelu_tanh
                                                                      : nn::Activation::gelu,
                  .layer_norm_eps = c.layer_norm_eps,
                  .norm_first = false,
                  .bias = true};
  nn::MultiheadAttention& sa = layer.self_attn;
  sa.config = {.embed_dim = E, .num_heads = c.num_attention_heads, .bias = true, .kdim = E, .vdim = E};
  // Stacked only to be packed: the (3E, E) f32 copy goes when the packed one exists.
  sa.in_proj.weight = stacked_qkv(l, false);
  sa.in_proj.bias = stacked_qkv(l, true);
  sa.out_proj.weight = l.attention_output_weight;
  sa.out_proj.bias = l.attention_output_bias;
  layer.ff.activation = layer.config.activation;
  layer.ff.linear1.weight = l.intermediate_weight;
  layer.ff.linear1.bias = l.intermediate_bias;
  layer.ff.linear2.weight = l.output_weight;
  layer.ff.linear2.bias = l.output_bias;
  for (auto [norm, weight, bias] : {std::tuple{&layer.norm1, &l.attention_norm_weight, &l.attention_norm_bias},
                                    std::tuple{&layer.norm2, &l.output_norm_weight, &l.output_norm_bias}}) {
    norm->normalized_shape = {E};
    norm->eps = c.layer_norm_eps;
    norm->weight = *weight;
    norm->bias = *bias;
  }
  layer.pack(DType::f32);
  sa.in_proj.weight = Tensor();  // the packed copy serves inference; the checkpoint has the rows
  return layer;
}

}  // namespace

namespace {

// Weights built by hand (not by BertWeights::load) must fit the config as well: forward
// trusts these shapes.
void check_weights(const BertConfig& c, const BertWeights& w) {
  const auto size = [](std::int64_t v) { return v >= 1 && v <= kMaxSize; };
  QKV_CHECK(size(c.num_hidden_layers) && size(c.num_attention_heads) && size(c.hidden_size) &&
                c.hidden_size % c.num_attention_heads == 0 && size(c.vocab_size) &&
                size(c.intermediate_size) && size(c.max_position_embeddings) &&
                size(c.type_vocab_size),
            "BertModel: the config's sizes must be in [1, " << kMaxSize << "], with hidden_size ("
                << c.hidden_size << ") a multiple of num_attention_heads ("
                << c.num_attention_heads << "), got num_hidden_layers " << c.num_hidden_layers
                << ", vocab_size " << c.vocab_size << ", intermediate_size "
                << c.intermediate_size << ", max_position_embeddings "
                << c.max_position_embeddings << ", type_vocab_size " << c.type_vocab_size);
  QKV_CHECK(static_cast<std::int64_t>(w.layers.size()) == c.num_hidden_layers,
            "BertModel: weights have " << w.layers.size() << " layers, config "
                                       << c.num_hidden_layers);
  const std::int64_t E = c.hidden_size, F = c.intermediate_size;
  const auto check = [](const Tensor& t, const Shape& shape, const std::string& name) {
    QKV_CHECK(t.defined() && t.dtype() == DType::f32 && t.shape() == shape,
              "BertModel: weight " << name << " must be f32 of shape " << shape_to_string(shape)
                                   << ", got "
                                   << (t.defined() ? std::string(dtype_name(t.dtype())) + " " +
                                                         t.shape_string()
                                                   : std::string("undefined")));
  };
  check(w.word_embeddings, {c.vocab_size, E}, "word_embeddings");
  check(w.position_embeddings, {c.max_position_embeddings, E}, "position_embeddings");
  check(w.token_type_embeddings, {c.type_vocab_size, E}, "token_type_embeddings");
  check(w.embeddings_norm_weight, {E}, "embeddings_norm_weight");
  check(w.embeddings_norm_bias, {E}, "embeddings_norm_bias");
  for (std::size_t n = 0; n < w.layers.size(); ++n) {
    const BertLayerWeights& l = w.layers[n];
    const std::string p = "layers[" + std::to_string(n) + "].";
    using Named = std::initializer_list<std::pair<const Tensor*, const char*>>;
    for (auto [t, name] : Named{{&l.query_weight, "query_weight"},
                           {&l.key_weight, "key_weight"},
                           {&l.value_weight, "value_weight"},
                           {&l.attention_output_weight, "attention_output_weight"}})
      check(*t, {E, E}, p + name);
    for (auto [t, name] : Named{{&l.query_bias, "query_bias"},
                           {&l.key_bias, "key_bias"},
                           {&l.value_bias, "value_bias"},
                           {&l.attention_output_bias, "attention_output_bias"},
                           {&l.attention_norm_weight, "attention_norm_weight"},
                           {&l.attention_norm_bias, "attention_norm_bias"},
                           {&l.output_bias, "output_bias"},
                           {&l.output_norm_weight, "output_norm_weight"},
                           {&l.output_norm_bias, "output_norm_bias"}})
      check(*t, {E}, p + name);
    check(l.intermediate_weight, {F, E}, p + "intermediate_weight");
    check(l.intermediate_bias, {F}, p + "intermediate_bias");
    check(l.output_weight, {E, F}, p + "output_weight");
  }
  QKV_CHECK(w.pooler_weight.defined() == w.pooler_bias.defined(),
            "BertModel: pooler_weight and pooler_bias must be both defined or both undefined");
  if (w.pooler_weight.defined()) {
    check(w.pooler_weight, {E, E}, "pooler_weight");
    check(w.pooler_bias, {E}, "pooler_bias");
  }
}

}  // namespace

BertModel::BertModel(BertConfig config_, BertWeights weights_)
    : config(std::move(config_)), weights(std::move(weights_)) {
  check_weights(config, weights);
  for (const BertLayerWeights& l : weights.layers) layers_.push_back(encoder_layer(config, l));
  embeddings_norm_.normalized_shape = {config.hidden_size};
  embeddings_norm_.eps = config.layer_norm_eps;
  embeddings_norm_.weight = weights.embeddings_norm_weight;
  embeddings_norm_.bias = weights.embeddings_norm_bias;
  if (weights.pooler_weight.defined()) {
    pooler_.weight = weights.pooler_weight;
    pooler_.bias = weights.pooler_bias;
    pooler_.pack(DType::f32);
  }
}

nn::TransformerEncoderLayer BertModel::layer(std::int64_t n) const {
  QKV_CHECK(n >= 0 && n < static_cast<std::int64_t>(layers_.size()),
            "BertModel: layer " << n << " is out of range: the model has layers 0-" << layers_.size() - 1);
  nn::TransformerEncoderLayer layer = layers_[static_cast<std::size_t>(n)];
  layer.self_attn.in_proj.weight = stacked_qkv(weights.layers[static_cast<std::size_t>(n)], false);
  return layer;
}

BertModel BertModel::load(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  QKV_CHECK(fs::is_directory(dir, ec), "model directory '" << dir << "' does not exist");
  const std::string config_path = (fs::path(dir) / "config.json").string();
  QKV_CHECK(fs::exists(config_path, ec), "model directory '" << dir << "': no config.json");
  BertConfig config = BertConfig::from_file(config_path);
  const SafeTensors tensors = SafeTensors::open_model(dir);
  // The weights are views into the loaded file; they keep it alive after `tensors` goes.
  BertWeights weights = BertWeights::load(config, tensors, "BERT checkpoint '" + dir + "'");
  return BertModel(std::move(config), std::move(weights));
}

BertOutput BertModel::forward(std::span<const std::int64_t> input_ids, std::int64_t batch,
                              std::int64_t length, std::span<const std::int64_t> token_type_ids,
                              std::span<const std::int64_t> attention_mask,
                              bool output_attentions, bool output_hidden_states) const {
  const std::int64_t B = batch, L = length, E = config.hidden_size;
  QKV_CHECK(B >= 1, "BertModel: batch must be >= 1, got " << B);
  QKV_CHECK(L >= 1 && L <= config.max_position_embeddings,
            "BertModel: input length must be in [1, max_position_embeddings = "
                << config.max_position_embeddings << "], got " << L);
  const auto count = static_cast<std::size_t>(B * L);
  QKV_CHECK(input_ids.size() == count, "BertModel: input_ids has " << input_ids.size()
                                           << " entries, (B, L) = (" << B << ", " << L
                                           << ") needs " << count);
  QKV_CHECK(token_type_ids.empty() || token_type_ids.size() == count,
            "BertModel: token_type_ids has " << token_type_ids.size() << " entries, expected "
                                             << count << " or none");
  QKV_CHECK(attention_mask.empty() || attention_mask.size() == count,
            "BertModel: attention_mask has " << attention_mask.size() << " entries, expected "
                                             << count << " or none");
  for (std::size_t i = 0; i < input_ids.size(); ++i)
    QKV_CHECK(input_ids[i] >= 0 && input_ids[i] < config.vocab_size,
              "BertModel: input_ids[" << i << "] = " << input_ids[i] << " is out of range [0, "
                                      << config.vocab_size << ")");
  for (std::size_t i = 0; i < token_type_ids.size(); ++i)
    QKV_CHECK(token_type_ids[i] >= 0 && token_type_ids[i] < config.type_vocab_size,
              "BertModel: token_type_ids[" << i << "] = " << token_type_ids[i]
                                           << " is out of range [0, " << config.type_vocab_size
                                           << ")");

  // Padding: HF adds finfo.min to the scores of masked keys; here masked keys are −∞
  // (identical probabilities unless a whole row is masked). A suffix of zeros per row is
  // key_lengths (the fast kernel skips the padding); anything else a (B, L) padding mask.
  nn::AttentionMasks masks;
  if (!attention_mask.empty()) {
    bool suffix = true;
    std::vector<std::int64_t> lengths(static_cast<std::size_t>(B), L);
    for (std::int64_t b = 0; b < B; ++b) {
      std::int64_t kept = 0;
      bool seen_zero = false;
      for (std::int64_t j = 0; j < L; ++j) {
        const std::int64_t m = attention_mask[static_cast<std::size_t>(b * L + j)];
        QKV_CHECK(m == 0 || m == 1, "BertModel: attention_mask[" << b * L + j
                                        << "] must be 0 or 1, got " << m);
        if (m == 1) {
          if (seen_zero) suffix = false;
          ++kept;
        } else {
          seen_zero = true;
        }
      }
      lengths[static_cast<std::size_t>(b)] = kept;
    }
    if (suffix) {
      masks.key_lengths = std::move(lengths);
    } else {
      masks.key_padding_mask = Tensor::empty({B, L}, DType::boolean);  // (B, L) true = ignore
      for (std::int64_t i = 0; i < B * L; ++i)
        masks.key_padding_mask.data_as<bool>()[i] = attention_mask[static_cast<std::size_t>(i)] == 0;
    }
  }

  // Embeddings: word + token type + position, then LayerNorm.
  nn::Embedding word, type;  // views of the weights, no copy
  word.weight = weights.word_embeddings;
  type.weight = weights.token_type_embeddings;
  Tensor x = word.forward(input_ids, {B, L});  // (B, L, E), owned
  const std::vector<std::int64_t> zeros(token_type_ids.empty() ? count : 0, 0);
  nn::add_(x, type.forward(token_type_ids.empty() ? std::span<const std::int64_t>(zeros)
                                                  : token_type_ids,
                           {B, L}));
  const Tensor positions = weights.position_embeddings.slice(0, 0, L);  // (L, E)
  nn::add_(x, positions.unsqueeze(0).expand({B, L, E}));
  x = embeddings_norm_.forward(x);  // (B, L, E)

  BertOutput out;
  if (output_attentions) out.attentions.assign(layers_.size(), Tensor());
  for (std::size_t n = 0; n < layers_.size(); ++n) {
    if (output_hidden_states) out.hidden_states.push_back(x);
    x = layers_[n].forward(x, masks, nullptr, output_attentions ? &out.attentions[n] : nullptr);
  }
  if (output_hidden_states) out.hidden_states.push_back(x);
  out.last_hidden_state = x;
  if (pooler_.packed.defined()) {
    Tensor pooled = pooler_.forward(x.select(1, 0));  // (B, E) from [CLS]
    float* p = pooled.data_as<float>();
    for (std::int64_t i = 0; i < pooled.numel(); ++i) p[i] = std::tanh(p[i]);
    out.pooler_output = pooled;
  }
  return out;
}

}  // namespace qkv::models
