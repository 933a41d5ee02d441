// LayerWalk (qkv/model_registry.h): one layer of a text model, for `qkv explain --model`.
// The models fill it in the registry's entries (registry.cpp, apps/dates/model_type.cpp)
// from their own forward's hidden states; this file holds what they share.
#include "qkv/error.h"
#include "qkv/model_registry.h"

namespace qkv::models {

LayerWalk walk_layer(LayerWalk walk, const std::vector<Tensor>& hidden_states,
                     nn::TransformerEncoderLayer layer, std::int64_t n) {
  const auto layers = static_cast<std::int64_t>(hidden_states.size()) - 1;
  QKV_CHECK(n >= 0 && n < layers, "layer " << n << " is out of range: the " << walk.group
                                           << " has layers 0-" << layers - 1);
  QKV_CHECK(layer.self_attn.in_proj.weight.defined(),
            "walk_layer: the layer's in_proj must hold its plain weight");
  walk.layers = layers;
  walk.x = hidden_states[static_cast<std::size_t>(n)].select(0, 0);           // (L, E)
  walk.output = hidden_states[static_cast<std::size_t>(n + 1)].select(0, 0);  // (L, E_out)
  walk.layer = std::move(layer);
  return walk;
}

LayerWalk Model::layer_walk(const AttentionRequest&, std::int64_t) const {
  throw Error("a layer walk takes a model whose input is a text; this model is " + model_type() +
              ", whose input is " + describe(attention_input()));
}

}  // namespace qkv::models
