// The model registry: config.json's model_type -> a loaded model that can show its
// attention. The one dispatch on model_type for every front end (`qkv run`, Python's
// qkv.load_model), so they cannot disagree about which types exist.
//
// The library registers the types it can load by itself ("bert", "gpt2", "use_lite");
// the applications register theirs ("qkv-seq2seq", "qkv-recommender", "qkv-vision": their
// directories hold the applications' files and vocabularies) through one explicit call,
// qkv::apps::register_model_types() (apps/model_types.h), that the CLI's main and the
// Python module's init make once. (The libraries are static archives: a static initialiser
// in an object file nothing references would be dropped by the linker.)
//
//   auto model = qkv::models::load_model("models/sotu-gpt");
//   qkv::models::AttentionRequest r;
//   r.text = "the cat sat";
//   qkv::models::ModelAttention a = model->attention(r);  // a.view.groups[0].layers[l]: (H, L, L)
//
// Virtual calls are fine here: this is the front ends' dispatch, not the compute path.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "qkv/nn/transformer.h"
#include "qkv/tensor.h"
#include "qkv/viz.h"

namespace qkv::models {

// What a model's attention is computed over.
enum class AttentionInput {
  none,   // the model has no attention (matrix factorisation)
  text,   // a text: bert, gpt2, use_lite, qkv-seq2seq
  image,  // an image file (IDX, PNG or PGM) and the index of an image in it: qkv-vision
  user,   // a user id whose history is attended over: qkv-recommender (sasrec)
};
const char* to_string(AttentionInput input);
// The input in words, for messages: "a text", "an image", "a user's history", "nothing (it
// has no attention)" (what `qkv heads` and `qkv explain --model` say of a model they refuse).
const char* describe(AttentionInput input);

struct AttentionRequest {
  std::string text;                // text models
  std::string pair;                // bert: a second segment ([CLS] text [SEP] pair [SEP]); "" = none
  std::string image_path;          // image models: an IDX file or one PNG/PGM image
  std::int64_t image_index = 0;    // image models: which image of the file
  std::int64_t user = 0;           // user models: the user's id (as in the ratings file)
};

struct ModelAttention {
  // The input as the model reads it: the query tokens of view.groups[0] (the text's
  // tokens; "[CLS]" and the patches; the points; the history's movies).
  std::vector<std::string> tokens;
  // Every attention of the model on this input, per group per layer (H, Lq, Lk)
  // probabilities: each row a distribution over the keys (sums to 1; a row of a point
  // model is its K neighbours' weights, zero elsewhere).
  viz::AttentionView view;
};

// One layer of a text model on one input, as `qkv explain --model` walks it: what the
// maths of the layer needs to be redone by hand, and the model's own result to check it
// against. Every text model of the registry is a stack of nn::TransformerEncoderLayer
// (BERT post-norm, GPT-2 pre-norm and causal, USE-lite pre-norm with a width change in
// layer 0, the date translator's encoder pre-norm), so the layer is described as one.
struct LayerWalk {
  std::vector<std::string> tokens;  // (L) the layer's rows, as attention() names them
  std::string group;                // the attention() group holding this layer's probabilities
  std::int64_t layers = 0;          // the stack's layer count: layer is in [0, layers)
  std::string about;                // which stack this is and how it differs from a textbook block
  bool causal = false;              // a causal mask on the scores (GPT-2)
  Tensor x;                         // (L, E) the layer's input, from the model's own forward
  // The layer's modules with plain f32 weights in torch's layout (Linear.weight is (out, in)):
  // self_attn.in_proj stacks W_q, W_k, W_v (rows [0, E'), [E', 2E'), [2E', 3E'), each head
  // d_k consecutive rows); config gives norm_first, activation, layer_norm_eps, nhead, d_out.
  nn::TransformerEncoderLayer layer;
  Tensor output;                    // (L, E_out) the model's own hidden state after the layer
};

// walk.{tokens, group, about, causal} set by the caller; hidden_states: the model's
// forward, the input of every layer then the last layer's output, (1, L, E_i) each;
// layer n's input is hidden_states[n] and its output hidden_states[n + 1]. Throws
// qkv::Error when n is not in [0, hidden_states.size() - 1).
LayerWalk walk_layer(LayerWalk walk, const std::vector<Tensor>& hidden_states,
                     nn::TransformerEncoderLayer layer, std::int64_t n);

class Model {
 public:
  virtual ~Model() = default;
  // config.json's model_type: "bert", "gpt2", ...
  virtual std::string model_type() const = 0;
  // One line for people: "GPT-2: 4 layers, 4 heads, n_embd 256, vocab 8192".
  virtual std::string description() const = 0;
  virtual AttentionInput attention_input() const = 0;
  // The attention of the request's input (the field attention_input() names). Throws
  // qkv::Error naming what is wrong with the input, and, for a model without attention,
  // saying so.
  virtual ModelAttention attention(const AttentionRequest& request) const = 0;
  // Layer `layer` (0-based) of the model on the request's text (see LayerWalk). Text models
  // implement it; the others throw qkv::Error saying that it takes a text model.
  virtual LayerWalk layer_walk(const AttentionRequest& request, std::int64_t layer) const;
};

// dir -> the model; errors name the directory and what is wrong.
using ModelLoader = std::function<std::unique_ptr<Model>(const std::string& dir)>;

// Adds (or replaces) the loader of `model_type`. Thread-safe.
void register_model_type(const std::string& model_type, ModelLoader loader);
// The registered types, sorted.
std::vector<std::string> model_types();
// config.json's model_type in `dir` ("bert" when the key is absent: BERT checkpoints
// older than the key have none). Throws qkv::Error for a missing or malformed config.json,
// and for a type that is not registered, naming it and listing the registered ones.
std::string model_type_of(const std::string& dir);
// model_type_of(dir)'s loader on dir.
std::unique_ptr<Model> load_model(const std::string& dir);

// The library's own types (bert, gpt2, use_lite). load_model and model_types call it;
// idempotent.
void register_library_model_types();

}  // namespace qkv::models
