// TransformerDecoderLayer (torch.nn's, batch-first, eval-mode dropout): one forward for
// inference, KV-cache decoding and training, and its backward.

#include "nn/common.h"

namespace qkv::nn {

TransformerDecoderLayer::TransformerDecoderLayer(const TransformerLayerConfig& c,
                                                 std::uint64_t seed)
    : config(c),
      self_attn(detail::attention_config(c), seed),
      multihead_attn(detail::attention_config(c), seed + 5),
      ff(c.d_model, c.dim_feedforward, c.activation, c.bias, seed + 10),
      norm1({c.d_model}, c.layer_norm_eps),
      norm2({c.d_model}, c.layer_norm_eps),
      norm3({c.d_model}, c.layer_norm_eps) {
  QKV_CHECK(c.dim_feedforward >= 1, "TransformerDecoderLayer: dim_feedforward must be >= 1, got "
                                        << c.dim_feedforward);
  QKV_CHECK(c.d_out == 0 || c.d_out == c.d_model,
            "TransformerDecoderLayer: d_out must be 0 or d_model (" << c.d_model
                << "): decoder layers do not change width, got " << c.d_out);
}

void TransformerDecoderLayer::pack(DType dtype) {
  self_attn.pack(dtype);
  multihead_attn.pack(dtype);
  ff.pack(dtype);
}

TransformerDecoderLayer::Cache TransformerDecoderLayer::make_cache(
    std::int64_t batch, std::int64_t capacity, std::int64_t memory_length) const {
  return {self_attn.make_cache(batch, capacity), multihead_attn.make_cache(batch, memory_length)};
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory,
                                        const AttentionMasks& tgt_masks,
                                        const AttentionMasks& memory_masks, Cache* cache,
                                        Tensor* self_probs, Tensor* cross_probs,
                                        Record* record) const {
  const char* fn = "TransformerDecoderLayer";
  detail::check_batch_first(tgt, config.d_model, fn, "tgt");
  detail::check_batch_first(memory, config.d_model, fn, "memory");
  Record* r = record;
  KVCache* self_cache = cache ? &cache->self_attn : nullptr;
  KVCache* cross_cache = cache ? &cache->cross_attn : nullptr;
  // The residual adds run inside the output products (out_proj, linear2).
  if (config.norm_first) {
    // x1 = x + sa(norm1(x)); x2 = x1 + ca(norm2(x1), mem); y = x2 + ff(norm3(x2))
    const Tensor n1 = norm1.forward(tgt, r ? &r->norm1 : nullptr);
    const Tensor x1 = self_attn.forward(n1, n1, n1, tgt_masks, tgt, self_cache, self_probs,
                                        r ? &r->self_attn : nullptr);
    const Tensor n2 = norm2.forward(x1, r ? &r->norm2 : nullptr);
    const Tensor x2 = multihead_attn.forward(n2, memory, memory, memory_masks, x1, cross_cache,
                                             cross_probs, r ? &r->cross_attn : nullptr);
    const Tensor n3 = norm3.forward(x2, r ? &r->norm3 : nullptr);
    return ff.forward(n3, x2, r ? &r->ff : nullptr);
  }
  // x1 = norm1(x + sa(x)); x2 = norm2(x1 + ca(x1, mem)); y = norm3(x2 + ff(x2))
  const Tensor x1 = norm1.forward(self_attn.forward(tgt, tgt, tgt, tgt_masks, tgt, self_cache,
                                                    self_probs, r ? &r->self_attn : nullptr),
                                  r ? &r->norm1 : nullptr);
  const Tensor x2 = norm2.forward(multihead_attn.forward(x1, memory, memory, memory_masks, x1,
                                                         cross_cache, cross_probs,
                                                         r ? &r->cross_attn : nullptr),
                                  r ? &r->norm2 : nullptr);
  return norm3.forward(ff.forward(x2, x2, r ? &r->ff : nullptr), r ? &r->norm3 : nullptr);
}

TransformerDecoderLayer::Gradients TransformerDecoderLayer::backward(
    const Tensor& dy, const Record& r, TransformerDecoderLayer& g) const {
  Gradients d;
  // Cross-attention: dquery to the layer's path, dkey (key is value: the memory) out.
  auto through_ca = [&](const Tensor& dca) {
    MultiheadAttention::Gradients a = multihead_attn.backward(dca, r.cross_attn, g.multihead_attn);
    d.memory = a.key;
    return a.query;
  };
  if (config.norm_first) {
    // y = x2 + ff(norm3(x2))
    Tensor dx2 = norm3.backward(ff.backward(dy, r.ff, g.ff), r.norm3, g.norm3);
    add_(dx2, dy);
    // x2 = x1 + ca(norm2(x1), mem)
    Tensor dx1 = norm2.backward(through_ca(dx2), r.norm2, g.norm2);
    add_(dx1, dx2);
    // x1 = x + sa(norm1(x))
    d.tgt = norm1.backward(self_attn.backward(dx1, r.self_attn, g.self_attn).query, r.norm1,
                           g.norm1);
    add_(d.tgt, dx1);
    return d;
  }
  // y = norm3(x2 + ff(x2))
  const Tensor ds3 = norm3.backward(dy, r.norm3, g.norm3);
  Tensor dx2 = ff.backward(ds3, r.ff, g.ff);
  add_(dx2, ds3);
  // x2 = norm2(x1 + ca(x1, mem))
  const Tensor ds2 = norm2.backward(dx2, r.norm2, g.norm2);
  Tensor dx1 = through_ca(ds2);
  add_(dx1, ds2);
  // x1 = norm1(x + sa(x))
  const Tensor ds1 = norm1.backward(dx1, r.norm1, g.norm1);
  d.tgt = self_attn.backward(ds1, r.self_attn, g.self_attn).query;
  add_(d.tgt, ds1);
  return d;
}

ParameterList TransformerDecoderLayer::parameters(const std::string& prefix) {
  ParameterList list = self_attn.parameters(prefix + "self_attn.");
  detail::append(list, multihead_attn.parameters(prefix + "multihead_attn."));
  detail::append(list, ff.parameters(prefix));
  detail::append(list, norm1.parameters(prefix + "norm1."));
  detail::append(list, norm2.parameters(prefix + "norm2."));
  detail::append(list, norm3.parameters(prefix + "norm3."));
  return list;
}

}  // namespace qkv::nn
