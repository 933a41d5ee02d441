// GPT-2 (Radford et al. 2019) as Hugging Face's GPT2LMHeadModel publishes it, with a KV
// cache for generation.
//
//   x = wte[ids] + wpe[positions]                              (1, T, E)
//   for each block h.i (pre-norm):
//     x = x + attn.c_proj(causal_attention(split(attn.c_attn(ln_1(x)))))
//     x = x + mlp.c_proj(gelu_tanh(mlp.c_fc(ln_2(x))))
//   logits = ln_f(x) · wteᵀ                                    (lm_head tied to wte)
//
// Checkpoint names (with or without the "transformer." prefix): wte.weight (V, E),
// wpe.weight (P, E), h.N.ln_1.{weight,bias} (E), h.N.attn.c_attn.{weight (E, 3E), bias (3E)},
// h.N.attn.c_proj.{weight (E, E), bias (E)}, h.N.ln_2.*, h.N.mlp.c_fc.{weight (E, F),
// bias (F)}, h.N.mlp.c_proj.{weight (F, E), bias (E)}, ln_f.{weight,bias} (E). The Conv1D
// weights are stored (in, out); they are transposed once at load into nn::Linear's
// (out, in). The attn.bias / attn.masked_bias buffers are ignored; lm_head.weight, when
// present, must equal wte.weight; any other tensor not read is listed in
// Gpt2Weights::unused_tensors. A missing, mis-shaped or non-finite (NaN, ±inf) tensor, or
// one of a block h.N with N >= n_layer, is a qkv::Error naming it (and the expected shape).
//
// Config, weights and state are kept apart (docs/CONTRIBUTING.md): Gpt2Config is read from
// config.json, Gpt2Weights holds the parameters (embeddings and norms are views into the
// mapped checkpoint when f32; the Conv1D weights are transposed copies), and Gpt2State
// holds the per-layer KV caches, allocated once at full capacity (n_positions) before
// generation.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "qkv/files.h"
#include "qkv/nn.h"
#include "qkv/options.h"
#include "qkv/rng.h"
#include "qkv/safetensors.h"
#include "qkv/tensor.h"
#include "qkv/train.h"

namespace qkv::models {

struct Gpt2Config {
  std::int64_t vocab_size = 50257;   // V
  std::int64_t n_positions = 1024;   // P: the longest sequence
  std::int64_t n_embd = 768;         // E
  std::int64_t n_layer = 12;
  std::int64_t n_head = 12;          // H; head dim D = E / H
  std::int64_t n_inner = 0;          // F; 0 (config null) = 4·E
  double layer_norm_epsilon = 1e-5;
  nn::GeluApproximation activation = nn::GeluApproximation::tanh;  // "gelu_new"
  std::optional<std::int64_t> eos_token_id;  // config.json's, when given

  // From the text of a Hugging Face config.json; model_type must be "gpt2". Keys that are
  // absent keep the defaults above. Unsupported variants (scale_attn_by_inverse_layer_idx,
  // scale_attn_weights = false, an unknown activation_function) and invalid values throw
  // qkv::Error naming `label` (where the text came from) and the key: sizes must be in
  // [1, 2^31 - 1] (n_layer >= 1: a model without blocks is refused), n_head must divide
  // n_embd, eos_token_id must be in [0, vocab_size), layer_norm_epsilon finite as a float.
  static Gpt2Config from_json(const std::string& text, std::string label = "<memory>");
  // The same, read from the file at `path`; errors name the path.
  static Gpt2Config from_file(const std::string& path);
  // config.json as Hugging Face writes it for GPT2LMHeadModel (model_type "gpt2",
  // architectures, n_ctx, activation_function, bos/eos_token_id when eos_token_id is set):
  // from_json reads it back to this config.
  std::string to_json() const;
  // The number of parameters of a model of this config (the LM head is tied: not counted).
  std::int64_t num_parameters() const;
  std::int64_t head_dim() const { return n_embd / n_head; }
  std::int64_t inner() const { return n_inner > 0 ? n_inner : 4 * n_embd; }
  // Each block's nn::TransformerEncoderLayer config: pre-norm, GELU, F = inner().
  nn::TransformerLayerConfig block_config() const;
};

// What one generation run mutates: the KV cache of every layer.
struct Gpt2State {
  std::vector<nn::KVCache> caches;  // per layer: k, v (1, H, P, D)
  std::int64_t length() const { return caches.empty() ? 0 : caches.front().length; }
  void clear() {
    for (auto& c : caches) c.clear();
  }
};

// Each block h.i is a pre-norm (norm_first) nn::TransformerEncoderLayer with GELU (tanh
// form by default) whose self-attention is causal:
//   ln_1 = norm1 (E), attn.c_attn = self_attn.in_proj (3E, E) (weight transposed),
//   attn.c_proj = self_attn.out_proj (E, E), ln_2 = norm2 (E),
//   mlp.c_fc = ff.linear1 (F, E), mlp.c_proj = ff.linear2 (E, F).
struct Gpt2Weights {
  nn::Embedding wte;                             // (V, E); also the lm_head (tied)
  nn::Embedding wpe;                             // (P, E)
  std::vector<nn::TransformerEncoderLayer> h;    // n_layer blocks
  nn::LayerNorm ln_f;                            // weight, bias (E)
  // The checkpoint's tensors from_safetensors did not read, sorted, apart from the blocks'
  // attn.bias / attn.masked_bias buffers. The library never prints: front ends warn with
  // these (Python: warnings.warn).
  std::vector<std::string> unused_tensors;

  // What backward() needs of one forward.
  struct Record {
    nn::Embedding::Record wte, wpe;
    std::vector<nn::TransformerEncoderLayer::Record> h;
  };

  // A new model with GPT-2's initialisation (GPT2PreTrainedModel._init_weights): every
  // product weight and both embeddings N(0, 0.02²), the residual projections attn.c_proj
  // and mlp.c_proj N(0, (0.02 / √(2·n_layer))²), biases 0, LayerNorm gains 1 and shifts 0.
  // Deterministic in `seed` (qkv::Rng, drawn in parameters() order).
  static Gpt2Weights initialized(const Gpt2Config& config, std::uint64_t seed);
  // Zero tensors of the same shapes, for gradients.
  static Gpt2Weights zeros_like(const Gpt2Config& config);

  // The one forward of GPT-2's trunk, for generation, scoring and training:
  // ids (B·T, row-major (B, T)) at positions [offset, offset + T) -> the last block's
  // output (B, T, E), before ln_f. `state` (B = 1) appends the T tokens' keys and values to
  // its caches; `attentions` receives every layer's probabilities (1, H, T, T); `record`
  // keeps what backward() needs; `hidden_states` receives n_layer + 1 × (B, T, E): the
  // embeddings (block 0's input), then every block's output. Ids and positions are checked
  // by the embeddings.
  Tensor forward(std::span<const std::int64_t> ids, std::int64_t B, std::int64_t T,
                 std::int64_t offset = 0, Gpt2State* state = nullptr,
                 std::vector<Tensor>* attentions = nullptr, Record* record = nullptr,
                 std::vector<Tensor>* hidden_states = nullptr) const;
  // dx (B, T, E), the gradient of forward()'s output -> adds ∂/∂θ into `grads`.
  // `ready`, when given, hears each module's gradients once final: the blocks last first,
  // then wte and wpe.
  void backward(const Tensor& dx, const Record& record, Gpt2Weights& grads,
                const nn::GradientsReady* ready = nullptr) const;

  // qkv's names: wte.weight, wpe.weight, h.N.<nn::TransformerEncoderLayer's names>,
  // ln_f.weight, ln_f.bias. save_gpt2 writes them under Hugging Face's names.
  nn::ParameterList parameters();
};


class Gpt2Model {
 public:
  // Read-only after construction: the constructor packs the products' weights
  // (nn::Linear::pack, the LM head included), and forward() runs on those packed copies.
  const Gpt2Config config;
  const Gpt2Weights weights;
  // The packed products' dtype: f32 (exact, the default) or bf16 (half the memory traffic
  // per decoded token; weights and the products' inputs rounded to bf16, see
  // nn::PackedWeight). Embeddings, LayerNorm, attention and the KV cache stay f32.
  const DType product_dtype = DType::f32;

  // Throws qkv::Error naming the weight when one does not have the shape the config gives.
  Gpt2Model(Gpt2Config config, Gpt2Weights weights, DType product_dtype = DType::f32);
  // dir/config.json + dir/model.safetensors (or its shards).
  static Gpt2Model load(const std::string& dir, DType product_dtype = DType::f32);
  static Gpt2Model from_safetensors(const Gpt2Config& config, const SafeTensors& tensors,
                                    DType product_dtype = DType::f32);

  // Caches for one sequence of up to n_positions tokens, allocated here, once.
  Gpt2State make_state() const;

  // The next T = ids.size() >= 1 tokens at positions state.length() ... ; their keys and
  // values are appended to `state`. -> (V): the logits of the last of them.
  Tensor forward(std::span<const std::int64_t> ids, Gpt2State& state) const;

  // The whole sequence at once, no cache (causal attention over all of it).
  // -> (L, V): the logits of every position. When `attentions` is given, it is replaced by
  // every layer's causal self-attention probabilities, n_layer × (1, H, L, L) (computed by
  // the reference attention path, as nn::MultiheadAttention's probs).
  Tensor forward_full(std::span<const std::int64_t> ids,
                      std::vector<Tensor>* attentions = nullptr) const;

  // B sequences of T tokens at once, no cache: ids (B·T, row-major (B, T)) at positions
  // [0, T) -> the logits (R, V) of the R positions `rows` (indices into the flattened
  // (B, T), each in [0, B·T)), in that order. Only those rows go through ln_f and the LM
  // head: scoring reads the positions it scores, not all of them.
  Tensor forward_rows(std::span<const std::int64_t> ids, std::int64_t B, std::int64_t T,
                      std::span<const std::int64_t> rows) const;

 private:
  nn::Linear lm_head_;  // weight: wte (V, E), packed; no bias

  // x (1, T, E) at positions [offset, offset + T) through every block (with the caches when
  // given, appending the T tokens) -> the final hidden states (1, T, E) after ln_f.
  Tensor run(std::span<const std::int64_t> ids, std::int64_t offset, Gpt2State* state,
             std::vector<Tensor>* attentions) const;
};

struct SamplingOptions {
  std::int64_t max_new_tokens = 20;
  double temperature = 0.0;  // 0 = greedy (argmax; top_k and top_p are then ignored)
  std::int64_t top_k = 0;    // 0 = off; else keep the k most likely tokens
  double top_p = 1.0;        // nucleus: keep the most likely tokens until their mass >= top_p
  std::uint64_t seed = 0;
  std::optional<std::int64_t> eos_id;  // stop after generating it (it is included)
};

// Throws naming the option: temperature < 0 or not finite, top_k < 0, top_p not in (0, 1],
// max_new_tokens < 0.
void validate(const SamplingOptions& options);
// The sampling options of `qkv generate` and GPT2Model.generate, declared once
// (qkv/options.h): max_new_tokens, temperature, top_k, top_p, seed (eos_id is the model's).
const options::OptionSet<SamplingOptions>& sampling_options();

// One token from logits (V), Hugging Face's order: logits / temperature, then top-k, then
// top-p, then a draw from the renormalised distribution with one rng.uniform(). Greedy
// (temperature 0) returns the first index of the maximum and draws nothing. Ties in
// top-k/top-p are broken by the lower id.
std::int64_t sample_token(std::span<const float> logits, const SamplingOptions& options, Rng& rng);

// Generates up to max_new_tokens after `prompt` (non-empty), stopping after eos_id.
// Throws before starting when prompt.size() + max_new_tokens > n_positions (or the prompt
// alone exceeds it). on_token, when given, is called with each new id as it is produced.
// -> the generated ids (the prompt not included).
std::vector<std::int64_t> generate(const Gpt2Model& model, std::span<const std::int64_t> prompt,
                                   const SamplingOptions& options,
                                   const std::function<void(std::int64_t)>& on_token = {});

// The weights under GPT2LMHeadModel's names ("transformer.h.N.attn.c_attn.weight", ...)
// and layouts (the Conv1D weights (in, out): transposed copies of nn::Linear's (out, in));
// the tied lm_head.weight left out, as save_pretrained does. What save_gpt2 writes.
std::vector<std::pair<std::string, Tensor>> hf_state_dict(Gpt2Weights& weights);

// Writes `dir` as a Hugging Face GPT-2 directory: config.json (Gpt2Config::to_json) and
// model.safetensors (hf_state_dict). dtype f32 or bf16 (rounded to nearest
// even: half the file; the loader widens it back). `metadata` goes into the safetensors
// header. The directory changes as a whole (ModelFiles, qkv/files.h); a caller that writes
// the tokenizer with the weights adds its files and model.safetensors (add_gpt2_weights)
// to one ModelFiles and commits it with config.to_json().
void save_gpt2(const std::string& dir, const Gpt2Config& config, Gpt2Weights& weights,
               const std::map<std::string, std::string>& metadata = {}, DType dtype = DType::f32);
void add_gpt2_weights(ModelFiles& files, Gpt2Weights& weights,
                      const std::map<std::string, std::string>& metadata = {}, DType dtype = DType::f32);

// Next-token cross-entropy of B windows of T + 1 tokens (`tokens`, row-major (B, T + 1)):
// the model reads columns [0, T) and is scored on columns [1, T + 1), every position
// counted. With `grads` (a Gpt2Weights of the same shapes), adds ∂loss/∂θ into it; the
// tied LM head's gradient goes into grads.wte. T must be in [1, n_positions].
//   logits = ln_f(forward(tokens[:, :T])) · wteᵀ                (B·T, V)
// `ready` (with grads) hears each module's gradients as soon as they are final: ln_f, the
// blocks last first, then wpe and wte (the tied head's gradient lands in wte first).
train::CrossEntropyResult gpt2_lm_loss(const Gpt2Config& config, const Gpt2Weights& weights,
                                       std::span<const std::int64_t> tokens, std::int64_t B,
                                       std::int64_t T, Gpt2Weights* grads = nullptr,
                                       const nn::GradientsReady* ready = nullptr);

}  // namespace qkv::models
