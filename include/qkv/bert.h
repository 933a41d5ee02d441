// qkv BERT — Hugging Face transformers' BertModel (modeling_bert.py), inference only.
//
//   x  = LayerNorm(word[ids] + position[0..L) + token_type[types])       embeddings
//   for each layer (post-norm, as the paper and HF):
//     a = softmax(q·kᵀ/√D + padding) · v                                 attention.self
//     x = LayerNorm(x + a·W_oᵀ + b_o)                                    attention.output
//     x = LayerNorm(x + gelu(x·W_iᵀ + b_i)·W_2ᵀ + b_2)                   intermediate, output
//   pooler_output = tanh(x[:, 0]·W_pᵀ + b_p)                             pooler ([CLS])
//
// A checkpoint is a Hugging Face directory: config.json (model_type "bert") and
// model.safetensors or its shards (SafeTensors::open_model). Tensor names are HF's, with or
// without the "bert." prefix (BertForMaskedLM, BertForPreTraining carry it), LayerNorm
// parameters as weight/bias or the older gamma/beta. The cls.* heads and
// embeddings.position_ids are ignored; any other tensor BertModel does not read is listed
// in BertWeights::unused_tensors. The pooler is optional: checkpoints saved without it
// (add_pooling_layer=False) load, and pooler_output is then undefined. Weights with a NaN
// or an infinity, and configs without layers, are refused.
//
// BertConfig (config.json), BertWeights (the checkpoint's tensors) and BertModel (which
// runs them) are separate types (docs/CONTRIBUTING.md). f32 weights are zero-copy views
// into the loaded checkpoint (they keep it alive); bf16/f16 weights are
// converted to f32 once, at load. Errors (qkv::Error) name the file or tensor, the
// expected shape and what was found.
//
// Differences from HF: a row of attention_mask that is all 0 gives attention output 0 for
// that sequence (qkv's fully-masked convention), where HF's additive finfo.min mask gives a
// uniform average; rows with at least one kept key agree.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "qkv/nn.h"
#include "qkv/safetensors.h"
#include "qkv/tensor.h"

namespace qkv::models {

struct BertConfig {
  std::int64_t vocab_size = 0;               // V
  std::int64_t hidden_size = 0;              // E
  std::int64_t num_hidden_layers = 0;        // N
  std::int64_t num_attention_heads = 0;      // H; E % H == 0
  std::int64_t intermediate_size = 0;        // F
  std::int64_t max_position_embeddings = 0;  // P: the longest input
  std::int64_t type_vocab_size = 2;          // T
  double layer_norm_eps = 1e-12;
  // hidden_act: "gelu" (erf) → none; "gelu_new" / "gelu_pytorch_tanh" → tanh.
  nn::GeluApproximation gelu = nn::GeluApproximation::none;

  std::int64_t head_dim() const { return hidden_size / num_attention_heads; }  // D
  // From the text of a config.json; model_type must be "bert" (absent is accepted, as in
  // the oldest Google exports). Throws qkv::Error naming `label` (where the text came
  // from) and the key when the text is not a JSON object or a value is missing or invalid:
  // sizes must be in [1, 2^31 - 1] (num_hidden_layers >= 1: a model without layers is
  // refused), hidden_size a multiple of num_attention_heads, layer_norm_eps finite as a float.
  static BertConfig from_json(const std::string& text, std::string label = "<memory>");
  // The same, read from the file at `path`; errors name the path.
  static BertConfig from_file(const std::string& path);
};

struct BertLayerWeights {
  Tensor query_weight, query_bias;                // (E, E), (E)   attention.self.query
  Tensor key_weight, key_bias;                    // (E, E), (E)   attention.self.key
  Tensor value_weight, value_bias;                // (E, E), (E)   attention.self.value
  Tensor attention_output_weight;                 // (E, E)        attention.output.dense
  Tensor attention_output_bias;                   // (E)
  Tensor attention_norm_weight, attention_norm_bias;  // (E), (E)  attention.output.LayerNorm
  Tensor intermediate_weight, intermediate_bias;  // (F, E), (F)   intermediate.dense
  Tensor output_weight, output_bias;              // (E, F), (E)   output.dense
  Tensor output_norm_weight, output_norm_bias;    // (E), (E)      output.LayerNorm
};

struct BertWeights {
  Tensor word_embeddings;        // (V, E)
  Tensor position_embeddings;    // (P, E)
  Tensor token_type_embeddings;  // (T, E)
  Tensor embeddings_norm_weight, embeddings_norm_bias;  // (E), (E)
  std::vector<BertLayerWeights> layers;                 // N
  Tensor pooler_weight;  // (E, E), undefined when the checkpoint has no pooler
  Tensor pooler_bias;    // (E),    undefined when the checkpoint has no pooler
  // The checkpoint's tensors that load() did not read, sorted, apart from those BertModel
  // knowingly leaves (the cls.* pre-training heads, embeddings.position_ids): a task head
  // of another architecture (classifier.*, qa_outputs.*) or a name qkv does not know. The
  // library never prints: front ends warn with these (Python: warnings.warn).
  std::vector<std::string> unused_tensors;

  // Looks every tensor up in `tensors` (see the top of the file for the names accepted).
  // `label` names the checkpoint in errors. Every tensor read must be finite, and the
  // checkpoint must hold no layer numbered num_hidden_layers or more (qkv::Error naming
  // the tensor); the other tensors it does not read are listed in unused_tensors.
  static BertWeights load(const BertConfig& config, const SafeTensors& tensors,
                          const std::string& label = "BERT checkpoint");
};

struct BertOutput {
  Tensor last_hidden_state;  // (B, L, E)
  Tensor pooler_output;      // (B, E); undefined without a pooler
  std::vector<Tensor> attentions;  // N × (B, H, L, L) probabilities, when asked for
  // When asked for (HF's output_hidden_states): N + 1 × (B, L, E), the embeddings (layer 0's
  // input) then every layer's output.
  std::vector<Tensor> hidden_states;
};

class BertModel {
 public:
  // Read-only after construction: the constructor builds the layers from them (packing the
  // products' weights, nn::Linear::pack), and forward() runs on those.
  const BertConfig config;
  const BertWeights weights;

  // Throws qkv::Error naming the weight when one does not have the shape the config gives.
  BertModel(BertConfig config, BertWeights weights);
  // dir/config.json + dir/model.safetensors (or its shards).
  static BertModel load(const std::string& dir);

  // input_ids, token_type_ids, attention_mask: (B, L) row-major, batch·length entries each.
  // token_type_ids empty = all 0; attention_mask empty = all 1, else 1 = keep, 0 = padding
  // (any other value is an error). A mask whose zeros form a suffix of every row becomes
  // per-row key lengths, any other a bool mask. L must be in [1, max_position_embeddings].
  // With output_attentions, every layer's softmax probabilities (the reference path of
  // qkv::attention) are returned; the columns of padded keys are 0 there.
  BertOutput forward(std::span<const std::int64_t> input_ids, std::int64_t batch,
                     std::int64_t length, std::span<const std::int64_t> token_type_ids = {},
                     std::span<const std::int64_t> attention_mask = {},
                     bool output_attentions = false, bool output_hidden_states = false) const;
  // Layer n as forward() runs it, with its plain in_proj weight (query, key and value rows
  // stacked) beside the packed one: for reading the weights (qkv explain).
  nn::TransformerEncoderLayer layer(std::int64_t n) const;

 private:
  // Each layer is a post-norm nn::TransformerEncoderLayer with GELU, built from
  // weights.layers: query, key and value stacked into self_attn.in_proj (rows [0, E),
  // [E, 2E), [2E, 3E), so one product makes q, k and v), attention.output.dense =
  // self_attn.out_proj, attention.output.LayerNorm = norm1, intermediate.dense =
  // ff.linear1, output.dense = ff.linear2, output.LayerNorm = norm2. Every Linear is
  // packed; the stacked in_proj keeps only its packed copy (the plain rows are the
  // checkpoint's).
  std::vector<nn::TransformerEncoderLayer> layers_;
  nn::LayerNorm embeddings_norm_;  // views of weights.embeddings_norm_*
  nn::Linear pooler_;              // views of weights.pooler_*, packed; undefined without a pooler
};

}  // namespace qkv::models
