// Forward passes that keep their activations, and the backward passes, of Linear,
// FeedForward, MultiheadAttention, the encoder and decoder layers and Transformer.
// Each backward mirrors its forward line by line, in reverse.

#include <algorithm>

#include "nn/common.h"
#include "qkv/nn_backward.h"
#include "qkv/threads.h"

namespace qkv::nn {

namespace {

// a += b, same shape; a is contiguous f32 and owned by the caller.
void add_into(Tensor& a, const Tensor& b) {
  QKV_CHECK(a.shape() == b.shape(), "add_into: " << a.shape_string() << " vs " << b.shape_string());
  Tensor bc = detail::contiguous_f32(b, "add_into", "b");
  float* pa = a.data_as<float>();
  const float* pb = bc.data_as<float>();
  const std::int64_t n = a.numel();
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (std::int64_t i = 0; i < n; ++i) pa[i] += pb[i];
}

// x (B, L, W) contiguous, W = n·D -> the (B, H, L, D) view of columns [first·D, (first + H)·D).
Tensor split_heads(const Tensor& x, std::int64_t first, std::int64_t H, std::int64_t D) {
  const std::int64_t B = x.size(0), L = x.size(1), W = x.size(2);
  return x.view({B, L, W / D, D}).slice(2, first, first + H).permute({0, 2, 1, 3});
}

// (B, H, L, D) any strides -> written into columns [col, col + H·D) of dst (B, L, W).
void merge_heads_into(Tensor& dst, std::int64_t col, const Tensor& src) {
  const std::int64_t B = src.size(0), H = src.size(1), L = src.size(2), D = src.size(3);
  const std::int64_t W = dst.size(2);
  Tensor s = detail::contiguous_f32(src, "merge_heads", "src");  // (B, H, L, D)
  const float* ps = s.data_as<float>();
  float* pd = dst.data_as<float>();
#pragma omp parallel for collapse(2) schedule(static) num_threads(num_threads())
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t l = 0; l < L; ++l)
        std::copy_n(ps + ((b * H + h) * L + l) * D, D, pd + (b * L + l) * W + col + h * D);
}

// The rows [which·E, (which + n)·E) of the packed projection, or the separate weight: a
// view sharing the storage (so on a gradient instance, writes land in its parameters).
Tensor in_weight(const MultiheadAttention& mha, std::int64_t which, std::int64_t n) {
  const std::int64_t E = mha.config.embed_dim;
  if (mha.packed()) return mha.in_proj_weight.slice(0, which * E, (which + n) * E);
  QKV_CHECK(n == 1, "MultiheadAttention: separate q/k/v weights are projected one at a time");
  return which == 0 ? mha.q_proj_weight : which == 1 ? mha.k_proj_weight : mha.v_proj_weight;
}
Tensor in_bias(const MultiheadAttention& mha, std::int64_t which, std::int64_t n) {
  const std::int64_t E = mha.config.embed_dim;
  if (!mha.in_proj_bias.defined()) return {};
  return mha.in_proj_bias.slice(0, which * E, (which + n) * E);
}

}  // namespace

// ---------------------------------------------------------------------------------------

Tensor linear_forward_train(const Tensor& x, const Linear& layer, LinearSaved& saved) {
  saved.x = detail::contiguous_f32(x, "Linear", "x");
  return linear(saved.x, layer.weight, layer.bias);
}

Tensor linear_backward(const Tensor& dy, const Linear& layer, const LinearSaved& saved,
                       Linear& grads) {
  return linear_backward(dy, saved.x, layer.weight, grads.weight,
                         grads.bias.defined() ? &grads.bias : nullptr);
}

// forward: y = linear2(act(linear1(x)))
Tensor feed_forward_forward_train(const Tensor& x, const FeedForward& ff, FeedForwardSaved& saved) {
  saved.hidden_pre = linear_forward_train(x, ff.linear1, saved.linear1);  // (..., F)
  Tensor hidden = detail::activate(saved.hidden_pre, ff.activation);    // (..., F)
  return linear_forward_train(hidden, ff.linear2, saved.linear2);         // (..., E)
}

Tensor feed_forward_backward(const Tensor& dy, const FeedForward& ff, const FeedForwardSaved& saved,
                             FeedForward& grads) {
  Tensor dhidden = linear_backward(dy, ff.linear2, saved.linear2, grads.linear2);  // (..., F)
  // relu' in place: dhidden is ours, and the pass is bound by memory traffic.
  Tensor dpre = dhidden;
  if (ff.activation == Activation::relu) relu_backward_(dpre, saved.hidden_pre);
  else dpre = gelu_backward(dhidden, saved.hidden_pre);
  return linear_backward(dpre, ff.linear1, saved.linear1, grads.linear1);  // (..., E)
}

// ---------------------------------------------------------------------------------------

// forward: q, k, v = split(x·W_inᵀ + b_in); o = attention(q, k, v); y = out_proj(merge(o))
Tensor multihead_attention_forward_train(const Tensor& query, const Tensor& memory,
                                         const MultiheadAttention& mha,
                                         const AttentionMasks& masks,
                                         MultiheadAttentionSaved& saved, Tensor* probs) {
  const std::int64_t E = mha.config.embed_dim, H = mha.config.num_heads, D = mha.head_dim();
  const char* fn = "MultiheadAttention";
  detail::check_batch_first(query, E, fn, "query");
  const bool self = !memory.defined();
  const std::int64_t B = query.size(0), L = query.size(1);
  saved.query = detail::contiguous_f32(query, fn, "query");  // (B, L, E)
  if (self) {
    QKV_CHECK(mha.packed(), fn << ": self-attention training needs kdim == vdim == embed_dim");
    Tensor qkv = linear(saved.query, mha.in_proj_weight, mha.in_proj_bias);  // (B, L, 3E)
    saved.q = split_heads(qkv, 0, H, D);
    saved.k = split_heads(qkv, H, H, D);
    saved.v = split_heads(qkv, 2 * H, H, D);
    saved.memory = Tensor();
  } else {
    QKV_CHECK(memory.dim() == 3 && memory.size(0) == B,
              fn << ": memory must be (B = " << B << ", S, kdim), got " << memory.shape_string());
    saved.memory = detail::contiguous_f32(memory, fn, "memory");  // (B, S, kdim)
    Tensor q = linear(saved.query, in_weight(mha, 0, 1), in_bias(mha, 0, 1));  // (B, L, E)
    saved.q = split_heads(q, 0, H, D);
    if (mha.packed()) {
      Tensor kv = linear(saved.memory, in_weight(mha, 1, 2), in_bias(mha, 1, 2));  // (B, S, 2E)
      saved.k = split_heads(kv, 0, H, D);
      saved.v = split_heads(kv, H, H, D);
    } else {
      saved.k = split_heads(linear(saved.memory, in_weight(mha, 1, 1), in_bias(mha, 1, 1)), 0, H, D);
      saved.v = split_heads(linear(saved.memory, in_weight(mha, 2, 1), in_bias(mha, 2, 1)), 0, H, D);
    }
  }
  const std::int64_t S = saved.k.size(2);
  saved.options = AttentionOptions();
  detail::resolve_attention_masks(masks, B, H, L, S, saved.options);
  saved.options.return_lse = true;
  saved.options.return_probs = probs != nullptr;
  AttentionResult r = attention(saved.q, saved.k, saved.v, saved.options);
  saved.options.return_probs = false;
  saved.out = r.out;  // (B, H, L, D)
  saved.lse = r.lse;  // (B, H, L)
  if (probs) *probs = r.probs;  // (B, H, L, S)
  Tensor merged = Tensor::empty({B, L, E});  // (B, L, E)
  merge_heads_into(merged, 0, r.out);
  return linear_forward_train(merged, mha.out_proj, saved.out_proj);
}

Tensor multihead_attention_backward(const Tensor& dy, const MultiheadAttention& mha,
                                    const MultiheadAttentionSaved& saved,
                                    MultiheadAttention& grads, Tensor* dmemory) {
  const std::int64_t E = mha.config.embed_dim, H = mha.config.num_heads;
  const std::int64_t B = saved.query.size(0), L = saved.query.size(1);
  // y = out_proj(merged)
  Tensor dmerged = linear_backward(dy, mha.out_proj, saved.out_proj, grads.out_proj);  // (B, L, E)
  // merged = merge(o): dO is the (B, H, L, D) view of dmerged
  Tensor dout = split_heads(dmerged, 0, H, mha.head_dim());
  // o = attention(q, k, v)
  AttentionGradients g = attention_backward(dout, saved.q, saved.k, saved.v, saved.out, saved.lse,
                                            saved.options);
  if (!saved.memory.defined()) {
    // q, k, v = split(x·W_inᵀ + b_in)
    Tensor dqkv = Tensor::empty({B, L, 3 * E});  // (B, L, 3E)
    merge_heads_into(dqkv, 0, g.dq);
    merge_heads_into(dqkv, E, g.dk);
    merge_heads_into(dqkv, 2 * E, g.dv);
    Tensor db = in_bias(grads, 0, 3);
    return linear_backward(dqkv, saved.query, mha.in_proj_weight, grads.in_proj_weight,
                           db.defined() ? &db : nullptr);
  }
  // q = x·W_qᵀ + b_q
  Tensor dq = Tensor::empty({B, L, E});
  merge_heads_into(dq, 0, g.dq);
  Tensor dwq = in_weight(grads, 0, 1), dbq = in_bias(grads, 0, 1);
  Tensor dx = linear_backward(dq, saved.query, in_weight(mha, 0, 1), dwq, dbq.defined() ? &dbq : nullptr);
  // k, v = memory·W_{k,v}ᵀ + b_{k,v}
  const std::int64_t S = saved.memory.size(1);
  Tensor dmem;
  if (mha.packed()) {
    Tensor dkv = Tensor::empty({B, S, 2 * E});  // (B, S, 2E)
    merge_heads_into(dkv, 0, g.dk);
    merge_heads_into(dkv, E, g.dv);
    Tensor dw = in_weight(grads, 1, 2), db = in_bias(grads, 1, 2);
    dmem = linear_backward(dkv, saved.memory, in_weight(mha, 1, 2), dw, db.defined() ? &db : nullptr);
  } else {
    Tensor dk = Tensor::empty({B, S, E}), dv = Tensor::empty({B, S, E});
    merge_heads_into(dk, 0, g.dk);
    merge_heads_into(dv, 0, g.dv);
    Tensor dwk = in_weight(grads, 1, 1), dbk = in_bias(grads, 1, 1);
    Tensor dwv = in_weight(grads, 2, 1), dbv = in_bias(grads, 2, 1);
    dmem = linear_backward(dk, saved.memory, in_weight(mha, 1, 1), dwk, dbk.defined() ? &dbk : nullptr);
    Tensor dmem_v = linear_backward(dv, saved.memory, in_weight(mha, 2, 1), dwv,
                                    dbv.defined() ? &dbv : nullptr);
    QKV_CHECK(dmem.shape() == dmem_v.shape(),
              "MultiheadAttention backward: kdim and vdim differ, so key and value must be "
              "separate tensors; training supports one memory tensor");
    add_into(dmem, dmem_v);
  }
  if (dmemory) {
    if (!dmemory->defined()) *dmemory = dmem;
    else add_into(*dmemory, dmem);
  }
  return dx;
}

// ---------------------------------------------------------------------------------------

Tensor encoder_layer_forward_train(const Tensor& src, const TransformerEncoderLayer& layer,
                                   const AttentionMasks& masks, TransformerEncoderLayerSaved& s,
                                   Tensor* probs) {
  detail::check_batch_first(src, layer.config.d_model, "TransformerEncoderLayer", "src");
  const char* fn = "TransformerEncoderLayer";
  if (layer.config.norm_first) {
    // x1 = x + sa(norm1(x)); y = x1 + ff(norm2(x1))
    Tensor n1 = layer_norm_forward_train(src, layer.norm1, s.norm1);
    Tensor x1 = detail::add(src, multihead_attention_forward_train(n1, {}, layer.self_attn, masks,
                                                                   s.self_attn, probs), fn);
    Tensor n2 = layer_norm_forward_train(x1, layer.norm2, s.norm2);
    return detail::add(x1, feed_forward_forward_train(n2, layer.ff, s.ff), fn);
  }
  // x1 = norm1(x + sa(x)); y = norm2(x1 + ff(x1))
  Tensor a = multihead_attention_forward_train(src, {}, layer.self_attn, masks, s.self_attn, probs);
  Tensor x1 = layer_norm_forward_train(detail::add(src, a, fn), layer.norm1, s.norm1);
  Tensor f = feed_forward_forward_train(x1, layer.ff, s.ff);
  return layer_norm_forward_train(detail::add(x1, f, fn), layer.norm2, s.norm2);
}

Tensor encoder_layer_backward(const Tensor& dy, const TransformerEncoderLayer& layer,
                              const TransformerEncoderLayerSaved& s, TransformerEncoderLayer& g) {
  const char* fn = "TransformerEncoderLayer backward";
  auto through_ff = [&](const Tensor& d) { return feed_forward_backward(d, layer.ff, s.ff, g.ff); };
  auto through_sa = [&](const Tensor& d) {
    return multihead_attention_backward(d, layer.self_attn, s.self_attn, g.self_attn, nullptr);
  };
  if (layer.config.norm_first) {
    // y = x1 + ff(norm2(x1))
    Tensor dx1 = detail::add(dy, layer_norm_backward(through_ff(dy), layer.norm2, s.norm2, g.norm2), fn);
    // x1 = x + sa(norm1(x))
    return detail::add(dx1, layer_norm_backward(through_sa(dx1), layer.norm1, s.norm1, g.norm1), fn);
  }
  // y = norm2(x1 + ff(x1))
  Tensor ds2 = layer_norm_backward(dy, layer.norm2, s.norm2, g.norm2);
  Tensor dx1 = detail::add(ds2, through_ff(ds2), fn);
  // x1 = norm1(x + sa(x))
  Tensor ds1 = layer_norm_backward(dx1, layer.norm1, s.norm1, g.norm1);
  return detail::add(ds1, through_sa(ds1), fn);
}

Tensor decoder_layer_forward_train(const Tensor& tgt, const Tensor& memory,
                                   const TransformerDecoderLayer& layer,
                                   const AttentionMasks& tgt_masks,
                                   const AttentionMasks& memory_masks,
                                   TransformerDecoderLayerSaved& s, Tensor* self_probs,
                                   Tensor* cross_probs) {
  const char* fn = "TransformerDecoderLayer";
  detail::check_batch_first(tgt, layer.config.d_model, fn, "tgt");
  detail::check_batch_first(memory, layer.config.d_model, fn, "memory");
  if (layer.config.norm_first) {
    // x1 = x + sa(norm1(x)); x2 = x1 + ca(norm2(x1), mem); y = x2 + ff(norm3(x2))
    Tensor n1 = layer_norm_forward_train(tgt, layer.norm1, s.norm1);
    Tensor x1 = detail::add(tgt, multihead_attention_forward_train(n1, {}, layer.self_attn, tgt_masks,
                                                                   s.self_attn, self_probs), fn);
    Tensor n2 = layer_norm_forward_train(x1, layer.norm2, s.norm2);
    Tensor x2 = detail::add(x1, multihead_attention_forward_train(n2, memory, layer.multihead_attn,
                                                                  memory_masks, s.cross_attn,
                                                                  cross_probs), fn);
    Tensor n3 = layer_norm_forward_train(x2, layer.norm3, s.norm3);
    return detail::add(x2, feed_forward_forward_train(n3, layer.ff, s.ff), fn);
  }
  // x1 = norm1(x + sa(x)); x2 = norm2(x1 + ca(x1, mem)); y = norm3(x2 + ff(x2))
  Tensor a = multihead_attention_forward_train(tgt, {}, layer.self_attn, tgt_masks, s.self_attn,
                                               self_probs);
  Tensor x1 = layer_norm_forward_train(detail::add(tgt, a, fn), layer.norm1, s.norm1);
  Tensor c = multihead_attention_forward_train(x1, memory, layer.multihead_attn, memory_masks,
                                               s.cross_attn, cross_probs);
  Tensor x2 = layer_norm_forward_train(detail::add(x1, c, fn), layer.norm2, s.norm2);
  Tensor f = feed_forward_forward_train(x2, layer.ff, s.ff);
  return layer_norm_forward_train(detail::add(x2, f, fn), layer.norm3, s.norm3);
}

Tensor decoder_layer_backward(const Tensor& dy, const TransformerDecoderLayer& layer,
                              const TransformerDecoderLayerSaved& s, TransformerDecoderLayer& g,
                              Tensor* dmemory) {
  const char* fn = "TransformerDecoderLayer backward";
  auto through_ff = [&](const Tensor& d) { return feed_forward_backward(d, layer.ff, s.ff, g.ff); };
  auto through_ca = [&](const Tensor& d) {
    return multihead_attention_backward(d, layer.multihead_attn, s.cross_attn, g.multihead_attn,
                                        dmemory);
  };
  auto through_sa = [&](const Tensor& d) {
    return multihead_attention_backward(d, layer.self_attn, s.self_attn, g.self_attn, nullptr);
  };
  if (layer.config.norm_first) {
    // y = x2 + ff(norm3(x2))
    Tensor dx2 = detail::add(dy, layer_norm_backward(through_ff(dy), layer.norm3, s.norm3, g.norm3), fn);
    // x2 = x1 + ca(norm2(x1), mem)
    Tensor dx1 = detail::add(dx2, layer_norm_backward(through_ca(dx2), layer.norm2, s.norm2, g.norm2), fn);
    // x1 = x + sa(norm1(x))
    return detail::add(dx1, layer_norm_backward(through_sa(dx1), layer.norm1, s.norm1, g.norm1), fn);
  }
  // y = norm3(x2 + ff(x2))
  Tensor ds3 = layer_norm_backward(dy, layer.norm3, s.norm3, g.norm3);
  Tensor dx2 = detail::add(ds3, through_ff(ds3), fn);
  // x2 = norm2(x1 + ca(x1, mem))
  Tensor ds2 = layer_norm_backward(dx2, layer.norm2, s.norm2, g.norm2);
  Tensor dx1 = detail::add(ds2, through_ca(ds2), fn);
  // x1 = norm1(x + sa(x))
  Tensor ds1 = layer_norm_backward(dx1, layer.norm1, s.norm1, g.norm1);
  return detail::add(ds1, through_sa(ds1), fn);
}

// ---------------------------------------------------------------------------------------

// forward: memory = encoder_norm(encoder(src))
Tensor transformer_encode_train(const Tensor& src, const Transformer& model,
                                const AttentionMasks& src_masks, TransformerSaved& saved,
                                TransformerAttention* attention) {
  const std::size_t ne = model.encoder_layers.size();
  saved.encoder.resize(ne);
  if (attention) attention->encoder_self.assign(ne, Tensor());
  Tensor x = src;  // (B, S, E)
  for (std::size_t i = 0; i < ne; ++i)
    x = encoder_layer_forward_train(x, model.encoder_layers[i], src_masks, saved.encoder[i],
                                    attention ? &attention->encoder_self[i] : nullptr);
  return layer_norm_forward_train(x, model.encoder_norm, saved.encoder_norm);  // (B, S, E)
}

// forward: y = decoder_norm(decoder(tgt, memory))
Tensor transformer_decode_train(const Tensor& tgt, const Tensor& memory, const Transformer& model,
                                const AttentionMasks& tgt_masks, const AttentionMasks& memory_masks,
                                TransformerSaved& saved, TransformerAttention* attention) {
  const std::size_t nd = model.decoder_layers.size();
  saved.decoder.resize(nd);
  if (attention) {
    attention->decoder_self.assign(nd, Tensor());
    attention->cross.assign(nd, Tensor());
  }
  Tensor y = tgt;  // (B, T, E)
  for (std::size_t i = 0; i < nd; ++i)
    y = decoder_layer_forward_train(y, memory, model.decoder_layers[i], tgt_masks, memory_masks,
                                    saved.decoder[i],
                                    attention ? &attention->decoder_self[i] : nullptr,
                                    attention ? &attention->cross[i] : nullptr);
  return layer_norm_forward_train(y, model.decoder_norm, saved.decoder_norm);  // (B, T, E)
}

Tensor transformer_forward_train(const Tensor& src, const Tensor& tgt, const Transformer& model,
                                 const AttentionMasks& src_masks, const AttentionMasks& tgt_masks,
                                 const AttentionMasks& memory_masks, TransformerSaved& saved,
                                 TransformerAttention* attention) {
  const Tensor memory = transformer_encode_train(src, model, src_masks, saved, attention);
  return transformer_decode_train(tgt, memory, model, tgt_masks, memory_masks, saved, attention);
}

TransformerInputGradients transformer_backward(const Tensor& dy, const Transformer& model,
                                               const TransformerSaved& saved, Transformer& grads) {
  TransformerInputGradients out;
  Tensor dmemory;  // (B, S, E), summed over every decoder layer's cross-attention
  Tensor d = layer_norm_backward(dy, model.decoder_norm, saved.decoder_norm, grads.decoder_norm);
  for (std::size_t i = model.decoder_layers.size(); i-- > 0;)
    d = decoder_layer_backward(d, model.decoder_layers[i], saved.decoder[i], grads.decoder_layers[i],
                               &dmemory);
  out.dtgt = d;
  if (!dmemory.defined()) dmemory = Tensor::zeros(saved.encoder_norm.x.shape());
  d = layer_norm_backward(dmemory, model.encoder_norm, saved.encoder_norm, grads.encoder_norm);
  for (std::size_t i = model.encoder_layers.size(); i-- > 0;)
    d = encoder_layer_backward(d, model.encoder_layers[i], saved.encoder[i], grads.encoder_layers[i]);
  out.dsrc = d;
  return out;
}

}  // namespace qkv::nn
