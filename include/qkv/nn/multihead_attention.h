// qkv::nn::MultiheadAttention — torch.nn.MultiheadAttention (add_bias_kv = add_zero_attn =
// False) with one forward for inference, decoding with a KV cache and training, and its
// backward. Activations are batch-first: (B, L, E).
//
// Differences from torch, all deliberate:
// - A fully masked attention row (every key disallowed) gives 0, where torch gives NaN.
// - `is_causal` applies a causal (top-left) mask by itself; torch 2.x treats it only as
//   a hint that attn_mask is causal (and 1.13 has no such argument). Both may be given:
//   they combine.
// - Dropout applies only when a forward is given an active DropoutDraw (training): the
//   attention probabilities are dropped with the engine's dropout (qkv/attention.h:
//   a pure function of (seed, b, h, i, j)), as torch's dropout_p in training mode; the
//   probabilities returned in `probs` are those before dropout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/attention.h"
#include "qkv/nn/dropout.h"
#include "qkv/nn/layers.h"
#include "qkv/tensor.h"

namespace qkv::nn {

struct MultiheadAttentionConfig {
  std::int64_t embed_dim = 0;  // E
  std::int64_t num_heads = 1;  // H; E % H == 0, head dim D = E / H
  bool bias = true;
  std::int64_t kdim = 0;  // key features; 0 = embed_dim
  std::int64_t vdim = 0;  // value features; 0 = embed_dim
  // Output features of out_proj; 0 = embed_dim. torch fixes it to embed_dim; models that
  // change width inside a layer (the Universal Sentence Encoder lite's first layer, 256
  // wide in, 512 out) project the attention straight to the new width.
  std::int64_t out_dim = 0;
};

// The masks of one attention call, in torch.nn.MultiheadAttention's polarity.
struct AttentionMasks {
  // (L, S) or (B·H, L, S): bool true = NOT allowed, or float added to the scores.
  Tensor attn_mask;
  // (B, S): bool true = IGNORE this key (padding), or float added.
  Tensor key_padding_mask;
  // Also disallow key j > query i: top-left, or, with a KV cache, bottom-right (the
  // queries are the last positions of the sequence).
  bool is_causal = false;
  // Padding as counts: keys j >= key_lengths[b] of batch b are ignored (B entries in
  // [0, S]). The same as a suffix key_padding_mask, without building one; exclusive with
  // key_padding_mask.
  std::vector<std::int64_t> key_lengths;
};

// Keys and values of past steps for incremental decoding, allocated once.
struct KVCache {
  Tensor k;  // (B, H, capacity, D)
  Tensor v;  // (B, H, capacity, D)
  std::int64_t length = 0;  // filled prefix of the capacity axis

  KVCache() = default;
  // dtype: f32, or bf16 / f16 to halve the cache's memory (appended keys and values are
  // rounded to it; attention then rounds q to it too, as the attention kernel takes one
  // dtype). Gpt2Model keeps f32: in bf16 mode a bf16 cache measured no faster.
  KVCache(std::int64_t batch, std::int64_t heads, std::int64_t capacity, std::int64_t head_dim,
          DType dtype = DType::f32);
  std::int64_t capacity() const { return k.defined() ? k.size(2) : 0; }
  // k_new, v_new: (B, H, T, D) any strides; throws when length + T > capacity.
  void append(const Tensor& k_new, const Tensor& v_new);
  Tensor keys() const;    // (B, H, length, D): a strided view, no copy
  Tensor values() const;  // (B, H, length, D): a strided view, no copy
  void clear() { length = 0; }
};

class MultiheadAttention {
 public:
  MultiheadAttentionConfig config;
  // When kdim == vdim == embed_dim (torch's _qkv_same_embed_dim) the three input
  // projections are one: in_proj.weight (3E, E) = [W_q; W_k; W_v] (torch's
  // in_proj_weight), and self-attention makes q, k and v in one product. Otherwise
  // in_proj.weight is undefined and q/k/v_proj_weight hold them. in_proj.bias (3E) is
  // torch's in_proj_bias either way (undefined when bias = false).
  Linear in_proj;
  Tensor q_proj_weight;  // (E, E)    when kdim or vdim differ from E
  Tensor k_proj_weight;  // (E, kdim) when kdim or vdim differ from E
  Tensor v_proj_weight;  // (E, vdim) when kdim or vdim differ from E
  Linear out_proj;       // weight (out_dim, E), bias (out_dim)

  // What the backward needs, kept by a forward given a record.
  struct Record {
    enum class Inputs { self, shared_kv, separate };  // query is key is value / key is value / none
    Inputs inputs = Inputs::separate;
    std::int64_t kv_rows = 0;       // S
    Linear::Record in_q, in_k, in_v;  // the projections' inputs; self: in_q only (3E rows),
                                      // shared_kv: in_q and in_k (2E rows)
    Tensor q, k, v;                 // (B, H, L|S, D) views of the projections
    Tensor out;                     // (B, H, L, D) attention output
    Tensor lse;                     // (B, H, L)
    AttentionOptions options;       // as the forward called attention()
    Linear::Record out_proj;        // x = out merged to (B, L, E)
  };
  // The gradients of the inputs. Inputs that were one tensor share one gradient, returned
  // in the first of them: self-attention's whole dx in `query`; key-is-value's in `key`.
  struct Gradients {
    Tensor query;  // (B, L, E)
    Tensor key;    // (B, S, kdim); undefined for self-attention
    Tensor value;  // (B, S, vdim); undefined unless key and value were separate tensors
  };

  MultiheadAttention() = default;
  explicit MultiheadAttention(const MultiheadAttentionConfig& config, std::uint64_t seed = 0);

  bool joint_in_proj() const { return in_proj.weight.defined() || in_proj.packed.defined(); }
  std::int64_t head_dim() const { return config.embed_dim / config.num_heads; }
  // Packs in_proj and out_proj for inference (Linear::pack).
  void pack(DType dtype = DType::f32);

  // query (B, L, E), key (B, S, kdim), value (B, S, vdim) -> (B, L, out_dim), + residual
  // (B, L, out_dim) when given (added inside out_proj's product, as the layers use it).
  // - Self-attention (the same tensor as query, key and value) projects all three in one
  //   product; key-is-value (cross-attention on a memory) projects k and v in one.
  // - cache (decoding; no record): for self-attention, the L new tokens' keys and values
  //   are appended to it and the queries attend over its whole filled prefix (is_causal
  //   then aligns bottom-right); token by token this equals the causal forward over the
  //   whole sequence. For cross-attention, an empty cache receives the projected key and
  //   value, and a filled one (S entries) is used instead of projecting them again.
  // - probs, when given, receives the softmax probabilities (B, H, L, S) (the reference
  //   attention path computes them); average_heads() gives torch's head average.
  // - dropout (training): the attention probabilities dropped with p and its seed; the
  //   record keeps both, so the backward drops the same ones.
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value,
                 const AttentionMasks& masks = {}, const Tensor& residual = {},
                 KVCache* cache = nullptr, Tensor* probs = nullptr,
                 Record* record = nullptr, const DropoutDraw& dropout = {}) const;
  // dy (B, L, out_dim) -> the inputs' gradients (the residual's is dy itself: the caller's).
  Gradients backward(const Tensor& dy, const Record& record, MultiheadAttention& grads) const;

  // An empty cache for self-attention decoding of up to `capacity` tokens, or for the
  // `capacity` keys of a cross-attention memory.
  KVCache make_cache(std::int64_t batch, std::int64_t capacity, DType dtype = DType::f32) const;

  ParameterList parameters(const std::string& prefix = "");
};

// probs (B, H, L, S) -> (B, L, S), the mean over heads (torch's average_attn_weights).
Tensor average_heads(const Tensor& probs);

}  // namespace qkv::nn
