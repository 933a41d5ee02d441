// The encoder–decoder Transformer of include/qkv/seq2seq.h: its forward (one path for
// training, evaluation and decoding: nn::Transformer's), backward, greedy decoding with KV
// caches, and its files.

#include "qkv/seq2seq.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/json_config.h"
#include "models/checkpoint.h"
#include "qkv/error.h"
#include "qkv/files.h"
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

// Sizes are at most 2^31 - 1 and the whole model at most 2^40 parameters (a tensor's own
// limit), so that the products below cannot overflow and a config cannot ask for more
// memory than any machine has before a single weight is read.
constexpr std::int64_t kMaxSize = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kMaxParameters = std::int64_t{1} << 40;

void check_config(const Seq2SeqConfig& c) {
  for (const auto& [key, value] :
       {std::pair<const char*, std::int64_t>{"vocab_size", c.vocab_size},
        {"d_model", c.d_model},
        {"nhead", c.nhead},
        {"dim_feedforward", c.dim_feedforward},
        {"num_encoder_layers", c.num_encoder_layers},
        {"num_decoder_layers", c.num_decoder_layers},
        {"max_len", c.max_len}})
    QKV_CHECK(value >= 1 && value <= kMaxSize, "Seq2Seq: " << key << " must be an integer in [1, "
                                                          << kMaxSize << "], got " << value);
  QKV_CHECK(c.d_model % c.nhead == 0, "Seq2Seq: d_model (" << c.d_model
                                                           << ") must be a multiple of nhead ("
                                                           << c.nhead << ")");
  // LayerNorm adds it in float: 1e39 is finite as a double only.
  QKV_CHECK(c.layer_norm_eps >= 0 && std::isfinite(static_cast<float>(c.layer_norm_eps)),
            "Seq2Seq: layer_norm_eps must be >= 0 and finite as a float32, got "
                << c.layer_norm_eps);
  (void)c.num_parameters();  // throws beyond kMaxParameters
}

// x[b, l] = table[ids[b, l]]·scale + pe[offset + l]      ids (B, L) -> (B, L, E)
Tensor embed(const nn::Embedding& table, std::span<const std::int64_t> ids, std::int64_t B,
             std::int64_t L, std::int64_t offset, float scale, const Tensor& pe,
             nn::Embedding::Record* record) {
  Tensor x = table.forward(ids, {B, L}, record);  // (B, L, E), ours
  nn::scale_(x, scale);
  nn::add_(x, pe.slice(0, offset, offset + L).unsqueeze(0).expand({B, L, x.size(2)}));
  return x;
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

// What the backward needs of one forward.
struct Record {
  nn::Embedding::Record src_embed, tgt_embed;
  nn::Transformer::Record transformer;
  nn::Linear::Record generator;
};

}  // namespace

std::int64_t Seq2SeqConfig::num_parameters() const {
  // nn::Transformer's layers (torch's names), every Linear and LayerNorm with its bias:
  //   attention  in_proj (3E, E) + (3E), out_proj (E, E) + (E)       4E² + 4E
  //   feed-forward linear1 (F, E) + (F), linear2 (E, F) + (E)         2EF + F + E
  //   encoder layer: attention, feed-forward, norm1, norm2 (2E each)
  //   decoder layer: self and cross attention, feed-forward, norm1..3
  // plus encoder.norm, decoder.norm, src_embed and tgt_embed (V, E), generator (V, E) + (V).
  // Summed in long double (exact up to 2^64) and compared before anything is converted.
  const long double V = static_cast<long double>(vocab_size), E = static_cast<long double>(d_model),
                    F = static_cast<long double>(dim_feedforward);
  const long double attention = 4 * E * E + 4 * E, ff = 2 * E * F + F + E;
  const long double total = static_cast<long double>(num_encoder_layers) * (attention + ff + 4 * E) +
                            static_cast<long double>(num_decoder_layers) * (2 * attention + ff + 6 * E) +
                            4 * E + 3 * V * E + V;
  QKV_CHECK(vocab_size >= 0 && d_model >= 0 && dim_feedforward >= 0 && num_encoder_layers >= 0 &&
                num_decoder_layers >= 0,
            "Seq2SeqConfig::num_parameters: sizes must be >= 0, got vocab_size "
                << vocab_size << ", d_model " << d_model << ", dim_feedforward "
                << dim_feedforward << ", layers " << num_encoder_layers << " + "
                << num_decoder_layers);
  QKV_CHECK(total <= static_cast<long double>(kMaxParameters),
            "Seq2Seq: the config describes " << static_cast<double>(total)
                                             << " parameters, more than qkv's limit of 2^40 = "
                                             << kMaxParameters);
  return static_cast<std::int64_t>(total);
}

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
  j["activation"] = nn::activation_name(activation);
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
  c.activation = nn::parse_activation(json.get_string("activation", "relu"),
                                      json.label() + ": activation");
  try {
    check_config(c);
  } catch (const Error& e) {
    throw Error(json.label() + ": " + e.what());
  }
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

// The forward: logits (B·T, V); with a record, keeping what the backward needs.
Tensor run_forward(const Seq2Seq& m, const Seq2SeqBatch& batch, Record* record,
                   nn::TransformerAttention* probs) {
  const Seq2SeqConfig& c = m.config;
  const std::int64_t B = batch.batch, S = batch.src_len, T = batch.tgt_len, E = c.d_model;
  const Tensor pe = nn::sinusoidal_positional_encoding(std::max(S, T), E);  // (max(S, T), E)
  const auto scale = static_cast<float>(std::sqrt(static_cast<double>(E)));
  const Tensor src_x = embed(m.src_embed, batch.src, B, S, 0, scale, pe,
                             record ? &record->src_embed : nullptr);  // (B, S, E)
  const Tensor tgt_x = embed(m.tgt_embed, batch.tgt_in, B, T, 0, scale, pe,
                             record ? &record->tgt_embed : nullptr);  // (B, T, E)
  const nn::AttentionMasks src_masks = source_masks(batch);
  nn::AttentionMasks tgt_masks;
  tgt_masks.is_causal = true;
  const Tensor h = m.transformer.forward(src_x, tgt_x, src_masks, tgt_masks, src_masks, probs,
                                         record ? &record->transformer : nullptr);  // (B, T, E)
  return m.generator.forward(h.view({B * T, E}), {},
                             record ? &record->generator : nullptr);  // (B·T, V)
}

}  // namespace

train::CrossEntropyResult Seq2Seq::forward_backward(const Seq2SeqBatch& batch, Seq2Seq& grads,
                                                    double label_smoothing,
                                                    const nn::GradientsReady* ready) const {
  check_batch(batch, config, true);
  QKV_CHECK(grads.config.to_json() == config.to_json(),
            "Seq2Seq::forward_backward: grads must be a Seq2Seq of the same config");
  Record record;
  const Tensor logits = run_forward(*this, batch, &record, nullptr);  // (B·T, V)
  Tensor dlogits;
  train::CrossEntropyResult r =
      train::cross_entropy(logits, batch.tgt_out, &dlogits, label_smoothing, -100);
  const std::int64_t B = batch.batch, T = batch.tgt_len, E = config.d_model;
  // logits = generator(h)
  const auto report = [&](nn::ParameterList module_grads) {
    if (ready != nullptr && *ready) (*ready)(module_grads);
  };
  const Tensor dh = generator.backward(dlogits, record.generator, grads.generator).view({B, T, E});
  report(grads.generator.parameters("generator."));
  nn::Transformer::Gradients d = transformer.backward(dh, record.transformer, grads.transformer, ready);
  // x = embed[ids]·√E + pe
  const auto scale = static_cast<float>(std::sqrt(static_cast<double>(E)));
  nn::scale_(d.src, scale);
  nn::scale_(d.tgt, scale);
  src_embed.backward(d.src, record.src_embed, grads.src_embed);
  report(grads.src_embed.parameters("src_embed."));
  tgt_embed.backward(d.tgt, record.tgt_embed, grads.tgt_embed);
  report(grads.tgt_embed.parameters("tgt_embed."));
  return r;
}

Tensor Seq2Seq::forward(const Seq2SeqBatch& batch, Seq2SeqAttention* attention) const {
  check_batch(batch, config, false);
  nn::TransformerAttention probs;
  const Tensor logits = run_forward(*this, batch, nullptr, attention ? &probs : nullptr);
  if (attention) {
    attention->encoder_self = std::move(probs.encoder_self);
    attention->decoder_self = std::move(probs.decoder_self);
    attention->cross = std::move(probs.cross);
  }
  return logits.view({batch.batch, batch.tgt_len, config.vocab_size});
}

std::vector<Tensor> Seq2Seq::encoder_hidden_states(std::span<const std::int64_t> src) const {
  const auto S = static_cast<std::int64_t>(src.size());
  const std::int64_t E = config.d_model;
  QKV_CHECK(S >= 1 && S <= config.max_len,
            "Seq2Seq::encoder_hidden_states: a source of 1 to max_len = " << config.max_len << " ids, got " << S);
  const auto scale = static_cast<float>(std::sqrt(static_cast<double>(E)));
  std::vector<Tensor> hidden = {
      embed(src_embed, src, 1, S, 0, scale, nn::sinusoidal_positional_encoding(S, E), nullptr)};  // (1, S, E)
  // Transformer::encode's layers, one source without padding: no mask.
  for (const nn::TransformerEncoderLayer& layer : transformer.encoder_layers)
    hidden.push_back(layer.forward(hidden.back()));
  return hidden;
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
  if (max_new_tokens == 0) return out;
  batch.src.assign(static_cast<std::size_t>(B * batch.src_len), 0);
  for (std::int64_t b = 0; b < B; ++b) {
    const auto& s = sources[static_cast<std::size_t>(b)];
    std::copy(s.begin(), s.end(), batch.src.begin() + b * batch.src_len);
    batch.src_lengths.push_back(static_cast<std::int64_t>(s.size()));
  }
  // The source is encoded once; each step feeds the newest token of every row through the
  // decoder, whose caches hold the keys and values of the earlier ones (self-attention)
  // and of the memory (cross-attention). The same layers as forward(): token by token,
  // the same logits up to rounding.
  const std::int64_t E = config.d_model, V = config.vocab_size, S = batch.src_len;
  const Tensor pe = nn::sinusoidal_positional_encoding(std::max(S, max_new_tokens), E);
  const auto scale = static_cast<float>(std::sqrt(static_cast<double>(E)));
  const nn::AttentionMasks src_masks = source_masks(batch);
  nn::AttentionMasks tgt_masks;
  tgt_masks.is_causal = true;
  const Tensor memory =
      transformer.encode(embed(src_embed, batch.src, B, S, 0, scale, pe, nullptr), src_masks);
  nn::Transformer::Cache cache = transformer.make_cache(B, max_new_tokens, S);  // allocated once
  std::vector<bool> done(sources.size(), false);
  std::vector<std::int64_t> last(static_cast<std::size_t>(B), bos);  // (B): each row's newest token
  for (std::int64_t t = 0; t < max_new_tokens; ++t) {
    const Tensor x = embed(tgt_embed, last, B, 1, t, scale, pe, nullptr);             // (B, 1, E)
    const Tensor h = transformer.decode(x, memory, tgt_masks, src_masks, &cache);      // (B, 1, E)
    const Tensor logits = generator.forward(h.view({B, E}));                          // (B, V)
    const float* pl = logits.data_as<float>();
    bool all_done = true;
    for (std::int64_t b = 0; b < B; ++b) {
      const float* row = pl + b * V;
      const std::int64_t id = std::max_element(row, row + V) - row;
      const auto bi = static_cast<std::size_t>(b);
      last[bi] = id;
      if (!done[bi]) {
        if (id == eos) done[bi] = true;
        else out[bi].push_back(id);
      }
      all_done = all_done && done[bi];
    }
    if (all_done) break;
  }
  return out;
}

void Seq2Seq::save(const std::string& dir, const std::map<std::string, std::string>& metadata) {
  ModelFiles files(dir);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [name, t] : parameters()) tensors.emplace_back(name, *t);
  save_safetensors(files.add("model.safetensors"), tensors, metadata);
  files.commit(config.to_json());
}

Seq2Seq Seq2Seq::load(const SafeTensors& weights, const Seq2SeqConfig& config,
                      std::vector<std::string>* unused, const std::string& label) {
  check_config(config);
  // The model is built (randomly initialised) before the weights are copied in: a config
  // that describes more parameters than the file holds values is refused first, so a
  // wrong config.json cannot make the load allocate more than the weights' own size.
  std::int64_t stored = 0;
  for (const std::string& name : weights.names()) {
    std::int64_t n = 1;
    for (std::int64_t d : weights.info(name).shape) n *= d;  // <= 2^40 each (validated)
    stored += n;
  }
  const std::int64_t needed = config.num_parameters();
  QKV_CHECK(needed <= stored, label << ": config.json describes a model of " << needed
                                    << " parameters, but the weights hold " << stored
                                    << " values in all; the config and the weights do not "
                                       "belong together");
  Seq2Seq m(config);
  nn::StateDict state;
  std::set<std::string> read;
  for (auto& [name, t] : m.parameters()) {
    QKV_CHECK(weights.contains(name), label << ": the weights have no tensor '" << name << "' "
                                            << t->shape_string());
    state.emplace(name, weights.get(name));
    read.insert(name);
  }
  nn::load_state_dict(m.parameters(), state, true);
  for (auto& [name, t] : m.parameters()) detail::check_finite(*t, label, name);
  const std::vector<std::string> rest = detail::unused_tensors(
      weights, read, nullptr,
      {{"transformer.encoder.layers.", config.num_encoder_layers, "num_encoder_layers"},
       {"transformer.decoder.layers.", config.num_decoder_layers, "num_decoder_layers"}},
      label);
  if (unused) *unused = rest;
  return m;
}

Seq2Seq Seq2Seq::load(const std::string& dir, std::vector<std::string>* unused) {
  namespace fs = std::filesystem;
  std::error_code ec;
  QKV_CHECK(fs::is_directory(dir, ec), "Seq2Seq::load: model directory '"
                                           << dir
                                           << "' does not exist (expected config.json and "
                                              "model.safetensors in it)");
  const Seq2SeqConfig config = Seq2SeqConfig::from_file((fs::path(dir) / "config.json").string());
  return load(SafeTensors::open_model(dir), config, unused,
              "Seq2Seq checkpoint '" + dir + "'");
}

}  // namespace qkv::models
