// Transformer (torch.nn's, batch-first, eval-mode dropout): encoder and decoder stacks,
// each ending in a LayerNorm; one forward for inference, decoding and training, and its
// backward.

#include "nn/common.h"

namespace qkv::nn {

Transformer::Transformer(const TransformerConfig& c, std::uint64_t seed)
    : config(c),
      encoder_norm({c.layer.d_model}, c.layer.layer_norm_eps),
      decoder_norm({c.layer.d_model}, c.layer.layer_norm_eps) {
  QKV_CHECK(c.num_encoder_layers >= 0 && c.num_decoder_layers >= 0,
            "Transformer: num_encoder_layers and num_decoder_layers must be >= 0, got "
                << c.num_encoder_layers << ", " << c.num_decoder_layers);
  for (std::int64_t i = 0; i < c.num_encoder_layers; ++i)
    encoder_layers.emplace_back(c.layer, seed + 100 * static_cast<std::uint64_t>(i));
  for (std::int64_t i = 0; i < c.num_decoder_layers; ++i)
    decoder_layers.emplace_back(c.layer, seed + 100 * static_cast<std::uint64_t>(i) + 50);
}

Transformer::Cache Transformer::make_cache(std::int64_t batch, std::int64_t capacity,
                                           std::int64_t memory_length) const {
  Cache cache;
  for (const auto& layer : decoder_layers)
    cache.push_back(layer.make_cache(batch, capacity, memory_length));
  return cache;
}

// forward: memory = encoder_norm(encoder(src))
Tensor Transformer::encode(const Tensor& src, const AttentionMasks& src_masks,
                           TransformerAttention* probs, Record* record) const {
  const std::size_t n = encoder_layers.size();
  if (record) record->encoder.resize(n);
  if (probs) probs->encoder_self.assign(n, Tensor());
  Tensor x = src;  // (B, S, E)
  for (std::size_t i = 0; i < n; ++i)
    x = encoder_layers[i].forward(x, src_masks, nullptr, probs ? &probs->encoder_self[i] : nullptr,
                                  record ? &record->encoder[i] : nullptr);
  return encoder_norm.forward(x, record ? &record->encoder_norm : nullptr);  // (B, S, E)
}

// forward: y = decoder_norm(decoder(tgt, memory))
Tensor Transformer::decode(const Tensor& tgt, const Tensor& memory,
                           const AttentionMasks& tgt_masks, const AttentionMasks& memory_masks,
                           Cache* cache, TransformerAttention* probs, Record* record) const {
  const std::size_t n = decoder_layers.size();
  QKV_CHECK(cache == nullptr || cache->size() == n,
            "Transformer::decode: the cache has " << (cache ? cache->size() : 0)
                                                  << " layers, the decoder " << n
                                                  << " (use make_cache)");
  if (record) record->decoder.resize(n);
  if (probs) {
    probs->decoder_self.assign(n, Tensor());
    probs->cross.assign(n, Tensor());
  }
  Tensor y = tgt;  // (B, T, E)
  for (std::size_t i = 0; i < n; ++i)
    y = decoder_layers[i].forward(y, memory, tgt_masks, memory_masks, cache ? &(*cache)[i] : nullptr,
                                  probs ? &probs->decoder_self[i] : nullptr,
                                  probs ? &probs->cross[i] : nullptr,
                                  record ? &record->decoder[i] : nullptr);
  return decoder_norm.forward(y, record ? &record->decoder_norm : nullptr);  // (B, T, E)
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const AttentionMasks& src_masks,
                            const AttentionMasks& tgt_masks, const AttentionMasks& memory_masks,
                            TransformerAttention* probs, Record* record) const {
  QKV_CHECK(src.defined() && tgt.defined() && src.dim() == 3 && tgt.dim() == 3 &&
                src.size(0) == tgt.size(0),
            "Transformer: src (B, S, E) and tgt (B, T, E) must share B, got "
                << (src.defined() ? src.shape_string() : std::string("undefined")) << " and "
                << (tgt.defined() ? tgt.shape_string() : std::string("undefined")));
  const Tensor memory = encode(src, src_masks, probs, record);  // (B, S, E)
  return decode(tgt, memory, tgt_masks, memory_masks, nullptr, probs, record);
}

Transformer::Gradients Transformer::backward(const Tensor& dy, const Record& record,
                                             Transformer& grads, const GradientsReady* ready) const {
  QKV_CHECK(record.decoder.size() == decoder_layers.size() &&
                record.encoder.size() == encoder_layers.size(),
            "Transformer::backward: the record is not from forward() of this model");
  const auto report = [&](ParameterList module_grads) {
    if (ready != nullptr && *ready) (*ready)(module_grads);
  };
  Gradients out;
  Tensor dmemory;  // (B, S, E), summed over every decoder layer's cross-attention
  // y = decoder_norm(decoder(tgt, memory))
  Tensor d = decoder_norm.backward(dy, record.decoder_norm, grads.decoder_norm);
  report(grads.decoder_norm.parameters("decoder.norm."));
  for (std::size_t i = decoder_layers.size(); i-- > 0;) {
    TransformerDecoderLayer::Gradients g =
        decoder_layers[i].backward(d, record.decoder[i], grads.decoder_layers[i]);
    report(grads.decoder_layers[i].parameters("decoder.layers." + std::to_string(i) + "."));
    d = g.tgt;
    if (!dmemory.defined()) dmemory = g.memory;
    else add_(dmemory, g.memory);
  }
  out.tgt = d;
  // memory = encoder_norm(encoder(src))
  if (!dmemory.defined()) dmemory = Tensor::zeros(record.encoder_norm.x.shape());
  d = encoder_norm.backward(dmemory, record.encoder_norm, grads.encoder_norm);
  report(grads.encoder_norm.parameters("encoder.norm."));
  for (std::size_t i = encoder_layers.size(); i-- > 0;) {
    d = encoder_layers[i].backward(d, record.encoder[i], grads.encoder_layers[i]);
    report(grads.encoder_layers[i].parameters("encoder.layers." + std::to_string(i) + "."));
  }
  out.src = d;
  return out;
}

ParameterList Transformer::parameters(const std::string& prefix) {
  ParameterList list;
  for (std::size_t i = 0; i < encoder_layers.size(); ++i)
    detail::append(list, encoder_layers[i].parameters(prefix + "encoder.layers." +
                                                      std::to_string(i) + "."));
  detail::append(list, encoder_norm.parameters(prefix + "encoder.norm."));
  for (std::size_t i = 0; i < decoder_layers.size(); ++i)
    detail::append(list, decoder_layers[i].parameters(prefix + "decoder.layers." +
                                                      std::to_string(i) + "."));
  detail::append(list, decoder_norm.parameters(prefix + "decoder.norm."));
  return list;
}

}  // namespace qkv::nn
