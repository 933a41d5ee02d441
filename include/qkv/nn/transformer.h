// Transformer blocks with torch.nn's semantics and parameter names:
// FeedForward (torch's _ff_block), TransformerEncoderLayer, TransformerDecoderLayer and
// Transformer (batch_first = True). One forward each, for inference, decoding and training
// (see qkv/nn/layers.h), and its backward. Without a DropoutDraw they are torch's eval mode;
// FeedForward and TransformerEncoderLayer take one for training with torch's dropout
// (TransformerEncoderLayer(dropout = p) in train mode), the others do not.
//
// These compose every model qkv runs: BERT is a stack of post-norm encoder layers with
// GELU, GPT-2 a stack of pre-norm causal encoder layers with GELU (tanh) and a KV cache,
// the date translator a Transformer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/nn/dropout.h"
#include "qkv/nn/layers.h"
#include "qkv/nn/multihead_attention.h"
#include "qkv/tensor.h"

namespace qkv::nn {

enum class Activation { relu, gelu, gelu_tanh };  // gelu: erf form; gelu_tanh: tanh approximation
// "relu", "gelu", "gelu_tanh" (as config files and the Python layers spell them).
const char* activation_name(Activation activation);
// The inverse; anything else throws qkv::Error naming `what` and the allowed names.
Activation parse_activation(const std::string& name, const std::string& what = "activation");

struct TransformerLayerConfig {
  std::int64_t d_model = 512;
  std::int64_t nhead = 8;
  std::int64_t dim_feedforward = 2048;
  Activation activation = Activation::relu;
  double layer_norm_eps = 1e-5;
  bool norm_first = false;
  bool bias = true;
  // The encoder layer's output width; 0 = d_model. When it differs, the layer changes
  // width (the Universal Sentence Encoder lite's first layer: 256 in, 512 out): the
  // attention's out_proj maps to d_out, a residual_proj Linear(d_model, d_out) carries the
  // residual across, and norm2 and the feed-forward work at d_out. Decoder layers keep
  // d_model (d_out must be 0 or d_model).
  std::int64_t d_out = 0;
};

// linear2(dropout(activation(linear1(x)))) [+ residual]; the dropout only when given one
// (torch's _ff_block without its dropout2, which the layer applies).
struct FeedForward {
  Linear linear1;  // (F, E)
  Linear linear2;  // (E, F)
  Activation activation = Activation::relu;

  struct Record {
    Linear::Record linear1;  // x
    Tensor hidden_pre;       // (..., F) linear1's output, before the activation
    Dropout::Record dropout;  // the activation's dropout (dropped = false without one)
    Linear::Record linear2;  // linear2's input (..., F): the activation's output, dropped
  };

  FeedForward() = default;
  FeedForward(std::int64_t d_model, std::int64_t dim_feedforward, Activation activation,
              bool bias = true, std::uint64_t seed = 0);
  void pack(DType dtype = DType::f32);  // both Linears (Linear::pack)
  // (..., E) -> (..., E); + residual (same shape) when given, added inside linear2's
  // product. Without a record and without dropout the activation runs inside linear1's
  // product too. dropout (training): the activation's output dropped with dropout.p, its
  // mask drawn from dropout.seed itself (the caller gives the feed-forward its own site).
  Tensor forward(const Tensor& x, const Tensor& residual = {}, Record* record = nullptr,
                 const DropoutDraw& dropout = {}) const;
  // -> dx (the residual's gradient is dy itself: the caller's)
  Tensor backward(const Tensor& dy, const Record& record, FeedForward& grads) const;
  ParameterList parameters(const std::string& prefix = "");  // linear1.*, linear2.*
};

struct TransformerEncoderLayer {
  TransformerLayerConfig config;
  MultiheadAttention self_attn;  // out_proj (d_out, d_model)
  FeedForward ff;  // state-dict names linear1.*, linear2.* (as torch); at d_out
  LayerNorm norm1, norm2;  // norm1 at d_model (norm_first) or d_out; norm2 at d_out
  Linear residual_proj;    // (d_out, d_model); undefined unless d_out != d_model

  struct Record {
    LayerNorm::Record norm1, norm2;
    MultiheadAttention::Record self_attn;
    FeedForward::Record ff;
    Linear::Record residual_proj;
    Dropout::Record dropout1, dropout2;  // the branches' dropouts (dropped = false without)
    std::int64_t rows = 0;  // forward_first's `rows` (0: a whole forward)
  };

  // The layer's dropout sites under a forward's DropoutDraw d (torch's
  // TransformerEncoderLayer(dropout = p) in train mode): each draws from d.site(k).
  enum DropoutSite : std::uint64_t {
    kAttentionDropout = 0,   // the attention probabilities (MultiheadAttention's dropout)
    kActivationDropout = 1,  // the feed-forward's activation (torch's `dropout`)
    kAttentionBranchDropout = 2,  // sa(·) before the residual add (torch's dropout1)
    kFeedForwardBranchDropout = 3,  // ff(·) before the residual add (torch's dropout2)
  };

  TransformerEncoderLayer() = default;
  explicit TransformerEncoderLayer(const TransformerLayerConfig& config, std::uint64_t seed = 0);
  void pack(DType dtype = DType::f32);  // the attention's and feed-forward's Linears
  //   norm_first:  x = r(x) + drop1(sa(norm1(x)));  y = x + drop2(ff(norm2(x)))
  //   otherwise:   x = norm1(r(x) + drop1(sa(x)));  y = norm2(x + drop2(ff(x)))
  // where r is residual_proj when the width changes, else the identity, and the drops
  // (and the attention's and the feed-forward's own) are the identity unless `dropout` is
  // active (training; see DropoutSite). src (B, L, d_model) -> (B, L, d_out). cache:
  // self-attention decoding (see MultiheadAttention); probs receives the self-attention
  // probabilities (B, H, L, S), before dropout.
  Tensor forward(const Tensor& src, const AttentionMasks& masks = {}, KVCache* cache = nullptr,
                 Tensor* probs = nullptr, Record* record = nullptr,
                 const DropoutDraw& dropout = {}) const;
  // The first `rows` positions of forward(src) and nothing else: (B, rows, d_out). Every
  // position of src still serves as a key and value, but only the first rows are queries
  // and go through out_proj and the feed-forward. A classifier that reads only its class
  // token needs no more from its last layer (the ViT: 1 row of 50, most of that layer's
  // work). masks are (rows, L)-shaped as the attention's for rows queries over L keys
  // (is_causal aligns top-left, so the rows keep their causal view). backward() takes the
  // record and returns dx (B, L, d_model). It takes no DropoutDraw: no caller trains with
  // dropout through it (the ViT trains without).
  Tensor forward_first(const Tensor& src, std::int64_t rows, const AttentionMasks& masks = {},
                       Tensor* probs = nullptr, Record* record = nullptr) const;
  // dy (B, L|rows, d_out) -> dx (B, L, d_model), after forward() or forward_first().
  Tensor backward(const Tensor& dy, const Record& record, TransformerEncoderLayer& grads) const;
  ParameterList parameters(const std::string& prefix = "");  // + residual_proj.* when defined
  std::int64_t out_features() const { return config.d_out == 0 ? config.d_model : config.d_out; }

 private:
  // forward() (rows = L) and forward_first(), src already checked
  Tensor forward_rows(const Tensor& src, std::int64_t rows, const AttentionMasks& masks,
                      KVCache* cache, Tensor* probs, Record* record,
                      const DropoutDraw& dropout) const;
  // d (B, L, d_out), the gradient of r(x) -> its share of dx (B, L, d_model)
  Tensor residual_backward(const Tensor& d, const Record& record,
                           TransformerEncoderLayer& grads) const;
};

struct TransformerDecoderLayer {
  TransformerLayerConfig config;
  MultiheadAttention self_attn;
  MultiheadAttention multihead_attn;
  FeedForward ff;
  LayerNorm norm1, norm2, norm3;

  struct Record {
    LayerNorm::Record norm1, norm2, norm3;
    MultiheadAttention::Record self_attn, cross_attn;
    FeedForward::Record ff;
  };
  // Decoding: the self-attention keys and values so far, and the memory's projected
  // keys and values (filled by the first step, reused after).
  struct Cache {
    KVCache self_attn;   // (B, H, capacity, D)
    KVCache cross_attn;  // (B, H, S, D)
  };
  struct Gradients {
    Tensor tgt;     // (B, T, E)
    Tensor memory;  // (B, S, E)
  };

  TransformerDecoderLayer() = default;
  explicit TransformerDecoderLayer(const TransformerLayerConfig& config, std::uint64_t seed = 0);
  void pack(DType dtype = DType::f32);
  Cache make_cache(std::int64_t batch, std::int64_t capacity, std::int64_t memory_length) const;
  //   norm_first:  x = x + sa(norm1(x));  x = x + ca(norm2(x), mem);  y = x + ff(norm3(x))
  //   otherwise:   x = norm1(x + sa(x));  x = norm2(x + ca(x, mem));  y = norm3(x + ff(x))
  // tgt (B, T, E), memory (B, S, E) -> (B, T, E). self_probs (B, H, T, T'), cross_probs
  // (B, H, T, S) receive the probabilities when given.
  Tensor forward(const Tensor& tgt, const Tensor& memory, const AttentionMasks& tgt_masks = {},
                 const AttentionMasks& memory_masks = {}, Cache* cache = nullptr,
                 Tensor* self_probs = nullptr, Tensor* cross_probs = nullptr,
                 Record* record = nullptr) const;
  Gradients backward(const Tensor& dy, const Record& record, TransformerDecoderLayer& grads) const;
  ParameterList parameters(const std::string& prefix = "");
};

struct TransformerConfig {
  TransformerLayerConfig layer;
  std::int64_t num_encoder_layers = 6;
  std::int64_t num_decoder_layers = 6;
};

// Attention probabilities of a Transformer forward, per layer (for viewers).
struct TransformerAttention {
  std::vector<Tensor> encoder_self;  // (B, H, S, S)
  std::vector<Tensor> decoder_self;  // (B, H, T, T)
  std::vector<Tensor> cross;         // (B, H, T, S)
};

// Encoder and decoder stacks, each ending in a LayerNorm (encoder.norm, decoder.norm),
// as torch.nn.Transformer builds them.
struct Transformer {
  TransformerConfig config;
  std::vector<TransformerEncoderLayer> encoder_layers;  // encoder.layers.i
  LayerNorm encoder_norm;                               // encoder.norm
  std::vector<TransformerDecoderLayer> decoder_layers;  // decoder.layers.i
  LayerNorm decoder_norm;                               // decoder.norm

  struct Record {
    std::vector<TransformerEncoderLayer::Record> encoder;
    LayerNorm::Record encoder_norm;
    std::vector<TransformerDecoderLayer::Record> decoder;
    LayerNorm::Record decoder_norm;
  };
  using Cache = std::vector<TransformerDecoderLayer::Cache>;  // one per decoder layer
  struct Gradients {
    Tensor src;  // (B, S, E)
    Tensor tgt;  // (B, T, E)
  };

  Transformer() = default;
  explicit Transformer(const TransformerConfig& config, std::uint64_t seed = 0);
  Cache make_cache(std::int64_t batch, std::int64_t capacity, std::int64_t memory_length) const;

  // memory = encoder_norm(encoder layers(src)): src (B, S, E) -> (B, S, E). Fills
  // record->encoder* and probs->encoder_self when given.
  Tensor encode(const Tensor& src, const AttentionMasks& src_masks = {},
                TransformerAttention* probs = nullptr, Record* record = nullptr) const;
  // y = decoder_norm(decoder layers(tgt, memory)): tgt (B, T, E) -> (B, T, E). Fills
  // record->decoder* and probs->decoder_self/cross when given; with a cache, decodes the T
  // new positions (see TransformerDecoderLayer::Cache).
  Tensor decode(const Tensor& tgt, const Tensor& memory, const AttentionMasks& tgt_masks = {},
                const AttentionMasks& memory_masks = {}, Cache* cache = nullptr,
                TransformerAttention* probs = nullptr, Record* record = nullptr) const;
  // src (B, S, E), tgt (B, T, E) -> (B, T, E). memory_masks.attn_mask is torch's
  // memory_mask, memory_masks.key_padding_mask its memory_key_padding_mask.
  Tensor forward(const Tensor& src, const Tensor& tgt, const AttentionMasks& src_masks = {},
                 const AttentionMasks& tgt_masks = {}, const AttentionMasks& memory_masks = {},
                 TransformerAttention* probs = nullptr, Record* record = nullptr) const;
  // dy (B, T, E) -> the gradients of src and tgt (record from forward()). `ready`, when
  // given, hears each module's gradients as soon as they are final: decoder_norm, the
  // decoder layers last first, encoder_norm, the encoder layers last first.
  Gradients backward(const Tensor& dy, const Record& record, Transformer& grads,
                     const GradientsReady* ready = nullptr) const;
  ParameterList parameters(const std::string& prefix = "");
};

}  // namespace qkv::nn
