// GPT-2 as a trainable model: its initialisation, the trunk's backward, the language-model
// loss, and saving in Hugging Face's layout. The forward is the one of gpt2.cpp
// (Gpt2Weights::forward), shared with generation. See include/qkv/gpt2.h.

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "qkv/error.h"
#include "qkv/files.h"
#include "qkv/gpt2.h"
#include "qkv/rng.h"

namespace qkv::models {

namespace {

// Hugging Face's name of one of Gpt2Weights::parameters(), and whether the tensor is a
// Conv1D weight, stored (in, out) there and (out, in) in nn::Linear.
struct HfName {
  std::string name;
  bool transposed = false;
};

HfName hf_name(const std::string& name) {
  if (!name.starts_with("h.")) return {"transformer." + name};
  const std::size_t dot = name.find('.', 2);  // "h.N." | rest
  const std::string block = name.substr(0, dot + 1), rest = name.substr(dot + 1);
  static const std::pair<const char*, HfName> kBlock[] = {
      {"norm1.weight", {"ln_1.weight"}},
      {"norm1.bias", {"ln_1.bias"}},
      {"self_attn.in_proj_weight", {"attn.c_attn.weight", true}},
      {"self_attn.in_proj_bias", {"attn.c_attn.bias"}},
      {"self_attn.out_proj.weight", {"attn.c_proj.weight", true}},
      {"self_attn.out_proj.bias", {"attn.c_proj.bias"}},
      {"norm2.weight", {"ln_2.weight"}},
      {"norm2.bias", {"ln_2.bias"}},
      {"linear1.weight", {"mlp.c_fc.weight", true}},
      {"linear1.bias", {"mlp.c_fc.bias"}},
      {"linear2.weight", {"mlp.c_proj.weight", true}},
      {"linear2.bias", {"mlp.c_proj.bias"}},
  };
  for (const auto& [ours, theirs] : kBlock)
    if (rest == ours) return {"transformer." + block + theirs.name, theirs.transposed};
  throw Error("save_gpt2: no Hugging Face name for parameter '" + name + "'");
}

void fill_normal(Tensor& t, double stddev, Rng& rng) {
  float* p = t.data_as<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(stddev * rng.normal());
}

}  // namespace

std::string Gpt2Config::to_json() const {
  nlohmann::ordered_json j;
  j["model_type"] = "gpt2";
  j["architectures"] = {"GPT2LMHeadModel"};
  j["vocab_size"] = vocab_size;
  j["n_positions"] = n_positions;
  j["n_ctx"] = n_positions;
  j["n_embd"] = n_embd;
  j["n_layer"] = n_layer;
  j["n_head"] = n_head;
  if (n_inner > 0) j["n_inner"] = n_inner; else j["n_inner"] = nullptr;
  j["activation_function"] = activation == nn::GeluApproximation::tanh ? "gelu_new" : "gelu";
  j["layer_norm_epsilon"] = layer_norm_epsilon;
  j["resid_pdrop"] = 0.0;
  j["embd_pdrop"] = 0.0;
  j["attn_pdrop"] = 0.0;
  j["initializer_range"] = 0.02;
  j["scale_attn_weights"] = true;
  j["tie_word_embeddings"] = true;
  if (eos_token_id) {
    j["bos_token_id"] = *eos_token_id;
    j["eos_token_id"] = *eos_token_id;
  }
  return j.dump(2) + "\n";
}

std::int64_t Gpt2Config::num_parameters() const {
  const std::int64_t E = n_embd, F = inner();
  const std::int64_t block = 2 * 2 * E + (3 * E * E + 3 * E) + (E * E + E) + (F * E + F) + (E * F + E);
  return vocab_size * E + n_positions * E + n_layer * block + 2 * E;
}

Gpt2Weights Gpt2Weights::zeros_like(const Gpt2Config& c) {
  const std::int64_t E = c.n_embd;
  Gpt2Weights w;
  w.wte.weight = Tensor::zeros({c.vocab_size, E});
  w.wpe.weight = Tensor::zeros({c.n_positions, E});
  for (std::int64_t i = 0; i < c.n_layer; ++i) {
    nn::TransformerEncoderLayer b(c.block_config());  // the modules with their shapes
    for (auto& [name, t] : b.parameters()) *t = Tensor::zeros(t->shape());
    w.h.push_back(std::move(b));
  }
  w.ln_f = nn::LayerNorm({E}, c.layer_norm_epsilon);
  for (auto& [name, t] : w.ln_f.parameters()) *t = Tensor::zeros(t->shape());
  return w;
}

Gpt2Weights Gpt2Weights::initialized(const Gpt2Config& c, std::uint64_t seed) {
  Gpt2Weights w = zeros_like(c);
  Rng rng(mix64(seed + 0x6770743200000000ull));  // "gpt2": apart from other models' seeds
  const double residual = 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  for (auto& [name, t] : w.parameters()) {
    if (name.ends_with("norm1.weight") || name.ends_with("norm2.weight") || name == "ln_f.weight") {
      float* p = t->data_as<float>();
      for (std::int64_t i = 0; i < t->numel(); ++i) p[i] = 1.0f;
    } else if (name.ends_with("out_proj.weight") || name.ends_with("linear2.weight")) {
      fill_normal(*t, residual, rng);  // attn.c_proj, mlp.c_proj
    } else if (t->dim() == 2) {
      fill_normal(*t, 0.02, rng);
    }  // biases and LayerNorm shifts stay 0
  }
  return w;
}

nn::ParameterList Gpt2Weights::parameters() {
  nn::ParameterList list = wte.parameters("wte.");
  for (auto& p : wpe.parameters("wpe.")) list.push_back(p);
  for (std::size_t i = 0; i < h.size(); ++i)
    for (auto& p : h[i].parameters("h." + std::to_string(i) + ".")) list.push_back(p);
  for (auto& p : ln_f.parameters("ln_f.")) list.push_back(p);
  return list;
}

void Gpt2Weights::backward(const Tensor& dx, const Record& record, Gpt2Weights& grads,
                           const nn::GradientsReady* ready) const {
  QKV_CHECK(record.h.size() == h.size() && grads.h.size() == h.size(),
            "Gpt2Weights::backward: the record and grads must come from a model with "
                << h.size() << " blocks");
  const auto report = [&](nn::ParameterList module_grads) {
    if (ready != nullptr && *ready) (*ready)(module_grads);
  };
  Tensor d = dx;  // (B, T, E)
  for (std::size_t i = h.size(); i-- > 0;) {
    d = h[i].backward(d, record.h[i], grads.h[i]);
    report(grads.h[i].parameters("h." + std::to_string(i) + "."));
  }
  // x = wte[ids] + wpe[positions]: both tables receive d.
  wpe.backward(d, record.wpe, grads.wpe);
  report(grads.wpe.parameters("wpe."));
  wte.backward(d, record.wte, grads.wte);
  report(grads.wte.parameters("wte."));
}

train::CrossEntropyResult gpt2_lm_loss(const Gpt2Config& c, const Gpt2Weights& w,
                                       std::span<const std::int64_t> tokens, std::int64_t B,
                                       std::int64_t T, Gpt2Weights* grads,
                                       const nn::GradientsReady* ready) {
  QKV_CHECK(B >= 1 && T >= 1 && T <= c.n_positions,
            "gpt2_lm_loss: need B >= 1 windows of T + 1 tokens with T in [1, n_positions = "
                << c.n_positions << "], got B = " << B << ", T = " << T);
  QKV_CHECK(static_cast<std::int64_t>(tokens.size()) == B * (T + 1),
            "gpt2_lm_loss: tokens holds " << tokens.size() << " ids, B·(T + 1) = " << B * (T + 1));
  std::vector<std::int64_t> inputs, targets;  // (B, T) each
  inputs.reserve(static_cast<std::size_t>(B * T));
  targets.reserve(static_cast<std::size_t>(B * T));
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t* row = tokens.data() + b * (T + 1);
    inputs.insert(inputs.end(), row, row + T);
    targets.insert(targets.end(), row + 1, row + T + 1);
  }
  for (const std::int64_t id : targets)
    QKV_CHECK(id >= 0 && id < c.vocab_size,
              "gpt2_lm_loss: token id " << id << " is outside [0, vocab_size = " << c.vocab_size << ")");
  const std::int64_t E = c.n_embd;
  Gpt2Weights::Record record;
  nn::LayerNorm::Record ln_record;
  nn::Linear::Record head_record;
  nn::Linear head;  // the LM head, tied: a view of wte
  head.weight = w.wte.weight;
  const Tensor x = w.forward(inputs, B, T, 0, nullptr, nullptr, grads ? &record : nullptr);
  const Tensor y = w.ln_f.forward(x.view({B * T, E}), grads ? &ln_record : nullptr);  // (B·T, E)
  const Tensor logits = head.forward(y, {}, grads ? &head_record : nullptr);          // (B·T, V)
  if (!grads) return train::cross_entropy(logits, targets, nullptr);
  Tensor dlogits;
  const train::CrossEntropyResult r = train::cross_entropy(logits, targets, &dlogits);
  nn::Linear head_grads;
  head_grads.weight = grads->wte.weight;  // a view: the head's gradient lands in wte's
  const Tensor dy = head.backward(dlogits, head_record, head_grads);  // (B·T, E)
  const Tensor dx = w.ln_f.backward(dy, ln_record, grads->ln_f).view({B, T, E});
  if (ready != nullptr && *ready) (*ready)(grads->ln_f.parameters("ln_f."));
  w.backward(dx, record, *grads, ready);
  return r;
}

std::vector<std::pair<std::string, Tensor>> hf_state_dict(Gpt2Weights& weights) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [name, t] : weights.parameters()) {
    const HfName hf = hf_name(name);
    tensors.emplace_back(hf.name, hf.transposed ? t->transpose(0, 1).contiguous() : *t);
  }
  return tensors;
}

void add_gpt2_weights(ModelFiles& files, Gpt2Weights& weights,
                      const std::map<std::string, std::string>& metadata, DType dtype) {
  QKV_CHECK(dtype == DType::f32 || dtype == DType::bf16,
            "save_gpt2: dtype must be f32 or bf16, got " << dtype_name(dtype));
  std::vector<std::pair<std::string, Tensor>> tensors = hf_state_dict(weights);
  if (dtype != DType::f32)
    for (auto& [name, t] : tensors) t = t.to(dtype);
  std::map<std::string, std::string> meta = metadata;
  meta.emplace("format", "pt");  // what transformers' safetensors loader expects
  save_safetensors(files.add("model.safetensors"), tensors, meta);
}

void save_gpt2(const std::string& dir, const Gpt2Config& config, Gpt2Weights& weights,
               const std::map<std::string, std::string>& metadata, DType dtype) {
  ModelFiles files(dir);
  add_gpt2_weights(files, weights, metadata, dtype);
  files.commit(config.to_json());
}

}  // namespace qkv::models
