// UseLiteModel: the Universal Sentence Encoder lite on qkv's nn modules (qkv/use_lite.h
// has the architecture as read from the graph).

#include "qkv/use_lite.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <set>
#include <utility>

#include "io/json_config.h"
#include "models/checkpoint.h"
#include "qkv/error.h"
#include "qkv/safetensors.h"

namespace qkv::models {

namespace {

UseLiteConfig read_config(const JsonConfig& j) {
  const std::string type = j.get_string("model_type", "");
  QKV_CHECK(type == "use_lite", j.label() << ": model_type must be \"use_lite\", got \""
                                           << type << "\"");
  UseLiteConfig c;
  c.vocab_size = detail::config_size(j, "vocab_size");
  c.embedding_rows = j.has("embedding_rows") ? detail::config_size(j, "embedding_rows") : c.vocab_size;
  c.layer_widths = j.get_int_list("layer_widths");
  c.output_size = detail::config_size(j, "output_size");
  c.num_attention_heads = detail::config_size(j, "num_attention_heads");
  c.dim_feedforward = detail::config_size(j, "dim_feedforward");
  c.layer_norm_eps = j.get_double("layer_norm_eps");
  c.max_length = detail::config_size(j, "max_length");
  c.embedding_scale = j.get_double("embedding_scale", 1.0);
  const std::string activation = j.get_string("activation", "relu");
  QKV_CHECK(activation == "relu", j.label() << ": activation must be \"relu\", got \""
                                             << activation << "\"");
  QKV_CHECK(c.embedding_rows >= c.vocab_size, j.label() << ": embedding_rows ("
                                                  << c.embedding_rows << ") must be >= vocab_size ("
                                                  << c.vocab_size << ")");
  QKV_CHECK(!c.layer_widths.empty() && c.layer_widths.size() <= 1024,
            j.label() << ": layer_widths must list 1 to 1024 layers, got "
                       << c.layer_widths.size());
  for (std::size_t i = 0; i < c.layer_widths.size(); ++i) {
    const std::int64_t w = c.layer_widths[i];
    QKV_CHECK(w >= 1 && w <= detail::kMaxConfigSize,
              j.label() << ": layer_widths[" << i << "] must be an integer in [1, "
                        << detail::kMaxConfigSize << "], got " << w);
    QKV_CHECK(w % c.num_attention_heads == 0,
              j.label() << ": layer_widths[" << i << "] = " << w
                        << " must be a multiple of num_attention_heads (" << c.num_attention_heads
                        << ")");
  }
  QKV_CHECK(std::isfinite(static_cast<float>(c.embedding_scale)),
            j.label() << ": embedding_scale must be finite, got " << c.embedding_scale);
  QKV_CHECK(std::isfinite(static_cast<float>(c.layer_norm_eps)) && c.layer_norm_eps > 0,
            j.label() << ": layer_norm_eps must be finite and > 0, got "
                       << c.layer_norm_eps);
  return c;
}

}  // namespace

UseLiteConfig UseLiteConfig::from_json(const std::string& text, std::string label) {
  return read_config(JsonConfig::parse(text, std::move(label)));
}

UseLiteConfig UseLiteConfig::from_file(const std::string& path) {
  return read_config(JsonConfig::load(path));
}

namespace {

// The checkpoint's tensors as the modules' parameters, each checked once: present, of the
// shape the config gives, finite. f32 tensors are views into the loaded file (no second copy); others
// are converted. Every name taken is recorded, so that what is left is known.
class Weights {
 public:
  Weights(const nn::StateDict& tensors, std::string label) : tensors_(tensors), label_(std::move(label)) {}
  Tensor take(const std::string& name, const Shape& shape) {
    const auto it = tensors_.find(name);
    QKV_CHECK(it != tensors_.end(), label_ << ": tensor '" << name << "' is missing (expected shape "
                                           << shape_text(shape) << ")");
    Tensor t = it->second.dtype() == DType::f32 ? it->second : it->second.to(DType::f32);
    QKV_CHECK(t.shape() == shape, label_ << ": tensor '" << name << "' must have shape "
                                         << shape_text(shape) << ", got " << t.shape_string());
    detail::check_finite(t, label_, name);
    taken_.insert(name);
    return t;
  }
  // A tensor no parameter took: a file of another model, or of another configuration.
  void check_all_taken() const {
    for (const auto& [name, tensor] : tensors_)
      QKV_CHECK(taken_.count(name), label_ << ": tensor '" << name << "' " << tensor.shape_string()
                                           << " is not a parameter of this model (a file of "
                                              "another model, or config.json does not match it)");
  }

 private:
  static std::string shape_text(const Shape& shape) {
    std::string s = "(";
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + (shape.size() == 1 ? ",)" : ")");
  }
  const nn::StateDict& tensors_;
  std::string label_;
  std::set<std::string> taken_;
};

nn::Linear linear(Weights& w, const std::string& prefix, std::int64_t in, std::int64_t out) {
  nn::Linear l;
  l.weight = w.take(prefix + "weight", {out, in});
  l.bias = w.take(prefix + "bias", {out});
  return l;
}

nn::LayerNorm layer_norm(Weights& w, const std::string& prefix, std::int64_t width, double eps) {
  nn::LayerNorm n;
  n.normalized_shape = {width};
  n.eps = eps;
  n.weight = w.take(prefix + "weight", {width});
  n.bias = w.take(prefix + "bias", {width});
  return n;
}

}  // namespace

// The modules are filled with the checkpoint's tensors, not constructed: a constructor
// would draw random weights (most of the load time) only to have them overwritten.
UseLiteModel::UseLiteModel(UseLiteConfig c, const nn::StateDict& tensors,
                           SentencePieceTokenizer t, const std::string& label)
    : config(std::move(c)), tokenizer(std::move(t)) {
  QKV_CHECK(static_cast<std::int64_t>(tokenizer.vocab_size()) == config.vocab_size,
            label << ": the tokenizer has " << tokenizer.vocab_size()
                  << " pieces, config.json's vocab_size is " << config.vocab_size);
  Weights w(tensors, label);
  const std::int64_t E0 = config.layer_widths[0], H = config.num_attention_heads,
                     F = config.dim_feedforward;
  embedding_.weight = w.take("embedding.weight", {config.embedding_rows, E0});
  for (std::size_t i = 0; i < config.layer_widths.size(); ++i) {
    const std::int64_t d = config.layer_widths[i], o = config.layer_out(i);
    const std::string p = "layers." + std::to_string(i) + ".";
    nn::TransformerEncoderLayer layer;
    layer.config = {.d_model = d, .nhead = H, .dim_feedforward = F,
                    .activation = nn::Activation::relu, .layer_norm_eps = config.layer_norm_eps,
                    .norm_first = true, .bias = true, .d_out = o == d ? 0 : o};
    nn::MultiheadAttention& sa = layer.self_attn;
    sa.config = {.embed_dim = d, .num_heads = H, .bias = true, .kdim = d, .vdim = d, .out_dim = o};
    sa.in_proj = linear(w, p + "self_attn.in_proj_", d, 3 * d);  // in_proj_weight, in_proj_bias
    sa.out_proj = linear(w, p + "self_attn.out_proj.", d, o);
    if (o != d) layer.residual_proj = linear(w, p + "residual_proj.", d, o);
    layer.norm1 = layer_norm(w, p + "norm1.", d, config.layer_norm_eps);
    layer.norm2 = layer_norm(w, p + "norm2.", o, config.layer_norm_eps);
    layer.ff.activation = nn::Activation::relu;
    layer.ff.linear1 = linear(w, p + "linear1.", o, F);
    layer.ff.linear2 = linear(w, p + "linear2.", F, o);
    layer.pack();
    layers_.push_back(std::move(layer));
  }
  pooler_ = linear(w, "pooler.", config.output_size, config.output_size);
  pooler_.pack();
  w.check_all_taken();
  timing_ = nn::timing_signal(config.max_length, E0);  // (max_length, E0)
}

UseLiteModel UseLiteModel::load(const std::string& dir) {
  const std::filesystem::path d(dir);
  UseLiteConfig config = UseLiteConfig::from_file((d / "config.json").string());
  const SafeTensors file = SafeTensors::open_model(dir);
  nn::StateDict weights;
  for (const std::string& name : file.names()) weights[name] = file.get(name);
  SentencePieceTokenizer tokenizer = SentencePieceTokenizer::from_tokenizer_json(d / "tokenizer.json");
  return UseLiteModel(std::move(config), weights, std::move(tokenizer),
                      (d / "model.safetensors").string());
}

std::vector<std::int64_t> UseLiteModel::encode(std::string_view text, bool* clipped) const {
  std::vector<std::int64_t> ids = tokenizer.encode(text);
  const bool clip = static_cast<std::int64_t>(ids.size()) > config.max_length;
  if (clip) ids.resize(static_cast<std::size_t>(config.max_length));
  if (clipped) *clipped = clip;
  return ids;
}

Tensor UseLiteModel::forward(const std::vector<std::int64_t>& ids,
                             const std::vector<std::int64_t>& lengths, std::int64_t L,
                             std::vector<Tensor>* probs, std::vector<Tensor>* hidden_states) const {
  const auto B = static_cast<std::int64_t>(lengths.size());
  const std::int64_t O = config.output_size;
  Tensor pooled = Tensor::zeros({B, O});  // (B, O): a sentence without tokens pools to 0
  if (L > 0) {
    // x = scale·embedding[ids] + timing[:L]   (B, L, E0); padded positions hold id 0, and no
    // real query attends to them (key lengths), so what they compute is never read.
    Tensor e = embedding_.forward(ids, {B, L});  // (B, L, E0), owned
    nn::scale_(e, static_cast<float>(config.embedding_scale));
    Tensor x = nn::add_positional(e, timing_);
    nn::AttentionMasks masks;
    masks.key_lengths = lengths;
    if (probs) probs->assign(layers_.size(), Tensor());
    if (hidden_states) hidden_states->assign(1, x);
    for (std::size_t n = 0; n < layers_.size(); ++n) {
      x = layers_[n].forward(x, masks, nullptr, probs ? &(*probs)[n] : nullptr);  // (B, L, d_out)
      if (hidden_states) hidden_states->push_back(x);
    }
    // pooled[b] = mean of x[b, :length[b]]  (summed in double: 128 terms, f32 inputs)
    const float* xs = x.data_as<float>();
    float* ps = pooled.data_as<float>();
    std::vector<double> sum(static_cast<std::size_t>(O));
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t n = lengths[static_cast<std::size_t>(b)];
      if (n == 0) continue;
      std::fill(sum.begin(), sum.end(), 0.0);
      for (std::int64_t t = 0; t < n; ++t)
        for (std::int64_t o = 0; o < O; ++o) sum[o] += xs[(b * L + t) * O + o];
      for (std::int64_t o = 0; o < O; ++o) ps[b * O + o] = static_cast<float>(sum[o] / n);
    }
  }
  // embedding = l2_normalize(tanh(pooled·Wᵀ + b)), the squared norm floored at 1e-12
  Tensor y = pooler_.forward(pooled);  // (B, O)
  float* ys = y.data_as<float>();
  for (std::int64_t b = 0; b < B; ++b) {
    double norm2 = 0;
    for (std::int64_t o = 0; o < O; ++o) {
      ys[b * O + o] = std::tanh(ys[b * O + o]);
      norm2 += static_cast<double>(ys[b * O + o]) * ys[b * O + o];
    }
    const float scale = static_cast<float>(1.0 / std::sqrt(std::max(norm2, 1e-12)));
    for (std::int64_t o = 0; o < O; ++o) ys[b * O + o] *= scale;
  }
  return y;
}

std::vector<Tensor> UseLiteModel::hidden_states(const std::vector<std::int64_t>& ids) const {
  const auto L = static_cast<std::int64_t>(ids.size());
  QKV_CHECK(L >= 1 && L <= config.max_length,
            "UseLiteModel::hidden_states: a sentence of 1 to " << config.max_length << " ids, got " << L);
  for (std::size_t t = 0; t < ids.size(); ++t)
    QKV_CHECK(ids[t] >= 0 && ids[t] < config.vocab_size,
              "UseLiteModel: ids[" << t << "] = " << ids[t] << " is out of range [0, " << config.vocab_size << ")");
  std::vector<Tensor> hidden;
  forward(ids, {L}, L, nullptr, &hidden);
  return hidden;
}

UseLiteOutput UseLiteModel::embed_ids(const std::vector<std::vector<std::int64_t>>& ids,
                                      bool attentions, std::int64_t batch_size) const {
  QKV_CHECK(batch_size >= 1, "UseLiteModel: batch_size must be >= 1, got " << batch_size);
  const std::size_t N = ids.size();
  for (std::size_t i = 0; i < N; ++i)
    for (std::size_t t = 0; t < ids[i].size(); ++t)
      QKV_CHECK(ids[i][t] >= 0 && ids[i][t] < config.vocab_size,
                "UseLiteModel: ids[" << i << "][" << t << "] = " << ids[i][t]
                                     << " is out of range [0, " << config.vocab_size << ")");
  auto length = [&](std::size_t i) {
    return std::min<std::int64_t>(static_cast<std::int64_t>(ids[i].size()), config.max_length);
  };
  // Longest first, so each batch pads only to its own longest sentence (stable: equal
  // lengths keep their order).
  std::vector<std::size_t> order(N);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return length(a) > length(b); });

  const std::int64_t O = config.output_size;
  UseLiteOutput out;
  out.embeddings = Tensor::empty({static_cast<std::int64_t>(N), O});  // (N, O)
  if (attentions) out.attentions.assign(N, {});
  float* dst = out.embeddings.data_as<float>();
  for (std::size_t start = 0; start < N; start += static_cast<std::size_t>(batch_size)) {
    const std::size_t end = std::min(N, start + static_cast<std::size_t>(batch_size));
    const std::int64_t B = static_cast<std::int64_t>(end - start);
    const std::int64_t L = length(order[start]);
    std::vector<std::int64_t> batch(static_cast<std::size_t>(B * L), 0);  // (B, L), padding 0
    std::vector<std::int64_t> lengths(static_cast<std::size_t>(B));
    for (std::int64_t b = 0; b < B; ++b) {
      const std::size_t i = order[start + static_cast<std::size_t>(b)];
      lengths[b] = length(i);
      std::copy_n(ids[i].begin(), lengths[b], batch.begin() + b * L);
    }
    std::vector<Tensor> probs;
    const Tensor y = forward(batch, lengths, L, attentions ? &probs : nullptr);  // (B, O)
    for (std::int64_t b = 0; b < B; ++b) {
      const std::size_t i = order[start + static_cast<std::size_t>(b)];
      std::copy_n(y.data_as<float>() + b * O, O, dst + i * O);
      if (!attentions) continue;
      const std::int64_t n = lengths[b];
      for (std::size_t layer = 0; layer < layers_.size(); ++layer)  // (B, H, L, L) -> (H, n, n)
        out.attentions[i].push_back(
            L > 0 ? probs[layer].select(0, b).slice(1, 0, n).slice(2, 0, n).clone()
                  : Tensor::empty({config.num_attention_heads, 0, 0}));
    }
  }
  return out;
}

UseLiteOutput UseLiteModel::embed(const std::vector<std::string>& texts, bool attentions,
                                  std::int64_t batch_size) const {
  std::vector<std::vector<std::int64_t>> ids;
  ids.reserve(texts.size());
  for (const std::string& text : texts) ids.push_back(encode(text));
  return embed_ids(ids, attentions, batch_size);
}

}  // namespace qkv::models
