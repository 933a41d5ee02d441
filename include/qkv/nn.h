// qkv::nn — forward-only Transformer layers with torch.nn's semantics and parameter names.
//
// Every layer holds its parameters as f32 qkv::Tensors laid out exactly as torch.nn does
// (Linear.weight is (out, in)), so a torch state_dict maps 1:1 onto `parameters()`:
//
//   qkv::nn::TransformerEncoderLayer layer(config);
//   qkv::nn::load_state_dict(layer, state_dict);   // names as torch: "self_attn.in_proj_weight", ...
//
// Inference only: dropout is ignored (torch's eval mode). Activations are batch-first:
// (B, L, E). Matrix products go through oneDNN (kept out of this header).
//
// Differences from torch, all deliberate:
// - A fully masked attention row (every key disallowed) gives 0, where torch gives NaN.
// - `is_causal` applies a causal (top-left) mask by itself; torch 2.x treats it only as
//   a hint that attn_mask is causal (and 1.13 has no such argument). Both may be given:
//   they combine.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "qkv/tensor.h"

namespace qkv::nn {

// name -> tensor, names as torch's state_dict() gives them.
using StateDict = std::map<std::string, Tensor>;
// (full name, the layer's own tensor) in torch's registration order.
using ParameterList = std::vector<std::pair<std::string, Tensor*>>;

// ---------------------------------------------------------------------------------------
// Functional forms.

// What linear() can apply to x·Wᵀ + b inside oneDNN's product (its post-ops), instead of
// separate passes over the output:  y = activation(x·Wᵀ + b) + residual.
enum class LinearActivation { none, relu, gelu_erf, gelu_tanh };
struct LinearEpilogue {
  LinearActivation activation = LinearActivation::none;
  Tensor residual;  // (..., out), the shape of y, any strides; or undefined
};

// y = epilogue(x·Wᵀ + b) (torch.nn.functional.linear without an epilogue), through
// oneDNN's f32 matmul.
//   x: (..., in) any strides   weight: (out, in)   bias: (out) or undefined  ->  (..., out)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              const LinearEpilogue& epilogue = {});

// A linear weight (out, in) reordered once into the blocked layout oneDNN's matmul reads
// fastest. With a plain (out, in) weight the matmul re-packs W on every call; decoding one
// row against all of W then reads W twice and writes it once. An owned copy, immutable:
// changing the tensor it was made from does not change it. Models pack their weights at
// load (BertModel, Gpt2Model); training keeps plain tensors.
//
// dtype bf16 stores W rounded to bf16 (half the bytes to read, for memory-bound decoding);
// x is then rounded to bf16 as well, since oneDNN multiplies bf16 by bf16 only, and the
// products are accumulated and returned in f32. Not exact: about 3 significant digits per
// factor. Needs oneDNN's bf16 matmul on this CPU (AVX512-BF16 or AMX), else qkv::Error
// (ErrorKind::type).
class PackedWeight {
 public:
  struct Impl;
  PackedWeight() = default;
  // weight (out, in), any floating dtype and strides; dtype f32 or bf16.
  explicit PackedWeight(const Tensor& weight, DType dtype = DType::f32);
  bool defined() const { return impl_ != nullptr; }
  DType dtype() const;
  std::int64_t out_features() const;
  std::int64_t in_features() const;
  const Impl& impl() const;

 private:
  std::shared_ptr<const Impl> impl_;
};
// linear() with a packed weight: the same result as with the tensor it was made from.
Tensor linear(const Tensor& x, const PackedWeight& weight, const Tensor& bias = {},
              const LinearEpilogue& epilogue = {});

// Over the trailing `normalized` dimensions (torch.nn.functional.layer_norm), through
// oneDNN's layer normalization (f32, biased variance, as torch).
//   x: (..., N1..Nk)   weight, bias: (N1..Nk) or undefined  ->  (..., N1..Nk)
Tensor layer_norm(const Tensor& x, const Shape& normalized, const Tensor& weight,
                  const Tensor& bias, double eps = 1e-5);

enum class GeluApproximation { none, tanh };  // torch's approximate="none" | "tanh"
// none: x·Φ(x) = ½x(1 + erf(x/√2)); tanh: ½x(1 + tanh(√(2/π)(x + 0.044715x³))).
Tensor gelu(const Tensor& x, GeluApproximation approximate = GeluApproximation::none);
// The linear() epilogue that applies that form of GELU.
inline LinearActivation linear_activation(GeluApproximation approximate) {
  return approximate == GeluApproximation::tanh ? LinearActivation::gelu_tanh
                                                : LinearActivation::gelu_erf;
}
Tensor relu(const Tensor& x);  // max(x, 0); any shape -> same shape, contiguous f32

// ---------------------------------------------------------------------------------------
// Positional encodings.

// The sinusoidal table of "Attention Is All You Need" (§3.5):
//   pe[p, 2i] = sin(p / 10000^(2i/D)),  pe[p, 2i+1] = cos(p / 10000^(2i/D)).
// -> (L, D); an odd D ends with a sin column.
Tensor sinusoidal_positional_encoding(std::int64_t length, std::int64_t dim, double base = 10000.0);

// Rotary position embedding, rotate-half form (GPT-NeoX, Llama in HF transformers):
//   θ_i = base^(−2i/D), angle = (offset + l)·θ_i for i < D/2,
//   out[..., i]       = x[i]·cos − x[i + D/2]·sin
//   out[..., i + D/2] = x[i + D/2]·cos + x[i]·sin
// x: (B, H, L, D) any strides, D even -> (B, H, L, D) contiguous. `offset` is the position
// of row 0 (the number of tokens already in a KV cache).
Tensor apply_rope(const Tensor& x, std::int64_t offset = 0, double base = 10000.0);

// ALiBi slopes for `num_heads` heads (Press et al. 2022, the reference get_slopes):
// for n a power of two, slope_h = 2^(−8(h+1)/n); otherwise, with m the largest power of
// two below n, the m slopes for m followed by every other slope for 2m, n − m of them.
// Feed them to AttentionOptions::alibi_slopes.
std::vector<float> alibi_slopes(std::int64_t num_heads);

// x: (B, L, D) + table (L', D) with L' >= L -> (B, L, D): x + table[:L]
Tensor add_positional(const Tensor& x, const Tensor& table);
// x: (B, L, D) ++ table (L', P) with L' >= L -> (B, L, D + P): the table's rows appended
Tensor concat_positional(const Tensor& x, const Tensor& table);

// ---------------------------------------------------------------------------------------
// Layers. Constructors initialise the parameters as torch does (same distributions, not
// the same numbers; seeded, deterministic); load_state_dict overwrites them.

struct Linear {
  Tensor weight;  // (out_features, in_features)
  Tensor bias;    // (out_features), undefined when bias = false

  Linear() = default;
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true,
         std::uint64_t seed = 0);
  Tensor forward(const Tensor& x) const;  // (..., in) -> (..., out)
  ParameterList parameters(const std::string& prefix = "");
};

struct Embedding {
  Tensor weight;  // (num_embeddings, embedding_dim)

  Embedding() = default;
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, std::uint64_t seed = 0);
  // ids: numel(shape) indices in [0, num_embeddings), row-major over `shape`
  // -> (shape..., embedding_dim)
  Tensor forward(std::span<const std::int64_t> ids, const Shape& shape) const;
  ParameterList parameters(const std::string& prefix = "");
};

// A learned absolute position table: an Embedding over positions offset, offset + 1, ...
struct LearnedPositionalEmbedding {
  Embedding table;  // weight (max_positions, dim)

  LearnedPositionalEmbedding() = default;
  LearnedPositionalEmbedding(std::int64_t max_positions, std::int64_t dim, std::uint64_t seed = 0);
  Tensor forward(std::int64_t length, std::int64_t offset = 0) const;  // -> (length, dim)
  ParameterList parameters(const std::string& prefix = "");
};

struct LayerNorm {
  Shape normalized_shape;  // the trailing dimensions normalised over
  double eps = 1e-5;
  Tensor weight;  // (normalized_shape), undefined when elementwise_affine = false
  Tensor bias;    // (normalized_shape), undefined when elementwise_affine = false

  LayerNorm() = default;
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) const;  // (..., normalized_shape) -> same
  ParameterList parameters(const std::string& prefix = "");
};

// ---------------------------------------------------------------------------------------
// Multi-head attention, torch.nn.MultiheadAttention (add_bias_kv = add_zero_attn = False).

struct MultiheadAttentionConfig {
  std::int64_t embed_dim = 0;  // E
  std::int64_t num_heads = 1;  // H; E % H == 0, head dim D = E / H
  bool bias = true;
  std::int64_t kdim = 0;  // key features; 0 = embed_dim
  std::int64_t vdim = 0;  // value features; 0 = embed_dim
};

// The masks of one attention call, in torch.nn.MultiheadAttention's polarity.
struct AttentionMasks {
  // (L, S) or (B·H, L, S): bool true = NOT allowed, or float added to the scores.
  Tensor attn_mask;
  // (B, S): bool true = IGNORE this key (padding), or float added.
  Tensor key_padding_mask;
  bool is_causal = false;  // also disallow key j > query i (top-left)
  // Padding as counts: keys j >= key_lengths[b] of batch b are ignored (B entries in
  // [0, S]). The same as a suffix key_padding_mask, without building one; exclusive with
  // key_padding_mask.
  std::vector<std::int64_t> key_lengths;
};

struct MultiheadAttentionOutput {
  Tensor out;      // (B, L, E)
  Tensor weights;  // (B, L, S) averaged over heads, or (B, H, L, S); undefined unless asked
};

// Keys and values of past steps for incremental decoding, allocated once.
struct KVCache {
  Tensor k;  // (B, H, capacity, D)
  Tensor v;  // (B, H, capacity, D)
  std::int64_t length = 0;  // filled prefix of the capacity axis

  KVCache() = default;
  // dtype: f32, or bf16 / f16 to halve the cache's memory (appended keys and values are
  // rounded to it; forward_incremental then rounds q to it too, as the attention kernel
  // takes one dtype). Gpt2Model keeps f32: in bf16 mode a bf16 cache measured no faster.
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
  // Packed when kdim == vdim == embed_dim (torch's _qkv_same_embed_dim), else separate.
  Tensor in_proj_weight;  // (3E, E) packed [W_q; W_k; W_v], else undefined
  Tensor q_proj_weight;   // (E, E)    when not packed
  Tensor k_proj_weight;   // (E, kdim) when not packed
  Tensor v_proj_weight;   // (E, vdim) when not packed
  Tensor in_proj_bias;    // (3E), undefined when bias = false
  Linear out_proj;        // weight (E, E), bias (E)

  MultiheadAttention() = default;
  explicit MultiheadAttention(const MultiheadAttentionConfig& config, std::uint64_t seed = 0);

  bool packed() const { return in_proj_weight.defined(); }
  std::int64_t head_dim() const { return config.embed_dim / config.num_heads; }

  // query (B, L, E), key (B, S, kdim), value (B, S, vdim) -> out (B, L, E) and, when
  // need_weights, the softmax weights: (B, L, S) averaged over heads, or (B, H, L, S)
  // when average_attn_weights = false. Weights come from the reference attention path.
  MultiheadAttentionOutput forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const AttentionMasks& masks = {}, bool need_weights = false,
                                   bool average_attn_weights = true) const;

  // Self-attention decoding: x (B, T, E) are the next T tokens; their keys and values are
  // appended to `cache` (capacity (B, H, ·, D)), then each new query attends causally
  // (bottom-right) over the whole filled prefix. -> (B, T, E). Token-by-token equals the
  // causal forward over the full sequence.
  Tensor forward_incremental(const Tensor& x, KVCache& cache) const;
  KVCache make_cache(std::int64_t batch, std::int64_t capacity, DType dtype = DType::f32) const;

  ParameterList parameters(const std::string& prefix = "");

 private:
  // q (B, L, E) -> (B, H, L, D) views of the projections
  Tensor project(const Tensor& x, std::int64_t which) const;
};

// ---------------------------------------------------------------------------------------
// Transformer blocks, torch.nn.TransformerEncoderLayer / DecoderLayer / Transformer.

enum class Activation { relu, gelu };

struct TransformerLayerConfig {
  std::int64_t d_model = 512;
  std::int64_t nhead = 8;
  std::int64_t dim_feedforward = 2048;
  Activation activation = Activation::relu;
  double layer_norm_eps = 1e-5;
  bool norm_first = false;
  bool bias = true;
};

// linear2(activation(linear1(x))), torch's _ff_block without dropout.
struct FeedForward {
  Linear linear1;  // (F, E)
  Linear linear2;  // (E, F)
  Activation activation = Activation::relu;

  FeedForward() = default;
  FeedForward(std::int64_t d_model, std::int64_t dim_feedforward, Activation activation,
              bool bias = true, std::uint64_t seed = 0);
  // (..., E) -> (..., E); + residual (same shape) when given, added inside linear2's
  // product, as the encoder and decoder layers use it.
  Tensor forward(const Tensor& x, const Tensor& residual = {}) const;
  ParameterList parameters(const std::string& prefix = "");  // linear1.*, linear2.*
};

struct TransformerEncoderLayer {
  TransformerLayerConfig config;
  MultiheadAttention self_attn;
  FeedForward ff;  // state-dict names linear1.*, linear2.* (as torch)
  LayerNorm norm1, norm2;

  TransformerEncoderLayer() = default;
  explicit TransformerEncoderLayer(const TransformerLayerConfig& config, std::uint64_t seed = 0);
  // src (B, L, E) -> (B, L, E)
  Tensor forward(const Tensor& src, const AttentionMasks& src_masks = {}) const;
  ParameterList parameters(const std::string& prefix = "");
};

struct TransformerDecoderLayer {
  TransformerLayerConfig config;
  MultiheadAttention self_attn;
  MultiheadAttention multihead_attn;
  FeedForward ff;
  LayerNorm norm1, norm2, norm3;

  TransformerDecoderLayer() = default;
  explicit TransformerDecoderLayer(const TransformerLayerConfig& config, std::uint64_t seed = 0);
  // tgt (B, T, E), memory (B, S, E) -> (B, T, E)
  Tensor forward(const Tensor& tgt, const Tensor& memory, const AttentionMasks& tgt_masks = {},
                 const AttentionMasks& memory_masks = {}) const;
  ParameterList parameters(const std::string& prefix = "");
};

struct TransformerConfig {
  TransformerLayerConfig layer;
  std::int64_t num_encoder_layers = 6;
  std::int64_t num_decoder_layers = 6;
};

// Encoder and decoder stacks, each ending in a LayerNorm (encoder.norm, decoder.norm),
// as torch.nn.Transformer builds them.
struct Transformer {
  TransformerConfig config;
  std::vector<TransformerEncoderLayer> encoder_layers;  // encoder.layers.i
  LayerNorm encoder_norm;                               // encoder.norm
  std::vector<TransformerDecoderLayer> decoder_layers;  // decoder.layers.i
  LayerNorm decoder_norm;                               // decoder.norm

  Transformer() = default;
  explicit Transformer(const TransformerConfig& config, std::uint64_t seed = 0);
  Tensor encode(const Tensor& src, const AttentionMasks& src_masks = {}) const;  // (B, S, E)
  Tensor decode(const Tensor& tgt, const Tensor& memory, const AttentionMasks& tgt_masks = {},
                const AttentionMasks& memory_masks = {}) const;  // (B, T, E)
  // src (B, S, E), tgt (B, T, E) -> (B, T, E). memory_masks.attn_mask is torch's
  // memory_mask, memory_masks.key_padding_mask its memory_key_padding_mask.
  Tensor forward(const Tensor& src, const Tensor& tgt, const AttentionMasks& src_masks = {},
                 const AttentionMasks& tgt_masks = {},
                 const AttentionMasks& memory_masks = {}) const;
  ParameterList parameters(const std::string& prefix = "");
};

// ---------------------------------------------------------------------------------------
// Vector attention (Point Transformer, Zhao et al. 2021, eq. 3), with the subtraction
// relation and a learned relative-position encoding, in the layout of lucidrains'
// point-transformer-pytorch PointTransformerLayer (state-dict names to_qkv.weight,
// pos_mlp.{0,2}.*, attn_mlp.{0,2}.*):
//
//   q, k, v = to_qkv(x)                              (no bias)
//   δ_ij    = pos_mlp(p_i − p_j)                     Linear(P, Hp) → ReLU → Linear(Hp, C)
//   w_ij    = softmax_j( attn_mlp(q_i − k_j + δ_ij) ) Linear(C, C·m) → ReLU → Linear(C·m, C),
//                                                    softmax over j per channel
//   y_i     = Σ_j w_ij ⊙ (v_j + δ_ij)
//
// j runs over all N points, or over the `num_neighbors` nearest to p_i (Euclidean,
// p_i itself included; ties broken by the lower index).
struct VectorAttentionConfig {
  std::int64_t dim = 0;                 // C
  std::int64_t pos_dim = 3;             // P
  std::int64_t pos_mlp_hidden_dim = 64;  // Hp
  std::int64_t attn_mlp_hidden_mult = 4;  // m
  std::int64_t num_neighbors = 0;       // 0 = every point
};

struct VectorAttention {
  VectorAttentionConfig config;
  Linear to_qkv;     // weight (3C, C), no bias
  Linear pos_mlp0;   // (Hp, P), (Hp)  — "pos_mlp.0"
  Linear pos_mlp2;   // (C, Hp), (C)   — "pos_mlp.2"
  Linear attn_mlp0;  // (C·m, C), (C·m) — "attn_mlp.0"
  Linear attn_mlp2;  // (C, C·m), (C)   — "attn_mlp.2"

  VectorAttention() = default;
  explicit VectorAttention(const VectorAttentionConfig& config, std::uint64_t seed = 0);
  // x (B, N, C), pos (B, N, P) -> (B, N, C)
  Tensor forward(const Tensor& x, const Tensor& pos) const;
  ParameterList parameters(const std::string& prefix = "");
};

// The indices of the k nearest points to each point (Euclidean, self included, ties to
// the lower index), nearest first. pos (B, N, P) -> B·N·k indices in [0, N), row-major
// (B, N, k).
std::vector<std::int64_t> nearest_neighbors(const Tensor& pos, std::int64_t k);

// ---------------------------------------------------------------------------------------
// State dicts.

// Copies every entry of `state` into the matching parameter (converted to f32). Throws
// qkv::Error naming the parameter when one is missing or has the wrong shape, and, when
// `strict`, naming any entry that matches no parameter.
void load_state_dict(const ParameterList& parameters, const StateDict& state, bool strict = true);
template <class Module>
void load_state_dict(Module& module, const StateDict& state, bool strict = true) {
  load_state_dict(module.parameters(), state, strict);
}
// The parameters as views (no copy).
StateDict state_dict(const ParameterList& parameters);
template <class Module>
StateDict state_dict(Module& module) {
  return state_dict(module.parameters());
}

}  // namespace qkv::nn
