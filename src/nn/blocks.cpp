// FeedForward, TransformerEncoderLayer, TransformerDecoderLayer, Transformer — the
// forward passes of torch.nn's classes in eval mode (dropout is the identity).

#include "nn/common.h"

namespace qkv::nn {

namespace {

void append(ParameterList& list, ParameterList more) {
  for (auto& p : more) list.push_back(std::move(p));
}

MultiheadAttentionConfig attention_config(const TransformerLayerConfig& c) {
  MultiheadAttentionConfig m;
  m.embed_dim = c.d_model;
  m.num_heads = c.nhead;
  m.bias = c.bias;
  return m;
}

// torch's _sa_block / _mha_block without dropout.
Tensor attend(const MultiheadAttention& mha, const Tensor& x, const Tensor& mem,
              const AttentionMasks& masks) {
  return mha.forward(x, mem, mem, masks).out;
}

}  // namespace

FeedForward::FeedForward(std::int64_t d_model, std::int64_t dim_feedforward, Activation act,
                         bool bias, std::uint64_t seed)
    : linear1(d_model, dim_feedforward, bias, seed),
      linear2(dim_feedforward, d_model, bias, seed + 1),
      activation(act) {}

Tensor FeedForward::forward(const Tensor& x, const Tensor& residual) const {
  // The activation and the residual run inside the products (oneDNN post-ops).
  const LinearActivation act =
      activation == Activation::relu ? LinearActivation::relu : LinearActivation::gelu_erf;
  const Tensor h = linear(x, linear1.weight, linear1.bias, {act, Tensor()});  // (..., F)
  return linear(h, linear2.weight, linear2.bias, {LinearActivation::none, residual});  // (..., E)
}

ParameterList FeedForward::parameters(const std::string& prefix) {
  ParameterList list = linear1.parameters(prefix + "linear1.");
  append(list, linear2.parameters(prefix + "linear2."));
  return list;
}

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerLayerConfig& c,
                                                 std::uint64_t seed)
    : config(c),
      self_attn(attention_config(c), seed),
      ff(c.d_model, c.dim_feedforward, c.activation, c.bias, seed + 10),
      norm1({c.d_model}, c.layer_norm_eps),
      norm2({c.d_model}, c.layer_norm_eps) {
  QKV_CHECK(c.dim_feedforward >= 1, "TransformerEncoderLayer: dim_feedforward must be >= 1, got "
                                        << c.dim_feedforward);
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const AttentionMasks& masks) const {
  detail::check_batch_first(src, config.d_model, "TransformerEncoderLayer", "src");
  Tensor x = src;  // (B, L, E)
  if (config.norm_first) {
    Tensor n1 = norm1.forward(x);
    x = detail::add(x, attend(self_attn, n1, n1, masks), "TransformerEncoderLayer");
    x = ff.forward(norm2.forward(x), /*residual=*/x);
  } else {
    x = norm1.forward(detail::add(x, attend(self_attn, x, x, masks), "TransformerEncoderLayer"));
    x = norm2.forward(ff.forward(x, /*residual=*/x));
  }
  return x;
}

ParameterList TransformerEncoderLayer::parameters(const std::string& prefix) {
  ParameterList list = self_attn.parameters(prefix + "self_attn.");
  append(list, ff.parameters(prefix));
  append(list, norm1.parameters(prefix + "norm1."));
  append(list, norm2.parameters(prefix + "norm2."));
  return list;
}

TransformerDecoderLayer::TransformerDecoderLayer(const TransformerLayerConfig& c,
                                                 std::uint64_t seed)
    : config(c),
      self_attn(attention_config(c), seed),
      multihead_attn(attention_config(c), seed + 5),
      ff(c.d_model, c.dim_feedforward, c.activation, c.bias, seed + 10),
      norm1({c.d_model}, c.layer_norm_eps),
      norm2({c.d_model}, c.layer_norm_eps),
      norm3({c.d_model}, c.layer_norm_eps) {
  QKV_CHECK(c.dim_feedforward >= 1, "TransformerDecoderLayer: dim_feedforward must be >= 1, got "
                                        << c.dim_feedforward);
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory,
                                        const AttentionMasks& tgt_masks,
                                        const AttentionMasks& memory_masks) const {
  detail::check_batch_first(tgt, config.d_model, "TransformerDecoderLayer", "tgt");
  detail::check_batch_first(memory, config.d_model, "TransformerDecoderLayer", "memory");
  const char* fn = "TransformerDecoderLayer";
  Tensor x = tgt;  // (B, T, E)
  if (config.norm_first) {
    Tensor n1 = norm1.forward(x);
    x = detail::add(x, attend(self_attn, n1, n1, tgt_masks), fn);
    x = detail::add(x, attend(multihead_attn, norm2.forward(x), memory, memory_masks), fn);
    x = ff.forward(norm3.forward(x), /*residual=*/x);
  } else {
    x = norm1.forward(detail::add(x, attend(self_attn, x, x, tgt_masks), fn));
    x = norm2.forward(detail::add(x, attend(multihead_attn, x, memory, memory_masks), fn));
    x = norm3.forward(ff.forward(x, /*residual=*/x));
  }
  return x;
}

ParameterList TransformerDecoderLayer::parameters(const std::string& prefix) {
  ParameterList list = self_attn.parameters(prefix + "self_attn.");
  append(list, multihead_attn.parameters(prefix + "multihead_attn."));
  append(list, ff.parameters(prefix));
  append(list, norm1.parameters(prefix + "norm1."));
  append(list, norm2.parameters(prefix + "norm2."));
  append(list, norm3.parameters(prefix + "norm3."));
  return list;
}

Transformer::Transformer(const TransformerConfig& c, std::uint64_t seed)
    : config(c),
      encoder_norm({c.layer.d_model}, c.layer.layer_norm_eps),
      decoder_norm({c.layer.d_model}, c.layer.layer_norm_eps) {
  QKV_CHECK(c.num_encoder_layers >= 0 && c.num_decoder_layers >= 0,
            "Transformer: num_encoder_layers and num_decoder_layers must be >= 0");
  for (std::int64_t i = 0; i < c.num_encoder_layers; ++i)
    encoder_layers.emplace_back(c.layer, seed + 100 * static_cast<std::uint64_t>(i));
  for (std::int64_t i = 0; i < c.num_decoder_layers; ++i)
    decoder_layers.emplace_back(c.layer, seed + 100 * static_cast<std::uint64_t>(i) + 50);
}

Tensor Transformer::encode(const Tensor& src, const AttentionMasks& src_masks) const {
  Tensor x = src;  // (B, S, E)
  for (const auto& layer : encoder_layers) x = layer.forward(x, src_masks);
  return encoder_norm.forward(x);
}

Tensor Transformer::decode(const Tensor& tgt, const Tensor& memory,
                           const AttentionMasks& tgt_masks,
                           const AttentionMasks& memory_masks) const {
  Tensor x = tgt;  // (B, T, E)
  for (const auto& layer : decoder_layers) x = layer.forward(x, memory, tgt_masks, memory_masks);
  return decoder_norm.forward(x);
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt,
                            const AttentionMasks& src_masks, const AttentionMasks& tgt_masks,
                            const AttentionMasks& memory_masks) const {
  QKV_CHECK(src.defined() && tgt.defined() && src.dim() == 3 && tgt.dim() == 3 &&
                src.size(0) == tgt.size(0),
            "Transformer: src (B, S, E) and tgt (B, T, E) must share B, got "
                << (src.defined() ? src.shape_string() : std::string("undefined")) << " and "
                << (tgt.defined() ? tgt.shape_string() : std::string("undefined")));
  const Tensor memory = encode(src, src_masks);  // (B, S, E)
  return decode(tgt, memory, tgt_masks, memory_masks);
}

ParameterList Transformer::parameters(const std::string& prefix) {
  ParameterList list;
  for (std::size_t i = 0; i < encoder_layers.size(); ++i)
    append(list, encoder_layers[i].parameters(prefix + "encoder.layers." + std::to_string(i) + "."));
  append(list, encoder_norm.parameters(prefix + "encoder.norm."));
  for (std::size_t i = 0; i < decoder_layers.size(); ++i)
    append(list, decoder_layers[i].parameters(prefix + "decoder.layers." + std::to_string(i) + "."));
  append(list, decoder_norm.parameters(prefix + "decoder.norm."));
  return list;
}

}  // namespace qkv::nn
