// The encoder–decoder Transformer of include/qkv/seq2seq.h: forward, backward through
// every layer (nn_backward.h), greedy decoding, and its files.

#include "qkv/seq2seq.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/json_config.h"
#include "qkv/error.h"
#include "qkv/nn_backward.h"
#include "qkv/threads.h"

namespace qkv::models {

namespace {

nn::TransformerConfig transformer_config(const Seq2SeqConfig& c) {
  nn::TransformerConfig t;
  t.layer.d_model = c.d_model;
  t.layer.nhead = c.nhead;
  t.layer.dim_feedforward = c.dim_feedforward;
  t.layer.activation = c.activation;
  t.layer.layer_norm_eps = c.layer_norm_eps;
  t.layer.norm_first = c.norm_first;
  t.num_encoder_layers = c.num_encoder_layers;
  t.num_decoder_layers = c.num_decoder_layers;
  return t;
}

void check_config(const Seq2SeqConfig& c) {
  QKV_CHECK(c.vocab_size >= 1, "Seq2Seq: vocab_size must be >= 1, got " << c.vocab_size);
  QKV_CHECK(c.d_model >= 1 && c.nhead >= 1 && c.d_model % c.nhead == 0,
            "Seq2Seq: d_model (" << c.d_model << ") must be a positive multiple of nhead ("
                                 << c.nhead << ")");
  QKV_CHECK(c.dim_feedforward >= 1 && c.num_encoder_layers >= 0 && c.num_decoder_layers >= 1 &&
                c.max_len >= 1,
            "Seq2Seq: dim_feedforward and max_len must be >= 1, num_decoder_layers >= 1");
}

// x[b, l] = weight[ids[b, l]]·scale + pe[l]      ids (B, L) -> (B, L, E)
Tensor embed(const nn::Embedding& table, std::span<const std::int64_t> ids, std::int64_t B,
             std::int64_t L, float scale, const Tensor& pe) {
  const std::int64_t V = table.weight.size(0), E = table.weight.size(1);
  Tensor out = Tensor::empty({B, L, E});  // (B, L, E)
  const float* w = table.weight.data_as<float>();
  const float* p = pe.data_as<float>();
  float* o = out.data_as<float>();
  for (std::int64_t r = 0; r < B * L; ++r) {
    const std::int64_t id = ids[static_cast<std::size_t>(r)];
    QKV_CHECK(id >= 0 && id < V, "Seq2Seq: token id " << id << " at (" << r / L << ", " << r % L
                                                      << ") is out of range [0, " << V << ")");
  }
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (std::int64_t r = 0; r < B * L; ++r) {
    const std::int64_t id = ids[static_cast<std::size_t>(r)], l = r % L;
    for (std::int64_t e = 0; e < E; ++e) o[r * E + e] = w[id * E + e] * scale + p[l * E + e];
  }
  return out;
}

void check_batch(const Seq2SeqBatch& b, const Seq2SeqConfig& c, bool need_targets) {
  QKV_CHECK(b.batch >= 1 && b.src_len >= 1 && b.tgt_len >= 1,
            "Seq2Seq: a batch needs batch, src_len and tgt_len >= 1, got " << b.batch << ", "
                                                                          << b.src_len << ", " << b.tgt_len);
  QKV_CHECK(b.src_len <= c.max_len && b.tgt_len <= c.max_len,
            "Seq2Seq: sequences of " << b.src_len << " source and " << b.tgt_len
                                     << " target tokens exceed max_len " << c.max_len);
  const auto n = static_cast<std::size_t>(b.batch);
  QKV_CHECK(b.src.size() == n * static_cast<std::size_t>(b.src_len),
            "Seq2Seq: src must hold batch·src_len ids");
  QKV_CHECK(b.tgt_in.size() == n * static_cast<std::size_t>(b.tgt_len),
            "Seq2Seq: tgt_in must hold batch·tgt_len ids");
  QKV_CHECK(!need_targets || b.tgt_out.size() == b.tgt_in.size(),
            "Seq2Seq: tgt_out must hold batch·tgt_len ids");
  QKV_CHECK(b.src_lengths.empty() || b.src_lengths.size() == n,
            "Seq2Seq: src_lengths must be empty or hold one length per row");
  for (auto len : b.src_lengths)
    QKV_CHECK(len >= 1 && len <= b.src_len,
              "Seq2Seq: src_lengths must be in [1, src_len = " << b.src_len << "], got " << len);
}

// Padding of the source as key lengths (the kernels skip the padded tiles), none when
// every row is full.
nn::AttentionMasks source_masks(const Seq2SeqBatch& b) {
  nn::AttentionMasks m;
  bool padded = false;
  for (auto len : b.src_lengths) padded |= len < b.src_len;
  if (padded) m.key_lengths = b.src_lengths;
  return m;
}

struct Activations {
  Tensor src_x, tgt_x;  // (B, S, E), (B, T, E)
  nn::TransformerSaved transformer;
  nn::LinearSaved generator;
};

}  // namespace

std::string Seq2SeqConfig::to_json() const {
  nlohmann::ordered_json j;
  j["model_type"] = "qkv-seq2seq";
  j["vocab_size"] = vocab_size;
  j["d_model"] = d_model;
  j["nhead"] = nhead;
  j["dim_feedforward"] = dim_feedforward;
  j["num_encoder_layers"] = num_encoder_layers;
  j["num_decoder_layers"] = num_decoder_layers;
  j["max_len"] = max_len;
  j["layer_norm_eps"] = layer_norm_eps;
  j["norm_first"] = norm_first;
  j["activation"] = activation == nn::Activation::relu ? "relu" : "gelu";
  return j.dump(2) + "\n";
}

namespace {

Seq2SeqConfig read_config(const JsonConfig& json) {
  const std::string type = json.get_string("model_type");
  QKV_CHECK(type == "qkv-seq2seq", json.label() << ": model_type must be \"qkv-seq2seq\", got \""
                                                << type << "\"");
  Seq2SeqConfig c;
  c.vocab_size = json.get_int("vocab_size");
  c.d_model = json.get_int("d_model");
  c.nhead = json.get_int("nhead");
  c.dim_feedforward = json.get_int("dim_feedforward");
  c.num_encoder_layers = json.get_int("num_encoder_layers");
  c.num_decoder_layers = json.get_int("num_decoder_layers");
  c.max_len = json.get_int("max_len");
  c.layer_norm_eps = json.get_double("layer_norm_eps", 1e-5);
  c.norm_first = json.get_bool("norm_first", true);
  const std::string act = json.get_string("activation", "relu");
  QKV_CHECK(act == "relu" || act == "gelu",
            json.label() << ": activation must be \"relu\" or \"gelu\", got \"" << act << "\"");
  c.activation = act == "relu" ? nn::Activation::relu : nn::Activation::gelu;
  check_config(c);
  return c;
}

}  // namespace

Seq2SeqConfig Seq2SeqConfig::from_json(const std::string& text, std::string label) {
  return read_config(JsonConfig::parse(text, std::move(label)));
}

Seq2SeqConfig Seq2SeqConfig::from_file(const std::string& path) {
  return read_config(JsonConfig::load(path));
}

Seq2Seq::Seq2Seq(const Seq2SeqConfig& c, std::uint64_t seed)
    : config(c),
      src_embed((check_config(c), c.vocab_size), c.d_model, seed + 101),
      tgt_embed(c.vocab_size, c.d_model, seed + 202),
      transformer(transformer_config(c), seed + 303),
      generator(c.d_model, c.vocab_size, true, seed + 404) {
  // Embeddings start at N(0, 1/E), so that after the ·√E of the forward they are N(0, 1),
  // the scale of the sinusoidal table they are added to.
  const auto s = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d_model)));
  for (nn::Embedding* e : {&src_embed, &tgt_embed}) {
    float* p = e->weight.data_as<float>();
    for (std::int64_t i = 0; i < e->weight.numel(); ++i) p[i] *= s;
  }
}

nn::ParameterList Seq2Seq::parameters(const std::string& prefix) {
  nn::ParameterList list = src_embed.parameters(prefix + "src_embed.");
  for (auto& p : tgt_embed.parameters(prefix + "tgt_embed.")) list.push_back(p);
  for (auto& p : transformer.parameters(prefix + "transformer.")) list.push_back(p);
  for (auto& p : generator.parameters(prefix + "generator.")) list.push_back(p);
  return list;
}

std::int64_t Seq2Seq::num_parameters() {
  std::int64_t n = 0;
  for (auto& [name, t] : parameters()) n += t->numel();
  return n;
}

namespace {

// The shared forward: logits (B·T, V), keeping what the backward needs.
Tensor run_forward(const Seq2Seq& m, const Seq2SeqBatch& batch, Activations& a,
                   nn::TransformerAttention* attention) {
  const Seq2SeqConfig& c = m.config;
  const std::int64_t B = batch.batch, S = batch.src_len, T = batch.tgt_len, E = c.d_model;
  const Tensor pe = nn::sinusoidal_positional_encoding(std::max(S, T), E);  // (max(S, T), E)
  const auto scale = static_cast<float>(std::sqrt(static_cast<double>(E)));
  a.src_x = embed(m.src_embed, batch.src, B, S, scale, pe);     // (B, S, E)
  a.tgt_x = embed(m.tgt_embed, batch.tgt_in, B, T, scale, pe);  // (B, T, E)
  const nn::AttentionMasks src_masks = source_masks(batch);
  nn::AttentionMasks tgt_masks;
  tgt_masks.is_causal = true;
  Tensor h = nn::transformer_forward_train(a.src_x, a.tgt_x, m.transformer, src_masks, tgt_masks,
                                           src_masks, a.transformer, attention);  // (B, T, E)
  return nn::linear_forward_train(h.view({B * T, E}), m.generator, a.generator);  // (B·T, V)
}

}  // namespace

train::CrossEntropyResult Seq2Seq::forward_backward(const Seq2SeqBatch& batch, Seq2Seq& grads,
                                                    double label_smoothing) const {
  check_batch(batch, config, true);
  QKV_CHECK(grads.config.vocab_size == config.vocab_size && grads.config.d_model == config.d_model,
            "Seq2Seq::forward_backward: grads must be a Seq2Seq of the same config");
  Activations a;
  Tensor logits = run_forward(*this, batch, a, nullptr);  // (B·T, V)
  Tensor dlogits;
  train::CrossEntropyResult r =
      train::cross_entropy(logits, batch.tgt_out, &dlogits, label_smoothing, -100);
  const std::int64_t B = batch.batch, T = batch.tgt_len, E = config.d_model;
  // logits = generator(h)
  Tensor dh = nn::linear_backward(dlogits, generator, a.generator, grads.generator).view({B, T, E});
  nn::TransformerInputGradients d = nn::transformer_backward(dh, transformer, a.transformer,
                                                             grads.transformer);
  // x = embed[ids]·√E + pe
  const auto scale = static_cast<float>(std::sqrt(static_cast<double>(E)));
  nn::embedding_backward(d.dsrc, batch.src, grads.src_embed.weight, scale);
  nn::embedding_backward(d.dtgt, batch.tgt_in, grads.tgt_embed.weight, scale);
  return r;
}

Tensor Seq2Seq::forward(const Seq2SeqBatch& batch, Seq2SeqAttention* attention) const {
  check_batch(batch, config, false);
  Activations a;
  nn::TransformerAttention probs;
  Tensor logits = run_forward(*this, batch, a, attention ? &probs : nullptr);
  if (attention) {
    attention->encoder_self = std::move(probs.encoder_self);
    attention->decoder_self = std::move(probs.decoder_self);
    attention->cross = std::move(probs.cross);
  }
  return logits.view({batch.batch, batch.tgt_len, config.vocab_size});
}

std::vector<std::vector<std::int64_t>> Seq2Seq::greedy_decode(
    const std::vector<std::vector<std::int64_t>>& sources, std::int64_t bos, std::int64_t eos,
    std::int64_t max_new_tokens) const {
  const auto B = static_cast<std::int64_t>(sources.size());
  std::vector<std::vector<std::int64_t>> out(sources.size());
  if (B == 0) return out;
  QKV_CHECK(max_new_tokens >= 0 && max_new_tokens < config.max_len,
            "Seq2Seq::greedy_decode: max_new_tokens must be in [0, max_len), got " << max_new_tokens);
  Seq2SeqBatch batch;
  batch.batch = B;
  for (const auto& s : sources) {
    QKV_CHECK(!s.empty(), "Seq2Seq::greedy_decode: a source is empty");
    QKV_CHECK(static_cast<std::int64_t>(s.size()) <= config.max_len,
              "Seq2Seq::greedy_decode: a source of " << s.size() << " tokens exceeds max_len "
                                                     << config.max_len);
    batch.src_len = std::max<std::int64_t>(batch.src_len, static_cast<std::int64_t>(s.size()));
  }
  batch.src.assign(static_cast<std::size_t>(B * batch.src_len), 0);
  for (std::int64_t b = 0; b < B; ++b) {
    const auto& s = sources[static_cast<std::size_t>(b)];
    std::copy(s.begin(), s.end(), batch.src.begin() + b * batch.src_len);
    batch.src_lengths.push_back(static_cast<std::int64_t>(s.size()));
  }
  // The source is encoded once; each step re-runs the decoder over the prefix: targets
  // are short (11 tokens for a date), so a KV cache would save little here. The same
  // functions as forward(), so every step's logits are forward()'s.
  const std::int64_t E = config.d_model, V = config.vocab_size;
  const Tensor pe = nn::sinusoidal_positional_encoding(std::max(batch.src_len, max_new_tokens), E);
  const auto scale = static_cast<float>(std::sqrt(static_cast<double>(E)));
  const nn::AttentionMasks src_masks = source_masks(batch);
  nn::AttentionMasks tgt_masks;
  tgt_masks.is_causal = true;
  nn::TransformerSaved scratch;  // activations, unused here
  const Tensor memory = nn::transformer_encode_train(
      embed(src_embed, batch.src, B, batch.src_len, scale, pe), transformer, src_masks, scratch);
  std::vector<bool> done(sources.size(), false);
  std::vector<std::int64_t> prefix(static_cast<std::size_t>(B), bos);  // (B, t)
  for (std::int64_t t = 1; t <= max_new_tokens; ++t) {
    const Tensor h = nn::transformer_decode_train(embed(tgt_embed, prefix, B, t, scale, pe), memory,
                                                  transformer, tgt_masks, src_masks, scratch);
    const Tensor logits = nn::linear(h.view({B * t, E}), generator.weight, generator.bias);  // (B·t, V)
    const float* pl = logits.data_as<float>();
    std::vector<std::int64_t> next(static_cast<std::size_t>(B * (t + 1)));
    bool all_done = true;
    for (std::int64_t b = 0; b < B; ++b) {
      const float* row = pl + (b * t + t - 1) * V;
      const std::int64_t id = std::max_element(row, row + V) - row;
      std::copy_n(prefix.begin() + b * t, t, next.begin() + b * (t + 1));
      next[static_cast<std::size_t>(b * (t + 1) + t)] = id;
      auto bi = static_cast<std::size_t>(b);
      if (!done[bi]) {
        if (id == eos) done[bi] = true;
        else out[bi].push_back(id);
      }
      all_done = all_done && done[bi];
    }
    prefix = std::move(next);
    if (all_done) break;
  }
  return out;
}

void Seq2Seq::save(const std::string& dir, const std::map<std::string, std::string>& metadata) {
  std::filesystem::create_directories(dir);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [name, t] : parameters()) tensors.emplace_back(name, *t);
  save_safetensors(dir + "/model.safetensors", tensors, metadata);
  const std::string path = dir + "/config.json";
  std::ofstream f(path);
  f << config.to_json();
  QKV_CHECK(f.good(), "Seq2Seq::save: cannot write " << path);
}

Seq2Seq Seq2Seq::load(const SafeTensors& weights, const Seq2SeqConfig& config) {
  Seq2Seq m(config);
  nn::StateDict state;
  for (auto& [name, t] : m.parameters()) {
    QKV_CHECK(weights.contains(name), "Seq2Seq::load: the weights have no tensor '"
                                          << name << "' " << t->shape_string());
    state.emplace(name, weights.get(name));
  }
  nn::load_state_dict(m.parameters(), state, true);
  return m;
}

Seq2Seq Seq2Seq::load(const std::string& dir) {
  const Seq2SeqConfig config = Seq2SeqConfig::from_file(dir + "/config.json");
  return load(SafeTensors::open(dir + "/model.safetensors"), config);
}

}  // namespace qkv::models
