// GPT-2: config, checkpoint loading (Conv1D weights transposed once), cached and full
// forward passes, sampling and generation. See include/qkv/gpt2.h.

#include "qkv/gpt2.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <numeric>
#include <set>
#include <utility>

#include "io/json_config.h"
#include "models/checkpoint.h"
#include "qkv/error.h"

namespace qkv::models {

namespace {

// Looks tensors up by their GPT2Model name, with or without the "transformer." prefix.
class Loader {
 public:
  explicit Loader(const SafeTensors& st) : st_(st) {
    for (const auto& name : st.names()) {
      if (name.rfind("transformer.", 0) == 0) prefixed_ = true;
    }
  }

  std::string full_name(const std::string& name) const {
    return prefixed_ ? "transformer." + name : name;
  }

  // The tensor, as f32, checked against `shape`.
  Tensor get(const std::string& name, const Shape& shape) const {
    const std::string full = full_name(name);
    QKV_CHECK(st_.contains(full), "gpt2: checkpoint is missing tensor '"
                                      << full << "' (expected shape " << shape_to_string(shape)
                                      << ")");
    const TensorInfo& info = st_.info(full);
    QKV_CHECK(info.shape == shape, "gpt2: tensor '" << full << "' must have shape "
                                                    << shape_to_string(shape) << ", got "
                                                    << shape_to_string(info.shape));
    Tensor t = st_.get(full);
    if (t.dtype() != DType::f32) t = t.to(DType::f32);
    detail::check_finite(t, "gpt2 checkpoint", full);
    read_.insert(full);
    return t;
  }

  // A Conv1D weight stored (in, out) -> nn::Linear's (out, in), a contiguous copy.
  Tensor get_conv1d(const std::string& name, std::int64_t in, std::int64_t out) const {
    return get(name, {in, out}).transpose(0, 1).clone();
  }

  const std::set<std::string>& read() const { return read_; }
  void mark_read(const std::string& full) { read_.insert(full); }

 private:
  const SafeTensors& st_;
  bool prefixed_ = false;
  mutable std::set<std::string> read_;  // the full names get() returned
};

nn::LayerNorm load_layer_norm(const Loader& l, const std::string& name, std::int64_t E,
                              double eps) {
  nn::LayerNorm ln;
  ln.normalized_shape = {E};
  ln.eps = eps;
  ln.weight = l.get(name + ".weight", {E});
  ln.bias = l.get(name + ".bias", {E});
  return ln;
}

nn::Linear load_conv1d(const Loader& l, const std::string& name, std::int64_t in,
                       std::int64_t out) {
  nn::Linear lin;
  lin.weight = l.get_conv1d(name + ".weight", in, out);  // (out, in)
  lin.bias = l.get(name + ".bias", {out});               // (out)
  return lin;
}

Gpt2Config read_config(const JsonConfig& json) {
  QKV_CHECK(json.has("model_type"),
            json.label() << ": missing key 'model_type' (expected \"gpt2\")");
  const std::string model_type = json.get_string("model_type");
  QKV_CHECK(model_type == "gpt2", json.label() << ": model_type must be \"gpt2\", got \""
                                               << model_type << "\"");
  Gpt2Config c;
  c.vocab_size = json.get_int("vocab_size", c.vocab_size);
  c.n_positions = json.get_int("n_positions", c.n_positions);
  c.n_embd = json.get_int("n_embd", c.n_embd);
  c.n_layer = json.get_int("n_layer", c.n_layer);
  c.n_head = json.get_int("n_head", c.n_head);
  c.n_inner = json.get_int("n_inner", 0);
  c.layer_norm_epsilon = json.get_double("layer_norm_epsilon", c.layer_norm_epsilon);
  if (json.has("eos_token_id")) c.eos_token_id = json.get_int("eos_token_id");
  const std::string act = json.get_string("activation_function", "gelu_new");
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") {
    c.activation = nn::GeluApproximation::tanh;
  } else if (act == "gelu") {
    c.activation = nn::GeluApproximation::none;
  } else {
    throw Error(json.label() + ": activation_function must be \"gelu_new\", "
                "\"gelu_pytorch_tanh\" or \"gelu\", got \"" + act + "\"");
  }
  QKV_CHECK(json.get_bool("scale_attn_weights", true),
            json.label() << ": scale_attn_weights = false is not supported");
  QKV_CHECK(!json.get_bool("scale_attn_by_inverse_layer_idx", false),
            json.label() << ": scale_attn_by_inverse_layer_idx = true is not supported");
  // Sizes are at most 2^31 - 1 (every real checkpoint's are far below), so that the
  // shapes built from them (3·n_embd, 4·n_embd) cannot overflow.
  constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
  for (const auto& [key, value] : {std::pair<const char*, std::int64_t>{"vocab_size", c.vocab_size},
                                   {"n_positions", c.n_positions},
                                   {"n_embd", c.n_embd},
                                   {"n_layer", c.n_layer},
                                   {"n_head", c.n_head}})
    QKV_CHECK(value >= 1 && value <= kMax, json.label() << ": " << key
                                                        << " must be an integer in [1, " << kMax
                                                        << "], got " << value);
  QKV_CHECK(c.n_embd % c.n_head == 0, json.label() << ": n_head = " << c.n_head
                                                   << " must divide n_embd = " << c.n_embd);
  QKV_CHECK(c.n_inner >= 0 && c.n_inner <= kMax,
            json.label() << ": n_inner must be in [0, " << kMax
                         << "] (0 or null means 4 * n_embd), got " << c.n_inner);
  // LayerNorm adds it in float: 1e39 is finite as a double only.
  QKV_CHECK(c.layer_norm_epsilon >= 0 && std::isfinite(static_cast<float>(c.layer_norm_epsilon)),
            json.label() << ": layer_norm_epsilon must be >= 0 and finite as a float32, got "
                         << c.layer_norm_epsilon);
  if (c.eos_token_id)
    QKV_CHECK(*c.eos_token_id >= 0 && *c.eos_token_id < c.vocab_size,
              json.label() << ": eos_token_id = " << *c.eos_token_id
                           << " is not a token: it must be in [0, vocab_size = " << c.vocab_size
                           << ")");
  return c;
}

}  // namespace

nn::TransformerLayerConfig Gpt2Config::block_config() const {
  nn::TransformerLayerConfig layer;
  layer.d_model = n_embd;
  layer.nhead = n_head;
  layer.dim_feedforward = inner();
  layer.activation = activation == nn::GeluApproximation::tanh ? nn::Activation::gelu_tanh
                                                               : nn::Activation::gelu;
  layer.layer_norm_eps = layer_norm_epsilon;
  layer.norm_first = true;
  return layer;
}

Gpt2Config Gpt2Config::from_json(const std::string& text, std::string label) {
  return read_config(JsonConfig::parse(text, std::move(label)));
}

Gpt2Config Gpt2Config::from_file(const std::string& path) {
  return read_config(JsonConfig::load(path));
}

Gpt2Model Gpt2Model::load(const std::string& dir, DType product_dtype) {
  const std::filesystem::path config_path = std::filesystem::path(dir) / "config.json";
  QKV_CHECK(std::filesystem::exists(config_path),
            "gpt2: " << config_path.string() << " does not exist");
  const Gpt2Config config = Gpt2Config::from_file(config_path.string());
  return from_safetensors(config, SafeTensors::open_model(dir), product_dtype);
}

Gpt2Model Gpt2Model::from_safetensors(const Gpt2Config& config, const SafeTensors& tensors,
                                      DType product_dtype) {
  Loader l(tensors);  // not const: mark_read
  const std::int64_t V = config.vocab_size, P = config.n_positions, E = config.n_embd;
  const std::int64_t F = config.inner();
  Gpt2Weights w;
  w.wte.weight = l.get("wte.weight", {V, E});
  w.wpe.weight = l.get("wpe.weight", {P, E});
  const nn::TransformerLayerConfig layer = config.block_config();
  for (std::int64_t i = 0; i < config.n_layer; ++i) {
    const std::string p = "h." + std::to_string(i) + ".";
    // Filled from the checkpoint, not constructed (no random initialisation to discard).
    nn::TransformerEncoderLayer b;
    b.config = layer;
    b.norm1 = load_layer_norm(l, p + "ln_1", E, config.layer_norm_epsilon);
    b.norm2 = load_layer_norm(l, p + "ln_2", E, config.layer_norm_epsilon);
    // c_attn's output columns are [q | k | v] (GPT2Attention splits at E, 2E), which is
    // exactly MultiheadAttention's joint [W_q; W_k; W_v] once transposed.
    b.self_attn.config = {.embed_dim = E, .num_heads = config.n_head, .bias = true, .kdim = E, .vdim = E};
    b.self_attn.in_proj = load_conv1d(l, p + "attn.c_attn", E, 3 * E);  // (3E, E), (3E)
    b.self_attn.out_proj = load_conv1d(l, p + "attn.c_proj", E, E);
    b.ff.activation = layer.activation;
    b.ff.linear1 = load_conv1d(l, p + "mlp.c_fc", E, F);
    b.ff.linear2 = load_conv1d(l, p + "mlp.c_proj", F, E);
    w.h.push_back(std::move(b));
  }
  w.ln_f = load_layer_norm(l, "ln_f", E, config.layer_norm_epsilon);
  // The LM head is tied to wte (GPT2LMHeadModel._tied_weights_keys); a stored copy must
  // match it, since only one matrix is used.
  if (tensors.contains("lm_head.weight")) {
    const TensorInfo& info = tensors.info("lm_head.weight");
    QKV_CHECK(info.shape == Shape({V, E}), "gpt2: tensor 'lm_head.weight' must have shape "
                                               << shape_to_string({V, E}) << ", got "
                                               << shape_to_string(info.shape));
    Tensor head = tensors.get("lm_head.weight").to(DType::f32).contiguous();
    const Tensor wte = w.wte.weight.contiguous();
    QKV_CHECK(std::equal(head.data_as<float>(), head.data_as<float>() + head.numel(),
                         wte.data_as<float>()),
              "gpt2: lm_head.weight differs from wte.weight; only a tied LM head is supported");
    l.mark_read("lm_head.weight");
  }
  // What Gpt2Model knowingly leaves: each block's causal-mask buffers. Anything else unread
  // is reported, as Hugging Face reports unexpected keys.
  const std::string blocks = l.full_name("h.");
  const auto ignored = [&](const std::string& name) {
    return name.starts_with(blocks) &&
           (name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias"));
  };
  w.unused_tensors = detail::unused_tensors(tensors, l.read(), ignored,
                                            {{blocks, config.n_layer, "n_layer"}},
                                            "gpt2 checkpoint");
  return Gpt2Model(config, std::move(w), product_dtype);
}

namespace {

// Weights built by hand (not by from_safetensors) must fit the config as well: forward
// trusts these shapes.
Gpt2Weights checked(const Gpt2Config& c, Gpt2Weights w) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
  const auto size = [](std::int64_t v) { return v >= 1 && v <= kMax; };
  QKV_CHECK(size(c.vocab_size) && size(c.n_positions) && size(c.n_embd) && size(c.n_layer) &&
                size(c.n_head) && c.n_embd % c.n_head == 0 && c.n_inner >= 0 && c.n_inner <= kMax,
            "Gpt2Model: the config's sizes must be in [1, " << kMax << "] (n_inner in [0, "
                << kMax << "]) and n_head (" << c.n_head << ") must divide n_embd (" << c.n_embd
                << "), got vocab_size " << c.vocab_size << ", n_positions " << c.n_positions
                << ", n_layer " << c.n_layer << ", n_inner " << c.n_inner);
  QKV_CHECK(static_cast<std::int64_t>(w.h.size()) == c.n_layer,
            "Gpt2Model: weights have " << w.h.size() << " blocks, config n_layer " << c.n_layer);
  const std::int64_t V = c.vocab_size, P = c.n_positions, E = c.n_embd, F = c.inner();
  const auto check = [](const Tensor& t, const Shape& shape, const std::string& name) {
    QKV_CHECK(t.defined() && t.dtype() == DType::f32 && t.shape() == shape,
              "Gpt2Model: weight " << name << " must be f32 of shape " << shape_to_string(shape)
                                   << ", got "
                                   << (t.defined() ? std::string(dtype_name(t.dtype())) + " " +
                                                         t.shape_string()
                                                   : std::string("undefined")));
  };
  check(w.wte.weight, {V, E}, "wte.weight");
  check(w.wpe.weight, {P, E}, "wpe.weight");
  check(w.ln_f.weight, {E}, "ln_f.weight");
  check(w.ln_f.bias, {E}, "ln_f.bias");
  for (std::size_t i = 0; i < w.h.size(); ++i) {
    const nn::TransformerEncoderLayer& b = w.h[i];
    const std::string p = "h." + std::to_string(i) + ".";
    QKV_CHECK(b.config.d_model == E && b.config.nhead == c.n_head &&
                  b.config.dim_feedforward == F && b.self_attn.config.embed_dim == E &&
                  b.self_attn.config.num_heads == c.n_head,
              "Gpt2Model: block " << i << " has d_model " << b.config.d_model << ", nhead "
                                  << b.config.nhead << ", dim_feedforward "
                                  << b.config.dim_feedforward << "; the config needs " << E
                                  << ", " << c.n_head << ", " << F);
    check(b.self_attn.in_proj.weight, {3 * E, E}, p + "self_attn.in_proj.weight");
    check(b.self_attn.in_proj.bias, {3 * E}, p + "self_attn.in_proj.bias");
    check(b.self_attn.out_proj.weight, {E, E}, p + "self_attn.out_proj.weight");
    check(b.self_attn.out_proj.bias, {E}, p + "self_attn.out_proj.bias");
    check(b.ff.linear1.weight, {F, E}, p + "ff.linear1.weight");
    check(b.ff.linear1.bias, {F}, p + "ff.linear1.bias");
    check(b.ff.linear2.weight, {E, F}, p + "ff.linear2.weight");
    check(b.ff.linear2.bias, {E}, p + "ff.linear2.bias");
    for (const nn::LayerNorm* n : {&b.norm1, &b.norm2}) {
      check(n->weight, {E}, p + (n == &b.norm1 ? "norm1" : "norm2") + ".weight");
      check(n->bias, {E}, p + (n == &b.norm1 ? "norm1" : "norm2") + ".bias");
    }
  }
  return w;
}

// The weights with every product's weight packed (nn::Linear::pack).
Gpt2Weights packed(Gpt2Weights w, DType dtype) {
  for (nn::TransformerEncoderLayer& b : w.h) b.pack(dtype);
  return w;
}

}  // namespace

Gpt2Model::Gpt2Model(Gpt2Config config_, Gpt2Weights weights_, DType product_dtype_)
    : config(std::move(config_)),
      weights(packed(checked(config, std::move(weights_)), product_dtype_)),
      product_dtype(product_dtype_) {
  lm_head_.weight = weights.wte.weight;  // tied: a view, no copy
  lm_head_.pack(product_dtype);
}

Gpt2State Gpt2Model::make_state() const {
  Gpt2State s;
  s.caches.reserve(weights.h.size());
  for (const auto& b : weights.h) s.caches.push_back(b.self_attn.make_cache(1, config.n_positions));
  return s;
}

Tensor Gpt2Weights::forward(std::span<const std::int64_t> ids, std::int64_t B, std::int64_t T,
                            std::int64_t offset, Gpt2State* state,
                            std::vector<Tensor>* attentions, Record* record,
                            std::vector<Tensor>* hidden_states) const {
  QKV_CHECK(!state || B == 1, "gpt2: a KV cache holds one sequence, got a batch of " << B);
  // Position ids (B, T): the table is read through the same Embedding forward and backward
  // as the tokens, which also checks [offset, offset + T) against n_positions.
  std::vector<std::int64_t> positions(static_cast<std::size_t>(B * T));
  for (std::int64_t i = 0; i < B * T; ++i) positions[static_cast<std::size_t>(i)] = offset + i % T;
  Tensor x = wte.forward(ids, {B, T}, record ? &record->wte : nullptr);  // (B, T, E)
  nn::add_(x, wpe.forward(positions, {B, T}, record ? &record->wpe : nullptr));
  nn::AttentionMasks causal;
  causal.is_causal = true;
  if (attentions) attentions->assign(h.size(), Tensor());
  if (record) record->h.assign(h.size(), {});
  if (hidden_states) hidden_states->assign(1, x);
  for (std::size_t i = 0; i < h.size(); ++i) {
    x = h[i].forward(x, causal, state ? &state->caches[i] : nullptr,
                     attentions ? &(*attentions)[i] : nullptr, record ? &record->h[i] : nullptr);
    if (hidden_states) hidden_states->push_back(x);
  }
  return x;
}

Tensor Gpt2Model::run(std::span<const std::int64_t> ids, std::int64_t offset, Gpt2State* state,
                      std::vector<Tensor>* attentions) const {
  return weights.forward(ids, 1, static_cast<std::int64_t>(ids.size()), offset, state, attentions);
}

Tensor Gpt2Model::forward(std::span<const std::int64_t> ids, Gpt2State& state) const {
  const auto T = static_cast<std::int64_t>(ids.size());
  const std::int64_t offset = state.length();
  QKV_CHECK(T >= 1, "Gpt2Model::forward: ids must hold at least one token");
  QKV_CHECK(state.caches.size() == weights.h.size(),
            "Gpt2Model::forward: state has " << state.caches.size() << " caches, the model "
                                             << weights.h.size() << " layers (use make_state)");
  QKV_CHECK(offset + T <= config.n_positions,
            "Gpt2Model::forward: positions [" << offset << ", " << offset + T
                                              << ") exceed n_positions = " << config.n_positions);
  for (const auto id : ids)
    QKV_CHECK(id >= 0 && id < config.vocab_size,
              "Gpt2Model::forward: token id " << id << " is outside [0, " << config.vocab_size << ")");
  const Tensor x = run(ids, offset, &state, nullptr);              // (1, T, E)
  const Tensor last = weights.ln_f.forward(x.slice(1, T - 1, T));  // (1, 1, E)
  return lm_head_.forward(last).view({config.vocab_size});         // (V)
}

Tensor Gpt2Model::forward_full(std::span<const std::int64_t> ids,
                               std::vector<Tensor>* attentions) const {
  const auto L = static_cast<std::int64_t>(ids.size());
  QKV_CHECK(L >= 1 && L <= config.n_positions,
            "Gpt2Model::forward_full: length must be in [1, n_positions = "
                << config.n_positions << "], got " << L);
  for (const auto id : ids)
    QKV_CHECK(id >= 0 && id < config.vocab_size,
              "Gpt2Model::forward_full: token id " << id << " is outside [0, "
                                                   << config.vocab_size << ")");
  const Tensor x = run(ids, 0, nullptr, attentions);  // (1, L, E)
  return lm_head_.forward(weights.ln_f.forward(x)).view({L, config.vocab_size});  // (L, V)
}

Tensor Gpt2Model::forward_rows(std::span<const std::int64_t> ids, std::int64_t B, std::int64_t T,
                               std::span<const std::int64_t> rows) const {
  QKV_CHECK(B >= 1 && T >= 1 && T <= config.n_positions,
            "Gpt2Model::forward_rows: need B >= 1 sequences of T in [1, n_positions = "
                << config.n_positions << "] tokens, got B = " << B << ", T = " << T);
  QKV_CHECK(static_cast<std::int64_t>(ids.size()) == B * T,
            "Gpt2Model::forward_rows: ids holds " << ids.size() << " tokens, B·T = " << B * T);
  for (const auto r : rows)
    QKV_CHECK(r >= 0 && r < B * T, "Gpt2Model::forward_rows: row " << r << " is outside [0, B·T = "
                                                                   << B * T << ")");
  const std::int64_t E = config.n_embd, R = static_cast<std::int64_t>(rows.size());
  const Tensor x = weights.forward(ids, B, T).contiguous();  // (B, T, E); checks the ids
  Tensor picked = Tensor::empty({R, E});                     // (R, E)
  const float* px = x.data_as<float>();
  float* pp = picked.data_as<float>();
  for (std::int64_t i = 0; i < R; ++i)
    std::copy_n(px + rows[static_cast<std::size_t>(i)] * E, E, pp + i * E);
  return lm_head_.forward(weights.ln_f.forward(picked));  // (R, V)
}

void validate(const SamplingOptions& o) {
  QKV_CHECK(o.max_new_tokens >= 0, "max_new_tokens must be >= 0, got " << o.max_new_tokens);
  QKV_CHECK(std::isfinite(o.temperature) && o.temperature >= 0,
            "temperature must be a finite number >= 0, got " << o.temperature);
  QKV_CHECK(o.top_k >= 0, "top_k must be >= 0, got " << o.top_k);
  QKV_CHECK(o.top_p > 0 && o.top_p <= 1, "top_p must be in (0, 1], got " << o.top_p);
}

const options::OptionSet<SamplingOptions>& sampling_options() {
  using T = SamplingOptions;
  static const options::OptionSet<T> set = [] {
    options::OptionSet<T> s("generate", "Generate text with a GPT-2 checkpoint");
    s.integer("max_new_tokens", &T::max_new_tokens, 0, options::kMaxInt,
              "Tokens to generate at most (with the prompt's, at most the model's n_positions)");
    s.number("temperature", &T::temperature, 0.0, false, options::kInf, false, "Sampling temperature (0 = greedy)");
    s.integer("top_k", &T::top_k, 0, options::kMaxInt, "Sample among the K most likely tokens (0 = off)");
    s.number("top_p", &T::top_p, 0.0, true, 1.0, false, "Nucleus sampling mass (1 = off)");
    s.seed("seed", &T::seed, "Seed of the sampler");
    return s;
  }();
  return set;
}

std::int64_t sample_token(std::span<const float> logits, const SamplingOptions& o, Rng& rng) {
  const auto V = static_cast<std::int64_t>(logits.size());
  QKV_CHECK(V >= 1, "sample_token: logits are empty");
  if (o.temperature == 0.0) {
    return std::max_element(logits.begin(), logits.end()) - logits.begin();
  }
  // Candidates by descending logit, ties by lower id (a stable order).
  std::vector<std::int64_t> order(static_cast<std::size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return logits[static_cast<std::size_t>(a)] > logits[static_cast<std::size_t>(b)];
  });
  std::size_t keep = order.size();
  if (o.top_k > 0) keep = std::min<std::size_t>(keep, static_cast<std::size_t>(o.top_k));
  // Softmax of logits / T over the kept candidates, in double, max subtracted.
  const double max_logit = logits[static_cast<std::size_t>(order[0])];
  std::vector<double> p(keep);
  double total = 0;
  for (std::size_t i = 0; i < keep; ++i) {
    p[i] = std::exp((logits[static_cast<std::size_t>(order[i])] - max_logit) / o.temperature);
    total += p[i];
  }
  if (o.top_p < 1.0) {
    // The smallest prefix whose mass reaches top_p (HF's TopPLogitsWarper keeps at least one).
    double mass = 0;
    std::size_t n = 0;
    while (n < keep) {
      mass += p[n] / total;
      ++n;
      if (mass >= o.top_p) break;
    }
    keep = n;
    total = std::accumulate(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(keep), 0.0);
  }
  const double u = rng.uniform() * total;
  double c = 0;
  for (std::size_t i = 0; i < keep; ++i) {
    c += p[i];
    if (u < c) return order[i];
  }
  return order[keep - 1];  // u rounded up to the total
}

std::vector<std::int64_t> generate(const Gpt2Model& model, std::span<const std::int64_t> prompt,
                                   const SamplingOptions& options,
                                   const std::function<void(std::int64_t)>& on_token) {
  validate(options);
  const auto L = static_cast<std::int64_t>(prompt.size());
  const std::int64_t P = model.config.n_positions;
  QKV_CHECK(L >= 1, "generate: the prompt must hold at least one token");
  QKV_CHECK(L <= P, "generate: the prompt is " << L << " tokens, longer than n_positions = " << P);
  QKV_CHECK(L + options.max_new_tokens <= P,
            "generate: prompt (" << L << " tokens) + max_new_tokens (" << options.max_new_tokens
                                 << ") = " << L + options.max_new_tokens
                                 << " exceeds n_positions = " << P);
  for (const auto id : prompt)
    QKV_CHECK(id >= 0 && id < model.config.vocab_size,
              "generate: prompt token id " << id << " is outside [0, vocab_size = "
                                           << model.config.vocab_size << ")");
  std::vector<std::int64_t> out;
  if (options.max_new_tokens == 0) return out;
  out.reserve(static_cast<std::size_t>(options.max_new_tokens));
  Gpt2State state = model.make_state();  // every cache allocated here, before the loop
  Rng rng(options.seed);
  Tensor logits = model.forward(prompt, state);  // (V)
  for (std::int64_t step = 0; step < options.max_new_tokens; ++step) {
    const std::int64_t next = sample_token(
        std::span<const float>(logits.data_as<float>(), static_cast<std::size_t>(logits.numel())),
        options, rng);
    out.push_back(next);
    if (on_token) on_token(next);
    if (options.eos_id && next == *options.eos_id) break;
    if (step + 1 == options.max_new_tokens) break;
    logits = model.forward(std::span<const std::int64_t>(&out.back(), 1), state);
  }
  return out;
}

}  // namespace qkv::models
