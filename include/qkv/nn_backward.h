// qkv::nn training: forward passes that keep what the backward needs, and the backward
// passes of every layer of nn.h.
//
// Conventions (llm.c's): a forward_train call returns the output and fills a `...Saved`
// struct; the matching backward takes the gradient of the output and that struct and
//   - returns the gradient of the input (written, a fresh tensor), and
//   - ADDS the gradients of the parameters into `grads`, a second instance of the same
//     layer (same config) whose parameter tensors hold gradients; zero them first
//     (train::zero_grad) to get one batch's gradient.
// Each backward quotes the forward line it differentiates. Activations are batch-first
// (B, L, E), f32. Dropout is not applied in training layers (only attention's own
// dropout_p exists in the library; see attention_backward).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "qkv/attention.h"
#include "qkv/nn.h"
#include "qkv/tensor.h"

namespace qkv::nn {

// ---------------------------------------------------------------------------------------
// Functional backward passes.

// y = x·Wᵀ + b.   dy (..., out), x (..., in), weight (out, in) -> dx (..., in);
// dweight (out, in) += dyᵀ·x; dbias (out) += Σ dy (skipped when dbias is undefined).
// Matrix products through oneDNN.
Tensor linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, Tensor& dweight,
                       Tensor* dbias);

// LayerNorm over the last dimension, keeping the per-row statistics for the backward.
//   x (..., N) -> y (..., N); mean, rstd (rows) f32 with rows = numel / N.
struct LayerNormSaved {
  Tensor x;     // (..., N) the input, contiguous f32
  Tensor mean;  // (rows)
  Tensor rstd;  // (rows) 1 / sqrt(var + eps)
};
Tensor layer_norm_forward_train(const Tensor& x, const LayerNorm& norm, LayerNormSaved& saved);
// y = (x − mean)·rstd·w + b  ->  dx; grads.weight += Σ dy·x̂, grads.bias += Σ dy.
Tensor layer_norm_backward(const Tensor& dy, const LayerNorm& norm, const LayerNormSaved& saved,
                           LayerNorm& grads);

// dx = dy · f'(x) for y = relu(x) / gelu(x) (both GELU forms). x is the forward's input.
Tensor relu_backward(const Tensor& dy, const Tensor& x);
// The same in place: dy (contiguous f32, the caller's) becomes dx. Saves a pass over
// memory where the incoming gradient is not needed afterwards (feed-forward layers).
void relu_backward_(Tensor& dy, const Tensor& x);
Tensor gelu_backward(const Tensor& dy, const Tensor& x,
                     GeluApproximation approximate = GeluApproximation::none);

// RoPE (nn::apply_rope) is a rotation of each pair (i, i + D/2): its backward rotates dy
// back. dy (B, H, L, D) -> dx (B, H, L, D). Sinusoidal tables and ALiBi have no
// parameters; their gradient is the identity on what they are added to.
Tensor apply_rope_backward(const Tensor& dy, std::int64_t offset = 0, double base = 10000.0);

// y[i] = weight[ids[i]]·scale  ->  dweight[ids[i]] += scale·dy[i].  dy (numel(ids), E).
void embedding_backward(const Tensor& dy, std::span<const std::int64_t> ids, Tensor& dweight,
                        float scale = 1.f);

// ---------------------------------------------------------------------------------------
// Layers.

struct LinearSaved {
  Tensor x;  // (..., in)
};
Tensor linear_forward_train(const Tensor& x, const Linear& layer, LinearSaved& saved);
Tensor linear_backward(const Tensor& dy, const Linear& layer, const LinearSaved& saved,
                       Linear& grads);

struct FeedForwardSaved {
  LinearSaved linear1;
  Tensor hidden_pre;  // (..., F) linear1's output, before the activation
  LinearSaved linear2;  // its x is the activation's output (..., F)
};
Tensor feed_forward_forward_train(const Tensor& x, const FeedForward& ff, FeedForwardSaved& saved);
Tensor feed_forward_backward(const Tensor& dy, const FeedForward& ff, const FeedForwardSaved& saved,
                             FeedForward& grads);

// MultiheadAttention, self (memory undefined: keys and values from `query`) or cross.
// Masks as MultiheadAttention::forward takes them (torch polarity). With `probs`, the
// attention probabilities (B, H, L, S) are returned too (reference path, for viewers).
struct MultiheadAttentionSaved {
  Tensor query;    // (B, L, E)
  Tensor memory;   // (B, S, E), undefined for self-attention
  Tensor q, k, v;  // (B, H, L|S, D) views of the projections
  Tensor out;      // (B, H, L, D) attention output, contiguous
  Tensor lse;      // (B, H, L)
  LinearSaved out_proj;  // x = out as (B, L, E)
  AttentionOptions options;
};
Tensor multihead_attention_forward_train(const Tensor& query, const Tensor& memory,
                                         const MultiheadAttention& mha,
                                         const AttentionMasks& masks,
                                         MultiheadAttentionSaved& saved, Tensor* probs = nullptr);
// -> dquery (B, L, E); for cross-attention, dmemory (B, S, E) is ADDED into *dmemory
// (allocated as zeros when undefined).
Tensor multihead_attention_backward(const Tensor& dy, const MultiheadAttention& mha,
                                    const MultiheadAttentionSaved& saved,
                                    MultiheadAttention& grads, Tensor* dmemory);

struct TransformerEncoderLayerSaved {
  LayerNormSaved norm1, norm2;
  MultiheadAttentionSaved self_attn;
  FeedForwardSaved ff;
};
Tensor encoder_layer_forward_train(const Tensor& src, const TransformerEncoderLayer& layer,
                                   const AttentionMasks& masks, TransformerEncoderLayerSaved& saved,
                                   Tensor* probs = nullptr);
Tensor encoder_layer_backward(const Tensor& dy, const TransformerEncoderLayer& layer,
                              const TransformerEncoderLayerSaved& saved,
                              TransformerEncoderLayer& grads);

struct TransformerDecoderLayerSaved {
  LayerNormSaved norm1, norm2, norm3;
  MultiheadAttentionSaved self_attn, cross_attn;
  FeedForwardSaved ff;
};
// probs: [0] self-attention (B, H, T, T), [1] cross-attention (B, H, T, S)
Tensor decoder_layer_forward_train(const Tensor& tgt, const Tensor& memory,
                                   const TransformerDecoderLayer& layer,
                                   const AttentionMasks& tgt_masks,
                                   const AttentionMasks& memory_masks,
                                   TransformerDecoderLayerSaved& saved,
                                   Tensor* self_probs = nullptr, Tensor* cross_probs = nullptr);
// -> dtgt; dmemory (B, S, E) accumulated into *dmemory.
Tensor decoder_layer_backward(const Tensor& dy, const TransformerDecoderLayer& layer,
                              const TransformerDecoderLayerSaved& saved,
                              TransformerDecoderLayer& grads, Tensor* dmemory);

// VectorAttention (Point Transformer): recomputes the forward from x and pos (it keeps
// nothing between the calls) and returns dx (B, N, C); adds into every parameter of
// `grads`. Positions are inputs, not learned: no gradient is returned for pos.
Tensor vector_attention_backward(const Tensor& dy, const VectorAttention& layer, const Tensor& x,
                                 const Tensor& pos, VectorAttention& grads);

struct TransformerSaved {
  std::vector<TransformerEncoderLayerSaved> encoder;
  LayerNormSaved encoder_norm;
  std::vector<TransformerDecoderLayerSaved> decoder;
  LayerNormSaved decoder_norm;
};
// Attention probabilities of a Transformer forward, per layer.
struct TransformerAttention {
  std::vector<Tensor> encoder_self;  // (B, H, S, S)
  std::vector<Tensor> decoder_self;  // (B, H, T, T)
  std::vector<Tensor> cross;         // (B, H, T, S)
};
// The two halves of transformer_forward_train, for callers that encode once and decode
// several times (greedy decoding): memory (B, S, E) fills saved.encoder*, the decoder
// saved.decoder*; attention, when given, receives the half's probabilities.
Tensor transformer_encode_train(const Tensor& src, const Transformer& model,
                                const AttentionMasks& src_masks, TransformerSaved& saved,
                                TransformerAttention* attention = nullptr);
Tensor transformer_decode_train(const Tensor& tgt, const Tensor& memory, const Transformer& model,
                                const AttentionMasks& tgt_masks, const AttentionMasks& memory_masks,
                                TransformerSaved& saved, TransformerAttention* attention = nullptr);
Tensor transformer_forward_train(const Tensor& src, const Tensor& tgt, const Transformer& model,
                                 const AttentionMasks& src_masks, const AttentionMasks& tgt_masks,
                                 const AttentionMasks& memory_masks, TransformerSaved& saved,
                                 TransformerAttention* attention = nullptr);
// dy (B, T, E) -> dsrc (B, S, E) and dtgt (B, T, E).
struct TransformerInputGradients {
  Tensor dsrc;
  Tensor dtgt;
};
TransformerInputGradients transformer_backward(const Tensor& dy, const Transformer& model,
                                               const TransformerSaved& saved, Transformer& grads);

}  // namespace qkv::nn
