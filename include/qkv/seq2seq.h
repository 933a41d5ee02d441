// An encoder–decoder Transformer over token ids ("Attention Is All You Need", pre-norm
// by default), trainable by qkv: the model behind `qkv train dates` / `qkv translate`.
//
//   src_x = src_embed[src]·√E + PE[:S]                       (B, S, E)
//   tgt_x = tgt_embed[tgt_in]·√E + PE[:T]                    (B, T, E)
//   h     = transformer(src_x, tgt_x)   encoder keys masked past src_lengths[b] (padding),
//                                       decoder self-attention causal
//   logits = generator(h)                                    (B, T, V)
//
// PE is the sinusoidal table (nn::sinusoidal_positional_encoding). Parameter names match
// a torch module with the same children — src_embed (nn.Embedding), tgt_embed,
// transformer (nn.Transformer, batch_first=True, dropout=0), generator (nn.Linear) — so a
// torch state_dict maps 1:1 (scripts/bench_training.py builds exactly that module).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "qkv/nn.h"
#include "qkv/safetensors.h"
#include "qkv/tensor.h"
#include "qkv/train.h"

namespace qkv::models {

struct Seq2SeqConfig {
  std::int64_t vocab_size = 0;  // V, shared by source and target ids
  std::int64_t d_model = 128;   // E
  std::int64_t nhead = 4;       // H
  std::int64_t dim_feedforward = 256;
  std::int64_t num_encoder_layers = 2;
  std::int64_t num_decoder_layers = 2;
  std::int64_t max_len = 64;    // longest source or target sequence
  double layer_norm_eps = 1e-5;
  bool norm_first = true;
  nn::Activation activation = nn::Activation::relu;

  // config.json form: {"model_type": "qkv-seq2seq", "vocab_size": ..., ...}
  std::string to_json() const;
  // The number of parameters a Seq2Seq of this config has (what Seq2Seq::num_parameters
  // counts), computed without building it. qkv::Error beyond 2^40.
  std::int64_t num_parameters() const;
  // The inverse of to_json. Throws qkv::Error naming `label` (where the text came from)
  // and the key when a value is missing or invalid: every size must be in [1, 2^31 - 1]
  // (at least one encoder and one decoder layer), d_model a multiple of nhead,
  // layer_norm_eps finite as a float, and the model at most 2^40 parameters.
  static Seq2SeqConfig from_json(const std::string& text, std::string label = "<memory>");
  // The same, read from the file at `path`; errors name the path.
  static Seq2SeqConfig from_file(const std::string& path);
};

// One training batch, padded with id 0. Row b of src holds src_lengths[b] real tokens;
// tgt_in is BOS + target, tgt_out is target + EOS, with `ignore_index` where padded.
struct Seq2SeqBatch {
  std::int64_t batch = 0;       // B
  std::int64_t src_len = 0;     // S
  std::int64_t tgt_len = 0;     // T
  std::vector<std::int64_t> src;          // (B, S)
  std::vector<std::int64_t> src_lengths;  // (B)
  std::vector<std::int64_t> tgt_in;       // (B, T)
  std::vector<std::int64_t> tgt_out;      // (B, T), ignore_index = -100 where padded
};

// Attention probabilities of one forward, per layer (B, H, Lq, Lk), for the viewers.
struct Seq2SeqAttention {
  std::vector<Tensor> encoder_self;   // num_encoder_layers × (B, H, S, S)
  std::vector<Tensor> decoder_self;   // num_decoder_layers × (B, H, T, T)
  std::vector<Tensor> cross;          // num_decoder_layers × (B, H, T, S)
};

class Seq2Seq {
 public:
  Seq2SeqConfig config;
  nn::Embedding src_embed;   // (V, E)
  nn::Embedding tgt_embed;   // (V, E)
  nn::Transformer transformer;
  nn::Linear generator;      // (V, E), (V)

  Seq2Seq() = default;
  explicit Seq2Seq(const Seq2SeqConfig& config, std::uint64_t seed = 0);

  nn::ParameterList parameters(const std::string& prefix = "");
  std::int64_t num_parameters();

  // Loss (mean cross-entropy over non-ignored targets) of one batch; adds ∂loss/∂θ into
  // `grads` (a Seq2Seq of the same config; zero it first to get this batch's gradient).
  // `ready`, when given, hears each module's gradients as soon as they are final: the
  // generator, the transformer's modules last first (nn::Transformer::backward), then the
  // source and target embeddings.
  train::CrossEntropyResult forward_backward(const Seq2SeqBatch& batch, Seq2Seq& grads,
                                             double label_smoothing = 0.0,
                                             const nn::GradientsReady* ready = nullptr) const;

  // Logits (B, T, V) of a batch (tgt_out is not read). With `attention`, the
  // probabilities of every attention (reference path) are returned too.
  Tensor forward(const Seq2SeqBatch& batch, Seq2SeqAttention* attention = nullptr) const;

  // One source (ids, 1 to max_len) through the encoder -> num_encoder_layers + 1 ×
  // (1, S, E): the embedded source (layer 0's input), then every encoder layer's output
  // (before the encoder's final LayerNorm), as forward() computes them.
  std::vector<Tensor> encoder_hidden_states(std::span<const std::int64_t> src) const;

  // Greedy decoding: each source (ids without padding) -> target ids (no BOS/EOS), at
  // most max_new_tokens each. Sources are decoded together as one batch.
  std::vector<std::vector<std::int64_t>> greedy_decode(
      const std::vector<std::vector<std::int64_t>>& sources, std::int64_t bos, std::int64_t eos,
      std::int64_t max_new_tokens) const;

  // model.safetensors (the parameters, f32) + config.json in `dir`; load reads them back.
  // load refuses (qkv::Error naming the tensor) weights that are missing, mis-shaped or not
  // finite, a config that describes more parameters than the weights hold, and tensors of
  // layers beyond the config's counts. The names of any other tensors it did not read go
  // to `unused` when given (a checkpoint's optimizer.* state, or a file qkv did not
  // write): the library never prints, front ends warn.
  void save(const std::string& dir, const std::map<std::string, std::string>& metadata = {});
  static Seq2Seq load(const std::string& dir, std::vector<std::string>* unused = nullptr);
  static Seq2Seq load(const SafeTensors& weights, const Seq2SeqConfig& config,
                      std::vector<std::string>* unused = nullptr,
                      const std::string& label = "Seq2Seq::load");
};

}  // namespace qkv::models
